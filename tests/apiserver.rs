//! Watch mode against an API server: the real kube-rs client inside svcproxy, a test
//! server speaking the list/watch protocol (tests/support/apiserver.rs), the runner, and
//! a fake kernel. Changes follow; labelled objects are filtered by the server-side
//! selector; a dropped watch and a `410 Gone` relist without losing rules; an object with
//! a wrong-typed field is skipped and counted once while everything else flows.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::apiserver::ApiServer;
use svcproxy::config::Settings;
use svcproxy::conntrack::table::fake::FakeFlows;
use svcproxy::xtables::fake::SharedFake;
use svcproxy::net::IpFamily;
use svcproxy::runner::watch;
use svcproxy::schedule::{Schedule, Timing};
use svcproxy::serve::Shared;
use svcproxy::source::{apiserver, ClusterState};

fn nat(kernel: &SharedFake) -> String {
    kernel.lock().unwrap().save_table(IpFamily::V4, "nat")
}

fn seps(kernel: &SharedFake) -> usize {
    nat(kernel).lines().filter(|l| l.starts_with(":KUBE-SEP-")).count()
}

fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn service(name: &str, ip: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "app", "labels": labels},
           "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(name: &str, svc: &str, ips: &[&str], extra_labels: Value) -> Value {
    let mut labels = json!({"kubernetes.io/service-name": svc});
    if let (Some(l), Some(e)) = (labels.as_object_mut(), extra_labels.as_object()) {
        l.extend(e.clone());
    }
    let eps: Vec<Value> = ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": name, "namespace": "app", "labels": labels},
           "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

/// An iptables engine for node n1 (198.19.1.1, IPv4 only) on a fake kernel, and the kernel.
fn engine_on_a_fake_kernel() -> (watch::Engine, SharedFake) {
    let flags = Settings {
        hostname_override: Some("n1".into()),
        node_ips: Some(vec!["198.19.1.1".into()]),
        ip_family: Some(svcproxy::settings::kinds::Families::Ipv4),
        nfacct: Some(false),
        ..Settings::default()
    };
    let loaded = svcproxy::pipeline::load(ClusterState::default(), flags, Settings::default()).unwrap();
    let kernel = SharedFake::default();
    let engine = watch::Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(FakeFlows::default()));
    (engine, kernel)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A kube-rs client of `server`, made inside `rt`'s context: the client spawns its request
/// buffer's task where it is made, so the guard is held while it is made (and only then).
fn plain_client(rt: &tokio::runtime::Runtime, server: &ApiServer) -> kube::Client {
    let _guard = rt.enter();
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// svcproxy's watch mode on `rt`: the API-server source over `client` (watching this node's
/// Node object when `node` is named) feeding the watch loop that drives `engine`.
struct Watch {
    stop: tokio::sync::oneshot::Sender<()>,
    runner: tokio::task::JoinHandle<()>,
}

fn start_watch(rt: &tokio::runtime::Runtime, client: kube::Client, node: Option<&str>, engine: watch::Engine, shared: Arc<Shared>) -> Watch {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    rt.spawn(apiserver::run_with_node(client, None, node.map(str::to_owned), tx));
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = rt.spawn(async move { watch::run(engine, rx, shared, async { let _ = stop_rx.await; }).await });
    Watch { stop, runner }
}

impl Watch {
    /// Stops the watch loop and waits for it to return.
    fn stop(self, rt: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        rt.block_on(self.runner).unwrap();
    }
}

#[test]
fn watch_follows_the_api_server_through_drops_and_410_without_losing_rules() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.2.2"], json!({})));
    // Objects another proxy owns, and a headless service's slice: filtered by the selector.
    server.apply(service("other", "198.19.255.11", json!({"service.kubernetes.io/service-proxy-name": "someone-else"})));
    server.apply(slice("other-1", "other", &["198.18.3.2"], json!({"service.kubernetes.io/service-proxy-name": "someone-else"})));

    let timing = Timing { min_sync_period: Duration::from_millis(100), sync_period: Duration::from_secs(30), ..Timing::default() };
    let shared = Arc::new(Shared::new(Schedule::new(timing)));
    let (engine, kernel) = engine_on_a_fake_kernel();
    let watch = start_watch(&rt, plain_client(&rt, &server), None, engine, shared.clone());

    until("the initial lists to be synced", || seps(&kernel) == 2);
    assert!(!nat(&kernel).contains("app/other"), "objects labelled for another proxy are not seen");
    assert!(server.request_count("!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless") >= 2, "kube-proxy's label selector is sent");

    // Watch events: a new endpoint; a new service.
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.2.2", "198.18.4.2"], json!({})));
    until("the added endpoint", || seps(&kernel) == 3);
    server.apply(service("api", "198.19.255.12", json!({})));
    server.apply(slice("api-1", "api", &["198.18.5.2"], json!({})));
    until("the new service", || seps(&kernel) == 4);

    // A dropped watch: the client re-watches; a change made meanwhile arrives.
    server.drop_watches();
    server.apply(slice("api-1", "api", &["198.18.5.2", "198.18.6.2"], json!({})));
    until("the change across a dropped watch", || seps(&kernel) == 5);

    // 410 Gone: history is compacted, the watch is dropped, and a deletion happens that the
    // client can only learn from the relist. No rule may vanish meanwhile except that one.
    server.delete_behind_compaction(&[service("api", "198.19.255.12", json!({})), slice("api-1", "api", &[], json!({}))]);
    let lists = |kind: &str| {
        server.requests.lock().unwrap().iter().filter(|r| r.starts_with(&format!("{kind} ")) && !r.contains("\"watch\"")).count()
    };
    until("both kinds to list again after 410", || lists("Service") >= 2 && lists("EndpointSlice") >= 2);
    until("the relist to apply the deletion", || seps(&kernel) == 3 && !nat(&kernel).contains("app/api"));
    assert!(nat(&kernel).contains("app/web:http"), "web's rules never vanished");

    watch.stop(&rt);
    assert_eq!(seps(&kernel), 3, "stopping leaves the rules");
}

#[test]
fn lists_longer_than_a_page_arrive_whole_through_continue_tokens() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    // More objects than kube-rs's page (500) of each kind.
    const SERVICES: usize = 620;
    for i in 0..SERVICES {
        let name = format!("s{i}");
        server.apply(service(&name, &format!("198.19.{}.{}", 200 + i / 250, 1 + i % 250), json!({})));
        server.apply(slice(&format!("{name}-1"), &name, &[&format!("198.18.{}.{}", i / 250, 1 + i % 250)], json!({})));
    }
    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(100), ..Timing::default() })));
    let (engine, kernel) = engine_on_a_fake_kernel();
    let watch = start_watch(&rt, plain_client(&rt, &server), None, engine, shared);

    until("every service's endpoint", || seps(&kernel) == SERVICES);
    for kind in ["Service", "EndpointSlice"] {
        let pages = server.requests.lock().unwrap().iter().filter(|r| r.starts_with(&format!("{kind} ")) && r.contains("\"continue\"")).count();
        assert!(pages >= 1, "{kind}: the list was read in pages ({pages} continued)");
    }
    watch.stop(&rt);
}

#[test]
fn this_node_being_deleted_makes_healthz_unhealthy_and_its_labels_are_followed() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}}});
    server.apply(node.clone());
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}));
    let flags = Settings { hostname_override: Some("n1".into()), ip_family: Some(svcproxy::settings::kinds::Families::Ipv4), nfacct: Some(false), ..Settings::default() };
    let loaded = svcproxy::pipeline::load(ClusterState::default(), flags, Settings::default()).unwrap();
    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(50), ..Timing::default() })));
    let engine = watch::Engine::iptables(loaded.config, loaded.trackers, Box::new(SharedFake::default()), Box::new(FakeFlows::default()));
    let watch = start_watch(&rt, plain_client(&rt, &server), Some("n1"), engine, shared.clone());
    let deleting = || shared.node_deleting.load(std::sync::atomic::Ordering::SeqCst);
    until("the first sync", || shared.schedule.lock().unwrap().last_sync().is_some());
    assert!(!deleting());
    let mut gone = node.clone();
    gone["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
    server.apply(gone);
    until("the node's deletion to be seen", deleting);
    assert!(server.request_count("fieldSelector") >= 1, "the Node is watched by name");
    watch.stop(&rt);
}

/// A kubeadm node: the DaemonSet passes only `--config`, whose `clientConnection.kubeconfig`
/// names the file holding the control plane's address and credentials. svcproxy must reach
/// the API server through it, never through an in-cluster config (absent here: this test
/// process has no service account and no `$KUBECONFIG` is consulted).
#[test]
fn the_config_files_kubeconfig_reaches_the_api_server_and_syncs() {
    use svcproxy::config::client::{ClientConnection, Endpoint};
    use svcproxy::source::connect;
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));

    let dir = std::env::temp_dir().join(format!("svcproxy-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig.conf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {}\n  name: default\ncontexts:\n- context:\n    cluster: default\n    namespace: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user:\n    token: node-token-123\n",
            server.url()
        ),
    )
    .unwrap();
    let config_file = dir.join("config.conf");
    std::fs::write(
        &config_file,
        format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: {}\n  qps: 50\n  burst: 100\n  contentType: \"\"\n  acceptContentTypes: \"\"\nmode: iptables\n",
            kubeconfig.display()
        ),
    )
    .unwrap();
    let file = svcproxy::settings::file::read(&config_file).unwrap().settings;
    let conn = ClientConnection::resolve(&Settings::default(), &file, Some(&config_file), None, None);
    assert!(matches!(&conn.endpoint, Endpoint::File { path, .. } if *path == kubeconfig), "{:?}", conn.endpoint);
    assert_eq!((conn.qps, conn.burst), (50.0, 100));

    let flags = Settings { hostname_override: Some("n1".into()), ip_family: Some(svcproxy::settings::kinds::Families::Ipv4), nfacct: Some(false), ..Settings::default() };
    let loaded = svcproxy::pipeline::load(ClusterState::default(), flags, file).unwrap();
    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(50), ..Timing::default() })));
    let kernel = SharedFake::default();
    let engine = watch::Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(FakeFlows::default()));
    let client = rt.block_on(async { connect::client(&conn, connect::config(&conn).await.unwrap()).unwrap() });
    let watch = start_watch(&rt, client, None, engine, shared.clone());
    until("the rules of the listed service", || seps(&kernel) == 1);
    assert!(nat(&kernel).contains("app/web:http"));
    assert!(server.request_count("authorization=Bearer node-token-123") >= 2, "the kubeconfig's credentials were sent");
    assert_eq!(server.request_count("authorization=-"), 0, "no request went without them");
    // kube-proxy's shape: `kube-proxy/<version> (<os>/<arch>) kubernetes/<commit>`.
    let agent = connect::user_agent();
    assert!(agent.starts_with(&format!("svcproxy/{} (linux/", env!("CARGO_PKG_VERSION"))) && agent.contains(") "), "{agent}");
    let total = server.requests.lock().unwrap().len();
    assert_eq!(server.request_count(&format!("user-agent={agent}")), total, "every request says who calls");
    watch.stop(&rt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig that cannot be read is an error naming the file and the setting that named it.
#[test]
fn an_unreadable_kubeconfig_names_the_file_and_the_setting() {
    use svcproxy::config::client::ClientConnection;
    let file = Settings { kubeconfig: Some("/nonexistent/kubeconfig.conf".into()), ..Settings::default() };
    let conn = ClientConnection::resolve(&Settings::default(), &file, Some(std::path::Path::new("/etc/kube-proxy/config.conf")), None, None);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(svcproxy::source::connect::config(&conn)).unwrap_err().to_string();
    assert!(
        err.contains("/nonexistent/kubeconfig.conf") && err.contains("clientConnection.kubeconfig in /etc/kube-proxy/config.conf"),
        "{err}"
    );
}

/// svcproxy following `server` with the runner and a fake kernel (min-sync-period `min_sync`).
struct Rig {
    rt: tokio::runtime::Runtime,
    kernel: SharedFake,
    shared: Arc<Shared>,
    watch: Watch,
}

impl Rig {
    fn start(rt: tokio::runtime::Runtime, server: &ApiServer, client: kube::Client, min_sync: Duration) -> Rig {
        let _ = server;
        let timing = Timing { min_sync_period: min_sync, sync_period: Duration::from_secs(30), ..Timing::default() };
        let shared = Arc::new(Shared::new(Schedule::new(timing)));
        let (engine, kernel) = engine_on_a_fake_kernel();
        let watch = start_watch(&rt, client, None, engine, shared.clone());
        Rig { rt, kernel, shared, watch }
    }

    fn stop(self) {
        self.watch.stop(&self.rt);
    }
}

fn malformed(rig: &Rig) -> u64 {
    rig.shared.metrics.malformed_objects.get()
}

/// A Service and an EndpointSlice whose `port` is a string, arriving on a watch and inside
/// a relist (after `410 Gone`), and present in the first list: each is skipped and counted
/// once per version; good changes before, between and after them reach the rules.
#[test]
fn wrong_typed_objects_on_watches_and_relists_are_skipped_and_counted_once_while_others_flow() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));
    // Already there at the first list.
    server.apply_with(service("early", "198.19.255.20", json!({})), "/spec/ports/0/port", json!("abc"));
    let client = plain_client(&rt, &server);
    let rig = Rig::start(rt, &server, client, Duration::from_millis(10));
    until("the initial lists, the bad Service skipped", || seps(&rig.kernel) == 1 && malformed(&rig) == 1);

    // On the watch: a good change, the bad objects, good changes of both kinds.
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.1.3"], json!({})));
    until("the change before the bad objects", || seps(&rig.kernel) == 2);
    server.apply_with(service("bad", "198.19.255.21", json!({})), "/spec/ports/0/port", json!("abc"));
    server.apply_with(slice("bad-1", "web", &["198.18.9.9"], json!({})), "/ports/0/port", json!("abc"));
    // Even wrong-typed metadata spoils only its own object.
    server.apply_with(service("meta", "198.19.255.22", json!({})), "/metadata/labels", json!(5));
    server.apply(service("api", "198.19.255.12", json!({})));
    server.apply(slice("api-1", "api", &["198.18.5.2"], json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.1.3", "198.18.1.4"], json!({})));
    until("the changes after the bad objects", || seps(&rig.kernel) == 4 && nat(&rig.kernel).contains("app/api:http"));
    until("the three bad objects counted", || malformed(&rig) == 4);
    assert!(!nat(&rig.kernel).contains("198.18.9.9"), "the bad slice's endpoint is not used");

    // 410 Gone: the relist holds the same bad versions (not counted again), a new bad
    // version of each kind only the relist can bring, and a good change.
    server.compact();
    server.drop_watches();
    server.apply_with(service("bad", "198.19.255.21", json!({})), "/spec/ports/0/port", json!("def"));
    server.apply_with(slice("bad-2", "web", &["198.18.9.8"], json!({})), "/ports/0/port", json!("x"));
    server.apply(slice("api-1", "api", &["198.18.5.2", "198.18.5.3"], json!({})));
    until("the good change through the relist", || seps(&rig.kernel) == 5);
    // A change of each kind on the new watches: both relists are behind us.
    server.apply(service("late", "198.19.255.13", json!({})));
    server.apply(slice("late-1", "late", &["198.18.7.2"], json!({})));
    until("the changes after the relist", || seps(&rig.kernel) == 6 && nat(&rig.kernel).contains("app/late:http"));
    until("the new bad versions counted", || malformed(&rig) == 6);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(malformed(&rig), 6, "each bad object version is counted once");
    assert!(nat(&rig.kernel).contains("app/web:http") && !nat(&rig.kernel).contains("198.18.9."), "web kept; no bad endpoint");

    // Fixing the bad objects lets them in.
    server.apply(service("bad", "198.19.255.21", json!({})));
    server.apply(slice("bad-3", "bad", &["198.18.8.2"], json!({})));
    until("the fixed Service", || nat(&rig.kernel).contains("app/bad:http"));
    assert_eq!(malformed(&rig), 6);
    rig.stop();
}

/// Change → rules latency, printed (not asserted): a plain watch event, and a change made
/// during a `410 Gone` gap (history compacted, watches dropped), which only a relist brings.
/// Every change arrives (bounded waits); the latencies are printed, never asserted:
/// `cargo test --test apiserver -- --nocapture latency`
#[test]
fn latency_of_a_plain_change_and_of_a_change_in_a_410_gap() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));
    let client = plain_client(&rt, &server);
    let rig = Rig::start(rt, &server, client, Duration::ZERO);
    until("the initial lists", || seps(&rig.kernel) == 1);
    let measure = |n: usize, gap: bool| {
        let ips: Vec<String> = (0..n).map(|i| format!("198.18.1.{}", i + 2)).collect();
        let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
        std::thread::sleep(Duration::from_millis(400));
        if gap {
            server.compact();
            server.drop_watches();
            // Let the drop land first (a watch could otherwise still carry the change).
            std::thread::sleep(Duration::from_millis(20));
        }
        let start = Instant::now();
        server.apply(slice("web-1", "web", &ips, json!({})));
        while seps(&rig.kernel) != n {
            assert!(start.elapsed() < Duration::from_secs(60), "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
        start.elapsed()
    };
    // Plain changes first; then 410 gaps back to back (client-go's backoff grows across
    // them, starting over after 2 quiet minutes).
    let plain: Vec<Duration> = (0..4).map(|round| measure(2 + round, false)).collect();
    let gap: Vec<Duration> = (0..2).map(|round| measure(6 + round, true)).collect();
    let ms = |v: &[Duration]| v.iter().map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>().join(" ");
    eprintln!("plain change → rules (ms): {}", ms(&plain));
    eprintln!("change in a 410 gap → rules (ms): {}", ms(&gap));
    rig.stop();
}

/// The cluster's ServiceCIDR objects reach nftables mode's `cluster-ips-check` drop rule:
/// one listed at start, one added, one changed and all deleted, each by the next sync.
#[test]
fn service_cidrs_from_the_api_server_reach_the_nftables_drop_rule() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    let cidr = |name: &str, cidrs: &[&str]| json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": name}, "spec": {"cidrs": cidrs}});
    server.apply(cidr("kubernetes", &["198.19.0.0/16"]));
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));

    let flags = Settings {
        mode: Some(svcproxy::settings::kinds::ProxyMode::Nftables),
        hostname_override: Some("n1".into()),
        node_ips: Some(vec!["198.19.1.1".into()]),
        ip_family: Some(svcproxy::settings::kinds::Families::Ipv4),
        ..Settings::default()
    };
    let loaded = svcproxy::pipeline::load(ClusterState::default(), flags, Settings::default()).unwrap();
    let nft = svcproxy::nftables::fake::FakeNft::shared();
    let engine = watch::Engine::nftables(loaded.config, loaded.trackers, Box::new(nft.clone()), Box::new(FakeFlows::default()));
    let timing = Timing { min_sync_period: Duration::from_millis(100), sync_period: Duration::from_secs(30), ..Timing::default() };
    let shared = Arc::new(Shared::new(Schedule::new(timing)));
    let watch = start_watch(&rt, plain_client(&rt, &server), None, engine, shared);
    let drop_rule = || {
        let listed = nft.lock().unwrap().listing(svcproxy::net::IpFamily::V4).unwrap_or_default();
        listed.lines().find(|l| l.contains("Drop traffic to unallocated ClusterIPs")).map(|l| l.trim().to_string())
    };
    // The drop rule's CIDRs (`ip daddr { A,B } drop …`), sorted; `None`: no drop rule.
    let cidrs_dropped = move || {
        let rule = drop_rule()?;
        let inside = rule.split('{').nth(1)?.split('}').next()?;
        let mut list: Vec<String> = inside.split(',').map(|c| c.trim().to_string()).collect();
        list.sort();
        Some(list)
    };
    let holds = move |want: Option<&'static [&'static str]>| move || cidrs_dropped() == want.map(|w| w.iter().map(|c| c.to_string()).collect());

    until("the listed ServiceCIDR's drop rule", holds(Some(&["198.19.0.0/16"])));
    // Full syncs write the table whole (`add table`); the changes below each go partially.
    let full_syncs = || nft.lock().unwrap().calls.iter().filter(|c| matches!(c, svcproxy::nftables::fake::Call::Run(t) if t.contains("add table"))).count();
    let before = full_syncs();
    server.apply(cidr("more", &["198.20.0.0/16"]));
    until("a second ServiceCIDR", holds(Some(&["198.19.0.0/16", "198.20.0.0/16"])));
    server.apply(cidr("more", &["198.21.0.0/16"]));
    until("the changed ServiceCIDR", holds(Some(&["198.19.0.0/16", "198.21.0.0/16"])));
    server.delete(cidr("more", &["198.21.0.0/16"]));
    server.delete(cidr("kubernetes", &["198.19.0.0/16"]));
    until("no ServiceCIDR: no drop rule", holds(None));
    assert!(drop_rule().is_none());
    assert_eq!(full_syncs(), before, "each change reached the kernel in a partial sync");
    watch.stop(&rt);
}

/// kube-proxy v1.37 (#138183): when this Node's IPs change from those read at start, the
/// watch ends (the process exits non-zero for its DaemonSet to restart it); a label change
/// does not end it.
#[test]
fn this_nodes_ips_changing_ends_the_watch() {
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    let node = |ip: &str, zone: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": zone}}, "status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
    server.apply(node("198.19.1.1", "z1"));
    let (mut engine, _) = engine_on_a_fake_kernel();
    engine.node_ips_at_start = Some(vec!["198.19.1.1".parse().unwrap()]);
    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(50), ..Timing::default() })));
    let watch = start_watch(&rt, plain_client(&rt, &server), Some("n1"), engine, shared.clone());
    until("the first sync", || shared.schedule.lock().unwrap().last_sync().is_some());
    server.apply(node("198.19.1.1", "z2"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(shared.exit.lock().unwrap().is_none(), "a label change keeps it running");
    server.apply(node("198.19.1.7", "z2"));
    until("the watch to end on the IP change", || watch.runner.is_finished());
    let why = shared.exit.lock().unwrap().clone().unwrap_or_default();
    assert!(why.contains("198.19.1.1") && why.contains("198.19.1.7"), "{why}");
    watch.stop(&rt);
}

/// svcproxy's watch start on an API server (`apiserver::start`, what `sync --watch` runs)
/// records kube-proxy's birth cry: one events.k8s.io/v1 Event on this Node, posted through
/// the client's stack (its POST in `rest_client_*`), while the rules sync; nothing more
/// is posted while the watch runs.
#[test]
fn the_watch_start_posts_kube_proxys_starting_event_once() {
    use svcproxy::source::client_metrics::ClientMetrics;
    use svcproxy::source::events::{Clocks, EventMetrics, Recorder, Source};
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));
    let conn = svcproxy::config::client::ClientConnection::resolve(
        &Settings { master: Some(server.url()), ..Settings::default() },
        &Settings::default(),
        None,
        Some(&server.url()),
        None,
    );
    let client_metrics = Arc::new(ClientMetrics::default());
    let client = rt.block_on(async {
        let config = svcproxy::source::connect::config(&conn).await.unwrap();
        svcproxy::source::connect::client_with_metrics(&conn, config, Some(client_metrics.clone())).unwrap()
    });
    let events = EventMetrics::default();
    let source = Source { node: "n1".into(), instance: "kube-proxy-host-1".into() };
    let recorder = {
        let _guard = rt.enter();
        Recorder::start_with(client.clone(), source, events.clone(), Clocks { retry_sleep: Duration::from_millis(50), ..Clocks::default() })
    };

    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(50), ..Timing::default() })));
    let (engine, kernel) = engine_on_a_fake_kernel();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let before = jiff::Timestamp::now();
    {
        let _guard = rt.enter();
        apiserver::start(client, None, Some("n1".into()), tx, Some(&recorder));
    }
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = rt.spawn(watch::run(engine, rx, shared, async { let _ = stop_rx.await; }));
    until("the Starting Event", || !server.events().is_empty());
    until("the rules", || seps(&kernel) == 1);
    // The watch runs on (a change synced) and nothing more is posted.
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.2.2"], json!({})));
    until("the change", || seps(&kernel) == 2);
    assert!(rt.block_on(recorder.flush(Duration::from_secs(10))), "nothing left to post");
    let _ = stop.send(());
    rt.block_on(runner).unwrap();

    let posted = server.events();
    assert_eq!(posted.len(), 1, "one Event: {posted:?}");
    assert_eq!(server.request_count("Event POST namespace=default"), 1, "one POST, to the Node's namespace (default)");
    let ev = &posted[0];
    assert_eq!((ev["type"].as_str(), ev["reason"].as_str(), ev["action"].as_str()), (Some("Normal"), Some("Starting"), Some("StartKubeProxy")));
    assert_eq!(ev["regarding"], json!({"apiVersion": "v1", "kind": "Node", "name": "n1"}));
    assert_eq!((ev["reportingController"].as_str(), ev["reportingInstance"].as_str()), (Some("kube-proxy"), Some("kube-proxy-host-1")));
    assert!(ev.get("note").is_none(), "the birth cry has no note: {ev}");
    let at: jiff::Timestamp = ev["eventTime"].as_str().unwrap().parse().unwrap();
    assert!(at >= before.round(jiff::Unit::Microsecond).unwrap() - jiff::SignedDuration::from_micros(1) && at <= jiff::Timestamp::now(), "{at}");
    let name = ev["metadata"]["name"].as_str().unwrap();
    let (node, hex) = name.split_once('.').unwrap();
    assert!(node == "n1" && i128::from_str_radix(hex, 16).is_ok(), "<node>.<nanoseconds in hex>: {name}");
    assert_eq!(events.get("posted"), 1);

    let mut registry = prometheus_client::registry::Registry::default();
    client_metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.lines().any(|l| l.starts_with("rest_client_request_duration_seconds_count{verb=\"POST\"") && l.ends_with(" 1")), "the POST is observed: {text}");
    assert!(text.contains("rest_client_requests_total{code=\"201\""), "{text}");
}

/// An API server that refuses Events (no RBAC grant) costs nothing but a log line and a
/// count: the refusal is not retried, and the rules sync as ever.
#[test]
fn a_refused_event_is_counted_and_syncing_goes_on() {
    use svcproxy::source::events::{Clocks, EventMetrics, ProxyEvent, Recorder, Source};
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.forbid_events(true);
    server.apply(service("web", "198.19.255.10", json!({})));
    server.apply(slice("web-1", "web", &["198.18.1.2"], json!({})));
    let client = plain_client(&rt, &server);
    let events = EventMetrics::default();
    let recorder = {
        let _guard = rt.enter();
        Recorder::start_with(client.clone(), Source { node: "n1".into(), instance: "kube-proxy-h".into() }, events.clone(), Clocks { retry_sleep: Duration::from_millis(10), ..Clocks::default() })
    };
    let shared = Arc::new(Shared::new(Schedule::new(Timing { min_sync_period: Duration::from_millis(50), ..Timing::default() })));
    let (engine, kernel) = engine_on_a_fake_kernel();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    {
        let _guard = rt.enter();
        apiserver::start(client, None, None, tx, Some(&recorder));
    }
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = rt.spawn(watch::run(engine, rx, shared, async { let _ = stop_rx.await; }));
    until("the rules", || seps(&kernel) == 1);
    assert!(rt.block_on(recorder.flush(Duration::from_secs(10))));
    assert_eq!((events.get("rejected"), events.get("posted")), (1, 0));
    assert_eq!(server.request_count("Event POST"), 1, "a refusal is final: not retried");
    // An Event the server would refuse as invalid (a note over 1 kB) is refused the same way
    // (another reason: one like the first would be its series).
    server.forbid_events(false);
    {
        let _guard = rt.enter();
        recorder.record(ProxyEvent { reason: "TooLong", note: "x".repeat(1025), ..ProxyEvent::starting() });
    }
    assert!(rt.block_on(recorder.flush(Duration::from_secs(10))));
    assert_eq!(events.get("rejected"), 2);
    assert!(server.events().is_empty());
    // The refused Starting is still in the cache: one like it makes its series, whose PATCH
    // finds no Event (404), so the Event is created with its count, as client-go does.
    {
        let _guard = rt.enter();
        recorder.record(ProxyEvent::starting());
    }
    assert!(rt.block_on(recorder.flush(Duration::from_secs(10))));
    assert_eq!((events.get("posted"), server.request_count("Event PATCH"), server.request_count("Event POST")), (1, 1, 3));
    let created = server.events();
    assert_eq!((created.len(), created[0]["reason"].as_str(), created[0]["series"]["count"].as_u64()), (1, Some("Starting"), Some(2)), "{created:?}");
    server.apply(slice("web-1", "web", &["198.18.1.2", "198.18.2.2"], json!({})));
    until("the change", || seps(&kernel) == 2);
    let _ = stop.send(());
    rt.block_on(runner).unwrap();
}

/// A health-check node port that cannot listen: kube-proxy's `FailedToStartServiceHealthcheck`
/// on the Service, once created and then, as it fails again every sync, a series whose count
/// is patched; once the port listens, the series ends and its last count is written.
#[test]
fn a_health_check_port_that_cannot_listen_makes_one_event_and_a_series() {
    use svcproxy::source::events::{Clocks, EventMetrics, Recorder, Source};
    let rt = runtime();
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    server.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb", "namespace": "app"},
        "spec": {"type": "LoadBalancer", "clusterIP": "198.19.255.20", "clusterIPs": ["198.19.255.20"], "externalTrafficPolicy": "Local",
                 "healthCheckNodePort": port, "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]}}));
    server.apply(slice("lb-1", "lb", &["198.18.1.2"], json!({})));
    let client = plain_client(&rt, &server);
    let events = EventMetrics::default();
    let clocks = Clocks { retry_sleep: Duration::from_millis(10), finish: Duration::from_millis(700), refresh: Duration::from_secs(3600) };
    let recorder = {
        let _guard = rt.enter();
        Recorder::start_with(client.clone(), Source { node: "n1".into(), instance: "kube-proxy-h".into() }, events.clone(), clocks)
    };
    // Periodic syncs every 100 ms: each tries the port again.
    let timing = Timing { min_sync_period: Duration::from_millis(20), sync_period: Duration::from_millis(100), ..Timing::default() };
    let shared = Arc::new(Shared::new(Schedule::new(timing)));
    let (engine, kernel) = engine_on_a_fake_kernel();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    rt.spawn(apiserver::run_with_node(client, None, None, tx));
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let health = vec!["127.0.0.1".parse().unwrap()];
    let runner = rt.spawn(watch::run_with(engine, rx, shared, async { let _ = stop_rx.await; }, health, Some(recorder.clone())));
    until("the rules", || seps(&kernel) == 1);
    let count = |server: &ApiServer| server.events().first().and_then(|e| e["series"]["count"].as_u64()).unwrap_or(0);
    until("a series of at least 3", || count(&server) >= 2 && events.get("series") >= 1);
    let ev = server.events()[0].clone();
    assert_eq!(server.events().len(), 1, "one Event, its series counted: {:?}", server.events());
    assert_eq!((ev["type"].as_str(), ev["reason"].as_str(), ev["action"].as_str()), (Some("Warning"), Some("FailedToStartServiceHealthcheck"), Some("Listen")));
    assert_eq!(ev["regarding"], json!({"apiVersion": "v1", "kind": "Service", "namespace": "app", "name": "lb"}));
    assert_eq!(ev["metadata"]["namespace"], "app");
    let note = ev["note"].as_str().unwrap();
    assert!(note.starts_with(&format!("node n1 failed to start healthcheck \"app/lb\" on port {port}: listen tcp 127.0.0.1:{port}: bind: ")), "{note}");
    assert_eq!(server.request_count("Event POST"), 1, "created once");
    assert!(server.request_count("content-type=application/strategic-merge-patch+json") >= 1, "the series is patched");
    // The port frees: it listens, the series goes quiet and ends with its last count written.
    drop(taken);
    until("the series to end", || events.get("series") + 2 == count(&server) && server.request_count("Event PATCH") >= 2);
    let _ = stop.send(());
    rt.block_on(runner).unwrap();
    assert!(rt.block_on(recorder.flush(Duration::from_secs(10))));
    assert_eq!(count(&server), events.get("series") + 2, "every failure counted: the first, the second (which made the series), and the rest");
}

/// An API server that does not answer: each Event is tried client-go's 12 times, then given
/// up and counted; nothing waits for it.
#[test]
fn an_unreachable_api_server_costs_twelve_tries_then_a_count() {
    use svcproxy::source::events::{Clocks, EventMetrics, ProxyEvent, Recorder, Source, MAX_TRIES};
    let rt = runtime();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let client = {
        let _guard = rt.enter();
        kube::Client::try_from(kube::Config::new(format!("http://{closed}").parse().unwrap())).unwrap()
    };
    let events = EventMetrics::default();
    let recorder = {
        let _guard = rt.enter();
        Recorder::start_with(client, Source { node: "n1".into(), instance: "kube-proxy-h".into() }, events.clone(), Clocks { retry_sleep: Duration::from_millis(5), ..Clocks::default() })
    };
    let start = Instant::now();
    {
        let _guard = rt.enter();
        recorder.record(ProxyEvent::starting());
    }
    assert!(start.elapsed() < Duration::from_millis(100), "recording does not wait");
    assert!(rt.block_on(recorder.flush(Duration::from_secs(20))), "given up within the bound");
    assert_eq!((events.get("failed"), events.get("posted")), (1, 0));
    assert!(start.elapsed() >= Duration::from_millis(5) * (MAX_TRIES - 1), "slept between the tries: {:?}", start.elapsed());
}

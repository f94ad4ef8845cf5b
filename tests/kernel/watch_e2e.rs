//! Watch mode end to end on the real kernel: the test API server (list/watch protocol)
//! runs inside the lab's external namespace; `svcproxy sync --watch --config …` runs in
//! the node namespace and follows it over the veth; real connections follow the changes.
//! The API server is reached as on a kubeadm node: the config file's
//! `clientConnection.kubeconfig` names a kubeconfig holding its address (no `--master`, no
//! in-cluster environment).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::apiserver::ApiServer;
use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab, Proto, Where};
use crate::netns::BackendTools as _;
use crate::svcproxy::bin;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nft_watch_follows_the_api_server_with_real_connections", |c| e2e(c, Backend::Nft)).with_timeout(Duration::from_secs(240)),
        Case::new("nft_watch_hard_fail_records_kube_proxys_warning_event", hard_fail_event).with_timeout(Duration::from_secs(60)),
    ]
}

/// The API server in the lab's external namespace, reached at `API_IP`.
fn api_server_in(ext: &str) -> Result<ApiServer, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let _server_thread = in_netns(ext, move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let server = ApiServer::start_on(format!("{API_IP}:0").parse().unwrap()).await.expect("the test API server starts");
            let _ = tx.send(server);
            std::future::pending::<()>().await;
        })
    });
    rx.recv_timeout(Duration::from_secs(10)).map_err(|e| format!("API server did not start: {e}"))
}

/// `bindAddressHardFail` with the metrics port taken: svcproxy exits, and before it does,
/// the API server gets kube-proxy's `FailedToStartMetricServer` Warning on the Node, its
/// note in kube-proxy's words; no `Starting` (svcproxy never started its watches).
fn hard_fail_event(ctx: &mut Ctx) -> CaseResult {
    let b = Backend::Nft;
    ctx.require(&["ip", &b.bin(false, "restore")])?;
    let lab = Lab::new(b.name())?;
    let server = api_server_in(&lab.external().name.clone())?;
    let metrics = format!("{NODE_IP}:10249");
    let addr: SocketAddr = metrics.parse().unwrap();
    let taken = in_netns(&lab.node().name.clone(), move || std::net::TcpListener::bind(addr))
        .join()
        .map_err(|_| "the port-taking thread panicked".to_string())??
        .map_err(|e| format!("cannot take {addr}: {e}"))?;
    let kubeconfig = crate::svcproxy::temp_yaml(&format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {}\n  name: c\ncontexts:\n- context:\n    cluster: c\n    user: u\n  name: c\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
        server.url()
    ))?;
    let config = crate::svcproxy::temp_yaml(&format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: {}\n",
        kubeconfig.display()
    ))?;
    let log = crate::svcproxy::temp_yaml("")?;
    let healthz = format!("{NODE_IP}:10256");
    let argv = ["sync", "--watch", "--config", crate::svcproxy::path_str(&config), "--hostname-override", "node-1",
        "--node-ip", NODE_IP, "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4", "--iptables-backend", b.name(),
        "--healthz-bind-address", &healthz, "--metrics-bind-address", &metrics, "--bind-address-hard-fail", "--nfacct=false"];
    let mut daemon = spawn_svcproxy(&lab.node().name, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut status = None;
    until("svcproxy to exit", Duration::from_secs(20), || {
        status = daemon.0.try_wait().ok().flatten();
        status.is_some()
    })
    .map_err(|e| format!("{e}\nsvcproxy log:\n{}", logs()))?;
    drop(taken);
    ensure!(status.is_some_and(|s| !s.success()), "a hard fail exits non-zero: {status:?}\n{}", logs());
    let events = server.events();
    ensure!(events.len() == 1, "one Event: {events:?}\nsvcproxy log:\n{}", logs());
    let ev = &events[0];
    ensure!(ev["type"] == "Warning" && ev["reason"] == "FailedToStartMetricServer" && ev["action"] == "StartKubeProxy", "{ev}");
    ensure!(ev["regarding"] == json!({"apiVersion": "v1", "kind": "Node", "name": "node-1"}), "{ev}");
    ensure!(ev["note"] == format!("starting metrics server failed: listen tcp {metrics}: bind: address already in use"), "{ev}");
    Ok(())
}

const CIP: &str = "198.19.255.10";
const NODE_IP: &str = "198.19.1.1";
const API_IP: &str = "198.19.1.2";

/// Runs `f` on a thread whose network namespace is `ns`.
pub(crate) fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<Result<T, String>> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: setns on this thread only, with a valid netns fd we hold open.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(f())
    })
}

pub(crate) fn http_get(addr: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn service(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "app"},
           "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(name: &str, svc: &str, ips: &[String]) -> Value {
    let eps: Vec<Value> = ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node-1"})).collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": "app", "labels": {"kubernetes.io/service-name": svc}},
           "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

pub(crate) struct Daemon(pub(crate) Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `svcproxy ARGV` (`sync --watch …`) in the network namespace `node`, its stderr to
/// `log`, with `env` set and nothing of a real cluster in its environment (no
/// `KUBECONFIG`, no in-cluster variables): the daemon, killed when dropped.
pub(crate) fn spawn_svcproxy(node: &str, argv: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Result<Daemon, String> {
    let child = Command::new("ip")
        .args(["netns", "exec", node, bin()])
        .args(argv)
        .envs(env.iter().copied())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("spawn svcproxy: {e}"))?;
    Ok(Daemon(child))
}

pub(crate) fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Result<Duration, String> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(start.elapsed())
}

/// A metric's value as `ns` sees `addr`'s `/metrics` (`None` if absent or unreachable).
pub(crate) fn metric_at(ns: &str, addr: SocketAddr, name: &'static str) -> Option<f64> {
    let body = in_netns(ns, move || http_get(addr, "/metrics")).join().ok().and_then(|r| r.ok()).unwrap_or_default();
    body.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

fn metric(lab_ext: &str, name: &'static str) -> f64 {
    metric_at(lab_ext, format!("{NODE_IP}:10249").parse().unwrap(), name).unwrap_or(0.0)
}

fn e2e(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore")])?;
    let mut lab = Lab::new(b.name())?;
    for (i, name) in ["pod1", "pod2", "pod3"].iter().enumerate() {
        let p = lab.add_pod(name, &format!("198.18.{}.2", i + 1), None)?;
        p.serve_tcp(8080)?;
    }
    lab.route_service_cidr("198.19.255.0/24")?;
    let ext = lab.external().name.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let _server_thread = in_netns(&ext, move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let server = ApiServer::start_on(format!("{API_IP}:0").parse().unwrap()).await.expect("the test API server starts");
            let _ = tx.send(server);
            std::future::pending::<()>().await;
        })
    });
    let server = rx.recv_timeout(Duration::from_secs(10)).map_err(|e| format!("API server did not start: {e}"))?;
    server.apply(service("web", CIP));
    server.apply(slice("web-1", "web", &["198.18.1.2".into(), "198.18.2.2".into()]));

    let kubeconfig = crate::svcproxy::temp_yaml(&format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {}\n  name: c\ncontexts:\n- context:\n    cluster: c\n    user: u\n  name: c\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
        server.url()
    ))?;
    let config = crate::svcproxy::temp_yaml(&format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: {}\n",
        kubeconfig.display()
    ))?;
    let log = crate::svcproxy::temp_yaml("")?;
    let (healthz, metrics) = (format!("{NODE_IP}:10256"), format!("{NODE_IP}:10249"));
    let argv = ["sync", "--watch", "--config", crate::svcproxy::path_str(&config), "--hostname-override", "node-1",
        "--node-ip", NODE_IP, "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4", "--iptables-backend", b.name(),
        "--healthz-bind-address", &healthz, "--metrics-bind-address", &metrics, "--min-sync-period", "100ms", "--nfacct=false"];
    let mut daemon = spawn_svcproxy(&lab.node().name, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    // Follows the initial lists: connections spread over the two pods.
    let conn = |n: u32| lab.connect(Where::Node, CIP, 80, Proto::Tcp, n);
    until("rules for the initial lists", Duration::from_secs(20), || conn(1).map(|t| t.answered() == 1).unwrap_or(false))
        .map_err(|e| format!("{e}\nsvcproxy log:\n{}", logs()))?;
    let t = conn(20)?;
    ensure!(t.count("pod1") > 0 && t.count("pod2") > 0 && t.count("pod3") == 0, "spread over pod1/pod2: {t:?}");

    // client-go's REST client metrics count the lists and watches (kube-proxy's dashboard).
    ensure!(metric(&ext, "rest_client_requests_total") >= 1.0, "rest_client_requests_total counts the API requests");

    // A change: pod3 joins.
    server.apply(slice("web-1", "web", &["198.18.1.2".into(), "198.18.2.2".into(), "198.18.3.2".into()]));
    until("pod3 to answer", Duration::from_secs(10), || conn(10).map(|t| t.count("pod3") > 0).unwrap_or(false))?;

    // Latency, change to kernel: 100 changes, each adding one endpoint, timed until its
    // DNAT rule is in the kernel.
    let mut lat = Vec::new();
    let mut ips: Vec<String> = vec!["198.18.1.2".into(), "198.18.2.2".into(), "198.18.3.2".into()];
    for i in 0..100u32 {
        ips.push(format!("198.18.200.{}", i + 1));
        let start = Instant::now();
        server.apply(slice("web-1", "web", &ips));
        let needle = format!("--to-destination 198.18.200.{}:8080", i + 1);
        let save = b.bin(false, "save");
        until("an endpoint to reach the kernel", Duration::from_secs(10), || {
            lab.node().run(&[&save, "-t", "nat"]).map(|s| s.contains(&needle)).unwrap_or(false)
        })?;
        lat.push(start.elapsed());
    }
    lat.sort();
    let (p50, p99) = (lat[49], lat[98]);
    ctx.log(format!("change-to-kernel latency over 100 changes (min-sync-period 100ms): p50 {:.0} ms, p99 {:.0} ms", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3));
    say!("  watch latency: p50 {:.0} ms, p99 {:.0} ms over 100 changes", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3);
    // How much of it is the sync itself (the rest: the min-sync-period wait, the watch).
    let sum = metric(&ext, "kubeproxy_sync_partial_proxy_rules_duration_seconds_sum{ip_family=\"IPv4\"}");
    let count = metric(&ext, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}");
    if count > 0.0 {
        say!("  partial syncs so far: {count}, {:.1} ms each on average (change to restore, iptables-restore included)", sum / count * 1e3);
    }

    // A burst of 1,000 endpoint changes: coalesced into a handful of syncs.
    let before = metric(&ext, "svcproxy_syncs_total{result=\"success\"}");
    ips.truncate(3);
    for i in 0..1000u32 {
        let mut burst = ips.clone();
        burst.push(format!("198.18.{}.{}", 100 + i / 250, i % 250 + 1));
        server.apply(slice("web-1", "web", &burst));
    }
    server.apply(slice("web-1", "web", &ips));
    let save = b.bin(false, "save");
    until("the burst's final state", Duration::from_secs(20), || {
        lab.node().run(&[&save, "-t", "nat"]).map(|s| s.matches("-j DNAT").count() == 3).unwrap_or(false)
    })?;
    std::thread::sleep(Duration::from_millis(300));
    let syncs = metric(&ext, "svcproxy_syncs_total{result=\"success\"}") - before;
    say!("  1,000-change burst: {syncs} syncs");
    ctx.log(format!("1,000-change burst took {syncs} syncs"));
    ensure!((1.0..=20.0).contains(&syncs), "the burst took {syncs} syncs");

    // A watch drop and a 410 in the middle of changes: no connection to web fails.
    server.apply(service("other", "198.19.255.11"));
    server.apply(slice("other-1", "other", &["198.18.3.2".into()]));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let lab_ref: &Lab = &lab;
        let mut total = (0u32, 0u32);
        std::thread::scope(|s| {
            let flag = stop.clone();
            let h = s.spawn(move || {
                let stop = flag;
                let mut ok_err = (0u32, 0u32);
                let start = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && start.elapsed() < Duration::from_secs(30) {
                    if let Ok(t) = lab_ref.connect(Where::Node, CIP, 80, Proto::Tcp, 5) {
                        ok_err.0 += t.answered();
                        ok_err.1 += 5 - t.answered();
                    }
                }
                ok_err
            });
            server.drop_watches();
            std::thread::sleep(Duration::from_millis(300));
            server.delete_behind_compaction(&[service("other", "198.19.255.11"), slice("other-1", "other", &[])]);
            let _ = until("the relist to remove the other service", Duration::from_secs(15), || {
                lab.node().run(&[&save, "-t", "nat"]).map(|s| !s.contains("app/other")).unwrap_or(false)
            });
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            total = h.join().unwrap_or((0, 1));
        });
        total
    };
    ensure!(traffic.0 > 0 && traffic.1 == 0, "connections during the drop and relist: {} ok, {} failed", traffic.0, traffic.1);
    ensure!(!lab.node().run(&[&save, "-t", "nat"])?.contains("app/other"), "the relist applied the deletion");

    // /healthz over real HTTP, then SIGTERM leaves working rules.
    let health = in_netns(&ext, || http_get(format!("{NODE_IP}:10256").parse().unwrap(), "/healthz")).join().map_err(|_| "health thread")??;
    ensure!(health.starts_with("HTTP/1.1 200"), "healthz: {health}");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGTERM) };
    let _ = daemon.0.wait();
    let t = conn(10)?;
    ensure!(t.answered() == 10, "rules still serve after SIGTERM: {t:?}");
    ensure!(logs().contains("the rules stay in place"), "log: {}", logs());
    Ok(())
}

//! Watch mode end to end without root: the real file source and runner loop, a fake
//! kernel, and the health and metrics endpoints over real HTTP on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svcproxy::config::Settings;
use svcproxy::conntrack::table::fake::FakeFlows;
use svcproxy::xtables::fake::SharedFake;
use svcproxy::net::IpFamily;
use svcproxy::pipeline;
use svcproxy::runner::watch;
use svcproxy::schedule::{Schedule, Timing};
use svcproxy::serve::{self, Shared};
use svcproxy::source::watch::{watch_files, SourceMsg, Start};

/// What the commands do to every read of the files: EndpointSlices derived where a
/// Service has none (`--derive-endpoints` off).
const DERIVE: svcproxy::derive::Completion = svcproxy::derive::Completion { force: false };

fn nat(kernel: &SharedFake) -> String {
    kernel.lock().unwrap().save_table(IpFamily::V4, "nat")
}

fn seps(kernel: &SharedFake) -> usize {
    nat(kernel).lines().filter(|l| l.starts_with(":KUBE-SEP-")).count()
}

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, out)
}

fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, body) = http_get(addr, "/metrics");
    body.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// Waits (bounded) until `cond` holds.
fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cluster(endpoints: usize, extra: &str) -> String {
    let mut s = String::from("apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode: {name: n1, ips: [198.19.1.1]}\noptions: {ipFamily: ipv4, clusterCIDR: 198.18.0.0/16, nfacct: false}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: a}\nspec: {clusterIP: 198.19.255.10, ports: [{name: http, port: 80}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: a, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints:\n");
    for i in 0..endpoints {
        s.push_str(&format!("- addresses: [198.18.{}.{}]\n", i / 200 + 1, i % 200 + 2));
    }
    s.push_str("ports: [{name: http, port: 8080, protocol: TCP}]\n");
    s.push_str(extra);
    s
}

#[test]
fn watch_follows_file_changes_coalesces_bursts_survives_bad_objects_and_reports_health() {
    let dir: PathBuf = std::env::temp_dir().join(format!("svcproxy-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.yaml");
    std::fs::write(&file, cluster(2, "")).unwrap();

    let (initial, state, errors) = Start::read(&dir, &DERIVE);
    assert!(errors.is_empty());
    let loaded = pipeline::load_objects(state, &initial.objects, Settings::default(), Settings::default()).unwrap();
    let timing = Timing { min_sync_period: Duration::from_millis(300), sync_period: Duration::from_secs(30), ..Timing::default() };
    let shared = Arc::new(Shared::new(Schedule::new(timing)));
    let kernel = SharedFake::default();
    let engine = watch::Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(FakeFlows::default()));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (health, metrics) = rt.block_on(async {
        let h = serve::spawn("127.0.0.1:0".parse().unwrap(), serve::health_router(shared.clone())).await.unwrap();
        let m = serve::spawn("127.0.0.1:0".parse().unwrap(), serve::metrics_router(shared.clone(), serve::Pages::default())).await.unwrap();
        (h, m)
    });
    let (tx, rx) = tokio::sync::mpsc::channel::<SourceMsg>(64);
    rt.spawn(watch_files(dir.clone(), Duration::from_millis(20), initial, DERIVE, tx));
    let loop_shared = shared.clone();
    let runner = rt.spawn(async move {
        watch::run(engine, rx, loop_shared, async { let _ = stop_rx.await; }).await;
    });

    // The initial full sync, then healthy.
    until("the first sync", || seps(&kernel) == 2);
    until("healthz 200", || http_get(health, "/healthz").0 == 200);

    // One change → one more sync.
    std::fs::write(&file, cluster(3, "")).unwrap();
    until("the new endpoint", || seps(&kernel) == 3);
    let syncs = metric(metrics, "svcproxy_syncs_total{result=\"success\"}");
    assert!(syncs >= 2.0);

    // A burst of 30 rewrites within the min-sync-period: coalesced into a few syncs.
    for n in 4..34 {
        std::fs::write(&file, cluster(n, "")).unwrap();
        std::thread::sleep(Duration::from_millis(25));
    }
    until("the burst's final state", || seps(&kernel) == 33);
    std::thread::sleep(Duration::from_millis(400));
    let after_burst = metric(metrics, "svcproxy_syncs_total{result=\"success\"}");
    assert!(after_burst - syncs <= 5.0, "a 30-change burst took {} syncs", after_burst - syncs);

    // A malformed object is skipped and counted; the rules stay.
    let bad = "---\napiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: a}\nspec: {clusterIP: 198.19.255.300, ports: [{port: 80}]}\n";
    std::fs::write(&file, cluster(33, bad)).unwrap();
    until("the malformed object to be counted", || metric(metrics, "svcproxy_malformed_objects_total") >= 1.0);
    assert_eq!(seps(&kernel), 33, "the rules stay");
    let (code, _) = http_get(health, "/livez");
    assert_eq!(code, 200);

    // A file that does not parse at all deletes nothing; once it reads again, what it no
    // longer holds goes (the slice), whatever was read in between.
    let before = metric(metrics, "svcproxy_malformed_objects_total");
    std::fs::write(&file, "apiVersion: v1\nkind: Service\nmetadata: [\n").unwrap();
    until("the unreadable file to be counted", || metric(metrics, "svcproxy_malformed_objects_total") > before);
    assert_eq!(seps(&kernel), 33, "the rules stay");
    let service_only = cluster(1, "").split("---\napiVersion: discovery.k8s.io/v1").next().unwrap().to_string();
    std::fs::write(&file, service_only).unwrap();
    until("the slice's endpoints to go", || seps(&kernel) == 0);
    std::fs::write(&file, cluster(33, "")).unwrap();
    until("the endpoints back", || seps(&kernel) == 33);

    let _ = stop_tx.send(());
    rt.block_on(runner).unwrap();
    assert_eq!(seps(&kernel), 33, "stopping leaves the rules in place");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watch mode from files passes on the reader's notes (what was read or skipped,
/// duplicates, …) at start and once per change of them, never on a poll or a re-read
/// that leaves them as they were.
#[test]
fn watch_from_files_reports_the_readers_notes_once_per_change() {
    let dir: PathBuf = std::env::temp_dir().join(format!("svcproxy-watch-notes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.yaml");
    let config_map = |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: a}}\n---\n");
    std::fs::write(&file, format!("{}{}", config_map("first"), cluster(2, ""))).unwrap();
    let (initial, _, errors) = Start::read(&dir, &DERIVE);
    assert!(errors.is_empty());

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SourceMsg>(64);
    rt.spawn(watch_files(dir.clone(), Duration::from_millis(20), initial, DERIVE, tx));
    // The messages up to and including the next `Events` (or `Ready`), as text.
    let mut next_batch = || -> Vec<String> {
        rt.block_on(async {
            let mut out = Vec::new();
            loop {
                let msg = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a message within 10s").expect("the source runs");
                match msg {
                    SourceMsg::Notes(list) => out.push(format!("notes: {}", list.join(" | "))),
                    SourceMsg::Ready => return [out, vec!["ready".into()]].concat(),
                    SourceMsg::Events(_) => return [out, vec!["events".into()]].concat(),
                    other => out.push(format!("{other:?}")),
                }
            }
        })
    };

    let start = next_batch();
    assert_eq!(start.len(), 2, "{start:?}");
    assert!(start[0].starts_with("notes: ") && start[0].contains("cluster.yaml:1: skipped v1/ConfigMap a/first: not a kind svcproxy reads"), "{start:?}");
    assert_eq!(start[1], "ready");

    // A re-read whose notes are the same says nothing again.
    std::fs::write(&file, format!("{}{}", config_map("first"), cluster(3, ""))).unwrap();
    assert_eq!(next_batch(), ["events"]);

    // New notes (a second skipped object) are passed on once.
    let changed = format!("{}{}---\n{}", config_map("first"), cluster(3, ""), config_map("first").trim_end_matches("---\n"));
    std::fs::write(&file, &changed).unwrap();
    let batch = next_batch();
    assert_eq!(batch.len(), 2, "{batch:?}");
    assert!(batch[0].contains("skipped v1/ConfigMap a/first") && batch[0].matches(" | ").count() >= 2, "{batch:?}");
    assert_eq!(batch[1], "events");
    // Rewritten as it was: same notes, nothing said.
    std::fs::write(&file, format!("{changed}\n")).unwrap();
    assert_eq!(next_batch(), ["events"]);

    drop(rx);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watch mode from a directory: a file replaced by a rename (same size and modification
/// time, another inode) is read again, a file deleted takes its objects with it, and the
/// files that did not change give no event.
#[test]
fn watch_from_a_directory_follows_renames_and_deletions_file_by_file() {
    let dir: PathBuf = std::env::temp_dir().join(format!("svcproxy-watch-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let service = |name: &str, ip: &str| {
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: a}}\nspec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]}}\n")
    };
    std::fs::write(dir.join("a.yaml"), cluster(2, "")).unwrap();
    std::fs::write(dir.join("b.yaml"), service("two", "198.19.255.21")).unwrap();
    let (initial, _, errors) = Start::read(&dir, &DERIVE);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(initial.objects.services.len(), 2);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SourceMsg>(64);
    rt.spawn(watch_files(dir.clone(), Duration::from_millis(20), initial, DERIVE, tx));
    // The next `Events` (or `Ready`: none), as one line per event.
    let mut next_events = || -> Vec<String> {
        rt.block_on(async {
            loop {
                let msg = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a message within 10s").expect("the source runs");
                if let SourceMsg::Ready = msg {
                    return Vec::new();
                }
                if let SourceMsg::Events(events) = msg {
                    return events
                        .iter()
                        .map(|e| match e {
                            svcproxy::track::Event::ServiceApplied(s) => format!("apply service {} {}", s.id, s.cluster_ips[0]),
                            svcproxy::track::Event::ServiceDeleted(id) => format!("delete service {id}"),
                            svcproxy::track::Event::SliceApplied(s) => format!("apply slice {}", s.id),
                            svcproxy::track::Event::SliceDeleted(s) => format!("delete slice {}", s.id),
                            svcproxy::track::Event::ServiceCidrApplied(c) => format!("apply servicecidr {}", c.id),
                            svcproxy::track::Event::ServiceCidrDeleted(c) => format!("delete servicecidr {}", c.id),
                        })
                        .collect();
                }
            }
        })
    };

    assert!(next_events().is_empty(), "ready");

    // b replaced by a rename: same size, same modification time, new content.
    let old_mtime = std::fs::metadata(dir.join("b.yaml")).unwrap().modified().unwrap();
    std::fs::write(dir.join(".b.tmp"), service("two", "198.19.255.29")).unwrap();
    std::fs::File::options().write(true).open(dir.join(".b.tmp")).unwrap().set_modified(old_mtime).unwrap();
    std::fs::rename(dir.join(".b.tmp"), dir.join("b.yaml")).unwrap();
    assert_eq!(next_events(), ["apply service a/two 198.19.255.29"]);

    // a deleted: its Service and slice go, b's Service stays.
    std::fs::remove_file(dir.join("a.yaml")).unwrap();
    let mut events = next_events();
    events.sort();
    assert_eq!(events, ["delete service a/web", "delete slice a/web-1"]);

    drop(rx);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watch mode from files: a ServiceCIDR object added, changed and deleted each sends the
/// cluster's whole ServiceCIDR list once (the engine re-renders nftables mode's drop rule).
#[test]
fn watch_from_files_follows_service_cidr_objects() {
    let dir: PathBuf = std::env::temp_dir().join(format!("svcproxy-watch-cidrs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.yaml"), cluster(1, "")).unwrap();
    let cidr = |c: &str| format!("apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: kubernetes}}\nspec: {{cidrs: ['{c}']}}\n");
    std::fs::write(dir.join("cidr.yaml"), cidr("198.19.0.0/16")).unwrap();
    let (initial, _, errors) = Start::read(&dir, &DERIVE);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(initial.service_cidrs.iter().map(|c| c.to_string()).collect::<Vec<_>>(), ["198.19.0.0/16"]);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SourceMsg>(64);
    rt.spawn(watch_files(dir.clone(), Duration::from_millis(20), initial, DERIVE, tx));
    // The next ServiceCIDR list sent (or, with `ready`, the Ready message), as text.
    let mut next = |ready: bool| -> Vec<String> {
        rt.block_on(async {
            loop {
                let msg = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a message within 10s").expect("the source runs");
                match msg {
                    SourceMsg::Ready if ready => return Vec::new(),
                    SourceMsg::ServiceCidrs(list) if !ready => return list.iter().map(|c| c.to_string()).collect(),
                    _ => {}
                }
            }
        })
    };
    assert!(next(true).is_empty(), "ready");
    let mut next_cidrs = || next(false);
    std::fs::write(dir.join("cidr.yaml"), cidr("198.18.0.0/15")).unwrap();
    assert_eq!(next_cidrs(), ["198.18.0.0/15"]);
    std::fs::write(dir.join("more.yaml"), cidr("fd00:10:96::/112").replace("kubernetes", "v6")).unwrap();
    assert_eq!(next_cidrs(), ["198.18.0.0/15", "fd00:10:96::/112"]);
    std::fs::remove_file(dir.join("cidr.yaml")).unwrap();
    std::fs::remove_file(dir.join("more.yaml")).unwrap();
    assert_eq!(next_cidrs(), Vec::<String>::new());
    drop(rx);
    let _ = std::fs::remove_dir_all(&dir);
}

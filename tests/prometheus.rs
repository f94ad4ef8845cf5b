//! kube-proxy's dashboard against svcproxy, with a real Prometheus (Debian's `prometheus`
//! package). In a network namespace this test makes for itself (`unshare`, loopback only),
//! it starts the test API server, `svcproxy sync --watch` against it and Prometheus scraping
//! svcproxy's metrics port every second as job `kube-proxy`. While changes flow (slices
//! stamped with their trigger time, dropped watches), it asks Prometheus' HTTP API each
//! panel query of kubernetes-mixin's "Kubernetes / Proxy" dashboard until every one returns
//! a finite value (bounded), except Goroutines (Go's) and POST latency (the one POST, the
//! Starting Event, comes before the first scrape: Prometheus must see it counted, and the
//! API server must hold that one Event). Then `promtool check metrics` must accept a scrape
//! of `/metrics`.
//!
//! Needs root (namespaces, iptables), `prometheus`, `promtool`, `ip` and `iptables-restore`;
//! without them it says SKIPPED, which fails under CI (tests/support/ci.rs).

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/ci.rs"]
mod ci;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::ApiServer;
use serde_json::{json, Value};

const METRICS: &str = "127.0.0.1:10249";
const PROMETHEUS: &str = "127.0.0.1:9090";
/// How long the panels may take to fill (scrapes every second; rates need two).
const PATIENCE: Duration = Duration::from_secs(90);
/// The dashboard's selector, as kube-prometheus-stack fills it in.
const SEL: &str = "cluster=\"test\", job=\"kube-proxy\", instance=~\".*\"";

fn main() {
    let outcome = match missing() {
        Some(why) => Outcome::Skipped(why),
        None => match run() {
            Ok(()) => Outcome::Passed,
            Err(e) => Outcome::Failed(e),
        },
    };
    let ci = ci::under_ci();
    let (passed, failed, skipped, ok) = match &outcome {
        Outcome::Passed => (1, 0, 0, true),
        Outcome::Failed(e) => {
            eprintln!("prometheus: FAILED: {e}");
            (0, 1, 0, false)
        }
        Outcome::Skipped(why) => {
            eprintln!("prometheus: SKIPPED (needs {why}){}", if ci { "; a failure under CI" } else { "" });
            (0, 0, 1, !ci)
        }
    };
    println!("prometheus: {passed} passed, {failed} failed, {skipped} skipped");
    std::process::exit(if ok { 0 } else { 1 });
}

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

/// What this machine lacks for the test, if anything.
fn missing() -> Option<String> {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        return Some("root".into());
    }
    let absent: Vec<&str> = ["prometheus", "promtool", "ip", "iptables-restore"].into_iter().filter(|t| which(t).is_none()).collect();
    (!absent.is_empty()).then(|| format!("{} (apt-get install prometheus iproute2 iptables)", absent.join(", ")))
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(tool)).find(|f| f.is_file()))
}

/// Kills a child when dropped (the netns goes with the process).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run() -> Result<(), String> {
    // A network namespace of our own: this thread (the only one yet) and everything it
    // starts live in it; it goes when the process ends.
    // SAFETY: unshare changes only this thread's namespaces; no other thread exists yet.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error()));
    }
    status(Command::new("ip").args(["link", "set", "lo", "up"]))?;
    let dir = std::env::temp_dir().join(format!("svcproxy-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = scrape_and_query(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn scrape_and_query(dir: &Path) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())?;
    let server = rt.block_on(ApiServer::start()).expect("the test API server starts");
    server.apply(service());
    server.apply(slice(1));

    let kubeconfig = dir.join("kubeconfig");
    write(&kubeconfig, &format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {}\n  name: c\ncontexts:\n- context:\n    cluster: c\n    user: u\n  name: c\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
        server.url()
    ))?;
    let config = dir.join("config.yaml");
    write(&config, &format!("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: {}\n", kubeconfig.display()))?;
    let log = std::fs::File::create(dir.join("svcproxy.log")).map_err(|e| e.to_string())?;
    let svcproxy = Killed(
        Command::new(env!("CARGO_BIN_EXE_svcproxy"))
            .args(["sync", "--watch", "--config"])
            .arg(&config)
            .args(["--hostname-override", "n1", "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4", "--metrics-bind-address", METRICS])
            .args(["--healthz-bind-address", "127.0.0.1:10256", "--min-sync-period", "100ms", "--logging-format", "text"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start svcproxy: {e}"))?,
    );

    let prom_config = dir.join("prometheus.yml");
    write(&prom_config, &format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: kube-proxy\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  static_configs:\n  - targets: ['{METRICS}']\n    labels:\n      cluster: test\n"
    ))?;
    let prom_log = std::fs::File::create(dir.join("prometheus.log")).map_err(|e| e.to_string())?;
    let prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={PROMETHEUS}"))
            .stdout(Stdio::null())
            .stderr(prom_log)
            .spawn()
            .map_err(|e| format!("cannot start prometheus: {e}"))?,
    );

    let result = until_every_panel_has_data(&server).and_then(|()| the_starting_event(&server));
    let scrape = result.and_then(|()| check_metrics());
    drop((svcproxy, prometheus));
    scrape.map_err(|e| {
        let tail = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default().lines().rev().take(15).collect::<Vec<_>>().join("\n");
        format!("{e}\n--- svcproxy log (last lines, newest first) ---\n{}\n--- prometheus log ---\n{}", tail("svcproxy.log"), tail("prometheus.log"))
    })
}

/// The dashboard's panels (kubernetes-mixin dashboards/proxy.libsonnet) as (title, query).
fn panels() -> Vec<(&'static str, String)> {
    vec![
        ("Up", "sum(up{cluster=\"test\", job=\"kube-proxy\"})".to_string()),
        ("Rules Sync Rate", format!("sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{{{SEL}}}[5m]))")),
        ("Rule Sync Latency 99th Quantile", format!("histogram_quantile(0.99, rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{{{SEL}}}[5m]))")),
        ("Network Programming Rate", format!("sum(rate(kubeproxy_network_programming_duration_seconds_count{{{SEL}}}[5m]))")),
        (
            "Network Programming Latency 99th Quantile",
            format!("histogram_quantile(0.99, sum(rate(kubeproxy_network_programming_duration_seconds_bucket{{{SEL}}}[5m])) by (instance, le))"),
        ),
        ("Kube API Request Rate", format!("sum(rate(rest_client_requests_total{{{SEL}, code=~\"2..\"}}[5m]))")),
        (
            "Get Request Latency 99th Quantile",
            format!("histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{SEL}, verb=\"GET\"}}[5m])) by (verb, url, le))"),
        ),
        ("Memory", format!("process_resident_memory_bytes{{{SEL}}}")),
        ("CPU usage", format!("rate(process_cpu_seconds_total{{{SEL}}}[5m])")),
    ]
}

/// The dashboard's two panels left empty: POST latency (the only POST, kube-proxy's Starting
/// Event, is made before Prometheus' first scrape, so its rate is 0/0, as it is for
/// kube-proxy, whose only steady POST is the same Event: COMPATIBILITY row 44) and Goroutines
/// (no Go runtime, row 28). Printed, not required.
fn empty_panels() -> Vec<(&'static str, String)> {
    vec![
        (
            "Post Request Latency 99th Quantile",
            format!("histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{SEL}, verb=\"POST\"}}[5m])) by (verb, url, le))"),
        ),
        ("Goroutines", format!("go_goroutines{{{SEL}}}")),
    ]
}

/// `sync --watch` posted kube-proxy's Starting Event once, through the client Prometheus
/// sees: the API server holds exactly that Event, and the scrape counts its POST.
fn the_starting_event(server: &ApiServer) -> Result<(), String> {
    let events = server.events();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(|e| e.to_string())?;
    let one = events.len() == 1
        && events[0]["reason"] == "Starting"
        && events[0]["action"] == "StartKubeProxy"
        && events[0]["type"] == "Normal"
        && events[0]["regarding"] == json!({"apiVersion": "v1", "kind": "Node", "name": "n1"})
        && events[0]["reportingController"] == "kube-proxy"
        && events[0]["reportingInstance"] == format!("kube-proxy-{}", host.trim());
    if !one {
        return Err(format!("the API server should hold one Starting Event on node n1; it holds {events:?}"));
    }
    let posts = query(&format!("rest_client_request_duration_seconds_count{{{SEL}, verb=\"POST\"}}"))?;
    let created = query(&format!("rest_client_requests_total{{{SEL}, method=\"POST\", code=\"201\"}}"))?;
    if posts != [1.0] || created != [1.0] {
        return Err(format!("Prometheus should see the one POST (duration count, 201 count): {posts:?} {created:?}"));
    }
    eprintln!("prometheus: the Starting Event was posted once and its POST is scraped");
    Ok(())
}

/// Keeps changes flowing and asks every panel's query until all return a finite value.
fn until_every_panel_has_data(server: &ApiServer) -> Result<(), String> {
    let start = Instant::now();
    let mut generation = 1;
    let mut empty: Vec<String> = Vec::new();
    while start.elapsed() < PATIENCE {
        std::thread::sleep(Duration::from_secs(1));
        generation += 1;
        server.apply(slice(generation));
        if generation % 5 == 0 {
            server.drop_watches();
        }
        empty = panels().into_iter().filter(|(_, q)| !matches!(query(q), Ok(v) if v.iter().any(|x| x.is_finite()))).map(|(t, _)| t.to_string()).collect();
        if empty.is_empty() {
            eprintln!("prometheus: every panel has data after {:.0?}:", start.elapsed());
            for (title, q) in panels() {
                eprintln!("  {title}: {:?}", query(&q)?);
            }
            for (title, q) in empty_panels() {
                eprintln!("  {title} (left empty by design): {:?}", query(&q)?);
            }
            return Ok(());
        }
    }
    let detail: Vec<String> = panels().into_iter().filter(|(t, _)| empty.iter().any(|e| e == t)).map(|(t, q)| format!("{t}: {q} -> {:?}", query(&q))).collect();
    Err(format!("after {PATIENCE:?} these panels have no data:\n{}", detail.join("\n")))
}

/// The values of an instant query's result vector.
fn query(promql: &str) -> Result<Vec<f64>, String> {
    let body = http_get(PROMETHEUS, &format!("/api/v1/query?query={}", urlencode(promql)), "application/json")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(body);
    }
    Ok(v["data"]["result"].as_array().map_or(Vec::new(), |r| r.iter().filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok()).collect()))
}

/// promtool's lint findings that kube-proxy's own scrape has too: (family, finding).
const KUBE_PROXYS_OWN_LINT: [(&str, &str); 2] = [
    ("kubeproxy_sync_proxy_rules_iptables_total ", "non-counter metrics should not have \"_total\" suffix"),
    ("kubeproxy_sync_proxy_rules_no_local_endpoints_total ", "non-counter metrics should not have \"_total\" suffix"),
];

/// `promtool check metrics` on a scrape of `/metrics` in the classic text format.
fn check_metrics() -> Result<(), String> {
    let scrape = http_get(METRICS, "/metrics", "text/plain;version=0.0.4")?;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run promtool: {e}"))?;
    child.stdin.take().ok_or("no stdin")?.write_all(scrape.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Exit 3: the scrape parsed, with lint findings. kube-proxy names two gauges with a
    // `_total` suffix, which promtool's lint reports for kube-proxy too; svcproxy keeps the
    // names the dashboards and alerts use. Anything else is a failure.
    let inherited = |l: &str| KUBE_PROXYS_OWN_LINT.iter().any(|(family, finding)| l.starts_with(family) && l.ends_with(finding));
    match out.status.code() {
        Some(0) => {}
        Some(3) if report.lines().filter(|l| !l.trim().is_empty()).all(inherited) => {
            eprintln!("prometheus: promtool's lint findings are kube-proxy's own names:\n{}", report.trim_end());
        }
        _ => return Err(format!("promtool check metrics: {}\n{report}", out.status)),
    }
    let nfacct = scrape.lines().filter(|l| l.starts_with("kubeproxy_iptables_")).collect::<Vec<_>>();
    eprintln!("prometheus: nfacct-backed samples in the scrape: {nfacct:?}");
    for family in ["kubeproxy_sync_proxy_rules_iptables_last", "kubeproxy_sync_proxy_rules_duration_seconds_bucket", "rest_client_requests_total"] {
        if !scrape.contains(family) {
            return Err(format!("{family} not in the scrape"));
        }
    }
    per_family_series(&scrape)
}

/// kube-proxy's families that carry `ip_family` (one proxier per family observes them) and
/// that this run fills; the restore-failure counters and the conntrack reconciler's carry it
/// too but stay empty here (no failure, no UDP).
const PER_FAMILY: [&str; 8] = [
    "kubeproxy_sync_proxy_rules_duration_seconds",
    "kubeproxy_sync_full_proxy_rules_duration_seconds",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds",
    "kubeproxy_network_programming_duration_seconds",
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    "kubeproxy_sync_proxy_rules_iptables_total",
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
];

/// Every sample of those families names this single-stack run's family, `IPv4`.
fn per_family_series(scrape: &str) -> Result<(), String> {
    for family in PER_FAMILY {
        let samples: Vec<&str> = scrape
            .lines()
            .filter(|l| {
                let name = l.split(['{', ' ']).next().unwrap_or("");
                ["", "_bucket", "_count", "_sum"].iter().any(|suffix| name.strip_prefix(family) == Some(suffix))
            })
            .collect();
        if samples.is_empty() {
            return Err(format!("{family}: no sample in the scrape"));
        }
        if let Some(bare) = samples.iter().find(|l| !l.contains("ip_family=\"IPv4\"")) {
            return Err(format!("{family}: a sample without ip_family=\"IPv4\": {bare}"));
        }
    }
    Ok(())
}

/// A GET over a plain socket; the body of a 200 answer.
fn http_get(addr: &str, path: &str, accept: &str) -> Result<String, String> {
    let addr: SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let (head, body) = out.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP answer from {addr}{path}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{addr}{path}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_string())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn status(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    out.status.success().then_some(()).ok_or_else(|| format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "app"},
           "spec": {"type": "ClusterIP", "clusterIP": "198.19.255.10", "clusterIPs": ["198.19.255.10"],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

/// The service's slice at its `generation`th change: one to three endpoints, stamped with
/// the moment of the change as the EndpointSlice controller stamps it.
fn slice(generation: u32) -> Value {
    let eps: Vec<Value> = (0..1 + generation % 3).map(|i| json!({"addresses": [format!("198.18.1.{}", i + 2)], "conditions": {"ready": true}})).collect();
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "web-1", "namespace": "app", "labels": {"kubernetes.io/service-name": "web"},
                        "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": now}},
           "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

//! The HTTP endpoints of watch mode: `/healthz` and `/livez` on the health address, with
//! kube-proxy's semantics (unhealthy once a queued change has waited more than twice the
//! sync period; 503 before the first sync), and on the metrics address `/metrics`,
//! `/metrics/slis`, `/proxyMode`, `/configz`, a `/healthz` ping, `/statusz` and `/flagz`
//! (each while its gate is on) and, with `--profiling`, `/debug/pprof/`, as kube-proxy's
//! metrics port serves them.

pub mod healthcheck;
pub mod localhost_nodeports;
pub mod metrics;
pub mod nfacct;
pub mod process;
pub mod profiling;
pub mod slis;
pub mod socketlb;
pub mod zpages;

/// A registry's OpenMetrics text.
fn open_metrics(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    // Encoding into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// A collector's samples as a scrape writes them.
#[cfg(test)]
fn scrape(collector: impl prometheus_client::collector::Collector) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(collector));
    open_metrics(&registry)
}

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

pub use metrics::Metrics;

use crate::schedule::Schedule;

/// What the endpoints read; the runner updates it.
#[derive(Default)]
pub struct Shared {
    pub schedule: Mutex<Schedule>,
    pub metrics: Metrics,
    /// Wall-clock time of the last successful sync.
    pub last_updated: Mutex<Option<SystemTime>>,
    /// This node is being deleted: `/healthz` says so (load balancers drain it).
    pub node_deleting: std::sync::atomic::AtomicBool,
    /// Why the watch must end (this Node's IPs changed, or it was deleted): the loop
    /// returns it and the process exits non-zero, for its DaemonSet to restart it.
    pub exit: Mutex<Option<String>>,
    /// The proxy mode, for `/proxyMode`.
    pub proxy_mode: std::sync::OnceLock<String>,
    /// The effective configuration, for `/configz`.
    pub configz: std::sync::OnceLock<serde_json::Value>,
    /// component-base's SLI registry (`/metrics/slis`).
    pub slis: slis::Slis,
    /// Every flag and its value (the command line's, else its default), for `/flagz`.
    pub flagz: std::sync::OnceLock<Vec<(String, String)>>,
    /// The kube-proxy release emulated (`--kube-proxy-version`), for `/statusz`.
    pub emulation_version: std::sync::OnceLock<String>,
}

impl Shared {
    pub fn new(schedule: Schedule) -> Self {
        Shared { schedule: Mutex::new(schedule), ..Shared::default() }
    }
}

pub type SharedState = Arc<Shared>;

fn unix(t: Option<SystemTime>) -> f64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}

fn synced(s: &Shared) -> bool {
    s.schedule.lock().map(|sch| sch.is_ready() && sch.last_sync().is_some() && sch.healthy(Instant::now())).unwrap_or(false)
}

/// `/healthz`: synced, and this node not being deleted (load balancers drain it).
async fn healthz(State(s): State<SharedState>) -> impl IntoResponse {
    let eligible = !s.node_deleting.load(std::sync::atomic::Ordering::SeqCst);
    health(&s, Some(eligible), &s.metrics.healthz)
}

/// `/livez`: synced only. A node being deleted keeps the proxy alive (kube-proxy's livez
/// ignores node eligibility, so the kubelet does not restart it while it drains).
async fn livez(State(s): State<SharedState>) -> impl IntoResponse {
    health(&s, None, &s.metrics.livez)
}

/// A health answer: OK when synced (and `eligible`, when given), counted by its code.
fn health(s: &Shared, eligible: Option<bool>, count: &prometheus_client::metrics::family::Family<metrics::CodeLabel, prometheus_client::metrics::counter::Counter>) -> impl IntoResponse {
    let last = *s.last_updated.lock().unwrap_or_else(|e| e.into_inner());
    let node = eligible.map(|e| format!(", \"nodeEligible\": {e}")).unwrap_or_default();
    let body = format!("{{\"lastUpdated\": \"{}\", \"currentTime\": \"{}\"{node}}}\n", unix(last), unix(Some(SystemTime::now())));
    let code = if synced(s) && eligible != Some(false) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    count.get_or_create(&metrics::CodeLabel { code: code.as_u16().to_string() }).inc();
    (code, [("content-type", "application/json"), ("x-content-type-options", "nosniff")], body)
}

/// OpenMetrics when the scraper accepts it, the classic text format otherwise, as the
/// Prometheus client libraries negotiate.
fn negotiated(headers: &axum::http::HeaderMap, open: String) -> impl IntoResponse {
    if accept(headers).unwrap_or("").contains("application/openmetrics-text") {
        (StatusCode::OK, [("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], open)
    } else {
        (StatusCode::OK, [("content-type", "text/plain; version=0.0.4; charset=utf-8")], metrics::to_classic_text(&open))
    }
}

/// `/metrics`.
async fn metrics(State(s): State<SharedState>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    negotiated(&headers, s.metrics.encode())
}

/// `/metrics/slis`: component-base's SLI registry.
async fn slis_get(State(s): State<SharedState>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    negotiated(&headers, s.slis.encode())
}

/// A DELETE of `/metrics/slis` resets it, as component-base's handler does.
async fn slis_reset(State(s): State<SharedState>) -> impl IntoResponse {
    s.slis.reset();
    (StatusCode::OK, [("content-type", "text/plain; charset=utf-8")], "metrics reset\n")
}

/// kube-proxy's `/proxyMode`: the mode as plain text.
async fn proxy_mode(State(s): State<SharedState>) -> impl IntoResponse {
    (StatusCode::OK, [("content-type", "text/plain; charset=utf-8")], s.proxy_mode.get().cloned().unwrap_or_default())
}

/// kube-proxy's `/configz`: the effective configuration under its group's name.
async fn configz(State(s): State<SharedState>) -> impl IntoResponse {
    let body = serde_json::json!({ "kubeproxy.config.k8s.io": s.configz.get().cloned().unwrap_or_default() });
    (StatusCode::OK, [("content-type", "application/json")], body.to_string())
}

const TEXT: [(&str, &str); 2] = [("content-type", "text/plain; charset=utf-8"), ("x-content-type-options", "nosniff")];

/// The metrics port's `/healthz`: apiserver's healthz handler with its one check, `ping`
/// (not the proxy's sync health, which is on the health port). Each run is an SLI
/// observation; `?verbose` lists the checks.
async fn ping(State(s): State<SharedState>, axum::extract::RawQuery(query): axum::extract::RawQuery) -> impl IntoResponse {
    s.slis.observe("ping", "healthz", true);
    let verbose = query.unwrap_or_default().split('&').any(|kv| kv == "verbose" || kv.starts_with("verbose="));
    (StatusCode::OK, TEXT, if verbose { "[+]ping ok\nhealthz check passed\n" } else { "ok" })
}

/// `/healthz/ping`: the check alone.
async fn ping_check() -> impl IntoResponse {
    (StatusCode::OK, TEXT, "ok")
}

/// `/debug/pprof/profile?seconds=N`: a CPU profile in pprof's protobuf format.
async fn pprof_profile(axum::extract::RawQuery(query): axum::extract::RawQuery) -> axum::response::Response {
    let seconds = profiling::seconds(query.as_deref());
    match profiling::sample(seconds).await {
        Ok(p) => (StatusCode::OK, [("content-type", "application/octet-stream"), ("content-disposition", "attachment; filename=\"profile\"")], profiling::encode(&p))
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("cannot profile: {e}\n")).into_response(),
    }
}

/// `/debug/pprof/cmdline`: the arguments, NUL-separated, as Go's.
async fn pprof_cmdline() -> impl IntoResponse {
    (StatusCode::OK, TEXT, std::env::args().collect::<Vec<_>>().join("\0"))
}

async fn pprof_index() -> impl IntoResponse {
    (StatusCode::OK, TEXT, profiling::INDEX)
}

/// A zpage's answer: text, the `config.k8s.io` JSON (the content type names the kind, as
/// apiserver's does), or 406.
fn zpage(wanted: zpages::Wanted, kind: &str, text: impl FnOnce() -> String, json: impl FnOnce(bool) -> String) -> axum::response::Response {
    match wanted {
        zpages::Wanted::Text => (StatusCode::OK, [("content-type", "text/plain; charset=utf-8")], text()).into_response(),
        zpages::Wanted::Json { v1alpha1 } => {
            let version = if v1alpha1 { "v1alpha1" } else { "v1beta1" };
            let content_type = format!("application/json;g=config.k8s.io;v={version};as={kind}");
            let mut response = (StatusCode::OK, [("content-type", content_type)], json(v1alpha1)).into_response();
            if v1alpha1 {
                let warning = zpages::deprecated_warning(&kind.to_ascii_lowercase());
                if let Ok(v) = axum::http::HeaderValue::from_str(&warning) {
                    response.headers_mut().insert("warning", v);
                }
            }
            response
        }
        zpages::Wanted::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, [("content-type", "application/json")], zpages::not_acceptable()).into_response(),
    }
}

fn accept(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok())
}

/// `/statusz`: when the process started, svcproxy's version, the release it emulates, the
/// port's paths.
async fn statusz(s: SharedState, headers: axum::http::HeaderMap, paths: Arc<Vec<String>>) -> axum::response::Response {
    let now = SystemTime::now();
    let started = process::start_time_seconds().map_or_else(|| now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()), |t| t as u64);
    let status = zpages::Status {
        started,
        now,
        binary_version: env!("CARGO_PKG_VERSION").to_string(),
        emulation_version: s.emulation_version.get().cloned().unwrap_or_default(),
        paths: paths.to_vec(),
    };
    zpage(zpages::negotiate(accept(&headers), "Statusz"), "Statusz", || status.text(zpages::random_delimiter()), |v1alpha1| status.json(v1alpha1))
}

/// `/flagz`: every flag and its value.
async fn flagz(State(s): State<SharedState>, headers: axum::http::HeaderMap) -> axum::response::Response {
    let flags = s.flagz.get().cloned().unwrap_or_default();
    let json = |v1alpha1: bool| {
        let map: serde_json::Map<String, serde_json::Value> = flags.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
        let version = if v1alpha1 { "config.k8s.io/v1alpha1" } else { "config.k8s.io/v1beta1" };
        zpages::ordered_json(&[
            ("kind", "Flagz".into()),
            ("apiVersion", version.into()),
            ("metadata", serde_json::json!({ "name": zpages::COMPONENT })),
            ("flags", map.into()),
        ])
    };
    zpage(zpages::negotiate(accept(&headers), "Flagz"), "Flagz", || zpages::flagz_text(&flags, zpages::random_delimiter()), json)
}

pub fn health_router(state: SharedState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(livez)).with_state(state)
}

/// What the metrics port serves besides its fixed paths.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pages {
    /// `--profiling`: `/debug/pprof/`.
    pub profiling: bool,
    /// The `ComponentStatusz` gate: `/statusz`.
    pub statusz: bool,
    /// The `ComponentFlagz` gate: `/flagz`.
    pub flagz: bool,
}

/// The metrics port, with `pages` (`Pages::default()`: no profiling, no zpages).
pub fn metrics_router(state: SharedState, pages: Pages) -> Router {
    // The paths `/statusz` lists: kube-proxy's mux's listed ones, first segment only
    // (profiling's are unlisted; `/statusz` is installed after the list is taken).
    let mut paths = vec!["/configz", "/healthz", "/metrics", "/proxyMode"];
    if pages.flagz {
        paths.push("/flagz");
    }
    paths.sort_unstable();
    let paths = Arc::new(paths.into_iter().map(String::from).collect::<Vec<_>>());
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/slis", get(slis_get).delete(slis_reset))
        .route("/proxyMode", get(proxy_mode))
        .route("/configz", get(configz))
        .route("/healthz", get(ping))
        .route("/healthz/ping", get(ping_check));
    let router = if pages.flagz { router.route("/flagz", get(flagz)) } else { router };
    let router = if pages.statusz {
        router.route("/statusz", get(move |State(s): State<SharedState>, headers: axum::http::HeaderMap| statusz(s, headers, paths.clone())))
    } else {
        router
    };
    let router = if pages.profiling {
        router
            .route("/debug/pprof/", get(pprof_index))
            .route("/debug/pprof/profile", get(pprof_profile))
            .route("/debug/pprof/cmdline", get(pprof_cmdline))
    } else {
        router
    };
    router.with_state(state)
}

/// Binds and serves `router` until the process ends; returns the bound address.
pub async fn spawn(addr: SocketAddr, router: Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod endpoint_tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::schedule::Timing;

    fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn the_metrics_port_serves_what_kube_proxys_does() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let shared = Arc::new(Shared::new(Schedule::new(Timing::default())));
        let _ = shared.proxy_mode.set("ipvs".into());
        let _ = shared.configz.set(serde_json::json!({"mode": "ipvs"}));
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared.clone(), Pages::default()))).unwrap();
        let classic = get(addr, "/metrics", "text/plain;version=0.0.4");
        assert!(classic.contains("content-type: text/plain; version=0.0.4") && !classic.contains("# EOF"), "{classic}");
        let open = get(addr, "/metrics", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
        assert!(open.contains("application/openmetrics-text") && open.contains("# EOF"), "{open}");
        assert!(get(addr, "/proxyMode", "*/*").ends_with("\r\n\r\nipvs"));
        assert!(get(addr, "/configz", "*/*").contains("{\"kubeproxy.config.k8s.io\":{\"mode\":\"ipvs\"}}"));
        assert!(get(addr, "/healthz", "*/*").starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/healthz?verbose", "*/*").ends_with("\r\n\r\n[+]ping ok\nhealthz check passed\n"));
        assert!(get(addr, "/healthz/ping", "*/*").ends_with("\r\n\r\nok"));
        let slis = get(addr, "/metrics/slis", "text/plain");
        assert!(slis.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1"), "{slis}");
        assert!(slis.contains("kubernetes_healthchecks_total{name=\"ping\",type=\"healthz\",status=\"success\"} 2"), "{slis}");
        assert!(slis.contains("# TYPE kubernetes_healthchecks_total counter"), "classic text: {slis}");
        assert!(get(addr, "/debug/pprof/", "*/*").starts_with("HTTP/1.1 404"), "no profiling without --profiling");
    }

    /// The body after the headers.
    fn body(response: &str) -> &str {
        response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }

    #[test]
    fn statusz_and_flagz_as_kube_proxy_v1_37_serves_them() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let shared = Arc::new(Shared::new(Schedule::new(Timing::default())));
        let _ = shared.emulation_version.set("1.37".into());
        let _ = shared.flagz.set(vec![("proxy-mode".into(), "nftables".into()), ("cluster-cidr".into(), "[10.0.0.0/8]".into())]);
        let pages = Pages { statusz: true, flagz: true, ..Pages::default() };
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared.clone(), pages))).unwrap();

        // No Accept header: the text page, its delimiter one of apiserver's four.
        let text = request(addr, "GET", "/statusz");
        assert!(text.starts_with("HTTP/1.1 200") && text.contains("content-type: text/plain; charset=utf-8"), "{text}");
        let page = body(&text);
        assert!(page.starts_with("\nkube-proxy statusz\nWarning: This endpoint is not meant to be machine parseable"), "{page}");
        let line = |name: &str| page.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {page}")).to_string();
        let delim = ["=", ": ", ":", " "].into_iter().find(|d| line("Started").starts_with(&format!("Started{d} "))).expect("a delimiter");
        assert_eq!(line("Binary version"), format!("Binary version{delim} {}", env!("CARGO_PKG_VERSION")));
        assert_eq!(line("Emulation version"), format!("Emulation version{delim} 1.37"));
        assert_eq!(line("Paths"), format!("Paths{delim} /configz /flagz /healthz /metrics /proxyMode"));
        assert!(line("Up").ends_with(" sec") && line("Up").contains(" hr "), "{page}");

        // The structured form, asked for by kind, version and group.
        let json = get(addr, "/statusz", "application/json;as=Statusz;v=v1beta1;g=config.k8s.io");
        assert!(json.starts_with("HTTP/1.1 200") && json.contains("content-type: application/json;g=config.k8s.io;v=v1beta1;as=Statusz"), "{json}");
        let v: serde_json::Value = serde_json::from_str(body(&json)).unwrap();
        assert_eq!((v["kind"].as_str(), v["apiVersion"].as_str(), v["metadata"]["name"].as_str()), (Some("Statusz"), Some("config.k8s.io/v1beta1"), Some("kube-proxy")));
        assert_eq!(v["emulationVersion"], "1.37");
        assert!(v["startTime"].as_str().is_some_and(|t| t.ends_with('Z')) && v["uptimeSeconds"].is_u64(), "{v}");
        let old = get(addr, "/statusz", "application/json;as=Statusz;v=v1alpha1;g=config.k8s.io");
        assert!(old.contains("warning: 299 - \"This version of the statusz endpoint is deprecated."), "{old}");
        assert!(get(addr, "/statusz", "application/json").starts_with("HTTP/1.1 406"));
        assert!(get(addr, "/statusz", "application/vnd.kubernetes.protobuf").starts_with("HTTP/1.1 406"));

        let flags = request(addr, "GET", "/flagz");
        assert!(flags.starts_with("HTTP/1.1 200") && flags.contains("content-type: text/plain; charset=utf-8"), "{flags}");
        let page = body(&flags);
        assert!(page.starts_with("\nkube-proxy flagz\nWarning: "), "{page}");
        let rest: Vec<&str> = page.lines().skip(3).collect();
        assert_eq!(rest.len(), 2, "{page}");
        assert!(rest[0].starts_with("cluster-cidr") && rest[0].ends_with("[10.0.0.0/8]") && rest[1].starts_with("proxy-mode"), "sorted: {page}");
        let json = get(addr, "/flagz", "application/json;as=Flagz;v=v1beta1;g=config.k8s.io");
        let v: serde_json::Value = serde_json::from_str(body(&json)).unwrap();
        assert_eq!(v["flags"]["proxy-mode"], "nftables");

        // Each page goes with its gate.
        let off = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared.clone(), Pages::default()))).unwrap();
        assert!(request(off, "GET", "/statusz").starts_with("HTTP/1.1 404"));
        assert!(request(off, "GET", "/flagz").starts_with("HTTP/1.1 404"));
        let statusz_only = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared, Pages { statusz: true, ..Pages::default() }))).unwrap();
        assert!(request(statusz_only, "GET", "/flagz").starts_with("HTTP/1.1 404"));
        assert!(body(&request(statusz_only, "GET", "/statusz")).contains(" /configz /healthz /metrics /proxyMode\n"), "no /flagz listed");
    }

    fn request(addr: SocketAddr, method: &str, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_delete_resets_the_slis_and_profiling_serves_a_cpu_profile() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let shared = Arc::new(Shared::new(Schedule::new(Timing::default())));
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared.clone(), Pages { profiling: true, ..Pages::default() }))).unwrap();
        request(addr, "GET", "/healthz");
        assert!(request(addr, "DELETE", "/metrics/slis").ends_with("metrics reset\n"));
        assert!(!request(addr, "GET", "/metrics/slis").contains("name=\"ping\""));
        assert!(request(addr, "GET", "/debug/pprof/").contains("/debug/pprof/profile"));
        assert!(request(addr, "GET", "/debug/pprof/cmdline").starts_with("HTTP/1.1 200"));
        let profile = request(addr, "GET", "/debug/pprof/profile?seconds=1");
        assert!(profile.starts_with("HTTP/1.1 200") && profile.contains("application/octet-stream"), "{}", &profile[..profile.len().min(300)]);
        assert!(profile.contains("samples") && profile.contains("nanoseconds"), "the string table is in the body");
    }

    #[test]
    fn a_node_being_deleted_fails_healthz_but_not_livez() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let shared = Arc::new(Shared::new(Schedule::new(Timing::default())));
        {
            let mut s = shared.schedule.lock().unwrap();
            let now = Instant::now();
            s.set_ready(now);
            let kind = s.begin(now);
            s.done(now, now, kind, true);
        }
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), health_router(shared.clone()))).unwrap();
        assert!(get(addr, "/healthz", "*/*").starts_with("HTTP/1.1 200"));
        shared.node_deleting.store(true, std::sync::atomic::Ordering::SeqCst);
        let healthz = get(addr, "/healthz", "*/*");
        assert!(healthz.starts_with("HTTP/1.1 503") && healthz.contains("\"nodeEligible\": false"), "{healthz}");
        let livez = get(addr, "/livez", "*/*");
        assert!(livez.starts_with("HTTP/1.1 200") && !livez.contains("nodeEligible"), "{livez}");
        let text = shared.metrics.encode();
        assert!(text.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 1") && text.contains("kubeproxy_proxy_livez_total{code=\"200\"} 1"), "{text}");
    }
}

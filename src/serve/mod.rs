//! The HTTP endpoints of watch mode: `/healthz` and `/livez` on the health address, with
//! kube-proxy's semantics (unhealthy once a queued change has waited more than twice the
//! sync period; 503 before the first sync), and on the metrics address `/metrics`,
//! `/metrics/slis`, `/proxyMode`, `/configz`, a `/healthz` ping and, with `--profiling`,
//! `/debug/pprof/`, as kube-proxy's metrics port serves them.

pub mod healthcheck;
pub mod localhost_nodeports;
pub mod metrics;
pub mod nfacct;
pub mod process;
pub mod profiling;
pub mod slis;

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
}

impl Shared {
    pub fn new(schedule: Schedule) -> Self {
        Shared {
            schedule: Mutex::new(schedule),
            metrics: Metrics::new(),
            last_updated: Mutex::new(None),
            node_deleting: std::sync::atomic::AtomicBool::new(false),
            exit: Mutex::new(None),
            proxy_mode: std::sync::OnceLock::new(),
            configz: std::sync::OnceLock::new(),
            slis: slis::Slis::new(),
        }
    }
}

pub type SharedState = Arc<Shared>;

fn unix(t: Option<SystemTime>) -> f64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}

fn synced(s: &Shared) -> bool {
    s.schedule.lock().map(|sch| sch.is_ready() && sch.last_sync().is_some() && sch.healthy(Instant::now())).unwrap_or(false)
}

fn code_label(code: StatusCode) -> metrics::CodeLabel {
    metrics::CodeLabel { code: code.as_u16().to_string() }
}

/// `/healthz`: synced, and this node not being deleted (load balancers drain it).
async fn healthz(State(s): State<SharedState>) -> impl IntoResponse {
    let eligible = !s.node_deleting.load(std::sync::atomic::Ordering::SeqCst);
    let last = *s.last_updated.lock().unwrap_or_else(|e| e.into_inner());
    let body = format!(
        "{{\"lastUpdated\": \"{}\", \"currentTime\": \"{}\", \"nodeEligible\": {eligible}}}\n",
        unix(last),
        unix(Some(SystemTime::now()))
    );
    let code = if synced(&s) && eligible { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    s.metrics.healthz.get_or_create(&code_label(code)).inc();
    (code, [("content-type", "application/json"), ("x-content-type-options", "nosniff")], body)
}

/// `/livez`: synced only. A node being deleted keeps the proxy alive (kube-proxy's livez
/// ignores node eligibility, so the kubelet does not restart it while it drains).
async fn livez(State(s): State<SharedState>) -> impl IntoResponse {
    let last = *s.last_updated.lock().unwrap_or_else(|e| e.into_inner());
    let body = format!("{{\"lastUpdated\": \"{}\", \"currentTime\": \"{}\"}}\n", unix(last), unix(Some(SystemTime::now())));
    let code = if synced(&s) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    s.metrics.livez.get_or_create(&code_label(code)).inc();
    (code, [("content-type", "application/json"), ("x-content-type-options", "nosniff")], body)
}

/// OpenMetrics when the scraper accepts it, the classic text format otherwise, as the
/// Prometheus client libraries negotiate.
fn negotiated(headers: &axum::http::HeaderMap, open: String) -> impl IntoResponse {
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
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

pub fn health_router(state: SharedState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(livez)).with_state(state)
}

/// The metrics port without profiling.
pub fn metrics_router(state: SharedState) -> Router {
    metrics_router_with(state, false)
}

/// The metrics port; `profiling` (`--profiling`) adds `/debug/pprof/`.
pub fn metrics_router_with(state: SharedState, profiling: bool) -> Router {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/metrics/slis", get(slis_get).delete(slis_reset))
        .route("/proxyMode", get(proxy_mode))
        .route("/configz", get(configz))
        .route("/healthz", get(ping))
        .route("/healthz/ping", get(ping_check));
    let router = if profiling {
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
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router(shared.clone()))).unwrap();
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
        let addr = rt.block_on(spawn("127.0.0.1:0".parse().unwrap(), metrics_router_with(shared.clone(), true))).unwrap();
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

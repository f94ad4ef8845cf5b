//! The HTTP endpoints of watch mode: `/healthz` and `/livez` on the health address, with
//! kube-proxy's semantics (unhealthy once a queued change has waited more than twice the
//! sync period; 503 before the first sync), and on the metrics address `/metrics`,
//! `/proxyMode`, `/configz` and a `/healthz` ping, as kube-proxy's metrics port serves them.

pub mod healthcheck;
pub mod metrics;
pub mod process;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

pub use metrics::Metrics;

use crate::runner::Schedule;

/// What the endpoints read; the runner updates it.
pub struct Shared {
    pub schedule: Mutex<Schedule>,
    pub metrics: Metrics,
    /// Wall-clock time of the last successful sync.
    pub last_updated: Mutex<Option<SystemTime>>,
    /// This node is being deleted: `/healthz` says so (load balancers drain it).
    pub node_deleting: std::sync::atomic::AtomicBool,
    /// The proxy mode, for `/proxyMode`.
    pub proxy_mode: std::sync::OnceLock<String>,
    /// The effective configuration, for `/configz`.
    pub configz: std::sync::OnceLock<serde_json::Value>,
}

impl Shared {
    pub fn new(schedule: Schedule) -> Self {
        Shared {
            schedule: Mutex::new(schedule),
            metrics: Metrics::new(),
            last_updated: Mutex::new(None),
            node_deleting: std::sync::atomic::AtomicBool::new(false),
            proxy_mode: std::sync::OnceLock::new(),
            configz: std::sync::OnceLock::new(),
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

/// `/metrics`, negotiated as the Prometheus client libraries do: OpenMetrics when the
/// scraper accepts it, the classic text format otherwise.
async fn metrics(State(s): State<SharedState>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
        (StatusCode::OK, [("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.encode())
    } else {
        (StatusCode::OK, [("content-type", "text/plain; version=0.0.4; charset=utf-8")], s.metrics.encode_classic())
    }
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

/// The metrics port's `/healthz`: a liveness ping (kube-proxy installs the plain healthz
/// handler there), not the proxy's sync health.
async fn ping() -> impl IntoResponse {
    (StatusCode::OK, [("content-type", "text/plain; charset=utf-8")], "ok")
}

pub fn health_router(state: SharedState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(livez)).with_state(state)
}

pub fn metrics_router(state: SharedState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/proxyMode", get(proxy_mode))
        .route("/configz", get(configz))
        .route("/healthz", get(ping))
        .with_state(state)
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
    use crate::runner::Timing;

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

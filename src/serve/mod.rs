//! The HTTP endpoints of watch mode: `/healthz` and `/livez` on the health address, with
//! kube-proxy's semantics (unhealthy once a queued change has waited more than twice the
//! sync period; 503 before the first sync), and `/metrics` on the metrics address.

pub mod healthcheck;
pub mod metrics;

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
}

impl Shared {
    pub fn new(schedule: Schedule) -> Self {
        Shared {
            schedule: Mutex::new(schedule),
            metrics: Metrics::new(),
            last_updated: Mutex::new(None),
            node_deleting: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

pub type SharedState = Arc<Shared>;

fn unix(t: Option<SystemTime>) -> f64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}

async fn healthz(State(s): State<SharedState>) -> impl IntoResponse {
    let synced = s.schedule.lock().map(|sch| sch.is_ready() && sch.last_sync().is_some() && sch.healthy(Instant::now())).unwrap_or(false);
    let eligible = !s.node_deleting.load(std::sync::atomic::Ordering::SeqCst);
    let last = *s.last_updated.lock().unwrap_or_else(|e| e.into_inner());
    let body = format!(
        "{{\"lastUpdated\": \"{}\", \"currentTime\": \"{}\", \"nodeEligible\": {eligible}}}\n",
        unix(last),
        unix(Some(SystemTime::now()))
    );
    let code = if synced && eligible { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, [("content-type", "application/json")], body)
}

async fn metrics(State(s): State<SharedState>) -> impl IntoResponse {
    (StatusCode::OK, [("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.encode())
}

pub fn health_router(state: SharedState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(healthz)).with_state(state)
}

pub fn metrics_router(state: SharedState) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(state)
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

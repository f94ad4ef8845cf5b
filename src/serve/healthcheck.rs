//! Per-service health-check node ports (kube-proxy's ServiceHealthServer): for every
//! LoadBalancer service with `externalTrafficPolicy: Local`, an HTTP server on its
//! `healthCheckNodePort` that answers 200 with the number of local endpoints when there
//! is at least one, 503 otherwise, so cloud load balancers send traffic only to nodes
//! that can serve it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::model::{EndpointsMap, NamespacedName, ServicePortMap};

/// Local endpoint counts per health-check port (computed from the committed maps).
pub fn local_counts(services: &ServicePortMap, endpoints: &EndpointsMap) -> BTreeMap<u16, (NamespacedName, usize)> {
    let mut out: BTreeMap<u16, (NamespacedName, usize)> = BTreeMap::new();
    for (name, svc) in services {
        if svc.health_check_node_port == 0 {
            continue;
        }
        let local = endpoints.get(name).map_or(0, |eps| eps.iter().filter(|e| e.is_local && (e.ready || (e.serving && e.terminating))).count());
        let entry = out.entry(svc.health_check_node_port).or_insert((name.service.clone(), 0));
        entry.1 = entry.1.max(local);
    }
    out
}

type Count = Arc<Mutex<(NamespacedName, usize)>>;

/// The running servers, one per port.
#[derive(Default)]
pub struct HealthServers {
    servers: BTreeMap<u16, (Count, tokio::task::JoinHandle<()>)>,
    pub bind: Option<IpAddr>,
}

async fn answer(count: Count) -> impl IntoResponse {
    let (svc, n) = count.lock().map(|c| c.clone()).unwrap_or((NamespacedName::new("", ""), 0));
    let body = format!(
        "{{\"service\":{{\"namespace\":\"{}\",\"name\":\"{}\"}},\"localEndpoints\":{n},\"serviceProxyHealthy\":true}}",
        svc.namespace, svc.name
    );
    let code = if n > 0 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, [("content-type", "application/json"), ("x-content-type-options", "nosniff")], body)
}

impl HealthServers {
    /// No servers yet; they will bind to `bind` (all addresses when `None`).
    pub fn new(bind: Option<IpAddr>) -> Self {
        HealthServers { servers: BTreeMap::new(), bind }
    }

    /// Starts, updates and stops servers to match `counts`. Needs a tokio runtime.
    pub async fn update(&mut self, counts: BTreeMap<u16, (NamespacedName, usize)>) {
        let stale: Vec<u16> = self.servers.keys().filter(|p| !counts.contains_key(p)).copied().collect();
        for port in stale {
            if let Some((_, task)) = self.servers.remove(&port) {
                task.abort();
            }
        }
        for (port, value) in counts {
            if let Some((count, _)) = self.servers.get(&port) {
                if let Ok(mut c) = count.lock() {
                    *c = value;
                }
                continue;
            }
            let count: Count = Arc::new(Mutex::new(value));
            let addr = SocketAddr::new(self.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), port);
            let c = count.clone();
            let router = Router::new().fallback(get(move || answer(c.clone())));
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    let task = tokio::spawn(async move {
                        let _ = axum::serve(listener, router).await;
                    });
                    self.servers.insert(port, (count, task));
                }
                Err(e) => tracing::error!(%addr, error = %e, "cannot serve a health-check node port"),
            }
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.servers.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn get(port: u16) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn answers_with_the_local_endpoint_count_and_follows_updates() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let mut hs = HealthServers::new(Some("127.0.0.1".parse().unwrap()));
        let port = free_port();
        let svc = NamespacedName::new("shop", "checkout");
        rt.block_on(hs.update([(port, (svc.clone(), 2))].into()));
        let r = get(port);
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains("\"localEndpoints\":2") && r.contains("\"name\":\"checkout\""), "{r}");
        rt.block_on(hs.update([(port, (svc, 0))].into()));
        assert!(get(port).starts_with("HTTP/1.1 503"));
        rt.block_on(hs.update(BTreeMap::new()));
        assert!(hs.ports().is_empty());
    }
}

//! Per-service health-check node ports (kube-proxy's ServiceHealthServer): for every
//! LoadBalancer service with `externalTrafficPolicy: Local`, an HTTP server on its
//! `healthCheckNodePort` that answers 200 with the number of local endpoints when there
//! is at least one, 503 otherwise, so cloud load balancers send traffic only to nodes
//! that can serve it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::config::Config;
use crate::model::{EndpointsMap, NamespacedName, ServicePortMap};
use crate::net::IpFamily;

/// Where kube-proxy's service health servers listen: every node address when
/// `nodePortAddresses` matches all (`[::]`, which Linux makes dual-stack, or `0.0.0.0` on
/// an IPv4-only node), else each node IP inside `nodePortAddresses` — never the healthz
/// address, so a load balancer probing the node IP reaches them.
pub fn bind_addresses(config: &Config) -> Vec<IpAddr> {
    let matches_all = config.families.iter().all(|f| config.node_port_cidrs(*f).is_empty());
    if matches_all {
        let any = if config.families.contains(&IpFamily::V6) { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
        return vec![any];
    }
    config.families.iter().flat_map(|f| config.node_port_ips(*f)).collect()
}

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

/// A health-check node port that could not listen on an address.
#[derive(Debug)]
pub struct ListenFailure {
    pub service: NamespacedName,
    pub addr: SocketAddr,
    pub error: std::io::Error,
}

/// The running servers: per port, its count and one listener per address.
#[derive(Default)]
pub struct HealthServers {
    servers: BTreeMap<u16, (Count, Vec<tokio::task::JoinHandle<()>>)>,
    pub binds: Vec<IpAddr>,
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
    /// No servers yet; each will listen on every address of `binds` ([`bind_addresses`]).
    pub fn new(binds: Vec<IpAddr>) -> Self {
        HealthServers { servers: BTreeMap::new(), binds }
    }

    /// Starts, updates and stops servers to match `counts`. Needs a tokio runtime. Returns
    /// each new port's first address that could not listen, with its service and error
    /// (kube-proxy records an Event for it); a port no address took is tried again next time.
    pub async fn update(&mut self, counts: BTreeMap<u16, (NamespacedName, usize)>) -> Vec<ListenFailure> {
        let mut failures = Vec::new();
        let stale: Vec<u16> = self.servers.keys().filter(|p| !counts.contains_key(p)).copied().collect();
        for port in stale {
            if let Some((_, tasks)) = self.servers.remove(&port) {
                tasks.iter().for_each(|t| t.abort());
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
            let mut tasks = Vec::new();
            for ip in &self.binds {
                let addr = SocketAddr::new(*ip, port);
                let c = count.clone();
                let router = Router::new().fallback(get(move || answer(c.clone())));
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(listener) => tasks.push(tokio::spawn(async move {
                        let _ = axum::serve(listener, router).await;
                    })),
                    Err(error) => {
                        tracing::error!(%addr, %error, "cannot serve a health-check node port");
                        if !failures.iter().any(|f: &ListenFailure| f.addr.port() == port) {
                            let service = count.lock().map(|c| c.0.clone()).unwrap_or_else(|_| NamespacedName::new("", ""));
                            failures.push(ListenFailure { service, addr, error });
                        }
                    }
                }
            }
            if !tasks.is_empty() {
                self.servers.insert(port, (count, tasks));
            }
        }
        failures
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

    fn config(s: crate::config::Settings) -> Config {
        crate::pipeline::load(crate::source::ClusterState::default(), s, crate::config::Settings::default()).unwrap().config
    }

    #[test]
    fn health_ports_listen_on_node_port_addresses_never_on_the_healthz_address() {
        let base = crate::config::Settings {
            hostname_override: Some("n1".into()),
            node_ips: Some(vec!["198.19.1.1".into()]),
            healthz_bind_address: Some("127.0.0.1:10256".into()),
            ..Default::default()
        };
        assert_eq!(bind_addresses(&config(base.clone())), vec!["0.0.0.0".parse::<IpAddr>().unwrap()], "all addresses by default");
        let primary = crate::config::Settings { node_port_addresses: Some(vec!["primary".into()]), ..base.clone() };
        assert_eq!(bind_addresses(&config(primary)), vec!["198.19.1.1".parse::<IpAddr>().unwrap()]);
        let dual = crate::config::Settings { node_ips: Some(vec!["198.19.1.1".into(), "fd00::1".into()]), ..base };
        assert_eq!(bind_addresses(&config(dual)), vec!["::".parse::<IpAddr>().unwrap()], "one dual-stack socket");
    }

    #[test]
    fn answers_with_the_local_endpoint_count_and_follows_updates() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let mut hs = HealthServers::new(vec!["127.0.0.1".parse().unwrap()]);
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

    #[test]
    fn a_port_taken_is_reported_and_tried_again() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let mut hs = HealthServers::new(vec!["127.0.0.1".parse().unwrap()]);
        let svc = NamespacedName::new("shop", "checkout");
        for _ in 0..2 {
            let failures = rt.block_on(hs.update([(port, (svc.clone(), 1))].into()));
            assert_eq!(failures.len(), 1, "each update tries the port again");
            assert_eq!((&failures[0].service, failures[0].addr.port()), (&svc, port));
            assert_eq!(failures[0].error.kind(), std::io::ErrorKind::AddrInUse);
        }
        drop(taken);
        assert!(rt.block_on(hs.update([(port, (svc, 1))].into())).is_empty(), "once free, it listens");
        assert_eq!(hs.ports(), vec![port]);
    }
}

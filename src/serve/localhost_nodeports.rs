//! kube-proxy v1.37's localhost NodePort proxy (`pkg/proxy/localnodeportproxy`, the
//! `KubeProxyNFTablesLocalhostNodePorts` gate in nftables mode): nftables cannot DNAT a
//! packet to 127.0.0.1 or ::1 as iptables mode does with `route_localnet`, so each TCP
//! NodePort is served on the family's loopback address (`127.0.0.1:NODEPORT`,
//! `[::1]:NODEPORT`) by a listener that copies each connection to one of the service's
//! endpoints. kube-proxy runs it only in a family whose `nodePortAddresses` names loopback;
//! the other localhost NodePorts are rejected and counted by the rules
//! (`nftables::render::fixed`), and [`RejectedCollector`] reports those counts.
//!
//! As kube-proxy: the endpoints are the Cluster-policy ones (the node-local ones with
//! `externalTrafficPolicy: Local`), a port with none has no listener, an endpoint is
//! picked at random per connection, or with ClientIP affinity the one pinned until it has
//! been idle for the affinity timeout (all connections come from loopback, so one pin per
//! listener); a dial that fails (5 s) closes the connection; a listener that cannot bind
//! is counted and retried at the next sync; a listener removed closes its connections.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::metrics::FamilyLabel;
use crate::model::{EndpointsMap, Protocol, ServicePortMap};
use crate::net::IpFamily;
use crate::nftables::model::NftFamily;
use crate::select::{categorize, Locality};

/// How long a connection to an endpoint may take (kube-proxy's `dialTimeout`).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// One TCP NodePort to serve on loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub port: u16,
    pub endpoints: Vec<SocketAddr>,
    /// ClientIP affinity's timeout.
    pub affinity: Option<Duration>,
}

/// The TCP NodePorts with endpoints, from one family's committed maps (kube-proxy's
/// `NodePortSpec`s of a sync; a port with no endpoint gets no listener).
pub fn specs(services: &ServicePortMap, endpoints: &EndpointsMap, here: Locality) -> Vec<Spec> {
    let mut out = Vec::new();
    for (name, svc) in services {
        if svc.node_port == 0 || svc.protocol != Protocol::Tcp {
            continue;
        }
        let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or_default();
        let cat = categorize(eps, svc, here);
        let chosen = if svc.external_policy_local { &cat.local } else { &cat.cluster };
        if chosen.is_empty() {
            continue;
        }
        let endpoints = chosen.iter().map(|e| SocketAddr::new(e.ip, e.port)).collect();
        out.push(Spec { port: svc.node_port, endpoints, affinity: svc.session_affinity.map(|s| Duration::from_secs(u64::from(s))) });
    }
    out
}

/// The proxy's two metric families (registered in nftables mode, as kube-proxy does).
#[derive(Clone, Debug, Default)]
pub struct ProxyMetrics {
    /// `kubeproxy_nftables_localhost_nodeport_listeners{ip_family}`.
    pub listeners: Family<FamilyLabel, Gauge>,
    /// `kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family}`.
    pub creation_failures: Family<FamilyLabel, Counter>,
}

/// Which endpoint the next connection goes to.
#[derive(Debug)]
struct Pick {
    endpoints: Vec<SocketAddr>,
    affinity: Option<Duration>,
    pinned: Option<(SocketAddr, Instant)>,
}

impl Pick {
    fn next(&mut self, now: Instant) -> Option<SocketAddr> {
        if self.endpoints.is_empty() {
            return None;
        }
        if let (Some(timeout), Some((ep, used))) = (self.affinity, self.pinned) {
            if now.duration_since(used) <= timeout && self.endpoints.contains(&ep) {
                self.pinned = Some((ep, now));
                return Some(ep);
            }
        }
        let ep = self.endpoints[random_below(self.endpoints.len())];
        if self.affinity.is_some() {
            self.pinned = Some((ep, now));
        }
        Some(ep)
    }

    fn update(&mut self, spec: &Spec) {
        self.endpoints.clone_from(&spec.endpoints);
        if self.affinity != spec.affinity {
            // The affinity changed: the pin goes.
            self.pinned = None;
            self.affinity = spec.affinity;
        }
    }
}

/// A uniformly random index below `n` (`n` > 0), from std's randomly keyed hasher.
fn random_below(n: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    (h.finish() % n as u64) as usize
}

struct Listener {
    pick: Arc<Mutex<Pick>>,
    /// Accepts, and owns the connections' tasks: aborted, it closes them all.
    task: tokio::task::JoinHandle<()>,
}

/// One family's listeners, by NodePort.
pub struct Proxies {
    family: IpFamily,
    listen: IpAddr,
    active: BTreeMap<u16, Listener>,
    metrics: ProxyMetrics,
}

impl Proxies {
    /// No listeners yet; they will listen on `family`'s loopback address.
    pub fn new(family: IpFamily, metrics: ProxyMetrics) -> Self {
        Proxies { family, listen: family.loopback(), active: BTreeMap::new(), metrics }
    }

    fn label(&self) -> FamilyLabel {
        FamilyLabel::of(self.family)
    }

    /// Starts, updates and stops listeners to match `desired` (kube-proxy's
    /// `SyncNodePorts`); sets the listener gauge. Needs a tokio runtime.
    pub fn update(&mut self, desired: &[Spec]) {
        let wanted: BTreeMap<u16, &Spec> = desired.iter().filter(|s| !s.endpoints.is_empty()).map(|s| (s.port, s)).collect();
        let stale: Vec<u16> = self.active.keys().filter(|p| !wanted.contains_key(p)).copied().collect();
        for port in stale {
            if let Some(l) = self.active.remove(&port) {
                tracing::debug!(port, family = self.family.api_name(), "localhost NodePort listener removed");
                l.task.abort();
            }
        }
        for (port, spec) in wanted {
            if let Some(l) = self.active.get(&port) {
                l.pick.lock().unwrap_or_else(|e| e.into_inner()).update(spec);
                continue;
            }
            match self.listen_on(spec) {
                Ok(l) => {
                    tracing::debug!(port, family = self.family.api_name(), endpoints = spec.endpoints.len(), "localhost NodePort listener created");
                    self.active.insert(port, l);
                }
                Err(e) => {
                    tracing::error!(port, family = self.family.api_name(), error = %e, "cannot listen for a localhost NodePort");
                    self.metrics.creation_failures.get_or_create(&self.label()).inc();
                }
            }
        }
        self.metrics.listeners.get_or_create(&self.label()).set(self.active.len() as i64);
    }

    fn listen_on(&self, spec: &Spec) -> std::io::Result<Listener> {
        let addr = SocketAddr::new(self.listen, spec.port);
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let pick = Arc::new(Mutex::new(Pick { endpoints: spec.endpoints.clone(), affinity: spec.affinity, pinned: None }));
        let task = tokio::spawn(accept_loop(listener, pick.clone()));
        Ok(Listener { pick, task })
    }

    pub fn family(&self) -> IpFamily {
        self.family
    }

    /// The NodePorts listened on.
    pub fn ports(&self) -> Vec<u16> {
        self.active.keys().copied().collect()
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        self.active.values().for_each(|l| l.task.abort());
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, pick: Arc<Mutex<Pick>>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let ep = pick.lock().unwrap_or_else(|e| e.into_inner()).next(Instant::now());
                    if let Some(ep) = ep {
                        conns.spawn(relay(client, ep));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept on a localhost NodePort failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Copies both ways between the client and the endpoint, each side's end passed on.
async fn relay(client: tokio::net::TcpStream, ep: SocketAddr) {
    let backend = match tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(ep)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(endpoint = %ep, error = %e, "a localhost NodePort's endpoint refused the connection");
            return;
        }
        Err(_) => {
            tracing::warn!(endpoint = %ep, "a localhost NodePort's endpoint did not answer in 5s");
            return;
        }
    };
    let (client_in, client_out) = client.into_split();
    let (backend_in, backend_out) = backend.into_split();
    let _ = tokio::join!(pipe(client_in, backend_out), pipe(backend_in, client_out));
}

/// Copies `from` to `to` until `from` ends; dropping `to` then shuts its write side down,
/// so the other peer sees the end (tokio's `net` feature alone: no `io-util`).
async fn pipe(from: tokio::net::tcp::OwnedReadHalf, to: tokio::net::tcp::OwnedWriteHalf) -> std::io::Result<()> {
    use std::io::ErrorKind::WouldBlock;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        from.readable().await?;
        let n = match from.try_read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut off = 0;
        while off < n {
            to.writable().await?;
            match to.try_write(&buf[off..n]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads one family's named counters of the `kube-proxy` table (`Ok(None)`: no table).
pub type CounterReader = fn(crate::net::IpFamily) -> std::io::Result<Option<Vec<(String, u64)>>>;

/// `kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family,protocol}`: at
/// each scrape, the packets of each family's `localhost-nodeport-rejected-P` counter. A
/// family whose table or counters cannot be read gives no sample (as kube-proxy's
/// collector); so, with the gate off, the family has none.
#[derive(Debug)]
pub struct RejectedCollector {
    read: CounterReader,
}

pub const REJECTED_FAMILY: &str = "kubeproxy_nftables_localhost_nodeport_rejected_packets";
pub const REJECTED_HELP: &str = "Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running";

impl RejectedCollector {
    /// Reads the kernel's counters over netlink.
    pub fn kernel() -> Self {
        RejectedCollector {
            read: |family| crate::nftables::netlink::read_counters(family).map_err(|e| std::io::Error::other(e.to_string())),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct RejectedLabels {
    ip_family: String,
    protocol: String,
}

impl Collector for RejectedCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut samples = Vec::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let counters = match (self.read)(family) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!(family = family.nft_word(), error = %e, "cannot read the kube-proxy table's counters; no sample");
                    continue;
                }
            };
            for (name, packets) in counters {
                let Some(proto) = name.strip_prefix("localhost-nodeport-rejected-") else { continue };
                let labels = RejectedLabels { ip_family: family.api_name().to_owned(), protocol: proto.to_uppercase() };
                samples.push((labels, packets));
            }
        }
        if samples.is_empty() {
            return Ok(());
        }
        let mut metric = encoder.encode_descriptor(REJECTED_FAMILY, REJECTED_HELP, None, prometheus_client::metrics::MetricType::Counter)?;
        for (labels, packets) in samples {
            let c = ConstCounter::new(packets);
            c.encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// A server on 127.0.0.1 answering each connection with `reply` after reading to EOF.
    fn server(reply: &'static str) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            for s in l.incoming().take(8) {
                let Ok(mut s) = s else { return };
                let mut got = String::new();
                let _ = s.read_to_string(&mut got);
                let _ = write!(s, "{reply}:{got}");
            }
        });
        (addr, t)
    }

    fn ask(port: u16, what: &str) -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(what.as_bytes())?;
        s.shutdown(std::net::Shutdown::Write)?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    #[test]
    fn a_listener_relays_to_its_endpoint_follows_updates_and_goes() {
        let rt = runtime();
        let _g = rt.enter();
        let metrics = ProxyMetrics::default();
        let mut p = Proxies::new(IpFamily::V4, metrics.clone());
        let (a, _ta) = server("a");
        let (b, _tb) = server("b");
        let port = free_port();
        p.update(&[Spec { port, endpoints: vec![a], affinity: None }]);
        assert_eq!(p.ports(), [port]);
        assert_eq!(ask(port, "hello").unwrap(), "a:hello", "both ways, each end passed on");
        p.update(&[Spec { port, endpoints: vec![b], affinity: None }]);
        assert_eq!(ask(port, "again").unwrap(), "b:again", "the same listener, its endpoints updated");
        let label = FamilyLabel { ip_family: "IPv4".into() };
        assert_eq!(metrics.listeners.get_or_create(&label).get(), 1);
        p.update(&[Spec { port, endpoints: vec![], affinity: None }]);
        assert!(p.ports().is_empty(), "no endpoints, no listener");
        assert_eq!(metrics.listeners.get_or_create(&label).get(), 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(Instant::now() < deadline, "the port still accepts");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_port_that_cannot_be_bound_is_counted_and_the_others_serve() {
        let rt = runtime();
        let _g = rt.enter();
        let metrics = ProxyMetrics::default();
        let mut p = Proxies::new(IpFamily::V4, metrics.clone());
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = taken.local_addr().unwrap().port();
        let (a, _ta) = server("a");
        let port = free_port();
        p.update(&[Spec { port: busy, endpoints: vec![a], affinity: None }, Spec { port, endpoints: vec![a], affinity: None }]);
        let label = FamilyLabel { ip_family: "IPv4".into() };
        assert_eq!(metrics.creation_failures.get_or_create(&label).get(), 1);
        assert_eq!(p.ports(), [port]);
        assert_eq!(ask(port, "x").unwrap(), "a:x");
    }

    #[test]
    fn a_failed_dial_closes_the_connection() {
        let rt = runtime();
        let _g = rt.enter();
        let mut p = Proxies::new(IpFamily::V4, ProxyMetrics::default());
        let dead = SocketAddr::new(IpFamily::V4.loopback(), free_port());
        let port = free_port();
        p.update(&[Spec { port, endpoints: vec![dead], affinity: None }]);
        assert_eq!(ask(port, "x").unwrap_or_default(), "", "accepted, then closed with nothing");
    }

    #[test]
    fn affinity_pins_one_endpoint_until_idle_for_the_timeout() {
        let (a, b): (SocketAddr, SocketAddr) = ("10.0.0.1:80".parse().unwrap(), "10.0.0.2:80".parse().unwrap());
        let t0 = Instant::now();
        let mut pick = Pick { endpoints: vec![a, b], affinity: Some(Duration::from_secs(10)), pinned: None };
        let first = pick.next(t0).unwrap();
        for i in 1..20 {
            assert_eq!(pick.next(t0 + Duration::from_secs(i)), Some(first), "used within the timeout: kept");
        }
        // The pinned endpoint leaves: another is picked.
        let other = if first == a { b } else { a };
        pick.update(&Spec { port: 1, endpoints: vec![other], affinity: Some(Duration::from_secs(10)) });
        assert_eq!(pick.next(t0 + Duration::from_secs(20)), Some(other));
        // Without affinity every endpoint is reached.
        let mut spread = Pick { endpoints: vec![a, b], affinity: None, pinned: None };
        let seen: std::collections::BTreeSet<SocketAddr> = (0..200).filter_map(|_| spread.next(t0)).collect();
        assert_eq!(seen.len(), 2);
        assert_eq!(Pick { endpoints: vec![], affinity: None, pinned: None }.next(t0), None);
    }

    #[test]
    fn specs_are_the_tcp_node_ports_with_their_policys_endpoints() {
        let state = crate::source::read_path(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/nftables-localhost-nodeports.yaml"))).unwrap();
        let loaded = crate::pipeline::load(state, crate::settings::Settings::default(), Default::default()).unwrap();
        let here = Locality { node_name: "node-1", zone: None };
        let v4 = loaded.trackers.families.iter().find(|t| t.family == IpFamily::V4).unwrap();
        let (s, e) = v4.view();
        assert_eq!(specs(s, e, here), [Spec { port: 30080, endpoints: vec!["10.244.1.10:8080".parse().unwrap()], affinity: None }], "UDP and SCTP get none");
        let v6 = loaded.trackers.families.iter().find(|t| t.family == IpFamily::V6).unwrap();
        let (s, e) = v6.view();
        assert_eq!(specs(s, e, here)[0].endpoints, ["[fd00:10:244:1::10]:8080".parse::<SocketAddr>().unwrap()]);
    }

    fn scrape(read: CounterReader) -> String {
        crate::serve::scrape(RejectedCollector { read })
    }

    #[test]
    fn rejected_packets_are_each_familys_counters_by_protocol() {
        let out = scrape(|f| {
            Ok(Some(match f {
                crate::net::IpFamily::V4 => vec![("localhost-nodeport-rejected-udp".into(), 7), ("localhost-nodeport-rejected-sctp".into(), 3), ("other".into(), 9)],
                crate::net::IpFamily::V6 => vec![("localhost-nodeport-rejected-tcp".into(), 2)],
            }))
        });
        assert!(out.contains(&format!("# TYPE {REJECTED_FAMILY} counter")), "{out}");
        assert!(out.contains(&format!("{REJECTED_FAMILY}_total{{ip_family=\"IPv4\",protocol=\"UDP\"}} 7\n")), "{out}");
        assert!(out.contains(&format!("{REJECTED_FAMILY}_total{{ip_family=\"IPv4\",protocol=\"SCTP\"}} 3\n")), "{out}");
        assert!(out.contains(&format!("{REJECTED_FAMILY}_total{{ip_family=\"IPv6\",protocol=\"TCP\"}} 2\n")), "{out}");
        assert!(!out.contains("} 9"), "{out}");
        let none = scrape(|_| Ok(None));
        assert!(!none.contains(REJECTED_FAMILY), "no table, no family: {none}");
    }
}

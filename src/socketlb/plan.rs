//! The wanted socket-LB entries of one IP family: per Service address and port a local
//! socket can name (the ClusterIP; external and load-balancer IPs, for traffic from this
//! node), the backends its `connect()` or `sendmsg()` goes to, chosen as the rules choose
//! (`select::categorize`, `wiring::Reach`: topology, traffic policies, the terminating
//! fallback, the short-circuit of local traffic to external addresses) and with
//! `ClientIP` session affinity's timeout. What the programs cannot do as the rules do
//! stays with the rules (no entry): see [`wanted`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::config::{Config, Mode};
use crate::net::IpFamily;
use crate::model::{port_entries, Endpoint, EndpointsMap, NamespacedName, Protocol, ServicePort, ServicePortMap};
use crate::netfilter::bpf::maps::ServiceKey;
use crate::select::{categorize, Locality};
use crate::wiring::Reach;

/// One Service port's wanted entry: its backends in slot order (`ip:port` order, as the
/// trackers keep them; none refuses `connect()`, as the rules' REJECT does), and its
/// `ClientIP` affinity timeout in seconds (`None`: no affinity).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub backends: Vec<SocketAddr>,
    pub affinity: Option<u32>,
}

/// A Service port without affinity.
impl From<Vec<SocketAddr>> for Entry {
    fn from(backends: Vec<SocketAddr>) -> Entry {
        Entry { backends, affinity: None }
    }
}

/// Per Service key, its wanted entry.
pub type Wanted = BTreeMap<ServiceKey, Entry>;

/// Where a local socket's traffic to a Service's external or load-balancer IP goes under
/// this node's rules, which depends on the mode and on the local-traffic detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum External {
    /// iptables and nftables modes with a detector: the node's traffic (`--src-type
    /// LOCAL`, `fib saddr type local`) and pods' (the detector) are short-circuited to
    /// the cluster endpoints, whatever `externalTrafficPolicy` says.
    ShortCircuit,
    /// iptables and nftables modes without a detector: with `externalTrafficPolicy:
    /// Local` the node's traffic is short-circuited but pods' is not, and the programs do
    /// not tell them apart, so such a Service's external addresses stay with the rules.
    NodeOnly,
    /// IPVS mode: the virtual server's real servers, for every source: the local
    /// endpoints for `Local`, or the cluster-wide ones when there are none here (so that
    /// local pods still reach the Service, as kube-proxy's IPVS proxier does).
    Policy,
}

impl External {
    pub fn of(mode: Mode, detector: bool) -> External {
        match (mode, detector) {
            (Mode::Ipvs, _) => External::Policy,
            (_, true) => External::ShortCircuit,
            (_, false) => External::NodeOnly,
        }
    }
}

/// What one family's plan depends on beside the trackers' maps.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub here: Locality<'a>,
    pub external: External,
}

impl<'a> Scope<'a> {
    /// One family's scope on the node `config` describes.
    pub fn of(config: &'a Config, family: IpFamily) -> Scope<'a> {
        let zone = config.node_labels.get(crate::model::LABEL_ZONE).map(String::as_str);
        Scope {
            here: Locality { node_name: &config.node_name, zone },
            external: External::of(config.mode, config.local_detector(family).is_some()),
        }
    }
}

/// The entries one family's committed maps want: each Service port's ClusterIP, then its
/// external IPs, then its load-balancer IPs (`ipMode: Proxy` ingresses are not among
/// them: the trackers leave those to the load balancer, as kube-proxy does). An address
/// and port two Services claim goes to the first by name (the rules' order between
/// Services is not defined either). Left to the rules, with no entry:
/// - SCTP (the hooks this step attaches see TCP and UDP sockets);
/// - an `internalTrafficPolicy: Local` Service with endpoints elsewhere only (the rules
///   drop that traffic; a refused connect would differ);
/// - external and load-balancer IPs with no endpoint to go to (the rules refuse such
///   traffic from pods but not from the node's own processes), those [`External`] leaves
///   to the rules, and load-balancer IPs with `loadBalancerSourceRanges` (the rules'
///   firewall decides on the packet's source address, which an unbound socket does not
///   have yet at `connect()`);
/// - NodePorts (a NodePort is any local address, or those of `nodePortAddresses`).
pub fn wanted(services: &ServicePortMap, endpoints: &EndpointsMap, scope: Scope) -> Wanted {
    let mut out = Wanted::new();
    for (name, svc) in services {
        add(&mut out, svc, endpoints.get(name).map(|e| &**e), scope);
    }
    out
}

/// [`wanted`] of one Service's ports alone (what a sync that changed it re-plans).
pub fn wanted_of(services: &ServicePortMap, endpoints: &EndpointsMap, scope: Scope, id: &NamespacedName) -> Wanted {
    let mut out = Wanted::new();
    for (name, svc) in port_entries(services, id) {
        add(&mut out, svc, endpoints.get(name).map(|e| &**e), scope);
    }
    out
}

/// One Service port's entries, the first claim of a key kept.
fn add(out: &mut Wanted, svc: &ServicePort, endpoints: Option<&Vec<Endpoint>>, scope: Scope) {
    if svc.protocol == Protocol::Sctp || svc.cluster_ip.is_unspecified() {
        return;
    }
    let none = Vec::new();
    let cat = categorize(endpoints.unwrap_or(&none), svc, scope.here);
    let reach = Reach::of(svc, &cat);
    let to = |list: &[&Endpoint]| -> Vec<SocketAddr> { list.iter().map(|e| SocketAddr::new(e.ip, e.port)).collect() };
    let mut put = |addr: IpAddr, backends: Vec<SocketAddr>| {
        let key = ServiceKey { addr, port: svc.port, proto: svc.protocol };
        out.entry(key).or_insert(Entry { backends, affinity: svc.session_affinity });
    };
    if reach.has_internal {
        put(svc.cluster_ip, to(if svc.internal_policy_local { &cat.local } else { &cat.cluster }));
    } else if !reach.has_endpoints {
        put(svc.cluster_ip, Vec::new());
    }
    let external = match (scope.external, svc.external_policy_local) {
        (External::Policy, true) if !cat.local.is_empty() => &cat.local,
        (External::NodeOnly, true) => return,
        _ => &cat.cluster,
    };
    if !reach.has_endpoints || external.is_empty() {
        return;
    }
    let backends = to(external);
    for ip in &svc.external_ips {
        put(*ip, backends.clone());
    }
    if svc.load_balancer_source_ranges.is_empty() {
        for ip in &svc.load_balancer_vips {
            put(*ip, backends.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::ServicePortName;

    const HERE: Scope = Scope { here: Locality { node_name: "n", zone: Some("z1") }, external: External::ShortCircuit };

    fn ep(ip: &str, local: bool, ready: bool, terminating: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 8080,
            is_local: local,
            ready,
            serving: ready || terminating,
            terminating,
            zone_hints: Default::default(),
            node_hints: Default::default(),
        }
    }

    fn name(n: &str, proto: Protocol) -> ServicePortName {
        ServicePortName { service: NamespacedName::new("ns", n), port: "p".into(), protocol: proto }
    }

    fn svc(n: &str, ip: &str, proto: Protocol) -> ServicePort {
        ServicePort::plain(name(n, proto), ip.parse().unwrap(), 80)
    }

    fn maps(list: Vec<(ServicePort, Vec<Endpoint>)>) -> (ServicePortMap, EndpointsMap) {
        let mut s = ServicePortMap::new();
        let mut e = EndpointsMap::new();
        for (svc, eps) in list {
            e.insert(svc.name.clone(), Arc::new(eps));
            s.insert(svc.name.clone(), Arc::new(svc));
        }
        (s, e)
    }

    fn key(ip: &str, proto: Protocol) -> ServiceKey {
        ServiceKey { addr: ip.parse().unwrap(), port: 80, proto }
    }

    fn addrs(v: &[&str]) -> Entry {
        v.iter().map(|a| format!("{a}:8080").parse().unwrap()).collect::<Vec<SocketAddr>>().into()
    }

    #[test]
    fn ready_endpoints_then_the_terminating_fallback_then_refusal() {
        let (s, e) = maps(vec![
            (svc("ready", "10.0.0.1", Protocol::Tcp), vec![ep("10.1.0.1", false, true, false), ep("10.1.0.2", false, false, true)]),
            (svc("draining", "10.0.0.2", Protocol::Udp), vec![ep("10.1.0.3", false, false, true), ep("10.1.0.4", false, false, false)]),
            (svc("empty", "10.0.0.3", Protocol::Tcp), vec![]),
        ]);
        let w = wanted(&s, &e, HERE);
        assert_eq!(w[&key("10.0.0.1", Protocol::Tcp)], addrs(&["10.1.0.1"]));
        assert_eq!(w[&key("10.0.0.2", Protocol::Udp)], addrs(&["10.1.0.3"]));
        assert_eq!(w[&key("10.0.0.3", Protocol::Tcp)], Entry::default());
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn internal_policy_local_uses_local_endpoints_and_leaves_none_here_to_the_rules() {
        let mut local = svc("local", "10.0.0.1", Protocol::Tcp);
        local.internal_policy_local = true;
        let mut elsewhere = svc("elsewhere", "10.0.0.2", Protocol::Tcp);
        elsewhere.internal_policy_local = true;
        let (s, e) = maps(vec![
            (local, vec![ep("10.1.0.1", false, true, false), ep("10.1.0.2", true, true, false)]),
            (elsewhere, vec![ep("10.1.0.3", false, true, false)]),
        ]);
        let w = wanted(&s, &e, HERE);
        assert_eq!(w[&key("10.0.0.1", Protocol::Tcp)], addrs(&["10.1.0.2"]));
        assert!(!w.contains_key(&key("10.0.0.2", Protocol::Tcp)), "the rules drop it; no entry: {w:?}");
    }

    #[test]
    fn topology_hints_narrow_as_the_rules_do() {
        let mut a = ep("10.1.0.1", false, true, false);
        a.zone_hints = ["z1".to_string()].into_iter().collect();
        let mut b = ep("10.1.0.2", false, true, false);
        b.zone_hints = ["z2".to_string()].into_iter().collect();
        let (s, e) = maps(vec![(svc("hinted", "10.0.0.1", Protocol::Tcp), vec![a, b])]);
        assert_eq!(wanted(&s, &e, HERE)[&key("10.0.0.1", Protocol::Tcp)], addrs(&["10.1.0.1"]));
    }

    #[test]
    fn sctp_and_headless_stay_with_the_rules() {
        let (s, e) = maps(vec![
            (svc("sctp", "10.0.0.1", Protocol::Sctp), vec![ep("10.1.0.1", false, true, false)]),
            (svc("headless", "0.0.0.0", Protocol::Tcp), vec![ep("10.1.0.1", false, true, false)]),
        ]);
        assert!(wanted(&s, &e, HERE).is_empty());
    }

    #[test]
    fn client_ip_affinity_carries_its_timeout_with_the_same_backends() {
        let mut sticky = svc("sticky", "10.0.0.2", Protocol::Tcp);
        sticky.session_affinity = Some(10800);
        let mut short = svc("short", "10.0.0.3", Protocol::Udp);
        short.session_affinity = Some(1);
        let eps = vec![ep("10.1.0.1", false, true, false), ep("10.1.0.2", false, true, false), ep("10.1.0.3", false, false, true)];
        let (s, e) = maps(vec![(sticky, eps.clone()), (short, eps), (svc("plain", "10.0.0.4", Protocol::Tcp), vec![])]);
        let w = wanted(&s, &e, HERE);
        let ready = addrs(&["10.1.0.1", "10.1.0.2"]).backends;
        assert_eq!(w[&key("10.0.0.2", Protocol::Tcp)], Entry { backends: ready.clone(), affinity: Some(10800) });
        assert_eq!(w[&key("10.0.0.3", Protocol::Udp)], Entry { backends: ready, affinity: Some(1) });
        assert_eq!(w[&key("10.0.0.4", Protocol::Tcp)].affinity, None);
    }

    #[test]
    fn one_services_ports_alone() {
        let (s, e) = maps(vec![
            (svc("a", "10.0.0.1", Protocol::Tcp), vec![ep("10.1.0.1", false, true, false)]),
            (svc("a", "10.0.0.1", Protocol::Udp), vec![ep("10.1.0.1", false, true, false)]),
            (svc("b", "10.0.0.2", Protocol::Tcp), vec![ep("10.1.0.2", false, true, false)]),
        ]);
        let a = wanted_of(&s, &e, HERE, &NamespacedName::new("ns", "a"));
        assert_eq!(a.keys().copied().collect::<Vec<_>>(), vec![key("10.0.0.1", Protocol::Tcp), key("10.0.0.1", Protocol::Udp)]);
        let all = wanted(&s, &e, HERE);
        assert!(a.iter().all(|(k, v)| all[k] == *v));
    }

    #[test]
    fn ipv6_cluster_ips_are_keys_of_their_own_family() {
        let (s, e) = maps(vec![(svc("six", "fd00::10", Protocol::Udp), vec![ep("fd00:1::2", false, true, false)])]);
        let w = wanted(&s, &e, HERE);
        assert_eq!(w[&key("fd00::10", Protocol::Udp)], Entry::from(vec!["[fd00:1::2]:8080".parse::<SocketAddr>().unwrap()]));
    }

    fn external(n: &str, etp_local: bool) -> ServicePort {
        let mut s = svc(n, "10.0.0.1", Protocol::Tcp);
        s.external_ips = vec!["198.51.100.1".parse().unwrap()];
        s.load_balancer_vips = vec!["203.0.113.1".parse().unwrap()];
        s.external_policy_local = etp_local;
        s
    }

    fn scope(external: External) -> Scope<'static> {
        Scope { external, ..HERE }
    }

    #[test]
    fn external_and_load_balancer_ips_take_the_cluster_endpoints_short_circuited() {
        let eps = vec![ep("10.1.0.1", false, true, false), ep("10.1.0.2", true, true, false)];
        for etp_local in [false, true] {
            let (s, e) = maps(vec![(external("ext", etp_local), eps.clone())]);
            let w = wanted(&s, &e, HERE);
            let all = addrs(&["10.1.0.1", "10.1.0.2"]);
            assert_eq!(w[&key("10.0.0.1", Protocol::Tcp)], all);
            assert_eq!(w[&key("198.51.100.1", Protocol::Tcp)], all, "ETP Local {etp_local}: local traffic is short-circuited");
            assert_eq!(w[&key("203.0.113.1", Protocol::Tcp)], all);
            assert_eq!(w.len(), 3);
        }
        // ETP Local with no local endpoint: the rules still short-circuit local traffic.
        let (s, e) = maps(vec![(external("ext", true), vec![ep("10.1.0.1", false, true, false)])]);
        assert_eq!(wanted(&s, &e, HERE)[&key("203.0.113.1", Protocol::Tcp)], addrs(&["10.1.0.1"]));
    }

    #[test]
    fn external_policy_follows_the_mode_and_the_detector() {
        let eps = vec![ep("10.1.0.1", false, true, false), ep("10.1.0.2", true, true, false)];
        let (s, e) = maps(vec![(external("local", true), eps.clone())]);
        let w = wanted(&s, &e, scope(External::NodeOnly));
        assert_eq!(w.keys().copied().collect::<Vec<_>>(), vec![key("10.0.0.1", Protocol::Tcp)], "pods' traffic would differ from the node's");
        let w = wanted(&s, &e, scope(External::Policy));
        assert_eq!(w[&key("198.51.100.1", Protocol::Tcp)], addrs(&["10.1.0.2"]), "IPVS: the local endpoints");
        assert_eq!(w[&key("10.0.0.1", Protocol::Tcp)], addrs(&["10.1.0.1", "10.1.0.2"]));
        let (s, e) = maps(vec![(external("remote", true), vec![ep("10.1.0.1", false, true, false)])]);
        let w = wanted(&s, &e, scope(External::Policy));
        assert_eq!(w[&key("198.51.100.1", Protocol::Tcp)], addrs(&["10.1.0.1"]), "IPVS with no local endpoint: the cluster-wide ones");
        let (s, e) = maps(vec![(external("cluster", false), eps)]);
        for ext in [External::NodeOnly, External::Policy] {
            assert_eq!(wanted(&s, &e, scope(ext))[&key("203.0.113.1", Protocol::Tcp)], addrs(&["10.1.0.1", "10.1.0.2"]));
        }
        assert_eq!(External::of(Mode::Ipvs, true), External::Policy);
        assert_eq!(External::of(Mode::Nftables, true), External::ShortCircuit);
        assert_eq!(External::of(Mode::Iptables, false), External::NodeOnly);
    }

    #[test]
    fn source_ranges_and_no_endpoints_leave_external_addresses_to_the_rules() {
        let mut fw = external("fw", false);
        fw.load_balancer_source_ranges = vec![crate::net::Cidr::parse_sloppy("192.0.2.0/24").unwrap()];
        let (s, e) = maps(vec![(fw, vec![ep("10.1.0.1", false, true, false)])]);
        let w = wanted(&s, &e, HERE);
        assert!(w.contains_key(&key("198.51.100.1", Protocol::Tcp)), "external IPs have no firewall");
        assert!(!w.contains_key(&key("203.0.113.1", Protocol::Tcp)), "the firewall decides by source: {w:?}");
        let (s, e) = maps(vec![(external("empty", false), vec![])]);
        let w = wanted(&s, &e, HERE);
        assert_eq!(w.keys().copied().collect::<Vec<_>>(), vec![key("10.0.0.1", Protocol::Tcp)], "the ClusterIP alone is refused");
        assert_eq!(w[&key("10.0.0.1", Protocol::Tcp)], Entry::default());
    }

    #[test]
    fn internal_policy_local_does_not_narrow_external_addresses() {
        let mut s1 = external("itp", false);
        s1.internal_policy_local = true;
        let (s, e) = maps(vec![(s1, vec![ep("10.1.0.1", false, true, false)])]);
        let w = wanted(&s, &e, HERE);
        assert!(!w.contains_key(&key("10.0.0.1", Protocol::Tcp)), "no local endpoint: the ClusterIP stays with the rules");
        assert_eq!(w[&key("198.51.100.1", Protocol::Tcp)], addrs(&["10.1.0.1"]));
    }

    #[test]
    fn an_address_two_services_claim_goes_to_the_first() {
        let a = external("a", false);
        let mut b = external("b", false);
        b.cluster_ip = "10.0.0.2".parse().unwrap();
        let (s, e) = maps(vec![(a, vec![ep("10.1.0.1", false, true, false)]), (b, vec![ep("10.1.0.2", false, true, false)])]);
        let w = wanted(&s, &e, HERE);
        assert_eq!(w[&key("198.51.100.1", Protocol::Tcp)], addrs(&["10.1.0.1"]));
        assert_eq!(w[&key("10.0.0.2", Protocol::Tcp)], addrs(&["10.1.0.2"]));
    }
}

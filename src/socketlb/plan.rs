//! The wanted socket-LB entries of one IP family: per Service port a local socket can
//! name, the backends its `connect()` or `sendmsg()` goes to, chosen as the rules choose
//! (`select::categorize`, `wiring::Reach`: topology, traffic policies, the terminating
//! fallback) and with `ClientIP` session affinity's timeout. What the programs cannot do
//! as the rules do stays with the rules (no entry): see [`wanted`].

use std::collections::BTreeMap;
use std::net::SocketAddr;

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

/// The entries one family's committed maps want. Left to the rules, with no entry:
/// - SCTP (the hooks this step attaches see TCP and UDP sockets);
/// - an `internalTrafficPolicy: Local` Service with endpoints elsewhere only (the rules
///   drop that traffic; a refused connect would differ);
/// - NodePorts, external and load-balancer IPs (ClusterIPs only in this step).
pub fn wanted(services: &ServicePortMap, endpoints: &EndpointsMap, here: Locality) -> Wanted {
    services.iter().filter_map(|(name, svc)| entry(svc, endpoints.get(name).map(|e| &**e), here)).collect()
}

/// [`wanted`] of one Service's ports alone (what a sync that changed it re-plans).
pub fn wanted_of(services: &ServicePortMap, endpoints: &EndpointsMap, here: Locality, id: &NamespacedName) -> Wanted {
    port_entries(services, id).filter_map(|(name, svc)| entry(svc, endpoints.get(name).map(|e| &**e), here)).collect()
}

/// One Service port's entry, or `None` when the rules keep it (see [`wanted`]).
fn entry(svc: &ServicePort, endpoints: Option<&Vec<Endpoint>>, here: Locality) -> Option<(ServiceKey, Entry)> {
    if svc.protocol == Protocol::Sctp || svc.cluster_ip.is_unspecified() {
        return None;
    }
    let none = Vec::new();
    let cat = categorize(endpoints.unwrap_or(&none), svc, here);
    let reach = Reach::of(svc, &cat);
    let backends: Vec<SocketAddr> = if reach.has_internal {
        let chosen = if svc.internal_policy_local { &cat.local } else { &cat.cluster };
        chosen.iter().map(|e| SocketAddr::new(e.ip, e.port)).collect()
    } else if reach.has_endpoints {
        return None;
    } else {
        Vec::new()
    };
    Some((ServiceKey { addr: svc.cluster_ip, port: svc.port, proto: svc.protocol }, Entry { backends, affinity: svc.session_affinity }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::ServicePortName;

    const HERE: Locality = Locality { node_name: "n", zone: Some("z1") };

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
        ServicePort {
            name: name(n, proto),
            cluster_ip: ip.parse().unwrap(),
            port: 80,
            protocol: proto,
            node_port: 0,
            external_ips: vec![],
            load_balancer_vips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity: None,
            health_check_node_port: 0,
            external_policy_local: false,
            internal_policy_local: false,
        }
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
}

use std::sync::Arc;

use super::*;
use crate::model::{Endpoint, NamespacedName, ServicePort, ServicePortName};
use crate::netfilter::ctnetlink::Tuple;

fn port(name: &str, proto: Protocol, cip: &str, port: u16, node_port: u16, ext: &[&str], lb: &[&str]) -> (ServicePortName, Arc<ServicePort>) {
    let spn = ServicePortName { service: NamespacedName::new("ns", name), port: "p".into(), protocol: proto };
    let sp = ServicePort {
        node_port,
        external_ips: ext.iter().map(|s| s.parse().unwrap()).collect(),
        load_balancer_vips: lb.iter().map(|s| s.parse().unwrap()).collect(),
        ..ServicePort::plain(spn.clone(), cip.parse().unwrap(), port)
    };
    (spn, Arc::new(sp))
}

fn ep(ip: &str, serving: bool) -> Endpoint {
    Endpoint { ip: ip.parse().unwrap(), port: 5353, is_local: false, ready: serving, serving, terminating: !serving, zone_hints: Default::default(), node_hints: Default::default() }
}

fn flow(dst: &str, dport: u16, reply_src: &str, proto: u8) -> Flow {
    let client: IpAddr = "198.18.0.9".parse().unwrap();
    let reply_src: IpAddr = reply_src.parse().unwrap();
    Flow {
        orig: Tuple { src: client, dst: dst.parse().unwrap(), proto, sport: 40000, dport },
        reply: Tuple { src: reply_src, dst: client, proto, sport: 5353, dport: 40000 },
        zone: 0,
        id: 1,
        status: 0,
        timeout: 30,
    }
}

fn targets() -> Targets {
    let dns = port("dns", Protocol::Udp, "198.19.0.10", 53, 30053, &["198.18.200.1"], &["198.18.201.1"]);
    let tcp = port("web", Protocol::Tcp, "198.19.0.20", 80, 30080, &[], &[]);
    let empty = port("empty", Protocol::Udp, "198.19.0.30", 53, 30030, &[], &[]);
    let terminating = port("term", Protocol::Udp, "198.19.0.40", 53, 0, &[], &[]);
    let services: ServicePortMap = [dns.clone(), tcp.clone(), empty.clone(), terminating.clone()].into_iter().collect();
    let endpoints: EndpointsMap = [
        (dns.0, Arc::new(vec![ep("198.18.1.2", true), ep("198.18.2.2", false)])),
        (tcp.0, Arc::new(vec![ep("198.18.1.2", true)])),
        // Serving but terminating counts as serving, as in kube-proxy.
        (terminating.0, Arc::new(vec![Endpoint { terminating: true, ready: false, ..ep("198.18.3.2", true) }])),
    ]
    .into_iter()
    .collect();
    Targets::new(&services, &endpoints)
}

#[test]
fn a_flow_to_a_service_address_is_stale_unless_a_serving_endpoint_answers_it() {
    let t = targets();
    let u = IPPROTO_UDP;
    for addr in ["198.19.0.10", "198.18.200.1", "198.18.201.1"] {
        assert!(!t.is_stale(&flow(addr, 53, "198.18.1.2", u)), "{addr}: served by its endpoint");
        assert!(t.is_stale(&flow(addr, 53, "198.18.2.2", u)), "{addr}: answered by a non-serving endpoint");
        assert!(t.is_stale(&flow(addr, 53, addr, u)), "{addr}: cached before any rule (not NATed)");
    }
    assert!(!t.is_stale(&flow("198.19.0.10", 54, "198.19.0.10", u)), "another port of the address is not the service's");
    assert!(!t.is_stale(&flow("198.19.0.40", 53, "198.18.3.2", u)), "a serving terminating endpoint keeps its flows");
    assert!(t.is_stale(&flow("198.19.0.40", 53, "198.19.0.40", u)));
}

#[test]
fn a_node_port_flow_on_any_address_is_stale_unless_an_endpoint_answers_it() {
    let t = targets();
    assert!(!t.is_stale(&flow("198.18.0.1", 30053, "198.18.1.2", IPPROTO_UDP)));
    assert!(t.is_stale(&flow("198.18.0.1", 30053, "198.18.0.1", IPPROTO_UDP)));
    assert!(t.is_stale(&flow("127.0.0.1", 30053, "198.18.9.9", IPPROTO_UDP)));
}

#[test]
fn tcp_services_keep_their_flows_and_udp_services_without_serving_endpoints_lose_all() {
    let t = targets();
    assert!(!t.is_stale(&flow("198.19.0.20", 80, "198.19.0.20", IPPROTO_UDP)), "the TCP service's port is no UDP target");
    assert!(!t.is_stale(&flow("198.19.0.10", 53, "198.19.0.10", 6)), "a TCP flow is never the reconciler's");
    // kube-proxy v1.37 (#139629): a flow DNATed to a pod that went never reaches the REJECT.
    assert!(t.is_stale(&flow("198.19.0.30", 53, "198.18.7.7", IPPROTO_UDP)), "no endpoints: every flow goes");
    assert!(t.is_stale(&flow("198.19.0.30", 53, "198.19.0.30", IPPROTO_UDP)));
    assert!(t.is_stale(&flow("198.18.0.1", 30030, "198.18.7.7", IPPROTO_UDP)));
    assert!(Targets::new(&ServicePortMap::new(), &EndpointsMap::new()).is_empty());
}

#[test]
fn two_ports_on_one_address_keep_the_flows_of_both() {
    let a = port("a", Protocol::Udp, "198.19.0.10", 53, 0, &[], &["198.18.201.1"]);
    let b = port("b", Protocol::Udp, "198.19.0.11", 53, 0, &[], &["198.18.201.1"]);
    let services: ServicePortMap = [a.clone(), b.clone()].into_iter().collect();
    let endpoints: EndpointsMap = [(a.0, Arc::new(vec![ep("198.18.1.2", true)])), (b.0, Arc::new(vec![ep("198.18.2.2", true)]))].into_iter().collect();
    let t = Targets::new(&services, &endpoints);
    assert!(!t.is_stale(&flow("198.18.201.1", 53, "198.18.1.2", IPPROTO_UDP)));
    assert!(!t.is_stale(&flow("198.18.201.1", 53, "198.18.2.2", IPPROTO_UDP)));
    assert!(t.is_stale(&flow("198.19.0.10", 53, "198.18.2.2", IPPROTO_UDP)), "the ClusterIP is a's alone");
}

#[test]
fn a_changed_services_flows_are_read_by_address_and_port_and_nodeport() {
    let dns = port("dns", Protocol::Udp, "198.19.0.10", 53, 30053, &["198.18.200.1"], &["198.18.201.1"]);
    let tcp = port("dns", Protocol::Tcp, "198.19.0.10", 53, 30054, &[], &[]);
    let other = port("other", Protocol::Udp, "198.19.0.20", 53, 0, &[], &[]);
    let services: ServicePortMap = [dns, tcp, other].into_iter().collect();
    let changed: std::collections::BTreeSet<NamespacedName> = [NamespacedName::new("ns", "dns")].into_iter().collect();
    let got = destinations(&services, &changed, 4).unwrap();
    let f = |dst: Option<&str>, dport| DumpFilter { proto: IPPROTO_UDP, dst: dst.map(|d| d.parse().unwrap()), dport: Some(dport) };
    assert_eq!(got, [f(Some("198.19.0.10"), 53), f(Some("198.18.201.1"), 53), f(Some("198.18.200.1"), 53), f(None, 30053)], "the UDP port's addresses and NodePort; not the TCP port's, not another service's");
    assert_eq!(destinations(&services, &changed, 3), None, "more than allowed: read everything instead");
}

#[test]
fn the_plan_of_the_ports_a_dump_reaches_judges_its_flows_as_the_whole_plan_does() {
    // A ClusterIP port equal to another service's NodePort, and a shared LB VIP.
    let a = port("a", Protocol::Udp, "198.19.0.10", 53, 30053, &[], &["198.18.201.1"]);
    let b = port("b", Protocol::Udp, "198.19.0.11", 30053, 0, &[], &["198.18.201.1"]);
    let c = port("c", Protocol::Udp, "198.19.0.12", 53, 0, &[], &[]);
    let services: ServicePortMap = [a.clone(), b.clone(), c.clone()].into_iter().collect();
    let endpoints: EndpointsMap = [(a.0, Arc::new(vec![ep("198.18.1.2", true)])), (b.0, Arc::new(vec![ep("198.18.2.2", true)])), (c.0, Arc::new(vec![ep("198.18.3.2", true)]))].into_iter().collect();
    let whole = Targets::new(&services, &endpoints);
    let changed: std::collections::BTreeSet<NamespacedName> = [NamespacedName::new("ns", "a")].into_iter().collect();
    let dumps = destinations(&services, &changed, 4).unwrap();
    let part = Targets::new(&reached_by(&services, &dumps), &endpoints);
    let dsts = ["198.19.0.10", "198.19.0.11", "198.18.201.1", "198.18.0.1"];
    let replies = ["198.18.1.2", "198.18.2.2", "198.18.3.2", "198.18.9.9", "198.19.0.10", "198.19.0.11"];
    let mut checked = 0;
    for dst in dsts {
        for dport in [53, 30053] {
            for reply in replies {
                let f = flow(dst, dport, reply, IPPROTO_UDP);
                if dumps.iter().any(|d| d.matches(&f)) {
                    assert_eq!(part.is_stale(&f), whole.is_stale(&f), "{dst}:{dport} answered by {reply}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 20, "{checked}");
}

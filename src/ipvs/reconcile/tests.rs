//! Sync sequences against the fake kernel: the op lists for add, change, remove,
//! graceful termination and a restart in the middle.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::*;
use crate::ipvs::netlink::{FakeIpvs, Ipvs};
use crate::ipvs::observe;
use crate::model::{NamespacedName, ServicePortName};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn owner() -> ServicePortName {
    ServicePortName { service: NamespacedName::new("ns", "svc"), port: "p".into(), protocol: Protocol::Tcp }
}

fn vs(addr: &str, proto: Protocol) -> VirtualServer {
    VirtualServer::new(ip(addr), 80, proto)
}

fn rs(addr: &str) -> RealServer {
    RealServer::new(ip(addr), 8080, 1)
}

fn wanted(services: &[(VirtualServer, &[&str])]) -> Wanted {
    let mut w = Wanted { scope: Scope { node_ips: [ip("192.168.0.2")].into(), ..Scope::default() }, ..Default::default() };
    for (v, reals) in services {
        let reals = reals.iter().map(|a| rs(a)).collect();
        w.services.insert(v.key(), Desired { vs: v.clone(), reals, owner: owner() });
        if !w.scope.node_ips.contains(&v.addr) {
            w.bound.insert(v.addr);
        }
    }
    w
}

/// A node: the fake kernel, kube-ipvs0's addresses and the process's grace memory.
struct Node {
    ipvs: FakeIpvs,
    bound: BTreeSet<IpAddr>,
    grace: Grace,
}

impl Node {
    fn new() -> Self {
        Node { ipvs: FakeIpvs::new(), bound: BTreeSet::new(), grace: Grace::new() }
    }

    fn sync(&mut self, w: &Wanted, now: u64) -> Changes {
        let observed = Observed { services: observe::services(&mut self.ipvs).unwrap(), bound: self.bound.clone() };
        let ch = diff(w, &observed, &self.grace, Timing { now_secs: now, grace_period_secs: 600 });
        self.bound.extend(ch.bind.iter().copied());
        let report = self.ipvs.apply(&ch.ops).unwrap();
        assert!(report.is_ok(), "{:?}", report.failed);
        for a in &ch.unbind {
            self.bound.remove(a);
        }
        self.grace = ch.terminating.clone();
        ch
    }
}

fn texts(ops: &[Op]) -> Vec<String> {
    ops.iter().map(|o| o.to_string()).collect()
}

#[test]
fn add_then_nothing() {
    let mut n = Node::new();
    let w = wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1", "10.244.0.2"])]);
    let ch = n.sync(&w, 0);
    assert_eq!(ch.bind, [ip("10.96.0.10")]);
    assert_eq!(texts(&ch.ops), [
        "add virtual server TCP 10.96.0.10:80 rr",
        "add real server 10.244.0.1:8080 weight 1 to TCP 10.96.0.10:80",
        "add real server 10.244.0.2:8080 weight 1 to TCP 10.96.0.10:80",
    ]);
    assert!(n.sync(&w, 1).is_empty());
}

#[test]
fn changed_endpoint_is_added_before_the_old_one_goes() {
    let mut n = Node::new();
    n.sync(&wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1", "10.244.0.2"])]), 0);
    let ch = n.sync(&wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1", "10.244.0.3"])]), 1);
    assert_eq!(texts(&ch.ops), [
        "add real server 10.244.0.3:8080 weight 1 to TCP 10.96.0.10:80",
        "delete real server 10.244.0.2:8080 from TCP 10.96.0.10:80",
    ]);
}

#[test]
fn service_change_updates_in_place() {
    let mut n = Node::new();
    n.sync(&wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1"])]), 0);
    let ch = n.sync(&wanted(&[(vs("10.96.0.10", Protocol::Tcp).scheduler("wrr").persistent(60), &["10.244.0.1"])]), 1);
    assert_eq!(texts(&ch.ops), ["update virtual server TCP 10.96.0.10:80 wrr persistent 60"]);
}

#[test]
fn removed_service_goes_after_new_ones_and_its_address_last() {
    let mut n = Node::new();
    n.sync(&wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1"])]), 0);
    let ch = n.sync(&wanted(&[(vs("10.96.0.11", Protocol::Tcp), &["10.244.0.1"])]), 1);
    assert_eq!(ch.bind, [ip("10.96.0.11")]);
    assert_eq!(texts(&ch.ops), [
        "add virtual server TCP 10.96.0.11:80 rr",
        "add real server 10.244.0.1:8080 weight 1 to TCP 10.96.0.11:80",
        "delete virtual server TCP 10.96.0.10:80",
    ]);
    assert_eq!(ch.unbind, [ip("10.96.0.10")]);
}

#[test]
fn graceful_termination_drains_tcp_then_deletes() {
    let mut n = Node::new();
    let v = vs("10.96.0.10", Protocol::Tcp);
    n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.2"])]), 0);
    n.ipvs.set_conns(v.key(), ip("10.244.0.2"), 8080, 3, 1);
    let ch = n.sync(&wanted(&[(v.clone(), &["10.244.0.1"])]), 10);
    assert_eq!(texts(&ch.ops), ["update real server 10.244.0.2:8080 weight 0 of TCP 10.96.0.10:80"]);
    assert_eq!(ch.terminating.len(), 1);
    // Still connected: nothing to do, and a dry run would report nothing.
    assert!(n.sync(&wanted(&[(v.clone(), &["10.244.0.1"])]), 20).is_empty());
    n.ipvs.set_conns(v.key(), ip("10.244.0.2"), 8080, 0, 0);
    let ch = n.sync(&wanted(&[(v.clone(), &["10.244.0.1"])]), 30);
    assert_eq!(texts(&ch.ops), ["delete real server 10.244.0.2:8080 from TCP 10.96.0.10:80"]);
    assert!(ch.terminating.is_empty());
}

#[test]
fn udp_and_sctp_are_deleted_at_once() {
    for proto in [Protocol::Udp, Protocol::Sctp] {
        let mut n = Node::new();
        let v = vs("10.96.0.10", proto);
        n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.2"])]), 0);
        n.ipvs.set_conns(v.key(), ip("10.244.0.2"), 8080, 5, 5);
        let ch = n.sync(&wanted(&[(v.clone(), &["10.244.0.1"])]), 1);
        assert_eq!(ch.ops, [Op::DelDest(v.clone(), rs("10.244.0.2"))]);
    }
}

#[test]
fn restart_in_the_middle_keeps_terminating_bounded_and_rewanted_comes_back() {
    let mut n = Node::new();
    let v = vs("10.96.0.10", Protocol::Tcp);
    n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.2", "10.244.0.3"])]), 0);
    n.ipvs.set_conns(v.key(), ip("10.244.0.2"), 8080, 1, 0);
    n.ipvs.set_conns(v.key(), ip("10.244.0.3"), 8080, 1, 0);
    n.sync(&wanted(&[(v.clone(), &["10.244.0.1"])]), 100);
    // The process restarts: its memory is gone, the kernel still has two weight-0 servers.
    n.grace.clear();
    let ch = n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.3"])]), 5000);
    assert_eq!(texts(&ch.ops), ["update real server 10.244.0.3:8080 weight 1 of TCP 10.96.0.10:80"]);
    assert_eq!(ch.terminating.keys().map(|k| k.1).collect::<Vec<_>>(), [ip("10.244.0.2")]);
    // Connections never drain: deleted once seen terminating for the grace period.
    assert!(n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.3"])]), 5599).is_empty());
    let ch = n.sync(&wanted(&[(v.clone(), &["10.244.0.1", "10.244.0.3"])]), 5600);
    assert_eq!(texts(&ch.ops), ["delete real server 10.244.0.2:8080 from TCP 10.96.0.10:80"]);
}

#[test]
fn only_our_virtual_servers_are_removed() {
    let foreign = vs("172.16.0.1", Protocol::Tcp);
    let ours_stale = vs("10.96.0.99", Protocol::Tcp);
    let node_port = VirtualServer::new(ip("192.168.0.2"), 30080, Protocol::Tcp);
    let node_other = VirtualServer::new(ip("192.168.0.2"), 8080, Protocol::Tcp);
    let excluded = vs("10.97.0.1", Protocol::Tcp);
    let mut n = Node::new();
    n.ipvs = FakeIpvs::with_state([foreign.clone(), ours_stale.clone(), node_port.clone(), node_other, excluded.clone()]
        .map(|v| (v, vec![rs("10.244.0.9")])));
    n.bound = [ip("10.96.0.99"), ip("10.97.0.1")].into();
    let mut w = wanted(&[(vs("10.96.0.10", Protocol::Tcp), &["10.244.0.1"])]);
    w.scope.exclude = vec![Cidr::parse_sloppy("10.97.0.0/16").unwrap()];
    let ch = n.sync(&w, 0);
    let deleted: Vec<String> =
        ch.ops.iter().filter(|o| matches!(o, Op::DelService(_))).map(|o| o.to_string()).collect();
    assert_eq!(deleted, ["delete virtual server TCP 10.96.0.99:80", "delete virtual server TCP 192.168.0.2:30080"]);
    assert_eq!(ch.unbind, [ip("10.96.0.99"), ip("10.97.0.1")]);
    assert!(matches!(ch.ops.last(), Some(Op::DelService(_))));
}

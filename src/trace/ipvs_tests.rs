//! The IPVS-mode tracer on planned clusters: every answer comes from kube-proxy's
//! IPVS-mode rules (walked with ipset membership) and the planned virtual servers.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use super::ipvs::{self, IpvsTrace, Table, Virtual};
use super::{Entry, Env, Packet, Sets};
use crate::config::Settings;
use crate::xtables::Dump;
use crate::ipvs::values::{Protocol, RealServer, ServiceKey, VirtualServer};
use crate::net::IpFamily;

struct Node {
    dump: Dump,
    sets: Sets,
    table: Table,
    env: Env,
}

fn node(fixture: &str, settings: Settings) -> Node {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(fixture);
    let state = crate::source::read_path(&path).unwrap();
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), ..settings };
    let loaded = crate::pipeline::load(state, flags, Settings::default()).unwrap();
    let plan = crate::ipvs::plan_all(&loaded.config, &loaded.trackers).into_iter().find(|p| p.family == IpFamily::V4).unwrap();
    let mut local_ips: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
    local_ips.extend(plan.bound.iter().copied());
    Node {
        dump: ipvs::rendered_rules(&plan),
        sets: Sets::from_plan(&plan),
        table: Table::from_plan(&plan),
        env: Env { local_ips, ..Env::default() },
    }
}

fn demo() -> Node {
    node("demo.yaml", Settings::default())
}

impl Node {
    fn trace(&self, src: &str, dst: &str, proto: &str, entry: Entry) -> IpvsTrace {
        let packet = Packet::to(src, dst, Protocol::from_name(proto).expect("a protocol"));
        ipvs::trace(&self.dump, &self.env, &self.sets, &self.table, packet, entry)
    }

    fn pod(&self, src: &str, dst: &str, proto: &str) -> IpvsTrace {
        self.trace(src, dst, proto, Entry::Prerouting)
    }

    /// Only this virtual server, with this scheduler and these real servers.
    fn with(mut self, key: ServiceKey, scheduler: &str, reals: &[(&str, u32)]) -> Node {
        let reals = reals.iter().map(|(ip, w)| RealServer::new(ip.parse().unwrap(), key.port, *w)).collect();
        let vs = VirtualServer::new(key.addr, key.port, key.protocol).scheduler(scheduler);
        self.table = Table::default();
        self.table.insert(Virtual { vs, reals, service: None });
        self
    }
}

/// (verdict, probability, masquerade) per outcome.
fn verdicts(t: &IpvsTrace) -> Vec<(String, Option<f64>, bool)> {
    t.outcomes.iter().map(|o| (o.verdict.to_string(), o.probability, o.masquerade)).collect()
}

fn v(verdict: &str, p: Option<f64>, masq: bool) -> (String, Option<f64>, bool) {
    (verdict.into(), p, masq)
}

fn dns() -> ServiceKey {
    ServiceKey { addr: "10.96.0.10".parse().unwrap(), port: 53, protocol: Protocol::Udp }
}

#[test]
fn a_pods_dns_query_goes_to_the_virtual_servers_real_servers_in_equal_shares() {
    let t = demo().pod("10.244.1.99", "10.96.0.10:53", "udp");
    assert_eq!(verdicts(&t), vec![v("10.244.1.5:53", Some(0.5), false), v("10.244.2.7:53", Some(0.5), false)]);
    let vs = &t.virtual_servers[0];
    assert_eq!((vs.protocol.lower(), vs.port, vs.scheduler.as_str()), ("udp", 53, "rr"));
    assert_eq!(vs.service.as_deref(), Some("kube-system/kube-dns:dns"));
    assert!(vs.persistence.is_none());
    let path = &t.outcomes[0].path;
    assert!(path.contains(&"ipvs -A -u 10.96.0.10:53 -s rr".to_string()), "{path:#?}");
    assert!(path.contains(&"ipvs -a -u 10.96.0.10:53 -r 10.244.1.5:53 -m -w 1".to_string()), "{path:#?}");
    assert!(path.iter().any(|s| s.contains("--match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT")));
    assert!(!path.iter().any(|s| s.contains("KUBE-SVC-") || s.contains("DNAT")), "no iptables-mode chains: {path:#?}");
    assert!(t.outcomes.iter().all(|o| o.notes.is_empty()));
}

#[test]
fn masquerade_comes_from_the_rules_ipsets_and_the_mark() {
    let d = demo();
    // A pod reaching itself through its service: KUBE-LOOP-BACK (dst,dst,src) in POSTROUTING.
    let t = d.pod("10.244.1.5", "10.96.0.10:53", "udp");
    assert_eq!(verdicts(&t), vec![v("10.244.1.5:53", Some(0.5), true), v("10.244.2.7:53", Some(0.5), false)]);
    assert!(t.outcomes[0].path.last().unwrap().contains("--match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE"));
    // Off-cluster source to a ClusterIP: KUBE-CLUSTER-IP with `! -s podCIDR` marks it.
    let t = d.pod("192.168.10.99", "10.96.0.1:443", "tcp");
    assert!(t.outcomes.iter().all(|o| o.masquerade && o.probability == Some(1.0 / 3.0)), "{:?}", verdicts(&t));
    // NodePort: masqueraded with externalTrafficPolicy Cluster, not with Local.
    let t = d.trace("203.0.113.9", "192.168.10.11:30080", "tcp", Entry::Prerouting);
    assert_eq!(verdicts(&t), vec![v("10.244.1.10:8080", Some(0.5), true), v("10.244.2.11:8080", Some(0.5), true)]);
    assert!(t.outcomes[0].path.iter().any(|s| s.contains("--match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ")));
    let t = d.trace("203.0.113.9", "192.168.10.11:31443", "tcp", Entry::Prerouting);
    assert_eq!(verdicts(&t), vec![v("10.244.1.20:8443", Some(1.0), false)]);
    // masqueradeAll: the ClusterIP rule marks pods' traffic too.
    let all = node("demo.yaml", Settings { masquerade_all: Some(true), ..Settings::default() });
    assert!(all.pod("10.244.1.99", "10.96.0.10:53", "udp").outcomes.iter().all(|o| o.masquerade));
}

#[test]
fn load_balancer_source_ranges_drop_before_ipvs_and_the_node_is_kept_out() {
    let d = demo();
    let t = d.trace("203.0.113.7", "192.0.2.50:443", "tcp", Entry::Prerouting);
    assert_eq!(verdicts(&t), vec![v("10.244.1.20:8443", Some(1.0), false)], "allowed, local endpoint, not masqueraded");
    let t = d.trace("192.0.2.200", "192.0.2.50:443", "tcp", Entry::Prerouting);
    assert_eq!(verdicts(&t), vec![v("DROP", Some(1.0), false)]);
    assert_eq!(t.outcomes[0].path.last().unwrap(), "filter -A KUBE-SOURCE-RANGES-FIREWALL -j DROP");
    assert!(t.outcomes[0].reason.contains("before it reaches IPVS virtual server TCP 192.0.2.50:443"), "{}", t.outcomes[0].reason);
    assert!(t.virtual_servers.is_empty(), "IPVS never sees it");
    // From the node, whose IP is outside the ranges, the VIP is its own source address:
    // KUBE-IPVS-OUT-FILTER (`-m ipvs --vaddr`) drops it after IPVS scheduled it.
    let t = d.trace("192.0.2.50", "192.0.2.50:443", "tcp", Entry::Output);
    assert_eq!(verdicts(&t), vec![v("DROP", Some(1.0), false)]);
    assert!(t.outcomes[0].path.last().unwrap().contains("KUBE-IPVS-OUT-FILTER -s 192.0.2.50 -m ipvs --vaddr 192.0.2.50"));
    assert_eq!(t.outcomes[0].virtual_server.as_deref(), Some("TCP 192.0.2.50:443"));
}

#[test]
fn service_addresses_without_a_virtual_server_are_refused_by_the_ipvs_filter() {
    let d = demo();
    let t = d.pod("10.244.1.99", "10.96.0.10:54", "tcp");
    assert_eq!(verdicts(&t), vec![v("REJECT", Some(1.0), false)]);
    assert!(t.outcomes[0].path.last().unwrap().contains("KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT"));
    assert!(t.outcomes[0].reason.contains("no IPVS virtual server for tcp 10.96.0.10:54"));
    // The health-check node port is for the node itself: accepted, no virtual server.
    let t = d.trace("203.0.113.7", "192.168.10.11:32100", "tcp", Entry::Prerouting);
    assert_eq!(verdicts(&t), vec![v("ACCEPT", Some(1.0), false)]);
    // Not a node address: routed on, not a service.
    let t = d.pod("10.244.1.99", "8.8.8.8:53", "udp");
    assert_eq!(verdicts(&t), vec![v("", Some(1.0), false)]);
    assert!(t.outcomes[0].reason.contains("routed on as addressed"));
}

#[test]
fn a_virtual_server_without_real_servers_is_refused_by_ipvs() {
    let d = node("no-endpoints-reject.yaml", Settings::default());
    for (dst, entry) in [("10.96.80.12:80", Entry::Prerouting), ("192.168.10.11:30443", Entry::Prerouting), ("10.96.80.13:443", Entry::Output)] {
        let t = d.trace("10.244.1.99", dst, "tcp", entry);
        assert_eq!(verdicts(&t), vec![v("REJECT", Some(1.0), false)], "{dst}");
        assert!(t.outcomes[0].reason.contains("has no real servers") && t.outcomes[0].reason.contains("ICMP port unreachable"));
        assert!(t.outcomes[0].virtual_server.is_some());
        assert!(t.virtual_servers[0].real_servers.is_empty());
    }
}

#[test]
fn a_match_the_tracer_cannot_decide_is_noted_and_not_taken() {
    let d = node("no-endpoints-reject.yaml", Settings::default());
    let t = d.trace("203.0.113.9", "198.51.100.80:80", "tcp", Entry::Prerouting);
    let notes = &t.outcomes[0].notes;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("--physdev-is-in") && notes[0].contains("taken as not matching"), "{notes:?}");
    // The next rule (the address is the node's) accepts it in nat all the same.
    assert!(t.outcomes[0].path.iter().any(|s| s.contains("-m addrtype --dst-type LOCAL -j ACCEPT")));
}

#[test]
fn weights_give_shares_only_where_the_scheduler_follows_them() {
    let reals = [("10.244.1.5", 3), ("10.244.2.7", 1), ("10.244.3.9", 0)];
    let t = demo().with(dns(), "wrr", &reals).pod("10.244.1.99", "10.96.0.10:53", "udp");
    assert_eq!(verdicts(&t), vec![v("10.244.1.5:53", Some(0.75), false), v("10.244.2.7:53", Some(0.25), false)]);
    let rs = &t.virtual_servers[0].real_servers;
    assert_eq!(rs.iter().map(|r| (r.share, r.draining)).collect::<Vec<_>>(), vec![(Some(0.75), false), (Some(0.25), false), (None, true)]);
    // rr takes turns: the weights only say who is in the rotation.
    let t = demo().with(dns(), "rr", &reals).pod("10.244.1.99", "10.96.0.10:53", "udp");
    assert_eq!(verdicts(&t), vec![v("10.244.1.5:53", Some(0.5), false), v("10.244.2.7:53", Some(0.5), false)]);
    // lc and sh pick by connections and by hash: no invented probability.
    for sched in ["lc", "sh"] {
        let t = demo().with(dns(), sched, &reals).pod("10.244.1.99", "10.96.0.10:53", "udp");
        assert_eq!(verdicts(&t), vec![v("10.244.1.5:53", None, false), v("10.244.2.7:53", None, false)], "{sched}");
        assert!(t.virtual_servers[0].selection.starts_with(sched));
    }
    // Only draining real servers: nothing to schedule.
    let t = demo().with(dns(), "rr", &[("10.244.1.5", 0)]).pod("10.244.1.99", "10.96.0.10:53", "udp");
    assert_eq!(verdicts(&t), vec![v("REJECT", Some(1.0), false)]);
    assert!(t.outcomes[0].reason.contains("only draining real servers"));
}

#[test]
fn clientip_affinity_is_the_virtual_servers_persistence() {
    let t = demo().pod("10.244.1.99", "10.100.50.5:80", "tcp");
    let p = t.virtual_servers[0].persistence.as_ref().unwrap();
    assert_eq!((p.timeout_seconds, p.netmask), (3600, 32));
    assert_eq!(t.virtual_servers[0].ipvsadm, "-A -t 10.100.50.5:80 -s rr -p 3600");
    assert_eq!(t.outcomes.len(), 2);
}

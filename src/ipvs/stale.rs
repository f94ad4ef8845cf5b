//! Stale UDP/SCTP conntrack flows in IPVS mode: which real servers each UDP or SCTP
//! virtual server reaches before a sync (read from the kernel) and after it (as planned;
//! as it was, for a virtual server svcproxy neither wants nor deletes), compared by
//! [`crate::netfilter::conntrack::stale_flows`]. A virtual server without real servers
//! drops its traffic, so it counts as refused: its first real server makes every flow
//! cached for the address stale. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::values::{Op, Protocol, RealServer, ServiceKey};
use super::reconcile::{Changes, Observed, Wanted};
use crate::netfilter::conntrack::{stale_flows, Flush, Reach, ServiceAddr};

/// The flushes a sync of `changes` (from `observed` towards `wanted`) calls for.
pub fn flows(observed: &Observed, wanted: &Wanted, changes: &Changes) -> Vec<Flush> {
    let deleted: BTreeSet<ServiceKey> =
        changes.ops.iter().filter_map(|op| if let Op::DelService(vs) = op { Some(vs.key()) } else { None }).collect();
    let mut before = BTreeMap::new();
    let mut after = BTreeMap::new();
    for (ovs, dests) in &observed.services {
        let key = ovs.vs.key();
        let Some(addr) = service_addr(&key) else { continue };
        let was = reach(dests.iter().map(|d| &d.rs));
        if let Some(d) = wanted.services.get(&key) {
            after.insert(addr.clone(), reach(d.reals.iter()));
        } else if !deleted.contains(&key) {
            after.insert(addr.clone(), was.clone());
        }
        before.insert(addr, was);
    }
    stale_flows(&before, &after)
}

/// The conntrack address of a UDP or SCTP virtual server (`None` for TCP: its flows end).
fn service_addr(key: &ServiceKey) -> Option<ServiceAddr> {
    if key.protocol == Protocol::Tcp {
        return None;
    }
    Some(ServiceAddr { protocol: key.protocol, ip: Some(key.addr), port: key.port })
}

fn reach<'a>(reals: impl Iterator<Item = &'a RealServer>) -> Reach {
    let endpoints: BTreeSet<_> = reals.map(|r| r.addr).collect();
    Reach { refused: endpoints.is_empty(), endpoints }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipvs::values::{ObservedRealServer, ObservedVirtualServer, VirtualServer};
    use crate::ipvs::plan::Desired;

    fn vs(ip: &str, protocol: Protocol) -> VirtualServer {
        VirtualServer::new(ip.parse().unwrap(), 53, protocol)
    }

    fn rs(ip: &str) -> RealServer {
        RealServer::new(ip.parse().unwrap(), 5353, 1)
    }

    fn observed(services: &[(VirtualServer, &[&str])]) -> Observed {
        let services = services
            .iter()
            .map(|(v, eps)| (ObservedVirtualServer { vs: v.clone(), stats: None }, eps.iter().map(|e| ObservedRealServer::idle(rs(e))).collect()))
            .collect();
        Observed { services, bound: BTreeSet::new() }
    }

    fn wanted(services: &[(VirtualServer, &[&str])]) -> Wanted {
        let mut w = Wanted::default();
        for (v, eps) in services {
            let service = crate::model::NamespacedName::new("kube-system", "kube-dns");
            let owner = crate::model::ServicePortName { service, port: "dns".into(), protocol: crate::model::Protocol::Udp };
            w.services.insert(v.key(), Desired { vs: v.clone(), reals: eps.iter().map(|e| rs(e)).collect(), owner });
        }
        w
    }

    fn args(flushes: &[Flush]) -> Vec<String> {
        flushes.iter().map(|f| f.args().join(" ")).collect()
    }

    #[test]
    fn a_udp_real_server_gone_is_stale_and_a_tcp_one_is_not() {
        let (udp, tcp) = (vs("10.96.0.10", Protocol::Udp), vs("10.96.0.10", Protocol::Tcp));
        let have = observed(&[(udp.clone(), &["10.244.1.5", "10.244.2.7"]), (tcp.clone(), &["10.244.1.5", "10.244.2.7"])]);
        let want = wanted(&[(udp, &["10.244.1.5"]), (tcp, &["10.244.1.5"])]);
        assert_eq!(args(&flows(&have, &want, &Changes::default())), ["-D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.2.7"]);
    }

    #[test]
    fn a_deleted_virtual_server_loses_every_real_server_and_one_left_alone_none() {
        let (gone, foreign) = (vs("10.96.0.10", Protocol::Sctp), vs("192.0.2.1", Protocol::Udp));
        let have = observed(&[(gone.clone(), &["10.244.1.5"]), (foreign, &["10.244.9.9"])]);
        let changes = Changes { ops: vec![Op::DelService(gone)], ..Changes::default() };
        assert_eq!(args(&flows(&have, &Wanted::default(), &changes)), ["-D -p sctp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5"]);
    }

    #[test]
    fn a_virtual_server_getting_its_first_real_server_has_every_flow_cleared() {
        let udp = vs("fd00::10", Protocol::Udp);
        let flushes = flows(&observed(&[(udp.clone(), &[])]), &wanted(&[(udp, &["fd00::1:5"])]), &Changes::default());
        assert_eq!(args(&flushes), ["-D -p udp --orig-dst fd00::10 --orig-port-dst 53"]);
    }
}

//! Which flows are stale, pure: kube-proxy v1.37's `CleanStaleEntries` rule. For every
//! UDP service port, a flow whose original destination is one of its addresses and port
//! (ClusterIP, external IPs, load-balancer IPs) or whose original destination port is its
//! NodePort (any address), and whose reply comes from no serving endpoint of it, is stale:
//! it was DNATed to an endpoint that went, or (reply source = the service address) cached
//! before any rule sent it anywhere. A port with no serving endpoint has every flow stale
//! (v1.37, #139629: its REJECT never sees packets a cached DNAT sends to a gone pod; v1.34
//! kept them). Traffic policies, topology and terminating state are not considered, as in
//! kube-proxy: changing a Service must not move its flows.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::model::{EndpointsMap, Protocol, ServicePortMap};
use crate::netfilter::ctnetlink::{wire::DumpFilter, wire::IPPROTO_UDP, Flow};

/// The serving endpoints of each UDP service address and NodePort of one family.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Targets {
    /// (address, port) → index into `sets`.
    addrs: HashMap<(IpAddr, u16), usize>,
    /// NodePort → index into `sets`.
    node_ports: HashMap<u16, usize>,
    /// Sorted serving endpoint addresses, one set per service port.
    sets: Vec<Vec<IpAddr>>,
}

impl Targets {
    /// From the trackers' committed maps of one family.
    pub fn new(services: &ServicePortMap, endpoints: &EndpointsMap) -> Self {
        let mut t = Targets::default();
        for (name, svc) in services {
            if svc.protocol != Protocol::Udp {
                continue;
            }
            let mut serving: Vec<IpAddr> = endpoints.get(name).map(|eps| eps.iter().filter(|e| e.serving).map(|e| e.ip).collect()).unwrap_or_default();
            serving.sort_unstable();
            serving.dedup();
            let set = t.sets.len();
            t.sets.push(serving);
            let addrs = std::iter::once(svc.cluster_ip).chain(svc.load_balancer_vips.iter().copied()).chain(svc.external_ips.iter().copied());
            for ip in addrs {
                t.insert_addr((ip, svc.port), set);
            }
            if svc.node_port != 0 {
                let set = t.joined(t.node_ports.get(&svc.node_port).copied(), set);
                t.node_ports.insert(svc.node_port, set);
            }
        }
        t
    }

    fn insert_addr(&mut self, key: (IpAddr, u16), set: usize) {
        let set = self.joined(self.addrs.get(&key).copied(), set);
        self.addrs.insert(key, set);
    }

    /// Two service ports on one address and port, or one NodePort (possible only by
    /// mistake, for a moment): a new set of both, so a flow to either's endpoints is kept
    /// there (kube-proxy keeps whichever its map iterated last) and nowhere else.
    fn joined(&mut self, other: Option<usize>, set: usize) -> usize {
        match other {
            Some(o) if o != set => {
                let mut both: Vec<IpAddr> = self.sets[o].iter().chain(&self.sets[set]).copied().collect();
                both.sort_unstable();
                both.dedup();
                self.sets.push(both);
                self.sets.len() - 1
            }
            _ => set,
        }
    }

    /// Whether there is no UDP service port (nothing can be stale).
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// Whether kube-proxy's reconciler deletes this flow.
    pub fn is_stale(&self, flow: &Flow) -> bool {
        if flow.orig.proto != IPPROTO_UDP {
            return false;
        }
        let not_serving = |set: usize| self.sets[set].binary_search(&flow.reply.src).is_err();
        self.addrs.get(&(flow.orig.dst, flow.orig.dport)).is_some_and(|&s| not_serving(s))
            || self.node_ports.get(&flow.orig.dport).is_some_and(|&s| not_serving(s))
    }
}

/// The dumps that read the flows of `changed` services' UDP ports: one per service
/// address and port, one per NodePort (any address); `None` when more than `at_most`.
pub fn destinations(services: &ServicePortMap, changed: &std::collections::BTreeSet<crate::model::NamespacedName>, at_most: usize) -> Option<Vec<DumpFilter>> {
    let mut out: Vec<DumpFilter> = Vec::new();
    let mut add = |f: DumpFilter| {
        if !out.contains(&f) {
            out.push(f);
        }
    };
    for svc in services.iter().filter(|(n, s)| s.protocol == Protocol::Udp && changed.contains(&n.service)).map(|(_, s)| s) {
        let addrs = std::iter::once(svc.cluster_ip).chain(svc.load_balancer_vips.iter().copied()).chain(svc.external_ips.iter().copied());
        for ip in addrs {
            add(DumpFilter { proto: IPPROTO_UDP, dst: Some(ip), dport: Some(svc.port) });
        }
        if svc.node_port != 0 {
            add(DumpFilter { proto: IPPROTO_UDP, dst: None, dport: Some(svc.node_port) });
        }
    }
    (out.len() <= at_most).then_some(out)
}

/// The UDP service ports a flow read by `dumps` can be to (one of their addresses and
/// ports, or their NodePort), every one of them: two ports sharing an address keep both's
/// flows in the plan as in the whole one.
pub fn reached_by(services: &ServicePortMap, dumps: &[DumpFilter]) -> ServicePortMap {
    let hit = |svc: &crate::model::ServicePort| {
        dumps.iter().any(|d| match (d.dst, d.dport) {
            (None, Some(port)) => svc.node_port == port || svc.port == port,
            (Some(ip), Some(port)) => {
                svc.port == port && (svc.cluster_ip == ip || svc.load_balancer_vips.contains(&ip) || svc.external_ips.contains(&ip))
                    || svc.node_port == port
            }
            _ => true,
        })
    };
    services.iter().filter(|(_, s)| s.protocol == Protocol::Udp && hit(s)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests;

//! Desired vs observed IPVS state → the operations that converge them. Pure.
//!
//! Order: bind new addresses, add and update virtual servers, add real servers and
//! restore weights, put removed real servers to weight 0, delete drained ones, delete
//! stale virtual servers, unbind addresses. A live service is never left without its
//! new real servers while old ones go, and an address is bound before a virtual server
//! uses it.
//!
//! Graceful termination (kube-proxy's, without its restart bug): a real server no longer
//! wanted is deleted at once when it has no active or inactive connections, or when its
//! protocol is UDP or SCTP; otherwise its weight goes to 0. "Weight 0 and not wanted"
//! *is* the terminating state, read back from the kernel on every sync, so a restart
//! never strands it; it is deleted once drained or once it has been seen terminating
//! for `grace_period_secs` (the clock is the caller's and restarts with the process,
//! so the bound is at most twice the period across one restart).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;

use super::values::{ObservedRealServer, ObservedVirtualServer, Op, Protocol, RealServer, ServiceKey, VirtualServer};
use super::plan::{Desired, FamilyState};
use crate::net::Cidr;

/// kube-proxy's default `--service-node-port-range`.
pub const DEFAULT_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;
/// How long a terminating real server with connections is kept, at most.
pub const DEFAULT_GRACE_PERIOD_SECS: u64 = 900;

/// What the kernel has: IPVS services with their real servers, and kube-ipvs0's addresses.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub services: Vec<(ObservedVirtualServer, Vec<ObservedRealServer>)>,
    pub bound: BTreeSet<IpAddr>,
}

/// What svcproxy wants, over all families.
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    pub services: BTreeMap<ServiceKey, Desired>,
    pub bound: BTreeSet<IpAddr>,
    /// Which unwanted virtual servers are ours to delete.
    pub scope: Scope,
}

/// Ownership of virtual servers svcproxy does not want (any it wants is its own).
#[derive(Debug, Clone)]
pub struct Scope {
    /// Node addresses NodePort virtual servers live on.
    pub node_ips: BTreeSet<IpAddr>,
    pub node_port_range: RangeInclusive<u16>,
    /// `--ipvs-exclude-cidrs`: never deleted.
    pub exclude: Vec<Cidr>,
}

impl Default for Scope {
    fn default() -> Self {
        Scope { node_ips: BTreeSet::new(), node_port_range: DEFAULT_NODE_PORT_RANGE, exclude: Vec::new() }
    }
}

impl Wanted {
    /// Merges the families' plans.
    pub fn from_plans<'a>(plans: impl IntoIterator<Item = &'a FamilyState>, scope: Scope) -> Self {
        let mut w = Wanted { scope, ..Default::default() };
        for p in plans {
            w.services.extend(p.services.iter().map(|(k, d)| (*k, d.clone())));
            w.bound.extend(p.bound.iter().copied());
        }
        w
    }

    /// A virtual server svcproxy may delete: one on an address it binds (or bound),
    /// or on a node address in the NodePort range; never one in an excluded CIDR.
    fn owns(&self, key: &ServiceKey, observed_bound: &BTreeSet<IpAddr>) -> bool {
        if self.scope.exclude.iter().any(|c| c.contains(&key.addr)) {
            return false;
        }
        self.bound.contains(&key.addr)
            || observed_bound.contains(&key.addr)
            || (self.scope.node_ips.contains(&key.addr) && self.scope.node_port_range.contains(&key.port))
    }
}

/// When each terminating real server was first seen terminating (caller's clock, seconds).
pub type Grace = BTreeMap<(ServiceKey, IpAddr, u16), u64>;

/// The clock and the bound for graceful termination.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub now_secs: u64,
    pub grace_period_secs: u64,
}

/// The operations, in the order they must run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Addresses to bind to kube-ipvs0 first.
    pub bind: Vec<IpAddr>,
    pub ops: Vec<Op>,
    /// Addresses to unbind last.
    pub unbind: Vec<IpAddr>,
    /// Real servers still terminating (weight 0, connections open), after these ops.
    pub terminating: Grace,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.bind.is_empty() && self.ops.is_empty() && self.unbind.is_empty()
    }
}

/// The ops of one phase each; concatenated in this order.
#[derive(Default)]
struct Phases {
    add_services: Vec<Op>,
    update_services: Vec<Op>,
    add_dests: Vec<Op>,
    drain: Vec<Op>,
    del_dests: Vec<Op>,
    del_services: Vec<Op>,
}

pub fn diff(wanted: &Wanted, observed: &Observed, grace: &Grace, timing: Timing) -> Changes {
    let mut phases = Phases::default();
    let mut terminating = Grace::new();
    let current: BTreeMap<ServiceKey, (&ObservedVirtualServer, &[ObservedRealServer])> =
        observed.services.iter().map(|(vs, rs)| (vs.vs.key(), (vs, rs.as_slice()))).collect();
    for (key, d) in &wanted.services {
        match current.get(key) {
            None => {
                phases.add_services.push(Op::AddService(d.vs.clone()));
                phases.add_dests.extend(d.reals.iter().map(|rs| Op::AddDest(d.vs.clone(), *rs)));
            }
            Some((ovs, dests)) => {
                if !same_service(&ovs.vs, &d.vs) {
                    phases.update_services.push(Op::UpdateService(d.vs.clone()));
                }
                reconcile_dests(d, dests, grace, timing, &mut phases, &mut terminating);
            }
        }
    }
    for (key, (ovs, _)) in &current {
        if !wanted.services.contains_key(key) && wanted.owns(key, &observed.bound) {
            phases.del_services.push(Op::DelService(ovs.vs.clone()));
        }
    }
    let ops = [phases.add_services, phases.update_services, phases.add_dests, phases.drain, phases.del_dests, phases.del_services]
        .concat();
    Changes {
        bind: wanted.bound.difference(&observed.bound).copied().collect(),
        ops,
        unbind: observed.bound.difference(&wanted.bound).copied().collect(),
        terminating,
    }
}

/// Scheduler, persistence (and its netmask) and flags: what `UpdateService` changes.
fn same_service(a: &VirtualServer, b: &VirtualServer) -> bool {
    a.scheduler == b.scheduler && a.persistent == b.persistent && a.flags == b.flags && (a.persistent.is_none() || a.netmask == b.netmask)
}

fn reconcile_dests(d: &Desired, observed: &[ObservedRealServer], grace: &Grace, timing: Timing, phases: &mut Phases, terminating: &mut Grace) {
    let have: BTreeMap<(IpAddr, u16), &ObservedRealServer> = observed.iter().map(|o| ((o.rs.addr, o.rs.port), o)).collect();
    for rs in &d.reals {
        match have.get(&(rs.addr, rs.port)) {
            None => phases.add_dests.push(Op::AddDest(d.vs.clone(), *rs)),
            Some(o) if !same_dest(&o.rs, rs) => phases.add_dests.push(Op::UpdateDest(d.vs.clone(), *rs)),
            Some(_) => {}
        }
    }
    let wanted: BTreeSet<(IpAddr, u16)> = d.reals.iter().map(|r| (r.addr, r.port)).collect();
    for (id, o) in &have {
        if !wanted.contains(id) {
            retire(&d.vs, o, grace, timing, phases, terminating);
        }
    }
}

fn same_dest(a: &RealServer, b: &RealServer) -> bool {
    a.weight == b.weight && a.fwd == b.fwd && a.upper_threshold == b.upper_threshold && a.lower_threshold == b.lower_threshold
}

/// kube-proxy's `IsRsGracefulTerminationNeeded`.
pub fn needs_graceful_termination(p: Protocol) -> bool {
    p == Protocol::Tcp
}

/// One unwanted real server: delete, drain, or keep waiting.
fn retire(vs: &VirtualServer, o: &ObservedRealServer, grace: &Grace, timing: Timing, phases: &mut Phases, terminating: &mut Grace) {
    let drained = o.active_conns + o.inactive_conns == 0;
    if drained || !needs_graceful_termination(vs.protocol) {
        phases.del_dests.push(Op::DelDest(vs.clone(), o.rs));
        return;
    }
    let id = (vs.key(), o.rs.addr, o.rs.port);
    if o.rs.weight != 0 {
        phases.drain.push(Op::UpdateDest(vs.clone(), RealServer { weight: 0, ..o.rs }));
        terminating.insert(id, timing.now_secs);
        return;
    }
    let since = grace.get(&id).copied().unwrap_or(timing.now_secs);
    if timing.now_secs.saturating_sub(since) >= timing.grace_period_secs {
        phases.del_dests.push(Op::DelDest(vs.clone(), o.rs));
    } else {
        terminating.insert(id, since);
    }
}

#[cfg(test)]
mod tests;

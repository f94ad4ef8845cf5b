//! What IPVS mode trusts the kernel to hold between full syncs: the plans it applied
//! (kept up to date service by service), the virtual and real servers and kube-ipvs0's
//! addresses as the last full sync read them plus every change sent since, and the real
//! servers draining. The sets and iptables rules the kernel holds are the plans' own (a
//! sync that succeeded made them so). Dropped on any failure: the next sync is full.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use super::plan::incremental::FamilyPlanner;
use super::reconcile::{Changes, Grace, Observed, Scope};
use super::values::{Op, RealServer, ServiceKey, VirtualServer};

/// One virtual server as the kernel holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub vs: VirtualServer,
    /// By address and port.
    pub reals: BTreeMap<(IpAddr, u16), RealServer>,
}

#[derive(Debug, Clone)]
pub struct Memory {
    /// Per family, in the trackers' order.
    pub planners: Vec<FamilyPlanner>,
    pub services: HashMap<ServiceKey, Held>,
    pub bound: BTreeSet<IpAddr>,
    /// kube-ipvs0's index.
    pub link_index: u32,
    /// Real servers draining, and since when.
    pub terminating: Grace,
    /// Which unwanted virtual servers are svcproxy's (fixed by the full sync's node addresses).
    pub scope: Scope,
}

impl Memory {
    /// The kernel after a full sync: what it read, changed as `changes` say.
    pub fn after(planners: Vec<FamilyPlanner>, observed: Observed, changes: &Changes, link_index: u32, scope: Scope) -> Memory {
        let services = observed
            .services
            .into_iter()
            .map(|(ovs, dests)| {
                let reals = dests.into_iter().map(|d| ((d.rs.addr, d.rs.port), d.rs)).collect();
                (ovs.vs.key(), Held { vs: ovs.vs, reals })
            })
            .collect();
        let mut m = Memory { planners, services, bound: observed.bound, link_index, terminating: Grace::new(), scope };
        m.record(changes);
        m
    }

    /// Changes that were applied.
    pub fn record(&mut self, changes: &Changes) {
        for op in &changes.ops {
            self.record_op(op);
        }
        self.bound.extend(changes.bind.iter().copied());
        for ip in &changes.unbind {
            self.bound.remove(ip);
        }
        self.terminating = changes.terminating.clone();
    }

    fn record_op(&mut self, op: &Op) {
        match op {
            Op::AddService(vs) => {
                self.services.insert(vs.key(), Held { vs: vs.clone(), reals: BTreeMap::new() });
            }
            Op::UpdateService(vs) => {
                if let Some(h) = self.services.get_mut(&vs.key()) {
                    h.vs = vs.clone();
                }
            }
            Op::DelService(vs) => {
                self.services.remove(&vs.key());
            }
            Op::AddDest(vs, rs) | Op::UpdateDest(vs, rs) => {
                if let Some(h) = self.services.get_mut(&vs.key()) {
                    h.reals.insert((rs.addr, rs.port), *rs);
                }
            }
            Op::DelDest(vs, rs) => {
                if let Some(h) = self.services.get_mut(&vs.key()) {
                    h.reals.remove(&(rs.addr, rs.port));
                }
            }
            Op::Flush => self.services.clear(),
            Op::SetTimeouts(_) => {}
        }
    }

    /// Every address the plans bind.
    pub fn wants_bound(&self, ip: &IpAddr) -> bool {
        self.planners.iter().any(|p| p.plan().bound.contains(ip))
    }
}

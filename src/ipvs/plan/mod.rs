//! The IPVS plan: cluster state in, what kube-proxy's IPVS proxier would program out.
//! Pure: virtual and real servers, the `kube-ipvs0` addresses, the ipset contents and
//! the iptables restore text IPVS mode still needs. [`crate::ipvs::text`] prints it.

pub mod context;
pub mod incremental;
pub mod ipsets;
pub mod rules;
mod servers;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

pub use context::Context;
pub use ipsets::SetId;

use crate::ipvs::values::{RealServer, ServiceKey, VirtualServer};
use crate::model::{EndpointsMap, ServicePortMap, ServicePortName};
use crate::net::IpFamily;

/// Name of the dummy interface holding the service addresses.
pub const DUMMY_LINK: &str = "kube-ipvs0";

/// One desired virtual server and its real servers (sorted by address and port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub vs: VirtualServer,
    pub reals: Vec<RealServer>,
    /// The service port it serves (for messages).
    pub owner: ServicePortName,
}

/// A load-balancer VIP the node itself must not reach (`KUBE-IPVS-OUT-FILTER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NoNodeAccess {
    pub ip: IpAddr,
    pub proto: &'static str,
    pub port: u16,
}

/// What IPVS mode programs for one family: virtual and real servers, the `kube-ipvs0`
/// addresses, the ipset contents and the iptables rules.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyState {
    pub family: IpFamily,
    pub services: BTreeMap<ServiceKey, Desired>,
    /// Addresses bound to `kube-ipvs0`.
    pub bound: BTreeSet<IpAddr>,
    /// Every kube-proxy set of the family (empty ones too), in `ipsetInfo` order.
    pub sets: BTreeMap<SetId, BTreeSet<String>>,
    pub no_node_access: BTreeSet<NoNodeAccess>,
    /// The iptables rules (nat, then filter).
    pub iptables: Vec<crate::xtables::Table>,
}

impl FamilyState {
    fn empty(family: IpFamily) -> Self {
        FamilyState {
            family,
            services: BTreeMap::new(),
            bound: BTreeSet::new(),
            sets: ipsets::ALL.iter().map(|id| (*id, BTreeSet::new())).collect(),
            no_node_access: BTreeSet::new(),
            iptables: Vec::new(),
        }
    }

    pub fn set(&self, id: SetId) -> &BTreeSet<String> {
        static EMPTY: BTreeSet<String> = BTreeSet::new();
        self.sets.get(&id).unwrap_or(&EMPTY)
    }

    pub(crate) fn insert_entry(&mut self, id: SetId, entry: String) {
        self.sets.entry(id).or_default().insert(entry);
    }
}

/// Plans one family.
pub fn plan(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> FamilyState {
    let mut plan = FamilyState::empty(ctx.family());
    for (name, svc) in services {
        let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or_default();
        servers::add_service(ctx, &mut plan, name, svc, eps);
    }
    let bound: Vec<String> = plan.bound.iter().map(|ip| ip.to_string()).collect();
    for b in bound {
        plan.insert_entry(SetId::IpvsIps, b);
    }
    plan.iptables = rules::write(ctx, &plan);
    plan
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod tests_support {
    pub fn empty(family: crate::net::IpFamily) -> super::FamilyState {
        super::FamilyState::empty(family)
    }
}

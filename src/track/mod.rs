//! Change trackers: object events in; per family, the committed service-port and
//! endpoints maps plus what changed since the last commit. Pure and single-owner: the
//! runner feeds events and commits before each sync.

pub mod endpoints;
pub mod services;

use std::collections::BTreeSet;
use std::sync::Arc;

pub use endpoints::{EndpointsChangeTracker, EndpointsCommit};
pub use services::{ServiceChangeTracker, ServiceCommit};

use crate::model::{EndpointSlice, EndpointsMap, NamespacedName, Service, ServicePortMap};
use crate::net::IpFamily;

/// An object event, from any source.
#[derive(Debug, Clone)]
pub enum Event {
    ServiceApplied(Arc<Service>),
    ServiceDeleted(NamespacedName),
    SliceApplied(Arc<EndpointSlice>),
    /// The last known state of a deleted slice (its service and family are needed).
    SliceDeleted(Arc<EndpointSlice>),
    /// ServiceCIDR objects: no tracker's; the source sums them up for the engine
    /// (`SourceMsg::ServiceCidrs`).
    ServiceCidrApplied(Arc<crate::model::ServiceCidr>),
    ServiceCidrDeleted(Arc<crate::model::ServiceCidr>),
}

/// Both trackers of one family.
#[derive(Debug, Clone)]
pub struct FamilyTracker {
    pub family: IpFamily,
    pub services: ServiceChangeTracker,
    pub endpoints: EndpointsChangeTracker,
}

/// What one family's commit changed: the services whose ports or endpoints changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub services: BTreeSet<NamespacedName>,
    /// Trigger times of the endpoint changes committed (network-programming SLI).
    pub trigger_times: Vec<std::time::SystemTime>,
    /// A UDP service port's endpoints changed: the conntrack reconciler is owed a run.
    pub udp_endpoints_changed: bool,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }
}

impl FamilyTracker {
    pub fn new(family: IpFamily, node_name: &str, service_proxy_name: Option<String>) -> Self {
        FamilyTracker {
            family,
            services: ServiceChangeTracker::new(family, service_proxy_name.clone()),
            endpoints: EndpointsChangeTracker::new(family, node_name, service_proxy_name),
        }
    }

    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::ServiceApplied(s) => self.services.update(s),
            Event::ServiceDeleted(id) => self.services.delete(id),
            Event::SliceApplied(s) => self.endpoints.update(s),
            Event::SliceDeleted(s) => self.endpoints.delete(s),
            Event::ServiceCidrApplied(_) | Event::ServiceCidrDeleted(_) => {}
        }
    }

    pub fn commit(&mut self) -> Changes {
        let s = self.services.commit();
        let e = self.endpoints.commit();
        Changes {
            services: s.updated.union(&e.updated).cloned().collect(),
            trigger_times: e.trigger_times,
            udp_endpoints_changed: e.udp_changed,
        }
    }

    /// The committed maps, as the backends see them.
    pub fn view(&self) -> (&ServicePortMap, &EndpointsMap) {
        (self.services.map(), self.endpoints.map())
    }
}

/// One tracker pair per family the proxier serves.
#[derive(Debug, Clone)]
pub struct Trackers {
    pub families: Vec<FamilyTracker>,
}

impl Trackers {
    pub fn new(families: &[IpFamily], node_name: &str, service_proxy_name: Option<String>) -> Self {
        Trackers {
            families: families.iter().map(|f| FamilyTracker::new(*f, node_name, service_proxy_name.clone())).collect(),
        }
    }

    pub fn apply(&mut self, event: &Event) {
        for t in &mut self.families {
            t.apply(event);
        }
    }

    /// `AllowServiceExternalIPs` (kube-proxy v1.37; default on): off, no service port has
    /// external IPs. Set before any event.
    pub fn set_allow_external_ips(&mut self, allow: bool) {
        for t in &mut self.families {
            t.services.set_allow_external_ips(allow);
        }
    }

    pub fn commit(&mut self) -> Vec<Changes> {
        self.families.iter_mut().map(FamilyTracker::commit).collect()
    }
}

#[cfg(test)]
mod tests;

//! kube-proxy's `ServiceChangeTracker`, for one IP family: Service events in, the
//! service-port map and the set of services whose ports changed out.
//!
//! A change is remembered as `(previous, current)` port maps per service: `previous` is
//! what was committed before the first pending event, `current` follows every event. A
//! change whose two sides end up equal is dropped at commit, so no-op churn (a resync,
//! a status-only update) never reaches a sync.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::{port_entries, NamespacedName, Service, ServicePort, ServicePortMap, ServicePortName, ServiceType};
use crate::net::IpFamily;

/// One service's ports, in name order. A service has a few: a vector of the shared ports,
/// where a map allocates a node of eleven keys (each a `ServicePortName`, ~1 KB) for every
/// service it keeps (50 MB at 50,000 services).
type PortsOf = Vec<Arc<ServicePort>>;

#[derive(Debug, Clone)]
pub struct ServiceChangeTracker {
    family: IpFamily,
    service_proxy_name: Option<String>,
    /// The committed ports of every service, ordered by service: a service's own are a
    /// range of it ([`port_entries`]), so no second map per service is kept.
    map: ServicePortMap,
    pending: BTreeMap<NamespacedName, PortsOf>,
    /// `AllowServiceExternalIPs` (default on).
    external_ips: bool,
}

/// What a commit changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceCommit {
    pub updated: BTreeSet<NamespacedName>,
}

impl ServiceChangeTracker {
    pub fn new(family: IpFamily, service_proxy_name: Option<String>) -> Self {
        ServiceChangeTracker {
            family,
            service_proxy_name,
            map: ServicePortMap::new(),
            pending: BTreeMap::new(),
            external_ips: true,
        }
    }

    /// With `AllowServiceExternalIPs=false` (kube-proxy v1.37, KEP-5707) `spec.externalIPs`
    /// are taken as empty: no rules for them in any mode. Set before the first update.
    pub fn set_allow_external_ips(&mut self, allow: bool) {
        self.external_ips = allow;
    }

    /// An added or updated Service.
    pub fn update(&mut self, svc: &Service) {
        let ports = service_ports_with(svc, self.family, self.service_proxy_name.as_deref(), self.external_ips);
        self.set_pending(svc.id.clone(), ports);
    }

    /// A deleted Service.
    pub fn delete(&mut self, id: &NamespacedName) {
        self.set_pending(id.clone(), PortsOf::new());
    }

    /// Keeps a service's new ports as its pending change, or, as kube-proxy's tracker does,
    /// drops the change once they are what was committed (changed back, or never changed).
    fn set_pending(&mut self, id: NamespacedName, ports: PortsOf) {
        if self.committed(&id).eq(ports.iter()) {
            self.pending.remove(&id);
        } else {
            self.pending.insert(id, ports);
        }
    }

    /// Services whose ports differ from the committed ones: kube-proxy's pending changes
    /// (its tracker's items), which its `service_changes_pending` gauge counts.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The committed service-port map.
    pub fn map(&self) -> &ServicePortMap {
        &self.map
    }

    /// A service's committed ports, in name order.
    fn committed<'a>(&'a self, id: &'a NamespacedName) -> impl Iterator<Item = &'a Arc<ServicePort>> {
        port_entries(&self.map, id).map(|(_, port)| port)
    }

    /// Applies pending changes to the map and reports what really changed.
    pub fn commit(&mut self) -> ServiceCommit {
        let mut out = ServiceCommit::default();
        for (id, current) in std::mem::take(&mut self.pending) {
            let previous: PortsOf = self.committed(&id).cloned().collect();
            if previous == current {
                continue;
            }
            for port in &previous {
                if !current.iter().any(|p| p.name == port.name) {
                    self.map.remove(&port.name);
                }
            }
            for port in &current {
                self.map.insert(port.name.clone(), port.clone());
            }
            out.updated.insert(id);
        }
        out
    }
}

/// A Service's ports for one family, as kube-proxy's `serviceToServiceMap` builds them:
/// nothing for ExternalName, headless or other-family-only services, or services that
/// belong to another proxy.
pub fn service_ports(svc: &Service, family: IpFamily, proxy_name: Option<&str>) -> PortsOf {
    service_ports_with(svc, family, proxy_name, true)
}

/// [`service_ports`], with `spec.externalIPs` taken as empty unless `external_ips`
/// (`AllowServiceExternalIPs`).
pub fn service_ports_with(svc: &Service, family: IpFamily, proxy_name: Option<&str>, external_ips: bool) -> PortsOf {
    let mut out = BTreeMap::new();
    let svc_external_ips: &[IpAddr] = if external_ips { &svc.external_ips } else { &[] };
    if !svc.proxy_labels.selected_by(proxy_name) || svc.service_type == ServiceType::ExternalName {
        return PortsOf::new();
    }
    let Some(cluster_ip) = svc.cluster_ip(family) else { return PortsOf::new() };
    let of_family = |ips: &[IpAddr]| -> Vec<IpAddr> { ips.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect() };
    let externally_accessible = matches!(svc.service_type, ServiceType::LoadBalancer | ServiceType::NodePort)
        || (svc.service_type == ServiceType::ClusterIP && !svc_external_ips.is_empty());
    let vips: Vec<IpAddr> = svc.ingress.iter().filter(|i| !i.proxy_mode).map(|i| i.ip).collect();
    for p in &svc.ports {
        let name = ServicePortName { service: svc.id.clone(), port: p.name.clone(), protocol: p.protocol };
        let port = ServicePort {
            name: name.clone(),
            cluster_ip,
            port: p.port,
            protocol: p.protocol,
            node_port: p.node_port,
            external_ips: of_family(svc_external_ips),
            load_balancer_vips: of_family(&vips),
            load_balancer_source_ranges: svc
                .load_balancer_source_ranges
                .iter()
                .filter(|c| c.family() == family)
                .copied()
                .collect(),
            session_affinity: svc.session_affinity,
            health_check_node_port: svc.health_check_node_port,
            external_policy_local: externally_accessible
                && svc.external_traffic_policy == crate::model::TrafficPolicy::Local,
            internal_policy_local: svc.internal_traffic_policy == crate::model::TrafficPolicy::Local,
        };
        // A later port of the same name wins, as kube-proxy's map assignment does.
        out.insert(name, Arc::new(port));
    }
    out.into_values().collect()
}

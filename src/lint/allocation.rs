//! The repair controllers' checks (`ipallocator/controller/repair.go`,
//! `portallocator/controller/repair.go`): every ClusterIP and NodePort is allocated
//! once, from the configured range. Headless and ExternalName Services have no ClusterIP.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::options::allocatable;
use super::{Finding, Input, ObjectId};
use crate::model::{Protocol, Service};
use crate::net::IpFamily;

fn svc_id(s: &Service) -> ObjectId {
    ObjectId::new("Service", &s.id)
}

/// SP003: with ServiceCIDR objects in the input, a ClusterIP none of them holds: no
/// allocator gives one (its range was removed, or it was set by hand); it is still
/// served, and nftables mode's `cluster-ips-check` drop rule does not cover it.
pub fn outside_service_cidrs(input: &Input) -> Vec<Finding> {
    let cidrs = crate::model::service_cidrs(&input.state.service_cidrs);
    if cidrs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for svc in &input.state.services {
        for ip in svc.cluster_ips.iter().filter(|ip| !cidrs.iter().any(|c| c.contains(ip))) {
            let family = IpFamily::of(ip).api_name();
            let same: Vec<String> = cidrs.iter().filter(|c| c.family() == IpFamily::of(ip)).map(|c| c.to_string()).collect();
            let ranges = if same.is_empty() { format!("no ServiceCIDR has an {family} range") } else { format!("the {family} ServiceCIDRs are {}", same.join(", ")) };
            out.push(Finding::new("SP003", vec![svc_id(svc)], format!("ClusterIP {ip} is in no ServiceCIDR ({ranges}): no allocator gave it; it is still served")));
        }
    }
    out
}

/// SP001 (one finding per shared IP) and SP002 (one per IP out of range).
pub fn cluster_ips(input: &Input) -> Vec<Finding> {
    let mut owners: BTreeMap<IpAddr, Vec<ObjectId>> = BTreeMap::new();
    let mut out = Vec::new();
    for svc in &input.state.services {
        for ip in &svc.cluster_ips {
            owners.entry(*ip).or_default().push(svc_id(svc));
            if let Some(ranges) = &input.options.service_ranges {
                let family = IpFamily::of(ip);
                let msg = match ranges.for_family(family) {
                    Some(c) if allocatable(c, ip) => continue,
                    Some(c) => format!(
                        "ClusterIP {ip} is not within the service CIDR {}/{} (the repair controller reports ClusterIPOutOfRange; recreate the Service)",
                        c.addr(),
                        c.prefix()
                    ),
                    None => format!("ClusterIP {ip} is {} but no {} service CIDR is configured", family.api_name(), family.api_name()),
                };
                out.push(Finding::new("SP002", vec![svc_id(svc)], msg));
            }
        }
    }
    for (ip, objs) in owners.into_iter().filter(|(_, o)| o.len() > 1) {
        let msg = format!(
            "ClusterIP {ip} is assigned to {} Services (the repair controller reports ClusterIPAlreadyAllocated; recreate all but one)",
            objs.len()
        );
        out.push(Finding::new("SP001", objs, msg));
    }
    out
}

/// A Service's node ports as the repair controller collects them: the same port with
/// another protocol in the same Service counts once; the health-check port counts
/// unless a non-TCP port already uses it.
pub fn collect_node_ports(svc: &Service) -> Vec<u16> {
    let mut seen: BTreeMap<u16, Vec<Protocol>> = BTreeMap::new();
    let mut out = Vec::new();
    for p in svc.ports.iter().filter(|p| p.node_port != 0) {
        let protos = seen.entry(p.node_port).or_default();
        if protos.is_empty() || protos.contains(&p.protocol) {
            out.push(p.node_port);
        }
        if !protos.contains(&p.protocol) {
            protos.push(p.protocol);
        }
    }
    let hc = svc.health_check_node_port;
    if hc != 0 && seen.get(&hc).is_none_or(|p| p.contains(&Protocol::Tcp)) {
        out.push(hc);
    }
    out
}

/// SP010 (one finding per shared port) and SP011 (one per port out of range).
pub fn node_ports(input: &Input) -> Vec<Finding> {
    let range = input.options.node_port_range;
    let mut uses: BTreeMap<u16, Vec<ObjectId>> = BTreeMap::new();
    let mut out = Vec::new();
    for svc in &input.state.services {
        let mut reported = Vec::new();
        for port in collect_node_ports(svc) {
            uses.entry(port).or_default().push(svc_id(svc));
            if !range.contains(port) && !reported.contains(&port) {
                reported.push(port);
                let msg = format!(
                    "NodePort {port} is not within the port range {range} (the repair controller reports PortOutOfRange; recreate the Service)"
                );
                out.push(Finding::new("SP011", vec![svc_id(svc)], msg));
            }
        }
    }
    for (port, mut objs) in uses.into_iter().filter(|(_, o)| o.len() > 1) {
        let n = objs.len();
        objs.dedup();
        let msg = if objs.len() == 1 {
            format!("NodePort {port} is used {n} times with the same protocol in one Service (PortAlreadyAllocated)")
        } else {
            format!("NodePort {port} is assigned to {} Services (the repair controller reports PortAlreadyAllocated; recreate all but one)", objs.len())
        };
        out.push(Finding::new("SP010", objs, msg));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NamespacedName, ProxyLabels, ServicePortSpec, ServiceType, TrafficPolicy};

    fn svc(ports: &[(u16, Protocol)], hc: u16) -> Service {
        Service {
            id: NamespacedName::new("ns", "s"),
            service_type: ServiceType::LoadBalancer,
            cluster_ips: Vec::new(),
            ports: ports
                .iter()
                .map(|(np, proto)| ServicePortSpec { name: String::new(), protocol: *proto, port: 80, node_port: *np })
                .collect(),
            external_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            ingress: Vec::new(),
            external_traffic_policy: TrafficPolicy::Local,
            internal_traffic_policy: TrafficPolicy::Cluster,
            session_affinity: None,
            health_check_node_port: hc,
            proxy_labels: ProxyLabels::default(),
        }
    }

    #[test]
    fn node_ports_are_collected_as_the_repair_controller_does() {
        // Same port, two protocols: once. Same port, same protocol: twice (a duplicate).
        assert_eq!(collect_node_ports(&svc(&[(30053, Protocol::Udp), (30053, Protocol::Tcp)], 0)), [30053]);
        assert_eq!(collect_node_ports(&svc(&[(30080, Protocol::Tcp), (30080, Protocol::Tcp)], 0)), [30080, 30080]);
        // The health-check port counts unless a non-TCP port already holds it.
        assert_eq!(collect_node_ports(&svc(&[(30080, Protocol::Tcp)], 30090)), [30080, 30090]);
        assert_eq!(collect_node_ports(&svc(&[(30090, Protocol::Udp)], 30090)), [30090]);
        assert_eq!(collect_node_ports(&svc(&[(30090, Protocol::Tcp)], 30090)), [30090, 30090]);
    }
}

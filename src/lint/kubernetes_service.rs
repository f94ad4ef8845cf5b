//! The `default/kubernetes` Service the API server's bootstrap controller keeps: type
//! ClusterIP, no selector, ClusterIP = the primary service range's first address, one
//! port `https` 443/TCP whose targetPort is the API servers' secure port, and endpoints
//! (EndpointSlice `kubernetes` and Endpoints `kubernetes`) listing the API servers on it.

use std::collections::BTreeSet;

use super::options::first_address;
use super::{Finding, Input, ObjectId};
use crate::model::{NamespacedName, Protocol, Service};
use crate::source::extra::{ServiceBackend, TargetPort};

pub const NAMESPACE: &str = "default";
pub const NAME: &str = "kubernetes";

/// SP020–SP025.
pub fn check(input: &Input) -> Vec<Finding> {
    let id = NamespacedName::new(NAMESPACE, NAME);
    let obj = ObjectId::new("Service", &id);
    let Some(svc) = input.state.services.iter().find(|s| s.id == id) else {
        let msg = "the Service default/kubernetes is missing (the API server's bootstrap controller creates it)";
        return vec![Finding::new("SP020", vec![obj], msg)];
    };
    let backend = input.state.extra.backends.iter().find(|b| b.id == id);
    let mut out = Vec::new();
    if let Some(ranges) = &input.options.service_ranges {
        let want = first_address(ranges.primary());
        let have = svc.cluster_ip(ranges.primary().family());
        if have != Some(want) {
            let have = have.map_or_else(|| "missing".to_string(), |ip| ip.to_string());
            let msg = format!(
                "ClusterIP is {have}; it must be {want}, the first address of the service CIDR {}/{}",
                ranges.primary().addr(),
                ranges.primary().prefix()
            );
            out.push(Finding::new("SP021", vec![obj.clone()], msg));
        }
    }
    if backend.is_some_and(|b| b.selector.is_some()) {
        let msg = "it has a selector; the API server creates it without one and maintains its endpoints itself";
        out.push(Finding::new("SP023", vec![obj.clone()], msg));
    }
    let ports = endpoint_https_ports(input, &id);
    let has_endpoints = input.state.slices.iter().any(|s| s.service == id && !s.endpoints.is_empty())
        || input.state.extra.endpoints.iter().any(|e| e.id == id && e.subsets.iter().any(|s| !s.addresses.is_empty()));
    if !has_endpoints {
        let msg = "it has no endpoints (the API servers' reconciler lists every API server in EndpointSlice and Endpoints default/kubernetes)";
        out.push(Finding::new("SP024", vec![obj.clone()], msg));
    }
    match https_port(svc) {
        None => {
            let msg = "it has no port https 443/TCP (the API server's secure port is published there)";
            out.push(Finding::new("SP022", vec![obj], msg));
        }
        Some(name) => out.extend(target_port(backend, &name, &ports, obj)),
    }
    out
}

/// The name of the port `https` 443/TCP, if the Service has it.
fn https_port(svc: &Service) -> Option<String> {
    svc.ports.iter().find(|p| p.name == "https" && p.port == 443 && p.protocol == Protocol::Tcp).map(|p| p.name.clone())
}

/// The `https` port numbers of the Service's endpoints (slices and Endpoints).
fn endpoint_https_ports(input: &Input, id: &NamespacedName) -> BTreeSet<u16> {
    let mut out: BTreeSet<u16> = input
        .state
        .slices
        .iter()
        .filter(|s| &s.service == id)
        .flat_map(|s| s.ports.iter().filter(|p| p.name == "https").map(|p| p.port))
        .collect();
    for e in input.state.extra.endpoints.iter().filter(|e| &e.id == id) {
        out.extend(e.subsets.iter().flat_map(|s| s.ports.iter().filter(|p| p.name == "https").map(|p| p.port)));
    }
    out
}

/// SP025: the targetPort is not the port the endpoints (the API servers) serve https on.
fn target_port(backend: Option<&ServiceBackend>, name: &str, ports: &BTreeSet<u16>, obj: ObjectId) -> Option<Finding> {
    let target = backend?.ports.iter().find(|p| p.name == name)?.target.clone();
    let listed: Vec<String> = ports.iter().map(u16::to_string).collect();
    let msg = match target {
        TargetPort::Name(n) => format!("port https has targetPort {n:?}; the API server sets its secure port's number"),
        TargetPort::Number(n) if !ports.is_empty() && !ports.contains(&n) => format!(
            "port https targets {n} but its endpoints (the API servers' secure port) serve https on {}",
            listed.join(", ")
        ),
        TargetPort::Number(_) => return None,
    };
    Some(Finding::new("SP025", vec![obj], msg))
}

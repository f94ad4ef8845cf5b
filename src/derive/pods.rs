//! The EndpointSlice controller's view: a Service with a selector gets, per address type,
//! one slice per distinct set of resolved ports, holding every selected Pod.
//!
//! Followed: selector match in the Service's namespace; Pods in a terminal phase or
//! without an IP are left out, and so are Pods whose Node is not in the input when the
//! input holds Nodes (the controller skips them until the Node exists) unless
//! publishNotReadyAddresses is set; one address per family from `status.podIPs`;
//! `serving` = Ready, `terminating` = deletionTimestamp set,
//! `ready` = publishNotReadyAddresses || (serving && !terminating); a port whose
//! `targetPort` name no container declares (with the port's protocol) is left out for
//! that Pod, which therefore lands in a slice without it; `hostname` when the Pod's
//! subdomain is the Service's name; `nodeName`, and the zone from the Node's
//! `topology.kubernetes.io/zone` label when the Node is in the input. An empty result is
//! one placeholder slice per address type, as the controller writes.

use std::collections::BTreeMap;

use super::{DerivedSlice, EndpointInfo};
use crate::intern::intern;
use crate::model::{EndpointSlice, NamespacedName, Node, ProxyLabels, Service, SliceEndpoint, SlicePort, LABEL_ZONE};
use crate::net::IpFamily;
use crate::source::extra::{ObjectRef, Pod, ServiceBackend, TargetPort};

/// The address types the controller uses for a Service: `spec.ipFamilies`, else the
/// ClusterIPs' families, else (headless, legacy) both.
pub fn address_types(svc: &Service, backend: &ServiceBackend) -> Vec<IpFamily> {
    let mut out: Vec<IpFamily> = backend.ip_families.clone();
    if out.is_empty() {
        out = svc.cluster_ips.iter().map(IpFamily::of).collect();
    }
    if out.is_empty() {
        out = vec![IpFamily::V4, IpFamily::V6];
    }
    out.sort();
    out.dedup();
    out
}

/// Whether the selector selects the Pod (same namespace, every label equal).
pub fn selects(backend: &ServiceBackend, pod: &Pod) -> bool {
    match &backend.selector {
        None => false,
        Some(sel) => {
            pod.id.namespace == backend.id.namespace && sel.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
        }
    }
}

/// `ShouldPodBeInEndpoints` with terminating Pods included.
pub fn eligible(pod: &Pod) -> bool {
    !pod.terminal && !pod.ips.is_empty()
}

/// The controller skips a Pod whose Node it cannot find, unless the Service publishes
/// not-ready addresses. Without any Node in the input, nothing is known: no skip.
pub fn node_missing(pod: &Pod, backend: &ServiceBackend, nodes: &[Node]) -> bool {
    !nodes.is_empty()
        && !backend.publish_not_ready
        && !pod.node_name.as_ref().is_some_and(|n| nodes.iter().any(|node| &node.name == n))
}

/// The Pod's port for a service port: a number as is; a name through the containers'
/// ports with the same name and protocol. `None`: the Pod is left out for this port.
pub fn resolve_port(port: &crate::source::extra::BackendPort, pod: &Pod) -> Option<u16> {
    match &port.target {
        TargetPort::Number(n) => Some(*n),
        TargetPort::Name(name) => {
            pod.ports.iter().find(|c| &c.name == name && c.protocol == port.protocol).map(|c| c.port)
        }
    }
}

fn endpoint_ports(backend: &ServiceBackend, pod: &Pod) -> Vec<SlicePort> {
    let mut out: Vec<SlicePort> = backend
        .ports
        .iter()
        .filter_map(|p| Some(SlicePort { name: p.name.clone(), port: resolve_port(p, pod)?, protocol: p.protocol }))
        .collect();
    out.sort();
    out
}

fn pod_endpoint(
    pod: &Pod,
    family: IpFamily,
    backend: &ServiceBackend,
    nodes: &[Node],
) -> Option<(SliceEndpoint, EndpointInfo)> {
    let ip = pod.ip(family)?;
    let serving = pod.ready;
    let zone = pod
        .node_name
        .as_ref()
        .and_then(|n| nodes.iter().find(|node| &node.name == n))
        .and_then(|node| node.labels.get(LABEL_ZONE).cloned());
    let ep = SliceEndpoint {
        ip,
        ready: backend.publish_not_ready || (serving && !pod.terminating),
        serving,
        terminating: pod.terminating,
        node_name: pod.node_name.as_deref().map(intern),
        zone: zone.as_deref().map(intern),
        zone_hints: Default::default(),
        node_hints: Default::default(),
    };
    let hostname = match (&pod.hostname, &pod.subdomain) {
        (Some(h), Some(sub)) if *sub == backend.id.name && pod.id.namespace == backend.id.namespace => Some(h.clone()),
        _ => None,
    };
    Some((ep, EndpointInfo { hostname, target: Some(ObjectRef { kind: "Pod".into(), id: pod.id.clone() }) }))
}

/// The slices the EndpointSlice controller would write for `svc` (which must have a
/// selector), Pods taken in name order. Slice names are `NAME-derived-N`.
pub fn slices_from_pods(svc: &Service, backend: &ServiceBackend, pods: &[Pod], nodes: &[Node]) -> Vec<DerivedSlice> {
    let mut selected: Vec<&Pod> =
        pods.iter().filter(|p| selects(backend, p) && eligible(p) && !node_missing(p, backend, nodes)).collect();
    selected.sort_by(|a, b| a.id.cmp(&b.id));
    let labels = ProxyLabels { service_proxy_name: svc.proxy_labels.service_proxy_name.clone(), headless: backend.headless };
    let mut out = Vec::new();
    for family in address_types(svc, backend) {
        let mut groups: BTreeMap<Vec<SlicePort>, DerivedSlice> = BTreeMap::new();
        for pod in &selected {
            let Some((ep, info)) = pod_endpoint(pod, family, backend, nodes) else { continue };
            let ports = endpoint_ports(backend, pod);
            let group = groups.entry(ports.clone()).or_insert_with(|| empty_slice(svc, family, ports, &labels));
            group.slice.endpoints.push(ep);
            group.info.push(info);
        }
        if groups.is_empty() {
            groups.insert(Vec::new(), empty_slice(svc, family, Vec::new(), &labels));
        }
        out.extend(groups.into_values());
    }
    for (i, d) in out.iter_mut().enumerate() {
        d.slice.id.name = format!("{}-derived-{}", svc.id.name, i + 1);
    }
    out
}

fn empty_slice(svc: &Service, family: IpFamily, ports: Vec<SlicePort>, labels: &ProxyLabels) -> DerivedSlice {
    DerivedSlice {
        slice: EndpointSlice {
            id: NamespacedName::new(svc.id.namespace.clone(), String::new()),
            service: svc.id.clone(),
            family,
            ports,
            endpoints: Vec::new(),
            proxy_labels: labels.clone(),
            trigger_time: None,
        },
        info: Vec::new(),
    }
}

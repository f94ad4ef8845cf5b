//! Kubernetes objects (k8s-openapi types) → validated model values.
//!
//! Conversion rejects what would make the rules wrong (an unparsable IP or CIDR, a port
//! out of range) with the field's path, and drops what kube-proxy itself ignores
//! (slice ports without a name or number, endpoints without addresses), reporting those
//! as [`Skip`]s so nothing disappears silently.

use std::net::IpAddr;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

use super::error::FieldError;
use crate::intern::intern;
use super::{LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME};
use crate::model::{
    EndpointSlice, Ingress, NamespacedName, Node, Protocol, ProxyLabels, Service, ServicePortSpec, ServiceType,
    SliceEndpoint, SlicePort, TrafficPolicy,
};
use crate::net::{parse_ip_sloppy, Cidr, IpFamily};

/// The API server's default for `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

/// Something kube-proxy ignores in an otherwise valid object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub field: String,
    pub reason: String,
}

type Result<T> = std::result::Result<T, FieldError>;

pub(super) fn ip(field: String, s: &str) -> Result<IpAddr> {
    parse_ip_sloppy(s).ok_or_else(|| FieldError::new(field, format!("invalid IP address {s:?}")))
}

fn cidr(field: String, s: &str) -> Result<Cidr> {
    Cidr::parse_sloppy(s.trim()).ok_or_else(|| FieldError::new(field, format!("invalid CIDR {s:?}")))
}

pub(super) fn port(field: &str, v: i32, allow_zero: bool) -> Result<u16> {
    match u16::try_from(v) {
        Ok(p) if p != 0 || allow_zero => Ok(p),
        _ => Err(FieldError::new(field, format!("port {v} out of range 1-65535"))),
    }
}

pub(super) fn protocol(field: &str, p: Option<&String>) -> Result<Protocol> {
    match p {
        None => Ok(Protocol::Tcp),
        Some(s) => Protocol::parse_api(s)
            .ok_or_else(|| FieldError::new(field, format!("unknown protocol {s:?} (want TCP, UDP or SCTP)"))),
    }
}

fn policy(field: &str, p: Option<&String>) -> Result<TrafficPolicy> {
    match p.map(String::as_str) {
        None | Some("") | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(s) => Err(FieldError::new(field, format!("unknown traffic policy {s:?} (want Cluster or Local)"))),
    }
}

pub(super) fn proxy_labels(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ProxyLabels {
    let labels = meta.labels.as_ref();
    ProxyLabels {
        service_proxy_name: labels.and_then(|l| l.get(LABEL_SERVICE_PROXY_NAME)).cloned(),
        headless: labels.is_some_and(|l| l.contains_key(LABEL_HEADLESS)),
    }
}

/// Namespace (default `default`) and name of an object.
pub fn object_id(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> NamespacedName {
    NamespacedName::new(
        meta.namespace.clone().unwrap_or_else(|| "default".to_string()),
        meta.name.clone().unwrap_or_default(),
    )
}

pub fn service(svc: &core::Service) -> Result<Service> {
    let id = object_id(&svc.metadata);
    if id.name.is_empty() {
        return Err(FieldError::new("metadata.name", "missing"));
    }
    let spec = svc.spec.as_ref().ok_or_else(|| FieldError::new("spec", "missing"))?;
    let service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIP,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => ServiceType::ExternalName,
        Some(t) => return Err(FieldError::new("spec.type", format!("unknown service type {t:?}"))),
    };
    let etp = policy("spec.externalTrafficPolicy", spec.external_traffic_policy.as_ref())?;
    let session_affinity = match spec.session_affinity.as_deref() {
        None | Some("None") | Some("") => None,
        Some("ClientIP") => Some(affinity_timeout(spec)?),
        Some(s) => return Err(FieldError::new("spec.sessionAffinity", format!("unknown value {s:?}"))),
    };
    let health_check_node_port = match (service_type, etp, spec.health_check_node_port) {
        (ServiceType::LoadBalancer, TrafficPolicy::Local, Some(p)) => {
            port("spec.healthCheckNodePort", p, true)?
        }
        _ => 0,
    };
    Ok(Service {
        service_type,
        cluster_ips: if service_type == ServiceType::ExternalName { Vec::new() } else { cluster_ips(spec)? },
        ports: service_ports(spec)?,
        external_ips: ips("spec.externalIPs", spec.external_ips.as_deref())?,
        load_balancer_source_ranges: cidrs(
            "spec.loadBalancerSourceRanges",
            spec.load_balancer_source_ranges.as_deref(),
        )?,
        ingress: ingress(svc.status.as_ref())?,
        external_traffic_policy: etp,
        internal_traffic_policy: policy("spec.internalTrafficPolicy", spec.internal_traffic_policy.as_ref())?,
        session_affinity,
        health_check_node_port,
        proxy_labels: proxy_labels(&svc.metadata),
        id,
    })
}

fn affinity_timeout(spec: &core::ServiceSpec) -> Result<u32> {
    let t = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    match t {
        None => Ok(DEFAULT_AFFINITY_TIMEOUT),
        Some(t) if (1..=86400).contains(&t) => Ok(t as u32),
        Some(t) => Err(FieldError::new(
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
            format!("{t} out of range 1-86400"),
        )),
    }
}

fn cluster_ips(spec: &core::ServiceSpec) -> Result<Vec<IpAddr>> {
    let (field, list): (&str, Vec<&String>) = match &spec.cluster_ips {
        Some(l) if !l.is_empty() => ("spec.clusterIPs", l.iter().collect()),
        _ => ("spec.clusterIP", spec.cluster_ip.iter().collect()),
    };
    let mut out = Vec::new();
    for (i, s) in list.iter().enumerate() {
        if s.is_empty() || s.as_str() == "None" {
            continue;
        }
        let f = if field == "spec.clusterIPs" { format!("{field}[{i}]") } else { field.to_string() };
        let addr = ip(f.clone(), s)?;
        if out.iter().any(|o: &IpAddr| IpFamily::of(o) == IpFamily::of(&addr)) {
            return Err(FieldError::new(f, format!("second {} cluster IP {s:?}", IpFamily::of(&addr).api_name())));
        }
        out.push(addr);
    }
    Ok(out)
}

fn service_ports(spec: &core::ServiceSpec) -> Result<Vec<ServicePortSpec>> {
    let mut out = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let f = |name: &str| format!("spec.ports[{i}].{name}");
        out.push(ServicePortSpec {
            name: p.name.clone().unwrap_or_default(),
            protocol: protocol(&f("protocol"), p.protocol.as_ref())?,
            port: port(&f("port"), p.port, false)?,
            node_port: port(&f("nodePort"), p.node_port.unwrap_or(0), true)?,
        });
    }
    Ok(out)
}

fn ips(field: &str, list: Option<&[String]>) -> Result<Vec<IpAddr>> {
    list.unwrap_or_default().iter().enumerate().map(|(i, s)| ip(format!("{field}[{i}]"), s)).collect()
}

fn cidrs(field: &str, list: Option<&[String]>) -> Result<Vec<Cidr>> {
    list.unwrap_or_default().iter().enumerate().map(|(i, s)| cidr(format!("{field}[{i}]"), s)).collect()
}

fn ingress(status: Option<&core::ServiceStatus>) -> Result<Vec<Ingress>> {
    let list = status.and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
    let mut out = Vec::new();
    for (i, ing) in list.into_iter().flatten().enumerate() {
        let Some(s) = ing.ip.as_deref().filter(|s| !s.is_empty()) else { continue };
        out.push(Ingress {
            ip: ip(format!("status.loadBalancer.ingress[{i}].ip"), s)?,
            proxy_mode: ing.ip_mode.as_deref() == Some("Proxy"),
        });
    }
    Ok(out)
}

/// Converts a slice. `Ok(None)` with skips: kube-proxy ignores the whole slice.
pub fn endpoint_slice(
    slice: &discovery::EndpointSlice,
    skips: &mut Vec<Skip>,
) -> Result<Option<EndpointSlice>> {
    let id = object_id(&slice.metadata);
    if id.name.is_empty() {
        return Err(FieldError::new("metadata.name", "missing"));
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => {
            skips.push(Skip { field: "addressType".into(), reason: "FQDN slices are not proxied".into() });
            return Ok(None);
        }
        "" => return Err(FieldError::new("addressType", "missing (want IPv4, IPv6 or FQDN)")),
        t => return Err(FieldError::new("addressType", format!("unknown address type {t:?}"))),
    };
    let label = slice.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SERVICE_NAME));
    let Some(service_name) = label.filter(|s| !s.is_empty()) else {
        skips.push(Skip {
            field: format!("metadata.labels[{LABEL_SERVICE_NAME}]"),
            reason: "missing: the slice belongs to no Service".into(),
        });
        return Ok(None);
    };
    Ok(Some(EndpointSlice {
        service: NamespacedName::new(id.namespace.clone(), service_name.clone()),
        ports: slice_ports(slice.ports.as_deref().unwrap_or_default(), skips)?,
        endpoints: slice_endpoints(slice.endpoints.as_deref().unwrap_or_default(), family, skips)?,
        proxy_labels: proxy_labels(&slice.metadata),
        trigger_time: trigger_time(&slice.metadata),
        family,
        id,
    }))
}

/// The EndpointSlice controller's trigger-time annotation (RFC 3339); unreadable: none.
fn trigger_time(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<std::time::SystemTime> {
    let text = meta.annotations.as_ref()?.get("endpoints.kubernetes.io/last-change-trigger-time")?;
    text.parse::<jiff::Timestamp>().ok().map(std::time::SystemTime::from)
}

fn slice_ports(ports: &[discovery::EndpointPort], skips: &mut Vec<Skip>) -> Result<Vec<SlicePort>> {
    let mut out = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let f = |name: &str| format!("ports[{i}].{name}");
        // The API server defaults a missing name to "" (and the protocol to TCP), so that is
        // what kube-proxy sees for a slice applied without one.
        let name = p.name.clone().unwrap_or_default();
        let number = match p.port {
            None | Some(0) => {
                skips.push(Skip { field: f("port"), reason: "port without a number is ignored".into() });
                continue;
            }
            Some(n) => port(&f("port"), n, false)?,
        };
        out.push(SlicePort { name, port: number, protocol: protocol(&f("protocol"), p.protocol.as_ref())? });
    }
    out.sort();
    Ok(out)
}

fn slice_endpoints(
    endpoints: &[discovery::Endpoint],
    family: IpFamily,
    skips: &mut Vec<Skip>,
) -> Result<Vec<SliceEndpoint>> {
    // Sized once: the cache keeps every slice, and a grown vector keeps its slack.
    let mut out = Vec::with_capacity(endpoints.len());
    for (i, ep) in endpoints.iter().enumerate() {
        let Some(first) = ep.addresses.first() else {
            skips.push(Skip { field: format!("endpoints[{i}].addresses"), reason: "empty: endpoint ignored".into() });
            continue;
        };
        let addr = ip(format!("endpoints[{i}].addresses[0]"), first)?;
        if IpFamily::of(&addr) != family {
            skips.push(Skip {
                field: format!("endpoints[{i}].addresses[0]"),
                reason: format!("{first} is not {}: endpoint ignored", family.api_name()),
            });
            continue;
        }
        let cond = ep.conditions.as_ref();
        let hints = ep.hints.as_ref();
        out.push(SliceEndpoint {
            ip: addr,
            ready: cond.and_then(|c| c.ready).unwrap_or(true),
            serving: cond.and_then(|c| c.serving).unwrap_or(true),
            terminating: cond.and_then(|c| c.terminating).unwrap_or(false),
            node_name: ep.node_name.as_deref().map(intern),
            zone: ep.zone.as_deref().map(intern),
            zone_hints: hints
                .and_then(|h| h.for_zones.as_ref())
                .map(|z| z.iter().map(|z| z.name.clone()).collect())
                .unwrap_or_default(),
            node_hints: hints
                .and_then(|h| h.for_nodes.as_ref())
                .map(|n| n.iter().map(|n| n.name.clone()).collect())
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A ServiceCIDR's name and `spec.cidrs` (its status is not read, as kube-proxy reads none).
pub fn service_cidr(s: &k8s_openapi::api::networking::v1::ServiceCIDR) -> Result<crate::model::ServiceCidr> {
    let name = s.metadata.name.clone().filter(|n| !n.is_empty()).ok_or_else(|| FieldError::new("metadata.name", "missing"))?;
    let list = s.spec.as_ref().and_then(|sp| sp.cidrs.as_deref());
    Ok(crate::model::ServiceCidr { id: NamespacedName::new(String::new(), name), cidrs: cidrs("spec.cidrs", list)? })
}

pub fn node(n: &core::Node) -> Result<Node> {
    let name = n.metadata.name.clone().filter(|s| !s.is_empty()).ok_or_else(|| FieldError::new("metadata.name", "missing"))?;
    // InternalIPs first, then ExternalIPs (the order kube-proxy's GetNodeHostIPs reads them).
    let mut addresses = Vec::new();
    let status_addrs: Vec<&core::NodeAddress> =
        n.status.as_ref().and_then(|s| s.addresses.as_ref()).map(|v| v.iter().collect()).unwrap_or_default();
    for kind in ["InternalIP", "ExternalIP"] {
        for (i, a) in status_addrs.iter().enumerate().filter(|(_, a)| a.type_ == kind) {
            addresses.push(ip(format!("status.addresses[{i}].address"), &a.address)?);
        }
    }
    let spec = n.spec.as_ref();
    let pod_cidrs = match spec.and_then(|s| s.pod_cidrs.as_ref()).filter(|l| !l.is_empty()) {
        Some(l) => cidrs("spec.podCIDRs", Some(l))?,
        None => match spec.and_then(|s| s.pod_cidr.as_deref()).filter(|s| !s.is_empty()) {
            Some(c) => vec![cidr("spec.podCIDR".into(), c)?],
            None => Vec::new(),
        },
    };
    Ok(Node {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        addresses,
        pod_cidrs,
    })
}

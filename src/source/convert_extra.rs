//! Kubernetes objects → the values in [`super::extra`]. Same rules as [`super::convert`]:
//! what would make a result wrong is an error naming the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::convert::{ip, object_id, port, protocol, proxy_labels};
use super::error::FieldError;
use super::extra::{
    BackendPort, ContainerPort, LegacyAddress, LegacyEndpoints, LegacyPort, LegacySubset, ObjectRef, Pod,
    ServiceBackend, SliceRef, SliceRefs, TargetPort,
};
use super::LABEL_SERVICE_NAME;
use crate::model::{NamespacedName, Protocol};
use crate::net::{parse_ip_sloppy, IpFamily};
use crate::settings::value::SettingValue;

/// The pre-`publishNotReadyAddresses` annotation the endpoints controller honoured.
pub const ANNOTATION_TOLERATE_UNREADY: &str = "service.alpha.kubernetes.io/tolerate-unready-endpoints";
/// Label that keeps the mirroring controller away from an Endpoints object.
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Annotation of Endpoints used as leader-election locks (never mirrored, never leftovers).
pub const ANNOTATION_LEADER: &str = "control-plane.alpha.kubernetes.io/leader";

type Result<T> = std::result::Result<T, FieldError>;

fn labels_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

pub fn service_backend(svc: &core::Service) -> Result<ServiceBackend> {
    let id = object_id(&svc.metadata);
    let spec = svc.spec.as_ref().ok_or_else(|| FieldError::new("spec", "missing"))?;
    let tolerate = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TOLERATE_UNREADY))
        // Go's `strconv.ParseBool`, as a boolean flag reads it.
        .and_then(|v| bool::parse_flag(v).ok())
        .unwrap_or(false);
    let mut ip_families = Vec::new();
    for (i, f) in spec.ip_families.iter().flatten().enumerate() {
        ip_families.push(match f.as_str() {
            "IPv4" => IpFamily::V4,
            "IPv6" => IpFamily::V6,
            _ => return Err(FieldError::new(format!("spec.ipFamilies[{i}]"), format!("unknown IP family {f:?}"))),
        });
    }
    Ok(ServiceBackend {
        selector: spec.selector.clone().filter(|s| !s.is_empty()),
        publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false) || tolerate,
        headless: spec.cluster_ip.as_deref() == Some("None"),
        external_name: spec.type_.as_deref() == Some("ExternalName"),
        ip_families,
        ports: backend_ports(spec)?,
        proxy_labels: proxy_labels(&svc.metadata),
        id,
    })
}

fn backend_ports(spec: &core::ServiceSpec) -> Result<Vec<BackendPort>> {
    let mut out = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let f = |name: &str| format!("spec.ports[{i}].{name}");
        let number = port(&f("port"), p.port, false)?;
        // The API server defaults a missing or zero targetPort to the port.
        let target = match &p.target_port {
            None | Some(IntOrString::Int(0)) => TargetPort::Number(number),
            Some(IntOrString::Int(n)) => TargetPort::Number(port(&f("targetPort"), *n, false)?),
            Some(IntOrString::String(s)) if s.is_empty() => TargetPort::Number(number),
            Some(IntOrString::String(s)) => match s.parse::<i32>() {
                Ok(n) => TargetPort::Number(port(&f("targetPort"), n, false)?),
                Err(_) => TargetPort::Name(s.clone()),
            },
        };
        out.push(BackendPort {
            name: p.name.clone().unwrap_or_default(),
            protocol: protocol(&f("protocol"), p.protocol.as_ref())?,
            port: number,
            target,
        });
    }
    Ok(out)
}

pub fn pod(p: &core::Pod) -> Result<Pod> {
    let id = object_id(&p.metadata);
    if id.name.is_empty() {
        return Err(FieldError::new("metadata.name", "missing"));
    }
    let status = p.status.as_ref();
    let mut ips = Vec::new();
    match status.and_then(|s| s.pod_ips.as_ref()).filter(|l| !l.is_empty()) {
        Some(list) => {
            for (i, a) in list.iter().enumerate() {
                ips.push(ip(format!("status.podIPs[{i}].ip"), &a.ip)?);
            }
        }
        None => {
            if let Some(s) = status.and_then(|s| s.pod_ip.as_deref()).filter(|s| !s.is_empty()) {
                ips.push(ip("status.podIP".into(), s)?);
            }
        }
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let phase = status.and_then(|s| s.phase.as_deref());
    let spec = p.spec.as_ref();
    let nonempty = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
    Ok(Pod {
        labels: labels_of(&p.metadata),
        ips,
        ready,
        terminating: p.metadata.deletion_timestamp.is_some(),
        terminal: matches!(phase, Some("Succeeded") | Some("Failed")),
        node_name: nonempty(spec.and_then(|s| s.node_name.as_ref())),
        hostname: nonempty(spec.and_then(|s| s.hostname.as_ref())),
        subdomain: nonempty(spec.and_then(|s| s.subdomain.as_ref())),
        ports: container_ports(spec)?,
        id,
    })
}

fn container_ports(spec: Option<&core::PodSpec>) -> Result<Vec<ContainerPort>> {
    let mut out = Vec::new();
    let Some(spec) = spec else { return Ok(out) };
    let sidecars = spec.init_containers.iter().flatten().enumerate().filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"));
    let groups = spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c)).chain(sidecars.map(|(i, c)| ("initContainers", i, c)));
    for (group, i, c) in groups {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let f = |name: &str| format!("spec.{group}[{i}].ports[{j}].{name}");
            out.push(ContainerPort {
                name: p.name.clone().unwrap_or_default(),
                port: port(&f("containerPort"), p.container_port, false)?,
                protocol: protocol(&f("protocol"), p.protocol.as_ref())?,
            });
        }
    }
    Ok(out)
}

fn object_ref(r: Option<&core::ObjectReference>, namespace: &str) -> Option<ObjectRef> {
    let r = r?;
    let name = r.name.clone().filter(|s| !s.is_empty())?;
    Some(ObjectRef {
        kind: r.kind.clone().unwrap_or_default(),
        id: NamespacedName::new(r.namespace.clone().unwrap_or_else(|| namespace.to_string()), name),
    })
}

pub fn endpoints(e: &core::Endpoints) -> Result<LegacyEndpoints> {
    let id = object_id(&e.metadata);
    if id.name.is_empty() {
        return Err(FieldError::new("metadata.name", "missing"));
    }
    let labels = labels_of(&e.metadata);
    let mut subsets = Vec::new();
    for (i, s) in e.subsets.iter().flatten().enumerate() {
        let f = format!("subsets[{i}]");
        let mut ports = Vec::new();
        for (j, p) in s.ports.iter().flatten().enumerate() {
            ports.push(LegacyPort {
                name: p.name.clone().unwrap_or_default(),
                port: port(&format!("{f}.ports[{j}].port"), p.port, false)?,
                protocol: protocol(&format!("{f}.ports[{j}].protocol"), p.protocol.as_ref())?,
            });
        }
        subsets.push(LegacySubset {
            addresses: addresses(&format!("{f}.addresses"), s.addresses.as_deref(), &id.namespace)?,
            not_ready: addresses(&format!("{f}.notReadyAddresses"), s.not_ready_addresses.as_deref(), &id.namespace)?,
            ports,
        });
    }
    Ok(LegacyEndpoints {
        skip_mirror: labels.get(LABEL_SKIP_MIRROR).is_some_and(|v| v == "true"),
        leader_election: e.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_LEADER)),
        proxy_labels: proxy_labels(&e.metadata),
        subsets,
        id,
    })
}

fn addresses(field: &str, list: Option<&[core::EndpointAddress]>, namespace: &str) -> Result<Vec<LegacyAddress>> {
    let mut out = Vec::new();
    for (i, a) in list.unwrap_or_default().iter().enumerate() {
        out.push(LegacyAddress {
            ip: ip(format!("{field}[{i}].ip"), &a.ip)?,
            hostname: a.hostname.clone().filter(|s| !s.is_empty()),
            node_name: a.node_name.clone().filter(|s| !s.is_empty()),
            target: object_ref(a.target_ref.as_ref(), namespace),
        });
    }
    Ok(out)
}

/// The target references of a slice's endpoints (unparsable addresses give `ip: None`;
/// the slice conversion proper reports those).
pub fn slice_refs(slice: &discovery::EndpointSlice) -> SliceRefs {
    let id = object_id(&slice.metadata);
    let endpoints = slice
        .endpoints
        .iter()
        .flatten()
        .map(|ep| SliceRef {
            ip: ep.addresses.first().and_then(|a| parse_ip_sloppy(a)),
            ready: ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            target: object_ref(ep.target_ref.as_ref(), &id.namespace),
        })
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let proto = p.protocol.as_deref().map_or(Some(Protocol::Tcp), Protocol::parse_api)?;
            Some((p.name.clone().unwrap_or_default(), u16::try_from(p.port?).ok()?, proto))
        })
        .collect();
    SliceRefs {
        service: slice.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SERVICE_NAME)).cloned(),
        slice: id,
        endpoints,
        ports,
    }
}

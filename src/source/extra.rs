//! What the controllers read that the proxier does not: Pods, legacy `v1/Endpoints`, the
//! parts of a Service the endpoint controllers use (selector, target ports), and the
//! target references of slice endpoints. Kube-free values, like [`crate::model`]; the
//! endpoint derivation ([`crate::derive`]) and `svcproxy lint` read them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Serialize;

use crate::model::{NamespacedName, Protocol, ProxyLabels};
use crate::net::IpFamily;

/// Everything beyond services, slices and nodes, plus where each object came from.
#[derive(Debug, Default, Clone)]
pub struct Extra {
    pub pods: Vec<Pod>,
    pub endpoints: Vec<LegacyEndpoints>,
    /// Per Service: what the endpoint controllers read (same order as `services`).
    pub backends: Vec<ServiceBackend>,
    /// Per EndpointSlice that was read (skipped ones included): its endpoints' references.
    pub slice_refs: Vec<SliceRefs>,
    /// Where each object was read: `(kind, namespace/name)` → `(file, line)`.
    pub origins: BTreeMap<(String, NamespacedName), (PathBuf, u64)>,
}

impl Extra {
    /// `file:line` of an object, when it was read from one.
    pub fn origin(&self, kind: &str, id: &NamespacedName) -> Option<String> {
        self.origins.get(&(kind.to_string(), id.clone())).map(|(p, l)| format!("{}:{l}", p.display()))
    }
}

/// A Pod, reduced to what the endpoint controllers read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pod {
    pub id: NamespacedName,
    pub labels: BTreeMap<String, String>,
    /// `status.podIPs` (or `status.podIP`), in order.
    pub ips: Vec<IpAddr>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `status.phase` is `Succeeded` or `Failed`.
    pub terminal: bool,
    pub node_name: Option<String>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    /// Ports of the containers and of restartable (sidecar) init containers, in order.
    pub ports: Vec<ContainerPort>,
}

impl Pod {
    pub fn ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerPort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

/// A Service port's `targetPort`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub target: TargetPort,
}

/// What the endpoint controllers read of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceBackend {
    pub id: NamespacedName,
    /// `spec.selector`; `None` when absent or empty (the API stores an empty map as none).
    pub selector: Option<BTreeMap<String, String>>,
    /// `spec.publishNotReadyAddresses`, or the tolerate-unready annotation set to true.
    pub publish_not_ready: bool,
    /// `spec.clusterIP: None`.
    pub headless: bool,
    pub external_name: bool,
    /// `spec.ipFamilies`.
    pub ip_families: Vec<IpFamily>,
    pub ports: Vec<BackendPort>,
    pub proxy_labels: ProxyLabels,
}

/// `kind namespace/name` of what an endpoint points at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    pub kind: String,
    pub id: NamespacedName,
}

/// One address of a legacy Endpoints subset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegacyAddress {
    pub ip: IpAddr,
    pub hostname: Option<String>,
    pub node_name: Option<String>,
    pub target: Option<ObjectRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegacyPort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegacySubset {
    pub addresses: Vec<LegacyAddress>,
    pub not_ready: Vec<LegacyAddress>,
    pub ports: Vec<LegacyPort>,
}

/// A legacy `v1/Endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegacyEndpoints {
    pub id: NamespacedName,
    /// Label `endpointslice.kubernetes.io/skip-mirror: "true"`.
    pub skip_mirror: bool,
    /// Annotation `control-plane.alpha.kubernetes.io/leader` (a leader-election lock).
    pub leader_election: bool,
    pub proxy_labels: ProxyLabels,
    pub subsets: Vec<LegacySubset>,
}

/// One endpoint of an EndpointSlice as read, with its target reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceRef {
    pub ip: Option<IpAddr>,
    pub ready: bool,
    pub target: Option<ObjectRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceRefs {
    pub slice: NamespacedName,
    /// The `kubernetes.io/service-name` label, if any.
    pub service: Option<String>,
    pub endpoints: Vec<SliceRef>,
    /// The slice's ports' names, numbers and protocols.
    pub ports: Vec<(String, u16, Protocol)>,
}

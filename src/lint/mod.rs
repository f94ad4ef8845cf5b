//! `svcproxy lint`: the checks the API server's repair controllers and the endpoint
//! controllers make, over a cluster dump, plus what svcproxy skipped or would render
//! oddly. Pure: a [`ClusterState`] (after endpoint derivation) in, [`Finding`]s out.
//!
//! Every finding has a stable code; the families are
//! `SP00x` ClusterIPs, `SP01x` NodePorts ([`allocation`]), `SP02x` the `kubernetes`
//! Service ([`kubernetes_service`]), `SP03x` leftovers ([`leftovers`]), `SP04x` Pods
//! ([`pods`]), `SP05x` external addresses ([`external`]), `SP06x` derived endpoints and
//! `SP09x` reading and rendering ([`reading`]). [`CODES`] lists them all.

pub mod allocation;
pub mod external;
pub mod kubernetes_service;
pub mod leftovers;
pub mod options;
pub mod pods;
pub mod reading;

use std::fmt;

use serde::Serialize;

use crate::derive::Report;
use crate::model::NamespacedName;
use crate::source::ClusterState;

pub use options::{NodePortRange, Options, OptionsError, ServiceRanges};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// `Kind namespace/name` of an object a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectId {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectId {
    pub fn new(kind: &str, id: &NamespacedName) -> Self {
        ObjectId { kind: kind.to_string(), namespace: id.namespace.clone(), name: id.name.clone() }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub severity: Severity,
    pub objects: Vec<ObjectId>,
    pub message: String,
    /// `file:line` of each object read from a file (filled in by [`run`]).
    pub locations: Vec<String>,
}

impl Finding {
    /// A finding with the severity [`CODES`] gives `code`.
    pub fn new(code: &'static str, objects: Vec<ObjectId>, message: impl Into<String>) -> Self {
        let severity = CODES.iter().find(|c| c.0 == code).map_or(Severity::Error, |c| c.1);
        Finding { code, severity, objects, message: message.into(), locations: Vec::new() }
    }
}

/// Every code: severity and a one-line summary (printed by `svcproxy lint --help`).
pub const CODES: &[(&str, Severity, &str)] = &[
    ("SP001", Severity::Error, "ClusterIP assigned to more than one Service"),
    ("SP002", Severity::Error, "ClusterIP outside --service-cluster-ip-range"),
    ("SP003", Severity::Warning, "ClusterIP outside every ServiceCIDR"),
    ("SP010", Severity::Error, "NodePort assigned to more than one Service"),
    ("SP011", Severity::Error, "NodePort outside --service-node-port-range"),
    ("SP020", Severity::Warning, "the default/kubernetes Service is missing"),
    ("SP021", Severity::Error, "kubernetes Service ClusterIP is not the service range's first address"),
    ("SP022", Severity::Error, "kubernetes Service lacks port https 443/TCP"),
    ("SP023", Severity::Warning, "kubernetes Service has a selector"),
    ("SP024", Severity::Warning, "kubernetes Service has no endpoints"),
    ("SP025", Severity::Warning, "kubernetes Service targetPort differs from the API servers' port"),
    ("SP030", Severity::Warning, "EndpointSlice whose Service does not exist"),
    ("SP031", Severity::Warning, "Endpoints whose Service does not exist"),
    ("SP040", Severity::Warning, "selector matches no Pod"),
    ("SP041", Severity::Warning, "endpoint refers to a Pod that does not exist"),
    ("SP042", Severity::Warning, "endpoint is ready but its Pod is not"),
    ("SP043", Severity::Warning, "named targetPort resolves on none of the selected Pods"),
    ("SP044", Severity::Info, "selected Pod has no IP yet"),
    ("SP045", Severity::Info, "named targetPort missing on some selected Pods"),
    ("SP046", Severity::Info, "selected Pod runs on a Node the input does not hold"),
    ("SP050", Severity::Error, "external IP is another Service's ClusterIP"),
    ("SP051", Severity::Error, "load-balancer IP is a Service's ClusterIP"),
    ("SP052", Severity::Warning, "external IPs get no rules (AllowServiceExternalIPs off)"),
    ("SP060", Severity::Info, "EndpointSlices derived from Pods or v1/Endpoints"),
    ("SP061", Severity::Info, "v1/Endpoints not mirrored"),
    ("SP090", Severity::Info, "skipped while reading"),
    ("SP091", Severity::Warning, "service port has no endpoints in any of its EndpointSlices"),
    ("SP092", Severity::Info, "EndpointSlice of an IP family the Service does not have"),
];

/// What the checks look at.
pub struct Input<'a> {
    pub state: &'a ClusterState,
    pub derived: &'a Report,
    pub options: &'a Options,
}

/// Every check, findings sorted by code, objects and message (deterministic).
pub fn run(input: &Input) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(allocation::cluster_ips(input));
    out.extend(allocation::outside_service_cidrs(input));
    out.extend(allocation::node_ports(input));
    out.extend(kubernetes_service::check(input));
    out.extend(leftovers::check(input));
    out.extend(pods::check(input));
    out.extend(external::check(input));
    out.extend(external::unserved(input));
    out.extend(reading::check(input));
    for f in &mut out {
        // A finding about the input itself (a reader's note) carries its own place.
        if f.locations.is_empty() {
            f.locations = locations(input, &f.objects);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Where the objects were read, in their order, each once.
fn locations(input: &Input, objects: &[ObjectId]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for o in objects {
        let id = NamespacedName::new(o.namespace.clone(), o.name.clone());
        if let Some(at) = input.state.extra.origin(&o.kind, &id).filter(|at| !out.contains(at)) {
            out.push(at);
        }
    }
    out
}

/// The worst severity among `findings`.
pub fn worst(findings: &[Finding]) -> Option<Severity> {
    findings.iter().map(|f| f.severity).max()
}

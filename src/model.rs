//! Domain types. Sources turn Kubernetes objects into [`Service`], [`EndpointSlice`] and
//! [`Node`] values (already validated); trackers turn those into per-family
//! [`ServicePort`]s and [`Endpoint`]s. Nothing here knows YAML, kube types or a backend.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use crate::net::{join_host_port, Cidr, IpFamily};

/// `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl NamespacedName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        NamespacedName { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    /// The API spelling (`TCP`).
    pub fn parse_api(s: &str) -> Option<Protocol> {
        Self::ALL.into_iter().find(|p| p.upper() == s)
    }

    /// The iptables spelling (`tcp`), also used in chain-name hashes.
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    pub fn upper(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// The iptables spelling (`tcp`, `udp`, `sctp`).
    pub fn from_name(s: &str) -> Option<Protocol> {
        Self::ALL.into_iter().find(|p| p.lower() == s)
    }

    /// The `IPPROTO_*` number (what IPVS, conntrack and the kernel's tables speak).
    pub fn number(self) -> u16 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn from_number(n: u16) -> Option<Protocol> {
        Self::ALL.into_iter().find(|p| p.number() == n)
    }
}

/// The API spelling (`TCP`).
impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.upper())
    }
}

/// kube-proxy's `ServicePortName`: a service and one of its ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServicePortName {
    pub service: NamespacedName,
    pub port: String,
    pub protocol: Protocol,
}

/// The keys of one service's ports in a map ordered by `ServicePortName` (a range scan
/// from the smallest key a service can have: the empty port name and [`LEAST_PROTOCOL`]).
pub fn ports_of<'a, V>(map: &'a BTreeMap<ServicePortName, V>, id: &'a NamespacedName) -> impl Iterator<Item = &'a ServicePortName> {
    port_entries(map, id).map(|(k, _)| k)
}

/// [`ports_of`], with each key's value.
pub fn port_entries<'a, V>(map: &'a BTreeMap<ServicePortName, V>, id: &'a NamespacedName) -> impl Iterator<Item = (&'a ServicePortName, &'a V)> {
    let start = ServicePortName { service: id.clone(), port: String::new(), protocol: LEAST_PROTOCOL };
    map.range(start..).take_while(move |(k, _)| &k.service == id)
}

/// The smallest [`Protocol`] in its derived order (the first variant declared), where
/// [`ports_of`] starts; a test checks it against every variant.
const LEAST_PROTOCOL: Protocol = Protocol::Tcp;

impl fmt::Display for ServicePortName {
    /// `ns/name:port`, or `ns/name` for an unnamed port (no protocol).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ServiceType {
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalName,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// One port of a [`Service`], family-agnostic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePortSpec {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: u16,
}

/// A load-balancer ingress point (`status.loadBalancer.ingress[]`) that has an IP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Ingress {
    pub ip: IpAddr,
    /// `ipMode: Proxy`: the load balancer proxies, so the node must not capture the VIP.
    pub proxy_mode: bool,
}

/// A Service, validated and reduced to what a proxier reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Service {
    pub id: NamespacedName,
    pub service_type: ServiceType,
    /// `spec.clusterIPs` paired with `spec.ipFamilies` (or the single `clusterIP`).
    /// Empty for headless services (`None`).
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePortSpec>,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<Cidr>,
    pub ingress: Vec<Ingress>,
    pub external_traffic_policy: TrafficPolicy,
    pub internal_traffic_policy: TrafficPolicy,
    /// ClientIP affinity timeout in seconds; `None` means no affinity.
    pub session_affinity: Option<u32>,
    pub health_check_node_port: u16,
    pub proxy_labels: ProxyLabels,
}

/// The two labels kube-proxy's informers select on: objects carrying
/// `service.kubernetes.io/service-proxy-name` belong to another proxy, and
/// `service.kubernetes.io/headless` marks slices of headless services.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProxyLabels {
    pub service_proxy_name: Option<String>,
    pub headless: bool,
}

impl ProxyLabels {
    /// Whether a proxy configured with `own_name` (kube-proxy: none) handles the object.
    pub fn selected_by(&self, own_name: Option<&str>) -> bool {
        !self.headless && self.service_proxy_name.as_deref() == own_name
    }
}

impl Service {
    pub fn cluster_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.cluster_ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }
}

/// One port of an EndpointSlice. kube-proxy ignores ports without a name or number;
/// sources keep them out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SlicePort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

/// One endpoint of an EndpointSlice (only `addresses[0]` is used, as kube-proxy does).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SliceEndpoint {
    pub ip: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// Shared with every endpoint of the same node ([`crate::intern`]): a cluster has few.
    #[serde(serialize_with = "shared_text")]
    pub node_name: Option<Arc<str>>,
    #[serde(serialize_with = "shared_text")]
    pub zone: Option<Arc<str>>,
    pub zone_hints: Names,
    pub node_hints: Names,
}

fn shared_text<S: serde::Serializer>(v: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    v.as_deref().serialize(s)
}

/// A set of names that is nearly always empty (an endpoint's topology hints): one pointer,
/// allocated only when it holds a name, where a `BTreeSet` is three words in every
/// endpoint (hundreds of thousands at scale). Reads as the set.
#[derive(Clone, Debug, Default)]
// One pointer in place of a set's three words: the box is allocated only when non-empty.
#[allow(clippy::box_collection)]
pub struct Names(Option<Box<BTreeSet<String>>>);

static NO_NAMES: BTreeSet<String> = BTreeSet::new();

impl std::ops::Deref for Names {
    type Target = BTreeSet<String>;
    fn deref(&self) -> &BTreeSet<String> {
        self.0.as_deref().unwrap_or(&NO_NAMES)
    }
}

impl From<BTreeSet<String>> for Names {
    fn from(set: BTreeSet<String>) -> Self {
        Names((!set.is_empty()).then(|| Box::new(set)))
    }
}

impl FromIterator<String> for Names {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        BTreeSet::from_iter(iter).into()
    }
}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Names {}

impl Serialize for Names {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

/// An EndpointSlice, validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EndpointSlice {
    /// Namespace and slice name.
    pub id: NamespacedName,
    /// The Service it belongs to (label `kubernetes.io/service-name`).
    pub service: NamespacedName,
    pub family: IpFamily,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
    pub proxy_labels: ProxyLabels,
    /// `endpoints.kubernetes.io/last-change-trigger-time`: when the change this slice
    /// carries was triggered (the network-programming SLI is measured from it).
    #[serde(skip)]
    pub trigger_time: Option<std::time::SystemTime>,
}

/// This node, as far as the proxier cares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub addresses: Vec<IpAddr>,
    pub pod_cidrs: Vec<Cidr>,
}

pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

impl Node {
    /// kube-proxy's `GetNodeHostIPs`: the first address (InternalIPs come first), and the
    /// first of the other family if any. Empty when the Node has no address.
    pub fn host_ips(&self) -> Vec<IpAddr> {
        let Some(first) = self.addresses.first() else { return Vec::new() };
        let mut out = vec![*first];
        out.extend(self.addresses.iter().find(|a| a.is_ipv4() != first.is_ipv4()).copied());
        out
    }
}

/// A ServiceCIDR object (`networking.k8s.io/v1`, cluster-scoped): ranges ClusterIPs are
/// allocated from. kube-proxy's nftables mode drops traffic to their unallocated addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    /// Its name (cluster-scoped: no namespace).
    pub id: NamespacedName,
    pub cidrs: Vec<Cidr>,
}

/// The cluster's ServiceCIDRs: every object's `spec.cidrs`, each once, in the order first
/// read (kube-proxy passes a set; nft lists an anonymous set's elements sorted).
pub fn service_cidrs(objects: &[ServiceCidr]) -> Vec<Cidr> {
    let mut out: Vec<Cidr> = Vec::new();
    for c in objects.iter().flat_map(|o| &o.cidrs) {
        if !out.contains(c) {
            out.push(*c);
        }
    }
    out
}

/// kube-proxy's per-family service port info (`BaseServicePortInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePort {
    pub name: ServicePortName,
    pub cluster_ip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub node_port: u16,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_vips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<Cidr>,
    pub session_affinity: Option<u32>,
    pub health_check_node_port: u16,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
}

impl ServicePort {
    /// A ClusterIP-only port with kube-proxy's defaults (tests build the rest on it).
    #[cfg(test)]
    pub fn plain(name: ServicePortName, cluster_ip: IpAddr, port: u16) -> Self {
        ServicePort {
            protocol: name.protocol,
            name,
            cluster_ip,
            port,
            node_port: 0,
            external_ips: vec![],
            load_balancer_vips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity: None,
            health_check_node_port: 0,
            external_policy_local: false,
            internal_policy_local: false,
        }
    }

    /// NodePort, ExternalIPs or LoadBalancer VIPs make it reachable from outside.
    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.load_balancer_vips.is_empty() || !self.external_ips.is_empty()
    }

    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }

    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.external_policy_local && self.externally_accessible())
    }
}

/// kube-proxy's `BaseEndpointInfo`, for one service port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub is_local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub zone_hints: Names,
    pub node_hints: Names,
}

impl Endpoint {
    /// `ip:port` (`[ip]:port` for IPv6): the identity and the sort key.
    pub fn addr_string(&self) -> String {
        join_host_port(&self.ip, self.port)
    }
}

// Kept per endpoint (500,000 of each at 50,000 services x 10 endpoints): the sizes the
// compact hints and the shared node and zone names give.
const _: () = assert!(std::mem::size_of::<Endpoint>() <= 40);
const _: () = assert!(std::mem::size_of::<SliceEndpoint>() <= 72);

pub type ServicePortMap = BTreeMap<ServicePortName, Arc<ServicePort>>;
/// Endpoints per service port, sorted by `ip:port` string as kube-proxy sorts them.
pub type EndpointsMap = BTreeMap<ServicePortName, Arc<Vec<Endpoint>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_and_serialize_as_their_set() {
        let empty = Names::from(BTreeSet::new());
        assert_eq!(empty, Names::default());
        assert!(empty.is_empty());
        let zones: Names = ["b".to_string(), "a".to_string()].into_iter().collect();
        assert!(zones.contains("a") && zones.len() == 2);
        assert_ne!(zones, empty);
        assert_eq!(serde_json::to_string(&zones).unwrap(), r#"["a","b"]"#);
        assert_eq!(serde_json::to_string(&empty).unwrap(), "[]");
    }

    #[test]
    fn service_port_name_omits_empty_port_name() {
        let mut spn = ServicePortName {
            service: NamespacedName::new("ns1", "svc1"),
            port: "p80".into(),
            protocol: Protocol::Tcp,
        };
        assert_eq!(spn.to_string(), "ns1/svc1:p80");
        spn.port.clear();
        assert_eq!(spn.to_string(), "ns1/svc1");
    }

    #[test]
    fn ports_of_starts_at_the_least_protocol_and_finds_every_port_of_the_service() {
        // No wildcard: a new protocol does not compile until it is listed in `all`.
        let listed = |p: Protocol| match p {
            Protocol::Tcp | Protocol::Udp | Protocol::Sctp => p,
        };
        let all = [Protocol::Sctp, Protocol::Udp, Protocol::Tcp].map(listed);
        assert!(all.iter().all(|p| Protocol::ALL.contains(p)), "Protocol::ALL, which the readers search, lists every protocol");
        assert!(all.iter().all(|p| LEAST_PROTOCOL <= *p), "{LEAST_PROTOCOL:?} is not the least of {all:?}");
        let key = |svc: &str, port: &str, protocol| ServicePortName { service: NamespacedName::new("ns", svc), port: port.into(), protocol };
        let mut map = BTreeMap::new();
        for svc in ["a", "b", "c"] {
            for p in all {
                map.insert(key(svc, "", p), ());
                map.insert(key(svc, "dns", p), ());
            }
        }
        let b = NamespacedName::new("ns", "b");
        let found: Vec<&ServicePortName> = ports_of(&map, &b).collect();
        assert_eq!(found.len(), 2 * all.len());
        assert!(found.iter().all(|k| k.service == b));
    }
}

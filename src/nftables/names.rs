//! kube-proxy's nftables names: the table, its fixed chains, sets and maps, and the
//! per-service-port and per-endpoint chain names (`service-HASH-ns/name/proto/port`,
//! `endpoint-HASH-ns/name/proto/port__ip/port`), where HASH is the first 8 characters of
//! the base32 SHA-256 of the rest (pkg/proxy/nftables/proxier.go, hashAndTruncate).

use crate::xtables::names::base32_sha256;
use crate::model::ServicePortName;

pub const TABLE: &str = "kube-proxy";
pub const TABLE_COMMENT: &str = "rules for kube-proxy";

pub const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
pub const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";
pub const FILTER_INPUT: &str = "filter-input";
pub const FILTER_FORWARD: &str = "filter-forward";
pub const FILTER_OUTPUT: &str = "filter-output";
pub const NAT_PREROUTING: &str = "nat-prerouting";
pub const NAT_OUTPUT: &str = "nat-output";
pub const NAT_POSTROUTING: &str = "nat-postrouting";

pub const SERVICES: &str = "services";
pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NODEPORT_IPS: &str = "nodeport-ips";
pub const CLUSTER_IPS: &str = "cluster-ips";
pub const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
pub const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const REJECT_CHAIN: &str = "reject-chain";
pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
pub const FIREWALL_IPS: &str = "firewall-ips";
pub const FIREWALL_CHECK: &str = "firewall-check";
pub const MARK_MASQ: &str = "mark-for-masquerade";
pub const MASQUERADING: &str = "masquerading";
/// kube-proxy v1.36 on: a local endpoint's `IP . IP . proto . port` (a pod reaching itself
/// through a service), masqueraded in `masquerading`.
pub const HAIRPIN_CONNECTIONS: &str = "hairpin-connections";

/// `KubeProxyNFTablesLocalhostNodePorts` (kube-proxy v1.37): the `proto . NodePort` keys of
/// localhost NodePorts kube-proxy rejects, each to its protocol's reject chain.
pub const LOCALHOST_NODEPORT_REJECT_PORTS: &str = "localhost-nodeport-reject-ports";
/// Its declaration after `add map FAMILY TABLE NAME`.
pub const LOCALHOST_NODEPORT_REJECT_PORTS_SPEC: &str = "{ type inet_proto . inet_service : verdict ; comment \"localhost NodePorts rejected by kube-proxy\" ; }";

/// The chain that counts and rejects one protocol's localhost NodePort traffic
/// (`localhost-nodeport-reject-udp`).
pub fn localhost_nodeport_reject_chain(proto: &str) -> String {
    format!("localhost-nodeport-reject-{proto}")
}

/// The named counter of that chain, which `/metrics` reads back
/// (`kubeproxy_nftables_localhost_nodeport_rejected_packets_total`).
pub fn localhost_nodeport_rejected_counter(proto: &str) -> String {
    format!("localhost-nodeport-rejected-{proto}")
}

/// knftables' NameLengthMax less the longest prefix (`chainNameBaseLengthMax`).
const BASE_LENGTH_MAX: usize = 256 - 16;

/// `HASH-name`, cut to [`BASE_LENGTH_MAX`] with `...` if longer.
fn hash_and_truncate(name: &str) -> String {
    let hash = base32_sha256(&[name]);
    let mut s = format!("{}-{name}", &hash[..8]);
    if s.len() > BASE_LENGTH_MAX {
        // The name is ASCII (names, protocol, digits, dots, slashes).
        s.truncate(BASE_LENGTH_MAX - 3);
        s.push_str("...");
    }
    s
}

/// `ns/name/proto/port`, hashed: the base of a service port's chains.
fn service_base(spn: &ServicePortName, proto: &str) -> String {
    hash_and_truncate(&format!("{}/{}/{proto}/{}", spn.service.namespace, spn.service.name, spn.port))
}

/// A service port's four chains (they differ only in prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceChains {
    /// Cluster traffic policy: `service-…`.
    pub cluster: String,
    /// Local traffic policy: `local-…`.
    pub local: String,
    pub external: String,
    pub firewall: String,
}

impl ServiceChains {
    pub fn new(spn: &ServicePortName, proto: &str) -> Self {
        let base = service_base(spn, proto);
        ServiceChains {
            cluster: format!("service-{base}"),
            local: format!("local-{base}"),
            external: format!("external-{base}"),
            firewall: format!("firewall-{base}"),
        }
    }
}

/// An endpoint's chain and affinity set (`endpoint-…`, `affinity-…`) from its address as
/// text (an IPv6 address's colons become dots) and port.
pub fn endpoint_names(spn: &ServicePortName, proto: &str, ip: &str, port: u16) -> (String, String) {
    let ip = ip.replace(':', ".");
    let base = hash_and_truncate(&format!("{}/{}/{proto}/{}__{ip}/{port}", spn.service.namespace, spn.service.name, spn.port));
    (format!("endpoint-{base}"), format!("affinity-{base}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NamespacedName, Protocol};

    fn spn(ns: &str, name: &str, port: &str) -> ServicePortName {
        ServicePortName { service: NamespacedName { namespace: ns.into(), name: name.into() }, port: port.into(), protocol: Protocol::Tcp }
    }

    /// Names from kube-proxy's TestOverallNFTablesRules.
    #[test]
    fn matches_kube_proxy_names() {
        assert_eq!(ServiceChains::new(&spn("ns1", "svc1", "p80"), "tcp").cluster, "service-ULMVA6XW-ns1/svc1/tcp/p80");
        assert_eq!(ServiceChains::new(&spn("ns2", "svc2", "p80"), "tcp").external, "external-42NFTM6N-ns2/svc2/tcp/p80");
        let (chain, affinity) = endpoint_names(&spn("ns5", "svc5", "p80"), "tcp", "10.180.0.3", 80);
        assert_eq!(chain, "endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80");
        assert_eq!(affinity, "affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80");
    }

    const LONG_NS: &str = "very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx";
    const LONG_NAME: &str = "very-long-service-name-why-would-you-even-do-this-i-mean-really";
    const LONG_PORT: &str = "port-443-providing-the-hypertext-transmission-protocol-with-tls";

    fn long_spn() -> ServicePortName {
        ServicePortName { protocol: Protocol::Sctp, ..spn(LONG_NS, LONG_NAME, LONG_PORT) }
    }

    /// kube-proxy's Test_servicePortChainNameBase.
    #[test]
    fn service_chain_bases_match_kube_proxy() {
        assert_eq!(service_base(&spn("testing", "service", "http"), "tcp"), "P4ZYZVCF-testing/service/tcp/http");
        assert_eq!(service_base(&spn("testing", "service", "https"), "tcp"), "LZBRENCP-testing/service/tcp/https");
        assert_eq!(service_base(&long_spn(), "sctp"), format!("KR6NACJP-{LONG_NS}/{LONG_NAME}/sctp/{LONG_PORT}"));
    }

    /// kube-proxy's Test_servicePortEndpointChainNameBase (IPv6 colons become dots; a name
    /// over 240 characters is cut to 237 and `...`).
    #[test]
    fn endpoint_chain_bases_match_kube_proxy() {
        let base = |s: &ServicePortName, proto: &str, ip: &str, port: u16| {
            endpoint_names(s, proto, ip, port).0.strip_prefix("endpoint-").unwrap().to_owned()
        };
        let t = spn("testing", "service", "http");
        assert_eq!(base(&t, "tcp", "10.180.0.1", 80), "JO2XBXZR-testing/service/tcp/http__10.180.0.1/80");
        assert_eq!(base(&t, "tcp", "10.180.0.2", 80), "5S6H3H22-testing/service/tcp/http__10.180.0.2/80");
        assert_eq!(base(&t, "tcp", "fd80:abcd:12::a1b2:c3d4:e5f6:9999", 80), "U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80");
        let long = long_spn();
        let head = format!("{LONG_NS}/{LONG_NAME}/sctp/{LONG_PORT}");
        assert_eq!(base(&long, "sctp", "1234:5678:9abc:def0::abc:1234", 443), format!("5YS7AFEA-{head}__1234.5678.9abc.def0..abc.1234/443"));
        assert_eq!(base(&long, "sctp", "1234:5678:9abc:def0::abcd:1234:5678", 443), format!("CI6C53Q3-{head}__1234.5678.9abc.def0..abcd.1234..."));
        assert_eq!(base(&long, "sctp", "1234:5678:9abc:def0::abcd:1234:8765", 443), format!("2FLXFK6X-{head}__1234.5678.9abc.def0..abcd.1234..."));
    }

    #[test]
    fn long_names_are_cut_with_dots() {
        let long = "a".repeat(300);
        let s = hash_and_truncate(&long);
        assert_eq!(s.len(), BASE_LENGTH_MAX);
        assert!(s.ends_with("..."));
    }
}

//! The optional first document of a fixture (`kind: SvcproxyFixture`): the node and the
//! options the CLI would otherwise take from flags. See `fixtures/README.md`.

use std::collections::BTreeMap;

use serde::Deserialize;

pub const FIXTURE_KIND: &str = "SvcproxyFixture";

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FixtureDoc {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub node: FixtureNode,
    #[serde(default)]
    pub options: FixtureOptions,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FixtureNode {
    pub name: Option<String>,
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub pod_cidrs: Vec<String>,
    /// The node's interface addresses (`ip/prefix`) by interface name, for resolving
    /// `nodePortAddresses` as kube-proxy does from the host's interfaces.
    #[serde(default)]
    pub interface_addresses: BTreeMap<String, Vec<String>>,
}

/// Every field optional; `None` means "the CLI flag or kube-proxy's default".
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FixtureOptions {
    pub mode: Option<String>,
    pub ip_family: Option<String>,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
    pub detect_local_mode: Option<String>,
    pub pod_bridge_interface: Option<String>,
    pub pod_interface_name_prefix: Option<String>,
    pub masquerade_bit: Option<u32>,
    pub masquerade_all: Option<bool>,
    /// The mark text itself; only kube-proxy's unit-test fake needs this (it injects
    /// `0x4000`, where a real kube-proxy formats bit 14 as `0x00004000`).
    pub masquerade_mark: Option<String>,
    pub node_port_addresses: Option<Vec<String>>,
    pub localhost_node_ports: Option<bool>,
    pub random_fully: Option<bool>,
    pub nfacct: Option<bool>,
    #[serde(rename = "conntrackTCPBeLiberal")]
    pub conntrack_tcp_be_liberal: Option<bool>,
    pub large_cluster_endpoints_threshold: Option<usize>,
    pub service_proxy_name: Option<String>,
    pub ipvs_scheduler: Option<String>,
    pub ipvs_strict_arp: Option<bool>,
    #[serde(rename = "ipvsExcludeCIDRs")]
    pub ipvs_exclude_cidrs: Option<Vec<String>>,
    /// Incremental fixtures only: this step is a full sync (as after a failed restore).
    pub force_full_sync: Option<bool>,
    /// Incremental fixtures only: whether stale chains are deleted in this step
    /// (kube-proxy deletes them only once per sync period in large clusters).
    pub stale_chain_cleanup_due: Option<bool>,
    /// The sync period (Go duration); informative in fixtures.
    pub sync_period: Option<String>,
}

//! Flags shared by the commands that build rules, with kube-proxy's names and defaults,
//! validated by clap and turned into a [`Settings`] layer (stage one of two: resolution
//! against the config file, the fixture and the Node happens in [`crate::config`]).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Iptables,
    Ipvs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FamilyArg {
    Ipv4,
    Ipv6,
    Both,
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DetectLocalArg {
    #[value(name = "ClusterCIDR")]
    ClusterCidr,
    #[value(name = "NodeCIDR")]
    NodeCidr,
    #[value(name = "BridgeInterface")]
    BridgeInterface,
    #[value(name = "InterfaceNamePrefix")]
    InterfaceNamePrefix,
    #[value(name = "None")]
    None,
}

/// Where the cluster state comes from and how this node is set up.
#[derive(Debug, Clone, Args)]
pub struct ConfigFlags {
    /// Cluster state: a YAML/JSON file, a directory of them, or - for stdin (watch mode
    /// without it follows the API server)
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,

    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1); flags override it
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Proxy mode
    #[arg(long, visible_alias = "proxy-mode", value_enum)]
    pub mode: Option<ModeArg>,

    /// IP families to render (auto: the node's families)
    #[arg(long, value_enum)]
    pub ip_family: Option<FamilyArg>,

    /// This node's name (as in EndpointSlice nodeName)
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub hostname_override: Option<String>,

    /// This node's IP; repeat for the other family
    #[arg(long, value_name = "IP")]
    pub node_ip: Vec<String>,

    /// Pod network CIDRs (comma list, one per family), for local-traffic detection
    #[arg(long, value_name = "CIDRS")]
    pub cluster_cidr: Option<String>,

    /// How traffic from local pods is recognised
    #[arg(long, value_enum, value_name = "MODE")]
    pub detect_local_mode: Option<DetectLocalArg>,

    /// The pod bridge, with --detect-local-mode BridgeInterface
    #[arg(long, value_name = "IFACE")]
    pub pod_bridge_interface: Option<String>,

    /// The pod interface prefix, with --detect-local-mode InterfaceNamePrefix
    #[arg(long, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,

    /// The fwmark bit marking packets to masquerade [default: 14]
    #[arg(long, value_name = "BIT", value_parser = clap::value_parser!(u32).range(0..=31))]
    pub masquerade_bit: Option<u32>,

    /// Masquerade all traffic sent to ClusterIPs
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub masquerade_all: Option<bool>,

    /// Addresses NodePorts answer on: CIDRs (comma list, repeatable) or "primary" [default: all]
    #[arg(long, value_name = "CIDRS")]
    pub nodeport_addresses: Vec<String>,

    /// Allow NodePorts on 127.0.0.1 (IPv4) [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub iptables_localhost_nodeports: Option<bool>,

    /// Use MASQUERADE --random-fully (iptables >= 1.6.2) [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub random_fully: Option<bool>,

    /// Count packets with kube-proxy's nfacct counters [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub nfacct: Option<bool>,

    /// The node has nf_conntrack_tcp_be_liberal set (no INVALID drop rule) [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub conntrack_tcp_be_liberal: Option<bool>,

    /// Proxy only objects labelled service.kubernetes.io/service-proxy-name=NAME
    #[arg(long, value_name = "NAME")]
    pub service_proxy_name: Option<String>,

    /// Compute every Service's EndpointSlices from Pods and v1/Endpoints as the controllers
    /// do, replacing the input's (without it: only for Services the input has no slices for)
    #[arg(long)]
    pub derive_endpoints: bool,
}

impl ConfigFlags {
    /// `--from`, which every command but `sync --watch` needs.
    pub fn from_path(&self) -> anyhow::Result<&std::path::Path> {
        self.from.as_deref().ok_or_else(|| anyhow::anyhow!("--from PATH is required (a cluster state file, directory, or -)"))
    }

    pub fn settings(&self) -> Settings {
        Settings {
            mode: self.mode.map(|m| match m {
                ModeArg::Iptables => "iptables".into(),
                ModeArg::Ipvs => "ipvs".into(),
            }),
            ip_family: self.ip_family.map(|f| {
                match f {
                    FamilyArg::Ipv4 => "ipv4",
                    FamilyArg::Ipv6 => "ipv6",
                    FamilyArg::Both => "both",
                    FamilyArg::Auto => "auto",
                }
                .into()
            }),
            hostname_override: self.hostname_override.clone(),
            node_ips: (!self.node_ip.is_empty()).then(|| self.node_ip.clone()),
            cluster_cidr: self.cluster_cidr.clone(),
            detect_local_mode: self.detect_local_mode.map(|m| {
                match m {
                    DetectLocalArg::ClusterCidr => "ClusterCIDR",
                    DetectLocalArg::NodeCidr => "NodeCIDR",
                    DetectLocalArg::BridgeInterface => "BridgeInterface",
                    DetectLocalArg::InterfaceNamePrefix => "InterfaceNamePrefix",
                    DetectLocalArg::None => "None",
                }
                .into()
            }),
            pod_bridge_interface: self.pod_bridge_interface.clone(),
            pod_interface_name_prefix: self.pod_interface_name_prefix.clone(),
            masquerade_bit: self.masquerade_bit,
            masquerade_all: self.masquerade_all,
            node_port_addresses: (!self.nodeport_addresses.is_empty()).then(|| self.nodeport_addresses.clone()),
            localhost_node_ports: self.iptables_localhost_nodeports,
            random_fully: self.random_fully,
            nfacct: self.nfacct,
            conntrack_tcp_be_liberal: self.conntrack_tcp_be_liberal,
            service_proxy_name: self.service_proxy_name.clone(),
            ..Settings::default()
        }
    }
}

//! Everything about this node and the options that shapes one family's rules, resolved
//! once from the [`Config`]: what IPVS mode's rules share ([`NodeContext`]), and iptables
//! mode's own options.

use std::net::IpAddr;

use crate::config::context::NodeContext;
use crate::config::Config;
use crate::net::IpFamily;
use crate::select::Locality;

#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub node: NodeContext,
    pub localhost_node_ports: bool,
    /// `None`: NodePorts on every local address; else the node addresses they are on.
    pub node_port_ips: Option<Vec<IpAddr>>,
    pub nfacct: bool,
    pub conntrack_tcp_be_liberal: bool,
    pub large_cluster_threshold: usize,
}

impl Context {
    pub fn new(cfg: &Config, family: IpFamily) -> Self {
        let cidrs = cfg.node_port_cidrs(family);
        Context {
            node: NodeContext::new(cfg, family),
            localhost_node_ports: cfg.localhost_node_ports(family),
            node_port_ips: (!cidrs.is_empty()).then(|| cfg.node_port_ips(family)),
            nfacct: cfg.nfacct,
            conntrack_tcp_be_liberal: cfg.conntrack.tcp_be_liberal,
            large_cluster_threshold: cfg.large_cluster_endpoints_threshold,
        }
    }

    pub fn locality(&self) -> Locality<'_> {
        self.node.locality()
    }

    pub fn is_v6(&self) -> bool {
        self.node.family.is_v6()
    }
}

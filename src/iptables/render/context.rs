//! Everything about this node and the options that shapes one family's rules, resolved
//! once from the [`Config`].

use std::net::IpAddr;

use crate::config::{Config, LocalDetector};
use crate::model::LABEL_ZONE;
use crate::net::IpFamily;
use crate::select::Locality;

#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub family: IpFamily,
    pub node_name: String,
    pub zone: Option<String>,
    /// The node's primary IP of this family (for the load-balancer source-range check).
    pub node_ip: IpAddr,
    /// The masquerade mark, formatted (`0x00004000`).
    pub mark: String,
    pub masquerade_all: bool,
    pub detector: Option<LocalDetector>,
    pub localhost_node_ports: bool,
    /// `None`: NodePorts on every local address; else the node addresses they are on.
    pub node_port_ips: Option<Vec<IpAddr>>,
    pub random_fully: bool,
    pub nfacct: bool,
    pub conntrack_tcp_be_liberal: bool,
    pub large_cluster_threshold: usize,
}

impl Context {
    pub fn new(cfg: &Config, family: IpFamily) -> Self {
        let cidrs = cfg.node_port_cidrs(family);
        Context {
            family,
            node_name: cfg.node_name.clone(),
            zone: cfg.node_labels.get(LABEL_ZONE).cloned(),
            node_ip: cfg.node_ip(family),
            mark: cfg.masquerade_mark(),
            masquerade_all: cfg.masquerade_all,
            detector: cfg.local_detector(family),
            localhost_node_ports: cfg.localhost_node_ports(family),
            node_port_ips: (!cidrs.is_empty()).then(|| cfg.node_port_ips(family)),
            random_fully: cfg.random_fully,
            nfacct: cfg.nfacct,
            conntrack_tcp_be_liberal: cfg.conntrack_tcp_be_liberal,
            large_cluster_threshold: cfg.large_cluster_endpoints_threshold,
        }
    }

    pub fn locality(&self) -> Locality<'_> {
        Locality { node_name: &self.node_name, zone: self.zone.as_deref() }
    }

    pub fn is_v6(&self) -> bool {
        self.family.is_v6()
    }
}

//! This node and the options every mode's iptables rules share, for one family, resolved
//! once from the [`Config`]: iptables mode's renderer and IPVS mode's few iptables rules
//! both start from it.

use std::net::IpAddr;

use super::{Config, IptablesDetector};
use crate::model::LABEL_ZONE;
use crate::net::IpFamily;
use crate::select::Locality;

#[derive(Debug, Clone, PartialEq)]
pub struct NodeContext {
    pub family: IpFamily,
    pub node_name: String,
    pub zone: Option<String>,
    /// The node's primary IP of this family (for the load-balancer source-range check).
    pub node_ip: IpAddr,
    /// The masquerade mark, formatted (`0x00004000`).
    pub mark: String,
    pub masquerade_all: bool,
    pub detector: Option<IptablesDetector>,
    pub random_fully: bool,
}

impl NodeContext {
    pub fn new(cfg: &Config, family: IpFamily) -> Self {
        NodeContext {
            family,
            node_name: cfg.node_name.clone(),
            zone: cfg.node_labels.get(LABEL_ZONE).cloned(),
            node_ip: cfg.node_ip(family),
            mark: cfg.masquerade_mark(),
            masquerade_all: cfg.masquerade_all,
            detector: cfg.local_detector(family).map(|d| d.iptables()),
            random_fully: cfg.random_fully,
        }
    }

    pub fn locality(&self) -> Locality<'_> {
        Locality { node_name: &self.node_name, zone: self.zone.as_deref() }
    }
}

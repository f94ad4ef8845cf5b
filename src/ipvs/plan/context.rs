//! Everything about this node and the options that shapes one family's IPVS plan,
//! resolved once from the [`Config`]: its virtual servers, and its few iptables rules
//! (what every mode's iptables rules share: [`NodeContext`]).

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::config::context::NodeContext;
use crate::config::Config;
use crate::net::{Cidr, IpFamily};
use crate::select::Locality;

#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub node: NodeContext,
    /// `--ipvs-scheduler` (any kernel scheduler name).
    pub scheduler: String,
    /// This node's own addresses of the family (loopback and IPv6 link-local left out,
    /// kube-ipvs0 never included): an external IP or VIP among them is not bound.
    pub node_addresses: BTreeSet<IpAddr>,
    /// The addresses NodePort virtual servers are created on.
    pub node_port_ips: Vec<IpAddr>,
    /// `--ipvs-exclude-cidrs`: virtual servers there are never deleted.
    pub exclude_cidrs: Vec<Cidr>,
}

/// kube-proxy's `isValidForSet`: same family, not loopback, not IPv6 link-local.
fn usable_local(ip: &IpAddr, family: IpFamily) -> bool {
    if IpFamily::of(ip) != family || ip.is_loopback() {
        return false;
    }
    match ip {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
        IpAddr::V4(_) => true,
    }
}

impl Context {
    pub fn new(cfg: &Config, family: IpFamily) -> Self {
        let known: Vec<IpAddr> = cfg.interface_addresses.clone().unwrap_or_else(|| cfg.node_ips.clone());
        let node_addresses: BTreeSet<IpAddr> = known.into_iter().filter(|ip| usable_local(ip, family)).collect();
        // nodePortAddresses unset (match all): every local address but kube-ipvs0's;
        // else the addresses inside the CIDRs, loopback left out.
        let node_port_ips = if cfg.node_port_cidrs(family).is_empty() {
            node_addresses.iter().copied().collect()
        } else {
            cfg.node_port_ips(family).into_iter().filter(|ip| !ip.is_loopback()).collect()
        };
        Context {
            node: NodeContext::new(cfg, family),
            scheduler: cfg.ipvs.scheduler.clone(),
            node_addresses,
            node_port_ips,
            exclude_cidrs: cfg.ipvs.exclude_cidrs.iter().filter(|c| c.family() == family).copied().collect(),
        }
    }

    pub fn family(&self) -> IpFamily {
        self.node.family
    }

    pub fn locality(&self) -> Locality<'_> {
        self.node.locality()
    }
}

//! Everything about this node and the options that shapes one family's nftables rules,
//! resolved once from the [`Config`].

use std::net::IpAddr;

use crate::config::{Config, LocalDetector};
use crate::model::LABEL_ZONE;
use crate::net::IpFamily;
use crate::nftables::model::NftFamily;
use crate::nftables::stmt::{AddrValue, Dir, Ifname, Match, Num, Prefix};
use crate::select::Locality;
pub use crate::config::NftablesTable;

/// kube-proxy's `IfLocalNFT` / `IfNotLocalNFT` rule fragments, as statement values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftDetector {
    pub if_local: Match,
    pub if_not_local: Match,
}

impl NftDetector {
    /// The nft form of the detector: a source CIDR (`ip saddr C`), or an interface
    /// (`iifname NAME`, a wildcard written `NAME*`), as pkg/proxy/util's detectors build both.
    pub fn new(d: &LocalDetector, family: IpFamily) -> Self {
        let test = |negated| match d {
            LocalDetector::Source(cidr) => Match::Addr { family, dir: Dir::Saddr, negated, value: AddrValue::Prefix(prefix_of(cidr)) },
            LocalDetector::Interface { name, wildcard } => Match::Iifname { negated, name: Ifname { name: name.clone(), wildcard: *wildcard } },
        };
        NftDetector { if_local: test(false), if_not_local: test(true) }
    }
}

/// A CIDR as a rule writes it (`10.0.0.0/8`: always with its length).
pub fn prefix_of(cidr: &crate::net::Cidr) -> Prefix {
    Prefix { addr: cidr.addr(), len: Some(cidr.prefix()) }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub family: IpFamily,
    pub node_name: String,
    pub zone: Option<String>,
    /// The node's primary IP of this family (for the load-balancer source-range check).
    pub node_ip: IpAddr,
    /// The masquerade mark, as written (`0x00004000`).
    pub mark: Num,
    pub masquerade_all: bool,
    pub detector: Option<NftDetector>,
    /// `None`: NodePorts on every local address; else the node addresses they are on.
    pub node_port_ips: Option<Vec<IpAddr>>,
    /// ServiceCIDRs of this family.
    pub service_cidrs: Vec<Prefix>,
    /// Which of kube-proxy's two tables is written (`--kube-proxy-version`).
    pub table: NftablesTable,
    /// `KubeProxyNFTablesLocalhostNodePorts` (kube-proxy v1.37): `None` when off; else
    /// whether this family's userspace proxy serves TCP localhost NodePorts.
    pub localhost: Option<LocalhostNodePorts>,
}

/// The gate's state in one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalhostNodePorts {
    /// `nodePortAddresses` names this family's loopback: TCP is served in userspace.
    pub proxy: bool,
}

impl LocalhostNodePorts {
    /// The protocols whose localhost NodePorts are rejected and counted (TCP, UDP, SCTP
    /// order): those the proxy cannot serve, or all of them when it does not run.
    pub fn rejected(self) -> &'static [&'static str] {
        if self.proxy { &["udp", "sctp"] } else { &["tcp", "udp", "sctp"] }
    }
}

impl Context {
    pub fn new(cfg: &Config, family: IpFamily) -> Self {
        let cidrs = cfg.node_port_cidrs(family);
        Context {
            family,
            node_name: cfg.node_name.clone(),
            zone: cfg.node_labels.get(LABEL_ZONE).cloned(),
            node_ip: cfg.node_ip(family),
            mark: mark_of(cfg),
            masquerade_all: cfg.masquerade_all,
            detector: cfg.local_detector(family).map(|d| NftDetector::new(&d, family)),
            node_port_ips: (!cidrs.is_empty()).then(|| cfg.node_port_ips(family)),
            service_cidrs: service_cidrs_of(cfg, family),
            table: cfg.kube_proxy_version.nftables_table(),
            localhost: cfg.nft_localhost_node_ports.then(|| LocalhostNodePorts { proxy: cfg.node_port_addresses_name_loopback(family) }),
        }
    }

    pub fn locality(&self) -> Locality<'_> {
        Locality { node_name: &self.node_name, zone: self.zone.as_deref() }
    }

    /// `ip` or `ip6`, as rules match addresses.
    pub fn ip(&self) -> &'static str {
        self.family.nft_word()
    }
}

/// The masquerade mark read once into the number rules write. The config refuses a mark
/// text that is not one (`Config::masquerade_mark`), so the fallback is the bit's mark.
fn mark_of(cfg: &Config) -> Num {
    cfg.masquerade_mark().parse().unwrap_or(Num::Hex { value: 1 << cfg.masquerade_bit, digits: 8 })
}

/// The cluster's ServiceCIDRs of one family.
pub fn service_cidrs_of(cfg: &Config, ip_family: IpFamily) -> Vec<Prefix> {
    cfg.service_cidrs.iter().filter(|c| c.family() == ip_family).map(prefix_of).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detectors_translate_to_kube_proxys_nft_fragments() {
        let cidr = LocalDetector::Source(crate::net::Cidr::parse_sloppy("fd00:10::/64").unwrap());
        let d = NftDetector::new(&cidr, IpFamily::V6);
        assert_eq!((d.if_local.to_string(), d.if_not_local.to_string()), ("ip6 saddr fd00:10::/64".into(), "ip6 saddr != fd00:10::/64".into()));
        assert_eq!(cidr.iptables().if_local, ["-s", "fd00:10::/64"]);
        let prefix = LocalDetector::Interface { name: "veth".into(), wildcard: true };
        let d = NftDetector::new(&prefix, IpFamily::V4);
        assert_eq!((d.if_local.to_string(), d.if_not_local.to_string()), ("iifname veth*".into(), "iifname != veth*".into()));
        assert_eq!(prefix.iptables().if_not_local, ["!", "-i", "veth+"]);
        let bridge = LocalDetector::Interface { name: "cbr0".into(), wildcard: false };
        assert_eq!(NftDetector::new(&bridge, IpFamily::V4).if_not_local.to_string(), "iifname != cbr0");
    }
}

//! The API server settings the checks need: `--service-cluster-ip-range` and
//! `--service-node-port-range`, parsed as kube-apiserver parses them.

use std::net::IpAddr;

use crate::net::{Cidr, IpFamily};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("--service-cluster-ip-range: {0:?} is not a CIDR")]
    BadCidr(String),
    #[error("--service-cluster-ip-range: at most two CIDRs, one per IP family")]
    TooManyCidrs,
    #[error("--service-cluster-ip-range: both CIDRs are {0}")]
    SameFamily(IpFamily),
    #[error("--service-node-port-range: {0:?} is not a port range (want LOW-HIGH, e.g. 30000-32767)")]
    BadPortRange(String),
}

/// One or two service CIDRs; the first is the primary (the `kubernetes` Service's family).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRanges(pub Vec<Cidr>);

impl ServiceRanges {
    pub fn parse(s: &str) -> Result<Self, OptionsError> {
        let mut out: Vec<Cidr> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let c = Cidr::parse_sloppy(part).ok_or_else(|| OptionsError::BadCidr(part.to_string()))?;
            if out.iter().any(|o| o.family() == c.family()) {
                return Err(OptionsError::SameFamily(c.family()));
            }
            out.push(c);
        }
        match out.len() {
            0 => Err(OptionsError::BadCidr(s.to_string())),
            1 | 2 => Ok(ServiceRanges(out)),
            _ => Err(OptionsError::TooManyCidrs),
        }
    }

    pub fn primary(&self) -> &Cidr {
        &self.0[0]
    }

    pub fn for_family(&self, family: IpFamily) -> Option<&Cidr> {
        self.0.iter().find(|c| c.family() == family)
    }
}

/// Whether the allocator of `cidr` can hand out `ip`: inside, and neither the network
/// address nor (IPv4) the broadcast address.
pub fn allocatable(cidr: &Cidr, ip: &IpAddr) -> bool {
    if !cidr.contains(ip) || *ip == cidr.addr() {
        return false;
    }
    match (ip, cidr.addr()) {
        (IpAddr::V4(a), IpAddr::V4(net)) if cidr.prefix() < 32 => {
            let broadcast = u32::from(net) | (u32::MAX >> cidr.prefix());
            u32::from(*a) != broadcast
        }
        _ => true,
    }
}

/// The range's first address (network + 1): the `kubernetes` Service's ClusterIP.
pub fn first_address(cidr: &Cidr) -> IpAddr {
    match cidr.addr() {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add(1).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(1).into()),
    }
}

/// `--service-node-port-range`: `LOW-HIGH`, `LOW+SIZE` or a single port, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePortRange {
    pub low: u16,
    pub high: u16,
}

impl Default for NodePortRange {
    fn default() -> Self {
        NodePortRange { low: 30000, high: 32767 }
    }
}

impl NodePortRange {
    pub fn parse(s: &str) -> Result<Self, OptionsError> {
        let bad = || OptionsError::BadPortRange(s.to_string());
        let num = |t: &str| t.trim().parse::<u16>().map_err(|_| bad());
        let (low, high) = if let Some((a, b)) = s.split_once('-') {
            (num(a)?, num(b)?)
        } else if let Some((a, n)) = s.split_once('+') {
            let low = num(a)?;
            (low, low.checked_add(num(n)?).ok_or_else(bad)?)
        } else {
            let p = num(s)?;
            (p, p)
        };
        if low > high {
            return Err(bad());
        }
        Ok(NodePortRange { low, high })
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

impl std::fmt::Display for NodePortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// The checks' settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `None`: the range checks (SP002, SP021) are skipped.
    pub service_ranges: Option<ServiceRanges>,
    pub node_port_range: NodePortRange,
    /// kube-proxy's feature gate `AllowServiceExternalIPs` is off: `spec.externalIPs` get
    /// no rules (SP052).
    pub external_ips_off: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_addresses() {
        let r = ServiceRanges::parse("10.96.0.0/12, fd00::/108").unwrap();
        assert_eq!(first_address(r.primary()).to_string(), "10.96.0.1");
        let c = Cidr::parse_sloppy("10.0.0.0/24").unwrap();
        assert!(!allocatable(&c, &"10.0.0.0".parse().unwrap()));
        assert!(!allocatable(&c, &"10.0.0.255".parse().unwrap()));
        assert!(allocatable(&c, &"10.0.0.254".parse().unwrap()));
        assert!(ServiceRanges::parse("10.0.0.0/24,10.1.0.0/24").is_err());
        assert_eq!(NodePortRange::parse("30000+10").unwrap(), NodePortRange { low: 30000, high: 30010 });
        assert!(NodePortRange::parse("32767-30000").is_err());
    }
}

//! IP and CIDR values as kube-proxy reads them.
//!
//! kube-proxy parses addresses with Go's `netutils.ParseIPSloppy`, which accepts
//! IPv4 octets with leading zeros and reads them as *decimal* (`010.0.0.1` is
//! `10.0.0.1`, not octal), and prints them canonically. Rust's parser rejects
//! leading zeros, so this module has its own small IPv4 reader; IPv6 goes through
//! std. An IPv4-mapped IPv6 address (`::ffff:1.2.3.4`) is an IPv4 address to Go.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// IP family of an address, a service port or a proxier instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum IpFamily {
    #[serde(rename = "ipv4")]
    V4,
    #[serde(rename = "ipv6")]
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// The name the Kubernetes API uses (`IPv4`, `IPv6`).
    pub fn api_name(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }

    pub fn is_v6(self) -> bool {
        self == IpFamily::V6
    }

    /// The family's loopback address (`127.0.0.1`, `::1`).
    pub fn loopback(self) -> IpAddr {
        match self {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        })
    }
}

/// Parses an IP the way Go's `ParseIPSloppy` does. Returns `None` when it is not an IP.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if s.contains(':') {
        let v6 = Ipv6Addr::from_str(s).ok()?;
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    parse_ipv4_sloppy(s).map(IpAddr::V4)
}

fn parse_ipv4_sloppy(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse::<u16>().ok().filter(|v| *v <= 255)? as u8;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Addr::from(octets))
}

/// An IP network, stored masked (the way Go's `ParseCIDR` returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return None;
        }
        Some(Cidr { addr: mask(addr, prefix), prefix })
    }

    /// Parses like Go's `ParseCIDRSloppy`: leading zeros allowed in the address
    /// and in the prefix length; the host bits are masked off.
    pub fn parse_sloppy(s: &str) -> Option<Cidr> {
        let (ip, len) = s.split_once('/')?;
        let addr = parse_ip_sloppy(ip)?;
        if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // A mapped IPv6 CIDR is rejected, as Go does for "::ffff:1.2.3.4/120".
        if ip.contains(':') && addr.is_ipv4() {
            return None;
        }
        Cidr::new(addr, len.parse().ok()?)
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.addr)
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        IpFamily::of(ip) == self.family() && mask(*ip, self.prefix) == self.addr
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `ip:port` or `[ip]:port` read back (the inverse of [`join_host_port`]; the address
/// parsed as Go's `ParseIP` does, leading zeros allowed).
pub fn split_host_port(s: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((parse_ip_sloppy(host)?, port.parse().ok()?))
}

/// `ip:port`, or `[ip]:port` for IPv6 (Go's `net.JoinHostPort`).
pub fn join_host_port(ip: &IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_splits_what_join_host_port_joins() {
        for (ip, port) in [("10.0.0.1", 80u16), ("fd00::1", 53)] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(split_host_port(&join_host_port(&ip, port)), Some((ip, port)));
        }
        assert_eq!(split_host_port("10.0.0.1"), None);
        assert_eq!(split_host_port("10.0.0.1:http"), None);
    }

    #[test]
    fn leading_zeros_are_decimal_like_go_parse_ip_sloppy() {
        assert_eq!(parse_ip_sloppy("172.30.0.041"), Some("172.30.0.41".parse().unwrap()));
        assert_eq!(parse_ip_sloppy("010.000.001.009"), Some("10.0.1.9".parse().unwrap()));
        assert_eq!(parse_ip_sloppy("256.0.0.1"), None);
        assert_eq!(parse_ip_sloppy("1.2.3"), None);
        assert_eq!(parse_ip_sloppy("1.2.3.4.5"), None);
        assert_eq!(parse_ip_sloppy("0001.2.3.4"), None);
        assert_eq!(parse_ip_sloppy(""), None);
        assert_eq!(parse_ip_sloppy("::ffff:1.2.3.4"), Some("1.2.3.4".parse().unwrap()));
        assert_eq!(parse_ip_sloppy("fd00::1"), Some("fd00::1".parse().unwrap()));
    }

    #[test]
    fn cidrs_are_masked_and_accept_leading_zeros() {
        let c = Cidr::parse_sloppy("203.0.113.000/025").unwrap();
        assert_eq!(c.to_string(), "203.0.113.0/25");
        assert_eq!(Cidr::parse_sloppy("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(Cidr::parse_sloppy("fd00::5/64").unwrap().to_string(), "fd00::/64");
        assert!(Cidr::parse_sloppy("10.0.0.0/33").is_none());
        assert!(Cidr::parse_sloppy("10.0.0.0").is_none());
        assert!(c.contains(&"203.0.113.7".parse().unwrap()));
        assert!(!c.contains(&"203.0.113.200".parse().unwrap()));
        assert!(!c.contains(&"fd00::1".parse().unwrap()));
    }

    #[test]
    fn host_port_brackets_ipv6() {
        assert_eq!(join_host_port(&"10.0.0.1".parse().unwrap(), 80), "10.0.0.1:80");
        assert_eq!(join_host_port(&"fd00::1".parse().unwrap(), 80), "[fd00::1]:80");
    }
}

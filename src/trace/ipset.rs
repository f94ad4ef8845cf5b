//! ipset membership for `-m set --match-set NAME FLAGS`, as the kernel's `ip_set_test`
//! decides it: the set's type gives its dimensions (an address, a protocol and port, a
//! second address or a network), each direction flag says whether a dimension is taken
//! from the packet's source or destination. Fewer flags than dimensions, or a hash set of
//! the other family, never match. Sets come from an IPVS plan or from `ipset save`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::matcher::Packet;
use crate::ipvs::plan::ipsets::SetType;
use crate::ipvs::plan::FamilyState;
use crate::model::Protocol;
use crate::net::{parse_ip_sloppy, Cidr, IpFamily};

/// One dimension's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ip,
    Port,
    Net,
}

fn dims(t: SetType) -> &'static [Kind] {
    match t {
        SetType::HashIp => &[Kind::Ip],
        SetType::HashIpPort => &[Kind::Ip, Kind::Port],
        SetType::HashIpPortIp => &[Kind::Ip, Kind::Port, Kind::Ip],
        SetType::HashIpPortNet => &[Kind::Ip, Kind::Port, Kind::Net],
        SetType::BitmapPort => &[Kind::Port],
    }
}

/// One dimension of a member.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// An address (a full-length prefix) or a network.
    Net(Cidr),
    /// `proto:port` or a port range; `None` proto: a bitmap:port port (any of TCP, UDP, SCTP).
    Port { proto: Option<String>, lo: u16, hi: u16 },
}

/// One set: its type, its family (hash sets) and its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    kind: SetType,
    family: Option<IpFamily>,
    members: Vec<Vec<Value>>,
    /// Entries that could not be read: they might match.
    unreadable: usize,
}

/// Sets by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sets {
    sets: BTreeMap<String, Set>,
}

fn parse_port(s: &str, with_proto: bool) -> Option<Value> {
    let (proto, range) = match s.split_once(':') {
        Some((p, r)) => (Some(p.to_string()), r),
        // ipset reads a bare port of a hash set as TCP.
        None => (with_proto.then(|| "tcp".to_string()), s),
    };
    if proto.is_some() != with_proto {
        return None;
    }
    let (lo, hi) = match range.split_once('-') {
        Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
        None => {
            let p = range.parse().ok()?;
            (p, p)
        }
    };
    Some(Value::Port { proto, lo, hi })
}

fn parse_net(s: &str) -> Option<Value> {
    if s.contains('/') {
        return Cidr::parse_sloppy(s).map(Value::Net);
    }
    let ip = parse_ip_sloppy(s)?;
    Cidr::new(ip, full(&ip)).map(Value::Net)
}

fn full(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn parse_member(kind: SetType, entry: &str) -> Option<Vec<Value>> {
    let parts: Vec<&str> = entry.split(',').collect();
    let kinds = dims(kind);
    if parts.len() != kinds.len() {
        return None;
    }
    let bitmap = kind == SetType::BitmapPort;
    kinds
        .iter()
        .zip(parts)
        .map(|(k, p)| match k {
            Kind::Ip | Kind::Net => parse_net(p),
            Kind::Port => parse_port(p, !bitmap),
        })
        .collect()
}

impl Set {
    pub fn new<'a>(kind: SetType, family: Option<IpFamily>, entries: impl IntoIterator<Item = &'a str>) -> Set {
        let mut set = Set { kind, family: if kind == SetType::BitmapPort { None } else { family }, members: Vec::new(), unreadable: 0 };
        for e in entries {
            match parse_member(kind, e) {
                Some(m) => set.members.push(m),
                None => set.unreadable += 1,
            }
        }
        set
    }

    /// Whether the packet is in the set, reading dimensions as `flags` say.
    fn test(&self, name: &str, flags: &str, p: &Packet) -> Result<bool, String> {
        let flags: Vec<&str> = flags.split(',').collect();
        if let Some(bad) = flags.iter().find(|f| **f != "src" && **f != "dst") {
            return Err(format!("set {name}: bad direction flag {bad:?}"));
        }
        let kinds = dims(self.kind);
        if flags.len() < kinds.len() {
            return Ok(false);
        }
        if self.family.is_some_and(|f| f != IpFamily::of(&p.dst)) {
            return Ok(false);
        }
        let mut key: Vec<Key> = Vec::new();
        for (k, f) in kinds.iter().zip(&flags) {
            key.push(match (k, *f) {
                (Kind::Ip | Kind::Net, "src") => Key::Ip(p.src),
                (Kind::Ip | Kind::Net, _) => Key::Ip(p.dst),
                (Kind::Port, "dst") => Key::Port(p.protocol, p.dport),
                (Kind::Port, _) => return Err(format!("set {name}: the tracer does not know the source port")),
            });
        }
        let hit = self.members.iter().any(|m| m.iter().zip(&key).all(|(v, k)| k.is_in(v)));
        if !hit && self.unreadable > 0 {
            return Err(format!("set {name}: {} entries the tracer cannot read", self.unreadable));
        }
        Ok(hit)
    }
}

enum Key {
    Ip(IpAddr),
    Port(Protocol, u16),
}

impl Key {
    fn is_in(&self, v: &Value) -> bool {
        match (self, v) {
            (Key::Ip(ip), Value::Net(c)) => c.contains(ip),
            (Key::Port(proto, port), Value::Port { proto: want, lo, hi }) => {
                want.as_deref().is_none_or(|w| w == proto.lower()) && (*lo..=*hi).contains(port)
            }
            _ => false,
        }
    }
}

impl Sets {
    pub fn insert(&mut self, name: impl Into<String>, set: Set) {
        self.sets.insert(name.into(), set);
    }

    /// Every set of an IPVS plan, with its entries.
    pub fn from_plan(plan: &FamilyState) -> Sets {
        let mut sets = Sets::default();
        for (id, entries) in &plan.sets {
            let set = Set::new(id.set_type(), Some(plan.family), entries.iter().map(String::as_str));
            sets.insert(id.name(plan.family), set);
        }
        sets
    }

    /// `ipset save` output (`create NAME TYPE [family inet6] …`, `add NAME ENTRY …`). Sets
    /// of types the tracer does not know are left out (a match on them is unknown).
    pub fn parse_save(text: &str) -> Sets {
        // The entries as the IPVS sync reads them; the types and families from `create`.
        let entries = crate::ipvs::ipset::parse_save(text);
        let mut sets = Sets::default();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let ["create", name, ty, rest @ ..] = words.as_slice() else { continue };
            let Some(kind) = SetType::from_name(ty) else { continue };
            let v6 = rest.windows(2).any(|w| w == ["family", "inet6"]);
            let family = if v6 { IpFamily::V6 } else { IpFamily::V4 };
            sets.insert(*name, Set::new(kind, Some(family), entries.get(*name).into_iter().flatten().map(String::as_str)));
        }
        sets
    }

    /// `--match-set NAME FLAGS`: `Err` when it cannot be decided (no such set, bad flags,
    /// a dimension the tracer does not know).
    pub fn test(&self, name: &str, flags: &str, p: &Packet) -> Result<bool, String> {
        match self.sets.get(name) {
            Some(set) => set.test(name, flags, p),
            None => Err(format!("set {name} is not known to the tracer")),
        }
    }

    /// The addresses in a hash:ip set (e.g. KUBE-IPVS-IPS: what kube-ipvs0 holds).
    pub fn addresses(&self, name: &str) -> Vec<IpAddr> {
        let Some(set) = self.sets.get(name) else { return Vec::new() };
        set.members
            .iter()
            .filter_map(|m| match m.as_slice() {
                [Value::Net(c)] if c.prefix() == full(&c.addr()) => Some(c.addr()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(src: &str, dst: &str, proto: &str, dport: u16) -> Packet {
        Packet { src: src.parse().unwrap(), dst: dst.parse().unwrap(), protocol: Protocol::from_name(proto).unwrap(), dport, in_interface: None }
    }

    fn sets(kind: SetType, family: IpFamily, entries: &[&str]) -> Sets {
        let mut s = Sets::default();
        s.insert("S", Set::new(kind, Some(family), entries.iter().copied()));
        s
    }

    #[test]
    fn hash_ip_matches_the_address_in_the_flagged_direction() {
        let s = sets(SetType::HashIp, IpFamily::V4, &["10.96.0.10", "10.100.0.0/24"]);
        let p = packet("10.244.1.99", "10.96.0.10", "tcp", 54);
        assert_eq!(s.test("S", "dst", &p), Ok(true));
        assert_eq!(s.test("S", "src", &p), Ok(false));
        assert_eq!(s.test("S", "dst", &packet("10.244.1.99", "10.100.0.7", "udp", 1)), Ok(true));
        assert_eq!(s.test("S", "dst", &packet("10.244.1.99", "10.96.0.11", "tcp", 54)), Ok(false));
        // An IPv4 set never holds an IPv6 packet.
        assert_eq!(s.test("S", "dst", &packet("fd00::1", "fd00::2", "tcp", 1)), Ok(false));
        assert_eq!(s.addresses("S"), vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn hash_ip_port_needs_address_protocol_and_port() {
        let s = sets(SetType::HashIpPort, IpFamily::V4, &["10.96.0.10,udp:53", "10.96.0.1,tcp:443"]);
        assert_eq!(s.test("S", "dst,dst", &packet("10.244.1.99", "10.96.0.10", "udp", 53)), Ok(true));
        assert_eq!(s.test("S", "dst,dst", &packet("10.244.1.99", "10.96.0.10", "tcp", 53)), Ok(false), "other protocol");
        assert_eq!(s.test("S", "dst,dst", &packet("10.244.1.99", "10.96.0.10", "udp", 54)), Ok(false), "other port");
        // kube-proxy's no-detector ClusterIP rule: the source address with the destination port.
        assert_eq!(s.test("S", "src,dst", &packet("10.96.0.1", "10.96.0.1", "tcp", 443)), Ok(true));
        assert_eq!(s.test("S", "src,dst", &packet("10.244.1.99", "10.96.0.1", "tcp", 443)), Ok(false));
        // Fewer flags than dimensions: the kernel says no.
        assert_eq!(s.test("S", "dst", &packet("10.244.1.99", "10.96.0.10", "udp", 53)), Ok(false));
        // The source port is not part of a traced packet.
        assert!(s.test("S", "dst,src", &packet("10.244.1.99", "10.96.0.10", "udp", 53)).is_err());
        let v6 = sets(SetType::HashIpPort, IpFamily::V6, &["fd00:10:96::60,tcp:9090"]);
        assert_eq!(v6.test("S", "dst,dst", &packet("fd00:10:244:1::99", "fd00:10:96::60", "tcp", 9090)), Ok(true));
    }

    #[test]
    fn hash_ip_port_ip_is_kube_proxys_hairpin_and_source_ip_set() {
        let s = sets(SetType::HashIpPortIp, IpFamily::V4, &["10.244.1.5,udp:53,10.244.1.5"]);
        // A pod reaching itself through the service (after IPVS's DNAT).
        assert_eq!(s.test("S", "dst,dst,src", &packet("10.244.1.5", "10.244.1.5", "udp", 53)), Ok(true));
        assert_eq!(s.test("S", "dst,dst,src", &packet("10.244.1.99", "10.244.1.5", "udp", 53)), Ok(false));
        assert_eq!(s.test("S", "dst,dst", &packet("10.244.1.5", "10.244.1.5", "udp", 53)), Ok(false), "two flags, three dimensions");
    }

    #[test]
    fn hash_ip_port_net_matches_a_source_inside_the_network() {
        let s = sets(SetType::HashIpPortNet, IpFamily::V4, &["192.0.2.50,tcp:443,203.0.113.0/24", "192.0.2.50,tcp:443,198.51.100.0/25"]);
        assert_eq!(s.test("S", "dst,dst,src", &packet("203.0.113.7", "192.0.2.50", "tcp", 443)), Ok(true));
        assert_eq!(s.test("S", "dst,dst,src", &packet("198.51.100.127", "192.0.2.50", "tcp", 443)), Ok(true));
        assert_eq!(s.test("S", "dst,dst,src", &packet("198.51.100.128", "192.0.2.50", "tcp", 443)), Ok(false));
        assert_eq!(s.test("S", "dst,dst,src", &packet("192.0.2.200", "192.0.2.50", "tcp", 443)), Ok(false));
        assert_eq!(s.test("S", "dst,dst,src", &packet("203.0.113.7", "192.0.2.50", "tcp", 80)), Ok(false));
    }

    #[test]
    fn bitmap_port_matches_the_port_of_any_l4_protocol() {
        let s = sets(SetType::BitmapPort, IpFamily::V4, &["30080", "31000-31010"]);
        assert_eq!(s.test("S", "dst", &packet("203.0.113.9", "192.168.10.11", "tcp", 30080)), Ok(true));
        assert_eq!(s.test("S", "dst", &packet("203.0.113.9", "192.168.10.11", "udp", 30080)), Ok(true));
        assert_eq!(s.test("S", "dst", &packet("203.0.113.9", "192.168.10.11", "tcp", 31005)), Ok(true));
        assert_eq!(s.test("S", "dst", &packet("203.0.113.9", "192.168.10.11", "tcp", 30081)), Ok(false));
        // bitmap:port has no family: IPv6 packets are tested too.
        assert_eq!(s.test("S", "dst", &packet("fd00::9", "fd00::11", "tcp", 30080)), Ok(true));
    }

    #[test]
    fn unknown_sets_flags_and_unreadable_entries_are_not_matches() {
        let s = sets(SetType::HashIpPort, IpFamily::V4, &["10.96.0.10,udp:53", "not-an-entry"]);
        let p = packet("10.244.1.99", "10.96.0.10", "udp", 53);
        assert!(s.test("NOPE", "dst,dst", &p).is_err());
        assert!(s.test("S", "dst,up", &p).is_err());
        assert_eq!(s.test("S", "dst,dst", &p), Ok(true), "a readable entry matches");
        assert!(s.test("S", "dst,dst", &packet("10.244.1.99", "10.96.0.11", "udp", 53)).is_err(), "the unreadable one might");
    }

    #[test]
    fn ipset_save_output_reads_types_families_and_entries() {
        let text = "create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
                    add KUBE-6-CLUSTER-IP fd00:10:96::60,tcp:9090\n\
                    create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\n\
                    add KUBE-NODE-PORT-TCP 30080\n\
                    create OTHER list:set size 8\n";
        let s = Sets::parse_save(text);
        assert_eq!(s.test("KUBE-6-CLUSTER-IP", "dst,dst", &packet("fd00:10:244:1::99", "fd00:10:96::60", "tcp", 9090)), Ok(true));
        assert_eq!(s.test("KUBE-6-CLUSTER-IP", "dst,dst", &packet("10.0.0.1", "10.0.0.2", "tcp", 9090)), Ok(false));
        assert_eq!(s.test("KUBE-NODE-PORT-TCP", "dst", &packet("10.0.0.1", "10.0.0.2", "tcp", 30080)), Ok(true));
        assert!(s.test("OTHER", "dst", &packet("10.0.0.1", "10.0.0.2", "tcp", 1)).is_err());
    }
}

//! The socket-LB maps' keys and values, byte for byte as `bpf/socket_lb.c` declares them
//! (its `_Static_assert`s pin the C side, the tests here pin these bytes). Addresses and
//! ports are in network order, as the `sock_addr` context holds them; ids, counts and
//! flags in the host's order, as the programs compare them. Pure: no kernel here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::model::Protocol;

/// The maps' names in the object and their pin files (15 characters at most: the
/// kernel's object names are 16 bytes with the NUL).
pub const SERVICES: &str = "lb_services";
pub const BACKENDS: &str = "lb_backends";
pub const REVNAT: &str = "lb_revnat";
pub const COUNTERS: &str = "lb_counters";
pub const AFFINITY: &str = "lb_affinity";
pub const ALL: [&str; 5] = [SERVICES, BACKENDS, REVNAT, COUNTERS, AFFINITY];

/// Each fixed-size map's key size, value size and entries, as `bpf/socket_lb.c` declares
/// them: a pin of another shape (an older build's) cannot serve these programs.
pub const SHAPES: [(&str, u32, u32, u32); 4] =
    [(SERVICES, 20, 12, 65536), (BACKENDS, 8, 20, 1_048_576), (COUNTERS, 4, 8, 2 * COUNTER_KINDS), (AFFINITY, 32, 40, 65536)];

/// `svc_value.flags`: the Service has no usable endpoint, `connect()` is refused.
const F_NO_BACKENDS: u16 = 1;
/// `svc_value.flags`: ClientIP session affinity, for `affinity_timeout` seconds.
const F_AFFINITY: u16 = 2;

fn family(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        4
    } else {
        6
    }
}

fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

fn proto_from(n: u8) -> Option<Protocol> {
    match n {
        6 => Some(Protocol::Tcp),
        17 => Some(Protocol::Udp),
        132 => Some(Protocol::Sctp),
        _ => None,
    }
}

/// An address as the four network-order words the programs compare (IPv4 in the first).
fn addr_bytes(addr: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match addr {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out = a.octets(),
    }
    out
}

fn addr_from(bytes: &[u8], family: u8) -> Option<IpAddr> {
    match family {
        4 => Some(IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[..16]).ok()?))),
        _ => None,
    }
}

/// `struct svc_key`: a Service port as a socket names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub addr: IpAddr,
    pub port: u16,
    pub proto: Protocol,
}

impl ServiceKey {
    pub fn encode(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out[..16].copy_from_slice(&addr_bytes(self.addr));
        out[16..18].copy_from_slice(&self.port.to_be_bytes());
        out[18] = proto_number(self.proto);
        out[19] = family(self.addr);
        out
    }

    /// None for bytes no svcproxy wrote (an unknown family or protocol).
    pub fn decode(b: &[u8; 20]) -> Option<ServiceKey> {
        Some(ServiceKey { addr: addr_from(&b[..16], b[19])?, port: u16::from_be_bytes([b[16], b[17]]), proto: proto_from(b[18])? })
    }
}

/// `struct svc_value`: where a Service port's backend slots live, and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceValue {
    /// The generation's id, the first half of every slot's key.
    pub backend_id: u32,
    pub count: u16,
    /// No usable endpoint: the programs refuse `connect()` (the rules' REJECT).
    pub no_backends: bool,
    /// ClientIP session affinity's timeout in seconds (`None`: no affinity).
    pub affinity: Option<u32>,
}

impl ServiceValue {
    pub fn encode(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        out[..4].copy_from_slice(&self.backend_id.to_ne_bytes());
        out[4..6].copy_from_slice(&self.count.to_ne_bytes());
        let flags = if self.no_backends { F_NO_BACKENDS } else { 0 } | if self.affinity.is_some() { F_AFFINITY } else { 0 };
        out[6..8].copy_from_slice(&flags.to_ne_bytes());
        out[8..12].copy_from_slice(&self.affinity.unwrap_or(0).to_ne_bytes());
        out
    }

    pub fn decode(b: &[u8; 12]) -> ServiceValue {
        let flags = u16::from_ne_bytes([b[6], b[7]]);
        ServiceValue {
            backend_id: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            count: u16::from_ne_bytes([b[4], b[5]]),
            no_backends: flags & F_NO_BACKENDS != 0,
            affinity: (flags & F_AFFINITY != 0).then(|| u32::from_ne_bytes([b[8], b[9], b[10], b[11]])),
        }
    }
}

/// `struct affinity_key`: one client (its network namespace's cookie) of one Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AffinityKey {
    pub netns_cookie: u64,
    pub service: ServiceKey,
}

impl AffinityKey {
    pub fn encode(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&self.netns_cookie.to_ne_bytes());
        out[8..28].copy_from_slice(&self.service.encode());
        out
    }

    pub fn decode(b: &[u8; 32]) -> Option<AffinityKey> {
        let svc: [u8; 20] = b[8..28].try_into().ok()?;
        Some(AffinityKey { netns_cookie: u64::from_ne_bytes(b[..8].try_into().ok()?), service: ServiceKey::decode(&svc)? })
    }
}

/// `struct affinity_value`: the backend a client last went to, and when
/// (`CLOCK_MONOTONIC_COARSE` nanoseconds), with its slot in the generation it was picked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffinityValue {
    pub last_used_ns: u64,
    pub backend_id: u32,
    pub slot: u32,
    pub backend: SocketAddr,
}

impl AffinityValue {
    pub fn encode(&self) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[..8].copy_from_slice(&self.last_used_ns.to_ne_bytes());
        out[8..12].copy_from_slice(&self.backend_id.to_ne_bytes());
        out[12..16].copy_from_slice(&self.slot.to_ne_bytes());
        out[16..36].copy_from_slice(&encode_backend(self.backend));
        out
    }

    /// The family is the key's Service's.
    pub fn decode(b: &[u8; 40], ipv6: bool) -> AffinityValue {
        let be: [u8; 20] = b[16..36].try_into().expect("20 bytes");
        AffinityValue {
            last_used_ns: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            backend_id: u32::from_ne_bytes(b[8..12].try_into().expect("4 bytes")),
            slot: u32::from_ne_bytes(b[12..16].try_into().expect("4 bytes")),
            backend: decode_backend(&be, ipv6),
        }
    }

    /// Whether the programs would still follow this entry at `now_ns` for a Service whose
    /// timeout is `timeout_s` (its backend's presence in the set aside).
    pub fn fresh(&self, now_ns: u64, timeout_s: u32) -> bool {
        now_ns.wrapping_sub(self.last_used_ns) < u64::from(timeout_s) * 1_000_000_000
    }
}

/// `struct backend_key`: one slot of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendKey {
    pub backend_id: u32,
    pub slot: u32,
}

impl BackendKey {
    pub fn encode(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&self.backend_id.to_ne_bytes());
        out[4..].copy_from_slice(&self.slot.to_ne_bytes());
        out
    }

    pub fn decode(b: &[u8; 8]) -> BackendKey {
        BackendKey { backend_id: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), slot: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]) }
    }
}

/// `struct backend_value`: the address and port a translated socket goes to. The
/// family is the Service's (a slot never mixes families).
pub fn encode_backend(addr: SocketAddr) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[..16].copy_from_slice(&addr_bytes(addr.ip()));
    out[16..18].copy_from_slice(&addr.port().to_be_bytes());
    out
}

pub fn decode_backend(b: &[u8; 20], ipv6: bool) -> SocketAddr {
    let ip = addr_from(&b[..16], if ipv6 { 6 } else { 4 }).expect("family 4 or 6");
    SocketAddr::new(ip, u16::from_be_bytes([b[16], b[17]]))
}

/// The counters' kinds, as `lb_counters` indexes them (`family slot * KINDS + kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Translated = 0,
    NoBackend = 1,
    SlotMissing = 2,
    Reversed = 3,
}

pub const COUNTER_KINDS: u32 = 4;

pub fn counter_index(ipv6: bool, kind: Counter) -> u32 {
    (if ipv6 { COUNTER_KINDS } else { 0 }) + kind as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bytes below are `struct svc_key` etc. as clang lays them out for a
    // little-endian BPF target (bpfel, the only one x86_64 and aarch64 load).

    #[test]
    #[cfg(target_endian = "little")]
    fn service_key_bytes() {
        let k = ServiceKey { addr: "198.19.0.10".parse().unwrap(), port: 80, proto: Protocol::Tcp };
        #[rustfmt::skip]
        let want = [198, 19, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* port */ 0, 80, /* proto */ 6, /* family */ 4];
        assert_eq!(k.encode(), want);
        assert_eq!(ServiceKey::decode(&want), Some(k));

        let k6 = ServiceKey { addr: "fd00::a".parse().unwrap(), port: 5353, proto: Protocol::Udp };
        #[rustfmt::skip]
        let want6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x14, 0xe9, 17, 6];
        assert_eq!(k6.encode(), want6);
        assert_eq!(ServiceKey::decode(&want6), Some(k6));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn service_value_and_backend_key_bytes() {
        let v = ServiceValue { backend_id: 0x0102_0304, count: 3, no_backends: false, affinity: None };
        assert_eq!(v.encode(), [4, 3, 2, 1, 3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ServiceValue::decode(&v.encode()), v);
        let none = ServiceValue { backend_id: 7, count: 0, no_backends: true, affinity: None };
        assert_eq!(none.encode(), [7, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(ServiceValue::decode(&none.encode()), none);
        // Affinity: flag 2, the timeout (10800 = 0x2a30) in the last word.
        let sticky = ServiceValue { backend_id: 1, count: 2, no_backends: false, affinity: Some(10800) };
        assert_eq!(sticky.encode(), [1, 0, 0, 0, 2, 0, 2, 0, 0x30, 0x2a, 0, 0]);
        assert_eq!(ServiceValue::decode(&sticky.encode()), sticky);
        let k = BackendKey { backend_id: 0x0102_0304, slot: 2 };
        assert_eq!(k.encode(), [4, 3, 2, 1, 2, 0, 0, 0]);
        assert_eq!(BackendKey::decode(&k.encode()), k);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn affinity_key_and_value_bytes() {
        let service = ServiceKey { addr: "198.19.0.10".parse().unwrap(), port: 80, proto: Protocol::Tcp };
        let k = AffinityKey { netns_cookie: 0x0102, service };
        let b = k.encode();
        assert_eq!(&b[..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[8..28], &service.encode());
        assert_eq!(&b[28..], &[0, 0, 0, 0]);
        assert_eq!(AffinityKey::decode(&b), Some(k));

        let v = AffinityValue { last_used_ns: 5_000_000_000, backend_id: 3, slot: 1, backend: "198.18.1.2:8080".parse().unwrap() };
        let b = v.encode();
        assert_eq!(&b[..8], &5_000_000_000u64.to_le_bytes());
        assert_eq!(&b[8..16], &[3, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&b[16..36], &encode_backend(v.backend));
        assert_eq!(AffinityValue::decode(&b, false), v);
        // Fresh strictly within the timeout, as the programs compare.
        assert!(v.fresh(5_000_000_000 + 9_999_999_999, 10));
        assert!(!v.fresh(5_000_000_000 + 10_000_000_000, 10));
    }

    #[test]
    fn backend_value_bytes() {
        let b: SocketAddr = "198.18.1.2:8080".parse().unwrap();
        #[rustfmt::skip]
        let want = [198, 18, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1f, 0x90, 0, 0];
        assert_eq!(encode_backend(b), want);
        assert_eq!(decode_backend(&want, false), b);
        let b6: SocketAddr = "[fd00:1::2]:8080".parse().unwrap();
        let e6 = encode_backend(b6);
        assert_eq!(&e6[..4], &[0xfd, 0, 0, 1]);
        assert_eq!(decode_backend(&e6, true), b6);
    }

    #[test]
    fn unknown_bytes_decode_to_none() {
        let mut b = ServiceKey { addr: "198.19.0.10".parse().unwrap(), port: 80, proto: Protocol::Tcp }.encode();
        b[19] = 5;
        assert_eq!(ServiceKey::decode(&b), None);
        b[19] = 4;
        b[18] = 1;
        assert_eq!(ServiceKey::decode(&b), None);
    }

    #[test]
    fn names_fit_the_kernels_object_names_and_counters_index_per_family() {
        assert!(ALL.iter().all(|n| n.len() <= 15));
        assert!(SHAPES.iter().all(|(n, ..)| ALL.contains(n)));
        assert_eq!(counter_index(false, Counter::Translated), 0);
        assert_eq!(counter_index(true, Counter::NoBackend), 5);
    }
}

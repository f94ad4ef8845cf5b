//! Domain values for IPVS. What svcproxy asks for ([`VirtualServer`], [`RealServer`])
//! is kept apart from what only the kernel knows ([`ObservedVirtualServer`],
//! [`ObservedRealServer`]), so a planner compares desired state with the desired
//! part of observed state and never with counters.

use std::fmt;
use std::net::IpAddr;

use crate::net::join_host_port;

/// Transport protocol of a virtual server: the Service port's own ([`crate::model::Protocol`],
/// with its `IPPROTO_*` number). svcproxy never creates fwmark, AH or ESP services.
pub use crate::model::Protocol;

/// What identifies a virtual server in the kernel: address, port and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub addr: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.protocol, join_host_port(&self.addr, self.port))
    }
}

/// A virtual server as svcproxy wants it (`ipvsadm -A`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VirtualServer {
    pub addr: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    /// Scheduler name (`rr`, `wrr`, `sh`, …).
    pub scheduler: String,
    /// Persistence (ClientIP affinity) timeout in seconds; `None` is not persistent.
    pub persistent: Option<u32>,
    /// Persistence granularity as a prefix length: 32 (IPv4) or 128 (IPv6) is per client.
    pub netmask: u8,
    /// Further `IP_VS_SVC_F_*` bits (one-packet, scheduler flags). Never the
    /// persistent bit (that is `persistent`) nor the kernel's own hashed bit.
    pub flags: u32,
}

impl VirtualServer {
    /// Round robin, not persistent, full netmask, no flags.
    pub fn new(addr: IpAddr, port: u16, protocol: Protocol) -> Self {
        VirtualServer {
            addr,
            port,
            protocol,
            scheduler: "rr".to_string(),
            persistent: None,
            netmask: full_prefix(addr),
            flags: 0,
        }
    }

    pub fn scheduler(mut self, name: &str) -> Self {
        self.scheduler = name.to_string();
        self
    }

    pub fn persistent(mut self, timeout_secs: u32) -> Self {
        self.persistent = Some(timeout_secs);
        self
    }

    pub fn key(&self) -> ServiceKey {
        ServiceKey { addr: self.addr, port: self.port, protocol: self.protocol }
    }
}

impl fmt::Display for VirtualServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key(), self.scheduler)?;
        if let Some(timeout) = self.persistent {
            write!(f, " persistent {timeout}")?;
        }
        Ok(())
    }
}

/// The prefix length that makes persistence per client address.
pub fn full_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Forwarding method of a real server (`IP_VS_CONN_F_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Forward {
    /// NAT (`ipvsadm -m`), what kube-proxy uses.
    #[default]
    Masq,
    Local,
    /// IP-in-IP (`ipvsadm -i`).
    Tunnel,
    /// Direct routing (`ipvsadm -g`).
    DirectRoute,
    Bypass,
}

impl Forward {
    pub fn number(self) -> u32 {
        match self {
            Forward::Masq => 0,
            Forward::Local => 1,
            Forward::Tunnel => 2,
            Forward::DirectRoute => 3,
            Forward::Bypass => 4,
        }
    }

    pub fn from_number(n: u32) -> Option<Forward> {
        Some(match n {
            0 => Forward::Masq,
            1 => Forward::Local,
            2 => Forward::Tunnel,
            3 => Forward::DirectRoute,
            4 => Forward::Bypass,
            _ => return None,
        })
    }
}

/// A real server (destination) as svcproxy wants it (`ipvsadm -a`).
/// Identity within its virtual server: `addr` and `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RealServer {
    pub addr: IpAddr,
    pub port: u16,
    /// 0 stops new connections (graceful termination); the kernel refuses > `i32::MAX`.
    pub weight: u32,
    pub fwd: Forward,
    pub upper_threshold: u32,
    pub lower_threshold: u32,
}

impl RealServer {
    /// Masquerading, no thresholds.
    pub fn new(addr: IpAddr, port: u16, weight: u32) -> Self {
        RealServer {
            addr,
            port,
            weight,
            fwd: Forward::Masq,
            upper_threshold: 0,
            lower_threshold: 0,
        }
    }

    pub fn same_dest(&self, other: &RealServer) -> bool {
        self.addr == other.addr && self.port == other.port
    }
}

impl fmt::Display for RealServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} weight {}", join_host_port(&self.addr, self.port), self.weight)
    }
}

/// Counters the kernel keeps per service and per real server (`IPVS_STATS_ATTR_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    pub conns: u64,
    pub in_pkts: u64,
    pub out_pkts: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub cps: u64,
    pub in_pps: u64,
    pub out_pps: u64,
    pub in_bps: u64,
    pub out_bps: u64,
}

/// A virtual server read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedVirtualServer {
    pub vs: VirtualServer,
    pub stats: Option<Stats>,
}

/// A real server read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedRealServer {
    pub rs: RealServer,
    pub active_conns: u32,
    pub inactive_conns: u32,
    pub persistent_conns: u32,
    pub stats: Option<Stats>,
}

impl ObservedRealServer {
    /// What a fresh real server reports: no connections, no counters.
    pub fn idle(rs: RealServer) -> Self {
        ObservedRealServer {
            rs,
            active_conns: 0,
            inactive_conns: 0,
            persistent_conns: 0,
            stats: None,
        }
    }
}

/// `IPVS_CMD_GET_INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    pub version: Version,
    pub conn_tab_size: u32,
}

/// IPVS version, `0x010201` on the wire for 1.2.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub patch: u8,
}

impl From<u32> for Version {
    fn from(code: u32) -> Self {
        let [_, major, minor, patch] = code.to_be_bytes();
        Version { major, minor, patch }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Connection timeouts in seconds (`ipvsadm --set tcp tcpfin udp`).
/// In [`Op::SetTimeouts`], 0 leaves that timeout as it is (the kernel's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub tcp: u32,
    pub tcp_fin: u32,
    pub udp: u32,
}

/// One change to IPVS. Ops are what [`super::netlink::Ipvs::apply`] sends and what
/// [`super::netlink::FakeIpvs`] records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    AddService(VirtualServer),
    /// Scheduler, persistence, netmask and flags of an existing virtual server.
    UpdateService(VirtualServer),
    /// Only the identity of the virtual server matters.
    DelService(VirtualServer),
    AddDest(VirtualServer, RealServer),
    /// Weight, forwarding method and thresholds of an existing real server.
    UpdateDest(VirtualServer, RealServer),
    /// Only the identities matter.
    DelDest(VirtualServer, RealServer),
    Flush,
    SetTimeouts(Timeouts),
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::AddService(vs) => write!(f, "add virtual server {vs}"),
            Op::UpdateService(vs) => write!(f, "update virtual server {vs}"),
            Op::DelService(vs) => write!(f, "delete virtual server {}", vs.key()),
            Op::AddDest(vs, rs) => write!(f, "add real server {rs} to {}", vs.key()),
            Op::UpdateDest(vs, rs) => write!(f, "update real server {rs} of {}", vs.key()),
            Op::DelDest(vs, rs) => {
                write!(f, "delete real server {} from {}", join_host_port(&rs.addr, rs.port), vs.key())
            }
            Op::Flush => f.write_str("flush"),
            Op::SetTimeouts(t) => {
                write!(f, "set timeouts tcp {} tcpfin {} udp {}", t.tcp, t.tcp_fin, t.udp)
            }
        }
    }
}

/// Everything a client can be asked: reads and [`Op`]s. Errors name the call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Info,
    Services,
    Dests(ServiceKey),
    Timeouts,
    Op(Op),
    /// A batch of this many ops (only in transport errors of [`super::netlink::Ipvs::apply`]).
    Batch(usize),
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Info => f.write_str("get IPVS info"),
            Call::Services => f.write_str("list virtual servers"),
            Call::Dests(key) => write!(f, "list real servers of {key}"),
            Call::Timeouts => f.write_str("get timeouts"),
            Call::Op(op) => op.fmt(f),
            Call::Batch(n) => write!(f, "batch of {n} IPVS ops"),
        }
    }
}

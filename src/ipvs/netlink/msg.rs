//! IPVS generic-netlink messages: family `"IPVS"`, version 1, as the kernel's
//! `include/uapi/linux/ip_vs.h` defines them. Bytes in, values out and back; no sockets.
//!
//! A message is a command plus top-level attributes. Services and destinations are
//! nested attribute lists. Attributes this module does not know are kept as
//! [`DefaultNla`] so that a message re-emits byte for byte.
//!
//! Wire details worth knowing (all checked against the kernel's `ip_vs_ctl.c`):
//! - addresses are `union nf_inet_addr`: 16 bytes whatever the family ([`InetAddr`]);
//! - ports are big-endian, everything else is host order;
//! - the kernel nests without `NLA_F_NESTED`, and so does this module (both parse);
//! - the `GET_INFO` reply reuses attribute numbers 1 and 2 for version and table
//!   size, so top-level attributes are parsed with the command as context.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, ErrorContext, Nla, NlaBuffer, NlasIterator, Parseable,
    ParseableParametrized,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};

pub const IPVS_GENL_NAME: &str = "IPVS";
pub const IPVS_GENL_VERSION: u8 = 1;

pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// `IP_VS_SVC_F_*`: service flags.
pub const IP_VS_SVC_F_PERSISTENT: u32 = 0x0001;
/// Set by the kernel on every service it holds; never meaningful from user space.
pub const IP_VS_SVC_F_HASHED: u32 = 0x0002;

const IPVS_CMD_NEW_SERVICE: u8 = 1;
const IPVS_CMD_SET_SERVICE: u8 = 2;
const IPVS_CMD_DEL_SERVICE: u8 = 3;
const IPVS_CMD_GET_SERVICE: u8 = 4;
const IPVS_CMD_NEW_DEST: u8 = 5;
const IPVS_CMD_SET_DEST: u8 = 6;
const IPVS_CMD_DEL_DEST: u8 = 7;
const IPVS_CMD_GET_DEST: u8 = 8;
const IPVS_CMD_NEW_DAEMON: u8 = 9;
const IPVS_CMD_DEL_DAEMON: u8 = 10;
const IPVS_CMD_GET_DAEMON: u8 = 11;
const IPVS_CMD_SET_CONFIG: u8 = 12;
const IPVS_CMD_GET_CONFIG: u8 = 13;
const IPVS_CMD_SET_INFO: u8 = 14;
const IPVS_CMD_GET_INFO: u8 = 15;
const IPVS_CMD_ZERO: u8 = 16;
const IPVS_CMD_FLUSH: u8 = 17;

const IPVS_CMD_ATTR_SERVICE: u16 = 1;
const IPVS_CMD_ATTR_DEST: u16 = 2;
// const IPVS_CMD_ATTR_DAEMON: u16 = 3; (kept as Other)
const IPVS_CMD_ATTR_TIMEOUT_TCP: u16 = 4;
const IPVS_CMD_ATTR_TIMEOUT_TCP_FIN: u16 = 5;
const IPVS_CMD_ATTR_TIMEOUT_UDP: u16 = 6;

const IPVS_INFO_ATTR_VERSION: u16 = 1;
const IPVS_INFO_ATTR_CONN_TAB_SIZE: u16 = 2;

const IPVS_SVC_ATTR_AF: u16 = 1;
const IPVS_SVC_ATTR_PROTOCOL: u16 = 2;
const IPVS_SVC_ATTR_ADDR: u16 = 3;
const IPVS_SVC_ATTR_PORT: u16 = 4;
const IPVS_SVC_ATTR_FWMARK: u16 = 5;
const IPVS_SVC_ATTR_SCHED_NAME: u16 = 6;
const IPVS_SVC_ATTR_FLAGS: u16 = 7;
const IPVS_SVC_ATTR_TIMEOUT: u16 = 8;
const IPVS_SVC_ATTR_NETMASK: u16 = 9;
const IPVS_SVC_ATTR_STATS: u16 = 10;
const IPVS_SVC_ATTR_PE_NAME: u16 = 11;
const IPVS_SVC_ATTR_STATS64: u16 = 12;

const IPVS_DEST_ATTR_ADDR: u16 = 1;
const IPVS_DEST_ATTR_PORT: u16 = 2;
const IPVS_DEST_ATTR_FWD_METHOD: u16 = 3;
const IPVS_DEST_ATTR_WEIGHT: u16 = 4;
const IPVS_DEST_ATTR_U_THRESH: u16 = 5;
const IPVS_DEST_ATTR_L_THRESH: u16 = 6;
const IPVS_DEST_ATTR_ACTIVE_CONNS: u16 = 7;
const IPVS_DEST_ATTR_INACT_CONNS: u16 = 8;
const IPVS_DEST_ATTR_PERSIST_CONNS: u16 = 9;
const IPVS_DEST_ATTR_STATS: u16 = 10;
const IPVS_DEST_ATTR_ADDR_FAMILY: u16 = 11;
const IPVS_DEST_ATTR_STATS64: u16 = 12;
const IPVS_DEST_ATTR_TUN_TYPE: u16 = 13;
const IPVS_DEST_ATTR_TUN_PORT: u16 = 14;
const IPVS_DEST_ATTR_TUN_FLAGS: u16 = 15;

/// `IPVS_CMD_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IpvsCmd {
    NewService,
    SetService,
    DelService,
    GetService,
    NewDest,
    SetDest,
    DelDest,
    GetDest,
    NewDaemon,
    DelDaemon,
    GetDaemon,
    SetConfig,
    GetConfig,
    /// Only used as the command of the `GET_INFO` reply.
    SetInfo,
    GetInfo,
    Zero,
    Flush,
    Other(u8),
}

impl From<u8> for IpvsCmd {
    fn from(cmd: u8) -> Self {
        use IpvsCmd::*;
        match cmd {
            IPVS_CMD_NEW_SERVICE => NewService,
            IPVS_CMD_SET_SERVICE => SetService,
            IPVS_CMD_DEL_SERVICE => DelService,
            IPVS_CMD_GET_SERVICE => GetService,
            IPVS_CMD_NEW_DEST => NewDest,
            IPVS_CMD_SET_DEST => SetDest,
            IPVS_CMD_DEL_DEST => DelDest,
            IPVS_CMD_GET_DEST => GetDest,
            IPVS_CMD_NEW_DAEMON => NewDaemon,
            IPVS_CMD_DEL_DAEMON => DelDaemon,
            IPVS_CMD_GET_DAEMON => GetDaemon,
            IPVS_CMD_SET_CONFIG => SetConfig,
            IPVS_CMD_GET_CONFIG => GetConfig,
            IPVS_CMD_SET_INFO => SetInfo,
            IPVS_CMD_GET_INFO => GetInfo,
            IPVS_CMD_ZERO => Zero,
            IPVS_CMD_FLUSH => Flush,
            other => Other(other),
        }
    }
}

impl From<IpvsCmd> for u8 {
    fn from(cmd: IpvsCmd) -> u8 {
        use IpvsCmd::*;
        match cmd {
            NewService => IPVS_CMD_NEW_SERVICE,
            SetService => IPVS_CMD_SET_SERVICE,
            DelService => IPVS_CMD_DEL_SERVICE,
            GetService => IPVS_CMD_GET_SERVICE,
            NewDest => IPVS_CMD_NEW_DEST,
            SetDest => IPVS_CMD_SET_DEST,
            DelDest => IPVS_CMD_DEL_DEST,
            GetDest => IPVS_CMD_GET_DEST,
            NewDaemon => IPVS_CMD_NEW_DAEMON,
            DelDaemon => IPVS_CMD_DEL_DAEMON,
            GetDaemon => IPVS_CMD_GET_DAEMON,
            SetConfig => IPVS_CMD_SET_CONFIG,
            GetConfig => IPVS_CMD_GET_CONFIG,
            SetInfo => IPVS_CMD_SET_INFO,
            GetInfo => IPVS_CMD_GET_INFO,
            Zero => IPVS_CMD_ZERO,
            Flush => IPVS_CMD_FLUSH,
            Other(other) => other,
        }
    }
}

/// One IPVS generic-netlink message (the part after the genl header).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IpvsMessage {
    pub cmd: IpvsCmd,
    pub attrs: Vec<IpvsAttr>,
}

impl IpvsMessage {
    pub fn new(cmd: IpvsCmd, attrs: Vec<IpvsAttr>) -> Self {
        IpvsMessage { cmd, attrs }
    }
}

impl GenlFamily for IpvsMessage {
    fn family_name() -> &'static str {
        IPVS_GENL_NAME
    }

    fn command(&self) -> u8 {
        self.cmd.into()
    }

    fn version(&self) -> u8 {
        IPVS_GENL_VERSION
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let cmd = IpvsCmd::from(header.cmd);
        let attrs = NlasIterator::new(buf)
            .map(|nla| nla.and_then(|nla| IpvsAttr::parse_with_param(&nla, cmd)))
            .collect::<Result<Vec<_>, _>>()
            .context("failed to parse IPVS message attributes")?;
        Ok(IpvsMessage { cmd, attrs })
    }
}

/// `union nf_inet_addr`: always 16 bytes on the wire; an IPv4 address fills the
/// first four and the rest is zero. Which family it is lives in a sibling
/// attribute, so the raw bytes are kept and [`InetAddr::to_ip`] takes the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InetAddr(pub [u8; 16]);

impl InetAddr {
    /// Reads the address as `family` (`AF_INET` or `AF_INET6`); `None` for others.
    pub fn to_ip(&self, family: u16) -> Option<IpAddr> {
        match family {
            AF_INET => {
                let [a, b, c, d, ..] = self.0;
                Some(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
            }
            AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(self.0))),
            _ => None,
        }
    }

    fn parse(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut bytes = [0u8; 16];
        match payload.len() {
            4 | 16 => bytes[..payload.len()].copy_from_slice(payload),
            n => return Err(DecodeError::invalid_ip_address(n)),
        }
        Ok(InetAddr(bytes))
    }
}

impl From<IpAddr> for InetAddr {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => v4.into(),
            IpAddr::V6(v6) => v6.into(),
        }
    }
}

impl From<Ipv4Addr> for InetAddr {
    fn from(ip: Ipv4Addr) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&ip.octets());
        InetAddr(bytes)
    }
}

impl From<Ipv6Addr> for InetAddr {
    fn from(ip: Ipv6Addr) -> Self {
        InetAddr(ip.octets())
    }
}

/// `struct ip_vs_flags`: the kernel sets `(old & !mask) | (flags & mask)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags {
    pub flags: u32,
    pub mask: u32,
}

/// Top-level attributes (`IPVS_CMD_ATTR_*`, and `IPVS_INFO_ATTR_*` in a `GET_INFO` reply).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IpvsAttr {
    Service(Vec<ServiceAttr>),
    Dest(Vec<DestAttr>),
    /// Seconds. In `SET_CONFIG`, 0 leaves the current value alone.
    TimeoutTcp(u32),
    TimeoutTcpFin(u32),
    TimeoutUdp(u32),
    /// `IPVS_INFO_ATTR_VERSION`, e.g. `0x010201` for 1.2.1 (only under `SET_INFO`/`GET_INFO`).
    InfoVersion(u32),
    /// `IPVS_INFO_ATTR_CONN_TAB_SIZE` (only under `SET_INFO`/`GET_INFO`).
    InfoConnTabSize(u32),
    Other(DefaultNla),
}

impl Nla for IpvsAttr {
    fn value_len(&self) -> usize {
        use IpvsAttr::*;
        match self {
            Service(attrs) => attrs.as_slice().buffer_len(),
            Dest(attrs) => attrs.as_slice().buffer_len(),
            TimeoutTcp(_) | TimeoutTcpFin(_) | TimeoutUdp(_) => 4,
            InfoVersion(_) | InfoConnTabSize(_) => 4,
            Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        use IpvsAttr::*;
        match self {
            Service(_) => IPVS_CMD_ATTR_SERVICE,
            Dest(_) => IPVS_CMD_ATTR_DEST,
            TimeoutTcp(_) => IPVS_CMD_ATTR_TIMEOUT_TCP,
            TimeoutTcpFin(_) => IPVS_CMD_ATTR_TIMEOUT_TCP_FIN,
            TimeoutUdp(_) => IPVS_CMD_ATTR_TIMEOUT_UDP,
            InfoVersion(_) => IPVS_INFO_ATTR_VERSION,
            InfoConnTabSize(_) => IPVS_INFO_ATTR_CONN_TAB_SIZE,
            Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        use IpvsAttr::*;
        match self {
            Service(attrs) => attrs.as_slice().emit(buffer),
            Dest(attrs) => attrs.as_slice().emit(buffer),
            TimeoutTcp(v) | TimeoutTcpFin(v) | TimeoutUdp(v) => put_u32(buffer, *v),
            InfoVersion(v) | InfoConnTabSize(v) => put_u32(buffer, *v),
            Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ParseableParametrized<NlaBuffer<&'a T>, IpvsCmd> for IpvsAttr {
    fn parse_with_param(buf: &NlaBuffer<&'a T>, cmd: IpvsCmd) -> Result<Self, DecodeError> {
        let payload = buf.value();
        let info = matches!(cmd, IpvsCmd::SetInfo | IpvsCmd::GetInfo);
        Ok(match buf.kind() {
            IPVS_INFO_ATTR_VERSION if info => IpvsAttr::InfoVersion(get_u32(payload)?),
            IPVS_INFO_ATTR_CONN_TAB_SIZE if info => IpvsAttr::InfoConnTabSize(get_u32(payload)?),
            IPVS_CMD_ATTR_SERVICE if !info => IpvsAttr::Service(
                parse_nested(payload, ServiceAttr::parse).context("in IPVS_CMD_ATTR_SERVICE")?,
            ),
            IPVS_CMD_ATTR_DEST if !info => IpvsAttr::Dest(
                parse_nested(payload, DestAttr::parse).context("in IPVS_CMD_ATTR_DEST")?,
            ),
            IPVS_CMD_ATTR_TIMEOUT_TCP => IpvsAttr::TimeoutTcp(get_u32(payload)?),
            IPVS_CMD_ATTR_TIMEOUT_TCP_FIN => IpvsAttr::TimeoutTcpFin(get_u32(payload)?),
            IPVS_CMD_ATTR_TIMEOUT_UDP => IpvsAttr::TimeoutUdp(get_u32(payload)?),
            _ => IpvsAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// Attributes nested in `IPVS_CMD_ATTR_SERVICE` (`IPVS_SVC_ATTR_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceAttr {
    /// `AF_INET` or `AF_INET6`.
    AddressFamily(u16),
    /// `IPPROTO_TCP`, `IPPROTO_UDP` or `IPPROTO_SCTP`.
    Protocol(u16),
    Address(InetAddr),
    /// Host-order value; big-endian on the wire.
    Port(u16),
    Fwmark(u32),
    SchedName(String),
    Flags(Flags),
    /// Persistence timeout in seconds.
    Timeout(u32),
    /// The 4 bytes as the kernel reads them (`nla_get_u32`). For IPv4 they are a
    /// network-order mask (`ff ff ff ff`), for IPv6 a prefix length in host order (128).
    Netmask(u32),
    /// Nested `IPVS_STATS_ATTR_*` (32-bit counters), kept raw.
    Stats(Vec<u8>),
    PeName(String),
    /// Nested `IPVS_STATS_ATTR_*` (64-bit counters), kept raw.
    Stats64(Vec<u8>),
    Other(DefaultNla),
}

impl Nla for ServiceAttr {
    fn value_len(&self) -> usize {
        use ServiceAttr::*;
        match self {
            AddressFamily(_) | Protocol(_) | Port(_) => 2,
            Address(_) => 16,
            Fwmark(_) | Timeout(_) | Netmask(_) => 4,
            SchedName(s) | PeName(s) => s.len() + 1,
            Flags(_) => 8,
            Stats(raw) | Stats64(raw) => raw.len(),
            Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        use ServiceAttr::*;
        match self {
            AddressFamily(_) => IPVS_SVC_ATTR_AF,
            Protocol(_) => IPVS_SVC_ATTR_PROTOCOL,
            Address(_) => IPVS_SVC_ATTR_ADDR,
            Port(_) => IPVS_SVC_ATTR_PORT,
            Fwmark(_) => IPVS_SVC_ATTR_FWMARK,
            SchedName(_) => IPVS_SVC_ATTR_SCHED_NAME,
            Flags(_) => IPVS_SVC_ATTR_FLAGS,
            Timeout(_) => IPVS_SVC_ATTR_TIMEOUT,
            Netmask(_) => IPVS_SVC_ATTR_NETMASK,
            Stats(_) => IPVS_SVC_ATTR_STATS,
            PeName(_) => IPVS_SVC_ATTR_PE_NAME,
            Stats64(_) => IPVS_SVC_ATTR_STATS64,
            Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        use ServiceAttr::*;
        match self {
            AddressFamily(v) | Protocol(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            Port(v) => buffer.copy_from_slice(&v.to_be_bytes()),
            Address(addr) => buffer.copy_from_slice(&addr.0),
            Fwmark(v) | Timeout(v) | Netmask(v) => put_u32(buffer, *v),
            SchedName(s) | PeName(s) => put_string(buffer, s),
            Flags(f) => put_flags(buffer, f),
            Stats(raw) | Stats64(raw) => buffer.copy_from_slice(raw),
            Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl ServiceAttr {
    fn parse(buf: &NlaBuffer<&[u8]>) -> Result<Self, DecodeError> {
        use ServiceAttr::*;
        let p = buf.value();
        Ok(match buf.kind() {
            IPVS_SVC_ATTR_AF => AddressFamily(get_u16(p)?),
            IPVS_SVC_ATTR_PROTOCOL => Protocol(get_u16(p)?),
            IPVS_SVC_ATTR_ADDR => Address(InetAddr::parse(p)?),
            IPVS_SVC_ATTR_PORT => Port(get_be16(p)?),
            IPVS_SVC_ATTR_FWMARK => Fwmark(get_u32(p)?),
            IPVS_SVC_ATTR_SCHED_NAME => SchedName(get_string(p)?),
            IPVS_SVC_ATTR_FLAGS => Flags(get_flags(p)?),
            IPVS_SVC_ATTR_TIMEOUT => Timeout(get_u32(p)?),
            IPVS_SVC_ATTR_NETMASK => Netmask(get_u32(p)?),
            IPVS_SVC_ATTR_STATS => Stats(p.to_vec()),
            IPVS_SVC_ATTR_PE_NAME => PeName(get_string(p)?),
            IPVS_SVC_ATTR_STATS64 => Stats64(p.to_vec()),
            _ => Other(DefaultNla::parse(buf)?),
        })
    }
}

/// Attributes nested in `IPVS_CMD_ATTR_DEST` (`IPVS_DEST_ATTR_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestAttr {
    Address(InetAddr),
    /// Host-order value; big-endian on the wire.
    Port(u16),
    /// `IP_VS_CONN_F_*` (masquerading is 0).
    FwdMethod(u32),
    Weight(u32),
    UpperThreshold(u32),
    LowerThreshold(u32),
    ActiveConns(u32),
    InactiveConns(u32),
    PersistentConns(u32),
    /// Nested `IPVS_STATS_ATTR_*` (32-bit counters), kept raw.
    Stats(Vec<u8>),
    AddressFamily(u16),
    /// Nested `IPVS_STATS_ATTR_*` (64-bit counters), kept raw.
    Stats64(Vec<u8>),
    TunType(u8),
    /// Host-order value; big-endian on the wire.
    TunPort(u16),
    TunFlags(u16),
    Other(DefaultNla),
}

impl Nla for DestAttr {
    fn value_len(&self) -> usize {
        use DestAttr::*;
        match self {
            Address(_) => 16,
            Port(_) | AddressFamily(_) | TunPort(_) | TunFlags(_) => 2,
            TunType(_) => 1,
            FwdMethod(_) | Weight(_) | UpperThreshold(_) | LowerThreshold(_) => 4,
            ActiveConns(_) | InactiveConns(_) | PersistentConns(_) => 4,
            Stats(raw) | Stats64(raw) => raw.len(),
            Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        use DestAttr::*;
        match self {
            Address(_) => IPVS_DEST_ATTR_ADDR,
            Port(_) => IPVS_DEST_ATTR_PORT,
            FwdMethod(_) => IPVS_DEST_ATTR_FWD_METHOD,
            Weight(_) => IPVS_DEST_ATTR_WEIGHT,
            UpperThreshold(_) => IPVS_DEST_ATTR_U_THRESH,
            LowerThreshold(_) => IPVS_DEST_ATTR_L_THRESH,
            ActiveConns(_) => IPVS_DEST_ATTR_ACTIVE_CONNS,
            InactiveConns(_) => IPVS_DEST_ATTR_INACT_CONNS,
            PersistentConns(_) => IPVS_DEST_ATTR_PERSIST_CONNS,
            Stats(_) => IPVS_DEST_ATTR_STATS,
            AddressFamily(_) => IPVS_DEST_ATTR_ADDR_FAMILY,
            Stats64(_) => IPVS_DEST_ATTR_STATS64,
            TunType(_) => IPVS_DEST_ATTR_TUN_TYPE,
            TunPort(_) => IPVS_DEST_ATTR_TUN_PORT,
            TunFlags(_) => IPVS_DEST_ATTR_TUN_FLAGS,
            Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        use DestAttr::*;
        match self {
            Address(addr) => buffer.copy_from_slice(&addr.0),
            Port(v) | TunPort(v) => buffer.copy_from_slice(&v.to_be_bytes()),
            AddressFamily(v) | TunFlags(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            TunType(v) => buffer.copy_from_slice(&[*v]),
            FwdMethod(v) | Weight(v) | UpperThreshold(v) | LowerThreshold(v) => put_u32(buffer, *v),
            ActiveConns(v) | InactiveConns(v) | PersistentConns(v) => put_u32(buffer, *v),
            Stats(raw) | Stats64(raw) => buffer.copy_from_slice(raw),
            Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl DestAttr {
    fn parse(buf: &NlaBuffer<&[u8]>) -> Result<Self, DecodeError> {
        use DestAttr::*;
        let p = buf.value();
        Ok(match buf.kind() {
            IPVS_DEST_ATTR_ADDR => Address(InetAddr::parse(p)?),
            IPVS_DEST_ATTR_PORT => Port(get_be16(p)?),
            IPVS_DEST_ATTR_FWD_METHOD => FwdMethod(get_u32(p)?),
            IPVS_DEST_ATTR_WEIGHT => Weight(get_u32(p)?),
            IPVS_DEST_ATTR_U_THRESH => UpperThreshold(get_u32(p)?),
            IPVS_DEST_ATTR_L_THRESH => LowerThreshold(get_u32(p)?),
            IPVS_DEST_ATTR_ACTIVE_CONNS => ActiveConns(get_u32(p)?),
            IPVS_DEST_ATTR_INACT_CONNS => InactiveConns(get_u32(p)?),
            IPVS_DEST_ATTR_PERSIST_CONNS => PersistentConns(get_u32(p)?),
            IPVS_DEST_ATTR_STATS => Stats(p.to_vec()),
            IPVS_DEST_ATTR_ADDR_FAMILY => AddressFamily(get_u16(p)?),
            IPVS_DEST_ATTR_STATS64 => Stats64(p.to_vec()),
            IPVS_DEST_ATTR_TUN_TYPE => TunType(get_u8(p)?),
            IPVS_DEST_ATTR_TUN_PORT => TunPort(get_be16(p)?),
            IPVS_DEST_ATTR_TUN_FLAGS => TunFlags(get_u16(p)?),
            _ => Other(DefaultNla::parse(buf)?),
        })
    }
}

fn parse_nested<A>(
    payload: &[u8],
    parse: fn(&NlaBuffer<&[u8]>) -> Result<A, DecodeError>,
) -> Result<Vec<A>, DecodeError> {
    NlasIterator::new(payload).map(|nla| nla.and_then(|nla| parse(&nla))).collect()
}

fn fixed<const N: usize>(payload: &[u8]) -> Result<[u8; N], DecodeError> {
    payload.try_into().map_err(|_| DecodeError::invalid_number(N, payload.len()))
}

fn get_u8(payload: &[u8]) -> Result<u8, DecodeError> {
    fixed::<1>(payload).map(|[b]| b)
}

fn get_u16(payload: &[u8]) -> Result<u16, DecodeError> {
    fixed(payload).map(u16::from_ne_bytes)
}

fn get_be16(payload: &[u8]) -> Result<u16, DecodeError> {
    fixed(payload).map(u16::from_be_bytes)
}

fn get_u32(payload: &[u8]) -> Result<u32, DecodeError> {
    fixed(payload).map(u32::from_ne_bytes)
}

fn get_flags(payload: &[u8]) -> Result<Flags, DecodeError> {
    let raw: [u8; 8] = fixed(payload)?;
    let (flags, mask) = raw.split_at(4);
    Ok(Flags { flags: get_u32(flags)?, mask: get_u32(mask)? })
}

/// A `NLA_NUL_STRING`: up to the first NUL (tolerating a missing one).
fn get_string(payload: &[u8]) -> Result<String, DecodeError> {
    let end = payload.iter().position(|&b| b == 0).unwrap_or(payload.len());
    Ok(String::from_utf8(payload[..end].to_vec())?)
}

fn put_u32(buffer: &mut [u8], v: u32) {
    buffer.copy_from_slice(&v.to_ne_bytes())
}

fn put_flags(buffer: &mut [u8], f: &Flags) {
    let (flags, mask) = buffer.split_at_mut(4);
    put_u32(flags, f.flags);
    put_u32(mask, f.mask);
}

fn put_string(buffer: &mut [u8], s: &str) {
    let (text, nul) = buffer.split_at_mut(s.len());
    text.copy_from_slice(s.as_bytes());
    nul.fill(0);
}

//! Domain values ⇄ IPVS messages. Pure: which message each [`Op`] or read becomes,
//! and how the kernel's replies read as [`ObservedVirtualServer`] and friends.

use std::net::IpAddr;

use netlink_packet_core::NlasIterator;

use super::msg::{
    DestAttr, Flags, InetAddr, IpvsAttr, IpvsCmd, IpvsMessage, ServiceAttr, AF_INET, AF_INET6,
    IP_VS_SVC_F_HASHED, IP_VS_SVC_F_PERSISTENT,
};
use crate::ipvs::values::{
    Forward, Info, ObservedRealServer, ObservedVirtualServer, Op, Protocol, RealServer, ServiceKey,
    Stats, Timeouts, VirtualServer,
};

/// The request that performs `op`.
pub fn op_request(op: &Op) -> IpvsMessage {
    use IpvsCmd::*;
    let (cmd, attrs) = match op {
        Op::AddService(vs) => (NewService, vec![IpvsAttr::Service(service_full(vs))]),
        Op::UpdateService(vs) => (SetService, vec![IpvsAttr::Service(service_full(vs))]),
        Op::DelService(vs) => (DelService, vec![IpvsAttr::Service(identity(&vs.key()))]),
        Op::AddDest(vs, rs) => (NewDest, service_and_dest(vs, dest_full(rs))),
        Op::UpdateDest(vs, rs) => (SetDest, service_and_dest(vs, dest_full(rs))),
        Op::DelDest(vs, rs) => (DelDest, service_and_dest(vs, dest_identity(rs))),
        Op::Flush => (Flush, vec![]),
        Op::SetTimeouts(t) => (SetConfig, timeout_attrs(t)),
    };
    IpvsMessage::new(cmd, attrs)
}

pub fn info_request() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetInfo, vec![])
}

pub fn timeouts_request() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetConfig, vec![])
}

/// Sent with `NLM_F_DUMP`.
pub fn services_request() -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetService, vec![])
}

/// Sent with `NLM_F_DUMP`.
pub fn dests_request(key: &ServiceKey) -> IpvsMessage {
    IpvsMessage::new(IpvsCmd::GetDest, vec![IpvsAttr::Service(identity(key))])
}

fn family(addr: IpAddr) -> u16 {
    match addr {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

/// The identifying attributes, enough for every command but add and edit.
fn identity(key: &ServiceKey) -> Vec<ServiceAttr> {
    vec![
        ServiceAttr::AddressFamily(family(key.addr)),
        ServiceAttr::Protocol(key.protocol.number()),
        ServiceAttr::Address(InetAddr::from(key.addr)),
        ServiceAttr::Port(key.port),
    ]
}

/// Add and edit need scheduler, flags, timeout and netmask too (the kernel says EINVAL otherwise).
fn service_full(vs: &VirtualServer) -> Vec<ServiceAttr> {
    let persistent = if vs.persistent.is_some() { IP_VS_SVC_F_PERSISTENT } else { 0 };
    let flags = (vs.flags & !IP_VS_SVC_F_HASHED) | persistent;
    let mut attrs = identity(&vs.key());
    attrs.extend([
        ServiceAttr::SchedName(vs.scheduler.clone()),
        ServiceAttr::Flags(Flags { flags, mask: u32::MAX }),
        ServiceAttr::Timeout(vs.persistent.unwrap_or(0)),
        ServiceAttr::Netmask(netmask_raw(vs.addr, vs.netmask)),
    ]);
    attrs
}

/// The netmask attribute for a prefix: an IPv4 mask in network order, an IPv6 prefix length.
pub fn netmask_raw(addr: IpAddr, prefix: u8) -> u32 {
    match addr {
        IpAddr::V4(_) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            u32::from_ne_bytes(mask.to_be_bytes())
        }
        IpAddr::V6(_) => u32::from(prefix),
    }
}

/// The prefix length a netmask attribute stands for; `None` if it is not a prefix.
pub fn netmask_prefix(family: u16, raw: u32) -> Option<u8> {
    match family {
        AF_INET => {
            let mask = u32::from_be_bytes(raw.to_ne_bytes());
            let prefix = mask.leading_ones();
            let contiguous = mask.checked_shl(prefix).unwrap_or(0) == 0;
            u8::try_from(prefix).ok().filter(|_| contiguous)
        }
        AF_INET6 => u8::try_from(raw).ok().filter(|p| *p <= 128),
        _ => None,
    }
}

fn service_and_dest(vs: &VirtualServer, dest: Vec<DestAttr>) -> Vec<IpvsAttr> {
    vec![IpvsAttr::Service(identity(&vs.key())), IpvsAttr::Dest(dest)]
}

fn dest_identity(rs: &RealServer) -> Vec<DestAttr> {
    vec![
        DestAttr::AddressFamily(family(rs.addr)),
        DestAttr::Address(InetAddr::from(rs.addr)),
        DestAttr::Port(rs.port),
    ]
}

fn dest_full(rs: &RealServer) -> Vec<DestAttr> {
    let mut attrs = dest_identity(rs);
    attrs.extend([
        DestAttr::FwdMethod(rs.fwd.number()),
        DestAttr::Weight(rs.weight),
        DestAttr::UpperThreshold(rs.upper_threshold),
        DestAttr::LowerThreshold(rs.lower_threshold),
    ]);
    attrs
}

/// Like ipvsadm, a zero timeout is left out (the kernel would ignore it anyway).
fn timeout_attrs(t: &Timeouts) -> Vec<IpvsAttr> {
    [
        (t.tcp, IpvsAttr::TimeoutTcp(t.tcp)),
        (t.tcp_fin, IpvsAttr::TimeoutTcpFin(t.tcp_fin)),
        (t.udp, IpvsAttr::TimeoutUdp(t.udp)),
    ]
    .into_iter()
    .filter(|(secs, _)| *secs != 0)
    .map(|(_, attr)| attr)
    .collect()
}

/// Why a reply could not be read; the caller adds which call it was.
pub type ReplyError = String;

/// Reads a `GET_INFO` reply.
pub fn info_reply(msg: &IpvsMessage) -> Result<Info, ReplyError> {
    let mut version = None;
    let mut conn_tab_size = None;
    for attr in &msg.attrs {
        match attr {
            IpvsAttr::InfoVersion(v) => version = Some(*v),
            IpvsAttr::InfoConnTabSize(v) => conn_tab_size = Some(*v),
            _ => {}
        }
    }
    match (version, conn_tab_size) {
        (Some(v), Some(size)) => Ok(Info { version: v.into(), conn_tab_size: size }),
        _ => Err("GET_INFO reply without version or connection table size".into()),
    }
}

/// Reads a `GET_CONFIG` reply. A timeout the kernel leaves out (its protocol is
/// not built in) reads as 0.
pub fn timeouts_reply(msg: &IpvsMessage) -> Timeouts {
    let mut t = Timeouts::default();
    for attr in &msg.attrs {
        match attr {
            IpvsAttr::TimeoutTcp(v) => t.tcp = *v,
            IpvsAttr::TimeoutTcpFin(v) => t.tcp_fin = *v,
            IpvsAttr::TimeoutUdp(v) => t.udp = *v,
            _ => {}
        }
    }
    t
}

/// The nested service of a dump message.
pub fn service_of(msg: &IpvsMessage) -> Result<&[ServiceAttr], ReplyError> {
    msg.attrs
        .iter()
        .find_map(|a| match a {
            IpvsAttr::Service(s) => Some(s.as_slice()),
            _ => None,
        })
        .ok_or_else(|| "service message without IPVS_CMD_ATTR_SERVICE".into())
}

/// The nested destination of a dump message.
pub fn dest_of(msg: &IpvsMessage) -> Result<&[DestAttr], ReplyError> {
    msg.attrs
        .iter()
        .find_map(|a| match a {
            IpvsAttr::Dest(d) => Some(d.as_slice()),
            _ => None,
        })
        .ok_or_else(|| "destination message without IPVS_CMD_ATTR_DEST".into())
}

#[derive(Default)]
struct RawService<'a> {
    af: Option<u16>,
    protocol: Option<u16>,
    addr: Option<InetAddr>,
    port: Option<u16>,
    fwmark: Option<u32>,
    sched: Option<&'a str>,
    flags: u32,
    timeout: u32,
    netmask: Option<u32>,
    stats: Option<&'a [u8]>,
    stats64: Option<&'a [u8]>,
}

impl<'a> RawService<'a> {
    fn collect(attrs: &'a [ServiceAttr]) -> Self {
        let mut raw = RawService::default();
        for attr in attrs {
            match attr {
                ServiceAttr::AddressFamily(v) => raw.af = Some(*v),
                ServiceAttr::Protocol(v) => raw.protocol = Some(*v),
                ServiceAttr::Address(v) => raw.addr = Some(*v),
                ServiceAttr::Port(v) => raw.port = Some(*v),
                ServiceAttr::Fwmark(v) => raw.fwmark = Some(*v),
                ServiceAttr::SchedName(v) => raw.sched = Some(v),
                ServiceAttr::Flags(f) => raw.flags = f.flags,
                ServiceAttr::Timeout(v) => raw.timeout = *v,
                ServiceAttr::Netmask(v) => raw.netmask = Some(*v),
                ServiceAttr::Stats(v) => raw.stats = Some(v),
                ServiceAttr::Stats64(v) => raw.stats64 = Some(v),
                _ => {}
            }
        }
        raw
    }
}

/// Reads a dumped service. `Ok(None)` for services svcproxy cannot express and
/// never creates: fwmark services and protocols other than TCP, UDP and SCTP.
pub fn observed_service(
    attrs: &[ServiceAttr],
) -> Result<Option<ObservedVirtualServer>, ReplyError> {
    let raw = RawService::collect(attrs);
    let Some(protocol) = raw.protocol.and_then(Protocol::from_number) else { return Ok(None) };
    if raw.fwmark.is_some_and(|m| m != 0) {
        return Ok(None);
    }
    let af = raw.af.ok_or("service without address family")?;
    let addr = raw.addr.and_then(|a| a.to_ip(af)).ok_or("service without a usable address")?;
    let netmask = match raw.netmask {
        Some(m) => {
            netmask_prefix(af, m).ok_or_else(|| format!("netmask {m:#x} is not a prefix"))?
        }
        None => crate::ipvs::values::full_prefix(addr),
    };
    let persistent = (raw.flags & IP_VS_SVC_F_PERSISTENT != 0).then_some(raw.timeout);
    let vs = VirtualServer {
        addr,
        port: raw.port.ok_or("service without port")?,
        protocol,
        scheduler: raw.sched.ok_or("service without scheduler")?.to_string(),
        persistent,
        netmask,
        flags: raw.flags & !(IP_VS_SVC_F_PERSISTENT | IP_VS_SVC_F_HASHED),
    };
    let stats = read_stats(raw.stats64.or(raw.stats))?;
    Ok(Some(ObservedVirtualServer { vs, stats }))
}

/// Reads a dumped destination of a service of family `service_af` (the family
/// applies when the kernel does not send `IPVS_DEST_ATTR_ADDR_FAMILY`).
pub fn observed_dest(
    attrs: &[DestAttr],
    service_af: u16,
) -> Result<ObservedRealServer, ReplyError> {
    let raw = RawDest::collect(attrs, service_af);
    let addr =
        raw.addr.and_then(|a| a.to_ip(raw.af)).ok_or("destination without a usable address")?;
    let fwd = raw.fwd.ok_or("destination without forwarding method")?;
    let rs = RealServer {
        addr,
        port: raw.port.ok_or("destination without port")?,
        weight: raw.weight,
        fwd: Forward::from_number(fwd).ok_or_else(|| format!("unknown forwarding method {fwd}"))?,
        upper_threshold: raw.upper,
        lower_threshold: raw.lower,
    };
    Ok(ObservedRealServer {
        rs,
        active_conns: raw.active,
        inactive_conns: raw.inactive,
        persistent_conns: raw.persistent,
        stats: read_stats(raw.stats64.or(raw.stats))?,
    })
}

#[derive(Default)]
struct RawDest<'a> {
    af: u16,
    addr: Option<InetAddr>,
    port: Option<u16>,
    fwd: Option<u32>,
    weight: u32,
    upper: u32,
    lower: u32,
    active: u32,
    inactive: u32,
    persistent: u32,
    stats: Option<&'a [u8]>,
    stats64: Option<&'a [u8]>,
}

impl<'a> RawDest<'a> {
    fn collect(attrs: &'a [DestAttr], service_af: u16) -> Self {
        let mut raw = RawDest { af: service_af, ..RawDest::default() };
        for attr in attrs {
            match attr {
                DestAttr::AddressFamily(v) => raw.af = *v,
                DestAttr::Address(v) => raw.addr = Some(*v),
                DestAttr::Port(v) => raw.port = Some(*v),
                DestAttr::FwdMethod(v) => raw.fwd = Some(*v),
                DestAttr::Weight(v) => raw.weight = *v,
                DestAttr::UpperThreshold(v) => raw.upper = *v,
                DestAttr::LowerThreshold(v) => raw.lower = *v,
                DestAttr::ActiveConns(v) => raw.active = *v,
                DestAttr::InactiveConns(v) => raw.inactive = *v,
                DestAttr::PersistentConns(v) => raw.persistent = *v,
                DestAttr::Stats(v) => raw.stats = Some(v),
                DestAttr::Stats64(v) => raw.stats64 = Some(v),
                _ => {}
            }
        }
        raw
    }
}

/// Reads nested `IPVS_STATS_ATTR_*`, 32- or 64-bit counters alike.
fn read_stats(raw: Option<&[u8]>) -> Result<Option<Stats>, ReplyError> {
    let Some(raw) = raw else { return Ok(None) };
    let mut s = Stats::default();
    for nla in NlasIterator::new(raw) {
        let nla = nla.map_err(|e| format!("stats: {e}"))?;
        let value = match nla.value().len() {
            4 => nla.value().try_into().map(|b| u64::from(u32::from_ne_bytes(b))),
            _ => nla.value().try_into().map(u64::from_ne_bytes),
        };
        let Ok(value) = value else { continue };
        let field = match nla.kind() {
            1 => &mut s.conns,
            2 => &mut s.in_pkts,
            3 => &mut s.out_pkts,
            4 => &mut s.in_bytes,
            5 => &mut s.out_bytes,
            6 => &mut s.cps,
            7 => &mut s.in_pps,
            8 => &mut s.out_pps,
            9 => &mut s.in_bps,
            10 => &mut s.out_bps,
            _ => continue,
        };
        *field = value;
    }
    Ok(Some(s))
}

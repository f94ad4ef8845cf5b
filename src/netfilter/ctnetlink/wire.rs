//! ctnetlink's messages, the pure half: a dump request (one family, optionally one
//! protocol, filtered by the kernel), a flow deleted by its original tuple, zone and id
//! (so a newer flow with the same tuple is not), a flow created (benchmarks and tests),
//! and the kernel's flow messages parsed. Attribute numbers are `nfnetlink_conntrack.h`'s.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::netfilter::nlattr::{self, AttrIter, Attrs};

pub const NFNL_SUBSYS_CTNETLINK: u16 = 1;
pub const MSG_NEW: u16 = 0;
pub const MSG_GET: u16 = 1;
pub const MSG_DELETE: u16 = 2;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_STATUS: u16 = 3;
const CTA_TIMEOUT: u16 = 7;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;

const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;

const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;

const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_REPLY_FLAGS: u16 = 2;
const CTA_FILTER_F_CTA_IP_DST: u32 = 1 << 1;
const CTA_FILTER_F_CTA_PROTO_NUM: u32 = 1 << 3;
const CTA_FILTER_F_CTA_PROTO_DST_PORT: u32 = 1 << 5;

pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_SCTP: u8 = 132;

/// Status bits (`IPS_*`).
pub const IPS_SEEN_REPLY: u32 = 1 << 1;
pub const IPS_ASSURED: u32 = 1 << 2;
/// A flow created over ctnetlink is confirmed at once; the kernel refuses (`EBUSY`) a
/// status that would change that bit, so a create carries it, as libnetfilter_conntrack's do.
pub const IPS_CONFIRMED: u32 = 1 << 3;

/// One direction of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// A conntrack flow as the kernel reports it (the fields the reconciler and its reports use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub orig: Tuple,
    pub reply: Tuple,
    pub zone: u16,
    /// The kernel's id of this flow: a delete naming it misses a newer flow on the same tuple.
    pub id: u32,
    pub status: u32,
    /// Seconds left.
    pub timeout: u32,
}

/// As `conntrack -L` shows a flow: protocol, original tuple, reply tuple, zone.
impl std::fmt::Display for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = crate::model::Protocol::from_number(u16::from(self.orig.proto)).map_or_else(|| self.orig.proto.to_string(), |p| p.lower().to_string());
        let (o, r) = (&self.orig, &self.reply);
        write!(f, "{name} src={} dst={} sport={} dport={} src={} dst={} sport={} dport={}", o.src, o.dst, o.sport, o.dport, r.src, r.dst, r.sport, r.dport)?;
        if self.zone != 0 {
            write!(f, " zone={}", self.zone)?;
        }
        Ok(())
    }
}

/// Why a flow message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("ctnetlink flow message: no {0}")]
    Missing(&'static str),
    #[error("ctnetlink flow message: {0} has {1} bytes")]
    Length(&'static str, usize),
}

/// The family byte of `nfgenmsg` for an address.
pub fn family_of(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    }
}

/// What a dump keeps, by the original tuple: a protocol, and optionally a destination
/// port and address (a NodePort's flows: the port on any address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpFilter {
    pub proto: u8,
    pub dst: Option<IpAddr>,
    pub dport: Option<u16>,
}

impl DumpFilter {
    pub fn proto(proto: u8) -> Self {
        DumpFilter { proto, dst: None, dport: None }
    }

    /// Whether `flow` passes (what the kernel keeps; checked here on a kernel without filters).
    pub fn matches(&self, flow: &Flow) -> bool {
        flow.orig.proto == self.proto && self.dst.is_none_or(|d| d == flow.orig.dst) && self.dport.is_none_or(|p| p == flow.orig.dport)
    }
}

/// Dumps the flows of one family (`AF_INET`/`AF_INET6`). With `proto`, the kernel returns
/// only that protocol's flows (`CTA_FILTER` on the original tuple's protocol, Linux 5.8+);
/// without, it is the request `conntrack -L -f FAMILY` sends.
pub fn dump_request(seq: u32, family: u8, proto: Option<u8>) -> Vec<u8> {
    dump_request_to(seq, family, proto.map(DumpFilter::proto).as_ref())
}

/// [`dump_request`] the kernel filters by `filter` (its protocol, destination port and
/// address: `CTA_FILTER`'s original-tuple flags); the kernel still walks its whole table.
pub fn dump_request_to(seq: u32, family: u8, filter: Option<&DumpFilter>) -> Vec<u8> {
    let mut a = Attrs::default();
    if let Some(f) = filter {
        let mut flags = CTA_FILTER_F_CTA_PROTO_NUM;
        a.nest(CTA_TUPLE_ORIG, |t| {
            if let Some(dst) = f.dst {
                flags |= CTA_FILTER_F_CTA_IP_DST;
                t.nest(CTA_TUPLE_IP, |ip| match dst {
                    IpAddr::V4(d) => {
                        ip.bytes(CTA_IP_V4_DST, &d.octets());
                    }
                    IpAddr::V6(d) => {
                        ip.bytes(CTA_IP_V6_DST, &d.octets());
                    }
                });
            }
            t.nest(CTA_TUPLE_PROTO, |p| {
                p.u8(CTA_PROTO_NUM, f.proto);
                if let Some(port) = f.dport {
                    flags |= CTA_FILTER_F_CTA_PROTO_DST_PORT;
                    p.be16(CTA_PROTO_DST_PORT, port);
                }
            });
        });
        a.nest(CTA_FILTER, |n| {
            n.bytes(CTA_FILTER_ORIG_FLAGS, &flags.to_ne_bytes());
            n.bytes(CTA_FILTER_REPLY_FLAGS, &0u32.to_ne_bytes());
        });
    }
    let mut out = Vec::with_capacity(20 + a.0.len());
    nlattr::nfnl_message(&mut out, NFNL_SUBSYS_CTNETLINK, MSG_GET, nlattr::NLM_F_DUMP, seq, family, &a.0);
    out
}

/// Appends the delete of one flow: its original tuple, its zone when not 0, and its id.
pub fn delete_request(out: &mut Vec<u8>, seq: u32, flow: &Flow, ack: bool) {
    let mut a = Attrs::default();
    tuple(&mut a, CTA_TUPLE_ORIG, &flow.orig);
    if flow.zone != 0 {
        a.be16(CTA_ZONE, flow.zone);
    }
    a.be32(CTA_ID, flow.id);
    let flags = if ack { nlattr::NLM_F_ACK } else { 0 };
    nlattr::nfnl_message(out, NFNL_SUBSYS_CTNETLINK, MSG_DELETE, flags, seq, family_of(&flow.orig.src), &a.0);
}

/// Appends the creation of a flow (both tuples, status bits, timeout; its id is the
/// kernel's to give). Acknowledged, so a refusal is reported.
pub fn create_request(out: &mut Vec<u8>, seq: u32, flow: &Flow) {
    let mut a = Attrs::default();
    tuple(&mut a, CTA_TUPLE_ORIG, &flow.orig);
    tuple(&mut a, CTA_TUPLE_REPLY, &flow.reply);
    a.be32(CTA_STATUS, flow.status | IPS_CONFIRMED);
    a.be32(CTA_TIMEOUT, flow.timeout);
    if flow.zone != 0 {
        a.be16(CTA_ZONE, flow.zone);
    }
    let flags = nlattr::NLM_F_CREATE | nlattr::NLM_F_EXCL | nlattr::NLM_F_ACK;
    nlattr::nfnl_message(out, NFNL_SUBSYS_CTNETLINK, MSG_NEW, flags, seq, family_of(&flow.orig.src), &a.0);
}

/// A tuple as libnetfilter_conntrack writes it: addresses, then protocol and ports.
fn tuple(a: &mut Attrs, kind: u16, t: &Tuple) {
    a.nest(kind, |n| {
        n.nest(CTA_TUPLE_IP, |ip| match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                ip.bytes(CTA_IP_V4_SRC, &s.octets()).bytes(CTA_IP_V4_DST, &d.octets());
            }
            (s, d) => {
                ip.bytes(CTA_IP_V6_SRC, &v6(s).octets()).bytes(CTA_IP_V6_DST, &v6(d).octets());
            }
        });
        n.nest(CTA_TUPLE_PROTO, |p| {
            p.u8(CTA_PROTO_NUM, t.proto).be16(CTA_PROTO_SRC_PORT, t.sport).be16(CTA_PROTO_DST_PORT, t.dport);
        });
    });
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

/// A flow from a `MSG_NEW` message's body (`nfgenmsg` and attributes).
pub fn parse_flow(body: &[u8]) -> Result<Flow, WireError> {
    let attrs = body.get(4..).ok_or(WireError::Length("nfgenmsg", body.len()))?;
    let (mut orig, mut reply, mut zone, mut id, mut status, mut timeout) = (None, None, 0, 0, 0, 0);
    for (kind, v) in AttrIter(attrs) {
        match kind {
            CTA_TUPLE_ORIG => orig = Some(parse_tuple(v)?),
            CTA_TUPLE_REPLY => reply = Some(parse_tuple(v)?),
            CTA_ZONE => zone = u16::from_be_bytes(fixed(v, "zone")?),
            CTA_ID => id = u32::from_be_bytes(fixed(v, "id")?),
            CTA_STATUS => status = u32::from_be_bytes(fixed(v, "status")?),
            CTA_TIMEOUT => timeout = u32::from_be_bytes(fixed(v, "timeout")?),
            _ => {}
        }
    }
    Ok(Flow {
        orig: orig.ok_or(WireError::Missing("original tuple"))?,
        reply: reply.ok_or(WireError::Missing("reply tuple"))?,
        zone,
        id,
        status,
        timeout,
    })
}

fn fixed<const N: usize>(v: &[u8], what: &'static str) -> Result<[u8; N], WireError> {
    v.get(..N).and_then(|b| b.try_into().ok()).ok_or(WireError::Length(what, v.len()))
}

fn parse_tuple(b: &[u8]) -> Result<Tuple, WireError> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, 0, 0);
    for (kind, v) in AttrIter(b) {
        match kind {
            CTA_TUPLE_IP => {
                for (k, a) in AttrIter(v) {
                    match k {
                        CTA_IP_V4_SRC => src = Some(IpAddr::V4(Ipv4Addr::from(fixed::<4>(a, "IPv4 source")?))),
                        CTA_IP_V4_DST => dst = Some(IpAddr::V4(Ipv4Addr::from(fixed::<4>(a, "IPv4 destination")?))),
                        CTA_IP_V6_SRC => src = Some(IpAddr::V6(Ipv6Addr::from(fixed::<16>(a, "IPv6 source")?))),
                        CTA_IP_V6_DST => dst = Some(IpAddr::V6(Ipv6Addr::from(fixed::<16>(a, "IPv6 destination")?))),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (k, a) in AttrIter(v) {
                    match k {
                        CTA_PROTO_NUM => proto = Some(fixed::<1>(a, "protocol")?[0]),
                        CTA_PROTO_SRC_PORT => sport = u16::from_be_bytes(fixed(a, "source port")?),
                        CTA_PROTO_DST_PORT => dport = u16::from_be_bytes(fixed(a, "destination port")?),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Tuple {
        src: src.ok_or(WireError::Missing("source address"))?,
        dst: dst.ok_or(WireError::Missing("destination address"))?,
        proto: proto.ok_or(WireError::Missing("protocol"))?,
        sport,
        dport,
    })
}

#[cfg(test)]
mod tests;

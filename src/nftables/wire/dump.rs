//! Reading the `kube-proxy` table's names over netlink, the pure half: the requests (a
//! table lookup, a chain dump, a set dump) and the replies' parse (NUL-terminated name
//! attributes, set flags) — the same requests `nft list chains` / `nft -t list sets` make,
//! without `nft`'s whole-table cache fill. [`super::super::netlink`] sends them.

use super::attr::{self, Attrs};
use super::WireFamily;
use crate::net::IpFamily;

/// Stateful objects (named counters): `GETOBJ`, their dump, and each object's message.
pub use super::nfta::msg::{GETCHAIN, GETGEN, GETOBJ, GETRULE, GETSET, GETSETELEM, GETTABLE};
pub use super::nfta::msg::{NEWCHAIN, NEWGEN, NEWOBJ, NEWRULE, NEWSET, NEWSETELEM, NEWTABLE};
pub const NLM_F_DUMP: u16 = 0x300;
pub use crate::netfilter::nlattr::{NLMSG_DONE, NLMSG_ERROR};

use super::nfta::{chain, obj, set};

/// `NFTA_TABLE_NAME`, `NFTA_CHAIN_TABLE`, `NFTA_SET_TABLE` (all 1).
const TABLE_ATTR: u16 = super::nfta::table::NAME;

/// One request: `kind` (`GET…`) for `table` of `fam`; a dump unless `kind` is [`GETTABLE`].
pub fn request(kind: u16, fam: IpFamily, table: &str, seq: u32) -> Vec<u8> {
    let mut a = Attrs::default();
    a.str(TABLE_ATTR, table);
    let flags = if kind == GETTABLE { attr::NLM_F_ACK } else { NLM_F_DUMP };
    let mut out = Vec::new();
    attr::message(&mut out, kind, flags, seq, fam.nfproto(), &a);
    out
}

/// A dump of `table`'s rules of one chain (`GETRULE`), or of one set's elements
/// (`GETSETELEM`): the table and the chain or set named (both attributes 1 and 2).
pub fn request_of(kind: u16, fam: IpFamily, table: &str, name: &str, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    request_of_into(&mut out, kind, fam, table, name, seq);
    out
}

/// [`request_of`], appended to `out`.
pub fn request_of_into(out: &mut Vec<u8>, kind: u16, fam: IpFamily, table: &str, name: &str, seq: u32) {
    let mut a = Attrs::default();
    a.str(TABLE_ATTR, table).str(2, name);
    attr::message(out, kind, NLM_F_DUMP, seq, fam.nfproto(), &a);
}

/// The ruleset generation request (`GETGEN`: answered by one `NEWGEN` and an acknowledgement).
pub fn generation_request(seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    attr::message(&mut out, GETGEN, attr::NLM_F_ACK, seq, 0, &Attrs::default());
    out
}

/// A 64-bit handle attribute (`NFTA_TABLE_HANDLE` 4, `NFTA_SET_HANDLE` 0x10) of a `kind` reply.
pub fn handle(reply: &Reply, kind: u16, attr: u16) -> Option<u64> {
    let Reply::Object { kind: k, attrs } = reply else { return None };
    if *k != kind {
        return None;
    }
    get(attrs, attr).and_then(|v| Some(u64::from_be_bytes(v.try_into().ok()?)))
}

/// The generation id in a `NEWGEN` reply.
pub fn generation_of(reply: &Reply) -> Option<u32> {
    let Reply::Object { kind: NEWGEN, attrs } = reply else { return None };
    be32(attrs, 1)
}

/// One reply message, as far as a name read needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An nf_tables object (`NEW…` message kind without the subsystem): its attributes.
    Object { kind: u16, attrs: Vec<(u16, Vec<u8>)> },
    /// `NLMSG_ERROR`: errno (0: an acknowledgement).
    Error(i32),
    Done,
}

/// The messages of one `recv`'s bytes (a truncated tail is dropped).
pub fn replies(buf: &[u8]) -> Vec<Reply> {
    let owned = |r| match r {
        Borrowed::Object { kind, payload } => Reply::Object { kind, attrs: attrs(payload) },
        Borrowed::Error(e) => Reply::Error(e),
        Borrowed::Done => Reply::Done,
    };
    borrowed(buf).map(owned).collect()
}

/// One reply message, borrowed from the received bytes ([`borrowed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Borrowed<'a> {
    /// An nf_tables object: its kind (without the subsystem) and its attributes' bytes
    /// (after `nfgenmsg`).
    Object { kind: u16, payload: &'a [u8] },
    Error(i32),
    Done,
}

/// [`replies`] without copying: every message of `buf` in order.
pub fn borrowed(buf: &[u8]) -> impl Iterator<Item = Borrowed<'_>> {
    Messages(buf).filter_map(|m| match m {
        Message::Error { errno, .. } => Some(Borrowed::Error(errno)),
        Message::Done { .. } => Some(Borrowed::Done),
        // After `nfgenmsg`, the object's attributes.
        Message::Data { kind, body, .. } if kind >> 8 == attr::NFNL_SUBSYS_NFTABLES => Some(Borrowed::Object { kind: kind & 0xff, payload: body.get(4..).unwrap_or_default() }),
        Message::Data { .. } => None,
    })
}

/// Top-level attributes (type without the nested/byte-order flags, payload), copied.
pub fn attrs(b: &[u8]) -> Vec<(u16, Vec<u8>)> {
    AttrIter(b).map(|(k, v)| (k, v.to_vec())).collect()
}

pub use crate::netfilter::nlattr::AttrIter;
use crate::netfilter::nlattr::{Message, Messages};

/// A chain's name in a `NEWCHAIN` message's payload, when it is a chain of `table`.
pub fn chain_name<'a>(payload: &'a [u8], table: &str) -> Option<&'a str> {
    let text = |v: &'a [u8]| std::str::from_utf8(&v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())]).ok();
    let (mut of_table, mut name) = (None, None);
    for (t, v) in AttrIter(payload) {
        match t {
            TABLE_ATTR if of_table.is_none() => of_table = Some(v),
            chain::NAME if name.is_none() => name = Some(v),
            _ => {}
        }
    }
    (text(of_table?)? == table).then(|| text(name?)).flatten()
}

fn get(attrs: &[(u16, Vec<u8>)], kind: u16) -> Option<&[u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| v.as_slice())
}

fn be32(attrs: &[(u16, Vec<u8>)], kind: u16) -> Option<u32> {
    Some(u32::from_be_bytes(get(attrs, kind)?.try_into().ok()?))
}

fn string(attrs: &[(u16, Vec<u8>)], kind: u16) -> Option<String> {
    let v = get(attrs, kind)?;
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    String::from_utf8(v[..end].to_vec()).ok()
}

/// A named counter of `table` and its packets, when the message is one (`NFTA_OBJ_TYPE`
/// `NFT_OBJECT_COUNTER`; `NFTA_OBJ_DATA` holding `NFTA_COUNTER_PACKETS`, big-endian).
pub fn counter_of(reply: &Reply, table: &str) -> Option<(String, u64)> {
    let Reply::Object { kind: NEWOBJ, attrs: a } = reply else { return None };
    if be32(a, obj::TYPE) != Some(obj::COUNTER) || string(a, obj::TABLE)? != table {
        return None;
    }
    let data = attrs(get(a, obj::DATA)?);
    let packets = u64::from_be_bytes(get(&data, obj::COUNTER_PACKETS)?.try_into().ok()?);
    Some((string(a, obj::NAME)?, packets))
}

/// A chain's name, when the message is a chain of `table`.
pub fn chain_of(reply: &Reply, table: &str) -> Option<String> {
    let Reply::Object { kind: NEWCHAIN, attrs } = reply else { return None };
    (string(attrs, chain::TABLE)? == table).then(|| string(attrs, chain::NAME)).flatten()
}

/// A named set's name (not a map's, not an anonymous set's: what `nft list sets` lists),
/// when the message is a set of `table`.
pub fn set_of(reply: &Reply, table: &str) -> Option<String> {
    let Reply::Object { kind: NEWSET, attrs } = reply else { return None };
    let flags = be32(attrs, set::FLAGS).unwrap_or(0);
    (string(attrs, set::TABLE)? == table && flags & (set::F_ANONYMOUS | set::F_MAP) == 0).then(|| string(attrs, set::NAME)).flatten()
}

/// Whether a set message is a dynamic set's (`NFT_SET_EVAL`: session affinity's, filled
/// by packets, never by a sync).
pub fn is_dynamic(attrs: &[(u16, Vec<u8>)]) -> bool {
    be32(attrs, set::FLAGS).is_some_and(|f| f & set::F_EVAL != 0)
}

/// The number of an anonymous set (`__setN`, `__mapN`) of `table`, when the message is one.
pub fn anonymous_number(reply: &Reply, table: &str) -> Option<u32> {
    let Reply::Object { kind: NEWSET, attrs } = reply else { return None };
    if be32(attrs, set::FLAGS).unwrap_or(0) & set::F_ANONYMOUS == 0 || string(attrs, set::TABLE)? != table {
        return None;
    }
    let name = string(attrs, set::NAME)?;
    name.strip_prefix("__set").or_else(|| name.strip_prefix("__map"))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as the kernel frames it: header, nfgenmsg, attributes.
    fn object(kind: u16, a: &Attrs) -> Vec<u8> {
        let mut out = Vec::new();
        attr::message(&mut out, kind, 0, 1, 2, a);
        out
    }

    #[test]
    fn named_counters_of_the_table_are_read_with_their_packets() {
        let counter = |table: &str, name: &str, kind: u32, packets: u64| {
            let mut a = Attrs::default();
            a.str(1, table).str(2, name).be32(3, kind).nest(4, |d| {
                d.be64(1, packets * 60).be64(2, packets);
            });
            replies(&object(NEWOBJ, &a)).remove(0)
        };
        assert_eq!(counter_of(&counter("kube-proxy", "localhost-nodeport-rejected-udp", 1, 7), "kube-proxy"), Some(("localhost-nodeport-rejected-udp".into(), 7)));
        assert_eq!(counter_of(&counter("other", "c", 1, 7), "kube-proxy"), None, "another table's");
        assert_eq!(counter_of(&counter("kube-proxy", "q", 2, 7), "kube-proxy"), None, "a quota, not a counter");
        let req = request(GETOBJ, IpFamily::V6, "kube-proxy", 4);
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), (10 << 8) | GETOBJ);
        assert_eq!(u16::from_ne_bytes([req[6], req[7]]) & NLM_F_DUMP, NLM_F_DUMP);
    }

    #[test]
    fn a_dump_request_names_the_table_and_asks_for_a_dump() {
        let r = request(GETCHAIN, IpFamily::V4, "kube-proxy", 7);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize, r.len());
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), (10 << 8) | GETCHAIN);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), NLM_F_DUMP | attr::NLM_F_REQUEST);
        assert_eq!(r[16], 2, "NFPROTO_IPV4");
        assert_eq!(&r[24..35], b"kube-proxy\0");
    }

    #[test]
    fn chains_and_named_sets_of_the_table_are_picked_from_the_replies() {
        let mut buf = Vec::new();
        let mut a = Attrs::default();
        a.str(1, "kube-proxy").be64(2, 5).str(3, "service-X");
        buf.extend(object(NEWCHAIN, &a));
        let mut a = Attrs::default();
        a.str(1, "filter").str(3, "INPUT");
        buf.extend(object(NEWCHAIN, &a));
        for (name, flags) in [("cluster-ips", 0u32), ("service-ips", set::F_MAP), ("__set0", set::F_ANONYMOUS | set::F_INTERVAL), ("affinity-A", 0x30)] {
            let mut a = Attrs::default();
            a.str(1, "kube-proxy").str(2, name).be32(3, flags);
            buf.extend(object(NEWSET, &a));
        }
        buf.extend_from_slice(&20u32.to_ne_bytes());
        buf.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        buf.extend_from_slice(&[0; 14]);
        let r = replies(&buf);
        assert_eq!(r.len(), 7);
        assert_eq!(r.last(), Some(&Reply::Done));
        let chains: Vec<String> = r.iter().filter_map(|m| chain_of(m, "kube-proxy")).collect();
        let sets: Vec<String> = r.iter().filter_map(|m| set_of(m, "kube-proxy")).collect();
        assert_eq!(chains, ["service-X"]);
        assert_eq!(sets, ["cluster-ips", "affinity-A"]);
        let anonymous: Vec<u32> = r.iter().filter_map(|m| anonymous_number(m, "kube-proxy")).collect();
        assert_eq!(anonymous, [0]);
    }

    #[test]
    fn an_error_reply_carries_its_errno_and_a_truncated_tail_is_dropped() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&36u32.to_ne_bytes());
        buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf.extend_from_slice(&[0; 10]);
        buf.extend_from_slice(&(-2i32).to_ne_bytes());
        buf.extend_from_slice(&[0; 16]);
        buf.extend_from_slice(&[40, 0, 0, 0, 3]);
        assert_eq!(replies(&buf), [Reply::Error(2)]);
    }
}

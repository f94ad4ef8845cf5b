//! The anonymous sets nft makes for a rule: a constant interval set of addresses and
//! prefixes (`ip saddr != { A , B }`: sorted, overlapping and adjacent ranges merged, the
//! gaps' starts marked as interval ends), and numgen's constant verdict map. Both are
//! sent as nft sends them, with nft's set user data, before the rule that binds them.

use super::attr::{Attrs, Udata};
use super::batch::{Batch, NEWSET, NEWSETELEM};
use super::attr::NLM_F_CREATE;
use super::WireFamily;
use crate::net::IpFamily;
use crate::nftables::stmt::Prefix;

pub const SET_NAME: &str = "__set%d";
pub const MAP_NAME: &str = "__map%d";
use super::nfta::{self, elem, set};
use super::nfta::datatype::{INET_SERVICE as TYPE_INET_SERVICE, INTEGER as TYPE_INTEGER, VERDICT as TYPE_VERDICT};
use super::nfta::elem::F_INTERVAL_END as ELEM_INTERVAL_END;
use super::nfta::set::{F_ANONYMOUS as SET_ANONYMOUS, F_CONSTANT as SET_CONSTANT, F_INTERVAL as SET_INTERVAL, F_MAP as SET_MAP};

/// An address range as big-endian integers, inclusive.
fn range(fam: IpFamily, p: &Prefix) -> Option<(u128, u128)> {
    let len = p.len.map_or(fam.addr_len() * 8, u32::from);
    let bytes = super::expr::ip_bytes(fam, p.addr)?;
    let bits = fam.addr_len() * 8;
    if len > bits {
        return None;
    }
    let v = bytes.iter().fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    let host = if len == bits { 0 } else { (1u128 << (bits - len)) - 1 };
    Some((v & !host, v | host))
}

fn key(fam: IpFamily, v: u128) -> Vec<u8> {
    let n = fam.addr_len() as usize;
    v.to_be_bytes()[16 - n..].to_vec()
}

/// Sends the interval set of `items` (addresses, prefixes); its set id.
/// Its set id and name.
pub fn interval_set(b: &mut Batch, fam: IpFamily, table: &str, saddr: bool, items: &[Prefix]) -> Option<(u32, String)> {
    let mut ranges: Vec<(u128, u128)> = items.iter().map(|i| range(fam, i)).collect::<Option<_>>()?;
    ranges.sort();
    let mut merged: Vec<(u128, u128)> = Vec::new();
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    let max = if fam.addr_len() == 4 { u128::from(u32::MAX) } else { u128::MAX };
    // (key, interval end, open-ended)
    let mut elems: Vec<(u128, bool, bool)> = Vec::new();
    if merged.first().is_some_and(|r| r.0 != 0) {
        elems.push((0, true, false));
    }
    for (lo, hi) in &merged {
        let open = *hi == max;
        elems.push((*lo, false, open));
        if !open {
            elems.push((hi + 1, true, false));
        }
    }
    // nft sizes the set before dropping an open-ended range's end: two per range, and
    // the leading end.
    let size = 2 * merged.len() + usize::from(merged.first().is_some_and(|r| r.0 != 0));
    let id = b.new_anon_id();
    let name = b.anon_name(SET_NAME);
    let (desc, field) = match (fam, saddr) {
        (IpFamily::V4, true) => (12, 11),
        (IpFamily::V4, false) => (12, 12),
        (IpFamily::V6, true) => (13, 8),
        (IpFamily::V6, false) => (13, 9),
    };
    let mut inner = Udata::default();
    inner.u32(0, desc).u32(1, field);
    let mut typeof_ = Udata::default();
    typeof_.u32(0, 7).put(1, &inner.0);
    let mut ud = Udata::default();
    ud.u32(0, 2).u32(2, 1).put(3, &typeof_.0);
    let mut a = Attrs::default();
    a.str(set::TABLE, table)
        .str(set::NAME, &name)
        .be32(set::FLAGS, SET_ANONYMOUS | SET_CONSTANT | SET_INTERVAL)
        .be32(set::KEY_TYPE, fam.addr_type_id())
        .be32(set::KEY_LEN, fam.addr_len())
        .be32(set::ID, id)
        .nest(set::DESC, |d| {
            d.be32(set::DESC_SIZE, size as u32);
        })
        .bytes(set::USERDATA, &ud.0);
    b.push(NEWSET, NLM_F_CREATE, fam, &a);
    let blobs: Vec<Attrs> = elems
        .iter()
        .map(|(k, end, open)| {
            let mut el = Attrs::default();
            if *end {
                el.be32(elem::FLAGS, ELEM_INTERVAL_END);
            }
            el.nest(elem::KEY, |kk| {
                kk.bytes(nfta::expr::DATA_VALUE, &key(fam, *k));
            });
            if *open {
                let mut u = Udata::default();
                u.u32(1, 1);
                el.bytes(elem::USERDATA, &u.0);
            }
            el
        })
        .collect();
    elements(b, fam, table, &name, id, &blobs);
    Some((id, name))
}

/// Sends numgen's verdict map (`index : verdict`); its set id and name.
pub fn verdict_map(b: &mut Batch, fam: IpFamily, table: &str, arms: &[(u32, i32, Option<String>)]) -> (u32, String) {
    let mut typeof_ = Udata::default();
    typeof_.u32(0, 1).put(1, &[]);
    let mut ud = Udata::default();
    ud.u32(0, 1).u32(1, 0).put(4, &typeof_.0).u32(6, 0);
    let data = arms.iter().map(|(k, code, chain)| (*k, |d: &mut Attrs| super::expr::verdict_data(d, *code, chain.as_deref())));
    numgen_map(b, fam, table, (TYPE_VERDICT, 0), &ud, data)
}

/// Sends the map of a NAT's numgen (`index : address . port`, each part padded to four
/// bytes), as nft sends `dnat ip addr . port to numgen random mod N map { … }`'s; its set
/// id and name.
pub fn data_map(b: &mut Batch, fam: IpFamily, table: &str, arms: &[(u32, Vec<u8>)]) -> (u32, String) {
    // Key byte order host (numgen's integer), data byte order unset (a concatenation).
    let mut ud = Udata::default();
    ud.u32(0, 1).u32(1, 0).u32(6, 0);
    let data_type = ((fam.addr_type_id() << 6) | TYPE_INET_SERVICE, fam.addr_len() + 4);
    let data = arms.iter().map(|(k, bytes)| {
        (*k, move |d: &mut Attrs| {
            d.bytes(nfta::expr::DATA_VALUE, bytes);
        })
    });
    numgen_map(b, fam, table, data_type, &ud, data)
}

/// An anonymous constant map keyed by numgen's 4-byte integer: the set (its data type
/// and length, its user data) and its elements (each index and how to write its data).
fn numgen_map<F: FnOnce(&mut Attrs)>(
    b: &mut Batch,
    fam: IpFamily,
    table: &str,
    (data_type, data_len): (u32, u32),
    ud: &Udata,
    arms: impl ExactSizeIterator<Item = (u32, F)>,
) -> (u32, String) {
    let id = b.new_anon_id();
    let name = b.anon_name(MAP_NAME);
    let mut a = Attrs::default();
    a.str(set::TABLE, table)
        .str(set::NAME, &name)
        .be32(set::FLAGS, SET_ANONYMOUS | SET_CONSTANT | SET_MAP)
        .be32(set::KEY_TYPE, TYPE_INTEGER)
        .be32(set::KEY_LEN, 4)
        .be32(set::DATA_TYPE, data_type)
        .be32(set::DATA_LEN, data_len)
        .be32(set::ID, id)
        .nest(set::DESC, |d| {
            d.be32(set::DESC_SIZE, arms.len() as u32);
        })
        .bytes(set::USERDATA, &ud.0);
    b.push(NEWSET, NLM_F_CREATE, fam, &a);
    let blobs: Vec<Attrs> = arms
        .map(|(k, data)| {
            let mut el = Attrs::default();
            el.nest(elem::KEY, |kk| {
                kk.bytes(nfta::expr::DATA_VALUE, &k.to_ne_bytes());
            });
            el.nest(elem::DATA, data);
            el
        })
        .collect();
    elements(b, fam, table, &name, id, &blobs);
    (id, name)
}

/// Elements of an anonymous set, each one's attributes already encoded: as many
/// `NEWSETELEM` messages as it takes to keep the element list under 64 KiB, numbered as
/// libnftnl numbers them: from 1 on, across messages, the number of the element that did
/// not fit into a message skipped (it is numbered again, one more, in the next).
fn elements(b: &mut Batch, fam: IpFamily, table: &str, name: &str, id: u32, blobs: &[Attrs]) {
    let numbered = b.anon_next.is_some();
    let mut at = 0;
    let mut number: u16 = 0;
    while at < blobs.len() {
        let mut size = 4;
        let mut end = at;
        while end < blobs.len() && size + 4 + blobs[end].0.len() <= usize::from(u16::MAX) {
            size += 4 + blobs[end].0.len();
            end += 1;
        }
        let end = end.max(at + 1);
        let mut e = Attrs::default();
        e.str(elem::LIST_TABLE, table);
        // Numbered by svcproxy, the set is found by its id alone: by name the kernel would
        // walk the table's whole list of sets for each message (it tries the name first).
        if !numbered {
            e.str(elem::LIST_SET, name);
        }
        e.be32(elem::LIST_SET_ID, id).nest(elem::LIST_ELEMENTS, |list| {
            for blob in &blobs[at..end] {
                number = number.wrapping_add(1);
                list.nest(number, |el| el.0.extend_from_slice(&blob.0));
            }
        });
        // libnftnl numbered the element that did not fit before starting this message over.
        number = number.wrapping_add(1);
        b.push(NEWSETELEM, NLM_F_CREATE, fam, &e);
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_clear_host_bits() {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        assert_eq!(range(IpFamily::V4, &p("10.1.2.3/8")), Some((0x0a00_0000, 0x0aff_ffff)));
        assert_eq!(range(IpFamily::V4, &p("10.1.2.3")), Some((0x0a01_0203, 0x0a01_0203)));
        assert_eq!(range(IpFamily::V6, &p("::1/128")).map(|r| r.0), Some(1));
        assert_eq!(range(IpFamily::V4, &p("fd00::1")), None);
    }

    /// The top-level attributes of the `NEWSETELEM` message `b` sends.
    fn setelem_attrs(mut b: Batch) -> Vec<(u16, Vec<u8>)> {
        let (bytes, _) = b.finish().unwrap();
        let (_, payload) = super::super::canon::objects(&bytes).find(|(k, _)| *k == NEWSETELEM).unwrap();
        super::super::dump::attrs(payload)
    }

    /// The interval elements sent: (key, interval end, open-ended).
    fn sent(items: &[&str]) -> Vec<(Vec<u8>, bool, bool)> {
        use crate::netfilter::nlattr::AttrIter;
        let mut b = Batch::default();
        let items: Vec<Prefix> = items.iter().map(|s| s.parse().unwrap()).collect();
        interval_set(&mut b, IpFamily::V4, "t", true, &items).unwrap();
        let attrs = setelem_attrs(b);
        let list = &attrs.iter().find(|(k, _)| *k == elem::LIST_ELEMENTS).unwrap().1;
        AttrIter(list)
            .map(|(_, el)| {
                let a: Vec<(u16, &[u8])> = AttrIter(el).collect();
                let key = AttrIter(a.iter().find(|(k, _)| *k == 1).unwrap().1).next().unwrap().1.to_vec();
                (key, a.iter().any(|(k, v)| *k == 3 && *v == [0, 0, 0, 1]), a.iter().any(|(k, _)| *k == 6))
            })
            .collect()
    }

    /// The top-level attributes of the `NEWSETELEM` message of a verdict map sent into `b`.
    fn element_list_attrs(mut b: Batch) -> Vec<u16> {
        verdict_map(&mut b, IpFamily::V4, "t", &[(0, -4, Some("a".into()))]);
        setelem_attrs(b).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_numbered_sets_elements_name_it_by_id_alone() {
        let (table, set, id) = (elem::LIST_TABLE, elem::LIST_SET, elem::LIST_SET_ID);
        assert_eq!(element_list_attrs(Batch::default()), [table, set, id, elem::LIST_ELEMENTS], "nft's template: as nft sends it");
        let mut numbered = Batch::default();
        numbered.anon_next = Some(3);
        assert_eq!(element_list_attrs(numbered), [table, id, elem::LIST_ELEMENTS]);
    }

    #[test]
    fn interval_sets_merge_and_mark_gaps() {
        assert_eq!(
            sent(&["10.128.0.0/9", "10.0.0.0/9", "10.0.0.5"]),
            [(vec![0, 0, 0, 0], true, false), (vec![10, 0, 0, 0], false, false), (vec![11, 0, 0, 0], true, false)]
        );
        assert_eq!(sent(&["0.0.0.0/8", "255.255.255.0/24"]), [(vec![0, 0, 0, 0], false, false), (vec![1, 0, 0, 0], true, false), (vec![255, 255, 255, 0], false, true)]);
    }
}

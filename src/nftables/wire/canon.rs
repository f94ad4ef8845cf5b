//! Rules, sets and elements as comparable bytes: the same canonical form whether they come
//! from the kernel's dumps (`NEWRULE`, `NEWSET`, `NEWSETELEM` replies) or from svcproxy's
//! own encoding of the text it would send ([`super::encode`]), so that a full sync can
//! tell which chains and elements the kernel already holds exactly ([`super::super::delta`]).
//!
//! The form: every expression's attributes sorted by type, nested data (values, verdicts)
//! unfolded the same way, and the few attributes the kernel adds or drops on its own
//! normalised (a lookup's set id and zero flags, a bitwise operation 0, a NAT's implied
//! flags and equal min/max registers, zero element flags); an anonymous set a rule binds
//! is replaced by its content (its definition and its sorted elements), so its kernel
//! name (`__map7`) does not matter. Anything this module does not know (an expression
//! name, an attribute of a set or element that changes what it does) gives `None`:
//! "cannot prove equal", which the caller treats as "differs".

use std::collections::HashMap;

use super::dump::{self, Borrowed, Reply};
use crate::net::IpFamily;
use crate::nftables::model::Element;

/// One attribute: its type (without the nested/byte-order flags) and payload.
pub type Attr = (u16, Vec<u8>);

/// A canonical form (compared, never decoded).
pub type Canon = Vec<u8>;

/// A set's elements: each one's canonical form and its key's bytes.
pub type Elements = Vec<(Canon, Vec<u8>)>;

use super::nfta::msg::{NEWRULE, NEWSET, NEWSETELEM};
use super::nfta::set::F_ANONYMOUS as SET_ANONYMOUS;

/// Attributes of a payload (a nested attribute's, or a message's after `nfgenmsg`).
pub fn parse(b: &[u8]) -> Vec<Attr> {
    dump::attrs(b)
}

pub use super::dump::AttrIter as Attrs;

/// An owned attribute list, borrowed as [`Attrs`] yields them.
fn borrowed(attrs: &[Attr]) -> impl Iterator<Item = (u16, &[u8])> + Clone {
    attrs.iter().map(|(t, v)| (*t, v.as_slice()))
}

/// The first attribute of type `t`.
fn first<'a>(attrs: impl Iterator<Item = (u16, &'a [u8])>, t: u16) -> Option<&'a [u8]> {
    attrs.into_iter().find(|(k, _)| *k == t).map(|(_, v)| v)
}

/// Up to [`Few::MAX`] attributes, on the stack: sorted by type (stably) without an
/// allocation. More than that is not a form this module knows (`None`).
struct Few<'a> {
    items: [(u16, &'a [u8]); Few::MAX],
    len: usize,
}

impl<'a> Few<'a> {
    const MAX: usize = 32;

    fn of(attrs: impl Iterator<Item = (u16, &'a [u8])>) -> Option<Self> {
        let mut f = Few { items: [(0, &[][..]); Few::MAX], len: 0 };
        for a in attrs {
            f.push(a)?;
        }
        Some(f)
    }

    fn push(&mut self, a: (u16, &'a [u8])) -> Option<()> {
        *self.items.get_mut(self.len)? = a;
        self.len += 1;
        Some(())
    }

    fn as_slice(&self) -> &[(u16, &'a [u8])] {
        &self.items[..self.len]
    }

    fn get(&self, t: u16) -> Option<&'a [u8]> {
        first(self.as_slice().iter().copied(), t)
    }

    fn retain(&mut self, keep: impl Fn(u16, &[u8]) -> bool) {
        let mut n = 0;
        for i in 0..self.len {
            let (t, v) = self.items[i];
            if keep(t, v) {
                self.items[n] = (t, v);
                n += 1;
            }
        }
        self.len = n;
    }

    /// Sorted by type, equal types in their order (an insertion sort: a handful of items).
    fn sorted(mut self) -> Self {
        for i in 1..self.len {
            let mut j = i;
            while j > 0 && self.items[j - 1].0 > self.items[j].0 {
                self.items.swap(j - 1, j);
                j -= 1;
            }
        }
        self
    }
}

fn put(out: &mut Vec<u8>, tag: u16, data: &[u8]) {
    out.extend_from_slice(&tag.to_ne_bytes());
    out.extend_from_slice(&(data.len() as u32).to_ne_bytes());
    out.extend_from_slice(data);
}

/// [`put`] of what `f` writes, in place: the same bytes without a buffer of its own.
fn put_with(out: &mut Vec<u8>, tag: u16, f: impl FnOnce(&mut Vec<u8>) -> Option<()>) -> Option<()> {
    out.extend_from_slice(&tag.to_ne_bytes());
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    f(out)?;
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_ne_bytes());
    Some(())
}

fn be32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.try_into().ok()?))
}

fn is_zero(v: &[u8]) -> bool {
    v.iter().all(|b| *b == 0)
}

/// `NFTA_DATA_VALUE` / `NFTA_DATA_VERDICT { code, chain }`, appended to `out`.
fn data(out: &mut Vec<u8>, b: &[u8]) -> Option<()> {
    for &(t, v) in Few::of(Attrs(b))?.sorted().as_slice() {
        match t {
            1 => put(out, 1, v),
            2 => put_with(out, 2, |out| {
                for &(t, v) in Few::of(Attrs(v))?.sorted().as_slice() {
                    match t {
                        1 => put(out, 1, v),
                        2 => put(out, 2, strip_nul(v)),
                        _ => return None,
                    }
                }
                Some(())
            })?,
            _ => return None,
        }
    }
    Some(())
}

fn strip_nul(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    &v[..end]
}

/// What a set a rule refers to (a lookup's, a dynset's) stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetRef<'a> {
    /// A named set: its name.
    Named,
    /// An anonymous set: its content ([`set_content`]).
    Anonymous(&'a [u8]),
}

/// What a rule's set reference stands for, by the set's name; `None` when not known.
pub type Resolve<'a> = dyn Fn(&str) -> Option<SetRef<'a>> + 'a;

/// One expression (`name`, its `NFTA_EXPR_DATA` payload), appended to `out`.
fn expr(out: &mut Vec<u8>, name: &str, b: &[u8], resolve: &Resolve<'_>) -> Option<()> {
    let flags: [u8; 4];
    let mut a = Few::of(Attrs(b))?;
    // Attributes holding nested data (`NFTA_DATA_*`) in this expression.
    let nested: &[u16] = match name {
        "cmp" => &[3],
        "immediate" => &[2],
        "bitwise" => &[4, 5],
        "lookup" | "dynset" | "payload" | "meta" | "numgen" | "ct" | "fib" | "reject" | "masq" | "nat" | "objref" => &[],
        _ => return None,
    };
    match name {
        // NFTA_BITWISE_OP 0 (a mask-and-xor): the kernel dumps it, nft sends it for marks only.
        "bitwise" => a.retain(|t, v| !(t == 6 && is_zero(v))),
        // NFTA_LOOKUP_SET_ID (a batch-local id) never; NFTA_LOOKUP_FLAGS when 0.
        "lookup" => a.retain(|t, v| t != 4 && !(t == 5 && is_zero(v))),
        // NFTA_DYNSET_SET_ID; a zero NFTA_DYNSET_TIMEOUT / NFTA_DYNSET_FLAGS (9).
        "dynset" => a.retain(|t, v| t != 2 && !(matches!(t, 6 | 9) && is_zero(v))),
        "masq" => a.retain(|t, v| !(t == 1 && is_zero(v))),
        "nat" => {
            flags = nat(&mut a)?;
            if flags != [0; 4] {
                a.push((7, &flags))?;
            }
        }
        _ => {}
    }
    let set_attr = match name {
        "lookup" | "dynset" => Some(1),
        _ => None,
    };
    for &(t, v) in a.sorted().as_slice() {
        if nested.contains(&t) {
            put_with(out, t, |out| data(out, v))?;
        } else if name == "objref" && t == 2 {
            // NFTA_OBJREF_IMM_NAME: nft sends it without its NUL, the kernel dumps it with.
            put(out, t, strip_nul(v));
        } else if Some(t) == set_attr {
            let set = std::str::from_utf8(strip_nul(v)).ok()?;
            match resolve(set)? {
                SetRef::Named => put(out, t, set.as_bytes()),
                SetRef::Anonymous(content) => put(out, t, content),
            }
        } else {
            put(out, t, v);
        }
    }
    Some(())
}

/// NAT: the kernel sets `NF_NAT_RANGE_MAP_IPS` / `_PROTO_SPECIFIED` itself when an address
/// / a port register is given, and dumps a max register equal to the min one. Leaves out
/// the flags and those max registers; returns the flags to add back (zero: none).
fn nat(a: &mut Few<'_>) -> Option<[u8; 4]> {
    let mut flags = a.get(7).map_or(Some(0), be32)?;
    let (addr_min, proto_min) = (a.get(3), a.get(5));
    if addr_min.is_some() {
        flags |= 0x1;
    }
    if proto_min.is_some() {
        flags |= 0x2;
    }
    a.retain(|t, v| t != 7 && !(t == 4 && Some(v) == addr_min) && !(t == 6 && Some(v) == proto_min));
    Some(flags.to_be_bytes())
}

/// A rule (its message's attributes): its expressions and its user data (the comment).
pub fn rule(attrs: &[Attr], resolve: &Resolve<'_>) -> Option<Canon> {
    let mut out = Vec::new();
    rule_into(&mut out, borrowed(attrs), resolve)?;
    Some(out)
}

/// [`rule`] of a rule message's payload (its attributes after `nfgenmsg`), appended to
/// `out`; `None` (and `out` in any state) when not provable.
fn rule_into<'a>(out: &mut Vec<u8>, attrs: impl Iterator<Item = (u16, &'a [u8])>, resolve: &Resolve<'_>) -> Option<()> {
    for (t, v) in attrs {
        match t {
            // NFTA_RULE_EXPRESSIONS: a list, in order.
            4 => {
                for (t, e) in Attrs(v) {
                    if t != 1 {
                        return None;
                    }
                    let name = first(Attrs(e), 1).map(strip_nul)?;
                    let name = std::str::from_utf8(name).ok()?;
                    let body = first(Attrs(e), 2).unwrap_or(&[]);
                    put(out, 100, name.as_bytes());
                    put_with(out, 101, |out| expr(out, name, body, resolve))?;
                }
            }
            7 => put(out, 7, v),
            _ => {}
        }
    }
    Some(())
}

/// A chain's rules as one canonical form, built rule by rule ([`Chain::push`]): each
/// rule's form ([`rule`]) framed, in order. Equal forms: the same rules.
#[derive(Debug, Default)]
pub struct Chain {
    form: Canon,
    provable: bool,
}

impl Chain {
    pub fn new() -> Self {
        Chain { form: Vec::new(), provable: true }
    }

    /// Appends one rule message's payload (its attributes after `nfgenmsg`).
    pub fn push(&mut self, payload: &[u8], resolve: &Resolve<'_>) {
        if self.provable {
            self.provable = put_with(&mut self.form, 1, |out| rule_into(out, Attrs(payload), resolve)).is_some();
        }
    }

    /// The form; `None` when a rule was not provable.
    pub fn finish(self) -> Option<Canon> {
        self.provable.then_some(self.form)
    }
}

/// A set's definition as far as it decides what the set holds and how nft lists it: flags,
/// key and data types and lengths, user data. `None`: it has expressions (counters …).
pub fn set_header(attrs: &[Attr]) -> Option<Canon> {
    set_header_of(borrowed(attrs))
}

fn set_header_of<'a>(attrs: impl Iterator<Item = (u16, &'a [u8])> + Clone) -> Option<Canon> {
    let mut out = Vec::new();
    // A verdict map's data length: nft sends 0, the kernel keeps a verdict's size.
    let verdicts = attrs.clone().any(|(t, v)| t == 6 && be32(v) == Some(0xffff_ff00));
    for &(t, v) in Few::of(attrs)?.sorted().as_slice() {
        match t {
            7 if verdicts => {}
            3..=7 | 0xd => put(&mut out, t, v),
            0x11 | 0x12 | 0xf => return None,
            _ => {}
        }
    }
    Some(out)
}

/// Whether a set message is an anonymous set's.
pub fn is_anonymous(attrs: &[Attr]) -> bool {
    is_anonymous_of(borrowed(attrs))
}

fn is_anonymous_of<'a>(attrs: impl Iterator<Item = (u16, &'a [u8])>) -> bool {
    first(attrs, 3).and_then(be32).is_some_and(|f| f & SET_ANONYMOUS != 0)
}

/// A set's name in its message (`NFTA_SET_NAME`, or `NFTA_SET_ELEM_LIST_SET`: both 2).
pub fn set_name(attrs: &[Attr]) -> Option<String> {
    set_name_of(borrowed(attrs))
}

fn set_name_of<'a>(attrs: impl Iterator<Item = (u16, &'a [u8])>) -> Option<String> {
    String::from_utf8(strip_nul(first(attrs, 2)?).to_vec()).ok()
}

/// The names of the sets a batch creates, by the ids it gives them: svcproxy's batches
/// name an anonymous set's elements by id alone ([`super::anon`]).
#[derive(Debug, Default)]
pub struct BatchSets(HashMap<u32, String>);

impl BatchSets {
    /// Notes a `NEWSET` message's set; its name.
    pub fn created<'a>(&mut self, attrs: impl Iterator<Item = (u16, &'a [u8])> + Clone) -> Option<String> {
        let name = set_name_of(attrs.clone())?;
        if let Some(id) = first(attrs, super::nfta::set::ID).and_then(be32) {
            self.0.insert(id, name.clone());
        }
        Some(name)
    }

    /// The set a `NEWSETELEM` message adds to: by name, or by the id of a set of the batch.
    pub fn of_elements<'a>(&self, attrs: impl Iterator<Item = (u16, &'a [u8])> + Clone) -> Option<String> {
        set_name_of(attrs.clone()).or_else(|| self.0.get(&be32(first(attrs, super::nfta::elem::LIST_SET_ID)?)?).cloned())
    }
}

/// One element, canonical, and its key's value bytes. Timeouts and expirations (a dynamic
/// set's run-time state) are left out.
pub fn element(b: &[u8]) -> Option<(Canon, Vec<u8>)> {
    let mut out = Vec::new();
    let mut key = None;
    for &(t, v) in Few::of(Attrs(b))?.sorted().as_slice() {
        match t {
            1 => {
                key = first(Attrs(v), 1).map(<[u8]>::to_vec);
                put_with(&mut out, 1, |out| data(out, v))?;
            }
            2 | 10 => put_with(&mut out, t, |out| data(out, v))?,
            3 if is_zero(v) => {}
            3 | 6 => put(&mut out, t, v),
            4 | 5 => {}
            _ => return None,
        }
    }
    Some((out, key?))
}

/// The elements of a `NEWSETELEM` message (`NFTA_SET_ELEM_LIST_ELEMENTS`).
pub fn elements(attrs: &[Attr]) -> Option<Elements> {
    let mut out = Vec::new();
    elements_into(&mut out, borrowed(attrs))?;
    Some(out)
}

/// [`elements`] of a message's attributes, appended to `out`.
pub fn elements_into<'a>(out: &mut Elements, attrs: impl Iterator<Item = (u16, &'a [u8])>) -> Option<()> {
    let list = first(attrs, 3).unwrap_or(&[]);
    // Each entry is an element, whatever its number (libnftnl numbers them from 1).
    for (_, e) in Attrs(list) {
        out.push(element(e)?);
    }
    Some(())
}

/// An anonymous set's content: its definition, then its elements sorted.
pub fn set_content(header: &[u8], elements: &mut [(Canon, Vec<u8>)]) -> Canon {
    elements.sort();
    let mut out = Vec::with_capacity(6 + header.len() + elements.iter().map(|(e, _)| 6 + e.len()).sum::<usize>());
    put(&mut out, 1, header);
    for (e, _) in elements.iter() {
        put(&mut out, 2, e);
    }
    out
}

/// What a reference to `name` resolves to, given the anonymous sets known (name →
/// content): the content, or a named set's own name; `None` for an anonymous set not known.
pub fn resolve_in<'a>(anonymous: &'a HashMap<String, Canon>) -> impl Fn(&str) -> Option<SetRef<'a>> + 'a {
    move |name: &str| match anonymous.get(name) {
        Some(c) => Some(SetRef::Anonymous(c)),
        None if name.starts_with("__") => None,
        None => Some(SetRef::Named),
    }
}

/// The messages of an encoded batch (or of dump replies): (kind, attributes).
pub fn messages(bytes: &[u8]) -> Vec<(u16, Vec<Attr>)> {
    dump::replies(bytes).into_iter().filter_map(|r| if let Reply::Object { kind, attrs } = r { Some((kind, attrs)) } else { None }).collect()
}

/// The nf_tables messages of `bytes` (a batch, or dump replies), borrowed: (kind without
/// the subsystem, attributes after `nfgenmsg`); as [`dump::replies`] frames them.
pub fn objects(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    dump::borrowed(bytes).filter_map(|r| if let Borrowed::Object { kind, payload } = r { Some((kind, payload)) } else { None })
}

/// The canonical rules that `text` (`add rule` lines of svcproxy's vocabulary) would
/// create, in order; `None` when the encoder does not take it.
pub fn rules_of_text(text: &str) -> Option<Vec<Canon>> {
    let mut out = Vec::new();
    each_rule_of_text(text, |payload, resolve| {
        let mut r = Vec::new();
        rule_into(&mut r, Attrs(payload), resolve)?;
        out.push(r);
        Some(())
    })?;
    Some(out)
}

/// The canonical form of a chain holding the rules `text` adds ([`Chain`]); `None` when
/// the encoder does not take it.
pub fn chain_of_text(text: &str) -> Option<Canon> {
    let mut chain = Chain::new();
    each_rule_of_text(text, |payload, resolve| {
        chain.push(payload, resolve);
        Some(())
    })?;
    chain.finish()
}

/// Encodes `text` and calls `f` with each rule message's payload, and what its set
/// references resolve to.
fn each_rule_of_text(text: &str, mut f: impl FnMut(&[u8], &Resolve<'_>) -> Option<()>) -> Option<()> {
    let mut batch = super::encode_named(text, Some(0)).ok()?;
    let Some((bytes, _)) = batch.finish() else { return Some(()) };
    let mut headers: Vec<(String, Canon)> = Vec::new();
    let mut members: HashMap<String, Elements> = HashMap::new();
    let mut anonymous: HashMap<String, Canon> = HashMap::new();
    let mut sets = BatchSets::default();
    for (kind, payload) in objects(&bytes) {
        match kind {
            NEWSET if is_anonymous_of(Attrs(payload)) => {
                headers.push((sets.created(Attrs(payload))?, set_header_of(Attrs(payload))?));
            }
            NEWSETELEM => {
                let name = sets.of_elements(Attrs(payload))?;
                if headers.iter().any(|(n, _)| *n == name) {
                    elements_into(members.entry(name).or_default(), Attrs(payload))?;
                }
            }
            NEWRULE => {
                // A rule's anonymous sets come right before it, complete.
                for (name, header) in headers.drain(..) {
                    let mut elems = members.remove(&name).unwrap_or_default();
                    anonymous.insert(name, set_content(&header, &mut elems));
                }
                f(payload, &resolve_in(&anonymous))?;
            }
            _ => return None,
        }
    }
    Some(())
}

/// The canonical elements (and keys) that `text` (`add element` lines) would add, in the
/// order of its lines (the batch sends a run of them to one set in nft's order).
pub fn elements_of_text(text: &str) -> Option<Elements> {
    let mut batch = super::encode_named(text, Some(0)).ok()?;
    let Some((bytes, _)) = batch.finish() else { return Some(Vec::new()) };
    let mut out = Vec::new();
    let mut lines: Vec<usize> = Vec::new();
    for (seq, (kind, payload)) in (1u32..).zip(objects(&bytes)) {
        if kind != NEWSETELEM {
            return None;
        }
        elements_into(&mut out, Attrs(payload))?;
        lines.resize(out.len(), batch.line_of(seq)?);
    }
    // Stable, and linear on runs sent last to second (a sort finds descending runs).
    let mut by_line: Vec<(usize, (Canon, Vec<u8>))> = lines.into_iter().zip(out).collect();
    by_line.sort_by_key(|(line, _)| *line);
    Some(by_line.into_iter().map(|(_, e)| e).collect())
}

/// The canonical elements (and keys) of `elements` added to their sets of `family`'s
/// `table`, in order; `None` when one is not encodable.
pub fn elements_of<'e>(family: IpFamily, table: &str, elements: impl IntoIterator<Item = &'e Element>) -> Option<Elements> {
    let mut batch = super::Batch::default();
    for e in elements {
        super::batch::set_element(&mut batch, family, table, true, e).ok()?;
    }
    let Some((bytes, _)) = batch.finish() else { return Some(Vec::new()) };
    let mut out = Vec::new();
    for (kind, payload) in objects(&bytes) {
        if kind != NEWSETELEM {
            return None;
        }
        elements_into(&mut out, Attrs(payload))?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(rule: &str) -> Canon {
        let mut v = rules_of_text(&format!("add rule ip kube-proxy c {rule}\n")).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    #[test]
    fn the_same_rule_is_the_same_and_any_change_differs() {
        let pairs = [
            ("ip saddr != 10.0.0.0/8 jump mark-for-masquerade", "ip saddr != 10.0.0.0/9 jump mark-for-masquerade"),
            ("numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }", "numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-c }"),
            ("numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }", "numgen random mod 2 vmap { 0 : goto endpoint-b , 1 : goto endpoint-a }"),
            ("ip saddr != { 10.0.0.0/8 , 192.168.0.0/16 } drop", "ip saddr != { 10.0.0.0/8 , 192.168.0.0/24 } drop"),
            ("dnat to 10.1.0.1:80", "dnat to 10.1.0.1:81"),
            ("ip daddr . meta l4proto . th dport vmap @service-ips", "ip daddr . meta l4proto . th dport vmap @service-nodeports"),
            ("reject comment \"why\"", "reject comment \"why not\""),
            ("counter name \"localhost-nodeport-rejected-udp\" reject", "counter name \"localhost-nodeport-rejected-tcp\" reject"),
            ("jump a", "goto a"),
            ("jump a", "jump b"),
            ("mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random", "mark and 0x4000 == 0 mark set mark xor 0x4000 masquerade fully-random"),
            ("ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x4000", "ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x8000"),
            ("ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade", "ct state new ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade"),
            ("ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade", "ct status dnat ip daddr . ip saddr . meta l4proto . th dport @hairpin-connections masquerade"),
            ("dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 80 }", "dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 81 }"),
            ("dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 80 }", "dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.2 . 80 , 1 : 10.1.0.1 . 80 }"),
            ("dnat ip addr . port to numgen random mod 1 map { 0 : 10.1.0.1 . 80 }", "dnat to 10.1.0.1:80"),
        ];
        for (a, b) in pairs {
            assert_eq!(one(a), one(a), "{a}");
            assert_ne!(one(a), one(b), "{a} / {b}");
        }
    }

    #[test]
    fn an_anonymous_set_is_compared_by_content_not_by_name() {
        let text = "add rule ip kube-proxy c numgen random mod 2 vmap { 0 : goto a , 1 : goto b }\n";
        let mut named = super::super::encode_named(text, Some(41)).unwrap();
        let (bytes, _) = named.finish().unwrap();
        assert!(bytes.windows(7).any(|w| w == b"__map41"));
        let msgs = messages(&bytes);
        let (_, set) = msgs.iter().find(|(k, _)| *k == NEWSET).unwrap();
        let (_, elems) = msgs.iter().find(|(k, _)| *k == NEWSETELEM).unwrap();
        let (_, r) = msgs.iter().find(|(k, _)| *k == NEWRULE).unwrap();
        let mut members = elements(elems).unwrap();
        members.reverse();
        let anonymous: HashMap<String, Canon> = [("__map41".to_string(), set_content(&set_header(set).unwrap(), &mut members))].into();
        assert_eq!(rule(r, &resolve_in(&anonymous)), Some(rules_of_text(text).unwrap().remove(0)));
        // An anonymous set not read: no canonical form.
        assert_eq!(rule(r, &resolve_in(&HashMap::new())), None);
    }

    #[test]
    fn what_the_kernel_adds_on_its_own_is_normalised_and_unknown_expressions_are_not_equal() {
        let text = "add rule ip kube-proxy c dnat to 10.1.0.1:80\n";
        let mut b = super::super::encode(text).unwrap();
        let (bytes, _) = b.finish().unwrap();
        let (_, attrs) = messages(&bytes).into_iter().find(|(k, _)| *k == NEWRULE).unwrap();
        let sent = rule(&attrs, &|_| Some(SetRef::Named)).unwrap();
        // The kernel's dump of that nat: flags 3, max registers equal to the min ones.
        let mut nat = super::super::attr::Attrs::default();
        nat.be32(1, 1).be32(2, 2).be32(3, 1).be32(4, 1).be32(5, 2).be32(6, 2).be32(7, 3);
        let dumped = |nat: &super::super::attr::Attrs| {
            let mut exprs = super::super::attr::Attrs::default();
            for (name, body) in [("immediate", imm(1, &[10, 1, 0, 1])), ("immediate", imm(2, &80u16.to_be_bytes())), ("nat", nat.0.clone())] {
                exprs.nest(1, |e| {
                    e.str(1, name).nest(2, |d| d.0.extend_from_slice(&body));
                });
            }
            let mut r = super::super::attr::Attrs::default();
            r.str(1, "kube-proxy").str(2, "c").be64(3, 9).nest(4, |l| l.0.extend_from_slice(&exprs.0));
            rule(&parse(&r.0), &|_| Some(SetRef::Named))
        };
        assert_eq!(dumped(&nat), Some(sent.clone()));
        let mut other = super::super::attr::Attrs::default();
        other.be32(1, 1).be32(2, 2).be32(3, 1).be32(4, 3).be32(5, 2).be32(6, 2).be32(7, 3);
        assert_ne!(dumped(&other), Some(sent), "a max register of its own is a range");
        let mut counter = super::super::attr::Attrs::default();
        counter.nest(4, |l| {
            l.nest(1, |e| {
                e.str(1, "counter");
            });
        });
        assert_eq!(rule(&parse(&counter.0), &|_| Some(SetRef::Named)), None);
    }

    fn imm(reg: u32, value: &[u8]) -> Vec<u8> {
        let mut a = super::super::attr::Attrs::default();
        a.be32(1, reg).nest(2, |d| {
            d.bytes(1, value);
        });
        a.0
    }

    #[test]
    fn elements_of_a_text_come_in_its_lines_order() {
        let text: String = (1..=4).map(|i| format!("add element ip kube-proxy cluster-ips {{ 10.0.0.{i} }}\n")).collect();
        let keys: Vec<Vec<u8>> = elements_of_text(&text).unwrap().into_iter().map(|(_, k)| k).collect();
        assert_eq!(keys, (1..=4).map(|i| vec![10, 0, 0, i]).collect::<Vec<_>>());
    }

    #[test]
    fn elements_of_values_are_those_of_their_text() {
        let lines = ["10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto service-a", "10.0.0.2 . udp . 53 : drop"];
        let values: Vec<Element> = lines.iter().map(|l| Element::parsed("service-ips", l)).collect();
        let text: String = lines.iter().map(|l| format!("add element ip kube-proxy service-ips {{ {l} }}\n")).collect();
        assert_eq!(elements_of(IpFamily::V4, "kube-proxy", &values), elements_of_text(&text));
        assert_eq!(elements_of(IpFamily::V6, "kube-proxy", &values), None, "an address of the other family");
    }

    #[test]
    fn elements_compare_by_key_value_and_comment() {
        let e = |line: &str| elements_of_text(&format!("add element ip kube-proxy service-ips {{ {line} }}\n")).unwrap().remove(0);
        let a = e("10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto service-a");
        assert_eq!(a, e("10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto service-a"));
        assert_eq!(a.1, [10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]);
        for other in ["10.0.0.1 . tcp . 81 comment \"ns/a:p\" : goto service-a", "10.0.0.1 . tcp . 80 comment \"ns/b:p\" : goto service-a", "10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto service-b"] {
            assert_ne!(a.0, e(other).0, "{other}");
        }
        assert_eq!(a.1, e("10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto service-b").1, "same key");
    }
}

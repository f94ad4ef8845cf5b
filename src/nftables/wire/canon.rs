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

use super::dump::{self, Reply};

/// One attribute: its type (without the nested/byte-order flags) and payload.
pub type Attr = (u16, Vec<u8>);

/// A canonical form (compared, never decoded).
pub type Canon = Vec<u8>;

/// A set's elements: each one's canonical form and its key's bytes.
pub type Elements = Vec<(Canon, Vec<u8>)>;

const NEWRULE: u16 = 6;
const NEWSET: u16 = 9;
const NEWSETELEM: u16 = 12;
const SET_ANONYMOUS: u32 = 0x1;

/// Attributes of a payload (a nested attribute's, or a message's after `nfgenmsg`).
pub fn parse(b: &[u8]) -> Vec<Attr> {
    dump::attrs(b)
}

fn put(out: &mut Vec<u8>, tag: u16, data: &[u8]) {
    out.extend_from_slice(&tag.to_ne_bytes());
    out.extend_from_slice(&(data.len() as u32).to_ne_bytes());
    out.extend_from_slice(data);
}

fn be32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.try_into().ok()?))
}

fn is_zero(v: &[u8]) -> bool {
    v.iter().all(|b| *b == 0)
}

fn sorted(mut a: Vec<Attr>) -> Vec<Attr> {
    a.sort_by_key(|(t, _)| *t);
    a
}

/// `NFTA_DATA_VALUE` / `NFTA_DATA_VERDICT { code, chain }`.
fn data(b: &[u8]) -> Option<Canon> {
    let mut out = Vec::new();
    for (t, v) in sorted(parse(b)) {
        match t {
            1 => put(&mut out, 1, &v),
            2 => {
                let mut verdict = Vec::new();
                for (t, v) in sorted(parse(&v)) {
                    match t {
                        1 => put(&mut verdict, 1, &v),
                        2 => put(&mut verdict, 2, strip_nul(&v)),
                        _ => return None,
                    }
                }
                put(&mut out, 2, &verdict);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn strip_nul(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    &v[..end]
}

/// What a rule's set reference (a lookup's, a dynset's) stands for: a named set's name, or
/// an anonymous set's content; `None` when not known.
pub type Resolve<'a> = dyn Fn(&str) -> Option<Canon> + 'a;

/// One expression (`name`, its `NFTA_EXPR_DATA` payload).
fn expr(name: &str, b: &[u8], resolve: &Resolve<'_>) -> Option<Canon> {
    let mut a = parse(b);
    // Attributes holding nested data (`NFTA_DATA_*`) in this expression.
    let nested: &[u16] = match name {
        "cmp" => &[3],
        "immediate" => &[2],
        "bitwise" => &[4, 5],
        "lookup" | "dynset" | "payload" | "meta" | "numgen" | "ct" | "fib" | "reject" | "masq" | "nat" => &[],
        _ => return None,
    };
    match name {
        // NFTA_BITWISE_OP 0 (a mask-and-xor): the kernel dumps it, nft sends it for marks only.
        "bitwise" => a.retain(|(t, v)| !(*t == 6 && is_zero(v))),
        // NFTA_LOOKUP_SET_ID (a batch-local id) never; NFTA_LOOKUP_FLAGS when 0.
        "lookup" => a.retain(|(t, v)| *t != 4 && !(*t == 5 && is_zero(v))),
        // NFTA_DYNSET_SET_ID; a zero NFTA_DYNSET_TIMEOUT / NFTA_DYNSET_FLAGS (9).
        "dynset" => a.retain(|(t, v)| *t != 2 && !(matches!(t, 6 | 9) && is_zero(v))),
        "masq" => a.retain(|(t, v)| !(*t == 1 && is_zero(v))),
        "nat" => nat(&mut a)?,
        _ => {}
    }
    let set_attr = match name {
        "lookup" | "dynset" => Some(1),
        _ => None,
    };
    let mut out = Vec::new();
    for (t, v) in sorted(a) {
        if nested.contains(&t) {
            put(&mut out, t, &data(&v)?);
        } else if Some(t) == set_attr {
            let set = std::str::from_utf8(strip_nul(&v)).ok()?;
            put(&mut out, t, &resolve(set)?);
        } else {
            put(&mut out, t, &v);
        }
    }
    Some(out)
}

/// NAT: the kernel sets `NF_NAT_RANGE_MAP_IPS` / `_PROTO_SPECIFIED` itself when an address
/// / a port register is given, and dumps a max register equal to the min one.
fn nat(a: &mut Vec<Attr>) -> Option<()> {
    let get = |a: &[Attr], t: u16| a.iter().find(|(k, _)| *k == t).map(|(_, v)| v.clone());
    let mut flags = get(a, 7).map_or(Some(0), |v| be32(&v))?;
    if get(a, 3).is_some() {
        flags |= 0x1;
    }
    if get(a, 5).is_some() {
        flags |= 0x2;
    }
    let (addr_min, proto_min) = (get(a, 3), get(a, 5));
    a.retain(|(t, v)| *t != 7 && !(*t == 4 && Some(v) == addr_min.as_ref()) && !(*t == 6 && Some(v) == proto_min.as_ref()));
    if flags != 0 {
        a.push((7, flags.to_be_bytes().to_vec()));
    }
    Some(())
}

/// A rule (its message's attributes): its expressions and its user data (the comment).
pub fn rule(attrs: &[Attr], resolve: &Resolve<'_>) -> Option<Canon> {
    let mut out = Vec::new();
    for (t, v) in attrs {
        match t {
            // NFTA_RULE_EXPRESSIONS: a list, in order.
            4 => {
                for (t, e) in parse(v) {
                    if t != 1 {
                        return None;
                    }
                    let e = parse(&e);
                    let name = e.iter().find(|(k, _)| *k == 1).map(|(_, n)| strip_nul(n))?;
                    let name = std::str::from_utf8(name).ok()?;
                    let body = e.iter().find(|(k, _)| *k == 2).map_or(&[][..], |(_, d)| d.as_slice());
                    put(&mut out, 100, name.as_bytes());
                    put(&mut out, 101, &expr(name, body, resolve)?);
                }
            }
            7 => put(&mut out, 7, v),
            _ => {}
        }
    }
    Some(out)
}

/// A set's definition as far as it decides what the set holds and how nft lists it: flags,
/// key and data types and lengths, user data. `None`: it has expressions (counters …).
pub fn set_header(attrs: &[Attr]) -> Option<Canon> {
    let mut out = Vec::new();
    // A verdict map's data length: nft sends 0, the kernel keeps a verdict's size.
    let verdicts = attrs.iter().any(|(t, v)| *t == 6 && be32(v) == Some(0xffff_ff00));
    for (t, v) in sorted(attrs.to_vec()) {
        match t {
            7 if verdicts => {}
            3..=7 | 0xd => put(&mut out, t, &v),
            0x11 | 0x12 | 0xf => return None,
            _ => {}
        }
    }
    Some(out)
}

/// Whether a set message is an anonymous set's.
pub fn is_anonymous(attrs: &[Attr]) -> bool {
    attrs.iter().find(|(t, _)| *t == 3).and_then(|(_, v)| be32(v)).is_some_and(|f| f & SET_ANONYMOUS != 0)
}

/// A set's name in its message (`NFTA_SET_NAME`, or `NFTA_SET_ELEM_LIST_SET`: both 2).
pub fn set_name(attrs: &[Attr]) -> Option<String> {
    let v = attrs.iter().find(|(t, _)| *t == 2)?;
    String::from_utf8(strip_nul(&v.1).to_vec()).ok()
}

/// One element, canonical, and its key's value bytes. Timeouts and expirations (a dynamic
/// set's run-time state) are left out.
pub fn element(b: &[u8]) -> Option<(Canon, Vec<u8>)> {
    let mut out = Vec::new();
    let mut key = None;
    for (t, v) in sorted(parse(b)) {
        match t {
            1 => {
                key = parse(&v).into_iter().find(|(k, _)| *k == 1).map(|(_, k)| k);
                put(&mut out, 1, &data(&v)?);
            }
            2 | 10 => put(&mut out, t, &data(&v)?),
            3 if is_zero(&v) => {}
            3 | 6 => put(&mut out, t, &v),
            4 | 5 => {}
            _ => return None,
        }
    }
    Some((out, key?))
}

/// The elements of a `NEWSETELEM` message (`NFTA_SET_ELEM_LIST_ELEMENTS`).
pub fn elements(attrs: &[Attr]) -> Option<Elements> {
    let list = attrs.iter().find(|(t, _)| *t == 3).map_or(&[][..], |(_, v)| v.as_slice());
    // Each entry is an element, whatever its number (libnftnl numbers them from 1).
    parse(list).into_iter().map(|(_, e)| element(&e)).collect()
}

/// An anonymous set's content: its definition, then its elements sorted.
pub fn set_content(header: &[u8], elements: &mut [(Canon, Vec<u8>)]) -> Canon {
    elements.sort();
    let mut out = Vec::new();
    put(&mut out, 1, header);
    for (e, _) in elements.iter() {
        put(&mut out, 2, e);
    }
    out
}

/// What a reference to `name` resolves to, given the anonymous sets known (name →
/// content): the content, or a named set's own name; `None` for an anonymous set not known.
pub fn resolve_in<'a>(anonymous: &'a HashMap<String, Canon>) -> impl Fn(&str) -> Option<Canon> + 'a {
    move |name: &str| match anonymous.get(name) {
        Some(c) => Some(c.clone()),
        None if name.starts_with("__") => None,
        None => Some(name.as_bytes().to_vec()),
    }
}

/// The messages of an encoded batch (or of dump replies): (kind, attributes).
pub fn messages(bytes: &[u8]) -> Vec<(u16, Vec<Attr>)> {
    dump::replies(bytes).into_iter().filter_map(|r| if let Reply::Object { kind, attrs } = r { Some((kind, attrs)) } else { None }).collect()
}

/// The canonical rules that `text` (`add rule` lines of svcproxy's vocabulary) would
/// create, in order; `None` when the encoder does not take it.
pub fn rules_of_text(text: &str) -> Option<Vec<Canon>> {
    let mut batch = super::encode_named(text, Some(0)).ok()?;
    let Some((bytes, _)) = batch.finish() else { return Some(Vec::new()) };
    let mut headers: HashMap<String, Canon> = HashMap::new();
    let mut members: HashMap<String, Vec<(Canon, Vec<u8>)>> = HashMap::new();
    let mut anonymous: HashMap<String, Canon> = HashMap::new();
    let mut out = Vec::new();
    for (kind, attrs) in messages(&bytes) {
        match kind {
            NEWSET if is_anonymous(&attrs) => {
                headers.insert(set_name(&attrs)?, set_header(&attrs)?);
            }
            NEWSETELEM => {
                let name = set_name(&attrs)?;
                if headers.contains_key(&name) {
                    members.entry(name).or_default().extend(elements(&attrs)?);
                }
            }
            NEWRULE => {
                // A rule's anonymous sets come right before it, complete.
                for (name, header) in headers.drain() {
                    let mut elems = members.remove(&name).unwrap_or_default();
                    anonymous.insert(name, set_content(&header, &mut elems));
                }
                out.push(rule(&attrs, &resolve_in(&anonymous))?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The canonical elements (and keys) that `text` (`add element` lines) would add.
pub fn elements_of_text(text: &str) -> Option<Elements> {
    let mut batch = super::encode_named(text, Some(0)).ok()?;
    let Some((bytes, _)) = batch.finish() else { return Some(Vec::new()) };
    let mut out = Vec::new();
    for (kind, attrs) in messages(&bytes) {
        if kind != NEWSETELEM {
            return None;
        }
        out.extend(elements(&attrs)?);
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
            ("jump a", "goto a"),
            ("jump a", "jump b"),
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
        let sent = rule(&attrs, &|n| Some(n.as_bytes().to_vec())).unwrap();
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
            rule(&parse(&r.0), &|n| Some(n.as_bytes().to_vec()))
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
        assert_eq!(rule(&parse(&counter.0), &|n| Some(n.as_bytes().to_vec())), None);
    }

    fn imm(reg: u32, value: &[u8]) -> Vec<u8> {
        let mut a = super::super::attr::Attrs::default();
        a.be32(1, reg).nest(2, |d| {
            d.bytes(1, value);
        });
        a.0
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

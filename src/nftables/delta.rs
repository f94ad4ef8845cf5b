//! A full sync over a live table sends only what differs: the live table's chains (their
//! rules, with the content of any anonymous set a rule binds) and its named sets' and
//! maps' elements, read in the canonical form of [`super::wire::canon`], against the
//! desired table encoded the same way. The [`Plan`] says which chains the kernel already
//! holds exactly (the sync leaves them alone: no flush, no refill) and, for each named set
//! or map it could read, which elements to delete and which to add instead of a flush and
//! a refill. Safety: a chain is kept only when its every rule was read and proved equal;
//! a set is diffed only when every element was read and every gone element's key could
//! be written back as text; anything else is rewritten as before.

use std::collections::{HashMap, HashSet};

use super::model::{self, Element, Key, NftFamily, Table};
use crate::net::IpFamily;
use super::wire::canon::{self, Canon};

/// What a full sync read of the live table: canonical rules by chain, canonical elements
/// (and their keys' bytes) by named set or map. `None`: something of it was not readable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveTable {
    /// Each chain's rules as one canonical form ([`canon::Chain`]).
    pub chains: HashMap<String, Option<Canon>>,
    pub sets: HashMap<String, Option<canon::Elements>>,
}

/// One set's or map's element changes: the keys the kernel holds and the table does not
/// (deleted first), then the table's elements the kernel does not hold (their indices in
/// the table's elements, added).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetDelta {
    pub deletes: Vec<Key>,
    pub adds: Vec<usize>,
}

/// What a full sync over the live table needs to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Chains whose rules the kernel holds exactly: not refilled.
    pub same: HashSet<String>,
    /// Sets and maps updated by element difference (the others are flushed and refilled).
    pub sets: HashMap<String, SetDelta>,
}

impl Plan {
    /// Element lines sent (deletes and adds).
    pub fn element_changes(&self) -> usize {
        self.sets.values().map(|d| d.deletes.len() + d.adds.len()).sum()
    }
}

/// Compares the desired `table` with what the kernel holds (`live`).
pub fn plan(table: &Table, live: &LiveTable) -> Plan {
    let head = format!("{} {}", table.family.nft_word(), table.name);
    let o = &table.objects;
    // Each chain's rules, by the chain's first declaration (a chain's text is written
    // when it is compared, into one buffer: not 143,000 strings at 10,000 services).
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(o.chains.len());
    for c in &o.chains {
        let next = index.len();
        index.entry(c.name.as_str()).or_insert(next);
    }
    let mut rules: Vec<Vec<&model::Rule>> = vec![Vec::new(); index.len()];
    for r in &o.rules {
        if let Some(&i) = index.get(r.chain.as_str()) {
            rules[i].push(r);
        }
    }
    let mut same = HashSet::new();
    let mut text = String::new();
    for c in &o.chains {
        let Some(Some(held)) = live.chains.get(&c.name) else { continue };
        text.clear();
        for r in index.get(c.name.as_str()).map_or(&[][..], |&i| rules[i].as_slice()) {
            model::rule_line(&mut text, &head, r);
        }
        if canon::chain_of_text(&text).is_some_and(|want| &want == held) {
            same.insert(c.name.clone());
        }
    }
    let mut by_set: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in o.elements.iter().enumerate() {
        by_set.entry(e.set.as_str()).or_default().push(i);
    }
    let mut sets = HashMap::new();
    for s in o.sets.iter().filter(|s| !s.is_dynamic()) {
        let Some(Some(held)) = live.sets.get(&s.name) else { continue };
        let want = by_set.get(s.name.as_str()).map_or(&[][..], Vec::as_slice);
        if let Some(d) = set_delta(&o.elements, want, held, &s.kind, table.family, table.name) {
            sets.insert(s.name.clone(), d);
        }
    }
    Plan { same, sets }
}

/// The changes that bring `held` to `want`, the table's elements of one set (their
/// indices in `elements`); `None` when one cannot be proved or written (the set is then
/// flushed and refilled).
fn set_delta(elements: &[Element], want: &[usize], held: &[(Canon, Vec<u8>)], kind: &str, family: IpFamily, table: &str) -> Option<SetDelta> {
    let canon = canon::elements_of(family, table, want.iter().map(|&i| &elements[i]))?;
    if canon.len() != want.len() {
        return None;
    }
    let wanted: HashSet<&Canon> = canon.iter().map(|(c, _)| c).collect();
    let have: HashSet<&Canon> = held.iter().map(|(c, _)| c).collect();
    let mut d = SetDelta::default();
    for (c, key) in held {
        if !wanted.contains(c) {
            d.deletes.push(Key::decode(kind, key, family)?);
        }
    }
    d.adds = canon.iter().zip(want).filter(|((c, _), _)| !have.contains(c)).map(|(_, &i)| i).collect();
    Some(d)
}

/// The live table as [`plan`] reads it, from `nft -f` text of what a table holds (`add
/// rule` lines by chain, `add element` lines by set): how the fake kernel and tests make
/// one. A chain or set the encoder does not take is `None` (unreadable).
pub fn from_text<'a>(chains: impl IntoIterator<Item = (&'a str, String)>, sets: impl IntoIterator<Item = (&'a str, String)>) -> LiveTable {
    LiveTable {
        chains: chains.into_iter().map(|(n, t)| (n.to_owned(), canon::chain_of_text(&t))).collect(),
        sets: sets.into_iter().map(|(n, t)| (n.to_owned(), canon::elements_of_text(&t))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::{Chain, Element, Objects, Rule, Set};

    fn table(endpoint: &str, elements: &[(&str, &str)]) -> Table {
        let mut o = Objects::default();
        o.chain(Chain::regular("services"));
        o.chain(Chain::regular("service-a"));
        o.chain(Chain::regular("endpoint-a"));
        o.sets.push(Set::map("service-ips", "ipv4_addr . inet_proto . inet_service : verdict", None));
        o.sets.push(Set::plain("cluster-ips", "ipv4_addr", None));
        o.rule(Rule::new("services", "ip daddr . meta l4proto . th dport vmap @service-ips"));
        o.rule(Rule::new("service-a", "numgen random mod 1 vmap { 0 : goto endpoint-a }"));
        o.rule(Rule::new("endpoint-a", format!("dnat to {endpoint}")));
        for (ip, chain) in elements {
            o.elements.push(Element::parsed("service-ips", &format!("{ip} . tcp . 80 comment \"ns/a:p\" : goto {chain}")));
            o.elements.push(Element::parsed("cluster-ips", ip));
        }
        Table { family: IpFamily::V4, name: "kube-proxy", comment: "c", objects: o }
    }

    /// What the kernel would hold after a full sync of `t`.
    fn held(t: &Table) -> LiveTable {
        let head = "ip kube-proxy";
        let mut chains: Vec<(&str, String)> = t.objects.chains.iter().map(|c| (c.name.as_str(), String::new())).collect();
        for r in &t.objects.rules {
            let i = chains.iter().position(|(n, _)| *n == r.chain).unwrap();
            model::rule_line(&mut chains[i].1, head, r);
        }
        let mut sets: Vec<(&str, String)> = t.objects.sets.iter().map(|s| (s.name.as_str(), String::new())).collect();
        for e in &t.objects.elements {
            let i = sets.iter().position(|(n, _)| *n == e.set).unwrap();
            model::element_line(&mut sets[i].1, head, e);
        }
        from_text(chains, sets)
    }

    #[test]
    fn an_equal_table_keeps_every_chain_and_changes_no_element() {
        let t = table("10.1.0.1:80", &[("10.0.0.1", "service-a")]);
        let p = plan(&t, &held(&t));
        assert_eq!(p.same.len(), 3, "{p:?}");
        assert_eq!(p.sets.len(), 2);
        assert_eq!(p.element_changes(), 0);
    }

    #[test]
    fn only_what_differs_is_sent() {
        let before = table("10.1.0.1:80", &[("10.0.0.1", "service-a"), ("10.0.0.2", "service-a")]);
        let after = table("10.1.0.9:80", &[("10.0.0.1", "endpoint-a"), ("10.0.0.3", "service-a")]);
        let p = plan(&after, &held(&before));
        let mut same: Vec<&str> = p.same.iter().map(String::as_str).collect();
        same.sort_unstable();
        assert_eq!(same, ["service-a", "services"]);
        let m = &p.sets["service-ips"];
        let mut deletes: Vec<String> = m.deletes.iter().map(Key::to_string).collect();
        deletes.sort();
        assert_eq!(deletes, ["10.0.0.1 . tcp . 80", "10.0.0.2 . tcp . 80"]);
        let adds: Vec<String> = m.adds.iter().map(|&i| after.objects.elements[i].to_string()).collect();
        assert_eq!(adds, ["10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto endpoint-a", "10.0.0.3 . tcp . 80 comment \"ns/a:p\" : goto service-a"]);
        let s = &p.sets["cluster-ips"];
        assert_eq!(s.deletes.iter().map(Key::to_string).collect::<Vec<_>>(), ["10.0.0.2"]);
        assert_eq!(after.objects.elements[s.adds[0]].to_string(), "10.0.0.3");
        assert_eq!(s.adds.len(), 1);
    }

    #[test]
    fn what_was_not_read_is_rewritten() {
        let t = table("10.1.0.1:80", &[("10.0.0.1", "service-a")]);
        let mut live = held(&t);
        live.chains.insert("endpoint-a".into(), None);
        live.sets.insert("cluster-ips".into(), None);
        live.chains.remove("services");
        let p = plan(&t, &live);
        assert_eq!(p.same, HashSet::from(["service-a".to_string()]));
        assert!(p.sets.contains_key("service-ips") && !p.sets.contains_key("cluster-ips"));
        // A foreign rule appended to a chain: not equal.
        let mut live = held(&t);
        let mut extra = String::from("add rule ip kube-proxy service-a numgen random mod 1 vmap { 0 : goto endpoint-a }\n");
        extra.push_str("add rule ip kube-proxy service-a drop\n");
        live.chains.insert("service-a".into(), canon::chain_of_text(&extra));
        assert!(!plan(&t, &live).same.contains("service-a"));
    }
}

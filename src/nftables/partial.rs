//! A partial sync, as kube-proxy's nftables proxier does one between full syncs: from the
//! changed services' objects before and after the change alone, one transaction that
//! deletes the map and set elements that went (or changed), rewrites the changed services'
//! chains (add, flush, add their rules), adds their new affinity sets and the elements that
//! came; chains and sets that went are flushed in it, and deleted by [`Partial::delete`]
//! (which the proxier appends to the same transaction, or sends after it on a kernel that
//! refuses that). Nothing else of the table is touched or read. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::model::{self, Element, Key, NftFamily, Objects, Script};
use crate::net::IpFamily;

/// What a partial sync sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial<'a> {
    /// The transaction (empty: nothing changed).
    pub text: Script<'a>,
    /// Chains and sets that went (`chain NAME`, `set NAME`): flushed in `text`, deleted after.
    pub stale: Vec<String>,
    /// The commands that delete them (empty when none went).
    pub delete: String,
}

/// The elements by (set, key).
type Elements<'a> = BTreeMap<(&'a str, &'a Key), &'a Element>;

fn elements<'a>(objects: &[&'a Objects]) -> Elements<'a> {
    objects.iter().flat_map(|o| &o.elements).map(|e| ((e.set.as_str(), &e.key), e)).collect()
}

/// The transaction that takes the kernel from the `before` objects of the changed services
/// to their `after` objects.
pub fn partial<'a>(family: IpFamily, table: &str, before: &[&'a Objects], after: &[&'a Objects]) -> Partial<'a> {
    let head = format!("{} {table}", family.nft_word());
    let mut text = Script::new(family, table);
    let (old, new) = (elements(before), elements(after));
    for (k, e) in &old {
        if new.get(k) != Some(e) {
            text.delete_element(k.0, k.1.clone());
        }
    }
    let new_chains: BTreeSet<&str> = after.iter().flat_map(|o| &o.chains).map(|c| c.name.as_str()).collect();
    let new_sets: BTreeSet<&str> = after.iter().flat_map(|o| &o.sets).map(|s| s.name.as_str()).collect();
    let mut declared = Objects::default();
    for o in after {
        declared.chains.extend(o.chains.iter().cloned());
        declared.sets.extend(o.sets.iter().cloned());
    }
    let table_value = model::Table { family, name: super::names::TABLE, comment: super::names::TABLE_COMMENT, objects: declared };
    // The changed services' chains and sets, flushed and refilled (the table line dropped:
    // it exists, a partial sync runs only while the kernel is known to hold the table).
    let body = model::write(&table_value, model::Form::Transaction);
    for l in body.lines().skip(1) {
        let _ = writeln!(text, "{l}");
    }
    for r in after.iter().flat_map(|o| &o.rules) {
        text.rule(r);
    }
    let mut stale = Vec::new();
    let mut delete = String::new();
    for c in before.iter().flat_map(|o| &o.chains).filter(|c| !new_chains.contains(c.name.as_str())) {
        let _ = writeln!(text, "flush chain {head} {}", c.name);
        let _ = writeln!(delete, "delete chain {head} {}", c.name);
        stale.push(format!("chain {}", c.name));
    }
    for s in before.iter().flat_map(|o| &o.sets).filter(|s| !new_sets.contains(s.name.as_str())) {
        let _ = writeln!(delete, "delete set {head} {}", s.name);
        stale.push(format!("set {}", s.name));
    }
    for (k, &e) in &new {
        if old.get(k) != Some(&e) {
            text.element(e);
        }
    }
    Partial { text, stale, delete }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::fake::FakeNft;
    use crate::nftables::model::{Chain, Rule, Table};

    fn service(name: &str, endpoints: &[&str]) -> Objects {
        let mut o = Objects::default();
        let chain = format!("service-{name}");
        o.chain(Chain::regular(&chain));
        o.elements.push(Element::parsed("cluster-ips", &format!("10.0.0.{}", name.len())));
        o.elements.push(Element::parsed("service-ips", &format!("10.0.0.{} . tcp . 80 comment \"{name}\" : goto {chain}", name.len())));
        for e in endpoints {
            let ep = format!("endpoint-{name}-{e}");
            o.chain(Chain::regular(&ep));
            o.rule(Rule::new(&chain, format!("jump {ep}")));
            o.rule(Rule::new(&ep, format!("dnat to {e}:80")));
        }
        o
    }

    fn full(services: &[&Objects]) -> String {
        let mut objects = Objects::default();
        objects.chain(Chain::regular("services"));
        objects.sets.push(model::Set::plain("cluster-ips", "ipv4_addr", None));
        objects.sets.push(model::Set::map("service-ips", "ipv4_addr . inet_proto . inet_service : verdict", None));
        objects.rule(Rule::new("services", "ip daddr . meta l4proto . th dport vmap @service-ips"));
        for s in services {
            objects.extend(s);
        }
        model::write(&Table { family: IpFamily::V4, name: "kube-proxy", comment: "c", objects }, model::Form::Transaction)
    }

    #[test]
    fn a_partial_sync_ends_where_a_full_one_would_and_touches_only_the_change() {
        let (a, b1) = (service("a", &["10.1.0.1"]), service("bb", &["10.1.0.2", "10.1.0.3"]));
        let b2 = service("bb", &["10.1.0.3", "10.1.0.4"]);
        let mut nft = FakeNft::new();
        nft.run(&full(&[&a, &b1])).unwrap();
        let p = partial(IpFamily::V4, "kube-proxy", &[&b1], &[&b2]);
        assert!(!p.text.contains("service-a") && !p.text.contains("add table"), "{}", p.text);
        assert_eq!(p.stale, ["chain endpoint-bb-10.1.0.2"]);
        nft.run(&p.text).unwrap();
        nft.run(&p.delete).unwrap();
        let mut want = FakeNft::new();
        want.run(&full(&[&a, &b2])).unwrap();
        let listed = |n: &FakeNft| crate::nftables::listing::Listing::parse(&n.listing(IpFamily::V4).unwrap());
        assert_eq!(crate::nftables::listing::diff(&listed(&nft), &listed(&want)).text("ip"), "");

        // A service that goes: its elements are deleted, its chains flushed then deleted.
        let p = partial(IpFamily::V4, "kube-proxy", &[&b2], &[]);
        assert!(p.text.starts_with("delete element ip kube-proxy cluster-ips { 10.0.0.2 }\n"), "{}", p.text);
        nft.run(&p.text).unwrap();
        nft.run(&p.delete).unwrap();
        let mut want = FakeNft::new();
        want.run(&full(&[&a])).unwrap();
        assert_eq!(crate::nftables::listing::diff(&listed(&nft), &listed(&want)).text("ip"), "");
        assert_eq!(partial(IpFamily::V4, "kube-proxy", &[&a], &[&a]).stale.len(), 0);
    }
}

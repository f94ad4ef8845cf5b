//! A full sync's transaction, in the order that costs the kernel least; the table it leaves
//! is the one [`model::write`]'s kube-proxy-shaped transaction leaves (`nft list table`
//! prints the same text: chains and sets are created in the same order, each chain's rules
//! are added in the same order; only rule handles and anonymous set numbers differ).
//!
//! Why: the kernel (6.18 measured) walks the transaction's whole list of changes every time
//! a rule binds an anonymous set (`numgen random mod N vmap { … }` in every service chain,
//! `__nft_set_trans_bind`), so one kube-proxy-shaped transaction costs (anonymous sets) ×
//! (changes before each): at 10,000 services × 10 endpoints, 13,000 sets × ~300,000
//! changes, minutes of kernel time. Two things shorten the list a bind walks:
//! - **declarations first, in a transaction of their own** ([`Staged::declare`]): the
//!   table, every chain, set and map (`add` changes nothing of an object already there, so
//!   on a live table it only adds what is new, empty and unreferenced: nothing a packet
//!   reaches); the ~140,000 chain creations are then not in the second transaction's list;
//! - **in the second transaction ([`Staged::fill`]) the chains with anonymous sets first**,
//!   each chain flushed and refilled together, then the other chains, then the sets' and
//!   maps' flushes and their elements (which bind no anonymous set).
//!
//! The second transaction alone switches the rules: it is still atomic, and a refused one
//! leaves the previous rules serving (beside, at most, new empty chains and sets from the
//! first, which the next full sync uses or deletes as stale).

use super::model::{self, Script, Table};

/// A full sync's two transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged<'t> {
    /// The table, chains, sets and maps, declared.
    pub declare: String,
    /// Every chain flushed and refilled, every non-dynamic set and map flushed and refilled.
    pub fill: Script<'t>,
}

/// `table`'s full sync as two transactions (see the module documentation).
pub fn write(table: &Table) -> Staged<'_> {
    let mut declare = String::new();
    let head = model::declare(&mut declare, table);
    let o = &table.objects;
    // The rules of each chain, in the order the table declares them.
    let index: std::collections::HashMap<&str, usize> = o.chains.iter().enumerate().map(|(i, c)| (c.name.as_str(), i)).collect();
    let mut by_chain: Vec<Vec<&model::Rule>> = vec![Vec::new(); o.chains.len()];
    let mut orphans = Vec::new();
    for r in &o.rules {
        match index.get(r.chain.as_str()) {
            Some(&i) => by_chain[i].push(r),
            None => orphans.push(r),
        }
    }
    let anonymous: Vec<bool> = by_chain.iter().map(|rules| rules.iter().any(|r| r.stmts.binds_anonymous_set())).collect();
    let order = (0..o.chains.len()).filter(|&i| anonymous[i]).chain((0..o.chains.len()).filter(|&i| !anonymous[i]));
    let mut fill = Script::new(table.family, table.name);
    fill.text_mut().reserve(declare.len() * 3);
    for i in order {
        fill.push_str(&format!("flush chain {head} {}\n", o.chains[i].name));
        for r in &by_chain[i] {
            fill.rule(r);
        }
    }
    // A rule for a chain the table does not declare: nft refuses it, as in one transaction.
    for r in orphans {
        fill.rule(r);
    }
    model::flush_sets(&mut fill, &head, &o.sets);
    for e in &o.elements {
        model::element_line(&mut fill, &head, e);
    }
    Staged { declare, fill }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::apply::Nft as _;
    use crate::nftables::fake::FakeNft;
    use crate::nftables::model::{Chain, Family, Form, Objects, Rule, Set};

    fn table() -> Table {
        let mut o = Objects::default();
        o.chain(Chain::regular("services"));
        o.chain(Chain::regular("endpoint-a"));
        o.chain(Chain::regular("endpoint-b"));
        o.chain(Chain::regular("service-x"));
        o.sets.push(Set::map("service-ips", "ipv4_addr . inet_proto . inet_service : verdict", None));
        o.sets.push(Set { flags: vec!["dynamic", "timeout"], timeout: Some(10800), ..Set::plain("affinity-a", "ipv4_addr", None) });
        o.rule(Rule::new("services", "ip daddr . meta l4proto . th dport vmap @service-ips"));
        o.rule(Rule::new("endpoint-a", "dnat to 10.1.0.1:80"));
        o.rule(Rule::new("endpoint-b", "dnat to 10.1.0.2:80"));
        o.rule(Rule::new("service-x", "ip saddr != 10.0.0.0/8 jump services"));
        o.rule(Rule::new("service-x", "numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }"));
        o.element("service-ips", vec!["10.0.0.1".into(), "tcp".into(), "80".into()], vec!["goto service-x".into()], None);
        Table { family: Family::Ip, name: "kube-proxy", comment: "c", objects: o }
    }

    #[test]
    fn the_staged_transactions_leave_the_table_one_transaction_leaves() {
        let t = table();
        let s = write(&t);
        assert!(s.declare.lines().all(|l| l.starts_with("add table") || l.starts_with("add chain") || l.starts_with("add set") || l.starts_with("add map")), "{}", s.declare);
        // The chain binding an anonymous set comes first, its flush right before its rules.
        assert!(s.fill.starts_with("flush chain ip kube-proxy service-x\nadd rule ip kube-proxy service-x ip saddr"), "{}", s.fill);
        assert!(s.fill.find("flush map ip kube-proxy service-ips").unwrap() < s.fill.find("add element").unwrap());
        assert!(!s.fill.contains("flush set ip kube-proxy affinity-a"), "{}", s.fill);

        let mut staged = FakeNft::new();
        staged.run(&s.declare).unwrap();
        staged.run(&s.fill).unwrap();
        let mut one = FakeNft::new();
        one.run(&model::write(&t, Form::Transaction)).unwrap();
        assert_eq!(staged.listing(Family::Ip), one.listing(Family::Ip));
        // Again on the live table: the same.
        staged.run(&s.declare).unwrap();
        staged.run(&s.fill).unwrap();
        assert_eq!(staged.listing(Family::Ip), one.listing(Family::Ip));
    }

    #[test]
    fn every_command_of_the_one_transaction_is_in_the_two() {
        let t = table();
        let s = write(&t);
        let mut one: Vec<&str> = Vec::new();
        let whole = model::write(&t, Form::Transaction);
        one.extend(whole.lines());
        let mut two: Vec<&str> = s.declare.lines().chain(s.fill.lines()).collect();
        one.sort_unstable();
        two.sort_unstable();
        assert_eq!(one, two);
    }
}

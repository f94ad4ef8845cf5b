//! A cold start (the kernel holds no chain of the table) in two steps: first an interim
//! table that serves every Service and binds no per-service anonymous map, then kube-proxy's
//! table, a few chains per atomic batch. Pure: the tables and the conversion's batches.
//!
//! Why: the kernel (6.18) keeps a table's sets in a list and walks it whole for each new
//! set (its name looked up, then checked unique) and for each rule that binds one (the
//! lookup by name), so kube-proxy's table, one anonymous map per service port, costs
//! O(sets²) to create. A service port with one endpoint needs no map to choose: its
//! `numgen random mod 1` map selects that endpoint always, so the interim rule DNATs (or
//! jumps) to it directly; the table serves as kube-proxy's would, in linear time. The
//! conversion then replaces each interim chain's rules by kube-proxy's (flush and refill,
//! one transaction per batch of chains): every step serves every Service, and the end is
//! kube-proxy's table. Service ports with two or more endpoints keep their maps from the
//! start.

use std::collections::{HashMap, HashSet};

use super::model::{Rule, Script, Table};
use super::stmt::{Action, Body, Dnat, Stmt, Vmap};

/// Fewer one-endpoint maps than this: the table is filled as it is (the kernel's walks
/// cost little below it, and a small table converges in one step).
pub const INTERIM_MIN: usize = 2_000;

/// A conversion batch's bound: each rule binding a new set walks the batch's list of
/// changes once in the kernel, so short batches keep that part linear.
pub const CONVERSION_LINES: usize = 2_000;

/// The interim table and the chains whose rules it replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interim {
    pub table: Table,
    pub chains: Vec<String>,
}

/// `table` with each one-arm numgen map replaced by the verdict or DNAT it selects, when
/// at least `min` rules bind one; `None` otherwise.
pub fn interim(table: &Table, min: usize) -> Option<Interim> {
    let mut rewritten: Vec<Option<Rule>> = Vec::with_capacity(table.objects.rules.len());
    let mut count = 0;
    for r in &table.objects.rules {
        let direct = direct(&r.stmts).map(|b| Rule::of(r.chain.clone(), b));
        count += usize::from(direct.is_some());
        rewritten.push(direct);
    }
    if count < min || count == 0 {
        return None;
    }
    let mut out = table.clone();
    let mut chains: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for (rule, direct) in out.objects.rules.iter_mut().zip(rewritten) {
        if let Some(d) = direct {
            if seen.insert(rule.chain.clone()) {
                chains.push(rule.chain.clone());
            }
            *rule = d;
        }
    }
    Some(Interim { table: out, chains })
}

/// The conversion's batches: each of `chains` flushed and filled with `table`'s rules for
/// it, whole chains per batch, a batch cut at `max_lines` (a longer chain goes alone).
pub fn conversion(table: &Table, chains: &[String], max_lines: usize) -> Vec<String> {
    let mut batches = Vec::new();
    let mut at = 0;
    while at < chains.len() {
        let (batch, taken) = next_batch(table, &chains[at..], max_lines);
        at += taken;
        if !batch.is_empty() {
            batches.push(batch.into_text());
        }
    }
    batches
}

/// The first conversion batch of `chains` and how many of them it took (at least one).
/// A chain `table` no longer declares (its service went since) is taken and skipped.
pub fn next_batch<'t>(table: &'t Table, chains: &[String], max_lines: usize) -> (Script<'t>, usize) {
    let head = format!("{} {}", table.family.as_str(), table.name);
    let declared: HashSet<&str> = table.objects.chains.iter().map(|c| c.name.as_str()).collect();
    let mut rules: HashMap<&str, Vec<&Rule>> = HashMap::new();
    let (mut batch, mut lines, mut taken, mut indexed) = (Script::new(table.family, table.name), 0, 0, false);
    for c in chains {
        if !declared.contains(c.as_str()) {
            taken += 1;
            continue;
        }
        if !indexed {
            indexed = true;
            // Indexed once, for the chains a batch can hold.
            let want: HashSet<&str> = chains.iter().map(String::as_str).take(max_lines.max(1)).collect();
            for r in table.objects.rules.iter().filter(|r| want.contains(r.chain.as_str())) {
                rules.entry(r.chain.as_str()).or_default().push(r);
            }
        }
        let of = rules.get(c.as_str()).map_or(&[][..], Vec::as_slice);
        if lines > 0 && lines + of.len() + 1 > max_lines {
            break;
        }
        batch.push_str(&format!("flush chain {head} {c}\n"));
        for r in of {
            batch.rule(r);
        }
        lines += of.len() + 1;
        taken += 1;
    }
    (batch, taken)
}

/// The rule without its one-arm numgen map (`None`: it binds no such map).
fn direct(b: &Body) -> Option<Body> {
    let mut out = b.clone();
    let mut changed = false;
    for s in &mut out.stmts {
        let one = match s {
            Stmt::Vmap(Vmap::Numgen { modulus: 1, arms }) => match arms.as_slice() {
                [(0, verdict)] => Some(Stmt::Verdict(verdict.clone())),
                _ => None,
            },
            Stmt::Action(Action::Dnat(Dnat::Numgen { modulus: 1, arms, .. })) => match arms.as_slice() {
                [(0, addr, port)] => Some(Stmt::Action(Action::Dnat(Dnat::To { addr: *addr, port: *port }))),
                _ => None,
            },
            _ => None,
        };
        if let Some(one) = one {
            *s = one;
            changed = true;
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::{Chain, Family, Objects};

    fn table(rules: &[(&str, &str)]) -> Table {
        let mut o = Objects::default();
        for (c, _) in rules {
            if !o.chains.iter().any(|x| x.name == *c) {
                o.chain(Chain::regular(*c));
            }
        }
        for (c, r) in rules {
            o.rule(Rule::new(*c, *r));
        }
        Table { family: Family::Ip, name: "kube-proxy", comment: "", objects: o }
    }

    #[test]
    fn one_endpoint_maps_become_the_dnat_or_verdict_they_select() {
        let t = table(&[
            ("service-A", "ip daddr 10.0.0.1 jump mark-for-masquerade"),
            ("service-A", "meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.1.0.1 . 80 }"),
            ("service-B", "numgen random mod 1 vmap { 0 : goto endpoint-X }"),
            ("service-C", "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 80 }"),
        ]);
        assert_eq!(interim(&t, 3), None, "fewer than the bound");
        let i = interim(&t, 2).unwrap();
        let rules: Vec<&str> = i.table.objects.rules.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(
            rules,
            [
                "ip daddr 10.0.0.1 jump mark-for-masquerade",
                "meta l4proto tcp dnat to 10.1.0.1:80",
                "goto endpoint-X",
                "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 80 }",
            ]
        );
        assert_eq!(i.chains, ["service-A", "service-B"]);
        assert_eq!(i.table.objects.chains, t.objects.chains);
    }

    #[test]
    fn ipv6_dnat_is_bracketed() {
        let mut t = table(&[("service-A", "meta l4proto udp dnat ip6 addr . port to numgen random mod 1 map { 0 : fd00::1 . 53 }")]);
        t.family = Family::Ip6;
        assert_eq!(interim(&t, 1).unwrap().table.objects.rules[0].rule, "meta l4proto udp dnat to [fd00::1]:53");
    }

    #[test]
    fn the_conversion_refills_whole_chains_with_the_final_rules_in_bounded_batches() {
        let t = table(&[
            ("service-A", "ip daddr 10.0.0.1 jump mark-for-masquerade"),
            ("service-A", "numgen random mod 1 vmap { 0 : goto endpoint-X }"),
            ("service-B", "numgen random mod 1 vmap { 0 : goto endpoint-Y }"),
            ("other", "jump service-A"),
        ]);
        let chains = vec!["service-A".to_string(), "service-B".to_string()];
        let b = conversion(&t, &chains, 3);
        assert_eq!(
            b,
            [
                "flush chain ip kube-proxy service-A\nadd rule ip kube-proxy service-A ip daddr 10.0.0.1 jump mark-for-masquerade\nadd rule ip kube-proxy service-A numgen random mod 1 vmap { 0 : goto endpoint-X }\n",
                "flush chain ip kube-proxy service-B\nadd rule ip kube-proxy service-B numgen random mod 1 vmap { 0 : goto endpoint-Y }\n",
            ]
        );
        assert_eq!(conversion(&t, &chains, 100).len(), 1);
        // A chain whose service went since is skipped.
        let gone = vec!["service-Z".to_string(), "service-B".to_string()];
        let (batch, taken) = next_batch(&t, &gone, 100);
        assert_eq!((batch.text(), taken), (b[1].as_str(), 2));
        let (batch, taken) = next_batch(&t, &gone[..1], 100);
        assert_eq!((batch.text(), taken), ("", 1));
    }
}

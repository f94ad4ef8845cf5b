//! Partial syncs proportional to the change. Pure.
//!
//! In watch mode, once a sync has brought the kernel to a ruleset (a full sync compares
//! with `iptables-save`; see [`super::sync`]), the next change needs neither a kernel read
//! nor a full render: the kernel holds the previous ruleset, so the restore input follows
//! from the changed service ports alone. Their own chains are rewritten when they differ,
//! created or deleted; their lines in the top-level chains (`KUBE-SERVICES`,
//! `KUBE-NODEPORTS`, …) are edited in place with `-D N`/`-I N`. A service port's lines in
//! a top-level chain sit right after those of the service ports before it (see
//! [`TOP_CHAINS`]), so a position is a sum of per-service counts kept at render time, and
//! the kernel ends with exactly the rules and order of a full restore.
//!
//! Anything this cannot express (the large-cluster mode flipped, a rule outside the known
//! top-level chains) returns `None`, and the caller syncs fully instead.

use std::collections::{BTreeMap, BTreeSet};

use crate::xtables::delta::{diff_positions, ChainChange, Delta, TablePlan, TABLES};
use super::render::{Rendered, Ruleset, ServiceRules, TopCounts, TOP_CHAINS};
use crate::model::{port_entries, ports_of, NamespacedName, ServicePortName};
use crate::xtables::{Chain, Rule};

/// The rules the kernel holds for the service ports a commit touches, taken from the
/// ruleset before it is updated.
#[derive(Debug, Clone)]
pub struct Before {
    large_cluster: bool,
    changed: BTreeSet<NamespacedName>,
    rules: BTreeMap<ServicePortName, Rendered>,
}

impl Before {
    /// Keeps the rules of `changed` services' ports (cheap: shared pointers).
    pub fn take(rs: &Ruleset, changed: &BTreeSet<NamespacedName>) -> Before {
        let rules = changed
            .iter()
            .flat_map(|id| port_entries(&rs.services, id))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        Before { large_cluster: rs.large_cluster, changed: changed.clone(), rules }
    }
}

/// A partial sync's restore input.
#[derive(Debug, Clone, Default)]
pub struct Partial {
    pub delta: Delta,
}

/// The change from `before` (what the kernel holds) to `rs` (updated for the same
/// changed services), or `None` when only a full sync can express it.
pub fn delta(before: &Before, rs: &Ruleset) -> Option<Partial> {
    if before.large_cluster != rs.large_cluster {
        return None;
    }
    let keys: BTreeSet<&ServicePortName> = before
        .rules
        .keys()
        .chain(before.changed.iter().flat_map(|id| ports_of(&rs.services, id)))
        .collect();
    let offsets = offsets(rs, &keys)?;
    let mut writers: BTreeMap<&str, TablePlan> = TABLES.iter().map(|t| (*t, TablePlan::default())).collect();
    let mut changes = Vec::new();
    for (key, offset) in keys.iter().zip(&offsets) {
        let old = before.rules.get(*key).map(|r| r.rules.as_ref());
        let new = rs.services.get(*key).map(|r| r.rules.as_ref());
        if old == new {
            continue;
        }
        own_chains(old, new, writers.get_mut("nat")?, &mut changes);
        for (i, &(table, chain)) in TOP_CHAINS.iter().enumerate() {
            let old_lines = top_lines(old, table, chain);
            let new_lines = top_lines(new, table, chain);
            if old_lines == new_lines {
                continue;
            }
            let (deletes, inserts) = diff_positions(&old_lines, &new_lines);
            writers.get_mut(table)?.edit(chain, offset[i] as usize, &deletes, &inserts, |j| new_lines[j].to_line());
            changes.push(change(table, &Chain::from(chain), Some(&old_lines), Some(&new_lines)));
        }
    }
    let tables = writers.into_iter().filter(|(_, w)| !w.is_empty()).map(|(t, w)| (t.to_string(), w)).collect();
    let delta = Delta { changes, tables };
    Some(Partial { delta })
}

/// For each key (ascending), the number of lines the service ports before it hold in each
/// top-level chain of `rs`: where the key's own lines start. One pass over the ruleset,
/// adding counts kept at render time.
fn offsets(rs: &Ruleset, keys: &BTreeSet<&ServicePortName>) -> Option<Vec<TopCounts>> {
    let mut out = Vec::with_capacity(keys.len());
    let mut sum = TopCounts::default();
    let mut from: Option<&ServicePortName> = None;
    for &key in keys {
        // A range walks the tree without comparing every key it passes.
        let span = match from {
            None => rs.services.range::<ServicePortName, _>(..key),
            Some(f) => rs.services.range::<ServicePortName, _>(f..key),
        };
        for r in span.map(|(_, r)| r) {
            for (s, c) in sum.iter_mut().zip(r.top_counts?) {
                *s += c;
            }
        }
        from = Some(key);
        out.push(sum);
    }
    Some(out)
}

/// One service port's rules in one top-level chain.
fn top_lines<'a>(r: Option<&'a ServiceRules>, table: &str, chain: &str) -> Vec<&'a Rule> {
    let Some(r) = r else { return Vec::new() };
    let rules = if table == "filter" { &r.filter } else { &r.nat_top };
    rules.iter().filter(|l| l.chain == chain).collect()
}

/// The rules of each of a service port's own chains, in declaration order.
fn chain_rules(r: Option<&ServiceRules>) -> BTreeMap<Chain, Vec<&Rule>> {
    let Some(r) = r else { return BTreeMap::new() };
    let mut out: BTreeMap<Chain, Vec<&Rule>> = r.chains.iter().map(|c| (c.clone(), Vec::new())).collect();
    for rule in &r.chain_rules {
        if let Some(rules) = out.get_mut(rule.chain.as_str()) {
            rules.push(rule);
        }
    }
    out
}

/// Rewrites the service port's chains that are new or differ; deletes those it no longer has.
fn own_chains(old: Option<&ServiceRules>, new: Option<&ServiceRules>, w: &mut TablePlan, changes: &mut Vec<ChainChange>) {
    let before = chain_rules(old);
    let after = chain_rules(new);
    for c in new.map(|n| n.chains.as_slice()).unwrap_or_default() {
        let wanted = &after[c.as_str()];
        let had = before.get(c.as_str());
        if had != Some(wanted) {
            w.rewrite_rules(c, wanted, had.is_some(), true);
            changes.push(change("nat", c, had.map(Vec::as_slice), Some(wanted)));
        }
    }
    for (c, rules) in &before {
        if !after.contains_key(c) {
            w.delete(c);
            changes.push(change("nat", c, Some(rules), None));
        }
    }
}

fn change(table: &'static str, chain: &Chain, live: Option<&[&Rule]>, desired: Option<&[&Rule]>) -> ChainChange {
    let own = |l: &[&Rule]| l.iter().map(|r| r.to_line()).collect();
    ChainChange { table, chain: chain.clone(), live: live.map(own), desired: desired.map(own) }
}

#[cfg(test)]
mod tests;

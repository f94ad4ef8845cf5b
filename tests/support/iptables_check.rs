//! Checks over restore text, ported from kube-proxy's tests: jump consistency
//! (`checkIPTablesRuleJumps`) and the canonical ordering its tests compare through
//! (`sortIPTablesRules`), which svcproxy uses to compare its output with kube-proxy's
//! expected rulesets. Test support only: the node binary never runs them.

use std::collections::BTreeSet;

use svcproxy::xtables::names::*;
use svcproxy::xtables::dump::{Dump, Rule};
use svcproxy::xtables::quote;

/// Chains that built-in chains jump to (the jumps are not in the restore text).
const TOP_LEVEL: [&str; 7] =
    [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_FIREWALL];
const BUILTIN_TARGETS: [&str; 9] = ["ACCEPT", "DROP", "REJECT", "RETURN", "MARK", "DNAT", "SNAT", "MASQUERADE", "LOG"];

/// Every problem found: a jump to an undeclared or empty chain, a declared chain nobody
/// jumps to (top-level chains and chains being deleted excepted).
pub fn check_jumps(dump: &Dump) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, table) in &dump.tables {
        let declared: BTreeSet<&str> = table.chain_names();
        let deleted: BTreeSet<&str> = table.deleted.iter().map(String::as_str).collect();
        let filled: BTreeSet<&str> = table.rules.iter().map(|r| r.chain.as_str()).collect();
        let mut jumped: BTreeSet<&str> = BTreeSet::new();
        for r in &table.rules {
            if let Some(t) = jump_target(r) {
                if !BUILTIN_TARGETS.contains(&t) {
                    jumped.insert(t);
                }
            }
        }
        for c in &declared {
            if !jumped.contains(c) && !TOP_LEVEL.contains(c) && *c != KUBE_MARK_MASQ && !deleted.contains(c) {
                problems.push(format!("{name}: chain {c} is created but not used"));
            }
        }
        for c in &jumped {
            if !declared.contains(c) {
                problems.push(format!("{name}: a rule jumps to {c}, which is not created"));
            } else if !filled.contains(c) && !TOP_LEVEL.contains(c) {
                problems.push(format!("{name}: a rule jumps to {c}, which is empty"));
            }
        }
    }
    problems
}

fn jump_target(r: &Rule) -> Option<&str> {
    r.target.chain()
}

/// kube-proxy's test normalisation: tables by name; chains KUBE-NODEPORTS, KUBE-SERVICES,
/// then other KUBE-* and the rest alphabetically; rules grouped by chain, in order, except
/// KUBE-NODEPORTS/KUBE-SERVICES rules stable-sorted by the service named in their
/// comment, with the "must be the last rule" jump last; `-X` lines after the rules.
pub fn sort_like_kube_proxy_tests(dump: &Dump) -> String {
    let mut out = String::new();
    for (name, table) in &dump.tables {
        out.push_str(&format!("*{name}\n"));
        let mut chains: Vec<&str> = table.chain_names().into_iter().collect();
        chains.sort_by_key(|c| chain_rank(c));
        for c in &chains {
            out.push_str(&format!(":{c} - [0:0]\n"));
        }
        for c in &chains {
            let mut rules: Vec<&Rule> = table.rules_of(c).collect();
            if *c == KUBE_NODEPORTS || *c == KUBE_SERVICES {
                rules.sort_by_key(|r| rule_rank(r));
            }
            for r in rules {
                out.push_str(&format!("{} {}", r.op, r.chain));
                for a in r.args.iter().chain(r.target.words()) {
                    out.push(' ');
                    out.push_str(&quote(a));
                }
                out.push('\n');
            }
        }
        let mut deleted: Vec<&String> = table.deleted.iter().collect();
        deleted.sort_by_key(|c| chain_rank(c));
        for c in deleted {
            out.push_str(&format!("-X {c}\n"));
        }
        out.push_str("COMMIT\n");
    }
    out
}

fn chain_rank(c: &str) -> (u8, String) {
    match c {
        KUBE_NODEPORTS => (0, String::new()),
        KUBE_SERVICES => (1, String::new()),
        c if c.starts_with("KUBE-") => (2, c.to_string()),
        c => (3, c.to_string()),
    }
}

fn rule_rank(r: &Rule) -> (bool, String) {
    let comment = r.args.after("--comment").unwrap_or("");
    let last = comment.contains("must be the last rule");
    let service = comment.split([' ', ':']).next().unwrap_or("").to_string();
    (last, service)
}

//! A packet tracer over an iptables ruleset (restore input or `iptables-save` output):
//! where does a packet go, with what probability, is it masqueraded, dropped or rejected?
//!
//! It follows kube-proxy's test tracer (`tracePacket` in proxier_test.go): nat PREROUTING
//! (or OUTPUT for packets from the node) runs first; a DNAT changes the destination the
//! filter chains then see; the filter service chains run; KUBE-MARK-MASQ means the packet
//! will be masqueraded. Unlike kube-proxy's, it keeps the probability of each branch of
//! `-m statistic` rules and the chain path to each outcome, and can treat ClientIP
//! affinity as established (`-m recent --rcheck` matching a given endpoint).
//!
//! [`ipvs`] traces IPVS mode: the same rule walk (with ipset membership, [`Sets`]) through
//! the hooks in the kernel's order, and the IPVS virtual server between them.
//! [`nftables`] traces nftables mode: the `kube-proxy` table's base chains in hook order.
//! [`socketlb`] says when a local socket is translated by the socket-LB programs first.

pub mod conntrack;
pub mod ipset;
pub mod ipvs;
pub mod nftables;
#[cfg(test)]
mod nftables_v137_tests;
#[cfg(test)]
mod nftables_golden_tests;
#[cfg(test)]
mod ipvs_tests;
mod matcher;
pub mod socketlb;
pub mod verdict;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::IpAddr;

use serde::Serialize;

use crate::xtables::dump::Rule;
use crate::xtables::names::{KUBE_EXTERNAL_SERVICES, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES};
use crate::xtables::Target;
use crate::xtables::{Dump, Op};
pub use ipset::Sets;
pub use matcher::{Packet, State};
pub use verdict::Verdict;

/// Where the packet enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Entry {
    /// From a pod or from outside the node: nat PREROUTING.
    Prerouting,
    /// From a process on the node: nat OUTPUT.
    Output,
}

/// What finally happens on one branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// `ip:port` after DNAT, or `ACCEPT`/`DROP`/`REJECT`, or undecided (`` when printed).
    pub verdict: Verdict,
    pub probability: f64,
    pub masquerade: bool,
    /// The rules matched, in order, each as `TABLE -A CHAIN ARGS…`.
    pub path: Vec<String>,
    /// Rules taken as not matching because the tracer cannot evaluate one of their matches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    pub packet: Packet,
    pub entry: Entry,
    pub outcomes: Vec<Outcome>,
}

/// Tracer settings: the node's local addresses (for `addrtype LOCAL`) and the endpoints
/// that ClientIP affinity already pins this source to (`-m recent --rcheck` matches
/// `--name KUBE-SEP-…` chains listed here).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub local_ips: BTreeSet<IpAddr>,
    pub affinity: BTreeSet<String>,
}

/// What the rule walk reads: the rules, the node, the ipsets.
struct Cx<'a> {
    dump: &'a Dump,
    env: &'a Env,
    sets: &'a Sets,
}

/// One branch in progress.
#[derive(Debug, Clone)]
struct Branch {
    packet: Packet,
    state: State,
    probability: f64,
    masquerade: bool,
    path: Vec<String>,
    notes: Vec<String>,
}

impl Branch {
    fn new(packet: Packet) -> Self {
        Branch { packet, state: State::default(), probability: 1.0, masquerade: false, path: Vec::new(), notes: Vec::new() }
    }
}

#[derive(Clone, PartialEq)]
enum Flow {
    /// Fell off the end of the chain (RETURN semantics).
    Continue,
    /// A terminal verdict was reached.
    Done(Verdict),
}

impl Flow {
    /// DROP or REJECT: the packet goes no further.
    fn stopped(&self) -> Option<&Verdict> {
        match self {
            Flow::Done(v) if v.stops() => Some(v),
            _ => None,
        }
    }
}

const MAX_DEPTH: usize = 32;

pub fn trace(dump: &Dump, env: &Env, packet: Packet, entry: Entry) -> Trace {
    let sets = Sets::default();
    let cx = Cx { dump, env, sets: &sets };
    let start = Branch::new(packet.clone());
    let nat_chain = match entry {
        Entry::Prerouting => "PREROUTING",
        Entry::Output => "OUTPUT",
    };
    let mut outcomes = Vec::new();
    for (nat_branch, nat_flow) in run_entry(&cx, "nat", nat_chain, start) {
        if let Some(v) = nat_flow.stopped() {
            outcomes.push(finish(nat_branch, v.clone()));
            continue;
        }
        let nat_verdict = match nat_flow {
            Flow::Done(v) => v,
            Flow::Continue => Verdict::Undecided,
        };
        outcomes.extend(filter_phase(&cx, nat_branch, nat_verdict));
    }
    Trace { packet, entry, outcomes }
}

/// The filter service chains run on the (possibly DNATed) packet, as kube-proxy's tracer
/// runs them: KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-PROXY-FIREWALL.
fn filter_phase(cx: &Cx, branch: Branch, nat_verdict: Verdict) -> Vec<Outcome> {
    let mut current = vec![(branch, None::<Verdict>)];
    for chain in [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL] {
        let mut next = Vec::new();
        for (b, decided) in current {
            if decided.is_some() {
                next.push((b, decided));
                continue;
            }
            for (nb, flow) in run_chain(cx, "filter", chain, b, 0) {
                let d = match flow {
                    Flow::Done(v) if v != Verdict::Return => Some(v),
                    _ => None,
                };
                next.push((nb, d));
            }
        }
        current = next;
    }
    current
        .into_iter()
        .map(|(b, decided)| {
            // A filter DROP/REJECT wins over a DNAT; a filter ACCEPT only shows when
            // nothing in nat decided.
            let verdict = match decided {
                Some(v) if v.stops() => v,
                Some(v) if nat_verdict == Verdict::Undecided => v,
                _ => nat_verdict.clone(),
            };
            finish(b, verdict)
        })
        .collect()
}

fn finish(b: Branch, verdict: Verdict) -> Outcome {
    Outcome { verdict, probability: b.probability, masquerade: b.masquerade, path: b.path, notes: b.notes }
}

/// Runs a built-in chain. Restore input has no rules in built-in chains (svcproxy and
/// kube-proxy add their jumps separately), so then the entry is KUBE-SERVICES, which is
/// where those jumps lead.
fn run_entry(cx: &Cx, table: &str, chain: &str, b: Branch) -> Vec<(Branch, Flow)> {
    let has_builtin = cx.dump.tables.get(table).is_some_and(|t| t.rules_of(chain).next().is_some());
    let chain = if has_builtin { chain } else { KUBE_SERVICES };
    run_chain(cx, table, chain, b, 0)
}

/// Runs `chain`, returning every branch that leaves it with how it left.
fn run_chain(cx: &Cx, table: &str, chain: &str, b: Branch, depth: usize) -> Vec<(Branch, Flow)> {
    let Some(t) = cx.dump.tables.get(table) else { return vec![(b, Flow::Continue)] };
    if depth > MAX_DEPTH {
        return vec![(b, Flow::Done(Verdict::Loop))];
    }
    let rules = t.rules_of(chain).filter(|r| matches!(r.op, Op::Append | Op::Insert));
    let Ok(flows) = walk(rules, b, Flow::Continue, Flow::Continue, |rule, b| Ok::<_, Infallible>(apply_rule(cx, table, chain, rule, b, depth)));
    flows
}

/// A chain's `rules` run in order on a branch, in every mode's tracer: `rule` gives the
/// branches that leave one rule and how; those that go `on` meet the next rule, the others
/// leave the chain, and those that pass the last rule leave as `end`.
fn walk<R: Copy, B, F: PartialEq + Clone, E>(rules: impl IntoIterator<Item = R>, b: B, on: F, end: F, mut rule: impl FnMut(R, B) -> Result<Vec<(B, F)>, E>) -> Result<Vec<(B, F)>, E> {
    let mut live = vec![b];
    let mut out = Vec::new();
    for r in rules {
        let mut still = Vec::new();
        for b in live {
            for (nb, flow) in rule(r, b)? {
                if flow == on { still.push(nb) } else { out.push((nb, flow)) }
            }
        }
        live = still;
        if live.is_empty() {
            break;
        }
    }
    out.extend(live.into_iter().map(|b| (b, end.clone())));
    Ok(out)
}

fn rule_text(table: &str, chain: &str, rule: &Rule) -> String {
    let mut text = format!("{table} -A {chain}");
    for a in rule.args.iter().chain(rule.target.words()) {
        text.push(' ');
        text.push_str(&crate::xtables::quote(a));
    }
    text
}

/// Applies one rule to a branch: not matching, matching (maybe only with some
/// probability, which splits the branch), and what its target does.
fn apply_rule(cx: &Cx, table: &str, chain: &str, rule: &Rule, mut b: Branch, depth: usize) -> Vec<(Branch, Flow)> {
    let m = matcher::evaluate(rule, &b.packet, &b.state, cx.env, cx.sets);
    if let Some(why) = m.unknown {
        b.notes.push(format!("{why}; taken as not matching: {}", rule_text(table, chain, rule)));
    }
    if m.probability <= 0.0 {
        return vec![(b, Flow::Continue)];
    }
    let mut out = Vec::new();
    let mut hit = b.clone();
    if m.probability < 1.0 {
        let mut miss = b;
        miss.probability *= 1.0 - m.probability;
        out.push((miss, Flow::Continue));
        hit.probability *= m.probability;
    }
    hit.path.push(rule_text(table, chain, rule));
    out.extend(target(cx, table, rule, hit, depth));
    out
}

/// `-j MARK`: `--set-xmark V/M` (what iptables-save prints), `--or-mark`, `--xor-mark`;
/// and, kept as words, `--set-mark` and `--and-mark`.
fn mark(target: &Target, mark: u32) -> u32 {
    match target {
        Target::SetXmark(v) => matcher::value_mask(v).map_or(mark, |(v, m)| (mark & !m) ^ v),
        Target::OrMark(v) => matcher::parse_u32(v).map_or(mark, |v| mark | v),
        Target::XorMark(v) => matcher::parse_u32(v).map_or(mark, |v| mark ^ v),
        Target::Other(words) => {
            if let Some((v, m)) = words.after("--set-mark").and_then(matcher::value_mask) {
                return (mark & !m) | v;
            }
            words.after("--and-mark").and_then(matcher::parse_u32).map_or(mark, |v| mark & v)
        }
        _ => mark,
    }
}

fn target(cx: &Cx, table: &str, rule: &Rule, mut b: Branch, depth: usize) -> Vec<(Branch, Flow)> {
    let t = &rule.target;
    match t {
        Target::Continue => vec![(b, Flow::Continue)],
        Target::OrMark(_) | Target::XorMark(_) | Target::SetXmark(_) | Target::Other(_) if t.name() == Some("MARK") => {
            if matches!(t, Target::XorMark(_)) {
                b.masquerade = false;
            }
            b.state.mark = mark(t, b.state.mark);
            vec![(b, Flow::Continue)]
        }
        Target::Return => vec![(b, Flow::Done(Verdict::Return))],
        Target::Accept => vec![(b, Flow::Done(Verdict::Accept))],
        Target::Drop => vec![(b, Flow::Done(Verdict::Drop))],
        Target::Reject(_) => vec![(b, Flow::Done(Verdict::Reject))],
        Target::Masquerade { .. } => {
            b.masquerade = true;
            vec![(b, Flow::Done(Verdict::Masquerade))]
        }
        Target::Dnat(dest) => {
            let dest = dest.to_string();
            if let Some((ip, port)) = crate::net::split_host_port(&dest) {
                b.packet.dst = ip;
                b.packet.dport = port;
            }
            b.state.dnat = true;
            vec![(b, Flow::Done(Verdict::Dnat(dest)))]
        }
        // A jump, or a target the tracer does not model (followed as a chain of that name).
        _ => {
            let chain = t.name().unwrap_or_default();
            // KUBE-MARK-MASQ marks the packet for masquerading; its rule sets the mark.
            if chain == KUBE_MARK_MASQ {
                b.masquerade = true;
            }
            run_chain(cx, table, chain, b, depth + 1)
                .into_iter()
                .map(|(nb, flow)| match flow {
                    Flow::Done(Verdict::Return) => (nb, Flow::Continue),
                    other => (nb, other),
                })
                .collect()
        }
    }
}

impl Trace {
    /// kube-proxy's tracer summary: the distinct verdicts joined by `, ` (DNAT targets in
    /// first-seen order) and whether any branch is masqueraded.
    pub fn summary(&self) -> (String, bool) {
        summary(self.outcomes.iter().map(|o| (&o.verdict, o.masquerade)))
    }
}

/// kube-proxy's tracer summary of branches given as (verdict, masqueraded): the distinct
/// decided verdicts joined by `, ` in first-seen order, and whether any is masqueraded.
/// Every mode's tracer summarises with it.
pub fn summary<'a>(branches: impl IntoIterator<Item = (&'a Verdict, bool)>) -> (String, bool) {
    let mut seen: Vec<&Verdict> = Vec::new();
    let mut masquerade = false;
    for (verdict, masq) in branches {
        masquerade |= masq;
        if *verdict != Verdict::Undecided && !seen.contains(&verdict) {
            seen.push(verdict);
        }
    }
    (seen.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "), masquerade)
}

//! A cold start (the kernel holds no chain of the table) in two steps: first an interim
//! table that serves every Service and binds no per-service anonymous map, then kube-proxy's
//! table, a few chains per atomic batch. Pure: the tables and the conversion's batches.
//!
//! Why: the kernel (6.18) keeps a table's sets in a list and walks it whole for each new
//! set (its name looked up, then checked unique) and for each rule that binds one (the
//! lookup by name), so kube-proxy's table, one anonymous map per service port, costs
//! O(sets²) to create. The interim chooses an endpoint without a map: a rule whose
//! `numgen random mod N` map (verdict or DNAT) has arms 0..N-1 becomes N rules, arm i
//! (in key order) behind `numgen random mod (N-i) == 0` and the last arm alone, as
//! kube-proxy's iptables mode chains `statistic` rules. The kernel draws a fresh number
//! for each rule a packet reaches, so each arm takes 1/N of the packets, as the map gives
//! them; a one-arm map becomes the DNAT or verdict it selects. The rule's tests stay before
//! the comparison (only a rule with nothing but tests before its map is rewritten: a
//! statement that acts would act once per rule tried) and its comment on each copy; rules
//! before it (session affinity's) and after it keep their place. The table serves as
//! kube-proxy's would, created without a walk per map (its named sets, the affinity sets
//! among them, are still created and looked up by name). The conversion then replaces each interim
//! chain's rules by kube-proxy's (flush and refill, one transaction per batch of chains):
//! every step serves every Service, and the end is kube-proxy's table. A full sync over a
//! table the conversion left half done (a restart) keeps the chains still in the interim's
//! form ([`resumable`]) and converts them as a cold start would, instead of refilling them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::delta::{self, LiveTable};
use super::model::{NftFamily, Objects, Rule, Script, Table};
use crate::net::IpFamily;
use super::stmt::{Action, Body, Dnat, Match, Stmt, Vmap};

/// Fewer numgen maps than this: the table is filled as it is (the kernel's walks cost
/// little below it, and a small table converges in one step).
pub const INTERIM_MIN: usize = 2_000;

/// A conversion batch's bound: each rule binding a new set walks the batch's list of
/// changes once in the kernel, so short batches keep that part linear.
pub const CONVERSION_LINES: usize = 2_000;

/// What a watch-mode conversion batch aims to cost: it holds the loop, so a change that
/// arrives meanwhile waits for it. The kernel's cost per converted chain grows with the
/// table, so the bound is found by measuring, not fixed.
pub const CONVERSION_STEP: Duration = Duration::from_millis(500);

/// The fewest lines a conversion batch is bounded to (one service chain's rules fit).
pub const CONVERSION_MIN_LINES: usize = 16;

/// The next batch's line bound after a batch of `lines` cost `took`: halved while batches
/// run over [`CONVERSION_STEP`], doubled while they run under a quarter of it, within
/// [`CONVERSION_MIN_LINES`]..=[`CONVERSION_LINES`]. [`Pace`] passes the marginal cost.
pub fn next_bound(lines: usize, took: Duration) -> usize {
    let next = if took > CONVERSION_STEP {
        lines / 2
    } else if took < CONVERSION_STEP / 4 {
        lines.saturating_mul(2)
    } else {
        lines
    };
    next.clamp(CONVERSION_MIN_LINES, CONVERSION_LINES)
}

/// Recent transactions whose fastest is taken for the fixed cost of one ([`Pace`]).
pub const PACE_WINDOW: usize = 16;

/// One conversion transaction in this many is a probe ([`Pace`]): it carries no batch (in a
/// partial sync) or the smallest (alone), so the window always holds one that costs about
/// the fixed part alone.
pub const PROBE_EVERY: usize = 8;

/// The pacing of a watch's conversion batches on their marginal cost: every transaction
/// pays the kernel's validation of the whole table, whatever its size, so a bound paced on
/// the total time would shrink for a cost the batch does not cause. The fixed cost is the
/// fastest of the last [`PACE_WINDOW`] transactions (a probe among them); the bound follows
/// [`next_bound`] on each batch's time beyond it, from the smallest bound (a first batch's
/// cost is unknown, and a sync it rides in waits for it).
#[derive(Debug, Clone)]
pub struct Pace {
    lines: usize,
    recent: std::collections::VecDeque<Duration>,
    since_probe: usize,
}

impl Default for Pace {
    fn default() -> Self {
        Pace { lines: CONVERSION_MIN_LINES, recent: std::collections::VecDeque::with_capacity(PACE_WINDOW), since_probe: 0 }
    }
}

impl Pace {
    /// The next transaction's line bound and whether it is a probe: a probe carried in a
    /// partial sync (`carried`) holds no batch (bound 0), one alone the smallest batch.
    pub fn next(&self, carried: bool) -> (usize, bool) {
        if self.recent.is_empty() || self.since_probe + 1 >= PROBE_EVERY {
            (if carried { 0 } else { CONVERSION_MIN_LINES }, true)
        } else {
            (self.lines, false)
        }
    }

    /// A transaction [`Pace::next`] bounded (`probe` as it said) took `took`.
    pub fn record(&mut self, probe: bool, took: Duration) {
        if self.recent.len() == PACE_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(took);
        if probe {
            self.since_probe = 0;
        } else {
            self.since_probe += 1;
            self.lines = next_bound(self.lines, took.saturating_sub(self.fixed()));
        }
    }

    /// The fixed cost of a transaction: the fastest recent one.
    pub fn fixed(&self) -> Duration {
        self.recent.iter().copied().min().unwrap_or_default()
    }

    /// The bound of the next batch that is not a probe.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// The interim table and the chains whose rules it replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interim {
    pub table: Table,
    pub chains: Vec<String>,
}

/// `table` with each rule binding a numgen map replaced by rules that bind none (see the
/// module doc), when at least `min` rules bind one; `None` otherwise.
pub fn interim(table: &Table, min: usize) -> Option<Interim> {
    let chains = chains(table, min)?;
    let mut out = table.clone();
    let mut rules = Vec::with_capacity(out.objects.rules.len());
    for rule in std::mem::take(&mut out.objects.rules) {
        match unrolled(rule.stmts()) {
            Some(bodies) => rules.extend(bodies.into_iter().map(|b| Rule::of(rule.chain.clone(), b))),
            None => rules.push(rule),
        }
    }
    out.objects.rules = rules;
    Some(Interim { table: out, chains })
}

/// The chains whose rules the interim table rewrites, in the order of the rules, when at
/// least `min` rules (and one) bind a numgen map it rewrites; `None` otherwise. Nothing is
/// rewritten here: a full sync writes each rule's replacement ([`arms`]) as it sends the
/// batch that holds it, so the interim's rules never exist all at once.
pub fn chains(table: &Table, min: usize) -> Option<Vec<String>> {
    let mut chains: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut count = 0;
    for r in table.objects.rules.iter().filter(|r| unrollable(r.stmts()).is_some()) {
        count += 1;
        if seen.insert(r.chain.as_str()) {
            chains.push(r.chain.clone());
        }
    }
    (count >= min && count > 0).then_some(chains)
}

/// How many rules replace `r` in the interim table (`None`: it is kept as it is).
pub fn arms(r: &Rule) -> Option<usize> {
    unrollable(r.stmts()).map(|(_, n)| n as usize)
}

/// The rules that replace `r` in the interim table ([`arms`] of them; `None`: it is kept).
pub fn replacements(r: &Rule) -> Option<impl Iterator<Item = Rule> + '_> {
    Some(unrolled(r.stmts())?.into_iter().map(|b| Rule::of(r.chain.clone(), b)))
}

/// Of `differing` chains (those a full sync over the live table would refill), the ones
/// the kernel holds in the interim's form of `table` (a restart in the middle of a
/// conversion): a sync keeps them serving, and the conversion rewrites them next.
pub fn resumable(table: &Table, differing: &HashSet<&str>, live: &LiveTable) -> Vec<String> {
    let o = &table.objects;
    let objects = Objects {
        chains: o.chains.iter().filter(|c| differing.contains(c.name.as_str())).cloned().collect(),
        rules: o.rules.iter().filter(|r| differing.contains(r.chain.as_str())).cloned().collect(),
        ..Objects::default()
    };
    let Some(i) = interim(&Table { family: table.family, name: table.name, comment: table.comment, objects }, 1) else { return Vec::new() };
    let same = delta::plan(&i.table, live).same;
    i.chains.into_iter().filter(|c| same.contains(c)).collect()
}

/// The conversion's batches: each of `chains` flushed and filled with `table`'s rules for
/// it, whole chains per batch, a batch cut at `max_lines` (a longer chain goes alone).
pub fn conversion(table: &Table, chains: &[String], max_lines: usize) -> Vec<String> {
    let declared: HashSet<&str> = table.objects.chains.iter().map(|c| c.name.as_str()).collect();
    let mut rules: HashMap<&str, Vec<Rule>> = HashMap::new();
    for r in &table.objects.rules {
        rules.entry(r.chain.as_str()).or_default().push(r.clone());
    }
    let mut batches = Vec::new();
    let mut at = 0;
    while at < chains.len() {
        let (batch, taken) = next_batch(&chains[at..], max_lines, |c| declared.contains(c.as_str()).then(|| (c.as_str(), rules.get(c.as_str()).cloned().unwrap_or_default())));
        at += taken;
        if !batch.is_empty() {
            batches.push(script(table.family, table.name, &batch).into_text());
        }
    }
    batches
}

/// One conversion batch: chains, each with the rules it is refilled with.
pub type Batch<'c> = Vec<(&'c str, Vec<Rule>)>;

/// The first conversion batch of `chains` and how many of them it took (at least one):
/// whole chains with their rules as they are now (`rules_of`: the chain's name and rules),
/// cut at `max_lines` (a longer chain goes alone). A chain `rules_of` no longer knows
/// (`None`: its service went since) is taken and skipped. Only the chains taken are asked
/// for, so a batch costs what it holds, not what the table holds.
pub fn next_batch<'c, C>(chains: &'c [C], max_lines: usize, mut rules_of: impl FnMut(&'c C) -> Option<(&'c str, Vec<Rule>)>) -> (Batch<'c>, usize) {
    let (mut batch, mut lines, mut taken) = (Vec::new(), 0, 0);
    for c in chains {
        let Some((c, rules)) = rules_of(c) else {
            taken += 1;
            continue;
        };
        if lines > 0 && lines + rules.len() + 1 > max_lines {
            break;
        }
        lines += rules.len() + 1;
        taken += 1;
        batch.push((c, rules));
    }
    (batch, taken)
}

/// A batch's transaction: each chain flushed, then filled.
pub fn script<'r>(family: IpFamily, table: &str, batch: &'r [(&str, Vec<Rule>)]) -> Script<'r> {
    let mut out = Script::new(family, table);
    for (chain, rules) in batch {
        out.push_str(&format!("flush chain {} {table} {chain}\n", family.nft_word()));
        rules.iter().for_each(|r| out.rule(r));
    }
    out
}

/// Where `b` binds the numgen map the interim rewrites, and its arm count (`None`: it
/// binds none, or one kept, see [`unrolled`]). Copies nothing of the map.
fn unrollable(b: &Body) -> Option<(usize, u32)> {
    let at = b.stmts.iter().position(|s| matches!(s, Stmt::Vmap(Vmap::Numgen { .. }) | Stmt::Action(Action::Dnat(Dnat::Numgen { .. }))))?;
    let (before, after) = (&b.stmts[..at], &b.stmts[at + 1..]);
    // Tests only before the map: they hold or fail alike in every copy.
    if !before.iter().all(|s| matches!(s, Stmt::Match(_))) {
        return None;
    }
    // No other set bound (it would be bound once per copy).
    let rest = Body { stmts: before.iter().chain(after).cloned().collect(), comment: None };
    if rest.binds_anonymous_set() {
        return None;
    }
    let (modulus, mut keys): (u32, Vec<u32>) = match &b.stmts[at] {
        Stmt::Vmap(Vmap::Numgen { modulus, arms }) => (*modulus, arms.iter().map(|(k, _)| *k).collect()),
        Stmt::Action(Action::Dnat(Dnat::Numgen { modulus, arms, .. })) => (*modulus, arms.iter().map(|(k, _, _)| *k).collect()),
        _ => unreachable!("the position found a numgen map"),
    };
    // Every key below N, once (a missing key would let its share fall through the rule).
    keys.sort_unstable();
    if keys.is_empty() || !keys.iter().enumerate().all(|(i, k)| *k as usize == i) || keys.len() != modulus as usize {
        return None;
    }
    Some((at, modulus))
}

/// The rules that replace `b` (`None`: it binds no numgen map, or one kept): one per arm
/// of its numgen map, each but the last behind its random comparison.
fn unrolled(b: &Body) -> Option<Vec<Body>> {
    let (at, n) = unrollable(b)?;
    let (before, after) = (&b.stmts[..at], &b.stmts[at + 1..]);
    let mut arms: Vec<(u32, Stmt)> = match &b.stmts[at] {
        Stmt::Vmap(Vmap::Numgen { arms, .. }) => arms.iter().map(|(k, v)| (*k, Stmt::Verdict(v.clone()))).collect(),
        Stmt::Action(Action::Dnat(Dnat::Numgen { arms, .. })) => arms.iter().map(|&(k, addr, port)| (k, Stmt::Action(Action::Dnat(Dnat::To { addr, port })))).collect(),
        _ => unreachable!("the position found a numgen map"),
    };
    arms.sort_by_key(|(k, _)| *k);
    let bodies = arms
        .into_iter()
        .enumerate()
        .map(|(i, (_, arm))| {
            let left = n - i as u32;
            let draw = (left > 1).then_some(Stmt::Match(Match::Numgen { modulus: left, value: 0 }));
            let stmts = before.iter().cloned().chain(draw).chain(std::iter::once(arm)).chain(after.iter().cloned()).collect();
            Body { stmts, comment: b.comment.clone() }
        })
        .collect();
    Some(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::{Chain, Objects};

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
        Table { family: IpFamily::V4, name: "kube-proxy", comment: "", objects: o }
    }

    fn rules(t: &Table) -> Vec<String> {
        t.objects.rules.iter().map(|r| format!("{}: {}{}", r.chain, r.text(), r.comment().map(|c| format!(" comment \"{c}\"")).unwrap_or_default())).collect()
    }

    #[test]
    fn numgen_maps_of_any_arity_become_rules_without_a_set() {
        let t = table(&[
            ("service-A", "ip daddr 10.0.0.1 jump mark-for-masquerade"),
            ("service-A", "meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.1.0.1 . 80 }"),
            ("service-B", "numgen random mod 1 vmap { 0 : goto endpoint-X }"),
            ("service-C", "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 1 : 10.1.0.2 . 80 , 0 : 10.1.0.1 . 80 }"),
            ("other", "ip daddr { 10.0.0.0/8,192.168.0.0/16 } drop"),
        ]);
        assert_eq!(interim(&t, 4), None, "fewer than the bound");
        let i = interim(&t, 3).unwrap();
        assert_eq!(
            rules(&i.table),
            [
                "service-A: ip daddr 10.0.0.1 jump mark-for-masquerade",
                "service-A: meta l4proto tcp dnat to 10.1.0.1:80",
                "service-B: goto endpoint-X",
                // Key order, whatever the map's order.
                "service-C: meta l4proto tcp numgen random mod 2 == 0 dnat to 10.1.0.1:80",
                "service-C: meta l4proto tcp dnat to 10.1.0.2:80",
                "other: ip daddr { 10.0.0.0/8,192.168.0.0/16 } drop",
            ]
        );
        assert_eq!(i.chains, ["service-A", "service-B", "service-C"]);
        assert_eq!(i.table.objects.chains, t.objects.chains);
        assert!(!i.table.objects.rules.iter().any(|r| matches!(r.stmts().stmts.last(), Some(Stmt::Vmap(_)))), "no map left");
    }

    #[test]
    fn an_endpoint_chain_map_becomes_a_chain_of_draws_after_the_affinity_rules() {
        // Each arm's share: 1/4; then 3/4 * 1/3; then 3/4 * 2/3 * 1/2; then the rest.
        let mut t = table(&[
            ("service-A", "ip saddr @affinity-a goto endpoint-a"),
            ("service-A", "ip saddr @affinity-b goto endpoint-b"),
            ("service-A", "numgen random mod 4 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b , 2 : goto endpoint-c , 3 : goto endpoint-d }"),
            ("service-A", "reject"),
        ]);
        t.objects.rules[2] = Rule::commented("service-A", t.objects.rules[2].text(), "ns/a:p");
        let i = interim(&t, 1).unwrap();
        assert_eq!(
            rules(&i.table),
            [
                "service-A: ip saddr @affinity-a goto endpoint-a",
                "service-A: ip saddr @affinity-b goto endpoint-b",
                "service-A: numgen random mod 4 == 0 goto endpoint-a comment \"ns/a:p\"",
                "service-A: numgen random mod 3 == 0 goto endpoint-b comment \"ns/a:p\"",
                "service-A: numgen random mod 2 == 0 goto endpoint-c comment \"ns/a:p\"",
                "service-A: goto endpoint-d comment \"ns/a:p\"",
                "service-A: reject",
            ]
        );
        assert_eq!(i.chains, ["service-A"]);
        assert!(i.table.objects.rules.iter().all(|r| !r.stmts().binds_anonymous_set()));
    }

    #[test]
    fn ipv6_dnat_is_bracketed() {
        let mut t = table(&[("service-A", "meta l4proto udp dnat ip6 addr . port to numgen random mod 1 map { 0 : fd00::1 . 53 }")]);
        t.family = IpFamily::V6;
        assert_eq!(interim(&t, 1).unwrap().table.objects.rules[0].text(), "meta l4proto udp dnat to [fd00::1]:53");
        let mut t = table(&[("service-A", "meta l4proto udp dnat ip6 addr . port to numgen random mod 2 map { 0 : fd00::1 . 53 , 1 : fd00::2 . 53 }")]);
        t.family = IpFamily::V6;
        assert_eq!(
            rules(&interim(&t, 1).unwrap().table),
            ["service-A: meta l4proto udp numgen random mod 2 == 0 dnat to [fd00::1]:53", "service-A: meta l4proto udp dnat to [fd00::2]:53"]
        );
    }

    #[test]
    fn a_map_the_rewrite_would_change_is_kept() {
        for rule in [
            // An action before the map would act once per rule tried.
            "mark set mark or 0x4000 numgen random mod 2 vmap { 0 : goto a , 1 : goto b }",
            // A key missing: its share falls through the rule, as the arms would not say.
            "numgen random mod 3 vmap { 0 : goto a , 1 : goto b }",
            // Another anonymous set, which every copy would bind.
            "ip saddr { 10.0.0.0/8,192.168.0.0/16 } numgen random mod 2 vmap { 0 : goto a , 1 : goto b }",
        ] {
            assert_eq!(interim(&table(&[("s", rule)]), 1), None, "{rule}");
        }
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
        let of = |c: &str| (c == "service-B").then(|| t.objects.rules.iter().filter(|r| r.chain == c).cloned().collect::<Vec<_>>());
        let (batch, taken) = next_batch(&gone, 100, |c| Some((c.as_str(), of(c)?)));
        assert_eq!((script(t.family, t.name, &batch).text(), taken), (b[1].as_str(), 2));
        let (batch, taken) = next_batch(&gone[..1], 100, |c| Some((c.as_str(), of(c)?)));
        assert_eq!((batch.len(), taken), (0, 1));
    }

    #[test]
    fn a_conversion_batch_bound_follows_what_batches_cost() {
        let ms = Duration::from_millis;
        assert_eq!(next_bound(CONVERSION_LINES, ms(20_000)), CONVERSION_LINES / 2, "a long batch halves the next");
        assert_eq!(next_bound(CONVERSION_MIN_LINES, ms(20_000)), CONVERSION_MIN_LINES, "never below one chain's rules");
        assert_eq!(next_bound(100, ms(50)), 200, "a short batch doubles the next");
        assert_eq!(next_bound(CONVERSION_LINES, ms(1)), CONVERSION_LINES, "never above the fixed bound");
        assert_eq!(next_bound(300, ms(300)), 300, "near the aim: kept");
    }

    #[test]
    fn a_paced_bound_follows_the_marginal_cost_not_the_fixed_one() {
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        assert_eq!((pace.next(true), pace.next(false)), ((0, true), (CONVERSION_MIN_LINES, true)), "the first transaction is a probe");
        pace.record(true, ms(700));
        assert_eq!(pace.next(false), (CONVERSION_MIN_LINES, false), "the smallest first");
        // Each transaction pays more than the aim whatever it holds: cheap beyond it, doubled.
        pace.record(false, ms(750));
        let doubled = 2 * CONVERSION_MIN_LINES;
        assert_eq!((pace.fixed(), pace.lines()), (ms(700), doubled));
        assert_eq!(next_bound(doubled, ms(750)), CONVERSION_MIN_LINES, "on the total time it would shrink");
        // A batch that costs more than the aim beyond the fixed part halves the next.
        pace.record(false, ms(700) + CONVERSION_STEP * 2);
        assert_eq!(pace.lines(), CONVERSION_MIN_LINES);
        pace.record(false, ms(710));
        assert_eq!(pace.lines(), doubled);
        pace.record(false, ms(700) + CONVERSION_STEP / 2);
        assert_eq!(pace.lines(), doubled, "near the aim: kept");
        for _ in 0..16 {
            pace.record(false, ms(701));
        }
        assert_eq!(pace.lines(), CONVERSION_LINES, "never above the fixed bound");
    }

    #[test]
    fn a_probe_comes_every_few_transactions_and_the_fixed_cost_is_the_recent_fastest() {
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        let mut probes = Vec::new();
        for i in 0..3 * PROBE_EVERY {
            let (bound, probe) = pace.next(true);
            assert_eq!(bound == 0, probe, "a carried probe holds no batch");
            if probe {
                probes.push(i);
            }
            pace.record(probe, ms(if probe { 500 } else { 520 }));
        }
        assert_eq!(probes, [0, PROBE_EVERY, 2 * PROBE_EVERY]);
        assert_eq!(pace.fixed(), ms(500));
        // The table's fixed cost grew: once the window has moved on, the estimate follows.
        for _ in 0..PACE_WINDOW {
            pace.record(false, ms(900));
        }
        assert_eq!(pace.fixed(), ms(900));
    }
}


//! The difference between the rules the kernel holds and the rules wanted, as a dry-run
//! diff and as the smallest restore input that turns one into the other. Pure.
//!
//! Only the chains the wanted rules declare are compared or touched, plus the mode's
//! per-service chains the kernel still holds (deleted when no longer wanted) and the jumps
//! into them from built-in chains. A per-service chain that differs is rewritten whole (it
//! is small); any other chain (KUBE-SERVICES, KUBE-NODEPORTS, …) is edited in place with
//! `-D N`/`-I N` when that is shorter than rewriting it, which leaves the same rules in the
//! same order; unused service chains are deleted last, after the rules that jump to them.
//! Which chains are per-service is the mode's to say (`per_service`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use similar::{capture_diff_slices, Algorithm, DiffOp};

use super::canon::{canonical_matches, canonical_target};
use super::dump::{Dump, TableDump};
use super::view::{Chains, RuleRef, Tables};
use super::jumps::Jump;
use super::rule::{quote, write_line, Args, Chain, Rule};
use super::target::Target;

/// Tables in restore order.
pub const TABLES: [&str; 2] = ["filter", "nat"];

/// A rule as wanted: its restore text (for writing), its canonical form (for comparing)
/// and the chain it jumps to, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    text: String,
    canon: String,
    jump: Option<Chain>,
}

/// One chain whose rules change, for the dry-run diff (canonical `-A` lines). The lines
/// are kept only when the delta was computed with [`Lines::Keep`] (a dry run); otherwise
/// `live` and `desired` say only whether the chain exists and is wanted (`Some` of no lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainChange {
    pub table: &'static str,
    /// Shared with the rules' own chain names (no copy per change).
    pub chain: Chain,
    /// `None`: the chain does not exist in the kernel.
    pub live: Option<Vec<String>>,
    /// `None`: the chain is to be deleted.
    pub desired: Option<Vec<String>>,
}

/// Whether a delta keeps each changed chain's lines ([`ChainChange`]). Only the dry-run
/// diff reads them; a sync into an empty kernel changes every chain, and at 10,000
/// services their canonical lines are ~50 MB held beside the restore input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    Keep,
    /// Only which chains change.
    Names,
}

impl Lines {
    fn keep(self, lines: impl FnOnce() -> Vec<String>) -> Vec<String> {
        match self {
            Lines::Keep => lines(),
            Lines::Names => Vec::new(),
        }
    }
}

/// What one sync must change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    pub changes: Vec<ChainChange>,
    /// What to send per table (absent when the table needs nothing).
    pub tables: BTreeMap<String, TablePlan>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The whole restore input (tables in restore order), or "" if nothing changes.
    pub fn restore_text(&self) -> String {
        let plans = || TABLES.iter().filter_map(|t| self.tables.get(*t).map(|p| (*t, p)));
        // Written once into a buffer of the exact size: at 10,000 services a full sync's
        // input is ~40 MB, and text per table joined afterwards held it twice.
        let len = plans().map(|(t, p)| p.text_len(t)).sum();
        let mut out = String::with_capacity(len);
        plans().for_each(|(t, p)| p.write_text(t, &mut out));
        debug_assert_eq!(out.len(), len, "restore input sized exactly");
        out
    }

    /// [`Delta::restore_text`] handed to `sink` piece by piece, never held whole: what a
    /// restore process is fed from.
    pub fn write_restore(&self, sink: &mut dyn FnMut(&str)) {
        TABLES.iter().filter_map(|t| self.tables.get(*t).map(|p| (*t, p))).for_each(|(t, p)| p.write_to(t, sink));
    }

    pub fn restore_lines(&self) -> usize {
        self.tables.values().map(TablePlan::lines).sum()
    }

    /// Services whose chains (nat) are written whole.
    pub fn services_rewritten(&self) -> usize {
        self.tables.get("nat").map_or(0, |nat| by_service(&service_rewrites(nat)).len())
    }

    /// The same input as several restores, applied in order, each writing the chains of
    /// at most `max_services` services: iptables-nft-restore's time grows with the square
    /// of one input's size (BENCHMARKS.md). First the nat chains that do not exist
    /// yet are declared (empty), so every later jump finds its target; then the service
    /// chains, a service's chains together (cut any other way, the same chunks restore
    /// slower), none of them reachable yet from a top-level chain; last, in one restore,
    /// the filter table and everything else of nat: the top-level chains switch to the new
    /// rules at once and stale chains go. A failure part-way leaves consistent rules: new
    /// chains nothing jumps to, or service chains rewritten whole.
    pub fn restore_chunks(&self, max_services: usize) -> Vec<String> {
        let mut chunks = Vec::new();
        let collected: Result<(), std::convert::Infallible> = self.each_restore_chunk(max_services, |text| {
            chunks.push(text.to_string());
            Ok(())
        });
        let Ok(()) = collected;
        chunks
    }

    /// [`Delta::restore_chunks`], each chunk written only when the one before it was
    /// handed to `send`, so a sync holds one chunk's text at a time, not all of them.
    /// Stops at the first error `send` returns.
    pub fn each_restore_chunk<E>(&self, max_services: usize, mut send: impl FnMut(&str) -> Result<(), E>) -> Result<(), E> {
        let Some(nat) = self.tables.get("nat") else { return send(&self.restore_text()) };
        let groups = by_service(&service_rewrites(nat));
        if groups.len() <= max_services {
            return send(&self.restore_text());
        }
        let fresh: Vec<&str> = nat.decls.iter().filter_map(|d| match d { Decl::Rewrite(r) if !r.exists && !r.per_service => Some(r.chain.as_str()), _ => None }).collect();
        if !fresh.is_empty() {
            let mut text = String::from("*nat\n");
            fresh.iter().for_each(|c| push_line(&mut text, &[":", c, " - [0:0]"]));
            text.push_str("COMMIT\n");
            send(&text)?;
        }
        for part in groups.chunks(max_services.max(1)) {
            send(&rewrites_text("nat", part.iter().flatten().copied()))?;
        }
        let rest = TablePlan {
            decls: nat.decls.iter().filter(|d| !matches!(d, Decl::Rewrite(r) if r.per_service)).cloned().collect(),
            edits: nat.edits.clone(),
            jumps: nat.jumps.clone(),
        };
        let mut last: String = self.tables.get("filter").map(|p| p.text("filter")).unwrap_or_default();
        if !rest.is_empty() {
            last.push_str(&rest.text("nat"));
        }
        if last.is_empty() {
            return Ok(());
        }
        send(&last)
    }
}

/// The service chains a nat plan writes whole.
fn service_rewrites(nat: &TablePlan) -> Vec<&Rewrite> {
    nat.decls.iter().filter_map(|d| match d { Decl::Rewrite(r) if r.per_service => Some(r), _ => None }).collect()
}

/// Rewritten service chains grouped by service: a chain joins the group of the rewritten
/// chain that jumps to it (FW → EXT → SVC/SVL → SEP), so a group's jumps between service
/// chains stay inside it. Groups in order of first appearance.
fn by_service<'a>(rewrites: &[&'a Rewrite]) -> Vec<Vec<&'a Rewrite>> {
    let index: HashMap<&str, usize> = rewrites.iter().enumerate().map(|(i, r)| (r.chain.as_str(), i)).collect();
    let mut parent: Vec<Option<usize>> = vec![None; rewrites.len()];
    for (i, r) in rewrites.iter().enumerate() {
        for target in &r.jumps {
            if let Some(&t) = index.get(target.as_str()) {
                if t != i && parent[t].is_none() {
                    parent[t] = Some(i);
                }
            }
        }
    }
    let root = |mut i: usize| {
        // Service chains nest at most four deep; the bound also stops a cycle.
        for _ in 0..rewrites.len().min(8) {
            match parent[i] {
                Some(p) => i = p,
                None => break,
            }
        }
        i
    };
    let mut groups: Vec<Vec<&Rewrite>> = Vec::new();
    let mut group_of: HashMap<usize, usize> = HashMap::new();
    for (i, r) in rewrites.iter().enumerate() {
        let g = *group_of.entry(root(i)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(r);
    }
    groups
}

fn rule_line<S: AsRef<str>>(chain: &str, args: impl IntoIterator<Item = S>) -> String {
    let mut s = format!("-A {chain}");
    for a in args {
        s.push(' ');
        s.push_str(&quote(a.as_ref()));
    }
    s
}

/// A rule read or gathered, as an `-A` line without its newline.
fn text_line(chain: &str, r: RuleRef<'_>) -> String {
    let mut s = String::new();
    write_line(&mut s, "-A", chain, r.args, r.target);
    s.pop();
    s
}

/// A rule's `-A` line in `iptables-save`'s canonical form.
fn canon_line(chain: &str, r: RuleRef<'_>, v6: bool) -> String {
    canon_of(chain, r.args, r.target, v6)
}

fn canon_of(chain: &str, args: &Args, target: &Target, v6: bool) -> String {
    let matches = canonical_matches(&args.words(), v6);
    let target = canonical_target(target, v6);
    rule_line(chain, matches.iter().map(String::as_str).chain(target.words()))
}

fn wanted_rules(t: &impl Chains, chain: &str, v6: bool) -> Vec<Wanted> {
    t.rules_of(chain)
        .map(|r| Wanted { text: text_line(chain, r), canon: canon_line(chain, r, v6), jump: r.target.jump_to().cloned() })
        .collect()
}

fn live_rules(t: &TableDump, chain: &str, v6: bool) -> Vec<String> {
    Chains::rules_of(t, chain).map(|r| canon_line(chain, r, v6)).collect()
}

/// Computes the delta. `desired` is a full render (as values); `live` is what
/// `iptables-save` printed for the same tables (empty tables if none). `per_service` says
/// which nat chains belong to one service: rewritten whole, and deleted when the kernel
/// holds one that is not wanted.
pub fn compute(desired: &impl Tables, live: &Dump, v6: bool, jumps: &[Jump], per_service: impl Fn(&str) -> bool) -> Delta {
    compute_with(desired, live, v6, jumps, per_service, Lines::Keep)
}

/// [`compute`], keeping the changed chains' lines or not (`lines`): the restore input is
/// the same either way.
pub fn compute_with(desired: &impl Tables, live: &Dump, v6: bool, jumps: &[Jump], per_service: impl Fn(&str) -> bool, lines: Lines) -> Delta {
    let mut delta = Delta::default();
    let empty = TableDump::default();
    for table in TABLES {
        let want = desired.table(table);
        let have = live.tables.get(table).unwrap_or(&empty);
        let mut w = TablePlan::default();
        let have_chains: BTreeSet<&str> = have.chain_names();
        for name in want.into_iter().flat_map(|t| t.declared()) {
            let chain = name.as_str();
            let wanted = want.map(|t| wanted_rules(t, chain, v6)).unwrap_or_default();
            let own = per_service(chain);
            if !have_chains.contains(chain) {
                w.rewrite(name, &wanted, false, own);
                delta.changes.push(change(table, name, None, Some(&wanted), lines));
                continue;
            }
            let current = live_rules(have, chain, v6);
            if current.iter().eq(wanted.iter().map(|r| &r.canon)) {
                continue;
            }
            delta.changes.push(change(table, name, Some(lines.keep(|| current.clone())), Some(&wanted), lines));
            if own {
                w.rewrite(name, &wanted, true, true);
            } else {
                w.edit_or_rewrite(name, &current, &wanted);
            }
        }
        let want_chains: BTreeSet<&str> = want.into_iter().flat_map(|t| t.declared()).map(Chain::as_str).collect();
        for c in &have.chains {
            if table == "nat" && per_service(&c.name) && !want_chains.contains(c.name.as_str()) {
                w.delete(&c.name);
                delta.changes.push(ChainChange {
                    table,
                    chain: c.name.clone(),
                    live: Some(lines.keep(|| live_rules(have, &c.name, v6))),
                    desired: None,
                });
            }
        }
        add_jumps(table, have, v6, jumps, lines, &mut w, &mut delta.changes);
        if !w.is_empty() {
            delta.tables.insert(table.to_string(), w);
        }
    }
    delta
}

/// A chain wanted whole, its rules already written as `-A` lines (each ended by a
/// newline), for [`compute_fresh`].
#[derive(Debug, Clone)]
pub struct NewChain {
    pub name: Chain,
    pub rules: String,
    /// Lines in `rules`.
    pub count: usize,
    /// The chains its rules jump to (kept for a per-service chain only).
    pub jumps: Vec<Chain>,
}

/// The delta into a kernel that holds none of the wanted chains and none of the mode's
/// per-service chains (a node's first sync, or after someone flushed our tables): every
/// wanted chain is written whole and nothing is compared, so no canonical form, no
/// second copy of the rules and no stale conntrack entries (the kernel routes no service).
/// `tables` gives each table's chains in declaration order. Equal to [`compute_with`] of
/// the same rules with [`Lines::Names`] against that kernel (a test holds them to it).
pub fn compute_fresh(tables: Vec<(String, Vec<NewChain>)>, live: &Dump, v6: bool, jumps: &[Jump], per_service: impl Fn(&str) -> bool) -> Delta {
    let mut delta = Delta::default();
    let empty = TableDump::default();
    let mut tables: BTreeMap<String, Vec<NewChain>> = tables.into_iter().collect();
    for table in TABLES {
        let have = live.tables.get(table).unwrap_or(&empty);
        let mut w = TablePlan::default();
        let chains = tables.remove(table).unwrap_or_default();
        // Sized once: at 10,000 services there are ~120,000 chains, and a list grown by
        // doubling holds its old and new buffers at once as it grows.
        w.decls.reserve_exact(chains.len());
        delta.changes.reserve_exact(chains.len() + jumps.len());
        for c in chains {
            let own = per_service(&c.name);
            delta.changes.push(ChainChange { table, chain: c.name.clone(), live: None, desired: Some(Vec::new()) });
            let jumps = if own { c.jumps } else { Vec::new() };
            w.decls.push(Decl::Rewrite(Rewrite { chain: c.name, rules: c.rules, count: c.count, jumps, exists: false, per_service: own }));
        }
        add_jumps(table, have, v6, jumps, Lines::Names, &mut w, &mut delta.changes);
        if !w.is_empty() {
            delta.tables.insert(table.to_string(), w);
        }
    }
    delta
}

/// The jumps from built-in chains `table` needs and the kernel lacks: prepended.
fn add_jumps(table: &'static str, have: &TableDump, v6: bool, jumps: &[Jump], lines: Lines, w: &mut TablePlan, changes: &mut Vec<ChainChange>) {
    for j in jumps.iter().filter(|j| j.table == table) {
        let rule = j.rule();
        let canon = canon_of(j.from, &rule.args, &rule.target, v6);
        let current = live_rules(have, j.from, v6);
        if !current.contains(&canon) {
            w.prepend(&rule);
            let desired: Vec<String> = std::iter::once(canon).chain(current.iter().cloned()).collect();
            let (live, desired) = (lines.keep(|| current), lines.keep(|| desired));
            changes.push(ChainChange { table, chain: Chain::from(j.from), live: Some(live), desired: Some(desired) });
        }
    }
}

fn change(table: &'static str, chain: &Chain, live: Option<Vec<String>>, wanted: Option<&[Wanted]>, lines: Lines) -> ChainChange {
    ChainChange {
        table,
        chain: chain.clone(),
        live,
        desired: wanted.map(|w| lines.keep(|| w.iter().map(|r| r.canon.clone()).collect())),
    }
}

/// One table's part of a sync, written in a safe order: chain declarations (which
/// flush), rules of rewritten chains, in-place edits, jumps from built-in chains, then
/// deletions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablePlan {
    decls: Vec<Decl>,
    edits: Vec<String>,
    jumps: Vec<String>,
}

/// A chain declared: to be written whole, or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decl {
    Rewrite(Rewrite),
    Delete(Chain),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rewrite {
    chain: Chain,
    /// `-A` lines, each ended by a newline: one allocation per chain, not per line (a
    /// first sync writes ~400,000 lines at 10,000 services).
    rules: String,
    /// Lines in `rules`.
    count: usize,
    /// The chains its rules jump to (a service's own chain only: for grouping by service).
    jumps: Vec<Chain>,
    /// The kernel already has the chain.
    exists: bool,
    /// One service's own chain (nat), which [`Delta::restore_chunks`] groups by service.
    per_service: bool,
}

/// The positions (0-based) a diff deletes from the old list and inserts into the new one.
pub fn diff_positions<T: Eq + std::hash::Hash>(old: &[T], new: &[T]) -> (Vec<usize>, Vec<usize>) {
    let mut deletes = Vec::new();
    let mut inserts = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, old, new) {
        match op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete { old_index, old_len, .. } => deletes.extend(old_index..old_index + old_len),
            DiffOp::Insert { new_index, new_len, .. } => inserts.extend(new_index..new_index + new_len),
            DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                deletes.extend(old_index..old_index + old_len);
                inserts.extend(new_index..new_index + new_len);
            }
        }
    }
    (deletes, inserts)
}

impl TablePlan {
    pub fn is_empty(&self) -> bool {
        self.decls.is_empty() && self.edits.is_empty() && self.jumps.is_empty()
    }

    fn rewrite(&mut self, chain: &Chain, wanted: &[Wanted], exists: bool, per_service: bool) {
        let mut rules = String::with_capacity(wanted.iter().map(|r| r.text.len() + 1).sum());
        wanted.iter().for_each(|r| push_line(&mut rules, &[&r.text]));
        let jumps = if per_service { wanted.iter().filter_map(|r| r.jump.clone()).collect() } else { Vec::new() };
        self.decls.push(Decl::Rewrite(Rewrite { chain: chain.clone(), rules, count: wanted.len(), jumps, exists, per_service }));
    }

    /// Declares (flushes) `chain` and writes its rules (`-A` lines); `per_service`: it is
    /// one service's own chain.
    pub fn rewrite_rules(&mut self, chain: &Chain, wanted: &[&Rule], exists: bool, per_service: bool) {
        let mut rules = String::with_capacity(wanted.iter().map(|r| r.text_len()).sum());
        wanted.iter().for_each(|r| r.write(&mut rules));
        rules.shrink_to_fit();
        let jumps = if per_service { wanted.iter().filter_map(|r| r.target.jump_to().cloned()).collect() } else { Vec::new() };
        self.decls.push(Decl::Rewrite(Rewrite { chain: chain.clone(), rules, count: wanted.len(), jumps, exists, per_service }));
    }

    /// Positional edits if they are fewer lines than a rewrite.
    fn edit_or_rewrite(&mut self, chain: &Chain, current: &[String], wanted: &[Wanted]) {
        let canon: Vec<&str> = wanted.iter().map(|r| r.canon.as_str()).collect();
        let cur: Vec<&str> = current.iter().map(String::as_str).collect();
        let (deletes, inserts) = diff_positions(&cur, &canon);
        if deletes.len() + inserts.len() > wanted.len() {
            return self.rewrite(chain, wanted, true, false);
        }
        self.edit(chain, 0, &deletes, &inserts, |i| wanted[i].text.clone());
    }

    /// In-place edits of the rules at `offset..` of `chain`: `deletes` (positions in the
    /// old rules) from the bottom up, so positions stay valid, then `inserts` (positions
    /// in the new rules) top down: after the deletions the range holds the common
    /// subsequence, and inserting each new rule at its final position rebuilds the new
    /// list. `text(i)` is new rule `i` as an `-A` line.
    pub fn edit(&mut self, chain: &str, offset: usize, deletes: &[usize], inserts: &[usize], text: impl Fn(usize) -> String) {
        for i in deletes.iter().rev() {
            self.edits.push(format!("-D {chain} {}", offset + i + 1));
        }
        let prefix = format!("-A {chain} ");
        for &i in inserts {
            let line = text(i);
            let rest = line.strip_prefix(&prefix).unwrap_or("");
            self.edits.push(format!("-I {chain} {} {rest}", offset + i + 1).trim_end().to_string());
        }
    }

    fn prepend(&mut self, rule: &Rule) {
        let mut line = String::new();
        write_line(&mut line, "-I", &format!("{} 1", rule.chain), &rule.args, &rule.target);
        line.pop();
        self.jumps.push(line);
    }

    /// Flushes and deletes `chain` (after every other line of the table).
    pub fn delete(&mut self, chain: &Chain) {
        self.decls.push(Decl::Delete(chain.clone()));
    }

    /// Lines [`TablePlan::text`] writes.
    pub fn lines(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        let body: usize = self.decls.iter().map(|d| 1 + match d { Decl::Rewrite(r) => r.count, Decl::Delete(_) => 1 }).sum();
        2 + body + self.edits.len() + self.jumps.len()
    }

    /// The restore input for `table` ("" if there is nothing to do).
    pub fn text(&self, table: &str) -> String {
        let len = self.text_len(table);
        let mut out = String::with_capacity(len);
        self.write_text(table, &mut out);
        debug_assert_eq!(out.len(), len, "table input sized exactly");
        out
    }

    /// Bytes [`TablePlan::text`] writes.
    fn text_len(&self, table: &str) -> usize {
        if self.is_empty() {
            return 0;
        }
        let line = |l: &String| l.len() + 1;
        let decls: usize = self
            .decls
            .iter()
            .map(|d| match d {
                Decl::Rewrite(r) => ":".len() + r.chain.len() + " - [0:0]\n".len() + r.rules.len(),
                Decl::Delete(chain) => ":".len() + chain.len() + " - [0:0]\n".len() + "-X ".len() + chain.len() + 1,
            })
            .sum();
        "*\n".len() + table.len() + decls + self.edits.iter().chain(&self.jumps).map(line).sum::<usize>() + "COMMIT\n".len()
    }

    /// Appends the restore input for `table` to `out` (nothing if there is nothing to do).
    fn write_text(&self, table: &str, out: &mut String) {
        self.write_to(table, &mut |piece| out.push_str(piece));
    }

    /// Hands the restore input for `table` to `sink` piece by piece (nothing if there is
    /// nothing to do).
    fn write_to(&self, table: &str, sink: &mut dyn FnMut(&str)) {
        if self.is_empty() {
            return;
        }
        fn line(sink: &mut dyn FnMut(&str), parts: &[&str]) {
            parts.iter().for_each(|p| sink(p));
            sink("\n");
        }
        line(sink, &["*", table]);
        for d in &self.decls {
            let (Decl::Rewrite(Rewrite { chain, .. }) | Decl::Delete(chain)) = d;
            line(sink, &[":", chain, " - [0:0]"]);
        }
        for d in &self.decls {
            if let Decl::Rewrite(r) = d {
                sink(&r.rules);
            }
        }
        self.edits.iter().chain(&self.jumps).for_each(|l| line(sink, &[l]));
        for d in &self.decls {
            if let Decl::Delete(chain) = d {
                line(sink, &["-X ", chain]);
            }
        }
        line(sink, &["COMMIT"]);
    }
}

/// The restore input that declares (flushes) and writes `rewrites` in `table`, as
/// [`TablePlan::text`] of them would, without copying them into a plan.
fn rewrites_text<'a>(table: &str, rewrites: impl Iterator<Item = &'a Rewrite> + Clone) -> String {
    let len = rewrites.clone().map(|r| ":".len() + r.chain.len() + " - [0:0]\n".len() + r.rules.len()).sum::<usize>();
    let mut out = String::with_capacity("*\n".len() + table.len() + len + "COMMIT\n".len());
    push_line(&mut out, &["*", table]);
    rewrites.clone().for_each(|r| push_line(&mut out, &[":", &r.chain, " - [0:0]"]));
    rewrites.for_each(|r| out.push_str(&r.rules));
    out.push_str("COMMIT\n");
    out
}

/// Appends one line (its parts, then a newline).
fn push_line(out: &mut String, parts: &[&str]) {
    parts.iter().for_each(|p| out.push_str(p));
    out.push('\n');
}

/// A unified diff per changed chain, for `--dry-run`.
pub fn dry_run_diff(delta: &Delta, family_label: &str) -> String {
    let mut out = String::new();
    for c in &delta.changes {
        let live = c.live.clone().unwrap_or_default().join("\n");
        let desired = c.desired.clone().unwrap_or_default().join("\n");
        let old = format!("live {family_label} {} {}", c.table, c.chain);
        let new = format!("desired {family_label} {} {}", c.table, c.chain);
        let live = if live.is_empty() { live } else { live + "\n" };
        let desired = if desired.is_empty() { desired } else { desired + "\n" };
        let diff = similar::TextDiff::from_lines(&live, &desired);
        out.push_str(&diff.unified_diff().context_radius(1).header(&old, &new).to_string());
        if c.live.is_none() {
            out.push_str(&format!("# new chain {} {}\n", c.table, c.chain));
        }
        if c.desired.is_none() {
            out.push_str(&format!("# chain {} {} will be deleted\n", c.table, c.chain));
        }
    }
    out
}


//! `iptables-restore` text, both ways: [`write`] turns a [`Ruleset`] into restore input
//! (full, or partial: only the named services' own chains) and [`dump`] gives the same
//! rules as values, from one walk in kube-proxy's order; [`parse`] reads the kernel's
//! `iptables-save` output (or a restore input) into a [`Dump`].

use std::collections::{BTreeSet, HashMap};

use super::render::{fixed, Ruleset};
use crate::model::NamespacedName;
use crate::xtables::delta::NewChain;
use crate::xtables::dump::{Dump, Op, Rule, TableDump};
use crate::xtables::Chain;
use crate::xtables::Rule as Value;
use crate::xtables::view::View;

/// Which services' own chains a restore includes.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    Full,
    /// Only these services' chains; every other service's top-level rules are still
    /// written (the top-level chains are flushed by every restore).
    Partial(&'a BTreeSet<NamespacedName>),
}

impl Scope<'_> {
    fn includes(&self, id: &NamespacedName) -> bool {
        match self {
            Scope::Full => true,
            Scope::Partial(set) => set.contains(id),
        }
    }
}

/// The restore input for one family, in kube-proxy's order. `stale` chains are declared
/// (flushed) and deleted with `-X`.
pub fn write(rs: &Ruleset, scope: Scope, stale: &[String]) -> String {
    let mut out = String::with_capacity(size_hint(rs, scope));
    emit(rs, scope, stale, |s| out.push_str(s));
    out
}

/// Bytes [`write`] will produce, near enough to size its buffer once.
pub fn size_hint(rs: &Ruleset, scope: Scope) -> usize {
    let mut n = 4096;
    let bytes = |rules: &[Value]| rules.iter().map(Value::text_len).sum::<usize>();
    for (name, r) in &rs.services {
        n += bytes(&r.filter) + bytes(&r.nat_top);
        if scope.includes(&name.service) {
            n += bytes(&r.chain_rules) + r.chains.iter().map(|c| c.len() + 9).sum::<usize>();
        }
    }
    n
}

/// Hands the restore input to `sink` piece by piece, in order: [`write`] collects it, and
/// `svcproxy render` streams it to stdout without holding it whole.
pub fn emit(rs: &Ruleset, scope: Scope, stale: &[String], sink: impl FnMut(&str)) {
    walk(rs, scope, stale, &mut Text { sink, buf: String::new() });
}

/// The rules of a ruleset as a [`Dump`], built from the values (no text written or
/// parsed): what a full sync compares with the kernel, and what the tracer walks.
pub fn dump(rs: &Ruleset, scope: Scope, stale: &[String]) -> Dump {
    let mut b = DumpBuilder { dump: Dump::default(), table: String::new(), line: 0 };
    walk(rs, scope, stale, &mut b);
    b.dump
}

/// The rules of a ruleset as a [`View`]: each rule the ruleset holds borrowed, not copied
/// (what a full sync compares with the kernel: [`crate::xtables::delta::compute_with`]
/// reads it as it reads the [`Dump`] of the same rules, which [`dump`] would build).
pub fn view<'r>(rs: &'r Ruleset, scope: Scope) -> View<'r> {
    let mut b = ViewBuilder { view: View::default(), table: String::new() };
    walk(rs, scope, &[], &mut b);
    b.view.finish()
}

/// The chains of a full render by table, in declaration order, each chain's rules written
/// as restore lines, and the lines of the whole restore input: what a sync into a kernel
/// holding none of our chains writes ([`crate::xtables::delta::compute_fresh`]), built
/// from the values without a [`Dump`] or a canonical form. `per_service` says whose jump
/// targets are kept (for grouping by service).
pub fn new_chains(rs: &Ruleset, per_service: impl Fn(&str) -> bool) -> (Vec<(String, Vec<NewChain>)>, usize) {
    let mut b = NewChains { tables: Vec::new(), index: HashMap::new(), last: None, lines: 0, per_service };
    walk(rs, Scope::Full, &[], &mut b);
    (b.tables, b.lines)
}

/// What [`walk`] produces, in order: tables, chain declarations, rules, deletions.
/// Rules come as made on the spot ([`Out::rules`]: the fixed chains') or as the
/// ruleset's own values ([`Out::held`], which live as long as the walk's ruleset: `'r`).
trait Out<'r> {
    fn table(&mut self, name: &str);
    fn chain(&mut self, name: &Chain);
    fn rules(&mut self, rules: &[Value]);
    fn held(&mut self, rules: &'r [Value]) {
        self.rules(rules)
    }
    fn delete(&mut self, chain: &str);
    fn commit(&mut self);
}

/// kube-proxy's order of a restore input, known once: [`emit`] writes it as text and
/// [`dump`] keeps it as values.
fn walk<'r>(rs: &'r Ruleset, scope: Scope, stale: &[String], out: &mut impl Out<'r>) {
    let ctx = &rs.ctx;
    out.table("filter");
    fixed::filter_chains(ctx).into_iter().for_each(|c| out.chain(&Chain::from(c)));
    out.rules(&fixed::filter_head(ctx));
    rs.services.values().for_each(|r| out.held(&r.filter));
    out.rules(&fixed::filter_tail(ctx));
    out.commit();
    out.table("nat");
    fixed::NAT_CHAINS.into_iter().for_each(|c| out.chain(&Chain::from(c)));
    for (name, r) in &rs.services {
        if scope.includes(&name.service) {
            r.chains.iter().for_each(|c| out.chain(c));
        }
    }
    stale.iter().for_each(|c| out.chain(&Chain::from(c.clone())));
    out.rules(&fixed::nat_head(ctx));
    for (name, r) in &rs.services {
        out.held(&r.nat_top);
        if scope.includes(&name.service) {
            out.held(&r.chain_rules);
        }
    }
    // kube-proxy writes the stale-chain deletions before the final KUBE-NODEPORTS jump.
    stale.iter().for_each(|c| out.delete(c));
    out.rules(&fixed::nat_tail(ctx));
    out.commit();
}

/// Restore text to a sink; each run of rules is written into one reused buffer.
struct Text<F: FnMut(&str)> {
    sink: F,
    buf: String,
}

impl<F: FnMut(&str)> Out<'_> for Text<F> {
    fn table(&mut self, name: &str) {
        (self.sink)("*");
        (self.sink)(name);
        (self.sink)("\n");
    }
    fn chain(&mut self, name: &Chain) {
        (self.sink)(":");
        (self.sink)(name);
        (self.sink)(" - [0:0]\n");
    }
    fn rules(&mut self, rules: &[Value]) {
        self.buf.clear();
        rules.iter().for_each(|r| r.write(&mut self.buf));
        (self.sink)(&self.buf);
    }
    fn delete(&mut self, chain: &str) {
        (self.sink)("-X ");
        (self.sink)(chain);
        (self.sink)("\n");
    }
    fn commit(&mut self) {
        (self.sink)("COMMIT\n");
    }
}

/// Chains with their rules as text, for [`new_chains`].
struct NewChains<F: Fn(&str) -> bool> {
    tables: Vec<(String, Vec<NewChain>)>,
    /// The current table's chains: where each is in its list.
    index: HashMap<Chain, usize>,
    /// The chain of the last rule and where it is (rules come chain by chain).
    last: Option<(Chain, usize)>,
    lines: usize,
    per_service: F,
}

impl<F: Fn(&str) -> bool> NewChains<F> {
    fn position(&mut self, chain: &str) -> Option<usize> {
        match &self.last {
            Some((name, at)) if name == chain => Some(*at),
            _ => {
                let (name, &at) = self.index.get_key_value(chain)?;
                self.last = Some((name.clone(), at));
                Some(at)
            }
        }
    }
}

impl<F: Fn(&str) -> bool> Out<'_> for NewChains<F> {
    fn table(&mut self, name: &str) {
        self.lines += 2; // the table line and COMMIT
        self.tables.push((name.to_string(), Vec::new()));
        self.index.clear();
        self.last = None;
    }
    fn chain(&mut self, name: &Chain) {
        self.lines += 1;
        if let Some((_, chains)) = self.tables.last_mut() {
            if !self.index.contains_key(name.as_str()) {
                self.index.insert(name.clone(), chains.len());
                chains.push(NewChain { name: name.clone(), rules: String::new(), count: 0, jumps: Vec::new() });
            }
        }
    }
    fn rules(&mut self, rules: &[Value]) {
        self.lines += rules.len();
        for r in rules {
            // A rule of a chain not declared here (a built-in one) is not written: the
            // delta prepends the jumps from built-in chains itself.
            let Some(at) = self.position(&r.chain) else { continue };
            let Some((_, chains)) = self.tables.last_mut() else { continue };
            let c = &mut chains[at];
            r.write(&mut c.rules);
            c.count += 1;
            if let Some(to) = r.target.jump_to().filter(|_| (self.per_service)(&c.name)) {
                c.jumps.push(to.clone());
            }
        }
    }
    fn delete(&mut self, _chain: &str) {
        self.lines += 1;
    }
    fn commit(&mut self) {
        if let Some((_, chains)) = self.tables.last_mut() {
            chains.iter_mut().for_each(|c| c.rules.shrink_to_fit());
        }
    }
}

/// A [`View`] of the rules, for [`view`] (stale-chain deletions are not kept: a view
/// is of a full render).
struct ViewBuilder<'r> {
    view: View<'r>,
    table: String,
}

impl<'r> Out<'r> for ViewBuilder<'r> {
    fn table(&mut self, name: &str) {
        self.table = name.to_string();
        self.view.table_mut(name);
    }
    fn chain(&mut self, name: &Chain) {
        self.view.table_mut(&self.table).declare(name);
    }
    fn rules(&mut self, rules: &[Value]) {
        self.view.table_mut(&self.table).copied(rules);
    }
    fn held(&mut self, rules: &'r [Value]) {
        self.view.table_mut(&self.table).held(rules);
    }
    fn delete(&mut self, _chain: &str) {}
    fn commit(&mut self) {}
}

/// A [`Dump`] with the line numbers the text would have.
struct DumpBuilder {
    dump: Dump,
    table: String,
    line: usize,
}

impl DumpBuilder {
    fn current(&mut self) -> &mut TableDump {
        let table = std::mem::take(&mut self.table);
        self.table = table.clone();
        self.dump.table(&table)
    }
}

impl Out<'_> for DumpBuilder {
    fn table(&mut self, name: &str) {
        self.line += 1;
        self.table = name.to_string();
        self.dump.table(name);
    }
    fn chain(&mut self, name: &Chain) {
        self.line += 1;
        self.current().declare(name);
    }
    fn rules(&mut self, rules: &[Value]) {
        let first = self.line + 1;
        self.line += rules.len();
        let t = self.current();
        for (i, r) in rules.iter().enumerate() {
            t.push(Rule { op: Op::Append, chain: r.chain.clone(), args: r.args.clone(), target: r.target.clone(), line: crate::xtables::dump::line_no(first + i) });
        }
    }
    fn delete(&mut self, chain: &str) {
        self.line += 1;
        self.current().deleted.push(chain.to_string());
    }
    fn commit(&mut self) {
        self.line += 1;
    }
}


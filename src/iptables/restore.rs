//! `iptables-restore` text, both ways: [`write`] turns a [`Ruleset`] into restore input
//! (full, or partial: only the named services' own chains) and [`dump`] gives the same
//! rules as values, from one walk in kube-proxy's order; [`parse`] reads the kernel's
//! `iptables-save` output (or a restore input) into a [`Dump`].

use std::collections::BTreeSet;

use super::render::{fixed, Ruleset};
use crate::model::NamespacedName;
use crate::netfilter::dump::{Dump, Op, Rule, TableDump};
use crate::netfilter::Rule as Value;

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

/// What [`walk`] produces, in order: tables, chain declarations, rules, deletions.
trait Out {
    fn table(&mut self, name: &str);
    fn chain(&mut self, name: &str);
    fn rules(&mut self, rules: &[Value]);
    fn delete(&mut self, chain: &str);
    fn commit(&mut self);
}

/// kube-proxy's order of a restore input, known once: [`emit`] writes it as text and
/// [`dump`] keeps it as values.
fn walk(rs: &Ruleset, scope: Scope, stale: &[String], out: &mut impl Out) {
    let ctx = &rs.ctx;
    out.table("filter");
    fixed::filter_chains(ctx).into_iter().for_each(|c| out.chain(c));
    out.rules(&fixed::filter_head(ctx));
    rs.services.values().for_each(|r| out.rules(&r.filter));
    out.rules(&fixed::filter_tail(ctx));
    out.commit();
    out.table("nat");
    fixed::NAT_CHAINS.into_iter().for_each(|c| out.chain(c));
    for (name, r) in &rs.services {
        if scope.includes(&name.service) {
            r.chains.iter().for_each(|c| out.chain(c));
        }
    }
    stale.iter().for_each(|c| out.chain(c));
    out.rules(&fixed::nat_head(ctx));
    for (name, r) in &rs.services {
        out.rules(&r.nat_top);
        if scope.includes(&name.service) {
            out.rules(&r.chain_rules);
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

impl<F: FnMut(&str)> Out for Text<F> {
    fn table(&mut self, name: &str) {
        (self.sink)("*");
        (self.sink)(name);
        (self.sink)("\n");
    }
    fn chain(&mut self, name: &str) {
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

impl Out for DumpBuilder {
    fn table(&mut self, name: &str) {
        self.line += 1;
        self.table = name.to_string();
        self.dump.table(name);
    }
    fn chain(&mut self, name: &str) {
        self.line += 1;
        self.current().declare(name);
    }
    fn rules(&mut self, rules: &[Value]) {
        let first = self.line + 1;
        self.line += rules.len();
        let t = self.current();
        for (i, r) in rules.iter().enumerate() {
            t.push(Rule { op: Op::Append, chain: r.chain.clone(), args: r.args.clone(), target: r.target.clone(), line: crate::netfilter::dump::line_no(first + i) });
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


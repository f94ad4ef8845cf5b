//! `iptables-restore` text, both ways: [`write`] turns a [`Ruleset`] into restore input
//! (full, or partial: only the named services' own chains) and [`dump`] gives the same
//! rules as values, from one walk in kube-proxy's order; [`parse`] reads the kernel's
//! `iptables-save` output (or a restore input) into a [`Dump`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::render::{fixed, Ruleset};
use crate::model::NamespacedName;
pub use crate::netfilter::rule::{quote, word_after, Args};
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
fn size_hint(rs: &Ruleset, scope: Scope) -> usize {
    let mut n = 4096;
    let bytes = |rules: &[Value]| rules.iter().map(|r| r.chain.len() + r.args.as_bytes_len() + 8).sum::<usize>();
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
            t.push(Rule { op: "-A".into(), chain: r.chain.to_string(), args: r.args.clone(), line: first + i });
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

/// A parsed restore input or save output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dump {
    pub tables: BTreeMap<String, TableDump>,
    /// Table names in the order they appeared.
    pub order: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableDump {
    /// Declared chains in order, with their policy (`-` for user chains) and counters text.
    pub chains: Vec<ChainDecl>,
    pub rules: Vec<Rule>,
    /// Chains deleted with `-X`, in order.
    pub deleted: Vec<String>,
    /// Positions in `rules` per chain (kept by [`TableDump::push`]).
    index: std::collections::HashMap<String, Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecl {
    pub name: String,
    pub policy: String,
    pub counters: String,
}

/// One `-A`/`-I` rule: its chain and its arguments after the chain name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub op: String,
    pub chain: String,
    pub args: Args,
    /// 1-based line in the parsed text.
    pub line: usize,
}

impl Dump {
    /// Lines of the restore text this dump stands for (`*table`, chains, rules,
    /// deletions, `COMMIT`).
    pub fn lines(&self) -> usize {
        self.tables.values().map(|t| 2 + t.chains.len() + t.rules.len() + t.deleted.len()).sum()
    }

    /// The table `name`, added (last in order) if it is not there yet.
    pub fn table(&mut self, name: &str) -> &mut TableDump {
        if !self.tables.contains_key(name) {
            self.order.push(name.to_string());
        }
        self.tables.entry(name.to_string()).or_default()
    }
}

impl TableDump {
    /// Declares a user chain (`:NAME - [0:0]`).
    pub fn declare(&mut self, name: &str) {
        self.chains.push(ChainDecl { name: name.to_string(), policy: "-".into(), counters: "[0:0]".into() });
    }

    /// Appends a rule value (`-A`).
    pub fn append(&mut self, rule: &Value) {
        self.push(Rule { op: "-A".into(), chain: rule.chain.to_string(), args: rule.args.clone(), line: 0 });
    }

    pub fn chain_names(&self) -> BTreeSet<&str> {
        self.chains.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn rules_of<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a Rule> {
        self.index.get(chain).into_iter().flatten().map(move |i| &self.rules[*i])
    }

    pub fn push(&mut self, rule: Rule) {
        self.index.entry(rule.chain.clone()).or_default().push(self.rules.len());
        self.rules.push(rule);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}: {text}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
    pub text: String,
}

/// Parses restore input / save output. Comments (`#`) and blank lines are skipped.
pub fn parse(text: &str) -> Result<Dump, ParseError> {
    let mut dump = Dump::default();
    let mut table: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let err = |reason: &str| ParseError { line: i + 1, reason: reason.to_string(), text: line.to_string() };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            if table.is_some() {
                return Err(err("table started before COMMIT"));
            }
            table = Some(name.to_string());
            if !dump.tables.contains_key(name) {
                dump.order.push(name.to_string());
            }
            dump.tables.entry(name.to_string()).or_default();
            continue;
        }
        let Some(t) = table.as_ref() else { return Err(err("line outside a table")) };
        if line == "COMMIT" {
            table = None;
            continue;
        }
        let td = dump.tables.get_mut(t).ok_or_else(|| err("unknown table"))?;
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            let name = parts.next().ok_or_else(|| err("chain line without a name"))?;
            td.chains.push(ChainDecl {
                name: name.to_string(),
                policy: parts.next().unwrap_or("-").to_string(),
                counters: parts.next().unwrap_or("[0:0]").to_string(),
            });
            continue;
        }
        let words = split_words(line).map_err(|r| err(&r))?;
        match words.first().map(String::as_str) {
            Some("-X") if words.len() == 2 => td.deleted.push(words[1].clone()),
            Some(op @ ("-A" | "-I" | "-D" | "-R" | "-N")) if words.len() >= 2 => {
                td.push(Rule { op: op.to_string(), chain: words[1].clone(), args: Args::new(&words[2..]), line: i + 1 })
            }
            _ => return Err(err("not a rule")),
        }
    }
    if table.is_some() {
        return Err(ParseError { line: text.lines().count(), reason: "missing COMMIT".into(), text: String::new() });
    }
    // A dump is kept while the sync works: without the vectors' growth slack.
    for t in dump.tables.values_mut() {
        t.rules.shrink_to_fit();
        t.chains.shrink_to_fit();
    }
    Ok(dump)
}

/// Splits a rule into words; a double-quoted word loses its quotes.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').ok_or("unterminated quote")?;
            words.push(q[..end].to_string());
            rest = q[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            words.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    Ok(words)
}

impl Dump {
    /// Writes the dump back as restore text, in the order it was read.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let t = &self.tables[name];
            let _ = writeln!(out, "*{name}");
            for c in &t.chains {
                let _ = writeln!(out, ":{} {} {}", c.name, c.policy, c.counters);
            }
            for r in &t.rules {
                let _ = write!(out, "{} {}", r.op, r.chain);
                for a in &r.args {
                    let _ = write!(out, " {}", quote(a));
                }
                out.push('\n');
            }
            for c in &t.deleted {
                let _ = writeln!(out, "-X {c}");
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_to_text_round_trip_quoted_and_empty_words() {
        let text = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment \"a b\" -j RETURN\n-A KUBE-SERVICES -m comment --comment \"\" -j ACCEPT\nCOMMIT\n";
        let dump = parse(text).unwrap();
        let rules = &dump.tables["nat"].rules;
        assert_eq!(rules[0].args.words(), vec!["-m", "comment", "--comment", "a b", "-j", "RETURN"]);
        assert_eq!(rules[1].args.after("--comment"), Some(""));
        assert_eq!(dump.to_text(), text);
    }
}

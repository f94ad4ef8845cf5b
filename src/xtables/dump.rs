//! The rules a table holds, as read from restore text or `iptables-save` output
//! ([`parse`]) or gathered from rule values: declared chains, rules per chain (indexed),
//! deletions; and back to text ([`Dump::to_text`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::rule::{quote, Args, Chain, Rule as Value};
use super::target::Target;

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
    /// Positions in `rules` per chain (kept by [`TableDump::push`]; a declared chain has an
    /// entry, empty until a rule comes); its keys are the chain names every rule of the
    /// chain, and its declaration, share.
    index: std::collections::HashMap<Chain, Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecl {
    /// Shared with the chain's rules (one allocation per chain).
    pub name: Chain,
    /// `-` and `[0:0]` (every user chain's) cost nothing; see [`known`].
    pub policy: Cow<'static, str>,
    pub counters: Cow<'static, str>,
}

/// A declaration's policy or counters, without an allocation when it is one of the few
/// words nearly every declaration has: a 10,000-service dump declares ~120,000 chains.
fn known(word: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 5] = ["-", "[0:0]", "ACCEPT", "DROP", "RETURN"];
    match KNOWN.iter().find(|k| **k == word) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(word.to_string()),
    }
}

/// One `-A`/`-I` rule: its chain, its match words and its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub op: Op,
    pub chain: Chain,
    /// The match words (everything before the target).
    pub args: Args,
    pub target: Target,
    /// 1-based line in the parsed text (`u32`: with the op, 4 bytes beside the target, so
    /// a rule read from the kernel is 48 bytes, not 56).
    pub line: u32,
}

/// A [`Rule::line`] (past 4 billion lines, the last one).
pub fn line_no(line: usize) -> u32 {
    u32::try_from(line).unwrap_or(u32::MAX)
}

/// What a rule line does to its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Append,
    Insert,
    Delete,
    Replace,
    New,
}

impl Op {
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "-A" => Op::Append,
            "-I" => Op::Insert,
            "-D" => Op::Delete,
            "-R" => Op::Replace,
            "-N" => Op::New,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Append => "-A",
            Op::Insert => "-I",
            Op::Delete => "-D",
            Op::Replace => "-R",
            Op::New => "-N",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
        self.declare_as(name, known("-"), known("[0:0]"));
    }

    fn declare_as(&mut self, name: &str, policy: Cow<'static, str>, counters: Cow<'static, str>) {
        let name = self.chain_name(name);
        self.index.entry(name.clone()).or_default();
        self.chains.push(ChainDecl { name, policy, counters });
    }

    /// Appends a rule value (`-A`).
    pub fn append(&mut self, rule: &Value) {
        self.push(Rule { op: Op::Append, chain: rule.chain.clone(), args: rule.args.clone(), target: rule.target.clone(), line: 0 });
    }

    pub fn chain_names(&self) -> BTreeSet<&str> {
        self.chains.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn rules_of<'a>(&'a self, chain: &str) -> impl Iterator<Item = &'a Rule> + use<'a> {
        self.index.get(chain).into_iter().flatten().map(move |i| &self.rules[*i])
    }

    pub fn push(&mut self, rule: Rule) {
        self.index.entry(rule.chain.clone()).or_default().push(self.rules.len());
        self.rules.push(rule);
    }

    /// The name of `chain` as the rules already read share it (one allocation per chain).
    fn chain_name(&self, chain: &str) -> Chain {
        match self.index.get_key_value(chain) {
            Some((c, _)) => c.clone(),
            None => chain.to_string().into(),
        }
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
    let mut p = Parser::default();
    for raw in text.lines() {
        p.line(raw)?;
    }
    p.finish()
}

/// [`parse`] line by line, for output read as it comes (`iptables-save` of a 10,000-service
/// node is ~45 MB of text, never held whole: [`super::apply::read`]).
#[derive(Debug, Default)]
pub struct Parser {
    dump: Dump,
    table: Option<String>,
    /// Lines read so far.
    line: usize,
}

impl Parser {
    /// Reads one line (its newline already taken off).
    pub fn line(&mut self, raw: &str) -> Result<(), ParseError> {
        self.line += 1;
        let i = self.line - 1;
        let dump = &mut self.dump;
        let line = raw.trim_end();
        let err = |reason: &str| ParseError { line: i + 1, reason: reason.to_string(), text: line.to_string() };
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        if let Some(name) = line.strip_prefix('*') {
            if self.table.is_some() {
                return Err(err("table started before COMMIT"));
            }
            self.table = Some(name.to_string());
            if !dump.tables.contains_key(name) {
                dump.order.push(name.to_string());
            }
            dump.tables.entry(name.to_string()).or_default();
            return Ok(());
        }
        let Some(t) = self.table.as_ref() else { return Err(err("line outside a table")) };
        if line == "COMMIT" {
            self.table = None;
            return Ok(());
        }
        let td = dump.tables.get_mut(t).ok_or_else(|| err("unknown table"))?;
        if let Some(decl) = line.strip_prefix(':') {
            let mut parts = decl.split_whitespace();
            let name = parts.next().ok_or_else(|| err("chain line without a name"))?;
            td.declare_as(name, known(parts.next().unwrap_or("-")), known(parts.next().unwrap_or("[0:0]")));
            return Ok(());
        }
        let mut words = Words(line.trim());
        let first = words.next().transpose().map_err(&err)?;
        let second = words.next().transpose().map_err(&err)?;
        match (first.and_then(Op::parse), first, second) {
            (_, Some("-X"), Some(chain)) if words.0.is_empty() => td.deleted.push(chain.to_string()),
            (Some(op), _, Some(chain)) => {
                let words: Vec<&str> = words.collect::<Result<_, _>>().map_err(&err)?;
                let at = words.iter().position(|w| matches!(*w, "-j" | "--jump" | "-g" | "--goto")).unwrap_or(words.len());
                // A chain jumped to shares its name with its declaration.
                let target = Target::parse(&words[at..], |name| td.chain_name(name));
                let chain = td.chain_name(chain);
                td.push(Rule { op, chain, args: Args::new(&words[..at]), target, line: line_no(i + 1) })
            }
            _ => return Err(err("not a rule")),
        }
        Ok(())
    }

    /// The dump read (an error if a table was left without its `COMMIT`).
    pub fn finish(mut self) -> Result<Dump, ParseError> {
        if self.table.is_some() {
            return Err(ParseError { line: self.line, reason: "missing COMMIT".into(), text: String::new() });
        }
        // A dump is kept while the sync works: without the vectors' growth slack.
        for t in self.dump.tables.values_mut() {
            t.rules.shrink_to_fit();
            t.chains.shrink_to_fit();
        }
        Ok(self.dump)
    }
}

/// Splits a rule into words; a double-quoted word loses its quotes.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    Words(line.trim()).map(|w| w.map(str::to_string).map_err(str::to_string)).collect()
}

/// The words of a line, borrowed (a double-quoted word without its quotes).
struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = Result<&'a str, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0;
        if rest.is_empty() {
            return None;
        }
        if let Some(q) = rest.strip_prefix('"') {
            let Some(end) = q.find('"') else {
                self.0 = "";
                return Some(Err("unterminated quote"));
            };
            self.0 = q[end + 1..].trim_start();
            return Some(Ok(&q[..end]));
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        self.0 = rest[end..].trim_start();
        Some(Ok(&rest[..end]))
    }
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
                for a in r.args.iter().chain(r.target.words()) {
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

    /// A dump of 10,000 services holds about 400,000 of these, and a sync against the
    /// kernel holds two dumps at once.
    const _: () = assert!(std::mem::size_of::<Rule>() <= 48);

    #[test]
    fn parse_and_to_text_round_trip_quoted_and_empty_words() {
        let text = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment \"a b\" -j RETURN\n-A KUBE-SERVICES -m comment --comment \"\" -j ACCEPT\nCOMMIT\n";
        let dump = parse(text).unwrap();
        let rules = &dump.tables["nat"].rules;
        assert_eq!(rules[0].args.words(), vec!["-m", "comment", "--comment", "a b"]);
        assert_eq!(rules[0].target, Target::Return);
        assert_eq!(rules[1].args.after("--comment"), Some(""));
        assert_eq!(rules[1].target, Target::Accept);
        assert_eq!(dump.to_text(), text);
    }
}

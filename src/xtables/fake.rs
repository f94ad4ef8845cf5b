//! An in-memory iptables that applies restore input with `--noflush --counters`
//! semantics and prints `iptables-save`-style canonical text: the fake kernel behind
//! [`super::apply::Restorer`] for tests that need no root. Like the real one, a restore
//! is all-or-nothing, a jump to a missing chain or a `-X` of a chain still referenced
//! fails with the line number, and every call is recorded.

use std::collections::BTreeMap;

use super::apply::{Backend, RestoreError, Restorer};
use super::canon::canonical;
use super::dump::split_words;
use super::rule::quote;
use super::target::Target;
use crate::net::IpFamily;

const BUILTIN: [(&str, &[&str]); 3] = [
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
];
const TARGETS: [&str; 9] = ["ACCEPT", "DROP", "REJECT", "RETURN", "MARK", "DNAT", "SNAT", "MASQUERADE", "LOG"];

/// One table: chains with canonical rules (args after the chain).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeTable {
    pub chains: BTreeMap<String, Vec<Vec<String>>>,
}

impl FakeTable {
    fn get_mut(&mut self, chain: &str) -> Option<&mut Vec<Vec<String>>> {
        self.chains.get_mut(chain)
    }

    fn has(&self, chain: &str) -> bool {
        self.chains.contains_key(chain)
    }
}

/// What a test can inspect afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Save(IpFamily, String),
    Restore(IpFamily, String),
    /// `iptables -C` (family, table, chain).
    Check(IpFamily, String, String),
}

#[derive(Debug, Clone, Default)]
pub struct FakeIptables {
    pub tables: BTreeMap<(IpFamily, String), FakeTable>,
    pub calls: Vec<Call>,
    /// Makes the next restore fail with this message (then clears it).
    pub fail_next: Option<String>,
    /// Makes the next save fail with this message (then clears it).
    pub fail_next_save: Option<String>,
    /// Answers [`Restorer::table_info`] as iptables-legacy does (chains and rules as the
    /// entry count, the saved text's length as the size); off: no summary, as on nft.
    pub summaries: bool,
}

impl FakeIptables {
    pub fn new() -> Self {
        FakeIptables::default()
    }

    fn table(&mut self, family: IpFamily, name: &str) -> &mut FakeTable {
        table_entry(&mut self.tables, family, name)
    }

    /// `iptables-save` text for one table.
    pub fn save_table(&mut self, family: IpFamily, name: &str) -> String {
        let t = self.table(family, name).clone();
        let builtins = BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, c)| *c).unwrap_or(&[]);
        let mut out = format!("*{name}\n");
        let mut names: Vec<&String> = t.chains.keys().collect();
        names.sort_by_key(|n| (!builtins.contains(&n.as_str()), builtins.iter().position(|b| b == n), n.to_string()));
        for n in &names {
            let policy = if builtins.contains(&n.as_str()) { "ACCEPT" } else { "-" };
            out.push_str(&format!(":{n} {policy} [0:0]\n"));
        }
        for n in names {
            for r in &t.chains[n] {
                out.push_str(&format!("-A {n}"));
                for a in r {
                    out.push(' ');
                    out.push_str(&quote(a));
                }
                out.push('\n');
            }
        }
        out.push_str("COMMIT\n");
        out
    }

    /// `iptables -t TABLE -F` by someone else: every chain's rules go, the chains stay.
    pub fn flush_table(&mut self, family: IpFamily, name: &str) {
        if let Some(t) = self.tables.get_mut(&(family, name.to_string())) {
            t.chains.values_mut().for_each(Vec::clear);
        }
    }

    fn apply(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
        let mut work = self.tables.clone();
        let mut current: Option<String> = None;
        for (i, line) in text.lines().enumerate() {
            let err = |reason: &str| RestoreError::Rejected {
                table: current.clone().unwrap_or_default(),
                line: i + 1,
                text: line.to_string(),
                message: reason.to_string(),
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(t) = line.strip_prefix('*') {
                current = Some(t.to_string());
                table_entry(&mut work, family, t);
                continue;
            }
            if line == "COMMIT" {
                check_refs(&work, family, current.as_deref().unwrap_or("")).map_err(|m| err(&m))?;
                current = None;
                continue;
            }
            let tname = current.clone().ok_or_else(|| err("no table"))?;
            let t = work.get_mut(&(family, tname)).ok_or_else(|| err("no table"))?;
            apply_line(t, line, family.is_v6()).map_err(|m| err(&m))?;
        }
        self.tables = work;
        Ok(())
    }
}

fn table_entry<'a>(tables: &'a mut BTreeMap<(IpFamily, String), FakeTable>, family: IpFamily, name: &str) -> &'a mut FakeTable {
    tables.entry((family, name.to_string())).or_insert_with(|| {
        let builtins = BUILTIN.iter().find(|(t, _)| *t == name).map(|(_, c)| *c).unwrap_or(&[]);
        FakeTable { chains: builtins.iter().map(|c| (c.to_string(), Vec::new())).collect() }
    })
}

fn apply_line(t: &mut FakeTable, line: &str, v6: bool) -> Result<(), String> {
    if let Some(decl) = line.strip_prefix(':') {
        let name = decl.split_whitespace().next().ok_or("bad chain line")?.to_string();
        match t.get_mut(&name) {
            Some(rules) => rules.clear(),
            None => {
                t.chains.insert(name, Vec::new());
            }
        }
        return Ok(());
    }
    let w = split_words(line)?;
    let (op, chain) = (w.first().map(String::as_str).unwrap_or(""), w.get(1).cloned().unwrap_or_default());
    match op {
        "-X" => {
            let referenced = t.chains.iter().any(|(_, rs)| rs.iter().any(|r| target(r).as_deref() == Some(chain.as_str())));
            if referenced {
                return Err(format!("chain {chain} is still referenced"));
            }
            t.chains.remove(&chain).map(|_| ()).ok_or_else(|| format!("no chain {chain}"))
        }
        "-A" | "-I" | "-D" => {
            let rules = t.get_mut(&chain).ok_or_else(|| format!("no chain {chain}"))?;
            let rest = &w[2..];
            let (pos, args) = match rest.first().and_then(|s| s.parse::<usize>().ok()) {
                Some(n) if op != "-A" => (Some(n), &rest[1..]),
                _ => (None, rest),
            };
            let args = canonical(args, v6);
            match op {
                "-A" => rules.push(args),
                "-I" => {
                    let at = pos.unwrap_or(1);
                    if at == 0 || at > rules.len() + 1 {
                        return Err(format!("index {at} out of range"));
                    }
                    rules.insert(at - 1, args);
                }
                _ => match pos {
                    Some(n) if n >= 1 && n <= rules.len() => {
                        rules.remove(n - 1);
                    }
                    Some(n) => return Err(format!("index {n} out of range")),
                    None => {
                        let i = rules.iter().position(|r| *r == args).ok_or("no such rule")?;
                        rules.remove(i);
                    }
                },
            }
            Ok(())
        }
        _ => Err("unknown command".into()),
    }
}

/// The chain a rule (canonical words) jumps to.
fn target(rule: &[String]) -> Option<String> {
    Target::split(rule).1.chain().map(str::to_string)
}

fn check_refs(work: &BTreeMap<(IpFamily, String), FakeTable>, family: IpFamily, table: &str) -> Result<(), String> {
    let Some(t) = work.get(&(family, table.to_string())) else { return Ok(()) };
    for (chain, rules) in &t.chains {
        for r in rules {
            if let Some(j) = target(r) {
                if !TARGETS.contains(&j.as_str()) && !t.has(&j) {
                    return Err(format!("{chain}: jump to missing chain {j}"));
                }
            }
        }
    }
    Ok(())
}

impl Restorer for FakeIptables {
    fn backend(&self) -> Backend {
        Backend::Nft
    }

    fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError> {
        self.calls.push(Call::Save(family, table.to_string()));
        if let Some(message) = self.fail_next_save.take() {
            return Err(RestoreError::Failed { binary: "iptables-save".into(), message });
        }
        Ok(self.save_table(family, table))
    }

    fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError> {
        let names: Vec<String> = self.tables.keys().filter(|(f, _)| *f == family).map(|(_, t)| t.clone()).collect();
        Ok(names.iter().map(|t| self.save_table(family, t)).collect())
    }

    fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
        self.calls.push(Call::Restore(family, text.to_string()));
        if let Some(message) = self.fail_next.take() {
            return Err(RestoreError::Rejected { table: String::new(), line: 1, text: String::new(), message });
        }
        self.apply(family, text)
    }

    fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError> {
        self.calls.push(Call::Check(family, table.to_string(), chain.to_string()));
        let args: Vec<String> = rule.iter().map(|a| a.to_string()).collect();
        let wanted = canonical(&args, family.is_v6());
        let rules = self.tables.get(&(family, table.to_string())).and_then(|t| t.chains.get(chain));
        Ok(rules.is_some_and(|rs| rs.contains(&wanted)))
    }

    fn table_info(&mut self, family: IpFamily, table: &str) -> Result<crate::xtables::tableinfo::TableInfo, crate::xtables::tableinfo::ProbeError> {
        if !self.summaries {
            return Err(crate::xtables::tableinfo::ProbeError::Unsupported);
        }
        let text = self.save_table(family, table);
        let entries = text.lines().filter(|l| l.starts_with(':') || l.starts_with("-A")).count() as u32;
        Ok(crate::xtables::tableinfo::TableInfo { valid_hooks: 0, hook_entry: [0; 5], underflow: [0; 5], num_entries: entries, size: text.len() as u32 })
    }
}

/// A fake kernel a test keeps a handle on after handing it to a proxier.
pub type SharedFake = std::sync::Arc<std::sync::Mutex<FakeIptables>>;

impl Restorer for SharedFake {
    fn backend(&self) -> Backend {
        Backend::Nft
    }
    fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError> {
        lock(self).save(family, table)
    }
    fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError> {
        lock(self).save_all(family)
    }
    fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
        lock(self).restore(family, text)
    }
    fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError> {
        lock(self).check(family, table, chain, rule)
    }
    fn table_info(&mut self, family: IpFamily, table: &str) -> Result<crate::xtables::tableinfo::TableInfo, crate::xtables::tableinfo::ProbeError> {
        lock(self).table_info(family, table)
    }
}

fn lock(shared: &SharedFake) -> std::sync::MutexGuard<'_, FakeIptables> {
    // A test that panicked while holding it has failed already; its state is still readable.
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

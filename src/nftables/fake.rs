//! An in-memory nftables behind [`NftWrite`] and [`NftRead`] for tests that need no root:
//! it runs the commands svcproxy writes (`add`/`flush`/`delete` of tables, chains, sets,
//! maps, rules and elements), all-or-nothing per transaction like the kernel, refuses what
//! the kernel refuses (a rule in a missing chain, a flush of a missing set, a map key
//! added twice with another value), records every call, and lists a table in `nft list`'s
//! layout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::apply::{Names, NftError, NftRead, NftWrite, Part, Via};
use super::delta::{self, LiveTable};
use super::listing;
use super::model::{NftFamily, Script};
use crate::net::IpFamily;
use super::stmt::{self, Action, Stmt, Verdict, Vmap};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Chain {
    spec: String,
    rules: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Set {
    is_map: bool,
    spec: String,
    /// By key, the element as written (key, comment, value).
    elements: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Table {
    spec: String,
    /// In order of creation, as nft lists them.
    chains: Vec<(String, Chain)>,
    sets: Vec<(String, Set)>,
    /// Named counters, in order of creation (their counts are not faked).
    counters: Vec<String>,
}

impl Table {
    fn chain(&mut self, name: &str) -> Option<&mut Chain> {
        self.chains.iter_mut().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// For a jump or goto, whether its chain is here (`None`: another verdict).
    fn chain_of(&self, v: &Verdict) -> Option<Option<&Chain>> {
        match v {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(self.chains.iter().find(|(n, _)| n == c).map(|(_, c)| c)),
            _ => None,
        }
    }

    fn set(&mut self, name: &str) -> Option<&mut Set> {
        self.sets.iter_mut().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}

/// A call, for tests to inspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Run(String),
    List(IpFamily),
    Names(IpFamily),
    Canonical(IpFamily),
}

#[derive(Debug, Clone, Default)]
pub struct FakeNft {
    /// By family (`ip`, `ip6`): the `kube-proxy` table, if created (other tables are not kept).
    tables: BTreeMap<&'static str, Table>,
    pub calls: Vec<Call>,
    /// The next `run` fails with this message, changing nothing.
    pub fail_next: Option<String>,
    /// After this many more successful `run`s, one fails (changing nothing).
    pub fail_after: Option<usize>,
    /// What [`NftWrite::batch_lines`] answers (`None`: two transactions, as through `nft -f`).
    pub batch_lines: Option<usize>,
    /// Whether transactions are only recorded, not applied: no table is kept (a large
    /// cluster's transactions, written out to be timed elsewhere: `bench::nft`).
    pub record_only: bool,
    /// Whether [`NftRead::read_for_sync`] reads the table's contents (as the netlink client
    /// does) or its names alone.
    pub live_reads: bool,
}

/// A fake shared with the test that handed it over.
pub type SharedNft = Arc<Mutex<FakeNft>>;

impl FakeNft {
    pub fn new() -> Self {
        FakeNft::default()
    }

    pub fn shared() -> SharedNft {
        Arc::new(Mutex::new(FakeNft::new()))
    }

    /// The table as `nft list table` prints it (`None`: no table).
    pub fn listing(&self, family: IpFamily) -> Option<String> {
        self.tables.get(family.nft_word()).map(|t| list(family, t))
    }

    /// Runs `text` as one transaction, recorded in [`FakeNft::calls`].
    pub fn run(&mut self, text: &str) -> Result<(), NftError> {
        self.calls.push(Call::Run(text.to_string()));
        if self.record_only {
            return Ok(());
        }
        self.apply(text)
    }

    /// The transactions run since the last call, taken out of [`FakeNft::calls`].
    pub fn take_runs(&mut self) -> Vec<String> {
        std::mem::take(&mut self.calls).into_iter().filter_map(|c| if let Call::Run(t) = c { Some(t) } else { None }).collect()
    }

    /// Applies `text` all-or-nothing.
    fn apply(&mut self, text: &str) -> Result<(), NftError> {
        if let Some(message) = self.fail_next.take() {
            return Err(NftError::Failed { command: "nft -f -".into(), message });
        }
        match self.fail_after {
            Some(0) => {
                self.fail_after = None;
                return Err(NftError::Failed { command: "nft -f -".into(), message: "injected failure".into() });
            }
            Some(n) => self.fail_after = Some(n - 1),
            None => {}
        }
        let mut next = self.tables.clone();
        for (i, line) in text.lines().enumerate() {
            command(&mut next, line.trim()).map_err(|message| NftError::Rejected { line: i + 1, text: line.to_string(), message })?;
        }
        self.tables = next;
        Ok(())
    }

    /// The table as the netlink client reads it for a full sync, when [`FakeNft::live_reads`].
    fn live(&self, family: IpFamily) -> Option<LiveTable> {
        let t = self.tables.get(family.nft_word()).filter(|_| self.live_reads)?;
        let head = format!("{} kube-proxy", family.nft_word());
        let chains = t.chains.iter().map(|(n, c)| (n.as_str(), c.rules.iter().map(|r| format!("add rule {head} {n} {r}\n")).collect::<String>()));
        let sets = t.sets.iter().filter(|(_, s)| !s.spec.contains("dynamic")).map(|(n, s)| (n.as_str(), s.elements.values().map(|e| format!("add element {head} {n} {{ {e} }}\n")).collect::<String>()));
        Some(delta::from_text(chains, sets))
    }
}

impl NftWrite for FakeNft {
    fn run(&mut self, text: &str, _: Part) -> Result<Via, NftError> {
        FakeNft::run(self, text).map(|()| Via::Nft)
    }

    fn run_script(&mut self, script: &Script<'_>, _: Part) -> Result<Via, NftError> {
        FakeNft::run(self, script).map(|()| Via::Nft)
    }

    fn batch_lines(&self) -> Option<usize> {
        self.batch_lines
    }

    fn full_sync_done(&mut self, _: IpFamily) {}
}

impl NftRead for FakeNft {
    fn list(&mut self, family: IpFamily) -> Result<Option<String>, NftError> {
        self.calls.push(Call::List(family));
        Ok(self.listing(family))
    }

    fn names(&mut self, family: IpFamily) -> Result<Option<Names>, NftError> {
        self.calls.push(Call::Names(family));
        Ok(self.tables.get(family.nft_word()).map(|t| Names {
            chains: t.chains.iter().map(|(n, _)| n.clone()).collect(),
            sets: t.sets.iter().filter(|(_, s)| !s.is_map).map(|(n, _)| n.clone()).collect(),
        }))
    }

    fn read_for_sync(&mut self, family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError> {
        let Some(names) = self.names(family)? else { return Ok(None) };
        Ok(Some((names, self.live(family))))
    }

    fn canonical(&mut self, family: IpFamily, text: &str) -> Result<String, NftError> {
        self.calls.push(Call::Canonical(family));
        let mut scratch = FakeNft::new();
        scratch.apply(text)?;
        Ok(scratch.listing(family).unwrap_or_default())
    }
}

// Every method forwarded to the fake's own (none left to a default).
impl NftWrite for SharedNft {
    fn run(&mut self, text: &str, part: Part) -> Result<Via, NftError> {
        NftWrite::run(&mut *lock(self), text, part)
    }
    fn run_script(&mut self, script: &Script<'_>, part: Part) -> Result<Via, NftError> {
        lock(self).run_script(script, part)
    }
    fn batch_lines(&self) -> Option<usize> {
        lock(self).batch_lines()
    }
    fn full_sync_done(&mut self, family: IpFamily) {
        lock(self).full_sync_done(family)
    }
}

impl NftRead for SharedNft {
    fn list(&mut self, family: IpFamily) -> Result<Option<String>, NftError> {
        lock(self).list(family)
    }
    fn names(&mut self, family: IpFamily) -> Result<Option<Names>, NftError> {
        lock(self).names(family)
    }
    fn read_for_sync(&mut self, family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError> {
        lock(self).read_for_sync(family)
    }
    fn canonical(&mut self, family: IpFamily, text: &str) -> Result<String, NftError> {
        lock(self).canonical(family, text)
    }
}

fn lock(s: &SharedNft) -> std::sync::MutexGuard<'_, FakeNft> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn family_key(word: &str) -> Result<&'static str, String> {
    match word {
        "ip" => Ok("ip"),
        "ip6" => Ok("ip6"),
        other => Err(format!("family {other} is not faked")),
    }
}

/// `WORD WORD NAME rest`: (family, object name, rest) of a command's arguments.
fn target(args: &str) -> Result<(&'static str, &str, &str), String> {
    let mut parts = args.splitn(4, ' ');
    let family = family_key(parts.next().unwrap_or(""))?;
    let _table = parts.next().ok_or("no table")?;
    let name = parts.next().unwrap_or("");
    Ok((family, name, parts.next().unwrap_or("").trim()))
}

const MISSING: &str = "Error: No such file or directory";

fn command(tables: &mut BTreeMap<&'static str, Table>, line: &str) -> Result<(), String> {
    if line.is_empty() || line.starts_with('#') {
        return Ok(());
    }
    let (verb, rest) = line.split_once(' ').ok_or("not a command")?;
    let (kind, args) = rest.split_once(' ').ok_or("not a command")?;
    if kind == "table" {
        let mut parts = args.splitn(3, ' ');
        let family = family_key(parts.next().unwrap_or(""))?;
        let _name = parts.next();
        return match verb {
            "add" => {
                let t = tables.entry(family).or_default();
                t.spec = inner(parts.next().unwrap_or(""));
                Ok(())
            }
            "delete" => tables.remove(family).map(|_| ()).ok_or_else(|| MISSING.to_string()),
            "flush" => {
                let t = tables.get_mut(family).ok_or(MISSING)?;
                t.chains.iter_mut().for_each(|(_, c)| c.rules.clear());
                t.sets.iter_mut().for_each(|(_, s)| s.elements.clear());
                Ok(())
            }
            _ => Err(format!("{verb} table is not faked")),
        };
    }
    let (family, name, rest) = target(args)?;
    let t = tables.get_mut(family).ok_or(MISSING)?;
    match (verb, kind) {
        ("add", "chain") => {
            if t.chain(name).is_none() {
                t.chains.push((name.to_string(), Chain { spec: inner(rest), rules: Vec::new() }));
            }
        }
        ("add", "set" | "map") => {
            if t.set(name).is_none() {
                t.sets.push((name.to_string(), Set { is_map: kind == "map", spec: inner(rest), elements: BTreeMap::new() }));
            }
        }
        ("add", "counter") => {
            if !t.counters.iter().any(|c| c == name) {
                t.counters.push(name.to_string());
            }
        }
        ("delete", "counter") => {
            let i = t.counters.iter().position(|c| c == name).ok_or(MISSING)?;
            if referenced(t, &format!("\"{name}\"")) {
                return Err("Error: Device or resource busy".into());
            }
            t.counters.remove(i);
        }
        ("flush", "chain") => t.chain(name).ok_or(MISSING)?.rules.clear(),
        ("flush", "set" | "map") => t.set(name).ok_or(MISSING)?.elements.clear(),
        ("delete", "chain") => {
            let i = t.chains.iter().position(|(n, _)| n == name).ok_or(MISSING)?;
            if !t.chains[i].1.rules.is_empty() || referenced(t, name) {
                return Err("Error: Device or resource busy".into());
            }
            t.chains.remove(i);
        }
        ("delete", "set" | "map") => {
            let i = t.sets.iter().position(|(n, _)| n == name).ok_or(MISSING)?;
            t.sets.remove(i);
        }
        ("add", "rule") => {
            // Read as values (the renderer's words or the kernel's): every chain a verdict
            // names and every named counter must exist. nft takes statements outside
            // kube-proxy's vocabulary too; those are kept unchecked.
            let stmts = stmt::parse_listed(rest).map(|b| b.stmts).unwrap_or_default();
            for s in &stmts {
                let missing = match s {
                    Stmt::Verdict(v) => t.chain_of(v).is_some_and(|c| c.is_none()),
                    Stmt::Vmap(Vmap::Numgen { arms, .. }) => arms.iter().any(|(_, v)| t.chain_of(v).is_some_and(|c| c.is_none())),
                    Stmt::Action(Action::Counter { name }) => !t.counters.iter().any(|n| n == name),
                    _ => false,
                };
                if missing {
                    return Err(MISSING.into());
                }
            }
            t.chain(name).ok_or(MISSING)?.rules.push(rest.to_string());
        }
        ("add", "element") => {
            let set = t.set(name).ok_or(MISSING)?;
            for e in listing::split_elements(&inner_braces(rest)) {
                let key = element_key(&e);
                match set.elements.get(&key) {
                    Some(old) if set.is_map && element_value(old) != element_value(&e) => return Err("Error: File exists".into()),
                    Some(_) => {}
                    None => {
                        set.elements.insert(key, e);
                    }
                }
            }
        }
        ("delete", "element") => {
            let set = t.set(name).ok_or(MISSING)?;
            for e in listing::split_elements(&inner_braces(rest)) {
                set.elements.remove(&element_key(&e)).ok_or(MISSING)?;
            }
        }
        _ => return Err(format!("{verb} {kind} is not faked")),
    }
    Ok(())
}

/// Whether a rule or a map element of the table names the chain.
fn referenced(t: &Table, chain: &str) -> bool {
    let names = |s: &str| s.split_whitespace().any(|w| w == chain);
    t.chains.iter().any(|(_, c)| c.rules.iter().any(|r| names(r))) || t.sets.iter().any(|(_, s)| s.elements.values().any(|e| names(e)))
}

/// `{ a ; b ; }` → `a ; b` (nothing when there are no braces).
fn inner(spec: &str) -> String {
    spec.trim().trim_start_matches('{').trim_end_matches('}').trim().trim_end_matches(';').trim().to_string()
}

fn inner_braces(body: &str) -> String {
    body.trim().trim_start_matches('{').trim_end_matches('}').trim().to_string()
}

/// An element's key: what comes before its comment or its value.
fn element_key(e: &str) -> String {
    let end = [e.find(" comment "), e.find(" : ")].into_iter().flatten().min().unwrap_or(e.len());
    e[..end].trim().to_string()
}

fn element_value(e: &str) -> &str {
    e.rsplit_once(" : ").map_or("", |(_, v)| v.trim())
}

/// The table in `nft list table`'s layout: counters, sets and maps, then chains.
fn list(family: IpFamily, t: &Table) -> String {
    let mut out = format!("table {} kube-proxy {{\n", family.nft_word());
    for part in t.spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        out.push_str(&format!("\t{part}\n"));
    }
    for name in &t.counters {
        out.push_str(&format!("\tcounter {name} {{\n\t}}\n"));
    }
    for (name, s) in &t.sets {
        out.push_str(&format!("\t{} {name} {{\n", if s.is_map { "map" } else { "set" }));
        for part in s.spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            out.push_str(&format!("\t\t{part}\n"));
        }
        if !s.elements.is_empty() {
            let all: Vec<&str> = s.elements.values().map(String::as_str).collect();
            out.push_str(&format!("\t\telements = {{ {} }}\n", all.join(",\n\t\t\t     ")));
        }
        out.push_str("\t}\n");
    }
    for (name, c) in &t.chains {
        out.push_str(&format!("\tchain {name} {{\n"));
        for part in c.spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            out.push_str(&format!("\t\t{part}\n"));
        }
        for r in &c.rules {
            out.push_str(&format!("\t\t{r}\n"));
        }
        out.push_str("\t}\n");
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_is_all_or_nothing_and_names_the_refused_line() {
        let mut nft = FakeNft::new();
        nft.run("add table ip kube-proxy { comment \"x\" ; }\nadd chain ip kube-proxy a\nadd rule ip kube-proxy a accept\n").unwrap();
        let before = nft.listing(IpFamily::V4).unwrap();
        let e = nft.run("flush chain ip kube-proxy a\nadd rule ip kube-proxy a jump nowhere\n").unwrap_err();
        assert!(matches!(e, NftError::Rejected { line: 2, .. }), "{e:?}");
        assert_eq!(nft.listing(IpFamily::V4).unwrap(), before, "nothing of the refused transaction stays");
        assert!(before.contains("\tchain a {\n\t\taccept\n\t}\n"), "{before}");
        assert_eq!(nft.names(IpFamily::V6).unwrap(), None);
    }

    #[test]
    fn every_chain_and_counter_a_rule_names_must_exist() {
        let mut nft = FakeNft::new();
        nft.run("add table ip kube-proxy\nadd chain ip kube-proxy a\nadd chain ip kube-proxy b\nadd counter ip kube-proxy n\n").unwrap();
        for missing in ["numgen random mod 2 vmap { 0 : goto a , 1 : goto gone }", "meta mark set meta mark | 0x00004000 jump gone", "counter name \"gone\" reject"] {
            let e = nft.run(&format!("add rule ip kube-proxy b {missing}\n")).unwrap_err();
            assert!(matches!(&e, NftError::Rejected { message, .. } if message == MISSING), "{missing}: {e:?}");
        }
        nft.run("add rule ip kube-proxy b numgen random mod 2 vmap { 0 : goto a , 1 : goto b }\nadd rule ip kube-proxy b counter name \"n\" reject\n").unwrap();
        nft.run("add rule ip kube-proxy b counter\n").unwrap();
        assert!(nft.listing(IpFamily::V4).unwrap().contains("\t\tcounter\n"), "a statement outside the vocabulary is kept as written");
    }

    #[test]
    fn map_elements_are_keyed_and_a_chain_in_use_cannot_go() {
        let mut nft = FakeNft::new();
        let setup = "add table ip kube-proxy\nadd chain ip kube-proxy c\nadd map ip kube-proxy m { type ipv4_addr : verdict ; }\nadd element ip kube-proxy m { 10.0.0.1 comment \"a\" : goto c }\n";
        nft.run(setup).unwrap();
        assert!(nft.run("add element ip kube-proxy m { 10.0.0.1 : drop }\n").is_err(), "same key, other value");
        assert!(nft.run("delete chain ip kube-proxy c\n").is_err(), "still in a map element");
        nft.run("delete element ip kube-proxy m { 10.0.0.1 }\ndelete chain ip kube-proxy c\n").unwrap();
        assert_eq!(nft.names(IpFamily::V4).unwrap().unwrap(), Names::default());
    }
}

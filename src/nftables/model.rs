//! nftables objects as knftables models them, as values: a table's chains, sets, maps,
//! rules (chain + statement values, and the text written from them) and elements (set or map + key + value +
//! comment, values of [`super::element`]). [`write`] is the one place that frames them as `nft -f` input.

use std::fmt::Write as _;

use serde::Serialize;

use super::stmt::{Body, Stmts, Verdict};
use crate::net::IpFamily;

/// What nftables calls an IP family: the table family word (`ip`, `ip6`) and the set/map
/// key type of one address. A trait here, because `net` knows nothing of nftables.
pub trait NftFamily {
    fn nft_word(self) -> &'static str;
    /// The set/map key type of one address (`ipv4_addr`/`ipv6_addr`).
    fn addr_type(self) -> &'static str;
}

impl NftFamily for IpFamily {
    fn nft_word(self) -> &'static str {
        match self {
            IpFamily::V4 => "ip",
            IpFamily::V6 => "ip6",
        }
    }

    fn addr_type(self) -> &'static str {
        match self {
            IpFamily::V4 => "ipv4_addr",
            IpFamily::V6 => "ipv6_addr",
        }
    }
}

/// The IP family a table family word names (`ip`, `ip6`); `None` for any other word.
pub fn family_of_word(w: &str) -> Option<IpFamily> {
    match w {
        "ip" => Some(IpFamily::V4),
        "ip6" => Some(IpFamily::V6),
        _ => None,
    }
}

/// A table's family as `nft` words it (`render --output json` writes `"family": "ip"`).
fn serialize_nft_word<S: serde::Serializer>(family: &IpFamily, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(family.nft_word())
}

/// A base chain's hook: what kind, where, and at which priority (as a number, the form
/// `nft list` shows: `dstnat` is -100, `srcnat` 100, `filter` 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hook {
    pub kind: &'static str,
    pub hook: &'static str,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chain {
    pub name: String,
    pub hook: Option<Hook>,
    pub comment: Option<String>,
}

impl Chain {
    pub fn regular(name: impl Into<String>) -> Self {
        Chain { name: name.into(), hook: None, comment: None }
    }
}

/// A set, or (with `verdict_map`) a map whose `kind` already names the value type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Set {
    pub name: String,
    pub is_map: bool,
    /// `ipv4_addr`, `ipv4_addr . inet_proto . inet_service : verdict`, …
    pub kind: String,
    pub flags: Vec<&'static str>,
    /// Element timeout in seconds.
    pub timeout: Option<u32>,
    pub comment: Option<String>,
}

impl Set {
    pub fn plain(name: impl Into<String>, kind: impl Into<String>, comment: Option<&str>) -> Self {
        Set { name: name.into(), is_map: false, kind: kind.into(), flags: Vec::new(), timeout: None, comment: comment.map(str::to_owned) }
    }

    pub fn map(name: impl Into<String>, kind: impl Into<String>, comment: Option<&str>) -> Self {
        Set { is_map: true, ..Set::plain(name, kind, comment) }
    }

    /// A set the kernel adds to at run time (session affinity): a sync must not flush it.
    pub fn is_dynamic(&self) -> bool {
        self.flags.contains(&"dynamic")
    }
}

/// A rule: its chain and its statements' values ([`Rule::of`]: by the renderer, or read
/// from a listing); `rule` and `comment` are the text written from them, kept beside them
/// because rules are compared, hashed into chains' equality and written by that text
/// (all three private, read with [`Rule::stmts`], [`Rule::text`] and [`Rule::comment`],
/// so that the values and the text cannot disagree).
#[derive(Debug, Clone, Serialize)]
pub struct Rule {
    pub chain: String,
    /// The statements' words, without the comment (written from `stmts`).
    rule: String,
    /// The comment (written from `stmts`).
    comment: Option<String>,
    #[serde(skip)]
    stmts: Body,
}

/// Rules are their text: the text is written from the values, so a rule equals the same
/// rule read back from the kernel.
impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        (&self.chain, &self.rule, &self.comment) == (&other.chain, &other.rule, &other.comment)
    }
}

impl Eq for Rule {}

impl Rule {
    /// A rule built as values; its text is written from them.
    pub fn of(chain: impl Into<String>, body: Body) -> Self {
        Rule { chain: chain.into(), rule: Stmts(&body.stmts).to_string(), comment: body.comment.clone(), stmts: body }
    }

    /// The statements' words as `nft -f` takes them, without the comment.
    pub fn text(&self) -> &str {
        &self.rule
    }

    pub fn comment(&self) -> Option<&str> {
        self.comment.as_deref()
    }

    /// The statements' values the text was written from.
    pub fn stmts(&self) -> &Body {
        &self.stmts
    }

    /// Tests: a rule written as `nft -f` words, read into values (a form outside the
    /// vocabulary panics, naming the word).
    #[cfg(any(test, feature = "testing"))]
    pub fn new(chain: impl Into<String>, rule: impl AsRef<str>) -> Self {
        let rule = rule.as_ref();
        let body = super::stmt::parse_body(rule).unwrap_or_else(|e| panic!("{rule:?}: {e}"));
        Rule::of(chain, body)
    }

    /// Tests: this rule with `text` for its words, which need not say what its values
    /// do (to show that a writer encodes the values, not the words).
    #[cfg(test)]
    pub fn with_text(self, text: &str) -> Self {
        Rule { rule: text.to_owned(), ..self }
    }

    /// Tests: [`Rule::new`] with a comment.
    #[cfg(any(test, feature = "testing"))]
    pub fn commented(chain: impl Into<String>, rule: impl AsRef<str>, comment: &str) -> Self {
        let Rule { chain, stmts, .. } = Rule::new(chain, rule);
        Rule::of(chain, Body { comment: Some(comment.to_owned()), ..stmts })
    }
}

pub use super::element::{Element, Key, Part};

/// Everything of one family's `kube-proxy` table, in the order it was declared.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Objects {
    pub chains: Vec<Chain>,
    pub sets: Vec<Set>,
    pub rules: Vec<Rule>,
    pub elements: Vec<Element>,
    /// Named counters (`add counter FAMILY TABLE NAME`): declared, never flushed, so a
    /// sync keeps their counts.
    pub counters: Vec<String>,
}

impl Objects {
    pub fn chain(&mut self, c: Chain) {
        self.chains.push(c);
    }

    pub fn rule(&mut self, r: Rule) {
        self.rules.push(r);
    }

    /// An element of `set`: a map's when it has a `value`.
    pub fn element(&mut self, set: &str, key: Key, value: Option<Verdict>, comment: Option<&str>) {
        self.elements.push(Element { set: set.to_owned(), key, value, comment: comment.map(str::to_owned) });
    }

    pub fn extend(&mut self, other: &Objects) {
        self.chains.extend(other.chains.iter().cloned());
        self.sets.extend(other.sets.iter().cloned());
        self.rules.extend(other.rules.iter().cloned());
        self.elements.extend(other.elements.iter().cloned());
        self.counters.extend(other.counters.iter().cloned());
    }
}

/// A table: its family, name and comment, and its objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Table {
    #[serde(serialize_with = "serialize_nft_word")]
    pub family: IpFamily,
    pub name: &'static str,
    pub comment: &'static str,
    pub objects: Objects,
}

/// How [`write`] frames a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `nft -f` input that makes the table hold exactly these objects' rules and elements:
    /// every chain and non-dynamic set/map is added, then flushed, then filled.
    Transaction,
    /// The objects alone, as knftables' fake `Dump()` lists a table (kube-proxy's tests
    /// compare that form).
    Dump,
}

/// Writes `table` as `nft` commands: the table, chains, sets and maps, (flushes), rules,
/// elements.
pub fn write(table: &Table, form: Form) -> String {
    script(table, form).into_text()
}

/// [`write`], its rules kept as values beside the text ([`Script`]).
pub fn script(table: &Table, form: Form) -> Script<'_> {
    let mut out = Script::new(table.family, table.name);
    let head = declare(out.text_mut(), table);
    let o = &table.objects;
    if form == Form::Transaction {
        for c in &o.chains {
            let _ = writeln!(out, "flush chain {head} {}", c.name);
        }
        flush_sets(&mut out, &head, &o.sets);
    }
    for r in &o.rules {
        out.rule(r);
    }
    for e in &o.elements {
        out.element(e);
    }
    out
}

/// One transaction of one table: its `nft -f` text, and each of its `add rule` lines' rule
/// and `add element`/`delete element` lines' element, the values the line was written
/// from, so that the netlink encoder encodes those values instead of reading the words
/// again. Only appended to: the lines it records stay where they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script<'r> {
    family: IpFamily,
    table: String,
    text: String,
    /// Each rule line's byte offset in `text`, and its rule, in the order of the text.
    rules: Vec<(usize, &'r Rule)>,
    /// Each element line's byte offset in `text`, and its element, in the order of the text.
    elements: Vec<(usize, ElementOp<'r>)>,
}

/// What an element line does: add an element, or delete the one of this set and key
/// (only they are written; boxed, so that the many adds take two words each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElementOp<'r> {
    Add(&'r Element),
    Delete(Box<Element>),
}

impl ElementOp<'_> {
    /// The element added, or the one whose set and key are deleted.
    pub fn element(&self) -> &Element {
        match self {
            ElementOp::Add(e) => e,
            ElementOp::Delete(e) => e.as_ref(),
        }
    }
}

impl<'r> Script<'r> {
    pub fn new(family: IpFamily, table: &str) -> Self {
        Script { family, table: table.to_owned(), text: String::new(), rules: Vec::new(), elements: Vec::new() }
    }

    pub fn family(&self) -> IpFamily {
        self.family
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn into_text(self) -> String {
        self.text
    }

    /// The text, for lines that hold no rule (appended only).
    pub(crate) fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }

    /// The rule lines: byte offset in [`Script::text`] and rule, in order.
    pub fn rules(&self) -> &[(usize, &'r Rule)] {
        &self.rules
    }

    pub fn push_str(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// `add rule FAMILY TABLE CHAIN …`, `r` recorded for that line.
    pub fn rule(&mut self, r: &'r Rule) {
        self.rules.push((self.text.len(), r));
        rule_line(&mut self.text, format_args!("{} {}", self.family.nft_word(), self.table), r);
    }

    /// The element lines: byte offset in [`Script::text`] and what the line does, in order.
    pub fn elements(&self) -> &[(usize, ElementOp<'r>)] {
        &self.elements
    }

    /// `add element FAMILY TABLE SET { … }`, `e` recorded for that line.
    pub fn element(&mut self, e: &'r Element) {
        self.elements.push((self.text.len(), ElementOp::Add(e)));
        element_line(&mut self.text, format_args!("{} {}", self.family.nft_word(), self.table), e);
    }

    /// `delete element FAMILY TABLE SET { KEY }`, recorded.
    pub fn delete_element(&mut self, set: &str, key: Key) {
        let (at, e) = (self.text.len(), Element { set: set.to_owned(), key, value: None, comment: None });
        let _ = writeln!(self.text, "delete element {} {} {} {{ {e} }}", self.family.nft_word(), self.table, e.set);
        self.elements.push((at, ElementOp::Delete(Box::new(e))));
    }

    /// `other` (of the same table) after this one's lines.
    pub fn append(&mut self, other: &Script<'r>) {
        let at = self.text.len();
        self.text.push_str(&other.text);
        self.rules.extend(other.rules.iter().map(|&(off, r)| (at + off, r)));
        self.elements.extend(other.elements.iter().map(|(off, e)| (at + off, e.clone())));
    }
}

impl std::ops::Deref for Script<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for Script<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::fmt::Write for Script<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.text.push_str(s);
        Ok(())
    }
}

/// Writes the table, its chains, its sets and maps and its named counters (`add` commands, which change
/// nothing of an object that is already there); returns the `FAMILY TABLE` head.
pub(crate) fn declare(out: &mut String, table: &Table) -> String {
    declare_but(out, table, |_| false)
}

/// [`declare`] without the lines of the regular chains (no hook, no comment: the line is
/// `add chain HEAD NAME`) that `leave_out` names.
pub(crate) fn declare_but(out: &mut String, table: &Table, leave_out: impl Fn(&str) -> bool) -> String {
    let head = format!("{} {}", table.family.nft_word(), table.name);
    let _ = writeln!(out, "add table {head} {{ comment {} ; }}", quote(table.comment));
    let o = &table.objects;
    for c in &o.chains {
        let spec = chain_spec(c);
        if spec.is_empty() && !c.name.contains(' ') && leave_out(&c.name) {
            continue;
        }
        let _ = writeln!(out, "add chain {head} {}{spec}", c.name);
    }
    for s in &o.sets {
        let _ = writeln!(out, "add {} {head} {} {}", kind_word(s), s.name, set_spec(s));
    }
    for c in &o.counters {
        let _ = writeln!(out, "add counter {head} {c}");
    }
    head
}

/// Flushes every set and map but the dynamic (session-affinity) ones.
pub(crate) fn flush_sets<'s>(out: &mut impl std::fmt::Write, head: &str, sets: impl IntoIterator<Item = &'s Set>) {
    for s in sets.into_iter().filter(|s| !s.is_dynamic()) {
        let _ = writeln!(out, "flush {} {head} {}", kind_word(s), s.name);
    }
}

pub(crate) fn rule_line(out: &mut String, head: impl std::fmt::Display, r: &Rule) {
    let _ = write!(out, "add rule {head} {} {}", r.chain, r.rule);
    if let Some(c) = &r.comment {
        let _ = write!(out, " comment {}", quote(c));
    }
    out.push('\n');
}

pub(crate) fn element_line(out: &mut impl std::fmt::Write, head: impl std::fmt::Display, e: &Element) {
    let _ = writeln!(out, "add element {head} {} {{ {e} }}", e.set);
}

fn kind_word(s: &Set) -> &'static str {
    if s.is_map { "map" } else { "set" }
}

fn chain_spec(c: &Chain) -> String {
    let mut parts = Vec::new();
    if let Some(h) = &c.hook {
        parts.push(format!("type {} hook {} priority {}", h.kind, h.hook, h.priority));
    }
    if let Some(comment) = &c.comment {
        parts.push(format!("comment {}", quote(comment)));
    }
    if parts.is_empty() { String::new() } else { format!(" {{ {} ; }}", parts.join(" ; ")) }
}

fn set_spec(s: &Set) -> String {
    let mut parts = vec![format!("type {}", s.kind)];
    if !s.flags.is_empty() {
        parts.push(format!("flags {}", s.flags.join(",")));
    }
    if let Some(t) = s.timeout {
        parts.push(format!("timeout {t}s"));
    }
    if let Some(c) = &s.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    format!("{{ {} ; }}", parts.join(" ; "))
}

/// A comment as nft reads it: in double quotes (kube-proxy's comments hold none).
fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut o = Objects::default();
        o.chain(Chain { name: "nat-output".into(), hook: Some(Hook { kind: "nat", hook: "output", priority: -100 }), comment: None });
        o.chain(Chain { name: "reject-chain".into(), hook: None, comment: Some("helper".into()) });
        o.sets.push(Set::plain("cluster-ips", "ipv4_addr", Some("Active ClusterIPs")));
        o.sets.push(Set { flags: vec!["dynamic", "timeout"], timeout: Some(10800), ..Set::plain("affinity-X", "ipv4_addr", None) });
        o.sets.push(Set::map("service-ips", "ipv4_addr . inet_proto . inet_service : verdict", None));
        o.rule(Rule::new("nat-output", "jump services"));
        o.rule(Rule::commented("reject-chain", "reject", "why"));
        o.elements.push(Element::parsed("cluster-ips", "10.0.0.1"));
        o.elements.push(Element::parsed("service-ips", "10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto x"));
        Table { family: IpFamily::V4, name: "kube-proxy", comment: "rules for kube-proxy", objects: o }
    }

    #[test]
    fn dump_form_lists_objects_as_knftables_does() {
        let want = "\
add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy reject-chain { comment \"helper\" ; }
add set ip kube-proxy cluster-ips { type ipv4_addr ; comment \"Active ClusterIPs\" ; }
add set ip kube-proxy affinity-X { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy reject-chain reject comment \"why\"
add element ip kube-proxy cluster-ips { 10.0.0.1 }
add element ip kube-proxy service-ips { 10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto x }
";
        assert_eq!(write(&table(), Form::Dump), want);
    }

    #[test]
    fn transaction_flushes_chains_and_static_sets_but_not_affinity_sets() {
        let text = write(&table(), Form::Transaction);
        assert!(text.contains("flush chain ip kube-proxy nat-output\n"));
        assert!(text.contains("flush set ip kube-proxy cluster-ips\n"));
        assert!(text.contains("flush map ip kube-proxy service-ips\n"));
        assert!(!text.contains("flush set ip kube-proxy affinity-X"), "{text}");
        let flush = text.find("flush chain").unwrap();
        assert!(text.find("add rule").unwrap() > flush, "rules come after the flushes");
    }
}

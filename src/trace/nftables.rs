//! A packet through one family's `kube-proxy` table, in the hook order the kernel runs its
//! base chains, as kube-proxy's nftables unit tests trace one (`tracePacket` in
//! pkg/proxy/nftables/helpers_test.go), but keeping every branch apart:
//!
//! * from a pod or from outside: `filter-prerouting-pre-dnat` (priority -110), then
//!   `nat-prerouting` (-100); a DNAT changes the destination later chains see; then
//!   `filter-input` for a node address, else `filter-forward`;
//! * from the node: `filter-output-pre-dnat`, `nat-output`, `filter-output`, and for a
//!   node address also `filter-input` (the packet comes back in over loopback);
//! * in kube-proxy's v1.36+ table (the one without a `mark-for-masquerade` chain), then
//!   `nat-postrouting` for a packet that leaves the node (not for one delivered to it),
//!   where `masquerading` decides: the masquerade mark, or a hairpin connection (DNATed,
//!   and source . destination . protocol . port in `hairpin-connections`: a pod reaching
//!   itself through a service). The v1.34 table decides where the mark is set (`jump
//!   mark-for-masquerade`, hairpin included), so its walk stops before postrouting.
//!
//! Every endpoint of a `numgen random mod N` dispatch (a verdict map of endpoint chains, or
//! v1.36+'s `dnat … to numgen random mod N map { … }`) is its own branch with 1/N of its
//! parent's probability; a comparison `numgen random mod N == K` (the cold start's interim
//! table) splits a branch in two, 1/N going on in the rule and the rest to the next rule. Each branch keeps the rules and map or set elements it matched
//! (its path), its verdict (the DNAT target, `DROP`, `REJECT`, or empty when no rule
//! decided), why it was dropped or rejected, and whether it is masqueraded: in the v1.34
//! table, marked for it (`jump mark-for-masquerade`, as kube-proxy's test tracer counts
//! it); in v1.36+'s, masqueraded by `masquerading` (the mark that `mark set mark or M`
//! sets, or a hairpin connection), so a marked packet that is dropped, rejected or
//! delivered to the node is not.
//!
//! It reads each rule's statements as values ([`crate::nftables::stmt`]) and matches on them
//! without a catch-all, so a statement added to the vocabulary does not compile until the
//! tracer knows what it does to a packet. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::net::{join_host_port, Cidr};
use crate::nftables::model::{Element, NftFamily, Part, Rule, Table};
use crate::net::IpFamily;
use crate::nftables::names::*;
use crate::nftables::stmt::{self, AddrValue, Concat, Ct, Dir, Dnat, Match, MarkOp, Num, Prefix, Selector, Stmt, Vmap};
use super::{Entry, Env, Packet, Verdict};

const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("the table has no chain {0}")]
    UnknownChain(String),
    #[error("chains nest deeper than {MAX_DEPTH} at {0}")]
    TooDeep(String),
    #[error("{why} in rule {rule:?} of chain {chain}")]
    Unreadable { chain: String, rule: String, why: String },
}

/// What finally happens on one branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// `ip:port` after DNAT, `DROP`, `REJECT`, or undecided (empty when printed).
    pub verdict: Verdict,
    pub probability: f64,
    pub masquerade: bool,
    /// Why it was dropped or rejected, when the rules say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rules matched (`FAMILY kube-proxy CHAIN RULE`, as `nft add rule` takes them) and
    /// the map elements looked up (`FAMILY kube-proxy MAP { KEY : VERDICT }`), in order.
    pub path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    pub mode: &'static str,
    pub packet: Packet,
    pub entry: Entry,
    pub outcomes: Vec<Outcome>,
}

impl Trace {
    /// kube-proxy's tracer summary: the distinct verdicts joined by `, ` (first seen
    /// first) and whether any branch is masqueraded.
    pub fn summary(&self) -> (String, bool) {
        super::summary(self.outcomes.iter().map(|o| (&o.verdict, o.masquerade)))
    }
}

/// One branch in progress.
#[derive(Debug, Clone)]
struct Branch {
    packet: Packet,
    probability: f64,
    masquerade: bool,
    /// The packet's mark (`meta mark`).
    mark: u32,
    /// Its connection was DNATed (`ct status dnat`).
    dnat: bool,
    verdict: Verdict,
    reason: Option<String>,
    path: Vec<String>,
}

impl Branch {
    fn new(packet: Packet) -> Self {
        Branch { packet, probability: 1.0, masquerade: false, mark: 0, dnat: false, verdict: Verdict::Undecided, reason: None, path: Vec::new() }
    }

    fn finish(self) -> Outcome {
        Outcome { verdict: self.verdict, probability: self.probability, masquerade: self.masquerade, reason: self.reason, path: self.path }
    }

    fn stopped(&self) -> bool {
        self.verdict.stops()
    }

    /// Sets the mark. Unlike `jump mark-for-masquerade` in the v1.34 table, it is not yet
    /// the masquerade: `masquerading` decides in postrouting, which a packet dropped,
    /// rejected or delivered to the node never reaches.
    fn set_mark(&mut self, op: MarkOp, value: Num) {
        self.mark = match op {
            MarkOp::Or => self.mark | value.value(),
            MarkOp::Xor => self.mark ^ value.value(),
        };
    }

    fn family(&self) -> IpFamily {
        IpFamily::of(&self.packet.dst)
    }

    fn addr(&self, dir: Dir) -> IpAddr {
        match dir {
            Dir::Saddr => self.packet.src,
            Dir::Daddr => self.packet.dst,
        }
    }

    /// Whether the packet's `key` is an element's key `parts`.
    fn has_key(&self, key: &Concat, parts: &[Part]) -> bool {
        key.0.len() == parts.len() && key.0.iter().zip(parts).all(|(sel, part)| self.has_part(*sel, *part))
    }

    /// Whether what `sel` loads from the packet is `part`. Every selector and every kind
    /// of part is named: a new one does not compile until the tracer knows it.
    fn has_part(&self, sel: Selector, part: Part) -> bool {
        match (sel, part) {
            (Selector::Addr(_, dir), Part::Addr(ip)) => self.addr(dir) == ip,
            (Selector::L4proto, Part::Proto(p)) => p == self.packet.protocol,
            (Selector::ThDport, Part::Port(n)) => n == self.packet.dport,
            // A part of another kind than the selector loads.
            (Selector::Addr(..) | Selector::L4proto | Selector::ThDport, Part::Addr(_) | Part::Proto(_) | Part::Port(_)) => false,
        }
    }

    fn same_family(&self, family: IpFamily) -> Result<(), String> {
        let own = self.family();
        if family == own {
            Ok(())
        } else {
            Err(format!("an {} match on an {} packet", family.nft_word(), own.nft_word()))
        }
    }
}

/// How a branch leaves a rule or a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// On to the next rule (a rule that did not match, or a `jump` that came back).
    Next,
    /// The chain is done without a verdict (`return`, its end, a `goto` that came back):
    /// the calling chain goes on.
    Return,
    /// The base chain is done (accept, DNAT, masquerade, drop, reject); a drop or a
    /// reject ends the hook too.
    Settled,
}

/// What a matched rule ends with.
enum Then<'b, 't> {
    Verdict(&'b stmt::Verdict),
    Reject,
    Masquerade,
    Dnat(&'b Dnat),
    /// `numgen random mod N vmap { … }`: every arm's verdict.
    Numgen(u32, &'b [(u32, stmt::Verdict)]),
    /// A verdict map's element matched (its value is the verdict).
    Element(&'t Element),
}

/// What one test says of a branch.
enum Test<'t> {
    Holds,
    /// It holds: a set lookup found this element (the path shows it after the rule).
    Member(&'t Element),
    Fails,
    /// It holds for this share of the packets, whatever the packet (a random number
    /// compared): the branch splits.
    Chance(f64),
}

type Flows = Vec<(Branch, End)>;

/// Traces `packet` through `table` from `entry`; `env` holds the node's addresses (`fib …
/// type local`) and the affinity sets (or their endpoint chains) the source is already in.
pub fn trace(table: &Table, env: &Env, packet: Packet, entry: Entry) -> Result<Trace, TraceError> {
    let w = Walker::new(table, env);
    let (pre_dnat, nat, filter) = match entry {
        Entry::Prerouting => (FILTER_PREROUTING_PRE_DNAT, NAT_PREROUTING, None),
        Entry::Output => (FILTER_OUTPUT_PRE_DNAT, NAT_OUTPUT, Some(FILTER_OUTPUT)),
    };
    let start = Branch::new(packet.clone());
    // v1.36+ masquerades in postrouting; v1.34 has decided by then (see the module doc).
    let postrouting = (!w.chains.contains_key(MARK_MASQ)).then_some(NAT_POSTROUTING);
    let mut outcomes = Vec::new();
    for b in w.hook(&[pre_dnat], start)? {
        if b.stopped() {
            outcomes.push(b.finish());
            continue;
        }
        for b in w.hook(&[nat], b)? {
            let local = env.local_ips.contains(&b.packet.dst);
            let chains: Vec<&str> = match filter {
                // From the node: out, and back in over loopback when it is for the node.
                Some(out) => [Some(out), postrouting, local.then_some(FILTER_INPUT)].into_iter().flatten().collect(),
                None if local => vec![FILTER_INPUT],
                None => [Some(FILTER_FORWARD), postrouting].into_iter().flatten().collect(),
            };
            outcomes.extend(w.hook(&chains, b)?.into_iter().map(Branch::finish));
        }
    }
    Ok(Trace { mode: "nftables", packet, entry, outcomes })
}

/// Whether `ip` is the address, or inside the prefix.
fn in_prefix(p: &Prefix, ip: &IpAddr) -> Result<bool, String> {
    match p.len {
        None => Ok(p.addr == *ip),
        Some(len) => Cidr::new(p.addr, len).map(|c| c.contains(ip)).ok_or_else(|| format!("bad prefix {}/{len}", p.addr)),
    }
}

/// Why a rule drops or rejects, when nothing before it said: its comment, or what its
/// chain is for.
fn reason_of(chain: &str, rule: &Rule) -> Option<String> {
    if let Some(c) = rule.comment() {
        return Some(c.to_owned());
    }
    if chain.starts_with("localhost-nodeport-reject-") {
        return Some("a localhost NodePort kube-proxy does not serve (KubeProxyNFTablesLocalhostNodePorts: only TCP, by its userspace proxy where nodePortAddresses names loopback)".to_owned());
    }
    chain.starts_with("firewall-").then(|| "the source is outside the service's loadBalancerSourceRanges".to_owned())
}

/// A numgen map's arms in key order, each taking 1/N of the packets; every key below N
/// must be there (the renderer writes them all).
fn numgen_arms<T>(modulus: u32, arms: &[(u32, T)]) -> Result<(f64, Vec<&T>), String> {
    if modulus == 0 || arms.len() != modulus as usize {
        return Err(format!("numgen random mod {modulus}: the map does not hold every key"));
    }
    let mut sorted: Vec<&(u32, T)> = arms.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    Ok((1.0 / f64::from(modulus), sorted.into_iter().map(|(_, t)| t).collect()))
}

/// Tests: each statement of each rule of `table` run by the tracer on its own, as a rule
/// of that one statement (so no test before it stops the walk), on `packet`: a verdict
/// follows its chain to the end. The number of statements run.
#[cfg(test)]
pub(crate) fn each_statement(table: &Table, env: &Env, packet: &Packet) -> Result<usize, TraceError> {
    let w = Walker::new(table, env);
    let mut n = 0;
    for r in &table.objects.rules {
        for s in &r.stmts().stmts {
            let alone = Rule::of(r.chain.clone(), stmt::Body { stmts: vec![s.clone()], comment: r.comment().map(str::to_owned) });
            let start = Branch::new(packet.clone());
            w.rule_from(&r.chain, &alone, 0, start, Vec::new(), 0)?;
            n += 1;
        }
    }
    Ok(n)
}

struct Walker<'t> {
    /// `ip kube-proxy`: what every path line starts with.
    head: String,
    chains: BTreeMap<&'t str, Vec<&'t Rule>>,
    elements: &'t [Element],
    env: &'t Env,
}

impl<'t> Walker<'t> {
    fn new(table: &'t Table, env: &'t Env) -> Self {
        let mut chains: BTreeMap<&str, Vec<&Rule>> = table.objects.chains.iter().map(|c| (c.name.as_str(), Vec::new())).collect();
        for r in &table.objects.rules {
            chains.entry(r.chain.as_str()).or_default().push(r);
        }
        Walker { head: format!("{} {}", table.family.nft_word(), table.name), chains, elements: &table.objects.elements, env }
    }

    /// Runs the base chains of one hook, in priority order, on `b`: the branches that
    /// leave it. A branch dropped or rejected skips the chains after.
    fn hook(&self, chains: &[&str], b: Branch) -> Result<Vec<Branch>, TraceError> {
        let mut live = vec![b];
        for chain in chains {
            let mut next = Vec::new();
            for b in live {
                if b.stopped() || !self.chains.contains_key(chain) {
                    next.push(b);
                    continue;
                }
                next.extend(self.run(chain, b, 0)?.into_iter().map(|(b, _)| b));
            }
            live = next;
        }
        Ok(live)
    }

    /// Runs `chain`: every branch that leaves it, and how.
    fn run(&self, chain: &str, b: Branch, depth: usize) -> Result<Flows, TraceError> {
        if depth > MAX_DEPTH {
            return Err(TraceError::TooDeep(chain.to_owned()));
        }
        let rules = self.chains.get(chain).ok_or_else(|| TraceError::UnknownChain(chain.to_owned()))?;
        super::walk(rules.iter().copied(), b, End::Next, End::Return, |rule, b| self.rule_from(chain, rule, 0, b, Vec::new(), depth))
    }

    /// The rule from its statement `from` on, `members` the set elements found before.
    fn rule_from(&self, chain: &str, rule: &Rule, from: usize, mut b: Branch, mut members: Vec<&'t Element>, depth: usize) -> Result<Flows, TraceError> {
        let unreadable = |why: String| TraceError::Unreadable { chain: chain.to_owned(), rule: rule.text().to_owned(), why };
        let body = rule.stmts();
        for (at, s) in body.stmts.iter().enumerate().skip(from) {
            let then = match s {
                Stmt::Match(m) => match self.test(m, &b).map_err(unreadable)? {
                    Test::Holds => continue,
                    Test::Member(e) => {
                        members.push(e);
                        continue;
                    }
                    Test::Fails => return Ok(vec![(b, End::Next)]),
                    // The share that fails goes on to the next rule; the rest of the rule
                    // runs on the share that holds.
                    Test::Chance(share) => {
                        let mut out = Vec::new();
                        if share > 0.0 {
                            let hit = Branch { probability: b.probability * share, ..b.clone() };
                            out.extend(self.rule_from(chain, rule, at + 1, hit, members, depth)?);
                        }
                        if share < 1.0 {
                            out.push((Branch { probability: b.probability * (1.0 - share), ..b }, End::Next));
                        }
                        return Ok(out);
                    }
                },
                Stmt::Vmap(Vmap::Named { key, map }) => match self.lookup(map, key, &b).map_err(unreadable)? {
                    Some(e) => Then::Element(e),
                    None => return Ok(vec![(b, End::Next)]),
                },
                Stmt::Vmap(Vmap::Numgen { modulus, arms }) => Then::Numgen(*modulus, arms),
                Stmt::Action(a) => match a {
                    stmt::Action::MarkSet { op, value } => {
                        b.set_mark(*op, *value);
                        continue;
                    }
                    // They change no verdict: the rule goes on.
                    stmt::Action::Update { .. } | stmt::Action::Counter { .. } => continue,
                    stmt::Action::Masquerade { fully_random: _ } => Then::Masquerade,
                    stmt::Action::Dnat(d) => Then::Dnat(d),
                    stmt::Action::Reject => Then::Reject,
                },
                Stmt::Verdict(v) => Then::Verdict(v),
            };
            self.matched(chain, rule, &members, &mut b);
            return self.then(chain, rule, then, b, depth);
        }
        // Matched, and only statements that change no verdict (`update @set`, a mark).
        self.matched(chain, rule, &members, &mut b);
        Ok(vec![(b, End::Next)])
    }

    fn test(&self, m: &Match, b: &Branch) -> Result<Test<'t>, String> {
        let holds = |hit: bool| if hit { Test::Holds } else { Test::Fails };
        let p = &b.packet;
        Ok(match m {
            Match::Addr { family, dir, negated, value } => {
                b.same_family(*family)?;
                let ip = b.addr(*dir);
                let hit = match value {
                    AddrValue::Prefix(prefix) => in_prefix(prefix, &ip)?,
                    AddrValue::Anon(set) => {
                        let mut hit = false;
                        for prefix in set.items() {
                            hit |= in_prefix(prefix, &ip)?;
                        }
                        hit
                    }
                    AddrValue::Named(set) => self.has_member(set, &ip),
                };
                holds(hit != *negated)
            }
            Match::L4proto(proto) => holds(*proto == p.protocol),
            Match::Dport { proto, port } => holds(*proto == p.protocol && *port == p.dport),
            Match::Iifname { negated, name } => {
                let hit = p.in_interface.as_deref().is_some_and(|i| if name.wildcard { i.starts_with(name.name.as_str()) } else { i == name.name });
                holds(hit != *negated)
            }
            Match::FibLocal(dir) => holds(self.env.local_ips.contains(&b.addr(*dir))),
            // Every packet traced opens a connection.
            Match::Ct(Ct::StateNew) => Test::Holds,
            Match::Ct(Ct::StatusDnat) => holds(b.dnat),
            Match::Mark { mask, negated, value } => holds((b.mark & mask.value() == value.value()) != *negated),
            Match::InSet { key, set } => self.lookup(set, key, b)?.map_or(Test::Fails, Test::Member),
            // A number below N is K for 1/N of the packets; never when K >= N.
            Match::Numgen { modulus: 0, .. } => return Err("numgen random mod 0".to_owned()),
            Match::Numgen { modulus, value } if value >= modulus => Test::Fails,
            Match::Numgen { modulus, .. } => Test::Chance(1.0 / f64::from(*modulus)),
        })
    }

    /// The path of a matched rule: its line, then the set elements it found.
    fn matched(&self, chain: &str, rule: &Rule, members: &[&Element], b: &mut Branch) {
        b.path.push(self.rule_line(chain, rule));
        b.path.extend(members.iter().map(|e| self.element_line(e)));
    }

    fn rule_line(&self, chain: &str, rule: &Rule) -> String {
        let comment = rule.comment().map(|c| format!(" comment \"{c}\"")).unwrap_or_default();
        format!("{} {chain} {}{comment}", self.head, rule.text())
    }

    fn element_line(&self, e: &Element) -> String {
        format!("{} {} {{ {e} }}", self.head, e.set)
    }

    /// Does what a matched rule ends with.
    fn then(&self, chain: &str, rule: &Rule, then: Then<'_, 't>, mut b: Branch, depth: usize) -> Result<Flows, TraceError> {
        let unreadable = |why: String| TraceError::Unreadable { chain: chain.to_owned(), rule: rule.text().to_owned(), why };
        Ok(match then {
            Then::Verdict(v) => self.verdict(chain, rule, v, b, depth)?,
            Then::Reject => self.refuse(chain, rule, Verdict::Reject, b),
            Then::Masquerade => {
                b.masquerade = true;
                vec![(b, End::Settled)]
            }
            Then::Dnat(Dnat::To { addr, port }) => vec![dnat(b, *addr, *port)],
            // The family is the table's; the arms' addresses are the packet's new destination.
            Then::Dnat(Dnat::Numgen { family: _, modulus, arms }) => {
                let targets: Vec<(u32, (IpAddr, u16))> = arms.iter().map(|&(k, addr, port)| (k, (addr, port))).collect();
                let (share, targets) = numgen_arms(*modulus, &targets).map_err(unreadable)?;
                targets.into_iter().map(|&(addr, port)| dnat(Branch { probability: b.probability * share, ..b.clone() }, addr, port)).collect()
            }
            Then::Numgen(modulus, arms) => {
                let (share, verdicts) = numgen_arms(modulus, arms).map_err(unreadable)?;
                let mut out = Vec::new();
                for v in verdicts {
                    out.extend(self.verdict(chain, rule, v, Branch { probability: b.probability * share, ..b.clone() }, depth)?);
                }
                out
            }
            Then::Element(e) => {
                b.path.push(self.element_line(e));
                if e.set == NO_ENDPOINT_SERVICES || e.set == NO_ENDPOINT_NODEPORTS {
                    let service = e.comment.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
                    b.reason = Some(format!("the service{service} has no endpoints"));
                }
                let v = e.value.as_ref().ok_or_else(|| unreadable(format!("verdict map {} holds {} without a verdict", e.set, e.key)))?;
                self.verdict(chain, rule, v, b, depth)?
            }
        })
    }

    fn verdict(&self, chain: &str, rule: &Rule, v: &stmt::Verdict, mut b: Branch, depth: usize) -> Result<Flows, TraceError> {
        // What a called chain's flows are in the caller: a settled one stays settled.
        let back = |flows: Flows, back: End| flows.into_iter().map(|(b, e)| (b, if e == End::Settled { e } else { back })).collect();
        Ok(match v {
            stmt::Verdict::Accept => vec![(b, End::Settled)],
            stmt::Verdict::Drop => self.refuse(chain, rule, Verdict::Drop, b),
            stmt::Verdict::Return => vec![(b, End::Return)],
            stmt::Verdict::Jump(target) if target == MARK_MASQ => {
                b.masquerade = true;
                vec![(b, End::Next)]
            }
            stmt::Verdict::Jump(target) => back(self.run(target, b, depth + 1)?, End::Next),
            stmt::Verdict::Goto(target) => back(self.run(target, b, depth + 1)?, End::Return),
        })
    }

    /// A drop or a reject, with why.
    fn refuse(&self, chain: &str, rule: &Rule, verdict: Verdict, mut b: Branch) -> Flows {
        b.verdict = verdict;
        if b.reason.is_none() {
            b.reason = reason_of(chain, rule);
        }
        vec![(b, End::Settled)]
    }

    /// The element of `set` whose key is the packet's `key`. A part of the other IP
    /// family is an error: the table is one family's.
    fn lookup(&self, set: &str, key: &Concat, b: &Branch) -> Result<Option<&'t Element>, String> {
        for sel in &key.0 {
            if let Selector::Addr(family, _) = sel {
                b.same_family(*family)?;
            }
        }
        Ok(self.elements.iter().find(|e| e.set == set && b.has_key(key, e.key.parts())))
    }

    /// Whether `ip` is in `set`: an element, or an affinity set `--affinity` names (by its
    /// name or its endpoint chain's).
    fn has_member(&self, set: &str, ip: &IpAddr) -> bool {
        let pinned = set.strip_prefix("affinity-").is_some_and(|base| {
            self.env.affinity.contains(set) || self.env.affinity.contains(&format!("endpoint-{base}"))
        });
        pinned || self.elements.iter().any(|e| e.set == set && e.key.parts() == [Part::Addr(*ip)])
    }
}

/// The branch DNATed to `addr:port`.
fn dnat(mut b: Branch, addr: IpAddr, port: u16) -> (Branch, End) {
    (b.packet.dst, b.packet.dport) = (addr, port);
    b.dnat = true;
    b.verdict = Verdict::Dnat(join_host_port(&addr, port));
    (b, End::Settled)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::nftables::model::{Chain, Objects};
    use crate::net::IpFamily;

    fn table(extra_rule: Option<&str>) -> Table {
        let mut o = Objects::default();
        for c in [FILTER_PREROUTING_PRE_DNAT, NAT_PREROUTING, FILTER_FORWARD, FILTER_INPUT, SERVICES, MARK_MASQ, "svc", "ep1", "ep2", "firewall-svc"] {
            o.chain(Chain::regular(c));
        }
        o.rule(Rule::new(FILTER_PREROUTING_PRE_DNAT, "ct state new ip daddr . meta l4proto . th dport vmap @firewall-ips"));
        o.rule(Rule::new("firewall-svc", "ip saddr != { 203.0.113.0/24 } drop"));
        o.rule(Rule::new(NAT_PREROUTING, "jump services"));
        o.rule(Rule::new(SERVICES, "ip daddr . meta l4proto . th dport vmap @service-ips"));
        o.rule(Rule::new("svc", "ip daddr 172.30.0.1 ip saddr != 10.0.0.0/8 jump mark-for-masquerade"));
        o.rule(Rule::new("svc", "ip saddr @affinity-ep2 goto ep2"));
        o.rule(Rule::new("svc", "numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }"));
        o.rule(Rule::new("ep1", "meta l4proto tcp dnat to 10.0.0.5:8080"));
        o.rule(Rule::new("ep2", "update @affinity-ep2 { ip saddr }"));
        o.rule(Rule::new("ep2", "meta l4proto tcp dnat to 10.0.0.6:8080"));
        o.rule(Rule::commented(FILTER_FORWARD, "ip daddr { 172.30.0.0/16 } reject", "Reject traffic to invalid ports of ClusterIPs"));
        o.rule(Rule::new(FILTER_INPUT, "ip daddr . meta l4proto . th dport vmap @no-endpoint-services"));
        if let Some(r) = extra_rule {
            o.rule(Rule::new(SERVICES, r));
        }
        o.elements.push(Element::parsed(SERVICE_IPS, "172.30.0.1 . tcp . 80 : goto svc"));
        o.elements.push(Element::parsed(FIREWALL_IPS, "172.30.0.9 . tcp . 80 : goto firewall-svc"));
        o.elements.push(Element::parsed(NO_ENDPOINT_SERVICES, "192.168.0.2 . tcp . 80 comment \"ns/gone:http\" : drop"));
        Table { family: IpFamily::V4, name: TABLE, comment: TABLE_COMMENT, objects: o }
    }

    fn packet(src: &str, dst: &str, dport: u16) -> Packet {
        Packet { src: src.parse().unwrap(), protocol: crate::model::Protocol::Tcp, dst: dst.parse().unwrap(), dport, in_interface: None }
    }

    fn env(local: &[&str], affinity: &[&str]) -> Env {
        Env { local_ips: local.iter().map(|s| s.parse().unwrap()).collect(), affinity: affinity.iter().map(|s| s.to_string()).collect() }
    }

    fn run(p: Packet, env: &Env) -> Trace {
        trace(&table(None), env, p, Entry::Prerouting).unwrap()
    }

    #[test]
    fn every_endpoint_is_a_branch_with_its_share_and_its_path() {
        let t = run(packet("192.0.2.9", "172.30.0.1", 80), &env(&[], &[]));
        assert_eq!(t.summary(), ("10.0.0.5:8080, 10.0.0.6:8080".to_owned(), true));
        let shares: Vec<(&Verdict, f64)> = t.outcomes.iter().map(|o| (&o.verdict, o.probability)).collect();
        assert_eq!(shares, [(&Verdict::Dnat("10.0.0.5:8080".into()), 0.5), (&Verdict::Dnat("10.0.0.6:8080".into()), 0.5)]);
        assert_eq!(
            t.outcomes[1].path,
            [
                "ip kube-proxy nat-prerouting jump services",
                "ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
                "ip kube-proxy service-ips { 172.30.0.1 . tcp . 80 : goto svc }",
                "ip kube-proxy svc ip daddr 172.30.0.1 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
                "ip kube-proxy svc numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }",
                "ip kube-proxy ep2 update @affinity-ep2 { ip saddr }",
                "ip kube-proxy ep2 meta l4proto tcp dnat to 10.0.0.6:8080",
            ]
        );
        let t = run(packet("10.0.0.9", "172.30.0.1", 80), &env(&[], &[]));
        assert_eq!(t.summary(), ("10.0.0.5:8080, 10.0.0.6:8080".to_owned(), false));
    }

    #[test]
    fn an_affinity_the_source_holds_takes_its_endpoint_only() {
        for pinned in ["affinity-ep2", "endpoint-ep2"] {
            let t = run(packet("10.0.0.9", "172.30.0.1", 80), &env(&[], &[pinned]));
            assert_eq!(t.summary().0, "10.0.0.6:8080", "{pinned}");
            assert_eq!(t.outcomes[0].probability, 1.0);
        }
    }

    #[test]
    fn drops_and_rejects_say_why() {
        let t = run(packet("192.0.2.1", "172.30.0.9", 80), &env(&[], &[]));
        assert_eq!((t.summary().0.as_str(), t.outcomes[0].reason.as_deref()), ("DROP", Some("the source is outside the service's loadBalancerSourceRanges")));
        let t = run(packet("203.0.113.1", "172.30.0.9", 80), &env(&[], &[]));
        assert_eq!(t.summary().0, "REJECT", "an allowed source passes the firewall and meets filter-forward: {t:?}");
        let t = run(packet("10.0.0.9", "172.30.0.2", 80), &env(&[], &[]));
        assert_eq!((t.summary().0.as_str(), t.outcomes[0].reason.as_deref()), ("REJECT", Some("Reject traffic to invalid ports of ClusterIPs")));
        let t = run(packet("10.0.0.9", "192.168.0.2", 80), &env(&["192.168.0.2"], &[]));
        assert_eq!((t.summary().0.as_str(), t.outcomes[0].reason.as_deref()), ("DROP", Some("the service ns/gone:http has no endpoints")));
        let t = run(packet("10.0.0.9", "192.0.2.1", 80), &env(&[], &[]));
        assert_eq!((t.summary().0.as_str(), t.outcomes.len()), ("", 1), "nothing took it");
    }

    #[test]
    fn a_numgen_comparison_splits_the_branch_and_a_chain_of_them_shares_equally() {
        let mut t = table(None);
        for r in [
            "ip daddr 172.30.0.3 numgen random mod 3 == 0 meta l4proto tcp dnat to 10.0.0.5:80",
            "ip daddr 172.30.0.3 meta l4proto tcp numgen random mod 2 == 0 dnat to 10.0.0.6:80",
            "ip daddr 172.30.0.3 meta l4proto tcp dnat to 10.0.0.7:80",
        ] {
            t.objects.rule(Rule::new(SERVICES, r));
        }
        let got = trace(&t, &env(&[], &[]), packet("10.0.0.9", "172.30.0.3", 80), Entry::Prerouting).unwrap();
        let shares: Vec<(String, f64)> = got.outcomes.iter().map(|o| (o.verdict.to_string(), o.probability)).collect();
        assert_eq!(shares.len(), 3, "{shares:?}");
        for ((v, p), want) in shares.iter().zip(["10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80"]) {
            assert_eq!(v, want);
            assert!((p - 1.0 / 3.0).abs() < 1e-12, "{v}: {p}");
        }
        // The second endpoint's path: the first rule did not match (its number was not 0).
        let second = &got.outcomes[1].path;
        assert!(second.iter().any(|l| l.ends_with("services ip daddr 172.30.0.3 meta l4proto tcp numgen random mod 2 == 0 dnat to 10.0.0.6:80")), "{second:?}");
        assert!(!second.iter().any(|l| l.contains("mod 3")), "{second:?}");
        // A test before the comparison that fails: no split.
        let other = trace(&t, &env(&[], &[]), packet("10.0.0.9", "172.30.0.4", 80), Entry::Prerouting).unwrap();
        assert_eq!((other.outcomes.len(), other.outcomes[0].probability), (1, 1.0));
        // mod 1 == 0 always holds: one branch, whole.
        let mut t = table(None);
        t.objects.rule(Rule::new(SERVICES, "ip daddr 172.30.0.3 numgen random mod 1 == 0 meta l4proto tcp dnat to 10.0.0.5:80"));
        let one = trace(&t, &env(&[], &[]), packet("10.0.0.9", "172.30.0.3", 80), Entry::Prerouting).unwrap();
        assert_eq!((one.summary().0.as_str(), one.outcomes.len(), one.outcomes[0].probability), ("10.0.0.5:80", 1, 1.0));
    }

    #[test]
    fn accept_ends_the_base_chain_not_the_hook_and_ports_match() {
        let mut t = table(Some("ip daddr 172.30.0.2 tcp dport 81 meta l4proto tcp dnat to 10.0.0.7:80"));
        t.objects.rule(Rule::new(SERVICES, "ip daddr 172.30.0.2 accept"));
        t.objects.rule(Rule::new(SERVICES, "ip daddr 172.30.0.2 meta l4proto tcp dnat to 10.0.0.8:80"));
        let go = |dport| trace(&t, &env(&[], &[]), packet("10.0.0.9", "172.30.0.2", dport), Entry::Prerouting).unwrap();
        assert_eq!(go(81).summary().0, "10.0.0.7:80");
        let accepted = go(80);
        assert_eq!(accepted.summary().0, "REJECT", "accepted in nat-prerouting, then filter-forward: {accepted:?}");
        assert!(accepted.outcomes[0].path.iter().any(|l| l.ends_with("services ip daddr 172.30.0.2 accept")));
        assert!(!accepted.outcomes[0].path.iter().any(|l| l.contains("10.0.0.8")), "the rule after accept is not reached");
    }
}

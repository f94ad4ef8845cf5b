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
//! parent's probability. Each branch keeps the rules and map or set elements it matched
//! (its path), its verdict (the DNAT target, `DROP`, `REJECT`, or empty when no rule
//! decided), why it was dropped or rejected, and whether it is masqueraded: in the v1.34
//! table, marked for it (`jump mark-for-masquerade`, as kube-proxy's test tracer counts
//! it); in v1.36+'s, masqueraded by `masquerading` (the mark that `mark set mark or M`
//! sets, or a hairpin connection), so a marked packet that is dropped, rejected or
//! delivered to the node is not. Only
//! the rule forms the renderer writes (both tables) and their `nft list` wording are
//! understood; anything else is an error. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::net::Cidr;
use crate::nftables::model::{Element, Rule, Table};
use crate::nftables::names::*;
use super::nftables_forms::{self as forms, first_word, Dnat, MarkSet};
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
    fn finish(self) -> Outcome {
        Outcome { verdict: self.verdict, probability: self.probability, masquerade: self.masquerade, reason: self.reason, path: self.path }
    }

    fn stopped(&self) -> bool {
        self.verdict.stops()
    }

    /// Sets the mark. Unlike `jump mark-for-masquerade` in the v1.34 table, it is not yet
    /// the masquerade: `masquerading` decides in postrouting, which a packet dropped,
    /// rejected or delivered to the node never reaches.
    fn set_mark(&mut self, op: MarkSet) {
        self.mark = op.apply(self.mark);
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
    /// DNAT, drop or reject: the hook is done.
    Settled,
}

/// What a rule does once all its matches hold.
enum Action<'t> {
    Jump(String),
    Goto(String),
    Drop,
    Reject,
    Return,
    Dnat(String),
    /// `dnat … to numgen random mod N map { … }`: every arm's `ip:port`.
    DnatRandom(Vec<String>),
    /// `masquerade`: the hook is done, the packet masqueraded.
    Masquerade,
    /// `numgen random mod N vmap { … }`: every arm's chain.
    Numgen(Vec<String>),
    /// A verdict map's element matched: the map and the element (its value is the verdict).
    Element(&'t str, &'t Element),
}

/// One statement of a rule read.
enum Step<'r, 't> {
    /// The match held; go on with the rest of the rule.
    Next(&'r str),
    /// The mark changes; go on with the rest of the rule.
    Mark(MarkSet, &'r str),
    /// A set lookup found this element (the path shows it after the rule); go on.
    Member(&'t Element, &'r str),
    /// The match failed: the next rule.
    NoMatch,
    Act(Action<'t>),
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
    let start = Branch { packet: packet.clone(), probability: 1.0, masquerade: false, mark: 0, dnat: false, verdict: Verdict::Undecided, reason: None, path: Vec::new() };
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

/// The address of `ip:port` or `[ip]:port`, and the port.
fn host_port(endpoint: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = endpoint.rsplit_once(':')?;
    Some((host.trim_start_matches('[').trim_end_matches(']').parse().ok()?, port.parse().ok()?))
}

/// Whether `ip` is, or is inside, `text` (an address or CIDR).
fn matches_addr(ip: &IpAddr, text: &str) -> Result<bool, String> {
    if text.contains('/') {
        Cidr::parse_sloppy(text).map(|c| c.contains(ip)).ok_or_else(|| format!("bad CIDR {text}"))
    } else {
        text.parse::<IpAddr>().map(|a| a == *ip).map_err(|_| format!("bad address {text}"))
    }
}

/// `{ a , b }` or `{ a,b }`: the members.
fn set_members(body: &str) -> Vec<&str> {
    body.split([',', ' ']).filter(|s| !s.is_empty()).collect()
}

/// The text between `{` and its `}` at the start of `rest`, and what follows.
fn braces(rest: &str) -> Result<(&str, &str), String> {
    let inner = rest.strip_prefix('{').ok_or("expected {")?;
    let end = inner.find('}').ok_or("unclosed {")?;
    Ok((inner[..end].trim(), inner[end + 1..].trim_start()))
}

/// `iifname` against an interface name pattern (`veth*`: a prefix).
fn interface_matches(name: &str, pattern: &str) -> bool {
    match pattern.trim_matches('"').strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern.trim_matches('"'),
    }
}

/// A verdict as a rule or a verdict map element states it.
fn verdict(text: &str) -> Option<Action<'static>> {
    let (word, target) = first_word(text.trim());
    match (word, target) {
        ("jump", t) if !t.is_empty() => Some(Action::Jump(t.to_owned())),
        ("goto", t) if !t.is_empty() => Some(Action::Goto(t.to_owned())),
        ("drop", "") => Some(Action::Drop),
        ("reject", "") => Some(Action::Reject),
        ("return", "") => Some(Action::Return),
        _ => None,
    }
}

/// Why a rule drops or rejects, when nothing before it said: its comment, or what its
/// chain is for.
fn reason_of(chain: &str, rule: &Rule) -> Option<String> {
    if let Some(c) = &rule.comment {
        return Some(c.clone());
    }
    if chain.starts_with("localhost-nodeport-reject-") {
        return Some("a localhost NodePort kube-proxy does not serve (KubeProxyNFTablesLocalhostNodePorts: only TCP, by its userspace proxy where nodePortAddresses names loopback)".to_owned());
    }
    chain.starts_with("firewall-").then(|| "the source is outside the service's loadBalancerSourceRanges".to_owned())
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
        Walker { head: format!("{} {}", table.family.as_str(), table.name), chains, elements: &table.objects.elements, env }
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
        let mut live = vec![b];
        let mut out = Vec::new();
        for rule in rules {
            let mut still = Vec::new();
            for b in live {
                for (nb, end) in self.rule(chain, rule, b, depth)? {
                    match end {
                        End::Next => still.push(nb),
                        _ => out.push((nb, end)),
                    }
                }
            }
            live = still;
            if live.is_empty() {
                break;
            }
        }
        out.extend(live.into_iter().map(|b| (b, End::Return)));
        Ok(out)
    }

    fn rule(&self, chain: &str, rule: &Rule, mut b: Branch, depth: usize) -> Result<Flows, TraceError> {
        let unreadable = |why: String| TraceError::Unreadable { chain: chain.to_owned(), rule: rule.rule.clone(), why };
        let mut rest = rule.rule.strip_prefix("ct state new").unwrap_or(&rule.rule).trim_start();
        let mut members: Vec<&Element> = Vec::new();
        loop {
            if rest.is_empty() {
                // Matched, and only statements that change no verdict (`update @set`, a mark).
                self.matched(chain, rule, &members, &mut b);
                return Ok(vec![(b, End::Next)]);
            }
            match self.step(rest, &b).map_err(unreadable)? {
                Step::Next(r) => rest = r,
                Step::Mark(op, r) => {
                    b.set_mark(op);
                    rest = r;
                }
                Step::Member(e, r) => {
                    members.push(e);
                    rest = r;
                }
                Step::NoMatch => return Ok(vec![(b, End::Next)]),
                Step::Act(action) => {
                    self.matched(chain, rule, &members, &mut b);
                    return self.act(chain, rule, action, b, depth);
                }
            }
        }
    }

    /// The path of a matched rule: its line, then the set elements it found.
    fn matched(&self, chain: &str, rule: &Rule, members: &[&Element], b: &mut Branch) {
        b.path.push(self.rule_line(chain, rule));
        b.path.extend(members.iter().map(|e| self.element_line(&e.set, e)));
    }

    fn rule_line(&self, chain: &str, rule: &Rule) -> String {
        let comment = rule.comment.as_ref().map(|c| format!(" comment \"{c}\"")).unwrap_or_default();
        format!("{} {chain} {}{comment}", self.head, rule.rule)
    }

    fn element_line(&self, set: &str, e: &Element) -> String {
        let comment = e.comment.as_ref().map(|c| format!(" comment \"{c}\"")).unwrap_or_default();
        let value = if e.value.is_empty() { String::new() } else { format!(" : {}", e.value.join(" . ")) };
        format!("{} {set} {{ {}{comment}{value} }}", self.head, e.key.join(" . "))
    }

    /// Does what a matched rule says.
    fn act(&self, chain: &str, rule: &Rule, action: Action<'t>, mut b: Branch, depth: usize) -> Result<Flows, TraceError> {
        let from_target = |flows: Flows, back: End| flows.into_iter().map(|(b, e)| (b, if e == End::Settled { e } else { back })).collect();
        Ok(match action {
            Action::Jump(target) if target == MARK_MASQ => {
                b.masquerade = true;
                vec![(b, End::Next)]
            }
            Action::Jump(target) => from_target(self.run(&target, b, depth + 1)?, End::Next),
            Action::Goto(target) => from_target(self.run(&target, b, depth + 1)?, End::Return),
            Action::Drop | Action::Reject => {
                b.verdict = if matches!(action, Action::Drop) { Verdict::Drop } else { Verdict::Reject };
                if b.reason.is_none() {
                    b.reason = reason_of(chain, rule);
                }
                vec![(b, End::Settled)]
            }
            Action::Return => vec![(b, End::Return)],
            Action::Dnat(target) => {
                let (ip, port) = host_port(&target).ok_or_else(|| TraceError::Unreadable {
                    chain: chain.to_owned(),
                    rule: rule.rule.clone(),
                    why: format!("bad DNAT target {target}"),
                })?;
                (b.packet.dst, b.packet.dport) = (ip, port);
                b.dnat = true;
                b.verdict = Verdict::Dnat(target);
                vec![(b, End::Settled)]
            }
            Action::DnatRandom(targets) => {
                let share = 1.0 / targets.len() as f64;
                let mut out = Vec::new();
                for target in targets {
                    let mut nb = b.clone();
                    nb.probability *= share;
                    out.extend(self.act(chain, rule, Action::Dnat(target), nb, depth)?);
                }
                out
            }
            Action::Masquerade => {
                b.masquerade = true;
                vec![(b, End::Settled)]
            }
            Action::Numgen(arms) => {
                let share = 1.0 / arms.len() as f64;
                let mut out = Vec::new();
                for arm in arms {
                    let mut nb = b.clone();
                    nb.probability *= share;
                    out.extend(self.act(chain, rule, Action::Goto(arm), nb, depth)?);
                }
                out
            }
            Action::Element(map, e) => {
                b.path.push(self.element_line(map, e));
                if map == NO_ENDPOINT_SERVICES || map == NO_ENDPOINT_NODEPORTS {
                    let service = e.comment.as_ref().map(|c| format!(" {c}")).unwrap_or_default();
                    b.reason = Some(format!("the service{service} has no endpoints"));
                }
                let text = e.value.join(" . ");
                let action = verdict(&text).ok_or_else(|| TraceError::Unreadable {
                    chain: chain.to_owned(),
                    rule: rule.rule.clone(),
                    why: format!("verdict map {map} holds {text:?}"),
                })?;
                self.act(chain, rule, action, b, depth)?
            }
        })
    }

    fn lookup(&self, set: &str, key: &[String]) -> Option<&'t Element> {
        self.elements.iter().find(|e| e.set == set && e.key == key)
    }

    /// Whether `ip` is in `set`: an element, or an affinity set `--affinity` names (by its
    /// name or its endpoint chain's).
    fn has_member(&self, set: &str, ip: &IpAddr) -> bool {
        let pinned = set.strip_prefix("affinity-").is_some_and(|base| {
            self.env.affinity.contains(set) || self.env.affinity.contains(&format!("endpoint-{base}"))
        });
        pinned || self.elements.iter().any(|e| e.set == set && e.key.len() == 1 && e.key[0] == ip.to_string())
    }

    fn step<'r>(&self, rest: &'r str, b: &Branch) -> Result<Step<'r, 't>, String> {
        let p = &b.packet;
        let ip = if p.dst.is_ipv6() { "ip6" } else { "ip" };
        let dest_key = || vec![p.dst.to_string(), p.protocol.lower().to_owned(), p.dport.to_string()];
        let port_key = || vec![p.protocol.lower().to_owned(), p.dport.to_string()];
        if let Some(set) = rest.strip_prefix(&format!("{ip} saddr . {ip} daddr . meta l4proto . th dport @")) {
            let (set, after) = first_word(set);
            let key = vec![p.src.to_string(), p.dst.to_string(), p.protocol.lower().to_owned(), p.dport.to_string()];
            return Ok(self.lookup(set, &key).map_or(Step::NoMatch, |e| Step::Member(e, after)));
        }
        if let Some(r) = rest.strip_prefix("ct status dnat") {
            return Ok(if b.dnat { Step::Next(r.trim_start()) } else { Step::NoMatch });
        }
        if let Some(set) = forms::mark_set(rest) {
            let (op, after) = set?;
            return Ok(Step::Mark(op, after));
        }
        if let Some(test) = forms::mark_test(rest) {
            let (test, after) = test?;
            return Ok(if test.holds(b.mark) { Step::Next(after) } else { Step::NoMatch });
        }
        if let Some(r) = rest.strip_prefix("masquerade") {
            let options = r.split_whitespace().all(|w| matches!(w, "fully-random" | "random" | "persistent"));
            if r.is_empty() || (r.starts_with(' ') && options) {
                return Ok(Step::Act(Action::Masquerade));
            }
        }
        if let Some(map) = rest.strip_prefix(&format!("{ip} daddr . meta l4proto . th dport vmap @")) {
            let map = map.trim();
            return Ok(self.lookup(map, &dest_key()).map_or(Step::NoMatch, |e| Step::Act(Action::Element(&e.set, e))));
        }
        if let Some(map) = rest.strip_prefix("meta l4proto . th dport vmap @") {
            let map = map.trim();
            return Ok(self.lookup(map, &port_key()).map_or(Step::NoMatch, |e| Step::Act(Action::Element(&e.set, e))));
        }
        for (field, addr) in [("daddr", p.dst), ("saddr", p.src)] {
            if let Some(r) = rest.strip_prefix(&format!("{ip} {field} ")) {
                return self.address(r, &addr);
            }
            if let Some(r) = rest.strip_prefix(&format!("fib {field} type local")) {
                return Ok(if self.env.local_ips.contains(&addr) { Step::Next(r.trim_start()) } else { Step::NoMatch });
            }
        }
        if let Some(r) = rest.strip_prefix("iifname ") {
            let (negated, r) = match r.strip_prefix("!= ") {
                Some(r) => (true, r),
                None => (false, r),
            };
            let (pattern, after) = first_word(r);
            let hit = p.in_interface.as_deref().is_some_and(|i| interface_matches(i, pattern));
            return Ok(if hit != negated { Step::Next(after) } else { Step::NoMatch });
        }
        if let Some(r) = rest.strip_prefix("counter name ") {
            // A named counter counts the packet (kube-proxy v1.37's localhost NodePort
            // rejections); the verdict is the next statement's.
            let r = r.strip_prefix('"').and_then(|q| q.split_once('"')).ok_or("expected a quoted counter name")?.1;
            return Ok(Step::Next(r.trim_start()));
        }
        if let Some(r) = rest.strip_prefix("update @") {
            return Ok(Step::Next(braces(first_word(r).1)?.1));
        }
        if let Some(r) = rest.strip_prefix("numgen random mod ") {
            let (_, r) = first_word(r);
            let body = braces(r.strip_prefix("vmap ").ok_or("expected vmap")?)?.0;
            let arms = body
                .split(',')
                .map(|arm| arm.split(" : goto ").nth(1).map(|t| t.trim().to_owned()).ok_or("bad numgen arm"))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Step::Act(Action::Numgen(arms)));
        }
        if let Some(r) = rest.strip_prefix("meta l4proto ") {
            let (proto, r) = first_word(r);
            let dnat = forms::dnat(r.strip_prefix("dnat ").ok_or("expected dnat")?)?;
            if proto != p.protocol.lower() {
                return Ok(Step::NoMatch);
            }
            return Ok(Step::Act(match dnat {
                Dnat::To(target) => Action::Dnat(target),
                Dnat::Random(targets) => Action::DnatRandom(targets),
            }));
        }
        verdict(rest).map(Step::Act).ok_or_else(|| format!("unknown statement {rest:?}"))
    }

    /// After `ip daddr ` / `ip saddr `: `@set`, `!= X`, `{ … }`, `!= { … }` or `X`.
    fn address<'r>(&self, r: &'r str, addr: &IpAddr) -> Result<Step<'r, 't>, String> {
        if let Some(set) = r.strip_prefix('@') {
            let (name, after) = first_word(set);
            return Ok(if self.has_member(name, addr) { Step::Next(after) } else { Step::NoMatch });
        }
        let (negated, r) = match r.strip_prefix("!= ") {
            Some(r) => (true, r),
            None => (false, r),
        };
        let (hit, after) = if r.starts_with('{') {
            let (body, after) = braces(r)?;
            let mut hit = false;
            for m in set_members(body) {
                hit |= matches_addr(addr, m)?;
            }
            (hit, after)
        } else {
            let (word, after) = first_word(r);
            (matches_addr(addr, word)?, after)
        };
        Ok(if hit != negated { Step::Next(after) } else { Step::NoMatch })
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::nftables::model::{Chain, Family, Objects};

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
        o.element(SERVICE_IPS, vec!["172.30.0.1".into(), "tcp".into(), "80".into()], vec!["goto svc".into()], None);
        o.element(FIREWALL_IPS, vec!["172.30.0.9".into(), "tcp".into(), "80".into()], vec!["goto firewall-svc".into()], None);
        o.element(NO_ENDPOINT_SERVICES, vec!["192.168.0.2".into(), "tcp".into(), "80".into()], vec!["drop".into()], Some("ns/gone:http"));
        Table { family: Family::Ip, name: TABLE, comment: TABLE_COMMENT, objects: o }
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
    fn a_statement_it_does_not_know_is_an_error() {
        let e = trace(&table(Some("counter accept")), &env(&[], &[]), packet("10.0.0.9", "172.30.0.2", 80), Entry::Prerouting).unwrap_err();
        assert!(matches!(&e, TraceError::Unreadable { why, .. } if why.contains("unknown statement")), "{e}");
    }
}

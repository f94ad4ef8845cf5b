//! A packet through one family's rendered table, as kube-proxy's nftables unit tests trace
//! one (`tracePacket` in pkg/proxy/nftables/helpers_test.go): the pre-DNAT filter chain,
//! then `nat-prerouting` (a DNAT changes the destination later chains see), then the filter
//! chains of a packet to a local address (`filter-input`) or a forwarded one
//! (`filter-forward`). Only the rule forms the renderer writes are understood; anything else
//! is an error. Every endpoint of a `numgen` dispatch is followed; masquerading is the
//! `jump mark-for-masquerade` having been taken. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::net::Cidr;
use crate::nftables::model::{Element, Table};
use crate::nftables::names::*;

/// A new connection's first packet.
#[derive(Debug, Clone)]
pub struct Packet {
    pub src: IpAddr,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub dst: IpAddr,
    pub dport: u16,
}

/// Where it went: endpoints (`ip:port`), `DROP` or `REJECT` (joined with `, `; empty when
/// no rule took it), and whether it is masqueraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub outputs: Vec<String>,
    pub masquerade: bool,
}

impl Outcome {
    pub fn summary(&self) -> String {
        self.outputs.join(", ")
    }
}

struct Tracer<'a> {
    chains: BTreeMap<&'a str, Vec<&'a str>>,
    elements: &'a [Element],
    local_ips: &'a BTreeSet<IpAddr>,
    out: Outcome,
    depth: usize,
}

/// Traces `p` through `table`; `local_ips` are this node's addresses (`fib … type local`).
pub fn trace(table: &Table, local_ips: &BTreeSet<IpAddr>, p: &Packet) -> Result<Outcome, String> {
    let mut chains: BTreeMap<&str, Vec<&str>> = table.objects.chains.iter().map(|c| (c.name.as_str(), Vec::new())).collect();
    for r in &table.objects.rules {
        chains.entry(r.chain.as_str()).or_default().push(r.rule.as_str());
    }
    let mut t = Tracer { chains, elements: &table.objects.elements, local_ips, out: Outcome { outputs: Vec::new(), masquerade: false }, depth: 0 };
    if t.run(FILTER_PREROUTING_PRE_DNAT, p)? {
        return Ok(t.out);
    }
    t.run(NAT_PREROUTING, p)?;
    let mut after = p.clone();
    if let Some(first) = t.out.outputs.first() {
        after.dst = host_of(first).ok_or_else(|| format!("bad DNAT target {first}"))?;
    }
    let filter = if local_ips.contains(&after.dst) { FILTER_INPUT } else { FILTER_FORWARD };
    t.run(filter, &after)?;
    Ok(t.out)
}

/// The address of `ip:port` or `[ip]:port`.
fn host_of(endpoint: &str) -> Option<IpAddr> {
    let (host, _) = endpoint.rsplit_once(':')?;
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
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

fn first_word(s: &str) -> (&str, &str) {
    s.split_once(' ').map_or((s, ""), |(a, b)| (a, b.trim_start()))
}

enum Step<'r> {
    /// The match held; go on with the rest of the rule.
    Next(&'r str),
    /// The match failed: the next rule.
    NoMatch,
    /// A verdict ended this chain: `true` if the packet's fate is settled.
    Done(bool),
}

impl<'a> Tracer<'a> {
    fn lookup(&self, set: &str, key: &[String]) -> Option<&'a Element> {
        self.elements.iter().find(|e| e.set == set && e.key == key)
    }

    fn has_member(&self, set: &str, ip: &IpAddr) -> bool {
        self.elements.iter().any(|e| e.set == set && e.key.len() == 1 && e.key[0] == ip.to_string())
    }

    /// Runs `chain`; `true` if a verdict settled the packet.
    fn run(&mut self, chain: &str, p: &Packet) -> Result<bool, String> {
        self.depth += 1;
        if self.depth > 64 {
            return Err(format!("chain depth over 64 at {chain}"));
        }
        let rules = self.chains.get(chain).cloned().ok_or_else(|| format!("unknown chain {chain}"))?;
        let mut settled = None;
        for rule in rules {
            if let Some(done) = self.rule(rule, p)? {
                settled = Some(done);
                break;
            }
        }
        self.depth -= 1;
        Ok(settled.unwrap_or(false))
    }

    /// One rule: `None` to go on with the chain, `Some(settled)` when it ended the chain.
    fn rule(&mut self, rule: &str, p: &Packet) -> Result<Option<bool>, String> {
        let mut rest = rule.strip_prefix("ct state new").unwrap_or(rule).trim_start();
        while !rest.is_empty() {
            match self.step(rest, p).map_err(|e| format!("{e} in rule {rule:?}"))? {
                Step::Next(r) => rest = r,
                Step::NoMatch => return Ok(None),
                Step::Done(settled) => return Ok(Some(settled)),
            }
        }
        Ok(None)
    }

    fn step<'r>(&mut self, rest: &'r str, p: &Packet) -> Result<Step<'r>, String> {
        let ip = if p.dst.is_ipv6() { "ip6" } else { "ip" };
        let dest_key = || vec![p.dst.to_string(), p.protocol.clone(), p.dport.to_string()];
        let port_key = || vec![p.protocol.clone(), p.dport.to_string()];
        if let Some(map) = rest.strip_prefix(&format!("{ip} daddr . meta l4proto . th dport vmap @")) {
            return self.vmap(self.lookup(map, &dest_key()), p);
        }
        if let Some(map) = rest.strip_prefix("meta l4proto . th dport vmap @") {
            return self.vmap(self.lookup(map, &port_key()), p);
        }
        for (field, addr) in [("daddr", p.dst), ("saddr", p.src)] {
            if let Some(r) = rest.strip_prefix(&format!("{ip} {field} ")) {
                return self.address(r, &addr);
            }
            if let Some(r) = rest.strip_prefix(&format!("fib {field} type local")) {
                return Ok(if self.local_ips.contains(&addr) { Step::Next(r.trim_start()) } else { Step::NoMatch });
            }
        }
        if rest.starts_with("iifname ") {
            // Traced packets arrive on no interface a detector names.
            let (_, r) = first_word(rest);
            let (op, r2) = first_word(r);
            let negated = op == "!=";
            let after = if negated { first_word(r2).1 } else { r2 };
            return Ok(if negated { Step::Next(after) } else { Step::NoMatch });
        }
        if let Some(r) = rest.strip_prefix("update @") {
            return Ok(Step::Next(braces(first_word(r).1)?.1));
        }
        if let Some(r) = rest.strip_prefix("numgen random mod ") {
            let (_, r) = first_word(r);
            let body = braces(r.strip_prefix("vmap ").ok_or("expected vmap")?)?.0;
            for arm in body.split(',') {
                let target = arm.split(" : goto ").nth(1).ok_or("bad numgen arm")?.trim();
                self.run(target, p)?;
            }
            return Ok(Step::Done(true));
        }
        if let Some(r) = rest.strip_prefix("meta l4proto ") {
            let (_, r) = first_word(r);
            let target = r.strip_prefix("dnat to ").ok_or("expected dnat to")?;
            self.out.outputs.push(target.trim().to_owned());
            return Ok(Step::Done(true));
        }
        self.verdict(rest, p)
    }

    /// After `ip daddr ` / `ip saddr `: `@set`, `!= X`, `{ … }`, `!= { … }` or `X`.
    fn address<'r>(&self, r: &'r str, addr: &IpAddr) -> Result<Step<'r>, String> {
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

    fn vmap<'r>(&mut self, hit: Option<&'a Element>, p: &Packet) -> Result<Step<'r>, String> {
        let Some(e) = hit else { return Ok(Step::NoMatch) };
        let verdict = e.value.join(" . ");
        match self.verdict(&verdict, p)? {
            Step::Done(s) => Ok(Step::Done(s)),
            _ => Err(format!("verdict map value {verdict:?}")),
        }
    }

    /// `jump X`, `goto X`, `drop`, `reject`, `return`.
    fn verdict<'r>(&mut self, rest: &str, p: &Packet) -> Result<Step<'r>, String> {
        let (word, target) = first_word(rest.trim());
        match word {
            "jump" if target == MARK_MASQ => {
                self.out.masquerade = true;
                Ok(Step::Next(""))
            }
            "jump" | "goto" => {
                let settled = self.run(target, p)?;
                Ok(if settled || word == "goto" { Step::Done(settled) } else { Step::Next("") })
            }
            "drop" | "reject" => {
                self.out.outputs.push(word.to_uppercase());
                Ok(Step::Done(true))
            }
            "return" => Ok(Step::Done(false)),
            _ => Err(format!("unknown statement {rest:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::{Chain, Family, Objects, Rule};

    fn table(extra_rule: Option<&str>) -> Table {
        let mut o = Objects::default();
        for c in [FILTER_PREROUTING_PRE_DNAT, NAT_PREROUTING, FILTER_FORWARD, FILTER_INPUT, SERVICES, MARK_MASQ, "svc", "ep"] {
            o.chain(Chain::regular(c));
        }
        o.rule(Rule::new(NAT_PREROUTING, "jump services"));
        o.rule(Rule::new(SERVICES, "ip daddr . meta l4proto . th dport vmap @service-ips"));
        o.rule(Rule::new("svc", "ip daddr 172.30.0.1 ip saddr != 10.0.0.0/8 jump mark-for-masquerade"));
        o.rule(Rule::new("svc", "numgen random mod 1 vmap { 0 : goto ep }"));
        o.rule(Rule::new("ep", "meta l4proto tcp dnat to 10.0.0.5:8080"));
        o.rule(Rule::new(FILTER_FORWARD, "ip daddr { 172.30.0.0/16 } drop"));
        if let Some(r) = extra_rule {
            o.rule(Rule::new(FILTER_PREROUTING_PRE_DNAT, r));
        }
        o.element(SERVICE_IPS, vec!["172.30.0.1".into(), "tcp".into(), "80".into()], vec!["goto svc".into()], None);
        Table { family: Family::Ip, name: TABLE, comment: TABLE_COMMENT, objects: o }
    }

    fn packet(src: &str, dst: &str, dport: u16) -> Packet {
        Packet { src: src.parse().unwrap(), protocol: "tcp".into(), dst: dst.parse().unwrap(), dport }
    }

    #[test]
    fn follows_the_verdict_map_to_the_endpoint_and_marks_off_cluster_sources() {
        let local = BTreeSet::new();
        let o = trace(&table(None), &local, &packet("192.0.2.9", "172.30.0.1", 80)).unwrap();
        assert_eq!((o.summary().as_str(), o.masquerade), ("10.0.0.5:8080", true));
        let o = trace(&table(None), &local, &packet("10.0.0.9", "172.30.0.1", 80)).unwrap();
        assert_eq!((o.summary().as_str(), o.masquerade), ("10.0.0.5:8080", false));
    }

    #[test]
    fn a_destination_no_map_has_falls_to_the_filter_chains() {
        let o = trace(&table(None), &BTreeSet::new(), &packet("10.0.0.9", "172.30.0.2", 80)).unwrap();
        assert_eq!(o.summary(), "DROP");
        let o = trace(&table(None), &BTreeSet::new(), &packet("10.0.0.9", "192.0.2.1", 80)).unwrap();
        assert_eq!(o.summary(), "", "nothing took it");
    }

    #[test]
    fn a_statement_it_does_not_know_is_an_error() {
        let e = trace(&table(Some("counter accept")), &BTreeSet::new(), &packet("10.0.0.9", "172.30.0.1", 80)).unwrap_err();
        assert!(e.contains("unknown statement"), "{e}");
    }
}

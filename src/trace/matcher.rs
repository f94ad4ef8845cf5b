//! Rule matching for the tracer: the matches kube-proxy's rules use, in both modes.
//!
//! A match the tracer does not know (or cannot decide for this packet, like
//! `--physdev-is-in`) never silently matches: the rule is taken as not matching and the
//! reason is returned, so the trace can say which rule it could not evaluate.

use std::net::IpAddr;

use serde::Serialize;

use super::ipset::Sets;
use super::Env;
use crate::xtables::dump::Rule;
use crate::xtables::rule::word_after;
use crate::ipvs::values::ServiceKey;
use crate::model::Protocol;
use crate::net::{parse_ip_sloppy, Cidr};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    #[serde(serialize_with = "super::verdict::serialize_protocol")]
    pub protocol: Protocol,
    pub dport: u16,
    /// The interface it came in on, for `-i` matches (pod-interface detectors).
    pub in_interface: Option<String>,
}

#[cfg(test)]
impl Packet {
    /// A test's packet from `src` to `dst` (`ip:port`, `[ip]:port` for IPv6).
    pub(crate) fn to(src: &str, dst: &str, protocol: Protocol) -> Packet {
        let (ip, port) = dst.rsplit_once(':').unwrap();
        let dst = ip.trim_start_matches('[').trim_end_matches(']').parse().unwrap();
        Packet { src: src.parse().unwrap(), dst, protocol, dport: port.parse().unwrap(), in_interface: None }
    }
}

/// What the kernel knows about a packet besides its headers, as far as the rules ask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// The fwmark (`-j MARK`, `-m mark`).
    pub mark: u32,
    /// Its destination was translated (conntrack's `DNAT` state): by `-j DNAT` or IPVS.
    pub dnat: bool,
    /// The IPVS virtual server its connection belongs to (`-m ipvs`).
    pub ipvs: Option<ServiceKey>,
}

/// How a rule matches a packet: with probability 0 (no), 1 (yes) or in between
/// (`-m statistic`). `unknown`: the rule was taken as not matching because one of its
/// matches could not be evaluated (why).
pub struct Match {
    pub probability: f64,
    pub unknown: Option<String>,
}

fn addr_matches(spec: &str, ip: &IpAddr) -> bool {
    if let Some(c) = Cidr::parse_sloppy(spec) {
        return c.contains(ip);
    }
    parse_ip_sloppy(spec).is_some_and(|a| &a == ip)
}

fn iface_matches(spec: &str, iface: Option<&str>) -> bool {
    let Some(iface) = iface else { return false };
    match spec.strip_suffix('+') {
        Some(prefix) => iface.starts_with(prefix),
        None => iface == spec,
    }
}

/// `PORT` or `FIRST:LAST`.
fn port_matches(spec: &str, port: u16) -> Option<bool> {
    match spec.split_once(':') {
        Some((lo, hi)) => Some((lo.parse::<u16>().ok()?..=hi.parse::<u16>().ok()?).contains(&port)),
        None => Some(spec.parse::<u16>().ok()? == port),
    }
}

/// `VALUE[/MASK]` against the packet's mark.
fn mark_matches(spec: &str, mark: u32) -> Option<bool> {
    let (value, mask) = value_mask(spec)?;
    Some(mark & mask == value)
}

/// `V/M` or `V` (mask all ones).
pub(super) fn value_mask(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => parse_u32(v).zip(parse_u32(m)),
        None => parse_u32(s).map(|v| (v, u32::MAX)),
    }
}

pub(super) fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `--ctstate` for the first packet of a connection: NEW, plus DNAT once translated.
fn ctstate_matches(spec: &str, st: &State) -> Option<bool> {
    let mut any = false;
    for s in spec.split(',') {
        any |= match s {
            "NEW" => true,
            "DNAT" => st.dnat,
            "INVALID" | "RELATED" | "ESTABLISHED" | "UNTRACKED" | "SNAT" => false,
            _ => return None,
        };
    }
    Some(any)
}

fn addrtype_matches(spec: &str, ip: &IpAddr, env: &Env) -> Option<bool> {
    (spec == "LOCAL").then(|| env.local_ips.contains(ip))
}

fn vproto_matches(spec: &str, key: &ServiceKey) -> Option<bool> {
    let p = match Protocol::from_name(spec) {
        Some(p) => p,
        None => Protocol::from_number(spec.parse().ok()?)?,
    };
    Some(p == key.protocol)
}

/// One match's answer.
enum Test {
    /// Decided (before negation).
    Is(bool),
    /// Decided as unknown (the reason); the rest of the rule is still read.
    Unknown(String),
    /// Not a test (module names, comments, options of a test already read).
    Skip,
}

fn decided(r: Option<bool>, what: &str, value: &str) -> Test {
    match r {
        Some(b) => Test::Is(b),
        None => Test::Unknown(format!("cannot evaluate {what} {value}")),
    }
}

/// Evaluates every match of a rule (everything before `-j`/`-g`; the target and its
/// options are the tracer's business).
pub fn evaluate(rule: &Rule, p: &Packet, st: &State, env: &Env, sets: &Sets) -> Match {
    let a = &rule.args.words();
    let mut probability = 1.0;
    let mut negate = false;
    let mut unknown: Option<String> = None;
    let mut i = 0;
    while i < a.len() {
        let arg = a[i];
        if matches!(arg, "-j" | "--jump" | "-g" | "--goto") {
            break;
        }
        if arg == "!" {
            negate = true;
            i += 1;
            continue;
        }
        let next = a.get(i + 1).copied().unwrap_or("");
        let mut consumed = 2;
        let test = match arg {
            "-s" | "--source" => Test::Is(addr_matches(next, &p.src)),
            "-d" | "--destination" => Test::Is(addr_matches(next, &p.dst)),
            "-p" | "--protocol" => Test::Is(Protocol::from_name(next) == Some(p.protocol)),
            "--dport" | "--destination-port" => decided(port_matches(next, p.dport), arg, next),
            "-i" | "--in-interface" => Test::Is(iface_matches(next, p.in_interface.as_deref())),
            "--dst-type" => decided(addrtype_matches(next, &p.dst, env), arg, next),
            "--src-type" => decided(addrtype_matches(next, &p.src, env), arg, next),
            "--probability" => {
                probability *= next.parse::<f64>().unwrap_or(1.0);
                Test::Skip
            }
            "--rcheck" => {
                consumed = 1;
                Test::Is(env.affinity.contains(word_after(a.iter().copied(), "--name").unwrap_or("")))
            }
            "--ctstate" => decided(ctstate_matches(next, st), arg, next),
            "--mark" => decided(mark_matches(next, st.mark), arg, next),
            "--match-set" => {
                consumed = 3;
                let flags = a.get(i + 2).copied().unwrap_or("");
                match sets.test(next, flags, p) {
                    Ok(b) => Test::Is(b),
                    Err(why) => Test::Unknown(why),
                }
            }
            "--ipvs" => {
                consumed = 1;
                Test::Is(st.ipvs.is_some())
            }
            "--vaddr" => Test::Is(st.ipvs.is_some_and(|k| addr_matches(next, &k.addr))),
            "--vport" => Test::Is(st.ipvs.is_some_and(|k| port_matches(next, k.port) == Some(true))),
            "--vproto" => match st.ipvs {
                Some(k) => decided(vproto_matches(next, &k), arg, next),
                None => Test::Is(false),
            },
            "--physdev-is-in" | "--physdev-is-out" | "--physdev-is-bridged" => {
                consumed = 1;
                Test::Unknown(format!("{arg}: the tracer does not know whether the packet crossed a bridge"))
            }
            "-m" | "--match" | "--comment" | "--name" | "--mode" | "--seconds" | "--mask" | "--nfacct-name" => Test::Skip,
            "--reap" | "--rsource" | "--set" => {
                consumed = 1;
                Test::Skip
            }
            other => {
                // Its arguments are unknown too: nothing after it can be read.
                let why = format!("unknown match {other}");
                return Match { probability: 0.0, unknown: Some(unknown.unwrap_or(why)) };
            }
        };
        match test {
            Test::Is(r) if r == negate => return Match { probability: 0.0, unknown: None },
            Test::Unknown(why) => {
                unknown.get_or_insert(why);
            }
            _ => {}
        }
        negate = false;
        i += consumed;
    }
    match unknown {
        Some(why) => Match { probability: 0.0, unknown: Some(why) },
        None => Match { probability, unknown: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        let words = crate::xtables::dump::split_words(text).unwrap();
        let (matches, target) = crate::xtables::Target::split(&words);
        Rule { op: crate::xtables::Op::Append, chain: "C".into(), args: crate::xtables::Args::new(matches), target, line: 1 }
    }

    fn packet() -> Packet {
        Packet::to("10.244.1.99", "10.96.0.10:53", Protocol::Udp)
    }

    fn eval(text: &str, st: &State) -> Match {
        evaluate(&rule(text), &packet(), st, &Env::default(), &Sets::default())
    }

    #[test]
    fn unknown_matches_never_match_and_say_why() {
        let m = eval("-m foo --bar 1 -d 10.96.0.10 -j ACCEPT", &State::default());
        assert_eq!(m.probability, 0.0);
        assert_eq!(m.unknown.as_deref(), Some("unknown match --bar"));
        let m = eval("-m physdev ! --physdev-is-in -j ACCEPT", &State::default());
        assert_eq!(m.probability, 0.0);
        assert!(m.unknown.unwrap().contains("--physdev-is-in"));
        // A set the tracer was not given is unknown, not a match.
        let m = eval("-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT", &State::default());
        assert_eq!(m.probability, 0.0);
        assert!(m.unknown.unwrap().contains("KUBE-CLUSTER-IP"));
        // A rule another match already rules out needs no excuse.
        let m = eval("-d 10.0.0.1 -m foo --bar 1 -j ACCEPT", &State::default());
        assert_eq!((m.probability, m.unknown.is_none()), (0.0, true));
    }

    #[test]
    fn target_options_are_not_matches() {
        let m = eval("-p udp -j MASQUERADE --random-fully", &State::default());
        assert_eq!((m.probability, m.unknown.is_none()), (1.0, true));
        let m = eval("-j MARK --set-xmark 0x4000/0x4000", &State::default());
        assert_eq!(m.probability, 1.0);
    }

    #[test]
    fn marks_conntrack_states_and_ipvs_connections() {
        let marked = State { mark: 0x4000, ..State::default() };
        assert_eq!(eval("-m mark --mark 0x00004000/0x00004000 -j ACCEPT", &marked).probability, 1.0);
        assert_eq!(eval("-m mark --mark 0x00004000/0x00004000 -j ACCEPT", &State::default()).probability, 0.0);
        assert_eq!(eval("-m mark ! --mark 0x4000/0x4000 -j RETURN", &State::default()).probability, 1.0);
        assert_eq!(eval("-m conntrack --ctstate NEW -j REJECT", &State::default()).probability, 1.0);
        assert_eq!(eval("-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", &State::default()).probability, 0.0);
        let dnat = State { dnat: true, ..State::default() };
        assert_eq!(eval("-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP", &dnat).probability, 0.0);
        let key = ServiceKey { addr: "192.0.2.50".parse().unwrap(), port: 443, protocol: Protocol::Tcp };
        let conn = State { ipvs: Some(key), ..State::default() };
        for form in ["-m ipvs --vaddr 192.0.2.50 --vproto tcp --vport 443 -j DROP", "-m ipvs --vproto 6 --vaddr 192.0.2.50 --vport 443 -j DROP"] {
            assert_eq!(eval(form, &conn).probability, 1.0, "{form}");
            assert_eq!(eval(form, &State::default()).probability, 0.0, "{form}");
        }
        assert_eq!(eval("-m ipvs --vaddr 192.0.2.50 --vproto udp --vport 443 -j DROP", &conn).probability, 0.0);
    }
}

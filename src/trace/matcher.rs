//! Rule matching for the tracer: the matches kube-proxy's rules use.

use std::net::IpAddr;

use serde::Serialize;

use super::Env;
use crate::iptables::restore::Rule;
use crate::net::{parse_ip_sloppy, Cidr};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: String,
    pub dport: u16,
    /// The interface it came in on, for `-i` matches (pod-interface detectors).
    pub in_interface: Option<String>,
}

/// How a rule matches a packet: with probability 0 (no), 1 (yes) or in between
/// (`-m statistic`).
pub struct Match {
    pub probability: f64,
}

pub fn arg_after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

pub fn split_host_port(s: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((parse_ip_sloppy(host)?, port.parse().ok()?))
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

/// Evaluates every match of a rule. Unknown matches are treated as matching.
pub fn evaluate(rule: &Rule, p: &Packet, env: &Env) -> Match {
    let a = &rule.args;
    let mut probability = 1.0;
    let mut negate = false;
    let mut i = 0;
    let mut ok = true;
    while i < a.len() && ok {
        let arg = a[i].as_str();
        let next = a.get(i + 1).map(String::as_str).unwrap_or("");
        let mut consumed = 2;
        let result: Option<bool> = match arg {
            "!" => {
                negate = true;
                i += 1;
                continue;
            }
            "-s" | "--source" => Some(addr_matches(next, &p.src)),
            "-d" | "--destination" => Some(addr_matches(next, &p.dst)),
            "-p" | "--protocol" => Some(next == p.protocol),
            "--dport" | "--destination-port" => Some(next.parse::<u16>().is_ok_and(|d| d == p.dport)),
            "-i" | "--in-interface" => Some(iface_matches(next, p.in_interface.as_deref())),
            "--dst-type" => Some(next != "LOCAL" || env.local_ips.contains(&p.dst)),
            "--src-type" => Some(next != "LOCAL" || env.local_ips.contains(&p.src)),
            "--probability" => {
                probability *= next.parse::<f64>().unwrap_or(1.0);
                None
            }
            "--rcheck" => {
                let name = arg_after(a, "--name").unwrap_or("");
                consumed = 1;
                Some(env.affinity.contains(name))
            }
            "--ctstate" => Some(!next.split(',').any(|s| s == "INVALID" || s == "RELATED" || s == "ESTABLISHED" || s == "DNAT")),
            "--mark" => {
                consumed = 2;
                None
            }
            "-j" | "--to-destination" | "--comment" | "-m" | "--name" | "--mode" | "--seconds" | "--nfacct-name"
            | "--or-mark" | "--xor-mark" | "--set-xmark" => None,
            _ => {
                consumed = 1;
                None
            }
        };
        if let Some(r) = result {
            ok = r != negate;
        }
        negate = false;
        i += consumed;
    }
    Match { probability: if ok { probability } else { 0.0 } }
}

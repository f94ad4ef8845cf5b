//! Conntrack hygiene, as kube-proxy does it for UDP and SCTP (TCP needs none: its
//! connections end): when an endpoint stops being reachable through a service address,
//! entries DNATed to it are stale; when a service goes from no endpoints (REJECT) to some,
//! entries for its address cached the rejection. [`stale`] finds those by comparing which
//! endpoints each service address reaches in the live and the desired rules; [`flush`]
//! deletes them with the `conntrack` tool, and only them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;

use super::restore::{Dump, Rule};
use crate::net::split_host_port;

/// A service address: protocol, destination IP (`None` for a NodePort on any local
/// address) and port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServiceAddr {
    pub protocol: String,
    pub ip: Option<IpAddr>,
    pub port: u16,
}

/// Conntrack entries to delete.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flush {
    pub addr: ServiceAddr,
    /// Only entries DNATed to this endpoint (`None`: every entry for the address).
    pub reply_src: Option<IpAddr>,
}

impl Flush {
    /// `conntrack -D` arguments.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["-D".to_string(), "-p".into(), self.addr.protocol.clone()];
        if let Some(ip) = self.addr.ip {
            a.extend(["--orig-dst".into(), ip.to_string()]);
        }
        a.extend(["--orig-port-dst".into(), self.addr.port.to_string()]);
        if let Some(ep) = self.reply_src {
            a.extend(["--reply-src".into(), ep.to_string()]);
        }
        a
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Reach {
    endpoints: BTreeSet<IpAddr>,
    refused: bool,
}

/// For every UDP/SCTP service address in a ruleset: the endpoints it reaches, or whether
/// it is refused (filter REJECT for "has no endpoints").
fn reach(dump: &Dump) -> BTreeMap<ServiceAddr, Reach> {
    let mut out: BTreeMap<ServiceAddr, Reach> = BTreeMap::new();
    if let Some(nat) = dump.tables.get("nat") {
        for chain in ["KUBE-SERVICES", "KUBE-NODEPORTS"] {
            for r in nat.rules_of(chain) {
                let (Some(addr), Some(target)) = (service_addr(r), r.args.after("-j")) else { continue };
                let mut eps = BTreeSet::new();
                endpoints(dump, target, &mut eps, 0);
                out.entry(addr).or_default().endpoints.extend(eps);
            }
        }
    }
    if let Some(filter) = dump.tables.get("filter") {
        for chain in ["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES"] {
            for r in filter.rules_of(chain).filter(|r| r.args.after("-j") == Some("REJECT")) {
                if let Some(addr) = service_addr(r) {
                    out.entry(addr).or_default().refused = true;
                }
            }
        }
    }
    out
}

fn service_addr(r: &Rule) -> Option<ServiceAddr> {
    let protocol = r.args.after("-p")?.to_string();
    if protocol != "udp" && protocol != "sctp" {
        return None;
    }
    let port = r.args.after("--dport")?.parse().ok()?;
    let ip = r.args.after("-d").and_then(|d| d.split('/').next()?.parse().ok());
    Some(ServiceAddr { protocol, ip, port })
}

fn endpoints(dump: &Dump, chain: &str, out: &mut BTreeSet<IpAddr>, depth: usize) {
    let Some(nat) = dump.tables.get("nat") else { return };
    if depth > 8 {
        return;
    }
    for r in nat.rules_of(chain) {
        match r.args.after("-j") {
            Some("DNAT") => {
                if let Some((ip, _)) = r.args.after("--to-destination").and_then(split_host_port) {
                    out.insert(ip);
                }
            }
            Some(next) if next.starts_with("KUBE-") && next != "KUBE-MARK-MASQ" => endpoints(dump, next, out, depth + 1),
            _ => {}
        }
    }
}

/// The flushes a change from `live` to `desired` calls for.
pub fn stale(live: &Dump, desired: &Dump) -> Vec<Flush> {
    let before = reach(live);
    let after = reach(desired);
    let mut out = BTreeSet::new();
    for (addr, was) in &before {
        let now = after.get(addr);
        let still: BTreeSet<IpAddr> = now.map(|n| n.endpoints.clone()).unwrap_or_default();
        for ep in was.endpoints.difference(&still) {
            out.insert(Flush { addr: addr.clone(), reply_src: Some(*ep) });
        }
        if was.refused && now.is_some_and(|n| !n.endpoints.is_empty()) {
            out.insert(Flush { addr: addr.clone(), reply_src: None });
        }
    }
    out.into_iter().collect()
}

/// Deletes conntrack entries (the `conntrack` tool on a node; a recorder in tests).
pub trait Conntrack: Send {
    /// Returns how many flow entries were deleted (kube-proxy's
    /// `conntrack_reconciler_deleted_entries_total` counts them).
    fn flush(&mut self, flushes: &[Flush], ipv6: bool) -> Result<usize, String>;
}

/// Runs the `conntrack` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecConntrack;

impl Conntrack for ExecConntrack {
    fn flush(&mut self, flushes: &[Flush], ipv6: bool) -> Result<usize, String> {
        flush(flushes, ipv6)
    }
}

/// Records flushes instead of running them (shared, so a test can look after handing it over).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone, Default)]
pub struct RecordingConntrack {
    pub flushed: std::sync::Arc<std::sync::Mutex<Vec<Flush>>>,
}

#[cfg(any(test, feature = "testing"))]
impl Conntrack for RecordingConntrack {
    fn flush(&mut self, flushes: &[Flush], _ipv6: bool) -> Result<usize, String> {
        let mut f = self.flushed.lock().map_err(|_| "recorder poisoned".to_string())?;
        f.extend_from_slice(flushes);
        Ok(flushes.len())
    }
}

/// The N of the tool's closing line "N flow entries have been deleted." (0 when absent).
pub fn deleted_entries(stderr: &str) -> usize {
    stderr
        .lines()
        .find_map(|l| {
            let head = l.strip_suffix(" flow entries have been deleted.").or_else(|| l.strip_suffix(" flow entries have been deleted"))?;
            head.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Runs `conntrack -D` for each flush and returns the flow entries deleted. "0 flow
/// entries" is not an error.
pub fn flush(flushes: &[Flush], ipv6: bool) -> Result<usize, String> {
    let mut deleted = 0;
    for f in flushes {
        let mut args = f.args();
        if ipv6 {
            args.extend(["-f".into(), "ipv6".into()]);
        }
        let out = Command::new("conntrack").args(&args).output().map_err(|e| format!("cannot run conntrack: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && !stderr.contains("0 flow entries") {
            return Err(format!("conntrack {}: {}", args.join(" "), stderr.trim()));
        }
        deleted += deleted_entries(&stderr);
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::restore::parse;

    const LIVE: &str = "*filter\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment \"ns/empty:dns has no endpoints\" -m udp -p udp -d 10.96.0.20 --dport 53 -j REJECT\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-1 - [0:0]\n:KUBE-SEP-2 - [0:0]\n-A KUBE-SERVICES -m udp -p udp -d 10.96.0.10 --dport 53 -j KUBE-SVC-A\n-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-1\n-A KUBE-SVC-A -j KUBE-SEP-2\n-A KUBE-SEP-1 -m udp -p udp -j DNAT --to-destination 10.244.1.5:53\n-A KUBE-SEP-2 -m udp -p udp -j DNAT --to-destination 10.244.2.7:53\nCOMMIT\n";

    #[test]
    fn a_removed_udp_endpoint_and_a_service_getting_endpoints_are_flushed() {
        let desired = "*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-1 - [0:0]\n:KUBE-SVC-B - [0:0]\n:KUBE-SEP-3 - [0:0]\n-A KUBE-SERVICES -m udp -p udp -d 10.96.0.10 --dport 53 -j KUBE-SVC-A\n-A KUBE-SVC-A -j KUBE-SEP-1\n-A KUBE-SEP-1 -m udp -p udp -j DNAT --to-destination 10.244.1.5:53\n-A KUBE-SERVICES -m udp -p udp -d 10.96.0.20 --dport 53 -j KUBE-SVC-B\n-A KUBE-SVC-B -j KUBE-SEP-3\n-A KUBE-SEP-3 -m udp -p udp -j DNAT --to-destination 10.244.3.3:53\nCOMMIT\n";
        let flushes = stale(&parse(LIVE).unwrap(), &parse(desired).unwrap());
        let args: Vec<String> = flushes.iter().map(|f| f.args().join(" ")).collect();
        assert_eq!(args, [
            "-D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.2.7",
            "-D -p udp --orig-dst 10.96.0.20 --orig-port-dst 53",
        ]);
    }

    #[test]
    fn nothing_to_flush_when_nothing_changes_or_only_tcp_changes() {
        assert!(stale(&parse(LIVE).unwrap(), &parse(LIVE).unwrap()).is_empty());
        let tcp = LIVE.replace("udp", "tcp");
        let empty = "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n";
        assert!(stale(&parse(&tcp).unwrap(), &parse(empty).unwrap()).is_empty());
    }

    #[test]
    fn the_tools_closing_line_gives_the_entries_deleted() {
        assert_eq!(deleted_entries("conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted.\n"), 3);
        assert_eq!(deleted_entries("conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n"), 0);
        assert_eq!(deleted_entries("tcp 6 431999 ESTABLISHED src=1.2.3.4\n"), 0);
    }
}

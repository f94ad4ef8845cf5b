//! Conntrack hygiene shared by the modes, as kube-proxy does it for UDP and SCTP (TCP
//! needs none: its connections end). A mode says, per service address, which endpoints it
//! reached before a sync and which it reaches after ([`Reach`], read from its own rules);
//! [`stale_flows`] turns the two into the entries to delete: those DNATed to an endpoint
//! the address no longer reaches, and every entry of an address that had no endpoints
//! (its flows cached the rejection) and now has some. [`clear`] deletes them through a
//! [`Conntrack`] (the `conntrack` tool on a node) and says how that went, for the
//! `conntrack_reconciler_*` metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;
use std::time::Instant;

use crate::model::Protocol;

/// A service address: protocol (UDP or SCTP), destination IP (`None` for a NodePort on
/// any local address) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAddr {
    pub protocol: Protocol,
    pub ip: Option<IpAddr>,
    pub port: u16,
}

/// Ordered by the protocol's name (`sctp` before `udp`), then address and port: the order
/// the flushes are run and printed in.
impl Ord for ServiceAddr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.protocol.lower(), self.ip, self.port).cmp(&(other.protocol.lower(), other.ip, other.port))
    }
}

impl PartialOrd for ServiceAddr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
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
        let mut a = vec!["-D".to_string(), "-p".into(), self.addr.protocol.lower().to_string()];
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

/// What one service address reaches in a mode's rules.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reach {
    pub endpoints: BTreeSet<IpAddr>,
    /// Traffic to it is refused or dropped for want of endpoints.
    pub refused: bool,
}

/// The flushes a change from `before` to `after` calls for (an address only in `after`
/// had no flows to go stale).
pub fn stale_flows(before: &BTreeMap<ServiceAddr, Reach>, after: &BTreeMap<ServiceAddr, Reach>) -> Vec<Flush> {
    let mut out = BTreeSet::new();
    for (addr, was) in before {
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

/// One family's stale-flow cleanup in a sync (kube-proxy's conntrack reconciler).
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    pub family: crate::net::IpFamily,
    pub seconds: f64,
    /// Flow entries deleted (`None`: the cleanup failed).
    pub deleted: Option<usize>,
    /// Why the cleanup failed (the `conntrack` tool's message).
    pub error: Option<String>,
}

/// Clears one family's stale flows, timed; a failure is logged and reported, never fatal
/// (the rules are already in place, as in kube-proxy).
pub fn clear(conntrack: &mut dyn Conntrack, family: crate::net::IpFamily, flushes: &[Flush]) -> Reconciled {
    let started = Instant::now();
    let result = conntrack.flush(flushes, family.is_v6());
    let seconds = started.elapsed().as_secs_f64();
    if let Err(e) = &result {
        tracing::warn!(error = %e, ?family, "stale UDP/SCTP conntrack entries not cleared");
    }
    Reconciled { family, seconds, deleted: result.as_ref().ok().copied(), error: result.err() }
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

    fn udp(ip: &str) -> ServiceAddr {
        ServiceAddr { protocol: Protocol::Udp, ip: ip.parse().ok(), port: 53 }
    }

    fn reach(eps: &[&str]) -> Reach {
        Reach { endpoints: eps.iter().map(|e| e.parse().unwrap()).collect(), refused: eps.is_empty() }
    }

    #[test]
    fn a_lost_endpoint_and_an_address_getting_its_first_are_stale_and_a_new_address_is_not() {
        let before = BTreeMap::from([(udp("10.96.0.10"), reach(&["10.244.1.5", "10.244.2.7"])), (udp("10.96.0.20"), reach(&[]))]);
        let after = BTreeMap::from([
            (udp("10.96.0.10"), reach(&["10.244.1.5"])),
            (udp("10.96.0.20"), reach(&["10.244.3.3"])),
            (udp("10.96.0.30"), reach(&["10.244.4.4"])),
        ]);
        let args: Vec<String> = stale_flows(&before, &after).iter().map(|f| f.args().join(" ")).collect();
        assert_eq!(args, [
            "-D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.2.7",
            "-D -p udp --orig-dst 10.96.0.20 --orig-port-dst 53",
        ]);
        assert!(stale_flows(&after, &after).is_empty());
    }

    #[test]
    fn a_failed_clear_is_reported_with_its_family() {
        struct Refusing;
        impl Conntrack for Refusing {
            fn flush(&mut self, _: &[Flush], _: bool) -> Result<usize, String> {
                Err("no conntrack".into())
            }
        }
        let one = [Flush { addr: udp("fd00::10"), reply_src: None }];
        let r = clear(&mut Refusing, crate::net::IpFamily::V6, &one);
        assert_eq!((r.family, r.deleted, r.error.as_deref()), (crate::net::IpFamily::V6, None, Some("no conntrack")));
        let r = clear(&mut RecordingConntrack::default(), crate::net::IpFamily::V4, &one);
        assert_eq!((r.deleted, r.error), (Some(1), None));
    }

    #[test]
    fn the_tools_closing_line_gives_the_entries_deleted() {
        assert_eq!(deleted_entries("conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted.\n"), 3);
        assert_eq!(deleted_entries("conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n"), 0);
        assert_eq!(deleted_entries("tcp 6 431999 ESTABLISHED src=1.2.3.4\n"), 0);
    }
}

//! The socket path (`--socket-lb`, docs/socket-lb.md) in a trace: a local socket's
//! `connect()` or `sendmsg()` to an address the socket-LB maps hold is translated to a
//! backend before any packet exists, so the rules never see it. From the entries
//! (`socketlb::plan::Wanted`: the plan offline, the pinned maps with `--live`) it says
//! which backends a new socket may go to, with what share, and the Service's `ClientIP`
//! affinity; with `--live` also the clients the affinity map pins, each to its backend.

use std::net::SocketAddr;

use serde::Serialize;

use crate::model::Protocol;
use crate::netfilter::bpf::maps::{AffinityKey, AffinityValue, ServiceKey};
use crate::socketlb::plan::Wanted;

use super::{Packet, Verdict};

/// Where the socket path's entries came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `socketlb::plan` of the same cluster state the rules are rendered from.
    Plan,
    /// The pinned maps the programs read.
    Maps,
}

/// One branch of the translation: a backend (`Verdict::Dnat`, the address the socket is
/// rewritten to) or the refusal of a Service with no endpoints (`Verdict::Reject`:
/// `connect()` fails with `ECONNREFUSED`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Branch {
    pub verdict: Verdict,
    pub probability: f64,
}

/// A client the affinity map pins (`--live`): its network namespace's cookie, the backend
/// it goes to, and whether the entry is still followed (fresh and its backend in the set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pinned {
    pub netns_cookie: u64,
    pub backend: SocketAddr,
    pub followed: bool,
}

/// The socket path of one traced socket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SocketTrace {
    pub source: Source,
    pub service: SocketAddr,
    #[serde(serialize_with = "super::verdict::serialize_protocol")]
    pub protocol: Protocol,
    /// A new client's pick (uniform over the backends, as the rules' is).
    pub branches: Vec<Branch>,
    /// `ClientIP` affinity's timeout in seconds: a client (a pod, or the node's own
    /// processes: one network namespace) keeps its backend while it uses it within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pinned: Vec<Pinned>,
}

/// The socket path of `packet`, or `None` when the programs leave it to the rules (no
/// entry for its address, port and protocol: a NodePort, an external address, SCTP, …).
pub fn trace(wanted: &Wanted, packet: &Packet, source: Source) -> Option<SocketTrace> {
    let key = ServiceKey { addr: packet.dst, port: packet.dport, proto: packet.protocol };
    let entry = wanted.get(&key)?;
    let n = entry.backends.len();
    let branches = if n == 0 {
        vec![Branch { verdict: Verdict::Reject, probability: 1.0 }]
    } else {
        entry.backends.iter().map(|b| Branch { verdict: Verdict::Dnat(b.to_string()), probability: 1.0 / n as f64 }).collect()
    };
    Some(SocketTrace {
        source,
        service: SocketAddr::new(key.addr, key.port),
        protocol: key.proto,
        branches,
        affinity_seconds: entry.affinity,
        pinned: Vec::new(),
    })
}

impl SocketTrace {
    /// Adds the affinity map's entries of this Service (`--live`; `entries` may hold every
    /// Service's), judged at `now_ns` (`CLOCK_MONOTONIC_COARSE`) as the programs judge them.
    pub fn with_pinned(mut self, entries: &[(AffinityKey, AffinityValue)], now_ns: u64) -> SocketTrace {
        let key = ServiceKey { addr: self.service.ip(), port: self.service.port(), proto: self.protocol };
        let backends: Vec<String> = self.branches.iter().map(|b| b.verdict.to_string()).collect();
        self.pinned = entries
            .iter()
            .filter(|(k, _)| k.service == key)
            .map(|(k, v)| Pinned {
                netns_cookie: k.netns_cookie,
                backend: v.backend,
                followed: self.affinity_seconds.is_some_and(|t| v.fresh(now_ns, t)) && backends.contains(&v.backend.to_string()),
            })
            .collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socketlb::plan::Entry;

    fn packet(dst: &str, port: u16, protocol: Protocol) -> Packet {
        Packet { src: "10.244.1.99".parse().unwrap(), dst: dst.parse().unwrap(), protocol, dport: port, in_interface: None }
    }

    fn wanted() -> Wanted {
        let key = |ip: &str, proto| ServiceKey { addr: ip.parse().unwrap(), port: 53, proto };
        let addrs = |v: &[&str]| v.iter().map(|a| a.parse().unwrap()).collect::<Vec<SocketAddr>>();
        [
            (key("10.96.0.10", Protocol::Udp), Entry { backends: addrs(&["10.244.1.5:53", "10.244.2.5:53"]), affinity: Some(10800) }),
            (key("10.96.0.11", Protocol::Tcp), Entry::default()),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_held_address_is_translated_with_its_affinity_and_others_are_left_to_the_rules() {
        let t = trace(&wanted(), &packet("10.96.0.10", 53, Protocol::Udp), Source::Plan).expect("an entry");
        assert_eq!(t.branches.iter().map(|b| (b.verdict.to_string(), b.probability)).collect::<Vec<_>>(), [("10.244.1.5:53".into(), 0.5), ("10.244.2.5:53".to_string(), 0.5)]);
        assert_eq!(t.affinity_seconds, Some(10800));
        let refused = trace(&wanted(), &packet("10.96.0.11", 53, Protocol::Tcp), Source::Plan).expect("an entry");
        assert_eq!(refused.branches, vec![Branch { verdict: Verdict::Reject, probability: 1.0 }]);
        assert_eq!(refused.affinity_seconds, None);
        // Another protocol or port: no entry, the rules decide.
        assert_eq!(trace(&wanted(), &packet("10.96.0.10", 53, Protocol::Tcp), Source::Plan), None);
        assert_eq!(trace(&wanted(), &packet("10.96.0.10", 54, Protocol::Udp), Source::Plan), None);
    }

    #[test]
    fn pinned_clients_are_followed_only_while_fresh_and_in_the_set() {
        let t = trace(&wanted(), &packet("10.96.0.10", 53, Protocol::Udp), Source::Maps).unwrap();
        let v = |ns: u64, be: &str| AffinityValue { last_used_ns: ns, backend_id: 1, slot: 0, backend: be.parse().unwrap() };
        let now = 20_000 * 1_000_000_000;
        let svc = ServiceKey { addr: "10.96.0.10".parse().unwrap(), port: 53, proto: Protocol::Udp };
        let k = |cookie: u64, service: ServiceKey| AffinityKey { netns_cookie: cookie, service };
        let elsewhere = ServiceKey { port: 54, ..svc };
        let entries = [
            (k(1, svc), v(now - 5_000_000_000, "10.244.1.5:53")),
            (k(2, svc), v(now - 10_800_000_000_000, "10.244.2.5:53")),
            (k(3, svc), v(now, "10.244.9.9:53")),
            (k(4, elsewhere), v(now, "10.244.1.5:53")),
        ];
        let t = t.with_pinned(&entries, now);
        assert_eq!(t.pinned.iter().map(|p| (p.netns_cookie, p.followed)).collect::<Vec<_>>(), [(1, true), (2, false), (3, false)]);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["source"], "maps");
        assert_eq!(json["protocol"], "udp");
        assert_eq!(json["branches"][0]["verdict"], "10.244.1.5:53");
    }
}

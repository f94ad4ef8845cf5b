//! Stale UDP/SCTP conntrack flows in iptables mode: which endpoints each service address
//! reaches in a ruleset (nat DNATs through the service chains, filter REJECTs for "has no
//! endpoints"), so that [`stale`] can compare the live and the desired rules. Deleting
//! them, and the rest of the mode-independent part, is [`crate::netfilter::conntrack`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::netfilter::view::{Chains, RuleRef, Tables};
use crate::netfilter::Target;
use crate::netfilter::names::{KUBE_EXTERNAL_SERVICES, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_SERVICES};
use crate::model::Protocol;
use crate::net::split_host_port;
use crate::netfilter::conntrack::{stale_flows, Flush, Reach, ServiceAddr};

/// For every UDP/SCTP service address in a ruleset: the endpoints it reaches, or whether
/// it is refused (filter REJECT for "has no endpoints").
fn reach(dump: &impl Tables) -> BTreeMap<ServiceAddr, Reach> {
    let mut out: BTreeMap<ServiceAddr, Reach> = BTreeMap::new();
    if let Some(nat) = dump.table("nat") {
        for chain in [KUBE_SERVICES, KUBE_NODEPORTS] {
            for r in nat.rules_of(chain) {
                let (Some(addr), Some(target)) = (service_addr(r), r.target.chain()) else { continue };
                let mut eps = BTreeSet::new();
                endpoints(dump, target, &mut eps, 0);
                out.entry(addr).or_default().endpoints.extend(eps);
            }
        }
    }
    if let Some(filter) = dump.table("filter") {
        for chain in [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES] {
            for r in filter.rules_of(chain).filter(|r| matches!(r.target, Target::Reject(_))) {
                if let Some(addr) = service_addr(r) {
                    out.entry(addr).or_default().refused = true;
                }
            }
        }
    }
    out
}

fn service_addr(r: RuleRef<'_>) -> Option<ServiceAddr> {
    let protocol = Protocol::from_name(r.args.after("-p")?)?;
    if protocol == Protocol::Tcp {
        return None;
    }
    let port = r.args.after("--dport")?.parse().ok()?;
    let ip = r.args.after("-d").and_then(|d| d.split('/').next()?.parse().ok());
    Some(ServiceAddr { protocol, ip, port })
}

fn endpoints(dump: &impl Tables, chain: &str, out: &mut BTreeSet<IpAddr>, depth: usize) {
    let Some(nat) = dump.table("nat") else { return };
    if depth > 8 {
        return;
    }
    for r in nat.rules_of(chain) {
        match r.target {
            Target::Dnat(to) => {
                if let Some((ip, _)) = split_host_port(to) {
                    out.insert(ip);
                }
            }
            Target::Jump(next) if next.starts_with("KUBE-") && *next != KUBE_MARK_MASQ => endpoints(dump, next, out, depth + 1),
            _ => {}
        }
    }
}

/// The flushes a change from `live` to `desired` calls for.
pub fn stale(live: &impl Tables, desired: &impl Tables) -> Vec<Flush> {
    stale_flows(&reach(live), &reach(desired))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::dump::parse;

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
}

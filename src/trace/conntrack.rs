//! `trace --live`'s cached flows: a packet that matches a conntrack flow is sent where
//! the flow goes (its NAT binding, or none), not through the rules. A flow the rules would
//! send elsewhere is the stale flow users cannot see: this says so, beside the rule walk.

use serde::Serialize;

use super::verdict::Verdict;
use super::Packet;
use crate::net::join_host_port;
use crate::netfilter::ctnetlink::Flow;

/// One cached flow the packet matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cached {
    /// The flow as `conntrack -L` shows it.
    pub flow: String,
    /// Where the flow sends the packet (`ip:port`: the reply's source).
    pub to: String,
    /// Whether the flow was DNATed (false: cached before any rule sent it anywhere).
    pub nated: bool,
    /// Whether the rules send a new flow there too; false: the flow is stale.
    pub follows_rules: bool,
}

/// The flows `packet` (from source port `sport`, or any) matches, each with whether the
/// rule walk's `verdicts` send a new flow the same way (a DNAT to the flow's reply
/// source; for a flow that was not NATed, no DNAT at all).
pub fn cached<'a>(packet: &Packet, sport: Option<u16>, flows: &[Flow], verdicts: impl Iterator<Item = &'a Verdict> + Clone) -> Vec<Cached> {
    let proto = packet.protocol.number() as u8;
    flows
        .iter()
        .filter(|f| f.orig.proto == proto && f.orig.src == packet.src && f.orig.dst == packet.dst && f.orig.dport == packet.dport)
        .filter(|f| sport.is_none_or(|p| p == f.orig.sport))
        .map(|f| {
            let to = join_host_port(&f.reply.src, f.reply.sport);
            let nated = (f.reply.src, f.reply.sport) != (f.orig.dst, f.orig.dport);
            let mut dnats = verdicts.clone().filter_map(|v| match v {
                Verdict::Dnat(d) => Some(d.as_str()),
                _ => None,
            });
            let follows_rules = if nated { dnats.any(|d| d == to || crate::net::parse_ip_sloppy(d) == Some(f.reply.src)) } else { dnats.next().is_none() };
            Cached { flow: f.to_string(), to, nated, follows_rules }
        })
        .collect()
}

/// The text lines `trace --live` prints for the cached flows.
pub fn text(cached: &[Cached]) -> String {
    if cached.is_empty() {
        return String::new();
    }
    let mut out = format!("conntrack: {} cached flow(s) match: the kernel sends this packet where the flow goes, not through the rules below\n", cached.len());
    for c in cached {
        let how = match (c.nated, c.follows_rules) {
            (true, true) => format!("to {}, where the rules send it too", c.to),
            (false, true) => format!("to {} as addressed (not NATed), as the rules would", c.to),
            (true, false) => format!("to {}, where the rules no longer send it: a stale flow (the conntrack reconciler deletes it after the next sync that changes this service's UDP endpoints; `svcproxy sync --dry-run` lists it)", c.to),
            (false, false) => format!("to {} as addressed: cached before any rule sent it anywhere, so the rules are bypassed: a stale flow (the conntrack reconciler deletes it after the next sync that changes this service's UDP endpoints)", c.to),
        };
        out.push_str(&format!("  {}: {how}\n", c.flow));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::model::Protocol;
    use crate::netfilter::ctnetlink::wire;
    use crate::netfilter::ctnetlink::Tuple;

    fn flow(sport: u16, reply: &str, reply_port: u16) -> Flow {
        let c: IpAddr = "10.244.1.99".parse().unwrap();
        Flow {
            orig: Tuple { src: c, dst: "10.96.0.10".parse().unwrap(), proto: wire::IPPROTO_UDP, sport, dport: 53 },
            reply: Tuple { src: reply.parse().unwrap(), dst: c, proto: wire::IPPROTO_UDP, sport: reply_port, dport: sport },
            zone: 0,
            id: 1,
            status: 0,
            timeout: 30,
        }
    }

    fn packet() -> Packet {
        Packet { src: "10.244.1.99".parse().unwrap(), dst: "10.96.0.10".parse().unwrap(), protocol: Protocol::Udp, dport: 53, in_interface: None }
    }

    #[test]
    fn a_flow_to_an_endpoint_the_rules_still_reach_follows_them_and_others_are_stale() {
        let flows = [flow(40000, "10.244.2.7", 5353), flow(40001, "10.244.3.3", 5353), flow(40002, "10.96.0.10", 53)];
        let verdicts = [Verdict::Dnat("10.244.2.7:5353".into()), Verdict::Dnat("10.244.4.4:5353".into())];
        let c = cached(&packet(), None, &flows, verdicts.iter());
        assert_eq!(c.iter().map(|c| (c.to.as_str(), c.nated, c.follows_rules)).collect::<Vec<_>>(), [
            ("10.244.2.7:5353", true, true),
            ("10.244.3.3:5353", true, false),
            ("10.96.0.10:53", false, false),
        ]);
        let t = text(&c);
        assert!(t.starts_with("conntrack: 3 cached flow(s) match"), "{t}");
        assert!(t.contains("udp src=10.244.1.99 dst=10.96.0.10 sport=40001 dport=53 src=10.244.3.3") && t.contains("where the rules no longer send it: a stale flow"), "{t}");
        assert!(t.contains("cached before any rule"), "{t}");
    }

    #[test]
    fn the_source_port_and_protocol_pick_the_flow_and_no_dnat_means_as_addressed() {
        let flows = [flow(40000, "10.244.2.7", 5353), flow(40002, "10.96.0.10", 53)];
        let c = cached(&packet(), Some(40002), &flows, [Verdict::Undecided].iter());
        assert_eq!(c.len(), 1);
        assert!(!c[0].nated && c[0].follows_rules);
        let tcp = Packet { protocol: Protocol::Tcp, ..packet() };
        assert!(cached(&tcp, None, &flows, [].iter()).is_empty());
        assert_eq!(text(&[]), "");
    }
}

//! Stale UDP/SCTP conntrack entries in nftables mode, found as iptables mode finds them
//! ([`crate::iptables::conntrack`]): from which endpoints each service address reaches
//! before and after a change (the `service-ips` / `service-nodeports` elements, followed
//! through the services' chains to `dnat to`, or v1.36's `dnat … to numgen … map`), and
//! which addresses were refused (a
//! `no-endpoint-*` element going to `reject-chain`). Pure; the comparison and the flush
//! are the shared [`crate::netfilter::conntrack`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::model::Objects;
use super::names::{NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, REJECT_CHAIN, SERVICE_IPS, SERVICE_NODEPORTS};
use crate::model::Protocol;
use crate::netfilter::conntrack::{stale_flows, Flush, Reach, ServiceAddr};

/// A `service-ips` key (`ip . proto . port`) or a NodePort one (`proto . port`), UDP/SCTP only.
fn service_addr(key: &[String]) -> Option<ServiceAddr> {
    let (ip, proto, port) = match key {
        [ip, proto, port] => (ip.parse().ok(), proto, port),
        [proto, port] => (None, proto, port),
        _ => return None,
    };
    let protocol = Protocol::from_name(proto)?;
    if protocol == Protocol::Tcp {
        return None;
    }
    Some(ServiceAddr { protocol, ip, port: port.parse().ok()? })
}

fn reach(objects: &[&Objects]) -> BTreeMap<ServiceAddr, Reach> {
    let mut rules: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in objects.iter().flat_map(|o| &o.rules) {
        rules.entry(r.chain.as_str()).or_default().push(r.rule.as_str());
    }
    let mut out: BTreeMap<ServiceAddr, Reach> = BTreeMap::new();
    for e in objects.iter().flat_map(|o| &o.elements) {
        let Some(addr) = service_addr(&e.key) else { continue };
        let value = e.value.join(" ");
        match e.set.as_str() {
            SERVICE_IPS | SERVICE_NODEPORTS => {
                let mut eps = BTreeSet::new();
                for chain in targets(&value) {
                    endpoints(&rules, chain, &mut eps, 0);
                }
                out.entry(addr).or_default().endpoints.extend(eps);
            }
            NO_ENDPOINT_SERVICES | NO_ENDPOINT_NODEPORTS if targets(&value).any(|c| c == REJECT_CHAIN) => {
                out.entry(addr).or_default().refused = true;
            }
            _ => {}
        }
    }
    out
}

/// The chains a rule or verdict jumps or goes to.
fn targets(text: &str) -> impl Iterator<Item = &str> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for w in words.windows(2) {
        if w[0] == "goto" || w[0] == "jump" {
            out.push(w[1].trim_end_matches(','));
        }
    }
    out.into_iter()
}

fn endpoints(rules: &BTreeMap<&str, Vec<&str>>, chain: &str, out: &mut BTreeSet<IpAddr>, depth: usize) {
    if depth > 8 {
        return;
    }
    for rule in rules.get(chain).into_iter().flatten() {
        if let Some(to) = rule.split("dnat to ").nth(1).and_then(|s| s.split_whitespace().next()) {
            if let Some((ip, _)) = crate::net::split_host_port(to) {
                out.insert(ip);
            }
        }
        out.extend(dnat_map(rule));
        for next in targets(rule) {
            endpoints(rules, next, out, depth + 1);
        }
    }
}

/// The addresses of a `dnat ip addr . port to numgen random mod N map { 0 : IP . PORT , … }`.
fn dnat_map(rule: &str) -> Vec<IpAddr> {
    let Some(arms) = rule.split_once(" map { ").filter(|_| rule.contains(" addr . port to numgen ")).map(|(_, a)| a) else {
        return Vec::new();
    };
    arms.trim_end_matches('}').split(',').filter_map(|arm| arm.split_once(':')?.1.split(" . ").next()?.trim().parse().ok()).collect()
}

/// The flushes a change from the `before` objects to the `after` ones calls for.
pub fn stale(before: &[&Objects], after: &[&Objects]) -> Vec<Flush> {
    stale_flows(&reach(before), &reach(after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::{Objects, Rule};

    fn dns(endpoints: &[&str]) -> Objects {
        let mut o = Objects::default();
        if endpoints.is_empty() {
            o.element(NO_ENDPOINT_SERVICES, vec!["10.96.0.10".into(), "udp".into(), "53".into()], vec![format!("goto {REJECT_CHAIN}")], None);
            return o;
        }
        o.element(SERVICE_IPS, vec!["10.96.0.10".into(), "udp".into(), "53".into()], vec!["goto service-dns".into()], None);
        let arms: Vec<String> = endpoints.iter().enumerate().map(|(i, e)| format!("{i} : goto endpoint-{e}")).collect();
        o.rule(Rule::new("service-dns", format!("numgen random mod {} vmap {{ {} }}", endpoints.len(), arms.join(" , "))));
        for e in endpoints {
            o.rule(Rule::new(format!("endpoint-{e}"), format!("meta l4proto udp dnat to {e}:53")));
        }
        o
    }

    /// kube-proxy v1.36's service chain: one DNAT map, no endpoint chains.
    fn dns_map(endpoints: &[&str]) -> Objects {
        let mut o = Objects::default();
        o.element(SERVICE_IPS, vec!["fd00::10".into(), "udp".into(), "53".into()], vec!["goto service-dns".into()], None);
        let arms: Vec<String> = endpoints.iter().enumerate().map(|(i, e)| format!("{i} : {e} . 53")).collect();
        let rule = format!("meta l4proto udp dnat ip6 addr . port to numgen random mod {} map {{ {} }}", endpoints.len(), arms.join(" , "));
        o.rule(Rule::new("service-dns", rule));
        o
    }

    #[test]
    fn endpoints_of_a_dnat_map_are_found() {
        let (two, one) = (dns_map(&["fd00:10::5", "fd00:10::6"]), dns_map(&["fd00:10::6"]));
        let f = stale(&[&two], &[&one]);
        assert_eq!(f.iter().map(|f| f.reply_src).collect::<Vec<_>>(), vec![Some("fd00:10::5".parse().unwrap())]);
        assert!(stale(&[&one], &[&two]).is_empty());
    }

    #[test]
    fn a_udp_endpoint_that_goes_and_a_service_that_gets_endpoints_are_flushed() {
        let (two, one, none) = (dns(&["10.244.1.5", "10.244.2.6"]), dns(&["10.244.2.6"]), dns(&[]));
        let f = stale(&[&two], &[&one]);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].reply_src, f[0].addr.port), (Some("10.244.1.5".parse().unwrap()), 53));
        let f = stale(&[&none], &[&one]);
        assert_eq!((f.len(), f[0].reply_src), (1, None), "the cached rejection goes");
        assert!(stale(&[&one], &[&two]).is_empty(), "an endpoint that comes stales nothing");
    }
}

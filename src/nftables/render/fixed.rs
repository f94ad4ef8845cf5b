//! The objects every sync sets up whatever the services (kube-proxy's `setupNFTables`):
//! base chains on the netfilter hooks, the top-level chains they jump to, the masquerade
//! chains (and, from kube-proxy v1.36, the `hairpin-connections` set and the ClusterIP
//! masquerade rule of `services`), and the shared sets and verdict maps the services'
//! elements go into.

use crate::nftables::context::Context;
use crate::nftables::model::{Chain, Hook, Objects, Rule, Set};
use crate::nftables::names::*;

/// (name, type, hook, priority): `dstnat` is -100, `srcnat` 100, `filter` 0.
const BASE_CHAINS: [(&str, &str, &str, i32); 8] = [
    (FILTER_PREROUTING_PRE_DNAT, "filter", "prerouting", -110),
    (FILTER_OUTPUT_PRE_DNAT, "filter", "output", -110),
    (FILTER_INPUT, "filter", "input", 0),
    (FILTER_FORWARD, "filter", "forward", 0),
    (FILTER_OUTPUT, "filter", "output", 0),
    (NAT_PREROUTING, "nat", "prerouting", -100),
    (NAT_OUTPUT, "nat", "output", -100),
    (NAT_POSTROUTING, "nat", "postrouting", 100),
];

/// (chain jumped to, base chain, match before the jump), in kube-proxy's order.
const JUMPS: [(&str, &str, &str); 11] = [
    (NODEPORT_ENDPOINTS_CHECK, FILTER_INPUT, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_INPUT, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_FORWARD, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_OUTPUT, "ct state new"),
    (FIREWALL_CHECK, FILTER_PREROUTING_PRE_DNAT, "ct state new"),
    (FIREWALL_CHECK, FILTER_OUTPUT_PRE_DNAT, "ct state new"),
    (SERVICES, NAT_OUTPUT, ""),
    (SERVICES, NAT_PREROUTING, ""),
    (MASQUERADING, NAT_POSTROUTING, ""),
    (CLUSTER_IPS_CHECK, FILTER_FORWARD, "ct state new"),
    (CLUSTER_IPS_CHECK, FILTER_OUTPUT, "ct state new"),
];

pub fn write(ctx: &Context) -> Objects {
    let mut out = Objects::default();
    chains(ctx, &mut out);
    masquerade(ctx, &mut out);
    cluster_ips(ctx, &mut out);
    no_endpoints(ctx, &mut out);
    localhost_node_ports(ctx, &mut out);
    firewall(ctx, &mut out);
    dispatch(ctx, &mut out);
    out
}

fn chains(ctx: &Context, out: &mut Objects) {
    for (name, kind, hook, priority) in BASE_CHAINS {
        out.chain(Chain { name: name.into(), hook: Some(Hook { kind, hook, priority }), comment: None });
    }
    let mut regular: Vec<&str> = Vec::new();
    for (to, from, matches) in JUMPS {
        if !regular.contains(&to) {
            regular.push(to);
        }
        let rule = if matches.is_empty() { format!("jump {to}") } else { format!("{matches} jump {to}") };
        out.rule(Rule::new(from, rule));
    }
    let mark_chain = (!ctx.hairpin_set).then_some(MARK_MASQ);
    for name in regular.into_iter().chain(mark_chain) {
        out.chain(Chain::regular(name));
    }
    let comment = format!("helper for @{NO_ENDPOINT_SERVICES} / @{NO_ENDPOINT_NODEPORTS}");
    out.chain(Chain { name: REJECT_CHAIN.into(), hook: None, comment: Some(comment) });
    out.rule(Rule::new(REJECT_CHAIN, "reject"));
}

fn masquerade(ctx: &Context, out: &mut Objects) {
    let m = &ctx.mark;
    if ctx.hairpin_set {
        let addr = ctx.family.addr_type();
        let kind = format!("{addr} . {addr} . inet_proto . inet_service");
        out.sets.push(Set::plain(HAIRPIN_CONNECTIONS, kind, Some("service hairpin connections")));
        out.rule(Rule::new(MASQUERADING, format!("mark and {m} != 0 mark set mark xor {m} masquerade fully-random")));
        let ip = ctx.ip();
        let hairpin = format!("ct status dnat {ip} saddr . {ip} daddr . meta l4proto . th dport @{HAIRPIN_CONNECTIONS} masquerade fully-random");
        out.rule(Rule::new(MASQUERADING, hairpin));
        return;
    }
    out.rule(Rule::new(MARK_MASQ, format!("mark set mark or {m}")));
    out.rule(Rule::new(MASQUERADING, format!("mark and {m} == 0 return")));
    out.rule(Rule::new(MASQUERADING, format!("mark set mark xor {m}")));
    out.rule(Rule::new(MASQUERADING, "masquerade fully-random"));
}

/// Traffic to a ClusterIP on a port no service has is rejected; to an unallocated
/// address in the ServiceCIDRs, dropped.
fn cluster_ips(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::plain(CLUSTER_IPS, ctx.family.addr_type(), Some("Active ClusterIPs")));
    let ip = ctx.ip();
    out.rule(Rule::commented(CLUSTER_IPS_CHECK, format!("{ip} daddr @{CLUSTER_IPS} reject"), "Reject traffic to invalid ports of ClusterIPs"));
    if !ctx.service_cidrs.is_empty() {
        let rule = format!("{ip} daddr {{ {} }} drop", ctx.service_cidrs.join(","));
        out.rule(Rule::commented(CLUSTER_IPS_CHECK, rule, "Drop traffic to unallocated ClusterIPs"));
    }
}

/// `ip daddr != 127.0.0.0/8` (`ip6 daddr != ::1`): NodePorts are not on loopback.
fn no_localhost(ctx: &Context) -> &'static str {
    if ctx.ip_family.is_v6() { "ip6 daddr != ::1" } else { "ip daddr != 127.0.0.0/8" }
}

/// What selects NodePort traffic: every local address but loopback, or the
/// `nodeport-ips` set (created and filled here) when nodePortAddresses narrows them.
fn node_port_match(ctx: &Context, out: &mut Objects) -> String {
    let Some(ips) = &ctx.node_port_ips else { return no_localhost(ctx).to_owned() };
    if !out.sets.iter().any(|s| s.name == NODEPORT_IPS) {
        out.sets.push(Set::plain(NODEPORT_IPS, ctx.family.addr_type(), Some("IPs that accept NodePort traffic")));
        for ip in ips.iter().filter(|ip| !ip.is_loopback()) {
            out.element(NODEPORT_IPS, vec![ip.to_string()], vec![], None);
        }
    }
    format!("{} daddr @{NODEPORT_IPS}", ctx.ip())
}

fn addr_map_type(ctx: &Context) -> String {
    format!("{} . inet_proto . inet_service : verdict", ctx.family.addr_type())
}

fn no_endpoints(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::map(NO_ENDPOINT_SERVICES, addr_map_type(ctx), Some("vmap to drop or reject packets to services with no endpoints")));
    out.sets.push(Set::map(
        NO_ENDPOINT_NODEPORTS,
        "inet_proto . inet_service : verdict",
        Some("vmap to drop or reject packets to service nodeports with no endpoints"),
    ));
    let rule = format!("{} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}", ctx.ip());
    out.rule(Rule::new(SERVICE_ENDPOINTS_CHECK, rule));
    let m = node_port_match(ctx, out);
    out.rule(Rule::new(NODEPORT_ENDPOINTS_CHECK, format!("{m} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}")));
}

/// `KubeProxyNFTablesLocalhostNodePorts` (kube-proxy v1.37's `setupNFTables`): localhost
/// NodePorts of the protocols the userspace proxy does not serve go, through the
/// `localhost-nodeport-reject-ports` map, to a chain per protocol that counts them in a
/// named counter (read back for `/metrics`) and rejects them. Nothing when the gate is off.
fn localhost_node_ports(ctx: &Context, out: &mut Objects) {
    let Some(lh) = ctx.localhost else { return };
    out.sets.push(Set::map(LOCALHOST_NODEPORT_REJECT_PORTS, "inet_proto . inet_service : verdict", Some("localhost NodePorts rejected by kube-proxy")));
    for proto in lh.rejected() {
        let counter = localhost_nodeport_rejected_counter(proto);
        let chain = localhost_nodeport_reject_chain(proto);
        out.rule(Rule::new(&chain, format!("counter name \"{counter}\" reject")));
        out.chain(Chain::regular(chain));
        out.counters.push(counter);
    }
    let loopback = if ctx.ip_family.is_v6() { "ip6 daddr ::1" } else { "ip daddr 127.0.0.0/8" };
    out.rule(Rule::new(NODEPORT_ENDPOINTS_CHECK, format!("{loopback} meta l4proto . th dport vmap @{LOCALHOST_NODEPORT_REJECT_PORTS}")));
}

fn firewall(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::map(FIREWALL_IPS, addr_map_type(ctx), Some("destinations that are subject to LoadBalancerSourceRanges")));
    let rule = format!("{} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}", ctx.ip());
    out.rule(Rule::new(FIREWALL_CHECK, rule));
}

fn dispatch(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::map(SERVICE_IPS, addr_map_type(ctx), Some("ClusterIP, ExternalIP and LoadBalancer IP traffic")));
    out.sets.push(Set::map(SERVICE_NODEPORTS, "inet_proto . inet_service : verdict", Some("NodePort traffic")));
    if ctx.hairpin_set {
        cluster_ip_masquerade(ctx, out);
    }
    out.rule(Rule::new(SERVICES, format!("{} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}", ctx.ip())));
    let m = match ctx.node_port_ips {
        None => format!("fib daddr type local {}", no_localhost(ctx)),
        Some(_) => node_port_match(ctx, out),
    };
    out.rule(Rule::new(SERVICES, format!("{m} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}")));
}

/// kube-proxy v1.36 on: off-cluster (or, with masqueradeAll, all) traffic to any ClusterIP
/// is marked for masquerade by one rule (v1.34 has one in each service chain).
fn cluster_ip_masquerade(ctx: &Context, out: &mut Objects) {
    let dest = format!("{} daddr @{CLUSTER_IPS}", ctx.ip());
    let mark = ctx.mark_masq();
    match (&ctx.detector, ctx.masquerade_all) {
        (_, true) => out.rule(Rule::commented(SERVICES, format!("{dest} {mark}"), "masquerade all clusterIP traffic")),
        (Some(d), false) => {
            out.rule(Rule::commented(SERVICES, format!("{dest} {} {mark}", d.if_not_local), "masquerade clusterIP traffic from outside cluster"))
        }
        (None, false) => {}
    }
}

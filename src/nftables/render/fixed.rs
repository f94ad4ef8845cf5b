//! The objects every sync sets up whatever the services (kube-proxy's `setupNFTables`):
//! base chains on the netfilter hooks, the top-level chains they jump to, the masquerade
//! chains (and, from kube-proxy v1.36, the `hairpin-connections` set and the ClusterIP
//! masquerade rule of `services`), and the shared sets and verdict maps the services'
//! elements go into.
//!
//! Its rules are built as statement values ([`crate::nftables::stmt`]), but for those
//! made of the [`Context`]'s text (the mark, the local-traffic detector, the
//! ServiceCIDRs), written with `format!` until the context holds them as values.

use crate::nftables::context::NftablesTable;
use crate::nftables::context::Context;
use crate::nftables::model::{Chain, Hook, Objects, Rule, Set};
use crate::nftables::names::*;
use crate::nftables::stmt::{Action, AddrValue, Body, Concat, Ct, Dir, Match, Prefix, Selector, Stmt, Verdict, Vmap};

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

/// (chain jumped to, base chain, only new connections: `ct state new`), in kube-proxy's order.
const JUMPS: [(&str, &str, bool); 11] = [
    (NODEPORT_ENDPOINTS_CHECK, FILTER_INPUT, true),
    (SERVICE_ENDPOINTS_CHECK, FILTER_INPUT, true),
    (SERVICE_ENDPOINTS_CHECK, FILTER_FORWARD, true),
    (SERVICE_ENDPOINTS_CHECK, FILTER_OUTPUT, true),
    (FIREWALL_CHECK, FILTER_PREROUTING_PRE_DNAT, true),
    (FIREWALL_CHECK, FILTER_OUTPUT_PRE_DNAT, true),
    (SERVICES, NAT_OUTPUT, false),
    (SERVICES, NAT_PREROUTING, false),
    (MASQUERADING, NAT_POSTROUTING, false),
    (CLUSTER_IPS_CHECK, FILTER_FORWARD, true),
    (CLUSTER_IPS_CHECK, FILTER_OUTPUT, true),
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
    for (to, from, new_only) in JUMPS {
        if !regular.contains(&to) {
            regular.push(to);
        }
        let new = new_only.then_some(Stmt::Match(Match::Ct(Ct::StateNew)));
        out.rule(Rule::of(from, body(new.into_iter().chain([Stmt::Verdict(Verdict::Jump(to.into()))]), None)));
    }
    let mark_chain = (ctx.table == NftablesTable::V134).then_some(MARK_MASQ);
    for name in regular.into_iter().chain(mark_chain) {
        out.chain(Chain::regular(name));
    }
    let comment = format!("helper for @{NO_ENDPOINT_SERVICES} / @{NO_ENDPOINT_NODEPORTS}");
    out.chain(Chain { name: REJECT_CHAIN.into(), hook: None, comment: Some(comment) });
    out.rule(Rule::of(REJECT_CHAIN, body([Stmt::Action(Action::Reject)], None)));
}

fn masquerade(ctx: &Context, out: &mut Objects) {
    let m = &ctx.mark;
    if ctx.table == NftablesTable::V136 {
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
    let reject = [daddr(ctx, false, AddrValue::Named(CLUSTER_IPS.into())), Stmt::Action(Action::Reject)];
    out.rule(Rule::of(CLUSTER_IPS_CHECK, body(reject, Some("Reject traffic to invalid ports of ClusterIPs"))));
    if !ctx.service_cidrs.is_empty() {
        let rule = format!("{} daddr {{ {} }} drop", ctx.ip(), ctx.service_cidrs.join(","));
        out.rule(Rule::commented(CLUSTER_IPS_CHECK, rule, "Drop traffic to unallocated ClusterIPs"));
    }
}

/// A rule's statements and comment.
fn body(stmts: impl IntoIterator<Item = Stmt>, comment: Option<&str>) -> Body {
    Body { stmts: stmts.into_iter().collect(), comment: comment.map(str::to_owned) }
}

/// `ip daddr VALUE` (`!=` when negated; `ip6` alike).
fn daddr(ctx: &Context, negated: bool, value: AddrValue) -> Stmt {
    Stmt::Match(Match::Addr { family: ctx.family, dir: Dir::Daddr, negated, value })
}

/// `KEY vmap @MAP`.
fn vmap(key: Vec<Selector>, map: &str) -> Stmt {
    Stmt::Vmap(Vmap::Named { key: Concat(key), map: map.into() })
}

/// `ip daddr . meta l4proto . th dport` (`ip6` alike): a service's address, protocol and port.
fn address_key(ctx: &Context) -> Vec<Selector> {
    vec![Selector::Addr(ctx.family, Dir::Daddr), Selector::L4proto, Selector::ThDport]
}

/// `meta l4proto . th dport`: a NodePort's protocol and port.
fn port_key() -> Vec<Selector> {
    vec![Selector::L4proto, Selector::ThDport]
}

/// `ip daddr != 127.0.0.0/8` (`ip6 daddr != ::1`): NodePorts are not on loopback.
fn no_localhost(ctx: &Context) -> Stmt {
    let prefix = if ctx.ip_family.is_v6() {
        Prefix { addr: std::net::Ipv6Addr::LOCALHOST.into(), len: None }
    } else {
        Prefix { addr: std::net::Ipv4Addr::new(127, 0, 0, 0).into(), len: Some(8) }
    };
    daddr(ctx, true, AddrValue::Prefix(prefix))
}

/// What selects NodePort traffic: every local address but loopback, or the
/// `nodeport-ips` set (created and filled here) when nodePortAddresses narrows them.
fn node_port_match(ctx: &Context, out: &mut Objects) -> Stmt {
    let Some(ips) = &ctx.node_port_ips else { return no_localhost(ctx) };
    if !out.sets.iter().any(|s| s.name == NODEPORT_IPS) {
        out.sets.push(Set::plain(NODEPORT_IPS, ctx.family.addr_type(), Some("IPs that accept NodePort traffic")));
        for ip in ips.iter().filter(|ip| !ip.is_loopback()) {
            out.element(NODEPORT_IPS, vec![ip.to_string()], vec![], None);
        }
    }
    daddr(ctx, false, AddrValue::Named(NODEPORT_IPS.into()))
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
    out.rule(Rule::of(SERVICE_ENDPOINTS_CHECK, body([vmap(address_key(ctx), NO_ENDPOINT_SERVICES)], None)));
    let m = node_port_match(ctx, out);
    out.rule(Rule::of(NODEPORT_ENDPOINTS_CHECK, body([m, vmap(port_key(), NO_ENDPOINT_NODEPORTS)], None)));
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
    out.rule(Rule::of(FIREWALL_CHECK, body([vmap(address_key(ctx), FIREWALL_IPS)], None)));
}

fn dispatch(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::map(SERVICE_IPS, addr_map_type(ctx), Some("ClusterIP, ExternalIP and LoadBalancer IP traffic")));
    out.sets.push(Set::map(SERVICE_NODEPORTS, "inet_proto . inet_service : verdict", Some("NodePort traffic")));
    if ctx.table == NftablesTable::V136 {
        cluster_ip_masquerade(ctx, out);
    }
    out.rule(Rule::of(SERVICES, body([vmap(address_key(ctx), SERVICE_IPS)], None)));
    let node_ports = vmap(port_key(), SERVICE_NODEPORTS);
    let stmts = match ctx.node_port_ips {
        None => vec![Stmt::Match(Match::FibLocal(Dir::Daddr)), no_localhost(ctx), node_ports],
        Some(_) => vec![node_port_match(ctx, out), node_ports],
    };
    out.rule(Rule::of(SERVICES, body(stmts, None)));
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

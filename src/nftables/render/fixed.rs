//! The objects every sync sets up whatever the services (kube-proxy's `setupNFTables`):
//! base chains on the netfilter hooks, the top-level chains they jump to, the masquerade
//! chains (and, from kube-proxy v1.36, the `hairpin-connections` set and the ClusterIP
//! masquerade rule of `services`), and the shared sets and verdict maps the services'
//! elements go into.

use crate::nftables::context::NftablesTable;
use crate::nftables::context::Context;
use crate::nftables::model::{Chain, Hook, Key, NftFamily, Objects, Part, Rule, Set};
use crate::nftables::names::*;
use crate::nftables::stmt::{Action, Concat, Ct, Dir, MarkOp, Match, Selector, Stmt, Verdict};

use super::values::{action, address_key, body, daddr, jump, if_not_local, in_service_cidrs, loopback, mark_is_zero, mark_set, masquerade_fully_random, named, port_key, rule, verdict, vmap};

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
        out.rule(Rule::of(from, body(new.into_iter().chain([jump(to)]), None)));
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
    if ctx.table == NftablesTable::V136 {
        let addr = ctx.family.addr_type();
        let kind = format!("{addr} . {addr} . inet_proto . inet_service");
        out.sets.push(Set::plain(HAIRPIN_CONNECTIONS, kind, Some("service hairpin connections")));
        out.rule(rule(MASQUERADING, [mark_is_zero(ctx, true), mark_set(ctx, MarkOp::Xor), masquerade_fully_random()], None));
        let key = Concat(vec![Selector::Addr(ctx.family, Dir::Saddr), Selector::Addr(ctx.family, Dir::Daddr), Selector::L4proto, Selector::ThDport]);
        let hairpin = [Stmt::Match(Match::Ct(Ct::StatusDnat)), Stmt::Match(Match::InSet { key, set: HAIRPIN_CONNECTIONS.into() }), masquerade_fully_random()];
        out.rule(Rule::of(MASQUERADING, body(hairpin, None)));
        return;
    }
    out.rule(rule(MARK_MASQ, [mark_set(ctx, MarkOp::Or)], None));
    out.rule(rule(MASQUERADING, [mark_is_zero(ctx, false), verdict(Verdict::Return)], None));
    out.rule(rule(MASQUERADING, [mark_set(ctx, MarkOp::Xor)], None));
    out.rule(Rule::of(MASQUERADING, body([masquerade_fully_random()], None)));
}

/// Traffic to a ClusterIP on a port no service has is rejected; to an unallocated
/// address in the ServiceCIDRs, dropped.
fn cluster_ips(ctx: &Context, out: &mut Objects) {
    out.sets.push(Set::plain(CLUSTER_IPS, ctx.family.addr_type(), Some("Active ClusterIPs")));
    let reject = [daddr(ctx, false, named(CLUSTER_IPS)), action(Action::Reject)];
    out.rule(Rule::of(CLUSTER_IPS_CHECK, body(reject, Some("Reject traffic to invalid ports of ClusterIPs"))));
    if let Some(cidrs) = in_service_cidrs(ctx) {
        out.rule(rule(CLUSTER_IPS_CHECK, [cidrs, verdict(Verdict::Drop)], Some("Drop traffic to unallocated ClusterIPs")));
    }
}

/// What selects NodePort traffic: every local address but loopback, or the
/// `nodeport-ips` set (created and filled here) when nodePortAddresses narrows them.
fn node_port_match(ctx: &Context, out: &mut Objects) -> Stmt {
    let Some(ips) = &ctx.node_port_ips else { return loopback(ctx, true) };
    if !out.sets.iter().any(|s| s.name == NODEPORT_IPS) {
        out.sets.push(Set::plain(NODEPORT_IPS, ctx.family.addr_type(), Some("IPs that accept NodePort traffic")));
        for ip in ips.iter().filter(|ip| !ip.is_loopback()) {
            out.element(NODEPORT_IPS, Key::of([Part::Addr(*ip)]), None, None);
        }
    }
    daddr(ctx, false, named(NODEPORT_IPS))
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
        out.rule(Rule::of(&chain, body([action(Action::Counter { name: counter.clone() }), action(Action::Reject)], None)));
        out.chain(Chain::regular(chain));
        out.counters.push(counter);
    }
    out.rule(Rule::of(NODEPORT_ENDPOINTS_CHECK, body([loopback(ctx, false), vmap(port_key(), LOCALHOST_NODEPORT_REJECT_PORTS)], None)));
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
        None => vec![Stmt::Match(Match::FibLocal(Dir::Daddr)), loopback(ctx, true), node_ports],
        Some(_) => vec![node_port_match(ctx, out), node_ports],
    };
    out.rule(Rule::of(SERVICES, body(stmts, None)));
}

/// kube-proxy v1.36 on: off-cluster (or, with masqueradeAll, all) traffic to any ClusterIP
/// is marked for masquerade by one rule (v1.34 has one in each service chain).
fn cluster_ip_masquerade(ctx: &Context, out: &mut Objects) {
    let dest = daddr(ctx, false, named(CLUSTER_IPS));
    let mark = mark_set(ctx, MarkOp::Or);
    match (if_not_local(ctx), ctx.masquerade_all) {
        (_, true) => out.rule(rule(SERVICES, [dest, mark], Some("masquerade all clusterIP traffic"))),
        (Some(outside), false) => out.rule(rule(SERVICES, [dest, outside, mark], Some("masquerade clusterIP traffic from outside cluster"))),
        (None, false) => {}
    }
}

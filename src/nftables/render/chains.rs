//! A service port's own chains and affinity sets: the masquerade rule of its internal
//! chain (v1.34's table), `external-`, `firewall-`, the `service-`/`local-` endpoint
//! dispatch and the `endpoint-` chains: v1.34's table has one per endpoint and dispatches
//! through them; v1.36 on, only a service with session affinity has them, the others DNAT
//! straight from a random map.

use super::values::{action, addr, body, daddr, goto, host, if_local, if_not_local, jump, mark_masq, named, rule, verdict};
use super::wiring::Wiring;
use crate::model::Endpoint;
use crate::nftables::context::{Context, NftablesTable};
use crate::nftables::model::{Chain, NftFamily, Objects, Rule, Set};
use crate::nftables::names::{endpoint_names, MARK_MASQ};
use crate::nftables::stmt::{Action, AddrValue, AnonSet, Concat, Dir, Dnat, Match, Prefix, Selector, Sep, Stmt, Verdict, Vmap};

pub fn write(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let endpoint_chains = uses_endpoint_chains(ctx, p);
    if endpoint_chains {
        for ep in &p.endpoints.all_reachable {
            out.chain(Chain::regular(names(p, ep).0));
        }
    }
    for (used, chain) in [
        (p.uses_cluster_chain, &p.chains.cluster),
        (p.uses_local_chain, &p.chains.local),
        (p.uses_external_chain, &p.chains.external),
        (p.uses_firewall_chain, &p.chains.firewall),
    ] {
        if used {
            out.chain(Chain::regular(chain.clone()));
        }
    }
    internal_masquerade(ctx, p, out);
    if p.uses_external_chain {
        external_chain(ctx, p, out);
    }
    if p.uses_firewall_chain {
        firewall_chain(ctx, p, out);
    }
    affinity_sets(ctx, p, out);
    if p.uses_cluster_chain {
        dispatch(ctx, p, &p.chains.cluster, &p.endpoints.cluster, out);
    }
    if p.uses_local_chain {
        dispatch(ctx, p, &p.chains.local, &p.endpoints.local, out);
    }
    if endpoint_chains {
        for ep in &p.endpoints.all_reachable {
            endpoint_chain(ctx, p, ep, out);
        }
    }
}

/// v1.34's table gives every endpoint a chain; v1.36's only a session-affinity service's.
fn uses_endpoint_chains(ctx: &Context, p: &Wiring) -> bool {
    ctx.table == NftablesTable::V134 || p.svc.session_affinity.is_some()
}

/// (endpoint chain, affinity set).
fn names(p: &Wiring, ep: &Endpoint) -> (String, String) {
    endpoint_names(&p.svc.name, p.proto, &ep.ip.to_string(), ep.port)
}

/// Off-cluster (or, with masqueradeAll, all) traffic to the ClusterIP is masqueraded (v1.36
/// on: by one rule of `services` for every ClusterIP, [`super::fixed`]).
fn internal_masquerade(ctx: &Context, p: &Wiring, out: &mut Objects) {
    if p.internal_refusal.is_some() || ctx.table == NftablesTable::V136 {
        return;
    }
    let dest = daddr(ctx, false, host(p.svc.cluster_ip));
    let mark = jump(MARK_MASQ);
    let pieces = match (if_not_local(ctx), ctx.masquerade_all) {
        (_, true) => vec![dest, mark],
        (Some(outside), false) => vec![dest, outside, mark],
        (None, false) => return,
    };
    out.rule(rule(&p.internal_chain, pieces, None));
}

fn external_chain(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let ext = p.chains.external.as_str();
    let cluster = || goto(&p.chains.cluster);
    let from_host = || Stmt::Match(Match::FibLocal(Dir::Saddr));
    if !p.svc.external_policy_local {
        // v1.36 comments the rule; v1.34 does not.
        let comment = (ctx.table == NftablesTable::V136).then_some("masquerade");
        out.rule(rule(ext, [mark_masq(ctx)], comment));
    } else {
        if let Some(local) = if_local(ctx) {
            out.rule(rule(ext, [local, cluster()], Some("short-circuit pod traffic")));
        }
        out.rule(rule(ext, [from_host(), mark_masq(ctx)], Some("masquerade local traffic")));
        out.rule(rule(ext, [from_host(), cluster()], Some("short-circuit local traffic")));
    }
    if p.external_refusal.is_none() {
        out.rule(Rule::of(ext, body([goto(&p.external_policy_chain)], None)));
    }
}

/// Drops load-balancer traffic from outside the source ranges (and, when a range holds
/// the node, lets the VIPs themselves through: a VIP bound locally loops back from it).
fn firewall_chain(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let ranges = &p.svc.load_balancer_source_ranges;
    let mut sources: Vec<Prefix> = ranges.iter().map(|c| Prefix { addr: c.addr(), len: Some(c.prefix()) }).collect();
    if ranges.iter().any(|c| c.contains(&ctx.node_ip)) {
        sources.extend(p.svc.load_balancer_vips.iter().map(|&ip| Prefix { addr: ip, len: None }));
    }
    // The chain is used only for a service with source ranges: never an empty set.
    let Some(sources) = AnonSet::new(sources, Sep::Spaced) else { return };
    let stmts = [addr(ctx, Dir::Saddr, true, AddrValue::Anon(sources)), verdict(Verdict::Drop)];
    out.rule(Rule::of(p.chains.firewall.as_str(), body(stmts, None)));
}

fn affinity_sets(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let Some(timeout) = p.svc.session_affinity else { return };
    for ep in &p.endpoints.all_reachable {
        let set = Set { flags: vec!["dynamic", "timeout"], timeout: Some(timeout), ..Set::plain(names(p, ep).1, ctx.family.addr_type(), None) };
        out.sets.push(set);
    }
}

/// kube-proxy's `writeServiceToEndpointRules` (v1.36 on: `writeServiceToEndpointJumps`
/// with session affinity, else `writeServiceToEndpointDNATs`).
fn dispatch(ctx: &Context, p: &Wiring, chain: &str, eps: &[&Endpoint], out: &mut Objects) {
    if uses_endpoint_chains(ctx, p) {
        dispatch_to_chains(ctx, p, chain, eps, out);
    } else {
        dispatch_to_endpoints(ctx, p, chain, eps, out);
    }
}

/// One random DNAT map over the endpoints' addresses and ports.
fn dispatch_to_endpoints(ctx: &Context, p: &Wiring, chain: &str, eps: &[&Endpoint], out: &mut Objects) {
    let arms = eps.iter().enumerate().map(|(i, e)| (i as u32, e.ip, e.port)).collect();
    let dnat = Dnat::Numgen { family: ctx.family, modulus: eps.len() as u32, arms };
    out.rule(Rule::of(chain, body([Stmt::Match(Match::L4proto(p.svc.protocol)), action(Action::Dnat(dnat))], None)));
}

/// Affinity checks, then one random verdict map over the endpoints' chains.
fn dispatch_to_chains(ctx: &Context, p: &Wiring, chain: &str, eps: &[&Endpoint], out: &mut Objects) {
    let names: Vec<(String, String)> = eps.iter().map(|e| names(p, e)).collect();
    if p.svc.session_affinity.is_some() {
        for (ep_chain, affinity) in &names {
            out.rule(Rule::of(chain, body([addr(ctx, Dir::Saddr, false, named(affinity)), goto(ep_chain)], None)));
        }
    }
    let arms = names.into_iter().enumerate().map(|(i, (c, _))| (i as u32, Verdict::Goto(c))).collect();
    out.rule(Rule::of(chain, body([Stmt::Vmap(Vmap::Numgen { modulus: eps.len() as u32, arms })], None)));
}

fn endpoint_chain(ctx: &Context, p: &Wiring, ep: &Endpoint, out: &mut Objects) {
    let (chain, affinity) = names(p, ep);
    if ctx.table == NftablesTable::V134 {
        out.rule(Rule::of(chain.as_str(), body([addr(ctx, Dir::Saddr, false, host(ep.ip)), jump(MARK_MASQ)], None)));
    }
    if p.svc.session_affinity.is_some() {
        let key = Concat(vec![Selector::Addr(ctx.family, Dir::Saddr)]);
        out.rule(Rule::of(chain.as_str(), body([action(Action::Update { set: affinity, key })], None)));
    }
    let dnat = Dnat::To { addr: ep.ip, port: ep.port };
    out.rule(Rule::of(chain, body([Stmt::Match(Match::L4proto(p.svc.protocol)), action(Action::Dnat(dnat))], None)));
}

//! A service port's own chains and affinity sets: the masquerade rule of its internal
//! chain (v1.34's table), `external-`, `firewall-`, the `service-`/`local-` endpoint
//! dispatch and the `endpoint-` chains: v1.34's table has one per endpoint and dispatches
//! through them; v1.36 on, only a service with session affinity has them, the others DNAT
//! straight from a random map.

use crate::nftables::context::NftablesTable;
use super::wiring::Wiring;
use crate::model::Endpoint;
use crate::nftables::context::Context;
use crate::nftables::model::{Chain, Objects, Rule, Set};
use crate::nftables::names::{endpoint_names, MARK_MASQ};

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
    let dest = format!("{} daddr {}", ctx.ip(), p.svc.cluster_ip);
    let rule = match (&ctx.detector, ctx.masquerade_all) {
        (_, true) => format!("{dest} jump {MARK_MASQ}"),
        (Some(d), false) => format!("{dest} {} jump {MARK_MASQ}", d.if_not_local),
        (None, false) => return,
    };
    out.rule(Rule::new(p.internal_chain.clone(), rule));
}

fn external_chain(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let ext = p.chains.external.as_str();
    let cluster = &p.chains.cluster;
    let mark = ctx.mark_masq();
    if !p.svc.external_policy_local {
        // v1.36 comments the rule; v1.34 does not.
        let comment = (ctx.table == NftablesTable::V136).then_some("masquerade");
        out.rule(Rule { comment: comment.map(str::to_owned), ..Rule::new(ext, mark) });
    } else {
        if let Some(d) = &ctx.detector {
            out.rule(Rule::commented(ext, format!("{} goto {cluster}", d.if_local), "short-circuit pod traffic"));
        }
        out.rule(Rule::commented(ext, format!("fib saddr type local {mark}"), "masquerade local traffic"));
        out.rule(Rule::commented(ext, format!("fib saddr type local goto {cluster}"), "short-circuit local traffic"));
    }
    if p.external_refusal.is_none() {
        out.rule(Rule::new(ext, format!("goto {}", p.external_policy_chain)));
    }
}

/// Drops load-balancer traffic from outside the source ranges (and, when a range holds
/// the node, lets the VIPs themselves through: a VIP bound locally loops back from it).
fn firewall_chain(ctx: &Context, p: &Wiring, out: &mut Objects) {
    let ranges = &p.svc.load_balancer_source_ranges;
    let mut sources: Vec<String> = ranges.iter().map(|c| c.to_string()).collect();
    if ranges.iter().any(|c| c.contains(&ctx.node_ip)) {
        sources.extend(p.svc.load_balancer_vips.iter().map(|ip| ip.to_string()));
    }
    let rule = format!("{} saddr != {{ {} }} drop", ctx.ip(), sources.join(" , "));
    out.rule(Rule::new(p.chains.firewall.clone(), rule));
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
    let arms: Vec<String> = eps.iter().enumerate().map(|(i, e)| format!("{i} : {} . {}", e.ip, e.port)).collect();
    let rule = format!("meta l4proto {} dnat {} addr . port to numgen random mod {} map {{ {} }}", p.proto, ctx.ip(), eps.len(), arms.join(" , "));
    out.rule(Rule::new(chain, rule));
}

/// Affinity checks, then one random verdict map over the endpoints' chains.
fn dispatch_to_chains(ctx: &Context, p: &Wiring, chain: &str, eps: &[&Endpoint], out: &mut Objects) {
    let names: Vec<(String, String)> = eps.iter().map(|e| names(p, e)).collect();
    if p.svc.session_affinity.is_some() {
        for (ep_chain, affinity) in &names {
            out.rule(Rule::new(chain, format!("{} saddr @{affinity} goto {ep_chain}", ctx.ip())));
        }
    }
    let arms: Vec<String> = names.iter().enumerate().map(|(i, (c, _))| format!("{i} : goto {c}")).collect();
    out.rule(Rule::new(chain, format!("numgen random mod {} vmap {{ {} }}", eps.len(), arms.join(" , "))));
}

fn endpoint_chain(ctx: &Context, p: &Wiring, ep: &Endpoint, out: &mut Objects) {
    let (chain, affinity) = names(p, ep);
    if ctx.table == NftablesTable::V134 {
        out.rule(Rule::new(chain.clone(), format!("{} saddr {} jump {MARK_MASQ}", ctx.ip(), ep.ip)));
    }
    if p.svc.session_affinity.is_some() {
        out.rule(Rule::new(chain.clone(), format!("update @{affinity} {{ {} saddr }}", ctx.ip())));
    }
    out.rule(Rule::new(chain, format!("meta l4proto {} dnat to {}", p.proto, ep.addr_string())));
}

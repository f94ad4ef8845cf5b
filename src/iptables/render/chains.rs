//! A service port's own nat chains, which a partial sync may skip when the service did
//! not change: the masquerade rule in its internal chain, `KUBE-EXT-`, `KUBE-FW-`,
//! `KUBE-SVC-`/`KUBE-SVL-` (endpoint dispatch, session affinity) and one `KUBE-SEP-` per
//! endpoint.

use super::context::Context;
use super::wiring::Wiring;
use super::ServiceRules;
use crate::xtables::names::{endpoint_chain, KUBE_MARK_MASQ};
use crate::model::Endpoint;
use crate::xtables::{Chain, Rule, Target};

pub fn write(ctx: &Context, p: &Wiring, large_cluster: bool, out: &mut ServiceRules) {
    let eps = &p.endpoints;
    let affinity = usize::from(p.svc.session_affinity.is_some());
    out.chain_rules.reserve(8 + 2 * eps.all_reachable.len() + (eps.cluster.len() + eps.local.len()) * (1 + affinity));
    out.chains.reserve(4 + eps.all_reachable.len());
    let mut seps = SepNames::new(p.all_endpoints);
    internal_masquerade(ctx, p, &mut out.chain_rules);
    if p.uses_external_chain {
        out.chains.push(p.chains.ext.clone());
        external_chain(ctx, p, &mut out.chain_rules);
    }
    if p.uses_firewall_chain {
        out.chains.push(p.chains.fw.clone());
        firewall_chain(ctx, p, &mut out.chain_rules);
    }
    if p.uses_cluster_chain {
        out.chains.push(p.chains.svc.clone());
        dispatch(p, &p.chains.svc, &eps.cluster, &mut seps, large_cluster, &mut out.chain_rules);
    }
    if p.uses_local_chain {
        out.chains.push(p.chains.svl.clone());
        dispatch(p, &p.chains.svl, &eps.local, &mut seps, large_cluster, &mut out.chain_rules);
    }
    for ep in &eps.all_reachable {
        let chain = seps.get(p, ep);
        endpoint(p, ep, &chain, large_cluster, &mut out.chain_rules);
        out.chains.push(chain);
    }
}

fn sep_name(p: &Wiring, ep: &Endpoint) -> Chain {
    endpoint_chain(&p.spn, p.proto, &ep.addr_string()).into()
}

/// Each endpoint's `KUBE-SEP-` name, hashed once: an endpoint is named in the cluster
/// dispatch, the local one and its own chain. Kept by the endpoint's place in the service
/// port's endpoint list, which every category borrows from.
struct SepNames<'a> {
    all: &'a [Endpoint],
    names: Vec<Option<Chain>>,
}

impl<'a> SepNames<'a> {
    fn new(all: &'a [Endpoint]) -> Self {
        SepNames { all, names: vec![None; all.len()] }
    }

    fn get(&mut self, p: &Wiring, ep: &Endpoint) -> Chain {
        match self.index_of(ep) {
            Some(i) => self.names[i].get_or_insert_with(|| sep_name(p, ep)).clone(),
            None => sep_name(p, ep),
        }
    }

    /// Where `ep` sits in `all`, if it is one of its elements.
    fn index_of(&self, ep: &Endpoint) -> Option<usize> {
        let size = std::mem::size_of::<Endpoint>();
        let offset = (ep as *const Endpoint as usize).checked_sub(self.all.as_ptr() as usize)?;
        let i = offset / size;
        (offset % size == 0 && self.all.get(i).is_some_and(|e| std::ptr::eq(e, ep))).then_some(i)
    }
}

/// Off-cluster (or, with masqueradeAll, all) traffic to the ClusterIP is masqueraded.
fn internal_masquerade(ctx: &Context, p: &Wiring, out: &mut Vec<Rule>) {
    if p.internal_refusal.is_some() {
        return;
    }
    let extra: &[String] = match (&ctx.node.detector, ctx.node.masquerade_all) {
        (_, true) => &[],
        (Some(d), false) => &d.if_not_local,
        (None, false) => return,
    };
    let comment = format!("{} cluster IP", p.spn);
    let (ip, port) = (p.svc.cluster_ip.to_string(), p.svc.port.to_string());
    let head = ["-m", "comment", "--comment", &comment, "-m", p.proto, "-p", p.proto, "-d", &ip, "--dport", &port];
    out.push(Rule::new(&p.internal_chain, head.iter().copied().chain(extra.iter().map(String::as_str)), Target::jump(KUBE_MARK_MASQ)));
}

fn external_chain(ctx: &Context, p: &Wiring, out: &mut Vec<Rule>) {
    let ext = &p.chains.ext;
    let svc = &p.chains.svc;
    if !p.svc.external_policy_local {
        let c = format!("masquerade traffic for {} external destinations", p.spn);
        out.push(Rule::new(ext, ["-m", "comment", "--comment", &c], Target::jump(KUBE_MARK_MASQ)));
    } else {
        if let Some(d) = &ctx.node.detector {
            let c = format!("pod traffic for {} external destinations", p.spn);
            let head = ["-m", "comment", "--comment", &c];
            out.push(Rule::new(ext, head.iter().copied().chain(d.if_local.iter().map(String::as_str)), Target::jump(svc)));
        }
        let c = format!("masquerade LOCAL traffic for {} external destinations", p.spn);
        out.push(Rule::new(ext, ["-m", "comment", "--comment", &c, "-m", "addrtype", "--src-type", "LOCAL"], Target::jump(KUBE_MARK_MASQ)));
        let c = format!("route LOCAL traffic for {} external destinations", p.spn);
        out.push(Rule::new(ext, ["-m", "comment", "--comment", &c, "-m", "addrtype", "--src-type", "LOCAL"], Target::jump(svc)));
    }
    if p.external_refusal.is_none() {
        out.push(Rule::new(ext, [""; 0], Target::jump(&p.external_policy_chain)));
    }
}

fn firewall_chain(ctx: &Context, p: &Wiring, out: &mut Vec<Rule>) {
    let (fw, ext): (&Chain, &Chain) = (&p.chains.fw, &p.chains.ext);
    let c = format!("{} loadbalancer IP", p.spn);
    let mut allow_from_node = false;
    for cidr in &p.svc.load_balancer_source_ranges {
        out.push(Rule::new(fw, ["-m", "comment", "--comment", &c, "-s", &cidr.to_string()], Target::jump(ext)));
        allow_from_node |= cidr.contains(&ctx.node.node_ip);
    }
    if allow_from_node {
        for vip in &p.svc.load_balancer_vips {
            out.push(Rule::new(fw, ["-m", "comment", "--comment", &c, "-s", &vip.to_string()], Target::jump(ext)));
        }
    }
    let c = format!("other traffic to {} will be dropped by KUBE-PROXY-FIREWALL", p.spn);
    out.push(Rule::new(fw, ["-m", "comment", "--comment", &c], Target::Continue));
}

/// kube-proxy's `writeServiceToEndpointRules`: affinity checks, then one rule per endpoint
/// with probability 1/(remaining), the last one unconditional.
fn dispatch(p: &Wiring, chain: &Chain, eps: &[&Endpoint], names: &mut SepNames, large_cluster: bool, out: &mut Vec<Rule>) {
    let seps: Vec<Chain> = eps.iter().map(|e| names.get(p, e)).collect();
    let comments: Vec<String> = if large_cluster { Vec::new() } else { eps.iter().map(|e| format!("{} -> {}", p.spn, e.addr_string())).collect() };
    let comment = |i: usize| -> [&str; 4] { ["-m", "comment", "--comment", comments[i].as_str()] };
    let comment_words = if large_cluster { 0 } else { 4 };
    if let Some(timeout) = p.svc.session_affinity {
        let t = timeout.to_string();
        for (i, sep) in seps.iter().enumerate() {
            let name: &str = sep;
            let head = if large_cluster { ["", "", "", ""] } else { comment(i) };
            let tail = ["-m", "recent", "--name", name, "--rcheck", "--seconds", &t, "--reap"];
            out.push(Rule::new(chain, head[..comment_words].iter().chain(tail.iter()), Target::jump(sep)));
        }
    }
    let n = eps.len();
    for (i, sep) in seps.iter().enumerate() {
        let prob = if i + 1 < n { probability(n - i) } else { String::new() };
        let stat: &[&str] = if i + 1 < n { &["-m", "statistic", "--mode", "random", "--probability", &prob] } else { &[] };
        let head = if large_cluster { ["", "", "", ""] } else { comment(i) };
        out.push(Rule::new(chain, head[..comment_words].iter().chain(stat.iter()), Target::jump(sep)));
    }
}

/// `1/n` with ten decimals, as Go's `%0.10f` prints it.
pub fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

fn endpoint(p: &Wiring, ep: &Endpoint, chain: &Chain, large_cluster: bool, out: &mut Vec<Rule>) {
    let comment: &[&str] = if large_cluster { &[] } else { &["-m", "comment", "--comment", &p.spn] };
    let ip = ep.ip.to_string();
    out.push(Rule::new(chain, comment.iter().copied().chain(["-s", &ip]), Target::jump(KUBE_MARK_MASQ)));
    let name: &str = chain;
    let affinity: &[&str] = if p.svc.session_affinity.is_some() { &["-m", "recent", "--name", name, "--set"] } else { &[] };
    let dest = ep.addr_string();
    out.push(Rule::new(chain, comment.iter().copied().chain(affinity.iter().copied()).chain(["-m", p.proto, "-p", p.proto]),
        Target::Dnat(dest.into())));
}

#[cfg(test)]
mod tests {
    #[test]
    fn probability_matches_go_printf() {
        assert_eq!(super::probability(2), "0.5000000000");
        assert_eq!(super::probability(3), "0.3333333333");
        assert_eq!(super::probability(100001), "0.0000099999");
    }
}

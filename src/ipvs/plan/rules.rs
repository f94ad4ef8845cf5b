//! The iptables rules IPVS mode needs (kube-proxy's IPVS `writeIptablesRules`), as rule
//! values: nat first, then filter, with kube-proxy's chains, texts and order.

use super::ipsets::SetId;
use super::{Context, FamilyState};
use crate::xtables::names::{KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_SERVICES};
use crate::xtables::jumps::Jump;
use crate::xtables::{Rule, Table, Target};

pub const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
pub const KUBE_LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
pub const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
pub const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
pub const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";
/// IPVS mode's own chains; the others it declares are kube-proxy's shared ones
/// ([`crate::xtables::names`]).
pub const OWN_CHAINS: [&str; 5] = [KUBE_NODE_PORT, KUBE_LOAD_BALANCER, KUBE_SOURCE_RANGES_FIREWALL, KUBE_IPVS_FILTER, KUBE_IPVS_OUT_FILTER];

/// nat chains, in kube-proxy's `iptablesChains` order.
pub const NAT_CHAINS: [&str; 5] = [KUBE_SERVICES, KUBE_POSTROUTING, KUBE_NODE_PORT, KUBE_LOAD_BALANCER, KUBE_MARK_MASQ];
/// filter chains, in kube-proxy's `iptablesChains` order.
pub const FILTER_CHAINS: [&str; 6] =
    [KUBE_FORWARD, KUBE_NODE_PORT, KUBE_PROXY_FIREWALL, KUBE_SOURCE_RANGES_FIREWALL, KUBE_IPVS_FILTER, KUBE_IPVS_OUT_FILTER];

/// The chains IPVS mode declares in `table` (`nat`, `filter`; none elsewhere).
pub fn declared(table: &str) -> &'static [&'static str] {
    match table {
        "nat" => &NAT_CHAINS,
        "filter" => &FILTER_CHAINS,
        _ => &[],
    }
}

/// The jumps from built-in chains kube-proxy's IPVS mode ensures, in its
/// `iptablesJumpChain` order (table, from, to, comment).
pub const JUMPS: [(&str, &str, &str, &str); 9] = [
    ("nat", "OUTPUT", KUBE_SERVICES, "kubernetes service portals"),
    ("nat", "PREROUTING", KUBE_SERVICES, "kubernetes service portals"),
    ("nat", "POSTROUTING", KUBE_POSTROUTING, "kubernetes postrouting rules"),
    ("filter", "FORWARD", KUBE_FORWARD, "kubernetes forwarding rules"),
    ("filter", "INPUT", KUBE_NODE_PORT, "kubernetes health check rules"),
    ("filter", "INPUT", KUBE_PROXY_FIREWALL, "kube-proxy firewall rules"),
    ("filter", "FORWARD", KUBE_PROXY_FIREWALL, "kube-proxy firewall rules"),
    ("filter", "INPUT", KUBE_IPVS_FILTER, "kubernetes ipvs access filter"),
    ("filter", "OUTPUT", KUBE_IPVS_OUT_FILTER, "kubernetes ipvs access filter"),
];

/// [`JUMPS`] as the iptables delta wants them.
pub fn jumps() -> Vec<Jump> {
    JUMPS.iter().map(|(table, from, to, comment)| Jump::new(table, from, to, false, comment)).collect()
}

/// kube-proxy's `ipsetWithIptablesChain`: (set, nat?, from, to, match, protocol). The
/// target is made when a rule is (a jump names a shared chain, which is not a constant).
/// Makes a rule's target.
type MakeTarget = fn() -> Target;

const SET_RULES: [(SetId, bool, &str, MakeTarget, &str, &str); 12] = [
    (SetId::LoopBack, true, KUBE_POSTROUTING, || Target::Masquerade { random_fully: false }, "dst,dst,src", ""),
    (SetId::LoadBalancer, true, KUBE_SERVICES, || Target::jump(KUBE_LOAD_BALANCER), "dst,dst", ""),
    (SetId::LoadBalancerLocal, true, KUBE_LOAD_BALANCER, || Target::Return, "dst,dst", ""),
    (SetId::NodePortLocalTcp, true, KUBE_NODE_PORT, || Target::Return, "dst", "tcp"),
    (SetId::NodePortTcp, true, KUBE_NODE_PORT, || Target::jump(KUBE_MARK_MASQ), "dst", "tcp"),
    (SetId::NodePortLocalUdp, true, KUBE_NODE_PORT, || Target::Return, "dst", "udp"),
    (SetId::NodePortUdp, true, KUBE_NODE_PORT, || Target::jump(KUBE_MARK_MASQ), "dst", "udp"),
    (SetId::NodePortLocalSctp, true, KUBE_NODE_PORT, || Target::Return, "dst,dst", "sctp"),
    (SetId::NodePortSctp, true, KUBE_NODE_PORT, || Target::jump(KUBE_MARK_MASQ), "dst,dst", "sctp"),
    (SetId::LoadBalancerFw, false, KUBE_PROXY_FIREWALL, || Target::jump(KUBE_SOURCE_RANGES_FIREWALL), "dst,dst", ""),
    (SetId::LoadBalancerSourceCidr, false, KUBE_SOURCE_RANGES_FIREWALL, || Target::Return, "dst,dst,src", ""),
    (SetId::LoadBalancerSourceIp, false, KUBE_SOURCE_RANGES_FIREWALL, || Target::Return, "dst,dst,src", ""),
];

struct Out {
    nat: Vec<Rule>,
    filter: Vec<Rule>,
}

/// The two tables: nat (its chains, its rules), then filter.
pub fn write(ctx: &Context, plan: &FamilyState) -> Vec<Table> {
    let mut out = Out { nat: Vec::new(), filter: Vec::new() };
    let lo = if ctx.family().is_v6() { "::1/128" } else { "127.0.0.0/8" };
    out.nat.push(Rule::new(KUBE_SERVICES, ["-s", lo], Target::Return));
    set_rules(ctx, plan, &mut out);
    cluster_ip_rule(ctx, plan, &mut out);
    external_ip_rules(ctx, plan, &mut out);
    out.nat.push(Rule::new(KUBE_SERVICES, ["-m", "addrtype", "--dst-type", "LOCAL"], Target::jump(KUBE_NODE_PORT)));
    out.nat.push(Rule::new(KUBE_LOAD_BALANCER, [""; 0], Target::jump(KUBE_MARK_MASQ)));
    out.filter.push(Rule::new(KUBE_SOURCE_RANGES_FIREWALL, [""; 0], Target::Drop));
    for e in &plan.no_node_access {
        let (ip, port) = (e.ip.to_string(), e.port.to_string());
        out.filter.push(Rule::new(KUBE_IPVS_OUT_FILTER, ["-s", &ip, "-m", "ipvs", "--vaddr", &ip, "--vproto", e.proto,
            "--vport", &port], Target::Drop));
    }
    for id in [SetId::ClusterIp, SetId::LoadBalancer] {
        if !plan.set(id).is_empty() {
            out.nat.push(Rule::new(KUBE_SERVICES, ["-m", "set", "--match-set", &id.name(ctx.family()), "dst,dst"], Target::Accept));
        }
    }
    forward_and_filter_rules(ctx, &mut out);
    masquerade_rules(ctx, &mut out);
    vec![
        Table { name: "nat", chains: NAT_CHAINS.map(Into::into).to_vec(), rules: out.nat },
        Table { name: "filter", chains: FILTER_CHAINS.map(Into::into).to_vec(), rules: out.filter },
    ]
}

fn set_rules(ctx: &Context, plan: &FamilyState, out: &mut Out) {
    for (id, nat, from, to, matching, proto) in SET_RULES {
        if plan.set(id).is_empty() {
            continue;
        }
        let mut words: Vec<String> = Vec::new();
        if !proto.is_empty() {
            words.extend(["-p".into(), proto.into()]);
        }
        words.extend(["-m", "comment", "--comment", id.comment()].map(String::from));
        words.extend(["-m".into(), "set".into(), "--match-set".into(), id.name(ctx.family()), matching.into()]);
        let rule = Rule::new(from, &words, to());
        if nat { out.nat.push(rule) } else { out.filter.push(rule) }
    }
}

/// `-m comment --comment C -m set --match-set SET` for a set.
fn set_head(ctx: &Context, id: SetId) -> Vec<String> {
    let mut w: Vec<String> = ["-m", "comment", "--comment", id.comment()].map(String::from).to_vec();
    w.extend(["-m".into(), "set".into(), "--match-set".into(), id.name(ctx.family())]);
    w
}

fn cluster_ip_rule(ctx: &Context, plan: &FamilyState, out: &mut Out) {
    if plan.set(SetId::ClusterIp).is_empty() {
        return;
    }
    let mut w = set_head(ctx, SetId::ClusterIp);
    if ctx.node.masquerade_all {
        w.push("dst,dst".into());
    } else if let Some(d) = &ctx.node.detector {
        w.push("dst,dst".into());
        w.extend(d.if_not_local.iter().cloned());
    } else {
        w.push("src,dst".into());
    }
    out.nat.push(Rule::new(KUBE_SERVICES, &w, Target::jump(KUBE_MARK_MASQ)));
}

fn external_ip_rules(ctx: &Context, plan: &FamilyState, out: &mut Out) {
    for (id, masquerade) in [(SetId::ExternalIp, true), (SetId::ExternalIpLocal, false)] {
        if plan.set(id).is_empty() {
            continue;
        }
        let mut head = set_head(ctx, id);
        head.push("dst,dst".into());
        let rule = |tail: &[&str], target| Rule::new(KUBE_SERVICES, head.iter().map(String::as_str).chain(tail.iter().copied()), target);
        if masquerade {
            out.nat.push(rule(&[], Target::jump(KUBE_MARK_MASQ)));
        }
        out.nat.push(rule(&["-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL"], Target::Accept));
        out.nat.push(rule(&["-m", "addrtype", "--dst-type", "LOCAL"], Target::Accept));
    }
}

fn forward_and_filter_rules(ctx: &Context, out: &mut Out) {
    let fam = ctx.family();
    let mark = format!("{0}/{0}", ctx.node.mark);
    out.filter.push(Rule::new(KUBE_FORWARD, ["-m", "comment", "--comment", "kubernetes forwarding rules", "-m", "mark",
        "--mark", &mark], Target::Accept));
    out.filter.push(Rule::new(KUBE_FORWARD, ["-m", "comment", "--comment", "kubernetes forwarding conntrack rule",
        "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"], Target::Accept));
    let hc = SetId::HealthCheckNodePort;
    out.filter.push(Rule::new(KUBE_NODE_PORT, ["-m", "comment", "--comment", hc.comment(), "-m", "set",
        "--match-set", &hc.name(fam), "dst"], Target::Accept));
    for id in [SetId::LoadBalancer, SetId::ClusterIp, SetId::ExternalIp, SetId::ExternalIpLocal] {
        out.filter.push(Rule::new(KUBE_IPVS_FILTER, ["-m", "set", "--match-set", &id.name(fam), "dst,dst"], Target::Return));
    }
    out.filter.push(Rule::new(KUBE_IPVS_FILTER, ["-m", "set", "--match-set", &hc.name(fam), "dst"], Target::Return));
    out.filter.push(Rule::new(KUBE_IPVS_FILTER, ["-m", "conntrack", "--ctstate", "NEW", "-m", "set", "--match-set",
        &SetId::IpvsIps.name(fam), "dst"], Target::Reject(None)));
}

fn masquerade_rules(ctx: &Context, out: &mut Out) {
    let mark = &ctx.node.mark;
    let both = format!("{mark}/{mark}");
    out.nat.push(Rule::new(KUBE_POSTROUTING, ["-m", "mark", "!", "--mark", &both], Target::Return));
    out.nat.push(Rule::new(KUBE_POSTROUTING, [""; 0], Target::XorMark(mark.as_str().into())));
    out.nat.push(Rule::new(KUBE_POSTROUTING, ["-m", "comment", "--comment", "kubernetes service traffic requiring SNAT"],
        Target::Masquerade { random_fully: ctx.node.random_fully }));
    out.nat.push(Rule::new(KUBE_MARK_MASQ, [""; 0], Target::OrMark(mark.as_str().into())));
}

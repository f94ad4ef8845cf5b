//! The rules that do not depend on any service: the top-level chain declarations,
//! masquerading (`KUBE-POSTROUTING`, `KUBE-MARK-MASQ`), the localnet firewall, forwarding
//! (`KUBE-FORWARD`) and the final jump to `KUBE-NODEPORTS`.

use super::context::Context;
use crate::netfilter::nfacct::NFACCT_INVALID_DROPPED;
use crate::xtables::names::*;
use crate::xtables::{Rule, Target};

pub const FILTER_CHAINS: [&str; 5] =
    [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL];
pub const NAT_CHAINS: [&str; 4] = [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ];

/// Whether the IPv4 localnet firewall (`KUBE-FIREWALL`) is written.
fn has_localnet_firewall(ctx: &Context) -> bool {
    !ctx.is_v6() && ctx.localhost_node_ports
}

/// The filter chains declared, in order.
pub fn filter_chains(ctx: &Context) -> Vec<&'static str> {
    let mut out = FILTER_CHAINS.to_vec();
    if has_localnet_firewall(ctx) {
        out.push(KUBE_FIREWALL);
    }
    out
}

/// Filter rules written before any service's.
pub fn filter_head(ctx: &Context) -> Vec<Rule> {
    if !has_localnet_firewall(ctx) {
        return Vec::new();
    }
    vec![Rule::new(KUBE_FIREWALL, ["-m", "comment", "--comment", "block incoming localnet connections",
        "-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate",
        "RELATED,ESTABLISHED,DNAT"], Target::Drop)]
}

/// Filter rules written after every service's.
pub fn filter_tail(ctx: &Context) -> Vec<Rule> {
    let mut out = Vec::new();
    if !ctx.conntrack_tcp_be_liberal {
        let acct: &[&str] = if ctx.nfacct { &["-m", "nfacct", "--nfacct-name", NFACCT_INVALID_DROPPED] } else { &[] };
        out.push(Rule::new(KUBE_FORWARD, ["-m", "conntrack", "--ctstate", "INVALID"].into_iter()
            .chain(acct.iter().copied()), Target::Drop));
    }
    let mark = format!("{0}/{0}", ctx.node.mark);
    out.push(Rule::new(KUBE_FORWARD, ["-m", "comment", "--comment", "kubernetes forwarding rules", "-m", "mark",
        "--mark", &mark], Target::Accept));
    out.push(Rule::new(KUBE_FORWARD, ["-m", "comment", "--comment", "kubernetes forwarding conntrack rule",
        "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"], Target::Accept));
    out
}

/// (filter, nat) rules written whatever the services: kube-proxy counts them in
/// `sync_proxy_rules_iptables_total` and `_last` with the services' rules.
pub fn rule_counts(ctx: &Context) -> (usize, usize) {
    (filter_head(ctx).len() + filter_tail(ctx).len(), nat_head(ctx).len() + nat_tail(ctx).len())
}

/// Nat rules written before any service's.
pub fn nat_head(ctx: &Context) -> Vec<Rule> {
    let mark = format!("{0}/{0}", ctx.node.mark);
    vec![
        Rule::new(KUBE_POSTROUTING, ["-m", "mark", "!", "--mark", &mark], Target::Return),
        Rule::new(KUBE_POSTROUTING, [""; 0], Target::XorMark(ctx.node.mark.as_str().into())),
        Rule::new(KUBE_POSTROUTING, ["-m", "comment", "--comment", "kubernetes service traffic requiring SNAT"],
            Target::Masquerade { random_fully: ctx.node.random_fully }),
        Rule::new(KUBE_MARK_MASQ, [""; 0], Target::OrMark(ctx.node.mark.as_str().into())),
    ]
}

const NODEPORTS_COMMENT: &str = "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

/// The jump(s) to `KUBE-NODEPORTS`, which must stay last in nat `KUBE-SERVICES`.
pub fn nat_tail(ctx: &Context) -> Vec<Rule> {
    let Some(ips) = &ctx.node_port_ips else {
        let guard: &[&str] = match (ctx.is_v6(), ctx.localhost_node_ports) {
            (true, _) => &["!", "-d", "::1/128"],
            (false, false) => &["!", "-d", "127.0.0.0/8"],
            (false, true) => &[],
        };
        return vec![Rule::new(KUBE_SERVICES, ["-m", "comment", "--comment", NODEPORTS_COMMENT, "-m", "addrtype",
            "--dst-type", "LOCAL"].into_iter().chain(guard.iter().copied()), Target::jump(KUBE_NODEPORTS))];
    };
    ips.iter()
        .filter(|ip| !(ip.is_loopback() && (ctx.is_v6() || !ctx.localhost_node_ports)))
        .map(|ip| Rule::new(KUBE_SERVICES, ["-m", "comment", "--comment", NODEPORTS_COMMENT, "-d", &ip.to_string()], Target::jump(KUBE_NODEPORTS)))
        .collect()
}

//! The rules that do not depend on any service: the top-level chain declarations,
//! masquerading (`KUBE-POSTROUTING`, `KUBE-MARK-MASQ`), the localnet firewall, forwarding
//! (`KUBE-FORWARD`) and the final jump to `KUBE-NODEPORTS`.

use super::context::{Context, NFACCT_INVALID_DROPPED};
use crate::iptables::lines::Lines;
use crate::iptables::names::*;

pub const FILTER_CHAINS: [&str; 5] =
    [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL];
pub const NAT_CHAINS: [&str; 4] = [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ];

/// Whether the IPv4 localnet firewall (`KUBE-FIREWALL`) is written.
fn has_localnet_firewall(ctx: &Context) -> bool {
    !ctx.is_v6() && ctx.localhost_node_ports
}

pub fn filter_chains(ctx: &Context, out: &mut Lines) {
    for c in FILTER_CHAINS {
        out.chain(c);
    }
    if has_localnet_firewall(ctx) {
        out.chain(KUBE_FIREWALL);
    }
}

/// Filter rules written before any service's.
pub fn filter_head(ctx: &Context, out: &mut Lines) {
    if has_localnet_firewall(ctx) {
        out.line(["-A", KUBE_FIREWALL, "-m", "comment", "--comment", "\"block incoming localnet connections\"",
            "-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate",
            "RELATED,ESTABLISHED,DNAT", "-j", "DROP"]);
    }
}

/// Filter rules written after every service's.
pub fn filter_tail(ctx: &Context, out: &mut Lines) {
    if !ctx.conntrack_tcp_be_liberal {
        let acct: &[&str] = if ctx.nfacct { &["-m", "nfacct", "--nfacct-name", NFACCT_INVALID_DROPPED] } else { &[] };
        out.line(["-A", KUBE_FORWARD, "-m", "conntrack", "--ctstate", "INVALID"].into_iter()
            .chain(acct.iter().copied()).chain(["-j", "DROP"]));
    }
    let mark = format!("{0}/{0}", ctx.mark);
    out.line(["-A", KUBE_FORWARD, "-m", "comment", "--comment", "\"kubernetes forwarding rules\"", "-m", "mark",
        "--mark", &mark, "-j", "ACCEPT"]);
    out.line(["-A", KUBE_FORWARD, "-m", "comment", "--comment", "\"kubernetes forwarding conntrack rule\"",
        "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"]);
}

pub fn nat_chains(out: &mut Lines) {
    for c in NAT_CHAINS {
        out.chain(c);
    }
}

/// Nat rules written before any service's.
pub fn nat_head(ctx: &Context, out: &mut Lines) {
    let mark = format!("{0}/{0}", ctx.mark);
    out.line(["-A", KUBE_POSTROUTING, "-m", "mark", "!", "--mark", &mark, "-j", "RETURN"]);
    out.line(["-A", KUBE_POSTROUTING, "-j", "MARK", "--xor-mark", &ctx.mark]);
    let random: &[&str] = if ctx.random_fully { &["--random-fully"] } else { &[] };
    out.line(["-A", KUBE_POSTROUTING, "-m", "comment", "--comment", "\"kubernetes service traffic requiring SNAT\"",
        "-j", "MASQUERADE"].into_iter().chain(random.iter().copied()));
    out.line(["-A", KUBE_MARK_MASQ, "-j", "MARK", "--or-mark", &ctx.mark]);
}

const NODEPORTS_COMMENT: &str = "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";

/// The jump(s) to `KUBE-NODEPORTS`, which must stay last in nat `KUBE-SERVICES`.
pub fn nat_tail(ctx: &Context, out: &mut Lines) {
    let Some(ips) = &ctx.node_port_ips else {
        let guard: &[&str] = match (ctx.is_v6(), ctx.localhost_node_ports) {
            (true, _) => &["!", "-d", "::1/128"],
            (false, false) => &["!", "-d", "127.0.0.0/8"],
            (false, true) => &[],
        };
        out.line(["-A", KUBE_SERVICES, "-m", "comment", "--comment", NODEPORTS_COMMENT, "-m", "addrtype",
            "--dst-type", "LOCAL"].into_iter().chain(guard.iter().copied()).chain(["-j", KUBE_NODEPORTS]));
        return;
    };
    for ip in ips {
        if ip.is_loopback() && (ctx.is_v6() || !ctx.localhost_node_ports) {
            continue;
        }
        out.line(["-A", KUBE_SERVICES, "-m", "comment", "--comment", NODEPORTS_COMMENT, "-d", &ip.to_string(),
            "-j", KUBE_NODEPORTS]);
    }
}

//! The jumps from built-in chains into kube-proxy's chains. kube-proxy ensures them with
//! `EnsureRule(Prepend)` on every full sync, in this order (its `iptablesJumpChains`, then
//! kubelet's KUBE-FIREWALL jumps); svcproxy inserts the missing ones at position 1 in the
//! same order, which leaves the kernel exactly as kube-proxy would.

use super::names::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub table: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    /// The rule's arguments after `-A FROM` (exec arguments, unquoted).
    pub args: Vec<String>,
}

fn jump(table: &'static str, from: &'static str, to: &'static str, ct_new: bool, comment: &str) -> Jump {
    let mut args: Vec<String> = Vec::new();
    if ct_new {
        args.extend(["-m", "conntrack", "--ctstate", "NEW"].map(String::from));
    }
    if !comment.is_empty() {
        args.extend(["-m".into(), "comment".into(), "--comment".into(), comment.into()]);
    }
    args.extend(["-j".into(), to.into()]);
    Jump { table, from, to, args }
}

/// The jumps for one family. `kubelet_firewall`: also the KUBE-FIREWALL jumps (IPv4 with
/// localhost NodePorts, when svcproxy writes that chain).
pub fn jumps(kubelet_firewall: bool) -> Vec<Jump> {
    let ext = "kubernetes externally-visible service portals";
    let portals = "kubernetes service portals";
    let lbfw = "kubernetes load balancer firewall";
    let mut v = vec![
        jump("filter", "INPUT", KUBE_EXTERNAL_SERVICES, true, ext),
        jump("filter", "FORWARD", KUBE_EXTERNAL_SERVICES, true, ext),
        jump("filter", "INPUT", KUBE_NODEPORTS, false, "kubernetes health check service ports"),
        jump("filter", "FORWARD", KUBE_SERVICES, true, portals),
        jump("filter", "OUTPUT", KUBE_SERVICES, true, portals),
        jump("filter", "FORWARD", KUBE_FORWARD, false, "kubernetes forwarding rules"),
        jump("filter", "INPUT", KUBE_PROXY_FIREWALL, true, lbfw),
        jump("filter", "OUTPUT", KUBE_PROXY_FIREWALL, true, lbfw),
        jump("filter", "FORWARD", KUBE_PROXY_FIREWALL, true, lbfw),
        jump("nat", "OUTPUT", KUBE_SERVICES, false, portals),
        jump("nat", "PREROUTING", KUBE_SERVICES, false, portals),
        jump("nat", "POSTROUTING", KUBE_POSTROUTING, false, "kubernetes postrouting rules"),
    ];
    if kubelet_firewall {
        v.push(jump("filter", "INPUT", KUBE_FIREWALL, false, ""));
        v.push(jump("filter", "OUTPUT", KUBE_FIREWALL, false, ""));
    }
    v
}

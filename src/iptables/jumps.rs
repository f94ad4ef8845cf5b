//! The jumps from built-in chains into kube-proxy's chains. kube-proxy ensures them with
//! `EnsureRule(Prepend)` on every full sync, in this order (its `iptablesJumpChains`, then
//! kubelet's KUBE-FIREWALL jumps); svcproxy inserts the missing ones at position 1 in the
//! same order, which leaves the kernel exactly as kube-proxy would.

use crate::xtables::names::*;
use crate::xtables::jumps::Jump;

/// The jumps for one family. `kubelet_firewall`: also the KUBE-FIREWALL jumps (IPv4 with
/// localhost NodePorts, when svcproxy writes that chain).
pub fn jumps(kubelet_firewall: bool) -> Vec<Jump> {
    let ext = "kubernetes externally-visible service portals";
    let portals = "kubernetes service portals";
    let lbfw = "kubernetes load balancer firewall";
    let mut v = vec![
        Jump::new("filter", "INPUT", KUBE_EXTERNAL_SERVICES, true, ext),
        Jump::new("filter", "FORWARD", KUBE_EXTERNAL_SERVICES, true, ext),
        Jump::new("filter", "INPUT", KUBE_NODEPORTS, false, "kubernetes health check service ports"),
        Jump::new("filter", "FORWARD", KUBE_SERVICES, true, portals),
        Jump::new("filter", "OUTPUT", KUBE_SERVICES, true, portals),
        Jump::new("filter", "FORWARD", KUBE_FORWARD, false, "kubernetes forwarding rules"),
        Jump::new("filter", "INPUT", KUBE_PROXY_FIREWALL, true, lbfw),
        Jump::new("filter", "OUTPUT", KUBE_PROXY_FIREWALL, true, lbfw),
        Jump::new("filter", "FORWARD", KUBE_PROXY_FIREWALL, true, lbfw),
        Jump::new("nat", "OUTPUT", KUBE_SERVICES, false, portals),
        Jump::new("nat", "PREROUTING", KUBE_SERVICES, false, portals),
        Jump::new("nat", "POSTROUTING", KUBE_POSTROUTING, false, "kubernetes postrouting rules"),
    ];
    if kubelet_firewall {
        v.push(Jump::new("filter", "INPUT", KUBE_FIREWALL, false, ""));
        v.push(Jump::new("filter", "OUTPUT", KUBE_FIREWALL, false, ""));
    }
    v
}

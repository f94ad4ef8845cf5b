//! How one service port is wired in nftables mode, decided before any object is written
//! (the classification at the top of kube-proxy's per-service loop): which chains it
//! uses, and the verdict for traffic that has no endpoint to go to.

use crate::model::{Endpoint, ServicePort};
use crate::nftables::names::{ServiceChains, REJECT_CHAIN};
use crate::select::{categorize, Categorized, Locality, Reach};

#[derive(Debug, Clone)]
pub struct Wiring<'a> {
    pub svc: &'a ServicePort,
    /// `ns/name:port` (element comments).
    pub spn: String,
    pub proto: &'static str,
    pub chains: ServiceChains,
    pub endpoints: Categorized<'a>,
    pub has_endpoints: bool,
    /// The cluster chain, or the local one when internalTrafficPolicy is Local.
    pub internal_chain: String,
    /// The cluster chain, or the local one when externalTrafficPolicy is Local.
    pub external_policy_chain: String,
    pub uses_cluster_chain: bool,
    pub uses_local_chain: bool,
    pub uses_external_chain: bool,
    /// Load-balancer IPs with source ranges: the firewall chain filters them.
    pub uses_firewall_chain: bool,
    /// Set when ClusterIP traffic has no usable endpoint: `goto reject-chain` or `drop`.
    pub internal_verdict: Option<String>,
    /// Set when external traffic has no usable endpoint.
    pub external_verdict: Option<String>,
}

impl<'a> Wiring<'a> {
    pub fn new(svc: &'a ServicePort, endpoints: &'a [Endpoint], here: Locality) -> Wiring<'a> {
        let proto = svc.protocol.lower();
        let chains = ServiceChains::new(&svc.name, proto);
        let cat = categorize(endpoints, svc, here);
        let reach = Reach::of(svc, &cat);
        let has_endpoints = reach.has_endpoints;
        let internal_chain = if svc.internal_policy_local { chains.local.clone() } else { chains.cluster.clone() };
        let external_policy_chain = if svc.external_policy_local { chains.local.clone() } else { chains.cluster.clone() };
        let verdict = |has: bool| match (has_endpoints, has) {
            (false, _) => Some(format!("goto {REJECT_CHAIN}")),
            (true, false) => Some("drop".to_owned()),
            (true, true) => None,
        };
        Wiring {
            spn: svc.name.to_string(),
            proto,
            uses_cluster_chain: reach.uses_cluster_chain,
            uses_local_chain: reach.uses_local_chain,
            uses_external_chain: reach.uses_external_chain,
            uses_firewall_chain: !svc.load_balancer_vips.is_empty() && !svc.load_balancer_source_ranges.is_empty(),
            internal_verdict: verdict(reach.has_internal),
            external_verdict: verdict(reach.has_external),
            internal_chain,
            external_policy_chain,
            has_endpoints,
            endpoints: cat,
            chains,
            svc,
        }
    }
}

//! How one service port is wired, decided before any rule is written (the classification
//! at the top of kube-proxy's per-service loop): which chains it uses, and what happens to
//! traffic that has no endpoint to go to.

use crate::netfilter::names::ServiceChains;
use crate::netfilter::{Chain, Target};
use crate::model::{Endpoint, ServicePort};
use crate::select::{categorize, Categorized, Locality, Reach};

/// A filter-table verdict for traffic with nowhere to go, and its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `REJECT` or `DROP`.
    pub target: Target,
    pub comment: String,
}

#[derive(Debug, Clone)]
pub struct Wiring<'a> {
    pub svc: &'a ServicePort,
    /// `ns/name:port`.
    pub spn: String,
    pub proto: &'static str,
    pub chains: ServiceChains,
    pub endpoints: Categorized<'a>,
    /// The service port's endpoint list, which every category borrows from.
    pub all_endpoints: &'a [Endpoint],
    pub has_endpoints: bool,
    /// SVC, or SVL when internalTrafficPolicy is Local.
    pub internal_chain: Chain,
    /// SVC, or SVL when externalTrafficPolicy is Local.
    pub external_policy_chain: Chain,
    /// FW when source ranges apply, else EXT.
    pub load_balancer_chain: Chain,
    pub uses_cluster_chain: bool,
    pub uses_local_chain: bool,
    pub uses_ext_chain: bool,
    pub uses_fw_chain: bool,
    /// Set when ClusterIP traffic must be refused (no usable internal endpoint).
    pub internal_refusal: Option<Refusal>,
    /// Set when external traffic must be refused (no usable external endpoint).
    pub external_refusal: Option<Refusal>,
}

impl<'a> Wiring<'a> {
    pub fn new(svc: &'a ServicePort, endpoints: &'a [Endpoint], here: Locality) -> Wiring<'a> {
        let spn = svc.name.to_string();
        let proto = svc.protocol.lower();
        let chains = ServiceChains::new(&spn, proto);
        let cat = categorize(endpoints, svc, here);
        let reach = Reach::of(svc, &cat);
        let has_endpoints = reach.has_endpoints;
        let internal_chain = if svc.internal_policy_local { chains.svl.clone() } else { chains.svc.clone() };
        let external_policy_chain = if svc.external_policy_local { chains.svl.clone() } else { chains.svc.clone() };
        let uses_fw_chain = has_endpoints
            && !svc.load_balancer_vips.is_empty()
            && !svc.load_balancer_source_ranges.is_empty();
        let refusal = |target, what: &str| Some(Refusal { target, comment: format!("{spn} has no {what}") });
        let (internal_refusal, external_refusal) = if !has_endpoints {
            (refusal(Target::Reject(None), "endpoints"), refusal(Target::Reject(None), "endpoints"))
        } else {
            (
                if reach.has_internal { None } else { refusal(Target::Drop, "local endpoints") },
                if reach.has_external { None } else { refusal(Target::Drop, "local endpoints") },
            )
        };
        Wiring {
            uses_cluster_chain: reach.uses_cluster_chain,
            uses_local_chain: reach.uses_local_chain,
            uses_ext_chain: reach.uses_external_chain,
            load_balancer_chain: if uses_fw_chain { chains.fw.clone() } else { chains.ext.clone() },
            uses_fw_chain,
            internal_chain,
            external_policy_chain,
            has_endpoints,
            internal_refusal,
            external_refusal,
            endpoints: cat,
            all_endpoints: endpoints,
            chains,
            proto,
            spn,
            svc,
        }
    }
}

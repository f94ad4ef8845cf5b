//! How one service port is wired, decided before any rule is written (the classification
//! at the top of kube-proxy's per-service loop): which chains it uses, and what happens to
//! traffic that has no endpoint to go to.

use crate::iptables::names::ServiceChains;
use crate::netfilter::Chain;
use crate::model::{Endpoint, ServicePort};
use crate::select::{categorize, Categorized, Locality};

/// A filter-table verdict for traffic with nowhere to go, and its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub target: &'static str,
    pub comment: String,
}

#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub svc: &'a ServicePort,
    /// `ns/name:port`.
    pub spn: String,
    pub proto: &'static str,
    pub chains: ServiceChains,
    pub endpoints: Categorized<'a>,
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

impl<'a> Plan<'a> {
    pub fn new(svc: &'a ServicePort, endpoints: &'a [Endpoint], here: Locality) -> Plan<'a> {
        let spn = svc.name.to_string();
        let proto = svc.protocol.lower();
        let chains = ServiceChains::new(&spn, proto);
        let cat = categorize(endpoints, svc, here);
        let has_endpoints = cat.has_any;
        let mut has_internal = has_endpoints;
        let mut internal_chain = chains.svc.clone();
        if svc.internal_policy_local {
            internal_chain = chains.svl.clone();
            has_internal &= !cat.local.is_empty();
        }
        let mut has_external = has_endpoints;
        let mut external_policy_chain = chains.svc.clone();
        if svc.external_policy_local {
            external_policy_chain = chains.svl.clone();
            has_external &= !cat.local.is_empty();
        }
        let uses_fw_chain = has_endpoints
            && !svc.load_balancer_vips.is_empty()
            && !svc.load_balancer_source_ranges.is_empty();
        let refusal = |target, what: &str| Some(Refusal { target, comment: format!("{spn} has no {what}") });
        let (internal_refusal, external_refusal) = if !has_endpoints {
            (refusal("REJECT", "endpoints"), refusal("REJECT", "endpoints"))
        } else {
            (
                if has_internal { None } else { refusal("DROP", "local endpoints") },
                if has_external { None } else { refusal("DROP", "local endpoints") },
            )
        };
        Plan {
            uses_cluster_chain: !cat.cluster.is_empty() && svc.uses_cluster_endpoints(),
            uses_local_chain: !cat.local.is_empty() && svc.uses_local_endpoints(),
            uses_ext_chain: has_endpoints && svc.externally_accessible(),
            load_balancer_chain: if uses_fw_chain { chains.fw.clone() } else { chains.ext.clone() },
            uses_fw_chain,
            internal_chain,
            external_policy_chain,
            has_endpoints,
            internal_refusal,
            external_refusal,
            endpoints: cat,
            chains,
            proto,
            spn,
            svc,
        }
    }
}

//! How one service port is wired, decided before any rule is written: the classification
//! at the top of kube-proxy's per-service loop, which its iptables and nftables proxiers
//! make alike. Its endpoints by category ([`categorize`]), which of its chains it uses,
//! which chain ClusterIP and external traffic enter, and whether traffic with no endpoint
//! to go to is refused.
//!
//! What the two modes do differently is a [`Mode`], one per renderer
//! (`iptables::render::wiring`, `nftables::render::wiring`): their chain names, what a
//! refusal is (a filter-table `REJECT`/`DROP` with a comment; a `goto reject-chain`/`drop`
//! verdict), and whether the firewall chain needs endpoints.

use std::fmt::Debug;

use crate::model::{Endpoint, ServicePort};
use crate::select::{categorize, Categorized, Locality};

/// What kube-proxy's per-service loop decides before it writes anything, the same in
/// every mode: whether ClusterIP and external traffic have an endpoint to go to, and which
/// endpoint chains (cluster-wide, node-local, external) the service port needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    pub has_endpoints: bool,
    /// ClusterIP traffic has a usable endpoint (a local one with internalTrafficPolicy Local).
    pub has_internal: bool,
    /// External traffic has a usable endpoint (a local one with externalTrafficPolicy Local).
    pub has_external: bool,
    pub uses_cluster_chain: bool,
    pub uses_local_chain: bool,
    pub uses_external_chain: bool,
}

impl Reach {
    pub fn of(svc: &ServicePort, cat: &Categorized) -> Reach {
        let has_endpoints = cat.has_any;
        let local = has_endpoints && !cat.local.is_empty();
        Reach {
            has_endpoints,
            has_internal: if svc.internal_policy_local { local } else { has_endpoints },
            has_external: if svc.external_policy_local { local } else { has_endpoints },
            uses_cluster_chain: !cat.cluster.is_empty() && svc.uses_cluster_endpoints(),
            uses_local_chain: !cat.local.is_empty() && svc.uses_local_endpoints(),
            uses_external_chain: has_endpoints && svc.externally_accessible(),
        }
    }
}

/// Why traffic is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEndpoint {
    /// The service port has no usable endpoint at all: kube-proxy rejects the traffic.
    Anywhere,
    /// Its traffic policy is Local and this node has no usable endpoint: kube-proxy drops it.
    Here,
}

/// What one proxy mode's renderer names and writes its own way.
pub trait Mode {
    /// One chain's name.
    type Chain: Clone + Debug;
    /// A service port's own chains.
    type Chains: Clone + Debug;
    /// What traffic with nowhere to go gets.
    type Refusal: Clone + Debug;
    /// Whether the firewall chain (load-balancer IPs with source ranges) is used only when
    /// the service port has endpoints.
    const FIREWALL_NEEDS_ENDPOINTS: bool;

    /// `spn` is `svc.name` as text (`ns/name:port`), `proto` the protocol in lower case.
    fn chains(svc: &ServicePort, spn: &str, proto: &'static str) -> Self::Chains;
    /// The cluster-policy chain and the local-policy one.
    fn policy_chains(chains: &Self::Chains) -> (&Self::Chain, &Self::Chain);
    fn refusal(spn: &str, why: NoEndpoint) -> Self::Refusal;
}

#[derive(Debug, Clone)]
pub struct Wiring<'a, M: Mode> {
    pub svc: &'a ServicePort,
    /// `ns/name:port`.
    pub spn: String,
    pub proto: &'static str,
    pub chains: M::Chains,
    pub endpoints: Categorized<'a>,
    /// The service port's endpoint list, which every category borrows from.
    pub all_endpoints: &'a [Endpoint],
    pub has_endpoints: bool,
    /// The cluster chain, or the local one when internalTrafficPolicy is Local.
    pub internal_chain: M::Chain,
    /// The cluster chain, or the local one when externalTrafficPolicy is Local.
    pub external_policy_chain: M::Chain,
    pub uses_cluster_chain: bool,
    pub uses_local_chain: bool,
    pub uses_external_chain: bool,
    /// Load-balancer IPs with source ranges (and, where the mode says so, endpoints): the
    /// firewall chain filters them.
    pub uses_firewall_chain: bool,
    /// Set when ClusterIP traffic must be refused (no usable internal endpoint).
    pub internal_refusal: Option<M::Refusal>,
    /// Set when external traffic must be refused (no usable external endpoint).
    pub external_refusal: Option<M::Refusal>,
}

impl<'a, M: Mode> Wiring<'a, M> {
    pub fn new(svc: &'a ServicePort, endpoints: &'a [Endpoint], here: Locality) -> Self {
        let spn = svc.name.to_string();
        let proto = svc.protocol.lower();
        let chains = M::chains(svc, &spn, proto);
        let cat = categorize(endpoints, svc, here);
        let reach = Reach::of(svc, &cat);
        let (internal_chain, external_policy_chain) = {
            let (cluster, local) = M::policy_chains(&chains);
            let pick = |local_policy: bool| if local_policy { local.clone() } else { cluster.clone() };
            (pick(svc.internal_policy_local), pick(svc.external_policy_local))
        };
        let refusal = |has: bool| match (reach.has_endpoints, has) {
            (false, _) => Some(M::refusal(&spn, NoEndpoint::Anywhere)),
            (true, false) => Some(M::refusal(&spn, NoEndpoint::Here)),
            (true, true) => None,
        };
        let (internal_refusal, external_refusal) = (refusal(reach.has_internal), refusal(reach.has_external));
        let source_ranges = !svc.load_balancer_vips.is_empty() && !svc.load_balancer_source_ranges.is_empty();
        Wiring {
            uses_firewall_chain: source_ranges && (reach.has_endpoints || !M::FIREWALL_NEEDS_ENDPOINTS),
            uses_cluster_chain: reach.uses_cluster_chain,
            uses_local_chain: reach.uses_local_chain,
            uses_external_chain: reach.uses_external_chain,
            has_endpoints: reach.has_endpoints,
            internal_chain,
            external_policy_chain,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NamespacedName, Protocol, ServicePortName};

    /// A mode that writes its decisions as words.
    #[derive(Debug, Clone)]
    struct Words<const FIREWALL_NEEDS_ENDPOINTS: bool>;

    impl<const F: bool> Mode for Words<F> {
        type Chain = String;
        type Chains = (String, String);
        type Refusal = String;
        const FIREWALL_NEEDS_ENDPOINTS: bool = F;

        fn chains(_: &ServicePort, spn: &str, proto: &'static str) -> (String, String) {
            (format!("cluster {spn} {proto}"), format!("local {spn} {proto}"))
        }

        fn policy_chains(chains: &(String, String)) -> (&String, &String) {
            (&chains.0, &chains.1)
        }

        fn refusal(spn: &str, why: NoEndpoint) -> String {
            format!("{why:?} {spn}")
        }
    }

    fn svc(itp_local: bool, etp_local: bool) -> ServicePort {
        ServicePort {
            name: ServicePortName { service: NamespacedName::new("ns", "s"), port: "p".into(), protocol: Protocol::Tcp },
            cluster_ip: "10.0.0.1".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            node_port: 30000,
            external_ips: vec![],
            load_balancer_vips: vec!["192.0.2.1".parse().unwrap()],
            load_balancer_source_ranges: vec![crate::net::Cidr::parse_sloppy("203.0.113.0/24").unwrap()],
            session_affinity: None,
            health_check_node_port: 0,
            external_policy_local: etp_local,
            internal_policy_local: itp_local,
        }
    }

    fn ep(ip: &str, is_local: bool) -> Endpoint {
        Endpoint { ip: ip.parse().unwrap(), port: 80, is_local, ready: true, serving: true, terminating: false, zone_hints: Default::default(), node_hints: Default::default() }
    }

    const HERE: Locality = Locality { node_name: "n", zone: None };

    #[test]
    fn local_policies_pick_the_local_chain_and_drop_without_a_local_endpoint() {
        let (s, eps) = (svc(true, false), [ep("10.1.0.2", false)]);
        let w = Wiring::<Words<true>>::new(&s, &eps, HERE);
        assert_eq!((w.spn.as_str(), w.proto), ("ns/s:p", "tcp"));
        assert_eq!(w.internal_chain, "local ns/s:p tcp");
        assert_eq!(w.external_policy_chain, "cluster ns/s:p tcp");
        assert_eq!(w.internal_refusal.as_deref(), Some("Here ns/s:p"));
        assert_eq!(w.external_refusal, None);
        assert!(w.has_endpoints && w.uses_cluster_chain && !w.uses_local_chain && w.uses_external_chain && w.uses_firewall_chain);
    }

    #[test]
    fn without_endpoints_both_are_refused_and_the_firewall_waits_only_where_the_mode_says() {
        let s = svc(false, true);
        let iptables_like = Wiring::<Words<true>>::new(&s, &[], HERE);
        assert_eq!(iptables_like.internal_refusal.as_deref(), Some("Anywhere ns/s:p"));
        assert_eq!(iptables_like.external_refusal.as_deref(), Some("Anywhere ns/s:p"));
        assert!(!iptables_like.has_endpoints && !iptables_like.uses_external_chain);
        assert!(!iptables_like.uses_firewall_chain, "no endpoints: no firewall chain");
        assert!(Wiring::<Words<false>>::new(&s, &[], HERE).uses_firewall_chain, "the firewall chain regardless");
    }
}

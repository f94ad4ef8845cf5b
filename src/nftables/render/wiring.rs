//! How one service port is wired in nftables mode: the shared [`crate::wiring::Wiring`]
//! with nftables mode's chains (`service-`, `local-`, `external-`, `firewall-`) and its
//! refusals (the verdict for traffic with nowhere to go: `goto reject-chain` or `drop`).

use crate::model::ServicePort;
use crate::nftables::names::{ServiceChains, REJECT_CHAIN};
use crate::nftables::stmt::Verdict;
use crate::wiring::{Mode, NoEndpoint};

/// nftables mode's side of the wiring.
#[derive(Debug, Clone, Copy)]
pub struct Nftables;

impl Mode for Nftables {
    type Chain = String;
    type Chains = ServiceChains;
    type Refusal = Verdict;
    /// kube-proxy's nftables proxier fills `firewall-ips` for every load-balancer IP with
    /// source ranges, whether the service port has endpoints or not (`usesFWChain` there
    /// does not look at `hasEndpoints`).
    const FIREWALL_NEEDS_ENDPOINTS: bool = false;

    fn chains(svc: &ServicePort, _: &str, proto: &'static str) -> ServiceChains {
        ServiceChains::new(&svc.name, proto)
    }

    fn policy_chains(chains: &ServiceChains) -> (&String, &String) {
        (&chains.cluster, &chains.local)
    }

    fn refusal(_: &str, why: NoEndpoint) -> Verdict {
        match why {
            NoEndpoint::Anywhere => Verdict::Goto(REJECT_CHAIN.to_owned()),
            NoEndpoint::Here => Verdict::Drop,
        }
    }
}

pub type Wiring<'a> = crate::wiring::Wiring<'a, Nftables>;

//! How one service port is wired in iptables mode: the shared [`crate::wiring::Wiring`]
//! with iptables mode's chains (`KUBE-SVC-`, `KUBE-SVL-`, `KUBE-EXT-`, `KUBE-FW-`) and its
//! refusals (a filter-table `REJECT` or `DROP` and its comment).

use crate::model::ServicePort;
use crate::xtables::names::ServiceChains;
use crate::xtables::{Chain, Target};
use crate::wiring::{Mode, NoEndpoint};

/// A filter-table verdict for traffic with nowhere to go, and its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `REJECT` or `DROP`.
    pub target: Target,
    pub comment: String,
}

/// iptables mode's side of the wiring.
#[derive(Debug, Clone, Copy)]
pub struct Iptables;

impl Mode for Iptables {
    type Chain = Chain;
    type Chains = ServiceChains;
    type Refusal = Refusal;
    /// kube-proxy's iptables proxier uses `KUBE-FW-` only when the service port has
    /// endpoints (`usesFWChain := hasEndpoints && …`); without, the filter table rejects
    /// its traffic before any firewall would see it.
    const FIREWALL_NEEDS_ENDPOINTS: bool = true;

    fn chains(_: &ServicePort, spn: &str, proto: &'static str) -> ServiceChains {
        ServiceChains::new(spn, proto)
    }

    fn policy_chains(chains: &ServiceChains) -> (&Chain, &Chain) {
        (&chains.svc, &chains.svl)
    }

    fn refusal(spn: &str, why: NoEndpoint) -> Refusal {
        match why {
            NoEndpoint::Anywhere => Refusal { target: Target::Reject(None), comment: format!("{spn} has no endpoints") },
            NoEndpoint::Here => Refusal { target: Target::Drop, comment: format!("{spn} has no local endpoints") },
        }
    }
}

pub type Wiring<'a> = crate::wiring::Wiring<'a, Iptables>;

impl Wiring<'_> {
    /// `KUBE-FW-` when source ranges apply, else `KUBE-EXT-` (kube-proxy's
    /// `loadBalancerTrafficChain`).
    pub fn load_balancer_chain(&self) -> &Chain {
        if self.uses_firewall_chain { &self.chains.fw } else { &self.chains.ext }
    }
}

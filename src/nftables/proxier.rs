//! nftables mode across syncs: the rendered rulesets (one per family) and the kernel
//! reached through [`Nft`]. Every sync is a full one ([`super::sync::full`]): one
//! transaction per family. A one-shot `svcproxy sync` is this proxier's first sync;
//! [`Pass::DryRun`] compares every family with the kernel and sends nothing.

use super::apply::{Nft, NftError};
use super::render::Ruleset;
use super::sync::{self, Report};
use crate::config::Config;
use crate::iptables::conntrack::Conntrack;
pub use crate::iptables::proxier::{Pass, Reconciled};
use crate::track::{Changes, Trackers};

/// A family's sync failed; `done` holds the reports of the families synced before it.
#[derive(Debug, thiserror::Error)]
#[error("{family} nftables sync failed")]
pub struct Failed {
    pub family: crate::net::IpFamily,
    #[source]
    pub error: NftError,
    pub done: Vec<Report>,
}

pub struct Proxier {
    pub rulesets: Vec<Ruleset>,
    /// The stale-flow cleanups of the last sync, for the metrics.
    pub reconciled: Vec<Reconciled>,
    nft: Box<dyn Nft>,
    #[allow(dead_code)] // used once partial syncs clear stale UDP/SCTP flows
    conntrack: Box<dyn Conntrack>,
}

impl Proxier {
    pub fn new(config: &Config, trackers: &Trackers, nft: Box<dyn Nft>, conntrack: Box<dyn Conntrack>) -> Self {
        Proxier { rulesets: super::render_all(config, trackers), reconciled: Vec::new(), nft, conntrack }
    }

    /// Renders everything again (the configuration changed, e.g. this node's zone).
    pub fn rerender(&mut self, config: &Config, trackers: &Trackers) {
        self.rulesets = super::render_all(config, trackers);
    }

    /// Brings the rulesets up to date with a commit (`changes`, per family) and the kernel
    /// up to date with them (a [`Pass::DryRun`] only compares). A failure keeps the earlier
    /// families' reports.
    pub fn sync_as(&mut self, trackers: &Trackers, changes: &[Changes], pass: Pass) -> Result<Vec<Report>, Failed> {
        for ((rs, t), ch) in self.rulesets.iter_mut().zip(&trackers.families).zip(changes) {
            let (s, e) = t.view();
            rs.update(s, e, &ch.services);
        }
        self.reconciled.clear();
        let mut reports = Vec::with_capacity(self.rulesets.len());
        for rs in &self.rulesets {
            match sync::full(self.nft.as_mut(), &rs.table(), pass == Pass::DryRun) {
                Ok(r) => reports.push(r),
                Err(error) => return Err(Failed { family: rs.ctx.ip_family, error, done: reports }),
            }
        }
        Ok(reports)
    }
}

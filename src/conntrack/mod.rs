//! kube-proxy's conntrack reconciler, one for every mode: after a sync that changed a
//! UDP service port's endpoints (every process's first sync among them), one family's
//! UDP flows are read from the kernel and those [`plan::Targets`] calls stale are
//! deleted. It works from the trackers' service and endpoints maps, as kube-proxy's
//! works from its service-port and endpoints maps, never from a mode's rules, so a flow
//! cached before any rule existed, or left by a pod that went while svcproxy was down,
//! goes too. The kernel is behind [`table::FlowTable`] (ctnetlink on the node).

pub mod plan;
pub mod table;

use std::collections::BTreeSet;
use std::time::Instant;

use crate::model::{EndpointsMap, ServicePortMap};
use crate::net::IpFamily;
use crate::netfilter::ctnetlink::Flow;

pub use table::{FlowTable, NetlinkFlows};

/// One family's run (kube-proxy's `conntrack_reconciler_*` metrics observe it).
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    pub family: IpFamily,
    pub seconds: f64,
    /// UDP flows read.
    pub listed: usize,
    /// The stale flows found: deleted, or for a dry run to be deleted.
    pub stale: Vec<Flow>,
    /// Flows deleted (`None`: a dry run, or the run failed).
    pub deleted: Option<usize>,
    /// Why the run failed (listing or deleting).
    pub error: Option<String>,
}

/// The reconciler and the families whose run is owed.
pub struct Reconciler {
    table: Box<dyn FlowTable>,
    /// Families whose endpoints changed since their last successful run: a sync that
    /// failed, or a run that failed, leaves the run owed to the next sync (kube-proxy
    /// forgets it; its next sync sees no endpoint change).
    owed: BTreeSet<IpFamily>,
}

impl Reconciler {
    pub fn new(table: Box<dyn FlowTable>) -> Self {
        Reconciler { table, owed: BTreeSet::new() }
    }

    /// Notes that `family`'s UDP endpoints changed (kube-proxy's `ConntrackCleanupRequired`).
    pub fn owe(&mut self, family: IpFamily) {
        self.owed.insert(family);
    }

    pub fn is_owed(&self, family: IpFamily) -> bool {
        self.owed.contains(&family)
    }

    /// Runs an owed family against its committed maps. A dry run lists what it would
    /// delete and keeps the run owed.
    pub fn run(&mut self, family: IpFamily, services: &ServicePortMap, endpoints: &EndpointsMap, dry_run: bool) -> Reconciled {
        let started = Instant::now();
        let targets = plan::Targets::new(services, endpoints);
        let mut stale = Vec::new();
        let listed = if targets.is_empty() {
            Ok(0)
        } else {
            self.table.udp_flows(family, &mut |f| {
                if targets.is_stale(f) {
                    stale.push(*f);
                }
            })
        };
        let result = listed.and_then(|listed| {
            let deleted = match (dry_run, stale.is_empty()) {
                (true, _) => None,
                (false, true) => Some(0),
                (false, false) => Some(self.table.delete(&stale)?.deleted),
            };
            Ok((listed, deleted))
        });
        let seconds = started.elapsed().as_secs_f64();
        match result {
            Ok((listed, deleted)) => {
                if !dry_run {
                    self.owed.remove(&family);
                }
                tracing::debug!(family = family.api_name(), listed, stale = stale.len(), seconds, "conntrack reconciled");
                Reconciled { family, seconds, listed, stale, deleted, error: None }
            }
            Err(e) => {
                tracing::warn!(family = family.api_name(), error = %e, "stale UDP conntrack flows not cleared; the next sync tries again");
                Reconciled { family, seconds, listed: 0, stale, deleted: None, error: Some(e.to_string()) }
            }
        }
    }
}

#[cfg(test)]
mod tests;

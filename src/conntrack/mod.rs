//! kube-proxy's conntrack reconciler, one for every mode: after a sync that changed a
//! UDP service port's endpoints (every process's first sync among them), one family's
//! UDP flows are read from the kernel and those [`plan::Targets`] calls stale are
//! deleted. It works from the trackers' service and endpoints maps, as kube-proxy's
//! works from its service-port and endpoints maps, never from a mode's rules, so a flow
//! cached before any rule existed, or left by a pod that went while svcproxy was down,
//! goes too. A process's first run, and a run after one that failed, read every UDP flow
//! of the family, as kube-proxy's every run does; a later run reads only the changed
//! services' addresses and ports, each a dump the kernel filters, when they are few
//! ([`MAX_TARGETED_DUMPS`]): stale flows can only have come from those changes since.
//! The kernel is behind [`table::FlowTable`] (ctnetlink on the node).

pub mod plan;
pub mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::model::{EndpointsMap, NamespacedName, ServicePortMap};
use crate::net::IpFamily;
use crate::netfilter::ctnetlink::wire::{DumpFilter, IPPROTO_UDP};
use crate::netfilter::ctnetlink::Flow;

pub use table::{FlowTable, NetlinkFlows};

/// One family's run (kube-proxy's `conntrack_reconciler_*` metrics observe it).
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    pub family: IpFamily,
    pub seconds: f64,
    /// How the flows were read: the whole UDP table, or one kernel-filtered dump per
    /// address and port of the changed services.
    pub scope: Scope,
    /// UDP flows read.
    pub listed: usize,
    /// The stale flows found: deleted, or for a dry run to be deleted.
    pub stale: Vec<Flow>,
    /// Flows deleted (`None`: a dry run, or the run failed).
    pub deleted: Option<usize>,
    /// Why the run failed (listing or deleting).
    pub error: Option<String>,
}

/// What a run read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every UDP flow of the family (kube-proxy's one listing).
    All,
    /// This many dumps, each of one changed service address and port (or NodePort).
    Changed(usize),
}

/// Above this many addresses and ports to read, one dump of every UDP flow costs less:
/// the kernel walks its whole table for each dump, filtered or not, and a filtered one
/// costs about a sixth of a full one (BENCHMARKS.md, the conntrack reconciler).
pub const MAX_TARGETED_DUMPS: usize = 4;

/// What a family is owed.
#[derive(Debug, Clone, Default)]
struct Owed {
    /// A run over every UDP flow: the first, or after a run that failed.
    all: bool,
    /// The services whose UDP endpoints changed since the last run.
    services: BTreeSet<NamespacedName>,
}

/// The reconciler and the runs each family is owed.
pub struct Reconciler {
    table: Box<dyn FlowTable>,
    /// Families whose UDP endpoints changed since their last successful run: a sync that
    /// failed, or a run that failed, leaves the run owed to the next sync (kube-proxy
    /// forgets it; its next sync sees no endpoint change).
    owed: BTreeMap<IpFamily, Owed>,
    /// Families with a successful run: until then, a run reads every UDP flow.
    ran: BTreeSet<IpFamily>,
}

impl Reconciler {
    pub fn new(table: Box<dyn FlowTable>) -> Self {
        Reconciler { table, owed: BTreeMap::new(), ran: BTreeSet::new() }
    }

    /// Notes that these services' UDP endpoints changed in `family` (kube-proxy's
    /// `ConntrackCleanupRequired`): the next run reads their flows.
    pub fn owe(&mut self, family: IpFamily, services: impl IntoIterator<Item = NamespacedName>) {
        self.owed.entry(family).or_default().services.extend(services);
    }

    /// The next run of `family` reads every UDP flow (a process's first: whatever happened
    /// before it, or while it was down, is only in the kernel).
    pub fn owe_all(&mut self, family: IpFamily) {
        self.owed.entry(family).or_default().all = true;
    }

    pub fn is_owed(&self, family: IpFamily) -> bool {
        self.owed.contains_key(&family)
    }

    /// Runs an owed family against its committed maps. A dry run lists what it would
    /// delete and keeps the run owed.
    pub fn run(&mut self, family: IpFamily, services: &ServicePortMap, endpoints: &EndpointsMap, dry_run: bool) -> Reconciled {
        let started = Instant::now();
        let owed = self.owed.get(&family).cloned().unwrap_or_default();
        let all = owed.all || !self.ran.contains(&family);
        let dumps = if all { None } else { plan::destinations(services, &owed.services, MAX_TARGETED_DUMPS) };
        // A run of a few dumps needs the plan of the ports those addresses and ports reach alone.
        let targets = match &dumps {
            None => plan::Targets::new(services, endpoints),
            Some(list) => plan::Targets::new(&plan::reached_by(services, list), endpoints),
        };
        let scope = dumps.as_ref().map_or(Scope::All, |d| Scope::Changed(d.len()));
        let mut stale = Vec::new();
        let mut keep = |f: &Flow| {
            if targets.is_stale(f) {
                stale.push(*f);
            }
        };
        let listed = match (&dumps, targets.is_empty()) {
            (_, true) => Ok(0),
            (None, false) => self.table.flows(family, &DumpFilter::proto(IPPROTO_UDP), &mut keep),
            (Some(list), false) => list.iter().try_fold(0, |n, f| Ok(n + self.table.flows(family, f, &mut keep)?)),
        };
        // Listed by destination, then client (a dry run prints them); a flow reached by two
        // dumps (a NodePort equal to a ClusterIP's port) is read twice.
        stale.sort_unstable_by_key(|f| (f.orig.dst, f.orig.dport, f.orig.src, f.orig.sport, f.id));
        stale.dedup();
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
                    self.ran.insert(family);
                }
                tracing::debug!(family = family.api_name(), ?scope, listed, stale = stale.len(), seconds, "conntrack reconciled");
                Reconciled { family, seconds, scope, listed, stale, deleted, error: None }
            }
            Err(e) => {
                // What went wrong may have missed more than the changed services: all next time.
                self.owe_all(family);
                tracing::warn!(family = family.api_name(), error = %e, "stale UDP conntrack flows not cleared; the next sync tries again");
                Reconciled { family, seconds, scope, listed: 0, stale, deleted: None, error: Some(e.to_string()) }
            }
        }
    }
}

#[cfg(test)]
mod tests;

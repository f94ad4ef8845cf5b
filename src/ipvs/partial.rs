//! A partial IPVS-mode sync: between full syncs, the kernel is trusted to hold what was
//! applied ([`Memory`]), so a commit is planned for its changed services alone
//! ([`FamilyPlanner::update`]) and reconciled against that memory. Sent: IPVS operations for the
//! virtual servers whose wanted state moved, the set entries that appeared or went (one
//! `ipset restore -exist` input each way), kube-ipvs0 addresses, and iptables lines only
//! when the rules changed (compared with the previous rules, not `iptables-save`). Read:
//! nothing, except the real servers of a virtual server losing some or draining (one
//! `dests` query each: graceful termination needs their connection counts). No sysctls,
//! no timeouts, no link lookup: full syncs re-assert those.

use std::collections::BTreeSet;
use std::time::Instant;

use super::ipset;
use super::kernel_form::kernel_form;
use super::memory::Memory;
use super::netlink::Ipvs;
use super::plan::{Desired, FamilyState};
use super::reconcile::{self, Observed, Timing, Wanted};
use super::sync::{self, Kernel, Options, Report, SyncError, Timings};
use super::values::{ObservedRealServer, ObservedVirtualServer, ServiceKey};
use crate::net::IpFamily;
use crate::xtables::delta;
use crate::xtables::Table;
use crate::track::{Changes, Trackers};

/// Plans the commit `changes` (per family) into `memory`, reconciles, and applies it
/// (keeping `memory` the kernel's). On `Err` the memory is no longer the kernel's.
pub fn sync(memory: &mut Memory, trackers: &Trackers, changes: &[Changes], k: &mut Kernel, opts: &Options) -> Result<Report, SyncError> {
    let planned = Instant::now();
    let mut keys = BTreeSet::new();
    let mut ipsets = ipset::Delta::default();
    let mut rules: Vec<(IpFamily, Vec<Table>)> = Vec::new();
    for ((planner, t), ch) in memory.planners.iter_mut().zip(&trackers.families).zip(changes) {
        if ch.services.is_empty() {
            continue;
        }
        let (s, e) = t.view();
        let update = planner.update(s, e, &ch.services);
        let family = planner.ctx().family();
        keys.extend(update.services);
        ipsets.add.extend(update.add.iter().map(|(id, e)| (id.name(family), e.clone())));
        ipsets.del.extend(update.del.iter().map(|(id, e)| (id.name(family), e.clone())));
        if let Some(old) = update.iptables {
            rules.push((family, old));
        }
    }
    keys.extend(memory.terminating.keys().map(|(k, _, _)| *k));
    let plan = planned.elapsed();

    let read = Instant::now();
    let (wanted, observed) = views(memory, &keys, k.ipvs)?;
    let read = read.elapsed();

    let planned = Instant::now();
    let timing = Timing { now_secs: opts.now_secs, grace_period_secs: opts.grace_period_secs };
    let changes = reconcile::diff(&wanted, &observed, &memory.terminating, timing);
    let iptables = rules.iter().map(|(family, old)| (*family, rules_delta(memory, *family, old))).collect();
    let mut report = Report {
        ipsets,
        iptables,
        terminating: changes.terminating.len(),
        changes,
        timings: Timings { read, plan: plan + planned.elapsed(), ..Timings::default() },
        ..Report::default()
    };
    let applied = Instant::now();
    sync::apply(k, &mut report, memory.link_index)?;
    let grace_moved = report.changes.terminating != memory.terminating;
    memory.record(&report.changes);
    if grace_moved {
        sync::write_grace(opts, &memory.terminating)?;
    }
    report.timings.apply = applied.elapsed();
    Ok(report)
}

/// The wanted and held state of `keys` alone. A virtual server losing real servers (or
/// draining some) has its real servers read from the kernel, for their connections.
fn views(memory: &Memory, keys: &BTreeSet<ServiceKey>, ipvs: &mut dyn Ipvs) -> Result<(Wanted, Observed), SyncError> {
    let mut wanted = Wanted { scope: memory.scope.clone(), ..Wanted::default() };
    let mut observed = Observed::default();
    for key in keys {
        let desired = desired(memory, key);
        if memory.wants_bound(&key.addr) {
            wanted.bound.insert(key.addr);
        }
        if memory.bound.contains(&key.addr) {
            observed.bound.insert(key.addr);
        }
        if let Some(held) = memory.services.get(key) {
            let losing = desired.is_some_and(|d| {
                let keep: BTreeSet<_> = d.reals.iter().map(|r| (r.addr, r.port)).collect();
                held.reals.keys().any(|id| !keep.contains(id))
            });
            let dests = if losing {
                ipvs.dests(&held.vs)?
            } else {
                held.reals.values().map(|rs| ObservedRealServer::idle(*rs)).collect()
            };
            observed.services.push((ObservedVirtualServer { vs: held.vs.clone(), stats: None }, dests));
        }
        if let Some(d) = desired {
            wanted.services.insert(*key, d.clone());
        }
    }
    Ok((wanted, observed))
}

fn desired<'a>(memory: &'a Memory, key: &ServiceKey) -> Option<&'a Desired> {
    memory.planners.iter().filter(|p| p.ctx().family() == IpFamily::of(&key.addr)).find_map(|p| p.desired(key))
}

/// The iptables change from `old` rules (what the kernel holds) to the family's new ones:
/// only the chains that differ, no jumps (a full sync ensured them).
fn rules_delta(memory: &Memory, family: IpFamily, old: &[Table]) -> delta::Delta {
    let plan: Option<&FamilyState> = memory.planners.iter().map(|p| p.plan()).find(|p| p.family == family);
    let new = plan.map(|p| kernel_form(&p.iptables)).unwrap_or_default();
    delta::compute_with(&new, &kernel_form(old), family.is_v6(), &[], crate::xtables::names::is_service_chain, delta::Lines::Names)
}

#[cfg(test)]
mod tests;

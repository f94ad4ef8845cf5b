//! iptables mode across syncs (watch mode): the rendered rulesets, whether the kernel is
//! known to hold them, and the two ways of bringing it up to date.
//!
//! - A **full** sync (the first, a periodic one, any after a failure) compares the full
//!   render with what `iptables-save` reads back ([`super::sync`]): whatever the kernel
//!   held, it ends holding the render.
//! - A **partial** sync, while the kernel is known to hold the previous ruleset, sends
//!   only what the changed service ports need ([`super::partial`]): no kernel read, no
//!   full render, input proportional to the change.
//!
//! A full sync also ensures
//! the canaries ([`crate::xtables::canary`]), which the loop checks between syncs to learn, cheaply,
//! that the kernel lost rules and the next sync must be full.
//!
//! A one-shot `svcproxy sync` is this proxier's first (full) sync: [`Pass::DryRun`] computes
//! the same delta and sends nothing, and a proxier built [`Proxier::without_canaries`]
//! leaves no canary behind (no loop will check it).

use std::time::Instant;

use crate::driver::{Ask, Commit, Driver, FamilyRules, Failure};
pub use crate::driver::Full;
use crate::driver::Pass;
use crate::xtables::apply::{RestoreError, Restorer};
pub use crate::driver::Phase;
use crate::xtables::canary;
use super::partial::{self, Before};
use super::render::{self, Ruleset};
use super::sync::{self, SyncError, SyncReport, Timings};
use crate::config::Config;
use crate::track::{Changes, FamilyTracker, Trackers};

/// One family's synced rules.
pub type Synced = crate::driver::Synced<SyncReport>;
/// A sync in which at least one family failed; the others still synced (`done`).
pub type Failed = crate::driver::Failed<SyncError, SyncReport>;

/// What iptables mode's syncs write through: the tools, and the canaries' bookkeeping.
pub struct Kernel {
    restorer: Box<dyn Restorer + Send>,
    /// Whether full syncs ensure the canaries (watch mode; a one-shot sync has no loop to
    /// check them).
    canaries: bool,
    /// Lets a canary check skip a table the kernel says is unchanged (iptables-legacy).
    gate: canary::Gate,
}

pub struct Proxier {
    pub rulesets: Vec<Ruleset>,
    driver: Driver,
    kernel: Kernel,
}

impl Proxier {
    pub fn new(config: &Config, trackers: &Trackers, restorer: Box<dyn Restorer + Send>) -> Self {
        let rulesets = render::render_families(config, trackers);
        let driver = Driver::new(rulesets.len());
        Proxier { rulesets, driver, kernel: Kernel { restorer, canaries: true, gate: canary::Gate::default() } }
    }

    /// The same proxier, leaving the canaries alone (a one-shot sync).
    pub fn without_canaries(mut self) -> Self {
        self.kernel.canaries = false;
        self
    }

    /// Renders everything again (the configuration changed, e.g. this node's zone); the
    /// next sync compares with the kernel.
    pub fn rerender(&mut self, config: &Config, trackers: &Trackers) {
        self.rulesets = render::render_families(config, trackers);
        self.driver.forget();
    }

    /// Brings the rulesets up to date with a commit (`changes`, per family) and the kernel
    /// up to date with them: with a partial sync unless `full` or the kernel's state is unknown.
    pub fn sync(&mut self, trackers: &Trackers, changes: &[Changes], full: bool) -> Result<Vec<SyncReport>, SyncError> {
        match self.sync_as(trackers, changes, full, Pass::Apply) {
            Ok(synced) => Ok(synced.into_iter().map(|s| s.report).collect()),
            Err(failed) => Err(failed.first.error),
        }
    }

    /// [`Proxier::sync`], each report with its family; a [`Pass::DryRun`] compares every
    /// family with the kernel and sends nothing. A failing family does not stop the others.
    pub fn sync_as(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass) -> Result<Vec<Synced>, Failed> {
        self.sync_some(trackers, changes, Full::from(full), pass, &vec![true; self.rulesets.len()])
    }

    /// [`Proxier::sync_as`] for the `wanted` families (and any the kernel is not known to
    /// hold), through the [`Driver`].
    pub fn sync_some(&mut self, trackers: &Trackers, changes: &[Changes], full: Full, pass: Pass, wanted: &[bool]) -> Result<Vec<Synced>, Failed> {
        self.driver.sync(&mut self.rulesets, &mut self.kernel, Commit { trackers: &trackers.families, changes }, Ask { full, pass, wanted })
    }

    /// The first canary found gone, as (family, table); `None` when every family's are
    /// there. Checks only families the kernel is known to hold (the others get a full
    /// sync anyway).
    pub fn canary_lost(&mut self) -> Result<Option<(crate::net::IpFamily, &'static str)>, RestoreError> {
        for (i, rs) in self.rulesets.iter().enumerate() {
            if !self.driver.in_sync(i) {
                continue;
            }
            if let Some(table) = self.kernel.gate.missing(self.kernel.restorer.as_mut(), rs.ctx.node.family)? {
                return Ok(Some((rs.ctx.node.family, table)));
            }
        }
        Ok(None)
    }

    /// Per family, (filter, nat) rules of the rendered ruleset, services' and fixed ones, as
    /// kube-proxy counts them for the rules metrics (every `-A` line of a full restore input).
    pub fn rule_counts(&self) -> Vec<(crate::net::IpFamily, (usize, usize))> {
        self.rulesets
            .iter()
            .map(|rs| {
                let fixed = render::fixed::rule_counts(&rs.ctx);
                (rs.ctx.node.family, (rs.rule_total.0 + fixed.0, rs.rule_total.1 + fixed.1))
            })
            .collect()
    }
}

impl FamilyRules for Ruleset {
    type Kernel = Kernel;
    type Before = Before;
    type Report = SyncReport;
    type Error = SyncError;

    fn family(&self) -> crate::net::IpFamily {
        self.ctx.node.family
    }

    fn update(&mut self, tracker: &FamilyTracker, changes: &Changes) -> Before {
        let before = Before::take(self, &changes.services);
        let (s, e) = tracker.view();
        Ruleset::update(self, s, e, &changes.services);
        before
    }

    // kube-proxy v1.37 (#138571): a family in large-cluster mode skips the full sync that is
    // due only to the full-sync period (the canaries still catch a flush).
    fn skips_periodic_full(&self) -> bool {
        self.large_cluster
    }

    fn partial(&mut self, kernel: &mut Kernel, before: Before, _: &Changes) -> Option<Result<SyncReport, Failure<SyncError>>> {
        let partial = partial::delta(&before, self)?;
        let family = self.ctx.node.family;
        let synced = send(kernel.restorer.as_mut(), family, partial);
        Some(kernel.after_write(family, synced))
    }

    // The full comparison, then the canaries.
    fn full(&mut self, kernel: &mut Kernel, pass: Pass) -> Result<SyncReport, Failure<SyncError>> {
        let family = self.ctx.node.family;
        let synced = sync::sync(kernel.restorer.as_mut(), self, pass == Pass::DryRun);
        let report = kernel.after_write(family, synced)?;
        if pass == Pass::Apply && kernel.canaries {
            let created = kernel.gate.ensure(kernel.restorer.as_mut(), family).map_err(|e| Failure::new(SyncError::Canary(e), Phase::Other))?;
            if !created.is_empty() {
                tracing::debug!(?family, tables = ?created, "canaries created");
            }
        }
        Ok(report)
    }
}

impl Kernel {
    /// A family's sync done: when it wrote (a restore was sent, refused or not), the tables'
    /// summaries changed, so the next canary check reads them all.
    fn after_write(&mut self, family: crate::net::IpFamily, synced: Result<SyncReport, SyncError>) -> Result<SyncReport, Failure<SyncError>> {
        let wrote = match &synced {
            Ok(report) => report.applied,
            Err(e) => e.phase() == Phase::Restore,
        };
        if wrote {
            self.gate.forget(family);
        }
        synced.map_err(|e| {
            let phase = e.phase();
            Failure::new(e, phase)
        })
    }
}

/// A partial sync's delta, sent (nothing when it is empty).
fn send(r: &mut dyn Restorer, family: crate::net::IpFamily, partial: partial::Partial) -> Result<SyncReport, SyncError> {
    let applied = !partial.delta.is_empty();
    let mut timings = Timings::default();
    if applied {
        let t = Instant::now();
        sync::send(r, family, &partial.delta, sync::NFT_PARTIAL_CHUNK_SERVICES).map_err(SyncError::Restore)?;
        timings.restore = t.elapsed();
    }
    Ok(SyncReport { delta: partial.delta, applied, full_lines: 0, timings })
}

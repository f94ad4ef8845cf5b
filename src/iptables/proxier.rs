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
//! the canaries ([`crate::netfilter::canary`]), which the loop checks between syncs to learn, cheaply,
//! that the kernel lost rules and the next sync must be full.
//!
//! A one-shot `svcproxy sync` is this proxier's first (full) sync: [`Pass::DryRun`] computes
//! the same delta and sends nothing, and a proxier built [`Proxier::without_canaries`]
//! leaves no canary behind (no loop will check it).

use std::time::Instant;

use crate::netfilter::apply::{Pass, RestoreError, Restorer};
pub use crate::netfilter::phase::Phase;
use crate::netfilter::phase::Watched;
use crate::netfilter::canary;
use super::partial::{self, Before};
use super::render::{self, Ruleset};
use super::sync::{self, SyncError, SyncReport, Timings};
use crate::config::Config;
use crate::track::{Changes, Trackers};

/// One family's failed sync.
#[derive(Debug)]
pub struct FamilyFailure {
    pub family: crate::net::IpFamily,
    pub error: SyncError,
    /// Which step failed: kube-proxy counts only [`Phase::Restore`] as a restore failure.
    pub phase: Phase,
    /// How long the family's sync ran before it failed.
    pub took: std::time::Duration,
}

/// A sync in which at least one family failed. The families are independent, as kube-proxy's
/// per-family proxiers are: the others still synced, and `done` holds their reports.
#[derive(Debug)]
pub struct Failed {
    /// The first family that failed.
    pub first: Box<FamilyFailure>,
    /// Any later family that failed too.
    pub more: Vec<FamilyFailure>,
    pub done: Vec<(crate::net::IpFamily, SyncReport)>,
}

impl Failed {
    /// Every family that failed, in order.
    pub fn failures(&self) -> impl Iterator<Item = &FamilyFailure> {
        std::iter::once(self.first.as_ref()).chain(&self.more)
    }
}

// Shown as the error itself (as `#[error(transparent)]` would), so a message reads the same
// whether or not the family is attached; a second failing family's error follows.
impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.first.error.fmt(f)?;
        for other in &self.more {
            write!(f, "; {} too: {}", other.family, other.error)?;
        }
        Ok(())
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.first.error)
    }
}

/// Whether a sync is full: no, yes, or only because the full-sync period passed (which a
/// family in large-cluster mode skips).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    No,
    Yes,
    Periodic,
}

impl From<bool> for Full {
    fn from(full: bool) -> Full {
        if full { Full::Yes } else { Full::No }
    }
}

pub struct Proxier {
    pub rulesets: Vec<Ruleset>,
    /// Per family: the kernel holds `rulesets[i]` (set by a successful sync).
    in_sync: Vec<bool>,
    /// Whether full syncs ensure the canaries (watch mode; a one-shot sync has no loop to
    /// check them).
    canaries: bool,
    /// Lets a canary check skip a table the kernel says is unchanged (iptables-legacy).
    gate: canary::Gate,
    restorer: Box<dyn Restorer + Send>,
}

impl Proxier {
    pub fn new(config: &Config, trackers: &Trackers, restorer: Box<dyn Restorer + Send>) -> Self {
        let rulesets = render::render_families(config, trackers);
        let in_sync = vec![false; rulesets.len()];
        Proxier { rulesets, in_sync, canaries: true, gate: canary::Gate::default(), restorer }
    }

    /// The same proxier, leaving the canaries alone (a one-shot sync).
    pub fn without_canaries(self) -> Self {
        Proxier { canaries: false, ..self }
    }

    /// Renders everything again (the configuration changed, e.g. this node's zone); the
    /// next sync compares with the kernel.
    pub fn rerender(&mut self, config: &Config, trackers: &Trackers) {
        self.rulesets = render::render_families(config, trackers);
        self.in_sync.iter_mut().for_each(|s| *s = false);
    }

    /// Brings the rulesets up to date with a commit (`changes`, per family) and the kernel
    /// up to date with them: with a partial sync unless `full` or the kernel's state is unknown.
    pub fn sync(&mut self, trackers: &Trackers, changes: &[Changes], full: bool) -> Result<Vec<SyncReport>, SyncError> {
        match self.sync_as(trackers, changes, full, Pass::Apply) {
            Ok(reports) => Ok(reports.into_iter().map(|(_, r)| r).collect()),
            Err(failed) => Err(failed.first.error),
        }
    }

    /// [`Proxier::sync`], each report with its family; a [`Pass::DryRun`] compares every
    /// family with the kernel and sends nothing. A failing family does not stop the others.
    pub fn sync_as(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass) -> Result<Vec<(crate::net::IpFamily, SyncReport)>, Failed> {
        self.sync_some(trackers, changes, Full::from(full), pass, &vec![true; self.rulesets.len()])
    }

    /// [`Proxier::sync_as`] for the `wanted` families (and any the kernel is not known to
    /// hold): kube-proxy's per-family proxiers each sync for their own reasons, so a family
    /// with nothing to do is left alone. Each family syncs on its own: one failing does not
    /// stop the others.
    pub fn sync_some(
        &mut self,
        trackers: &Trackers,
        changes: &[Changes],
        full: Full,
        pass: Pass,
        wanted: &[bool],
    ) -> Result<Vec<(crate::net::IpFamily, SyncReport)>, Failed> {
        let mut befores = Vec::with_capacity(self.rulesets.len());
        let mut updating = Vec::with_capacity(self.rulesets.len());
        for ((rs, t), ch) in self.rulesets.iter_mut().zip(&trackers.families).zip(changes) {
            let started = Instant::now();
            befores.push(Before::take(rs, &ch.services));
            let (s, e) = t.view();
            rs.update(s, e, &ch.services);
            updating.push(started.elapsed());
        }
        let go: Vec<bool> = self.in_sync.iter().enumerate().map(|(i, s)| !s || pass == Pass::DryRun || wanted.get(i).copied().unwrap_or(true)).collect();
        // kube-proxy v1.37 (#138571): a family in large-cluster mode skips the full sync
        // that is due only to the full-sync period (the canaries still catch a flush).
        let full_in = |rs: &Ruleset| match full {
            Full::No => false,
            Full::Yes => true,
            Full::Periodic => !rs.large_cluster,
        };
        let trusted: Vec<bool> = self.in_sync.iter().zip(&self.rulesets).map(|(s, rs)| !full_in(rs) && pass == Pass::Apply && *s).collect();
        let mut reports = Vec::with_capacity(self.rulesets.len());
        let mut failures = Vec::new();
        for (i, before) in befores.iter().enumerate().filter(|(i, _)| go[*i]) {
            // The ruleset has moved on: until its sync succeeds, the kernel is not known to hold it.
            self.in_sync[i] = false;
            let family = self.rulesets[i].ctx.node.family;
            let started = Instant::now();
            let mut report = match self.sync_family(i, before, trusted[i], pass) {
                Ok(report) => report,
                Err((error, phase)) => {
                    failures.push(FamilyFailure { family, error, phase, took: updating[i] + started.elapsed() });
                    continue;
                }
            };
            if pass == Pass::Apply {
                self.in_sync[i] = true;
            }
            report.timings.total = updating[i] + started.elapsed();
            reports.push((family, report));
        }
        let mut failures = failures.into_iter();
        match failures.next() {
            None => Ok(reports),
            Some(first) => Err(Failed { first: Box::new(first), more: failures.collect(), done: reports }),
        }
    }

    /// One family: the partial sync's delta when the kernel is trusted, else the full comparison
    /// (and the canaries). A failure says which step failed.
    fn sync_family(&mut self, i: usize, before: &Before, trusted: bool, pass: Pass) -> Result<SyncReport, (SyncError, Phase)> {
        let family = self.rulesets[i].ctx.node.family;
        let mut kernel = Watched::new(self.restorer.as_mut());
        let partial = trusted.then(|| partial::delta(before, &self.rulesets[i])).flatten();
        let full = partial.is_none();
        let synced = match partial {
            Some(partial) => send(&mut kernel, family, partial),
            None => sync::sync(&mut kernel, &self.rulesets[i], pass == Pass::DryRun),
        };
        // A parse error is the read's; a kernel call's error, the step that failed.
        let phase = kernel.failed().map_or(Phase::Read, |(phase, _)| phase);
        if kernel.wrote() {
            // Our own write changed the tables' summaries: the next canary check reads all.
            self.gate.forget(family);
        }
        let report = synced.map_err(|e| (e, phase))?;
        if full && pass == Pass::Apply && self.canaries {
            let created = self.gate.ensure(self.restorer.as_mut(), family).map_err(|e| (e.into(), Phase::Other))?;
            if !created.is_empty() {
                tracing::debug!(?family, tables = ?created, "canaries created");
            }
        }
        Ok(report)
    }

    /// The first canary found gone, as (family, table); `None` when every family's are
    /// there. Checks only families the kernel is known to hold (the others get a full
    /// sync anyway).
    pub fn canary_lost(&mut self) -> Result<Option<(crate::net::IpFamily, &'static str)>, RestoreError> {
        for (rs, in_sync) in self.rulesets.iter().zip(&self.in_sync) {
            if !in_sync {
                continue;
            }
            if let Some(table) = self.gate.missing(self.restorer.as_mut(), rs.ctx.node.family)? {
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

/// A partial sync's delta, sent (nothing when it is empty).
fn send(r: &mut dyn Restorer, family: crate::net::IpFamily, partial: partial::Partial) -> Result<SyncReport, SyncError> {
    let applied = !partial.delta.is_empty();
    let mut timings = Timings::default();
    if applied {
        let t = Instant::now();
        sync::send(r, family, &partial.delta, sync::NFT_PARTIAL_CHUNK_SERVICES)?;
        timings.restore = t.elapsed();
    }
    Ok(SyncReport { delta: partial.delta, applied, full_lines: 0, timings })
}

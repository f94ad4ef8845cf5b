//! nftables mode across syncs: the rulesets (one per family: what each service port is
//! rendered from, [`Ruleset`]), whether the kernel is known to hold them, and the kernel
//! reached through [`Nft`].
//!
//! - A **full** sync (the first, a periodic one, any after a failure or a re-render) is
//!   kube-proxy's full sync ([`super::sync::full`]): one switching transaction per family,
//!   which over a live table the client can read sends only what differs.
//! - A **partial** sync, while the kernel is known to hold the previous ruleset, sends one
//!   transaction per family built from the changed services alone ([`super::partial`]):
//!   their elements that changed and their chains, and the deletion of those that went;
//!   nothing is read from the kernel.
//!
//! On the node every transaction goes as one nf_tables netlink batch
//! ([`super::netlink::NetlinkNft`]; `nft -f` when it holds what the encoder does not know,
//! or with `--nft-netlink=false`).
//!
//! A one-shot `svcproxy sync` is
//! this proxier's first sync; [`Pass::DryRun`] compares every family with the kernel and
//! sends nothing.

use std::time::Instant;

use super::apply::{Nft, NftError, NftWrite, Part};
use super::model::{NftFamily, Objects, Script};
use super::render::{hairpin_objects, Hairpin, Ruleset};
use super::sync::{self, Report};
use crate::config::Config;
use crate::model::ServicePortName;
use crate::driver::{Ask, Commit, Driver, FamilyRules, Failure, Full};
use crate::driver::Pass;
pub use crate::driver::Phase;
use super::sync::SyncError;
use crate::track::{Changes, FamilyTracker, Trackers};

/// One family's failed sync, named by its family.
#[derive(Debug, thiserror::Error)]
#[error("{family} nftables sync failed")]
pub struct FamilyError {
    pub family: crate::net::IpFamily,
    #[source]
    pub error: NftError,
}

/// One family's synced table.
pub type Synced = crate::driver::Synced<Report>;
/// A sync in which at least one family failed; the others still synced (`done`).
pub type Failed = crate::driver::Failed<FamilyError, Report>;

/// One family's table as the syncs keep it.
pub struct FamilyTable {
    pub ruleset: Ruleset,
    /// The `cluster-ips-check` chain changed (the ServiceCIDRs) since the kernel last got
    /// it; a partial sync rewrites it.
    check_changed: bool,
    /// After a cold start through the interim table ([`super::cold`]): the chains still to
    /// convert to kube-proxy's rules, a batch at a time ([`Proxier::convert_step`]), each
    /// with the service port that renders it (`None`: the fixed objects), so that a batch
    /// renders its own ports alone, as the ruleset holds them then.
    converting: Vec<(String, Option<ServicePortName>)>,
    /// The pacing of the conversion's batches in a watch ([`super::cold::Pace`]).
    pace: super::cold::Pace,
    /// A partial sync's transaction carrying a batch was refused: the next batch goes
    /// alone ([`Proxier::convert_step`], which ends the conversion if it fails too), so a
    /// batch the kernel refuses is not sent again with every sync.
    carry_blocked: bool,
}

impl FamilyTable {
    fn new(ruleset: Ruleset) -> Self {
        FamilyTable { ruleset, check_changed: false, converting: Vec::new(), pace: super::cold::Pace::default(), carry_blocked: false }
    }

    fn end_conversion(&mut self) {
        self.converting = Vec::new();
        self.pace = super::cold::Pace::default();
        self.carry_blocked = false;
    }
}

pub struct Proxier {
    pub families: Vec<FamilyTable>,
    driver: Driver,
    nft: Box<dyn Nft>,
}

/// The changed services' objects before a commit, and the `hairpin-connections` elements
/// the commit brought.
pub struct Before {
    objects: Vec<Objects>,
    came: Vec<Hairpin>,
}

impl Proxier {
    pub fn new(config: &Config, trackers: &Trackers, nft: Box<dyn Nft>) -> Self {
        let families: Vec<FamilyTable> = super::render_all(config, trackers).into_iter().map(FamilyTable::new).collect();
        Proxier { driver: Driver::new(families.len()), families, nft }
    }

    /// The rendered tables, one per family.
    pub fn rulesets(&self) -> impl Iterator<Item = &Ruleset> {
        self.families.iter().map(|f| &f.ruleset)
    }

    /// The cluster's ServiceCIDRs changed (`config.service_cidrs`): each family whose
    /// `cluster-ips-check` drop rule changes gets its fixed objects rendered again, and
    /// its next sync, partial or full, writes the chain. Returns those families.
    pub fn set_service_cidrs(&mut self, config: &Config) -> Vec<crate::net::IpFamily> {
        let mut changed = Vec::new();
        for f in &mut self.families {
            let rs = &mut f.ruleset;
            let cidrs = crate::nftables::context::service_cidrs_of(config, rs.ctx.family);
            if cidrs != rs.ctx.service_cidrs {
                rs.ctx.service_cidrs = cidrs;
                rs.fixed = super::render::fixed::write(&rs.ctx);
                f.check_changed = true;
                changed.push(rs.ctx.family);
            }
        }
        changed
    }

    /// Whether a cold start's interim table still has chains to convert.
    pub fn converting(&self) -> bool {
        self.families.iter().any(|f| !f.converting.is_empty())
    }

    /// Whether a family's conversion waits for a standalone step: a partial sync's
    /// transaction refused its batch, so the syncs carry none until a step goes alone.
    pub fn conversion_blocked(&self) -> bool {
        self.families.iter().any(|f| f.carry_blocked)
    }

    /// The chains a cold start's conversion has still to convert, per family.
    pub fn conversion_left(&self) -> impl Iterator<Item = (crate::net::IpFamily, usize)> + '_ {
        self.families.iter().map(|f| (f.ruleset.ctx.family, f.converting.len()))
    }

    /// Converts the next batch of a family's interim chains to kube-proxy's rules (as the
    /// ruleset has them now: one whose service went is skipped; a chain a partial sync
    /// wrote since left the list then). A failed batch leaves the interim chains
    /// serving and ends the conversion: the next sync is full, and the full sync over the
    /// live table refills what differs. Returns the chains converted.
    /// `paced`: the batch is bounded by what earlier batches cost beyond a transaction's
    /// fixed cost ([`super::cold::Pace`]), else by the fixed [`super::cold::CONVERSION_LINES`].
    /// A watch's partial syncs carry batches too ([`FamilyRules::partial`]).
    pub fn convert_step(&mut self, paced: bool) -> Result<usize, FamilyError> {
        let Some(f) = self.families.iter_mut().find(|f| !f.converting.is_empty()) else { return Ok(0) };
        let (bound, probe) = if paced { f.pace.next(false) } else { (super::cold::CONVERSION_LINES, false) };
        let started = Instant::now();
        let family = f.ruleset.ctx.family;
        let rs = &f.ruleset;
        let (batch, taken) = super::cold::next_batch(&f.converting, bound, |(c, owner)| Some((c.as_str(), rs.chain_rules(c, owner.as_ref())?)));
        // Encoded from the rules' values, as a sync's transactions are.
        let ran = if batch.is_empty() {
            Ok(())
        } else {
            self.nft.run_script(&super::cold::script(family, super::names::TABLE, &batch), Part::Next).map(drop)
        };
        drop(batch);
        if paced {
            f.pace.record(probe, started.elapsed());
        }
        f.converting.drain(..taken);
        if let Err(error) = ran {
            f.end_conversion();
            self.driver.forget();
            return Err(FamilyError { family, error });
        }
        f.carry_blocked = false;
        if f.converting.is_empty() {
            f.end_conversion();
            // The anonymous sets the conversion created, recorded for the next read.
            self.nft.full_sync_done(family);
        }
        Ok(taken)
    }

    /// Starts a conversion of `chains` of the first family, as a cold start through the
    /// interim table would (a test of the conversion against a table of any size).
    #[cfg(test)]
    pub(crate) fn convert_chains(&mut self, chains: Vec<String>) {
        let f = &mut self.families[0];
        f.converting = f.ruleset.chain_owners(&chains);
    }

    /// Renders everything again (the configuration changed, e.g. this node's zone); the
    /// next sync is full.
    pub fn rerender(&mut self, config: &Config, trackers: &Trackers) {
        self.families = super::render_all(config, trackers).into_iter().map(FamilyTable::new).collect();
        self.driver.forget();
    }

    /// Brings the rulesets up to date with a commit (`changes`, per family) and the kernel
    /// up to date with them: from the changed services alone unless `full` or the kernel's
    /// state is unknown (a [`Pass::DryRun`] compares everything and sends nothing). A
    /// failure keeps the other families' reports.
    pub fn sync_as(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass) -> Result<Vec<Synced>, Failed> {
        self.sync_some(trackers, changes, full, pass, &vec![true; self.families.len()])
    }

    /// [`Proxier::sync_as`] for the `wanted` families and any the kernel is not known to
    /// hold, through the [`Driver`].
    pub fn sync_some(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass, wanted: &[bool]) -> Result<Vec<Synced>, Failed> {
        self.driver.sync(&mut self.families, self.nft.as_mut(), Commit { trackers: &trackers.families, changes }, Ask { full: Full::from(full), pass, wanted })
    }
}

impl FamilyRules for FamilyTable {
    type Kernel = dyn Nft;
    type Before = Before;
    type Report = Report;
    type Error = FamilyError;

    fn family(&self) -> crate::net::IpFamily {
        self.ruleset.ctx.family
    }

    fn update(&mut self, tracker: &FamilyTracker, changes: &Changes) -> Before {
        let rs = &mut self.ruleset;
        let mut objects: Vec<Objects> = changes.services.iter().flat_map(|id| rs.objects_of(id)).collect();
        let (s, e) = tracker.view();
        let hairpins = rs.update(s, e, &changes.services);
        objects.push(hairpin_objects(&hairpins.gone));
        Before { objects, came: hairpins.came }
    }

    // The changed ports' objects after the commit are rendered from the ruleset (it keeps none).
    fn partial(&mut self, nft: &mut Self::Kernel, before: Before, changes: &Changes) -> Option<Result<Report, Failure<FamilyError>>> {
        let mut after = changed_objects(&self.ruleset, changes, &before.came);
        if self.check_changed {
            after.push(check_chain(&self.ruleset.fixed));
        }
        let before: Vec<&Objects> = before.objects.iter().collect();
        let family = self.ruleset.ctx.family;
        // The chains of the changed services' ports: the partial writes them in their final form.
        let written = |owner: &Option<ServicePortName>| owner.as_ref().is_some_and(|p| changes.services.contains(&p.service));
        let carry = (!self.converting.is_empty() && !self.carry_blocked).then(|| self.pace.next(true));
        let rs = &self.ruleset;
        let (batch, taken) = match carry {
            Some((bound, _)) if bound > 0 => super::cold::next_batch(&self.converting, bound, |(c, owner)| if written(owner) { None } else { Some((c.as_str(), rs.chain_rules(c, owner.as_ref())?)) }),
            _ => (Vec::new(), 0),
        };
        let conversion = (!batch.is_empty()).then(|| super::cold::script(family, super::names::TABLE, &batch));
        let sent = send_partial(nft, family, &before, &after.iter().collect::<Vec<_>>(), conversion.as_ref().map(|s| (s, batch.len())));
        drop(conversion);
        drop(batch);
        let (report, carried) = match sent {
            Ok(r) => r,
            Err(e) => return Some(Err(self.failure(e))),
        };
        if report.applied && !self.converting.is_empty() {
            match carried {
                // Refused with the batch, applied without it: the list is kept, and the
                // next batch goes alone.
                Carried::Refused => self.carry_blocked = true,
                Carried::Yes => {
                    if let Some((_, probe)) = carry {
                        self.pace.record(probe, report.timings.apply);
                    }
                    self.converting.drain(..taken);
                }
                // The probe that carries none is timed; a batch left out for the partial's
                // deletions is not taken.
                Carried::No => {
                    if let Some((_, true)) = carry {
                        self.pace.record(true, report.timings.apply);
                    }
                }
            }
            self.converting.retain(|(_, owner)| !written(owner));
            if self.converting.is_empty() {
                self.end_conversion();
                // Ends a standalone step's recording of the sets it created, if one is open
                // (a carried batch goes `Part::Alone` and records none: the next read dumps them).
                nft.full_sync_done(family);
            }
        }
        Some(Ok(report))
    }

    fn full(&mut self, nft: &mut Self::Kernel, pass: Pass) -> Result<Report, Failure<FamilyError>> {
        let report = sync::full(nft, &self.ruleset.table(), pass == Pass::DryRun).map_err(|e| self.failure(e))?;
        // A full sync over a table leaves it equal to the ruleset: nothing left to convert,
        // unless it was a cold start through the interim table.
        if report.applied {
            self.end_conversion();
            if let Some(i) = &report.interim {
                self.converting = self.ruleset.chain_owners(&i.chains);
            }
        }
        Ok(report)
    }

    fn synced(&mut self) {
        self.check_changed = false;
    }
}

impl FamilyTable {
    fn failure(&self, e: SyncError) -> Failure<FamilyError> {
        Failure::new(FamilyError { family: self.ruleset.ctx.family, error: e.error }, e.phase)
    }
}

/// The `cluster-ips-check` chain and its rules, from the fixed objects (not the
/// `cluster-ips` set its first rule looks in: a partial sync would flush it).
fn check_chain(fixed: &Objects) -> Objects {
    let name = super::names::CLUSTER_IPS_CHECK;
    Objects {
        chains: fixed.chains.iter().filter(|c| c.name == name).cloned().collect(),
        rules: fixed.rules.iter().filter(|r| r.chain == name).cloned().collect(),
        ..Objects::default()
    }
}

/// The objects of the changed services' ports, as the ruleset holds them now, and the
/// `hairpin-connections` elements that came with them.
fn changed_objects(rs: &Ruleset, changes: &Changes, came: &[Hairpin]) -> Vec<Objects> {
    let mut out: Vec<Objects> = changes.services.iter().flat_map(|id| rs.objects_of(id)).collect();
    out.push(hairpin_objects(came));
    out
}

/// One family's partial sync: one transaction that also deletes the chains and sets that
/// went, through [`NftWrite::run_script`] (on the node: one netlink batch, or, when not
/// encodable, one `nft` run, which lists the whole table for its cache first: one run,
/// not two). A kernel that will not
/// delete a chain in the transaction that drops its last reference (6.18 does; kube-proxy
/// deletes stale chains in a later sync) refuses that transaction: then the change goes
/// alone and the deletion right after it.
///
/// `conversion`: a batch of a cold start's conversion and its chains, sent in the same
/// transaction (one commit, one validation of the table for both) unless the partial
/// deletes chains (a kernel that refuses those deletions would blame the batch); refused,
/// the partial goes as it would without it, and [`Report::converted`] stays 0.
fn send_partial(nft: &mut dyn NftWrite, family: crate::net::IpFamily, before: &[&Objects], after: &[&Objects], conversion: Option<(&Script<'_>, usize)>) -> Result<(Report, Carried), SyncError> {
    let t = Instant::now();
    let p = super::partial::partial(family, super::names::TABLE, before, after);
    let mut report = Report::new(family);
    report.timings.render = t.elapsed();
    if p.text.is_empty() {
        return Ok((report, Carried::No));
    }
    let t = Instant::now();
    report.lines = p.text.lines().count();
    report.stale = p.stale;
    let mut carried = Carried::No;
    if let Some((batch, chains)) = conversion.filter(|_| p.delete.is_empty()) {
        let mut all = p.text.clone();
        all.append(batch);
        match nft.run_script(&all, Part::Alone) {
            Ok(via) => {
                report.lines = all.lines().count();
                report.via = Some(via);
                report.converted = chains;
                report.applied = true;
                report.timings.apply = t.elapsed();
                return Ok((report, Carried::Yes));
            }
            Err(e @ (NftError::Rejected { .. } | NftError::Refused { .. })) => {
                tracing::warn!(family = family.nft_word(), error = %e, "a partial sync's transaction carrying a conversion batch was refused; the partial goes alone, the next batch alone");
                carried = Carried::Refused;
            }
            Err(e) => return Err(SyncError::write(e)),
        }
    }
    let together = (!p.delete.is_empty()).then(|| {
        let mut both = p.text.clone();
        both.push_str(&p.delete);
        both
    });
    match together.map(|script| nft.run_script(&script, Part::Alone)) {
        Some(Ok(via)) => {
            report.lines += p.delete.lines().count();
            report.via = Some(via);
        }
        None | Some(Err(NftError::Rejected { .. } | NftError::Refused { .. })) => {
            report.via = Some(nft.run_script(&p.text, Part::Alone).map_err(SyncError::write)?);
            if !p.delete.is_empty() {
                if let Err(e) = nft.run(&p.delete, Part::Alone) {
                    tracing::warn!(family = family.nft_word(), error = %e, "stale nftables chains not deleted; the next full sync deletes them");
                    report.stale_error = Some(e.to_string());
                }
            }
        }
        Some(Err(e)) => return Err(SyncError::write(e)),
    }
    report.applied = true;
    report.timings.apply = t.elapsed();
    Ok((report, carried))
}

/// Whether a partial sync's transaction carried the conversion batch it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    /// None given, or left out for the partial's deletions.
    No,
    Yes,
    Refused,
}

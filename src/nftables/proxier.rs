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

use super::apply::{Nft, NftError};
use super::model::Objects;
use super::render::{hairpin_objects, Hairpin, Ruleset};
use super::sync::{self, Report};
use crate::config::Config;
use crate::netfilter::apply::Pass;
pub use crate::netfilter::phase::Phase;
use super::watched::WatchedNft;
use crate::track::{Changes, Trackers};

/// A family's sync failed; `done` holds the reports of the families that synced (the
/// families are independent, as kube-proxy's per-family proxiers are), `more` any later
/// family that failed too.
#[derive(Debug, thiserror::Error)]
#[error("{family} nftables sync failed")]
pub struct Failed {
    pub family: crate::net::IpFamily,
    #[source]
    pub error: NftError,
    /// Which step failed: kube-proxy counts only a failed transaction ([`Phase::Restore`]).
    pub phase: Phase,
    pub done: Vec<Report>,
    pub more: Vec<(crate::net::IpFamily, NftError, Phase)>,
}

pub struct Proxier {
    pub rulesets: Vec<Ruleset>,
    /// Per family: the kernel holds `rulesets[i]` (set by a successful sync).
    in_sync: Vec<bool>,
    /// Per family: the `cluster-ips-check` chain changed (the ServiceCIDRs) since the
    /// kernel last got it; a partial sync rewrites it.
    check_changed: Vec<bool>,
    nft: Box<dyn Nft>,
}

/// The changed services' objects before a commit, per family.
type Before = Vec<Objects>;

impl Proxier {
    pub fn new(config: &Config, trackers: &Trackers, nft: Box<dyn Nft>) -> Self {
        let rulesets = super::render_all(config, trackers);
        let in_sync = vec![false; rulesets.len()];
        let check_changed = vec![false; rulesets.len()];
        Proxier { rulesets, in_sync, check_changed, nft }
    }

    /// The cluster's ServiceCIDRs changed (`config.service_cidrs`): each family whose
    /// `cluster-ips-check` drop rule changes gets its fixed objects rendered again, and
    /// its next sync, partial or full, writes the chain. Returns those families.
    pub fn set_service_cidrs(&mut self, config: &Config) -> Vec<crate::net::IpFamily> {
        let mut changed = Vec::new();
        for (i, rs) in self.rulesets.iter_mut().enumerate() {
            let cidrs: Vec<String> = config.service_cidrs.iter().filter(|c| c.family() == rs.ctx.ip_family).map(ToString::to_string).collect();
            if cidrs != rs.ctx.service_cidrs {
                rs.ctx.service_cidrs = cidrs;
                rs.fixed = super::render::fixed::write(&rs.ctx);
                self.check_changed[i] = true;
                changed.push(rs.ctx.ip_family);
            }
        }
        changed
    }

    /// Renders everything again (the configuration changed, e.g. this node's zone); the
    /// next sync is full.
    pub fn rerender(&mut self, config: &Config, trackers: &Trackers) {
        self.rulesets = super::render_all(config, trackers);
        self.in_sync.iter_mut().for_each(|s| *s = false);
        self.check_changed.iter_mut().for_each(|s| *s = false);
    }

    /// Brings the rulesets up to date with a commit (`changes`, per family) and the kernel
    /// up to date with them: from the changed services alone unless `full` or the kernel's
    /// state is unknown (a [`Pass::DryRun`] compares everything and sends nothing). A
    /// failure keeps the earlier families' reports.
    pub fn sync_as(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass) -> Result<Vec<Report>, Failed> {
        self.sync_some(trackers, changes, full, pass, &vec![true; self.rulesets.len()])
    }

    /// Whether the kernel is known to hold family `i`'s ruleset (its next sync can be partial).
    pub fn in_sync(&self, i: usize) -> bool {
        self.in_sync.get(i).copied().unwrap_or(false)
    }

    /// [`Proxier::sync_as`] for the `wanted` families and any the kernel is not known to
    /// hold; one failing does not stop the others.
    pub fn sync_some(&mut self, trackers: &Trackers, changes: &[Changes], full: bool, pass: Pass, wanted: &[bool]) -> Result<Vec<Report>, Failed> {
        let mut befores: Vec<Before> = Vec::with_capacity(self.rulesets.len());
        let mut came: Vec<Vec<Hairpin>> = Vec::with_capacity(self.rulesets.len());
        for ((rs, t), ch) in self.rulesets.iter_mut().zip(&trackers.families).zip(changes) {
            let mut before: Before = ch.services.iter().flat_map(|id| rs.objects_of(id)).collect();
            let (s, e) = t.view();
            let hairpins = rs.update(s, e, &ch.services);
            before.push(hairpin_objects(&hairpins.gone));
            befores.push(before);
            came.push(hairpins.came);
        }
        let go: Vec<bool> = self.in_sync.iter().enumerate().map(|(i, s)| !s || pass == Pass::DryRun || wanted.get(i).copied().unwrap_or(true)).collect();
        let trusted: Vec<bool> = self.in_sync.iter().map(|s| !full && pass == Pass::Apply && *s).collect();
        let mut reports = Vec::with_capacity(self.rulesets.len());
        let mut failed: Vec<(crate::net::IpFamily, NftError, Phase)> = Vec::new();
        for (i, before) in befores.iter().enumerate().filter(|(i, _)| go[*i]) {
            self.in_sync[i] = false;
            let family = self.rulesets[i].ctx.ip_family;
            let before: Vec<&Objects> = before.iter().collect();
            let mut nft = WatchedNft::new(self.nft.as_mut());
            // The changed ports' objects after the commit are rendered from the ruleset
            // (it keeps none).
            let result = if trusted[i] {
                let mut after = changed_objects(&self.rulesets[i], changes.get(i), &came[i]);
                if self.check_changed[i] {
                    after.push(check_chain(&self.rulesets[i].fixed));
                }
                send_partial(&mut nft, self.rulesets[i].ctx.family, &before, &after.iter().collect::<Vec<_>>())
            } else {
                sync::full(&mut nft, &self.rulesets[i].table(), pass == Pass::DryRun)
            };
            let phase = nft.failed().unwrap_or(Phase::Other);
            let report = match result {
                Ok(r) => r,
                Err(error) => {
                    failed.push((family, error, phase));
                    continue;
                }
            };
            if pass == Pass::Apply {
                self.in_sync[i] = true;
                self.check_changed[i] = false;
            }
            reports.push(report);
        }
        let mut failed = failed.into_iter();
        match failed.next() {
            None => Ok(reports),
            Some((family, error, phase)) => Err(Failed { family, error, phase, done: reports, more: failed.collect() }),
        }
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
fn changed_objects(rs: &Ruleset, changes: Option<&Changes>, came: &[Hairpin]) -> Vec<Objects> {
    let mut out: Vec<Objects> = changes.into_iter().flat_map(|ch| ch.services.iter().flat_map(|id| rs.objects_of(id))).collect();
    out.push(hairpin_objects(came));
    out
}

/// One family's partial sync: one transaction that also deletes the chains and sets that
/// went, through [`Nft::run_partial`] (on the node: one netlink batch, or, when not
/// encodable, one `nft` run, which lists the whole table for its cache first: one run,
/// not two). A kernel that will not
/// delete a chain in the transaction that drops its last reference (6.18 does; kube-proxy
/// deletes stale chains in a later sync) refuses that transaction: then the change goes
/// alone and the deletion right after it.
fn send_partial(nft: &mut dyn Nft, family: super::model::Family, before: &[&Objects], after: &[&Objects]) -> Result<Report, NftError> {
    let t = Instant::now();
    let p = super::partial::partial(family, super::names::TABLE, before, after);
    let mut report = Report::new(family);
    report.timings.render = t.elapsed();
    if p.text.is_empty() {
        return Ok(report);
    }
    let t = Instant::now();
    report.lines = p.text.lines().count();
    report.stale = p.stale;
    let together = if p.delete.is_empty() { None } else { Some(format!("{}{}", p.text, p.delete)) };
    match together.map(|text| nft.run_partial(&text)) {
        Some(Ok(via)) => {
            report.lines += p.delete.lines().count();
            report.via = Some(via);
        }
        None | Some(Err(NftError::Rejected { .. } | NftError::Refused { .. })) => {
            report.via = Some(nft.run_partial(&p.text)?);
            if !p.delete.is_empty() {
                if let Err(e) = nft.run_partial(&p.delete) {
                    tracing::warn!(family = family.as_str(), error = %e, "stale nftables chains not deleted; the next full sync deletes them");
                    report.stale_error = Some(e.to_string());
                }
            }
        }
        Some(Err(e)) => return Err(e),
    }
    report.applied = true;
    report.timings.apply = t.elapsed();
    Ok(report)
}

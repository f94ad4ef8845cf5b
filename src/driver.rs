//! The per-family sync loop every mode that syncs family by family shares: which families
//! go this pass, which can be synced from the changed services alone (the kernel is known
//! to hold the previous rules), and what a failure leaves. kube-proxy runs one proxier per
//! family, each for its own reasons, and one failing does not stop the other; this is that
//! bookkeeping once. What a mode does differently is its [`FamilyRules`].

use std::time::{Duration, Instant};

use crate::net::IpFamily;
use crate::track::{Changes, FamilyTracker};

/// Whether a sync sends what it computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Bring the kernel up to date (and clear stale flows).
    Apply,
    /// Compare everything with the kernel and change nothing: no restore, no canary, no
    /// conntrack flush; the kernel is not trusted to hold the rulesets afterwards.
    DryRun,
}

/// The step of a family's sync that failed. kube-proxy counts a failed sync as a restore
/// failure (`sync_proxy_rules_iptables_restore_failures_total`, nftables mode's
/// `sync_proxy_rules_nftables_sync_failures_total`) only when the write itself was refused
/// or failed; each mode's sync error says which step it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the kernel's rules (`iptables-save`, `nft list`) or parsing what it read.
    Read,
    /// Writing them: `iptables-restore` or the `nft` transaction refused or failed.
    Restore,
    /// Anything else the sync does around the write (the canaries, the sysctls, IPVS,
    /// ipsets, links).
    Other,
}

/// A commit of the trackers: every family's tracker and its changes (per family).
#[derive(Debug, Clone, Copy)]
pub struct Commit<'a> {
    pub trackers: &'a [FamilyTracker],
    pub changes: &'a [Changes],
}

/// What a sync is asked to do: full or not, sent or a dry run, and which families must go.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub full: Full,
    pub pass: Pass,
    pub wanted: &'a [bool],
}

/// Every family's report, or the failures (and the others' reports).
pub type Outcome<F> = Result<Vec<Synced<<F as FamilyRules>::Report>>, Failed<<F as FamilyRules>::Error, <F as FamilyRules>::Report>>;

/// Whether a sync is full: no, yes, or only because the full-sync period passed (which a
/// family may skip: [`FamilyRules::skips_periodic_full`]).
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

/// One family's rules as a mode keeps them between syncs, and how they reach the kernel.
pub trait FamilyRules {
    /// What the syncs write through, shared by the families.
    type Kernel: ?Sized;
    /// The changed services' rules as they were before a commit.
    type Before;
    type Report;
    type Error;

    fn family(&self) -> IpFamily;

    /// Takes in a commit: the changed services' rules rendered again. Returns what they were.
    fn update(&mut self, tracker: &FamilyTracker, changes: &Changes) -> Self::Before;

    /// Whether a full sync due only to the full-sync period is skipped (kube-proxy v1.37's
    /// iptables mode in a large cluster).
    fn skips_periodic_full(&self) -> bool {
        false
    }

    /// A sync from the changed services alone, the kernel holding the previous rules;
    /// `None` when this change needs a full sync.
    fn partial(&mut self, kernel: &mut Self::Kernel, before: Self::Before, changes: &Changes) -> Option<Result<Self::Report, Failure<Self::Error>>>;

    /// A full sync: whatever the kernel holds, it ends holding these rules (a dry run only compares).
    fn full(&mut self, kernel: &mut Self::Kernel, pass: Pass) -> Result<Self::Report, Failure<Self::Error>>;

    /// The kernel now holds these rules (an applied sync succeeded).
    fn synced(&mut self) {}
}

/// A family's failed sync: the error and the step it failed in (kube-proxy counts only a
/// failed restore or transaction, [`Phase::Restore`]).
#[derive(Debug)]
pub struct Failure<E> {
    pub error: E,
    pub phase: Phase,
}

impl<E> Failure<E> {
    pub fn new(error: E, phase: Phase) -> Self {
        Failure { error, phase }
    }
}

/// One family's sync in a pass.
#[derive(Debug, Clone)]
pub struct Synced<R> {
    pub family: IpFamily,
    /// Whether it compared everything with the kernel (kube-proxy's full sync).
    pub full: bool,
    /// From the commit's update to the kernel's answer.
    pub took: Duration,
    pub report: R,
}

/// One family's failed sync, with how long it ran.
#[derive(Debug)]
pub struct FamilyFailure<E> {
    pub family: IpFamily,
    pub error: E,
    pub phase: Phase,
    pub took: Duration,
}

/// A pass in which at least one family failed; the others still synced (`done`).
#[derive(Debug)]
pub struct Failed<E, R> {
    /// The first family that failed.
    pub first: Box<FamilyFailure<E>>,
    /// Any later family that failed too.
    pub more: Vec<FamilyFailure<E>>,
    pub done: Vec<Synced<R>>,
}

impl<E, R> Failed<E, R> {
    /// Every family that failed, in order.
    pub fn failures(&self) -> impl Iterator<Item = &FamilyFailure<E>> {
        std::iter::once(self.first.as_ref()).chain(&self.more)
    }
}

// Shown as the first error itself (as `#[error(transparent)]` would), so a message reads the
// same whether or not the family is attached; a second failing family's error follows.
impl<E: std::fmt::Display, R> std::fmt::Display for Failed<E, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.first.error.fmt(f)?;
        for other in &self.more {
            write!(f, "; {} too: {}", other.family, other.error)?;
        }
        Ok(())
    }
}

impl<E: std::error::Error + 'static, R: std::fmt::Debug> std::error::Error for Failed<E, R> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.first.error.source()
    }
}

/// Per family: whether the kernel is known to hold its rules.
#[derive(Debug, Clone, Default)]
pub struct Driver {
    in_sync: Vec<bool>,
}

impl Driver {
    pub fn new(families: usize) -> Self {
        Driver { in_sync: vec![false; families] }
    }

    /// Whether the kernel is known to hold family `i`'s rules (its next sync can be partial).
    pub fn in_sync(&self, i: usize) -> bool {
        self.in_sync.get(i).copied().unwrap_or(false)
    }

    /// Every family's rules changed outside a commit (a re-render): the next syncs are full.
    pub fn forget(&mut self) {
        self.in_sync.iter_mut().for_each(|s| *s = false);
    }

    /// Takes a commit (`changes`, per family) into every family's rules, then syncs the
    /// `wanted` families and any the kernel is not known to hold (all of them for a dry
    /// run): from the changed services alone when the kernel holds the previous rules and
    /// the sync is not full, else fully. One failing family does not stop the others.
    pub fn sync<F: FamilyRules>(&mut self, families: &mut [F], kernel: &mut F::Kernel, commit: Commit<'_>, ask: Ask<'_>) -> Outcome<F> {
        let (Commit { trackers, changes }, Ask { full, pass, wanted }) = (commit, ask);
        self.in_sync.resize(families.len(), false);
        let none = Changes::default();
        let mut updated = Vec::with_capacity(families.len());
        for (i, rules) in families.iter_mut().enumerate() {
            let started = Instant::now();
            let ch = changes.get(i).unwrap_or(&none);
            let before = trackers.get(i).map(|t| rules.update(t, ch));
            updated.push((before, started.elapsed()));
        }
        let mut done = Vec::with_capacity(families.len());
        let mut failures = Vec::new();
        for (i, (rules, (before, updating))) in families.iter_mut().zip(updated).enumerate() {
            let go = !self.in_sync[i] || pass == Pass::DryRun || wanted.get(i).copied().unwrap_or(true);
            if !go {
                continue;
            }
            let full_here = match full {
                Full::No => false,
                Full::Yes => true,
                Full::Periodic => !rules.skips_periodic_full(),
            };
            let trusted = !full_here && pass == Pass::Apply && self.in_sync[i];
            // The rules have moved on: until this sync succeeds, the kernel is not known to hold them.
            self.in_sync[i] = false;
            let family = rules.family();
            let started = Instant::now();
            let ch = changes.get(i).unwrap_or(&none);
            let partial = match (trusted, before) {
                (true, Some(before)) => rules.partial(kernel, before, ch),
                _ => None,
            };
            let synced_full = partial.is_none();
            let result = partial.unwrap_or_else(|| rules.full(kernel, pass));
            let took = updating + started.elapsed();
            match result {
                Ok(report) => {
                    if pass == Pass::Apply {
                        self.in_sync[i] = true;
                        rules.synced();
                    }
                    done.push(Synced { family, full: synced_full, took, report });
                }
                Err(Failure { error, phase }) => failures.push(FamilyFailure { family, error, phase, took }),
            }
        }
        let mut failures = failures.into_iter();
        match failures.next() {
            None => Ok(done),
            Some(first) => Err(Failed { first: Box::new(first), more: failures.collect(), done }),
        }
    }
}

#[cfg(test)]
mod tests;

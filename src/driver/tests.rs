//! The driver's bookkeeping over a recording family: which families go, partial or full,
//! and what a failure leaves.

use super::*;
use crate::net::IpFamily::{V4, V6};

/// A family that records what the driver asked of it.
struct Rec {
    family: IpFamily,
    large: bool,
    /// Whether its partial sync can express the change.
    can_partial: bool,
    fail: Option<Phase>,
    calls: Vec<&'static str>,
}

impl Rec {
    fn new(family: IpFamily) -> Self {
        Rec { family, large: false, can_partial: true, fail: None, calls: Vec::new() }
    }
}

impl FamilyRules for Rec {
    type Kernel = Vec<IpFamily>;
    type Before = ();
    type Report = &'static str;
    type Error = String;

    fn family(&self) -> IpFamily {
        self.family
    }

    fn update(&mut self, _: &FamilyTracker, _: &Changes) {
        self.calls.push("update");
    }

    fn skips_periodic_full(&self) -> bool {
        self.large
    }

    fn partial(&mut self, kernel: &mut Vec<IpFamily>, _: (), _: &Changes) -> Option<Result<&'static str, Failure<String>>> {
        if !self.can_partial {
            return None;
        }
        self.calls.push("partial");
        kernel.push(self.family);
        Some(match self.fail.take() {
            Some(phase) => Err(Failure::new(format!("{} partial failed", self.family), phase)),
            None => Ok("partial"),
        })
    }

    fn full(&mut self, kernel: &mut Vec<IpFamily>, pass: Pass) -> Result<&'static str, Failure<String>> {
        self.calls.push(if pass == Pass::DryRun { "compare" } else { "full" });
        kernel.push(self.family);
        match self.fail.take() {
            Some(phase) => Err(Failure::new(format!("{} full failed", self.family), phase)),
            None => Ok("full"),
        }
    }

    fn synced(&mut self) {
        self.calls.push("synced");
    }
}

fn trackers() -> Vec<FamilyTracker> {
    vec![FamilyTracker::new(V4, "node", None), FamilyTracker::new(V6, "node", None)]
}

fn run(d: &mut Driver, fams: &mut [Rec], full: Full, pass: Pass, wanted: &[bool]) -> Result<Vec<Synced<&'static str>>, Failed<String, &'static str>> {
    let mut kernel = Vec::new();
    let changes = vec![Changes::default(), Changes::default()];
    let r = d.sync(fams, &mut kernel, Commit { trackers: &trackers(), changes: &changes }, Ask { full, pass, wanted });
    for f in fams.iter_mut() {
        f.calls.retain(|c| *c != "update");
    }
    r
}

#[test]
fn the_first_sync_is_full_in_every_family_then_partial_for_the_wanted_ones() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    // Not wanted, but never synced: both go, fully.
    let done = run(&mut d, &mut fams, Full::No, Pass::Apply, &[false, false]).unwrap();
    assert_eq!(done.iter().map(|s| (s.family, s.full, s.report)).collect::<Vec<_>>(), [(V4, true, "full"), (V6, true, "full")]);
    assert!(d.in_sync(0) && d.in_sync(1));
    fams.iter_mut().for_each(|f| f.calls.clear());
    // Only IPv6 is wanted: IPv4 is left alone; IPv6 syncs from the change.
    let done = run(&mut d, &mut fams, Full::No, Pass::Apply, &[false, true]).unwrap();
    assert_eq!(done.iter().map(|s| (s.family, s.full)).collect::<Vec<_>>(), [(V6, false)]);
    assert!(fams[0].calls.is_empty());
    assert_eq!(fams[1].calls, ["partial", "synced"]);
}

#[test]
fn a_change_the_partial_sync_cannot_express_syncs_fully() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap();
    fams[0].can_partial = false;
    let done = run(&mut d, &mut fams, Full::No, Pass::Apply, &[true, true]).unwrap();
    assert_eq!(done.iter().map(|s| (s.family, s.full)).collect::<Vec<_>>(), [(V4, true), (V6, false)]);
}

#[test]
fn a_periodic_full_sync_is_skipped_only_by_the_family_that_says_so() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap();
    fams[0].large = true;
    let done = run(&mut d, &mut fams, Full::Periodic, Pass::Apply, &[true, true]).unwrap();
    assert_eq!(done.iter().map(|s| (s.family, s.full)).collect::<Vec<_>>(), [(V4, false), (V6, true)]);
    // Asked for outright, a full sync is full in a large cluster too.
    let done = run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap();
    assert!(done.iter().all(|s| s.full));
}

#[test]
fn a_failing_family_leaves_the_other_synced_and_its_own_next_sync_full() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap();
    fams[0].fail = Some(Phase::Restore);
    let failed = run(&mut d, &mut fams, Full::No, Pass::Apply, &[true, true]).unwrap_err();
    assert_eq!((failed.first.family, failed.first.phase), (V4, Phase::Restore));
    assert!(failed.more.is_empty());
    assert_eq!(failed.done.iter().map(|s| s.family).collect::<Vec<_>>(), [V6]);
    assert_eq!(failed.to_string(), "ipv4 partial failed");
    assert!(!d.in_sync(0) && d.in_sync(1));
    // Not wanted, IPv4 still goes (the kernel is not known to hold it), and fully.
    fams.iter_mut().for_each(|f| f.calls.clear());
    let done = run(&mut d, &mut fams, Full::No, Pass::Apply, &[false, false]).unwrap();
    assert_eq!(done.iter().map(|s| (s.family, s.full)).collect::<Vec<_>>(), [(V4, true)]);
    assert_eq!(fams[0].calls, ["full", "synced"]);
}

#[test]
fn both_families_failing_are_both_reported() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    fams[0].fail = Some(Phase::Read);
    fams[1].fail = Some(Phase::Other);
    let failed = run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap_err();
    assert_eq!(failed.failures().map(|f| (f.family, f.phase)).collect::<Vec<_>>(), [(V4, Phase::Read), (V6, Phase::Other)]);
    assert_eq!(failed.to_string(), "ipv4 full failed; ipv6 too: ipv6 full failed");
}

#[test]
fn a_dry_run_compares_every_family_and_trusts_nothing_after() {
    let mut d = Driver::new(2);
    let mut fams = [Rec::new(V4), Rec::new(V6)];
    run(&mut d, &mut fams, Full::Yes, Pass::Apply, &[true, true]).unwrap();
    fams.iter_mut().for_each(|f| f.calls.clear());
    let done = run(&mut d, &mut fams, Full::No, Pass::DryRun, &[false, false]).unwrap();
    assert_eq!(done.len(), 2);
    assert!(fams.iter().all(|f| f.calls == ["compare"]), "compared, not synced");
    assert!(!d.in_sync(0) && !d.in_sync(1), "after a dry run the next sync is full");
}

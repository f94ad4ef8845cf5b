//! What the loop saw and did, as kube-proxy's metrics: the changes it received and each
//! sync. kube-proxy runs one proxier per IP family and each observes its own sync with
//! `ip_family`; svcproxy's pass syncs the families that have a reason to (the engine says
//! which), and each is observed with its own time (IPVS mode: the whole pass's), its own
//! rules, trigger times and no-local counts; a failure counts against the family that failed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::super::engine::{Detail, Engine, FamilySync, Outcome, SyncFailure};
use crate::schedule::Kind;
use crate::net::IpFamily;
use crate::driver::Phase;
use crate::serve::metrics::{FamilyLabel, Metrics, PolicyLabel, TableLabel, WriterLabel};
use crate::track::Event;

/// Seconds since the Unix epoch (the timestamp gauges' unit).
pub(super) fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The families this engine syncs, in its order.
fn families(engine: &Engine) -> impl Iterator<Item = IpFamily> + '_ {
    engine.trackers.families.iter().map(|t| t.family)
}

/// The sync-duration histograms of one family: every sync, and the full or partial one
/// (written only in the modes that register them, as every mode-specific family here).
fn durations(m: &Metrics, full: bool, family: &FamilyLabel, took: Duration) {
    let secs = took.as_secs_f64();
    m.sync_duration.get_or_create(family).observe(secs);
    let by_kind = if full { &m.full_sync_duration } else { &m.partial_sync_duration };
    by_kind.get_or_create(family).observe(secs);
}

/// A family's successful sync: its time, its timestamp.
fn family_synced(m: &Metrics, s: &FamilySync, now: SystemTime) {
    let label = FamilyLabel::of(s.family);
    durations(m, s.full, &label, s.took);
    m.last_sync_timestamp.get_or_create(&label).set(unix_secs(now));
}

/// A successful sync of the families that synced (a family with nothing to do, which
/// kube-proxy's proxier of that family would not have synced, is not observed).
pub(super) fn synced(m: &Metrics, engine: &Engine, outcome: &Outcome) {
    let now = SystemTime::now();
    families_synced(m, engine, &outcome.synced, &outcome.rules, now);
    network_programming(m, &outcome.trigger_times, now);
    if let Detail::Nftables(reports) = &outcome.detail {
        nftables_reports(m, reports);
    }
    reconciled(m, &outcome.reconciled);
}

/// kube-proxy's SLI: from each programmed slice change's trigger time (set by the
/// EndpointSlice controller) to `now`, in the family whose sync programmed it.
fn network_programming(m: &Metrics, trigger_times: &[(IpFamily, Vec<SystemTime>)], now: SystemTime) {
    for (family, times) in trigger_times.iter().filter(|(_, times)| !times.is_empty()) {
        let latency = m.network_programming_duration.get_or_create(&FamilyLabel::of(*family));
        times.iter().filter_map(|t| now.duration_since(*t).ok()).for_each(|d| latency.observe(d.as_secs_f64()));
    }
}

/// What each family that synced observes of its own sync: its time and timestamp, its
/// no-local counts, its rule counts (`rules`, iptables mode).
fn families_synced(m: &Metrics, engine: &Engine, synced: &[FamilySync], rules: &[(IpFamily, (usize, usize))], now: SystemTime) {
    synced.iter().for_each(|s| family_synced(m, s, now));
    let is_synced = |family: &IpFamily| synced.iter().any(|s| s.family == *family);
    for (family, (internal, external)) in engine.no_local_endpoints().into_iter().filter(|(f, _)| is_synced(f)) {
        m.no_local_endpoints.get_or_create(&PolicyLabel::of("internal", family)).set(internal as i64);
        m.no_local_endpoints.get_or_create(&PolicyLabel::of("external", family)).set(external as i64);
    }
    for s in synced {
        let Some((_, (filter, nat))) = rules.iter().find(|(f, _)| *f == s.family) else { continue };
        for (table, n) in [("filter", *filter), ("nat", *nat)] {
            m.rules.get_or_create(&TableLabel::of(table, s.family)).set(n as i64);
            // What a full sync writes: every rule of the table.
            if s.full {
                m.rules_last.get_or_create(&TableLabel::of(table, s.family)).set(n as i64);
            }
        }
    }
}

/// kube-proxy's conntrack reconciler families, from its runs, and svcproxy's count of
/// those that failed.
fn reconciled(m: &Metrics, list: &[crate::conntrack::Reconciled]) {
    for r in list {
        let family = FamilyLabel::of(r.family);
        m.conntrack_reconcile_duration.get_or_create(&family).observe(r.seconds);
        m.conntrack_deleted.get_or_create(&family).inc_by(r.deleted.unwrap_or(0) as u64);
        if r.error.is_some() {
            m.conntrack_failures.get_or_create(&family).inc();
        }
    }
}

/// Families with the time their sync took.
type Timed = Vec<(IpFamily, Duration)>;

/// A sync in which a family failed. In iptables and nftables modes the families are
/// independent, as kube-proxy's per-family proxiers are: those that synced are observed as
/// synced, each failing one as a failed sync (timed, as kube-proxy times one). Any other
/// failure (a sysctl, or IPVS mode's one pass) is every family's failed sync. Only a
/// refused or failed write counts as kube-proxy's restore (or nftables sync) failure,
/// against the family whose write it was; a failed read, canary, sysctl or IPVS step is a
/// failed sync that counts none. `kind` is the pass's: a failing family's full or partial.
pub(super) fn failed(m: &Metrics, engine: &Engine, kind: Kind, failure: &SyncFailure, wall: Duration) {
    let full = kind == Kind::Full;
    let every = || families(engine).map(|f| (f, wall)).collect::<Timed>();
    let (done, failing, restore): (Vec<FamilySync>, Timed, Vec<IpFamily>) = match failure {
        SyncFailure::Iptables(f) => {
            let done = f.failed.done.iter().map(|s| FamilySync { family: s.family, full: s.full, took: s.took }).collect();
            let failing = f.failed.failures().map(|x| (x.family, x.took)).collect();
            let restore = f.failed.failures().filter(|x| x.phase == Phase::Restore).map(|x| x.family).collect();
            (done, failing, restore)
        }
        SyncFailure::Nftables(f) => {
            let done: Vec<FamilySync> = f.done.iter().map(|s| FamilySync { family: s.family, full: s.full, took: s.took }).collect();
            let reports: Vec<_> = f.done.iter().map(|s| s.report.clone()).collect();
            nftables_reports(m, &reports);
            let mut failing = Timed::new();
            for x in f.failures() {
                failing.push((x.family, x.took));
                if x.phase == Phase::Restore {
                    m.nftables_sync_failures.get_or_create(&FamilyLabel::of(x.family)).inc();
                }
            }
            (done, failing, Vec::new())
        }
        SyncFailure::Ipvs(f) => (Vec::new(), every(), f.family.filter(|_| f.phase == Phase::Restore).into_iter().collect()),
        SyncFailure::Sysctl(_) => (Vec::new(), every(), Vec::new()),
    };
    let now = SystemTime::now();
    families_synced(m, engine, &done, &engine.rule_counts(), now);
    let programmed: Vec<_> = engine.last_trigger_times.iter().filter(|(f, _)| done.iter().any(|s| s.family == *f)).cloned().collect();
    network_programming(m, &programmed, now);
    reconciled(m, &engine.reconciled());
    for (family, took) in failing {
        // kube-proxy times a failed sync too.
        durations(m, full, &FamilyLabel::of(family), took);
    }
    for family in restore {
        let label = FamilyLabel::of(family);
        m.restore_failures.get_or_create(&label).inc();
        if !full {
            m.partial_restore_failures.get_or_create(&label).inc();
        }
    }
}

/// kube-proxy's nftables cleanup failures (each family whose stale chains could not be
/// deleted), and which writer applied each partial sync's transaction (svcproxy's).
pub(super) fn nftables_reports(m: &Metrics, reports: &[crate::nftables::sync::Report]) {
    for r in reports.iter().filter(|r| r.stale_error.is_some()) {
        m.nftables_cleanup_failures.get_or_create(&FamilyLabel::of(r.family)).inc();
    }
    for r in reports {
        if let Some(via) = r.via {
            m.nftables_partial_writes.get_or_create(&WriterLabel::of(r.family, via)).inc();
        }
    }
}

/// svcproxy's gauge of the chains a cold start's interim nftables table has still to
/// convert (`left`, per family: [`Engine::conversion_left`]); returns their sum.
pub(super) fn interim_chains(m: &Metrics, left: &[(IpFamily, usize)]) -> usize {
    for (family, n) in left {
        m.nftables_interim_chains.get_or_create(&FamilyLabel::of(*family)).set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    left.iter().map(|(_, n)| n).sum()
}

/// Per family, the slice events that changed its tracker since the last sync.
pub(super) fn slice_changes(engine: &Engine) -> Vec<usize> {
    engine.trackers.families.iter().map(|t| t.endpoints.changed_events()).collect()
}

/// kube-proxy's "a sync was queued" gauge, per family as its proxier queues one: at a
/// Service event that leaves its tracker with pending changes (every family's proxier gets
/// every Service), and at a slice event of its family that changed something (`slices`:
/// each family's count before the events). Set only once the initial lists are in (`ready`),
/// as kube-proxy queues nothing before its first sync. Returns whether a family queued one.
pub(super) fn queued(m: &Metrics, engine: &Engine, events: &[Event], slices: &[usize], ready: bool) -> bool {
    let services = events.iter().any(|e| matches!(e, Event::ServiceApplied(_) | Event::ServiceDeleted(_)));
    let now = unix_secs(SystemTime::now());
    let mut any = false;
    for (t, before) in engine.trackers.families.iter().zip(slices) {
        if (services && t.services.pending() > 0) || t.endpoints.changed_events() > *before {
            any = true;
            if ready {
                m.last_queued_timestamp.get_or_create(&FamilyLabel::of(t.family)).set(now);
            }
        }
    }
    any
}

/// kube-proxy's pending-change gauges, as its trackers set them. The endpoint one counts
/// the slice events that changed a tracker's pending state since the last sync (either
/// family's tracker adds, either family's sync zeroes). The service one is set at each
/// Service event to the services pending in the tracker that received it last: the IPv6
/// proxier's in dual-stack, as the metaproxier hands each Service to IPv4's, then IPv6's.
pub(super) fn pending_gauges(m: &Metrics, engine: &Engine, events: &[Event]) {
    let slices: usize = engine.trackers.families.iter().map(|t| t.endpoints.changed_events()).sum();
    m.endpoint_changes_pending.set(slices as i64);
    if events.iter().any(|e| matches!(e, Event::ServiceApplied(_) | Event::ServiceDeleted(_))) {
        let families = &engine.trackers.families;
        let last = families.iter().find(|t| t.family == IpFamily::V6).or(families.last());
        m.service_changes_pending.set(last.map_or(0, |t| t.services.pending()) as i64);
    }
}

/// kube-proxy's change counters count events as its trackers receive them, changed or not:
/// every Service event reaches each family proxier's tracker (so each counts once per
/// family), every EndpointSlice event reaches its address family's proxier only (a family
/// not proxied counts none).
pub(super) fn events_seen(m: &Metrics, engine: &Engine, events: &[Event]) {
    let families: Vec<IpFamily> = families(engine).collect();
    let (mut services, mut slices) = (0u64, 0u64);
    for e in events {
        match e {
            Event::ServiceApplied(_) | Event::ServiceDeleted(_) => services += families.len() as u64,
            Event::SliceApplied(s) | Event::SliceDeleted(s) => slices += u64::from(families.contains(&s.family)),
            Event::ServiceCidrApplied(_) | Event::ServiceCidrDeleted(_) => {}
        }
    }
    m.service_changes_total.inc_by(services);
    m.endpoint_changes_total.inc_by(slices);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-proxy's nftables cleanup failures: a family whose stale chains could not be
    /// deleted counts one; a family whose deletion went through counts none.
    #[test]
    fn a_failed_stale_chain_deletion_counts_against_its_family() {
        use crate::{net::IpFamily, nftables::sync::Report};
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Nftables);
        let mut v6 = Report::new(IpFamily::V6);
        v6.stale_error = Some("Error: Could not process rule: Device or resource busy".into());
        nftables_reports(&m, &[Report::new(IpFamily::V4), v6]);
        let text = m.encode();
        assert!(text.lines().any(|l| l == "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family=\"IPv6\"} 1"), "{text}");
        assert!(!text.contains("nftables_cleanup_failures_total{ip_family=\"IPv4\"}"), "{text}");
    }

    /// Each partial sync counts its writer; a full sync (no writer recorded) counts none.
    #[test]
    fn partial_syncs_count_their_writer() {
        use crate::{net::IpFamily, nftables::{apply::Via, sync::Report}};
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Nftables);
        let mut v4 = Report::new(IpFamily::V4);
        v4.via = Some(Via::Netlink);
        let mut v6 = Report::new(IpFamily::V6);
        v6.via = Some(Via::Nft);
        nftables_reports(&m, &[v4.clone(), v6, Report::new(IpFamily::V4)]);
        nftables_reports(&m, &[v4]);
        let text = m.encode();
        assert!(text.lines().any(|l| l == "svcproxy_nftables_partial_writes_total{ip_family=\"IPv4\",writer=\"netlink\"} 2"), "{text}");
        assert!(text.lines().any(|l| l == "svcproxy_nftables_partial_writes_total{ip_family=\"IPv6\",writer=\"nft\"} 1"), "{text}");
        assert!(!text.contains("writer=\"nft\"} 2") && !text.contains("IPv4\",writer=\"nft\""), "{text}");
    }

    /// The interim's chains left, per family, follow each report of them down to zero.
    #[test]
    fn the_interim_chains_gauge_follows_the_conversion() {
        use crate::net::IpFamily;
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Nftables);
        assert_eq!(interim_chains(&m, &[(IpFamily::V4, 40), (IpFamily::V6, 2)]), 42);
        assert_eq!(interim_chains(&m, &[(IpFamily::V4, 0), (IpFamily::V6, 2)]), 2);
        let text = m.encode();
        assert!(text.lines().any(|l| l == "svcproxy_nftables_interim_chains{ip_family=\"IPv4\"} 0"), "{text}");
        assert!(text.lines().any(|l| l == "svcproxy_nftables_interim_chains{ip_family=\"IPv6\"} 2"), "{text}");
    }
}

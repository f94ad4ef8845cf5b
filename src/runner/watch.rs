//! Watch mode: one loop owns the [`Engine`] (trackers and proxier). Source messages feed
//! the trackers; the [`crate::schedule::Schedule`] says when to sync and whether fully; a sync
//! commits the trackers and has the proxier bring the kernel up to date (in iptables mode
//! a partial sync sends only what the changed services need). Once per sync period,
//! before the sync, the canaries are checked; one gone forces a full sync. SIGTERM/SIGINT
//! stop the loop and leave the rules in place.

mod record;

use std::time::{Instant, SystemTime};

use tokio::sync::mpsc;

pub use super::engine::Engine;
use crate::schedule::Kind;
use crate::serve::metrics::{FamilyLabel, ResultLabel};
use crate::serve::SharedState;
use crate::source::events::{ProxyEvent, Recorder};
use crate::source::watch::SourceMsg;

/// Runs until `shutdown` resolves or the sources end.
pub async fn run(engine: Engine, rx: mpsc::Receiver<SourceMsg>, shared: SharedState, shutdown: impl std::future::Future<Output = ()>) {
    let _ = run_with(engine, rx, shared, shutdown, Vec::new(), None).await;
}

/// [`run`], also serving the health-check node ports on `health_binds` (none: not served),
/// a port that cannot listen recorded as kube-proxy's Event when there is a `recorder`.
/// Returns why it ended, when the process must exit non-zero ([`node_gone_or_moved`]).
pub async fn run_with(
    mut engine: Engine,
    mut rx: mpsc::Receiver<SourceMsg>,
    shared: SharedState,
    shutdown: impl std::future::Future<Output = ()>,
    health_binds: Vec<std::net::IpAddr>,
    recorder: Option<Recorder>,
) -> Option<String> {
    let serve_health = !health_binds.is_empty();
    let mut health = crate::serve::healthcheck::HealthServers::new(health_binds);
    let mut localhost: Vec<crate::serve::localhost_nodeports::Proxies> = engine
        .localhost_proxy_families()
        .into_iter()
        .map(|f| crate::serve::localhost_nodeports::Proxies::new(f, shared.metrics.localhost_nodeports.clone()))
        .collect();
    tokio::pin!(shutdown);
    // The last standalone conversion step's time, and the syncs in a row that converted nothing.
    let (mut last_step, mut idle_syncs) = (std::time::Duration::ZERO, 0);
    loop {
        if let Some(why) = exit_asked(&shared) {
            return Some(why);
        }
        let next = lock_schedule(&shared).next();
        // A cold start's interim table is converted a batch per partial sync (in its
        // transaction), and a batch alone per turn of the loop while no sync is near.
        let standalone = engine.converting() && (engine.conversion_blocked() || standalone_due(next, Instant::now(), last_step, idle_syncs));
        let sleep = async {
            match next {
                _ if standalone => {}
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("stopping; the rules stay in place");
                return None;
            }
            msg = rx.recv() => match msg {
                Some(m) => on_message(&mut engine, &shared, m),
                None => return None,
            },
            _ = sleep => {
                if standalone {
                    let t = Instant::now();
                    convert_step(&mut engine, &shared);
                    (last_step, idle_syncs) = (t.elapsed(), 0);
                    record::interim_chains(&shared.metrics, &engine.conversion_left());
                    if next.is_none_or(|at| at > Instant::now()) {
                        continue;
                    }
                }
                take_waiting(&mut engine, &shared, &mut rx);
                if let Some(why) = exit_asked(&shared) {
                    return Some(why);
                }
                let left = engine.conversion_left().iter().map(|(_, n)| n).sum::<usize>();
                wake(&mut engine, &shared, Instant::now());
                let now_left = record::interim_chains(&shared.metrics, &engine.conversion_left());
                if left > 0 {
                    idle_syncs = if now_left < left { 0 } else { idle_syncs + 1 };
                    if now_left == 0 {
                        tracing::info!(chains = left, "the interim nftables table is kube-proxy's now");
                    } else if now_left < left {
                        tracing::debug!(chains = left - now_left, left = now_left, "the sync converted interim nftables chains (a carried batch, or the changed services' own)");
                    }
                }
                if serve_health {
                    let failures = health.update(engine.health_check_counts()).await;
                    if let Some(r) = &recorder {
                        for f in failures {
                            r.record(ProxyEvent::service_health_check_failed(r.node(), &f.service.namespace, &f.service.name, f.addr, &f.error));
                        }
                    }
                }
                for p in &mut localhost {
                    if let Some(specs) = engine.localhost_node_ports(p.family()) {
                        p.update(&specs);
                    }
                }
            }
        }
    }
}

/// Syncs in a row that convert nothing (the changes are another family's, or a batch was
/// refused) after which a standalone step runs even though a sync is near.
const STALL_SYNCS: usize = 2;

/// Whether a standalone conversion step runs now: it pays a whole transaction's fixed cost
/// and holds the loop, so only while it would not delay a sync (none is scheduled, or the
/// next is further away than the last step took), or while the syncs carry no batch.
fn standalone_due(next: Option<Instant>, now: Instant, last_step: std::time::Duration, idle_syncs: usize) -> bool {
    idle_syncs >= STALL_SYNCS || next.is_none_or(|at| at.saturating_duration_since(now) > last_step)
}

/// One batch of the interim table's conversion; a failure leaves the interim rules serving
/// and asks for a full sync (which refills what differs).
fn convert_step(engine: &mut Engine, shared: &SharedState) {
    match tokio::task::block_in_place(|| engine.convert_step(true)) {
        Ok(n) if !engine.converting() => tracing::info!(chains = n, "the interim nftables table is kube-proxy's now"),
        Ok(_) => {}
        Err(e) => {
            tracing::error!(error = %with_sources(&e), "converting the interim nftables table failed; its rules keep serving; a full sync follows");
            lock_schedule(shared).force_full(Instant::now());
        }
    }
}

/// Why the loop must end now, if a message said so (the rules stay in place).
fn exit_asked(shared: &SharedState) -> Option<String> {
    shared.exit.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// At most this many waiting messages are taken in before a sync.
const TAKE_AT_MOST: usize = 10_000;

/// Takes in the messages already waiting (at most [`TAKE_AT_MOST`]), so the sync about to
/// run carries them: `select!` picks among ready branches at random, and after a long sync
/// the timer would win while messages piled up (BENCHMARKS.md, the soak). Returns how many.
pub(crate) fn take_waiting(engine: &mut Engine, shared: &SharedState, rx: &mut mpsc::Receiver<SourceMsg>) -> usize {
    let mut taken = 0;
    while taken < TAKE_AT_MOST {
        let Ok(m) = rx.try_recv() else { break };
        on_message(engine, shared, m);
        taken += 1;
    }
    taken
}

/// kube-proxy v1.37's `NodeManager` (PR #138183): the process ends when this Node is
/// deleted, or when its IPs (`GetNodeHostIPs`) differ from those read at start; a Node
/// with no address yet changes nothing. (No IPs read at start: the first seen are taken,
/// where kube-proxy, having waited 30 s for them, would exit.) The reason, if so.
pub fn node_gone_or_moved(at_start: Option<&[std::net::IpAddr]>, node: Option<&crate::model::Node>) -> Option<String> {
    let Some(node) = node else { return Some("this Node was deleted".into()) };
    let now = node.host_ips();
    let before = at_start?;
    (!now.is_empty() && now != before).then(|| format!("this Node's IPs changed from {before:?} to {now:?}"))
}

pub(crate) fn on_message(engine: &mut Engine, shared: &SharedState, msg: SourceMsg) {
    let now = Instant::now();
    match msg {
        SourceMsg::Ready => {
            // The first sync is queued for every family (kube-proxy sets each family's
            // queued time as its proxier's loop starts).
            let at = record::unix_secs(SystemTime::now());
            for t in &engine.trackers.families {
                shared.metrics.last_queued_timestamp.get_or_create(&FamilyLabel::of(t.family)).set(at);
            }
            lock_schedule(shared).set_ready(now);
        }
        SourceMsg::Malformed(list) => {
            for e in &list {
                tracing::warn!(error = %e, "skipped an object that cannot be read");
            }
            shared.metrics.malformed_objects.inc_by(list.len() as u64);
        }
        SourceMsg::Notes(list) => {
            for note in &list {
                tracing::info!(%note, "note on the input");
            }
        }
        SourceMsg::ServiceCidrs(cidrs) => {
            if engine.set_service_cidrs(cidrs) {
                tracing::info!(service_cidrs = ?engine.config.service_cidrs, "the cluster's ServiceCIDRs changed: cluster-ips-check is rewritten");
                lock_schedule(shared).changed(now);
            }
        }
        SourceMsg::Node { node, deleting } => {
            shared.node_deleting.store(deleting, std::sync::atomic::Ordering::SeqCst);
            if let Some(why) = node_gone_or_moved(engine.node_ips_at_start.as_deref(), node.as_ref()) {
                tracing::error!("{why}: exiting, for the DaemonSet to restart svcproxy with this node's new state (kube-proxy v1.37 does the same)");
                *shared.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                return;
            }
            if let Some(node) = node {
                if engine.node_ips_at_start.is_none() && !node.host_ips().is_empty() {
                    tracing::info!(ips = ?node.host_ips(), "this Node's IPs, first read");
                    engine.node_ips_at_start = Some(node.host_ips());
                }
                if engine.set_node_labels(node.labels) {
                    tracing::info!("this node's labels changed: full re-render");
                    lock_schedule(shared).force_full(now);
                }
            }
        }
        SourceMsg::Events(events) => {
            let (before, slices) = (engine.pending(), record::slice_changes(engine));
            engine.apply(&events);
            record::events_seen(&shared.metrics, engine, &events);
            record::pending_gauges(&shared.metrics, engine, &events);
            let ready = lock_schedule(shared).is_ready();
            let queued = record::queued(&shared.metrics, engine, &events, &slices, ready);
            if queued || engine.pending() != before {
                lock_schedule(shared).changed(now);
            }
        }
    }
}

/// What the loop does when the schedule's time comes (`now`; tests pass their own
/// instants): check the canaries if due, then sync.
pub fn wake(engine: &mut Engine, shared: &SharedState, now: Instant) {
    // The canary check comes once per sync period: the sync after it is a periodic one.
    let periodic = lock_schedule(shared).canary_due(now);
    check_canaries(engine, shared, now);
    sync_once(engine, shared, now, periodic);
}

/// When due (once per sync period), checks the canaries; if one is gone (or the check
/// cannot tell), the sync about to run is a full one.
fn check_canaries(engine: &mut Engine, shared: &SharedState, now: Instant) {
    if !engine.has_canaries() {
        return;
    }
    {
        let mut s = lock_schedule(shared);
        if !s.canary_due(now) {
            return;
        }
        s.canary_checked(now);
    }
    let lost = tokio::task::block_in_place(|| engine.canary_lost());
    shared.metrics.canary_checks.inc();
    let lost = match lost {
        Ok(None) => return,
        Ok(Some(l)) => {
            tracing::warn!(family = ?l.family, table = l.table, "a canary is gone (KUBE-PROXY-CANARY in this table, or in IPVS mode kube-ipvs0 or the IPVS table): rules were flushed by someone else; full sync");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot check KUBE-PROXY-CANARY; full sync");
            false
        }
    };
    if lost {
        shared.metrics.canary_lost.inc();
    }
    lock_schedule(shared).force_full(now);
}

/// An error and its sources on one line (`a: b: c`), for the log: a failure that names
/// only its family ("ipv4 nftables sync failed") would hide why. A source whose text the
/// message already holds is not repeated.
pub(crate) fn with_sources(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = s.source();
    }
    line
}

/// The schedule, even after a thread panicked while holding its lock: its state is a few
/// instants and flags, and syncing on from it beats stopping without a word (said once;
/// the poison is cleared).
fn lock_schedule(shared: &SharedState) -> std::sync::MutexGuard<'_, crate::schedule::Schedule> {
    shared.schedule.lock().unwrap_or_else(|poisoned| {
        tracing::error!("a panic poisoned the sync schedule's lock; syncing on from its last state");
        shared.schedule.clear_poison();
        poisoned.into_inner()
    })
}

/// One sync: of every family when it is the first, a full or a periodic one, else of the
/// families with changes and any whose last sync failed (its retry, a full sync of that
/// family alone), as kube-proxy's per-family proxiers each sync for their own reasons.
fn sync_once(engine: &mut Engine, shared: &SharedState, started: Instant, periodic: bool) {
    let clock = Instant::now();
    let (kind, every, queued, only_periodic) = {
        let mut s = lock_schedule(shared);
        let queued = s.pending_since();
        let every = periodic || s.every_family(started);
        let only_periodic = s.full_is_periodic(started);
        (s.begin(started), every, queued, only_periodic)
    };
    let full = kind == Kind::Full && every;
    let result = tokio::task::block_in_place(|| if full && only_periodic { engine.sync_families_periodic_full() } else { engine.sync_families(full, every) });
    let wall = clock.elapsed();
    let finished = started + wall;
    let m = &shared.metrics;
    // kube-proxy zeroes both as a sync checks the trackers' changes out, whether or not
    // the sync then succeeds (the changes are the proxier's from then on).
    m.service_changes_pending.set(0);
    m.endpoint_changes_pending.set(0);
    let ok = match &result {
        Ok(outcome) => {
            record::synced(m, engine, outcome);
            // svcproxy's own figure: from the oldest change it queued.
            if let Some(q) = queued {
                m.change_to_sync_duration.observe(finished.duration_since(q).as_secs_f64());
            }
            if let Ok(mut l) = shared.last_updated.lock() {
                *l = Some(SystemTime::now());
            }
            tracing::info!(?kind, seconds = wall.as_secs_f64(), restore_lines = outcome.restore_lines, ipvs_ops = outcome.ipvs_ops, "synced");
            socket_lb(engine);
            true
        }
        Err(e) => {
            record::failed(m, engine, kind, e, wall);
            tracing::error!(error = %with_sources(&e), "sync failed; the rules in place were kept; retrying");
            false
        }
    };
    m.syncs.get_or_create(&ResultLabel { result: if ok { "success" } else { "error" }.into() }).inc();
    // Only a full sync of every family is the schedule's full one (a retry is full in the
    // failed family alone).
    lock_schedule(shared).done(started, finished, if full { Kind::Full } else { Kind::Partial }, ok);
    // The outcome holds the sync's delta: freed before the trim, or the trim cannot return it.
    drop(result);
    // A full sync's peak (the kernel's dump, the delta) is garbage now; without this glibc
    // keeps it resident between the live state's blocks until the next full sync.
    if kind == Kind::Full {
        super::memory::release_free();
    }
}

/// `--socket-lb` after a pass that succeeded: its outcome logged; a failure leaves the
/// rules serving, and the next pass attaches and reads the maps again.
fn socket_lb(engine: &mut Engine) {
    match tokio::task::block_in_place(|| engine.sync_socket_lb()) {
        None => {}
        Some(Ok(r)) => {
            let failures = r.applied.as_ref().map_or(0, |a| a.failures.len());
            if let Some(a) = &r.attached {
                tracing::info!(attached = a.attached, replaced = a.replaced, "socket-lb programs attached");
            }
            if failures > 0 {
                tracing::error!(failures, "socket-lb map writes failed; those Services keep their previous backends");
            } else if !r.diff.is_empty() {
                tracing::info!(changes = r.diff.changes.len(), orphans = r.diff.orphans.len(), "socket-lb synced");
            }
        }
        Some(Err(e)) => tracing::error!(error = %with_sources(&e), "socket-lb sync failed; the rules serve meanwhile"),
    }
}

/// Waits for SIGTERM or SIGINT.
pub async fn signals() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("ipv4 nftables sync failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("the kernel refused the transaction at line 3")]
    struct Inner;

    #[derive(Debug, thiserror::Error)]
    #[error("restore failed: the kernel refused the transaction at line 3")]
    struct Repeats(#[source] Inner);

    #[test]
    fn a_logged_failure_carries_its_sources_once() {
        assert_eq!(super::with_sources(&Outer(Inner)), "ipv4 nftables sync failed: the kernel refused the transaction at line 3");
        assert_eq!(super::with_sources(&Repeats(Inner)), "restore failed: the kernel refused the transaction at line 3");
    }

    use std::sync::Arc;
    use std::time::Instant;

    use super::lock_schedule;
    use crate::schedule::{Schedule, Timing};
    use crate::serve::Shared;

    #[test]
    fn a_standalone_conversion_step_runs_only_where_it_delays_no_sync() {
        use std::time::Duration;
        let (now, s) = (Instant::now(), Duration::from_secs(1));
        assert!(super::standalone_due(None, now, s, 0), "no sync scheduled");
        assert!(super::standalone_due(Some(now + 3 * s), now, s, 0), "the next sync is further than a step takes");
        assert!(!super::standalone_due(Some(now + s / 2), now, s, 0), "a sync nearer than a step: it carries the batch");
        assert!(!super::standalone_due(Some(now), now, Duration::ZERO, 0), "a sync due now goes first");
        assert!(!super::standalone_due(Some(now + s / 2), now, s, super::STALL_SYNCS - 1), "one sync without progress: a probe");
        assert!(super::standalone_due(Some(now + s / 2), now, s, super::STALL_SYNCS), "syncs that carry nothing: the conversion goes on alone");
    }

    #[test]
    fn a_poisoned_schedule_lock_is_recovered_and_cleared() {
        let shared = Arc::new(Shared::new(Schedule::new(Timing::default())));
        let s2 = shared.clone();
        let _ = std::thread::spawn(move || {
            let _guard = s2.schedule.lock().unwrap();
            panic!("a bug while holding the schedule");
        })
        .join();
        assert!(shared.schedule.is_poisoned());
        lock_schedule(&shared).set_ready(Instant::now());
        assert!(!shared.schedule.is_poisoned(), "the poison is cleared once recovered");
        assert!(lock_schedule(&shared).is_ready(), "the state written after recovery is kept");
    }
}

//! Watch mode: one loop owns the trackers and the rules. Source messages feed the
//! trackers; the [`Schedule`] says when to sync; a sync commits the trackers, brings the
//! rulesets up to date (re-rendering only changed services) and syncs each family with
//! the kernel. SIGTERM/SIGINT stop the loop and leave the rules in place.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::schedule::Kind;
use crate::config::Config;
use crate::iptables::apply::Restorer;
use crate::iptables::render::{self, Context, Ruleset};
use crate::iptables::sync::{self, SyncError};
use crate::serve::metrics::{ResultLabel, TableLabel};
use crate::serve::SharedState;
use crate::source::watch::SourceMsg;
use crate::track::{Event, Trackers};

/// The trackers, the rendered rules and the kernel they are synced to.
pub struct Engine {
    pub config: Config,
    pub trackers: Trackers,
    pub rulesets: Vec<Ruleset>,
    pub restorer: Box<dyn Restorer + Send>,
}

impl Engine {
    pub fn new(config: Config, trackers: Trackers, restorer: Box<dyn Restorer + Send>) -> Self {
        let rulesets = trackers
            .families
            .iter()
            .map(|t| {
                let (s, e) = t.view();
                render::render(&Context::new(&config, t.family), s, e)
            })
            .collect();
        Engine { config, trackers, rulesets, restorer }
    }

    /// New node labels (topology): the rules depend on the zone, so every service is
    /// re-rendered. Returns whether anything changed.
    pub fn set_node_labels(&mut self, labels: std::collections::BTreeMap<String, String>) -> bool {
        if labels == self.config.node_labels {
            return false;
        }
        self.config.node_labels = labels;
        self.rulesets = self
            .trackers
            .families
            .iter()
            .map(|t| {
                let (s, e) = t.view();
                render::render(&Context::new(&self.config, t.family), s, e)
            })
            .collect();
        true
    }

    pub fn apply(&mut self, events: &[Event]) {
        for e in events {
            self.trackers.apply(e);
        }
    }

    /// (service changes, endpoint changes) waiting for a commit.
    pub fn pending(&self) -> (usize, usize) {
        self.trackers.families.iter().map(|t| (t.services.pending(), t.endpoints.pending())).fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
    }

    /// Commits the trackers, updates the rules and syncs every family with the kernel.
    pub fn sync(&mut self) -> Result<Vec<sync::SyncReport>, SyncError> {
        let changes = self.trackers.commit();
        let mut reports = Vec::new();
        for ((rs, t), ch) in self.rulesets.iter_mut().zip(&self.trackers.families).zip(&changes) {
            let (s, e) = t.view();
            rs.update(s, e, &ch.services);
        }
        for rs in &self.rulesets {
            reports.push(sync::sync(self.restorer.as_mut(), rs, false)?);
        }
        Ok(reports)
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Engine {
    /// Local endpoint counts per health-check node port, over all families.
    pub fn health_check_counts(&self) -> std::collections::BTreeMap<u16, (crate::model::NamespacedName, usize)> {
        let mut out = std::collections::BTreeMap::new();
        for t in &self.trackers.families {
            let (s, e) = t.view();
            for (port, (svc, n)) in crate::serve::healthcheck::local_counts(s, e) {
                let entry = out.entry(port).or_insert((svc, 0));
                entry.1 += n;
            }
        }
        out
    }
}

/// Runs until `shutdown` resolves or the sources end.
pub async fn run(engine: Engine, rx: mpsc::Receiver<SourceMsg>, shared: SharedState, shutdown: impl std::future::Future<Output = ()>) {
    run_with(engine, rx, shared, shutdown, None).await
}

/// [`run`], also serving the health-check node ports (bound to `health_bind`).
pub async fn run_with(
    mut engine: Engine,
    mut rx: mpsc::Receiver<SourceMsg>,
    shared: SharedState,
    shutdown: impl std::future::Future<Output = ()>,
    health_bind: Option<std::net::IpAddr>,
) {
    let mut health = crate::serve::healthcheck::HealthServers::new(health_bind);
    let serve_health = health_bind.is_some();
    tokio::pin!(shutdown);
    loop {
        let next = shared.schedule.lock().ok().and_then(|s| s.next());
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("stopping; the rules stay in place");
                return;
            }
            msg = rx.recv() => match msg {
                Some(m) => on_message(&mut engine, &shared, m),
                None => return,
            },
            _ = sleep => {
                sync_once(&mut engine, &shared);
                if serve_health {
                    health.update(engine.health_check_counts()).await;
                }
            }
        }
    }
}

fn on_message(engine: &mut Engine, shared: &SharedState, msg: SourceMsg) {
    let now = Instant::now();
    match msg {
        SourceMsg::Ready => {
            if let Ok(mut s) = shared.schedule.lock() {
                s.set_ready(now);
            }
        }
        SourceMsg::Malformed(list) => {
            for e in &list {
                tracing::warn!(error = %e, "skipped an object that cannot be read");
            }
            shared.metrics.malformed_objects.inc_by(list.len() as u64);
        }
        SourceMsg::Node { node, deleting } => {
            shared.node_deleting.store(deleting, std::sync::atomic::Ordering::SeqCst);
            if let Some(node) = node {
                if engine.set_node_labels(node.labels) {
                    tracing::info!("this node's labels changed: full re-render");
                    if let Ok(mut s) = shared.schedule.lock() {
                        s.changed(now);
                    }
                }
            }
        }
        SourceMsg::Events(events) => {
            let before = engine.pending();
            engine.apply(&events);
            let after = engine.pending();
            if after != before {
                shared.metrics.service_changes_total.inc_by(after.0.saturating_sub(before.0) as u64);
                shared.metrics.endpoint_changes_total.inc_by(after.1.saturating_sub(before.1) as u64);
                shared.metrics.service_changes_pending.set(after.0 as i64);
                shared.metrics.endpoint_changes_pending.set(after.1 as i64);
                shared.metrics.last_queued_timestamp.set(unix_now());
                if let Ok(mut s) = shared.schedule.lock() {
                    s.changed(now);
                }
            }
        }
    }
}

fn sync_once(engine: &mut Engine, shared: &SharedState) {
    let started = Instant::now();
    let (kind, queued) = match shared.schedule.lock() {
        Ok(mut s) => {
            let queued = s.pending_since();
            (s.begin(started), queued)
        }
        Err(_) => return,
    };
    let result = tokio::task::block_in_place(|| engine.sync());
    let finished = Instant::now();
    let secs = finished.duration_since(started).as_secs_f64();
    let m = &shared.metrics;
    m.sync_duration.observe(secs);
    let ok = match &result {
        Ok(reports) => {
            if kind == Kind::Full { m.full_sync_duration.observe(secs) } else { m.partial_sync_duration.observe(secs) }
            m.last_sync_timestamp.set(unix_now());
            if let Some(q) = queued {
                m.network_programming_duration.observe(finished.duration_since(q).as_secs_f64());
            }
            m.service_changes_pending.set(0);
            m.endpoint_changes_pending.set(0);
            record_rules(engine, shared);
            if let Ok(mut l) = shared.last_updated.lock() {
                *l = Some(SystemTime::now());
            }
            let sent: usize = reports.iter().map(|r| r.delta.restore_lines()).sum();
            tracing::info!(?kind, seconds = secs, restore_lines = sent, "synced");
            true
        }
        Err(e) => {
            m.restore_failures.inc();
            if kind == Kind::Partial {
                m.partial_restore_failures.inc();
            }
            tracing::error!(error = %e, "sync failed; the rules in place were kept; retrying");
            false
        }
    };
    m.syncs.get_or_create(&ResultLabel { result: if ok { "success" } else { "error" }.into() }).inc();
    if let Ok(mut s) = shared.schedule.lock() {
        s.done(started, finished, kind, ok);
    }
}

fn record_rules(engine: &Engine, shared: &SharedState) {
    let (mut filter, mut nat) = (0usize, 0usize);
    for rs in &engine.rulesets {
        for r in rs.services.values() {
            filter += r.filter.len();
            nat += r.nat_top.len() + r.chain_rules.len();
        }
    }
    shared.metrics.rules.get_or_create(&TableLabel { table: "filter".into() }).set(filter as i64);
    shared.metrics.rules.get_or_create(&TableLabel { table: "nat".into() }).set(nat as i64);
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

pub type Shared = Arc<crate::serve::Shared>;

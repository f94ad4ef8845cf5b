//! kube-proxy's Events, posted as client-go's events.k8s.io/v1 broadcaster posts them
//! (`events.NewBroadcaster` over `EventsV1()`, recorder `kube-proxy`): each one a
//! `POST /apis/events.k8s.io/v1/namespaces/<ns>/events` through the same client as the
//! watches (so the rate limit and `rest_client_*` metrics see it), named
//! `<object>.<nanoseconds in hex>`, regarding this Node (`{apiVersion: v1, kind: Node, name}`,
//! namespace `default`) or a Service, reported by `kube-proxy` instance `kube-proxy-<hostname>`.
//!
//! Best effort, never in the way of syncing: [`Recorder::record`] builds the object and
//! queues it without waiting (a full queue of [`QUEUE`] drops it, as client-go's broadcaster
//! does); one task keeps client-go's cache of recent Events and posts each on a task of its
//! own. An Event isomorphic to one in the cache (same type, action, reason, reporter and
//! object: [`Key`]) becomes a series, as client-go makes it: the second PATCHes
//! `series.count` 2, later ones only count, until the 30-minute refresh or the end of the
//! series (6 minutes without one) PATCHes the count; an Event alone leaves the cache after
//! 6 minutes. A transport error is retried every 10 s (+ up to 25 %), [`MAX_TRIES`] times in
//! all; an answer from the API server (a refusal included) is final. Every outcome is logged
//! and counted (`svcproxy_events_total{result}`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, Notify};

/// The recorder's name, kube-proxy's (`reportingController`, and the instance's prefix).
pub const REPORTING_CONTROLLER: &str = "kube-proxy";
/// The action of every Event kube-proxy records on its Node.
pub const ACTION_START: &str = "StartKubeProxy";
/// client-go's broadcaster queue: Events beyond it are dropped.
pub const QUEUE: usize = 1000;
/// client-go's `maxTriesPerEvent`.
pub const MAX_TRIES: u32 = 12;
/// The namespace of Events about cluster-scoped objects.
const NAMESPACE: &str = "default";

/// client-go's clocks of the poster.
#[derive(Clone, Copy, Debug)]
pub struct Clocks {
    /// Between tries (jittered by up to a quarter): 10 s.
    pub retry_sleep: Duration,
    /// How often series are checked for their end, and how long a series must be quiet (or
    /// an Event alone old) to leave the cache: 6 minutes (`finishTime`).
    pub finish: Duration,
    /// How often the running series' counts are written: 30 minutes (`refreshTime`).
    pub refresh: Duration,
}

impl Default for Clocks {
    fn default() -> Self {
        Clocks { retry_sleep: Duration::from_secs(10), finish: Duration::from_secs(6 * 60), refresh: Duration::from_secs(30 * 60) }
    }
}

/// An Event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Normal => "Normal",
            Kind::Warning => "Warning",
        }
    }
}

/// What an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Regarding {
    /// This node (the recorder's).
    Node,
    /// A Service, by namespace and name.
    Service { namespace: String, name: String },
}

/// One of kube-proxy's Events, before it is an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyEvent {
    pub regarding: Regarding,
    pub kind: Kind,
    pub reason: &'static str,
    pub action: &'static str,
    /// Empty: no note (the field is omitted, as Go's `omitempty` omits it).
    pub note: String,
}

impl ProxyEvent {
    /// kube-proxy's "birth cry", once it runs: `Normal`, `Starting`, no note.
    pub fn starting() -> Self {
        ProxyEvent { regarding: Regarding::Node, kind: Kind::Normal, reason: "Starting", action: ACTION_START, note: String::new() }
    }

    /// The healthz server cannot listen and `bindAddressHardFail` is set (the process then
    /// exits): the note as kube-proxy words it around the listen error.
    pub fn healthz_failed(addr: std::net::SocketAddr, error: &std::io::Error) -> Self {
        let note = format!("healthz server failed: failed to start proxy healthz on {addr}: {}", listen_error(addr, error));
        ProxyEvent { regarding: Regarding::Node, kind: Kind::Warning, reason: "FailedToStartProxierHealthcheck", action: ACTION_START, note }
    }

    /// The metrics server cannot listen and `bindAddressHardFail` is set.
    pub fn metrics_failed(addr: std::net::SocketAddr, error: &std::io::Error) -> Self {
        let note = format!("starting metrics server failed: {}", listen_error(addr, error));
        ProxyEvent { regarding: Regarding::Node, kind: Kind::Warning, reason: "FailedToStartMetricServer", action: ACTION_START, note }
    }

    /// A health-check node port that cannot listen (kube-proxy's `SyncServices`; again each
    /// sync it stays so, which makes a series): about the Service, action `Listen`.
    pub fn service_health_check_failed(node: &str, namespace: &str, name: &str, addr: std::net::SocketAddr, error: &std::io::Error) -> Self {
        let note = format!("node {node} failed to start healthcheck \"{namespace}/{name}\" on port {}: {}", addr.port(), listen_error(addr, error));
        ProxyEvent {
            regarding: Regarding::Service { namespace: namespace.into(), name: name.into() },
            kind: Kind::Warning,
            reason: "FailedToStartServiceHealthcheck",
            action: "Listen",
            note,
        }
    }
}

/// A listen error in Go's words (`listen tcp 0.0.0.0:10256: bind: address already in use`):
/// the system's message with Go's lower-case first letter and without Rust's `(os error N)`.
fn listen_error(addr: std::net::SocketAddr, error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    let lower: String = chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default();
    format!("listen tcp {addr}: bind: {lower}")
}

/// Who reports, about what: this node's name, and the reporting instance
/// (`kube-proxy-<hostname>`, the host's name as `os.Hostname()` gives it, not the node's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub node: String,
    pub instance: String,
}

impl Source {
    pub fn on_this_host(node: &str) -> Self {
        Source { node: node.to_string(), instance: format!("{REPORTING_CONTROLLER}-{}", hostname()) }
    }
}

/// The host's name as Go's `os.Hostname` reads it on Linux (`/proc/sys/kernel/hostname`),
/// empty if it cannot be read.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The object posted for `event`, recorded at `at` (client-go's `makeEvent`).
pub fn object(source: &Source, event: &ProxyEvent, at: jiff::Timestamp) -> Event {
    let nanos = at.as_nanosecond();
    let regarding = match &event.regarding {
        Regarding::Node => ObjectReference { api_version: Some("v1".into()), kind: Some("Node".into()), name: Some(source.node.clone()), ..ObjectReference::default() },
        Regarding::Service { namespace, name } => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            ..ObjectReference::default()
        },
    };
    let namespace = regarding.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| NAMESPACE.into());
    let name = regarding.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta { name: Some(format!("{name}.{nanos:x}")), namespace: Some(namespace), ..ObjectMeta::default() },
        event_time: Some(MicroTime(at)),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(source.instance.clone()),
        action: Some(event.action.into()),
        reason: Some(event.reason.into()),
        regarding: Some(regarding),
        note: (!event.note.is_empty()).then(|| event.note.clone()),
        type_: Some(event.kind.as_str().into()),
        ..Event::default()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub result: String,
}

/// How the recorded Events ended: `posted` (written: created, or a series patched),
/// `series` (counted in a running series, written later), `rejected` (the API server refused
/// it), `failed` (no answer after [`MAX_TRIES`]), `dropped` (the queue was full).
#[derive(Clone, Debug, Default)]
pub struct EventMetrics {
    pub outcomes: Family<OutcomeLabel, Counter>,
}

impl EventMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register("svcproxy_events", "Events recorded and their series' writes, by result (posted, series, rejected, failed, dropped)", self.outcomes.clone());
    }

    fn count(&self, result: &str) {
        self.outcomes.get_or_create(&OutcomeLabel { result: result.into() }).inc();
    }

    /// How many ended with `result` (no series is made by asking).
    pub fn get(&self, result: &str) -> u64 {
        self.outcomes.get(&OutcomeLabel { result: result.into() }).map_or(0, |c| c.get())
    }
}

/// Events queued or being posted, and a wake-up when that falls to none.
#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

impl Pending {
    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// Records Events (cheap to clone; every clone feeds the same poster).
#[derive(Clone)]
pub struct Recorder {
    source: Arc<Source>,
    tx: mpsc::Sender<Event>,
    pending: Arc<Pending>,
    metrics: EventMetrics,
}

impl Recorder {
    /// A recorder posting through `client` for node `node` on this host. Needs a tokio runtime.
    pub fn start(client: kube::Client, node: &str, metrics: EventMetrics) -> Recorder {
        Recorder::start_with(client, Source::on_this_host(node), metrics, Clocks::default())
    }

    /// [`start`](Self::start) with the source and the clocks given (tests).
    pub fn start_with(client: kube::Client, source: Source, metrics: EventMetrics, clocks: Clocks) -> Recorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        let pending = Arc::new(Pending::default());
        tokio::spawn(keep(rx, client, pending.clone(), metrics.clone(), clocks));
        Recorder { source: Arc::new(source), tx, pending, metrics }
    }

    /// This node's name, as the Events say it.
    pub fn node(&self) -> &str {
        &self.source.node
    }

    /// Queues `event`, stamped now; never waits.
    pub fn record(&self, event: ProxyEvent) {
        let object = object(&self.source, &event, jiff::Timestamp::now());
        self.pending.count.fetch_add(1, Ordering::SeqCst);
        if self.tx.try_send(object).is_err() {
            self.pending.done();
            self.metrics.count("dropped");
            tracing::warn!(reason = event.reason, "an Event was dropped: too many are waiting to be posted");
        }
    }

    /// Waits until every Event recorded so far is posted, counted in a series or given up,
    /// or `within` passes (before an exit). True if none is left.
    pub async fn flush(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.pending.idle.notified();
                if self.pending.count.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

/// client-go's `eventKey`: Events alike in all of this are one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    kind: Option<String>,
    action: Option<String>,
    reason: Option<String>,
    controller: Option<String>,
    instance: Option<String>,
    regarding: [Option<String>; 4],
}

fn key(e: &Event) -> Key {
    let r = e.regarding.clone().unwrap_or_default();
    Key {
        kind: e.type_.clone(),
        action: e.action.clone(),
        reason: e.reason.clone(),
        controller: e.reporting_controller.clone(),
        instance: e.reporting_instance.clone(),
        regarding: [r.api_version, r.kind, r.namespace, r.name],
    }
}

/// client-go's cache of recent Events (`eventCache`), pure: the clock is passed in.
#[derive(Default)]
pub struct Cache {
    entries: HashMap<Key, Event>,
}

impl Cache {
    /// `recordToSink`'s choice for a new Event at `now`: the object to write (a new Event to
    /// create, or its series to PATCH), or none when a running series only counts it.
    pub fn observe(&mut self, event: Event, now: jiff::Timestamp) -> Option<Event> {
        let k = key(&event);
        if let Some(cached) = self.entries.get_mut(&k) {
            if let Some(series) = &mut cached.series {
                series.count += 1;
                series.last_observed_time = MicroTime(now);
                return None;
            }
            cached.series = Some(EventSeries { count: 2, last_observed_time: MicroTime(now) });
            return Some(cached.clone());
        }
        self.entries.insert(k, event.clone());
        Some(event)
    }

    /// `refreshExistingEventSeries`: every running series, to write its count again.
    pub fn refresh(&self) -> Vec<Event> {
        self.entries.values().filter(|e| e.series.is_some()).cloned().collect()
    }

    /// `finishSeries` at `now`: the series quiet for `finish` leave the cache and are written
    /// one last time (returned); Events alone older than `finish` leave it unwritten.
    pub fn finish(&mut self, now: jiff::Timestamp, finish: Duration) -> Vec<Event> {
        let before = now - jiff::SignedDuration::try_from(finish).unwrap_or(jiff::SignedDuration::MAX);
        let mut done = Vec::new();
        self.entries.retain(|_, e| {
            let last = match &e.series {
                Some(s) => s.last_observed_time.0,
                None => e.event_time.as_ref().map_or(now, |t| t.0),
            };
            if last >= before {
                return true;
            }
            if e.series.is_some() {
                done.push(e.clone());
            }
            false
        });
        done
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The poster: keeps the cache, writes what it says, each write on a task of its own so one
/// being retried holds up no other.
async fn keep(mut rx: mpsc::Receiver<Event>, client: kube::Client, pending: Arc<Pending>, metrics: EventMetrics, clocks: Clocks) {
    let mut cache = Cache::default();
    let start = tokio::time::Instant::now();
    let mut finish = tokio::time::interval_at(start + clocks.finish, clocks.finish);
    let mut refresh = tokio::time::interval_at(start + clocks.refresh, clocks.refresh);
    let write = |event: Event, pending: &Arc<Pending>| {
        let (client, pending, metrics) = (client.clone(), pending.clone(), metrics.clone());
        tokio::spawn(async move {
            metrics.count(write_one(client, event, clocks.retry_sleep).await);
            pending.done();
        });
    };
    loop {
        tokio::select! {
            event = rx.recv() => {
                let Some(event) = event else { return };
                match cache.observe(event, jiff::Timestamp::now()) {
                    Some(e) => write(e, &pending),
                    None => {
                        metrics.count("series");
                        pending.done();
                    }
                }
            }
            _ = finish.tick() => {
                for e in cache.finish(jiff::Timestamp::now(), clocks.finish) {
                    pending.count.fetch_add(1, Ordering::SeqCst);
                    write(e, &pending);
                }
            }
            _ = refresh.tick() => {
                for e in cache.refresh() {
                    pending.count.fetch_add(1, Ordering::SeqCst);
                    write(e, &pending);
                }
            }
        }
    }
}

/// The strategic merge patch of a series (client-go's two-way patch of the Event without and
/// with its series holds only that).
fn series_patch(event: &Event) -> serde_json::Value {
    serde_json::json!({"series": event.series})
}

/// One write's tries (`recordEvent`, retried by `attemptRecording`); the outcome's label.
async fn write_one(client: kube::Client, mut event: Event, retry_sleep: Duration) -> &'static str {
    let namespace = event.metadata.namespace.clone().unwrap_or_else(|| NAMESPACE.into());
    let api: Api<Event> = Api::namespaced(client, &namespace);
    let name = event.metadata.name.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    for attempt in 1..=MAX_TRIES {
        let series = event.series.is_some();
        let result = if series { api.patch(&name, &PatchParams::default(), &Patch::Strategic(series_patch(&event))).await.map(|_| ()) } else { create(&api, &mut event).await };
        // A series whose Event the server no longer has is created again.
        let result = match result {
            Err(kube::Error::Api(s)) if series && s.is_not_found() => create(&api, &mut event).await,
            r => r,
        };
        match result {
            Ok(()) => {
                tracing::debug!(reason, series, "wrote an Event");
                return "posted";
            }
            // Created meanwhile by an earlier write of this series: try again, as client-go does.
            Err(kube::Error::Api(s)) if s.is_already_exists() && series => {}
            Err(kube::Error::Api(status)) => {
                // An answer will be the same next time: client-go does not retry it either.
                if status.is_already_exists() {
                    tracing::debug!(reason, "the API server already has this Event");
                } else {
                    tracing::warn!(reason, error = %status, "the API server refused an Event (not retried)");
                }
                return "rejected";
            }
            Err(e) if attempt == MAX_TRIES => {
                tracing::warn!(reason, error = %e, tries = MAX_TRIES, "cannot write an Event; giving up");
                return "failed";
            }
            Err(e) => tracing::info!(reason, error = %e, attempt, "cannot write an Event; retrying"),
        }
        if attempt == MAX_TRIES {
            break;
        }
        tokio::time::sleep(jittered(retry_sleep)).await;
    }
    "failed"
}

/// Creates `event` (with no resourceVersion, as client-go clears it).
async fn create(api: &Api<Event>, event: &mut Event) -> Result<(), kube::Error> {
    event.metadata.resource_version = None;
    api.create(&PostParams::default(), event).await.map(|_| ())
}

/// `d` plus up to a quarter of it (`wait.Jitter(d, 0.25)`): only to keep many nodes from
/// retrying in step.
fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(super::apiserver::jitter() * 0.25)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source { node: "node-1".into(), instance: "kube-proxy-host-1".into() }
    }

    #[test]
    fn the_birth_cry_is_kube_proxys_object() {
        let at: jiff::Timestamp = "2026-11-29T06:30:00.123456789Z".parse().unwrap();
        let v = serde_json::to_value(object(&source(), &ProxyEvent::starting(), at)).unwrap();
        assert_eq!(v["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["metadata"]["name"], format!("node-1.{:x}", at.as_nanosecond()));
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["eventTime"], "2026-11-29T06:30:00.123456Z", "MicroTime: microseconds");
        assert_eq!((v["type"].as_str(), v["reason"].as_str(), v["action"].as_str()), (Some("Normal"), Some("Starting"), Some("StartKubeProxy")));
        assert_eq!((v["reportingController"].as_str(), v["reportingInstance"].as_str()), (Some("kube-proxy"), Some("kube-proxy-host-1")));
        assert_eq!(v["regarding"], serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "node-1"}), "no UID: the Node's is not known");
        assert!(v.get("note").is_none() && v.get("series").is_none() && v.get("related").is_none(), "{v}");
    }

    #[test]
    fn a_server_that_cannot_listen_is_worded_as_kube_proxy_words_it() {
        let addr: std::net::SocketAddr = "0.0.0.0:10256".parse().unwrap();
        let e = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let h = ProxyEvent::healthz_failed(addr, &e);
        assert_eq!((h.kind, h.reason), (Kind::Warning, "FailedToStartProxierHealthcheck"));
        assert_eq!(h.note, "healthz server failed: failed to start proxy healthz on 0.0.0.0:10256: listen tcp 0.0.0.0:10256: bind: address already in use");
        let m = ProxyEvent::metrics_failed("127.0.0.1:10249".parse().unwrap(), &e);
        assert_eq!((m.reason, m.action), ("FailedToStartMetricServer", "StartKubeProxy"));
        assert_eq!(m.note, "starting metrics server failed: listen tcp 127.0.0.1:10249: bind: address already in use");
    }

    #[test]
    fn the_instance_is_the_hosts_name() {
        let s = Source::on_this_host("n1");
        assert!(s.instance.starts_with("kube-proxy-") && s.instance.len() > "kube-proxy-".len(), "{}", s.instance);
        assert_eq!(s.node, "n1");
    }

    #[test]
    fn a_health_check_port_event_is_about_its_service() {
        let e = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let ev = ProxyEvent::service_health_check_failed("node-1", "app", "web", "0.0.0.0:30100".parse().unwrap(), &e);
        let at: jiff::Timestamp = "2026-11-29T06:30:00Z".parse().unwrap();
        let v = serde_json::to_value(object(&source(), &ev, at)).unwrap();
        assert_eq!(v["metadata"]["namespace"], "app", "an Event lives in its object's namespace");
        assert!(v["metadata"]["name"].as_str().unwrap().starts_with("web."), "{v}");
        assert_eq!(v["regarding"], serde_json::json!({"apiVersion": "v1", "kind": "Service", "namespace": "app", "name": "web"}));
        assert_eq!((v["type"].as_str(), v["reason"].as_str(), v["action"].as_str()), (Some("Warning"), Some("FailedToStartServiceHealthcheck"), Some("Listen")));
        assert_eq!(v["note"], "node node-1 failed to start healthcheck \"app/web\" on port 30100: listen tcp 0.0.0.0:30100: bind: address already in use");
    }

    #[test]
    fn isomorphic_events_become_a_series_as_client_go_makes_it() {
        let t = |s: u64| jiff::Timestamp::from_second(1_800_000_000 + s as i64).unwrap();
        let e = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let failed = |port| ProxyEvent::service_health_check_failed("node-1", "app", "web", std::net::SocketAddr::from(([0, 0, 0, 0], port)), &e);
        let mut cache = Cache::default();
        let first = cache.observe(object(&source(), &failed(30100), t(0)), t(0)).expect("a new Event is created");
        assert!(first.series.is_none());
        // Another note, same key: the second makes the series, written at once with count 2.
        let second = cache.observe(object(&source(), &failed(30101), t(10)), t(10)).expect("the series is written");
        assert_eq!(second.metadata.name, first.metadata.name, "the first Event's object is patched");
        assert_eq!(second.series.as_ref().map(|s| (s.count, s.last_observed_time.0)), Some((2, t(10))));
        assert_eq!(serde_json::to_value(series_patch(&second)).unwrap()["series"]["count"], 2);
        assert!(cache.observe(object(&source(), &failed(30100), t(20)), t(20)).is_none(), "the third only counts");
        assert!(cache.observe(object(&source(), &failed(30100), t(30)), t(30)).is_none());
        // Another reason or object is another Event.
        assert!(cache.observe(object(&source(), &ProxyEvent::starting(), t(31)), t(31)).is_some());
        assert_eq!(cache.refresh().iter().map(|e| e.series.as_ref().map(|s| s.count)).collect::<Vec<_>>(), vec![Some(4)]);
        let six = Duration::from_secs(360);
        assert!(cache.finish(t(30 + 360), six).is_empty() && cache.len() == 2, "quiet for exactly 6 minutes: not yet ended");
        let done = cache.finish(t(31 + 360), six);
        assert_eq!(done.iter().map(|e| e.series.as_ref().map(|s| s.count)).collect::<Vec<_>>(), vec![Some(4)], "the ended series is written once more");
        assert_eq!(cache.len(), 1, "the Starting Event, alone, stays until it is 6 minutes old");
        assert!(cache.finish(t(32 + 360), six).is_empty() && cache.is_empty(), "an Event alone leaves unwritten");
        assert!(cache.observe(object(&source(), &failed(30100), t(400)), t(400)).is_some_and(|e| e.series.is_none()), "after the series ended, a new Event");
    }

    #[test]
    fn jitter_adds_at_most_a_quarter() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(10));
            assert!(j >= Duration::from_secs(10) && j <= Duration::from_millis(12_500), "{j:?}");
        }
    }
}

//! kube-proxy's Events on its Node, posted as client-go's events.k8s.io/v1 broadcaster posts
//! them (`events.NewBroadcaster` over `EventsV1()`, recorder `kube-proxy`): each one a
//! `POST /apis/events.k8s.io/v1/namespaces/default/events` through the same client as the
//! watches (so the rate limit and `rest_client_*` metrics see it), named
//! `<node>.<nanoseconds in hex>`, regarding `{apiVersion: v1, kind: Node, name: <node>}`,
//! reported by `kube-proxy` instance `kube-proxy-<hostname>`.
//!
//! Best effort, never in the way of syncing: [`Recorder::record`] builds the object and
//! queues it without waiting (a full queue of [`QUEUE`] drops it, as client-go's broadcaster
//! does); a task posts each on its own. A transport error is retried every 10 s (+ up to
//! 25 %), [`MAX_TRIES`] times in all; an answer from the API server (a refusal included) is
//! final. Every outcome is logged and counted (`svcproxy_events_total{result}`).
//! svcproxy records each reason at most once per process, so client-go's series (an
//! isomorphic Event again within 6 minutes PATCHes a count) never arise and are not built.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
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
/// client-go's sleep between tries (jittered by up to a quarter).
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// The namespace of Events about cluster-scoped objects.
const NAMESPACE: &str = "default";

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

/// One Event about this node, before it is an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub kind: Kind,
    pub reason: &'static str,
    pub action: &'static str,
    /// Empty: no note (the field is omitted, as Go's `omitempty` omits it).
    pub note: String,
}

impl NodeEvent {
    /// kube-proxy's "birth cry", once it runs: `Normal`, `Starting`, no note.
    pub fn starting() -> Self {
        NodeEvent { kind: Kind::Normal, reason: "Starting", action: ACTION_START, note: String::new() }
    }

    /// The healthz server cannot listen and `bindAddressHardFail` is set (the process then
    /// exits): the note as kube-proxy words it around the listen error.
    pub fn healthz_failed(addr: std::net::SocketAddr, error: &std::io::Error) -> Self {
        let note = format!("healthz server failed: failed to start proxy healthz on {addr}: {}", listen_error(addr, error));
        NodeEvent { kind: Kind::Warning, reason: "FailedToStartProxierHealthcheck", action: ACTION_START, note }
    }

    /// The metrics server cannot listen and `bindAddressHardFail` is set.
    pub fn metrics_failed(addr: std::net::SocketAddr, error: &std::io::Error) -> Self {
        let note = format!("starting metrics server failed: {}", listen_error(addr, error));
        NodeEvent { kind: Kind::Warning, reason: "FailedToStartMetricServer", action: ACTION_START, note }
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
pub fn object(source: &Source, event: &NodeEvent, at: jiff::Timestamp) -> Event {
    let nanos = at.as_nanosecond();
    Event {
        metadata: ObjectMeta { name: Some(format!("{}.{nanos:x}", source.node)), namespace: Some(NAMESPACE.into()), ..ObjectMeta::default() },
        event_time: Some(MicroTime(at)),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(source.instance.clone()),
        action: Some(event.action.into()),
        reason: Some(event.reason.into()),
        regarding: Some(ObjectReference { api_version: Some("v1".into()), kind: Some("Node".into()), name: Some(source.node.clone()), ..ObjectReference::default() }),
        note: (!event.note.is_empty()).then(|| event.note.clone()),
        type_: Some(event.kind.as_str().into()),
        ..Event::default()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub result: String,
}

/// How the recorded Events ended: `posted`, `rejected` (the API server refused it),
/// `failed` (no answer after [`MAX_TRIES`]), `dropped` (the queue was full).
#[derive(Clone, Debug, Default)]
pub struct EventMetrics {
    pub outcomes: Family<OutcomeLabel, Counter>,
}

impl EventMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register("svcproxy_events", "Events about this node svcproxy recorded, by result (posted, rejected, failed, dropped)", self.outcomes.clone());
    }

    fn count(&self, result: &str) {
        self.outcomes.get_or_create(&OutcomeLabel { result: result.into() }).inc();
    }

    /// How many ended with `result`.
    pub fn get(&self, result: &str) -> u64 {
        self.outcomes.get_or_create(&OutcomeLabel { result: result.into() }).get()
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

/// Records Events about this node (cheap to clone; every clone feeds the same poster).
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
        Recorder::start_with(client, Source::on_this_host(node), metrics, RETRY_SLEEP)
    }

    /// [`start`](Self::start) with the source and the sleep between tries given (tests).
    pub fn start_with(client: kube::Client, source: Source, metrics: EventMetrics, retry_sleep: Duration) -> Recorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        let pending = Arc::new(Pending::default());
        let api: Api<Event> = Api::namespaced(client, NAMESPACE);
        tokio::spawn(post_all(rx, api, pending.clone(), metrics.clone(), retry_sleep));
        Recorder { source: Arc::new(source), tx, pending, metrics }
    }

    /// Queues `event`, stamped now; never waits.
    pub fn record(&self, event: NodeEvent) {
        let object = object(&self.source, &event, jiff::Timestamp::now());
        self.pending.count.fetch_add(1, Ordering::SeqCst);
        if self.tx.try_send(object).is_err() {
            self.pending.done();
            self.metrics.count("dropped");
            tracing::warn!(reason = event.reason, "an Event was dropped: too many are waiting to be posted");
        }
    }

    /// Waits until every Event recorded so far is posted or given up, or `within` passes
    /// (before an exit). True if none is left.
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

/// Posts each queued Event on its own task, so one being retried holds up no other.
async fn post_all(mut rx: mpsc::Receiver<Event>, api: Api<Event>, pending: Arc<Pending>, metrics: EventMetrics, retry_sleep: Duration) {
    while let Some(event) = rx.recv().await {
        let (api, pending, metrics) = (api.clone(), pending.clone(), metrics.clone());
        tokio::spawn(async move {
            let result = post_one(&api, &event, retry_sleep).await;
            metrics.count(result);
            pending.done();
        });
    }
}

/// One Event's tries; the outcome's label.
async fn post_one(api: &Api<Event>, event: &Event, retry_sleep: Duration) -> &'static str {
    let reason = event.reason.as_deref().unwrap_or_default();
    for attempt in 1..=MAX_TRIES {
        match api.create(&PostParams::default(), event).await {
            Ok(_) => {
                tracing::debug!(reason, "posted an Event");
                return "posted";
            }
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
                tracing::warn!(reason, error = %e, tries = MAX_TRIES, "cannot post an Event; giving up");
                return "failed";
            }
            Err(e) => {
                tracing::info!(reason, error = %e, attempt, "cannot post an Event; retrying");
                tokio::time::sleep(jittered(retry_sleep)).await;
            }
        }
    }
    "failed"
}

/// `d` plus up to a quarter of it (`wait.Jitter(d, 0.25)`), from the clock's nanoseconds:
/// only to keep many nodes from retrying in step.
fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(nanos % 1000) / 1000.0 * 0.25)
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
        let v = serde_json::to_value(object(&source(), &NodeEvent::starting(), at)).unwrap();
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
        let h = NodeEvent::healthz_failed(addr, &e);
        assert_eq!((h.kind, h.reason), (Kind::Warning, "FailedToStartProxierHealthcheck"));
        assert_eq!(h.note, "healthz server failed: failed to start proxy healthz on 0.0.0.0:10256: listen tcp 0.0.0.0:10256: bind: address already in use");
        let m = NodeEvent::metrics_failed("127.0.0.1:10249".parse().unwrap(), &e);
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
    fn jitter_adds_at_most_a_quarter() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(10));
            assert!(j >= Duration::from_secs(10) && j <= Duration::from_millis(12_500), "{j:?}");
        }
    }
}

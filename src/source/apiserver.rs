//! The API server as a source: kube-rs watchers on Services and EndpointSlices with
//! kube-proxy's label selectors (objects labelled `service.kubernetes.io/headless`, or with
//! a `service.kubernetes.io/service-proxy-name` other than ours, are never seen), turned
//! into the same events as the file source.
//!
//! Objects are read as raw JSON ([`Raw`]) and decoded one by one, so an object that does
//! not decode (a wrong-typed field, even in its metadata) is skipped and reported — once per object
//! version (namespace/name/resourceVersion) — while every other object keeps flowing,
//! on watches and relists alike. A skipped update keeps the object's last good version.
//!
//! A (re)list — at start, after a dropped watch or a `410 Gone` — is applied as a
//! difference: objects the new list lacks are deleted, the others re-applied (the trackers
//! drop what did not change), so no rule vanishes during a relist. Ready is sent once both
//! kinds have listed. Errors are retried with client-go's reflector backoff ([`Backoff`]).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::runtime::watcher::{self, Event as WEvent};
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::convert;
use super::error::FieldError;
use super::watch::SourceMsg;
use super::{LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME};
use crate::model::{EndpointSlice, NamespacedName, Service};
use crate::track::Event;
use serde::Deserialize;
use serde_json::Value;

/// Every API call svcproxy makes, as RBAC sees it: (API group, resource, verb). The
/// ClusterRole in deploy/ must grant exactly these (tests/deploy.rs checks it).
pub const API_CALLS: [(&str, &str, &str); 11] = [
    ("", "services", "list"),
    ("", "services", "watch"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    // `sync --watch` reads this node's Node at start (src/cli/watch.rs), then watches it.
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    // The cluster's ServiceCIDRs (nftables mode's drop rule), as kube-proxy's informer.
    ("networking.k8s.io", "servicecidrs", "list"),
    ("networking.k8s.io", "servicecidrs", "watch"),
    // kube-proxy's Events (`source::events`): created, and a series' count patched.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// kube-proxy's informer selector, or the one owning `proxy_name`'s objects.
pub fn label_selector(proxy_name: Option<&str>) -> String {
    match proxy_name {
        Some(name) => format!("{LABEL_SERVICE_PROXY_NAME}={name},!{LABEL_HEADLESS}"),
        None => format!("!{LABEL_SERVICE_PROXY_NAME},!{LABEL_HEADLESS}"),
    }
}

/// One object as the server sent it: its JSON, and the name, namespace and
/// resourceVersion read from its metadata (a field of another type reads as absent), so
/// that no object can fail a whole list or watch. The JSON is decoded into its kube type
/// only when the object is used ([`decode`]), without a copy.
#[derive(Clone, Debug)]
pub struct Raw {
    metadata: ObjectMeta,
    value: Value,
}

/// The identifying fields of an object's metadata.
#[derive(serde::Deserialize, Default)]
struct Ids {
    #[serde(default, deserialize_with = "text_or_none")]
    name: Option<String>,
    #[serde(default, deserialize_with = "text_or_none")]
    namespace: Option<String>,
    #[serde(default, rename = "resourceVersion", deserialize_with = "text_or_none")]
    resource_version: Option<String>,
}

fn text_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

impl<'de> serde::Deserialize<'de> for Raw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let ids = Ids::deserialize(&value["metadata"]).unwrap_or_default();
        let metadata = ObjectMeta { name: ids.name, namespace: ids.namespace, resource_version: ids.resource_version, ..ObjectMeta::default() };
        Ok(Raw { metadata, value })
    }
}

impl kube::Resource for Raw {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An object kept under its own name: a set of these is a map by name that holds no
/// second copy of each name (at 50,000 services, 100,000 names).
struct ById<T>(Arc<T>);

impl<T: Kind> Borrow<NamespacedName> for ById<T> {
    fn borrow(&self) -> &NamespacedName {
        self.0.id()
    }
}

impl<T: Kind> PartialEq for ById<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.id() == other.0.id()
    }
}

impl<T: Kind> Eq for ById<T> {}

impl<T: Kind> PartialOrd for ById<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Kind> Ord for ById<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.id().cmp(other.0.id())
    }
}

/// One kind's objects as last listed or watched, to turn relists into differences.
struct Known<T> {
    current: BTreeSet<ById<T>>,
    relist: Option<BTreeSet<ById<T>>>,
    /// Objects whose latest version did not decode: the resourceVersion reported.
    bad: BTreeMap<NamespacedName, String>,
    /// Undecodable objects seen in the relist under way.
    relist_bad: BTreeSet<NamespacedName>,
    listed: bool,
}

/// How one kind's objects become events.
trait Kind: Sized {
    type Kube: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>;
    const KIND: &'static str;
    fn convert(obj: &Self::Kube) -> Result<Option<Self>, FieldError>;
    fn id(&self) -> &NamespacedName;
    fn applied(obj: Arc<Self>) -> Event;
    fn deleted(obj: Arc<Self>) -> Event;
    /// The identity of a raw object of this kind (a cluster-scoped kind has no namespace).
    fn id_of(meta: &ObjectMeta) -> NamespacedName {
        convert::object_id(meta)
    }
    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self::Kube>(&())
    }
}

impl Kind for Service {
    type Kube = core::Service;
    const KIND: &'static str = "Service";
    fn convert(obj: &core::Service) -> Result<Option<Self>, FieldError> {
        convert::service(obj).map(Some)
    }
    fn id(&self) -> &NamespacedName {
        &self.id
    }
    fn applied(obj: Arc<Self>) -> Event {
        Event::ServiceApplied(obj)
    }
    fn deleted(obj: Arc<Self>) -> Event {
        Event::ServiceDeleted(obj.id.clone())
    }
}

impl Kind for EndpointSlice {
    type Kube = discovery::EndpointSlice;
    const KIND: &'static str = "EndpointSlice";
    fn convert(obj: &discovery::EndpointSlice) -> Result<Option<Self>, FieldError> {
        let mut skips = Vec::new();
        convert::endpoint_slice(obj, &mut skips)
    }
    fn id(&self) -> &NamespacedName {
        &self.id
    }
    fn applied(obj: Arc<Self>) -> Event {
        Event::SliceApplied(obj)
    }
    fn deleted(obj: Arc<Self>) -> Event {
        Event::SliceDeleted(obj)
    }
}

impl Kind for crate::model::ServiceCidr {
    type Kube = k8s_openapi::api::networking::v1::ServiceCIDR;
    const KIND: &'static str = "ServiceCIDR";
    fn convert(obj: &Self::Kube) -> Result<Option<Self>, FieldError> {
        convert::service_cidr(obj).map(Some)
    }
    fn id(&self) -> &NamespacedName {
        &self.id
    }
    fn id_of(meta: &ObjectMeta) -> NamespacedName {
        NamespacedName::new(String::new(), meta.name.clone().unwrap_or_default())
    }
    fn applied(obj: Arc<Self>) -> Event {
        Event::ServiceCidrApplied(obj)
    }
    fn deleted(obj: Arc<Self>) -> Event {
        Event::ServiceCidrDeleted(obj)
    }
}

impl<T> Default for Known<T> {
    fn default() -> Self {
        Known { current: BTreeSet::new(), relist: None, bad: BTreeMap::new(), relist_bad: BTreeSet::new(), listed: false }
    }
}

/// Why one raw object cannot be used: "KIND NAMESPACE/NAME (resourceVersion RV): field PATH: REASON".
fn decode<T: Kind>(raw: &Raw) -> Result<Option<T>, String> {
    let id = T::id_of(&raw.metadata);
    let rv = raw.metadata.resource_version.as_deref().unwrap_or("");
    let what = |field: &str, reason: &dyn std::fmt::Display| format!("{} {id} (resourceVersion {rv}): field {field}: {reason}", T::KIND);
    // List items carry no apiVersion/kind: the typed decoder does not need them.
    let typed: T::Kube = serde_path_to_error::deserialize(&raw.value).map_err(|e| {
        let path = e.path().to_string();
        what(&path, e.inner())
    })?;
    T::convert(&typed).map_err(|e| what(&e.field, &e.reason))
}

impl<T: Kind> Known<T> {
    /// Decodes one raw object; an undecodable one is reported unless this version was.
    fn decode(&mut self, raw: &Raw, bad: &mut Vec<String>) -> Result<Option<Arc<T>>, NamespacedName> {
        let id = T::id_of(&raw.metadata);
        match decode::<T>(raw) {
            Ok(v) => {
                self.bad.remove(&id);
                Ok(v.map(Arc::new))
            }
            Err(e) => {
                let rv = raw.metadata.resource_version.clone().unwrap_or_default();
                if self.bad.get(&id) != Some(&rv) {
                    bad.push(e);
                    self.bad.insert(id.clone(), rv);
                }
                Err(id)
            }
        }
    }

    /// Maps one watcher event to tracker events (and problems to report).
    fn step(&mut self, ev: WEvent<Raw>, out: &mut Vec<Event>, bad: &mut Vec<String>) {
        match ev {
            WEvent::Init => {
                self.relist = Some(BTreeSet::new());
                self.relist_bad.clear();
            }
            WEvent::InitApply(o) => match self.decode(&o, bad) {
                Ok(Some(obj)) => {
                    self.relist.get_or_insert_with(BTreeSet::new).replace(ById(obj));
                }
                Ok(None) => {}
                Err(id) => {
                    // Kept at its last good version, as a skipped watch update is.
                    if let Some(old) = self.current.get(&id) {
                        self.relist.get_or_insert_with(BTreeSet::new).replace(ById(old.0.clone()));
                    }
                    self.relist_bad.insert(id);
                }
            },
            WEvent::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                for old in &self.current {
                    if !fresh.contains(old.0.id()) {
                        out.push(T::deleted(old.0.clone()));
                    }
                }
                out.extend(fresh.iter().map(|o| T::applied(o.0.clone())));
                self.current = fresh;
                let seen = std::mem::take(&mut self.relist_bad);
                self.bad.retain(|id, _| seen.contains(id));
                self.listed = true;
            }
            WEvent::Apply(o) => {
                if let Ok(Some(obj)) = self.decode(&o, bad) {
                    self.current.replace(ById(obj.clone()));
                    out.push(T::applied(obj));
                }
            }
            WEvent::Delete(o) => {
                let id = T::id_of(&o.metadata);
                self.bad.remove(&id);
                if let Some(old) = self.current.take(&id) {
                    out.push(T::deleted(old.0));
                }
            }
        }
    }
}

/// client-go's reflector backoff (tools/cache/reflector.go: `NewExponentialBackoffManager(
/// 800ms, 30s, 2min, 2.0, 1.0)`, used by `wait.BackoffUntil` around `ListAndWatch`): the
/// wait before retrying after any error — a failed list or watch, and a `410 Gone` before
/// its relist — starts at 0.8 s and doubles up to 30 s, each wait jittered up to twice its
/// base; it starts over only after 2 minutes without a wait. Listing successfully does not
/// reset it (kube-rs's default backoff does, so a failing list was retried every second).
/// A watch the server or network closes is re-established at once, without waiting.
#[derive(Debug, Default)]
pub struct Backoff {
    next: Duration,
    last: Option<Instant>,
}

impl Backoff {
    pub const INITIAL: Duration = Duration::from_millis(800);
    pub const CAP: Duration = Duration::from_secs(30);
    pub const RESET: Duration = Duration::from_secs(120);

    /// The wait for an error at `now`; `jitter` in [0, 1) stretches it by up to its base.
    pub fn wait(&mut self, now: Instant, jitter: f64) -> Duration {
        if self.last.is_none_or(|last| now.saturating_duration_since(last) > Self::RESET) {
            self.next = Self::INITIAL;
        }
        self.last = Some(now);
        let base = self.next;
        self.next = (base * 2).min(Self::CAP);
        base.mul_f64(1.0 + jitter.clamp(0.0, 1.0))
    }
}

/// A number in [0, 1) from the standard library's random hash keys.
pub(super) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// An error for the log: its first line, at most 300 characters (a decode error can quote a
/// whole response body).
fn short(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("");
    match first.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &first[..at]),
        None => first.to_string(),
    }
}

/// `stream`'s events, errors logged and retried after [`Backoff`]'s wait.
fn backed_off<T: Send + 'static>(
    stream: impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    what: &'static str,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::unfold((Box::pin(stream), Backoff::default()), move |(mut stream, mut backoff)| async move {
        loop {
            match stream.next().await? {
                Ok(ev) => return Some((ev, (stream, backoff))),
                Err(e) => {
                    let wait = backoff.wait(Instant::now(), jitter());
                    tracing::warn!(kind = what, error = %short(&e), retry_in = ?wait, "watch failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    })
}

/// Watch mode's start on the API server: [`run_with_node`] spawned (needs a tokio runtime),
/// then, as kube-proxy once its informers are started, its "birth cry" recorded.
pub fn start(client: Client, proxy_name: Option<String>, node_name: Option<String>, tx: mpsc::Sender<SourceMsg>, recorder: Option<&super::events::Recorder>) -> tokio::task::JoinHandle<()> {
    let task = tokio::spawn(run_with_node(client, proxy_name, node_name, tx));
    if let Some(r) = recorder {
        r.record(super::events::ProxyEvent::starting());
    }
    task
}

/// Follows the API server until the receiver goes away, and this node's `v1/Node` when
/// named (field selector on its name). Watch errors (the server unreachable, a dropped
/// connection, 410 Gone) are retried after [`Backoff`]'s wait.
pub async fn run_with_node(client: Client, proxy_name: Option<String>, node_name: Option<String>, tx: mpsc::Sender<SourceMsg>) {
    if let Some(name) = node_name {
        tokio::spawn(watch_node(client.clone(), name, tx.clone()));
    }
    let selector = label_selector(proxy_name.as_deref());
    let cfg = watcher::Config::default().labels(&selector);
    let raw = |ar: ApiResource| Api::<Raw>::all_with(client.clone(), &ar);
    let services = backed_off(watcher::watcher(raw(Service::api_resource()), cfg.clone()), "Service").map(|e| Either::Service(Box::new(e)));
    let slices = backed_off(watcher::watcher(raw(EndpointSlice::api_resource()), cfg), "EndpointSlice").map(|e| Either::Slice(Box::new(e)));
    // kube-proxy's ServiceCIDR informer has no selector.
    let cidr_objects = raw(crate::model::ServiceCidr::api_resource());
    let cidrs = backed_off(watcher::watcher(cidr_objects, watcher::Config::default()), "ServiceCIDR").map(|e| Either::Cidr(Box::new(e)));
    let mut stream = std::pin::pin!(futures::stream::select(futures::stream::select(services, slices), cidrs));
    let mut svc: Known<Service> = Known::default();
    let mut eps: Known<EndpointSlice> = Known::default();
    let mut sc: Known<crate::model::ServiceCidr> = Known::default();
    let mut cidr_list: Option<Vec<crate::net::Cidr>> = None;
    let mut ready = false;
    while let Some(item) = stream.next().await {
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        // Only a ServiceCIDR event changes their list: no other event rebuilds it.
        let cidr_event = matches!(item, Either::Cidr(_));
        match item {
            Either::Service(ev) => svc.step(*ev, &mut out, &mut bad),
            Either::Slice(ev) => eps.step(*ev, &mut out, &mut bad),
            Either::Cidr(ev) => sc.step(*ev, &mut Vec::new(), &mut bad),
        }
        if !bad.is_empty() && tx.send(SourceMsg::Malformed(bad)).await.is_err() {
            return;
        }
        if !out.is_empty() && tx.send(SourceMsg::Events(out)).await.is_err() {
            return;
        }
        // The whole list, whenever it changes (once listed), as kube-proxy's handler gets it.
        if sc.listed && cidr_event {
            let objects: Vec<crate::model::ServiceCidr> = sc.current.iter().map(|o| (*o.0).clone()).collect();
            let now = crate::model::service_cidrs(&objects);
            if cidr_list.as_ref() != Some(&now) {
                cidr_list = Some(now.clone());
                if tx.send(SourceMsg::ServiceCidrs(now)).await.is_err() {
                    return;
                }
            }
        }
        if !ready && svc.listed && eps.listed && sc.listed {
            ready = true;
            if tx.send(SourceMsg::Ready).await.is_err() {
                return;
            }
        }
    }
}

/// Follows this node: label (topology) and address changes, and its deletion.
async fn watch_node(client: Client, name: String, tx: mpsc::Sender<SourceMsg>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = backed_off(watcher::watcher(Api::<core::Node>::all(client), cfg), "Node");
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let msg = match item {
            WEvent::Apply(n) | WEvent::InitApply(n) => {
                let deleting = n.metadata.deletion_timestamp.is_some();
                match convert::node(&n) {
                    Ok(node) => SourceMsg::Node { node: Some(node), deleting },
                    Err(e) => SourceMsg::Malformed(vec![format!("Node {name}: field {}: {}", e.field, e.reason)]),
                }
            }
            WEvent::Delete(_) => SourceMsg::Node { node: None, deleting: true },
            _ => continue,
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

enum Either {
    Service(Box<WEvent<Raw>>),
    Slice(Box<WEvent<Raw>>),
    Cidr(Box<WEvent<Raw>>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_starts_over_after_two_quiet_minutes() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        let ms: Vec<u128> = (0..8).map(|i| b.wait(t0 + Duration::from_secs(i), 0.0).as_millis()).collect();
        assert_eq!(ms, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(b.wait(t0 + Duration::from_secs(60), 0.999).as_millis(), 59970, "jitter stretches up to twice the base");
        assert_eq!(b.wait(t0 + Duration::from_secs(181), 0.0), Backoff::INITIAL, "two minutes without a wait reset it");
        assert!((0..100).map(|_| jitter()).all(|j| (0.0..1.0).contains(&j)));
    }

    fn raw(v: Value) -> Raw {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    fn svc(name: &str, rv: &str, port: serde_json::Value) -> Raw {
        raw(serde_json::json!({"metadata": {"name": name, "namespace": "app", "resourceVersion": rv},
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1", "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}}))
    }

    #[test]
    fn an_undecodable_object_is_reported_once_per_version_and_keeps_its_last_good_version() {
        let mut k: Known<Service> = Known::default();
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for ev in [WEvent::Init, WEvent::InitApply(svc("a", "1", 80.into())), WEvent::InitApply(svc("b", "2", "abc".into())), WEvent::InitDone] {
            k.step(ev, &mut out, &mut bad);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("Service app/b (resourceVersion 2): field spec.ports[0].port: invalid type: string \"abc\", expected i32"), "{}", bad[0]);
        assert!(bad[0].ends_with("expected i32"), "no position inside the response: {}", bad[0]);
        // `a` turns bad: skipped, reported; its good version stays, through a relist too.
        k.step(WEvent::Apply(svc("a", "3", "x".into())), &mut out, &mut bad);
        assert_eq!((out.len(), bad.len()), (1, 2));
        out.clear();
        for ev in [WEvent::Init, WEvent::InitApply(svc("a", "3", "x".into())), WEvent::InitApply(svc("b", "2", "abc".into())), WEvent::InitDone] {
            k.step(ev, &mut out, &mut bad);
        }
        assert_eq!(bad.len(), 2, "the same versions are not reported again");
        assert!(out.iter().all(|e| matches!(e, Event::ServiceApplied(s) if s.id.name == "a")), "{out:?}");
        // A new bad version is reported; a fixed one flows.
        k.step(WEvent::Apply(svc("b", "4", "y".into())), &mut out, &mut bad);
        k.step(WEvent::Apply(svc("b", "5", 81.into())), &mut out, &mut bad);
        assert_eq!(bad.len(), 3);
        assert!(matches!(out.last(), Some(Event::ServiceApplied(s)) if s.id.name == "b"));
        // Wrong-typed metadata: still named, skipped alone.
        let labels = raw(serde_json::json!({"metadata": {"name": "c", "namespace": "app", "resourceVersion": "6", "labels": 5}}));
        k.step(WEvent::Apply(labels), &mut out, &mut bad);
        assert!(bad[3].starts_with("Service app/c (resourceVersion 6): field metadata.labels: invalid type"), "{}", bad[3]);
    }
}

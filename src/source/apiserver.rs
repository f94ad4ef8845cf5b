//! The API server as a source: kube-rs watchers on Services and EndpointSlices with
//! kube-proxy's label selectors (objects labelled `service.kubernetes.io/headless`, or with
//! a `service.kubernetes.io/service-proxy-name` other than ours, are never seen), turned
//! into the same events as the file source.
//!
//! A (re)list — at start, after a dropped watch or a `410 Gone` — is applied as a
//! difference: objects the new list lacks are deleted, the others re-applied (the trackers
//! drop what did not change), so no rule vanishes during a relist. A malformed object is
//! skipped and reported, never fatal. Ready is sent once both kinds have listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::runtime::watcher::{self, Event as WEvent};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::convert;
use super::watch::SourceMsg;
use super::{LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME};
use crate::model::{EndpointSlice, NamespacedName, Service};
use crate::track::Event;

/// Every API call svcproxy makes, as RBAC sees it: (API group, resource, verb). The
/// ClusterRole in deploy/ must grant exactly these (tests/deploy.rs checks it).
pub const API_CALLS: [(&str, &str, &str); 7] = [
    ("", "services", "list"),
    ("", "services", "watch"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    // `sync --watch` reads this node's Node at start (src/cli/watch.rs), then watches it.
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
];

/// kube-proxy's informer selector, or the one owning `proxy_name`'s objects.
pub fn label_selector(proxy_name: Option<&str>) -> String {
    match proxy_name {
        Some(name) => format!("{LABEL_SERVICE_PROXY_NAME}={name},!{LABEL_HEADLESS}"),
        None => format!("!{LABEL_SERVICE_PROXY_NAME},!{LABEL_HEADLESS}"),
    }
}

/// One kind's objects as last listed or watched, to turn relists into differences.
struct Known<T> {
    current: BTreeMap<NamespacedName, Arc<T>>,
    relist: Option<BTreeMap<NamespacedName, Arc<T>>>,
    listed: bool,
}

/// How one kind's objects become events.
trait Kind: Sized {
    type Kube: Clone + std::fmt::Debug + kube::Resource;
    fn convert(obj: &Self::Kube) -> Result<Option<Self>, String>;
    fn id(&self) -> NamespacedName;
    fn applied(obj: Arc<Self>) -> Event;
    fn deleted(obj: Arc<Self>) -> Event;
}

impl Kind for Service {
    type Kube = core::Service;
    fn convert(obj: &core::Service) -> Result<Option<Self>, String> {
        let id = convert::object_id(&obj.metadata);
        convert::service(obj).map(Some).map_err(|e| format!("Service {id}: field {}: {}", e.field, e.reason))
    }
    fn id(&self) -> NamespacedName {
        self.id.clone()
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
    fn convert(obj: &discovery::EndpointSlice) -> Result<Option<Self>, String> {
        let id = convert::object_id(&obj.metadata);
        let mut skips = Vec::new();
        convert::endpoint_slice(obj, &mut skips).map_err(|e| format!("EndpointSlice {id}: field {}: {}", e.field, e.reason))
    }
    fn id(&self) -> NamespacedName {
        self.id.clone()
    }
    fn applied(obj: Arc<Self>) -> Event {
        Event::SliceApplied(obj)
    }
    fn deleted(obj: Arc<Self>) -> Event {
        Event::SliceDeleted(obj)
    }
}

impl<T> Default for Known<T> {
    fn default() -> Self {
        Known { current: BTreeMap::new(), relist: None, listed: false }
    }
}

impl<T: Kind> Known<T> {
    /// Maps one watcher event to tracker events (and problems to report).
    fn step(&mut self, ev: WEvent<T::Kube>, out: &mut Vec<Event>, bad: &mut Vec<String>) {
        match ev {
            WEvent::Init => self.relist = Some(BTreeMap::new()),
            WEvent::InitApply(o) => {
                if let Some(obj) = convert_or_report::<T>(&o, bad) {
                    self.relist.get_or_insert_with(BTreeMap::new).insert(obj.id(), obj);
                }
            }
            WEvent::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                for (id, old) in &self.current {
                    if !fresh.contains_key(id) {
                        out.push(T::deleted(old.clone()));
                    }
                }
                out.extend(fresh.values().cloned().map(T::applied));
                self.current = fresh;
                self.listed = true;
            }
            WEvent::Apply(o) => {
                if let Some(obj) = convert_or_report::<T>(&o, bad) {
                    self.current.insert(obj.id(), obj.clone());
                    out.push(T::applied(obj));
                }
            }
            WEvent::Delete(o) => {
                let id = convert::object_id(match_meta(&o));
                if let Some(old) = self.current.remove(&id) {
                    out.push(T::deleted(old));
                }
            }
        }
    }
}

fn match_meta<K: kube::Resource>(o: &K) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    o.meta()
}

fn convert_or_report<T: Kind>(o: &T::Kube, bad: &mut Vec<String>) -> Option<Arc<T>> {
    match T::convert(o) {
        Ok(v) => v.map(Arc::new),
        Err(e) => {
            bad.push(e);
            None
        }
    }
}

/// Follows the API server until the receiver goes away. Watch errors (the server
/// unreachable, a dropped connection, 410 Gone) are retried with kube-rs's backoff.
pub async fn run(client: Client, proxy_name: Option<String>, tx: mpsc::Sender<SourceMsg>) {
    run_with_node(client, proxy_name, None, tx).await
}

/// [`run`], also watching this node's `v1/Node` (field selector on its name).
pub async fn run_with_node(client: Client, proxy_name: Option<String>, node_name: Option<String>, tx: mpsc::Sender<SourceMsg>) {
    if let Some(name) = node_name {
        tokio::spawn(watch_node(client.clone(), name, tx.clone()));
    }
    let selector = label_selector(proxy_name.as_deref());
    let cfg = watcher::Config::default().labels(&selector);
    let services = watcher::watcher(Api::<core::Service>::all(client.clone()), cfg.clone()).default_backoff().map_ok(|e| Either::Service(Box::new(e)));
    let slices = watcher::watcher(Api::<discovery::EndpointSlice>::all(client), cfg).default_backoff().map_ok(|e| Either::Slice(Box::new(e)));
    let mut stream = std::pin::pin!(futures::stream::select(services, slices));
    let mut svc: Known<Service> = Known::default();
    let mut eps: Known<EndpointSlice> = Known::default();
    let mut ready = false;
    while let Some(item) = stream.next().await {
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        match item {
            Ok(Either::Service(ev)) => svc.step(*ev, &mut out, &mut bad),
            Ok(Either::Slice(ev)) => eps.step(*ev, &mut out, &mut bad),
            Err(e) => {
                tracing::warn!(error = %e, "watch failed; retrying");
                continue;
            }
        }
        if !bad.is_empty() && tx.send(SourceMsg::Malformed(bad)).await.is_err() {
            return;
        }
        if !out.is_empty() && tx.send(SourceMsg::Events(out)).await.is_err() {
            return;
        }
        if !ready && svc.listed && eps.listed {
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
    let stream = watcher::watcher(Api::<core::Node>::all(client), cfg).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let msg = match item {
            Ok(WEvent::Apply(n)) | Ok(WEvent::InitApply(n)) => {
                let deleting = n.metadata.deletion_timestamp.is_some();
                match convert::node(&n) {
                    Ok(node) => SourceMsg::Node { node: Some(node), deleting },
                    Err(e) => SourceMsg::Malformed(vec![format!("Node {name}: field {}: {}", e.field, e.reason)]),
                }
            }
            Ok(WEvent::Delete(_)) => SourceMsg::Node { node: None, deleting: true },
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "node watch failed; retrying");
                continue;
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
}

enum Either {
    Service(Box<WEvent<core::Service>>),
    Slice(Box<WEvent<discovery::EndpointSlice>>),
}

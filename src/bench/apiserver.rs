//! A small API server for tests that speaks the real list/watch protocol over HTTP:
//! lists with `metadata.resourceVersion`; `?watch=true&resourceVersion=N` streams
//! newline-delimited `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}`
//! events; a resourceVersion older than the compaction point gets a `410 Gone` ERROR;
//! watches can be dropped mid-stream. Label selectors `key`, `!key`, `key=value` work.
//! Lists are paginated as the real API server does (`limit` and `continue`: every page
//! of one list is of the same snapshot; a continue token from before a compaction gets
//! `410 Gone`), so a client's list holds one page at a time, as it would in a cluster.
//! Objects are served as given, so a field can have the wrong type ([`ApiServer::apply_with`]).
//! Events are created as the real API server creates them (`POST
//! /apis/events.k8s.io/v1/namespaces/NS/events`: checked as events.k8s.io/v1's validation
//! checks a new Event, 201 with the stored object, 409 for a name taken) and kept
//! ([`ApiServer::events`]); a series is patched (`PATCH …/events/NAME`, a strategic merge
//! patch, merged as JSON; 404 for an unknown name); [`ApiServer::forbid_events`] answers 403,
//! as a missing RBAC grant.
//! Test tooling (feature `bench`): the tests, and the scale soak (`bench::soak`).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::extract::Path;
use axum::routing::{get, patch, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::broadcast;

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    kind: &'static str,
    kind_type: &'static str,
    object: Value,
}

/// How many changes the server keeps for watches that resume from a resourceVersion
/// ([`ApiServer::start_with_history`]): about 3 minutes of the soak's 50 changes per
/// second, like etcd's compaction of history every 5 minutes behind a real API server.
pub const DEFAULT_HISTORY: usize = 10_000;

struct Store {
    rv: u64,
    objects: BTreeMap<(&'static str, String, String), Value>,
    /// The changes after `compacted`, oldest first; never more than `history`.
    log: VecDeque<Change>,
    history: usize,
    /// Watches from before this resourceVersion get 410 Gone.
    compacted: u64,
    /// Lists being paged through, by the id their continue tokens carry.
    snapshots: BTreeMap<u64, Snapshot>,
    next_snapshot: u64,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            rv: 0,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            history: DEFAULT_HISTORY,
            compacted: 0,
            snapshots: BTreeMap::new(),
            next_snapshot: 0,
        }
    }
}

/// The items of one paginated list, as they were when its first page was served.
struct Snapshot {
    rv: u64,
    items: Vec<Value>,
}

#[derive(Clone)]
pub struct ApiServer {
    store: Arc<Mutex<Store>>,
    events: broadcast::Sender<Change>,
    /// Bumped to drop every open watch.
    drops: broadcast::Sender<()>,
    pub addr: SocketAddr,
    /// Every request line served, for assertions (`GET /api/v1/services?...`).
    pub requests: Arc<Mutex<Vec<String>>>,
    /// The Events created, in order, as stored.
    created_events: Arc<Mutex<Vec<Value>>>,
    /// Answer every Event with 403 Forbidden.
    events_forbidden: Arc<std::sync::atomic::AtomicBool>,
}

/// A lock, even after a handler panicked while holding it (its data is still usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn key(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    (m["namespace"].as_str().unwrap_or("").to_string(), m["name"].as_str().unwrap_or("").to_string())
}

impl ApiServer {
    pub async fn start() -> std::io::Result<ApiServer> {
        ApiServer::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    pub async fn start_on(bind: SocketAddr) -> std::io::Result<ApiServer> {
        ApiServer::start_with_history(bind, DEFAULT_HISTORY).await
    }

    /// A server that keeps the last `history` changes (at least one) for resuming
    /// watches; older ones are compacted away as newer ones come, so a watch resuming
    /// from before them gets 410 Gone and the server's memory stays bounded.
    pub async fn start_with_history(bind: SocketAddr, history: usize) -> std::io::Result<ApiServer> {
        let (events, _) = broadcast::channel(65536);
        let (drops, _) = broadcast::channel(16);
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let store = Store { history: history.max(1), ..Store::default() };
        let server = ApiServer {
            store: Arc::new(Mutex::new(store)),
            events,
            drops,
            addr,
            requests: Arc::default(),
            created_events: Arc::default(),
            events_forbidden: Arc::default(),
        };
        let app = Router::new()
            .route("/api/v1/services", get(services))
            .route("/apis/discovery.k8s.io/v1/endpointslices", get(slices))
            .route("/api/v1/nodes/{name}", get(|| async { StatusCode::NOT_FOUND }))
            .route("/api/v1/nodes", get(nodes))
            .route("/apis/networking.k8s.io/v1/servicecidrs", get(service_cidrs))
            .route("/apis/events.k8s.io/v1/namespaces/{namespace}/events", post(create_event))
            .route("/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}", patch(patch_event))
            .with_state(server.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn change(&self, kind: &'static str, kind_type: &'static str, mut object: Value) {
        let mut s = lock(&self.store);
        s.rv += 1;
        object["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        let (ns, name) = key(&object);
        if kind_type == "DELETED" {
            s.objects.remove(&(kind, ns, name));
        } else {
            s.objects.insert((kind, ns, name), object.clone());
        }
        let c = Change { rv: s.rv, kind, kind_type, object };
        s.record(c.clone());
        let _ = self.events.send(c);
    }

    /// Creates or replaces (ADDED or MODIFIED) an object of kind `Service`, `EndpointSlice`,
    /// `Node` or `ServiceCIDR`.
    pub fn apply(&self, object: Value) {
        let kind = kind_of(&object);
        let (ns, name) = key(&object);
        let exists = lock(&self.store).objects.contains_key(&(kind, ns, name));
        self.change(kind, if exists { "MODIFIED" } else { "ADDED" }, object);
    }

    /// [`apply`](Self::apply) with the field at JSON pointer `pointer` (e.g.
    /// `/spec/ports/0/port`) set to `value` — served as is, like an object whose field has
    /// the wrong type.
    pub fn apply_with(&self, mut object: Value, pointer: &str, value: Value) {
        *object.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer} is not in the object")) = value;
        self.apply(object);
    }

    pub fn delete(&self, object: Value) {
        let kind = kind_of(&object);
        self.change(kind, "DELETED", object);
    }

    /// Forgets history: watches resuming from before now get 410 Gone.
    pub fn compact(&self) {
        let mut s = lock(&self.store);
        let rv = s.rv;
        s.compact_to(rv + 1);
    }

    /// Deletes objects as if the events were lost to compaction: no watch sees them,
    /// history is compacted, and open watches are dropped, so clients resuming get
    /// 410 Gone and must list again to learn of the deletions.
    pub fn delete_behind_compaction(&self, objects: &[Value]) {
        {
            let mut s = lock(&self.store);
            for object in objects {
                let kind: &'static str = if object["kind"] == "Service" { "Service" } else { "EndpointSlice" };
                let (ns, name) = key(object);
                s.objects.remove(&(kind, ns, name));
                s.rv += 1;
            }
            let rv = s.rv;
            s.compact_to(rv + 1);
        }
        self.drop_watches();
    }

    /// Drops every open watch connection.
    pub fn drop_watches(&self) {
        let _ = self.drops.send(());
    }

    pub fn request_count(&self, needle: &str) -> usize {
        lock(&self.requests).iter().filter(|r| r.contains(needle)).count()
    }

    /// The Events created so far, as stored (with the server's uid and resourceVersion).
    pub fn events(&self) -> Vec<Value> {
        lock(&self.created_events).clone()
    }

    /// From now on, answers every Event with 403 Forbidden (`forbid`) or creates it again.
    pub fn forbid_events(&self, forbid: bool) {
        self.events_forbidden.store(forbid, std::sync::atomic::Ordering::SeqCst);
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()});
    (code, [("content-type", "application/json")], body.to_string()).into_response()
}

/// What events.k8s.io/v1's validation refuses in a new Event (`ValidateEventCreate`): the
/// fields it requires, their lengths, the type, and the namespace (an Event about a
/// cluster-scoped object lives in `default`).
fn event_invalid(ev: &Value, namespace: &str) -> Option<String> {
    let text = |field: &str| ev[field].as_str().unwrap_or("");
    for field in ["reportingController", "reportingInstance", "action", "reason"] {
        if text(field).is_empty() {
            return Some(format!("{field}: Required value"));
        }
        if text(field).len() > 128 {
            return Some(format!("{field}: Too long: may not be more than 128 bytes"));
        }
    }
    if ev["eventTime"].as_str().is_none() {
        return Some("eventTime: Required value".into());
    }
    if !matches!(text("type"), "Normal" | "Warning") {
        return Some(format!("type: Unsupported value: {:?}", text("type")));
    }
    if text("note").len() > 1024 {
        return Some("note: Too long: may not be more than 1024 bytes".into());
    }
    let regarding = ev["regarding"]["namespace"].as_str().unwrap_or("");
    let wanted = if regarding.is_empty() { "default" } else { regarding };
    if ev["metadata"]["namespace"].as_str().unwrap_or(namespace) != namespace || namespace != wanted {
        return Some(format!("metadata.namespace: Invalid value: {namespace:?}: does not match event.namespace"));
    }
    ev["metadata"]["name"].as_str().filter(|n| !n.is_empty()).is_none().then(|| "metadata.name: Required value".into())
}

/// A merge of `patch` into `into`: objects merged key by key, `null` deletes, anything else
/// replaces (a strategic merge patch of scalar and object fields, which an Event's series is).
fn merge(into: &mut Value, patch: &Value) {
    match (into.as_object_mut(), patch.as_object()) {
        (Some(target), Some(fields)) => {
            for (k, v) in fields {
                if v.is_null() {
                    target.remove(k);
                } else {
                    merge(target.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *into = patch.clone(),
    }
}

async fn patch_event(State(s): State<ApiServer>, Path((namespace, name)): Path<(String, String)>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let (kind, agent) = (header("content-type"), header("user-agent"));
    lock(&s.requests).push(format!("Event PATCH namespace={namespace} name={name} content-type={kind} user-agent={agent}"));
    if s.events_forbidden.load(std::sync::atomic::Ordering::SeqCst) {
        return status(StatusCode::FORBIDDEN, "Forbidden", format!("events.events.k8s.io \"{name}\" is forbidden"));
    }
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the body is not JSON".into());
    };
    let mut created = lock(&s.created_events);
    let Some(ev) = created.iter_mut().find(|e| e["metadata"]["namespace"] == namespace.as_str() && e["metadata"]["name"] == name.as_str()) else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("events.events.k8s.io \"{name}\" not found"));
    };
    merge(ev, &patch);
    (StatusCode::OK, [("content-type", "application/json")], ev.to_string()).into_response()
}

async fn create_event(State(s): State<ApiServer>, Path(namespace): Path<String>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let (auth, agent) = (header("authorization"), header("user-agent"));
    lock(&s.requests).push(format!("Event POST namespace={namespace} authorization={auth} user-agent={agent}"));
    if s.events_forbidden.load(std::sync::atomic::Ordering::SeqCst) {
        let message = format!("events.events.k8s.io is forbidden: cannot create resource \"events\" in API group \"events.k8s.io\" in the namespace \"{namespace}\"");
        return status(StatusCode::FORBIDDEN, "Forbidden", message);
    }
    let Ok(mut ev) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the body is not JSON".into());
    };
    if ev["apiVersion"] != "events.k8s.io/v1" || ev["kind"] != "Event" {
        return status(StatusCode::BAD_REQUEST, "BadRequest", format!("not an events.k8s.io/v1 Event: {} {}", ev["apiVersion"], ev["kind"]));
    }
    if let Some(why) = event_invalid(&ev, &namespace) {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", format!("Event is invalid: {why}"));
    }
    let name = ev["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut created = lock(&s.created_events);
    if created.iter().any(|e| e["metadata"]["namespace"] == namespace.as_str() && e["metadata"]["name"] == name.as_str()) {
        return status(StatusCode::CONFLICT, "AlreadyExists", format!("events.events.k8s.io \"{name}\" already exists"));
    }
    let rv = {
        let mut st = lock(&s.store);
        st.rv += 1;
        st.rv
    };
    ev["metadata"]["namespace"] = json!(namespace);
    ev["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{rv:012x}"));
    ev["metadata"]["resourceVersion"] = json!(rv.to_string());
    created.push(ev.clone());
    (StatusCode::CREATED, [("content-type", "application/json")], ev.to_string()).into_response()
}

/// One page of a list: its snapshot's resourceVersion, its items and the continue token
/// of the next page, if any.
type Page = (u64, Vec<Value>, Option<String>);

impl Store {
    /// Keeps `change` for resuming watches, compacting the oldest away beyond `history`.
    fn record(&mut self, change: Change) {
        self.log.push_back(change);
        while self.log.len() > self.history {
            // A watch from `dropped.rv` or later needs nothing that is dropped.
            if let Some(dropped) = self.log.pop_front() {
                self.compacted = self.compacted.max(dropped.rv);
            }
        }
    }

    /// Forgets the changes before resourceVersion `rv`: watches from before it get 410 Gone.
    fn compact_to(&mut self, rv: u64) {
        self.compacted = self.compacted.max(rv);
        while self.log.front().is_some_and(|c| c.rv < self.compacted) {
            self.log.pop_front();
        }
    }

    /// The first page of `snapshot` (all of it without a limit); a snapshot with more is
    /// kept for its continue tokens.
    fn first_page(&mut self, snapshot: Snapshot, limit: Option<usize>) -> Page {
        match limit {
            Some(limit) if snapshot.items.len() > limit => {
                let id = self.next_snapshot;
                self.next_snapshot += 1;
                self.snapshots.insert(id, snapshot);
                self.page(id, 0, limit)
            }
            _ => (snapshot.rv, snapshot.items, None),
        }
    }

    /// The page a continue token (`ID:OFFSET`) names; `None` when the token is unknown or
    /// its snapshot is older than the compaction point (410 Gone, as the API server's
    /// "Expired"). A snapshot is forgotten once its last page is served.
    fn next_page(&mut self, token: &str, limit: Option<usize>) -> Option<Page> {
        let (id, offset) = token.split_once(':')?;
        let (id, offset): (u64, usize) = (id.parse().ok()?, offset.parse().ok()?);
        let snapshot = self.snapshots.get(&id)?;
        if snapshot.rv < self.compacted || offset > snapshot.items.len() {
            self.snapshots.remove(&id);
            return None;
        }
        Some(self.page(id, offset, limit.unwrap_or(usize::MAX)))
    }

    fn page(&mut self, id: u64, offset: usize, limit: usize) -> Page {
        let Some(snapshot) = self.snapshots.get(&id) else { return (self.rv, Vec::new(), None) };
        let end = offset.saturating_add(limit).min(snapshot.items.len());
        let (rv, items) = (snapshot.rv, snapshot.items[offset..end].to_vec());
        if end < snapshot.items.len() {
            (rv, items, Some(format!("{id}:{end}")))
        } else {
            self.snapshots.remove(&id);
            (rv, items, None)
        }
    }
}

fn kind_of(object: &Value) -> &'static str {
    match object["kind"].as_str() {
        Some("Service") => "Service",
        Some("Node") => "Node",
        Some("ServiceCIDR") => "ServiceCIDR",
        _ => "EndpointSlice",
    }
}

/// `metadata.name=X` field selectors.
fn field_selected(obj: &Value, selector: Option<&str>) -> bool {
    match selector.and_then(|s| s.strip_prefix("metadata.name=")) {
        Some(name) => obj["metadata"]["name"].as_str() == Some(name),
        None => true,
    }
}

fn selected(obj: &Value, selector: Option<&str>) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector.unwrap_or("").split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some(k) = term.strip_prefix('!') {
            labels.get(k).is_none()
        } else if let Some((k, v)) = term.split_once('=') {
            labels.get(k).and_then(Value::as_str) == Some(v)
        } else {
            labels.get(term).is_some()
        }
    })
}

async fn services(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    serve(s, "Service", "v1", q, &headers).await
}

async fn nodes(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    serve(s, "Node", "v1", q, &headers).await
}

async fn service_cidrs(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    serve(s, "ServiceCIDR", "networking.k8s.io/v1", q, &headers).await
}

async fn slices(State(s): State<ApiServer>, headers: HeaderMap, Query(q): Query<BTreeMap<String, String>>) -> Response {
    serve(s, "EndpointSlice", "discovery.k8s.io/v1", q, &headers).await
}

async fn serve(s: ApiServer, kind: &'static str, api_version: &'static str, q: BTreeMap<String, String>, headers: &HeaderMap) -> Response {
    // Each request as "KIND {query} authorization=VALUE user-agent=VALUE" (the headers as
    // sent, or "-").
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let (auth, agent) = (header("authorization"), header("user-agent"));
    lock(&s.requests).push(format!("{kind} {q:?} authorization={auth} user-agent={agent}"));
    let selector = q.get("labelSelector").cloned();
    let fields = q.get("fieldSelector").cloned();
    if q.get("watch").map(String::as_str) != Some("true") {
        let mut st = lock(&s.store);
        let limit = q.get("limit").and_then(|v| v.parse::<usize>().ok()).filter(|&l| l > 0);
        let page = match q.get("continue").filter(|t| !t.is_empty()) {
            Some(token) => st.next_page(token, limit),
            None => {
                let items: Vec<Value> = st
                    .objects
                    .iter()
                    .filter(|((k, _, _), o)| *k == kind && selected(o, selector.as_deref()) && field_selected(o, fields.as_deref()))
                    .map(|(_, o)| o.clone())
                    .collect();
                let snapshot = Snapshot { rv: st.rv, items };
                Some(st.first_page(snapshot, limit))
            }
        };
        let Some((rv, items, next)) = page else {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                "message": "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."});
            return (StatusCode::GONE, [("content-type", "application/json")], status.to_string()).into_response();
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if let Some(token) = next {
            metadata["continue"] = json!(token);
        }
        let body = json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": metadata, "items": items});
        return (StatusCode::OK, [("content-type", "application/json")], body.to_string()).into_response();
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let timeout = q.get("timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(290u64);
    let (backlog, gone, now, live, drops) = {
        let st = lock(&s.store);
        let backlog: Vec<Change> = st.log.iter().filter(|c| c.rv > from && c.kind == kind).cloned().collect();
        (backlog, from < st.compacted, st.rv, s.events.subscribe(), s.drops.subscribe())
    };
    let backlog = backlog.into_iter().filter(|c| field_selected(&c.object, fields.as_deref())).collect();
    let stream = async_stream(kind, api_version, selector, backlog, gone, timeout, from.max(now), (live, drops));
    ([("content-type", "application/json")], Body::from_stream(stream)).into_response()
}

fn line(v: Value) -> Result<String, Infallible> {
    Ok(format!("{v}\n"))
}

#[allow(clippy::too_many_arguments)]
fn async_stream(
    kind: &'static str,
    api_version: &'static str,
    selector: Option<String>,
    backlog: Vec<Change>,
    gone: bool,
    timeout: u64,
    now: u64,
    (mut live, mut drops): (broadcast::Receiver<Change>, broadcast::Receiver<()>),
) -> impl futures::Stream<Item = Result<String, Infallible>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, Infallible>>(1024);
    tokio::spawn(async move {
        if gone {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": 410});
            let _ = tx.send(line(json!({"type": "ERROR", "object": status}))).await;
            return;
        }
        for c in backlog {
            if selected(&c.object, selector.as_deref()) && tx.send(line(json!({"type": c.kind_type, "object": c.object}))).await.is_err() {
                return;
            }
        }
        // Every change up to `now` is in the backlog or was no concern of this watch; a
        // bookmark carries the newest resourceVersion the watch has seen of any kind, as
        // the API server's bookmarks carry its current one, so a watch resumed from it is
        // not 410 Gone because other kinds' changes pushed its own kind's history out.
        let mut last = now;
        let deadline = tokio::time::sleep(Duration::from_secs(timeout.min(30)));
        tokio::pin!(deadline);
        let mut bookmark = tokio::time::interval(Duration::from_millis(300));
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = drops.recv() => return,
                _ = bookmark.tick() => {
                    let b = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last.to_string()}}});
                    if last > 0 && tx.send(line(b)).await.is_err() { return; }
                }
                c = live.recv() => match c {
                    Ok(c) if c.rv > last => {
                        last = c.rv;
                        if c.kind == kind && selected(&c.object, selector.as_deref()) && tx.send(line(json!({"type": c.kind_type, "object": c.object}))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
            }
        }
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<Result<String, Infallible>>) -> impl futures::Stream<Item = Result<String, Infallible>> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"i": i})).collect()
    }

    fn numbers(page: &Page) -> Vec<u64> {
        page.1.iter().map(|v| v["i"].as_u64().unwrap_or(u64::MAX)).collect()
    }

    fn change(rv: u64) -> Change {
        Change { rv, kind: "Service", kind_type: "ADDED", object: json!({}) }
    }

    #[test]
    fn a_watch_bookmarks_the_newest_change_of_any_kind_and_sends_only_its_own() {
        use futures::StreamExt;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            let (events, live) = broadcast::channel(16);
            let (_drops_tx, drops) = broadcast::channel(1);
            let backlog = vec![Change { rv: 4, kind: "Service", kind_type: "ADDED", object: json!({"metadata": {"name": "a"}}) }];
            let stream = async_stream("Service", "v1", None, backlog, false, 30, 5, (live, drops));
            for rv in 6..=8 {
                events.send(Change { rv, kind: "EndpointSlice", kind_type: "MODIFIED", object: json!({}) }).expect("a receiver");
            }
            events.send(Change { rv: 9, kind: "Service", kind_type: "MODIFIED", object: json!({"metadata": {"name": "b"}}) }).expect("a receiver");
            for rv in 10..=12 {
                events.send(Change { rv, kind: "EndpointSlice", kind_type: "MODIFIED", object: json!({}) }).expect("a receiver");
            }
            // Bounded: a bookmark every 300 ms, at most 100 lines, and the stream ends after 30 s.
            let mut stream = std::pin::pin!(stream);
            let mut lines: Vec<Value> = Vec::new();
            while let Some(l) = stream.next().await {
                let v: Value = serde_json::from_str(&l.unwrap_or_default()).unwrap_or_default();
                let done = v["type"] == "BOOKMARK" && v["object"]["metadata"]["resourceVersion"] == "12";
                lines.push(v);
                if done || lines.len() >= 100 {
                    break;
                }
            }
            let events: Vec<(&str, &str)> = lines
                .iter()
                .filter(|v| v["type"] != "BOOKMARK")
                .map(|v| (v["type"].as_str().unwrap_or("?"), v["object"]["metadata"]["name"].as_str().unwrap_or("?")))
                .collect();
            assert_eq!(events, vec![("ADDED", "a"), ("MODIFIED", "b")], "only the watch's own kind, in order");
            let bookmarks: Vec<u64> = lines
                .iter()
                .filter(|v| v["type"] == "BOOKMARK")
                .map(|v| v["object"]["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0))
                .collect();
            assert_eq!(bookmarks.last(), Some(&12), "the newest change of any kind is bookmarked: {lines:?}");
            assert!(bookmarks.windows(2).all(|w| w[0] <= w[1]) && bookmarks.iter().all(|&rv| rv >= 5), "{bookmarks:?}");
        });
    }

    #[test]
    fn history_is_bounded_and_what_is_dropped_is_compacted() {
        let mut st = Store { history: 3, ..Store::default() };
        for rv in 1..=3 {
            st.record(change(rv));
        }
        assert_eq!(st.compacted, 0, "nothing dropped yet: a watch from 0 is served");
        for rv in 4..=10 {
            st.record(change(rv));
        }
        let kept: Vec<u64> = st.log.iter().map(|c| c.rv).collect();
        assert_eq!(kept, vec![8, 9, 10], "only the newest `history` changes are kept");
        // A watch from 7 needs 8.. (all kept); from 6 it would need 7, which is gone.
        assert_eq!(st.compacted, 7, "watches from before 7 get 410 Gone");
        st.compact_to(10);
        let kept: Vec<u64> = st.log.iter().map(|c| c.rv).collect();
        assert_eq!((kept, st.compacted), (vec![10], 10), "an explicit compaction drops what is before it");
        st.compact_to(4);
        assert_eq!(st.compacted, 10, "a compaction never moves back");
    }

    #[test]
    fn a_list_is_paged_from_one_snapshot_and_an_expired_token_is_gone() {
        let mut st = Store { rv: 7, ..Store::default() };
        let first = st.first_page(Snapshot { rv: 7, items: items(5) }, Some(2));
        assert_eq!((first.0, numbers(&first), first.2.as_deref()), (7, vec![0, 1], Some("0:2")));
        st.rv = 9; // changes after the first page do not show in the later ones
        let second = st.next_page("0:2", Some(2)).expect("the token is valid");
        assert_eq!((second.0, numbers(&second), second.2.as_deref()), (7, vec![2, 3], Some("0:4")));
        let again = st.next_page("0:2", Some(2)).expect("a token can be asked again");
        assert_eq!(numbers(&again), vec![2, 3]);
        let last = st.next_page("0:4", Some(2)).expect("the token is valid");
        assert_eq!((numbers(&last), last.2), (vec![4], None));
        assert!(st.snapshots.is_empty(), "a snapshot is forgotten after its last page");
        assert!(st.next_page("0:4", Some(2)).is_none(), "a finished list's token is gone");

        let whole = st.first_page(Snapshot { rv: 9, items: items(3) }, None);
        assert_eq!((numbers(&whole), whole.2), (vec![0, 1, 2], None), "no limit: one page");
        let exact = st.first_page(Snapshot { rv: 9, items: items(2) }, Some(2));
        assert_eq!(exact.2, None, "a list that fits needs no token");

        let paged = st.first_page(Snapshot { rv: 9, items: items(3) }, Some(1));
        let token = paged.2.expect("more pages");
        st.compacted = 10;
        assert!(st.next_page(&token, Some(1)).is_none(), "a token from before a compaction is 410 Gone");
        assert!(st.next_page("x", Some(1)).is_none() && st.next_page("5:0", Some(1)).is_none(), "unknown tokens are gone");
    }
}

//! kube-proxy's `EndpointsChangeTracker` and `EndpointSliceCache`, for one IP family.
//!
//! Slices are cached per Service and per slice name, as `applied` (committed) and
//! `pending` (changed since). A slice event is pending only if it differs from what is
//! already pending or applied. At commit, each touched Service's endpoints are merged
//! from all its slices (slices in name order; an endpoint in several slices, or twice in
//! one, appears once: a later copy replaces an earlier one unless it is terminating, as
//! kube-proxy v1.36+ does), sorted by `ip:port` string, and compared with before:
//! services whose endpoints did not change are not reported.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use crate::model::{Endpoint, EndpointSlice, EndpointsMap, NamespacedName, ServicePortName};
use crate::net::IpFamily;

/// One service's slices, in slice-name order. A service has one or a few: a vector, where
/// a map allocates a node of eleven keys for every service it keeps.
type Slices = Vec<Arc<EndpointSlice>>;

/// One service's slices, never empty, kept under the service's name as the slices hold it
/// (a set of these is a map by service without a copy of each name).
#[derive(Debug, Clone)]
struct ServiceSlices(Slices);

impl ServiceSlices {
    fn service(&self) -> &NamespacedName {
        &self.0[0].service
    }
}

impl std::borrow::Borrow<NamespacedName> for ServiceSlices {
    fn borrow(&self) -> &NamespacedName {
        self.service()
    }
}

impl PartialEq for ServiceSlices {
    fn eq(&self, other: &Self) -> bool {
        self.service() == other.service()
    }
}

impl Eq for ServiceSlices {}

impl PartialOrd for ServiceSlices {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ServiceSlices {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.service().cmp(other.service())
    }
}

/// Where the slice named `name` is (or would go) in `slices`.
fn position(slices: &Slices, name: &str) -> Result<usize, usize> {
    slices.binary_search_by(|s| s.id.name.as_str().cmp(name))
}
type EndpointsOf = BTreeMap<ServicePortName, Arc<Vec<Endpoint>>>;

#[derive(Debug, Clone)]
pub struct EndpointsChangeTracker {
    family: IpFamily,
    node_name: String,
    service_proxy_name: Option<String>,
    applied: BTreeSet<ServiceSlices>,
    /// Per service, per slice name: the new slice, or `None` for a deletion.
    pending: BTreeMap<NamespacedName, BTreeMap<String, Option<Arc<EndpointSlice>>>>,
    map: EndpointsMap,
    /// When this tracker started: older trigger times are not this proxy's to measure.
    started: SystemTime,
    /// Per service with pending changes, the trigger times of the slice updates behind them.
    trigger_times: BTreeMap<NamespacedName, Vec<SystemTime>>,
    /// Slice events that changed the pending state since the last commit.
    changed_events: usize,
}

/// What a commit changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointsCommit {
    pub updated: BTreeSet<NamespacedName>,
    /// The trigger times of the slice updates behind `updated` (kube-proxy's
    /// `LastChangeTriggerTimes`), for the network-programming SLI.
    pub trigger_times: Vec<SystemTime>,
    /// Whether a UDP service port's endpoints changed, before or after (kube-proxy's
    /// `ConntrackCleanupRequired`): the conntrack reconciler runs after such a sync.
    pub udp_changed: bool,
}

impl EndpointsChangeTracker {
    pub fn new(family: IpFamily, node_name: impl Into<String>, service_proxy_name: Option<String>) -> Self {
        EndpointsChangeTracker {
            family,
            node_name: node_name.into(),
            service_proxy_name,
            applied: BTreeSet::new(),
            pending: BTreeMap::new(),
            map: EndpointsMap::new(),
            started: SystemTime::now(),
            trigger_times: BTreeMap::new(),
            changed_events: 0,
        }
    }

    /// An added or updated slice. Slices of the other family are ignored; a slice that
    /// stopped being ours (labels) counts as deleted, as an informer would report it.
    pub fn update(&mut self, slice: &Arc<EndpointSlice>) {
        if slice.family != self.family {
            return;
        }
        if !slice.proxy_labels.selected_by(self.service_proxy_name.as_deref()) {
            return self.delete(slice);
        }
        if self.set_pending(slice, Some(slice.clone())) {
            self.changed_events += 1;
            // kube-proxy records a slice's trigger time only when the update changed
            // something, and only if it is newer than the tracker itself.
            if let Some(t) = slice.trigger_time.filter(|t| *t > self.started) {
                self.trigger_times.entry(slice.service.clone()).or_default().push(t);
            }
        }
    }

    /// A deleted slice (or one that stopped being ours). As kube-proxy's tracker does, a
    /// deletion that changed something drops the service's pending trigger times: a
    /// deleted slice's annotation dates its last update, not the change being made, and
    /// kube-proxy measures none of that service's changes until the next update.
    pub fn delete(&mut self, slice: &EndpointSlice) {
        if slice.family == self.family && self.set_pending(slice, None) {
            self.changed_events += 1;
            self.trigger_times.remove(&slice.service);
        }
    }

    /// Whether the pending state changed.
    fn set_pending(&mut self, slice: &EndpointSlice, new: Option<Arc<EndpointSlice>>) -> bool {
        let name = &slice.id.name;
        let current = match self.pending.get(&slice.service).and_then(|p| p.get(name)) {
            Some(p) => p.clone(),
            None => self.applied.get(&slice.service).and_then(|a| position(&a.0, name).ok().map(|i| a.0[i].clone())),
        };
        if current.as_deref() == new.as_deref() {
            return false;
        }
        self.pending.entry(slice.service.clone()).or_default().insert(name.clone(), new);
        true
    }

    /// Services with pending slice changes.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Slice events that changed something since the last commit (two changes to one
    /// service's slices are two): what kube-proxy's `endpoint_changes_pending` counts.
    pub fn changed_events(&self) -> usize {
        self.changed_events
    }

    /// Moves the tracker's start back (tests stamp changes in the past).
    #[cfg(test)]
    pub fn set_started_for_test(&mut self, at: SystemTime) {
        self.started = at;
    }

    pub fn map(&self) -> &EndpointsMap {
        &self.map
    }

    pub fn commit(&mut self) -> EndpointsCommit {
        let mut out = EndpointsCommit::default();
        let mut trigger_times = std::mem::take(&mut self.trigger_times);
        self.changed_events = 0;
        for (service, changes) in std::mem::take(&mut self.pending) {
            let previous = self.endpoints_of(&service);
            let mut slices = self.applied.take(&service).map(|s| s.0).unwrap_or_default();
            for (name, slice) in changes {
                match (position(&slices, &name), slice) {
                    (Ok(i), Some(s)) => slices[i] = s,
                    (Err(i), Some(s)) => slices.insert(i, s),
                    (Ok(i), None) => drop(slices.remove(i)),
                    (Err(_), None) => {}
                }
            }
            if !slices.is_empty() {
                self.applied.insert(ServiceSlices(slices));
            }
            let current = self.endpoints_of(&service);
            if previous == current {
                continue;
            }
            out.udp_changed |= previous.keys().chain(current.keys()).any(|k| k.protocol == crate::model::Protocol::Udp);
            for name in previous.keys() {
                self.map.remove(name);
            }
            self.map.extend(current);
            out.trigger_times.extend(trigger_times.remove(&service).unwrap_or_default());
            out.updated.insert(service);
        }
        out
    }

    fn endpoints_of(&self, service: &NamespacedName) -> EndpointsOf {
        match self.applied.get(service) {
            Some(slices) => merge_slices(service, slices.0.iter().map(|s| s.as_ref()), &self.node_name),
            None => EndpointsOf::new(),
        }
    }
}

/// Merges the slices of one service into endpoints per service port.
pub fn merge_slices<'a>(
    service: &NamespacedName,
    slices: impl Iterator<Item = &'a EndpointSlice>,
    node_name: &str,
) -> EndpointsOf {
    let mut by_port: BTreeMap<ServicePortName, BTreeMap<String, Endpoint>> = BTreeMap::new();
    for slice in slices {
        for port in &slice.ports {
            let name = ServicePortName { service: service.clone(), port: port.name.clone(), protocol: port.protocol };
            let set = by_port.entry(name).or_default();
            for ep in &slice.endpoints {
                let is_local = ep.node_name.as_deref() == Some(node_name);
                let endpoint = Endpoint {
                    ip: ep.ip,
                    port: port.port,
                    is_local,
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                    zone_hints: ep.zone_hints.clone(),
                    node_hints: ep.node_hints.clone(),
                };
                let key = endpoint.addr_string();
                // kube-proxy's addEndpoints since v1.36 (PR #135593): the same IP twice is
                // an endpoint moving between slices, or a pod IP reused while the pod that
                // had it is still terminating; a terminating copy never replaces another,
                // so the running pod wins. (Before, a local copy won.)
                if !endpoint.terminating || !set.contains_key(&key) {
                    set.insert(key, endpoint);
                }
            }
        }
    }
    by_port
        .into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(name, set)| (name, Arc::new(set.into_values().collect())))
        .collect()
}

//! Incremental partial syncs against the fake kernel: after every change, the kernel holds
//! exactly what a full sync would leave (a sync compared with `iptables-save` finds
//! nothing to do), and the input is proportional to the change.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::config::Settings;
use crate::gen::{self, GenSpec};
use crate::xtables::apply::Restorer;
use crate::xtables::fake::FakeIptables;
use crate::iptables::render::fixed;
use crate::iptables::sync::sync;
use crate::model::{EndpointSlice, Service, ServiceType, SliceEndpoint, TrafficPolicy};
use crate::pipeline::{self, Loaded};
use crate::source::{self, ClusterState};
use crate::track::Event;

/// A loaded cluster, its rendered ruleset and a kernel fully synced to it.
struct Node {
    loaded: Loaded,
    rs: Ruleset,
    kernel: FakeIptables,
}

impl Node {
    fn new(state: ClusterState) -> Node {
        let flags = Settings { ip_family: Some(crate::settings::kinds::Families::Ipv4), nfacct: Some(false), ..Settings::default() };
        let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
        let rs = pipeline::render_iptables(&loaded).remove(0);
        let mut kernel = FakeIptables::new();
        sync(&mut kernel, &rs, false).unwrap();
        Node { loaded, rs, kernel }
    }

    /// Applies events, commits, and sends the partial sync's restore. Returns it.
    fn change(&mut self, events: &[Event]) -> Partial {
        for e in events {
            self.loaded.trackers.apply(e);
        }
        let changed = self.loaded.trackers.commit().remove(0).services;
        let before = Before::take(&self.rs, &changed);
        let (s, e) = self.loaded.trackers.families[0].view();
        self.rs.update(s, e, &changed);
        let partial = delta(&before, &self.rs).expect("expressible incrementally");
        if !partial.delta.is_empty() {
            self.kernel.restore(self.rs.ctx.node.family, &partial.delta.restore_text()).unwrap();
        }
        partial
    }

    /// What a full sync would still change (nothing, if the partial one was right).
    fn full_sync_finds(&mut self) -> Vec<String> {
        let report = sync(&mut self.kernel, &self.rs, true).unwrap();
        report.delta.changes.iter().map(|c| format!("{} {}", c.table, c.chain)).collect()
    }
}

fn demo() -> ClusterState {
    source::read_path(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml")).unwrap()
}

/// A generated cluster of `services` with `endpoints` each.
fn generated(services: usize, endpoints: usize, seed: u64) -> ClusterState {
    let mut state = ClusterState::default();
    source::file::read_str(Path::new("generated.yaml"), &gen::yaml(&GenSpec { services, endpoints, seed }), &mut state).unwrap();
    state
}

fn service(state: &ClusterState, ns: &str, name: &str) -> Service {
    state.services.iter().find(|s| s.id.namespace == ns && s.id.name == name).unwrap().clone()
}

fn slice_of(state: &ClusterState, ns: &str, service: &str) -> EndpointSlice {
    state.slices.iter().find(|s| s.service.namespace == ns && s.service.name == service).unwrap().clone()
}

fn endpoint(ip: &str, ready: bool) -> SliceEndpoint {
    SliceEndpoint {
        ip: ip.parse().unwrap(),
        ready,
        serving: ready,
        terminating: false,
        node_name: Some("node-2".into()),
        zone: None,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    }
}

#[test]
fn every_kind_of_change_leaves_the_kernel_as_a_full_sync_would() {
    let state = demo();
    let mut node = Node::new(state.clone());
    assert!(node.full_sync_finds().is_empty());

    let web = service(&state, "shop", "web");
    let mut slice = slice_of(&state, "shop", "web");
    let mut steps: Vec<(&str, Vec<Event>)> = Vec::new();

    slice.endpoints.push(endpoint("10.244.3.33", true));
    steps.push(("an endpoint added", vec![Event::SliceApplied(Arc::new(slice.clone()))]));
    slice.endpoints.remove(0);
    steps.push(("an endpoint removed", vec![Event::SliceApplied(Arc::new(slice.clone()))]));
    slice.endpoints.iter_mut().for_each(|e| e.terminating = true);
    steps.push(("every endpoint terminating", vec![Event::SliceApplied(Arc::new(slice.clone()))]));
    steps.push(("the slice deleted: REJECT", vec![Event::SliceDeleted(Arc::new(slice.clone()))]));
    slice.endpoints.iter_mut().for_each(|e| e.terminating = false);
    steps.push(("endpoints back", vec![Event::SliceApplied(Arc::new(slice.clone()))]));

    let mut changed = web.clone();
    changed.service_type = ServiceType::LoadBalancer;
    changed.external_traffic_policy = TrafficPolicy::Local;
    changed.external_ips = vec!["192.0.2.77".parse().unwrap()];
    changed.session_affinity = Some(600);
    steps.push(("the service's type, policy, external IP and affinity changed", vec![Event::ServiceApplied(Arc::new(changed))]));
    steps.push(("the service deleted", vec![Event::ServiceDeleted(web.id.clone())]));
    steps.push(("the service back", vec![Event::ServiceApplied(Arc::new(web.clone()))]));

    let mut other = web.clone();
    other.id.name = "aaa-first".into();
    other.cluster_ips = vec!["10.96.77.1".parse().unwrap()];
    for p in &mut other.ports {
        p.node_port = 0;
    }
    other.service_type = ServiceType::ClusterIP;
    let mut other_slice = slice.clone();
    other_slice.id.name = "aaa-first-1".into();
    other_slice.service = other.id.clone();
    steps.push((
        "a new service sorting first, and a change further down in the same sync",
        vec![
            Event::ServiceApplied(Arc::new(other.clone())),
            Event::SliceApplied(Arc::new(other_slice)),
            Event::SliceDeleted(Arc::new(slice.clone())),
        ],
    ));
    steps.push(("both deleted", vec![Event::ServiceDeleted(other.id.clone()), Event::ServiceDeleted(web.id.clone())]));

    for (what, events) in steps {
        node.change(&events);
        assert_eq!(node.full_sync_finds(), Vec::<String>::new(), "after {what}");
    }
}

#[test]
fn a_one_endpoint_change_in_a_large_cluster_sends_a_few_lines_and_leaves_the_top_level_chains_alone() {
    let state = generated(1000, 10, 1);
    let mut slice = state.slices[500].clone();
    let mut node = Node::new(state);
    slice.endpoints.push(endpoint("10.127.255.254", true));
    let partial = node.change(&[Event::SliceApplied(Arc::new(slice))]);
    let text = partial.delta.restore_text();
    assert!(partial.delta.restore_lines() < 40, "{text}");
    assert!(!text.contains("KUBE-SERVICES"), "{text}");
    assert!(node.full_sync_finds().is_empty());
}

#[test]
fn random_changes_to_a_generated_cluster_never_drift_from_a_full_sync() {
    let state = generated(120, 3, 7);
    let services = state.services.clone();
    let mut slices = state.slices.clone();
    let mut node = Node::new(state);
    let mut deleted = std::collections::BTreeSet::new();
    // A deterministic walk: each step changes three services in different ways.
    for step in 0..40usize {
        let mut events = Vec::new();
        for j in 0..3 {
            let i = (step * 37 + j * 53) % services.len();
            match (step + j) % 5 {
                0 => {
                    let ip = format!("10.200.{}.{}", step, j + 1);
                    if let Some(s) = slices.iter_mut().find(|s| s.service == services[i].id) {
                        s.endpoints.push(endpoint(&ip, true));
                        events.push(Event::SliceApplied(Arc::new(s.clone())));
                    }
                }
                1 => {
                    if let Some(s) = slices.iter_mut().find(|s| s.service == services[i].id) {
                        s.endpoints.pop();
                        events.push(Event::SliceApplied(Arc::new(s.clone())));
                    }
                }
                2 if deleted.insert(i) => events.push(Event::ServiceDeleted(services[i].id.clone())),
                _ => {
                    deleted.remove(&i);
                    events.push(Event::ServiceApplied(Arc::new(services[i].clone())));
                }
            }
        }
        node.change(&events);
        assert_eq!(node.full_sync_finds(), Vec::<String>::new(), "after step {step}");
    }
}

#[test]
fn a_large_cluster_mode_flip_is_left_to_a_full_sync() {
    let state = generated(60, 10, 1);
    let mut slice = state.slices[0].clone();
    let mut node = Node::new(state);
    assert!(!node.rs.large_cluster);
    for k in 0..400 {
        slice.endpoints.push(endpoint(&format!("10.201.{}.{}", k / 200, k % 200 + 1), true));
    }
    node.loaded.trackers.apply(&Event::SliceApplied(Arc::new(slice)));
    let changed = node.loaded.trackers.commit().remove(0).services;
    let before = Before::take(&node.rs, &changed);
    let (s, e) = node.loaded.trackers.families[0].view();
    node.rs.update(s, e, &changed);
    assert!(node.rs.large_cluster);
    assert!(delta(&before, &node.rs).is_none());
}

/// What positions rest on: no fixed rule is written into a top-level chain before the
/// services' rules.
#[test]
fn fixed_heads_write_into_no_top_level_chain() {
    let node = Node::new(demo());
    let head: Vec<_> = fixed::filter_head(&node.rs.ctx).into_iter().chain(fixed::nat_head(&node.rs.ctx)).collect();
    assert!(!head.is_empty());
    for rule in &head {
        assert!(TOP_CHAINS.iter().all(|(_, c)| rule.chain != *c), "{rule:?}");
    }
    assert!(node.rs.services.values().all(|r| r.top_counts.is_some()));
}

use std::sync::Arc;

use super::*;
use crate::model::*;

fn svc(name: &str, ip: &str, ports: &[(&str, u16)]) -> Service {
    Service {
        id: NamespacedName::new("ns", name),
        service_type: ServiceType::ClusterIP,
        cluster_ips: vec![ip.parse().unwrap()],
        ports: ports
            .iter()
            .map(|(n, p)| ServicePortSpec { name: n.to_string(), protocol: Protocol::Tcp, port: *p, node_port: 0 })
            .collect(),
        external_ips: vec![],
        load_balancer_source_ranges: vec![],
        ingress: vec![],
        external_traffic_policy: TrafficPolicy::Cluster,
        internal_traffic_policy: TrafficPolicy::Cluster,
        session_affinity: None,
        health_check_node_port: 0,
        proxy_labels: ProxyLabels::default(),
    }
}

fn ep(ip: &str, node: Option<&str>, ready: bool) -> SliceEndpoint {
    SliceEndpoint {
        ip: ip.parse().unwrap(),
        ready,
        serving: ready,
        terminating: false,
        node_name: node.map(Arc::from),
        zone: None,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    }
}

fn slice(name: &str, svc: &str, eps: Vec<SliceEndpoint>) -> Arc<EndpointSlice> {
    Arc::new(EndpointSlice {
        id: NamespacedName::new("ns", name),
        service: NamespacedName::new("ns", svc),
        family: IpFamily::V4,
        ports: vec![SlicePort { name: "http".into(), port: 8080, protocol: Protocol::Tcp }],
        endpoints: eps,
        proxy_labels: ProxyLabels::default(),
        trigger_time: None,
    })
}

fn tracker() -> FamilyTracker {
    FamilyTracker::new(IpFamily::V4, "node-a", None)
}

#[test]
fn no_op_service_update_produces_no_change() {
    let mut t = tracker();
    let s = Arc::new(svc("web", "10.0.0.1", &[("http", 80)]));
    t.apply(&Event::ServiceApplied(s.clone()));
    assert_eq!(t.commit().services.len(), 1);
    t.apply(&Event::ServiceApplied(s.clone()));
    assert!(t.commit().is_empty());
    // Changed and changed back before a commit: also nothing.
    t.apply(&Event::ServiceApplied(Arc::new(svc("web", "10.0.0.1", &[("http", 81)]))));
    t.apply(&Event::ServiceApplied(s));
    assert!(t.commit().is_empty());
}

#[test]
fn removed_port_leaves_the_map() {
    let mut t = tracker();
    t.apply(&Event::ServiceApplied(Arc::new(svc("web", "10.0.0.1", &[("http", 80), ("https", 443)]))));
    t.commit();
    assert_eq!(t.services.map().len(), 2);
    t.apply(&Event::ServiceApplied(Arc::new(svc("web", "10.0.0.1", &[("http", 80)]))));
    let c = t.commit();
    assert_eq!(c.services.len(), 1);
    assert_eq!(t.services.map().len(), 1);
    t.apply(&Event::ServiceDeleted(NamespacedName::new("ns", "web")));
    t.commit();
    assert!(t.services.map().is_empty());
}

#[test]
fn slices_merge_dedupe_and_sort_by_string() {
    let mut t = tracker();
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.1", None, true), ep("10.1.1.11", None, true)])));
    // The same endpoint in a second slice appears once; the later (non-terminating) copy wins.
    t.apply(&Event::SliceApplied(slice("web-b", "web", vec![ep("10.1.1.1", Some("node-a"), true), ep("10.1.1.2", None, false)])));
    let c = t.commit();
    assert_eq!(c.services.len(), 1);
    let eps = t.endpoints.map().values().next().unwrap();
    let addrs: Vec<String> = eps.iter().map(Endpoint::addr_string).collect();
    assert_eq!(addrs, ["10.1.1.11:8080", "10.1.1.1:8080", "10.1.1.2:8080"]);
    assert!(eps[1].is_local);
}

/// kube-proxy v1.36+ (PR #135593): a pod IP reused while the pod that had it is still
/// terminating is served by the running pod, whichever slice lists it first; a local copy
/// no longer wins over it.
#[test]
fn a_terminating_copy_never_replaces_another() {
    let terminating = |ip: &str, node: Option<&str>| {
        let mut e = ep(ip, node, false);
        e.terminating = true;
        e.serving = false;
        e
    };
    let mut t = tracker();
    // The terminating copy (on this node) comes first, then the running one elsewhere.
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![terminating("10.1.1.1", Some("node-a"))])));
    t.apply(&Event::SliceApplied(slice("web-b", "web", vec![ep("10.1.1.1", Some("node-b"), true)])));
    t.commit();
    let eps = t.endpoints.map().values().next().unwrap().clone();
    assert_eq!(eps.len(), 1);
    assert!(eps[0].ready && !eps[0].terminating && !eps[0].is_local, "{:?}", eps[0]);
    // The running copy first, then a terminating local one: the running one stays.
    let mut t = tracker();
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.1", Some("node-b"), true)])));
    t.apply(&Event::SliceApplied(slice("web-b", "web", vec![terminating("10.1.1.1", Some("node-a"))])));
    t.commit();
    let eps = t.endpoints.map().values().next().unwrap().clone();
    assert!(eps[0].ready && !eps[0].terminating && !eps[0].is_local, "{:?}", eps[0]);
    // Twice in one slice: the same rule.
    let mut t = tracker();
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![terminating("10.1.1.1", None), ep("10.1.1.1", None, true)])));
    t.commit();
    let eps = t.endpoints.map().values().next().unwrap().clone();
    assert!(eps[0].ready && !eps[0].terminating, "{:?}", eps[0]);
}

#[test]
fn identical_slice_is_not_a_change_and_other_family_is_ignored() {
    let mut t = tracker();
    let s = slice("web-a", "web", vec![ep("10.1.1.1", None, true)]);
    t.apply(&Event::SliceApplied(s.clone()));
    t.commit();
    t.apply(&Event::SliceApplied(Arc::new((*s).clone())));
    assert_eq!(t.endpoints.pending(), 0);
    let mut v6 = (*s).clone();
    v6.family = IpFamily::V6;
    t.apply(&Event::SliceApplied(Arc::new(v6)));
    assert!(t.commit().is_empty());
}

#[test]
fn a_slice_change_that_keeps_the_merged_endpoints_is_not_reported() {
    let mut t = tracker();
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.1", None, true)])));
    t.apply(&Event::SliceApplied(slice("web-b", "web", vec![ep("10.1.1.1", None, true)])));
    t.commit();
    t.apply(&Event::SliceDeleted(slice("web-b", "web", vec![])));
    assert!(t.commit().is_empty());
    assert_eq!(t.endpoints.map().values().next().unwrap().len(), 1);
}

#[test]
fn labels_hand_objects_to_another_proxy() {
    let mut t = tracker();
    let mut s = svc("web", "10.0.0.1", &[("http", 80)]);
    s.proxy_labels.service_proxy_name = Some("other".into());
    t.apply(&Event::ServiceApplied(Arc::new(s)));
    t.commit();
    assert!(t.services.map().is_empty());
}

/// kube-proxy's trackers: a Service change that ends where it began is no longer pending;
/// every slice event that changes the pending state counts, two on one service being two.
#[test]
fn pending_counts_what_kube_proxys_trackers_count() {
    let mut t = tracker();
    let s = Arc::new(svc("web", "10.0.0.1", &[("http", 80)]));
    t.apply(&Event::ServiceApplied(s.clone()));
    assert_eq!(t.services.pending(), 1);
    t.commit();
    t.apply(&Event::ServiceApplied(s.clone()));
    assert_eq!(t.services.pending(), 0, "the committed ports again: no change");
    t.apply(&Event::ServiceApplied(Arc::new(svc("web", "10.0.0.1", &[("http", 81)]))));
    assert_eq!(t.services.pending(), 1);
    t.apply(&Event::ServiceApplied(s));
    assert_eq!(t.services.pending(), 0, "changed back before a commit");
    t.apply(&Event::ServiceDeleted(NamespacedName::new("ns", "gone")));
    assert_eq!(t.services.pending(), 0, "an unknown service deleted");

    let a = slice("web-a", "web", vec![ep("10.1.1.1", None, true)]);
    t.apply(&Event::SliceApplied(a.clone()));
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.2", None, true)])));
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.2", None, true)])));
    assert_eq!((t.endpoints.pending(), t.endpoints.changed_events()), (1, 2), "one service, two changing events");
    t.apply(&Event::SliceDeleted(slice("web-z", "web", vec![])));
    assert_eq!(t.endpoints.changed_events(), 2, "deleting an unknown slice changes nothing");
    t.commit();
    assert_eq!(t.endpoints.changed_events(), 0);
}

/// kube-proxy's `EndpointSliceUpdate`: deleting one of a service's slices drops the trigger
/// times its pending updates recorded (other services' stay); a later update records again.
#[test]
fn a_slice_deletion_drops_its_services_pending_trigger_times() {
    use std::time::{Duration, SystemTime};
    let mut t = tracker();
    let now = SystemTime::now();
    t.endpoints.set_started_for_test(now - Duration::from_secs(60));
    let stamped = |name: &str, svc: &str, ip: &str, at: SystemTime| {
        let mut s = (*slice(name, svc, vec![ep(ip, None, true)])).clone();
        s.trigger_time = Some(at);
        Arc::new(s)
    };
    t.apply(&Event::SliceApplied(slice("web-a", "web", vec![ep("10.1.1.1", None, true)])));
    t.apply(&Event::SliceApplied(slice("web-b", "web", vec![ep("10.1.1.2", None, true)])));
    t.commit();

    let (t1, t2, t3) = (now - Duration::from_secs(30), now - Duration::from_secs(20), now - Duration::from_secs(10));
    t.apply(&Event::SliceApplied(stamped("web-a", "web", "10.1.1.3", t1)));
    t.apply(&Event::SliceApplied(stamped("db-a", "db", "10.2.2.1", t2)));
    t.apply(&Event::SliceDeleted(slice("web-b", "web", vec![])));
    let c = t.commit();
    assert!(c.services.contains(&NamespacedName::new("ns", "web")), "web's endpoints changed");
    assert_eq!(c.trigger_times, [t2], "web's time is dropped by its slice's deletion, db's kept");

    t.apply(&Event::SliceDeleted(slice("web-z", "web", vec![])));
    t.apply(&Event::SliceApplied(stamped("web-a", "web", "10.1.1.4", t3)));
    t.apply(&Event::SliceDeleted(slice("web-z", "web", vec![])));
    assert_eq!(t.commit().trigger_times, [t3], "an update after the deletion records again; an unknown slice's deletion changes nothing");
}

//! Endpoint selection: kube-proxy's `CategorizeEndpoints` (pkg/proxy/topology.go).
//!
//! Given a service port's endpoints and this node, it returns the endpoints that
//! "Cluster" traffic policy uses (ready ones, narrowed by topology hints when every ready
//! endpoint has one and some match this node or zone; else serving-terminating ones
//! anywhere), the endpoints "Local" policy uses (ready local ones, else serving-terminating
//! local ones), every endpoint reachable under either, and whether the service has any
//! usable endpoint anywhere.

use std::collections::BTreeMap;

use crate::model::{ports_of, Endpoint, EndpointsMap, NamespacedName, ServicePort, ServicePortMap};

/// The result of [`categorize`]. Lists keep the input order (sorted by `ip:port`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized<'a> {
    pub cluster: Vec<&'a Endpoint>,
    pub local: Vec<&'a Endpoint>,
    pub all_reachable: Vec<&'a Endpoint>,
    pub has_any: bool,
}

/// Where this proxier runs, for topology.
#[derive(Debug, Clone, Copy)]
pub struct Locality<'a> {
    pub node_name: &'a str,
    /// The node's `topology.kubernetes.io/zone` label, if any.
    pub zone: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopologyMode {
    None,
    Node,
    Zone,
}

pub fn categorize<'a>(endpoints: &'a [Endpoint], svc: &ServicePort, here: Locality) -> Categorized<'a> {
    let mut out = Categorized::default();
    if svc.uses_cluster_endpoints() {
        let mode = topology_mode(endpoints, here);
        out.cluster = endpoints.iter().filter(|e| e.ready && available_for_topology(e, mode, here)).collect();
        if out.cluster.is_empty() {
            out.cluster = endpoints.iter().filter(|e| e.serving && e.terminating).collect();
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !svc.uses_local_endpoints() {
        out.all_reachable = out.cluster.clone();
        return out;
    }
    let usable = |e: &&Endpoint| e.ready || (e.serving && e.terminating);
    out.has_any |= endpoints.iter().any(|e| usable(&e));
    let local_ready = endpoints.iter().any(|e| e.is_local && e.ready);
    out.local = if local_ready {
        endpoints.iter().filter(|e| e.is_local && e.ready).collect()
    } else {
        endpoints.iter().filter(|e| e.is_local && e.serving && e.terminating).collect()
    };
    if !svc.uses_cluster_endpoints() {
        out.all_reachable = out.local.clone();
    } else if out.local.is_empty() {
        out.all_reachable = out.cluster.clone();
    } else {
        // The union, in `ip:port` order (kube-proxy builds it from a map, in random order).
        let mut union: BTreeMap<String, &Endpoint> = BTreeMap::new();
        for e in out.cluster.iter().chain(out.local.iter()) {
            union.insert(e.addr_string(), e);
        }
        out.all_reachable = union.into_values().collect();
    }
    out
}

/// kube-proxy's `sync_proxy_rules_no_local_endpoints_total`: service ports whose internal
/// (ITP Local) or external (ETP Local, externally accessible) policy finds no local
/// endpoint to use, as (internal, external).
pub fn no_local_endpoints(services: &ServicePortMap, endpoints: &EndpointsMap) -> (usize, usize) {
    services.iter().map(|(name, svc)| no_local_endpoint(svc, endpoints.get(name))).fold((0, 0), add)
}

/// [`no_local_endpoints`] of one service's ports (what a commit that changed it changes).
pub fn no_local_endpoints_of(services: &ServicePortMap, endpoints: &EndpointsMap, id: &NamespacedName) -> (usize, usize) {
    ports_of(services, id).map(|name| no_local_endpoint(&services[name], endpoints.get(name))).fold((0, 0), add)
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 + b.0, a.1 + b.1)
}

fn no_local_endpoint(svc: &ServicePort, eps: Option<&std::sync::Arc<Vec<Endpoint>>>) -> (usize, usize) {
    let usable_local = eps.is_some_and(|eps| eps.iter().any(|e| e.is_local && (e.ready || (e.serving && e.terminating))));
    if usable_local {
        return (0, 0);
    }
    (usize::from(svc.internal_policy_local), usize::from(svc.external_policy_local && svc.externally_accessible()))
}

/// Use node hints when every ready endpoint has some and one names this node; else zone
/// hints when every ready endpoint has some and one names this zone; else ignore hints.
fn topology_mode(endpoints: &[Endpoint], here: Locality) -> TopologyMode {
    let ready: Vec<&Endpoint> = endpoints.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return TopologyMode::None;
    }
    if ready.iter().all(|e| !e.node_hints.is_empty()) && ready.iter().any(|e| e.node_hints.contains(here.node_name)) {
        return TopologyMode::Node;
    }
    if let Some(zone) = here.zone {
        if ready.iter().all(|e| !e.zone_hints.is_empty()) && ready.iter().any(|e| e.zone_hints.contains(zone)) {
            return TopologyMode::Zone;
        }
    }
    TopologyMode::None
}

fn available_for_topology(e: &Endpoint, mode: TopologyMode, here: Locality) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::Node => e.node_hints.contains(here.node_name),
        TopologyMode::Zone => here.zone.is_some_and(|z| e.zone_hints.contains(z)),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::model::{NamespacedName, Protocol, ServicePortName};

    fn ep(ip: &str, local: bool, ready: bool, terminating: bool, zones: &[&str]) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 80,
            is_local: local,
            ready,
            serving: ready || terminating,
            terminating,
            zone_hints: zones.iter().map(|z| z.to_string()).collect(),
            node_hints: Default::default(),
        }
    }

    fn svc(itp_local: bool, etp_local: bool, node_port: u16) -> ServicePort {
        ServicePort {
            name: ServicePortName { service: NamespacedName::new("ns", "s"), port: "p".into(), protocol: Protocol::Tcp },
            cluster_ip: "10.0.0.1".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            node_port,
            external_ips: vec![],
            load_balancer_vips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity: None,
            health_check_node_port: 0,
            external_policy_local: etp_local,
            internal_policy_local: itp_local,
        }
    }

    const HERE: Locality = Locality { node_name: "n", zone: Some("z1") };

    fn ips(v: &[&Endpoint]) -> Vec<String> {
        v.iter().map(|e| e.ip.to_string()).collect()
    }

    #[test]
    fn cluster_policy_uses_ready_then_serving_terminating() {
        let eps = vec![ep("10.0.0.2", false, false, true, &[]), ep("10.0.0.3", false, true, false, &[])];
        let c = categorize(&eps, &svc(false, false, 0), HERE);
        assert_eq!(ips(&c.cluster), ["10.0.0.3"]);
        let eps = vec![ep("10.0.0.2", false, false, true, &[]), ep("10.0.0.4", false, false, false, &[])];
        let c = categorize(&eps, &svc(false, false, 0), HERE);
        assert_eq!(ips(&c.cluster), ["10.0.0.2"]);
        assert!(c.has_any);
    }

    #[test]
    fn zone_hints_apply_only_when_every_ready_endpoint_has_one() {
        let eps = vec![ep("10.0.0.2", false, true, false, &["z1"]), ep("10.0.0.3", false, true, false, &["z2"])];
        assert_eq!(ips(&categorize(&eps, &svc(false, false, 0), HERE).cluster), ["10.0.0.2"]);
        let eps = vec![ep("10.0.0.2", false, true, false, &["z1"]), ep("10.0.0.3", false, true, false, &[])];
        assert_eq!(categorize(&eps, &svc(false, false, 0), HERE).cluster.len(), 2);
        let eps = vec![ep("10.0.0.2", false, true, false, &["z3"]), ep("10.0.0.3", false, true, false, &["z2"])];
        assert_eq!(categorize(&eps, &svc(false, false, 0), HERE).cluster.len(), 2);
    }

    #[test]
    fn etp_local_merges_remote_cluster_and_local_terminating() {
        let eps = vec![ep("10.0.0.2", false, true, false, &[]), ep("10.0.0.3", true, false, true, &[])];
        let c = categorize(&eps, &svc(false, true, 30000), HERE);
        assert_eq!(ips(&c.cluster), ["10.0.0.2"]);
        assert_eq!(ips(&c.local), ["10.0.0.3"]);
        assert_eq!(ips(&c.all_reachable), ["10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn itp_local_without_local_endpoints_still_has_any() {
        let eps = vec![ep("10.0.0.2", false, true, false, &[])];
        let c = categorize(&eps, &svc(true, false, 0), HERE);
        assert!(c.cluster.is_empty() && c.local.is_empty() && c.all_reachable.is_empty());
        assert!(c.has_any);
    }
}

#[cfg(test)]
mod no_local_tests {
    use super::no_local_endpoints;

    fn counts(fixture: &str) -> (usize, usize) {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(fixture);
        let state = crate::source::read_path(&path).unwrap();
        let loaded = crate::pipeline::load(state, crate::config::Settings::default(), crate::config::Settings::default()).unwrap();
        loaded.trackers.families.iter().map(|t| {
            let (s, e) = t.view();
            no_local_endpoints(s, e)
        }).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    #[test]
    fn local_policies_without_local_endpoints_are_counted_by_policy() {
        assert_eq!(counts("etp-local-no-local-endpoints.yaml").1, 1, "external");
        assert_eq!(counts("itp-local-no-local-endpoints.yaml").0, 2, "internal: node-cache and node-metrics");
        assert_eq!(counts("etp-local-with-local-endpoints.yaml"), (0, 0));
    }
}

//! The EndpointSlice mirroring controller: a legacy `v1/Endpoints` of a Service without
//! a selector becomes EndpointSlices, one per address type and port set.
//!
//! Not mirrored (as upstream): no Service of that name; an ExternalName Service; a
//! Service with a selector (the EndpointSlice controller owns its slices); the label
//! `endpointslice.kubernetes.io/skip-mirror: "true"`; a leader-election lock annotation.
//! Each subset's ready addresses get `ready: true`, `notReadyAddresses` `ready: false`
//! (serving and terminating unset, as the controller writes them); at most 1000
//! addresses per subset are mirrored; equal endpoints in a group are written once.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{DerivedSlice, EndpointInfo};
use crate::intern::intern;
use crate::model::{EndpointSlice, NamespacedName, Service, SliceEndpoint, SlicePort};
use crate::net::IpFamily;
use crate::source::extra::{LegacyAddress, LegacyEndpoints, LegacySubset, ServiceBackend};

/// The mirroring controller's per-subset cap (`maxEndpointsPerSubset`).
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;

/// Why an Endpoints object is not mirrored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum NotMirrored {
    #[error("no Service of that name")]
    NoService,
    #[error("its Service is of type ExternalName")]
    ExternalName,
    #[error("its Service has a selector (the EndpointSlice controller manages its slices)")]
    HasSelector,
    #[error("it is labelled endpointslice.kubernetes.io/skip-mirror=true")]
    SkipMirror,
    #[error("it is a leader-election lock")]
    LeaderElection,
}

/// Mirrors `ep`, whose Service (if any) is `svc`. Slices are named `NAME-mirrored-N`.
pub fn mirror(
    ep: &LegacyEndpoints,
    svc: Option<(&Service, &ServiceBackend)>,
) -> Result<Vec<DerivedSlice>, NotMirrored> {
    let Some((svc, backend)) = svc else { return Err(NotMirrored::NoService) };
    if backend.external_name {
        return Err(NotMirrored::ExternalName);
    }
    if backend.selector.is_some() {
        return Err(NotMirrored::HasSelector);
    }
    if ep.skip_mirror {
        return Err(NotMirrored::SkipMirror);
    }
    if ep.leader_election {
        return Err(NotMirrored::LeaderElection);
    }
    let mut groups: BTreeMap<(IpFamily, Vec<SlicePort>), DerivedSlice> = BTreeMap::new();
    for subset in &ep.subsets {
        let ports = subset_ports(subset);
        for (addr, ready) in capped(subset) {
            let family = IpFamily::of(&addr.ip);
            let group = groups
                .entry((family, ports.clone()))
                .or_insert_with(|| empty(ep, svc, family, ports.clone()));
            let (e, info) = endpoint(addr, ready);
            if !group.slice.endpoints.iter().zip(&group.info).any(|(x, i)| *x == e && *i == info) {
                group.slice.endpoints.push(e);
                group.info.push(info);
            }
        }
    }
    let mut out: Vec<DerivedSlice> = groups.into_values().collect();
    for (i, d) in out.iter_mut().enumerate() {
        d.slice.id.name = format!("{}-mirrored-{}", ep.id.name, i + 1);
    }
    Ok(out)
}

fn subset_ports(subset: &LegacySubset) -> Vec<SlicePort> {
    let mut ports: Vec<SlicePort> =
        subset.ports.iter().map(|p| SlicePort { name: p.name.clone(), port: p.port, protocol: p.protocol }).collect();
    ports.sort();
    ports
}

/// Ready addresses, then not-ready ones, at most [`MAX_ENDPOINTS_PER_SUBSET`] in all.
fn capped(subset: &LegacySubset) -> impl Iterator<Item = (&LegacyAddress, bool)> {
    let ready = subset.addresses.iter().map(|a| (a, true));
    let not_ready = subset.not_ready.iter().map(|a| (a, false));
    ready.chain(not_ready).take(MAX_ENDPOINTS_PER_SUBSET)
}

fn endpoint(addr: &LegacyAddress, ready: bool) -> (SliceEndpoint, EndpointInfo) {
    let e = SliceEndpoint {
        ip: addr.ip,
        ready,
        // Unset in mirrored slices; kube-proxy reads an unset `serving` as true.
        serving: true,
        terminating: false,
        node_name: addr.node_name.as_deref().map(intern),
        zone: None,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    };
    (e, EndpointInfo { hostname: addr.hostname.clone(), target: addr.target.clone() })
}

fn empty(ep: &LegacyEndpoints, svc: &Service, family: IpFamily, ports: Vec<SlicePort>) -> DerivedSlice {
    DerivedSlice {
        slice: EndpointSlice {
            id: NamespacedName::new(ep.id.namespace.clone(), String::new()),
            service: svc.id.clone(),
            family,
            ports,
            endpoints: Vec::new(),
            proxy_labels: ep.proxy_labels.clone(),
            trigger_time: None,
        },
        info: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{Protocol, ProxyLabels, ServiceType, TrafficPolicy};
    use crate::source::extra::LegacyPort;

    fn svc() -> (Service, ServiceBackend) {
        let id = NamespacedName::new("ns", "db");
        let svc = Service {
            id: id.clone(),
            service_type: ServiceType::ClusterIP,
            cluster_ips: vec!["10.96.0.9".parse().unwrap()],
            ports: Vec::new(),
            external_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            ingress: Vec::new(),
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            session_affinity: None,
            health_check_node_port: 0,
            proxy_labels: ProxyLabels::default(),
        };
        let backend = ServiceBackend {
            id,
            selector: None,
            publish_not_ready: false,
            headless: false,
            external_name: false,
            ip_families: Vec::new(),
            ports: Vec::new(),
            proxy_labels: ProxyLabels::default(),
        };
        (svc, backend)
    }

    fn addr(ip: &str) -> LegacyAddress {
        LegacyAddress { ip: ip.parse().unwrap(), hostname: None, node_name: None, target: None }
    }

    fn endpoints(addresses: Vec<LegacyAddress>) -> LegacyEndpoints {
        LegacyEndpoints {
            id: NamespacedName::new("ns", "db"),
            skip_mirror: false,
            leader_election: false,
            proxy_labels: ProxyLabels::default(),
            subsets: vec![LegacySubset {
                addresses,
                not_ready: vec![addr("10.0.0.99")],
                ports: vec![LegacyPort { name: "sql".into(), port: 5432, protocol: Protocol::Tcp }],
            }],
        }
    }

    #[test]
    fn families_split_duplicates_collapse_and_subsets_are_capped() {
        let (s, b) = svc();
        let ep = endpoints(vec![addr("10.0.0.1"), addr("10.0.0.1"), addr("fd00::1")]);
        let out = mirror(&ep, Some((&s, &b))).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].slice.family, IpFamily::V4);
        let v4: Vec<(String, bool)> = out[0].slice.endpoints.iter().map(|e| (e.ip.to_string(), e.ready)).collect();
        assert_eq!(v4, [("10.0.0.1".to_string(), true), ("10.0.0.99".to_string(), false)]);
        let many: Vec<LegacyAddress> = (0..1100u32).map(|i| addr(&std::net::Ipv4Addr::from(0x0a01_0000 + i).to_string())).collect();
        let out = mirror(&endpoints(many), Some((&s, &b))).unwrap();
        assert_eq!(out[0].slice.endpoints.len(), MAX_ENDPOINTS_PER_SUBSET);
    }

    #[test]
    fn what_is_not_mirrored() {
        let (s, mut b) = svc();
        let mut ep = endpoints(vec![addr("10.0.0.1")]);
        assert_eq!(mirror(&ep, None), Err(NotMirrored::NoService));
        ep.leader_election = true;
        assert_eq!(mirror(&ep, Some((&s, &b))), Err(NotMirrored::LeaderElection));
        ep.skip_mirror = true;
        assert_eq!(mirror(&ep, Some((&s, &b))), Err(NotMirrored::SkipMirror));
        b.selector = Some(BTreeMap::from([("app".to_string(), "db".to_string())]));
        assert_eq!(mirror(&ep, Some((&s, &b))), Err(NotMirrored::HasSelector));
        b.external_name = true;
        assert_eq!(mirror(&ep, Some((&s, &b))), Err(NotMirrored::ExternalName));
    }
}

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
        node_name: addr.node_name.clone(),
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
        },
        info: Vec::new(),
    }
}

//! Seeded, bounded random change sequences over a generated cluster, for the tests that
//! prove IPVS mode's incremental planning and partial syncs never drift from a full one.

use std::path::Path;
use std::sync::Arc;

use crate::gen::{self, GenSpec, Rng};
use crate::model::{Ingress, Service, ServiceType, TrafficPolicy};
use crate::net::Cidr;
use crate::source::{self, ClusterState};
use crate::track::Event;

/// An external IP several services may share (one bound address, counted per user).
const SHARED_IP: &str = "192.0.2.50";

/// A generated cluster and the walk over it.
pub struct Walk {
    pub state: ClusterState,
    services: Vec<Service>,
    deleted: Vec<bool>,
    rng: Rng,
    step: usize,
}

impl Walk {
    pub fn new(services: usize, endpoints: usize, seed: u64) -> Walk {
        let text = gen::yaml(&GenSpec { services, endpoints, seed });
        let mut state = ClusterState::default();
        source::file::read_str(Path::new("generated.yaml"), &text, &mut state).expect("generated cluster parses");
        let services = state.services.clone();
        Walk { deleted: vec![false; services.len()], services, state, rng: Rng::new(seed), step: 0 }
    }

    /// The cluster as the walk has left it: the services not deleted (in their changed
    /// shapes) and every slice.
    pub fn current(&self) -> (Vec<&Service>, &[crate::model::EndpointSlice]) {
        let services = self.services.iter().zip(&self.deleted).filter(|(_, d)| !**d).map(|(s, _)| s).collect();
        (services, &self.state.slices)
    }

    /// The events of one step: `changes` random changes, each to a random service.
    pub fn step(&mut self, changes: usize) -> Vec<Event> {
        self.step += 1;
        (0..changes).filter_map(|_| self.change()).collect()
    }

    fn change(&mut self) -> Option<Event> {
        let i = self.rng.below(self.services.len());
        let id = self.services[i].id.clone();
        let kind = self.rng.below(10);
        if self.deleted[i] {
            self.deleted[i] = false;
            return Some(Event::ServiceApplied(Arc::new(self.services[i].clone())));
        }
        let step = self.step;
        let slice = self.state.slices.iter_mut().find(|s| s.service == id);
        match (kind, slice) {
            (0..=2, Some(s)) => {
                let mut e = s.endpoints.first()?.clone();
                e.ip = format!("10.201.{}.{}", step % 250, s.endpoints.len() % 250 + 1).parse().ok()?;
                s.endpoints.push(e);
                Some(Event::SliceApplied(Arc::new(s.clone())))
            }
            (3..=4, Some(s)) => {
                s.endpoints.pop();
                Some(Event::SliceApplied(Arc::new(s.clone())))
            }
            (5, Some(s)) => {
                s.endpoints.iter_mut().for_each(|e| e.terminating = !e.terminating);
                Some(Event::SliceApplied(Arc::new(s.clone())))
            }
            (6, _) => {
                self.deleted[i] = true;
                Some(Event::ServiceDeleted(id))
            }
            _ => {
                let svc = self.mutate(i);
                Some(Event::ServiceApplied(Arc::new(svc)))
            }
        }
    }

    /// A changed copy of service `i`, kept as its new shape.
    fn mutate(&mut self, i: usize) -> Service {
        let pick = self.rng.below(6);
        let svc = &mut self.services[i];
        match pick {
            0 => svc.external_ips = if svc.external_ips.is_empty() { vec![SHARED_IP.parse().expect("address")] } else { Vec::new() },
            1 => {
                svc.service_type = ServiceType::LoadBalancer;
                svc.ingress = vec![Ingress { ip: format!("198.51.100.{}", i % 250 + 1).parse().expect("address"), proxy_mode: false }];
                svc.load_balancer_source_ranges = vec![Cidr::parse_sloppy("203.0.113.0/24").expect("cidr")];
            }
            2 => {
                svc.external_traffic_policy = match svc.external_traffic_policy {
                    TrafficPolicy::Local => TrafficPolicy::Cluster,
                    TrafficPolicy::Cluster => TrafficPolicy::Local,
                }
            }
            3 => svc.session_affinity = if svc.session_affinity.is_some() { None } else { Some(300) },
            4 => {
                svc.service_type = ServiceType::ClusterIP;
                svc.ingress.clear();
                svc.load_balancer_source_ranges.clear();
                svc.ports.iter_mut().for_each(|p| p.node_port = 0);
            }
            _ => svc.internal_traffic_policy = match svc.internal_traffic_policy {
                TrafficPolicy::Local => TrafficPolicy::Cluster,
                TrafficPolicy::Cluster => TrafficPolicy::Local,
            },
        }
        svc.clone()
    }
}

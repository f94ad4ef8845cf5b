//! The nftables renderer: cluster state in, one family's `kube-proxy` table out, as
//! values ([`crate::nftables::model`]). Pure. Each service port's objects are rendered
//! apart (as the iptables renderer keeps its lines), in service-port order.
//!
//! A [`Ruleset`] keeps what each service port was rendered *from* (the trackers' shared
//! `Arc`s of the port and its endpoints), not the objects: a port's objects are a pure
//! function of them and the [`Context`], so they are rendered again when a sync needs them
//! (the whole table for a full sync, the changed ports before and after for a partial
//! one). Kept rendered, the objects were most of nftables watch mode's steady memory
//! (about 110 MB of a 170 MB live heap at 10,000 services × 10 endpoints, BENCHMARKS.md);
//! kept as inputs, they cost two pointers per port beside the trackers' one copy.

pub mod chains;
pub mod elements;
pub mod fixed;
pub mod wiring;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::{ports_of, Endpoint, EndpointsMap, NamespacedName, ServicePort, ServicePortMap, ServicePortName};
use crate::nftables::context::Context;
use crate::nftables::model::{Objects, Table};
use crate::nftables::names::{TABLE, TABLE_COMMENT};

/// What one service port's objects are rendered from: the port and its endpoints, as the
/// trackers held them when the ruleset last took them (shared, not copied).
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub service: Arc<ServicePort>,
    pub endpoints: Option<Arc<Vec<Endpoint>>>,
}

impl Inputs {
    /// The port's chains, affinity sets, rules and elements.
    pub fn objects(&self, ctx: &Context) -> Objects {
        let mut out = Objects::default();
        self.write(ctx, &mut out);
        out
    }

    fn write(&self, ctx: &Context, out: &mut Objects) {
        let eps = self.endpoints.as_deref().map(Vec::as_slice).unwrap_or_default();
        let p = wiring::Wiring::new(&self.service, eps, ctx.locality());
        elements::write(&p, out);
        chains::write(ctx, &p, out);
    }
}

/// One family's rules: the fixed objects and what each service port's are rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruleset {
    pub ctx: Context,
    pub fixed: Objects,
    pub services: BTreeMap<ServicePortName, Inputs>,
}

impl Ruleset {
    /// The whole table, fixed objects first, then each service port's.
    pub fn table(&self) -> Table {
        let mut objects = self.fixed.clone();
        for inputs in self.services.values() {
            inputs.write(&self.ctx, &mut objects);
        }
        Table { family: self.ctx.family, name: TABLE, comment: TABLE_COMMENT, objects }
    }

    /// The objects of service `id`'s ports, in service-port order.
    pub fn objects_of(&self, id: &NamespacedName) -> Vec<Objects> {
        ports_of(&self.services, id).map(|k| self.services[k].objects(&self.ctx)).collect()
    }

    /// Brings the ruleset up to date after a commit that changed `changed`: those
    /// services' ports are taken again from the trackers' maps.
    pub fn update(&mut self, services: &ServicePortMap, endpoints: &EndpointsMap, changed: &BTreeSet<NamespacedName>) {
        for id in changed {
            let stale: Vec<ServicePortName> = ports_of(&self.services, id).cloned().collect();
            for k in stale {
                self.services.remove(&k);
            }
            for k in ports_of(services, id) {
                if let Some(inputs) = inputs(k, services, endpoints) {
                    self.services.insert(k.clone(), inputs);
                }
            }
        }
    }
}

fn inputs(name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap) -> Option<Inputs> {
    Some(Inputs { service: services.get(name)?.clone(), endpoints: endpoints.get(name).cloned() })
}

/// Takes every service port (what its objects are rendered from).
pub fn render(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> Ruleset {
    let taken = services.keys().filter_map(|k| inputs(k, services, endpoints).map(|i| (k.clone(), i))).collect();
    Ruleset { ctx: ctx.clone(), fixed: fixed::write(ctx), services: taken }
}

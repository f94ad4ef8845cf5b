//! The nftables renderer: cluster state in, one family's `kube-proxy` table out, as
//! values ([`crate::nftables::model`]). Pure. Each service port's objects are kept apart
//! (as the iptables renderer keeps its lines), in service-port order.

pub mod chains;
pub mod elements;
pub mod fixed;
pub mod wiring;

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ports_of, EndpointsMap, NamespacedName, ServicePortMap, ServicePortName};
use crate::nftables::context::Context;
use crate::nftables::model::{Objects, Table};
use crate::nftables::names::{TABLE, TABLE_COMMENT};

/// One family's rules: the fixed objects and each service port's.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruleset {
    pub ctx: Context,
    pub fixed: Objects,
    pub services: BTreeMap<ServicePortName, Objects>,
}

impl Ruleset {
    /// The whole table, fixed objects first, then each service port's.
    pub fn table(&self) -> Table {
        let mut objects = self.fixed.clone();
        for o in self.services.values() {
            objects.extend(o);
        }
        Table { family: self.ctx.family, name: TABLE, comment: TABLE_COMMENT, objects }
    }

    /// Brings the ruleset up to date after a commit that changed `changed`, re-rendering
    /// only those services' ports.
    pub fn update(&mut self, services: &ServicePortMap, endpoints: &EndpointsMap, changed: &BTreeSet<NamespacedName>) {
        for id in changed {
            let stale: Vec<ServicePortName> = ports_of(&self.services, id).cloned().collect();
            for k in stale {
                self.services.remove(&k);
            }
            let fresh: Vec<ServicePortName> = ports_of(services, id).cloned().collect();
            for k in fresh {
                if let Some(o) = render_service(&self.ctx, &k, services, endpoints) {
                    self.services.insert(k, o);
                }
            }
        }
    }
}

/// One service port's chains, affinity sets, rules and elements.
pub fn render_service(ctx: &Context, name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap) -> Option<Objects> {
    let svc = services.get(name)?;
    let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or_default();
    let p = wiring::Wiring::new(svc, eps, ctx.locality());
    let mut out = Objects::default();
    elements::write(&p, &mut out);
    chains::write(ctx, &p, &mut out);
    Some(out)
}

/// Renders every service port.
pub fn render(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> Ruleset {
    let rendered = services.keys().filter_map(|k| render_service(ctx, k, services, endpoints).map(|o| (k.clone(), o))).collect();
    Ruleset { ctx: ctx.clone(), fixed: fixed::write(ctx), services: rendered }
}

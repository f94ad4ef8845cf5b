//! The nftables renderer: cluster state in, one family's `kube-proxy` table out, as
//! values ([`crate::nftables::model`]). Pure. Each service port's objects are rendered
//! apart (as the iptables renderer keeps its lines), in service-port order. Every rule is
//! built as statement values ([`crate::nftables::stmt`], through `values`), its text
//! written from them.
//!
//! A [`Ruleset`] keeps what each service port was rendered *from* (the trackers' shared
//! `Arc`s of the port and its endpoints), not the objects: a port's objects are a pure
//! function of them and the [`Context`], so they are rendered again when a sync needs them
//! (the whole table for a full sync, the changed ports before and after for a partial
//! one). Kept rendered, the objects were most of nftables watch mode's steady memory
//! (about 110 MB of a 170 MB live heap at 10,000 services × 10 endpoints, BENCHMARKS.md);
//! kept as inputs, they cost two pointers per port beside the trackers' one copy.
//!
//! The `hairpin-connections` elements (kube-proxy v1.36 on) are the table's, not a port's:
//! two services can reach the same local endpoint on the same port, so the ruleset counts
//! how many ports hold each one ([`Hairpins`]), and a partial sync adds or deletes only
//! those whose count rises from or falls to zero.

pub mod chains;
pub mod elements;
pub mod fixed;
#[cfg(test)]
mod tests;
mod values;
pub mod wiring;

use crate::nftables::context::NftablesTable;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::{ports_of, Endpoint, EndpointsMap, NamespacedName, Protocol, ServicePort, ServicePortMap, ServicePortName};
use crate::nftables::context::Context;
use crate::nftables::model::{Key, Objects, Part, Rule, Table};
use crate::nftables::names::{HAIRPIN_CONNECTIONS, TABLE, TABLE_COMMENT};

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
        elements::write(ctx, &p, out);
        chains::write(ctx, &p, out);
    }

    /// The port's `hairpin-connections` keys (kube-proxy v1.36 on): each endpoint on this
    /// node that its traffic policies reach.
    fn hairpins(&self, ctx: &Context) -> Vec<Hairpin> {
        if ctx.table == NftablesTable::V134 {
            return Vec::new();
        }
        let eps = self.endpoints.as_deref().map(Vec::as_slice).unwrap_or_default();
        let p = wiring::Wiring::new(&self.service, eps, ctx.locality());
        p.endpoints.all_reachable.iter().filter(|e| e.is_local).map(|e| Hairpin { ip: e.ip, proto: p.svc.protocol, port: e.port }).collect()
    }
}

/// A `hairpin-connections` element: `IP . IP . proto . port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hairpin {
    pub ip: IpAddr,
    pub proto: Protocol,
    pub port: u16,
}

/// In the order of their words (`sctp` before `tcp`), the order the table lists them in.
impl Ord for Hairpin {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ip, self.proto.lower(), self.port).cmp(&(other.ip, other.proto.lower(), other.port))
    }
}

impl PartialOrd for Hairpin {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Hairpin {
    fn write(&self, out: &mut Objects) {
        let key = Key::of([Part::Addr(self.ip), Part::Addr(self.ip), Part::Proto(self.proto), Part::Port(self.port)]);
        out.element(HAIRPIN_CONNECTIONS, key, None, None);
    }
}

/// Writes the `hairpin-connections` elements of `keys` (for a partial sync's before and
/// after sides).
pub fn hairpin_objects(keys: &[Hairpin]) -> Objects {
    let mut out = Objects::default();
    keys.iter().for_each(|h| h.write(&mut out));
    out
}

/// How many service ports hold each `hairpin-connections` element.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hairpins(BTreeMap<Hairpin, u32>);

impl Hairpins {
    fn add(&mut self, keys: Vec<Hairpin>) {
        for k in keys {
            *self.0.entry(k).or_default() += 1;
        }
    }

    fn remove(&mut self, keys: Vec<Hairpin>) {
        for k in keys {
            if let Some(n) = self.0.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.0.remove(&k);
                }
            }
        }
    }

    fn holds(&self, k: &Hairpin) -> bool {
        self.0.contains_key(k)
    }

    /// Notes in `was` whether each of `keys` is held now, for those not noted yet.
    fn note_presence(&self, keys: &[Hairpin], was: &mut BTreeMap<Hairpin, bool>) {
        for h in keys {
            was.entry(*h).or_insert_with(|| self.holds(h));
        }
    }
}

/// The `hairpin-connections` elements an update took away and brought.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HairpinChange {
    pub gone: Vec<Hairpin>,
    pub came: Vec<Hairpin>,
}

/// One family's rules: the fixed objects and what each service port's are rendered from.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruleset {
    pub ctx: Context,
    pub fixed: Objects,
    pub services: BTreeMap<ServicePortName, Inputs>,
    /// The `hairpin-connections` elements, counted (empty before v1.36's table).
    pub hairpins: Hairpins,
}

impl Ruleset {
    /// The whole table, fixed objects first, then each service port's, then the
    /// `hairpin-connections` elements.
    pub fn table(&self) -> Table {
        let mut objects = self.fixed.clone();
        for inputs in self.services.values() {
            inputs.write(&self.ctx, &mut objects);
        }
        self.hairpins.0.keys().for_each(|h| h.write(&mut objects));
        Table { family: self.ctx.family, name: TABLE, comment: TABLE_COMMENT, objects }
    }

    /// Each of `chains` that the table declares now, in their order, with the service port
    /// that renders it (`None`: the fixed objects), for [`Ruleset::chain_rules`].
    pub fn chain_owners(&self, chains: &[String]) -> Vec<(String, Option<ServicePortName>)> {
        let wanted: HashSet<&str> = chains.iter().map(String::as_str).collect();
        let mut owners: HashMap<&str, Option<&ServicePortName>> = HashMap::new();
        for c in &self.fixed.chains {
            if let Some(&c) = wanted.get(c.name.as_str()) {
                owners.insert(c, None);
            }
        }
        for (port, inputs) in &self.services {
            for c in inputs.objects(&self.ctx).chains {
                if let Some(&c) = wanted.get(c.name.as_str()) {
                    owners.insert(c, Some(port));
                }
            }
        }
        chains.iter().filter_map(|c| Some((c.clone(), owners.get(c.as_str())?.cloned()))).collect()
    }

    /// The rules `chain` (of `owner`, [`Ruleset::chain_owners`]) holds now, rendered from
    /// that port alone; `None` when the table no longer declares it.
    pub fn chain_rules(&self, chain: &str, owner: Option<&ServicePortName>) -> Option<Vec<Rule>> {
        let rendered;
        let objects = match owner {
            None => &self.fixed,
            Some(port) => {
                rendered = self.services.get(port)?.objects(&self.ctx);
                &rendered
            }
        };
        objects.chains.iter().any(|c| c.name == chain).then(|| objects.rules.iter().filter(|r| r.chain == chain).cloned().collect())
    }

    /// The objects of service `id`'s ports, in service-port order.
    pub fn objects_of(&self, id: &NamespacedName) -> Vec<Objects> {
        ports_of(&self.services, id).map(|k| self.services[k].objects(&self.ctx)).collect()
    }

    /// Brings the ruleset up to date after a commit that changed `changed`: those
    /// services' ports are taken again from the trackers' maps. Returns the
    /// `hairpin-connections` elements that went and came.
    pub fn update(&mut self, services: &ServicePortMap, endpoints: &EndpointsMap, changed: &BTreeSet<NamespacedName>) -> HairpinChange {
        // Each touched element's presence before the update, noted when first touched.
        let mut was: BTreeMap<Hairpin, bool> = BTreeMap::new();
        for id in changed {
            let stale: Vec<ServicePortName> = ports_of(&self.services, id).cloned().collect();
            for k in stale {
                if let Some(old) = self.services.remove(&k) {
                    let keys = old.hairpins(&self.ctx);
                    self.hairpins.note_presence(&keys, &mut was);
                    self.hairpins.remove(keys);
                }
            }
            for k in ports_of(services, id) {
                if let Some(inputs) = inputs(k, services, endpoints) {
                    let keys = inputs.hairpins(&self.ctx);
                    self.hairpins.note_presence(&keys, &mut was);
                    self.hairpins.add(keys);
                    self.services.insert(k.clone(), inputs);
                }
            }
        }
        let mut change = HairpinChange::default();
        for (h, before) in was {
            match (before, self.hairpins.holds(&h)) {
                (true, false) => change.gone.push(h),
                (false, true) => change.came.push(h),
                _ => {}
            }
        }
        change
    }
}

fn inputs(name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap) -> Option<Inputs> {
    Some(Inputs { service: services.get(name)?.clone(), endpoints: endpoints.get(name).cloned() })
}

/// Takes every service port (what its objects are rendered from).
pub fn render(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> Ruleset {
    let taken: BTreeMap<ServicePortName, Inputs> = services.keys().filter_map(|k| inputs(k, services, endpoints).map(|i| (k.clone(), i))).collect();
    let mut hairpins = Hairpins::default();
    for inputs in taken.values() {
        hairpins.add(inputs.hairpins(ctx));
    }
    Ruleset { ctx: ctx.clone(), fixed: fixed::write(ctx), services: taken, hairpins }
}

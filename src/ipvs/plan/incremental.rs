//! The IPVS plan kept up to date service by service. Pure.
//!
//! [`super::plan`] walks every service port; at 10,000 services that is tens of
//! milliseconds for a change to one endpoint. A [`FamilyPlanner`] keeps, per service port, what
//! it contributed (virtual servers, bound addresses, set entries, no-node-access VIPs)
//! and how many ports contribute each item, so a commit re-plans only the changed
//! services' ports and says what moved: the virtual servers to compare with the kernel,
//! the addresses and set entries that appeared or went, and whether the iptables rules
//! (which depend only on which sets are empty and on the no-node-access VIPs) changed.
//! Its plan is always the one [`super::plan`] would make from the same maps (a test
//! checks it over random change sequences): where two ports want the same virtual
//! server, the last in map order wins, as in the full walk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::net::IpAddr;

use super::{rules, servers, Context, Desired, NoNodeAccess, FamilyState, SetId};
use crate::ipvs::values::ServiceKey;
use crate::model::{ports_of, EndpointsMap, NamespacedName, ServicePortMap, ServicePortName};

/// What one service port contributes to its family's plan.
#[derive(Debug, Clone, Default)]
struct Part {
    keys: Vec<ServiceKey>,
    bound: Vec<IpAddr>,
    entries: Vec<(SetId, String)>,
    no_node_access: Vec<NoNodeAccess>,
}

/// Plans one family's [`FamilyState`] service port by service port: the state and, per
/// service port, what made it.
#[derive(Debug, Clone)]
pub struct FamilyPlanner {
    ctx: Context,
    plan: FamilyState,
    parts: BTreeMap<ServicePortName, Part>,
    /// How many ports want each virtual server (the last in order wins; found by a walk
    /// of the parts only when a shared one loses its winner).
    owners: HashMap<ServiceKey, u32>,
    entries: HashMap<(SetId, String), u32>,
    bound: HashMap<IpAddr, u32>,
    no_node_access: HashMap<NoNodeAccess, u32>,
}

/// What one [`FamilyPlanner::update`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// Virtual servers wanted differently (or no longer, or newly): compare these with
    /// the kernel.
    pub services: BTreeSet<ServiceKey>,
    pub bind: BTreeSet<IpAddr>,
    pub unbind: BTreeSet<IpAddr>,
    /// Set entries that appeared and went (`KUBE-IPVS-IPS` follows the bound addresses).
    pub add: Vec<(SetId, String)>,
    pub del: Vec<(SetId, String)>,
    /// The rules before, when the iptables rules changed.
    pub iptables: Option<Vec<crate::xtables::Table>>,
}

/// Counts one item up or down and remembers, the first time it is touched, whether it
/// was present before the update.
fn count<K: Hash + Eq + Clone>(counts: &mut HashMap<K, u32>, before: &mut HashMap<K, bool>, key: &K, up: bool) {
    let n = counts.get(key).copied().unwrap_or(0);
    before.entry(key.clone()).or_insert(n > 0);
    let n = if up { n + 1 } else { n.saturating_sub(1) };
    if n == 0 {
        counts.remove(key);
    } else {
        counts.insert(key.clone(), n);
    }
}

/// The items whose presence differs from before: (appeared, went), sorted.
fn moved<K: Hash + Eq + Clone + Ord>(counts: &HashMap<K, u32>, before: HashMap<K, bool>) -> (Vec<K>, Vec<K>) {
    let (mut add, mut del) = (Vec::new(), Vec::new());
    for (k, was) in before {
        match (was, counts.contains_key(&k)) {
            (false, true) => add.push(k),
            (true, false) => del.push(k),
            _ => {}
        }
    }
    add.sort();
    del.sort();
    (add, del)
}

/// Items touched by one update, with their presence before it.
#[derive(Default)]
struct Touched {
    keys: BTreeSet<ServiceKey>,
    entries: HashMap<(SetId, String), bool>,
    bound: HashMap<IpAddr, bool>,
    no_node_access: HashMap<NoNodeAccess, bool>,
}

impl FamilyPlanner {
    /// Plans every service port of one family.
    pub fn new(ctx: Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> Self {
        let mut p = FamilyPlanner {
            plan: FamilyState::empty(ctx.family()),
            ctx,
            parts: BTreeMap::new(),
            owners: HashMap::new(),
            entries: HashMap::new(),
            bound: HashMap::new(),
            no_node_access: HashMap::new(),
        };
        let mut touched = Touched::default();
        for name in services.keys() {
            p.add_port(name, services, endpoints, &mut touched);
        }
        p.finish(touched);
        p
    }

    pub fn plan(&self) -> &FamilyState {
        &self.plan
    }

    pub fn ctx(&self) -> &Context {
        &self.ctx
    }

    /// Re-plans the ports of the `changed` services (as the maps now hold them).
    pub fn update(&mut self, services: &ServicePortMap, endpoints: &EndpointsMap, changed: &BTreeSet<NamespacedName>) -> Update {
        let mut touched = Touched::default();
        for id in changed {
            let old: Vec<ServicePortName> = ports_of(&self.parts, id).cloned().collect();
            for name in old {
                self.remove_port(&name, &mut touched);
            }
            let new: Vec<ServicePortName> = ports_of(services, id).cloned().collect();
            for name in &new {
                self.add_port(name, services, endpoints, &mut touched);
            }
        }
        self.finish_with(touched, services, endpoints)
    }

    /// One port's fragment of the plan, as the full walk makes it.
    fn fragment(&self, name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap) -> Option<FamilyState> {
        let svc = services.get(name)?;
        let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or_default();
        let mut frag = FamilyState {
            family: self.ctx.family(),
            services: BTreeMap::new(),
            bound: BTreeSet::new(),
            sets: BTreeMap::new(),
            no_node_access: BTreeSet::new(),
            iptables: Vec::new(),
        };
        servers::add_service(&self.ctx, &mut frag, name, svc, eps);
        Some(frag)
    }

    fn add_port(&mut self, name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap, t: &mut Touched) {
        let Some(frag) = self.fragment(name, services, endpoints) else { return };
        let part = Part {
            keys: frag.services.keys().copied().collect(),
            bound: frag.bound.iter().copied().collect(),
            entries: frag.sets.iter().flat_map(|(id, es)| es.iter().map(|e| (*id, e.clone()))).collect(),
            no_node_access: frag.no_node_access.iter().copied().collect(),
        };
        for key in &part.keys {
            *self.owners.entry(*key).or_default() += 1;
            t.keys.insert(*key);
        }
        self.count_part(&part, t, true);
        // The last port in order wins a shared virtual server (a current winner is live:
        // a removed one's entry went with it).
        for (key, d) in frag.services {
            if self.plan.services.get(&key).is_none_or(|cur| cur.owner < *name) {
                self.plan.services.insert(key, d);
            }
        }
        self.parts.insert(name.clone(), part);
    }

    fn remove_port(&mut self, name: &ServicePortName, t: &mut Touched) {
        let Some(part) = self.parts.remove(name) else { return };
        for key in &part.keys {
            if let Some(n) = self.owners.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.owners.remove(key);
                }
            }
            if self.plan.services.get(key).is_some_and(|cur| cur.owner == *name) {
                self.plan.services.remove(key);
            }
            t.keys.insert(*key);
        }
        self.count_part(&part, t, false);
    }

    fn count_part(&mut self, part: &Part, t: &mut Touched, up: bool) {
        part.entries.iter().for_each(|e| count(&mut self.entries, &mut t.entries, e, up));
        part.bound.iter().for_each(|ip| count(&mut self.bound, &mut t.bound, ip, up));
        part.no_node_access.iter().for_each(|n| count(&mut self.no_node_access, &mut t.no_node_access, n, up));
    }

    /// [`FamilyPlanner::finish`], first giving each touched virtual server still wanted but left
    /// without its winner (two ports shared it, the winner went) the last remaining
    /// port's, planned again: rare, and found by a walk of the parts.
    fn finish_with(&mut self, t: Touched, services: &ServicePortMap, endpoints: &EndpointsMap) -> Update {
        for key in &t.keys {
            if !self.owners.contains_key(key) || self.plan.services.contains_key(key) {
                continue;
            }
            let winner = self.parts.iter().rev().find(|(_, p)| p.keys.contains(key)).map(|(n, _)| n.clone());
            if let Some(d) = winner.and_then(|w| self.fragment(&w, services, endpoints)).and_then(|mut f| f.services.remove(key)) {
                self.plan.services.insert(*key, d);
            }
        }
        self.finish(t)
    }

    /// Applies the counts' moves to the plan's sets and addresses and re-writes the
    /// iptables rules.
    fn finish(&mut self, t: Touched) -> Update {
        let (bind, unbind) = moved(&self.bound, t.bound);
        let (mut add, mut del) = moved(&self.entries, t.entries);
        let (nna_add, nna_del) = moved(&self.no_node_access, t.no_node_access);
        for ip in &bind {
            self.plan.bound.insert(*ip);
            add.push((SetId::IpvsIps, ip.to_string()));
        }
        for ip in &unbind {
            self.plan.bound.remove(ip);
            del.push((SetId::IpvsIps, ip.to_string()));
        }
        // The rules depend on which sets are empty and on the no-node-access VIPs alone:
        // re-written only when one of those moved (a VIP list walk per sync otherwise).
        let ids: BTreeSet<SetId> = add.iter().chain(&del).map(|(id, _)| *id).collect();
        let empty_before: Vec<bool> = ids.iter().map(|id| self.plan.set(*id).is_empty()).collect();
        for (id, e) in &add {
            self.plan.insert_entry(*id, e.clone());
        }
        for (id, e) in &del {
            if let Some(set) = self.plan.sets.get_mut(id) {
                set.remove(e);
            }
        }
        self.plan.no_node_access.extend(nna_add.iter().copied());
        nna_del.iter().for_each(|n| {
            self.plan.no_node_access.remove(n);
        });
        let flipped = ids.iter().zip(&empty_before).any(|(id, was)| self.plan.set(*id).is_empty() != *was);
        let iptables = if flipped || !nna_add.is_empty() || !nna_del.is_empty() || self.plan.iptables.is_empty() {
            let rules = rules::write(&self.ctx, &self.plan);
            (rules != self.plan.iptables).then(|| std::mem::replace(&mut self.plan.iptables, rules))
        } else {
            None
        };
        Update { services: t.keys, bind: bind.into_iter().collect(), unbind: unbind.into_iter().collect(), add, del, iptables }
    }

    /// The desired virtual server at `key`, if this family wants one.
    pub fn desired(&self, key: &ServiceKey) -> Option<&Desired> {
        self.plan.services.get(key)
    }
}

#[cfg(test)]
mod tests;

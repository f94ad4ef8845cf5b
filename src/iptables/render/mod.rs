//! The iptables renderer: cluster state in, a [`Ruleset`] out. Pure.
//!
//! A ruleset keeps each service port's rules apart ([`ServiceRules`]), so a change to one
//! service re-renders that service only ([`Ruleset::update`]) and a partial restore can
//! leave unchanged services' chains out. [`crate::iptables::restore`] writes the text.

pub mod chains;
pub mod context;
pub mod fixed;
pub mod top;
pub mod wiring;

use std::collections::BTreeSet;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use context::Context;

use crate::xtables::names::{KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES};
use crate::model::{EndpointsMap, NamespacedName, ServicePortMap, ServicePortName};
use crate::xtables::{Chain, Rule};

/// One service port's rules, as values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceRules {
    /// Filter rules (top-level chains): refusals, firewall drops, health-check accepts.
    pub filter: Vec<Rule>,
    /// Nat rules in `KUBE-SERVICES`/`KUBE-NODEPORTS`.
    pub nat_top: Vec<Rule>,
    /// The service's own nat chains, in declaration order.
    pub chains: Vec<Chain>,
    /// The rules of those chains.
    pub chain_rules: Vec<Rule>,
}

/// A service port as a [`Ruleset`] keeps it: its rules (shared, cheap to keep as they
/// were before a change) and the numbers read for every service on each sync, inline in
/// the map so that summing them touches no rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub rules: Arc<ServiceRules>,
    /// How many of `filter` and `nat_top` go to each top-level chain ([`TOP_CHAINS`]
    /// order), or `None` if one goes elsewhere: where this service's lines sit in those
    /// chains is the sum over the services before it (see `iptables::partial`).
    pub top_counts: Option<TopCounts>,
    /// The port's endpoints (for the large-cluster test).
    pub endpoints: usize,
}

impl std::ops::Deref for Rendered {
    type Target = ServiceRules;
    fn deref(&self) -> &ServiceRules {
        &self.rules
    }
}

/// The top-level chains that hold service rules, as (table, chain). No fixed rule is
/// written into them before the services' (the fixed heads go to other chains), so a
/// service's first line in one of them sits right after the services before it.
pub const TOP_CHAINS: [(&str, &str); 7] = [
    ("filter", KUBE_SERVICES),
    ("filter", KUBE_EXTERNAL_SERVICES),
    ("filter", KUBE_NODEPORTS),
    ("filter", KUBE_PROXY_FIREWALL),
    ("filter", KUBE_FORWARD),
    ("nat", KUBE_SERVICES),
    ("nat", KUBE_NODEPORTS),
];

/// Lines per [`TOP_CHAINS`] entry.
pub type TopCounts = [u32; TOP_CHAINS.len()];

/// Counts one service's top-level lines per chain; `None` if a line goes elsewhere.
fn count_top(r: &ServiceRules) -> Option<TopCounts> {
    let mut counts = TopCounts::default();
    for (table, lines) in [("filter", &r.filter), ("nat", &r.nat_top)] {
        for rule in lines {
            let i = TOP_CHAINS.iter().position(|&(t, c)| t == table && rule.chain == c)?;
            counts[i] += 1;
        }
    }
    Some(counts)
}

/// One family's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Ruleset {
    pub ctx: Context,
    /// More endpoints than the threshold: per-endpoint comments are dropped.
    pub large_cluster: bool,
    pub services: BTreeMap<ServicePortName, Rendered>,
    /// Endpoints of all service ports (kept up to date by [`Ruleset::update`] from the
    /// changed ports alone).
    pub endpoint_total: usize,
    /// (filter, nat) rules of all service ports, kept the same way (for the metrics).
    pub rule_total: (usize, usize),
}

/// (filter, nat) rules of one service port.
fn rule_count(r: &ServiceRules) -> (usize, usize) {
    (r.filter.len(), r.nat_top.len() + r.chain_rules.len())
}

/// All endpoints of all service ports (kube-proxy's large-cluster count).
pub fn total_endpoints(services: &ServicePortMap, endpoints: &EndpointsMap) -> usize {
    services.keys().map(|k| endpoints.get(k).map_or(0, |e| e.len())).sum()
}

pub fn render_service(ctx: &Context, name: &ServicePortName, services: &ServicePortMap, endpoints: &EndpointsMap, large: bool) -> Option<Rendered> {
    let svc = services.get(name)?;
    let eps = endpoints.get(name).map(|e| e.as_slice()).unwrap_or_default();
    let wiring = wiring::Wiring::new(svc, eps, ctx.locality());
    let mut out = ServiceRules::default();
    top::write(ctx, &wiring, &mut out);
    chains::write(ctx, &wiring, large, &mut out);
    // A ruleset keeps every service's rules: without their slack.
    for rules in [&mut out.filter, &mut out.nat_top, &mut out.chain_rules] {
        rules.shrink_to_fit();
    }
    out.chains.shrink_to_fit();
    Some(Rendered { top_counts: count_top(&out), endpoints: eps.len(), rules: Arc::new(out) })
}

/// Renders every service port.
pub fn render(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap) -> Ruleset {
    let endpoint_total = total_endpoints(services, endpoints);
    let large_cluster = endpoint_total > ctx.large_cluster_threshold;
    let rendered = render_all(ctx, services, endpoints, large_cluster);
    let rule_total = rendered.values().map(|r| rule_count(r)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    Ruleset { ctx: ctx.clone(), large_cluster, services: rendered, endpoint_total, rule_total }
}

/// Every family's ruleset, from the trackers' committed state (what the proxier starts
/// from and `svcproxy render` prints).
pub fn render_families(config: &crate::config::Config, trackers: &crate::track::Trackers) -> Vec<Ruleset> {
    trackers
        .families
        .iter()
        .map(|t| {
            let (services, endpoints) = t.view();
            render(&Context::new(config, t.family), services, endpoints)
        })
        .collect()
}

/// Below this many service ports one thread renders them all.
const PARALLEL_MIN: usize = 512;

/// Renders every service port, on as many threads as there are cores: each service
/// port's rules depend on nothing else, so the parts are rendered apart and joined in
/// order.
fn render_all(ctx: &Context, services: &ServicePortMap, endpoints: &EndpointsMap, large: bool) -> BTreeMap<ServicePortName, Rendered> {
    let keys: Vec<&ServicePortName> = services.keys().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(keys.len().div_ceil(PARALLEL_MIN)).max(1);
    let part = |ks: &[&ServicePortName]| -> Vec<(ServicePortName, Rendered)> {
        ks.iter().filter_map(|k| render_service(ctx, k, services, endpoints, large).map(|r| ((*k).clone(), r))).collect()
    };
    if threads == 1 {
        return part(&keys).into_iter().collect();
    }
    let parts: Vec<Vec<(ServicePortName, Rendered)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = keys.chunks(keys.len().div_ceil(threads)).map(|ks| scope.spawn(move || part(ks))).collect();
        // A render thread only panics on a bug; let it surface as the panic it is.
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    // In key order already: the map is built without sorting.
    parts.into_iter().flatten().collect()
}

impl Ruleset {
    /// Brings the ruleset up to date after a commit that changed `changed`, re-rendering
    /// only those services (all of them if the large-cluster mode flipped).
    pub fn update(&mut self, services: &ServicePortMap, endpoints: &EndpointsMap, changed: &BTreeSet<NamespacedName>) {
        let was: usize = changed.iter().flat_map(|id| ports_of(&self.services, id)).map(|k| self.services[k].endpoints).sum();
        let now: usize = changed.iter().flat_map(|id| ports_of(services, id)).map(|k| endpoints.get(k).map_or(0, |e| e.len())).sum();
        let total = self.endpoint_total - was + now;
        debug_assert_eq!(total, total_endpoints(services, endpoints), "endpoint count kept from changes alone");
        let large = total > self.ctx.large_cluster_threshold;
        if large != self.large_cluster {
            *self = render(&self.ctx, services, endpoints);
            return;
        }
        self.endpoint_total = total;
        for id in changed {
            let stale: Vec<ServicePortName> = ports_of(&self.services, id).cloned().collect();
            for k in stale {
                if let Some(r) = self.services.remove(&k) {
                    let (f, n) = rule_count(&r);
                    self.rule_total = (self.rule_total.0 - f, self.rule_total.1 - n);
                }
            }
            let fresh: Vec<ServicePortName> = ports_of(services, id).cloned().collect();
            for k in fresh {
                if let Some(r) = render_service(&self.ctx, &k, services, endpoints, large) {
                    let (f, n) = rule_count(&r);
                    self.rule_total = (self.rule_total.0 + f, self.rule_total.1 + n);
                    self.services.insert(k, r);
                }
            }
        }
        debug_assert_eq!(
            self.rule_total,
            self.services.values().map(|r| rule_count(r)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
            "rule count kept from changes alone"
        );
    }

    /// Every service chain this ruleset declares (nat table).
    pub fn service_chains(&self) -> impl Iterator<Item = &str> {
        self.services.values().flat_map(|r| r.chains.iter().map(Chain::as_str))
    }
}

use crate::model::ports_of;

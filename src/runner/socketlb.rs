//! `--socket-lb` on this node, after the mode's sync: the programs attached (their pinned
//! links keep them there), then the maps brought to what the committed trackers want
//! (`socketlb::{plan,diff,apply}`). A one-shot sync reads the maps ([`sync`]; a dry run
//! writes nothing); watch mode reads them once and then trusts what it wrote ([`Live`]).

use crate::config::SocketLbConfig;
use crate::driver::Pass;
use crate::netfilter::bpf::kernel::{self, Attached, Maps};
use crate::netfilter::bpf::{maps, object, BpfError};
use crate::socketlb::apply::{apply, read_held, Applied};
pub use crate::socketlb::destroy::Outcome;
use crate::socketlb::destroy::{gone, Closer};
use std::collections::{BTreeMap, BTreeSet};

use crate::model::NamespacedName;
use crate::netfilter::bpf::maps::ServiceKey;
use crate::socketlb::diff::{diff, diff_keys, Diff, Held};
use crate::socketlb::plan::Wanted;

/// The pinned maps as read for `trace --live` ([`crate::runner::live::socket_lb`]).
#[derive(Debug)]
pub struct Pinned {
    pub wanted: Wanted,
    pub affinity: Vec<(crate::netfilter::bpf::maps::AffinityKey, crate::netfilter::bpf::maps::AffinityValue)>,
    pub now_ns: u64,
}

/// What one socket-LB sync did (or, for a dry run, would do).
#[derive(Debug)]
pub struct Report {
    /// `None` for a dry run.
    pub attached: Option<Attached>,
    pub diff: Diff,
    /// `None` for a dry run.
    pub applied: Option<Applied>,
    /// The sockets of removed backends closed (`None` for a dry run, or when a map write
    /// failed: which backends serve is then uncertain, and nothing is closed).
    pub closed: Option<Outcome>,
}

/// After a sync whose writes all succeeded, the sockets of the backends it removed.
fn close(closer: &mut Closer, cfg: &SocketLbConfig, held: &Held, diff: &Diff, applied: &Applied) -> Option<Outcome> {
    applied.failures.is_empty().then(|| closer.close(&cfg.pins, &cfg.cgroup, &gone(held, diff)))
}

/// Whether this binary carries the programs: the reason when it does not (the CLI asks
/// before the rules change).
pub fn built() -> Result<(), BpfError> {
    object::object().map(|_| ())
}

pub fn sync(cfg: &SocketLbConfig, wanted: &Wanted, pass: Pass) -> Result<Report, BpfError> {
    // First, so that a binary without the programs says so whatever else is missing.
    object::object()?;
    if pass == Pass::DryRun {
        let held = if cfg.pins.join(maps::SERVICES).exists() { read_held(&Maps::open(&cfg.pins)?)? } else { Held::default() };
        let diff = diff(&held, wanted, &mut held.next_id());
        return Ok(Report { attached: None, diff, applied: None, closed: None });
    }
    let attached = kernel::attach(&cfg.pins, &cfg.cgroup)?;
    let mut table = Maps::open(&cfg.pins)?;
    let held = read_held(&table)?;
    let diff = diff(&held, wanted, &mut held.next_id());
    let applied = apply(&diff, &mut table);
    let closed = close(&mut Closer::new(), cfg, &held, &diff, &applied);
    Ok(Report { attached: Some(attached), diff, applied: Some(applied), closed })
}

/// `name`'s entries into `wanted`, but for keys another Service holds (an external
/// address two Services claim stays with the first until a full plan); the keys
/// claimed.
fn claim(keys: &mut BTreeMap<NamespacedName, BTreeSet<ServiceKey>>, owners: &mut BTreeMap<ServiceKey, NamespacedName>, name: NamespacedName, w: Wanted, wanted: &mut Wanted) -> BTreeSet<ServiceKey> {
    let mut mine = BTreeSet::new();
    for (key, entry) in w {
        if owners.get(&key).is_some_and(|o| *o != name) || wanted.contains_key(&key) {
            continue;
        }
        owners.insert(key, name.clone());
        wanted.insert(key, entry);
        mine.insert(key);
    }
    if !mine.is_empty() {
        keys.insert(name, mine.clone());
    }
    mine
}

/// Watch mode's socket-LB state: the maps as last written, trusted between syncs (as the
/// iptables partial sync trusts what it sent), and the Service keys each Service planned,
/// so that a sync re-plans and compares only the Services it changed. The first sync, and
/// the one after any failure, attaches, reads the maps and plans every Service.
pub struct Live {
    cfg: SocketLbConfig,
    table: Option<Maps>,
    held: Option<Held>,
    next_id: u32,
    keys: BTreeMap<NamespacedName, BTreeSet<ServiceKey>>,
    /// Which Service holds each key of `keys`.
    owners: BTreeMap<ServiceKey, NamespacedName>,
    replan: bool,
    closer: Closer,
}

impl Live {
    pub fn new(cfg: SocketLbConfig) -> Live {
        Live { cfg, table: None, held: None, next_id: 1, keys: BTreeMap::new(), owners: BTreeMap::new(), replan: true, closer: Closer::new() }
    }

    /// Whether the next [`Live::sync`] needs every Service planned, not only the changed ones.
    pub fn needs_all(&self) -> bool {
        self.replan || self.table.is_none() || self.held.is_none()
    }

    /// Every Service is planned again at the next sync (the node's zone changed).
    pub fn replan_all(&mut self) {
        self.replan = true;
    }

    /// One sync after the mode's. `planned` holds, per Service, its ports' wanted entries:
    /// of every Service when [`Live::needs_all`], else of those changed since the last
    /// sync (a Service gone, with none).
    pub fn sync(&mut self, planned: BTreeMap<NamespacedName, Wanted>) -> Result<Report, BpfError> {
        let all = self.needs_all();
        let mut attached = None;
        if self.table.is_none() {
            self.held = None;
            attached = Some(kernel::attach(&self.cfg.pins, &self.cfg.cgroup)?);
            self.table = Some(Maps::open(&self.cfg.pins)?);
        }
        let table = self.table.as_mut().expect("opened above");
        let held = match self.held.take() {
            Some(h) => h,
            None => read_held(table)?,
        };
        let mut next = self.next_id.max(held.next_id());
        let diff = if all {
            self.keys.clear();
            self.owners.clear();
            let mut wanted = Wanted::new();
            for (name, w) in planned {
                claim(&mut self.keys, &mut self.owners, name, w, &mut wanted);
            }
            diff(&held, &wanted, &mut next)
        } else {
            let mut scope = BTreeSet::new();
            let mut wanted = Wanted::new();
            // Every changed Service's keys released first, so one may take another's.
            for name in planned.keys() {
                for key in self.keys.remove(name).unwrap_or_default() {
                    self.owners.remove(&key);
                    scope.insert(key);
                }
            }
            for (name, w) in planned {
                scope.extend(claim(&mut self.keys, &mut self.owners, name, w, &mut wanted));
            }
            diff_keys(&held, &wanted, &scope, &mut next)
        };
        self.next_id = next;
        self.replan = false;
        let applied = apply(&diff, table);
        let closed = close(&mut self.closer, &self.cfg, &held, &diff, &applied);
        if applied.failures.is_empty() {
            self.held = Some(held.after(&diff));
        } else {
            // What the kernel holds is uncertain: attach, read and plan everything again.
            self.table = None;
        }
        Ok(Report { attached, diff, applied: Some(applied), closed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::socketlb::plan::Entry;

    fn key(ip: &str) -> ServiceKey {
        ServiceKey { addr: ip.parse().unwrap(), port: 80, proto: Protocol::Tcp }
    }

    fn want(keys: &[(&str, &str)]) -> Wanted {
        keys.iter().map(|(k, b)| (key(k), Entry::from(vec![format!("{b}:8080").parse().unwrap()]))).collect()
    }

    #[test]
    fn a_key_two_services_claim_stays_with_the_first_until_released() {
        let (mut keys, mut owners) = (BTreeMap::new(), BTreeMap::new());
        let (a, b) = (NamespacedName::new("ns", "a"), NamespacedName::new("ns", "b"));
        let mut wanted = Wanted::new();
        let got = claim(&mut keys, &mut owners, a.clone(), want(&[("10.0.0.1", "10.1.0.1"), ("192.0.2.1", "10.1.0.1")]), &mut wanted);
        assert_eq!(got.len(), 2);
        let got = claim(&mut keys, &mut owners, b.clone(), want(&[("10.0.0.2", "10.1.0.2"), ("192.0.2.1", "10.1.0.2")]), &mut wanted);
        assert_eq!(got, BTreeSet::from([key("10.0.0.2")]), "b does not take a's external address");
        assert_eq!(wanted[&key("192.0.2.1")].backends[0].to_string(), "10.1.0.1:8080");
        // A later pass with b alone changed: a still holds the address.
        let mut wanted = Wanted::new();
        keys.remove(&b).unwrap().iter().for_each(|k| {
            owners.remove(k);
        });
        let got = claim(&mut keys, &mut owners, b.clone(), want(&[("10.0.0.2", "10.1.0.2"), ("192.0.2.1", "10.1.0.2")]), &mut wanted);
        assert_eq!(got, BTreeSet::from([key("10.0.0.2")]));
        assert_eq!(owners[&key("192.0.2.1")], a);
        // Once a lets it go, b may take it.
        keys.remove(&a).unwrap().iter().for_each(|k| {
            owners.remove(k);
        });
        let got = claim(&mut keys, &mut owners, b.clone(), want(&[("192.0.2.1", "10.1.0.2")]), &mut Wanted::new());
        assert_eq!(got, BTreeSet::from([key("192.0.2.1")]));
        assert_eq!(owners[&key("192.0.2.1")], b);
    }
}

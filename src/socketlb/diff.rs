//! From the entries the maps hold to the wanted ones, per Service port: only Service
//! ports whose backends differ change (O(change)), and each change is ordered so that
//! no socket ever finds a Service without backends mid-update: the new backend set is
//! written under a fresh generation id, the Service entry then points at it in one
//! update, and the old generation's slots go last.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use crate::netfilter::bpf::maps::{decode_backend, BackendKey, ServiceKey, ServiceValue};

use super::plan::Wanted;

/// What the maps hold, read back: each Service entry with the backends of its
/// generation (`None` when some slot is missing), and slots no Service entry points at
/// (left by an interrupted update).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Held {
    pub services: BTreeMap<ServiceKey, (ServiceValue, Option<Vec<SocketAddr>>)>,
    pub orphans: Vec<BackendKey>,
}

impl Held {
    /// Joins the two maps' entries. A Service whose slots are not all present differs
    /// from any wanted set, so it is rewritten.
    pub fn from_entries(services: Vec<(ServiceKey, ServiceValue)>, backends: Vec<(BackendKey, [u8; 20])>) -> Held {
        let mut by_id: BTreeMap<u32, BTreeMap<u32, [u8; 20]>> = BTreeMap::new();
        for (k, v) in backends {
            by_id.entry(k.backend_id).or_default().insert(k.slot, v);
        }
        let mut held = Held::default();
        for (key, value) in services {
            let slots = by_id.remove(&value.backend_id).unwrap_or_default();
            let ipv6 = key.addr.is_ipv6();
            let mut list: Vec<SocketAddr> = Vec::with_capacity(slots.len());
            for (slot, bytes) in &slots {
                if (*slot as usize) < value.count as usize {
                    list.push(decode_backend(bytes, ipv6));
                } else {
                    held.orphans.push(BackendKey { backend_id: value.backend_id, slot: *slot });
                }
            }
            let complete = list.len() == value.count as usize;
            held.services.insert(key, (value, complete.then_some(list)));
        }
        held.orphans.extend(by_id.into_iter().flat_map(|(id, slots)| slots.into_keys().map(move |slot| BackendKey { backend_id: id, slot })));
        held
    }

    /// Where a new generation id search starts: past every held one, so an id freed by
    /// this sync is not handed out again at once.
    pub fn next_id(&self) -> u32 {
        self.ids().last().map_or(1, |id| id.wrapping_add(1))
    }

    /// What the maps hold once `diff` is applied without a failure (watch mode keeps this
    /// instead of reading the maps back every sync).
    pub fn after(mut self, diff: &Diff) -> Held {
        for c in &diff.changes {
            match c.service {
                Some(value) => {
                    let backends = c.put_backends.iter().map(|(_, a)| *a).collect();
                    self.services.insert(c.key, (value, Some(backends)));
                }
                None => {
                    self.services.remove(&c.key);
                }
            }
        }
        self.orphans.retain(|k| !diff.orphans.contains(k));
        self
    }

    fn ids(&self) -> BTreeSet<u32> {
        self.services.values().map(|(v, _)| v.backend_id).chain(self.orphans.iter().map(|k| k.backend_id)).collect()
    }
}

/// One Service port's update, applied in field order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: ServiceKey,
    /// The new generation's slots, written first.
    pub put_backends: Vec<(BackendKey, SocketAddr)>,
    /// Then the Service entry: `Some` points it at the new generation, `None` deletes it.
    pub service: Option<ServiceValue>,
    /// Then the old generation's slots.
    pub delete_backends: Vec<BackendKey>,
}

impl Change {
    /// One line for `sync --dry-run`: `+` a Service entry written (its backends, or
    /// "refused", and its affinity), `-` one deleted.
    pub fn line(&self) -> String {
        let svc = format!("{}/{:?}", SocketAddr::new(self.key.addr, self.key.port), self.key.proto).to_lowercase();
        match &self.service {
            None => format!("- {svc}"),
            Some(_) if self.put_backends.is_empty() => format!("+ {svc} refused (no endpoints)"),
            Some(v) => {
                let backends = self.put_backends.iter().map(|(_, a)| a.to_string()).collect::<Vec<_>>().join(" ");
                match v.affinity {
                    Some(t) => format!("+ {svc} -> {backends} (ClientIP affinity {t}s)"),
                    None => format!("+ {svc} -> {backends}"),
                }
            }
        }
    }
}

/// The changes that make `held` into `wanted`, and the orphan slots to delete.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    pub changes: Vec<Change>,
    pub orphans: Vec<BackendKey>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.orphans.is_empty()
    }
}

/// Fresh generation ids: never 0, never one held. `next` is where the search starts
/// (kept by the caller across syncs so ids are not reused soon after they were freed).
struct Ids {
    used: BTreeSet<u32>,
    next: u32,
}

impl Ids {
    fn fresh(&mut self) -> u32 {
        loop {
            let id = self.next;
            self.next = self.next.wrapping_add(1);
            if id != 0 && self.used.insert(id) {
                return id;
            }
        }
    }
}

fn old_slots(value: &ServiceValue) -> Vec<BackendKey> {
    (0..value.count as u32).map(|slot| BackendKey { backend_id: value.backend_id, slot }).collect()
}

/// The per-Service changes; `next_id` is advanced past the ids it hands out.
pub fn diff(held: &Held, wanted: &Wanted, next_id: &mut u32) -> Diff {
    let keys: BTreeSet<ServiceKey> = wanted.keys().chain(held.services.keys()).copied().collect();
    let mut out = diff_keys(held, wanted, &keys, next_id);
    out.orphans = held.orphans.clone();
    out
}

/// [`diff`] of the Service keys in `keys` alone (watch mode: the ports of the Services a
/// sync changed, as they were and as they are); `wanted` need hold only those. Held
/// entries outside `keys` are not looked at, and orphan slots wait for a full diff.
pub fn diff_keys(held: &Held, wanted: &Wanted, keys: &BTreeSet<ServiceKey>, next_id: &mut u32) -> Diff {
    let mut ids = Ids { used: held.ids(), next: *next_id };
    let mut out = Diff::default();
    for key in keys {
        let old = held.services.get(key);
        let Some(want) = wanted.get(key) else {
            if let Some((value, _)) = old {
                out.changes.push(Change { key: *key, put_backends: Vec::new(), service: None, delete_backends: old_slots(value) });
            }
            continue;
        };
        // A changed affinity timeout alone also takes a new generation: simpler than a
        // second kind of change, and the clients' affinity entries follow by address.
        if old.is_some_and(|(v, b)| b.as_ref() == Some(&want.backends) && v.affinity == want.affinity) {
            continue;
        }
        let backends = &want.backends;
        // A count the map cannot hold is cut at u16::MAX slots (no Service has that many).
        let count = backends.len().min(u16::MAX as usize);
        let backend_id = ids.fresh();
        out.changes.push(Change {
            key: *key,
            put_backends: backends[..count].iter().enumerate().map(|(slot, b)| (BackendKey { backend_id, slot: slot as u32 }, *b)).collect(),
            service: Some(ServiceValue { backend_id, count: count as u16, no_backends: count == 0, affinity: want.affinity }),
            delete_backends: old.map_or_else(Vec::new, |(v, _)| old_slots(v)),
        });
    }
    *next_id = ids.next;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::netfilter::bpf::maps::encode_backend;
    use crate::socketlb::plan::Entry;

    fn key(ip: &str) -> ServiceKey {
        ServiceKey { addr: ip.parse().unwrap(), port: 80, proto: Protocol::Tcp }
    }

    fn addrs(v: &[&str]) -> Entry {
        v.iter().map(|a| a.parse().unwrap()).collect::<Vec<SocketAddr>>().into()
    }

    /// What the maps would hold after applying `d` to `held` (the fake kernel's view).
    fn applied(held: &Held, d: &Diff) -> Held {
        let mut services: Vec<(ServiceKey, ServiceValue)> = held.services.iter().map(|(k, (v, _))| (*k, *v)).collect();
        let mut slots: BTreeMap<BackendKey, [u8; 20]> = BTreeMap::new();
        for (v, b) in held.services.values() {
            for (i, a) in b.iter().flatten().enumerate() {
                slots.insert(BackendKey { backend_id: v.backend_id, slot: i as u32 }, encode_backend(*a));
            }
        }
        for c in &d.changes {
            for (k, a) in &c.put_backends {
                slots.insert(*k, encode_backend(*a));
            }
            services.retain(|(k, _)| *k != c.key);
            if let Some(v) = c.service {
                services.push((c.key, v));
            }
            for k in &c.delete_backends {
                slots.remove(k);
            }
        }
        for k in &d.orphans {
            slots.remove(k);
        }
        Held::from_entries(services, slots.into_iter().collect())
    }

    #[test]
    fn a_new_set_goes_in_under_a_fresh_generation_and_the_old_slots_go_last() {
        let mut wanted = Wanted::new();
        wanted.insert(key("10.0.0.1"), addrs(&["10.1.0.1:80", "10.1.0.2:80"]));
        let mut next = 1;
        let first = diff(&Held::default(), &wanted, &mut next);
        assert_eq!(first.changes.len(), 1);
        let c = &first.changes[0];
        assert_eq!(c.service, Some(ServiceValue { backend_id: 1, count: 2, no_backends: false, affinity: None }));
        assert_eq!(c.put_backends.iter().map(|(k, _)| k.slot).collect::<Vec<_>>(), vec![0, 1]);
        assert!(c.delete_backends.is_empty());
        let held = applied(&Held::default(), &first);
        assert_eq!(held.services[&key("10.0.0.1")].1.as_ref(), Some(&wanted[&key("10.0.0.1")].backends));

        // Nothing changed: nothing to do.
        assert!(diff(&held, &wanted, &mut next).is_empty());

        // One endpoint replaced: the whole new set under id 2, then the swap, then id 1's slots.
        wanted.insert(key("10.0.0.1"), addrs(&["10.1.0.1:80", "10.1.0.3:80"]));
        let second = diff(&held, &wanted, &mut next);
        let c = &second.changes[0];
        assert_eq!(c.service.unwrap().backend_id, 2);
        assert!(c.put_backends.iter().all(|(k, _)| k.backend_id == 2));
        assert_eq!(c.delete_backends, vec![BackendKey { backend_id: 1, slot: 0 }, BackendKey { backend_id: 1, slot: 1 }]);
        let held = applied(&held, &second);
        assert_eq!(held.services[&key("10.0.0.1")].1.as_ref(), Some(&wanted[&key("10.0.0.1")].backends));
        assert!(held.orphans.is_empty());
    }

    #[test]
    fn affinity_is_part_of_the_entry_and_a_new_timeout_rewrites_it() {
        let sticky = |t| Entry { affinity: Some(t), ..addrs(&["10.1.0.1:80", "10.1.0.2:80"]) };
        let mut wanted = Wanted::new();
        wanted.insert(key("10.0.0.1"), sticky(10800));
        let mut next = 1;
        let d = diff(&Held::default(), &wanted, &mut next);
        assert_eq!(d.changes[0].service.unwrap().affinity, Some(10800));
        assert_eq!(d.changes[0].line(), "+ 10.0.0.1:80/tcp -> 10.1.0.1:80 10.1.0.2:80 (ClientIP affinity 10800s)");
        let held = applied(&Held::default(), &d);
        assert_eq!(held.services[&key("10.0.0.1")].0.affinity, Some(10800), "the held entry keeps it");
        assert!(diff(&held, &wanted, &mut next).is_empty());

        // Same backends, another timeout; then affinity dropped: each a new generation.
        for want in [sticky(1), addrs(&["10.1.0.1:80", "10.1.0.2:80"])] {
            wanted.insert(key("10.0.0.1"), want.clone());
            let d = diff(&held, &wanted, &mut next);
            assert_eq!(d.changes.len(), 1, "{d:?}");
            assert_eq!(d.changes[0].service.unwrap().affinity, want.affinity);
            assert_eq!(d.changes[0].delete_backends.len(), 2, "the old generation goes");
        }
    }

    #[test]
    fn only_changed_services_change_and_gone_ones_are_deleted() {
        let mut wanted = Wanted::new();
        for i in 1..=50 {
            wanted.insert(key(&format!("10.0.0.{i}")), addrs(&["10.1.0.1:80"]));
        }
        let mut next = 1;
        let held = applied(&Held::default(), &diff(&Held::default(), &wanted, &mut next));
        wanted.remove(&key("10.0.0.7"));
        wanted.insert(key("10.0.0.9"), Entry::default());
        let d = diff(&held, &wanted, &mut next);
        assert_eq!(d.changes.len(), 2, "{d:?}");
        let gone = d.changes.iter().find(|c| c.key == key("10.0.0.7")).unwrap();
        assert_eq!(gone.service, None);
        assert_eq!(gone.delete_backends.len(), 1);
        let empty = d.changes.iter().find(|c| c.key == key("10.0.0.9")).unwrap();
        assert_eq!(empty.service.unwrap().count, 0);
        assert!(empty.service.unwrap().no_backends);
        let after = applied(&held, &d);
        assert_eq!(after.services.len(), 49);
        assert!(after.orphans.is_empty());
    }

    #[test]
    fn a_change_reads_as_one_line() {
        let mut wanted = Wanted::new();
        wanted.insert(key("10.0.0.1"), addrs(&["10.1.0.1:80", "10.1.0.2:80"]));
        wanted.insert(key("10.0.0.2"), Entry::default());
        let d = diff(&Held::default(), &wanted, &mut 1);
        let lines: Vec<String> = d.changes.iter().map(Change::line).collect();
        assert_eq!(lines, vec!["+ 10.0.0.1:80/tcp -> 10.1.0.1:80 10.1.0.2:80", "+ 10.0.0.2:80/tcp refused (no endpoints)"]);
        let held = applied(&Held::default(), &d);
        assert_eq!(held.next_id(), 3);
        let gone = diff(&held, &Wanted::new(), &mut 3);
        assert_eq!(gone.changes.iter().map(Change::line).collect::<Vec<_>>(), vec!["- 10.0.0.1:80/tcp", "- 10.0.0.2:80/tcp"]);
    }

    #[test]
    fn a_scoped_diff_touches_its_keys_alone() {
        let mut wanted = Wanted::new();
        for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            wanted.insert(key(ip), addrs(&["10.1.0.1:80"]));
        }
        let mut next = 1;
        let held = applied(&Held::default(), &diff(&Held::default(), &wanted, &mut next));
        // 10.0.0.1 changed, 10.0.0.2 went, 10.0.0.3 is out of scope (and absent from the
        // partial wanted map): only the first two change.
        let mut part = Wanted::new();
        part.insert(key("10.0.0.1"), addrs(&["10.1.0.2:80"]));
        let scope: BTreeSet<ServiceKey> = [key("10.0.0.1"), key("10.0.0.2")].into_iter().collect();
        let d = diff_keys(&held, &part, &scope, &mut next);
        assert_eq!(d.changes.iter().map(Change::line).collect::<Vec<_>>(), vec!["+ 10.0.0.1:80/tcp -> 10.1.0.2:80", "- 10.0.0.2:80/tcp"]);
        let after = applied(&held, &d);
        assert_eq!(after.services.len(), 2);
        assert_eq!(after, held.clone().after(&d));
    }

    #[test]
    fn fresh_ids_skip_held_ones_and_zero() {
        let held = Held::from_entries(
            vec![(key("10.0.0.1"), ServiceValue { backend_id: 5, count: 1, no_backends: false, affinity: None })],
            vec![(BackendKey { backend_id: 5, slot: 0 }, encode_backend("10.1.0.1:80".parse().unwrap()))],
        );
        let mut wanted = Wanted::new();
        wanted.insert(key("10.0.0.2"), addrs(&["10.1.0.2:80"]));
        wanted.insert(key("10.0.0.3"), addrs(&["10.1.0.3:80"]));
        wanted.insert(key("10.0.0.1"), addrs(&["10.1.0.1:80"]));
        let mut next = u32::MAX;
        let d = diff(&held, &wanted, &mut next);
        let ids: Vec<u32> = d.changes.iter().map(|c| c.service.unwrap().backend_id).collect();
        assert_eq!(ids, vec![u32::MAX, 1]);
        let mut next = 5;
        let d = diff(&held, &wanted, &mut next);
        assert_eq!(d.changes.iter().map(|c| c.service.unwrap().backend_id).collect::<Vec<_>>(), vec![6, 7]);
    }

    #[test]
    fn orphan_slots_and_incomplete_sets_are_repaired() {
        let b = |s: &str| encode_backend(s.parse().unwrap());
        let held = Held::from_entries(
            vec![(key("10.0.0.1"), ServiceValue { backend_id: 3, count: 2, no_backends: false, affinity: None })],
            vec![
                (BackendKey { backend_id: 3, slot: 0 }, b("10.1.0.1:80")),
                (BackendKey { backend_id: 9, slot: 0 }, b("10.1.0.9:80")),
            ],
        );
        assert_eq!(held.orphans, vec![BackendKey { backend_id: 9, slot: 0 }]);
        assert_eq!(held.services[&key("10.0.0.1")].1, None, "slot 1 of 2 missing");
        let mut wanted = Wanted::new();
        wanted.insert(key("10.0.0.1"), addrs(&["10.1.0.1:80"]));
        let mut next = 1;
        let d = diff(&held, &wanted, &mut next);
        assert_eq!(d.orphans, vec![BackendKey { backend_id: 9, slot: 0 }]);
        assert_eq!(d.changes.len(), 1, "slot 1 of 2 missing: rewritten");
        let after = applied(&held, &d);
        assert_eq!(after.services[&key("10.0.0.1")].1.as_ref(), Some(&wanted[&key("10.0.0.1")].backends));
        assert!(after.orphans.is_empty(), "{after:?}");
    }
}

//! A [`Diff`] written to the maps, change by change in its safe order, through a
//! [`Table`] (the pinned maps on a node, a fake in tests). A failure is logged and
//! counted and leaves that Service as it was serving; the next sync's diff repairs it.

use std::net::SocketAddr;

use crate::netfilter::bpf::kernel::Maps;
use crate::netfilter::bpf::maps::{BackendKey, ServiceKey, ServiceValue};
use crate::netfilter::bpf::BpfError;

use super::diff::{Change, Diff, Held};

/// The socket-LB maps as the driver writes them. Deleting what is not there is no error.
pub trait Table {
    fn put_backend(&mut self, key: &BackendKey, addr: SocketAddr) -> Result<(), String>;
    fn delete_backend(&mut self, key: &BackendKey) -> Result<(), String>;
    fn put_service(&mut self, key: &ServiceKey, value: &ServiceValue) -> Result<(), String>;
    fn delete_service(&mut self, key: &ServiceKey) -> Result<(), String>;
}

impl Table for Maps {
    fn put_backend(&mut self, key: &BackendKey, addr: SocketAddr) -> Result<(), String> {
        Maps::put_backend(self, key, addr).map_err(|e| e.to_string())
    }
    fn delete_backend(&mut self, key: &BackendKey) -> Result<(), String> {
        Maps::delete_backend(self, key).map_err(|e| e.to_string())
    }
    fn put_service(&mut self, key: &ServiceKey, value: &ServiceValue) -> Result<(), String> {
        Maps::put_service(self, key, value).map_err(|e| e.to_string())
    }
    fn delete_service(&mut self, key: &ServiceKey) -> Result<(), String> {
        Maps::delete_service(self, key).map_err(|e| e.to_string())
    }
}

/// The maps' entries as the diff reads them.
pub fn read_held(maps: &Maps) -> Result<Held, BpfError> {
    Ok(Held::from_entries(maps.services()?, maps.backends()?))
}

/// What [`apply`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Service entries written or deleted.
    pub services: usize,
    /// Each failed map call, naming the Service or slot.
    pub failures: Vec<String>,
}

/// Writes every change; one that fails before its Service entry is swapped is undone as
/// far as it went, so the old backend set keeps serving.
pub fn apply(diff: &Diff, table: &mut impl Table) -> Applied {
    let mut out = Applied::default();
    for change in &diff.changes {
        apply_change(change, table, &mut out);
    }
    for key in &diff.orphans {
        if let Err(e) = table.delete_backend(key) {
            fail(&mut out, format!("deleting orphan slot {}/{}: {e}", key.backend_id, key.slot));
        }
    }
    out
}

fn fail(out: &mut Applied, msg: String) {
    tracing::warn!(target: "socketlb", "{msg}");
    out.failures.push(msg);
}

fn apply_change(c: &Change, table: &mut impl Table, out: &mut Applied) {
    let svc = format!("{}:{}/{:?}", c.key.addr, c.key.port, c.key.proto);
    for (i, (key, addr)) in c.put_backends.iter().enumerate() {
        if let Err(e) = table.put_backend(key, *addr) {
            fail(out, format!("{svc}: writing slot {} ({addr}): {e}; the old backends stay", key.slot));
            undo(&c.put_backends[..i], table);
            return;
        }
    }
    let swapped = match &c.service {
        Some(value) => table.put_service(&c.key, value),
        None => table.delete_service(&c.key),
    };
    if let Err(e) = swapped {
        fail(out, format!("{svc}: {} the Service entry: {e}", if c.service.is_some() { "writing" } else { "deleting" }));
        undo(&c.put_backends, table);
        return;
    }
    out.services += 1;
    for key in &c.delete_backends {
        if let Err(e) = table.delete_backend(key) {
            // Left as an orphan: the next sync's diff deletes it.
            fail(out, format!("{svc}: deleting old slot {}/{}: {e}", key.backend_id, key.slot));
        }
    }
}

/// Best effort: slots a failed change wrote. What stays is an orphan, repaired next sync.
fn undo(written: &[(BackendKey, SocketAddr)], table: &mut impl Table) {
    for (key, _) in written {
        let _ = table.delete_backend(key);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::Protocol;
    use crate::socketlb::diff::diff;
    use crate::socketlb::plan::Wanted;

    /// The maps as plain collections; `fail_put_slot` makes that slot's write fail, and
    /// every Service write records which slots existed at that moment.
    #[derive(Default)]
    struct Fake {
        services: BTreeMap<ServiceKey, ServiceValue>,
        backends: BTreeMap<BackendKey, SocketAddr>,
        fail_put_slot: Option<u32>,
        swaps_saw_complete_sets: Vec<bool>,
    }

    impl Table for Fake {
        fn put_backend(&mut self, key: &BackendKey, addr: SocketAddr) -> Result<(), String> {
            if self.fail_put_slot == Some(key.slot) {
                return Err("E2BIG".into());
            }
            self.backends.insert(*key, addr);
            Ok(())
        }
        fn delete_backend(&mut self, key: &BackendKey) -> Result<(), String> {
            self.backends.remove(key);
            Ok(())
        }
        fn put_service(&mut self, key: &ServiceKey, value: &ServiceValue) -> Result<(), String> {
            let complete = (0..value.count as u32).all(|slot| self.backends.contains_key(&BackendKey { backend_id: value.backend_id, slot }));
            self.swaps_saw_complete_sets.push(complete);
            self.services.insert(*key, *value);
            Ok(())
        }
        fn delete_service(&mut self, key: &ServiceKey) -> Result<(), String> {
            self.services.remove(key);
            Ok(())
        }
    }

    impl Fake {
        fn held(&self) -> Held {
            Held::from_entries(
                self.services.iter().map(|(k, v)| (*k, *v)).collect(),
                self.backends.iter().map(|(k, a)| (*k, crate::netfilter::bpf::maps::encode_backend(*a))).collect(),
            )
        }
    }

    fn key(ip: &str) -> ServiceKey {
        ServiceKey { addr: ip.parse().unwrap(), port: 80, proto: Protocol::Udp }
    }

    fn wanted(list: &[(&str, &[&str])]) -> Wanted {
        list.iter().map(|(k, v)| (key(k), v.iter().map(|a| a.parse().unwrap()).collect::<Vec<SocketAddr>>().into())).collect()
    }

    #[test]
    fn every_swap_finds_its_whole_set_and_the_maps_end_as_wanted() {
        let mut fake = Fake::default();
        let mut next = 1;
        for w in [
            wanted(&[("10.0.0.1", &["10.1.0.1:53", "10.1.0.2:53"]), ("10.0.0.2", &["10.1.0.3:53"])]),
            wanted(&[("10.0.0.1", &["10.1.0.2:53", "10.1.0.4:53", "10.1.0.5:53"]), ("10.0.0.3", &[])]),
            wanted(&[("10.0.0.3", &["10.1.0.6:53"])]),
        ] {
            let before = fake.held();
            let d = diff(&before, &w, &mut next);
            let done = apply(&d, &mut fake);
            assert!(done.failures.is_empty(), "{done:?}");
            let held = fake.held();
            assert_eq!(before.after(&d), held, "what watch mode keeps is what the maps hold");
            assert!(held.orphans.is_empty());
            let got: Wanted = held.services.into_iter().map(|(k, (_, b))| (k, b.unwrap().into())).collect();
            assert_eq!(got, w);
        }
        assert!(fake.swaps_saw_complete_sets.iter().all(|c| *c), "{:?}", fake.swaps_saw_complete_sets);
    }

    #[test]
    fn a_failed_slot_write_keeps_the_old_set_serving_and_is_repaired_next_time() {
        let mut fake = Fake::default();
        let mut next = 1;
        let first = wanted(&[("10.0.0.1", &["10.1.0.1:53"])]);
        apply(&diff(&fake.held(), &first, &mut next), &mut fake);
        let before = fake.services[&key("10.0.0.1")];

        let second = wanted(&[("10.0.0.1", &["10.1.0.1:53", "10.1.0.2:53", "10.1.0.3:53"])]);
        fake.fail_put_slot = Some(2);
        let done = apply(&diff(&fake.held(), &second, &mut next), &mut fake);
        assert_eq!(done.failures.len(), 1, "{done:?}");
        assert!(done.failures[0].contains("10.0.0.1:80") && done.failures[0].contains("slot 2"), "{done:?}");
        assert_eq!(fake.services[&key("10.0.0.1")], before, "the old generation still serves");
        assert!(fake.held().orphans.is_empty(), "the partial new generation was undone");

        fake.fail_put_slot = None;
        let done = apply(&diff(&fake.held(), &second, &mut next), &mut fake);
        assert!(done.failures.is_empty() && done.services == 1);
        assert_eq!(fake.held().services[&key("10.0.0.1")].1.as_ref(), Some(&second[&key("10.0.0.1")].backends));
    }
}

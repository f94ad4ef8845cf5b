//! Canaries: how watch mode notices, cheaply, that someone else removed its rules (a
//! firewall reload, `iptables -t nat -F`, an `iptables-restore` without `--noflush`), so
//! partial syncs can trust memory and full syncs can be rare.
//!
//! Like kube-proxy, a `KUBE-PROXY-CANARY` chain is kept in mangle, nat and filter of each
//! family. Unlike kube-proxy, each holds one rule (`-j RETURN`), and the check is
//! `iptables -w -t TABLE -C KUBE-PROXY-CANARY -j RETURN` in every table, not "does the
//! chain exist" in mangle alone: `iptables -t nat -F` empties every nat chain but deletes
//! none, so an empty canary chain survives the flush that removed every service rule. The
//! rule does not survive it (checked on the kernel, both backends: COMPATIBILITY.md).
//!
//! Any one canary gone means loss (kube-proxy waits for all of them to go, not to resync
//! in the middle of someone's reload; resyncing early is safe: whatever is flushed after
//! it takes the canary with it and is seen at the next check).
//!
//! On iptables-legacy any `-C` copies the whole table out of the kernel, whose size grows
//! with the services, so watch mode's check goes through a [`Gate`]:
//! a table whose x_tables summary ([`super::tableinfo`]) is what it was at the last check
//! that found its canary is not checked again.

use super::apply::{RestoreError, Restorer};
use super::names::KUBE_PROXY_CANARY;
use super::rule::Rule;
use super::table::Table;
use super::tableinfo::TableInfo;
use super::target::Target;
use crate::net::IpFamily;
use std::collections::HashMap;

/// The tables that hold a canary, in the order they are checked (mangle first, as
/// kube-proxy; it is the cheapest to read on iptables-legacy).
pub const TABLES: [&str; 3] = ["mangle", "nat", "filter"];

/// The canary's one rule: `-A KUBE-PROXY-CANARY -j RETURN`.
pub fn rule() -> Rule {
    Rule::new(KUBE_PROXY_CANARY, [""; 0], Target::Return)
}

/// Whether `table` of `family` holds the canary rule (`iptables -C`).
fn holds(r: &mut dyn Restorer, family: IpFamily, table: &str) -> Result<bool, RestoreError> {
    let rule = rule();
    let words: Vec<&str> = rule.args.iter().chain(rule.target.words()).collect();
    r.check(family, table, KUBE_PROXY_CANARY, &words)
}

/// The first table of `family` whose canary is gone (`None`: all present).
pub fn missing(r: &mut dyn Restorer, family: IpFamily) -> Result<Option<&'static str>, RestoreError> {
    first_missing(r, |r, table| holds(r, family, table))
}

/// The first table in [`TABLES`] order that `holds` says lacks its canary.
fn first_missing(
    r: &mut dyn Restorer,
    mut holds: impl FnMut(&mut dyn Restorer, &'static str) -> Result<bool, RestoreError>,
) -> Result<Option<&'static str>, RestoreError> {
    for table in TABLES {
        if !holds(r, table)? {
            return Ok(Some(table));
        }
    }
    Ok(None)
}

/// Creates the canaries that `holds` says are gone (one restore; nothing sent when all
/// are there). Returns the tables where one was created.
fn ensure_where(
    r: &mut dyn Restorer,
    family: IpFamily,
    mut holds: impl FnMut(&mut dyn Restorer, &'static str) -> Result<bool, RestoreError>,
) -> Result<Vec<&'static str>, RestoreError> {
    let mut created = Vec::new();
    for table in TABLES {
        if !holds(r, table)? {
            created.push(table);
        }
    }
    if !created.is_empty() {
        r.restore(family, &restore_text(&created))?;
    }
    Ok(created)
}

/// [`missing`] that skips a table the kernel says nothing changed in since the last check
/// that found its canary there, where the kernel can say so cheaply
/// ([`Restorer::table_info`]: iptables-legacy only; elsewhere every table is checked, as
/// by [`missing`]).
///
/// A same summary is safe to trust: every change to an x_tables table replaces its whole
/// rule blob, whose entry count, size and hook offsets the summary is, so losing the
/// canary changes it unless a rule of exactly its size replaces it in place (a deliberate
/// edit, not the reload the canary is for; the next full sync repairs it). svcproxy's own
/// restores may hide someone else's change behind theirs: whoever restores a family calls
/// [`Gate::forget`].
#[derive(Debug, Default)]
pub struct Gate {
    /// Per (family, table): the summary read just before the last check that found the canary.
    seen: HashMap<(IpFamily, &'static str), TableInfo>,
}

impl Gate {
    /// The first table of `family` whose canary is gone (`None`: all present).
    pub fn missing(&mut self, r: &mut dyn Restorer, family: IpFamily) -> Result<Option<&'static str>, RestoreError> {
        first_missing(r, |r, table| {
            let now = summary(r, family, table);
            if now.is_some() && now.as_ref() == self.seen.get(&(family, table)) {
                tracing::debug!(?family, table, "canary check skipped: the table is unchanged since the canary was last found");
                return Ok(true);
            }
            self.holds(r, family, table, now)
        })
    }

    /// [`ensure`], remembering the summaries of the tables whose canary was there (a full
    /// sync has just checked them all: the first check after it need not again).
    pub fn ensure(&mut self, r: &mut dyn Restorer, family: IpFamily) -> Result<Vec<&'static str>, RestoreError> {
        ensure_where(r, family, |r, table| {
            let now = summary(r, family, table);
            self.holds(r, family, table, now)
        })
    }

    /// The `-C` of `table`, remembering `now` (read before it: a change between the two
    /// makes the next read differ) when the canary is there, forgetting the table if not.
    fn holds(&mut self, r: &mut dyn Restorer, family: IpFamily, table: &'static str, now: Option<TableInfo>) -> Result<bool, RestoreError> {
        self.seen.remove(&(family, table));
        let held = holds(r, family, table)?;
        if let (true, Some(info)) = (held, now) {
            self.seen.insert((family, table), info);
        }
        Ok(held)
    }

    /// `family`'s tables are being written by svcproxy: check them all next time.
    pub fn forget(&mut self, family: IpFamily) {
        self.seen.retain(|(f, _), _| *f != family);
    }
}

/// `table`'s summary, `None` when the kernel gives none (then the canary is checked).
fn summary(r: &mut dyn Restorer, family: IpFamily, table: &str) -> Option<TableInfo> {
    r.table_info(family, table)
        .inspect_err(|error| tracing::trace!(?family, table, %error, "no table summary; checking the canary"))
        .ok()
}

/// Creates the canaries of `family` that are gone (one restore; nothing sent when all are
/// there). Returns the tables where one was created.
pub fn ensure(r: &mut dyn Restorer, family: IpFamily) -> Result<Vec<&'static str>, RestoreError> {
    ensure_where(r, family, |r, table| holds(r, family, table))
}

/// Restore input (for `--noflush`) that (re)creates the canaries of `tables`.
pub fn restore_text(tables: &[&'static str]) -> String {
    let tables: Vec<Table> = tables.iter().map(|&name| Table { name, chains: vec![KUBE_PROXY_CANARY.into()], rules: vec![rule()] }).collect();
    super::table::write_all(&tables)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::fake::{Call, FakeIptables};

    #[test]
    fn ensure_creates_what_is_missing_and_then_sends_nothing() {
        let mut k = FakeIptables::new();
        assert_eq!(missing(&mut k, IpFamily::V4).unwrap(), Some("mangle"));
        assert_eq!(ensure(&mut k, IpFamily::V4).unwrap(), TABLES);
        assert_eq!(missing(&mut k, IpFamily::V4).unwrap(), None);
        assert_eq!(missing(&mut k, IpFamily::V6).unwrap(), Some("mangle"), "per family");
        k.calls.clear();
        assert!(ensure(&mut k, IpFamily::V4).unwrap().is_empty());
        assert!(k.calls.iter().all(|c| matches!(c, Call::Check(..))), "{:?}", k.calls);
    }

    #[test]
    fn a_flushed_table_loses_its_canary_though_the_chain_stays() {
        let mut k = FakeIptables::new();
        ensure(&mut k, IpFamily::V4).unwrap();
        k.flush_table(IpFamily::V4, "nat");
        assert!(k.tables[&(IpFamily::V4, "nat".to_string())].chains.contains_key(KUBE_PROXY_CANARY), "-F keeps chains");
        assert_eq!(missing(&mut k, IpFamily::V4).unwrap(), Some("nat"));
        assert_eq!(ensure(&mut k, IpFamily::V4).unwrap(), ["nat"]);
        assert_eq!(missing(&mut k, IpFamily::V4).unwrap(), None);
    }

    /// A fake kernel with a scripted x_tables summary per table (none: the probe fails).
    #[derive(Default)]
    struct Probed {
        k: FakeIptables,
        info: std::collections::BTreeMap<&'static str, u32>,
    }

    impl Probed {
        /// Summaries for every table, then the canaries created.
        fn ready() -> Self {
            let mut p = Probed { k: FakeIptables::new(), info: TABLES.iter().map(|t| (*t, 1)).collect() };
            ensure(&mut p.k, IpFamily::V4).unwrap();
            p.k.calls.clear();
            p
        }
        /// The tables `-C` was run on since the last call.
        fn checked(&mut self) -> Vec<String> {
            self.k.calls.drain(..).filter_map(|c| if let Call::Check(_, t, _) = c { Some(t) } else { None }).collect()
        }
    }

    impl Restorer for Probed {
        fn backend(&self) -> crate::xtables::apply::Backend {
            crate::xtables::apply::Backend::Legacy
        }
        fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError> {
            self.k.save(family, table)
        }
        fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError> {
            self.k.save_all(family)
        }
        fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
            self.k.restore(family, text)
        }
        fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError> {
            self.k.check(family, table, chain, rule)
        }
        fn table_info(&mut self, _: IpFamily, table: &str) -> Result<TableInfo, super::super::tableinfo::ProbeError> {
            let n = self.info.get(table).copied().ok_or(super::super::tableinfo::ProbeError::Unsupported)?;
            Ok(TableInfo { valid_hooks: 0x1f, hook_entry: [0; 5], underflow: [0; 5], num_entries: n, size: n * 100 })
        }
    }

    #[test]
    fn the_gate_skips_every_table_the_kernel_says_is_unchanged() {
        let mut p = Probed::ready();
        let mut gate = Gate::default();
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), TABLES, "the first check runs every -C");
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert!(p.checked().is_empty(), "nothing changed: no -C");
        assert_eq!(gate.missing(&mut p, IpFamily::V6).unwrap(), Some("mangle"), "per family");
    }

    #[test]
    fn the_gate_checks_a_table_whose_summary_changed_and_sees_the_loss() {
        let mut p = Probed::ready();
        let mut gate = Gate::default();
        gate.missing(&mut p, IpFamily::V4).unwrap();
        p.checked();
        // Someone adds a rule to filter: checked, canary still there, remembered anew.
        p.info.insert("filter", 2);
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), ["filter"]);
        // Someone flushes nat: the summary changes, the -C runs and finds the canary gone.
        p.k.flush_table(IpFamily::V4, "nat");
        p.info.insert("nat", 0);
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), Some("nat"));
        assert_eq!(p.checked(), ["nat"]);
        // A loss is never remembered: until the canary is back, every check runs the -C.
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), Some("nat"));
        assert_eq!(p.checked(), ["nat"]);
    }

    #[test]
    fn the_gate_checks_everything_after_our_own_restore() {
        let mut p = Probed::ready();
        let mut gate = Gate::default();
        gate.missing(&mut p, IpFamily::V4).unwrap();
        gate.missing(&mut p, IpFamily::V6).unwrap();
        p.checked();
        // Our restore and someone's flush could leave the summary as it was: not trusted.
        gate.forget(IpFamily::V4);
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), TABLES);
        assert_eq!(gate.missing(&mut p, IpFamily::V6).unwrap(), Some("mangle"));
        assert_eq!(p.checked(), ["mangle"], "the other family's loss is not forgotten either");
    }

    #[test]
    fn without_a_summary_the_gate_checks_every_time_as_before() {
        let mut p = Probed::ready();
        p.info.remove("nat");
        let mut gate = Gate::default();
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), TABLES);
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), ["nat"], "the table the probe failed for, every time");
        // No summary at all (iptables-nft, the probe refused): exactly the plain check.
        p.info.clear();
        for _ in 0..2 {
            assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
            assert_eq!(p.checked(), TABLES);
        }
        p.k.flush_table(IpFamily::V4, "filter");
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), Some("filter"));
    }

    #[test]
    fn the_gates_ensure_after_a_full_sync_primes_the_next_check() {
        let mut p = Probed { k: FakeIptables::new(), info: TABLES.iter().map(|t| (*t, 1)).collect() };
        let mut gate = Gate::default();
        assert_eq!(gate.ensure(&mut p, IpFamily::V4).unwrap(), TABLES, "created: not remembered as checked");
        p.info.values_mut().for_each(|n| *n += 1); // the restore that created them
        p.checked();
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert_eq!(p.checked(), TABLES);
        // A full sync that found every canary in place: its -C stand for the next check's.
        gate.forget(IpFamily::V4);
        assert!(gate.ensure(&mut p, IpFamily::V4).unwrap().is_empty());
        assert_eq!(p.checked(), TABLES);
        assert_eq!(gate.missing(&mut p, IpFamily::V4).unwrap(), None);
        assert!(p.checked().is_empty());
    }
}

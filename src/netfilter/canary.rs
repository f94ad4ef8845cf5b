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

use super::apply::{RestoreError, Restorer};
use super::names::KUBE_PROXY_CANARY;
use super::rule::Rule;
use super::table::Table;
use super::target::Target;
use crate::net::IpFamily;

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
    for table in TABLES {
        if !holds(r, family, table)? {
            return Ok(Some(table));
        }
    }
    Ok(None)
}

/// Creates the canaries of `family` that are gone (one restore; nothing sent when all are
/// there). Returns the tables where one was created.
pub fn ensure(r: &mut dyn Restorer, family: IpFamily) -> Result<Vec<&'static str>, RestoreError> {
    let mut created = Vec::new();
    for table in TABLES {
        if !holds(r, family, table)? {
            created.push(table);
        }
    }
    if !created.is_empty() {
        r.restore(family, &restore_text(&created))?;
    }
    Ok(created)
}

/// Restore input (for `--noflush`) that (re)creates the canaries of `tables`.
pub fn restore_text(tables: &[&'static str]) -> String {
    let tables: Vec<Table> = tables.iter().map(|&name| Table { name, chains: vec![KUBE_PROXY_CANARY.into()], rules: vec![rule()] }).collect();
    super::table::write_all(&tables)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::fake::{Call, FakeIptables};

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
}

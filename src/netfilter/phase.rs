//! Which step of a sync failed. kube-proxy counts a failed sync as a restore failure
//! (`sync_proxy_rules_iptables_restore_failures_total`, nftables mode's
//! `sync_proxy_rules_nftables_sync_failures_total`) only when the write itself was refused
//! or failed: the `iptables-restore` call, or the `nft` transaction. [`Watched`] wraps a
//! [`Restorer`] for one sync and remembers which of its calls failed first; nftables mode
//! wraps its `nft` client the same way (`nftables::watched`), so this layer imports no mode.

use super::apply::{Backend, Input, RestoreError, Restorer};
use crate::net::IpFamily;

/// The step of a family's sync that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the kernel's rules (`iptables-save`, `nft list`) or parsing what it read.
    Read,
    /// Writing them: `iptables-restore` or the `nft` transaction refused or failed (what
    /// kube-proxy counts as a restore or sync failure).
    Restore,
    /// Anything else the sync does around the write (the canaries, the sysctls, IPVS,
    /// ipsets, links).
    Other,
}

/// A [`Restorer`] that remembers its first failed call: its [`Phase`] and family.
pub struct Watched<'a> {
    inner: &'a mut dyn Restorer,
    failed: Option<(Phase, IpFamily)>,
    /// Whether a restore was attempted (the kernel's rules may have changed).
    wrote: bool,
}

impl<'a> Watched<'a> {
    pub fn new(inner: &'a mut dyn Restorer) -> Self {
        Watched { inner, failed: None, wrote: false }
    }

    /// The first failed call's phase and family, if one failed.
    pub fn failed(&self) -> Option<(Phase, IpFamily)> {
        self.failed
    }

    /// Whether a restore was sent (refused or not): the tables may have changed.
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    fn note<T>(&mut self, phase: Phase, family: IpFamily, result: Result<T, RestoreError>) -> Result<T, RestoreError> {
        if result.is_err() && self.failed.is_none() {
            self.failed = Some((phase, family));
        }
        result
    }
}

impl Restorer for Watched<'_> {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError> {
        let r = self.inner.save(family, table);
        self.note(Phase::Read, family, r)
    }

    fn save_lines(&mut self, family: IpFamily, table: &str, each: &mut dyn FnMut(&str)) -> Result<(), RestoreError> {
        let r = self.inner.save_lines(family, table, each);
        self.note(Phase::Read, family, r)
    }

    fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError> {
        let r = self.inner.save_all(family);
        self.note(Phase::Read, family, r)
    }

    fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
        self.wrote = true;
        let r = self.inner.restore(family, text);
        self.note(Phase::Restore, family, r)
    }

    fn restore_from(&mut self, family: IpFamily, input: &Input) -> Result<(), RestoreError> {
        self.wrote = true;
        let r = self.inner.restore_from(family, input);
        self.note(Phase::Restore, family, r)
    }

    fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError> {
        let r = self.inner.check(family, table, chain, rule);
        self.note(Phase::Read, family, r)
    }

    // Not a step of the sync: a failed probe only means the canary check is not skipped.
    fn table_info(&mut self, family: IpFamily, table: &str) -> Result<crate::netfilter::tableinfo::TableInfo, crate::netfilter::tableinfo::ProbeError> {
        self.inner.table_info(family, table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::fake::FakeIptables;

    /// Reads only line by line: a whole read fails, and so does anything else.
    struct Streaming;

    fn not_read_here() -> RestoreError {
        RestoreError::Failed { binary: "streaming".into(), message: "only save_lines is served here".into() }
    }

    impl Restorer for Streaming {
        fn backend(&self) -> Backend {
            Backend::Nft
        }
        fn save(&mut self, _: IpFamily, _: &str) -> Result<String, RestoreError> {
            Err(RestoreError::Failed { binary: "save".into(), message: "read whole".into() })
        }
        fn save_lines(&mut self, _: IpFamily, table: &str, each: &mut dyn FnMut(&str)) -> Result<(), RestoreError> {
            [format!("*{table}").as_str(), "COMMIT"].into_iter().for_each(each);
            Ok(())
        }
        fn save_all(&mut self, _: IpFamily) -> Result<String, RestoreError> {
            Err(not_read_here())
        }
        fn restore(&mut self, _: IpFamily, _: &str) -> Result<(), RestoreError> {
            Err(not_read_here())
        }
        fn check(&mut self, _: IpFamily, _: &str, _: &str, _: &[&str]) -> Result<bool, RestoreError> {
            Err(not_read_here())
        }
    }

    #[test]
    fn the_kernel_is_read_line_by_line_through_the_watch() {
        let mut inner = Streaming;
        let mut w = Watched::new(&mut inner);
        let dump = crate::netfilter::apply::read(&mut w, IpFamily::V4, &["nat"]).expect("read line by line");
        assert_eq!(dump.order, ["nat"]);
    }

    #[test]
    fn the_first_failed_call_is_remembered_with_its_phase_and_family() {
        let mut fake = FakeIptables::new();
        fake.fail_next_save = Some("cannot read".into());
        fake.fail_next = Some("refused".into());
        let mut w = Watched::new(&mut fake);
        assert!(w.save(IpFamily::V6, "filter").is_err());
        assert_eq!(w.failed(), Some((Phase::Read, IpFamily::V6)));
        assert!(w.restore(IpFamily::V4, "*nat\nCOMMIT\n").is_err());
        assert_eq!(w.failed(), Some((Phase::Read, IpFamily::V6)), "the first failure is kept");

        let mut fake = FakeIptables::new();
        fake.fail_next = Some("refused".into());
        let mut w = Watched::new(&mut fake);
        assert!(w.save(IpFamily::V4, "nat").is_ok() && w.failed().is_none());
        assert!(w.restore(IpFamily::V4, "*nat\nCOMMIT\n").is_err());
        assert_eq!(w.failed(), Some((Phase::Restore, IpFamily::V4)));
    }
}

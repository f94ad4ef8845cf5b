//! [`WatchedNft`]: the `nft` client wrapped for one sync, remembering which of its calls
//! failed first ([`Phase`]; the iptables side is `netfilter::phase::Watched`).

use super::apply::{Names, Nft, NftError, Via};
use super::model::Family;
use crate::netfilter::phase::Phase;

/// An [`Nft`] that remembers its first failed call's [`Phase`]: a transaction (`run`) is
/// the write; a listing, the read.
pub struct WatchedNft<'a> {
    inner: &'a mut dyn Nft,
    failed: Option<Phase>,
}

impl<'a> WatchedNft<'a> {
    pub fn new(inner: &'a mut dyn Nft) -> Self {
        WatchedNft { inner, failed: None }
    }

    pub fn failed(&self) -> Option<Phase> {
        self.failed
    }

    fn note<T>(&mut self, phase: Phase, result: Result<T, NftError>) -> Result<T, NftError> {
        if result.is_err() && self.failed.is_none() {
            self.failed = Some(phase);
        }
        result
    }
}

impl Nft for WatchedNft<'_> {
    fn run(&mut self, text: &str) -> Result<(), NftError> {
        let r = self.inner.run(text);
        self.note(Phase::Restore, r)
    }

    fn run_partial(&mut self, text: &str) -> Result<Via, NftError> {
        let r = self.inner.run_partial(text);
        self.note(Phase::Restore, r)
    }

    fn batch_lines(&self) -> Option<usize> {
        self.inner.batch_lines()
    }

    fn list(&mut self, family: Family) -> Result<Option<String>, NftError> {
        let r = self.inner.list(family);
        self.note(Phase::Read, r)
    }

    fn names(&mut self, family: Family) -> Result<Option<Names>, NftError> {
        let r = self.inner.names(family);
        self.note(Phase::Read, r)
    }

    fn canonical(&mut self, family: Family, text: &str) -> Result<String, NftError> {
        let r = self.inner.canonical(family, text);
        self.note(Phase::Read, r)
    }

    fn live(&mut self, family: Family) -> Result<Option<super::delta::LiveTable>, NftError> {
        let r = self.inner.live(family);
        self.note(Phase::Read, r)
    }

    fn full_sync_done(&mut self, family: Family) {
        self.inner.full_sync_done(family);
    }

    fn read_for_sync(&mut self, family: Family) -> Result<Option<(Names, Option<super::delta::LiveTable>)>, NftError> {
        let r = self.inner.read_for_sync(family);
        self.note(Phase::Read, r)
    }
}


//! nftables mode's one-endpoint change, for scripts/bench-nft: the transaction svcproxy's
//! watch-mode partial sync sends (one `nft -f -` run), written out so that the script can
//! time it with a bare `nft -f` against a kernel holding the cluster.

use std::sync::{Arc, Mutex};

use super::OneEndpoint;
use crate::nftables::apply::{Names, NftError, NftRead, NftWrite, Part, Via};
use crate::nftables::delta::LiveTable;
use crate::nftables::model::Script;
use crate::net::IpFamily;
use crate::driver::Pass;
use crate::nftables::proxier::Proxier;
use crate::track::Changes;

/// An `nft` that takes every transaction, keeps its text, and holds no table.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn take(&self) -> Vec<String> {
        self.0.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default()
    }
}

impl NftWrite for Recorder {
    fn run(&mut self, text: &str, _: Part) -> Result<Via, NftError> {
        if let Ok(mut v) = self.0.lock() {
            v.push(text.to_owned());
        }
        Ok(Via::Nft)
    }
    fn run_script(&mut self, script: &Script<'_>, part: Part) -> Result<Via, NftError> {
        self.run(script.text(), part)
    }
    fn batch_lines(&self) -> Option<usize> {
        None
    }
    fn full_sync_done(&mut self, _family: IpFamily) {}
}

impl NftRead for Recorder {
    fn list(&mut self, _family: IpFamily) -> Result<Option<String>, NftError> {
        Ok(None)
    }
    fn names(&mut self, _family: IpFamily) -> Result<Option<Names>, NftError> {
        Ok(None)
    }
    fn canonical(&mut self, _family: IpFamily, _text: &str) -> Result<String, NftError> {
        Ok(String::new())
    }
    fn read_for_sync(&mut self, _family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError> {
        Ok(None)
    }
}

/// The `nft` runs of the watch-mode partial sync that adds one endpoint to the middle
/// service of a generated cluster (after a full sync of the cluster as generated).
pub fn one_endpoint_partial(one: &mut OneEndpoint) -> anyhow::Result<Vec<String>> {
    let rec = Recorder::default();
    let loaded = &mut one.loaded;
    let mut proxier = Proxier::new(&loaded.config, &loaded.trackers, Box::new(rec.clone()));
    let none = vec![Changes::default(); loaded.trackers.families.len()];
    proxier.sync_as(&loaded.trackers, &none, true, Pass::Apply)?;
    rec.take();
    loaded.trackers.apply(&one.add);
    let changes = loaded.trackers.commit();
    proxier.sync_as(&loaded.trackers, &changes, false, Pass::Apply)?;
    Ok(rec.take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_endpoint_change_is_one_run_of_the_changed_service_alone() {
        let mut one = OneEndpoint::new(20, 3).unwrap();
        let runs = one_endpoint_partial(&mut one).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        let text = &runs[0];
        assert!(!text.contains("add table") && !text.contains("flush map"), "only the change: {text}");
        // The changed service's chain is rewritten with one more endpoint (3 + 1).
        assert!(text.contains("numgen random mod 4 vmap") || text.contains("numgen random mod 4 map"), "{text}");
        let services: std::collections::BTreeSet<&str> = text.lines().filter_map(|l| l.split_whitespace().nth(4)).filter(|c| c.starts_with("service-")).collect();
        assert_eq!(services.len(), 1, "{services:?}");
    }
}

//! nftables mode's one-endpoint change, for scripts/bench-nft: the transaction svcproxy's
//! watch-mode partial sync sends (one `nft -f -` run), written out so that the script can
//! time it with a bare `nft -f` against a kernel holding the cluster.

use std::sync::{Arc, Mutex};

use super::OneEndpoint;
use crate::driver::Pass;
use crate::nftables::fake::{FakeNft, SharedNft};
use crate::nftables::proxier::Proxier;
use crate::track::Changes;

/// The `nft` runs of the watch-mode partial sync that adds one endpoint to the middle
/// service of a generated cluster (after a full sync of the cluster as generated).
pub fn one_endpoint_partial(one: &mut OneEndpoint) -> anyhow::Result<Vec<String>> {
    let mut fake = FakeNft::new();
    fake.record_only = true;
    let nft: SharedNft = Arc::new(Mutex::new(fake));
    let runs = || nft.lock().map(|mut n| n.take_runs()).unwrap_or_default();
    let loaded = &mut one.loaded;
    let mut proxier = Proxier::new(&loaded.config, &loaded.trackers, Box::new(nft.clone()));
    let none = vec![Changes::default(); loaded.trackers.families.len()];
    proxier.sync_as(&loaded.trackers, &none, true, Pass::Apply)?;
    runs();
    loaded.trackers.apply(&one.add);
    let changes = loaded.trackers.commit();
    proxier.sync_as(&loaded.trackers, &changes, false, Pass::Apply)?;
    Ok(runs())
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

//! nftables mode's cleanup, as kube-proxy's `CleanupLeftovers`: the `kube-proxy` table of
//! each family is deleted (one transaction each); a family without one is not an error.

use super::apply::{Nft, NftError, Part};
use super::model::NftFamily;
use crate::net::IpFamily;
use super::names::TABLE;

/// Deletes (or, with `dry_run`, only finds) the `kube-proxy` tables; returns what went,
/// as `table ip kube-proxy`.
pub fn tables(nft: &mut dyn Nft, dry_run: bool) -> Result<Vec<String>, NftError> {
    let mut removed = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        if nft.names(family)?.is_none() {
            continue;
        }
        let what = format!("table {} {TABLE}", family.nft_word());
        if !dry_run {
            nft.run(&format!("delete {what}\n"), Part::Alone)?;
        }
        removed.push(what);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::fake::FakeNft;

    #[test]
    fn both_families_tables_go_and_a_missing_one_is_fine() {
        let mut nft = FakeNft::new();
        assert!(tables(&mut nft, false).unwrap().is_empty());
        nft.run("add table ip kube-proxy\nadd chain ip kube-proxy c\nadd table ip6 kube-proxy\n").unwrap();
        assert_eq!(tables(&mut nft, true).unwrap(), ["table ip kube-proxy", "table ip6 kube-proxy"]);
        assert!(nft.listing(IpFamily::V4).is_some(), "a dry run deletes nothing");
        assert_eq!(tables(&mut nft, false).unwrap().len(), 2);
        assert_eq!((nft.listing(IpFamily::V4), nft.listing(IpFamily::V6)), (None, None));
    }
}

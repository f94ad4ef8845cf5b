//! nftables mode (kube-proxy's `pkg/proxy/nftables`): cluster state → one `kube-proxy`
//! table per family (`ip`, `ip6`) as values ([`model`], from [`render`]) → one transaction
//! per family through [`apply::NftWrite`]: on the node a netlink batch ([`netlink`], encoded by
//! [`wire`]), else `nft -f`. Full syncs ([`sync`]: over a live table only what differs,
//! [`delta`]) and, between them, partial ones from the changed services alone
//! ([`partial`]), driven by [`proxier`].

pub mod anonfile;
pub mod anonrecord;
pub mod apply;
/// kube-proxy's test normalisation (tests and goldens only).
#[cfg(any(test, feature = "testing"))]
pub mod check;
pub mod chunked;
pub mod cold;
pub mod cleanup;
pub mod context;
pub mod delta;
pub mod element;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod listing;
pub mod live;
pub mod model;
pub mod names;
pub mod netlink;
pub mod partial;
pub mod proxier;
pub mod render;
pub mod stmt;
pub mod sync;
pub mod wire;

pub use context::Context;
pub use render::Ruleset;

use crate::config::Config;
use crate::track::Trackers;

/// Every family's ruleset.
pub fn render_all(config: &Config, trackers: &Trackers) -> Vec<Ruleset> {
    trackers
        .families
        .iter()
        .map(|t| {
            let (services, endpoints) = t.view();
            render::render(&Context::new(config, t.family), services, endpoints)
        })
        .collect()
}

/// The `nft -f` input of every family, one table after the other (IPv4 first).
pub fn text(rulesets: &[Ruleset], form: model::Form) -> String {
    rulesets.iter().map(|rs| model::write(&rs.table(), form)).collect()
}

//! kube-proxy's restore input, as a pure function of what was applied before: a full
//! restore (first sync, after a failure, periodically) or kube-proxy's partial one, holding
//! every top-level chain and only the changed services' chains, with chains that are no
//! longer used flushed and deleted.
//!
//! svcproxy never sends this (watch mode sends [`super::partial`]'s input): it is the
//! reference upstream's tests assert on (tests/golden.rs) and the benchmarks' kube-proxy
//! baseline, so it is built only for tests and tooling (feature `testing`).

use std::collections::BTreeSet;

use super::render::Ruleset;
use super::restore::{self, Scope};
use crate::model::NamespacedName;

/// What the last successful restore left in the kernel, as far as the next one needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Service chains (nat) the kernel holds.
    pub chains: BTreeSet<String>,
    /// The next restore must be full (nothing applied yet, or the last one failed).
    pub needs_full: bool,
}

impl Applied {
    /// Nothing known: the next sync is full and deletes nothing.
    pub fn unknown() -> Self {
        Applied { chains: BTreeSet::new(), needs_full: true }
    }

    /// The kernel holds `chains` (read back from it), all of them in sync.
    pub fn from_kernel(chains: BTreeSet<String>) -> Self {
        Applied { chains, needs_full: false }
    }
}

/// How the next restore is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncOptions {
    /// Write every service's chains, not only the changed ones.
    pub full: bool,
    /// Delete chains that are no longer used (kube-proxy skips this in large clusters
    /// except once per sync period).
    pub delete_stale: bool,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions { full: false, delete_stale: true }
    }
}

/// The restore text for the next sync, and what the kernel holds once it succeeds.
/// `changed` are the services whose ports or endpoints changed since the last restore.
pub fn next_restore(
    applied: &Applied,
    rs: &Ruleset,
    changed: &BTreeSet<NamespacedName>,
    opts: SyncOptions,
) -> (String, Applied) {
    let current: BTreeSet<&str> = rs.service_chains().collect();
    let stale: Vec<String> = applied.chains.iter().filter(|c| !current.contains(c.as_str())).cloned().collect();
    let scope = if opts.full || applied.needs_full { Scope::Full } else { Scope::Partial(changed) };
    let deleted: &[String] = if opts.delete_stale { &stale } else { &[] };
    let text = restore::write(rs, scope, deleted);
    let mut after: BTreeSet<String> = current.iter().map(|c| c.to_string()).collect();
    if !opts.delete_stale {
        after.extend(stale);
    }
    (text, Applied { chains: after, needs_full: false })
}

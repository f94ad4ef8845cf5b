//! Which restore to send next, as a pure function of what was applied before: a full
//! restore (first sync, after a failure, periodically) or a partial one holding only the
//! changed services' chains, with chains that are no longer used flushed and deleted.

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

    /// Records a successful restore of `rs`.
    pub fn record(rs: &Ruleset) -> Self {
        Applied { chains: rs.service_chains().map(str::to_string).collect(), needs_full: false }
    }
}

/// The restore text for the next sync. `changed` are the services whose ports or
/// endpoints changed since the last restore; `force_full` asks for a full restore.
pub fn next_restore(applied: &Applied, rs: &Ruleset, changed: &BTreeSet<NamespacedName>, force_full: bool) -> String {
    let current: BTreeSet<&str> = rs.service_chains().collect();
    let stale: Vec<String> = applied.chains.iter().filter(|c| !current.contains(c.as_str())).cloned().collect();
    let scope = if force_full || applied.needs_full { Scope::Full } else { Scope::Partial(changed) };
    restore::write(rs, scope, &stale)
}

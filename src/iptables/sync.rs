//! One iptables sync of one family against a [`Restorer`]: read what the kernel holds
//! for the tables we write, compute the [`Delta`] to the full render, and apply it (or,
//! for a dry run, only report it). Because the comparison is with the kernel and not
//! with memory, a run after an earlier run, after a crash or after kube-proxy sends only
//! what differs, and the end state is always the full render.

use std::time::Instant;

use crate::xtables::apply::{self, Backend, ReadError, RestoreError, Restorer};
use crate::xtables::names::is_service_chain;
use crate::xtables::delta::{self, Delta, TABLES};
use super::jumps::jumps;
use super::render::Ruleset;
use super::restore::{self, Scope};
use crate::xtables::dump;
use crate::driver::Phase;

/// What a sync found and did.
#[derive(Debug, Clone)]
pub struct SyncReport {
    pub delta: Delta,
    /// Whether the restore was sent (false for a dry run or when nothing changed).
    pub applied: bool,
    /// Lines of the full restore input, for comparison with what was sent (0 after an
    /// partial sync, which writes none).
    pub full_lines: usize,
    /// Where the time went.
    pub timings: Timings,
}

/// Wall time of each phase of one sync (for `svcproxy-bench sync` and the logs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Gathering the desired rules for the comparison (full syncs only).
    pub render: std::time::Duration,
    /// `iptables-save` of the tables we write, parsed.
    pub read: std::time::Duration,
    /// Computing the delta.
    pub compute: std::time::Duration,
    /// `iptables-restore` of the delta.
    pub restore: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// `iptables-save` failed, or its output did not parse.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// `iptables-restore` refused or failed: the write.
    #[error(transparent)]
    Restore(RestoreError),
    /// Ensuring the canaries failed.
    #[error(transparent)]
    Canary(RestoreError),
}

impl SyncError {
    /// The step that failed (kube-proxy counts only [`Phase::Restore`] as a restore failure).
    pub fn phase(&self) -> Phase {
        match self {
            SyncError::Read(_) => Phase::Read,
            SyncError::Restore(_) => Phase::Restore,
            SyncError::Canary(_) => Phase::Other,
        }
    }
}

/// The jumps this ruleset needs from built-in chains.
pub fn needed_jumps(rs: &Ruleset) -> Vec<crate::xtables::jumps::Jump> {
    jumps(!rs.ctx.is_v6() && rs.ctx.localhost_node_ports)
}

/// Services per restore on iptables-nft ([`Delta::restore_chunks`]) in a full sync: the
/// fastest of 10, 25, 50, 100, 250 and 1,000 at 5,000 services (BENCHMARKS.md).
pub const NFT_CHUNK_SERVICES: usize = 50;

/// Services per restore on iptables-nft in a partial sync. Every restore is one kernel
/// commit, and each commit validates the whole table's jump graph (`nft_table_validate`,
/// most of a soak's CPU), so a partial sync makes as few as it can: one, up to this many
/// changed services. With the full sync's 50, the soak's syncs grew with the changes they
/// fell behind on, and their latency with them (BENCHMARKS.md, the soak).
pub const NFT_PARTIAL_CHUNK_SERVICES: usize = 250;

/// Sends a delta: in one restore, or, on iptables-nft when it writes the chains of more
/// than `nft_chunk_services` services, in chunks (its time grows with the square of one
/// input's size).
pub fn send(r: &mut dyn Restorer, family: crate::net::IpFamily, delta: &Delta, nft_chunk_services: usize) -> Result<(), RestoreError> {
    match r.backend() {
        Backend::Nft => delta.each_restore_chunk(nft_chunk_services, |text| if text.is_empty() { Ok(()) } else { r.restore(family, text) }),
        Backend::Legacy if delta.restore_lines() == 0 => Ok(()),
        Backend::Legacy => r.restore_from(family, &|sink| delta.write_restore(sink)),
    }
}

/// Brings the kernel to `rs` (or, with `dry_run`, reports what that would take).
pub fn sync(r: &mut dyn Restorer, rs: &Ruleset, dry_run: bool) -> Result<SyncReport, SyncError> {
    let mut timings = Timings::default();
    let t = Instant::now();
    let live = apply::read(r, rs.ctx.node.family, &TABLES)?;
    timings.read = t.elapsed();
    let (delta, full_lines) = if !dry_run && holds_none_of_ours(&live, rs) {
        into_fresh_kernel(&live, rs, &mut timings)
    } else {
        against_the_kernel(live, rs, dry_run, &mut timings)
    };
    let applied = !dry_run && !delta.is_empty();
    if applied {
        let t = Instant::now();
        send(r, rs.ctx.node.family, &delta, NFT_CHUNK_SERVICES).map_err(SyncError::Restore)?;
        timings.restore = t.elapsed();
    }
    Ok(SyncReport { delta, applied, full_lines, timings })
}

type Planned = (Delta, usize);

/// Whether the kernel holds none of the chains a full render declares and none of the
/// mode's per-service chains (a node's first sync, or after our tables were flushed).
fn holds_none_of_ours(live: &dump::Dump, rs: &Ruleset) -> bool {
    let fixed = super::render::fixed::filter_chains(&rs.ctx);
    let ours = |c: &str| is_service_chain(c) || fixed.contains(&c) || super::render::fixed::NAT_CHAINS.contains(&c);
    TABLES.iter().filter_map(|t| live.tables.get(*t)).all(|t| !t.chains.iter().any(|c| ours(&c.name)))
}

/// Everything written whole, nothing compared: the rules go from the values into each
/// chain's restore lines, with no [`dump::Dump`] of them and no canonical form.
fn into_fresh_kernel(live: &dump::Dump, rs: &Ruleset, timings: &mut Timings) -> Planned {
    let t = Instant::now();
    let (chains, full_lines) = restore::new_chains(rs, is_service_chain);
    timings.render = t.elapsed();
    let t = Instant::now();
    let delta = delta::compute_fresh(chains, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain);
    timings.compute = t.elapsed();
    (delta, full_lines)
}

/// The full render compared with what the kernel holds, chain by chain.
fn against_the_kernel(live: dump::Dump, rs: &Ruleset, dry_run: bool, timings: &mut Timings) -> Planned {
    let t = Instant::now();
    // The rules as values, borrowed from the ruleset: no restore text is written or
    // parsed for the comparison, and no second copy of the rules is made.
    let desired = restore::view(rs, Scope::Full);
    let full_lines = desired.lines();
    timings.render = t.elapsed();
    let t = Instant::now();
    // Only a dry run prints the changed chains' lines.
    let lines = if dry_run { delta::Lines::Keep } else { delta::Lines::Names };
    let delta = delta::compute_with(&desired, &live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain, lines);
    timings.compute = t.elapsed();
    // The kernel's dump and the view are freed here, before the restore input is
    // written, so a full sync never holds them, the delta and the restore text at once.
    (delta, full_lines)
}

#[cfg(test)]
mod tests;

//! `--socket-lb` on this node, after the mode's sync: the programs attached (once; their
//! pinned links keep them there), then the maps brought to what the committed trackers
//! want (`socketlb::{plan,diff,apply}`). A dry run reads the pinned maps, if any, and
//! writes nothing.

use crate::config::SocketLbConfig;
use crate::driver::Pass;
use crate::netfilter::bpf::kernel::{self, Attached, Maps};
use crate::netfilter::bpf::{maps, object, BpfError};
use crate::socketlb::apply::{apply, read_held, Applied};
use crate::socketlb::diff::{diff, Diff, Held};
use crate::socketlb::plan::Wanted;

/// What one socket-LB sync did (or, for a dry run, would do).
#[derive(Debug)]
pub struct Report {
    /// `None` for a dry run.
    pub attached: Option<Attached>,
    pub diff: Diff,
    /// `None` for a dry run.
    pub applied: Option<Applied>,
}

pub fn sync(cfg: &SocketLbConfig, wanted: &Wanted, pass: Pass) -> Result<Report, BpfError> {
    // First, so that a binary without the programs says so whatever else is missing.
    object::object()?;
    if pass == Pass::DryRun {
        let held = if cfg.pins.join(maps::SERVICES).exists() { read_held(&Maps::open(&cfg.pins)?)? } else { Held::default() };
        let diff = diff(&held, wanted, &mut held.next_id());
        return Ok(Report { attached: None, diff, applied: None });
    }
    let attached = kernel::attach(&cfg.pins, &cfg.cgroup)?;
    let mut table = Maps::open(&cfg.pins)?;
    let held = read_held(&table)?;
    let diff = diff(&held, wanted, &mut held.next_id());
    let applied = apply(&diff, &mut table);
    Ok(Report { attached: Some(attached), diff, applied: Some(applied) })
}

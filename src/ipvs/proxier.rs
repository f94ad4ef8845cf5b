//! IPVS mode across syncs (watch mode): the kernel interfaces, owned, and two kinds of sync.
//! A **full** one (the first, after a failure, when the engine asks) reads the kernel (IPVS,
//! `kube-ipvs0`, ipsets, iptables) and reconciles all of it ([`super::sync`]); it leaves
//! behind the [`Memory`] of what the kernel then holds. A **partial** one, while that
//! memory stands, plans only the changed services and sends only what moved
//! ([`super::partial`]); any failure drops the memory, so the next sync is full. Draining
//! real servers are kept in the memory (and the grace file, so a restart keeps them) and
//! removed once drained or past the grace period. Stale UDP flows are the engine's
//! ([`crate::conntrack`]), run after this sync as kube-proxy's IPVS proxier runs its
//! conntrack reconciler.

use std::path::PathBuf;

use super::ipset::{ExecIpset, IpsetRunner};
use super::link::{Links, RtNetlink};
use super::memory::Memory;
use super::netlink::{Ipvs, NetlinkIpvs};
use super::reconcile;
use super::sync::{self, Kernel, Options, Report, SyncError, GRACE_FILE};
use crate::config::Config;
use crate::net::IpFamily;
use crate::driver::Pass;
use crate::xtables::apply::Restorer;
pub use crate::driver::Phase;
use crate::track::Trackers;

/// Where a sync keeps and finds its node-local state.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Terminating real servers' start times.
    pub grace_file: PathBuf,
    pub grace_period_secs: u64,
    /// `/proc/sys` (tests point elsewhere).
    pub proc_sys: PathBuf,
}

impl Paths {
    /// The node's: `/run/svcproxy/…`, `/proc/sys`; `SVCPROXY_IPVS_GRACE_FILE` and
    /// `SVCPROXY_IPVS_GRACE_PERIOD` (seconds) override the first two.
    pub fn node() -> Self {
        Paths {
            grace_file: std::env::var_os("SVCPROXY_IPVS_GRACE_FILE").map_or_else(|| PathBuf::from(GRACE_FILE), PathBuf::from),
            grace_period_secs: std::env::var("SVCPROXY_IPVS_GRACE_PERIOD")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(reconcile::DEFAULT_GRACE_PERIOD_SECS),
            proc_sys: PathBuf::from("/proc/sys"),
        }
    }
}

/// An IPVS-mode sync failed: which step, and for an `iptables-save`/`iptables-restore`
/// call, which family (kube-proxy's per-family proxier counts a refused restore against
/// its family).
#[derive(Debug)]
pub struct Failed {
    pub error: SyncError,
    pub phase: Phase,
    pub family: Option<IpFamily>,
}

// Shown as the error itself, as `#[error(transparent)]` would show it.
impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

pub struct Proxier {
    pub ipvs: Box<dyn Ipvs + Send>,
    pub links: Box<dyn Links + Send>,
    pub ipset: Box<dyn IpsetRunner + Send>,
    pub iptables: Box<dyn Restorer + Send>,
    pub paths: Paths,
    /// What the kernel holds since the last full sync (`None`: the next sync is full).
    pub memory: Option<Memory>,
    /// Whether full syncs ensure the iptables canaries (watch mode; a one-shot sync has no
    /// loop to check them).
    pub canaries: bool,
}

impl Proxier {
    /// This node's kernel: netlink for IPVS and links, the `ipset` and `iptables` tools.
    pub fn on_node(iptables: Box<dyn Restorer + Send>) -> Result<Self, SyncError> {
        Ok(Proxier {
            ipvs: Box::new(NetlinkIpvs::connect()?),
            links: Box::new(RtNetlink::connect()?),
            ipset: Box::new(ExecIpset),
            iptables,
            paths: Paths::node(),
            memory: None,
            canaries: true,
        })
    }

    /// Syncs (or, with [`Pass::DryRun`], compares) every family of `cfg` with the kernel. Partial
    /// (from memory, for the committed `changes`, per family) unless `full`, a dry run, or
    /// no memory.
    pub fn sync(&mut self, cfg: &Config, trackers: &Trackers, changes: &[crate::track::Changes], full: bool, pass: Pass) -> Result<Report, Failed> {
        let dry_run = pass == Pass::DryRun;
        let memory = self.memory.take().filter(|_| !full && !dry_run);
        self.sync_kernel(cfg, trackers, changes, memory, dry_run)
    }

    /// Whether the kernel lost what the memory trusts ([`super::canary::lost`]): `Some`
    /// means the next sync must be full. `None` without memory (the next one is full anyway).
    pub fn lost(&mut self) -> Result<Option<(IpFamily, &'static str)>, crate::xtables::apply::RestoreError> {
        let Some(memory) = &self.memory else { return Ok(None) };
        super::canary::lost(memory, self.ipvs.as_mut(), self.links.as_mut(), self.iptables.as_mut())
    }

    /// Drops the memory: the next sync reads the kernel (the configuration changed).
    pub fn forget(&mut self) {
        self.memory = None;
    }

    /// The sync itself; a failure says whether it was an `iptables-restore` (and of which
    /// family) or another step.
    fn sync_kernel(&mut self, cfg: &Config, trackers: &Trackers, changes: &[crate::track::Changes], memory: Option<Memory>, dry_run: bool) -> Result<Report, Failed> {
        let now_secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let opts = Options {
            dry_run,
            grace_file: self.paths.grace_file.clone(),
            grace_period_secs: self.paths.grace_period_secs,
            now_secs,
            proc_sys: self.paths.proc_sys.clone(),
        };
        let partial = memory.is_some();
        let mut k = Kernel { ipvs: self.ipvs.as_mut(), links: self.links.as_mut(), ipset: self.ipset.as_mut(), iptables: self.iptables.as_mut() };
        let result = match memory {
            Some(mut memory) => super::partial::sync(&mut memory, trackers, changes, &mut k, &opts).map(|report| (report, Some(memory))),
            None => sync::full(cfg, trackers, &mut k, &opts),
        };
        let (report, memory) = result.map_err(|error| {
            let (phase, family) = match &error {
                SyncError::IptablesRestore { family, .. } => (Phase::Restore, Some(*family)),
                SyncError::IptablesRead(_) => (Phase::Read, None),
                _ => (Phase::Other, None),
            };
            Failed { phase, family, error }
        })?;
        if !partial && memory.is_some() && self.canaries {
            super::canary::ensure(self.iptables.as_mut(), &cfg.families)
                .map_err(|error| Failed { phase: Phase::Other, family: None, error: SyncError::Canary(error) })?;
        }
        self.memory = memory;
        Ok(report)
    }
}

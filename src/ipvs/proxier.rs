//! IPVS mode across syncs (watch mode): the kernel interfaces, owned, and a sync that
//! reads the kernel (IPVS, `kube-ipvs0`, ipsets, iptables) and reconciles it each time.
//! Graceful termination needs no memory here: draining real servers are found in the
//! kernel on every sync and removed once drained or past the grace period. After a sync
//! that applied, the UDP/SCTP conntrack entries its changes made stale are cleared, per
//! family (kube-proxy's IPVS proxier runs its conntrack reconciler at the same point).

use std::path::PathBuf;

use super::ipset::{ExecIpset, IpsetRunner};
use super::link::{Links, RtNetlink};
use super::netlink::{Ipvs, NetlinkIpvs};
use super::reconcile;
use super::sync::{self, Kernel, Options, Report, SyncError, GRACE_FILE};
use crate::config::Config;
use crate::net::IpFamily;
use crate::netfilter::apply::Restorer;
use crate::netfilter::conntrack::{self, Conntrack, ExecConntrack, Reconciled};
pub use crate::netfilter::phase::Phase;
use crate::netfilter::phase::Watched;
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
    pub conntrack: Box<dyn Conntrack>,
    pub paths: Paths,
    /// The stale-flow cleanups of the last sync, for the metrics.
    pub reconciled: Vec<Reconciled>,
}

impl Proxier {
    /// This node's kernel: netlink for IPVS and links, the `ipset`, `iptables` and
    /// `conntrack` tools.
    pub fn on_node(iptables: Box<dyn Restorer + Send>) -> Result<Self, SyncError> {
        Ok(Proxier {
            ipvs: Box::new(NetlinkIpvs::connect()?),
            links: Box::new(RtNetlink::connect()?),
            ipset: Box::new(ExecIpset),
            iptables,
            conntrack: Box::new(ExecConntrack),
            paths: Paths::node(),
            reconciled: Vec::new(),
        })
    }

    /// Syncs (or, with `dry_run`, compares) every family of `cfg` with the kernel, then
    /// (unless a dry run) clears the flows the sync made stale.
    pub fn sync(&mut self, cfg: &Config, trackers: &Trackers, dry_run: bool) -> Result<Report, Failed> {
        self.reconciled.clear();
        let report = self.sync_kernel(cfg, trackers, dry_run)?;
        if !dry_run {
            self.clear_stale(&cfg.families, &report.flushes);
        }
        Ok(report)
    }

    /// Each family's stale flows, cleared and recorded (a family with none does no work).
    fn clear_stale(&mut self, families: &[IpFamily], flushes: &[conntrack::Flush]) {
        for family in families {
            let mine: Vec<_> = flushes.iter().filter(|f| f.addr.ip.is_some_and(|ip| IpFamily::of(&ip) == *family)).cloned().collect();
            if !mine.is_empty() {
                self.reconciled.push(conntrack::clear(self.conntrack.as_mut(), *family, &mine));
            }
        }
    }

    /// The sync itself; a failure says whether it was an `iptables-restore` (and of which
    /// family) or another step.
    fn sync_kernel(&mut self, cfg: &Config, trackers: &Trackers, dry_run: bool) -> Result<Report, Failed> {
        let now_secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let opts = Options {
            dry_run,
            grace_file: self.paths.grace_file.clone(),
            grace_period_secs: self.paths.grace_period_secs,
            now_secs,
            proc_sys: self.paths.proc_sys.clone(),
        };
        let mut iptables = Watched::new(self.iptables.as_mut());
        let mut k = Kernel { ipvs: self.ipvs.as_mut(), links: self.links.as_mut(), ipset: self.ipset.as_mut(), iptables: &mut iptables };
        let result = sync::sync(cfg, trackers, &mut k, &opts);
        let iptables = iptables.failed();
        result.map_err(|error| {
            // Only an iptables call's own error is the iptables step's.
            let failed = matches!(error, SyncError::Iptables(_)).then_some(iptables).flatten();
            Failed { phase: failed.map_or(Phase::Other, |(p, _)| p), family: failed.map(|(_, f)| f), error }
        })
    }
}

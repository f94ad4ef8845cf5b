//! One IPVS-mode sync of this node: read the kernel (IPVS, kube-ipvs0, ipsets, iptables,
//! sysctls), plan, reconcile, and apply in an order that never blackholes a live service
//! (or, for a dry run, report what would change).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use super::ipset::{self, IpsetRunner};
use super::grace;
use super::kernel_form::kernel_form;
use super::plan::rules;
use super::link::{LinkAddress, LinkError, Links};
use super::netlink::{self, Ipvs};
use super::values::{Op, Timeouts};
use super::memory::Memory;
use super::plan::incremental::FamilyPlanner;
use super::plan::{Context, FamilyState, DUMMY_LINK};
use super::reconcile::{self, Changes, Observed, Scope, Timing, Wanted};
use crate::config::Config;
use crate::xtables::apply::{ReadError, RestoreError, Restorer};
use crate::xtables::delta::{self, Delta, TABLES};
use crate::xtables::dump::Dump;
use crate::net::IpFamily;
use crate::track::Trackers;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Ipvs(#[from] netlink::Error),
    #[error("IPVS refused {0} operation(s); first: {1}")]
    Refused(usize, String),
    #[error(transparent)]
    Ipset(#[from] ipset::IpsetError),
    /// Reading the iptables rules failed.
    #[error(transparent)]
    IptablesRead(RestoreError),
    /// `iptables-restore` of a family's rules refused or failed.
    #[error("{error}")]
    IptablesRestore { family: IpFamily, error: RestoreError },
    /// Ensuring the canaries failed.
    #[error(transparent)]
    Canary(RestoreError),
    #[error("cannot parse {what}: {reason}")]
    Parse { what: String, reason: String },
    #[error("{0} is missing right after it was created")]
    LinkMissing(&'static str),
    #[error("cannot write the termination memory {path}: {error}")]
    GraceFile { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Sysctl(#[from] crate::node::sysctl::SysctlError),
}

impl From<ReadError> for SyncError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Save(e) => SyncError::IptablesRead(e),
            ReadError::Parse { table, error } => SyncError::Parse { what: format!("iptables-save -t {table}"), reason: error.to_string() },
        }
    }
}

/// How to sync.
#[derive(Debug, Clone)]
pub struct Options {
    pub dry_run: bool,
    /// Where terminating real servers' start times are kept between runs.
    pub grace_file: PathBuf,
    pub grace_period_secs: u64,
    pub now_secs: u64,
    /// `/proc/sys` (tests may point elsewhere).
    pub proc_sys: PathBuf,
}

/// The kernel interfaces one sync uses.
pub struct Kernel<'a> {
    pub ipvs: &'a mut dyn Ipvs,
    pub links: &'a mut dyn Links,
    pub ipset: &'a mut dyn IpsetRunner,
    pub iptables: &'a mut dyn Restorer,
}

/// What a sync found (and, unless a dry run, changed).
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub link_missing: bool,
    pub changes: Changes,
    pub ipsets: ipset::Delta,
    pub iptables: Vec<(IpFamily, Delta)>,
    pub sysctls: Vec<crate::node::sysctl::Change>,
    pub timeouts: Option<Timeouts>,
    /// Real servers still draining after this sync.
    pub terminating: usize,
    /// Where the time went.
    pub timings: Timings,
}

/// Wall time of each phase of one IPVS-mode sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Reading the kernel: links and addresses, IPVS (services and real servers), ipsets,
    /// iptables, sysctls, timeouts.
    pub read: std::time::Duration,
    /// Planning from the trackers and reconciling with what was read.
    pub plan: std::time::Duration,
    /// Applying the changes (links, ipsets, IPVS, iptables).
    pub apply: std::time::Duration,
}

impl Report {
    pub fn is_empty(&self) -> bool {
        !self.link_missing
            && self.changes.is_empty()
            && self.ipsets.is_empty()
            && self.iptables.iter().all(|(_, d)| d.is_empty())
            && self.sysctls.is_empty()
            && self.timeouts.is_none()
    }

    /// The dry-run text: one section per kind of change.
    pub fn diff_text(&self) -> String {
        let mut out = String::new();
        if !self.sysctls.is_empty() {
            out.push_str("# sysctl\n");
            for c in &self.sysctls {
                let _ = writeln!(out, "{}: {:?} -> {}", c.path, c.current, c.wanted);
            }
        }
        if self.link_missing || !self.changes.bind.is_empty() || !self.changes.unbind.is_empty() {
            out.push_str("# kube-ipvs0\n");
            if self.link_missing {
                out.push_str("+link kube-ipvs0 (dummy)\n");
            }
            self.changes.bind.iter().for_each(|ip| { let _ = writeln!(out, "+{ip}"); });
            self.changes.unbind.iter().for_each(|ip| { let _ = writeln!(out, "-{ip}"); });
        }
        if !self.changes.ops.is_empty() || self.timeouts.is_some() {
            out.push_str("# ipvs\n");
            self.changes.ops.iter().for_each(|op| { let _ = writeln!(out, "{op}"); });
            if let Some(t) = self.timeouts {
                let _ = writeln!(out, "{}", Op::SetTimeouts(t));
            }
        }
        if !self.ipsets.is_empty() {
            out.push_str("# ipset\n");
            out.push_str(&self.ipsets.diff_text());
        }
        for (family, d) in &self.iptables {
            out.push_str(&delta::dry_run_diff(d, &family.to_string()));
        }
        out
    }
}

/// Syncs (or, with `dry_run`, compares) every family of `cfg`.
pub fn sync(cfg: &Config, trackers: &Trackers, k: &mut Kernel, opts: &Options) -> Result<Report, SyncError> {
    full(cfg, trackers, k, opts).map(|(report, _)| report)
}

/// [`sync`], and unless a dry run, what the kernel holds after it: the memory the next
/// partial sync ([`super::partial`]) reconciles against instead of reading the kernel.
pub fn full(cfg: &Config, trackers: &Trackers, k: &mut Kernel, opts: &Options) -> Result<(Report, Option<Memory>), SyncError> {
    let started = Instant::now();
    let addrs = k.links.addresses()?;
    let index = k.links.link_index(DUMMY_LINK)?;
    let on_dummy = |a: &&LinkAddress| Some(a.index) == index;
    let bound: BTreeSet<IpAddr> = addrs.iter().filter(on_dummy).map(|a| a.ip).collect();
    let observed = Observed { services: super::observe::services(k.ipvs)?, bound };
    let live_sets = ipset::parse_save(&k.ipset.save()?);
    let live_iptables = read_iptables(k.iptables, &cfg.families)?;
    let timeouts_now = wanted_timeouts(cfg).map(|_| k.ipvs.timeouts()).transpose()?;
    let read = started.elapsed();

    let planned = Instant::now();
    let mut cfg = cfg.clone();
    if cfg.interface_addresses.is_none() {
        cfg.interface_addresses = Some(addrs.iter().filter(|a| !on_dummy(a)).map(|a| a.ip).collect());
    }
    let planners: Vec<FamilyPlanner> = trackers
        .families
        .iter()
        .map(|t| {
            let (services, endpoints) = t.view();
            FamilyPlanner::new(Context::new(&cfg, t.family), services, endpoints)
        })
        .collect();
    let plans = || planners.iter().map(FamilyPlanner::plan);
    let grace = grace::read(&opts.grace_file);
    let timing = Timing { now_secs: opts.now_secs, grace_period_secs: opts.grace_period_secs };
    let wanted = Wanted::from_plans(plans(), scope(&cfg));
    let changes = reconcile::diff(&wanted, &observed, &grace, timing);
    let live_plans: Vec<&FamilyState> = plans().collect();
    let mut report = Report {
        link_missing: index.is_none(),
        ipsets: ipset::delta(plans(), &live_sets),
        iptables: iptables_deltas(&live_plans, &live_iptables)?,
        sysctls: crate::node::sysctl::changes(&opts.proc_sys, &crate::node::sysctl::ipvs_for_this_kernel(cfg.ipvs.strict_arp)),
        timeouts: timeouts_change(&cfg, timeouts_now),
        terminating: changes.terminating.len(),
        changes,
        timings: Timings { read, plan: planned.elapsed(), ..Timings::default() },
    };
    drop(wanted);
    if opts.dry_run {
        return Ok((report, None));
    }
    let applied = Instant::now();
    crate::node::sysctl::apply(&opts.proc_sys, &report.sysctls)?;
    if report.link_missing {
        k.links.add_dummy(DUMMY_LINK)?;
    }
    let index = k.links.link_index(DUMMY_LINK)?.ok_or(SyncError::LinkMissing(DUMMY_LINK))?;
    apply(k, &mut report, index)?;
    write_grace(opts, &report.changes.terminating)?;
    report.timings.apply = applied.elapsed();
    let memory = Memory::after(planners, observed, &report.changes, index, scope(&cfg));
    Ok((report, Some(memory)))
}

/// Which unwanted virtual servers are ours: those on node addresses in the NodePort
/// range (beside every address svcproxy binds), never in `--ipvs-exclude-cidrs`.
pub(super) fn scope(cfg: &Config) -> Scope {
    let mut node_ips = BTreeSet::new();
    for family in &cfg.families {
        let ctx = Context::new(cfg, *family);
        node_ips.extend(ctx.node_addresses.iter().copied());
        node_ips.extend(ctx.node_port_ips.iter().copied());
    }
    Scope { node_ips, exclude: cfg.ipvs.exclude_cidrs.clone(), ..Scope::default() }
}

/// The timeouts configured, if any is set.
fn wanted_timeouts(cfg: &Config) -> Option<Timeouts> {
    let want = Timeouts { tcp: cfg.ipvs.tcp_timeout, tcp_fin: cfg.ipvs.tcpfin_timeout, udp: cfg.ipvs.udp_timeout };
    (want != Timeouts::default()).then_some(want)
}

fn timeouts_change(cfg: &Config, have: Option<Timeouts>) -> Option<Timeouts> {
    let (want, have) = (wanted_timeouts(cfg)?, have?);
    let differs = |w: u32, h: u32| w != 0 && w != h;
    let changed = differs(want.tcp, have.tcp) || differs(want.tcp_fin, have.tcp_fin) || differs(want.udp, have.udp);
    changed.then_some(want)
}

/// `iptables-save` of the tables IPVS mode writes, per family.
fn read_iptables(r: &mut dyn Restorer, families: &[IpFamily]) -> Result<Vec<(IpFamily, Dump)>, SyncError> {
    families.iter().map(|family| Ok((*family, crate::xtables::apply::read(r, *family, &TABLES)?))).collect()
}

fn iptables_deltas(plans: &[&FamilyState], live: &[(IpFamily, Dump)]) -> Result<Vec<(IpFamily, Delta)>, SyncError> {
    let empty = Dump::default();
    let mut out = Vec::new();
    for plan in plans {
        let desired = kernel_form(&plan.iptables);
        let have = live.iter().find(|(f, _)| *f == plan.family).map_or(&empty, |(_, d)| d);
        out.push((plan.family, delta::compute(&desired, have, plan.family.is_v6(), &rules::jumps(), crate::xtables::names::is_service_chain)));
    }
    Ok(out)
}

/// Applies a report (its sysctls and link already in place; `index` is kube-ipvs0's):
/// addresses, set additions, IPVS, timeouts, iptables, set deletions, address removals,
/// then the termination memory (written only when it changed).
pub(super) fn apply(k: &mut Kernel, report: &mut Report, index: u32) -> Result<(), SyncError> {
    let at = |ip: &IpAddr| LinkAddress { index, ip: *ip, prefix: if ip.is_ipv6() { 128 } else { 32 } };
    for ip in &report.changes.bind {
        k.links.add_address(at(ip))?;
    }
    if !report.ipsets.create.is_empty() || !report.ipsets.add.is_empty() {
        k.ipset.restore(&report.ipsets.add_text())?;
    }
    if !report.changes.ops.is_empty() {
        let batch = k.ipvs.apply(&report.changes.ops)?;
        if let Some(first) = batch.failed.first() {
            return Err(SyncError::Refused(batch.failed.len(), first.error.to_string()));
        }
    }
    if let Some(t) = report.timeouts {
        k.ipvs.set_timeouts(&t)?;
    }
    for (family, d) in &report.iptables {
        if !d.is_empty() {
            k.iptables.restore(*family, &d.restore_text()).map_err(|error| SyncError::IptablesRestore { family: *family, error })?;
        }
    }
    if !report.ipsets.del.is_empty() {
        k.ipset.restore(&report.ipsets.del_text())?;
    }
    for ip in &report.changes.unbind {
        k.links.del_address(at(ip))?;
    }
    Ok(())
}

/// Writes the termination memory (kept so a restart goes on draining).
pub(super) fn write_grace(opts: &Options, grace: &reconcile::Grace) -> Result<(), SyncError> {
    grace::write(&opts.grace_file, grace).map_err(|error| SyncError::GraceFile { path: opts.grace_file.clone(), error })
}

/// Where the termination memory lives by default.
pub const GRACE_FILE: &str = "/run/svcproxy/ipvs-terminating";

#[cfg(test)]
mod tests;

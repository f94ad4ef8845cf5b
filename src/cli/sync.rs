//! `svcproxy sync`: program this node's iptables from a cluster state, once; with
//! `--dry-run`, show what would change and exit 1 if anything would.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use super::render::load_with;
use super::{ConfigFlags, EXIT_CHANGES, EXIT_OK};
use crate::config::Mode;
use crate::netfilter::apply::{detect_backend, Backend};
use crate::iptables::proxier::Reconciled;
use crate::iptables::sync::SyncReport;
use crate::iptables::nfacct;
use crate::netfilter::delta;
use crate::net::IpFamily;
use crate::node::sysctl::Change;
use crate::runner::engine::{Detail, Engine, Pass, Proxier, SyncFailure};

pub const EXAMPLES: &str = "\
Examples:
  svcproxy sync --from fixtures/demo.yaml --dry-run          # what would change (exit 1 if anything)
  svcproxy sync --from fixtures/demo.yaml --dry-run --output restore
  svcproxy sync --from cluster.yaml --hostname-override node-1
  svcproxy sync --watch --from cluster-dir/ --hostname-override node-1   # follow file changes
Exit codes: 0 = in sync (or applied), 1 = changes pending (--dry-run), 2 = error.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Nft,
    Legacy,
}

impl BackendArg {
    pub fn resolve(self) -> Backend {
        match self {
            BackendArg::Auto => detect_backend(),
            BackendArg::Nft => Backend::Nft,
            BackendArg::Legacy => Backend::Legacy,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRunOutput {
    /// a unified diff per table and chain, live vs desired
    Diff,
    /// the exact iptables-restore input a sync would send
    Restore,
}

#[derive(Debug, Clone, Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub config: ConfigFlags,

    /// Change nothing; print what would change
    #[arg(long)]
    pub dry_run: bool,

    /// What --dry-run prints
    #[arg(long, value_enum, default_value = "diff")]
    pub output: DryRunOutput,

    /// iptables backend (auto: the one that already holds rules, as kube-proxy's image picks)
    #[arg(long, value_enum, default_value = "auto")]
    pub iptables_backend: BackendArg,

    /// Seconds to wait for the xtables lock (iptables-restore -w)
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub iptables_lock_wait: u32,

    #[command(flatten)]
    pub watch: super::watch::WatchFlags,
}

pub fn run(args: &SyncArgs) -> anyhow::Result<ExitCode> {
    if args.watch.watch {
        if args.dry_run {
            anyhow::bail!("--dry-run and --watch do not go together");
        }
        return super::watch::run(args);
    }
    let mut flags = args.config.settings();
    if flags.mode == Some(crate::settings::kinds::ProxyMode::Nftables) {
        // Refused before the nfacct counters below are created.
        refuse_unsynced_mode(Mode::Nftables)?;
    }
    if flags.nfacct.is_none() {
        // The nfacct matches load only where the counters exist: create them (or, for a
        // dry run, look), as kube-proxy does on a full sync.
        flags.nfacct = Some(if args.dry_run {
            nfacct::exists()
        } else {
            nfacct::ensure().unwrap_or_else(|e| {
                eprintln!("svcproxy: warning: cannot create kube-proxy's nfacct counters ({e}); the rules are written without them");
                false
            })
        });
    }
    let loaded = load_with(&args.config, flags)?;
    refuse_unsynced_mode(loaded.config.mode)?;
    let backend = args.iptables_backend.resolve();
    // The engine watch mode runs, built the same way; the one-shot sync is its first (full)
    // sync, or a dry run of it. The engine also sets (or lists) the sysctls the rules need.
    let iptables = crate::runner::node::Iptables { backend, lock_wait_secs: args.iptables_lock_wait };
    let mut engine = crate::runner::node::engine(loaded.config, loaded.trackers, iptables, true).context("IPVS sync failed")?;
    let pass = if args.dry_run { Pass::DryRun } else { Pass::Apply };
    let pending = match engine.sync_as(true, pass) {
        Ok(outcome) => match &outcome.detail {
            Detail::Iptables(reports) => print_iptables(args, backend, &outcome.sysctls, reports, &outcome.reconciled)?,
            Detail::Ipvs(report) => print_ipvs(args, report)?,
        },
        Err(SyncFailure::Iptables(mut failure)) => {
            // What the families before the failed one did is shown, then the error.
            let done = std::mem::take(&mut failure.failed.done);
            print_iptables(args, backend, &failure.sysctls, &done, &reconciled(&engine))?;
            let family = failure.failed.family;
            return Err(anyhow::Error::new(*failure).context(format!(
                "{family} sync with iptables-{} failed; the rules in place were left as they were",
                backend.name()
            )));
        }
        Err(e @ SyncFailure::Ipvs(_)) => return Err(anyhow::Error::new(e).context("IPVS sync failed")),
        Err(e) => return Err(e.into()),
    };
    Ok(ExitCode::from(if args.dry_run && pending { EXIT_CHANGES } else { EXIT_OK }))
}

/// Prints an IPVS-mode sync: for a dry run what would change, else a summary line. Returns
/// whether anything differed.
fn print_ipvs(args: &SyncArgs, report: &crate::ipvs::sync::Report) -> anyhow::Result<bool> {
    if args.dry_run {
        super::out(&report.diff_text())?;
        return Ok(!report.is_empty());
    }
    let t = report.timings;
    eprintln!(
        "svcproxy: ipvs: {} IPVS op(s), {} address(es) bound, {} unbound, {} ipset change(s), {} real server(s) draining (read {:.3} s, plan {:.3} s, apply {:.3} s)",
        report.changes.ops.len(),
        report.changes.bind.len(),
        report.changes.unbind.len(),
        report.ipsets.add.len() + report.ipsets.del.len() + report.ipsets.create.len(),
        report.terminating,
        t.read.as_secs_f64(),
        t.plan.as_secs_f64(),
        t.apply.as_secs_f64(),
    );
    Ok(!report.is_empty())
}

/// The stale-flow cleanups of the engine's last sync.
fn reconciled(engine: &Engine) -> Vec<Reconciled> {
    match &engine.proxier {
        Proxier::Iptables(p) => p.reconciled.clone(),
        Proxier::Ipvs(_) => Vec::new(),
    }
}

/// Prints an iptables-mode sync: for a dry run the sysctls and each family's delta (as
/// `--output` asks), else per family a cleanup warning if any and a summary line. Returns
/// whether anything differed.
fn print_iptables(args: &SyncArgs, backend: Backend, sysctls: &[Change], reports: &[(IpFamily, SyncReport)], reconciled: &[Reconciled]) -> anyhow::Result<bool> {
    if args.dry_run && args.output == DryRunOutput::Diff && !sysctls.is_empty() {
        let mut text = String::from("# sysctl\n");
        for c in sysctls {
            text.push_str(&format!("{}: {:?} -> {} ({})\n", c.path, c.current, c.wanted, c.why));
        }
        super::out(&text)?;
    }
    for (family, report) in reports {
        let family = *family;
        if args.dry_run {
            match args.output {
                DryRunOutput::Diff => super::out(&delta::dry_run_diff(&report.delta, &family.to_string()))?,
                DryRunOutput::Restore => super::out(&report.delta.restore_text())?,
            }
            continue;
        }
        if let Some(e) = reconciled.iter().find(|r| r.family == family).and_then(|r| r.error.as_ref()) {
            eprintln!("svcproxy: warning: stale UDP/SCTP conntrack entries not cleared: {e}");
        }
        let t = report.timings;
        eprintln!(
            "svcproxy: {family} ({}): {} chain(s) changed, {} restore line(s) sent (full ruleset: {} lines; render {:.3} s, read {:.3} s, compute {:.3} s, restore {:.3} s)",
            backend.name(),
            report.delta.changes.len(),
            report.delta.restore_lines(),
            report.full_lines,
            t.render.as_secs_f64(),
            t.read.as_secs_f64(),
            t.compute.as_secs_f64(),
            t.restore.as_secs_f64(),
        );
    }
    Ok(!sysctls.is_empty() || reports.iter().any(|(_, r)| !r.delta.is_empty()))
}

/// nftables mode is rendered (`svcproxy render --mode nftables`) but not synced yet: a sync
/// or watch in that mode is an error (exit 2), never a silent no-op.
pub fn refuse_unsynced_mode(mode: Mode) -> anyhow::Result<()> {
    if mode == Mode::Nftables {
        anyhow::bail!("nftables mode is not implemented yet for sync (svcproxy render --mode nftables prints its rules; use --mode iptables or ipvs)");
    }
    Ok(())
}

#[cfg(test)]
mod mode_tests {
    use super::*;

    #[test]
    fn nftables_mode_is_refused_by_sync_and_other_modes_pass() {
        let e = refuse_unsynced_mode(Mode::Nftables).unwrap_err().to_string();
        assert!(e.contains("nftables mode is not implemented yet"), "{e}");
        assert!(refuse_unsynced_mode(Mode::Iptables).is_ok());
        assert!(refuse_unsynced_mode(Mode::Ipvs).is_ok());
    }
}

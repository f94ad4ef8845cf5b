//! `svcproxy sync`: program this node's iptables, IPVS or nftables from a cluster state, once; with
//! `--dry-run`, show what would change and exit 1 if anything would.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use super::render::load_with;
use super::{ConfigFlags, EXIT_CHANGES, EXIT_OK};
use crate::xtables::apply::Backend;
use crate::conntrack::Reconciled;
use crate::xtables::delta;
use crate::node::sysctl::Change;
use crate::driver::Pass;
use crate::nftables::model::NftFamily;
use crate::runner::engine::{Detail, SyncFailure};

pub const EXAMPLES: &str = "\
Examples:
  svcproxy sync --from fixtures/demo.yaml --dry-run          # what would change (exit 1 if anything)
  svcproxy sync --from fixtures/demo.yaml --dry-run --output restore
  svcproxy sync --from cluster.yaml --hostname-override node-1
  svcproxy sync --mode nftables --from cluster.yaml --dry-run   # nftables mode: what differs from the live table
  svcproxy sync --watch --from cluster-dir/ --hostname-override node-1   # follow file changes
Exit codes: 0 = in sync (or applied), 1 = changes pending (--dry-run), 2 = error.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    Nft,
    Legacy,
}

impl BackendArg {
    /// The backend asked for; `None` (auto) lets [`crate::runner::node::backend`] pick.
    pub fn chosen(self) -> Option<Backend> {
        match self {
            BackendArg::Auto => None,
            BackendArg::Nft => Some(Backend::Nft),
            BackendArg::Legacy => Some(Backend::Legacy),
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

/// The one-shot sync takes the rule flags, and of the node flags those it acts on: the
/// socket-LB ones and the nftables writer (`--nft-netlink`).
fn one_shot_flags(args: &SyncArgs) -> crate::settings::Settings {
    let node = &args.watch.node.0;
    args.config.settings().over(crate::settings::Settings {
        socket_lb: node.socket_lb,
        socket_lb_cgroup: node.socket_lb_cgroup.clone(),
        socket_lb_pin_dir: node.socket_lb_pin_dir.clone(),
        nft_netlink: node.nft_netlink,
        ..Default::default()
    })
}

pub fn run(args: &SyncArgs) -> anyhow::Result<ExitCode> {
    if args.watch.watch {
        if args.dry_run {
            anyhow::bail!("--dry-run and --watch do not go together");
        }
        return super::watch::run(args);
    }
    let mut flags = one_shot_flags(args);
    let pass = if args.dry_run { Pass::DryRun } else { Pass::Apply };
    let file = match &args.config.config {
        Some(p) => crate::settings::file::read(p)?.settings,
        None => crate::settings::Settings::default(),
    };
    if let Err(e) = crate::runner::node::decide_nfacct(&mut flags, &file, pass) {
        eprintln!("svcproxy: warning: {e}; the rules are written without them");
    }
    let loaded = load_with(&args.config, flags)?;
    // The engine watch mode runs, built the same way; the one-shot sync is its first (full)
    // sync, or a dry run of it. The engine also sets (or lists) the sysctls the rules need.
    let iptables = crate::runner::node::Iptables::on_node(loaded.config.mode, args.iptables_backend.chosen(), args.iptables_lock_wait);
    let backend = iptables.backend;
    let socket_lb = loaded.config.socket_lb.clone();
    if socket_lb.is_some() {
        // Before the rules change: a binary without the programs cannot carry the flag out.
        crate::runner::socketlb::built().context(crate::settings::row::socket_lb.flag())?;
    }
    let mut engine = crate::runner::node::engine(loaded.config, loaded.trackers, iptables, true).context("IPVS sync failed")?;
    let pending = match engine.sync_as(true, pass) {
        Ok(outcome) => {
            let rules = match &outcome.detail {
                Detail::Iptables(reports) => print_iptables(args, backend, &outcome.sysctls, reports)?,
                Detail::Ipvs(report) => print_ipvs(args, report)?,
                Detail::Nftables(reports) => print_nftables(args, reports)?,
            };
            if engine.converting() {
                // A cold start served from the interim table: the sync ends in kube-proxy's.
                let started = std::time::Instant::now();
                let (mut chains, mut batches) = (0, 0);
                while engine.converting() {
                    chains += engine.convert_step(false).context("converting the interim nftables table to kube-proxy's (it serves meanwhile)")?;
                    batches += 1;
                }
                eprintln!("svcproxy: nftables: {chains} interim chain(s) converted to kube-proxy's rules in {batches} batch(es), {:.3} s", started.elapsed().as_secs_f64());
            }
            let mut pending = print_reconciled(args, &outcome.reconciled)? || rules;
            if outcome.reconciled.iter().any(|r| r.error.is_some()) {
                // The rules are in place, the flows are not: a failed kernel call, reported as one.
                anyhow::bail!("the rules were synced, but stale UDP conntrack flows were not deleted (above)");
            }
            if let Some(cfg) = &socket_lb {
                // After the rules: a socket the programs do not translate still finds them.
                let report = crate::runner::socketlb::sync(cfg, &engine.socket_lb_wanted(), pass)
                    .with_context(|| format!("{}: the rules were synced, the socket-LB maps were not", crate::settings::row::socket_lb.flag()))?;
                pending |= print_socket_lb(args, &report)?;
            }
            pending
        }
        Err(SyncFailure::Iptables(mut failure)) => {
            // What the families that synced did is shown, then the error.
            let done = std::mem::take(&mut failure.failed.done);
            print_iptables(args, backend, &failure.sysctls, &done)?;
            print_reconciled(args, &engine.reconciled())?;
            let family = failure.failed.failures().map(|f| f.family.to_string()).collect::<Vec<_>>().join(" and ");
            return Err(anyhow::Error::new(*failure).context(format!(
                "{family} sync with iptables-{} failed; the rules in place were left as they were",
                backend.name()
            )));
        }
        Err(SyncFailure::Nftables(mut failure)) => {
            let done: Vec<_> = std::mem::take(&mut failure.done).into_iter().map(|s| s.report).collect();
            print_nftables(args, &done)?;
            return Err(anyhow::Error::new(*failure).context("the rules in place were left as they were (the transaction is all-or-nothing)"));
        }
        Err(e @ SyncFailure::Ipvs(_)) => return Err(anyhow::Error::new(e).context("IPVS sync failed")),
        Err(e) => return Err(e.into()),
    };
    Ok(ExitCode::from(if args.dry_run && pending { EXIT_CHANGES } else { EXIT_OK }))
}

/// Prints a socket-LB sync: for a dry run the map changes (diff output), else a summary
/// line; failed map writes fail the command. Returns whether a dry run found changes.
fn print_socket_lb(args: &SyncArgs, report: &crate::runner::socketlb::Report) -> anyhow::Result<bool> {
    let pending = !report.diff.is_empty();
    let Some(applied) = &report.applied else {
        if args.output == DryRunOutput::Diff && pending {
            let mut text = format!("# socket-lb: {} Service entries would change, {} orphan slot(s) go\n", report.diff.changes.len(), report.diff.orphans.len());
            for c in &report.diff.changes {
                text.push_str(&c.line());
                text.push('\n');
            }
            super::out(&text)?;
        }
        return Ok(pending);
    };
    if let Some(a) = &report.attached {
        eprintln!("svcproxy: socket-lb: {} program(s) attached ({} replacing an earlier run's)", a.attached, a.replaced);
    }
    eprintln!("svcproxy: socket-lb: {} Service entries written or deleted, {} orphan slot(s) deleted", applied.services, report.diff.orphans.len());
    match &report.closed {
        Some(crate::runner::socketlb::Outcome::Closed { pairs, done }) => eprintln!(
            "svcproxy: socket-lb: {} socket(s) of {pairs} removed backend(s) closed in {} network namespace(s)",
            done.sockets, done.namespaces
        ),
        Some(crate::runner::socketlb::Outcome::Skipped { pairs, why }) => {
            eprintln!("svcproxy: warning: socket-lb: the sockets of {pairs} removed backend(s) are left open: {why}")
        }
        _ => {}
    }
    if !applied.failures.is_empty() {
        for f in &applied.failures {
            eprintln!("svcproxy: warning: socket-lb: {f}");
        }
        anyhow::bail!("{} socket-LB map write(s) failed (above); those Services keep their previous backends", applied.failures.len());
    }
    Ok(false)
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

/// The conntrack reconciler's runs, every mode's: for a dry run (diff output) the flows it
/// would delete, else a line per family that deleted any, and any failure as a warning.
/// Returns whether a dry run found flows to delete.
fn print_reconciled(args: &SyncArgs, runs: &[Reconciled]) -> anyhow::Result<bool> {
    let mut pending = false;
    for r in runs {
        if let Some(e) = &r.error {
            eprintln!("svcproxy: warning: {}: stale UDP conntrack flows not cleared: {e}", r.family.api_name());
            continue;
        }
        if args.dry_run {
            if args.output == DryRunOutput::Diff && !r.stale.is_empty() {
                let mut text = format!("# conntrack {}: {} stale UDP flow(s) would be deleted (of {} listed)\n", r.family.api_name(), r.stale.len(), r.listed);
                for f in &r.stale {
                    text.push_str(&format!("-{f}\n"));
                }
                super::out(&text)?;
                pending = true;
            }
        } else if let Some(n) = r.deleted.filter(|n| *n > 0) {
            eprintln!("svcproxy: {}: {n} stale UDP conntrack flow(s) deleted of {} listed ({:.3} s)", r.family.api_name(), r.listed, r.seconds);
        }
    }
    Ok(pending)
}

/// Prints an nftables-mode sync: for a dry run each family's difference from the live
/// table, else a summary line per family. Returns whether anything differed.
fn print_nftables(args: &SyncArgs, reports: &[crate::nftables::sync::Report]) -> anyhow::Result<bool> {
    let mut pending = false;
    for r in reports {
        let family = r.family.nft_word();
        if let Some(note) = &r.other_release {
            eprintln!("svcproxy: warning: {family}: {note}");
        }
        if args.dry_run {
            let Some(diff) = &r.diff else { continue };
            match args.output {
                DryRunOutput::Diff => super::out(&diff.text(&format!("{family} {}", crate::nftables::names::TABLE)))?,
                DryRunOutput::Restore => anyhow::bail!("--output restore is iptables-restore input; nftables mode prints the diff (or see svcproxy render --mode nftables)"),
            }
            pending |= !diff.is_empty();
            continue;
        }
        if let Some(e) = &r.stale_error {
            eprintln!("svcproxy: warning: {family}: stale chains not deleted (the next sync tries again): {e}");
        }
        let t = r.timings;
        eprintln!(
            "svcproxy: {family} (nftables): {} line(s) sent in {} batch(es); {} chain(s) kept as the kernel held them, {} refilled, {} element change(s); {} stale chain(s)/set(s) removed (render {:.3} s, read {:.3} s, apply {:.3} s)",
            r.lines,
            r.batches,
            r.kept,
            r.refilled,
            r.element_changes,
            r.stale.len(),
            t.render.as_secs_f64(),
            t.read.as_secs_f64(),
            t.apply.as_secs_f64(),
        );
        if let Some(i) = r.interim.as_ref().filter(|i| i.resumed) {
            eprintln!("svcproxy: {family} (nftables): a cold start's conversion resumed: {} chain(s) still in the interim's form serve meanwhile", i.chains.len());
        } else if let Some(i) = &r.interim {
            eprintln!("svcproxy: {family} (nftables): cold start: every Service served after {:.3} s of the apply by an interim table; {} chain(s) to convert to kube-proxy's rules", i.served.as_secs_f64(), i.chains.len());
        }
    }
    Ok(pending)
}

/// Prints an iptables-mode sync: for a dry run the sysctls and each family's delta (as
/// `--output` asks), else per family a cleanup warning if any and a summary line. Returns
/// whether anything differed.
fn print_iptables(args: &SyncArgs, backend: Backend, sysctls: &[Change], reports: &[crate::iptables::proxier::Synced]) -> anyhow::Result<bool> {
    if args.dry_run && args.output == DryRunOutput::Diff && !sysctls.is_empty() {
        let mut text = String::from("# sysctl\n");
        for c in sysctls {
            text.push_str(&format!("{}: {:?} -> {} ({})\n", c.path, c.current, c.wanted, c.why));
        }
        super::out(&text)?;
    }
    for synced in reports {
        let (family, report) = (synced.family, &synced.report);
        if args.dry_run {
            match args.output {
                DryRunOutput::Diff => super::out(&delta::dry_run_diff(&report.delta, &family.to_string()))?,
                DryRunOutput::Restore => super::out(&report.delta.restore_text())?,
            }
            continue;
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
    Ok(!sysctls.is_empty() || reports.iter().any(|s| !s.report.delta.is_empty()))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn sync_args(extra: &[&str]) -> SyncArgs {
        let cli = crate::cli::Cli::try_parse_from(["svcproxy", "sync", "--from", "x.yaml"].iter().chain(extra)).unwrap();
        match cli.command {
            crate::cli::Command::Sync(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_one_shot_sync_takes_the_nftables_writer_flag() {
        assert_eq!(one_shot_flags(&sync_args(&["--nft-netlink=false"])).nft_netlink, Some(false));
        assert_eq!(one_shot_flags(&sync_args(&["--nft-netlink", "false", "--proxy-mode", "nftables"])).nft_netlink, Some(false));
        assert_eq!(one_shot_flags(&sync_args(&[])).nft_netlink, None, "not given: the default");
        assert_eq!(one_shot_flags(&sync_args(&["--socket-lb"])).socket_lb, Some(true));
    }
}

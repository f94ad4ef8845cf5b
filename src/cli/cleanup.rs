//! `svcproxy cleanup`: remove everything kube-proxy (and svcproxy) own, in both families
//! and both iptables backends, and nftables mode's `kube-proxy` tables, like
//! `kube-proxy --cleanup` ([`crate::runner::cleanup`] does it; this prints what it did).

use std::process::ExitCode;

use clap::Args;

use super::{EXIT_CHANGES, EXIT_OK};

#[derive(Debug, Clone, Args)]
pub struct CleanupArgs {
    /// Change nothing; print what would be removed (exit 1 if anything)
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: &CleanupArgs) -> anyhow::Result<ExitCode> {
    let mut found = false;
    let mut errors = Vec::new();
    for step in crate::runner::cleanup::run(args.dry_run) {
        match step.result {
            Ok(removed) => {
                for item in &removed {
                    let verb = if args.dry_run { "would remove" } else { "removed" };
                    super::out(&format!("{}: {verb} {item}\n", step.what))?;
                }
                found |= !removed.is_empty();
            }
            Err(e) => errors.push(format!("{}: {:#}", step.what, anyhow::Error::new(e))),
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("cleanup failed:\n{}", errors.join("\n"));
    }
    Ok(ExitCode::from(if args.dry_run && found { EXIT_CHANGES } else { EXIT_OK }))
}

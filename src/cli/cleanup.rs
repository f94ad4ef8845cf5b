//! `svcproxy cleanup`: remove everything kube-proxy (and svcproxy) own, in both families
//! and both iptables backends, like `kube-proxy --cleanup`.

use std::process::ExitCode;

use clap::Args;

use super::{EXIT_CHANGES, EXIT_OK};
use crate::iptables::apply::{Backend, ExecRestorer, Restorer};
use crate::iptables::{cleanup, restore};
use crate::net::IpFamily;

#[derive(Debug, Clone, Args)]
pub struct CleanupArgs {
    /// Change nothing; print what would be removed (exit 1 if anything)
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: &CleanupArgs) -> anyhow::Result<ExitCode> {
    let mut found = false;
    let mut errors = Vec::new();
    for backend in [Backend::Nft, Backend::Legacy] {
        for family in [IpFamily::V4, IpFamily::V6] {
            let mut r = ExecRestorer::new(backend);
            match clean(&mut r, family, args.dry_run) {
                Ok(removed) => {
                    for item in &removed {
                        let verb = if args.dry_run { "would remove" } else { "removed" };
                        super::out(&format!("{} {family}: {verb} {item}\n", backend.name()))?;
                    }
                    found |= !removed.is_empty();
                }
                // A backend or family this host does not have is not an error.
                Err(e) if matches!(e.downcast_ref::<crate::iptables::apply::RestoreError>(), Some(crate::iptables::apply::RestoreError::Spawn { .. })) => {}
                Err(e) => errors.push(format!("{} {family}: {e:#}", backend.name())),
            }
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("cleanup failed:\n{}", errors.join("\n"));
    }
    Ok(ExitCode::from(if args.dry_run && found { EXIT_CHANGES } else { EXIT_OK }))
}

fn clean(r: &mut dyn Restorer, family: IpFamily, dry_run: bool) -> anyhow::Result<Vec<String>> {
    let live = restore::parse(&r.save_all(family)?)?;
    let (text, removed) = cleanup::plan(&live);
    if !dry_run && !text.is_empty() {
        r.restore(family, &text)?;
    }
    Ok(removed)
}

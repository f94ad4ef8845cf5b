//! `svcproxy cleanup`: remove everything kube-proxy (and svcproxy) own, in both families
//! and both iptables backends, and nftables mode's `kube-proxy` tables, like
//! `kube-proxy --cleanup`.

use std::process::ExitCode;

use clap::Args;

use super::{EXIT_CHANGES, EXIT_OK};
use crate::netfilter::apply::{Backend, ExecRestorer, Restorer};
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
    // IPVS mode first: its virtual servers, then its chains (before the shared chains go).
    report(&mut found, &mut errors, args.dry_run, ipvs_virtual_servers(args.dry_run), "ipvs")?;
    for backend in [Backend::Nft, Backend::Legacy] {
        for family in [IpFamily::V4, IpFamily::V6] {
            let mut r = ExecRestorer::new(backend);
            match clean_ipvs_chains(&mut r, family, args.dry_run) {
                Err(e) if is_spawn(&e) => {}
                other => report(&mut found, &mut errors, args.dry_run, other, &format!("{} {family}", backend.name()))?,
            }
        }
    }
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
                Err(e) if matches!(e.downcast_ref::<crate::netfilter::apply::RestoreError>(), Some(crate::netfilter::apply::RestoreError::Spawn { .. })) => {}
                Err(e) => errors.push(format!("{} {family}: {e:#}", backend.name())),
            }
        }
    }
    // Then what only IPVS mode has: the sets (no rule names them any more) and kube-ipvs0.
    let mut sets = crate::ipvs::ipset::ExecIpset;
    match crate::ipvs::cleanup::ipsets(&mut sets, args.dry_run) {
        Err(crate::ipvs::ipset::IpsetError::Spawn(_)) => {}
        other => report(&mut found, &mut errors, args.dry_run, other.map_err(Into::into), "ipset")?,
    }
    report(&mut found, &mut errors, args.dry_run, ipvs_link(args.dry_run), "ipvs")?;
    // nftables mode's tables; nothing to do where there is no nft.
    match crate::nftables::cleanup::tables(&mut crate::nftables::apply::ExecNft::default(), args.dry_run) {
        Err(crate::nftables::apply::NftError::Spawn { .. }) => {}
        other => report(&mut found, &mut errors, args.dry_run, other.map_err(Into::into), "nftables")?,
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

fn is_spawn(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<crate::netfilter::apply::RestoreError>(), Some(crate::netfilter::apply::RestoreError::Spawn { .. }))
}

/// IPVS mode's chains in one backend and family (kube-proxy's IPVS cleanup).
fn clean_ipvs_chains(r: &mut dyn Restorer, family: IpFamily, dry_run: bool) -> anyhow::Result<Vec<String>> {
    let live = restore::parse(&r.save_all(family)?)?;
    let (text, removed) = crate::ipvs::cleanup::iptables_plan(&live);
    if !dry_run && !text.is_empty() {
        r.restore(family, &text)?;
    }
    Ok(removed)
}

/// svcproxy's virtual servers; nothing when this kernel has no IPVS.
fn ipvs_virtual_servers(dry_run: bool) -> anyhow::Result<Vec<String>> {
    use crate::ipvs::netlink::{Error, NetlinkIpvs};
    let mut ipvs = match NetlinkIpvs::connect() {
        Ok(c) => c,
        Err(Error::FamilyNotFound) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut links = crate::ipvs::link::RtNetlink::connect()?;
    Ok(crate::ipvs::cleanup::virtual_servers(&mut ipvs, &mut links, dry_run)?)
}

fn ipvs_link(dry_run: bool) -> anyhow::Result<Vec<String>> {
    let mut links = crate::ipvs::link::RtNetlink::connect()?;
    Ok(crate::ipvs::cleanup::link(&mut links, dry_run)?)
}

/// Prints what one cleanup step removed (or would), or keeps its error.
fn report(found: &mut bool, errors: &mut Vec<String>, dry_run: bool, r: anyhow::Result<Vec<String>>, what: &str) -> anyhow::Result<()> {
    match r {
        Ok(removed) => {
            for item in &removed {
                let verb = if dry_run { "would remove" } else { "removed" };
                super::out(&format!("{what}: {verb} {item}\n"))?;
            }
            *found |= !removed.is_empty();
        }
        Err(e) => errors.push(format!("{what}: {e:#}")),
    }
    Ok(())
}

//! `svcproxy cleanup` (`kube-proxy --cleanup`) on this node: everything kube-proxy and
//! svcproxy own, in every mode, both iptables backends and both families. IPVS mode first
//! (its virtual servers, then its chains, before the chains both modes share go), then
//! iptables mode's chains, then what only IPVS mode has (the sets no rule names any more,
//! and kube-ipvs0), then nftables mode's `kube-proxy` tables, then the socket-LB programs'
//! pins. A backend, family, IPVS or nft this host does not have is skipped.

use crate::ipvs::cleanup::CleanupError as IpvsCleanupError;
use crate::ipvs::ipset::IpsetError;
use crate::ipvs::link::LinkError;
use crate::net::IpFamily;
use crate::xtables::apply::{Backend, ExecRestorer, RestoreError, Restorer};
use crate::xtables::dump::{parse, Dump, ParseError};

/// One step's outcome: what it removed (or, for a dry run, would remove), or why it failed.
#[derive(Debug)]
pub struct Step {
    /// `ipvs`, `nft IPv4`, `legacy IPv6`, `ipset`, …
    pub what: String,
    pub result: Result<Vec<String>, CleanupError>,
}

#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Ipvs(#[from] IpvsCleanupError),
    #[error(transparent)]
    Netlink(#[from] crate::ipvs::netlink::Error),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Ipset(#[from] IpsetError),
    #[error(transparent)]
    Nft(#[from] crate::nftables::apply::NftError),
    #[error(transparent)]
    SocketLb(#[from] crate::netfilter::bpf::BpfError),
}

/// Every step, in order (`dry_run`: change nothing, list what would go).
pub fn run(dry_run: bool) -> Vec<Step> {
    let mut steps = vec![Step { what: "ipvs".into(), result: ipvs_virtual_servers(dry_run) }];
    let tables = |plan: fn(&Dump) -> (String, Vec<String>), steps: &mut Vec<Step>| {
        for backend in [Backend::Nft, Backend::Legacy] {
            for family in [IpFamily::V4, IpFamily::V6] {
                match clean(&mut ExecRestorer::new(backend), family, dry_run, plan) {
                    // A backend or family this host does not have is not an error.
                    Err(CleanupError::Restore(RestoreError::Spawn { .. })) => {}
                    result => steps.push(Step { what: format!("{} {family}", backend.name()), result }),
                }
            }
        }
    };
    tables(crate::ipvs::cleanup::iptables_plan, &mut steps);
    tables(crate::iptables::cleanup::plan, &mut steps);
    match crate::ipvs::cleanup::ipsets(&mut crate::ipvs::ipset::ExecIpset, dry_run) {
        Err(IpsetError::Spawn(_)) => {}
        result => steps.push(Step { what: "ipset".into(), result: result.map_err(Into::into) }),
    }
    steps.push(Step { what: "ipvs".into(), result: ipvs_link(dry_run) });
    // nftables mode's tables; nothing to do where there is no nft.
    match crate::nftables::cleanup::tables(&mut crate::nftables::apply::ExecNft::default(), dry_run) {
        Err(crate::nftables::apply::NftError::Spawn { .. }) => {}
        result => steps.push(Step { what: "nftables".into(), result: result.map_err(Into::into) }),
    }
    steps.push(Step { what: "socket LB".into(), result: socket_lb(dry_run) });
    steps
}

/// `--socket-lb`'s programs and maps, at the default pin directory (cleanup takes no
/// settings, as kube-proxy's `--cleanup` reads none): their pins removed, which detaches
/// the programs. Nothing when the directory is not there.
fn socket_lb(dry_run: bool) -> Result<Vec<String>, CleanupError> {
    let pins = crate::settings::defaults::defaulted(crate::settings::Settings::default()).socket_lb_pin_dir.unwrap_or_default();
    let pins = std::path::Path::new(&pins);
    if pins.as_os_str().is_empty() || !pins.exists() {
        return Ok(Vec::new());
    }
    if dry_run {
        return Ok(crate::netfilter::bpf::kernel::pinned(pins));
    }
    Ok(crate::netfilter::bpf::kernel::cleanup(pins)?.removed)
}

/// One backend and family: what `plan` removes from the tables the kernel holds.
fn clean(r: &mut dyn Restorer, family: IpFamily, dry_run: bool, plan: fn(&Dump) -> (String, Vec<String>)) -> Result<Vec<String>, CleanupError> {
    let live = parse(&r.save_all(family)?)?;
    let (text, removed) = plan(&live);
    if !dry_run && !text.is_empty() {
        r.restore(family, &text)?;
    }
    Ok(removed)
}

/// svcproxy's virtual servers; nothing when this kernel has no IPVS.
fn ipvs_virtual_servers(dry_run: bool) -> Result<Vec<String>, CleanupError> {
    use crate::ipvs::netlink::{Error, NetlinkIpvs};
    let mut ipvs = match NetlinkIpvs::connect() {
        Ok(c) => c,
        Err(Error::FamilyNotFound) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut links = crate::ipvs::link::RtNetlink::connect()?;
    Ok(crate::ipvs::cleanup::virtual_servers(&mut ipvs, &mut links, dry_run)?)
}

fn ipvs_link(dry_run: bool) -> Result<Vec<String>, CleanupError> {
    let mut links = crate::ipvs::link::RtNetlink::connect()?;
    Ok(crate::ipvs::cleanup::link(&mut links, dry_run)?)
}

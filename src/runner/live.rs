//! What this node's kernel holds, read for `svcproxy trace --live`: each mode's rules
//! through its own reader (`iptables-save`; `ipset save` and the IPVS table over generic
//! netlink; `nft list table`), as the values the tracer walks, and the conntrack flows a
//! packet may follow instead (ctnetlink). cli/ calls these instead of opening kernel
//! clients itself.

use crate::ipvs::ipset::{ExecIpset, IpsetError, IpsetRunner};
use crate::ipvs::netlink::Error as IpvsError;
use crate::net::IpFamily;
use crate::xtables::apply::{ExecRestorer, ReadError};
use crate::xtables::delta::TABLES;
use crate::xtables::Dump;
use crate::nftables::apply::{ExecNft, NftError, NftRead as _};
use crate::nftables::model::{NftFamily, Table as NftTable};
use crate::trace::ipvs::{Table, Virtual};
use crate::trace::Sets;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Iptables(#[from] ReadError),
    #[error(transparent)]
    Ipset(#[from] IpsetError),
    #[error("--live --mode ipvs reads the IPVS table over netlink")]
    IpvsConnect(#[source] IpvsError),
    #[error("cannot read the IPVS virtual servers")]
    IpvsRead(#[source] IpvsError),
    #[error("--live reads table {head} with nft")]
    NftList { head: String, source: NftError },
    #[error("this node has no table {head} (svcproxy sync --mode nftables makes it)")]
    NoTable { head: String },
    #[error("cannot read the kernel's table {head}")]
    NftRead { head: String, source: crate::nftables::live::LiveError },
    #[error("--live reads the conntrack flows over ctnetlink")]
    Conntrack(#[source] crate::netfilter::ctnetlink::CtError),
    #[error("--live --socket-lb reads the pinned socket-LB maps")]
    SocketLb(#[source] crate::netfilter::bpf::BpfError),
}

/// The socket-LB maps under `pins` as the programs read them: every complete Service
/// entry (a Service whose slots are not all there is left out), the affinity map's
/// entries, and the programs' clock now (`CLOCK_MONOTONIC_COARSE`, nanoseconds).
pub fn socket_lb(pins: &std::path::Path) -> Result<crate::runner::socketlb::Pinned, LiveError> {
    use crate::netfilter::bpf::kernel::Maps;
    use crate::socketlb::plan::Entry;
    let maps = Maps::open(pins).map_err(LiveError::SocketLb)?;
    let held = crate::socketlb::apply::read_held(&maps).map_err(LiveError::SocketLb)?;
    let wanted = held.services.into_iter().filter_map(|(k, (v, b))| Some((k, Entry { backends: b?, affinity: v.affinity }))).collect();
    let affinity = maps.affinity().map_err(LiveError::SocketLb)?;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec this frame owns.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let now_ns = (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64);
    Ok(crate::runner::socketlb::Pinned { wanted, affinity, now_ns })
}

/// The conntrack flows of `packet`'s protocol from its source to its destination (the
/// kernel filters by family and protocol; only those are kept).
pub fn flows(packet: &crate::trace::Packet) -> Result<Vec<crate::netfilter::ctnetlink::Flow>, LiveError> {
    use crate::netfilter::ctnetlink::{wire, Ctnetlink};
    let af = if packet.dst.is_ipv6() { wire::AF_INET6 } else { wire::AF_INET };
    let mut out = Vec::new();
    let keep = |f: &crate::netfilter::ctnetlink::Flow| f.orig.src == packet.src && f.orig.dst == packet.dst && f.orig.dport == packet.dport;
    Ctnetlink::open()
        .and_then(|mut c| c.dump(af, Some(packet.protocol.number() as u8), |f| if keep(f) { out.push(*f) }))
        .map_err(LiveError::Conntrack)?;
    Ok(out)
}

/// The family's iptables rules (`filter` and `nat`) with `backend`, or
/// [`super::node::backend`]'s pick.
pub fn iptables(backend: Option<crate::xtables::apply::Backend>, family: IpFamily) -> Result<Dump, LiveError> {
    Ok(crate::xtables::apply::read(&mut ExecRestorer::new(super::node::backend(backend)), family, &TABLES)?)
}

/// IPVS mode's state: its iptables rules, the ipsets and the IPVS virtual servers.
pub fn ipvs(backend: Option<crate::xtables::apply::Backend>, family: IpFamily) -> Result<(Dump, Sets, Table), LiveError> {
    let dump = iptables(backend, family)?;
    let sets = Sets::parse_save(&ExecIpset.save()?);
    let mut ipvs = crate::ipvs::netlink::NetlinkIpvs::connect().map_err(LiveError::IpvsConnect)?;
    let mut table = Table::default();
    for (vs, reals) in crate::ipvs::observe::services(&mut ipvs).map_err(LiveError::IpvsRead)? {
        table.insert(Virtual { vs: vs.vs, reals: reals.into_iter().map(|r| r.rs).collect(), service: None });
    }
    Ok((dump, sets, table))
}

/// The family's `kube-proxy` table (`nft list table`).
pub fn nftables(family: IpFamily) -> Result<NftTable, LiveError> {
    let head = format!("{} {}", family.nft_word(), crate::nftables::names::TABLE);
    let text = ExecNft::default().list(family).map_err(|source| LiveError::NftList { head: head.clone(), source })?;
    let text = text.ok_or_else(|| LiveError::NoTable { head: head.clone() })?;
    crate::nftables::live::read(&text, family).map_err(|source| LiveError::NftRead { head, source })
}

//! How IPVS-mode watch mode notices, cheaply, that the kernel lost what its partial syncs
//! trust (the memory of the last full sync): kube-proxy's iptables canaries
//! ([`crate::xtables::canary`]; kube-proxy's IPVS proxier monitors them too), kube-ipvs0
//! still being the link the memory names (deleting it takes every bound address), and
//! one virtual server svcproxy holds still answering with its real servers (`ipvsadm -C`
//! deletes them all). Each is one query; any loss means the next sync is full.

use super::link::Links;
use super::memory::Memory;
use super::netlink::Ipvs;
use super::plan::DUMMY_LINK;
use crate::xtables::canary;
use crate::net::IpFamily;
use crate::xtables::apply::{RestoreError, Restorer};

/// What was found gone, as (family, where): an iptables table, `kube-ipvs0` or `ipvs`.
pub fn lost(memory: &Memory, ipvs: &mut dyn Ipvs, links: &mut dyn Links, iptables: &mut dyn Restorer) -> Result<Option<(IpFamily, &'static str)>, RestoreError> {
    let families: Vec<IpFamily> = memory.planners.iter().map(|p| p.ctx().family()).collect();
    for family in &families {
        if let Some(table) = canary::missing(iptables, *family)? {
            return Ok(Some((*family, table)));
        }
    }
    let first = families.first().copied().unwrap_or(IpFamily::V4);
    if links.link_index(DUMMY_LINK).ok().flatten() != Some(memory.link_index) {
        return Ok(Some((first, DUMMY_LINK)));
    }
    // The held virtual server with real servers that sorts first (any one would do).
    let probe = memory.services.iter().filter(|(_, h)| !h.reals.is_empty()).min_by_key(|(k, _)| **k);
    if let Some((key, held)) = probe {
        let answered = ipvs.dests(&held.vs).map(|d| !d.is_empty()).unwrap_or(false);
        if !answered {
            return Ok(Some((IpFamily::of(&key.addr), "ipvs")));
        }
    }
    Ok(None)
}

/// Creates the iptables canaries of `families` that are gone.
pub fn ensure(iptables: &mut dyn Restorer, families: &[IpFamily]) -> Result<(), RestoreError> {
    for family in families {
        let created = canary::ensure(iptables, *family)?;
        if !created.is_empty() {
            tracing::debug!(?family, tables = ?created, "canaries created");
        }
    }
    Ok(())
}

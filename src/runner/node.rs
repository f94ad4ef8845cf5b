//! The engine on this node's kernel, built once for both a one-shot `svcproxy sync` and
//! watch mode: `iptables-save`/`iptables-restore` of one backend, the `conntrack` tool, IPVS
//! over generic netlink, the `nft` binary, and the mode's sysctls re-checked under `/proc/sys`. cli/ calls
//! [`engine`] instead of opening kernel clients itself.

use super::engine::Engine;
use crate::config::{Config, Mode};
use crate::netfilter::conntrack::ExecConntrack;
use crate::netfilter::apply::{Backend, ExecRestorer};
use crate::track::Trackers;

/// How this node's iptables is run.
#[derive(Debug, Clone, Copy)]
pub struct Iptables {
    pub backend: Backend,
    /// Seconds to wait for the xtables lock (`-w`).
    pub lock_wait_secs: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum OnNodeError {
    /// IPVS (generic netlink) or the node's links cannot be reached.
    #[error(transparent)]
    Ipvs(#[from] crate::ipvs::sync::SyncError),
}

/// The engine of `config.mode` over this node's kernel. `one_shot`: one sync and no loop,
/// so no canaries are left behind (nothing would check them).
pub fn engine(config: Config, trackers: Trackers, iptables: Iptables, one_shot: bool) -> Result<Engine, OnNodeError> {
    let restorer = Box::new(ExecRestorer { backend: iptables.backend, lock_wait_secs: iptables.lock_wait_secs });
    let mut engine = match config.mode {
        Mode::Iptables => Engine::iptables(config, trackers, restorer, Box::new(ExecConntrack)),
        Mode::Ipvs => Engine::ipvs(config, trackers, crate::ipvs::proxier::Proxier::on_node(restorer)?),
        Mode::Nftables => Engine::nftables(config, trackers, Box::new(crate::nftables::apply::ExecNft::default()), Box::new(ExecConntrack)),
    };
    if one_shot {
        engine = engine.without_canaries();
    }
    engine.sysctl_root = Some(std::path::PathBuf::from("/proc/sys"));
    Ok(engine)
}

//! The engine on this node's kernel, built once for both a one-shot `svcproxy sync` and
//! watch mode: `iptables-save`/`iptables-restore` of one backend, the `conntrack` tool, IPVS
//! over generic netlink, the `nft` binary, and the mode's sysctls re-checked under `/proc/sys`. cli/ calls
//! [`engine`] instead of opening kernel clients itself, and asks here which iptables backend
//! ([`Iptables::on_node`]) and whether kube-proxy's nfacct counters ([`nfacct`]) the node has.

use super::engine::Engine;
use crate::config::{Config, Mode};
use crate::conntrack::NetlinkFlows;
use crate::driver::Pass;
use crate::xtables::apply::{detect_backend, Backend, ExecRestorer};
use crate::settings::kinds::ProxyMode;
use crate::track::Trackers;

/// How this node's iptables is run.
#[derive(Debug, Clone, Copy)]
pub struct Iptables {
    pub backend: Backend,
    /// Seconds to wait for the xtables lock (`-w`).
    pub lock_wait_secs: u32,
}

impl Iptables {
    /// How iptables is run on this node in `mode`: the `chosen` backend
    /// (`--iptables-backend nft|legacy`), or [`backend`]'s pick. nftables mode writes no
    /// iptables: nothing is detected there (detection runs both backends' save).
    pub fn on_node(mode: Mode, chosen: Option<Backend>, lock_wait_secs: u32) -> Self {
        let backend = if mode == Mode::Nftables { Backend::Nft } else { backend(chosen) };
        Iptables { backend, lock_wait_secs }
    }
}

/// The iptables backend: `chosen`, or else the one that already holds rules (as
/// kube-proxy's image picks).
pub fn backend(chosen: Option<Backend>) -> Backend {
    chosen.unwrap_or_else(detect_backend)
}

/// kube-proxy's nfacct counters could not be created (or, for a dry run, looked at).
#[derive(Debug, thiserror::Error)]
pub enum NfacctError {
    #[error("cannot create kube-proxy's nfacct counters ({0})")]
    Create(std::io::Error),
    #[error("cannot read kube-proxy's nfacct counters ({0})")]
    Read(std::io::Error),
}

impl NfacctError {
    /// What netlink said.
    pub fn io(&self) -> &std::io::Error {
        match self {
            NfacctError::Create(e) | NfacctError::Read(e) => e,
        }
    }
}

/// Whether the rules match kube-proxy's nfacct counters, for a node whose settings do not
/// say (in `mode`, if the settings name one). The matches load only where the counters
/// exist: a sync creates them (a dry run only looks), as kube-proxy does on a full sync;
/// nftables mode has no such matches. On an error there are no counters: the caller says
/// so, and the rules are written without them.
pub fn nfacct(mode: Option<ProxyMode>, pass: Pass) -> Result<bool, NfacctError> {
    if mode == Some(ProxyMode::Nftables) {
        return Ok(false);
    }
    match pass {
        Pass::DryRun => crate::netfilter::nfacct::exists().map_err(NfacctError::Read),
        Pass::Apply => crate::netfilter::nfacct::ensure().map_err(NfacctError::Create),
    }
}

/// Decides `nfacct` when the flags do not say: whether the rules match kube-proxy's nfacct
/// counters ([`nfacct`]) in the mode the node runs, the flags' mode over the config file's
/// (`file`). One-shot and watch mode both decide it here. On an error there are no
/// counters (`nfacct` is set to false) and the error is returned for the caller to report.
pub fn decide_nfacct(flags: &mut crate::settings::Settings, file: &crate::settings::Settings, pass: Pass) -> Result<(), NfacctError> {
    if flags.nfacct.is_some() {
        return Ok(());
    }
    let found = nfacct(flags.mode.or(file.mode), pass);
    flags.nfacct = Some(*found.as_ref().unwrap_or(&false));
    found.map(|_| ())
}

/// Sets this process's `oom_score_adj` (kube-proxy's `--oom-score-adj`) through `/proc`.
/// As kube-proxy, the caller logs a failure and goes on.
pub fn oom_score_adj(adj: i32) -> Result<(), crate::node::NodeError> {
    crate::node::apply_oom_score_adj(std::path::Path::new("/proc"), adj)
}

/// The metrics `mode` reports, with this node's nfacct counters in iptables mode and its
/// `kube-proxy` tables' named counters (localhost NodePort rejections) in nftables mode.
pub fn register_metrics(metrics: &mut crate::serve::Metrics, mode: Mode, socket_lb: Option<&crate::config::SocketLbConfig>) {
    metrics.register_mode(mode);
    if let Some(cfg) = socket_lb {
        metrics.register_socket_lb(crate::serve::socketlb::SocketLbCollector::kernel(cfg.pins.clone()));
    }
    if mode == Mode::Iptables {
        metrics.register_nfacct(crate::serve::nfacct::NfacctCollector::kernel());
    }
    if mode == Mode::Nftables {
        metrics.register_localhost_rejected(crate::serve::localhost_nodeports::RejectedCollector::kernel());
    }
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
        Mode::Iptables => Engine::iptables(config, trackers, restorer, Box::new(NetlinkFlows::default())),
        Mode::Ipvs => Engine::ipvs(config, trackers, crate::ipvs::proxier::Proxier::on_node(restorer)?, Box::new(NetlinkFlows::default())),
        Mode::Nftables => {
            let nft: Box<dyn crate::nftables::apply::Nft> =
                if config.nft_netlink { Box::new(crate::nftables::netlink::NetlinkNft::on_node()) } else { Box::new(crate::nftables::apply::ExecNft::default()) };
            Engine::nftables(config, trackers, nft, Box::new(NetlinkFlows::default()))
        }
    };
    if one_shot {
        engine = engine.without_canaries();
    } else {
        // Watch mode syncs the socket-LB maps after each pass (the one-shot sync does
        // it once, from `cli::sync`).
        engine.socket_lb = engine.config.socket_lb.clone().map(crate::runner::socketlb::Live::new);
    }
    engine.sysctl_root = Some(std::path::PathBuf::from("/proc/sys"));
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    #[test]
    fn nfacct_is_decided_in_the_mode_the_flags_or_else_the_file_name() {
        // nftables mode has no nfacct matches: decided without touching the kernel.
        let file = Settings { mode: Some(ProxyMode::Nftables), ..Settings::default() };
        let mut flags = Settings::default();
        decide_nfacct(&mut flags, &file, Pass::Apply).unwrap();
        assert_eq!(flags.nfacct, Some(false), "the config file's mode counts when the flags name none");
        let mut flags = Settings { nfacct: Some(true), ..Settings::default() };
        decide_nfacct(&mut flags, &file, Pass::Apply).unwrap();
        assert_eq!(flags.nfacct, Some(true), "what the flags say stands");
    }
}

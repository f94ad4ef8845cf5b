//! The sysctls kube-proxy sets, under kube-proxy's conditions, through one mechanism: what
//! a mode wants (pure), what differs on this node, and the writes. Paths are relative to
//! `/proc/sys` (tests point the root elsewhere, or run in a network namespace they made).

use std::path::Path;

use crate::config::{Config, Mode};
use crate::net::IpFamily;
use crate::settings::row;

/// One sysctl to hold a value, and why (for the log and the dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    pub path: &'static str,
    pub value: String,
    pub why: &'static str,
}

impl Sysctl {
    pub fn new(path: &'static str, value: impl ToString, why: &'static str) -> Self {
        Sysctl { path, value: value.to_string(), why }
    }
}

/// A sysctl whose value differs from the wanted one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    /// The value read (empty if it could not be read).
    pub current: String,
    pub wanted: String,
    pub why: &'static str,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set sysctl {path} to {value}: {error}")]
pub struct SysctlError {
    pub path: String,
    pub value: String,
    pub error: std::io::Error,
}

/// The sysctls of `wanted` whose value on the node (under `root`) differs.
pub fn changes(root: &Path, wanted: &[Sysctl]) -> Vec<Change> {
    wanted
        .iter()
        .filter_map(|s| {
            let current = std::fs::read_to_string(root.join(s.path)).unwrap_or_default().trim().to_string();
            (current != s.value).then(|| Change { path: s.path.to_string(), current, wanted: s.value.clone(), why: s.why })
        })
        .collect()
}

/// Writes the changes (kube-proxy's `EnsureSysctl`), logging each.
pub fn apply(root: &Path, changes: &[Change]) -> Result<(), SysctlError> {
    for c in changes {
        std::fs::write(root.join(&c.path), &c.wanted)
            .map_err(|error| SysctlError { path: c.path.clone(), value: c.wanted.clone(), error })?;
        tracing::info!(sysctl = %c.path, from = %c.current, to = %c.wanted, why = c.why, "set sysctl");
    }
    Ok(())
}

/// Reads, compares and writes: the sysctls that were changed.
pub fn ensure(root: &Path, wanted: &[Sysctl]) -> Result<Vec<Change>, SysctlError> {
    let c = changes(root, wanted);
    apply(root, &c)?;
    Ok(c)
}

/// The running kernel's (major, minor), from `kernel/osrelease` under `root`.
pub fn kernel_version(root: &Path) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(root.join("kernel/osrelease")).ok()?;
    let mut parts = text.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// What the iptables proxier sets: `route_localnet=1` when NodePorts answer on 127.0.0.1
/// (IPv4 with `localhostNodePorts` and loopback in `nodePortAddresses`).
pub fn iptables(cfg: &Config) -> Vec<Sysctl> {
    let mut v = Vec::new();
    if cfg.families.contains(&IpFamily::V4) && cfg.localhost_node_ports(IpFamily::V4) {
        v.push(Sysctl::new("net/ipv4/conf/all/route_localnet", 1, "NodePorts on 127.0.0.1 (iptables.localhostNodePorts)"));
    }
    v
}

/// What the IPVS proxier sets; `conn_reuse_mode=0` only on kernels 4.1 to 5.8 (older ones
/// lack it, newer ones fixed the reuse bug, as kube-proxy decides).
pub fn ipvs(strict_arp: bool, kernel: Option<(u32, u32)>) -> Vec<Sysctl> {
    let mut v = vec![Sysctl::new("net/ipv4/vs/conntrack", 1, "IPVS connections tracked for SNAT")];
    if kernel.is_some_and(|k| ((4, 1)..(5, 9)).contains(&k)) {
        v.push(Sysctl::new("net/ipv4/vs/conn_reuse_mode", 0, "no IPVS connection reuse (kernels 4.1-5.8)"));
    }
    v.extend([
        Sysctl::new("net/ipv4/vs/expire_nodest_conn", 1, "connections to a removed real server are dropped"),
        Sysctl::new("net/ipv4/vs/expire_quiescent_template", 1, "persistence templates of a weight-0 server expire"),
        Sysctl::new("net/ipv4/ip_forward", 1, "forwarding for IPVS"),
    ]);
    if strict_arp {
        v.push(Sysctl::new("net/ipv4/conf/all/arp_ignore", 1, row::ipvs_strict_arp.path()));
        v.push(Sysctl::new("net/ipv4/conf/all/arp_announce", 2, row::ipvs_strict_arp.path()));
    }
    v
}

/// What the IPVS proxier sets on the running kernel (its version read from `/proc/sys`).
pub fn ipvs_for_this_kernel(strict_arp: bool) -> Vec<Sysctl> {
    ipvs(strict_arp, kernel_version(Path::new("/proc/sys")))
}

/// The sysctls of the configured mode.
pub fn for_mode(cfg: &Config, kernel: Option<(u32, u32)>) -> Vec<Sysctl> {
    match cfg.mode {
        Mode::Iptables => iptables(cfg),
        Mode::Ipvs => ipvs(cfg.ipvs.strict_arp, kernel),
        // Not synced yet (cli::sync refuses the mode before any sysctl is written).
        Mode::Nftables => Vec::new(),
    }
}

/// kube-proxy's warning when bridged pod traffic would bypass iptables: the br_netfilter
/// sysctl exists and is not 1. `None` when there is nothing to say.
pub fn bridge_warning(root: &Path) -> Option<String> {
    let v = std::fs::read_to_string(root.join("net/bridge/bridge-nf-call-iptables")).ok()?;
    (v.trim() != "1").then(|| "Missing br-netfilter module or unset sysctl br-nf-call-iptables; proxy may not work as intended".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(files: &[(&str, &str)]) -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!("svcproxy-sysctl-{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)));
        for (p, v) in files {
            let f = dir.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        }
        dir
    }

    #[test]
    fn only_what_differs_is_written() {
        let r = root(&[("net/ipv4/vs/conntrack", "1\n"), ("net/ipv4/ip_forward", "0\n")]);
        let wanted = [Sysctl::new("net/ipv4/vs/conntrack", 1, "x"), Sysctl::new("net/ipv4/ip_forward", 1, "y")];
        let done = ensure(&r, &wanted).unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].path.as_str(), done[0].current.as_str()), ("net/ipv4/ip_forward", "0"));
        assert_eq!(std::fs::read_to_string(r.join("net/ipv4/ip_forward")).unwrap(), "1");
        assert!(changes(&r, &wanted).is_empty());
        let _ = std::fs::remove_dir_all(r);
    }

    #[test]
    fn conn_reuse_mode_follows_the_kernel_as_in_kube_proxy() {
        let has = |k| ipvs(false, k).iter().any(|s| s.path.ends_with("conn_reuse_mode"));
        assert!(!has(Some((4, 0))) && has(Some((4, 1))) && has(Some((5, 8))) && !has(Some((5, 9))) && !has(Some((6, 18))) && !has(None));
        assert_eq!(ipvs(true, None).len(), 6);
    }

    #[test]
    fn kernel_version_and_bridge_warning() {
        let r = root(&[("kernel/osrelease", "6.18.44-fc-v669\n"), ("net/bridge/bridge-nf-call-iptables", "0\n")]);
        assert_eq!(kernel_version(&r), Some((6, 18)));
        assert!(bridge_warning(&r).is_some());
        let _ = std::fs::remove_dir_all(r);
        assert!(bridge_warning(Path::new("/nonexistent")).is_none(), "no br_netfilter module: nothing to say");
    }
}

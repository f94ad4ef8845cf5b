//! kube-proxy's conntrack tuning (`pkg/proxy/conntrack` `SetSysctls`): `nf_conntrack_max`
//! raised to `maxPerCore` × CPUs (at least `min`, at most 1,048,576), the module's hashsize
//! raised to a quarter of it, and the timeouts and `tcp_be_liberal` set when configured.
//! As in kube-proxy, a value that cannot be set is an error (the proxy does not start):
//! installers that run it where `nf_conntrack_max` is read-only (kind, k3s) set
//! `maxPerCore: 0`, which leaves it alone.

use std::path::Path;
use std::time::Duration;

use super::sysctl::{self, Change, Sysctl, SysctlError};
use crate::config::ConntrackConfig;
use crate::settings::row;

/// The largest `nf_conntrack_max` kube-proxy sets.
pub const MAX_LIMIT: i64 = 1_048_576;

/// Where the two kinds of knobs live (tests point both elsewhere).
#[derive(Debug, Clone)]
pub struct Paths<'a> {
    /// `/proc/sys`.
    pub proc_sys: &'a Path,
    /// `/sys/module/nf_conntrack/parameters/hashsize`.
    pub hashsize: &'a Path,
}

/// kube-proxy's `getConntrackMax`: 0 means leave it.
pub fn wanted_max(c: &ConntrackConfig, cpus: usize) -> i64 {
    if c.max_per_core <= 0 {
        return 0;
    }
    let scaled = i64::from(c.max_per_core) * cpus as i64;
    if scaled > MAX_LIMIT {
        MAX_LIMIT
    } else {
        scaled.max(i64::from(c.min))
    }
}

fn secs(d: Option<Duration>) -> Option<u64> {
    d.map(|d| d.as_secs()).filter(|s| *s > 0)
}

/// The changes tuning would make (read only).
pub fn plan(c: &ConntrackConfig, cpus: usize, paths: &Paths) -> Vec<Change> {
    let read = |p: &Path| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<i64>().ok());
    let mut out = Vec::new();
    let max = wanted_max(c, cpus);
    if max > 0 {
        let current = read(&paths.proc_sys.join("net/netfilter/nf_conntrack_max"));
        // Raised only, never lowered.
        if current.is_none_or(|cur| cur < max) {
            out.push(Change {
                path: "net/netfilter/nf_conntrack_max".into(),
                current: current.map(|v| v.to_string()).unwrap_or_default(),
                wanted: max.to_string(),
                why: "conntrack.maxPerCore x CPUs (at least conntrack.min)",
            });
        }
        let hash = read(paths.hashsize);
        if hash.is_none_or(|h| h < max / 4) {
            out.push(Change {
                path: paths.hashsize.display().to_string(),
                current: hash.map(|v| v.to_string()).unwrap_or_default(),
                wanted: (max / 4).to_string(),
                why: "conntrack hashsize: a quarter of nf_conntrack_max",
            });
        }
    }
    let mut wanted = Vec::new();
    if let Some(s) = secs(c.tcp_established_timeout) {
        wanted.push(Sysctl::new("net/netfilter/nf_conntrack_tcp_timeout_established", s, row::conntrack_tcp_established_timeout.path()));
    }
    if let Some(s) = secs(c.tcp_close_wait_timeout) {
        wanted.push(Sysctl::new("net/netfilter/nf_conntrack_tcp_timeout_close_wait", s, row::conntrack_tcp_close_wait_timeout.path()));
    }
    if c.tcp_be_liberal {
        wanted.push(Sysctl::new("net/netfilter/nf_conntrack_tcp_be_liberal", 1, row::conntrack_tcp_be_liberal.path()));
    }
    if let Some(s) = secs(Some(c.udp_timeout)) {
        wanted.push(Sysctl::new("net/netfilter/nf_conntrack_udp_timeout", s, row::conntrack_udp_timeout.path()));
    }
    if let Some(s) = secs(Some(c.udp_stream_timeout)) {
        wanted.push(Sysctl::new("net/netfilter/nf_conntrack_udp_timeout_stream", s, row::conntrack_udp_stream_timeout.path()));
    }
    out.extend(sysctl::changes(paths.proc_sys, &wanted));
    out
}

/// Tunes conntrack: the changes made. (The hashsize change carries an absolute path, which
/// `root.join` keeps as it is, so the one sysctl writer serves both kinds of knob.)
pub fn apply(c: &ConntrackConfig, cpus: usize, paths: &Paths) -> Result<Vec<Change>, SysctlError> {
    let changes = plan(c, cpus, paths);
    sysctl::apply(paths.proc_sys, &changes)?;
    Ok(changes)
}

/// The node's online CPUs (`/sys/devices/system/cpu/online`, as kube-proxy counts them:
/// the limit is host-wide, so the process's cpuset must not shrink it).
pub fn node_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `0-3,8,10-11` → 7.
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ConntrackConfig {
        ConntrackConfig::default()
    }

    #[test]
    fn max_as_kube_proxy_computes_it() {
        assert_eq!(wanted_max(&defaults(), 2), 131_072, "min wins on small nodes");
        assert_eq!(wanted_max(&defaults(), 8), 262_144);
        assert_eq!(wanted_max(&defaults(), 64), MAX_LIMIT, "capped");
        assert_eq!(wanted_max(&ConntrackConfig { max_per_core: 0, ..defaults() }, 8), 0, "0 leaves it alone");
    }

    #[test]
    fn raises_only_and_sets_timeouts() {
        let dir = std::env::temp_dir().join(format!("svcproxy-ct-{}", std::process::id()));
        let nf = dir.join("proc/net/netfilter");
        std::fs::create_dir_all(&nf).unwrap();
        for (f, v) in [("nf_conntrack_max", "262144"), ("nf_conntrack_tcp_timeout_established", "432000"), ("nf_conntrack_tcp_timeout_close_wait", "60")] {
            std::fs::write(nf.join(f), v).unwrap();
        }
        std::fs::write(dir.join("hashsize"), "1024").unwrap();
        let hashsize = dir.join("hashsize");
        let paths = Paths { proc_sys: &dir.join("proc"), hashsize: &hashsize };
        let done = apply(&defaults(), 2, &paths).unwrap();
        let names: Vec<&str> = done.iter().map(|c| c.path.rsplit('/').next().unwrap()).collect();
        assert_eq!(names, ["hashsize", "nf_conntrack_tcp_timeout_established", "nf_conntrack_tcp_timeout_close_wait"], "max 262144 >= 131072: not lowered");
        assert_eq!(std::fs::read_to_string(&hashsize).unwrap(), "32768");
        assert_eq!(std::fs::read_to_string(nf.join("nf_conntrack_tcp_timeout_established")).unwrap(), "86400");
        assert!(plan(&defaults(), 2, &paths).is_empty(), "a second run changes nothing");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("x"), None);
    }
}

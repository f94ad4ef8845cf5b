//! What kube-proxy does to its own process and the node around its rules: the process's
//! `oom_score_adj`, the sysctls each mode needs ([`sysctl`]) and conntrack tuning
//! ([`conntrack`]).

pub mod conntrack;
pub mod sysctl;

use std::path::Path;

use crate::config::{Config, Mode};

/// A start-up set-up value that could not be set.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("could not set conntrack parameters from kube-proxy configuration")]
    Conntrack(#[source] sysctl::SysctlError),
    #[error(transparent)]
    Sysctl(#[from] sysctl::SysctlError),
}

/// kube-proxy's start-up set-up of the node (also `kube-proxy --init-only`): conntrack
/// tuning and the mode's sysctls (IPVS mode sets its own on every sync); a missing
/// br_netfilter is logged. A value that cannot be set stops svcproxy, as it stops kube-proxy.
pub fn setup(config: &Config) -> Result<(), SetupError> {
    let proc_sys = Path::new("/proc/sys");
    let paths = conntrack::Paths { proc_sys, hashsize: Path::new("/sys/module/nf_conntrack/parameters/hashsize") };
    conntrack::apply(&config.conntrack, conntrack::node_cpus(), &paths).map_err(SetupError::Conntrack)?;
    if config.mode == Mode::Iptables {
        sysctl::ensure(proc_sys, &sysctl::iptables(config))?;
    }
    if let Some(warning) = sysctl::bridge_warning(proc_sys) {
        tracing::warn!("{warning}");
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("oomScoreAdj {0} is not in [-1000, 1000]")]
    OomRange(i32),
    #[error("cannot write {path}: {error}")]
    Write { path: String, error: std::io::Error },
}

/// Sets the process's `oom_score_adj` through `proc` (`/proc` on a node), as kube-proxy's
/// `oom.ApplyOOMScoreAdj(0, value)` does.
pub fn apply_oom_score_adj(proc: &Path, value: i32) -> Result<(), NodeError> {
    if !(-1000..=1000).contains(&value) {
        return Err(NodeError::OomRange(value));
    }
    let path = proc.join("self/oom_score_adj");
    std::fs::write(&path, value.to_string()).map_err(|error| NodeError::Write { path: path.display().to_string(), error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_value_and_refuses_out_of_range() {
        let dir = std::env::temp_dir().join(format!("svcproxy-oom-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("self")).unwrap();
        apply_oom_score_adj(&dir, -999).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("self/oom_score_adj")).unwrap(), "-999");
        assert!(matches!(apply_oom_score_adj(&dir, -1001), Err(NodeError::OomRange(-1001))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

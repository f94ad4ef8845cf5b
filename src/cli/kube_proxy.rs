//! Invoked under the name `kube-proxy` (a symlink or copy in the image), svcproxy is
//! kube-proxy's command: no subcommand, kube-proxy's flags, the proxy in watch mode. A
//! DaemonSet that swaps only the image keeps its command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

use super::flags::ConfigFlags;
use super::sync::{BackendArg, DryRunOutput, SyncArgs};
use super::watch::WatchFlags;
use super::EXIT_OK;
use crate::config::Settings;
use crate::settings::flags::{NodeFlags, RuleFlags};
use crate::settings::{defaults, file};

/// kube-proxy's command line.
#[derive(Debug, Parser)]
#[command(name = "kube-proxy", version, about = "svcproxy as kube-proxy: the Kubernetes network proxy runs on each node")]
pub struct KubeProxyCli {
    /// The path to the configuration file
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Write the effective configuration to this file and exit
    #[arg(long, value_name = "FILE")]
    pub write_config_to: Option<PathBuf>,

    /// Clean up iptables and IPVS rules and exit
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cleanup: Option<bool>,

    /// Do the set-up that needs full root privileges, then exit
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub init_only: Option<bool>,

    #[command(flatten)]
    pub rules: RuleFlags,

    #[command(flatten)]
    pub node: NodeFlags,
}

/// Whether this process was started under the name `kube-proxy`.
pub fn invoked_as_kube_proxy(argv0: Option<&std::ffi::OsStr>) -> bool {
    argv0.and_then(|a| Path::new(a).file_name()).is_some_and(|n| n == "kube-proxy")
}

/// The command line's layer and the file's (kube-proxy's lenient-decoding line said first).
fn layers(cli: &KubeProxyCli) -> anyhow::Result<(Settings, Settings)> {
    let flags = cli.rules.0.clone().over(cli.node.0.clone());
    let file = super::flags::config_file(cli.config.as_deref(), "kube-proxy: ")?;
    Ok((flags, file))
}

/// The effective configuration: the command line over the file over kube-proxy's defaults.
pub fn effective(cli: &KubeProxyCli) -> anyhow::Result<Settings> {
    let (flags, file) = layers(cli)?;
    effective_of(flags, file)
}

fn effective_of(flags: Settings, file: Settings) -> anyhow::Result<Settings> {
    crate::config::check_log_flush_frequency(&flags, &file)?;
    let mut merged = flags.over(file);
    if let Some(gates) = &merged.feature_gates {
        crate::settings::gates::check(gates).map_err(|e| anyhow::anyhow!("featureGates: {e}"))?;
    }
    // kube-proxy's validateDetectLocalMode; svcproxy's own commands keep `None` (no local
    // detection, kube-proxy's NoOp detector) for upstream's test scenarios.
    if merged.detect_local_mode == Some(crate::settings::kinds::LocalMode::None) {
        anyhow::bail!(
            "{}: KubeProxyConfiguration.DetectLocalMode: Unsupported value: \"None\": supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\"",
            crate::settings::row::detect_local_mode.path()
        );
    }
    // kube-proxy trims and lower-cases the node name (processHostnameOverrideFlag).
    merged.hostname_override = merged.hostname_override.map(|h| h.trim().to_lowercase()).filter(|h| !h.is_empty());
    Ok(defaults::defaulted(merged))
}

pub fn run(cli: KubeProxyCli) -> anyhow::Result<ExitCode> {
    if let Some(out) = &cli.write_config_to {
        let doc = file::to_document(&effective(&cli)?, true);
        let text = serde_saphyr::to_string(&doc).context("cannot write the configuration as YAML")?;
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("kube-proxy: wrote configuration to {}", out.display());
        return Ok(ExitCode::from(EXIT_OK));
    }
    if cli.cleanup == Some(true) {
        return super::cleanup::run(&super::cleanup::CleanupArgs { dry_run: false });
    }
    let (flags, file) = layers(&cli)?;
    // kube-proxy's oomScoreAdj default (-999) applies when nothing sets one: it is handed to
    // the layer the proxy applies, so it is applied once.
    let oom_score_adj = effective_of(flags.clone(), file.clone())?.oom_score_adj;
    if cli.init_only == Some(true) {
        // kube-proxy's privileged set-up, then exit: resolved without a cluster state (the
        // node's facts come from the flags and the file).
        if let Some(adj) = oom_score_adj {
            if let Err(e) = crate::runner::node::oom_score_adj(adj) {
                eprintln!("kube-proxy: warning: {e}");
            }
        }
        let loaded = crate::pipeline::load(crate::source::ClusterState::default(), flags, file).context("invalid configuration")?;
        crate::node::setup(&loaded.config)?;
        return Ok(ExitCode::from(EXIT_OK));
    }
    let node = NodeFlags(Settings { oom_score_adj, ..cli.node.0 });
    let args = SyncArgs {
        config: ConfigFlags { from: None, config: cli.config, derive_endpoints: false, rules: cli.rules },
        dry_run: false,
        output: DryRunOutput::Diff,
        iptables_backend: BackendArg::Auto,
        iptables_lock_wait: 5,
        watch: WatchFlags { watch: true, poll_interval: "200ms".into(), node },
    };
    super::sync::run(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_decides() {
        assert!(invoked_as_kube_proxy(Some("/usr/local/bin/kube-proxy".as_ref())));
        assert!(invoked_as_kube_proxy(Some("kube-proxy".as_ref())));
        assert!(!invoked_as_kube_proxy(Some("/usr/local/bin/svcproxy".as_ref())));
        assert!(!invoked_as_kube_proxy(None));
    }

    #[test]
    fn flags_over_defaults_in_the_written_document() {
        let cli = KubeProxyCli::try_parse_from(["kube-proxy", "--proxy-mode=ipvs", "--hostname-override= Node-1 ", "--healthz-bind-address=127.0.0.1"]).unwrap();
        let doc = file::to_document(&effective(&cli).unwrap(), true);
        assert_eq!(doc["mode"], "ipvs");
        assert_eq!(doc["hostnameOverride"], "node-1");
        assert_eq!(doc["healthzBindAddress"], "127.0.0.1:10256");
        assert_eq!(doc["iptables"]["syncPeriod"], "30s");
        assert_eq!(doc["conntrack"]["maxPerCore"], 32768);
    }
}

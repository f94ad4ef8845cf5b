//! Flags shared by the commands that build rules: the inputs, and the rule settings' flags
//! (kube-proxy's names, built from [`crate::settings`]) as a [`Settings`] layer (stage one
//! of two: resolution against the config file, the fixture and the Node happens in
//! [`crate::config`]).

use std::path::PathBuf;

use clap::Args;

use crate::config::Settings;
use crate::settings::flags::RuleFlags;

/// Where the cluster state comes from and how this node is set up.
#[derive(Debug, Clone, Args)]
pub struct ConfigFlags {
    /// Cluster state: a YAML/JSON file, a directory of them, or - for stdin (watch mode
    /// without it follows the API server)
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,

    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1); flags override it
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Compute every Service's EndpointSlices from Pods and v1/Endpoints as the controllers
    /// do, replacing the input's (without it: only for Services the input has no slices for)
    #[arg(long)]
    pub derive_endpoints: bool,

    /// The settings that change the rules (see `crate::settings`).
    #[command(flatten)]
    pub rules: RuleFlags,
}

impl ConfigFlags {
    /// `--from`, which every command but `sync --watch` needs.
    pub fn from_path(&self) -> anyhow::Result<&std::path::Path> {
        self.from.as_deref().ok_or_else(|| anyhow::anyhow!("--from PATH is required (a cluster state file, directory, or -)"))
    }

    /// The command line's layer of rule settings.
    pub fn settings(&self) -> Settings {
        self.rules.0.clone()
    }
}

/// The `--config` file's layer (none: an empty one). Only fields it should not have are
/// worth a word here, on stderr after `prefix`.
pub fn config_file(path: Option<&std::path::Path>, prefix: &str) -> anyhow::Result<Settings> {
    let Some(p) = path else { return Ok(Settings::default()) };
    let f = crate::settings::file::read(p)?;
    let unknown = crate::settings::file::FileSettings { settings: Settings::default(), unknown: f.unknown };
    for note in unknown.notes(p) {
        eprintln!("{prefix}{note}");
    }
    Ok(f.settings)
}

//! `svcproxy sync --watch`: keep the node in step with a cluster state that changes.
//! Sources: `--from PATH` (files, re-read when they change). Serves `/healthz`, `/livez`
//! and `/metrics`; stops on SIGTERM/SIGINT leaving the rules in place.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tokio::sync::mpsc;

use super::sync::SyncArgs;
use super::EXIT_OK;
use crate::config::client::ClientConnection;
use crate::config::{Mode, Settings};
use crate::settings;
use crate::iptables::apply::ExecRestorer;
use crate::iptables::conntrack::ExecConntrack;
use crate::iptables::nfacct;
use crate::pipeline;
use crate::runner::{watch, Schedule, Timing};
use crate::serve::{self, Shared};
use crate::source::file::read_path_lenient;
use crate::source::watch::{watch_files, SourceMsg};
use crate::source::{apiserver, connect, ClusterState};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flags only watch mode uses.
#[derive(Debug, Clone, Args)]
pub struct WatchFlags {
    /// Follow the source and keep the node in step (instead of syncing once)
    #[arg(long)]
    pub watch: bool,

    /// At most one sync per this period (Go duration) [default: 1s]
    #[arg(long, value_name = "DURATION")]
    pub min_sync_period: Option<String>,

    /// A full sync at least this often (Go duration) [default: 30s]
    #[arg(long, value_name = "DURATION")]
    pub sync_period: Option<String>,

    /// Where /healthz and /livez are served
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: SocketAddr,

    /// Where /metrics is served
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: SocketAddr,

    /// Log format
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// kubeconfig file for the API server [default: the --config file's
    /// clientConnection.kubeconfig, else $KUBECONFIG, else the in-cluster service account]
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// The API server's URL (overrides the kubeconfig's)
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,

    /// Requests per second to the API server (client-side rate limit; <= 0: none) [default: 5]
    #[arg(long, value_name = "QPS", allow_negative_numbers = true)]
    pub kube_api_qps: Option<f32>,

    /// Requests allowed in a burst above --kube-api-qps [default: 10]
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<i32>,

    /// Content type of requests to the API server (the client speaks JSON only)
    /// [default: application/vnd.kubernetes.protobuf]
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,

    /// How often files are checked for changes (Go duration)
    #[arg(long, value_name = "DURATION", default_value = "200ms", hide = true)]
    pub poll_interval: String,
}

fn duration(flag: &str, v: &str) -> anyhow::Result<Duration> {
    settings::value::parse_go_duration(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SVCPROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

pub fn run(args: &SyncArgs) -> anyhow::Result<ExitCode> {
    let w = &args.watch;
    init_logging(w.log_format);
    let mut flags = args.config.settings();
    if let Some(p) = &w.min_sync_period {
        flags.min_sync_period = Some(duration("--min-sync-period", p)?);
    }
    if let Some(p) = &w.sync_period {
        flags.sync_period = Some(duration("--sync-period", p)?);
    }
    if flags.nfacct.is_none() {
        flags.nfacct = Some(nfacct::ensure().unwrap_or(false));
    }
    let file = match &args.config.config {
        Some(p) => {
            let f = settings::file::read(p)?;
            for note in f.notes(p) {
                tracing::info!("{note}");
            }
            f.settings
        }
        None => Settings::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(watch(args, flags, file))?;
    Ok(ExitCode::from(EXIT_OK))
}

/// Where the cluster state comes from.
enum Origin {
    Files { path: std::path::PathBuf, initial: Box<ClusterState> },
    Api(kube::Client),
}

async fn watch(args: &SyncArgs, flags: Settings, file: Settings) -> anyhow::Result<()> {
    let w = &args.watch;
    let (state, origin, errors) = match &args.config.from {
        Some(path) => {
            let (mut state, errors) = read_path_lenient(path);
            crate::derive::complete_with_notes(&mut state, args.config.derive_endpoints);
            let initial = state.clone();
            (state, Origin::Files { path: path.clone(), initial: Box::new(initial) }, errors.len())
        }
        None => {
            let client = client(w, &flags, &file, args.config.config.as_deref()).await?;
            let node_name = crate::config::resolve(flags.clone().over(file.clone()), &[])?.node_name;
            let state = this_node(&client, &node_name).await;
            (state, Origin::Api(client), 0)
        }
    };
    let loaded = pipeline::load(state, flags, file).context("invalid configuration")?;
    let timing = Timing {
        min_sync_period: loaded.config.min_sync_period,
        sync_period: loaded.config.sync_period,
        ..Timing::default()
    };
    let shared = Arc::new(Shared::new(Schedule::new(timing)));
    shared.metrics.malformed_objects.inc_by(errors as u64);
    let proxy_name = loaded.config.service_proxy_name.clone();
    let node_name = loaded.config.node_name.clone();
    let restorer = Box::new(ExecRestorer { backend: args.iptables_backend.resolve(), lock_wait_secs: args.iptables_lock_wait });
    let engine = match loaded.config.mode {
        Mode::Iptables => watch::Engine::iptables(loaded.config, loaded.trackers, restorer, Box::new(ExecConntrack)),
        Mode::Ipvs => {
            let p = crate::ipvs::proxier::Proxier::on_node(restorer).context("cannot reach IPVS (is the ip_vs module loaded?)")?;
            watch::Engine::ipvs(loaded.config, loaded.trackers, p)
        }
    };
    let health = serve::spawn(w.healthz_bind_address, serve::health_router(shared.clone()))
        .await
        .with_context(|| format!("cannot serve health checks on {}", w.healthz_bind_address))?;
    let metrics = serve::spawn(w.metrics_bind_address, serve::metrics_router(shared.clone()))
        .await
        .with_context(|| format!("cannot serve metrics on {}", w.metrics_bind_address))?;
    let (tx, rx) = mpsc::channel::<SourceMsg>(64);
    match origin {
        Origin::Files { path, initial } => {
            tracing::info!(%health, %metrics, from = %path.display(), "watching files");
            let poll = duration("--poll-interval", &w.poll_interval)?;
            tokio::spawn(watch_files(path, poll, *initial, args.config.derive_endpoints, tx));
        }
        Origin::Api(client) => {
            tracing::info!(%health, %metrics, "watching the API server");
            tokio::spawn(apiserver::run_with_node(client, proxy_name, Some(node_name), tx));
        }
    }
    watch::run_with(engine, rx, shared, watch::signals(), Some(w.healthz_bind_address.ip())).await;
    Ok(())
}

/// The API client, reached as kube-proxy reaches it (see [`crate::config::client`]).
async fn client(w: &WatchFlags, flags: &Settings, file: &Settings, config_path: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let flags = Settings {
        kubeconfig: w.kubeconfig.as_ref().map(|p| p.display().to_string()),
        kube_api_qps: w.kube_api_qps,
        kube_api_burst: w.kube_api_burst,
        kube_api_content_type: w.kube_api_content_type.clone(),
        ..flags.clone()
    };
    let env = std::env::var("KUBECONFIG").ok();
    let conn = ClientConnection::resolve(&flags, file, config_path, w.master.as_deref(), env.as_deref());
    for note in &conn.notes {
        tracing::info!("{note}");
    }
    let config = connect::config(&conn).await?;
    tracing::info!(qps = conn.qps, burst = conn.burst, "API server: {}", connect::describe(&conn, &config));
    Ok(connect::client(&conn, config)?)
}

/// This node's `v1/Node` (addresses, pod CIDRs, topology labels), if the API server has it.
async fn this_node(client: &kube::Client, name: &str) -> ClusterState {
    let mut state = ClusterState::default();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(node)) => match crate::source::convert::node(&node) {
            Ok(n) => state.nodes.push(n),
            Err(e) => tracing::warn!(node = name, field = %e.field, reason = %e.reason, "cannot read this Node"),
        },
        Ok(None) => tracing::warn!(node = name, "no Node of this name; use --node-ip"),
        Err(e) => tracing::warn!(node = name, error = %e, "cannot get this Node (the API server may be unreachable)"),
    }
    state
}

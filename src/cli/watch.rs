//! `svcproxy sync --watch`: keep the node in step with a cluster state that changes.
//! Sources: `--from PATH` (files, re-read when they change). Serves `/healthz`, `/livez`
//! and `/metrics`; stops on SIGTERM/SIGINT leaving the rules in place.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tokio::sync::mpsc;

use super::sync::SyncArgs;
use super::EXIT_OK;
use crate::config::{kubeproxy, Settings};
use crate::iptables::apply::ExecRestorer;
use crate::iptables::nfacct;
use crate::pipeline;
use crate::runner::{watch, Schedule, Timing};
use crate::serve::{self, Metrics, Shared};
use crate::source::file::read_path_lenient;
use crate::source::watch::{watch_files, SourceMsg};

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

    /// How often files are checked for changes (Go duration)
    #[arg(long, value_name = "DURATION", default_value = "200ms", hide = true)]
    pub poll_interval: String,
}

fn duration(flag: &str, v: &str) -> anyhow::Result<Duration> {
    kubeproxy::parse_duration(v)
        .map(Duration::from_secs_f64)
        .with_context(|| format!("{flag}: {v:?} is not a duration like 1s, 500ms or 1m30s"))
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
        flags.min_sync_period_secs = Some(duration("--min-sync-period", p)?.as_secs_f64());
    }
    if let Some(p) = &w.sync_period {
        flags.sync_period_secs = Some(duration("--sync-period", p)?.as_secs_f64());
    }
    if flags.nfacct.is_none() {
        flags.nfacct = Some(nfacct::ensure().unwrap_or(false));
    }
    let poll = duration("--poll-interval", &w.poll_interval)?;
    let (state, errors) = read_path_lenient(&args.config.from);
    for e in &errors {
        tracing::warn!(error = %e, "skipped an object that cannot be read");
    }
    let file = match &args.config.config {
        Some(p) => kubeproxy::read(p)?,
        None => Settings::default(),
    };
    let initial = state.clone();
    let loaded = pipeline::load(state, flags, file).context("invalid configuration")?;
    let timing = Timing {
        min_sync_period: Duration::from_secs_f64(loaded.config.min_sync_period_secs),
        sync_period: Duration::from_secs_f64(loaded.config.sync_period_secs),
        ..Timing::default()
    };
    let shared = Arc::new(Shared { schedule: Mutex::new(Schedule::new(timing)), metrics: Metrics::new(), last_updated: Mutex::new(None) });
    shared.metrics.malformed_objects.inc_by(errors.len() as u64);
    let restorer = ExecRestorer { backend: args.iptables_backend.resolve(), lock_wait_secs: args.iptables_lock_wait };
    let engine = watch::Engine::new(loaded.config, loaded.trackers, Box::new(restorer));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let health = serve::spawn(w.healthz_bind_address, serve::health_router(shared.clone())).await
            .with_context(|| format!("cannot serve health checks on {}", w.healthz_bind_address))?;
        let metrics = serve::spawn(w.metrics_bind_address, serve::metrics_router(shared.clone())).await
            .with_context(|| format!("cannot serve metrics on {}", w.metrics_bind_address))?;
        tracing::info!(%health, %metrics, from = %args.config.from.display(), "watching");
        let (tx, rx) = mpsc::channel::<SourceMsg>(64);
        tokio::spawn(watch_files(args.config.from.clone(), poll, initial, tx));
        watch::run(engine, rx, shared.clone(), watch::signals()).await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::from(EXIT_OK))
}

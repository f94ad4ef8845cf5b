//! `svcproxy sync --watch`: keep the node in step with a cluster state that changes.
//! Sources: `--from PATH` (files, re-read when they change). Serves `/healthz`, `/livez`
//! and `/metrics`; stops on SIGTERM/SIGINT leaving the rules in place.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tokio::sync::mpsc;

use super::sync::SyncArgs;
use super::EXIT_OK;
use crate::config::client::ClientConnection;
use crate::config::node::{self, LogFormat, Logging, Servers};
use crate::config::Settings;
use crate::settings::{self, flags::NodeFlags};
use crate::pipeline;
use crate::runner::watch;
use crate::schedule::{Schedule, Timing};
use crate::serve::{self, Shared};
use crate::derive::Completion;
use crate::source::watch::{watch_files, SourceMsg, Start};
use crate::source::events::{self, ProxyEvent, Recorder};
use crate::source::{apiserver, connect, ClusterState, Objects};

/// Flags only watch mode uses.
#[derive(Debug, Clone, Args)]
pub struct WatchFlags {
    /// Follow the source and keep the node in step (instead of syncing once)
    #[arg(long)]
    pub watch: bool,

    /// How often files are checked for changes (Go duration)
    #[arg(long, value_name = "DURATION", default_value = "200ms", hide = true)]
    pub poll_interval: String,

    /// The settings that run the node (see `crate::settings`).
    #[command(flatten)]
    pub node: NodeFlags,
}

fn duration(flag: &str, v: &str) -> anyhow::Result<Duration> {
    settings::value::parse_go_duration(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

fn init_logging(logging: &Logging) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SVCPROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(logging.level));
    // Colour only on a terminal (container logs are files and pipes), and never with NO_COLOR.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    let _ = match logging.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

pub fn run(args: &SyncArgs) -> anyhow::Result<ExitCode> {
    let mut flags = args.config.settings().over(args.watch.node.0.clone());
    let (file, notes) = match &args.config.config {
        Some(p) => {
            let f = settings::file::read(p)?;
            let notes = f.notes(p);
            (f.settings, notes)
        }
        None => (Settings::default(), Vec::new()),
    };
    let effective = flags.clone().over(file.clone());
    if effective.socket_lb == Some(true) {
        // Before anything starts: a binary without the programs cannot carry the flag out.
        crate::runner::socketlb::built().context(settings::row::socket_lb.flag())?;
    }
    init_logging(&node::logging(&effective).context("invalid configuration")?);
    for note in notes.iter().chain(&flags.notes()) {
        tracing::info!("{note}");
    }
    if let Some(warning) = unset_mode_warning(&effective) {
        tracing::warn!("{warning}");
    }
    if let Some(adj) = effective.oom_score_adj {
        // As kube-proxy: a failure is logged and the proxy goes on.
        match crate::runner::node::oom_score_adj(adj) {
            Ok(()) => tracing::info!(oom_score_adj = adj, "set the process's oom_score_adj"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    if let Err(e) = crate::runner::node::decide_nfacct(&mut flags, &file, crate::driver::Pass::Apply) {
        tracing::warn!(error = %e.io(), "cannot create kube-proxy's nfacct counters; the rules are written without them");
    }
    let servers = node::servers(&effective).context("invalid configuration")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let configz = settings::file::to_document(&settings::defaults::defaulted(effective), true);
    rt.block_on(watch(args, flags, file, servers, configz))?;
    Ok(ExitCode::from(EXIT_OK))
}

/// kube-proxy v1.37 warns when it defaults the proxy mode to iptables (PR #139957), the
/// default being due to become nftables (KEP-5343). Its exact words could not be read.
fn unset_mode_warning(effective: &Settings) -> Option<String> {
    effective.mode.is_none().then(|| {
        format!(
            "Using iptables proxy: the proxy mode is not set ({} or the configuration file's {}), and its default will change from iptables to nftables in a future release (KEP-5343); set it explicitly to keep iptables",
            settings::row::mode.flag(),
            settings::row::mode.path()
        )
    })
}

/// `/flagz`: every flag with the command line's value, else its default, as kube-proxy's
/// flag set prints them (a config file's values are not flags).
fn flag_values(flags: &Settings) -> Vec<(String, String)> {
    let defaults = settings::defaults::defaulted(Settings::default()).flag_values();
    flags.flag_values().into_iter().zip(defaults).map(|((name, given, zero), (_, default, _))| (name.to_string(), given.or(default).unwrap_or(zero))).collect()
}

/// Where the cluster state comes from.
enum Origin {
    /// `initial`: the first read's objects, which the trackers share.
    Files { path: std::path::PathBuf, initial: Box<Start> },
    Api(kube::Client),
}

async fn watch(args: &SyncArgs, flags: Settings, file: Settings, servers: Servers, configz: serde_json::Value) -> anyhow::Result<()> {
    let w = &args.watch;
    let client_metrics = Arc::new(crate::source::client_metrics::ClientMetrics::default());
    let event_metrics = events::EventMetrics::default();
    // One copy of the objects: the file source diffs each read against the `Arc`s the
    // trackers are loaded from (the API source keeps its own, also shared).
    let (state, objects, origin, errors, recorder) = match &args.config.from {
        Some(path) => {
            let finish = Completion { force: args.config.derive_endpoints };
            let (initial, state, errors) = Start::read(path, &finish);
            let objects = initial.objects.clone();
            (state, objects, Origin::Files { path: path.clone(), initial: Box::new(initial) }, errors.len(), None)
        }
        None => {
            let client = client(&flags, &file, args.config.config.as_deref(), client_metrics.clone()).await?;
            let node_name = crate::config::resolve(flags.clone().over(file.clone()), &[])?.node_name;
            let state = this_node(&client, &node_name).await;
            // kube-proxy's Events on this Node go through the same client.
            let recorder = Recorder::start(client.clone(), &node_name, event_metrics.clone());
            (state, Objects::default(), Origin::Api(client), 0, Some(recorder))
        }
    };
    let profiling = flags.enable_profiling.or(file.enable_profiling).unwrap_or(false);
    let gates = flags.feature_gates.clone().or_else(|| file.feature_gates.clone()).unwrap_or_default();
    let pages = serve::Pages {
        profiling,
        statusz: settings::gates::enabled(&gates, "ComponentStatusz"),
        flagz: settings::gates::enabled(&gates, "ComponentFlagz"),
    };
    let flagz = flag_values(&flags);
    // This Node's IPs at start, which kube-proxy v1.37 exits on seeing change (API server only).
    let node_ips = state.nodes.first().map(crate::model::Node::host_ips).filter(|ips| !ips.is_empty() && matches!(origin, Origin::Api(_)));
    let loaded = pipeline::load_objects(state, &objects, flags, file).context("invalid configuration")?;
    drop(objects);
    crate::node::setup(&loaded.config)?;
    let health_binds = serve::healthcheck::bind_addresses(&loaded.config);
    let timing = Timing {
        min_sync_period: loaded.config.min_sync_period,
        sync_period: loaded.config.sync_period,
        full_sync_period: loaded.config.full_sync_period,
        ..Timing::default()
    };
    let mut shared = Shared::new(Schedule::new(timing));
    client_metrics.register(&mut shared.metrics.registry);
    if recorder.is_some() {
        event_metrics.register(&mut shared.metrics.registry);
    }
    crate::runner::node::register_metrics(&mut shared.metrics, loaded.config.mode, loaded.config.socket_lb.as_ref());
    let shared = Arc::new(shared);
    let _ = shared.proxy_mode.set(loaded.config.mode.to_string());
    let _ = shared.configz.set(configz);
    let _ = shared.flagz.set(flagz);
    let _ = shared.emulation_version.set(loaded.config.kube_proxy_version.to_string());
    shared.metrics.malformed_objects.inc_by(errors as u64);
    let proxy_name = loaded.config.service_proxy_name.clone();
    let node_name = loaded.config.node_name.clone();
    let iptables = crate::runner::node::Iptables::on_node(loaded.config.mode, args.iptables_backend.chosen(), args.iptables_lock_wait);
    let mut engine = crate::runner::node::engine(loaded.config, loaded.trackers, iptables, false)
        .context("cannot reach IPVS (is the ip_vs module loaded?)")?;
    engine.node_ips_at_start = node_ips;
    let health = match serve_on("health checks", servers.healthz, servers.hard_fail, serve::health_router(shared.clone())).await {
        Ok(h) => h,
        Err(e) => return Err(e.record(recorder.as_ref(), ProxyEvent::healthz_failed).flushed(recorder.as_ref()).await),
    };
    let metrics = match serve_on("metrics", servers.metrics, servers.hard_fail, serve::metrics_router(shared.clone(), pages)).await {
        Ok(m) => m,
        Err(e) => return Err(e.record(recorder.as_ref(), ProxyEvent::metrics_failed).flushed(recorder.as_ref()).await),
    };
    let (health, metrics) = (shown(health), shown(metrics));
    let (tx, rx) = mpsc::channel::<SourceMsg>(64);
    match origin {
        Origin::Files { path, initial } => {
            tracing::info!(%health, %metrics, from = %path.display(), "watching files");
            let poll = duration("--poll-interval", &w.poll_interval)?;
            let finish = Completion { force: args.config.derive_endpoints };
            tokio::spawn(watch_files(path, poll, *initial, finish, tx));
        }
        Origin::Api(client) => {
            tracing::info!(%health, %metrics, "watching the API server");
            // The birth cry is recorded there, before the sync loop runs.
            apiserver::start(client, proxy_name, Some(node_name), tx, recorder.as_ref());
        }
    }
    if let Some(why) = watch::run_with(engine, rx, shared, watch::signals(), health_binds, recorder).await {
        anyhow::bail!("{why}; the rules in place stay until the restarted process syncs");
    }
    Ok(())
}

/// The API client, reached as kube-proxy reaches it (see [`crate::config::client`]).
async fn client(
    flags: &Settings,
    file: &Settings,
    config_path: Option<&std::path::Path>,
    metrics: Arc<crate::source::client_metrics::ClientMetrics>,
) -> anyhow::Result<kube::Client> {
    let env = std::env::var("KUBECONFIG").ok();
    let conn = ClientConnection::resolve(flags, file, config_path, flags.master.as_deref(), env.as_deref());
    for note in &conn.notes {
        tracing::info!("{note}");
    }
    let config = connect::config(&conn).await?;
    tracing::info!(qps = conn.qps, burst = conn.burst, "API server: {}", connect::describe(&conn, &config));
    Ok(connect::client_with_metrics(&conn, config, Some(metrics))?)
}

/// How long an exit waits for its Warning Event to be posted.
const EXIT_EVENT_WAIT: Duration = Duration::from_secs(5);

/// A server that could not listen, with `bindAddressHardFail`: svcproxy stops.
struct BindFailure {
    addr: SocketAddr,
    error: std::io::Error,
    what: String,
}

impl BindFailure {
    /// Records kube-proxy's Warning Event for it (`event` makes it), when there is a recorder.
    fn record(self, recorder: Option<&Recorder>, event: fn(SocketAddr, &std::io::Error) -> ProxyEvent) -> Self {
        if let Some(r) = recorder {
            r.record(event(self.addr, &self.error));
        }
        self
    }

    /// The error the process exits with, once the Event is posted (or [`EXIT_EVENT_WAIT`] passed).
    async fn flushed(self, recorder: Option<&Recorder>) -> anyhow::Error {
        if let Some(r) = recorder {
            if !r.flush(EXIT_EVENT_WAIT).await {
                tracing::warn!("exiting before the Warning Event was posted");
            }
        }
        anyhow::Error::new(self.error).context(format!("cannot serve {} on {} (bindAddressHardFail)", self.what, self.addr))
    }
}

/// Serves `router` on `addr`. A port that cannot be bound stops svcproxy with
/// `bindAddressHardFail`; otherwise, as kube-proxy does, it is logged and the proxy goes on.
async fn serve_on(what: &str, addr: Option<SocketAddr>, hard_fail: bool, router: axum::Router) -> Result<Option<SocketAddr>, BindFailure> {
    let Some(addr) = addr else { return Ok(None) };
    match serve::spawn(addr, router).await {
        Ok(bound) => Ok(Some(bound)),
        Err(error) if hard_fail => Err(BindFailure { addr, error, what: what.to_string() }),
        Err(e) => {
            tracing::error!(error = %e, %addr, "cannot serve {what}; going on without (bindAddressHardFail is false)");
            Ok(None)
        }
    }
}

/// A server's address for the start-up log line (`off` when not served).
fn shown(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "off".to_string(), |a| a.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_proxy_mode_is_warned_about_as_kube_proxy_v1_37_does() {
        let w = unset_mode_warning(&Settings::default()).expect("a warning when nothing sets the mode");
        assert!(w.contains("--proxy-mode") && w.contains("configuration file's mode"), "{w}");
        assert!(w.contains("nftables") && !w.contains('\n'), "one line: {w}");
        let mut set = Settings::default();
        set.set_from_flag("proxy-mode", "iptables").unwrap().unwrap();
        assert_eq!(unset_mode_warning(&set), None, "set explicitly, even to the default");
    }

    #[test]
    fn a_port_taken_stops_only_with_bind_address_hard_fail() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = taken.local_addr().unwrap();
            let soft = serve_on("metrics", Some(addr), false, axum::Router::new()).await.ok();
            assert_eq!(soft, Some(None), "logged, and the proxy goes on without that server");
            let Err(hard) = serve_on("metrics", Some(addr), true, axum::Router::new()).await else { panic!("a taken port with hard fail is an error") };
            let hard = hard.flushed(None).await;
            assert!(format!("{hard:#}").contains("bindAddressHardFail"), "{hard:#}");
            let free = serve_on("metrics", Some("127.0.0.1:0".parse().unwrap()), true, axum::Router::new()).await.ok();
            assert!(matches!(free, Some(Some(_))));
        });
    }
}

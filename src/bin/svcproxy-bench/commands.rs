//! svcproxy-bench's commands: measurements over generated clusters, printed as tables, and
//! the generated clusters themselves. The hidden commands feed `scripts/bench` and
//! `scripts/bench-kernel`: kube-proxy's partial restore after a one-endpoint change, a
//! full restore split by service for iptables-nft, a one-shot sync with its phases timed,
//! and BENCHMARKS.md's results section.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use svcproxy::bench::{self, netload, plot, report, soak, OneEndpoint};
use svcproxy::cli::{out, render, sync::SyncArgs, EXIT_OK};
use svcproxy::config::Mode;
use svcproxy::gen::{self, GenSpec};
use svcproxy::xtables::apply::ExecRestorer;
use svcproxy::iptables::sync::{self, Timings};
use svcproxy::pipeline;

const ABOUT: &str = "svcproxy's benchmark tooling: generated clusters, and measurements over them (BENCHMARKS.md)";

#[derive(Debug, Parser)]
#[command(name = "svcproxy-bench", version, about = ABOUT, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Change {
    /// one more (ready) endpoint for the middle service
    OneEndpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoadKind {
    /// new TCP connections: connect, request, reply, close
    Tcp,
    /// UDP request/response on unconnected sockets (--udp-sockets a thread)
    Udp,
}

/// How net-load chooses each request's target (netload::Pick).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoadPick {
    /// each request to the next target in turn
    RoundRobin,
    /// one target at random per socket, kept for its life (as a Service picks): per TCP
    /// connection; per UDP socket for the whole run
    PerSocket,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenFormat {
    /// `---`-separated YAML documents
    Yaml,
    /// one JSON `kind: List`, indented as `kubectl get -o json` prints it
    JsonList,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// a markdown table
    Table,
    /// tab-separated: services, endpoints, full, kube-proxy, svcproxy watch, svcproxy sync
    Tsv,
}

#[derive(Debug, Clone, Subcommand)]
pub enum BenchWhat {
    /// Write a deterministic synthetic cluster (YAML, or one JSON `kind: List`) for
    /// benchmarks and scale tests
    #[command(after_help = "Examples:\n  svcproxy-bench generate --services 10000 --endpoints 10 > big.yaml\n  svcproxy-bench generate --services 10000 --endpoints 10 --format json-list > big.json")]
    Generate {
        /// Number of services
        #[arg(long, default_value_t = 1000)]
        services: usize,
        /// Endpoints per service
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Random seed (the same seed gives the same cluster)
        #[arg(long, default_value_t = bench::SEED)]
        seed: u64,
        /// Output format
        #[arg(long, value_enum, default_value = "yaml")]
        format: GenFormat,
    },
    /// Read cluster files in process (read, parse, convert) and feed them to fresh
    /// trackers, timed: each file in turn, run after run; prints the medians
    #[command(after_help = "Example:\n  svcproxy-bench load big.yaml big.json --runs 5")]
    Load {
        /// Cluster files (YAML or JSON)
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Runs per file
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Load a cluster file once, then render its iptables rules (trackers → ruleset →
    /// restore text) `--runs` times in process; prints the median and best of each phase
    #[command(after_help = "Example:\n  svcproxy-bench render big.yaml --runs 10")]
    Render {
        /// Cluster file (YAML or JSON)
        file: PathBuf,
        /// Runs
        #[arg(long, default_value_t = 10)]
        runs: usize,
    },
    /// What watch mode does when a file changed: read it again, the events from the old
    /// state to the new, fed to trackers holding the old and committed, timed (beside the
    /// same with every object as an event)
    #[command(after_help = "Example:\n  svcproxy-bench partial-restore --write-base a.yaml --write-changed b.yaml > /dev/null\n  svcproxy-bench reread a.yaml b.yaml --runs 5")]
    Reread {
        /// The cluster as loaded
        base: PathBuf,
        /// The same cluster after a change
        changed: PathBuf,
        /// Runs
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Restore input for a one-endpoint change: svcproxy's (watch-mode partial sync, and a
    /// one-shot sync against a kernel holding the cluster) vs kube-proxy's partial sync
    RestoreSize {
        /// Cluster sizes (services), comma list
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        services: Vec<usize>,
        /// Endpoints per service
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Output format
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Print kube-proxy's partial restore input (whole KUBE-SERVICES rewritten, changed
    /// services' chains) after a change to a generated cluster (for scripts/bench-kernel)
    #[command(hide = true)]
    PartialRestore {
        #[arg(long, default_value_t = 10000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        #[arg(long, value_enum, default_value = "one-endpoint")]
        change: Change,
        /// Also write the cluster before the change (YAML) here
        #[arg(long, value_name = "PATH")]
        write_base: Option<PathBuf>,
        /// Also write the cluster after the change (YAML) here
        #[arg(long, value_name = "PATH")]
        write_changed: Option<PathBuf>,
    },
    /// Print the nftables transaction svcproxy's watch-mode partial sync sends for one
    /// endpoint added to the middle service of a generated cluster (one `nft -f` input
    /// per run it makes); optionally write the clusters before and after (for
    /// scripts/bench-nft)
    #[command(hide = true)]
    NftPartial {
        #[arg(long, default_value_t = 10000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Also write the cluster before the change (YAML) here
        #[arg(long, value_name = "PATH")]
        write_base: Option<PathBuf>,
        /// Also write the cluster after the change (YAML) here
        #[arg(long, value_name = "PATH")]
        write_changed: Option<PathBuf>,
        /// The kube-proxy release whose nftables table the proxier writes (svcproxy's
        /// `--kube-proxy-version`; default: the newest)
        #[arg(long, value_name = "VERSION")]
        kube_proxy_version: Option<String>,
    },
    /// Apply an `nft -f` input (stdin) as one nf_tables netlink batch, svcproxy's netlink
    /// writer (no `nft` run, so no read of the table first); fails when the input is not
    /// encodable or the kernel refuses it (for scripts/bench-nft)
    #[command(hide = true)]
    NftNetlink,
    /// Encode an `nft -f` text (stdin) as svcproxy's netlink writer does, ROUNDS times,
    /// sending nothing; prints each round's CPU (user + sys, ms) and messages (for comparing
    /// encoders side by side)
    #[command(hide = true)]
    NftEncode {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Split a full restore input (stdin) into several restores of at most N services each,
    /// a service's chains together in dependency order, top-level chains declared first and
    /// filled last; writes DIR/0000.restore, … and prints their count (for scripts/bench-kernel)
    #[command(hide = true)]
    SplitRestore {
        #[arg(long, default_value_t = 40)]
        services_per_chunk: usize,
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Run a one-shot `svcproxy sync` (same flags) in process and print where the time
    /// went, one `name value` line each: seconds, or lines (for scripts/bench-kernel)
    #[command(hide = true)]
    Sync(Box<SyncArgs>),
    /// The scale soak (root, in a fresh network namespace: scripts/soak runs it): the
    /// test API server serves a generated cluster, `svcproxy sync --watch` follows it
    /// while endpoints change at a steady rate, then idles; writes DIR/soak.tsv (samples),
    /// DIR/summary.txt and DIR/svcproxy.log
    Soak {
        #[arg(long, default_value_t = 50000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Endpoint changes per second
        #[arg(long, default_value_t = 50)]
        rate: u32,
        /// Seconds of changes
        #[arg(long, default_value_t = 600)]
        changes_for: u64,
        /// Seconds idle after the changes
        #[arg(long, default_value_t = 60)]
        idle_for: u64,
        /// Seconds between samples
        #[arg(long, default_value_t = 5)]
        sample_every: u64,
        /// Proxy mode: iptables, ipvs or nftables
        #[arg(long, default_value = "iptables")]
        mode: String,
        /// iptables backend: nft or legacy (iptables mode's rules, IPVS mode's few)
        #[arg(long, default_value = "nft")]
        backend: String,
        /// The svcproxy binary to run
        #[arg(long, value_name = "PATH")]
        svcproxy: PathBuf,
        /// One more flag for svcproxy (repeat for each)
        #[arg(long = "svcproxy-arg", value_name = "ARG", allow_hyphen_values = true)]
        svcproxy_args: Vec<String>,
        /// Seconds the first (full) sync may take
        #[arg(long, default_value_t = 1800)]
        first_sync_limit: u64,
        /// What a change does: toggle adds or removes an endpoint, replace swaps an address
        #[arg(long, value_enum, default_value = "toggle")]
        churn: soak::Churn,
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Compare soak runs (LABEL=DIR, each with DIR/figures.tsv): a markdown table of every
    /// figure with each run's ratio to the first run's
    #[command(hide = true)]
    SoakRatios {
        /// LABEL=DIR, the first being the base
        runs: Vec<String>,
    },
    /// Draw soak runs (LABEL=DIR, DIR/soak.tsv, or LABEL=FILE, a soak.tsv) into one SVG
    #[command(hide = true)]
    SoakPlot {
        #[arg(long)]
        title: String,
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// LABEL=DIR or LABEL=FILE, one per run
        runs: Vec<String>,
    },
    /// The conntrack reconciler alone against a real kernel table (issue 34; root, in a
    /// fresh network namespace, never the initial one: scripts/bench-conntrack runs it).
    /// Creates --flows UDP flows over ctnetlink for the cluster (its service ports made
    /// UDP), --stale of them stale, and --tcp TCP flows; runs the reconciler --rounds
    /// times (the stale flows created again before each), then its phases apart as many
    /// times; checks the table after each run (every stale flow gone, every other flow
    /// there: a mismatch is an error). Prints a summary; with --dir writes DIR/runs.tsv,
    /// DIR/figures.txt (medians) and DIR/summary.md
    #[command(after_help = "Example:
  ip netns add ctb; ip netns exec ctb svcproxy-bench conntrack --flows 100000 --dir out; ip netns del ctb")]
    Conntrack {
        #[arg(long, default_value_t = 10000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// A cluster file (YAML or JSON) instead of the generated cluster
        #[arg(long, value_name = "PATH")]
        from: Option<PathBuf>,
        /// Percent of the services whose ports are made UDP (the generator writes TCP)
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u8).range(0..=100))]
        udp_percent: u8,
        /// UDP flows to create, healthy and stale together
        #[arg(long, default_value_t = 100_000)]
        flows: usize,
        /// Stale UDP flows among them [default: 1% of --flows]
        #[arg(long)]
        stale: Option<usize>,
        /// TCP flows besides (to the services, answered by no endpoint) [default: a tenth of --flows]
        #[arg(long)]
        tcp: Option<usize>,
        /// Reconciler runs (and phase rounds)
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Skip the phase rounds
        #[arg(long)]
        no_phases: bool,
        /// Create the stale flows again at the end (the table as each run read it, for
        /// `conntrack -L` next)
        #[arg(long)]
        leave_stale: bool,
        /// Seconds each flow is created with
        #[arg(long, default_value_t = 7200)]
        timeout: u32,
        #[arg(long, default_value_t = bench::SEED)]
        seed: u64,
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Write the packet-path benchmark's cluster (scripts/bench-socketlb): Services with a
    /// TCP (80 → 8080) and a UDP (53 → 5353) port, ClusterIPs from 198.19.128.1, Service
    /// --target backed by the pods --pods; prints the target's ClusterIP
    #[command(hide = true)]
    SocketlbCluster {
        #[arg(long, default_value_t = 10000)]
        services: usize,
        /// Endpoints per Service (the number of --pods)
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// The Service the pods back [default: the middle one]
        #[arg(long)]
        target: Option<usize>,
        /// The pods' IPv4 addresses, comma list
        #[arg(long, value_delimiter = ',', required = true)]
        pods: Vec<std::net::Ipv4Addr>,
        #[arg(long, value_name = "PATH")]
        write: PathBuf,
    },
    /// The packet-path benchmark's echo server on IP (TCP 8080: read, reply, close; UDP 5353:
    /// echo), for at most --for seconds (scripts/bench-socketlb runs one in each pod)
    #[command(hide = true)]
    NetServe {
        ip: std::net::Ipv4Addr,
        /// Threads accepting TCP connections
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds before the server exits on its own
        #[arg(long = "for", default_value_t = 3600)]
        lifetime: u64,
    },
    /// The packet-path benchmark's load generator: --threads threads, one request in flight
    /// each, for --seconds, over the targets as --pick says; prints one line of `key value`
    /// pairs: ops, errors, secs, rate, the generator's user and sys CPU seconds, the
    /// machine's busy CPU seconds over the run and the seed (scripts/bench-socketlb)
    #[command(hide = true)]
    NetLoad {
        #[arg(value_enum)]
        kind: LoadKind,
        /// IP:PORT targets, comma list
        #[arg(value_delimiter = ',', required = true)]
        targets: Vec<std::net::SocketAddr>,
        #[arg(long, value_enum, default_value_t = LoadPick::RoundRobin)]
        pick: LoadPick,
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// UDP: unconnected sockets per thread, used in turn
        #[arg(long, default_value_t = 1)]
        udp_sockets: usize,
        /// Seeds --pick per-socket's draws [default: from the clock]
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Milliseconds one request may take before it counts as an error
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Join this cgroup (its cgroup.procs file) before opening any socket
        #[arg(long, value_name = "PATH")]
        cgroup_procs: Option<PathBuf>,
    },
    /// Print BENCHMARKS.md's results section from the benchmarks' output (for scripts/bench)
    #[command(hide = true)]
    Report {
        /// criterion's output directory
        #[arg(long, value_name = "DIR", default_value = "target/criterion")]
        criterion: PathBuf,
        /// The directory holding rss.tsv, restore-size.tsv, kernel.tsv and machine.txt
        #[arg(long, value_name = "DIR", default_value = "target/bench-results")]
        results: PathBuf,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.what {
        BenchWhat::Generate { services, endpoints, seed, format } => {
            let yaml = gen::yaml(&GenSpec { services: *services, endpoints: *endpoints, seed: *seed });
            match format {
                GenFormat::Yaml => out(&yaml)?,
                GenFormat::JsonList => out(&bench::json_list(&yaml)?)?,
            }
        }
        BenchWhat::Load { files, runs } => out(&crate::load::run(files, *runs)?)?,
        BenchWhat::Render { file, runs } => out(&crate::load::render(file, *runs)?)?,
        BenchWhat::Reread { base, changed, runs } => out(&crate::load::reread(base, changed, *runs)?)?,
        BenchWhat::RestoreSize { services, endpoints, format } => {
            if *format == Format::Table {
                out("| services | endpoints | full restore (lines) | kube-proxy partial sync (lines) | svcproxy watch-mode sync (lines) | svcproxy one-shot sync (lines) |\n|---:|---:|---:|---:|---:|---:|\n")?;
            }
            for n in services {
                let r = bench::restore_size(*n, *endpoints).with_context(|| format!("restore sizes at {n} services"))?;
                let row = [n.to_string(), endpoints.to_string(), r.full.to_string(), r.kube_proxy.to_string(), r.partial.to_string(), r.sync.to_string()];
                out(&match format {
                    Format::Table => format!("| {} |\n", row.join(" | ")),
                    Format::Tsv => format!("{}\n", row.join("\t")),
                })?;
            }
        }
        BenchWhat::PartialRestore { services, endpoints, change: Change::OneEndpoint, write_base, write_changed } => {
            let mut one = OneEndpoint::new(*services, *endpoints)?;
            for (path, text) in [(write_base, &one.base_text), (write_changed, &one.changed_text)] {
                if let Some(p) = path {
                    std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
                }
            }
            let add = one.add.clone();
            let changes = one.step(&add);
            out(&one.kube_proxy_partial(&changes))?;
        }
        BenchWhat::NftPartial { services, endpoints, write_base, write_changed, kube_proxy_version } => {
            let mut one = OneEndpoint::new(*services, *endpoints)?;
            if let Some(v) = kube_proxy_version {
                one.loaded.config.kube_proxy_version = svcproxy::settings::kinds::KubeProxyVersion::parse(v).map_err(|e| anyhow::anyhow!("--kube-proxy-version: {e}"))?;
            }
            for (path, text) in [(write_base, &one.base_text), (write_changed, &one.changed_text)] {
                if let Some(p) = path {
                    std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?;
                }
            }
            let runs = bench::nft::one_endpoint_partial(&mut one)?;
            anyhow::ensure!(runs.len() == 1, "the partial sync made {} nft runs, not one", runs.len());
            out(&runs.concat())?;
        }
        BenchWhat::NftEncode { rounds } => {
            let text = std::io::read_to_string(std::io::stdin())?;
            for round in 0..*rounds {
                let (batch, sample) = svcproxy::bench::conntrack::measure(None, || svcproxy::nftables::wire::encode(&text));
                let batch = batch?;
                out(&format!("round {round}: cpu_ms {:.1} user_ms {:.1} sys_ms {:.1} wall_ms {:.1} bytes {}\n", sample.cpu().as_secs_f64() * 1e3, sample.user.as_secs_f64() * 1e3, sample.sys.as_secs_f64() * 1e3, sample.wall.as_secs_f64() * 1e3, batch.bytes().len()))?;
            }
        }
        BenchWhat::NftNetlink => {
            let text = std::io::read_to_string(std::io::stdin())?;
            let mut batch = svcproxy::nftables::wire::encode(&text)?;
            svcproxy::nftables::netlink::send(&mut batch, &text)?;
        }
        BenchWhat::SplitRestore { services_per_chunk, dir } => {
            let text = std::io::read_to_string(std::io::stdin())?;
            let chunks = bench::split_by_service(&text, *services_per_chunk).context("the restore input does not parse")?;
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            for (i, c) in chunks.iter().enumerate() {
                std::fs::write(dir.join(format!("{i:04}.restore")), c)?;
            }
            out(&format!("{}\n", chunks.len()))?;
        }
        BenchWhat::Soak { services, endpoints, rate, changes_for, idle_for, sample_every, mode, backend, svcproxy, svcproxy_args, first_sync_limit, churn, dir } => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let spec = soak::Spec {
                services: *services,
                endpoints: *endpoints,
                rate: *rate,
                changes_for: Duration::from_secs(*changes_for),
                idle_for: Duration::from_secs(*idle_for),
                sample_every: Duration::from_secs((*sample_every).max(1)),
                mode: mode.clone(),
                backend: backend.clone(),
                svcproxy: svcproxy.clone(),
                extra_args: svcproxy_args.clone(),
                log: dir.join("svcproxy.log"),
                first_sync_limit: Duration::from_secs(*first_sync_limit),
                churn: *churn,
            };
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let result = rt.block_on(soak::run(&spec))?;
            std::fs::write(dir.join("soak.tsv"), result.tsv())?;
            std::fs::write(dir.join("summary.txt"), result.summary())?;
            std::fs::write(dir.join("minutes.tsv"), soak::minutes_tsv(&result.minutes()))?;
            if let Some(figures) = result.figures() {
                std::fs::write(dir.join("figures.tsv"), figures.tsv())?;
            }
            out(&result.summary())?;
        }
        BenchWhat::SoakRatios { runs } => {
            let mut read = Vec::new();
            for run in runs {
                let (label, dir) = run.split_once('=').with_context(|| format!("{run}: want LABEL=DIR"))?;
                let file = Path::new(dir).join("figures.tsv");
                let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
                read.push((label.to_string(), soak::read_figures(&text).with_context(|| file.display().to_string())?));
            }
            out(&soak::ratios(&read))?;
        }
        BenchWhat::SoakPlot { title, out: path, runs } => {
            let mut series = Vec::new();
            for run in runs {
                let (label, dir) = run.split_once('=').with_context(|| format!("{run}: want LABEL=DIR"))?;
                let file = if Path::new(dir).is_dir() { Path::new(dir).join("soak.tsv") } else { PathBuf::from(dir) };
                let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
                series.push((label.to_string(), plot::read_tsv(&text).with_context(|| file.display().to_string())?));
            }
            plot::soak_svg(&series, title, path)?;
        }
        BenchWhat::Sync(sync_args) => out(&timed_sync(sync_args)?)?,
        BenchWhat::Conntrack { services, endpoints, from, udp_percent, flows, stale, tcp, rounds, no_phases, leave_stale, timeout, seed, dir } => {
            let spec = bench::conntrack::Spec {
                flows: *flows,
                stale: stale.unwrap_or(flows / 100),
                tcp: tcp.unwrap_or(flows / 10),
                rounds: *rounds,
                phases: !no_phases,
                leave_stale: *leave_stale,
                timeout: *timeout,
                seed: *seed,
                heap: Some(&crate::heap::Probe),
            };
            out(&conntrack(&spec, *services, *endpoints, from.as_deref(), *udp_percent, dir.as_deref())?)?;
        }
        BenchWhat::SocketlbCluster { services, endpoints, target, pods, write } => {
            let target = target.unwrap_or(services / 2);
            let text = netload::cluster(*services, *endpoints, target, pods)?;
            std::fs::write(write, text).with_context(|| format!("cannot write {}", write.display()))?;
            out(&format!("{}\n", netload::cluster_ip(target)))?;
        }
        BenchWhat::NetServe { ip, threads, lifetime } => {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let lifetime = Duration::from_secs(*lifetime);
            // Bounded: the process exits after its lifetime whatever the threads do.
            std::thread::spawn(move || {
                std::thread::sleep(lifetime);
                std::process::exit(0);
            });
            netload::serve(*ip, *threads, stop)?;
        }
        BenchWhat::NetLoad { kind, targets, pick, threads, udp_sockets, seed, seconds, timeout_ms, cgroup_procs } => {
            if let Some(procs) = cgroup_procs {
                // Before any socket exists: the socket hooks see the cgroup a socket was made in.
                std::fs::write(procs, "0").with_context(|| format!("cannot join the cgroup of {}", procs.display()))?;
            }
            anyhow::ensure!(*seconds > 0.0 && *seconds <= 600.0, "--seconds: more than 0, at most 600");
            anyhow::ensure!((1..=1024).contains(udp_sockets), "--udp-sockets: 1 to 1024, not {udp_sockets}");
            // A new seed each run unless given: the rounds sample different per-socket spreads.
            let seed = seed.unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
            });
            let load = netload::Load {
                kind: match kind {
                    LoadKind::Tcp => netload::Kind::Tcp,
                    LoadKind::Udp => netload::Kind::Udp,
                },
                targets: targets.clone(),
                pick: match pick {
                    LoadPick::RoundRobin => netload::Pick::RoundRobin,
                    LoadPick::PerSocket => netload::Pick::PerSocket,
                },
                threads: *threads,
                udp_sockets: *udp_sockets,
                seed,
                duration: Duration::from_secs_f64(*seconds),
                timeout: Duration::from_millis(*timeout_ms),
            };
            let (busy0, _) = netload::machine_cpu();
            let (outcome, cpu) = bench::conntrack::measure(None, || netload::run(&load));
            let (busy1, _) = netload::machine_cpu();
            let outcome = outcome?;
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
            out(&format!(
                "ops {} errors {} secs {:.3} rate {:.1} user {:.3} sys {:.3} machine_busy {:.3} seed {seed}\n",
                outcome.ops,
                outcome.errors,
                outcome.elapsed.as_secs_f64(),
                outcome.rate(),
                cpu.user.as_secs_f64(),
                cpu.sys.as_secs_f64(),
                busy1.saturating_sub(busy0) as f64 / hz
            ))?;
        }
        BenchWhat::Report { criterion, results } => out(&report::render(&report::Inputs::read(criterion, results)?))?,
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// `svcproxy-bench conntrack`: the cluster loaded (its ports made UDP), then
/// [`bench::conntrack::run`]; progress on stderr, the summary returned.
fn conntrack(spec: &bench::conntrack::Spec, services: usize, endpoints: usize, from: Option<&Path>, udp_percent: u8, dir: Option<&Path>) -> anyhow::Result<String> {
    let log = |s: &str| eprintln!("svcproxy-bench conntrack: {s}");
    let t = Instant::now();
    let mut state = match from {
        Some(p) => svcproxy::source::read_path(p).with_context(|| format!("cannot read {}", p.display()))?,
        None => {
            let mut state = svcproxy::source::ClusterState::default();
            svcproxy::source::file::read_str(Path::new("generated.yaml"), &bench::generated(services, endpoints), &mut state)?;
            state
        }
    };
    let made = bench::conntrack::make_udp(&mut state, udp_percent);
    let loaded = bench::load(state)?;
    log(&format!("cluster loaded in {:.1} s ({made} services made UDP)", t.elapsed().as_secs_f64()));
    let family = loaded.trackers.families.iter().find(|f| f.family == svcproxy::net::IpFamily::V4).context("the cluster has no IPv4 family")?;
    let (svc_map, ep_map) = family.view();
    let results = bench::conntrack::run(spec, svc_map, ep_map, &mut |s| log(s))?;
    let summary = results.summary();
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join("runs.tsv"), results.tsv())?;
        std::fs::write(dir.join("figures.txt"), results.figures())?;
        std::fs::write(dir.join("summary.md"), &summary)?;
    }
    Ok(summary)
}

/// A one-shot iptables sync as `svcproxy sync` runs it, timed: `load` (read, parse,
/// track), `render` (the rules), then the sync's own phases summed over the families
/// (`text`: the restore text written and parsed back, `read`: iptables-save, `compute`:
/// the delta, `restore`: iptables-restore), `total`, and the restore input's size.
fn timed_sync(args: &SyncArgs) -> anyhow::Result<String> {
    anyhow::ensure!(!args.dry_run && !args.watch.watch, "bench sync runs one real sync: no --dry-run, no --watch");
    let start = Instant::now();
    let flags = args.config.settings();
    anyhow::ensure!(flags.nfacct.is_some(), "bench sync needs --nfacct true|false (it does not create nfacct counters)");
    let loaded = render::load_with(&args.config, flags)?;
    anyhow::ensure!(loaded.config.mode == Mode::Iptables, "bench sync measures iptables mode only");
    let load = start.elapsed();
    let t = Instant::now();
    let rulesets = pipeline::render_iptables(&loaded);
    let render = t.elapsed();
    let backend = svcproxy::runner::node::backend(args.iptables_backend.chosen());
    let mut restorer = ExecRestorer { backend, lock_wait_secs: args.iptables_lock_wait };
    let (mut phases, mut lines, mut full_lines) = (Timings::default(), 0, 0);
    for rs in &rulesets {
        let family = rs.ctx.node.family;
        let r = sync::sync(&mut restorer, rs, false).with_context(|| format!("{family} sync with iptables-{} failed", backend.name()))?;
        phases.render += r.timings.render;
        phases.read += r.timings.read;
        phases.compute += r.timings.compute;
        phases.restore += r.timings.restore;
        lines += r.delta.restore_lines();
        full_lines += r.full_lines;
    }
    let total = start.elapsed();
    let secs = [("load", load), ("render", render), ("text", phases.render), ("read", phases.read), ("compute", phases.compute), ("restore", phases.restore), ("total", total)];
    let mut out: String = secs.iter().map(|(k, d)| format!("{k} {:.6}\n", d.as_secs_f64())).collect();
    out.push_str(&format!("lines {lines}\nfull_lines {full_lines}\n"));
    Ok(out)
}

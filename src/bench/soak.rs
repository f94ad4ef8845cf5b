//! The scale soak (issue 13 item 7): a generated cluster served by the test API server
//! (the real list/watch protocol, read by svcproxy's kube-rs client), `svcproxy sync
//! --watch` following it, a steady stream of endpoint changes, then an idle stretch. Every
//! sample records svcproxy's memory and CPU (its `iptables-restore` children included) and
//! what its metrics port reports: syncs full and partial, and kube-proxy's network
//! programming latency (change → rules in the kernel, measured from each slice's
//! trigger-time annotation, which the soak stamps when it makes the change).
//!
//! Run it in a fresh network namespace (`scripts/soak` does): svcproxy programs that
//! namespace's tables.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::apiserver::ApiServer;
use crate::gen::{self, GenSpec, Rng};

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub services: usize,
    pub endpoints: usize,
    /// Endpoint changes per second during the change phase.
    pub rate: u32,
    pub changes_for: Duration,
    pub idle_for: Duration,
    pub sample_every: Duration,
    /// The proxy mode: `iptables`, `ipvs` or `nftables`.
    pub mode: String,
    /// The iptables backend, `nft` or `legacy`: iptables mode's rules, IPVS mode's few
    /// (not given in nftables mode).
    pub backend: String,
    pub svcproxy: PathBuf,
    /// More flags for svcproxy (the IPVS VM's guest gives `--conntrack-max-per-core 0`).
    pub extra_args: Vec<String>,
    /// svcproxy's log goes here.
    pub log: PathBuf,
    /// How long the first (full) sync may take.
    pub first_sync_limit: Duration,
    /// What each change does to its slice.
    pub churn: Churn,
}

/// What one change does to a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Churn {
    /// Adds one endpoint, or takes the one added before away: the live state grows
    /// while more slices hold the extra endpoint.
    Toggle,
    /// Swaps the first endpoint's address for another and back: every slice keeps its
    /// size, so the live state does not grow.
    Replace,
}

impl Spec {
    /// svcproxy's mode flags.
    pub fn mode_args(&self) -> Vec<String> {
        let mut args = vec!["--mode".to_string(), self.mode.clone()];
        if self.mode != "nftables" {
            args.extend(["--iptables-backend".to_string(), self.backend.clone()]);
        }
        args
    }

    /// The mode as the summary names it: `iptables-nft`, `ipvs (iptables-legacy)`, `nftables`.
    pub fn label(&self) -> String {
        match self.mode.as_str() {
            "iptables" => format!("iptables-{}", self.backend),
            "nftables" => "nftables".to_string(),
            m => format!("{m} (iptables-{})", self.backend),
        }
    }
}

const METRICS: &str = "127.0.0.1:10249";
const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the first sync ended.
    pub t: f64,
    pub phase: &'static str,
    pub rss_kib: u64,
    /// svcproxy's CPU seconds so far, its waited-for children included.
    pub cpu_s: f64,
    pub changes: u64,
    pub full_syncs: u64,
    pub partial_syncs: u64,
    /// Network programming latency: cumulative count per bucket bound (seconds).
    pub latency: Vec<(f64, u64)>,
    /// nftables mode: the chains a cold start's interim table had still to convert, all
    /// families (`None`: the metric was not there).
    pub interim_chains: Option<u64>,
}

/// The run: samples and what it counted.
#[derive(Debug, Clone, Default)]
pub struct Soak {
    pub spec_line: String,
    pub first_sync_s: f64,
    pub samples: Vec<Sample>,
}

/// svcproxy, stopped with SIGTERM when dropped.
struct Running(Child);

impl Running {
    /// An error if svcproxy has exited (the soak cannot go on without it).
    fn alive(&mut self, log: &std::path::Path) -> anyhow::Result<()> {
        match self.0.try_wait() {
            Ok(Some(status)) => bail!("svcproxy exited ({status}); its log: {}", log.display()),
            Ok(None) => Ok(()),
            Err(e) => bail!("cannot wait for svcproxy: {e}"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid; it cannot touch memory.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The generated cluster's Services and EndpointSlices as API objects (the fixture
/// document left out: its node is given to svcproxy as flags).
pub fn objects(spec: &GenSpec) -> anyhow::Result<Vec<Value>> {
    let text = gen::yaml(spec);
    let mut out = Vec::with_capacity(spec.services * 2);
    for doc in text.split("\n---\n") {
        let v: Value = serde_saphyr::from_str(doc).context("a generated document")?;
        if matches!(v["kind"].as_str(), Some("Service" | "EndpointSlice")) {
            out.push(v);
        }
    }
    Ok(out)
}

/// Runs the soak. Needs a runtime (the API server is served from it).
pub async fn run(spec: &Spec) -> anyhow::Result<Soak> {
    let gen_spec = GenSpec { services: spec.services, endpoints: spec.endpoints, seed: super::SEED };
    let objects = objects(&gen_spec)?;
    let server = ApiServer::start().await.context("cannot start the test API server")?;
    let mut slices = Vec::new();
    for o in objects {
        if o["kind"] == "EndpointSlice" {
            slices.push(o.clone());
        }
        server.apply(o);
    }
    let log = std::fs::File::create(&spec.log).with_context(|| format!("{}", spec.log.display()))?;
    let child = Command::new(&spec.svcproxy)
        .args(["sync", "--watch", "--master", &server.url()])
        .args(spec.mode_args())
        .args(["--hostname-override", gen::NODE, "--cluster-cidr", "10.128.0.0/9", "--ip-family", "ipv4", "--nfacct", "false"])
        .args(["--metrics-bind-address", METRICS, "--healthz-bind-address", "127.0.0.1:10256", "--logging-format", "text"])
        .args(&spec.extra_args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {}", spec.svcproxy.display()))?;
    let pid = child.id();
    let mut running = Running(child);

    let start = Instant::now();
    loop {
        if logged_syncs(&spec.log).0 > 0 {
            break;
        }
        running.alive(&spec.log).context("before its first sync")?;
        if start.elapsed() > spec.first_sync_limit {
            bail!("no first sync within {:?} (see {})", spec.first_sync_limit, spec.log.display());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut soak = Soak {
        spec_line: format!(
            "{} services x {} endpoints, {} changes/s ({}) for {} s then {} s idle, {}",
            spec.services,
            spec.endpoints,
            spec.rate,
            if spec.churn == Churn::Toggle { "toggle" } else { "replace" },
            spec.changes_for.as_secs(),
            spec.idle_for.as_secs(),
            spec.label()
        ),
        first_sync_s: start.elapsed().as_secs_f64(),
        samples: Vec::new(),
    };

    let t0 = Instant::now();
    let mut rng = Rng::new(7);
    let mut changes = 0u64;
    let mut extra: Vec<bool> = vec![false; slices.len()];
    let mut saved: Vec<Option<String>> = vec![None; slices.len()];
    let every = Duration::from_secs_f64(1.0 / f64::from(spec.rate.max(1)));
    let mut next_change = t0;
    let mut next_sample = t0;
    let end = t0 + spec.changes_for + spec.idle_for;
    while Instant::now() < end {
        let now = Instant::now();
        let changing = now < t0 + spec.changes_for;
        if changing && now >= next_change {
            let i = rng.below(slices.len());
            match spec.churn {
                Churn::Toggle => toggle(&mut slices[i], &mut extra[i], i),
                Churn::Replace => replace(&mut slices[i], &mut saved[i], i),
            }
            server.apply(slices[i].clone());
            changes += 1;
            next_change += every;
        }
        if now >= next_sample {
            running.alive(&spec.log).with_context(|| format!("{:.0} s into the soak", now.duration_since(t0).as_secs_f64()))?;
            let m = scrape().await.unwrap_or_default();
            let (full_syncs, partial_syncs) = logged_syncs(&spec.log);
            soak.samples.push(Sample {
                t: now.duration_since(t0).as_secs_f64(),
                phase: if changing { "changes" } else { "idle" },
                rss_kib: rss_kib(pid).unwrap_or(0),
                cpu_s: cpu_s(pid).unwrap_or(0.0),
                changes,
                full_syncs,
                partial_syncs,
                ..m
            });
            next_sample += spec.sample_every;
        }
        let wake = if changing { next_change.min(next_sample) } else { next_sample };
        tokio::time::sleep(wake.saturating_duration_since(Instant::now()).min(Duration::from_millis(200))).await;
    }
    drop(running);
    Ok(soak)
}

/// Adds one ready endpoint to the slice, or takes the one added before away, and stamps
/// the trigger time.
fn toggle(slice: &mut Value, added: &mut bool, i: usize) {
    if let Some(eps) = slice["endpoints"].as_array_mut() {
        if *added {
            eps.pop();
        } else {
            let ip = format!("10.{}.{}.{}", 32 + i / 65536, (i / 256) % 256, i % 256);
            eps.push(json!({"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": "node-1", "zone": "zone-1"}));
        }
        *added = !*added;
    }
    stamp(slice);
}

/// Gives the first endpoint another address, or its own (kept in `saved`) back.
fn replace(slice: &mut Value, saved: &mut Option<String>, i: usize) {
    if let Some(addr) = slice["endpoints"][0]["addresses"][0].as_str().map(str::to_string) {
        let next = saved.take().unwrap_or_else(|| format!("10.{}.{}.{}", 32 + i / 65536, (i / 256) % 256, i % 256));
        if next != addr {
            *saved = Some(addr);
        }
        slice["endpoints"][0]["addresses"][0] = json!(next);
    }
    stamp(slice);
}

fn stamp(slice: &mut Value) {
    let now = jiff::Timestamp::try_from(SystemTime::now()).map(|t| t.to_string()).unwrap_or_default();
    slice["metadata"]["annotations"] = json!({ TRIGGER: now });
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime + cutime + cstime, in seconds.
fn cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11..15)?.iter().filter_map(|s| s.parse::<u64>().ok()).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// What one scrape of the metrics port says (a blocking HTTP/1.0 GET, off the runtime's
/// workers).
async fn scrape() -> anyhow::Result<Sample> {
    let body = tokio::task::spawn_blocking(|| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let addr: std::net::SocketAddr = METRICS.parse().map_err(std::io::Error::other)?;
        let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: soak\r\n\r\n")?;
        let mut body = String::new();
        conn.read_to_string(&mut body)?;
        Ok(body)
    })
    .await??;
    Ok(parse_metrics(&body))
}

fn value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

/// The syncs svcproxy has logged, full and partial (its `synced kind=Full` and
/// `kind=Partial` lines). Every mode logs them; kube-proxy's full and partial sync
/// histograms exist in iptables and nftables mode only, not in IPVS mode.
fn logged_syncs(log: &std::path::Path) -> (u64, u64) {
    count_syncs(&std::fs::read_to_string(log).unwrap_or_default())
}

/// [`logged_syncs`] of a log's text.
pub fn count_syncs(log: &str) -> (u64, u64) {
    log.lines().fold((0, 0), |(full, partial), line| {
        if line.contains(" synced kind=Full ") {
            (full + 1, partial)
        } else if line.contains(" synced kind=Partial ") {
            (full, partial + 1)
        } else {
            (full, partial)
        }
    })
}

/// The latency histogram a sample keeps, from the text exposition format.
pub fn parse_metrics(text: &str) -> Sample {
    let mut s = Sample::default();
    for line in text.lines() {
        if line.starts_with("svcproxy_nftables_interim_chains{") {
            *s.interim_chains.get_or_insert(0) += value(line).unwrap_or(0.0) as u64;
        }
        if let Some(rest) = line.strip_prefix("kubeproxy_network_programming_duration_seconds_bucket{") {
            let le = rest.split("le=\"").nth(1).and_then(|r| r.split('"').next());
            let bound = match le {
                Some("+Inf") => f64::INFINITY,
                Some(b) => match b.parse() {
                    Ok(b) => b,
                    Err(_) => continue,
                },
                None => continue,
            };
            let count = value(line).unwrap_or(0.0) as u64;
            match s.latency.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, c)) => *c += count,
                None => s.latency.push((bound, count)),
            }
        }
    }
    s.latency.sort_by(|a, b| a.0.total_cmp(&b.0));
    s
}

/// The `q` quantile of the observations between two cumulative histograms, interpolated
/// linearly inside its bucket (as Prometheus's `histogram_quantile` does).
pub fn quantile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> Option<f64> {
    let counts: Vec<(f64, u64)> = after
        .iter()
        .map(|(b, c)| (*b, c.saturating_sub(before.iter().find(|(bb, _)| bb == b).map_or(0, |(_, cc)| *cc))))
        .collect();
    let total = counts.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for (bound, count) in &counts {
        if *count as f64 >= rank {
            if bound.is_infinite() {
                return Some(lower.0);
            }
            let inside = (*count - lower.1) as f64;
            let frac = if inside > 0.0 { (rank - lower.1 as f64) / inside } else { 1.0 };
            return Some(lower.0 + (bound - lower.0) * frac);
        }
        lower = (*bound, *count);
    }
    None
}

impl Soak {
    /// Tab-separated samples (the plot's input and the report's).
    pub fn tsv(&self) -> String {
        let mut out = String::from("t_s\tphase\trss_mib\tcpu_s\tchanges\tfull_syncs\tpartial_syncs\tp50_s\tp99_s\n");
        let mut window: Option<&Sample> = None;
        for s in &self.samples {
            let (p50, p99) = match window {
                Some(w) => (quantile(&w.latency, &s.latency, 0.5), quantile(&w.latency, &s.latency, 0.99)),
                None => (None, None),
            };
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
            let _ = writeln!(
                out,
                "{:.1}\t{}\t{:.1}\t{:.2}\t{}\t{}\t{}\t{}\t{}",
                s.t, s.phase, s.rss_kib as f64 / 1024.0, s.cpu_s, s.changes, s.full_syncs, s.partial_syncs, f(p50), f(p99)
            );
            window = Some(s);
        }
        out
    }

    /// One row per minute of the change and idle phases: that minute's p50 and p99 (the
    /// observations between its first sample and the next minute's), and RSS at its end.
    pub fn minutes(&self) -> Vec<Minute> {
        let Some(first) = self.samples.first() else { return Vec::new() };
        let minute_of = |s: &Sample| ((s.t - first.t) / 60.0).floor() as u32 + 1;
        let mut out = Vec::new();
        let mut before = first;
        for (k, s) in self.samples.iter().enumerate().skip(1) {
            if self.samples.get(k + 1).is_some_and(|next| minute_of(next) == minute_of(s)) {
                continue;
            }
            out.push(Minute {
                minute: minute_of(s),
                phase: s.phase,
                p50_s: quantile(&before.latency, &s.latency, 0.5),
                p99_s: quantile(&before.latency, &s.latency, 0.99),
                rss_mib: s.rss_kib as f64 / 1024.0,
                interim_chains: s.interim_chains,
            });
            before = s;
        }
        out
    }

    /// What the run measured ([`Figures`]); `None` without samples.
    pub fn figures(&self) -> Option<Figures> {
        let (first, last) = (self.samples.first()?, self.samples.last()?);
        let changed = self.samples.iter().any(|s| s.phase == "changes");
        let q = |q| if changed { quantile(&first.latency, &last.latency, q) } else { None };
        let idle = self.samples.iter().find(|s| s.phase == "idle").map(|fi| (last.t - fi.t, last.cpu_s - fi.cpu_s)).filter(|(wall, _)| *wall > 0.0);
        let mib = |kib: u64| kib as f64 / 1024.0;
        Some(Figures {
            first_sync_s: self.first_sync_s,
            changes: last.changes,
            p50_s: q(0.5),
            p99_s: q(0.99),
            idle_s: idle.map_or(0.0, |(wall, _)| wall),
            idle_cpu_pct: idle.map(|(wall, cpu)| 100.0 * cpu / wall),
            rss_max_mib: mib(self.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0)),
            rss_last_mib: mib(last.rss_kib),
            full_after_first: last.full_syncs.saturating_sub(first.full_syncs),
            partial: last.partial_syncs.saturating_sub(first.partial_syncs),
        })
    }

    /// The summary: latency over the change phase, idle CPU, memory, syncs.
    pub fn summary(&self) -> String {
        let Some(f) = self.figures() else {
            return "no samples\n".into();
        };
        let first_t = self.samples.first().map_or(0.0, |s| s.t);
        let mut out = String::new();
        let _ = writeln!(out, "soak: {}", self.spec_line);
        let _ = writeln!(out, "first (full) sync: {:.1} s", f.first_sync_s);
        if let Some(lc) = self.samples.iter().rev().find(|s| s.phase == "changes") {
            let p = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} s"));
            let _ = writeln!(out, "changes sent: {} (the last sample of the change phase: {} at {:.0} s)", f.changes, lc.changes, lc.t - first_t);
            let _ = writeln!(out, "change -> kernel (kube-proxy's network programming latency): p50 {}, p99 {}", p(f.p50_s), p(f.p99_s));
        }
        if let Some(pct) = f.idle_cpu_pct {
            let _ = writeln!(out, "idle CPU: {pct:.2} % of a core over {:.0} s", f.idle_s);
        }
        let _ = writeln!(out, "RSS: max {:.1} MiB, last {:.1} MiB", f.rss_max_mib, f.rss_last_mib);
        let _ = writeln!(out, "syncs after the first: {} full, {} partial", f.full_after_first, f.partial);
        let (rss, p99) = trend(&self.minutes());
        let per_min = |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:+.3} {unit}/min"));
        let _ = writeln!(out, "trend over the change phase after its first minute: RSS {}, p99 {}", per_min(rss, "MiB"), per_min(p99, "s"));
        let (rss, p99) = trend_second_half(&self.minutes());
        let _ = writeln!(out, "trend over the change phase's second half: RSS {}, p99 {}", per_min(rss, "MiB"), per_min(p99, "s"));
        out
    }
}

/// One minute of a soak.
#[derive(Debug, Clone, PartialEq)]
pub struct Minute {
    /// 1 for the first minute after the first sync.
    pub minute: u32,
    pub phase: &'static str,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub rss_mib: f64,
    /// At the minute's end ([`Sample::interim_chains`]).
    pub interim_chains: Option<u64>,
}

/// The least-squares slope of `(x, y)` points per unit of x; `None` under three points.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    (sxx > 0.0).then(|| points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

/// minutes.tsv, then the change phase's trend after its first minute (the first minute
/// still carries the first sync's allocations): RSS MiB/min and p99 s/min.
pub fn minutes_tsv(minutes: &[Minute]) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mut out = String::from("minute\tphase\tp50_s\tp99_s\trss_mib\tinterim_chains\n");
    for m in minutes {
        let interim = m.interim_chains.map_or("-".to_string(), |n| n.to_string());
        let _ = writeln!(out, "{}\t{}\t{}\t{}\t{:.1}\t{interim}", m.minute, m.phase, f(m.p50_s), f(m.p99_s), m.rss_mib);
    }
    out
}

/// The change phase's trend after its first minute: (RSS MiB/min, p99 s/min).
pub fn trend(minutes: &[Minute]) -> (Option<f64>, Option<f64>) {
    let changing: Vec<&Minute> = minutes.iter().filter(|m| m.phase == "changes" && m.minute > 1).collect();
    let rss: Vec<(f64, f64)> = changing.iter().map(|m| (f64::from(m.minute), m.rss_mib)).collect();
    let p99: Vec<(f64, f64)> = changing.iter().filter_map(|m| Some((f64::from(m.minute), m.p99_s?))).collect();
    (slope(&rss), slope(&p99))
}

/// The trend over the change phase's second half: a memory that climbs and then levels
/// off (an allocator re-filling its heap) slopes over the whole phase but not here.
pub fn trend_second_half(minutes: &[Minute]) -> (Option<f64>, Option<f64>) {
    let last = minutes.iter().filter(|m| m.phase == "changes").map(|m| m.minute).max().unwrap_or(0);
    let later: Vec<Minute> = minutes.iter().filter(|m| m.phase == "changes" && m.minute > last / 2 && m.minute > 1).cloned().collect();
    trend(&later)
}

/// What one soak measured, as DIR/figures.tsv keeps it (`name<TAB>value`, `-` for a figure
/// the run has none of) and `svcproxy-bench soak-ratios` compares it across modes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub first_sync_s: f64,
    pub changes: u64,
    /// Network programming latency over the change phase.
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    /// The idle phase's length (0: none) and svcproxy's CPU in it, % of one core.
    pub idle_s: f64,
    pub idle_cpu_pct: Option<f64>,
    pub rss_max_mib: f64,
    pub rss_last_mib: f64,
    pub full_after_first: u64,
    pub partial: u64,
}

/// A row of the comparison: its name in figures.tsv, its label, and whether a ratio of
/// two runs says something (counts are shown as they are).
const ROWS: [(&str, &str, bool); 9] = [
    ("first_sync_s", "first (full) sync, s", true),
    ("p50_s", "change -> kernel p50, s", true),
    ("p99_s", "change -> kernel p99, s", true),
    ("idle_cpu_pct", "idle CPU, % of a core", true),
    ("rss_max_mib", "RSS max, MiB", true),
    ("rss_last_mib", "RSS at the end, MiB", true),
    ("changes", "changes sent", false),
    ("full_after_first", "full syncs after the first", false),
    ("partial", "partial syncs", false),
];

impl Figures {
    fn values(&self) -> [Option<f64>; 9] {
        [
            Some(self.first_sync_s),
            self.p50_s,
            self.p99_s,
            self.idle_cpu_pct,
            Some(self.rss_max_mib),
            Some(self.rss_last_mib),
            Some(self.changes as f64),
            Some(self.full_after_first as f64),
            Some(self.partial as f64),
        ]
    }

    /// figures.tsv.
    pub fn tsv(&self) -> String {
        let mut out = String::new();
        for ((name, _, _), v) in ROWS.iter().zip(self.values()) {
            let _ = writeln!(out, "{name}\t{}", v.map_or("-".to_string(), |v| format!("{v:.3}")));
        }
        out
    }
}

/// A figures.tsv read back: each row's value, `None` for `-` or a row it lacks.
pub fn read_figures(text: &str) -> anyhow::Result<Vec<Option<f64>>> {
    let mut values = vec![None; ROWS.len()];
    let mut known = 0;
    for (n, line) in text.lines().enumerate() {
        let (name, value) = line.split_once('\t').with_context(|| format!("line {}: want NAME<TAB>VALUE", n + 1))?;
        let Some(i) = ROWS.iter().position(|(r, _, _)| *r == name) else { continue };
        known += 1;
        values[i] = match value {
            "-" => None,
            v => Some(v.parse().with_context(|| format!("line {}: {name}: {v:?} is not a number", n + 1))?),
        };
    }
    if known == 0 {
        bail!("no figure in it (want lines like `first_sync_s<TAB>12.5`)");
    }
    Ok(values)
}

/// A ratio with two significant digits at least (0.70x, 0.0045x), so a small one does
/// not read as zero.
fn ratio(r: f64) -> String {
    match r {
        r if r == 0.0 || r >= 0.1 => format!("{r:.2}x"),
        r if r >= 0.001 => format!("{r:.4}x"),
        r => format!("{r:.1e}x"),
    }
}

/// The markdown table comparing runs with the first (`base`): each figure, then for every
/// other run its figure and its ratio to the base's.
pub fn ratios(runs: &[(String, Vec<Option<f64>>)]) -> String {
    let Some((base, base_values)) = runs.first() else {
        return String::new();
    };
    let mut out = format!("| figure | {base} |");
    let mut rule = String::from("|---|---:|");
    for (label, _) in &runs[1..] {
        let _ = write!(out, " {label} | {label} / {base} |");
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(out, "\n{rule}");
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.2}") });
    for (i, (_, label, divide)) in ROWS.iter().enumerate() {
        let b = base_values.get(i).copied().flatten();
        let _ = write!(out, "| {label} | {} |", show(b));
        for (_, values) in &runs[1..] {
            let v = values.get(i).copied().flatten();
            let r = match (divide, v, b) {
                (true, Some(v), Some(b)) if b > 0.0 => ratio(v / b),
                (true, _, _) => "-".to_string(),
                (false, _, _) => "—".to_string(),
            };
            let _ = write!(out, " {} | {r} |", show(v));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_are_counted_from_the_log_in_every_mode() {
        let log = "2026-11-27T04:39:25Z  INFO svcproxy::runner::watch: synced kind=Full seconds=3.97 restore_lines=127 ipvs_ops=18500\n\
            2026-11-27T04:39:26Z  WARN svcproxy::runner::watch: something kind=Full \n\
            2026-11-27T04:39:52Z  INFO svcproxy::runner::watch: synced kind=Partial seconds=0.0026 restore_lines=0 ipvs_ops=0\n\
            2026-11-27T04:40:21Z  INFO svcproxy::runner::watch: synced kind=Partial seconds=0.0002 restore_lines=0 ipvs_ops=3\n";
        assert_eq!(count_syncs(log), (1, 2));
        assert_eq!(count_syncs(""), (0, 0));
    }

    #[test]
    fn metrics_are_read_per_family_and_summed() {
        let text = "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 2\n\
            kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 7\n\
            kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.25\"} 3\n\
            kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.5\"} 8\n\
            kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 10\n\
            svcproxy_nftables_interim_chains{ip_family=\"IPv4\"} 40\n\
            svcproxy_nftables_interim_chains{ip_family=\"IPv6\"} 2\n";
        let s = parse_metrics(text);
        assert_eq!(s.interim_chains, Some(42), "the interim's chains left, all families");
        assert_eq!(parse_metrics("").interim_chains, None);
        assert_eq!((s.full_syncs, s.partial_syncs), (0, 0), "sync counts come from the log, not these (IPVS mode has none)");
        assert_eq!(s.latency, vec![(0.25, 3), (0.5, 8), (f64::INFINITY, 10)]);
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_of_the_window() {
        let before = vec![(0.25, 0), (0.5, 0), (1.0, 0), (f64::INFINITY, 0)];
        let after = vec![(0.25, 50), (0.5, 90), (1.0, 100), (f64::INFINITY, 100)];
        assert_eq!(quantile(&before, &after, 0.5), Some(0.25));
        assert_eq!(quantile(&before, &after, 0.7), Some(0.25 + 0.25 * 0.5));
        assert_eq!(quantile(&after, &after, 0.5), None, "nothing observed in the window");
        let later = vec![(0.25, 50), (0.5, 90), (1.0, 110), (f64::INFINITY, 110)];
        assert_eq!(quantile(&after, &later, 0.5), Some(0.75), "only the window's observations count");
    }

    /// A sample as the tests write it: t, phase, RSS (MiB), CPU seconds, partial syncs,
    /// latency histogram.
    type Row = (f64, &'static str, u64, f64, u64, Vec<(f64, u64)>);

    fn run_of(samples: Vec<Row>) -> Soak {
        let samples = samples
            .into_iter()
            .map(|(t, phase, rss_mib, cpu_s, partial_syncs, latency)| Sample {
                t,
                phase,
                rss_kib: rss_mib * 1024,
                cpu_s,
                changes: (t * 2.0) as u64,
                full_syncs: 1,
                partial_syncs,
                latency,
                interim_chains: (t < 100.0).then_some(30),
            })
            .collect();
        Soak { spec_line: "test".into(), first_sync_s: 12.5, samples }
    }

    #[test]
    fn minutes_take_their_own_observations_and_the_trend_is_the_slope() {
        let h = |n: u64| vec![(1.0, n), (4.0, 2 * n), (f64::INFINITY, 2 * n)];
        // Two samples a minute; the latency of minute 2 is all in the (1, 4] bucket.
        let soak = run_of(vec![
            (0.0, "changes", 100, 0.0, 0, h(0)),
            (30.0, "changes", 100, 0.0, 0, h(5)),
            (59.0, "changes", 101, 0.0, 0, h(10)),
            (90.0, "changes", 102, 0.0, 0, vec![(1.0, 10), (4.0, 30), (f64::INFINITY, 30)]),
            (119.0, "changes", 104, 0.0, 0, vec![(1.0, 10), (4.0, 40), (f64::INFINITY, 40)]),
            (150.0, "idle", 106, 0.0, 0, vec![(1.0, 10), (4.0, 40), (f64::INFINITY, 40)]),
        ]);
        let m = soak.minutes();
        assert_eq!(m.iter().map(|m| (m.minute, m.phase, m.rss_mib)).collect::<Vec<_>>(), vec![(1, "changes", 101.0), (2, "changes", 104.0), (3, "idle", 106.0)]);
        assert_eq!(m[0].p50_s, Some(1.0), "minute 1: half its 20 observations at or under 1 s");
        assert!(m[1].p50_s.is_some_and(|p| p > 1.0 && p < 4.0), "minute 2 sees only its own: {:?}", m[1].p50_s);
        assert_eq!(m[2].p99_s, None, "nothing observed in the idle minute");
        assert_eq!(slope(&[(1.0, 1.0), (2.0, 3.0), (3.0, 5.0)]), Some(2.0));
        assert_eq!(slope(&[(1.0, 1.0), (2.0, 3.0)]), None, "two points are no trend");
        assert_eq!(trend(&m), (None, None), "one change minute after the first is no trend");
        let levels_off: Vec<Minute> = [60.0, 64.0, 68.0, 72.0, 72.0, 72.0, 72.0, 72.0]
            .iter()
            .enumerate()
            .map(|(i, &rss_mib)| Minute { minute: i as u32 + 1, phase: "changes", p50_s: None, p99_s: None, rss_mib, interim_chains: None })
            .collect();
        assert!(trend(&levels_off).0.is_some_and(|s| s > 1.0), "the whole phase slopes up");
        assert_eq!(trend_second_half(&levels_off).0, Some(0.0), "its second half is flat");
        assert!(minutes_tsv(&m).starts_with("minute\tphase\tp50_s\tp99_s\trss_mib\tinterim_chains\n1\tchanges\t1.000\t"), "{}", minutes_tsv(&m));
        assert_eq!(m.iter().map(|m| m.interim_chains).collect::<Vec<_>>(), [Some(30), None, None], "each minute's last sample");
    }

    #[test]
    fn figures_are_read_from_the_phases_and_kept_in_their_file() {
        let (none, some) = (vec![(0.5, 0), (1.0, 0), (f64::INFINITY, 0)], vec![(0.5, 10), (1.0, 20), (f64::INFINITY, 20)]);
        let soak = run_of(vec![
            (0.0, "changes", 100, 1.0, 0, none),
            (10.0, "changes", 120, 3.0, 4, some.clone()),
            (20.0, "idle", 110, 3.5, 5, some.clone()),
            (30.0, "idle", 110, 3.6, 5, some),
        ]);
        let f = soak.figures().expect("samples");
        assert_eq!((f.first_sync_s, f.changes, f.full_after_first, f.partial), (12.5, 60, 0, 5));
        assert_eq!((f.p50_s, f.rss_max_mib, f.rss_last_mib, f.idle_s), (Some(0.5), 120.0, 110.0, 10.0));
        assert!(f.p99_s.is_some_and(|p| (p - 0.99).abs() < 1e-9), "{:?}", f.p99_s);
        assert!(f.idle_cpu_pct.is_some_and(|p| (p - 1.0).abs() < 1e-9), "{:?}", f.idle_cpu_pct);
        assert!(soak.summary().contains("idle CPU: 1.00 % of a core over 10 s\n"), "{}", soak.summary());
        let back = read_figures(&f.tsv()).expect("its own file reads");
        assert_eq!(back, vec![Some(12.5), Some(0.5), Some(0.99), Some(1.0), Some(120.0), Some(110.0), Some(60.0), Some(0.0), Some(5.0)]);

        let idle_only = run_of(vec![(0.0, "idle", 50, 0.0, 0, vec![]), (5.0, "idle", 50, 0.0, 0, vec![])]);
        let f = idle_only.figures().expect("samples");
        assert_eq!((f.p50_s, f.p99_s, f.idle_cpu_pct), (None, None, Some(0.0)), "no change phase: no latency");
        assert_eq!(read_figures(&f.tsv()).expect("reads")[1], None, "a missing figure is `-` and reads back as none");
        assert!(read_figures("first_sync_s\tfast\n").is_err_and(|e| e.to_string().contains("line 1: first_sync_s")));
        assert!(read_figures("apisoak\tipvs\tfigures.tsv\tfirst_sync_s\t1\n").is_err_and(|e| e.to_string().contains("no figure")), "a file with no known row is an error, not a row of dashes");
    }

    #[test]
    fn ratios_divide_every_run_by_the_first() {
        let base = ("iptables-legacy".to_string(), vec![Some(50.0), Some(8.0), Some(10.0), Some(2.0), Some(200.0), Some(190.0), Some(100.0), Some(0.0), Some(80.0)]);
        let run = ("ipvs".to_string(), vec![Some(25.0), Some(0.8), None, Some(0.5), Some(150.0), Some(140.0), Some(100.0), Some(0.0), Some(100.0)]);
        let table = ratios(&[base, run]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "| figure | iptables-legacy | ipvs | ipvs / iptables-legacy |");
        assert!(lines.contains(&"| first (full) sync, s | 50 | 25 | 0.50x |"), "{table}");
        assert!(lines.contains(&"| change -> kernel p50, s | 8 | 0.80 | 0.10x |"), "{table}");
        assert!(lines.contains(&"| change -> kernel p99, s | 10 | - | - |"), "a figure one run lacks has no ratio: {table}");
        assert!(lines.contains(&"| partial syncs | 80 | 100 | — |"), "counts are not divided: {table}");
        assert_eq!(lines.len(), 2 + ROWS.len());
        assert_eq!((ratio(0.7), ratio(0.00045), ratio(0.0045), ratio(0.0)), ("0.70x".into(), "4.5e-4x".into(), "0.0045x".into(), "0.00x".into()));
    }

    #[test]
    fn a_toggled_slice_gains_then_loses_one_endpoint_and_is_stamped() {
        let mut slice = json!({"metadata": {"name": "s"}, "endpoints": [{"addresses": ["10.128.0.2"]}]});
        let mut added = false;
        toggle(&mut slice, &mut added, 300);
        assert_eq!(slice["endpoints"].as_array().map(Vec::len), Some(2));
        assert_eq!(slice["endpoints"][1]["addresses"][0], "10.32.1.44");
        assert!(slice["metadata"]["annotations"][TRIGGER].as_str().is_some_and(|t| t.ends_with('Z')));
        toggle(&mut slice, &mut added, 300);
        assert_eq!(slice["endpoints"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_replaced_slice_swaps_its_first_address_and_back_keeping_its_size() {
        let mut slice = json!({"metadata": {"name": "s"}, "endpoints": [{"addresses": ["10.128.0.2"]}, {"addresses": ["10.128.0.3"]}]});
        let mut saved = None;
        replace(&mut slice, &mut saved, 300);
        assert_eq!(slice["endpoints"][0]["addresses"][0], "10.32.1.44");
        assert_eq!(slice["endpoints"].as_array().map(Vec::len), Some(2));
        assert!(slice["metadata"]["annotations"][TRIGGER].as_str().is_some_and(|t| t.ends_with('Z')));
        replace(&mut slice, &mut saved, 300);
        assert_eq!(slice["endpoints"][0]["addresses"][0], "10.128.0.2");
        assert_eq!(slice["endpoints"][1]["addresses"][0], "10.128.0.3");
        replace(&mut slice, &mut saved, 300);
        assert_eq!(slice["endpoints"][0]["addresses"][0], "10.32.1.44");
    }
}

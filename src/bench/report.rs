//! BENCHMARKS.md's results section, written from the benchmarks' own output: criterion's
//! estimates (`target/criterion/**/new/{benchmark,estimates}.json`, the median of each
//! benchmark's samples) and the tab-separated files `scripts/bench` and
//! `scripts/bench-kernel` write (the median of their runs). Nothing here measures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

/// The sizes (services, 10 endpoints each) of the in-process tables.
pub const SIZES: [usize; 4] = [1000, 5000, 10000, 50000];
/// The size the one-endpoint change is made at.
pub const CHANGE_SIZE: usize = 10000;

/// One run's value in a kernel measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    Value(f64),
    /// The run was stopped after this many seconds.
    TimedOut(f64),
}

/// Every benchmark output the report reads.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// criterion benchmark id → median time of one iteration, seconds.
    pub criterion: BTreeMap<String, f64>,
    /// services → (peak RSS in KiB, wall seconds) per run of a one-shot render.
    pub rss: BTreeMap<usize, Vec<(f64, f64)>>,
    /// services → restore sizes of the one-endpoint change.
    pub sizes: BTreeMap<usize, super::RestoreSize>,
    /// (backend, services, metric) → samples.
    pub kernel: BTreeMap<(String, usize, String), Vec<Sample>>,
    /// `key: value` lines describing the machine.
    pub machine: Vec<(String, String)>,
}

impl Inputs {
    /// Reads whatever exists: `criterion` (criterion's output directory) and, in
    /// `results`, `rss.tsv`, `restore-size.tsv`, `kernel.tsv` and `machine.txt`.
    pub fn read(criterion: &Path, results: &Path) -> anyhow::Result<Inputs> {
        let optional = |name: &str| -> anyhow::Result<String> {
            let p = results.join(name);
            match std::fs::read_to_string(&p) {
                Ok(t) => Ok(t),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
            }
        };
        Ok(Inputs {
            criterion: read_criterion(criterion)?,
            rss: parse_rss(&optional("rss.tsv")?)?,
            sizes: parse_sizes(&optional("restore-size.tsv")?)?,
            kernel: parse_kernel(&optional("kernel.tsv")?)?,
            machine: parse_machine(&optional("machine.txt")?),
        })
    }
}

/// criterion's medians under `dir` (missing directory: none), by benchmark id.
pub fn read_criterion(dir: &Path) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    if dir.is_dir() {
        walk_criterion(dir, &mut out)?;
    }
    Ok(out)
}

fn walk_criterion(dir: &Path, out: &mut BTreeMap<String, f64>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            if let Some((id, median)) = read_estimate(&path)? {
                out.insert(id, median);
            }
        } else {
            walk_criterion(&path, out)?;
        }
    }
    Ok(())
}

/// (benchmark id, median seconds) from one `new/` directory, if it holds both files.
fn read_estimate(dir: &Path) -> anyhow::Result<Option<(String, f64)>> {
    let (bench, est) = (dir.join("benchmark.json"), dir.join("estimates.json"));
    if !bench.is_file() || !est.is_file() {
        return Ok(None);
    }
    let json = |p: &Path| -> anyhow::Result<serde_json::Value> {
        let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))
    };
    let id = json(&bench)?["full_id"].as_str().map(str::to_string).with_context(|| format!("{}: no full_id", bench.display()))?;
    let ns = json(&est)?["median"]["point_estimate"].as_f64().with_context(|| format!("{}: no median", est.display()))?;
    Ok(Some((id, ns / 1e9)))
}

fn fields(line: &str) -> Option<Vec<&str>> {
    let line = line.trim_end();
    (!line.is_empty() && !line.starts_with('#')).then(|| line.split('\t').collect())
}

fn num<T: std::str::FromStr>(s: &str, what: &str, line: &str) -> anyhow::Result<T> {
    s.trim().parse().map_err(|_| anyhow::anyhow!("{what} {s:?} is not a number in line {line:?}"))
}

/// `services  endpoints  run  max_rss_kib  wall_seconds`
pub fn parse_rss(text: &str) -> anyhow::Result<BTreeMap<usize, Vec<(f64, f64)>>> {
    let mut out: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for line in text.lines() {
        let Some(f) = fields(line) else { continue };
        anyhow::ensure!(f.len() == 5, "rss.tsv: expected 5 fields in {line:?}");
        out.entry(num(f[0], "services", line)?).or_default().push((num(f[3], "RSS", line)?, num(f[4], "wall", line)?));
    }
    Ok(out)
}

/// `services  endpoints  full  kube_proxy  partial  sync`
pub fn parse_sizes(text: &str) -> anyhow::Result<BTreeMap<usize, super::RestoreSize>> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(f) = fields(line) else { continue };
        anyhow::ensure!(f.len() == 6, "restore-size.tsv: expected 6 fields in {line:?}");
        let n = |i: usize| num::<usize>(f[i], "size", line);
        out.insert(n(0)?, super::RestoreSize { full: n(2)?, kube_proxy: n(3)?, partial: n(4)?, sync: n(5)? });
    }
    Ok(out)
}

/// `backend  services  metric  run  value`, the value a number or `timeout:SECONDS`.
pub fn parse_kernel(text: &str) -> anyhow::Result<BTreeMap<(String, usize, String), Vec<Sample>>> {
    let mut out: BTreeMap<(String, usize, String), Vec<Sample>> = BTreeMap::new();
    for line in text.lines() {
        let Some(f) = fields(line) else { continue };
        anyhow::ensure!(f.len() == 5, "kernel.tsv: expected 5 fields in {line:?}");
        let sample = match f[4].strip_prefix("timeout:") {
            Some(secs) => Sample::TimedOut(num(secs, "timeout", line)?),
            None => Sample::Value(num(f[4], "value", line)?),
        };
        out.entry((f[0].to_string(), num(f[1], "services", line)?, f[2].to_string())).or_default().push(sample);
    }
    Ok(out)
}

/// `key: value` lines.
pub fn parse_machine(text: &str) -> Vec<(String, String)> {
    text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// The median (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// Seconds, in a unit that keeps three significant digits or so.
pub fn fmt_secs(s: f64) -> String {
    let trim = |t: String| if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.').to_string() } else { t };
    if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        let ms = s * 1e3;
        trim(if ms < 10.0 { format!("{ms:.2}") } else { format!("{ms:.1}") }) + " ms"
    } else {
        trim(format!("{:.1}", s * 1e6)) + " µs"
    }
}

fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

fn fmt_count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const NONE: &str = "—";
const MIB: f64 = 1024.0 * 1024.0;

/// A kernel measurement summarised: its median, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Summary {
    Median { value: f64, runs: usize },
    TimedOut(f64),
    Missing,
}

impl Summary {
    pub fn of(samples: Option<&Vec<Sample>>) -> Summary {
        let Some(samples) = samples else { return Summary::Missing };
        let values: Vec<f64> = samples.iter().filter_map(|s| if let Sample::Value(v) = s { Some(*v) } else { None }).collect();
        match median(&values) {
            Some(value) => Summary::Median { value, runs: values.len() },
            None => samples
                .iter()
                .find_map(|s| if let Sample::TimedOut(t) = s { Some(Summary::TimedOut(*t)) } else { None })
                .unwrap_or(Summary::Missing),
        }
    }

    pub fn value(self) -> Option<f64> {
        if let Summary::Median { value, .. } = self { Some(value) } else { None }
    }

    fn secs(self) -> String {
        match self {
            Summary::Median { value, .. } => fmt_secs(value),
            Summary::TimedOut(t) => format!("timed out after {t:.0} s"),
            Summary::Missing => NONE.into(),
        }
    }

    fn count(self) -> String {
        match self {
            Summary::Median { value, .. } => fmt_count(value.round() as usize),
            other => other.secs(),
        }
    }
}

impl Inputs {
    fn bench(&self, id: &str) -> Option<f64> {
        self.criterion.get(id).copied()
    }

    fn k(&self, backend: &str, services: usize, metric: &str) -> Summary {
        Summary::of(self.kernel.get(&(backend.to_string(), services, metric.to_string())))
    }

    fn kernel_backends(&self) -> Vec<String> {
        let mut b: Vec<String> = self.kernel.keys().map(|k| k.0.clone()).collect();
        b.dedup();
        b.sort_by_key(|b| (b != "nft", b.clone()));
        b.dedup();
        b
    }

    fn kernel_sizes(&self, backend: &str, metric: &str) -> Vec<usize> {
        let mut s: Vec<usize> = self.kernel.keys().filter(|k| k.0 == backend && k.2 == metric).map(|k| k.1).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// The fastest bare restore of the full text (any input shape), median.
    fn best_bare(&self, backend: &str, services: usize) -> Option<f64> {
        ["bare_single", "bare_chunked", "bare_onepass"].iter().filter_map(|m| self.k(backend, services, m).value()).reduce(f64::min)
    }

    /// svcproxy's in-process work on a full sync: everything but iptables-save/-restore.
    fn own_work(&self, backend: &str, services: usize, prefix: &str) -> Option<f64> {
        ["load", "render", "text", "compute"].iter().map(|p| self.k(backend, services, &format!("{prefix}_{p}")).value()).sum()
    }
}

fn cell(v: Option<f64>) -> String {
    v.map_or(NONE.into(), fmt_secs)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => fmt_ratio(a / b),
        _ => NONE.into(),
    }
}

fn header(out: &mut String, first: &str, cols: &[String]) {
    let _ = writeln!(out, "| {first} | {} |", cols.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(cols.len()));
}

/// The whole results section (markdown).
pub fn render(i: &Inputs) -> String {
    let mut out = String::new();
    machine(&mut out, i);
    targets(&mut out, i);
    in_process(&mut out, i);
    one_endpoint(&mut out, i);
    rss(&mut out, i);
    kernel(&mut out, i);
    out
}

fn machine(out: &mut String, i: &Inputs) {
    out.push_str("### Machine\n\n");
    if i.machine.is_empty() {
        out.push_str("(not recorded)\n\n");
        return;
    }
    for (k, v) in &i.machine {
        let _ = writeln!(out, "* {k}: {v}");
    }
    out.push('\n');
}

/// A target's verdict from its measured value.
fn verdict(measured: Option<f64>, ok: impl Fn(f64) -> bool) -> &'static str {
    match measured {
        Some(v) if ok(v) => "met",
        Some(_) => "**missed**",
        None => "not measured",
    }
}

fn targets(out: &mut String, i: &Inputs) {
    let n = CHANGE_SIZE;
    out.push_str("### Targets (10,000 services × 10 endpoints)\n\n| target | measured | verdict |\n|---|---|---|\n");
    let render = i.bench(&format!("render/iptables/{n}"));
    let write = i.bench(&format!("write_bytes/lines/{n}"));
    let _ = writeln!(out, "| full iptables render ≤ 150 ms | {} | {} |", cell(render), verdict(render, |v| v <= 0.150));
    let r = render.zip(write).map(|(a, b)| a / b);
    let _ = writeln!(out, "| render ≤ 1.5 × writing the same bytes | {} | {} |", r.map_or(NONE.into(), fmt_ratio), verdict(r, |v| v <= 1.5));
    let change = i.bench(&format!("one_endpoint/svcproxy_partial/{n}"));
    let _ = writeln!(out, "| one-endpoint change: change → restore text ≤ 1 ms | {} | {} |", cell(change), verdict(change, |v| v <= 1e-3));
    let lines = i.sizes.get(&n).map(|s| s.partial.max(s.sync));
    let _ = writeln!(
        out,
        "| one-endpoint change: ≤ 50 restore lines | {} | {} |",
        i.sizes.get(&n).map_or(NONE.into(), |s| format!("{} (watch), {} (one-shot sync)", s.partial, s.sync)),
        verdict(lines.map(|l| l as f64), |v| v <= 50.0)
    );
    for b in i.kernel_backends() {
        for s in i.kernel_sizes(&b, "sync_cli") {
            let over = i.k(&b, s, "sync_cli").value().zip(i.best_bare(&b, s)).map(|(a, b)| a / b - 1.0);
            let _ = writeln!(
                out,
                "| full sync ≤ 5 % above bare iptables-restore ({b}, {}) | {} | {} |",
                fmt_count(s),
                over.map_or_else(|| i.k(&b, s, "sync_cli").secs(), |o| format!("{:+.0} %", o * 100.0)),
                verdict(over, |v| v <= 0.05)
            );
        }
    }
    let rss = i.rss.get(&n).and_then(|r| median(&r.iter().map(|x| x.0).collect::<Vec<_>>())).map(|kib| kib / 1024.0);
    // The target is in MB (10^6 bytes); GNU time reports KiB.
    let cell = |m: f64| format!("{m:.0} MiB ({:.0} MB)", m * MIB / 1e6);
    let _ = writeln!(out, "| peak RSS of a one-shot render ≤ 150 MB | {} | {} |\n", rss.map_or(NONE.into(), cell), verdict(rss, |v| v * MIB <= 150e6));
}

fn in_process(out: &mut String, i: &Inputs) {
    out.push_str("### In process (`cargo bench`; medians; 10 endpoints per service)\n\n");
    let cols: Vec<String> = SIZES.iter().map(|n| format!("{} services", fmt_count(*n))).collect();
    header(out, "", &cols);
    let row = |out: &mut String, name: &str, f: &dyn Fn(usize) -> String| {
        let cells: Vec<String> = SIZES.iter().map(|n| f(*n)).collect();
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    };
    let b = |id: &str, n: usize| i.bench(&format!("{id}/{n}"));
    row(out, "parse + track (YAML text → committed trackers)", &|n| cell(b("parse_track", n)));
    row(out, "full iptables render (trackers → restore text)", &|n| cell(b("render/iptables", n)));
    row(out, "  of which: per-service rules", &|n| cell(b("render/ruleset", n)));
    row(out, "  of which: restore text from them", &|n| cell(b("render/text", n)));
    row(out, "write the same bytes (line by line)", &|n| cell(b("write_bytes/lines", n)));
    row(out, "**render ÷ write the same bytes**", &|n| ratio(b("render/iptables", n), b("write_bytes/lines", n)));
    row(out, "copy the same bytes (one memcpy)", &|n| cell(b("write_bytes/copy", n)));
    row(out, "full IPVS plan (trackers → plan)", &|n| cell(b("ipvs/plan", n)));
    row(out, "IPVS plan of a one-endpoint change (changed service only)", &|n| cell(b("ipvs_change/plan_partial", n)));
    row(out, "IPVS full plan keeping each port's part (a full sync's)", &|n| cell(b("ipvs_change/planner_new", n)));
    row(out, "IPVS partial sync of a one-endpoint change (fake kernels)", &|n| cell(b("ipvs_change/sync_partial", n)));
    row(out, "full restore input (lines)", &|n| i.sizes.get(&n).map_or(NONE.into(), |s| fmt_count(s.full)));
    out.push('\n');
}

fn one_endpoint(out: &mut String, i: &Inputs) {
    out.push_str("### One endpoint added to one service (in process; medians)\n\n");
    out.push_str("| services | tracker commit + rules update | svcproxy: change → restore text | kube-proxy: change → restore text | kube-proxy ÷ svcproxy | svcproxy restore lines (watch / one-shot sync) | kube-proxy restore lines | ÷ |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut sizes: Vec<usize> = i.sizes.keys().copied().collect();
    for id in i.criterion.keys().filter_map(|k| k.strip_prefix("one_endpoint/commit_update/")) {
        sizes.extend(id.parse::<usize>().ok());
    }
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let b = |id: &str| i.bench(&format!("one_endpoint/{id}/{n}"));
        let s = i.sizes.get(&n);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_count(n),
            cell(b("commit_update")),
            cell(b("svcproxy_partial")),
            cell(b("kube_proxy_partial")),
            ratio(b("kube_proxy_partial"), b("svcproxy_partial")),
            s.map_or(NONE.into(), |s| format!("{} / {}", s.partial, s.sync)),
            s.map_or(NONE.into(), |s| fmt_count(s.kube_proxy)),
            s.map_or(NONE.into(), |s| ratio(Some(s.kube_proxy as f64), Some(s.partial.max(1) as f64))),
        );
    }
    out.push('\n');
}

fn rss(out: &mut String, i: &Inputs) {
    out.push_str("### One-shot `svcproxy render` (the release binary, measured from outside; medians)\n\n| services | peak RSS | wall | runs |\n|---:|---:|---:|---:|\n");
    for (n, runs) in &i.rss {
        let kib = median(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
        let wall = median(&runs.iter().map(|r| r.1).collect::<Vec<_>>());
        let _ = writeln!(out, "| {} | {} | {} | {} |", fmt_count(*n), kib.map_or(NONE.into(), |k| format!("{:.0} MiB", k / 1024.0)), cell(wall), runs.len());
    }
    if i.rss.is_empty() {
        out.push_str("| — | not measured | | |\n");
    }
    out.push('\n');
}

fn kernel(out: &mut String, i: &Inputs) {
    out.push_str("### Through the kernel (fresh network namespace per run; medians)\n\n");
    let backends = i.kernel_backends();
    if backends.is_empty() {
        out.push_str("Not measured (run `sudo ./scripts/bench-kernel`).\n\n");
        return;
    }
    for b in &backends {
        full_sync(out, i, b);
    }
    change(out, i, &backends);
    nft_chunking(out, i);
}

fn full_sync(out: &mut String, i: &Inputs, b: &str) {
    let _ = writeln!(out, "#### Full sync into an empty kernel, iptables-{b}\n");
    out.push_str("| services | restore lines | `svcproxy sync` (wall) | its own work | its iptables-save | its iptables-restore | bare iptables-restore of the same text (best) | sync ÷ bare |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut sizes = i.kernel_sizes(b, "sync_cli");
    sizes.extend(i.kernel_sizes(b, "bare_single"));
    sizes.sort_unstable();
    sizes.dedup();
    for &n in &sizes {
        let wall = i.k(b, n, "sync_cli");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_count(n),
            i.k(b, n, "sync_lines").count(),
            wall.secs(),
            cell(i.own_work(b, n, "sync")),
            i.k(b, n, "sync_read").secs(),
            i.k(b, n, "sync_restore").secs(),
            cell(i.best_bare(b, n)),
            ratio(wall.value(), i.best_bare(b, n)),
        );
    }
    out.push_str("\n| services | svcproxy: load (parse + track) | render | restore text | delta | bare: one input | bare: chunks, one process each | bare: chunks, one process | chunks |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for &n in &sizes {
        let k = |m: &str| i.k(b, n, m);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_count(n),
            k("sync_load").secs(),
            k("sync_render").secs(),
            k("sync_text").secs(),
            k("sync_compute").secs(),
            k("bare_single").secs(),
            k("bare_chunked").secs(),
            k("bare_onepass").secs(),
            k("chunks").count(),
        );
    }
    out.push_str("\n(— not measured: one input only where it is feasible on iptables-nft, chunks on iptables-legacy only at the smallest size; `scripts/bench-kernel --help`.)\n\n");
}

fn change(out: &mut String, i: &Inputs, backends: &[String]) {
    let rows: Vec<(&String, usize)> = backends
        .iter()
        .flat_map(|b| {
            let mut sizes = i.kernel_sizes(b, "change_cli");
            sizes.extend(i.kernel_sizes(b, "kp_restore"));
            sizes.sort_unstable();
            sizes.dedup();
            sizes.into_iter().map(move |n| (b, n))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("#### One endpoint added to a synced cluster (same kernel, same run)\n\n");
    out.push_str("| backend | services | `svcproxy sync` (wall) | its own work | its iptables-save | its iptables-restore | its restore lines | kube-proxy partial: iptables-restore | its lines | restore time: kube-proxy ÷ svcproxy | lines: kube-proxy ÷ svcproxy | checks |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (b, n) in rows {
        let k = |m: &str| i.k(b, n, m);
        let check = |m: &str, what: &str| match k(m).value() {
            Some(0.0) => format!("{what}: in sync"),
            Some(_) => format!("{what}: **differs**"),
            None => format!("{what}: {NONE}"),
        };
        let _ = writeln!(
            out,
            "| {b} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
            fmt_count(n),
            k("change_cli").secs(),
            cell(i.own_work(b, n, "change")),
            k("change_read").secs(),
            k("change_restore").secs(),
            k("change_lines").count(),
            k("kp_restore").secs(),
            k("kp_lines").count(),
            ratio(k("kp_restore").value(), k("change_restore").value()),
            ratio(k("kp_lines").value(), k("change_lines").value()),
            check("base_clean", "cluster loaded"),
            check("kp_clean", "after kube-proxy's input"),
        );
    }
    out.push('\n');
}

fn nft_chunking(out: &mut String, i: &Inputs) {
    let order: Vec<usize> = i.kernel_sizes("nft", "bare_reordered");
    let mut sweep: Vec<(usize, usize, Summary)> = i
        .kernel
        .keys()
        .filter(|k| k.0 == "nft")
        .filter_map(|k| Some((k.1, k.2.strip_prefix("chunk_")?.parse::<usize>().ok()?)))
        .map(|(n, c)| (n, c, i.k("nft", n, &format!("chunk_{c}"))))
        .collect();
    sweep.sort_by_key(|s| (s.0, s.1));
    if order.is_empty() && sweep.is_empty() {
        return;
    }
    out.push_str("#### iptables-nft-restore: input shape (bare restores of the same rules)\n\n");
    out.push_str("| services | one input, as rendered | one input, service chains in dependency order | chunks of 50 services, one process each | chunks of 50 services, one process |\n|---:|---:|---:|---:|---:|\n");
    let mut sizes = i.kernel_sizes("nft", "bare_single");
    sizes.extend(order);
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let k = |m: &str| i.k("nft", n, m).secs();
        let _ = writeln!(out, "| {} | {} | {} | {} | {} |", fmt_count(n), k("bare_single"), k("bare_reordered"), k("bare_chunked"), k("bare_onepass"));
    }
    if !sweep.is_empty() {
        out.push_str("\n| services | services per chunk | chunks in one process |\n|---:|---:|---:|\n");
        for (n, c, s) in sweep {
            let _ = writeln!(out, "| {} | {c} | {} |", fmt_count(n), s.secs());
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn times_keep_their_unit() {
        assert_eq!(fmt_secs(0.000_412_3), "412.3 µs");
        assert_eq!(fmt_secs(0.1234), "123.4 ms");
        assert_eq!(fmt_secs(0.012), "12 ms");
        assert_eq!(fmt_secs(0.001_234_5), "1.23 ms");
        assert_eq!(fmt_secs(4.151), "4.15 s");
        assert_eq!(fmt_secs(312.4), "312 s");
        assert_eq!(fmt_count(1234567), "1,234,567");
    }

    #[test]
    fn kernel_samples_with_timeouts() {
        let k = parse_kernel("# header\nnft\t1000\tbare_single\t1\t10.5\nnft\t1000\tbare_single\t2\t9.5\nnft\t5000\tbare_single\t1\ttimeout:600\n").unwrap();
        assert_eq!(Summary::of(k.get(&("nft".into(), 1000, "bare_single".into()))), Summary::Median { value: 10.0, runs: 2 });
        assert_eq!(Summary::of(k.get(&("nft".into(), 5000, "bare_single".into()))), Summary::TimedOut(600.0));
        assert_eq!(Summary::TimedOut(600.0).secs(), "timed out after 600 s");
        assert!(parse_kernel("nft\t1000\tbare_single\t1\n").is_err());
        assert!(parse_kernel("nft\tmany\tbare_single\t1\t2\n").is_err());
    }

    #[test]
    fn criterion_medians_are_read_by_benchmark_id() {
        let dir = std::env::temp_dir().join(format!("svcproxy-report-test-{}", std::process::id()));
        let new = dir.join("render").join("iptables").join("10000").join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("benchmark.json"), r#"{"group_id":"render","function_id":"iptables","value_str":"10000","full_id":"render/iptables/10000"}"#).unwrap();
        std::fs::write(new.join("estimates.json"), r#"{"mean":{"point_estimate":2.0e8},"median":{"point_estimate":1.2e8}}"#).unwrap();
        // A report directory criterion also writes is not a benchmark.
        std::fs::create_dir_all(dir.join("report")).unwrap();
        let got = read_criterion(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.len(), 1);
        assert!((got["render/iptables/10000"] - 0.12).abs() < 1e-12);
        assert!(read_criterion(Path::new("/nonexistent/criterion")).unwrap().is_empty());
    }

    #[test]
    fn targets_are_judged_from_the_measurements() {
        let mut i = Inputs::default();
        i.criterion.insert("render/iptables/10000".into(), 0.120);
        i.criterion.insert("write_bytes/lines/10000".into(), 0.100);
        i.criterion.insert("one_endpoint/svcproxy_partial/10000".into(), 0.002);
        i.sizes.insert(10000, crate::bench::RestoreSize { full: 527_000, kube_proxy: 12_000, partial: 9, sync: 9 });
        i.rss.insert(10000, vec![(200.0 * 1024.0, 4.0), (100.0 * 1024.0, 4.0), (120.0 * 1024.0, 4.0)]);
        i.kernel = parse_kernel("legacy\t10000\tsync_cli\t1\t10.4\nlegacy\t10000\tbare_single\t1\t10.0\n").unwrap();
        let text = render(&i);
        let line = |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle} not in\n{text}")).to_string();
        assert!(line("≤ 150 ms").ends_with("| 120 ms | met |"), "{}", line("≤ 150 ms"));
        assert!(line("1.5 × writing").contains("1.20× | met"));
        assert!(line("≤ 1 ms").ends_with("| 2 ms | **missed** |"));
        assert!(line("≤ 50 restore lines").contains("9 (watch), 9 (one-shot sync) | met"));
        assert!(line("(legacy, 10,000)").contains("+4 % | met"));
        assert!(line("peak RSS").contains("120 MiB (126 MB) | met"));
        // 145 MiB is 152 MB: over the target, though under 150 in MiB.
        i.rss.insert(10000, vec![(145.0 * 1024.0, 4.0)]);
        let text = render(&i);
        assert!(text.contains("| 145 MiB (152 MB) | **missed** |"), "{text}");
        // Nothing measured through the kernel for nft: no verdict row for it.
        assert!(!text.contains("(nft,"));
    }
}

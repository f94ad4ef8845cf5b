//! `svcproxy bench`: measurements over generated clusters, printed as tables. The hidden
//! subcommands feed `scripts/bench` and `scripts/bench-kernel`: kube-proxy's partial
//! restore after a one-endpoint change, a full restore split by service for iptables-nft,
//! a one-shot sync with its phases timed, and BENCHMARKS.md's results section.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};

use super::EXIT_OK;
use crate::bench::{self, report, OneEndpoint};
use crate::config::Mode;
use crate::iptables::apply::ExecRestorer;
use crate::iptables::names::is_service_chain;
use crate::iptables::sync::{self, Timings};
use crate::pipeline;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Change {
    /// one more (ready) endpoint for the middle service
    OneEndpoint,
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
    Sync(Box<super::sync::SyncArgs>),
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

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    match &args.what {
        BenchWhat::RestoreSize { services, endpoints, format } => {
            if *format == Format::Table {
                super::out("| services | endpoints | full restore (lines) | kube-proxy partial sync (lines) | svcproxy watch-mode sync (lines) | svcproxy one-shot sync (lines) |\n|---:|---:|---:|---:|---:|---:|\n")?;
            }
            for n in services {
                let r = bench::restore_size(*n, *endpoints).with_context(|| format!("restore sizes at {n} services"))?;
                let row = [n.to_string(), endpoints.to_string(), r.full.to_string(), r.kube_proxy.to_string(), r.partial.to_string(), r.sync.to_string()];
                super::out(&match format {
                    Format::Table => format!("| {} |\n", row.join(" | ")),
                    Format::Tsv => format!("{}\n", row.join("\t")),
                })?;
            }
        }
        BenchWhat::PartialRestore { services, endpoints, change: Change::OneEndpoint, write_base, write_changed } => {
            let mut one = OneEndpoint::new(*services, *endpoints)?;
            if let Some(p) = write_base {
                std::fs::write(p, &one.base_text).with_context(|| format!("cannot write {}", p.display()))?;
            }
            if let Some(p) = write_changed {
                std::fs::write(p, &one.changed_text).with_context(|| format!("cannot write {}", p.display()))?;
            }
            let add = one.add.clone();
            let changes = one.step(&add);
            super::out(&one.kube_proxy_partial(&changes))?;
        }
        BenchWhat::SplitRestore { services_per_chunk, dir } => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            let chunks = split_by_service(&text, *services_per_chunk)?;
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            for (i, c) in chunks.iter().enumerate() {
                std::fs::write(dir.join(format!("{i:04}.restore")), c)?;
            }
            super::out(&format!("{}\n", chunks.len()))?;
        }
        BenchWhat::Sync(sync_args) => super::out(&timed_sync(sync_args)?)?,
        BenchWhat::Report { criterion, results } => super::out(&report::render(&report::Inputs::read(criterion, results)?))?,
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// A one-shot iptables sync as `svcproxy sync` runs it, timed: `load` (read, parse,
/// track), `render` (the rules), then the sync's own phases summed over the families
/// (`text`: the restore text written and parsed back, `read`: iptables-save, `compute`:
/// the delta, `restore`: iptables-restore), `total`, and the restore input's size.
fn timed_sync(args: &super::sync::SyncArgs) -> anyhow::Result<String> {
    anyhow::ensure!(!args.dry_run && !args.watch.watch, "bench sync runs one real sync: no --dry-run, no --watch");
    let start = Instant::now();
    let flags = args.config.settings();
    anyhow::ensure!(flags.nfacct.is_some(), "bench sync needs --nfacct true|false (it does not create nfacct counters)");
    let loaded = super::render::load_with(&args.config, flags)?;
    anyhow::ensure!(loaded.config.mode == Mode::Iptables, "bench sync measures iptables mode only");
    let load = start.elapsed();
    let t = Instant::now();
    let rulesets = pipeline::render_iptables(&loaded);
    let render = t.elapsed();
    let backend = args.iptables_backend.resolve();
    let mut restorer = ExecRestorer { backend, lock_wait_secs: args.iptables_lock_wait };
    let (mut phases, mut lines, mut full_lines) = (Timings::default(), 0, 0);
    for rs in &rulesets {
        let family = rs.ctx.family;
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

/// Splits a full restore input into several, for backends whose restore time grows with
/// the square of one input's size (iptables-nft 1.8.x, see BENCHMARKS.md). Tables other
/// than nat stay whole; nat becomes (1) every non-service chain declared (empty), (2) the
/// service chains in groups of at most `per_chunk` services, each service's chains in
/// dependency order (SEP, SVC, SVL, EXT, FW), (3) the non-service chains declared again
/// and filled, with the built-in chains' rules. Applied in order into an empty kernel the
/// chunks leave the same rules as the single input (a live sync must not flush the
/// top-level chains first: it would declare only the missing ones).
pub fn split_by_service<'t>(text: &'t str, per_chunk: usize) -> anyhow::Result<Vec<String>> {
    #[derive(Default)]
    struct Table<'a> {
        decls: Vec<(&'a str, &'a str)>,
        rules: BTreeMap<&'a str, Vec<&'a str>>,
        rule_order: Vec<&'a str>,
        other: Vec<&'a str>,
    }
    let mut tables: Vec<(&'t str, Table<'t>)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') || line == "COMMIT" {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            tables.push((t, Table::default()));
            continue;
        }
        let (_, t) = tables.last_mut().ok_or_else(|| anyhow::anyhow!("line outside a table: {line}"))?;
        if let Some(d) = line.strip_prefix(':') {
            t.decls.push((d.split_whitespace().next().unwrap_or(""), line));
            continue;
        }
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some("-A" | "-I"), Some(chain)) => {
                if !t.rules.contains_key(chain) {
                    t.rule_order.push(chain);
                }
                t.rules.entry(chain).or_default().push(line);
            }
            _ => t.other.push(line),
        }
    }
    let rank = |c: &str| ["KUBE-SEP-", "KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-"].iter().position(|p| c.starts_with(p)).unwrap_or(5);
    let mut out = Vec::new();
    for (name, t) in &tables {
        let whole = |decls: &[&str], chains: &[&str]| {
            let mut s = format!("*{name}\n");
            for d in decls {
                s.push_str(d);
                s.push('\n');
            }
            for c in chains {
                for r in t.rules.get(c).into_iter().flatten() {
                    s.push_str(r);
                    s.push('\n');
                }
            }
            s.push_str("COMMIT\n");
            s
        };
        if *name != "nat" || !t.other.is_empty() {
            let decls: Vec<&str> = t.decls.iter().map(|d| d.1).collect();
            let mut s = whole(&decls, &t.rule_order);
            if !t.other.is_empty() {
                // -X lines and the like: keep the input whole.
                s = text_of_table(text, name);
            }
            out.push(s);
            continue;
        }
        // Service chains grouped by the service (the root of the jumps between them).
        let service_chains: BTreeSet<&'t str> = t.decls.iter().map(|d| d.0).filter(|c| is_service_chain(c)).collect();
        let mut parent: BTreeMap<&'t str, &'t str> = BTreeMap::new();
        for c in &service_chains {
            for r in t.rules.get(c).into_iter().flatten() {
                if let Some(target) = r.split(" -j ").nth(1).and_then(|x| x.split_whitespace().next()) {
                    if service_chains.contains(target) && target != *c {
                        parent.entry(target).or_insert(c);
                    }
                }
            }
        }
        let mut groups: Vec<Vec<&'t str>> = Vec::new();
        let mut index: BTreeMap<&'t str, usize> = BTreeMap::new();
        for (c, _) in &t.decls {
            if !service_chains.contains(c) {
                continue;
            }
            let r = root(&parent, c);
            let g = *index.entry(r).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(c);
        }
        let decl_of: BTreeMap<&str, &str> = t.decls.iter().copied().collect();
        let top: Vec<&str> = t.decls.iter().filter(|d| !service_chains.contains(d.0)).map(|d| d.1).collect();
        out.push(whole(&top, &[]));
        for chunk in groups.chunks(per_chunk.max(1)) {
            let mut chains: Vec<&str> = chunk.iter().flatten().copied().collect();
            chains.sort_by_key(|c| rank(c));
            let decls: Vec<&str> = chains.iter().map(|c| decl_of[c]).collect();
            out.push(whole(&decls, &chains));
        }
        let rest: Vec<&str> = t.rule_order.iter().copied().filter(|c| !service_chains.contains(c)).collect();
        out.push(whole(&top, &rest));
    }
    Ok(out)
}

/// The service chain at the top of `c`'s jumps (FW → EXT → SVC → SEP).
fn root<'t>(parent: &BTreeMap<&'t str, &'t str>, mut c: &'t str) -> &'t str {
    for _ in 0..8 {
        match parent.get(c) {
            Some(p) => c = p,
            None => break,
        }
    }
    c
}

/// One table's section of a restore input, verbatim.
fn text_of_table(text: &str, name: &str) -> String {
    let mut s = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.strip_prefix('*') == Some(name) {
            inside = true;
        }
        if inside {
            s.push_str(line);
            s.push('\n');
            if line == "COMMIT" {
                break;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::apply::Restorer;
    use crate::iptables::fake::FakeIptables;
    use crate::iptables::restore::{self, Scope};
    use crate::net::IpFamily;

    #[test]
    fn chunks_applied_in_order_leave_the_rules_of_the_single_input() {
        let one = OneEndpoint::new(60, 3).unwrap();
        let text = restore::write(&one.ruleset, Scope::Full, &[]);
        let chunks = split_by_service(&text, 7).unwrap();
        // filter whole, nat's top-level chains declared, the service ports' chains (at least
        // one per service) 7 roots to a chunk, nat's top-level chains filled.
        assert!(chunks.len() >= 3 + 60 / 7, "{}", chunks.len());
        assert!(chunks[0].starts_with("*filter\n") && chunks.last().unwrap().contains("-A KUBE-SERVICES "));
        let (mut whole, mut split) = (FakeIptables::new(), FakeIptables::new());
        whole.restore(IpFamily::V4, &text).unwrap();
        for c in &chunks {
            split.restore(IpFamily::V4, c).unwrap();
        }
        for table in ["filter", "nat"] {
            assert_eq!(split.save_table(IpFamily::V4, table), whole.save_table(IpFamily::V4, table), "{table}");
        }
    }
}

//! `svcproxy bench`: measurements over generated clusters, printed as tables. Figures are
//! medians of several runs measured side by side in one process. The hidden subcommands
//! feed `scripts/bench-kernel` (kube-proxy's partial restore after a one-endpoint change,
//! and a full restore split by service for iptables-nft).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};

use super::EXIT_OK;
use crate::config::Settings;
use crate::gen::{self, GenSpec};
use crate::iptables::fake::FakeIptables;
use crate::iptables::names::is_service_chain;
use crate::iptables::restore::{self, Scope};
use crate::iptables::{partial, sync};
use crate::model::EndpointSlice;
use crate::pipeline;
use crate::source::{self, ClusterState};
use crate::track::Event;

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

#[derive(Debug, Clone, Subcommand)]
pub enum BenchWhat {
    /// Restore input for a one-endpoint change: svcproxy's delta vs kube-proxy's partial sync
    RestoreSize {
        /// Cluster sizes (services), comma list
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        services: Vec<usize>,
        /// Endpoints per service
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
    },
    /// Print kube-proxy's partial restore input (whole KUBE-SERVICES rewritten, changed
    /// services' chains) after a change to a generated cluster (for scripts/bench-kernel)
    #[command(hide = true)]
    PartialRestore {
        #[arg(long, default_value_t = 10000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
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
}

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    match &args.what {
        BenchWhat::RestoreSize { services, endpoints } => {
            super::out("| services | endpoints | full restore (lines) | kube-proxy partial sync (lines) | svcproxy delta (lines) |\n|---:|---:|---:|---:|---:|\n")?;
            for n in services {
                let r = restore_size(*n, *endpoints)?;
                super::out(&format!("| {n} | {endpoints} | {} | {} | {} |\n", r.0, r.1, r.2))?;
            }
        }
        BenchWhat::PartialRestore { services, endpoints, seed, change: Change::OneEndpoint, write_base, write_changed } => {
            let spec = GenSpec { services: *services, endpoints: *endpoints, seed: *seed };
            let base = gen::yaml(&spec);
            let changed = with_one_more_endpoint(&base, *services)?;
            if let Some(p) = write_base {
                std::fs::write(p, &base)?;
            }
            if let Some(p) = write_changed {
                std::fs::write(p, &changed)?;
            }
            let mut loaded = load_text(&base)?;
            let mut rs = pipeline::render_iptables(&loaded).remove(0);
            let applied = partial::Applied::from_kernel(rs.service_chains().map(str::to_string).collect());
            loaded.trackers.apply(&Event::SliceApplied(changed_slice(&changed, *services)?));
            let changes = loaded.trackers.commit().remove(0);
            let (svcs, eps) = loaded.trackers.families[0].view();
            rs.update(svcs, eps, &changes.services);
            let (text, _) = partial::next_restore(&applied, &rs, &changes.services, partial::SyncOptions::default());
            super::out(&text)?;
        }
        BenchWhat::SplitRestore { services_per_chunk, dir } => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            let chunks = split_by_service(&text, *services_per_chunk)?;
            std::fs::create_dir_all(dir)?;
            for (i, c) in chunks.iter().enumerate() {
                std::fs::write(dir.join(format!("{i:04}.restore")), c)?;
            }
            super::out(&format!("{}\n", chunks.len()))?;
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// Loads a generated cluster the way every benchmark does (no nfacct matches).
pub fn load_text(text: &str) -> anyhow::Result<pipeline::Loaded> {
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), text, &mut state)?;
    load(state)
}

pub fn load(state: ClusterState) -> anyhow::Result<pipeline::Loaded> {
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    Ok(pipeline::load(state, flags, Settings::default())?)
}

/// The benchmarks' one-endpoint change: generated cluster `base` (of `services` services)
/// with one more ready endpoint (10.127.255.254) in the middle service's slice.
pub fn with_one_more_endpoint(base: &str, services: usize) -> anyhow::Result<String> {
    let i = services / 2;
    let head = format!("\n  name: svc-{i}-abcde\n");
    let start = base.find(&head).ok_or_else(|| anyhow::anyhow!("slice of svc-{i} not found"))?;
    let ports = start + base[start..].find("\nports:\n").ok_or_else(|| anyhow::anyhow!("slice of svc-{i} has no ports"))? + 1;
    let mut out = String::with_capacity(base.len() + 200);
    out.push_str(&base[..ports]);
    out.push_str("- addresses: [10.127.255.254]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: node-1\n  zone: zone-1\n");
    out.push_str(&base[ports..]);
    Ok(out)
}

/// The changed slice of [`with_one_more_endpoint`]'s output, as a tracker event payload.
pub fn changed_slice(changed: &str, services: usize) -> anyhow::Result<Arc<EndpointSlice>> {
    let i = services / 2;
    // Parse only that slice's document.
    let head = format!("\n  name: svc-{i}-abcde\n");
    let at = changed.find(&head).ok_or_else(|| anyhow::anyhow!("slice of svc-{i} not found"))?;
    let start = changed[..at].rfind("---\n").ok_or_else(|| anyhow::anyhow!("no document start"))?;
    let end = changed[at..].find("\n---\n").map_or(changed.len(), |e| at + e + 1);
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), &changed[start..end], &mut state)?;
    state.slices.into_iter().next().map(Arc::new).ok_or_else(|| anyhow::anyhow!("slice of svc-{i} not parsed"))
}

/// (full lines, kube-proxy partial lines, svcproxy delta lines) for one endpoint added to
/// the middle service of an N-service cluster, synced into the fake kernel.
pub fn restore_size(services: usize, endpoints: usize) -> anyhow::Result<(usize, usize, usize)> {
    let text = gen::yaml(&GenSpec { services, endpoints, seed: 1 });
    let mut loaded = load_text(&text)?;
    let mut rs = pipeline::render_iptables(&loaded).remove(0);
    let mut kernel = FakeIptables::new();
    sync::sync(&mut kernel, &rs, false)?;
    let full = restore::write(&rs, Scope::Full, &[]).lines().count();
    let applied = partial::Applied::from_kernel(rs.service_chains().map(str::to_string).collect());

    let changed = with_one_more_endpoint(&text, services)?;
    loaded.trackers.apply(&Event::SliceApplied(changed_slice(&changed, services)?));
    let changes = loaded.trackers.commit().remove(0);
    let (svcs, eps) = loaded.trackers.families[0].view();
    rs.update(svcs, eps, &changes.services);
    let (kube_proxy_partial, _) = partial::next_restore(&applied, &rs, &changes.services, partial::SyncOptions::default());
    let ours = sync::sync(&mut kernel, &rs, false)?;
    Ok((full, kube_proxy_partial.lines().count(), ours.delta.restore_lines()))
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

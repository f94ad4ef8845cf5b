//! What every benchmark shares (`cargo bench`, `svcproxy-bench`, `scripts/bench*`):
//! generated clusters loaded the way the benchmarks load them, and the one-endpoint
//! change they all make, so every figure in BENCHMARKS.md is measured on the same input.
//! [`report`] writes BENCHMARKS.md's results from the benchmarks' output files. Built
//! with the `bench` feature only: none of it is in the node binary.

pub mod apiserver;
pub mod conntrack;
pub mod netload;
pub mod nft;
pub mod plot;
pub mod report;
pub mod soak;

use std::sync::Arc;

use crate::config::Settings;
use crate::gen::{self, GenSpec};
use crate::xtables::apply::{Backend, RestoreError, Restorer};
use crate::xtables::fake::FakeIptables;
use crate::iptables::kube_proxy_restore::{self, Applied};
use crate::iptables::proxier::Proxier;
use crate::iptables::render::Ruleset;
use crate::xtables::names::is_service_chain;
use crate::xtables::{delta, dump};
use crate::iptables::restore::{self, Scope};
use crate::iptables::sync::{self, SyncError, SyncReport};
use crate::model::EndpointSlice;
use crate::net::IpFamily;
use crate::pipeline;
use crate::source::{self, ClusterState};
use crate::track::{Changes, Event};

/// The seed of every generated benchmark cluster (`svcproxy-bench generate`'s default).
pub const SEED: u64 = 1;

/// The generated cluster of `services` × `endpoints` (seed [`SEED`]), as YAML.
pub fn generated(services: usize, endpoints: usize) -> String {
    gen::yaml(&GenSpec { services, endpoints, seed: SEED })
}

/// How a generated cluster is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputFormat {
    /// `---`-separated YAML documents (what the generator writes).
    #[default]
    Yaml,
    /// One JSON `kind: List` holding every object, indented as `kubectl get -o json` prints it.
    JsonList,
}

/// The generated cluster of `services` × `endpoints` (seed [`SEED`]) in `format`.
pub fn generated_as(services: usize, endpoints: usize, format: InputFormat) -> anyhow::Result<String> {
    let yaml = generated(services, endpoints);
    match format {
        InputFormat::Yaml => Ok(yaml),
        InputFormat::JsonList => json_list(&yaml),
    }
}

/// A generated cluster's YAML documents as one JSON `kind: List` (keys in kubectl's
/// order, which is alphabetical, four-space indents as `kubectl get -o json` writes).
pub fn json_list(yaml: &str) -> anyhow::Result<String> {
    use serde::Serialize as _;
    let mut items = Vec::new();
    for doc in yaml.split("\n---\n") {
        let value: serde_json::Value = serde_saphyr::from_str(doc)?;
        if !value.is_null() {
            items.push(value);
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}});
    let mut out = Vec::with_capacity(yaml.len() * 3);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"    "));
    list.serialize(&mut ser)?;
    out.push(b'\n');
    Ok(String::from_utf8(out)?)
}

/// Loads a generated cluster the way every benchmark does (no nfacct matches: the
/// counters do not exist in a fresh network namespace).
pub fn load_text(text: &str) -> anyhow::Result<pipeline::Loaded> {
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), text, &mut state)?;
    load(state)
}

/// [`load_text`] from parsed objects.
pub fn load(state: ClusterState) -> anyhow::Result<pipeline::Loaded> {
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    Ok(pipeline::load(state, flags, Settings::default())?)
}

/// The benchmarks' one-endpoint change: generated cluster `base` (of `services` services)
/// with one more ready endpoint (10.127.255.254) in the middle service's slice.
pub fn with_one_more_endpoint(base: &str, services: usize) -> anyhow::Result<String> {
    let (_, end) = middle_slice_span(base, services)?;
    let slice = &base[..end];
    let i = services / 2;
    let ports = slice.rfind("\nports:\n").ok_or_else(|| anyhow::anyhow!("slice of svc-{i} has no ports"))? + 1;
    let mut out = String::with_capacity(base.len() + 200);
    out.push_str(&base[..ports]);
    out.push_str("- addresses: [10.127.255.254]\n  conditions: {ready: true, serving: true, terminating: false}\n  nodeName: node-1\n  zone: zone-1\n");
    out.push_str(&base[ports..]);
    Ok(out)
}

/// The middle service's slice in a generated cluster (before or after
/// [`with_one_more_endpoint`]), parsed alone, as a tracker event payload.
pub fn middle_slice(text: &str, services: usize) -> anyhow::Result<Arc<EndpointSlice>> {
    let (start, end) = middle_slice_span(text, services)?;
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), &text[start..end], &mut state)?;
    let i = services / 2;
    state.slices.into_iter().next().map(Arc::new).ok_or_else(|| anyhow::anyhow!("slice of svc-{i} not parsed"))
}

/// Byte range of the middle service's EndpointSlice document (from its `---`).
fn middle_slice_span(text: &str, services: usize) -> anyhow::Result<(usize, usize)> {
    let i = services / 2;
    let head = format!("\n  name: svc-{i}-abcde\n");
    let at = text.find(&head).ok_or_else(|| anyhow::anyhow!("slice of svc-{i} not found"))?;
    let start = text[..at].rfind("---\n").ok_or_else(|| anyhow::anyhow!("slice of svc-{i}: no document start"))?;
    let end = text[at..].find("\n---\n").map_or(text.len(), |e| at + e + 1);
    Ok((start, end))
}

/// A committed generated cluster and its rendered IPv4 rules, ready to take the
/// one-endpoint change ([`OneEndpoint::add`]) and to take it back ([`OneEndpoint::revert`]).
pub struct OneEndpoint {
    pub services: usize,
    pub loaded: pipeline::Loaded,
    pub ruleset: Ruleset,
    /// The service chains of the cluster as generated (what kube-proxy believes the
    /// kernel holds before the change).
    pub applied: Applied,
    /// The middle service's slice with one more endpoint.
    pub add: Event,
    /// The middle service's slice as generated.
    pub revert: Event,
    /// The cluster's YAML before and after the change.
    pub base_text: String,
    pub changed_text: String,
}

/// A kernel that takes every restore and keeps nothing (and holds nothing when read): the
/// watch-mode path up to the restore text, without applying it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard {
    /// Bytes of restore input sent so far.
    pub sent: usize,
}

impl Restorer for Discard {
    fn backend(&self) -> Backend {
        // One restore per sync, as iptables-legacy takes it.
        Backend::Legacy
    }

    fn save(&mut self, _family: IpFamily, _table: &str) -> Result<String, RestoreError> {
        Ok(String::new())
    }

    fn save_all(&mut self, _family: IpFamily) -> Result<String, RestoreError> {
        Ok(String::new())
    }

    fn restore(&mut self, _family: IpFamily, text: &str) -> Result<(), RestoreError> {
        self.sent += text.len();
        Ok(())
    }

    fn check(&mut self, _family: IpFamily, _table: &str, _chain: &str, _rule: &[&str]) -> Result<bool, RestoreError> {
        // Every rule counts as there: what is measured is the sync, not the canaries.
        Ok(true)
    }
}

impl OneEndpoint {
    pub fn new(services: usize, endpoints: usize) -> anyhow::Result<Self> {
        let base_text = generated(services, endpoints);
        let changed_text = with_one_more_endpoint(&base_text, services)?;
        let add = Event::SliceApplied(middle_slice(&changed_text, services)?);
        let revert = Event::SliceApplied(middle_slice(&base_text, services)?);
        let loaded = load_text(&base_text)?;
        let ruleset = pipeline::render_iptables(&loaded)
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("the generated cluster has no IPv4 rules"))?;
        let applied = Applied::from_kernel(ruleset.service_chains().map(str::to_string).collect());
        Ok(OneEndpoint { services, loaded, ruleset, applied, add, revert, base_text, changed_text })
    }

    /// svcproxy's watch-mode proxier over the cluster as generated, after its first (full)
    /// sync, into `kernel`.
    pub fn proxier(&self, kernel: Box<dyn Restorer + Send>) -> Result<Proxier, SyncError> {
        let mut p = Proxier::new(&self.loaded.config, &self.loaded.trackers, kernel);
        let none = vec![Changes::default(); self.loaded.trackers.families.len()];
        p.sync(&self.loaded.trackers, &none, true)?;
        Ok(p)
    }

    /// Feeds `event` to the trackers, commits, and syncs `proxier` as watch mode does
    /// (incrementally: only the changed service re-rendered, no kernel read).
    pub fn watch_sync(&mut self, proxier: &mut Proxier, event: &Event) -> Result<Vec<SyncReport>, SyncError> {
        self.loaded.trackers.apply(event);
        let changes = self.loaded.trackers.commit();
        proxier.sync(&self.loaded.trackers, &changes, false)
    }

    /// Feeds `event` to the trackers, commits, and brings [`OneEndpoint::ruleset`] up to
    /// date (re-rendering the changed services only): what changed.
    pub fn step(&mut self, event: &Event) -> Changes {
        self.loaded.trackers.apply(event);
        let changes = self.loaded.trackers.commit().swap_remove(0);
        let (services, endpoints) = self.loaded.trackers.families[0].view();
        self.ruleset.update(services, endpoints, &changes.services);
        changes
    }

    /// kube-proxy's partial restore after [`OneEndpoint::step`] (every top-level chain
    /// rewritten, the changed services' chains), against the cluster as generated.
    pub fn kube_proxy_partial(&self, changes: &Changes) -> String {
        kube_proxy_restore::next_restore(&self.applied, &self.ruleset, &changes.services, kube_proxy_restore::SyncOptions::default()).0
    }
}

/// The "write the same bytes" baseline of the render benchmark: `text` written again,
/// line by line, into a string sized for it up front: what any writer that emits those
/// lines must at least do, without working out what they are.
pub fn write_same_bytes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Restore input sizes (lines) for the one-endpoint change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreSize {
    /// A full restore of the cluster.
    pub full: usize,
    /// kube-proxy's partial restore.
    pub kube_proxy: usize,
    /// svcproxy's watch-mode partial sync (from the changed services alone).
    pub partial: usize,
    /// svcproxy's one-shot sync (compared with a kernel holding the cluster as generated).
    pub sync: usize,
}

/// [`RestoreSize`] for one endpoint added to the middle service of a generated cluster.
pub fn restore_size(services: usize, endpoints: usize) -> anyhow::Result<RestoreSize> {
    let mut one = OneEndpoint::new(services, endpoints)?;
    let full = restore::write(&one.ruleset, Scope::Full, &[]).lines().count();
    let mut kernel = FakeIptables::new();
    sync::sync(&mut kernel, &one.ruleset, false)?;
    let mut proxier = one.proxier(Box::new(Discard::default()))?;
    let (add, revert) = (one.add.clone(), one.revert.clone());
    let partial = one.watch_sync(&mut proxier, &add)?.iter().map(|r| r.delta.restore_lines()).sum();
    one.watch_sync(&mut proxier, &revert)?;
    let changes = one.step(&add);
    let kube_proxy = one.kube_proxy_partial(&changes).lines().count();
    let sync = sync::sync(&mut kernel, &one.ruleset, false)?.delta.restore_lines();
    Ok(RestoreSize { full, kube_proxy, partial, sync })
}

/// What a sync sends for a full restore input (`text`) into an empty kernel on
/// iptables-nft: the delta against nothing, cut by [`Delta::restore_chunks`] into restores
/// of at most `per_chunk` services each (the benchmark measures the sync's own chunking).
///
/// [`Delta::restore_chunks`]: crate::xtables::delta::Delta::restore_chunks
pub fn split_by_service(text: &str, per_chunk: usize) -> Result<Vec<String>, dump::ParseError> {
    let desired = dump::parse(text)?;
    // Against an empty kernel the canonical form only labels the changes; v4 or v6 alike.
    let delta = delta::compute(&desired, &crate::xtables::Dump::default(), false, &[], is_service_chain);
    Ok(delta.restore_chunks(per_chunk))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::dump::parse;

    #[test]
    fn chunks_applied_in_order_leave_the_rules_of_the_single_input() {
        let one = OneEndpoint::new(60, 3).unwrap();
        let text = restore::write(&one.ruleset, Scope::Full, &[]);
        let chunks = split_by_service(&text, 7).unwrap();
        // nat's new top-level chains declared, the service ports' chains (at least one per
        // service) 7 services to a chunk, then filter and nat's top-level chains filled.
        assert!(chunks.len() >= 2 + 60 / 7, "{}", chunks.len());
        assert!(chunks[0].starts_with("*nat\n") && chunks.last().unwrap().contains("-A KUBE-SERVICES "));
        let (mut whole, mut split) = (FakeIptables::new(), FakeIptables::new());
        whole.restore(IpFamily::V4, &text).unwrap();
        for c in &chunks {
            split.restore(IpFamily::V4, c).unwrap();
        }
        for table in ["filter", "nat"] {
            assert_eq!(split.save_table(IpFamily::V4, table), whole.save_table(IpFamily::V4, table), "{table}");
        }
    }

    #[test]
    fn the_change_adds_one_endpoint_to_the_middle_service_only() {
        let base = generated(20, 3);
        let changed = with_one_more_endpoint(&base, 20).unwrap();
        let before = middle_slice(&base, 20).unwrap();
        let after = middle_slice(&changed, 20).unwrap();
        assert_eq!(before.id, after.id);
        assert_eq!(before.endpoints.len() + 1, after.endpoints.len());
        let count = |t: &str| load_text(t).unwrap().trackers.families[0].view().1.values().map(|e| e.len()).sum::<usize>();
        assert_eq!(count(&changed), count(&base) + after.ports.len());
    }

    #[test]
    fn the_change_and_its_revert_on_both_paths() {
        let mut one = OneEndpoint::new(40, 4).unwrap();
        let mut proxier = one.proxier(Box::new(Discard::default())).unwrap();
        let (add, revert) = (one.add.clone(), one.revert.clone());
        for e in [&add, &revert] {
            let reports = one.watch_sync(&mut proxier, e).unwrap();
            let lines: usize = reports.iter().map(|r| r.delta.restore_lines()).sum();
            assert!(lines > 0 && lines < 50, "{lines}");
            assert_eq!(reports[0].full_lines, 0, "an incremental sync writes no full restore");
        }
        // The ruleset path ends where a full render of the changed cluster does, and back.
        let changes = one.step(&add);
        assert_eq!(changes.services.len(), 1);
        let full = |text: &str| restore::write(&pipeline::render_iptables(&load_text(text).unwrap())[0], Scope::Full, &[]);
        assert_eq!(restore::write(&one.ruleset, Scope::Full, &[]), full(&one.changed_text));
        assert!(one.kube_proxy_partial(&changes).contains("\n:KUBE-SERVICES - [0:0]\n"));
        one.step(&revert);
        assert_eq!(restore::write(&one.ruleset, Scope::Full, &[]), full(&one.base_text));
    }

    #[test]
    fn the_json_list_holds_the_same_cluster() {
        let yaml = generated(30, 3);
        let json = generated_as(30, 3, InputFormat::JsonList).unwrap();
        assert!(json.starts_with("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n"), "{}", &json[..60]);
        let mut state = ClusterState::default();
        source::file::read_str(std::path::Path::new("generated.json"), &json, &mut state).unwrap();
        let rules = |l: pipeline::Loaded| restore::write(&pipeline::render_iptables(&l)[0], Scope::Full, &[]);
        assert_eq!(rules(load(state).unwrap()), rules(load_text(&yaml).unwrap()));
    }

    #[test]
    fn the_write_baseline_writes_the_same_bytes() {
        let text = restore::write(&OneEndpoint::new(30, 2).unwrap().ruleset, Scope::Full, &[]);
        assert_eq!(write_same_bytes(&text), text);
    }

    #[test]
    fn restore_sizes_of_the_change() {
        let r = restore_size(200, 5).unwrap();
        assert_eq!(r.partial, r.sync);
        assert!(r.partial > 0 && r.partial < r.kube_proxy && r.kube_proxy < r.full, "{r:?}");
        let full = parse(&restore::write(&OneEndpoint::new(200, 5).unwrap().ruleset, Scope::Full, &[])).unwrap();
        assert_eq!(full.tables.len(), 2);
    }
}

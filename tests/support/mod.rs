//! Shared helpers for the golden tests: paths, the render path the CLI uses, diffs, and
//! the one bless path (`SVCPROXY_BLESS=1`, refused under `CI`; see [`ci`]). A missing
//! golden is an error, never an empty expectation.

#![allow(dead_code)]

pub mod apiserver;
pub mod ci;
pub mod iptables_check;

pub use ci::blessing;

use std::path::{Path, PathBuf};

use svcproxy::config::Settings;
use svcproxy::iptables::render::Ruleset;
use svcproxy::pipeline::{self, Loaded};
use svcproxy::source;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `SVCPROXY_GOLDEN_FILTER`: a substring of the fixture paths to check (empty: all).
pub fn golden_filter() -> String {
    std::env::var("SVCPROXY_GOLDEN_FILTER").unwrap_or_default()
}

/// `*.yaml` files directly in `dir`, sorted, filtered by [`golden_filter`].
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    yaml_files_matching(dir, &golden_filter())
}

/// `*.yaml` files directly in `dir` whose path contains `filter`, sorted.
pub fn yaml_files_matching(dir: &Path, filter: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "yaml") && p.to_string_lossy().contains(filter));
    out.sort();
    out
}

/// Sub-directories of `dir` (incremental fixtures), sorted, filtered by [`golden_filter`].
pub fn step_dirs(dir: &Path) -> Vec<PathBuf> {
    step_dirs_matching(dir, &golden_filter())
}

/// Sub-directories of `dir` but `upstream` whose path contains `filter`, sorted.
pub fn step_dirs_matching(dir: &Path, filter: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    out.retain(|p| p.to_string_lossy().contains(filter) && !p.ends_with("upstream"));
    out.sort();
    out
}

/// Every file under `dir`, at any depth, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for p in entries.map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", d.display())).path()) {
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Loads a fixture the way `svcproxy render --from FILE FLAGS` does.
pub fn load(path: &Path, flags: Settings) -> Loaded {
    let state = source::read_path(path).unwrap_or_else(|e| panic!("{e}"));
    pipeline::load(state, flags, Settings::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn render(path: &Path, flags: Settings) -> (Loaded, Vec<Ruleset>, String) {
    let loaded = load(path, flags);
    let rulesets = pipeline::render_iptables(&loaded);
    let text = pipeline::iptables_text(&rulesets);
    (loaded, rulesets, text)
}

/// A golden's text; a missing or unreadable one is an error that says how to create it.
pub fn read_golden(golden: &Path) -> Result<String, String> {
    std::fs::read_to_string(golden).map_err(|e| format!("{}: {e} (run with SVCPROXY_BLESS=1 outside CI to create it)", golden.display()))
}

/// Compares `actual` with the golden file, or writes it when blessing. Returns a
/// description of the mismatch.
pub fn check_golden(golden: &Path, actual: &str) -> Result<(), String> {
    if blessing() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(golden, actual).unwrap();
        return Ok(());
    }
    let expected = read_golden(golden)?;
    if expected == actual {
        return Ok(());
    }
    Err(format!("{} differs:\n{}\n(re-bless with SVCPROXY_BLESS=1 cargo test --test golden if the change is meant)", golden.display(), diff(&expected, actual)))
}

pub fn diff(expected: &str, actual: &str) -> String {
    similar::TextDiff::from_lines(expected, actual)
        .unified_diff()
        .context_radius(2)
        .header("expected", "actual")
        .to_string()
}

/// Collects failures so one run reports all of them.
#[derive(Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn add(&mut self, r: Result<(), String>) {
        if let Err(e) = r {
            self.0.push(e);
        }
    }

    pub fn push(&mut self, e: String) {
        self.0.push(e);
    }

    pub fn finish(self, what: &str, checked: usize) {
        assert!(checked > 0, "{what}: nothing was checked");
        if !self.0.is_empty() {
            panic!("{what}: {} of {checked} failed:\n\n{}", self.0.len(), self.0.join("\n\n"));
        }
        eprintln!("{what}: {checked} checked");
    }
}

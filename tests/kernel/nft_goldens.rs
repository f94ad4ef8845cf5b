//! Every `golden/*.nft` (kube-proxy's nftables table for a fixture, as `svcproxy render
//! --mode nftables` writes it) on the real kernel: `nft -f` loads it in a throwaway
//! namespace, and loads it again on top of itself (the transaction adds, flushes and
//! refills, so a sync can run it again). After each load the kernel's `kube-proxy` table
//! of each family holds as many rules and elements as the golden adds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::svcproxy::{path_str, repo};

pub fn cases() -> Vec<Case> {
    vec![Case::new("nftables_every_golden_loads_twice", every_golden).with_timeout(Duration::from_secs(600))]
}

/// Every nftables golden (`golden/*.nft`), sorted.
pub fn goldens() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo().join("golden"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "nft"));
    out.sort();
    out
}

/// Each nftables golden that has a fixture of the same name: its stem, the fixture and
/// the golden's text (what `nft -f` loads).
pub fn with_fixtures() -> Result<Vec<(String, PathBuf, String)>, String> {
    let mut out = Vec::new();
    for golden in goldens() {
        let stem = golden.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let fixture = repo().join("fixtures").join(format!("{stem}.yaml"));
        if fixture.exists() {
            let text = std::fs::read_to_string(&golden).map_err(|e| format!("{}: {e}", golden.display()))?;
            out.push((stem, fixture, text));
        }
    }
    Ok(out)
}

fn every_golden(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let list = goldens();
    ensure!(list.len() >= 30, "only {} nftables goldens", list.len());
    let lab = Lab::new("nftgold")?;
    let mut total = Counts::default();
    for golden in &list {
        let c = check_one(lab.node(), golden).map_err(|e| format!("{}: {e}", golden.display()))?;
        total.rules += c.rules;
        total.elements += c.elements;
    }
    ensure!(total.rules > 0 && total.elements > 0, "nothing compared: {total:?}");
    ctx.log(format!("{} nftables goldens loaded twice: {} rules, {} elements each time", list.len(), total.rules, total.elements));
    Ok(())
}

/// What a golden adds to one family's table: its rules, and its distinct elements.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    rules: usize,
    elements: usize,
}

/// Per family (`ip`, `ip6`), from the `add rule` / `add element` lines (an element added
/// twice is one element).
fn golden_counts(text: &str) -> BTreeMap<String, Counts> {
    let mut rules: BTreeMap<String, usize> = BTreeMap::new();
    let mut elements: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.splitn(4, ' ').collect();
        match w.as_slice() {
            ["add", "table", family, _] => {
                rules.entry(family.to_string()).or_default();
            }
            ["add", "rule", family, _] => *rules.entry(family.to_string()).or_default() += 1,
            ["add", "element", family, _] => {
                elements.entry(family.to_string()).or_default().insert(line);
            }
            _ => {}
        }
    }
    rules
        .into_iter()
        .map(|(family, rules)| {
            let elements = elements.get(&family).map_or(0, BTreeSet::len);
            (family, Counts { rules, elements })
        })
        .collect()
}

/// The rules and elements of `FAMILY kube-proxy` as `nft -j list table` shows them.
fn kernel_counts(ns: &Ns, family: &str) -> Result<Counts, String> {
    let json = ns.run(&["nft", "-j", "list", "table", family, "kube-proxy"])?;
    let v: Value = serde_json::from_str(&json).map_err(|e| format!("nft -j output: {e}"))?;
    let objects = v["nftables"].as_array().ok_or("nft -j output has no nftables array")?;
    let mut c = Counts::default();
    for o in objects {
        if o.get("rule").is_some() {
            c.rules += 1;
        }
        for kind in ["set", "map"] {
            c.elements += o[kind]["elem"].as_array().map_or(0, Vec::len);
        }
    }
    Ok(c)
}

/// Loads `golden` twice and removes it; what it held.
fn check_one(ns: &Ns, golden: &Path) -> Result<Counts, String> {
    let text = std::fs::read_to_string(golden).map_err(|e| e.to_string())?;
    let want = golden_counts(&text);
    if want.is_empty() {
        return Err("adds no table".into());
    }
    for round in 1..=2 {
        ns.run(&["nft", "-f", path_str(golden)])?;
        for (family, counts) in &want {
            let got = kernel_counts(ns, family)?;
            if &got != counts {
                return Err(format!("load {round}: {family} kube-proxy holds {got:?}, the golden adds {counts:?}"));
            }
        }
    }
    for family in want.keys() {
        ns.run(&["nft", "delete", "table", family, "kube-proxy"])?;
    }
    let left = ns.run(&["nft", "list", "tables"])?;
    if !left.trim().is_empty() {
        return Err(format!("tables left after deleting ours: {left}"));
    }
    Ok(want.values().fold(Counts::default(), |t, c| Counts { rules: t.rules + c.rules, elements: t.elements + c.elements }))
}

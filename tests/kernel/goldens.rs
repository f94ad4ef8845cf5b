//! Every golden on the real kernel, both backends. For each fixture:
//! 1. `svcproxy sync --from FIXTURE` in a fresh node namespace, then `--dry-run` must
//!    report nothing to change (our canonical form equals what `iptables-save` prints);
//! 2. `svcproxy cleanup` must leave nothing of ours but kubelet's KUBE-FIREWALL;
//! 3. the golden itself is loaded with `iptables-restore --noflush`, and the kernel's
//!    rules must equal what the sync left (both sides normalised by `iptables-save`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use svcproxy::config::Settings;
use svcproxy::net::IpFamily;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab};
use crate::netns::BackendTools as _;
use crate::svcproxy::{owned_rules, path_str, repo, run_expect};

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nft_every_golden_loads_and_equals_sync", |c| every_golden(c, Backend::Nft))
            .with_timeout(Duration::from_secs(600)),
        Case::new("legacy_every_golden_loads_and_equals_sync", |c| every_golden(c, Backend::Legacy))
            .with_timeout(Duration::from_secs(600)),
        Case::new("nft_kube_proxy_rules_loaded_by_hand_need_no_change", |c| by_hand(c, Backend::Nft)),
        Case::new("legacy_kube_proxy_rules_loaded_by_hand_need_no_change", |c| by_hand(c, Backend::Legacy)),
    ]
}

fn fixtures() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    out.sort();
    out
}

/// The fixture's own nfacct setting, read as render reads it (the fixture document's
/// settings layer): goldens rendered without nfacct must be synced so, because a sync
/// without the flag probes the kernel and its answer outranks the fixture's. Otherwise
/// the sync creates the counters, as the golden assumes.
fn sync_flags(fixture: &Path) -> Result<Vec<String>, String> {
    let state = svcproxy::source::read_path(fixture).map_err(|e| e.to_string())?;
    let settings = state.fixture.as_ref().map(Settings::from_fixture).unwrap_or_default();
    Ok(if settings.nfacct == Some(false) { vec!["--nfacct=false".into()] } else { Vec::new() })
}

/// The families the fixture renders, as `svcproxy render --from FIXTURE` decides them
/// (its settings, else its nodes' and cluster's addresses), IPv4 first.
fn families(fixture: &Path) -> Result<Vec<IpFamily>, String> {
    let state = svcproxy::source::read_path(fixture).map_err(|e| e.to_string())?;
    let loaded = svcproxy::pipeline::load(state, Settings::default(), Settings::default()).map_err(|e| e.to_string())?;
    Ok(loaded.config.families)
}

/// The golden's restore text per family, each with whether it is IPv6: the fixture's one
/// family, or both, split at the `# iptables`/`# ip6tables` headers of a dual-stack golden.
fn golden_parts(fixture: &Path) -> Result<Vec<(bool, String)>, String> {
    let stem = fixture.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let text = std::fs::read_to_string(repo().join("golden").join(format!("{stem}.iptables"))).map_err(|e| format!("{stem}: {e}"))?;
    match families(fixture)?.as_slice() {
        [one] => Ok(vec![(one.is_v6(), text)]),
        [IpFamily::V4, IpFamily::V6] => {
            let mut parts = Vec::new();
            for chunk in text.split("# ip").skip(1) {
                let v6 = chunk.starts_with("6tables");
                let body = chunk.split_once('\n').map(|(_, b)| b).unwrap_or("");
                parts.push((v6, body.to_string()));
            }
            if !parts.iter().map(|(v6, _)| *v6).eq([false, true]) {
                return Err(format!("{stem}: a dual-stack golden without its `# iptables` and `# ip6tables` headers"));
            }
            Ok(parts)
        }
        other => Err(format!("{stem}: the fixture renders families {other:?}")),
    }
}

fn every_golden(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore"), &b.bin(true, "restore")])?;
    let list = fixtures();
    ensure!(list.len() >= 30, "only {} fixtures", list.len());
    for fixture in &list {
        check_one(ctx, b, fixture).map_err(|e| format!("{}: {e}", fixture.display()))?;
    }
    ctx.log(format!("{} fixtures checked", list.len()));
    Ok(())
}

fn check_one(ctx: &Ctx, b: Backend, fixture: &Path) -> Result<(), String> {
    let lab = Lab::new(b.name())?;
    let node = lab.node();
    let flags = sync_flags(fixture)?;
    let mut sync: Vec<&str> = vec!["sync", "--from", path_str(fixture)];
    sync.extend(flags.iter().map(String::as_str));
    run_expect(node, b, &sync, 0)?;
    let mut dry = sync.clone();
    dry.push("--dry-run");
    run_expect(node, b, &dry, 0).map_err(|e| format!("dry-run after sync is not clean: {e}"))?;
    let parts = golden_parts(fixture)?;
    let synced: Vec<String> = parts.iter().map(|(v6, _)| owned_rules(node, b, *v6)).collect::<Result<_, _>>()?;
    run_expect(node, b, &["cleanup"], 0)?;
    for (v6, _) in &parts {
        let left = owned_rules(node, b, *v6)?;
        let ours: Vec<&str> = left.lines().filter(|l| !l.contains("KUBE-FIREWALL")).collect();
        if !ours.is_empty() {
            return Err(format!("cleanup left: {ours:?}"));
        }
    }
    for ((v6, text), synced) in parts.iter().zip(&synced) {
        node.run_stdin(&[&b.bin(*v6, "restore"), "--noflush"], Some(text))?;
        let loaded = owned_rules(node, b, *v6)?;
        if &loaded != synced {
            let diff = similar::TextDiff::from_lines(synced, &loaded).unified_diff().header("sync", "golden").to_string();
            return Err(format!("the golden ({}) differs from what sync left:\n{diff}", if *v6 { "ipv6" } else { "ipv4" }));
        }
    }
    ctx.log(format!("{}: ok", fixture.display()));
    Ok(())
}

/// The demo's golden restored by hand, plus the jump rules added one `iptables -I` at a
/// time exactly as kube-proxy's EnsureRule(Prepend) does: svcproxy finds nothing to change.
fn by_hand(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore"), &b.bin(true, "restore")])?;
    let lab = Lab::new(b.name())?;
    let node = lab.node();
    let demo = repo().join("fixtures/demo.yaml");
    // kube-proxy creates its nfacct counters first; so does a sync of an empty cluster.
    let empty = crate::svcproxy::temp_yaml("apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\noptions: {ipFamily: ipv4}\n")?;
    run_expect(node, b, &["sync", "--from", path_str(&empty)], 0)?;
    run_expect(node, b, &["cleanup"], 0)?;
    for (v6, text) in golden_parts(&demo)? {
        node.run_stdin(&[&b.bin(v6, "restore"), "--noflush"], Some(&text))?;
        let kubelet_fw = !v6;
        for j in svcproxy::iptables::jumps::jumps(kubelet_fw) {
            let mut argv: Vec<String> = vec![b.bin(v6, ""), "-w".into(), "-t".into(), j.table.into(), "-I".into(), j.from.into()];
            argv.extend(j.words());
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            node.run(&argv)?;
        }
    }
    let out = run_expect(node, b, &["sync", "--from", path_str(&demo), "--dry-run"], 0)?;
    ensure!(out.is_empty(), "dry-run printed changes:\n{out}");
    Ok(())
}

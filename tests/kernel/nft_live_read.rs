//! `trace --live`'s reader (`nftables::live::read`) on what the real kernel lists: every
//! `golden/*.nft` (kube-proxy v1.37's table), and kube-proxy v1.34's table of each of their
//! fixtures, is loaded by `nft -f` in a throwaway namespace, each family's table is listed
//! by `nft list table` and read into values, and every chain's rules equal the written
//! ones (the `add rule` lines read by `stmt::parse_body`), value for value, in order. The one change allowed is the kernel's own to an anonymous set of addresses
//! (sorted, adjacent addresses merged, a set of one listed as a plain value): those must
//! cover exactly the addresses the golden wrote.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use svcproxy::nftables::{self, live};
use svcproxy::net::IpFamily;
use svcproxy::nftables::model::{Form, NftFamily, Rule};
use svcproxy::settings::kinds::{KubeProxyVersion, ProxyMode};
use svcproxy::settings::Settings;
use svcproxy::nftables::stmt::{parse_body, AddrValue, Match, Prefix, Stmt};

use crate::harness::{Case, CaseResult, Ctx};
use crate::nft_chunked::clear;
use crate::nft_goldens::{goldens, with_fixtures};

pub fn cases() -> Vec<Case> {
    vec![Case::new("nftables_every_golden_listed_reads_into_the_rendered_values", every_golden).with_timeout(Duration::from_secs(600))]
}

fn every_golden(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let list = goldens();
    ensure!(list.len() >= 30, "only {} nftables goldens", list.len());
    let lab = crate::netns::Lab::new("nftliveread")?;
    let ns = lab.node();
    let mut sources = Vec::new();
    for golden in &list {
        let stem = golden.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        sources.push((stem, std::fs::read_to_string(golden).map_err(|e| format!("{}: {e}", golden.display()))?));
    }
    let goldens = sources.len();
    for (stem, fixture, _) in with_fixtures()? {
        sources.push((format!("{stem} (v1.34)"), render_v134(&fixture).map_err(|e| format!("{stem}: {e}"))?));
    }
    let (mut exact, mut merged) = (0, 0);
    for (stem, text) in &sources {
        clear(ns);
        ns.run_stdin(&["nft", "-f", "-"], Some(text)).map_err(|e| format!("{stem}: nft -f: {e}"))?;
        for family in [IpFamily::V4, IpFamily::V6] {
            let want = golden_rules(text, family).map_err(|e| format!("{stem}: {e}"))?;
            let Ok(listed) = ns.run(&["nft", "list", "table", family.nft_word(), "kube-proxy"]) else {
                ensure!(want.is_empty(), "{stem}: no {} table listed, the golden has {} chain(s) of rules", family.nft_word(), want.len());
                continue;
            };
            let table = live::read(&listed, family).map_err(|e| format!("{stem} {}: {e}", family.nft_word()))?;
            let mut got: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
            for r in table.objects.rules {
                got.entry(r.chain.clone()).or_default().push(r);
            }
            ensure!(
                got.keys().eq(want.keys()),
                "{stem} {}: chains with rules differ: listed {:?}, golden {:?}",
                family.nft_word(),
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            );
            for (chain, want) in &want {
                let got = &got[chain];
                ensure!(got.len() == want.len(), "{stem} {chain}: {} rule(s) listed, {} in the golden", got.len(), want.len());
                for (g, w) in got.iter().zip(want) {
                    if g == w && g.stmts() == w.stmts() {
                        exact += 1;
                    } else if same_up_to_anonymous_sets(g, w) {
                        merged += 1;
                    } else {
                        return Err(format!("{stem} {chain}:\n  listed: {} {:?}\n  golden: {} {:?}", g.text(), g.comment(), w.text(), w.comment()).into());
                    }
                }
            }
        }
    }
    clear(ns);
    ensure!(exact > 1000 && merged > 0, "too little compared: {exact} equal rules, {merged} with a set the kernel rewrote");
    ctx.log(format!(
        "{goldens} goldens and {} v1.34 tables listed and read: {exact} rules equal to the written values, {merged} equal up to the kernel's anonymous sets",
        sources.len() - goldens
    ));
    Ok(())
}

/// kube-proxy v1.34's table of `fixture` (its `mark-for-masquerade` chain, `dnat to`), as
/// `svcproxy render --mode nftables --kube-proxy-version 1.34` writes it.
fn render_v134(fixture: &std::path::Path) -> Result<String, String> {
    let state = svcproxy::source::read_path(fixture).map_err(|e| e.to_string())?;
    let flags = Settings { mode: Some(ProxyMode::Nftables), kube_proxy_version: Some(KubeProxyVersion::V1_34), ..Settings::default() };
    let loaded = svcproxy::pipeline::load(state, flags, Settings::default()).map_err(|e| e.to_string())?;
    Ok(nftables::text(&nftables::render_all(&loaded.config, &loaded.trackers), Form::Transaction))
}

/// The written rules of one family by chain, each read into values (in order).
fn golden_rules(text: &str, family: IpFamily) -> Result<BTreeMap<String, Vec<Rule>>, String> {
    let head = format!("add rule {} kube-proxy ", family.nft_word());
    let mut out: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&head) else { continue };
        let (chain, body) = rest.split_once(' ').ok_or_else(|| format!("{line:?}: no statements"))?;
        let body = parse_body(body).map_err(|e| format!("{line:?}: {e}"))?;
        out.entry(chain.to_owned()).or_default().push(Rule::of(chain, body));
    }
    Ok(out)
}

/// The same statements, but for address values that cover the same addresses.
fn same_up_to_anonymous_sets(got: &Rule, want: &Rule) -> bool {
    let (g, w) = (got.stmts(), want.stmts());
    g.comment == w.comment
        && g.stmts.len() == w.stmts.len()
        && g.stmts.iter().zip(&w.stmts).all(|(a, b)| match (a, b) {
            (Stmt::Match(Match::Addr { family: fa, dir: da, negated: na, value: va }), Stmt::Match(Match::Addr { family: fb, dir: db, negated: nb, value: vb })) => {
                (fa, da, na) == (fb, db, nb) && ranges(va).is_some() && ranges(va) == ranges(vb)
            }
            _ => a == b,
        })
}

/// The addresses an address value covers, as sorted, merged inclusive ranges (`None` for
/// a named set).
fn ranges(v: &AddrValue) -> Option<Vec<(u128, u128)>> {
    let items: Vec<Prefix> = match v {
        AddrValue::Prefix(p) => vec![*p],
        AddrValue::Anon(s) => s.items().to_vec(),
        AddrValue::Named(_) => return None,
    };
    let mut r: Vec<(u128, u128)> = items
        .iter()
        .map(|p| {
            let (addr, bits) = match p.addr {
                IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
                IpAddr::V6(a) => (u128::from(a), 128),
            };
            let host = bits - u32::from(p.len.unwrap_or(bits as u8));
            let span = if host >= 128 { u128::MAX } else { (1u128 << host) - 1 };
            (addr & !span, (addr & !span) | span)
        })
        .collect();
    r.sort();
    let mut out: Vec<(u128, u128)> = Vec::new();
    for (lo, hi) in r {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    Some(out)
}

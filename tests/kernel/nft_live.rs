//! nftables mode's full sync over a live table (`nftables::delta`, `netlink::read_live`) on
//! the real kernel:
//! - for every `golden/*.nft` fixture applied by `nft -f` (kube-proxy's one transaction),
//!   svcproxy's full sync of the same cluster over it refills no chain and changes no
//!   element (the read proves every chain and element equal), and the table lists as before;
//! - over a live table that someone else changed (a rule deleted from a service chain,
//!   a chain flushed, a map element removed, a foreign rule added to one of our chains),
//!   one full sync refills exactly those chains, re-adds exactly that element, and the
//!   table lists as the desired one again.

use std::time::Duration;

use svcproxy::nftables::listing::Listing;
use svcproxy::nftables::sync;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::nft_chunked::{clear, listing, tables, with_netlink};
use crate::svcproxy::repo;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_full_sync_over_an_equal_live_table_sends_no_refill", equal_tables).with_timeout(Duration::from_secs(600)),
        Case::new("nftables_full_sync_over_a_changed_live_table_repairs_only_that", repairs).with_timeout(Duration::from_secs(180)),
        Case::new("nftables_full_syncs_of_one_client_reread_a_replaced_anonymous_set", replaced_anonymous_set).with_timeout(Duration::from_secs(180)),
    ]
}

/// (kept, refilled, element changes) of a full sync of `fixture` over what `ns` holds.
fn sync_over(ns: &Ns, fixture: &std::path::Path) -> Result<(usize, usize, usize, usize), String> {
    let ts = tables(fixture)?;
    let reports = with_netlink(ns, svcproxy::nftables::chunked::CHUNK_LINES, move |nl| ts.iter().map(|t| sync::full(nl, t, false)).collect::<Result<Vec<_>, _>>())?
        .map_err(|e| format!("the full sync failed: {e}"))?;
    Ok(reports.iter().fold((0, 0, 0, 0), |(k, r, e, l), x| (k + x.kept, r + x.refilled, e + x.element_changes, l + x.lines)))
}

fn equal_tables(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftlive")?;
    let ns = lab.node();
    let (mut compared, mut kept_all) = (0, 0);
    for (stem, fixture, text) in crate::nft_goldens::with_fixtures()? {
        clear(ns);
        ns.run_stdin(&["nft", "-f", "-"], Some(&text)).map_err(|e| format!("{stem}: nft -f: {e}"))?;
        let before = listing(ns);
        let (kept, refilled, changes, _) = sync_over(ns, &fixture).map_err(|e| format!("{stem}: {e}"))?;
        ensure!(refilled == 0 && changes == 0, "{stem}: over the table nft -f made of the golden, the sync refilled {refilled} chain(s) and changed {changes} element(s) (kept {kept})");
        ensure!(kept > 0, "{stem}: no chain compared");
        ensure!(listing(ns) == before, "{stem}: the table lists otherwise after the sync:\n{}", listing(ns));
        kept_all += kept;
        compared += 1;
    }
    clear(ns);
    ensure!(compared >= 30, "too few goldens compared: {compared}");
    ctx.log(format!("{compared} goldens: a full sync over the table nft -f made kept all {kept_all} chains and every element"));
    Ok(())
}

/// The element keys of a map in a listing (what comes before a comment or a value).
fn keys(listed: &str, object: &str) -> Vec<String> {
    let l = Listing::parse(listed);
    l.objects.get(object).map_or_else(Vec::new, |o| {
        o.elements.iter().map(|e| e.split(" comment ").next().unwrap_or(e).split(" : ").next().unwrap_or(e).trim().to_string()).collect()
    })
}

fn repairs(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftlivefix")?;
    let ns = lab.node();
    let fixture = repo().join("fixtures").join("demo.yaml");
    clear(ns);
    sync_over(ns, &fixture)?;
    let want = listing(ns);
    let (_, refilled, changes, _) = sync_over(ns, &fixture)?;
    ensure!(refilled == 0 && changes == 0, "the second sync refilled {refilled}, changed {changes}");

    let chains: Vec<String> = want.lines().filter_map(|l| l.trim().strip_prefix("chain ")).map(|c| c.trim_end_matches(" {").to_string()).collect();
    let services: Vec<&String> = chains.iter().filter(|c| c.starts_with("service-") && c.contains('/')).collect();
    let endpoints: Vec<&String> = chains.iter().filter(|c| c.starts_with("endpoint-") && c.contains('/')).collect();
    ensure!(services.len() >= 2 && !endpoints.is_empty(), "demo has too few service chains: {chains:?}");
    // A rule deleted from a service chain (its last one, by handle).
    let handles = ns.run(&["nft", "-a", "list", "chain", "ip", "kube-proxy", services[0]])?;
    let handle = handles.lines().rev().filter_map(|l| l.rsplit_once("# handle ").map(|(_, h)| h.trim().to_string())).next().ok_or("no rule handle")?;
    ns.run(&["nft", "delete", "rule", "ip", "kube-proxy", services[0], "handle", &handle])?;
    // A chain flushed.
    ns.run(&["nft", "flush", "chain", "ip", "kube-proxy", endpoints[0]])?;
    // A foreign rule in one of ours.
    ns.run(&["nft", "add", "rule", "ip", "kube-proxy", services[1], "ip", "daddr", "198.18.9.9", "drop"])?;
    // A map element removed.
    let key = keys(&want, "map service-ips").into_iter().next().ok_or("no service-ips element")?;
    ns.run(&["nft", &format!("delete element ip kube-proxy service-ips {{ {key} }}")])?;
    ensure!(listing(ns) != want, "the changes changed nothing");

    let (kept, refilled, changes, lines) = sync_over(ns, &fixture)?;
    ctx.log(format!("after four changes: {refilled} chain(s) refilled, {changes} element change(s), {kept} kept, {lines} line(s) sent"));
    ensure!(refilled == 3 && changes == 1, "the sync refilled {refilled} chain(s) and changed {changes} element(s); want 3 and 1");
    let got = listing(ns);
    ensure!(got == want, "the repaired table lists otherwise:\n{}\n---- want ----\n{}", got, want);
    clear(ns);
    Ok(())
}

/// One client (its anonymous set cache: `netlink::read_live_cached`) syncs three times;
/// between the second and the third, `nft` replaces a service chain's numgen map with
/// one of other content (the kernel may give it the freed `__mapN` name: only the set
/// handle tells them apart). The third sync refills that chain; the table lists as wanted.
fn replaced_anonymous_set(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftliveanon")?;
    let ns = lab.node();
    clear(ns);
    let fixture = repo().join("fixtures").join("demo.yaml");
    let ts = tables(&fixture)?;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(usize, usize), String>>();
    let name = ns.name.clone();
    let worker = crate::watch_e2e::in_netns(&name, move || {
        let mut nl = svcproxy::nftables::netlink::NetlinkNft::on_node_with(None);
        let round = |nl: &mut svcproxy::nftables::netlink::NetlinkNft| -> Result<(usize, usize), String> {
            let mut sum = (0, 0);
            for t in &ts {
                let r = sync::full(nl, t, false).map_err(|e| e.to_string())?;
                sum = (sum.0 + r.kept, sum.1 + r.refilled);
            }
            Ok(sum)
        };
        for _ in 0..3 {
            let r = round(&mut nl);
            let failed = r.is_err();
            let _ = done_tx.send(r);
            if failed || rx.recv_timeout(Duration::from_secs(60)).is_err() {
                return;
            }
        }
    });
    let next = || done_rx.recv_timeout(Duration::from_secs(60)).map_err(|e| format!("no sync: {e}"))?;
    next()?;
    let want = listing(ns);
    let _ = tx.send(());
    let (_, refilled) = next()?;
    ensure!(refilled == 0, "the second sync refilled {refilled}");
    let chains: Vec<String> = want.lines().filter_map(|l| l.trim().strip_prefix("chain ")).map(|c| c.trim_end_matches(" {").to_string()).collect();
    let listed = Listing::parse(&want);
    let service = listed
        .objects
        .iter()
        .find_map(|(k, o)| k.strip_prefix("chain service-").filter(|_| o.lines.iter().any(|l| l.contains("numgen random mod 2 vmap"))).map(|c| format!("service-{c}")))
        .ok_or("demo has no service chain with two endpoints")?;
    let endpoint = chains.iter().find(|c| c.starts_with("endpoint-")).ok_or("no endpoint chain")?;
    let text = format!("flush chain ip kube-proxy {service}\nadd rule ip kube-proxy {service} numgen random mod 1 vmap {{ 0 : goto {endpoint} }}\n");
    ns.run_stdin(&["nft", "-f", "-"], Some(&text))?;
    ensure!(listing(ns) != want, "the replacement changed nothing");
    let _ = tx.send(());
    let (kept, refilled) = next()?;
    let _ = tx.send(());
    let _ = worker.join();
    ctx.log(format!("third sync: {refilled} refilled, {kept} kept"));
    ensure!(refilled == 1, "the third sync refilled {refilled} chain(s), want 1 ({service})");
    ensure!(listing(ns) == want, "the table lists otherwise after the third sync:\n{}", listing(ns));
    clear(ns);
    Ok(())
}

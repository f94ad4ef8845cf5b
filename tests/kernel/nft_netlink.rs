//! svcproxy's nf_tables netlink writer (`nftables::netlink`, `nftables::wire`) on the real
//! kernel, inside a namespace of the test's own:
//! - for every `golden/*.nft` (both families) and a text of the rule shapes no golden
//!   holds, `nft list table` prints byte-identical text after `nft -f` of the text and
//!   after the netlink writer's batch of the same text (each into an empty namespace);
//! - a batch the kernel refuses changes nothing: the table lists as before, and the error
//!   names the refused line.

use std::time::Duration;

use svcproxy::nftables::{netlink, wire};

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::svcproxy::{path_str, repo};
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_netlink_writer_leaves_what_nft_leaves_for_every_golden", every_golden).with_timeout(Duration::from_secs(600)),
        Case::new("nftables_refused_netlink_batch_changes_nothing", refused_changes_nothing),
    ]
}

const VOCABULARY: &str = include_str!("nft_netlink_vocabulary.nft");

/// Sends `text` through the netlink writer from inside `ns`.
fn write_netlink(ns: &Ns, text: &str) -> Result<(), String> {
    let text = text.to_owned();
    in_netns(&ns.name, move || -> Result<(), String> {
        let mut batch = wire::encode(&text).map_err(|e| e.to_string())?;
        netlink::send(&mut batch, &text).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the netlink thread panicked".to_string())??
}

/// Both families' `kube-proxy` tables as `nft list table` prints them (a missing one: empty).
fn listing(ns: &Ns) -> String {
    ["ip", "ip6"].iter().map(|f| ns.run(&["nft", "list", "table", f, "kube-proxy"]).unwrap_or_default()).collect()
}

fn clear(ns: &Ns) {
    for f in ["ip", "ip6"] {
        let _ = ns.exec(&["nft", "delete", "table", f, "kube-proxy"]);
    }
}

/// nft -f, then (tables deleted) the netlink writer, of the same text: the same listing.
fn same_listing(ns: &Ns, name: &str, text: &str) -> Result<usize, String> {
    clear(ns);
    ns.run_stdin(&["nft", "-f", "-"], Some(text)).map_err(|e| format!("{name}: nft -f: {e}"))?;
    let by_nft = listing(ns);
    clear(ns);
    write_netlink(ns, text).map_err(|e| format!("{name}: netlink: {e}"))?;
    let by_netlink = listing(ns);
    clear(ns);
    if by_nft.trim().is_empty() {
        return Err(format!("{name}: nft -f left no kube-proxy table"));
    }
    if by_nft != by_netlink {
        let first = by_nft.lines().zip(by_netlink.lines()).position(|(a, b)| a != b).unwrap_or(by_nft.lines().count().min(by_netlink.lines().count()));
        return Err(format!(
            "{name}: the listings differ at line {}:\n  nft -f:  {:?}\n  netlink: {:?}",
            first + 1,
            by_nft.lines().nth(first).unwrap_or("(end)"),
            by_netlink.lines().nth(first).unwrap_or("(end)")
        ));
    }
    Ok(by_nft.lines().count())
}

fn every_golden(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let list = crate::nft_goldens::goldens();
    ensure!(list.len() >= 30, "only {} nftables goldens", list.len());
    let lab = Lab::new("nftnl")?;
    let ns = lab.node();
    let mut lines = 0;
    let mut both = 0;
    for g in &list {
        let text = std::fs::read_to_string(g).map_err(|e| format!("{}: {e}", g.display()))?;
        both += usize::from(text.contains("add table ip6 ") && text.contains("add table ip "));
        lines += same_listing(ns, path_str(g), &text)?;
    }
    lines += same_listing(ns, "nft_netlink_vocabulary.nft", VOCABULARY)?;
    ensure!(both > 0 && lines > 1000, "too little compared: {lines} listed lines, {both} dual-stack goldens");
    ctx.log(format!("{} goldens ({both} dual-stack) and the vocabulary text: {lines} listed lines identical after nft -f and after the netlink writer", list.len()));
    Ok(())
}

fn refused_changes_nothing(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftnlref")?;
    let ns = lab.node();
    let golden = repo().join("golden/clusterip-basic.nft");
    let text = std::fs::read_to_string(&golden).map_err(|e| e.to_string())?;
    write_netlink(ns, &text)?;
    let before = listing(ns);
    ensure!(before.contains("10.96.0.1") || before.contains("cluster-ips"), "the golden did not load:\n{before}");
    // A good element, a good chain with a rule, then a rule jumping to a chain that does
    // not exist: the kernel refuses the third, so the batch is aborted whole.
    let bad = "add element ip kube-proxy cluster-ips { 198.19.255.99 }\n\
               add chain ip kube-proxy extra\n\
               add rule ip kube-proxy extra jump no-such-chain\n";
    let err = write_netlink(ns, bad).err().ok_or("the kernel took a jump to a missing chain")?;
    ctx.log(&err);
    ensure!(err.contains("line 3") && err.contains("no-such-chain"), "the error names the refused line: {err}");
    let after = listing(ns);
    ensure!(after == before, "the refused batch changed the table:\n{after}");
    ensure!(!after.contains("198.19.255.99") && !after.contains("chain extra"), "a part of the refused batch was applied");
    // The same without the bad line goes through.
    write_netlink(ns, &bad.lines().take(2).map(|l| format!("{l}\n")).collect::<String>())?;
    let applied = listing(ns);
    ensure!(applied.contains("198.19.255.99") && applied.contains("chain extra"), "the good part alone did not apply:\n{applied}");
    Ok(())
}

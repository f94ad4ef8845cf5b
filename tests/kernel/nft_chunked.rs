//! nftables mode's chunked full sync (`nftables::chunked`) and its netlink name read
//! (`nftables::netlink::read_names`) on the real kernel:
//! - for every `golden/*.nft` fixture, svcproxy's full sync in many small netlink batches
//!   (a 5-line bound: every chain its own chunk) lists byte-identical to `nft -f` of the
//!   golden (kube-proxy's one transaction), into an empty table and again over the live
//!   one (where every chain exists and goes in the switching batch); the names read over
//!   netlink equal `nft`'s (`nft list chains`, `nft -t list sets`), and neither finds a
//!   table that is not there;
//! - a full sync whose batch fails mid-way (a chunk after others went through) leaves
//!   the previous rules serving, the table listing as before; the retry goes through.

use std::time::Duration;

use svcproxy::config::Settings;
use svcproxy::nftables::apply::{ExecNft, NftRead};
use svcproxy::net::IpFamily;
use svcproxy::nftables::{self, netlink, sync};

use crate::dataplane::{self, cluster_yaml, ep4, pod_ip4, svc, tcp, CLIENT, N, NODE};
use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Ns, Proto, Where};
use crate::svcproxy::{bin, path_str, run_expect, temp_yaml};
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_chunked_full_sync_lists_as_one_transaction_for_every_golden", every_golden).with_timeout(Duration::from_secs(600)),
        Case::new("nftables_chunked_full_sync_failing_mid_way_keeps_the_previous_rules", failing_mid_way).with_timeout(Duration::from_secs(180)),
    ]
}

/// Every chain its own chunk.
const SMALL_BATCHES: usize = 5;

pub(crate) fn listing(ns: &Ns) -> String {
    ["ip", "ip6"].iter().map(|f| ns.run(&["nft", "list", "table", f, "kube-proxy"]).unwrap_or_default()).collect()
}

pub(crate) fn clear(ns: &Ns) {
    for f in ["ip", "ip6"] {
        let _ = ns.exec(&["nft", "delete", "table", f, "kube-proxy"]);
    }
}

/// Runs `f` with a netlink client (batches bounded at `lines`) inside `ns`.
pub(crate) fn with_netlink<T: Send + 'static>(ns: &Ns, lines: usize, f: impl FnOnce(&mut netlink::NetlinkNft) -> T + Send + 'static) -> Result<T, String> {
    in_netns(&ns.name, move || {
        let mut nl = netlink::NetlinkNft::on_node_with(None);
        nl.batch_lines = lines;
        f(&mut nl)
    })
    .join()
    .map_err(|_| "the netlink thread panicked".to_string())?
}

/// The fixture's tables, rendered as `svcproxy render --mode nftables` does.
pub(crate) fn tables(fixture: &std::path::Path) -> Result<Vec<svcproxy::nftables::model::Table>, String> {
    let state = svcproxy::source::read_path(fixture).map_err(|e| e.to_string())?;
    let flags = Settings { mode: Some(svcproxy::settings::kinds::ProxyMode::Nftables), ..Settings::default() };
    let loaded = svcproxy::pipeline::load(state, flags, Settings::default()).map_err(|e| e.to_string())?;
    Ok(nftables::render_all(&loaded.config, &loaded.trackers).iter().map(|r| r.table()).collect())
}

/// The names netlink and nft read of both families, side by side.
fn names_agree(ns: &Ns) -> Result<usize, String> {
    let by_netlink = in_netns(&ns.name, || [IpFamily::V4, IpFamily::V6].map(netlink::read_names)).join().map_err(|_| "panicked")??;
    let by_nft = in_netns(&ns.name, || [IpFamily::V4, IpFamily::V6].map(|f| ExecNft::default().names(f))).join().map_err(|_| "panicked")??;
    let mut n = 0;
    // A family without the table: both say so.
    for (a, b) in by_netlink.into_iter().zip(by_nft) {
        let (a, b) = (a.map_err(|e| e.to_string())?, b.map_err(|e| e.to_string())?);
        if a != b {
            return Err(format!("netlink read {a:?}, nft {b:?}"));
        }
        n += a.map_or(0, |x| x.chains.len() + x.sets.len());
    }
    Ok(n)
}

fn every_golden(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftchunk")?;
    let ns = lab.node();
    let (mut compared, mut batches, mut names) = (0, 0, 0);
    for (stem, fixture, text) in crate::nft_goldens::with_fixtures()? {
        clear(ns);
        ns.run_stdin(&["nft", "-f", "-"], Some(&text)).map_err(|e| format!("{stem}: nft -f: {e}"))?;
        let one = listing(ns);
        names += names_agree(ns).map_err(|e| format!("{stem}: {e}"))?;
        clear(ns);
        for round in ["into an empty kernel", "over the live table"] {
            let ts = tables(&fixture)?;
            let sent = with_netlink(ns, SMALL_BATCHES, move |nl| ts.iter().map(|t| sync::full(nl, t, false).map(|r| r.batches)).collect::<Result<Vec<_>, _>>())?
                .map_err(|e| format!("{stem}: the chunked sync ({round}) failed: {e}"))?;
            batches += sent.iter().sum::<usize>();
            let chunked = listing(ns);
            if chunked != one {
                let at = one.lines().zip(chunked.lines()).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!(
                    "{stem}: the chunked sync ({round}) lists otherwise than nft -f of the golden, at line {}:\n  nft -f:  {:?}\n  chunked: {:?}",
                    at + 1,
                    one.lines().nth(at).unwrap_or("(end)"),
                    chunked.lines().nth(at).unwrap_or("(end)")
                )
                .into());
            }
        }
        clear(ns);
        compared += 1;
    }
    // Over two batches per sync on average: chunks between the declaring and the last batch
    // (v1.37's table has no endpoint chains outside session affinity: fewer chunks than v1.34's).
    ensure!(compared >= 30 && batches > 4 * compared && names > 1000, "too little compared: {compared} goldens, {batches} batches, {names} names");
    ensure!(names_agree(ns)? == 0, "no table: neither read finds a name");
    ctx.log(format!("{compared} goldens: the chunked full sync ({batches} batches in all) lists as kube-proxy's one transaction, twice each; {names} chain and set names read alike over netlink and by nft"));
    Ok(())
}

const CIP4: &str = "198.19.255.10";
const NEW: [&str; 6] = ["new1", "new2", "new3", "new4", "new5", "new6"];

fn args(path: &str) -> Vec<&str> {
    vec!["sync", "--mode", "nftables", "--from", path, "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--cluster-cidr", "198.18.0.0/16", "--iptables-backend", "nft"]
}

/// `svcproxy sync` with every chain in a batch of its own (`SVCPROXY_NFT_BATCH_LINES`).
fn small_sync(lab: &Lab, path: &str) -> Result<std::process::Output, String> {
    let lines = format!("SVCPROXY_NFT_BATCH_LINES={SMALL_BATCHES}");
    let mut argv = vec!["env", lines.as_str(), bin()];
    argv.extend(args(path));
    lab.node().exec(&argv)
}

/// `web` serves; the next sync adds six services, and the fourth's endpoint chain is
/// planted as a base chain: the chunk holding its service chain (`goto` a base chain) is
/// refused after the chunks of the first three went through. The table lists as before
/// (the new chains deleted again), `web` still serves; without the plant the retry goes
/// through and the new services serve.
fn failing_mid_way(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "conntrack", "sysctl", "kill", "nft", "env"])?;
    let lab = dataplane::lab(ctx, Backend::Nft, &[1, 2], false)?;
    let web = svc("web", CIP4, vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    let path = temp_yaml(&cluster_yaml(std::slice::from_ref(&web)))?;
    let out = small_sync(&lab, path_str(&path))?;
    ensure!(out.status.code() == Some(0), "the first sync failed: {}", String::from_utf8_lossy(&out.stderr));
    let before = listing(lab.node());

    let mut more = vec![web];
    more.extend(NEW.iter().enumerate().map(|(i, n)| svc(n, &format!("198.19.255.{}", 20 + i), vec![tcp("http", 80)], vec![ep4(2)])));
    let more_path = temp_yaml(&cluster_yaml(&more))?;
    let p = path_str(&more_path).to_string();
    let mut render = args(&p);
    render[0] = "render";
    render.truncate(render.len() - 2);
    let rendered = run_expect(lab.node(), Backend::Nft, &render, 0)?;
    let chain = rendered
        .lines()
        .find_map(|l| l.strip_prefix("add chain ip kube-proxy ").filter(|c| c.starts_with("service-") && c.contains("-dp/new4/tcp/")))
        .ok_or("render names no service chain for dp/new4")?
        .to_string();
    lab.node().run(&["nft", &format!("add chain ip kube-proxy {chain} {{ type filter hook input priority 0 ; }}")])?;
    let planted = listing(lab.node());
    ensure!(planted != before, "the plant changed nothing");

    let out = small_sync(&lab, &p)?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ctx.log(&err);
    ensure!(out.status.code() == Some(2), "exit {:?}, want 2: {err}", out.status.code());
    ensure!(err.contains("refused the transaction") && err.contains(&chain), "the error names the refused line: {err}");
    ensure!(listing(lab.node()) == planted, "the failed sync left the table changed:\n{}", listing(lab.node()));
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "the previous rules still serve")?;

    lab.node().run(&["nft", &format!("delete chain ip kube-proxy {chain}")])?;
    let out = small_sync(&lab, &p)?;
    ensure!(out.status.code() == Some(0), "the retry failed: {}", String::from_utf8_lossy(&out.stderr));
    let table = listing(lab.node());
    ensure!(table.contains(&format!("dnat to {}:", pod_ip4(2))) || table.contains(&format!(": {} . ", pod_ip4(2))), "the retry's table lacks the endpoints");
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.23", 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod2"], "new4 after the retry")?;
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "web after the retry")?;
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&more_path);
    Ok(())
}

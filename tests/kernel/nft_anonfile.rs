//! The anonymous-set cache persisted across processes (`nftables::anonfile`) on the real
//! kernel, in a fresh network namespace, the file in a temporary folder:
//! - a first client's full sync over the live table dumps every anonymous set and writes
//!   the file; a second client (a restart) with the file sends no element dump for them
//!   and still repairs the chain someone flushed in between;
//! - a file written for another network namespace (another cookie, the same boot) is
//!   ignored: every anonymous set is dumped again, nothing is refilled for it, and the
//!   file is rewritten for this namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use svcproxy::nftables::anonfile::{self, Identity};
use svcproxy::nftables::{netlink, sync};

use crate::harness::{skip, Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::nft_chunked::{clear, listing, tables};
use crate::svcproxy::repo;
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![Case::new("nftables_a_restart_reads_known_anonymous_sets_from_the_file", restart).with_timeout(Duration::from_secs(240))]
}

/// What one client's full sync of both families did.
#[derive(Debug, Default)]
struct Round {
    kept: usize,
    refilled: usize,
    reused: u64,
    dumped: u64,
}

/// One client, as a new process would be (nothing in memory), persisting to `file`: a
/// full sync of `fixture` over what `ns` holds.
fn new_client_syncs(ns: &Ns, fixture: &Path, file: &Path) -> Result<Round, String> {
    let ts = tables(fixture)?;
    let file = file.to_path_buf();
    in_netns(&ns.name, move || -> Result<Round, String> {
        let mut nl = netlink::NetlinkNft::on_node_with(Some(file));
        let mut round = Round::default();
        for t in &ts {
            let r = sync::full(&mut nl, t, false).map_err(|e| format!("the full sync failed: {e}"))?;
            round.kept += r.kept;
            round.refilled += r.refilled;
        }
        (round.reused, round.dumped) = (nl.anon_reused, nl.anon_dumped);
        Ok(round)
    })
    .join()
    .map_err(|_| "the netlink thread panicked".to_string())??
}

/// The identity the namespace's processes see.
fn identity_in(ns: &Ns) -> Result<Identity, String> {
    in_netns(&ns.name, || Identity::here().map_err(|e| e.to_string())).join().map_err(|_| "panicked".to_string())??
}

fn restart(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let here = match Identity::here() {
        Ok(id) => id,
        Err(e) => return Err(skip(format!("this kernel gives no network namespace identity (nothing is persisted): {e}"))),
    };
    let lab = Lab::new("nftanonf")?;
    let ns = lab.node();
    clear(ns);
    let dir: PathBuf = std::env::temp_dir().join(format!("svk-anon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("run").join("nft-anonymous-sets");
    let fixture = repo().join("fixtures").join("demo.yaml");
    let result = (|| -> CaseResult {
        new_client_syncs(ns, &fixture, &file)?;
        let want = listing(ns);
        let id = identity_in(ns)?;
        ensure!(id != here, "the test namespace has the root namespace's identity");

        let first = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("first client over the live table: {first:?}"));
        ensure!(first.dumped > 0 && first.reused == 0 && first.refilled == 0, "the first read: {first:?}");
        let cached = anonfile::load(&file, &id);
        ensure!(cached.len() as u64 == first.dumped, "the file holds {} entries, {} sets were dumped", cached.len(), first.dumped);

        // Someone flushes an endpoint chain; a restart repairs it without a single anonymous-set dump.
        let chain = want.lines().filter_map(|l| l.trim().strip_prefix("chain ")).map(|c| c.trim_end_matches(" {")).find(|c| c.starts_with("endpoint-")).ok_or("no endpoint chain")?.to_string();
        ns.run(&["nft", "flush", "chain", "ip", "kube-proxy", &chain])?;
        ensure!(listing(ns) != want, "the flush changed nothing");
        let second = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("second client, the file present: {second:?}"));
        ensure!(second.dumped == 0 && second.reused == first.dumped, "the restart dumped {} anonymous set(s), reused {} (want 0 and {})", second.dumped, second.reused, first.dumped);
        ensure!(second.refilled == 1, "the restart refilled {} chain(s), want 1 ({chain})", second.refilled);
        ensure!(listing(ns) == want, "the table lists otherwise after the restart:\n{}", listing(ns));

        // A file of another namespace (the cookie differs), with contents that would lie: ignored.
        let liar: anonfile::AnonCache = cached.keys().map(|k| (*k, b"not this set".to_vec())).collect();
        anonfile::store(&file, &Identity { netns_cookie: id.netns_cookie ^ 1, ..id }, &liar).map_err(|e| e.to_string())?;
        let third = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("third client, another namespace's file: {third:?}"));
        ensure!(third.reused == 0 && third.dumped == first.dumped, "with another namespace's file: {third:?}");
        ensure!(third.refilled == 0, "the ignored file's contents were used: {} chain(s) refilled", third.refilled);
        ensure!(anonfile::load(&file, &id) == cached, "the file was not rewritten for this namespace");
        ensure!(listing(ns) == want, "the table lists otherwise after the third sync");
        Ok(())
    })();
    clear(ns);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

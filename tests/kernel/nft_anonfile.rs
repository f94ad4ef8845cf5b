//! The anonymous-set cache persisted across processes (`nftables::anonfile`) on the real
//! kernel, in a fresh network namespace, the file in a temporary folder:
//! - a client's full sync into an empty kernel records the anonymous sets it created
//!   (no dump), and the next client over the live table reuses every one of them and
//!   refills nothing (the recorded contents are the kernel's);
//! - without the file, a client's full sync over the live table dumps every anonymous set
//!   (the same contents as recorded) and writes the file; a second client (a restart)
//!   with the file sends no element dump for them and still repairs the chain someone
//!   flushed in between;
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
    recorded: u64,
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
        (round.reused, round.dumped, round.recorded) = (nl.anon_reused, nl.anon_dumped, nl.anon_recorded);
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
        // Into an empty kernel: the sync records the anonymous sets it created.
        let fill = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("a client into an empty kernel: {fill:?}"));
        let want = listing(ns);
        let id = identity_in(ns)?;
        ensure!(id != here, "the test namespace has the root namespace's identity");
        ensure!(fill.recorded > 0 && fill.dumped == 0, "the sync into an empty kernel recorded {} anonymous set(s)", fill.recorded);
        let recorded = anonfile::load(&file, &id);
        ensure!(recorded.len() as u64 == fill.recorded, "the file holds {} entries, {} were recorded", recorded.len(), fill.recorded);
        let after_fill = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("the next client over the live table: {after_fill:?}"));
        ensure!(after_fill.dumped == 0 && after_fill.reused == fill.recorded && after_fill.refilled == 0, "after the fill, a restart: {after_fill:?} (the recorded contents must equal the kernel's: no refill)");

        // Without the file: every anonymous set is dumped, and the file written from that read.
        std::fs::remove_file(&file).map_err(|e| e.to_string())?;
        let first = new_client_syncs(ns, &fixture, &file)?;
        ctx.log(format!("a client without the file: {first:?}"));
        ensure!(first.dumped == fill.recorded && first.reused == 0 && first.refilled == 0, "the first read: {first:?}");
        let cached = anonfile::load(&file, &id);
        ensure!(cached == recorded, "the contents dumped differ from those recorded at the fill");

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

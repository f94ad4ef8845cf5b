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
//!
//! And the ways the kernel changes under a file (`the_kernel_changing_under_the_file`),
//! each with a second cluster of the same shape whose anonymous maps hold other
//! addresses (the same set handles, other contents: a stale entry believed would keep
//! the wrong rules), the sync always ends with the wanted table:
//! - another process commits between a full sync's batches: the sets that sync created
//!   are not recorded (the next read dumps them);
//! - another process replaces a service chain's anonymous map (`nft -f`): the new set
//!   has a new handle, the chain is refilled;
//! - the table deleted and made again (the other cluster, the same set handles): the new
//!   table's handle differs, no entry is used;
//! - another network namespace holding the other cluster with exactly the file's table
//!   and set handles (a control shows such a file is believed under the namespace's own
//!   identity): a file of the first namespace's identity is ignored;
//! - a reboot (the cookie counted again from the boot, so it may repeat): a file of
//!   another boot id is ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use svcproxy::nftables::anonfile::{self, Identity};
use svcproxy::nftables::listing::Listing;
use svcproxy::nftables::{netlink, sync};

use crate::harness::{skip, Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::nft_chunked::{clear, listing, tables};
use crate::svcproxy::repo;
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_a_restart_reads_known_anonymous_sets_from_the_file", restart).with_timeout(Duration::from_secs(240)),
        Case::new("nftables_the_kernel_changing_under_the_anonymous_set_file", changes).with_timeout(Duration::from_secs(300)),
    ]
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
    client_syncs(ns, fixture, Some(file))
}

/// [`new_client_syncs`], persisting to `file` or (`None`) to nothing.
fn client_syncs(ns: &Ns, fixture: &Path, file: Option<&Path>) -> Result<Round, String> {
    let ts = tables(fixture)?;
    let file = file.map(Path::to_path_buf);
    in_netns(&ns.name, move || -> Result<Round, String> {
        let mut nl = netlink::NetlinkNft::on_node_with(file);
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

/// A client's fill of `fixture` in small batches (persisting to `file`) with another
/// process's commit (`nft add table ip intruder`) right after its second batch, among
/// the IPv4 table's chunks.
fn fill_with_a_commit_between(ns: &Ns, fixture: &Path, file: &Path) -> Result<Round, String> {
    let ts = tables(fixture)?;
    let file = file.to_path_buf();
    in_netns(&ns.name, move || -> Result<Round, String> {
        let mut nl = netlink::NetlinkNft::on_node_with(Some(file));
        nl.batch_lines = 5;
        let mut send = std::mem::replace(&mut nl.sender, Box::new(|_: &mut _, _: &str| Ok(())));
        let mut sent = 0;
        nl.sender = Box::new(move |batch, text| {
            send(batch, text)?;
            sent += 1;
            if sent == 2 {
                // A child of this thread is in its network namespace.
                let out = std::process::Command::new("nft").args(["add", "table", "ip", "intruder"]).output();
                if !out.as_ref().is_ok_and(|o| o.status.success()) {
                    return Err(svcproxy::nftables::apply::NftError::Failed { command: "nft add table ip intruder".into(), message: format!("{out:?}") });
                }
            }
            Ok(())
        });
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

/// `demo.yaml` with every endpoint moved to other addresses: the same table shape (chains,
/// sets, anonymous maps in the same order), other anonymous map contents.
fn moved_endpoints() -> Result<PathBuf, String> {
    let demo = std::fs::read_to_string(repo().join("fixtures").join("demo.yaml")).map_err(|e| e.to_string())?;
    let moved = demo.replace("- addresses: [10.244.", "- addresses: [10.245.").replace("- addresses: [\"fd00:10:244:", "- addresses: [\"fd00:10:245:").replace("- addresses: [fd00:10:244:", "- addresses: [fd00:10:245:");
    if moved == demo {
        return Err("demo.yaml has no endpoint addresses to move".into());
    }
    crate::svcproxy::temp_yaml(&moved)
}

/// `ns` cleared and filled with `fixture` by a client persisting to `file`: the file's
/// entries, the table and set handles of the new tables.
fn fresh_fill(ns: &Ns, fixture: &Path, file: &Path) -> Result<anonfile::AnonCache, String> {
    clear(ns);
    let _ = std::fs::remove_file(file);
    let r = new_client_syncs(ns, fixture, file)?;
    let cache = anonfile::load(file, &identity_in(ns)?);
    if r.recorded == 0 || cache.len() as u64 != r.recorded {
        return Err(format!("the fill recorded {} anonymous set(s), the file holds {}", r.recorded, cache.len()));
    }
    Ok(cache)
}

/// `recorded`'s contents under the table handles `live` has, per family: a file that,
/// when the set handles repeat, names exactly the live sets with another cluster's contents.
fn relabelled(recorded: &anonfile::AnonCache, live: &anonfile::AnonCache) -> anonfile::AnonCache {
    let table_of = |family: u8| live.keys().find(|k| k.0 == family).map(|k| k.1);
    recorded.iter().filter_map(|(k, v)| Some(((k.0, table_of(k.0)?, k.2), v.clone()))).collect()
}

/// The same objects (chains, sets, maps with their contents), in whatever order the
/// kernel lists them: a chain made by a later sync is listed after the older ones.
fn same(a: &str, b: &str) -> bool {
    Listing::parse(a).objects == Listing::parse(b).objects
}

fn set_handles(c: &anonfile::AnonCache) -> std::collections::BTreeSet<(u8, u64)> {
    c.keys().map(|k| (k.0, k.2)).collect()
}

fn table_handles(c: &anonfile::AnonCache) -> std::collections::BTreeSet<(u8, u64)> {
    c.keys().map(|k| (k.0, k.1)).collect()
}

fn changes(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    if let Err(e) = Identity::here() {
        return Err(skip(format!("this kernel gives no network namespace identity (nothing is persisted): {e}")));
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("svk-anonk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (file, other) = (dir.join("nft-anonymous-sets"), dir.join("other-cluster"));
    let a = repo().join("fixtures").join("demo.yaml");
    let b = moved_endpoints()?;
    let lab = Lab::new("nftanonk")?;
    let lab2 = Lab::new("nftanonk2")?;
    let (ns, ns2) = (lab.node(), lab2.node());
    let result = (|| -> CaseResult {
        let recorded = fresh_fill(ns, &a, &file)?;
        let want = listing(ns);
        let id = identity_in(ns)?;

        // Another process commits between the batches of the IPv4 table's fill: its sets
        // are not recorded; the next client dumps exactly those and refills nothing.
        clear(ns);
        let _ = std::fs::remove_file(&file);
        let cut = fill_with_a_commit_between(ns, &a, &file)?;
        ctx.log(format!("a fill another process committed between: {cut:?}"));
        ensure!(cut.recorded < recorded.len() as u64 && cut.dumped == 0, "a fill cut by another commit recorded {} of {} set(s)", cut.recorded, recorded.len());
        let r = new_client_syncs(ns, &a, &file)?;
        ctx.log(format!("the next client: {r:?}"));
        ensure!(r.reused == cut.recorded && r.dumped == recorded.len() as u64 - cut.recorded && r.refilled == 0, "after a cut fill: {r:?}");
        ensure!(listing(ns) == want, "the table lists otherwise after a cut fill:\n{}", listing(ns));
        ns.run(&["nft", "delete", "table", "ip", "intruder"])?;
        let recorded = fresh_fill(ns, &a, &file)?;

        // Another process replaces a service chain's anonymous map: a new set, a new handle.
        let line = want.lines().map(str::trim).find(|l| l.contains("numgen random mod 2 map")).ok_or("demo has no two-endpoint map")?;
        let chain = want
            .lines()
            .scan(String::new(), |c, l| {
                if let Some(n) = l.trim().strip_prefix("chain ") {
                    *c = n.trim_end_matches(" {").to_string();
                }
                Some((c.clone(), l.trim()))
            })
            .find(|(_, l)| *l == line)
            .map(|(c, _)| c)
            .ok_or("the map's chain")?;
        let one = line.split(" map {").next().unwrap_or_default().replace("mod 2", "mod 1");
        let arm = line.split(", 1 :").next().unwrap_or_default().split(" map { ").nth(1).unwrap_or_default();
        ns.run_stdin(&["nft", "-f", "-"], Some(&format!("flush chain ip kube-proxy {chain}\nadd rule ip kube-proxy {chain} {one} map {{ {arm} }}\n")))?;
        ensure!(listing(ns) != want, "the replacement changed nothing");
        let r = new_client_syncs(ns, &a, &file)?;
        ctx.log(format!("after another process replaced {chain}'s map: {r:?}"));
        ensure!(r.refilled == 1 && r.dumped == 1, "the sync refilled {} chain(s) and dumped {} set(s); want the replaced one", r.refilled, r.dumped);
        ensure!(listing(ns) == want, "the table lists otherwise after the replacement was repaired:\n{}", listing(ns));

        // The table deleted and made again, by the other cluster: the old entries' table handle is gone.
        let before = fresh_fill(ns, &a, &file)?;
        let theirs = fresh_fill(ns, &b, &other)?;
        ensure!(listing(ns) != want, "the other cluster lists as demo");
        ensure!(table_handles(&theirs).is_disjoint(&table_handles(&before)), "a table made again has the old table's handle");
        ctx.log(format!("the table made again: set handles {} those of the deleted one", if set_handles(&theirs) == set_handles(&before) { "repeat" } else { "differ from" }));
        let r = new_client_syncs(ns, &a, &file)?;
        ctx.log(format!("over the table made again, with the old table's file: {r:?}"));
        ensure!(r.reused == 0 && r.dumped > 0 && r.refilled > 0, "with entries of a deleted table: {r:?}");
        ensure!(same(&listing(ns), &want), "the table lists otherwise after the sync over the table made again:\n{}", listing(ns));

        // Another network namespace holding the other cluster under the first one's handles.
        let theirs = fresh_fill(ns2, &b, &other)?;
        let id2 = identity_in(ns2)?;
        ensure!(id2.netns_cookie != id.netns_cookie, "two namespaces, one cookie");
        ctx.log(format!("a new namespace: its table and set handles {} those the first namespace recorded", if theirs.keys().collect::<std::collections::BTreeSet<_>>() == recorded.keys().collect() { "equal" } else { "differ from" }));
        let lie = relabelled(&recorded, &theirs);
        ensure!(set_handles(&lie) == set_handles(&theirs), "the other cluster's sets were made with other handles: the lie names no live set");
        // The control: the lie under this namespace's own identity is believed (the chains
        // binding the other cluster's maps are kept: a wrong table).
        anonfile::store(&file, &id2, &lie).map_err(|e| e.to_string())?;
        let r = new_client_syncs(ns2, &a, &file)?;
        ctx.log(format!("the control, the lie under this namespace's identity: {r:?}"));
        ensure!(r.reused as usize == lie.len() && !same(&listing(ns2), &want), "the control: a file naming the live sets under this namespace's identity is believed ({r:?})");
        anonfile::store(&file, &id, &lie).map_err(|e| e.to_string())?;
        let r = new_client_syncs(ns2, &a, &file)?;
        ctx.log(format!("another namespace, the first namespace's file: {r:?}"));
        ensure!(r.reused == 0 && r.refilled > 0, "the first namespace's file was used in another: {r:?}");
        ensure!(same(&listing(ns2), &want), "the table lists otherwise in the other namespace:\n{}", listing(ns2));

        // A reboot: the same cookie, another boot id.
        let theirs = fresh_fill(ns2, &b, &other)?;
        let lie = relabelled(&recorded, &theirs);
        let mut boot_id = id2.boot_id;
        boot_id[0] ^= 0xff;
        anonfile::store(&file, &Identity { boot_id, netns_cookie: id2.netns_cookie }, &lie).map_err(|e| e.to_string())?;
        let r = new_client_syncs(ns2, &a, &file)?;
        ctx.log(format!("a file of another boot, the same cookie: {r:?}"));
        ensure!(r.reused == 0 && r.refilled > 0, "another boot's file was used: {r:?}");
        ensure!(same(&listing(ns2), &want), "the table lists otherwise after another boot's file:\n{}", listing(ns2));
        Ok(())
    })();
    clear(ns);
    clear(ns2);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&b);
    result
}

//! One family's full nftables sync, as kube-proxy's full sync does it: ONE transaction
//! (atomic: one netlink batch on the node, or one `nft -f -` run) switches every chain and
//! every set and map but the session-affinity ones to their new rules and elements —
//! preceded by one that creates the table, chains, sets and maps that are missing (what
//! kube-proxy's transaction creates in its own first lines), and, over netlink, by bounded
//! batches that fill the new service chains nothing reaches yet (through `nft -f`, whose
//! every run reads the whole table, by nothing); one writer makes both
//! ([`super::chunked`]). Chains and sets of the table that the ruleset no longer has
//! (a deleted service's) are flushed in the switching transaction and deleted in another one
//! right after (kube-proxy deletes stale chains after the transaction that removes what
//! refers to them). Over a live table that the client can read rule by rule (netlink:
//! [`NftRead::read_for_sync`]), only what differs is sent ([`super::delta`]): chains the kernel holds
//! exactly are not refilled, named sets and maps change by element difference. A refused transaction changes nothing that serves packets: the
//! previous rules keep serving, and what the sync created is deleted again. A dry run
//! reads the live table and the desired one as the kernel lists it
//! ([`NftRead::canonical`]) and compares them ([`super::listing`]); it sends nothing.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::apply::{Names, Nft, NftError, NftRead, NftWrite, Part};
use super::listing::{self, Diff, Listing};
use super::model::{self, NftFamily, Form, Table};
use crate::net::IpFamily;
use super::{chunked, cold, delta};
use super::names::{localhost_nodeport_rejected_counter, HAIRPIN_CONNECTIONS, LOCALHOST_NODEPORT_REJECT_PORTS, LOCALHOST_NODEPORT_REJECT_PORTS_SPEC, MARK_MASQ};
use crate::driver::Phase;

/// A sync's failed `nft` call, and the step it was (kube-proxy counts only a failed
/// transaction, [`Phase::Restore`]).
#[derive(Debug)]
pub struct SyncError {
    pub phase: Phase,
    pub error: NftError,
}

impl SyncError {
    pub fn read(error: NftError) -> Self {
        SyncError { phase: Phase::Read, error }
    }

    pub fn write(error: NftError) -> Self {
        SyncError { phase: Phase::Restore, error }
    }
}

// Shown as the `nft` call's error itself.
impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// What one family's sync found and did.
#[derive(Debug, Clone)]
pub struct Report {
    pub family: IpFamily,
    /// A dry run's comparison of the live table with the desired one.
    pub diff: Option<Diff>,
    /// Whether a transaction was sent.
    pub applied: bool,
    /// Lines of the transactions sent (0 when none was).
    pub lines: usize,
    /// Transactions a full sync sent the table in (declare, chunks, last: [`super::chunked`]).
    pub batches: usize,
    /// Chains of the live table a full sync compared equal and left alone ([`super::delta`]).
    pub kept: usize,
    /// Chains that existed and were flushed and refilled (they differed, or were not compared).
    pub refilled: usize,
    /// Element deletes and adds of the sets and maps updated by difference.
    pub element_changes: usize,
    /// Chains and sets of the live table the ruleset no longer has (`chain NAME`, `set NAME`).
    pub stale: Vec<String>,
    /// Why deleting them failed (the next full sync finds and deletes them again).
    pub stale_error: Option<String>,
    /// Which writer applied a partial sync's transaction (`None`: a full sync's, `nft`).
    pub via: Option<super::apply::Via>,
    /// The kernel held the other of kube-proxy's two tables ([`other_release`]).
    pub other_release: Option<String>,
    /// A cold start through the interim table ([`super::cold`]): the chains to convert to
    /// kube-proxy's rules now that it serves, and when it served.
    pub interim: Option<Interim>,
    /// Chains of a cold start's conversion a partial sync's transaction carried and converted.
    pub converted: usize,
    pub timings: Timings,
}

impl Report {
    pub(crate) fn new(family: IpFamily) -> Self {
        Report { family, diff: None, applied: false, lines: 0, batches: 0, kept: 0, refilled: 0, element_changes: 0, stale: Vec::new(), stale_error: None, via: None, other_release: None, interim: None, converted: 0, timings: Timings::default() }
    }
}

/// A cold start's interim table, applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interim {
    pub chains: Vec<String>,
    /// When it served, since the apply began, on the apply's clock ([`Timings::apply`]:
    /// without the time spent writing the batches sent before).
    pub served: Duration,
    /// The kernel held these chains in the interim's form already: a restart in the middle
    /// of a conversion, which the sync kept serving and resumes, not refills.
    pub resumed: bool,
}

/// Wall time of each phase of one sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Writing the transaction (or, for a dry run, the desired table).
    pub render: Duration,
    /// Reading the live table (its names, or for a dry run all of it and the desired
    /// table as the kernel lists it).
    pub read: Duration,
    /// Sending the transactions (netlink batches, or `nft -f -`).
    pub apply: Duration,
}

/// Brings one family's `kube-proxy` table to `table` (or, with `dry_run`, says what differs).
pub fn full(nft: &mut dyn Nft, table: &Table, dry_run: bool) -> Result<Report, SyncError> {
    full_with(nft, table, dry_run, interim_min())
}

/// [`full`], a cold start through the interim table from `interim_min` `numgen` maps on.
/// Each batch is written when it is sent and dropped before the next is written
/// ([`chunked::Writer`]); a cold start's interim rules are made batch by batch.
fn full_with(nft: &mut dyn Nft, table: &Table, dry_run: bool, interim_min: usize) -> Result<Report, SyncError> {
    if dry_run {
        return compare(nft, table);
    }
    let family = table.family;
    let mut report = Report::new(family);
    let t = Instant::now();
    // The names, and the live table to compare (netlink only: a chunked sync).
    let read = nft.read_for_sync(family).map_err(SyncError::read)?;
    let existed = read.is_some();
    let (names, held) = read.unwrap_or_default();
    report.timings.read = t.elapsed();
    let t = Instant::now();
    // A cold start over netlink: an interim table first when the kernel would walk its set
    // list for many anonymous maps (the conversion to the table follows once it serves).
    let interim = match (names.chains.is_empty(), nft.batch_lines()) {
        (true, Some(_)) => cold::chains(table, interim_min),
        _ => None,
    };
    let o = &table.objects;
    let wanted_chains: HashSet<&str> = o.chains.iter().map(|c| c.name.as_str()).collect();
    let wanted_sets: HashSet<&str> = o.sets.iter().map(|s| s.name.as_str()).collect();
    let stale_chains: Vec<&String> = names.chains.iter().filter(|c| !wanted_chains.contains(c.as_str())).collect();
    let stale_sets: Vec<&String> = names.sets.iter().filter(|s| !wanted_sets.contains(s.as_str())).collect();
    let existing: HashSet<&str> = names.chains.iter().map(String::as_str).collect();
    let held_set = |n: &str| names.sets.iter().any(|s| s == n);
    report.other_release = other_release(|c| existing.contains(c), held_set, table);
    if let Some(note) = &report.other_release {
        tracing::warn!(family = family.nft_word(), "{note}");
    }
    // (Over a live table with no chain, as a cold start is, no chain is compared: the
    // plan is the same for the table and its interim.)
    let mut plan = held.as_ref().map(|h| delta::plan(table, h));
    // Restarted in the middle of a conversion: the chains still in the interim's form
    // keep serving and are converted next, a paced batch at a time, not refilled here.
    let resumed = match (&mut plan, &held) {
        (Some(p), Some(h)) if interim.is_none() => {
            let differing = o.chains.iter().map(|c| c.name.as_str()).filter(|c| existing.contains(c) && !p.same.contains(*c)).collect();
            let r = cold::resumable(table, &differing, h);
            p.same.extend(r.iter().cloned());
            r
        }
        _ => Vec::new(),
    };
    drop(held);
    if let Some(p) = &plan {
        report.kept = p.same.len();
        report.element_changes = p.element_changes();
    }
    report.refilled = o.chains.iter().filter(|c| existing.contains(c.name.as_str()) && !plan.as_ref().is_some_and(|p| p.same.contains(&c.name))).count();
    let mut writer = chunked::Writer::new(table, &existing, nft.batch_lines(), plan.as_ref(), interim.is_some());
    let declare = std::mem::take(&mut writer.declare);
    let head = format!("{} {}", family.nft_word(), table.name);
    report.timings.render = t.elapsed();
    // Written, then sent: the time of each goes to its phase.
    let t = Instant::now();
    report.lines = declare.lines().count();
    nft.run(&declare, Part::First).map_err(SyncError::write)?;
    drop(declare);
    let sent = |nft: &mut dyn Nft, script: &model::Script<'_>| {
        nft.run_script(script, Part::Next).map_err(|e| {
            undeclare(nft, table, existed.then_some(&names));
            SyncError::write(e)
        })
    };
    let mut written = Duration::ZERO;
    for k in 0..writer.chunks() {
        let w = Instant::now();
        let mut arms = Vec::new();
        let chunk = writer.chunk(k, &mut arms);
        report.lines += chunk.lines().count();
        written += w.elapsed();
        sent(nft, &chunk)?;
    }
    let w = Instant::now();
    let mut arms = Vec::new();
    let mut last = writer.last(&mut arms);
    for c in &stale_chains {
        last.push_str(&format!("flush chain {head} {c}\n"));
    }
    report.lines += last.lines().count();
    // Over a live table that holds it all, the last batch may be empty: not sent.
    report.batches = 1 + writer.chunks() + usize::from(!last.is_empty());
    written += w.elapsed();
    if !last.is_empty() {
        sent(nft, &last)?;
    }
    drop(last);
    drop(arms);
    report.applied = true;
    // Every batch is written by now: its writing time is render's, as for the apply.
    let served = t.elapsed().saturating_sub(written);
    if let Some(chains) = interim {
        tracing::info!(family = family.nft_word(), chains = chains.len(), served_after = ?served, "cold start: the interim table serves every Service; its chains are converted to kube-proxy's next");
        report.interim = Some(Interim { chains, served, resumed: false });
    } else if !resumed.is_empty() {
        tracing::info!(family = family.nft_word(), chains = resumed.len(), "a cold start's conversion resumed: chains still in the interim's form serve and are converted next");
        report.interim = Some(Interim { chains: resumed, served, resumed: true });
    }
    // A stale localhost NodePort reject chain's named counter goes after it (its rule, the
    // counter's one reference, went in the flush above).
    // Their map still sends NodePorts to them (a sync reads no map names): when the table
    // no longer has it, it goes first, added and deleted as kube-proxy does.
    let stale_counters = stale_chains.iter().filter_map(|c| c.strip_prefix("localhost-nodeport-reject-")).map(localhost_nodeport_rejected_counter);
    let map_gone = stale_chains.iter().any(|c| c.starts_with("localhost-nodeport-reject-")) && !wanted_sets.contains(LOCALHOST_NODEPORT_REJECT_PORTS);
    let map = format!("add map {head} {LOCALHOST_NODEPORT_REJECT_PORTS} {LOCALHOST_NODEPORT_REJECT_PORTS_SPEC}\ndelete map {head} {LOCALHOST_NODEPORT_REJECT_PORTS}\n");
    let delete: String = map_gone
        .then_some(map)
        .into_iter()
        .chain(stale_chains.iter().map(|c| format!("delete chain {head} {c}\n")))
        .chain(stale_sets.iter().map(|s| format!("delete set {head} {s}\n")))
        .chain(stale_counters.map(|c| format!("delete counter {head} {c}\n")))
        .collect();
    report.stale = stale_chains.iter().map(|c| format!("chain {c}")).chain(stale_sets.iter().map(|s| format!("set {s}"))).collect();
    if !delete.is_empty() {
        if let Err(e) = nft.run(&delete, Part::Next) {
            tracing::warn!(family = family.nft_word(), error = %e, "stale nftables chains not deleted; the next full sync tries again");
            report.stale_error = Some(e.to_string());
        }
    }
    nft.full_sync_done(family);
    report.timings.render += written;
    report.timings.apply = t.elapsed().saturating_sub(written);
    Ok(report)
}

/// [`cold::INTERIM_MIN`], or the number `SVCPROXY_NFT_INTERIM_MIN` names (a test and
/// tuning knob, not a setting: 0 turns the interim table off).
fn interim_min() -> usize {
    match std::env::var("SVCPROXY_NFT_INTERIM_MIN").ok().and_then(|v| v.parse().ok()) {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => cold::INTERIM_MIN,
    }
}

/// After a refused filling transaction: deletes what the declaring one created (the whole
/// table when there was none, else the chains and sets `before` did not have), so that
/// a refused sync leaves the table as it was. Best effort: what stays is empty and
/// unreferenced, and the next full sync uses or deletes it.
fn undeclare(nft: &mut dyn NftWrite, table: &Table, before: Option<&Names>) {
    let head = format!("{} {}", table.family.nft_word(), table.name);
    let text = match before {
        None => format!("delete table {head}\n"),
        Some(names) => {
            let had_chains: HashSet<&str> = names.chains.iter().map(String::as_str).collect();
            let had_sets: HashSet<&str> = names.sets.iter().map(String::as_str).collect();
            let o = &table.objects;
            let new: Vec<&str> = o.chains.iter().map(|c| c.name.as_str()).filter(|c| !had_chains.contains(c)).collect();
            // Filled chunks left rules in new chains (jumps between them): flush them all
            // before deleting any.
            let flushes = new.iter().map(|c| format!("flush chain {head} {c}\n"));
            let chains = flushes.chain(new.iter().map(|c| format!("delete chain {head} {c}\n")));
            // Maps are not in `names`: a new map is left (empty) for the next full sync.
            let sets = o.sets.iter().filter(|s| !s.is_map && !had_sets.contains(s.name.as_str())).map(|s| format!("delete set {head} {}\n", s.name));
            chains.chain(sets).collect()
        }
    };
    if text.is_empty() {
        return;
    }
    if let Err(e) = nft.run(&text, Part::Next) {
        tracing::warn!(family = table.family.nft_word(), error = %e, "empty nftables chains and sets of a refused sync not deleted; the next full sync does");
    }
}

/// A dry run: the live table against the desired one, both as the kernel lists them.
/// When the kernel holds the other of kube-proxy's two nftables tables (v1.34's, with its
/// `mark-for-masquerade` chain, or v1.36's, with its `hairpin-connections` set) than the
/// one `table` is: what the sync does about it and how to keep the kernel's, for the log
/// (a node switching from kube-proxy with the wrong `--kube-proxy-version` sees its
/// whole table rewritten).
pub fn other_release(held_chain: impl Fn(&str) -> bool, held_set: impl Fn(&str) -> bool, table: &Table) -> Option<String> {
    let wants_chain = |n: &str| table.objects.chains.iter().any(|c| c.name == n);
    let wants_set = |n: &str| table.objects.sets.iter().any(|s| s.name == n);
    if held_chain(MARK_MASQ) && !wants_chain(MARK_MASQ) {
        return Some(format!(
            "the kernel holds kube-proxy v1.34's nftables table (a {MARK_MASQ} chain, as kube-proxy v1.33 to v1.35 write it); a sync with this --kube-proxy-version (the default: 1.37) rewrites it as v1.36's; to keep it, pass --kube-proxy-version 1.35"
        ));
    }
    if held_set(HAIRPIN_CONNECTIONS) && !wants_set(HAIRPIN_CONNECTIONS) {
        return Some(format!(
            "the kernel holds kube-proxy v1.36's nftables table (a {HAIRPIN_CONNECTIONS} set, as kube-proxy v1.36 and later write it); a sync with this --kube-proxy-version (1.33 to 1.35) rewrites it as v1.34's; to keep it, pass --kube-proxy-version 1.37"
        ));
    }
    None
}

fn compare(nft: &mut dyn NftRead, table: &Table) -> Result<Report, SyncError> {
    let mut report = Report::new(table.family);
    let t = Instant::now();
    let text = model::write(table, Form::Dump);
    report.timings.render = t.elapsed();
    let t = Instant::now();
    let live = Listing::parse(&nft.list(table.family).map_err(SyncError::read)?.unwrap_or_default());
    let listed = |kind: &str, n: &str| live.objects.contains_key(&format!("{kind} {n}"));
    report.other_release = other_release(|c| listed("chain", c), |n| listed("set", n), table);
    let desired = Listing::parse(&nft.canonical(table.family, &text).map_err(SyncError::read)?);
    report.timings.read = t.elapsed();
    report.diff = Some(listing::diff(&live, &desired));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::fake::{Call, FakeNft};
    use crate::nftables::model::{Chain, Element, Objects, Rule};

    fn table(services: &[&str]) -> Table {
        let mut o = Objects::default();
        o.chain(Chain::regular("services"));
        for s in services {
            o.chain(Chain::regular(format!("service-{s}")));
            o.rule(Rule::new("services", format!("jump service-{s}")));
            o.rule(Rule::new(format!("service-{s}"), "accept"));
        }
        Table { family: IpFamily::V4, name: "kube-proxy", comment: "rules for kube-proxy", objects: o }
    }

    #[test]
    fn the_other_kube_proxy_table_in_the_kernel_is_named() {
        let mut v134 = table(&["a"]);
        v134.objects.chain(Chain::regular(MARK_MASQ));
        let mut v137 = table(&["a"]);
        v137.objects.sets.push(crate::nftables::model::Set::plain(HAIRPIN_CONNECTIONS, "ipv4_addr", None));
        let holds = |t: &Table| {
            let chains: Vec<String> = t.objects.chains.iter().map(|c| c.name.clone()).collect();
            let sets: Vec<String> = t.objects.sets.iter().map(|s| s.name.clone()).collect();
            (chains, sets)
        };
        let note = |held: &Table, wanted: &Table| {
            let (c, s) = holds(held);
            other_release(|n| c.iter().any(|x| x == n), |n| s.iter().any(|x| x == n), wanted)
        };
        assert!(note(&v134, &v137).is_some_and(|n| n.contains("v1.34's") && n.contains("--kube-proxy-version 1.35")));
        assert!(note(&v137, &v134).is_some_and(|n| n.contains("v1.36's") && n.contains("--kube-proxy-version 1.37")));
        assert_eq!(note(&v137, &v137), None);
        assert_eq!(note(&v134, &v134), None);
        assert_eq!(note(&table(&[]), &v137), None, "an empty kernel");
    }

    #[test]
    fn a_localhost_reject_chain_gone_takes_its_counter_along() {
        let mut with = table(&["a"]);
        with.objects.chain(Chain::regular("localhost-nodeport-reject-udp"));
        with.objects.rule(Rule::new("localhost-nodeport-reject-udp", "counter name \"localhost-nodeport-rejected-udp\" reject"));
        with.objects.counters.push("localhost-nodeport-rejected-udp".into());
        with.objects.sets.push(crate::nftables::model::Set::map(LOCALHOST_NODEPORT_REJECT_PORTS, "inet_proto . inet_service : verdict", Some("localhost NodePorts rejected by kube-proxy")));
        with.objects.elements.push(Element::parsed(LOCALHOST_NODEPORT_REJECT_PORTS, "udp . 30053 : goto localhost-nodeport-reject-udp"));
        let mut nft = FakeNft::new();
        full(&mut nft, &with, false).unwrap();
        assert!(nft.listing(IpFamily::V4).unwrap().contains("counter localhost-nodeport-rejected-udp"));
        let r = full(&mut nft, &table(&["a"]), false).unwrap();
        assert_eq!((r.stale.as_slice(), r.stale_error.as_deref()), (&["chain localhost-nodeport-reject-udp".to_owned()][..], None));
        let listed = nft.listing(IpFamily::V4).unwrap();
        assert!(!listed.contains("localhost-nodeport-reject"), "{listed}");
    }

    #[test]
    fn a_full_sync_declares_then_fills_in_one_transaction_and_stale_chains_go_in_a_third() {
        let mut nft = FakeNft::new();
        let r = full(&mut nft, &table(&["a", "b"]), false).unwrap();
        assert!(r.applied && r.stale.is_empty());
        let runs = nft.take_runs();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(runs[0].lines().all(|l| l.starts_with("add table") || l.starts_with("add chain")), "{}", runs[0]);
        assert!(!runs[1].contains("add chain") && runs[1].contains("add rule"), "{}", runs[1]);

        let r = full(&mut nft, &table(&["a"]), false).unwrap();
        assert_eq!(r.stale, ["chain service-b"]);
        let runs = nft.take_runs();
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert!(runs[1].contains("flush chain ip kube-proxy service-b\n") && !runs[1].contains("delete"));
        assert_eq!(runs[2], "delete chain ip kube-proxy service-b\n");
        let listed = nft.listing(IpFamily::V4).unwrap();
        assert!(!listed.contains("service-b") && listed.contains("service-a"), "{listed}");
    }

    #[test]
    fn over_netlink_a_full_sync_sends_new_service_chains_in_chunks_and_switches_last() {
        let mut nft = FakeNft::new();
        nft.batch_lines = Some(2);
        let r = full(&mut nft, &table(&["HASHHASH-a", "HASHHASH-b", "HASHHASH-c"]), false).unwrap();
        assert_eq!(r.batches, 5, "declare, three chunks of one chain each, last");
        let runs = nft.take_runs();
        assert_eq!(runs.len(), 5, "{runs:?}");
        assert_eq!(runs[1], "flush chain ip kube-proxy service-HASHHASH-a\nadd rule ip kube-proxy service-HASHHASH-a accept\n");
        assert!(runs[4].starts_with("flush chain ip kube-proxy services\n") && runs[4].contains("jump service-HASHHASH-c"), "{}", runs[4]);
        let mut one = FakeNft::new();
        one.run(&model::write(&table(&["HASHHASH-a", "HASHHASH-b", "HASHHASH-c"]), Form::Transaction)).unwrap();
        assert_eq!(nft.listing(IpFamily::V4), one.listing(IpFamily::V4));
    }

    /// Three services, two of whose chains bind a numgen map.
    fn two_numgen_maps() -> Table {
        let mut t = table(&["HASHHASH-a", "HASHHASH-b", "HASHHASH-c"]);
        t.objects.chain(Chain::regular("endpoint-X"));
        t.objects.rule(Rule::new("endpoint-X", "accept"));
        for r in t.objects.rules.iter_mut().filter(|r| r.chain.starts_with("service-") && r.chain != "service-HASHHASH-c") {
            *r = Rule::new(r.chain.clone(), "numgen random mod 1 vmap { 0 : goto endpoint-X }");
        }
        t
    }

    #[test]
    fn a_cold_start_serves_from_the_interim_table_whose_conversion_ends_in_the_table() {
        let t = two_numgen_maps();
        let mut nft = FakeNft::new();
        nft.batch_lines = Some(1000);
        let r = full_with(&mut nft, &t, false, 2).unwrap();
        let i = r.interim.unwrap();
        assert!(i.served <= r.timings.apply, "served on the apply's clock: {:?} > {:?}", i.served, r.timings.apply);
        let chains = i.chains;
        assert_eq!(chains, ["service-HASHHASH-a", "service-HASHHASH-b"]);
        let runs = nft.take_runs();
        assert!(runs.iter().all(|r| !r.contains("numgen")) && runs.iter().any(|r| r.contains("service-HASHHASH-a goto endpoint-X")), "{runs:?}");
        for batch in cold::conversion(&t, &chains, 2) {
            nft.run(&batch).unwrap();
        }
        let mut one = FakeNft::new();
        one.run(&model::write(&t, Form::Transaction)).unwrap();
        assert_eq!(nft.listing(IpFamily::V4), one.listing(IpFamily::V4), "the end is the table");
        // Over the table it made (not cold), or below the bound: no interim.
        assert_eq!(full_with(&mut nft, &t, false, 2).unwrap().interim, None);
        let mut fresh = FakeNft::new();
        fresh.batch_lines = Some(1000);
        assert_eq!(full_with(&mut fresh, &t, false, 3).unwrap().interim, None);
        // Through `nft -f` (no netlink batches): the table as it is.
        assert_eq!(full_with(&mut FakeNft::new(), &t, false, 2).unwrap().interim, None);
    }

    #[test]
    fn a_sync_over_a_half_converted_table_keeps_the_interim_chains_and_resumes_the_conversion() {
        let t = two_numgen_maps();
        let mut nft = FakeNft::new();
        nft.batch_lines = Some(1000);
        nft.live_reads = true;
        let chains = full_with(&mut nft, &t, false, 2).unwrap().interim.unwrap().chains;
        // The first chain converted, then a restart.
        nft.run(&cold::conversion(&t, &chains[..1], 100)[0]).unwrap();
        let r = full_with(&mut nft, &t, false, 2).unwrap();
        let i = r.interim.unwrap();
        assert_eq!((i.chains.as_slice(), i.resumed, r.refilled), (&chains[1..], true, 0), "the chain still in the interim's form is kept, to convert");
        for batch in cold::conversion(&t, &i.chains, 100) {
            nft.run(&batch).unwrap();
        }
        let mut one = FakeNft::new();
        one.run(&model::write(&t, Form::Transaction)).unwrap();
        assert_eq!(nft.listing(IpFamily::V4), one.listing(IpFamily::V4), "the end is the table");
        // A chain that differs otherwise is refilled, not resumed.
        let mut other = FakeNft::new();
        other.batch_lines = Some(1000);
        other.live_reads = true;
        let mut changed = t.clone();
        changed.objects.rules.iter_mut().filter(|r| r.chain == "service-HASHHASH-b").for_each(|r| *r = Rule::new(r.chain.clone(), "accept"));
        full_with(&mut other, &changed, false, usize::MAX).unwrap();
        let r = full_with(&mut other, &t, false, 2).unwrap();
        assert_eq!((r.interim, r.refilled), (None, 1));
    }

    #[test]
    fn a_refused_chunk_or_last_batch_leaves_the_table_as_it_was() {
        for (fail_after, live_reads) in [(1, false), (2, false), (3, false), (1, true), (2, true), (3, true)] {
            let mut nft = FakeNft::new();
            nft.batch_lines = Some(2);
            nft.live_reads = live_reads;
            full(&mut nft, &table(&["HASHHASH-a"]), false).unwrap();
            let before = nft.listing(IpFamily::V4);
            // declare, chunks b and c, last: the failure hits chunk b, chunk c or the last.
            nft.fail_after = Some(fail_after);
            let e = full(&mut nft, &table(&["HASHHASH-a", "HASHHASH-b", "HASHHASH-c"]), false).unwrap_err();
            assert!(e.to_string().contains("injected failure"), "{e}");
            assert_eq!(nft.listing(IpFamily::V4), before, "failing after {fail_after} batches (live read: {live_reads})");
            full(&mut nft, &table(&["HASHHASH-a", "HASHHASH-b", "HASHHASH-c"]), false).unwrap();
            assert!(nft.listing(IpFamily::V4).unwrap().contains("service-HASHHASH-c"), "the retry goes through");
        }
    }

    #[test]
    fn a_dry_run_sends_nothing_and_after_a_sync_finds_nothing() {
        let mut nft = FakeNft::new();
        let dry = full(&mut nft, &table(&["a"]), true).unwrap();
        assert!(!dry.applied && dry.diff.as_ref().is_some_and(|d| !d.is_empty()));
        assert!(nft.calls.iter().all(|c| !matches!(c, Call::Run(_))), "{:?}", nft.calls);
        assert_eq!(nft.listing(IpFamily::V4), None);
        full(&mut nft, &table(&["a"]), false).unwrap();
        assert!(full(&mut nft, &table(&["a"]), true).unwrap().diff.unwrap().is_empty());
        let d = full(&mut nft, &table(&["a", "b"]), true).unwrap().diff.unwrap();
        assert!(d.text("ip kube-proxy").contains("chain service-b\n  + (added)\n  + accept\n"), "{}", d.text("ip kube-proxy"));
    }

    #[test]
    fn over_a_live_table_only_what_differs_is_sent() {
        let mut t = table(&["HASHHASH-a", "HASHHASH-b"]);
        t.objects.sets.push(model::Set::plain("cluster-ips", "ipv4_addr", None));
        t.objects.elements.push(Element::parsed("cluster-ips", "10.0.0.1"));
        let mut nft = FakeNft::new();
        nft.batch_lines = Some(1000);
        nft.live_reads = true;
        full(&mut nft, &t, false).unwrap();
        let want = nft.listing(IpFamily::V4);
        nft.calls.clear();

        // Equal: the declaring batch alone, without the existing chains; nothing refilled.
        let r = full(&mut nft, &t, false).unwrap();
        assert_eq!((r.kept, r.refilled, r.element_changes, r.batches), (3, 0, 0, 1), "{r:?}");
        let sent = nft.take_runs();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(!sent[0].contains("add chain") && !sent[0].contains("flush") && !sent[0].contains("element"), "{}", sent[0]);
        assert_eq!(nft.listing(IpFamily::V4), want);

        // Someone else: a rule deleted, an element removed, a foreign rule added.
        nft.run("flush chain ip kube-proxy service-HASHHASH-a\ndelete element ip kube-proxy cluster-ips { 10.0.0.1 }\nadd rule ip kube-proxy service-HASHHASH-b drop\n").unwrap();
        nft.calls.clear();
        let r = full(&mut nft, &t, false).unwrap();
        assert_eq!((r.kept, r.refilled, r.element_changes), (1, 2, 1), "{r:?}");
        let sent = nft.take_runs();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[1], "flush chain ip kube-proxy service-HASHHASH-a\nadd rule ip kube-proxy service-HASHHASH-a accept\nflush chain ip kube-proxy service-HASHHASH-b\nadd rule ip kube-proxy service-HASHHASH-b accept\nadd element ip kube-proxy cluster-ips { 10.0.0.1 }\n");
        assert_eq!(nft.listing(IpFamily::V4), want);

        // A stale element and a stale service: deleted by difference, the chain as before.
        nft.run("add element ip kube-proxy cluster-ips { 10.0.0.9 }\n").unwrap();
        let smaller = {
            let mut s = table(&["HASHHASH-a"]);
            s.objects.sets.push(model::Set::plain("cluster-ips", "ipv4_addr", None));
            s.objects.elements.push(Element::parsed("cluster-ips", "10.0.0.1"));
            s
        };
        nft.calls.clear();
        let r = full(&mut nft, &smaller, false).unwrap();
        assert_eq!(r.stale, ["chain service-HASHHASH-b"]);
        let sent = nft.take_runs();
        assert!(sent[1].contains("delete element ip kube-proxy cluster-ips { 10.0.0.9 }\n") && !sent[1].contains("flush set"), "{}", sent[1]);
        let mut one = FakeNft::new();
        one.run(&model::write(&smaller, Form::Transaction)).unwrap();
        assert_eq!(nft.listing(IpFamily::V4), one.listing(IpFamily::V4));
    }

    #[test]
    fn a_refused_transaction_leaves_the_table_as_it_was() {
        let mut nft = FakeNft::new();
        full(&mut nft, &table(&["a"]), false).unwrap();
        let before = nft.listing(IpFamily::V4);
        let mut broken = table(&["a", "b"]);
        broken.objects.rule(Rule::new("service-b", "jump nowhere"));
        let e = full(&mut nft, &broken, false).unwrap_err();
        assert!(matches!(e.error, NftError::Rejected { .. }) && e.phase == Phase::Restore, "{e:?}");
        assert_eq!(nft.listing(IpFamily::V4), before);
    }
}

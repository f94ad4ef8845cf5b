//! svcproxy's nf_tables netlink writer (`nftables::netlink`, `nftables::wire`) on the real
//! kernel, inside a namespace of the test's own:
//! - for every `golden/*.nft` (both families) and a text of the rule shapes no golden
//!   holds (with dnat maps of thousands of endpoints), `nft list table` prints
//!   byte-identical text after `nft -f` of the text and after the netlink writer's batch of
//!   the same text (each into an empty namespace); and after either, the full sync's read
//!   of the kernel's table (`netlink::read_live`) finds every chain and every named set
//!   equal, in the canonical form (`wire::canon`), to what the text would send: a full sync
//!   over it would rewrite nothing (a node that kube-proxy wrote sees no churn);
//! - a batch the kernel refuses changes nothing: the table lists as before, and the error
//!   names the refused line.

use std::collections::HashMap;
use std::time::Duration;

use svcproxy::nftables::chunked::CHUNK_LINES;
use svcproxy::net::IpFamily;
use svcproxy::nftables::model::{self, Chain, Element, Rule, Set, Table};
use svcproxy::nftables::names::{TABLE, TABLE_COMMENT};
use svcproxy::nftables::sync;
use svcproxy::nftables::wire::canon;
use svcproxy::nftables::{netlink, wire};

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Lab, Ns};
use crate::svcproxy::{path_str, repo};
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_netlink_writer_leaves_what_nft_leaves_for_every_golden", every_golden).with_timeout(Duration::from_secs(600)),
        Case::new("nftables_refused_netlink_batch_changes_nothing", refused_changes_nothing),
        Case::new("nftables_full_sync_over_kube_proxy_v137_forms_refills_nothing", v137_full_sync_refills_nothing).with_timeout(Duration::from_secs(180)),
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

/// The vocabulary text, and a dnat map of `n` endpoints per family and protocol appended
/// (its elements take several messages).
fn vocabulary(n: usize) -> String {
    let mut text = VOCABULARY.to_owned();
    for (fam, proto) in [("ip", "tcp"), ("ip6", "udp"), ("ip", "sctp")] {
        let arms: Vec<String> = (0..n)
            .map(|i| match fam {
                "ip" => format!("{i} : 10.{}.{}.{} . 8080", 180 + i / 65536, (i / 256) % 256, i % 256),
                // Written as the renderer writes addresses: canonical (`fd00:10:180::`, not `::0`).
                _ => format!("{i} : {} . 8080", std::net::Ipv6Addr::new(0xfd00, 0x10, 0x180, 0, 0, 0, 0, i as u16)),
            })
            .collect();
        text.push_str(&format!("add chain {fam} kube-proxy service-long-{proto}
"));
        text.push_str(&format!("add rule {fam} kube-proxy service-long-{proto} meta l4proto {proto} dnat {fam} addr . port to numgen random mod {n} map {{ {} }}\n", arms.join(" , ")));
    }
    text
}

/// What the full sync compares for one family of `text`: each chain's rules and each
/// named, non-dynamic set's elements (sorted, once each), in the canonical form of what the text
/// sends; `None` where the encoder does not take them.
type Wanted = (HashMap<String, Option<canon::Canon>>, HashMap<String, Option<Vec<canon::Canon>>>);

fn wanted(text: &str, fam: &str) -> Wanted {
    let mut chains: HashMap<String, String> = HashMap::new();
    let mut sets: HashMap<String, String> = HashMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().take(5).collect();
        let [verb, object, f, "kube-proxy", name] = w.as_slice() else { continue };
        if *f != fam || *verb != "add" {
            continue;
        }
        let add = |m: &mut HashMap<String, String>, with: bool| {
            let t = m.entry((*name).to_owned()).or_default();
            if with {
                t.push_str(line);
                t.push('\n');
            }
        };
        match *object {
            "chain" => add(&mut chains, false),
            "rule" => add(&mut chains, true),
            "set" | "map" if !line.contains("dynamic") => add(&mut sets, false),
            "element" if sets.contains_key(*name) => add(&mut sets, true),
            _ => {}
        }
    }
    let sorted = |t: &str| {
        canon::elements_of_text(t).map(|e| {
            let mut v: Vec<canon::Canon> = e.into_iter().map(|(c, _)| c).collect();
            // An element added twice is one element.
            v.sort();
            v.dedup();
            v
        })
    };
    (chains.iter().map(|(n, t)| (n.clone(), canon::chain_of_text(t))).collect(), sets.iter().map(|(n, t)| (n.clone(), sorted(t))).collect())
}

/// The full sync's read of what `ns` holds proves every chain and named set of `text`
/// equal (and holds no other); the number of chains and sets compared.
fn read_equal(ns: &Ns, name: &str, text: &str) -> Result<usize, String> {
    let mut compared = 0;
    for (fam, family) in [("ip", IpFamily::V4), ("ip6", IpFamily::V6)] {
        let (chains, sets) = wanted(text, fam);
        let live = in_netns(&ns.name, move || netlink::read_live(family).map_err(|e| e.to_string()))
            .join()
            .map_err(|_| "the read thread panicked".to_string())???;
        let Some(live) = live else {
            check(chains.is_empty(), || format!("{name}: no {fam} table was read"))?;
            continue;
        };
        let mut names: Vec<&String> = live.chains.keys().collect();
        names.sort();
        let mut want: Vec<&String> = chains.keys().collect();
        want.sort();
        check(names == want, || format!("{name}: {fam} chains read {names:?}, the text has {want:?}"))?;
        for (chain, form) in &chains {
            let form = form.as_ref().ok_or_else(|| format!("{name}: the encoder does not take {fam} chain {chain}"))?;
            let held = live.chains[chain].as_ref().ok_or_else(|| format!("{name}: {fam} chain {chain} was not readable"))?;
            check(held == form, || format!("{name}: {fam} chain {chain} differs from the text in the canonical form"))?;
        }
        let mut set_names: Vec<&String> = live.sets.keys().collect();
        set_names.sort();
        let mut want: Vec<&String> = sets.keys().collect();
        want.sort();
        check(set_names == want, || format!("{name}: {fam} sets read {set_names:?}, the text has {want:?}"))?;
        for (set, elems) in &sets {
            let elems = elems.as_ref().ok_or_else(|| format!("{name}: the encoder does not take {fam} set {set}'s elements"))?;
            let mut held: Vec<canon::Canon> = live.sets[set].clone().ok_or_else(|| format!("{name}: {fam} set {set} was not readable"))?.into_iter().map(|(c, _)| c).collect();
            held.sort();
            check(&held == elems, || format!("{name}: {fam} set {set}: {} elements read, {} in the text, not all equal", held.len(), elems.len()))?;
        }
        compared += chains.len() + sets.len();
    }
    Ok(compared)
}

/// `Err(msg())` unless `ok`.
fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(msg())
    }
}

/// nft -f, then (tables deleted) the netlink writer, of the same text: the same listing,
/// and after each the full sync's read finds the text's chains and sets ([`read_equal`]).
/// (listed lines, chains and sets compared).
fn same_listing(ns: &Ns, name: &str, text: &str) -> Result<(usize, usize), String> {
    clear(ns);
    ns.run_stdin(&["nft", "-f", "-"], Some(text)).map_err(|e| format!("{name}: nft -f: {e}"))?;
    let by_nft = listing(ns);
    let compared = read_equal(ns, &format!("{name} (nft -f)"), text)?;
    clear(ns);
    write_netlink(ns, text).map_err(|e| format!("{name}: netlink: {e}"))?;
    let by_netlink = listing(ns);
    read_equal(ns, &format!("{name} (netlink)"), text)?;
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
    Ok((by_nft.lines().count(), compared))
}

fn every_golden(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let list = crate::nft_goldens::goldens();
    ensure!(list.len() >= 30, "only {} nftables goldens", list.len());
    let lab = Lab::new("nftnl")?;
    let ns = lab.node();
    let (mut lines, mut compared) = (0, 0);
    let mut both = 0;
    let mut add = |(l, c): (usize, usize)| {
        lines += l;
        compared += c;
    };
    for g in &list {
        let text = std::fs::read_to_string(g).map_err(|e| format!("{}: {e}", g.display()))?;
        both += usize::from(text.contains("add table ip6 ") && text.contains("add table ip "));
        add(same_listing(ns, path_str(g), &text)?);
    }
    let vocabulary = vocabulary(3000);
    add(same_listing(ns, "nft_netlink_vocabulary.nft", &vocabulary)?);
    ensure!(both > 0 && lines > 1000 && compared > 1000, "too little compared: {lines} listed lines, {compared} chains and sets read, {both} dual-stack goldens");
    // The read tells a change apart: the vocabulary's table against texts that differ in
    // one dnat map arm, one hairpin element, one mark comparison, one numgen comparison.
    ns.run_stdin(&["nft", "-f", "-"], Some(&vocabulary)).map_err(|e| format!("nft -f: {e}"))?;
    for (from, to) in [
        ("10.180.0.2 . 80 }", "10.180.0.2 . 81 }"),
        ("fd00:10:180::3 . fd00:10:180::3 . sctp . 65535", "fd00:10:180::3 . fd00:10:180::3 . sctp . 65534"),
        ("mark and 0x00004000 != 0", "mark and 0x00004000 == 0"),
        ("numgen random mod 3 == 0", "numgen random mod 3 == 1"),
    ] {
        ensure!(vocabulary.contains(from), "the vocabulary has no {from:?}");
        let changed = vocabulary.replacen(from, to, 1);
        ensure!(read_equal(ns, "changed", &changed).is_err(), "the read found the table equal to a text with {to:?} for {from:?}");
    }
    clear(ns);
    ctx.log(format!(
        "{} goldens ({both} dual-stack) and the vocabulary text: {lines} listed lines identical after nft -f and after the netlink writer; {compared} chains and sets read equal to the text after each",
        list.len()
    ));
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

/// One family's table in kube-proxy v1.37's forms, as the renderer's values: inline
/// masquerade marks (set lookup with each detector, masqueradeAll, external chains),
/// `mark and M != 0`, `ct status dnat` and the hairpin set, dnat maps of 1 and 2
/// endpoints and one of `big` (tcp, udp, sctp); `port` is the tcp map's first endpoint's port.
fn v137_table(family: IpFamily, big: usize, port: u16) -> Table {
    let (ip, addr, cidr, ep): (&str, &str, &str, fn(usize) -> String) = match family {
        IpFamily::V4 => ("ip", "ipv4_addr", "10.0.0.0/8", |i| format!("10.180.{}.{}", i / 256, i % 256)),
        IpFamily::V6 => ("ip6", "ipv6_addr", "fd00:10::/64", |i| format!("fd00:10:180::{:x}", i + 1)),
    };
    let mut o = model::Objects::default();
    for c in ["services", "masquerading", "external-X", "service-tcp", "service-udp", "local-sctp"] {
        o.chain(Chain::regular(c));
    }
    o.sets.push(Set::plain("cluster-ips", addr, Some("Active ClusterIPs")));
    o.sets.push(Set::plain("hairpin-connections", format!("{addr} . {addr} . inet_proto . inet_service"), Some("service hairpin connections")));
    for (i, proto) in ["tcp", "udp", "sctp"].iter().enumerate() {
        o.elements.push(Element::parsed("hairpin-connections", &format!("{} . {} . {proto} . 80", ep(i), ep(i))));
        o.elements.push(Element::parsed("cluster-ips", &ep(1000 + i)));
    }
    let m = "mark set mark or 0x00004000";
    for detector in [format!("{ip} saddr != {cidr} "), "iifname != cbr0 ".into(), "iifname != veth* ".into()] {
        o.rule(Rule::commented("services", format!("{ip} daddr @cluster-ips {detector}{m}"), "masquerade clusterIP traffic from outside cluster"));
    }
    o.rule(Rule::commented("services", format!("{ip} daddr @cluster-ips {m}"), "masquerade all clusterIP traffic"));
    o.rule(Rule::new("masquerading", "mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random"));
    o.rule(Rule::new("masquerading", format!("ct status dnat {ip} saddr . {ip} daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random")));
    o.rule(Rule::commented("external-X", m, "masquerade"));
    o.rule(Rule::commented("external-X", format!("fib saddr type local {m}"), "masquerade local traffic"));
    o.rule(Rule::new("external-X", "goto service-tcp"));
    let dnat = |proto: &str, n: usize| {
        let arms: Vec<String> = (0..n).map(|i| format!("{i} : {} . {}", ep(i), if i == 0 && proto == "tcp" { port } else { 80 })).collect();
        format!("meta l4proto {proto} dnat {ip} addr . port to numgen random mod {n} map {{ {} }}", arms.join(" , "))
    };
    o.rule(Rule::new("service-tcp", dnat("tcp", 2)));
    o.rule(Rule::new("service-udp", dnat("udp", 1)));
    o.rule(Rule::new("local-sctp", dnat("sctp", big)));
    Table { family, name: TABLE, comment: TABLE_COMMENT, objects: o }
}

/// (kept, refilled, element changes) of one full sync of `tables` over what `ns` holds.
fn full_sync(ns: &Ns, tables: &[Table]) -> Result<(usize, usize, usize), String> {
    let ts = tables.to_vec();
    let reports = crate::nft_chunked::with_netlink(ns, CHUNK_LINES, move |nl| ts.iter().map(|t| sync::full(nl, t, false)).collect::<Result<Vec<_>, _>>())?
        .map_err(|e| format!("the full sync failed: {e}"))?;
    Ok(reports.iter().fold((0, 0, 0), |(k, r, e), x| (k + x.kept, r + x.refilled, e + x.element_changes)))
}

/// A table of kube-proxy v1.37's forms written by `nft -f` (as kube-proxy writes it) or by
/// svcproxy's netlink writer: a full sync of the same tables keeps every chain and
/// changes no element (no churn for a node switching from kube-proxy); a client that
/// wrote them itself keeps them all on its next syncs, from its record of the anonymous
/// maps it sent; one endpoint's port changed in the desired table refills exactly that
/// chain.
fn v137_full_sync_refills_nothing(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftnl137")?;
    let ns = lab.node();
    let tables = [v137_table(IpFamily::V4, 2500, 80), v137_table(IpFamily::V6, 2500, 80)];
    let text: String = tables.iter().map(|t| model::write(t, model::Form::Transaction)).collect();
    let chains: usize = tables.iter().map(|t| t.objects.chains.len()).sum();
    for writer in ["nft -f", "netlink"] {
        clear(ns);
        match writer {
            "nft -f" => ns.run_stdin(&["nft", "-f", "-"], Some(&text)).map(|_| ()).map_err(|e| format!("nft -f: {e}"))?,
            _ => write_netlink(ns, &text)?,
        }
        let before = listing(ns);
        let (kept, refilled, changes) = full_sync(ns, &tables)?;
        ctx.log(format!("written by {writer}: the full sync kept {kept} of {chains} chains, refilled {refilled}, changed {changes} elements"));
        ensure!(kept == chains && refilled == 0 && changes == 0, "written by {writer}: kept {kept} of {chains}, refilled {refilled}, changed {changes} elements");
        ensure!(listing(ns) == before, "written by {writer}: the table lists otherwise after the sync");
    }
    // One client writes the tables itself, then syncs twice more: its record of the
    // anonymous maps it sent stands for the kernel's (reused, not dumped), and equals it.
    clear(ns);
    let ts = tables.to_vec();
    let (runs, reused) = crate::nft_chunked::with_netlink(ns, CHUNK_LINES, move |nl| {
        let runs: Vec<Vec<sync::Report>> = (0..3).map(|_| ts.iter().map(|t| sync::full(nl, t, false)).collect::<Result<Vec<_>, _>>()).collect::<Result<_, _>>()?;
        Ok::<_, svcproxy::nftables::sync::SyncError>((runs, nl.anon_reused))
    })?
    .map_err(|e| format!("the full syncs failed: {e}"))?;
    for (i, run) in runs.iter().enumerate().skip(1) {
        let (kept, refilled, changes) = run.iter().fold((0, 0, 0), |(k, r, e), x| (k + x.kept, r + x.refilled, e + x.element_changes));
        ensure!(kept == chains && refilled == 0 && changes == 0, "sync {} of one client: kept {kept} of {chains}, refilled {refilled}, changed {changes} elements", i + 1);
    }
    ensure!(reused >= 12, "the client reused {reused} recorded anonymous maps; want its 6 maps' records in each of 2 syncs");
    ctx.log(format!("one client: syncs 2 and 3 kept every chain, {reused} anonymous maps' records reused"));
    let changed = [v137_table(IpFamily::V4, 2500, 81), v137_table(IpFamily::V6, 2500, 80)];
    let (kept, refilled, changes) = full_sync(ns, &changed)?;
    ensure!(refilled == 1 && kept == chains - 1 && changes == 0, "one port changed: kept {kept}, refilled {refilled}, changed {changes} elements");
    ensure!(listing(ns).contains("10.180.0.0 . 81"), "the changed port was not written");
    clear(ns);
    Ok(())
}

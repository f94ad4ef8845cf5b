//! A full iptables sync (the delta engine) against the fake kernel: whatever the kernel
//! held before, applying the delta leaves exactly the full render (in canonical form), and
//! a second sync finds nothing to do.

use std::path::Path;

use crate::config::Settings;
use crate::xtables::fake::{Call, FakeIptables};
use crate::iptables::render::Ruleset;
use crate::iptables::sync::{needed_jumps, sync};
use crate::iptables::restore;
use crate::xtables::apply::Restorer;
use crate::pipeline;
use crate::source;

fn demo(edit: impl Fn(&mut source::ClusterState)) -> Ruleset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml");
    let mut state = source::read_path(&path).unwrap();
    edit(&mut state);
    let flags = Settings { ip_family: Some(crate::settings::kinds::Families::Ipv4), nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    pipeline::render_iptables(&loaded).remove(0)
}

/// The kernel as a fresh `iptables-restore` of the full render would leave it, jumps included.
fn expected_kernel(rs: &Ruleset) -> FakeIptables {
    let mut k = FakeIptables::new();
    let mut text = restore::write(rs, restore::Scope::Full, &[]);
    let mut jumps = String::new();
    for j in needed_jumps(rs) {
        jumps.push_str(&format!("*{}\n-I {} 1 {}\nCOMMIT\n", j.table, j.from, j.words().iter().map(|a| crate::xtables::quote(a)).collect::<Vec<_>>().join(" ")));
    }
    text.push_str(&jumps);
    k.restore(rs.ctx.node.family, &text).unwrap();
    k
}

fn kernel_text(k: &mut FakeIptables, rs: &Ruleset) -> String {
    ["filter", "nat"].iter().map(|t| k.save_table(rs.ctx.node.family, t)).collect()
}

#[test]
fn from_an_empty_kernel_a_sync_installs_the_full_render_and_then_nothing_changes() {
    let rs = demo(|_| {});
    let mut k = FakeIptables::new();
    let report = sync(&mut k, &rs, false).unwrap();
    assert!(report.applied);
    assert_eq!(kernel_text(&mut k, &rs), kernel_text(&mut expected_kernel(&rs), &rs));
    let again = sync(&mut k, &rs, false).unwrap();
    assert!(again.delta.is_empty(), "{:#?}", again.delta.changes);
    assert!(!again.applied);
}

#[test]
fn kube_proxy_identical_rules_need_no_change() {
    let rs = demo(|_| {});
    let mut k = expected_kernel(&rs);
    let report = sync(&mut k, &rs, true).unwrap();
    assert!(report.delta.is_empty(), "{:#?}", report.delta.changes);
}

#[test]
fn one_endpoint_change_sends_a_few_lines_and_ends_in_the_full_render() {
    let before = demo(|_| {});
    let after = demo(|s| {
        let web = s.slices.iter_mut().find(|x| x.id.name == "web-abcde").unwrap();
        let mut ep = web.endpoints[0].clone();
        ep.ip = "10.244.1.77".parse().unwrap();
        web.endpoints.push(ep);
    });
    let mut k = expected_kernel(&before);
    let report = sync(&mut k, &after, false).unwrap();
    let text = report.delta.restore_text();
    assert!(report.delta.restore_lines() < 20, "{text}");
    assert!(!text.contains(":KUBE-SERVICES"), "top-level chains untouched: {text}");
    assert_eq!(kernel_text(&mut k, &after), kernel_text(&mut expected_kernel(&after), &after));
}

#[test]
fn removing_a_service_edits_top_level_chains_in_place_and_deletes_its_chains() {
    let before = demo(|_| {});
    let after = demo(|s| s.services.retain(|x| x.id.name != "web"));
    let mut k = expected_kernel(&before);
    let report = sync(&mut k, &after, false).unwrap();
    let text = report.delta.restore_text();
    assert!(text.contains("-D KUBE-SERVICES "), "{text}");
    assert!(text.contains("-X KUBE-SVC-"), "{text}");
    assert_eq!(kernel_text(&mut k, &after), kernel_text(&mut expected_kernel(&after), &after));
}

#[test]
fn missing_jumps_are_prepended_in_kube_proxy_order() {
    let rs = demo(|_| {});
    let mut k = FakeIptables::new();
    // Someone else's rule in INPUT stays, after ours.
    k.restore(rs.ctx.node.family, "*filter\n-A INPUT -s 198.18.0.1/32 -j ACCEPT\nCOMMIT\n").unwrap();
    sync(&mut k, &rs, false).unwrap();
    let save = k.save_table(rs.ctx.node.family, "filter");
    let input: Vec<&str> = save.lines().filter(|l| l.starts_with("-A INPUT")).collect();
    assert_eq!(input.len(), 5, "{save}");
    assert!(input[0].ends_with("-j KUBE-FIREWALL"), "{input:?}");
    assert!(input[1].ends_with("-j KUBE-PROXY-FIREWALL"), "{input:?}");
    assert!(input[2].ends_with("-j KUBE-NODEPORTS"), "{input:?}");
    assert!(input[3].ends_with("-j KUBE-EXTERNAL-SERVICES"), "{input:?}");
    assert_eq!(input[4], "-A INPUT -s 198.18.0.1/32 -j ACCEPT");
}

#[test]
fn chains_we_do_not_own_are_never_touched() {
    let rs = demo(|_| {});
    let mut k = FakeIptables::new();
    k.restore(rs.ctx.node.family, "*nat\n:CNI-HOSTPORT - [0:0]\n-A CNI-HOSTPORT -j RETURN\n:KUBE-OTHER - [0:0]\n-A KUBE-OTHER -j RETURN\nCOMMIT\n").unwrap();
    let report = sync(&mut k, &rs, false).unwrap();
    assert!(!report.delta.restore_text().contains("CNI-HOSTPORT"));
    assert!(!report.delta.restore_text().contains("KUBE-OTHER"));
    let save = k.save_table(rs.ctx.node.family, "nat");
    assert!(save.contains("-A CNI-HOSTPORT -j RETURN") && save.contains("-A KUBE-OTHER -j RETURN"));
}

#[test]
fn a_failed_restore_leaves_the_kernel_as_it_was() {
    let before = demo(|_| {});
    let after = demo(|s| s.services.retain(|x| x.id.name != "web"));
    let mut k = expected_kernel(&before);
    let snapshot = kernel_text(&mut k, &before);
    k.fail_next = Some("simulated".into());
    assert!(sync(&mut k, &after, false).is_err());
    assert_eq!(kernel_text(&mut k, &before), snapshot);
}

fn generated(services: usize, seed: u64, edit: impl Fn(&mut source::ClusterState)) -> Ruleset {
    let text = crate::gen::yaml(&crate::gen::GenSpec { services, endpoints: 4, seed });
    let mut state = source::ClusterState::default();
    source::file::read_str(Path::new("generated.yaml"), &text, &mut state).unwrap();
    edit(&mut state);
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    pipeline::render_iptables(&loaded).remove(0)
}

fn restores(k: &FakeIptables) -> Vec<String> {
    k.calls.iter().filter_map(|c| match c { Call::Restore(_, t) => Some(t.clone()), _ => None }).collect()
}

#[test]
fn a_big_delta_goes_to_iptables_nft_in_chunks_that_switch_the_top_level_chains_last() {
    let rs = generated(300, 3, |_| {});
    let mut k = FakeIptables::new();
    let report = sync(&mut k, &rs, false).unwrap();
    assert!(report.delta.services_rewritten() > 2 * crate::iptables::sync::NFT_CHUNK_SERVICES);
    let sent = restores(&k);
    assert!(sent.len() >= 4, "{} restore(s)", sent.len());
    // Every chunk applied (the fake refuses a jump to a chain that does not exist yet).
    assert_eq!(kernel_text(&mut k, &rs), kernel_text(&mut expected_kernel(&rs), &rs));
    let (last, earlier) = sent.split_last().unwrap();
    for chunk in earlier {
        assert!(!chunk.contains("*filter") && !chunk.contains(" KUBE-SERVICES ") && !chunk.contains(" KUBE-NODEPORTS "), "{chunk}");
        assert!(!chunk.contains("-X "), "deletions come last");
    }
    assert!(last.contains("-A KUBE-SERVICES "));
    // A service's chains travel together: every jump between service chains stays in its chunk.
    for chunk in earlier.iter().filter(|c| c.contains("-A KUBE-")) {
        let declared: std::collections::BTreeSet<&str> =
            chunk.lines().filter_map(|l| l.strip_prefix(':')).filter_map(|l| l.split(' ').next()).collect();
        let parsed = crate::xtables::dump::parse(chunk).unwrap();
        for target in parsed.tables.values().flat_map(|t| &t.rules).filter_map(|r| r.target.chain()) {
            if crate::xtables::names::is_service_chain(target) {
                assert!(declared.contains(target), "{target} jumped to outside its chunk");
            }
        }
    }
    // The chunks hold the same lines as the single input, declarations of new chains aside.
    let lines = |t: &str| t.lines().filter(|l| l.starts_with('-')).count();
    assert_eq!(sent.iter().map(|c| lines(c)).sum::<usize>(), lines(&report.delta.restore_text()));
}

#[test]
fn chunked_changes_to_a_live_kernel_end_in_the_full_render() {
    let before = generated(300, 3, |_| {});
    let after = generated(300, 3, |s| {
        // Half the services lose an endpoint, a tenth go away.
        for (i, slice) in s.slices.iter_mut().enumerate() {
            if i % 2 == 0 {
                slice.endpoints.pop();
            }
        }
        let mut i = 0;
        s.services.retain(|_| {
            i += 1;
            i % 10 != 0
        });
    });
    let mut k = expected_kernel(&before);
    let delta = sync(&mut k, &after, true).unwrap().delta;
    assert!(delta.restore_text().contains("-X KUBE-SVC-"));
    let chunks = delta.restore_chunks(20);
    assert!(chunks.len() > 3, "{} chunk(s)", chunks.len());
    for c in &chunks {
        k.restore(after.ctx.node.family, c).unwrap();
    }
    assert_eq!(kernel_text(&mut k, &after), kernel_text(&mut expected_kernel(&after), &after));
}

#[test]
fn line_counts_match_the_text() {
    let before = demo(|_| {});
    let after = demo(|s| s.services.retain(|x| x.id.name != "web"));
    for (from, to) in [(FakeIptables::new(), &before), (expected_kernel(&before), &after)] {
        let mut k = from;
        let report = sync(&mut k, to, true).unwrap();
        assert_eq!(report.delta.restore_lines(), report.delta.restore_text().lines().count());
        assert!(report.delta.restore_lines() > 0);
    }
}

/// A sync that applies keeps only which chains change, not their lines; its restore input
/// is the dry run's, byte for byte, from an empty kernel and from a stale one alike.
#[test]
fn an_applying_sync_sends_what_the_dry_run_shows_without_keeping_the_lines() {
    let rs = demo(|_| {});
    let stale = demo(|s| s.services.truncate(s.services.len() / 2));
    for mut k in [FakeIptables::new(), expected_kernel(&stale)] {
        let dry = sync(&mut k, &rs, true).unwrap();
        let applied = sync(&mut k, &rs, false).unwrap();
        assert!(applied.applied && !dry.delta.is_empty());
        assert_eq!(applied.delta.restore_text(), dry.delta.restore_text());
        assert_eq!(applied.delta.restore_lines(), dry.delta.restore_lines());
        let names = |d: &super::Delta| d.changes.iter().map(|c| (c.table, c.chain.clone(), c.live.is_some(), c.desired.is_some())).collect::<Vec<_>>();
        assert_eq!(names(&applied.delta), names(&dry.delta));
        assert!(dry.delta.changes.iter().any(|c| c.desired.as_ref().is_some_and(|l| !l.is_empty())), "the dry run has the lines");
        let lines = applied.delta.changes.iter().flat_map(|c| c.live.iter().chain(&c.desired)).map(Vec::len).sum::<usize>();
        assert_eq!(lines, 0, "the applying sync kept no lines");
        assert_eq!(kernel_text(&mut k, &rs), kernel_text(&mut expected_kernel(&rs), &rs));
    }
}

/// Every fixture's rulesets (each family), for checks that hold for any ruleset.
fn every_fixture() -> Vec<(String, Ruleset)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "yaml")).collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let state = source::read_path(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let flags = Settings { nfacct: Some(false), ..Settings::default() };
        let loaded = pipeline::load(state, flags, Settings::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for rs in pipeline::render_iptables(&loaded) {
            out.push((format!("{} {:?}", path.display(), rs.ctx.node.family), rs));
        }
    }
    out
}

#[test]
fn into_a_kernel_holding_none_of_our_chains_the_delta_is_built_without_comparing_and_equals_the_compared_one() {
    use crate::xtables::delta::{compute_fresh, compute_with, Lines};
    use crate::xtables::dump::parse;
    use crate::xtables::names::is_service_chain;
    // Empty, and a node where other software (kubelet, a CNI) has chains of its own.
    let others = "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\n:CNI-FORWARD - [0:0]\n-A INPUT -j CNI-FORWARD\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n-A PREROUTING -j CNI-HOSTPORT-DNAT\nCOMMIT\n";
    let kernels = [crate::xtables::dump::Dump::default(), parse(others).unwrap()];
    let fixtures = every_fixture();
    assert!(fixtures.len() >= 40, "{} rulesets", fixtures.len());
    for (name, rs) in &fixtures {
        let desired = restore::dump(rs, restore::Scope::Full, &[]);
        for live in &kernels {
            assert!(super::holds_none_of_ours(live, rs), "{name}");
            let compared = compute_with(&desired, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain, Lines::Names);
            let (chains, lines) = restore::new_chains(rs, is_service_chain);
            let fresh = compute_fresh(chains, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain);
            assert_eq!(fresh, compared, "{name}");
            assert_eq!(lines, desired.lines(), "{name}: lines of the full input");
            assert_eq!(fresh.restore_text(), compared.restore_text(), "{name}");
            let mut streamed = String::new();
            fresh.write_restore(&mut |piece| streamed.push_str(piece));
            assert_eq!(streamed, compared.restore_text(), "{name}: the input streamed piece by piece");
        }
        // Any chain of ours in the kernel, even empty, and the kernel is compared with.
        for ours in ["KUBE-SERVICES", "KUBE-SVC-ABCDEFGHIJKLMNOP", "KUBE-SEP-ABCDEFGHIJKLMNOP", "KUBE-FORWARD"] {
            let table = if ours == "KUBE-FORWARD" { "filter" } else { "nat" };
            let live = parse(&format!("*{table}\n:{ours} - [0:0]\nCOMMIT\n")).unwrap();
            assert!(!super::holds_none_of_ours(&live, rs), "{name}: {ours}");
        }
    }
}

#[test]
fn a_sync_into_a_kernel_holding_none_of_our_chains_installs_the_full_render() {
    let rs = demo(|_| {});
    let mut k = FakeIptables::new();
    let report = sync(&mut k, &rs, false).unwrap();
    assert!(report.full_lines > 0 && report.applied);
    assert_eq!(kernel_text(&mut k, &rs), kernel_text(&mut expected_kernel(&rs), &rs));
    let again = sync(&mut k, &rs, false).unwrap();
    assert!(again.delta.is_empty(), "the second sync compares and finds nothing");
}

#[test]
fn the_view_a_full_sync_compares_gives_the_delta_and_flushes_of_the_dump_of_the_same_rules() {
    use crate::xtables::delta::{compute_with, Lines};
    use crate::xtables::names::is_service_chain;
    let fixtures = every_fixture();
    assert!(fixtures.len() >= 40, "{} rulesets", fixtures.len());
    for (i, (name, rs)) in fixtures.iter().enumerate() {
        let dump = restore::dump(rs, restore::Scope::Full, &[]);
        let view = restore::view(rs, restore::Scope::Full);
        assert_eq!(view.lines(), dump.lines(), "{name}: lines of the full input");
        // Kernels: empty; holding exactly these rules; holding another fixture's rules
        // (services and endpoints added, removed and changed); holding these rules with
        // one service chain's rules and one KUBE-SERVICES rule gone.
        let (_, other) = &fixtures[(i + 1) % fixtures.len()];
        let mut damaged = dump.clone();
        if let Some(nat) = damaged.tables.get_mut("nat") {
            let svc = nat.rules.iter().position(|r| is_service_chain(&r.chain));
            let top = nat.rules.iter().position(|r| r.chain.as_str() == "KUBE-SERVICES");
            let mut gone: Vec<usize> = svc.into_iter().chain(top).collect();
            gone.sort_unstable();
            gone.dedup();
            let kept: Vec<_> = nat.rules.iter().enumerate().filter(|(n, _)| !gone.contains(n)).map(|(_, r)| r.clone()).collect();
            let mut table = crate::xtables::TableDump::default();
            nat.chains.iter().for_each(|c| table.declare(&c.name));
            kept.into_iter().for_each(|r| table.push(r));
            *nat = table;
        }
        let removed = damaged.lines() < dump.lines();
        let kernels = [crate::xtables::Dump::default(), dump.clone(), restore::dump(other, restore::Scope::Full, &[]), damaged];
        let changes = |live: &crate::xtables::Dump| compute_with(&view, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain, Lines::Names).changes.len();
        if removed {
            assert!(changes(&kernels[3]) > changes(&kernels[1]), "{name}: the damage is seen");
        }
        for (k, live) in kernels.iter().enumerate() {
            for lines in [Lines::Keep, Lines::Names] {
                let by_view = compute_with(&view, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain, lines);
                let by_dump = compute_with(&dump, live, rs.ctx.is_v6(), &needed_jumps(rs), is_service_chain, lines);
                assert_eq!(by_view, by_dump, "{name}: kernel {k}");
            }
        }
    }
}

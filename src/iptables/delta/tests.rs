//! The delta engine against the fake kernel: whatever the kernel held before, applying
//! the delta leaves exactly the full render (in canonical form), and a second sync finds
//! nothing to do.

use std::path::Path;

use crate::config::Settings;
use crate::iptables::fake::FakeIptables;
use crate::iptables::render::Ruleset;
use crate::iptables::sync::{needed_jumps, sync};
use crate::iptables::{apply::Restorer, restore};
use crate::pipeline;
use crate::source;

fn demo(edit: impl Fn(&mut source::ClusterState)) -> Ruleset {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml");
    let mut state = source::read_path(&path).unwrap();
    edit(&mut state);
    let flags = Settings { ip_family: Some("ipv4".into()), nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    pipeline::render_iptables(&loaded).remove(0)
}

/// The kernel as a fresh `iptables-restore` of the full render would leave it, jumps included.
fn expected_kernel(rs: &Ruleset) -> FakeIptables {
    let mut k = FakeIptables::new();
    let mut text = restore::write(rs, restore::Scope::Full, &[]);
    let mut jumps = String::new();
    for j in needed_jumps(rs) {
        jumps.push_str(&format!("*{}\n-I {} 1 {}\nCOMMIT\n", j.table, j.from, j.args.iter().map(|a| restore::quote(a)).collect::<Vec<_>>().join(" ")));
    }
    text.push_str(&jumps);
    k.restore(rs.ctx.family, &text).unwrap();
    k
}

fn kernel_text(k: &mut FakeIptables, rs: &Ruleset) -> String {
    ["filter", "nat"].iter().map(|t| k.save_table(rs.ctx.family, t)).collect()
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
    k.restore(rs.ctx.family, "*filter\n-A INPUT -s 198.18.0.1/32 -j ACCEPT\nCOMMIT\n").unwrap();
    sync(&mut k, &rs, false).unwrap();
    let save = k.save_table(rs.ctx.family, "filter");
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
    k.restore(rs.ctx.family, "*nat\n:CNI-HOSTPORT - [0:0]\n-A CNI-HOSTPORT -j RETURN\n:KUBE-OTHER - [0:0]\n-A KUBE-OTHER -j RETURN\nCOMMIT\n").unwrap();
    let report = sync(&mut k, &rs, false).unwrap();
    assert!(!report.delta.restore_text().contains("CNI-HOSTPORT"));
    assert!(!report.delta.restore_text().contains("KUBE-OTHER"));
    let save = k.save_table(rs.ctx.family, "nat");
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

//! Golden tests: every fixture rendered through the CLI's path and compared byte for byte;
//! kube-proxy's own scenarios compared through its test normalisation; packet-flow
//! expectations checked with the tracer, so re-blessing cosmetics cannot hide a behaviour
//! change; incremental fixtures pinning partial-sync output after each step.

mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use support::*;
use svcproxy::config::Settings;
use svcproxy::iptables::{check, partial, restore};
use svcproxy::pipeline::Loaded;
use svcproxy::source;
use svcproxy::trace::{self, Entry, Env, Packet};
use svcproxy::track::Event;

fn fixtures() -> std::path::PathBuf {
    repo().join("fixtures")
}

fn golden() -> std::path::PathBuf {
    repo().join("golden")
}

/// The flags kube-proxy's scenarios are rendered with (the invocation).
fn upstream_flags() -> Settings {
    Settings {
        ip_family: Some("ipv4".into()),
        hostname_override: Some("test-node".into()),
        node_ips: Some(vec!["192.168.0.2".into()]),
        cluster_cidr: Some("10.0.0.0/8".into()),
        detect_local_mode: Some("ClusterCIDR".into()),
        masquerade_bit: Some(14),
        ..Settings::default()
    }
}

#[test]
fn goldens_match_byte_for_byte() {
    let mut f = Failures::default();
    let files = yaml_files(&fixtures());
    for path in &files {
        let (_, _, text) = render(path, Settings::default());
        f.add(check_golden(&golden().join(format!("{}.iptables", stem(path))), &text));
    }
    f.finish("goldens", files.len());
}

#[test]
fn every_golden_is_consistent_and_round_trips() {
    let mut f = Failures::default();
    let mut n = 0;
    for path in yaml_files(&fixtures()).iter().chain(yaml_files(&fixtures().join("upstream")).iter()) {
        let (_, rulesets, _) = render(path, Settings::default().over(upstream_flags_if_upstream(path)));
        for rs in &rulesets {
            n += 1;
            let text = restore::write(rs, restore::Scope::Full, &[]);
            let dump = match restore::parse(&text) {
                Ok(d) => d,
                Err(e) => {
                    f.push(format!("{}: does not parse: {e}", path.display()));
                    continue;
                }
            };
            if dump.to_text() != text {
                f.push(format!("{}: parse round-trip differs:\n{}", path.display(), diff(&text, &dump.to_text())));
            }
            for p in check::check_jumps(&dump) {
                f.push(format!("{} ({}): {p}", path.display(), rs.ctx.family));
            }
        }
    }
    f.finish("consistency", n);
}

fn upstream_flags_if_upstream(path: &Path) -> Settings {
    if path.components().any(|c| c.as_os_str() == "upstream") { upstream_flags() } else { Settings::default() }
}

#[test]
fn upstream_scenarios_equal_kube_proxy_expected_rules() {
    let mut f = Failures::default();
    let mut n = 0;
    for path in yaml_files(&fixtures().join("upstream")) {
        let expected_path = golden().join("upstream").join(format!("{}.kube-proxy", stem(&path)));
        let Ok(expected) = std::fs::read_to_string(&expected_path) else { continue };
        n += 1;
        let (_, rulesets, _) = render(&path, upstream_flags());
        let ours = restore::write(&rulesets[0], restore::Scope::Full, &[]);
        let normalised = check::sort_like_kube_proxy_tests(&restore::parse(&ours).unwrap());
        if normalised != expected {
            f.push(format!("{}: differs from kube-proxy's expected rules:\n{}", path.display(), diff(&expected, &normalised)));
        }
    }
    f.finish("upstream rulesets", n);
}

/// One line of a `.flows` file:
/// `name | source IP | protocol | dest IP | dest port | expected | masquerade`.
struct Flow {
    name: String,
    src: IpAddr,
    proto: String,
    dst: IpAddr,
    dport: u16,
    expected: String,
    masq: bool,
}

fn read_flows(path: &Path) -> Vec<Flow> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(c.len(), 7, "{}: bad flow line: {l}", path.display());
            Flow {
                name: c[0].into(),
                src: c[1].parse().unwrap_or_else(|_| panic!("{}: bad IP in {l}", path.display())),
                proto: c[2].to_lowercase(),
                dst: c[3].parse().unwrap_or_else(|_| panic!("{}: bad IP in {l}", path.display())),
                dport: c[4].parse().unwrap(),
                expected: if c[5] == "-" { String::new() } else { c[5].into() },
                masq: c[6] == "true",
            }
        })
        .collect()
}

fn local_ips(loaded: &Loaded) -> BTreeSet<IpAddr> {
    let mut ips: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
    ips.extend(loaded.config.interface_addresses.iter().flatten().copied());
    ips.insert("127.0.0.1".parse().unwrap());
    ips.insert("::1".parse().unwrap());
    ips
}

fn check_flows(fixture: &Path, flows_path: &Path, flags: Settings, f: &mut Failures) -> usize {
    let (loaded, rulesets, _) = render(fixture, flags);
    let env = Env { local_ips: local_ips(&loaded), affinity: BTreeSet::new() };
    let flows = read_flows(flows_path);
    for flow in &flows {
        let Some(rs) = rulesets.iter().find(|r| r.ctx.family == svcproxy::net::IpFamily::of(&flow.dst)) else {
            f.push(format!("{}: {}: no ruleset for the family of {}", flows_path.display(), flow.name, flow.dst));
            continue;
        };
        let dump = restore::parse(&restore::write(rs, restore::Scope::Full, &[])).unwrap();
        let packet = Packet { src: flow.src, dst: flow.dst, protocol: flow.proto.clone(), dport: flow.dport, in_interface: None };
        let (got, masq) = trace::trace(&dump, &env, packet, Entry::Prerouting).summary();
        if got != flow.expected || masq != flow.masq {
            f.push(format!(
                "{}: flow {:?}: expected {:?} masq={}, traced {:?} masq={}",
                flows_path.display(), flow.name, flow.expected, flow.masq, got, masq
            ));
        }
    }
    flows.len()
}

#[test]
fn packet_flows_reach_the_expected_endpoints() {
    let mut f = Failures::default();
    let mut n = 0;
    for path in yaml_files(&fixtures()) {
        let flows = golden().join(format!("{}.flows", stem(&path)));
        if flows.exists() {
            n += check_flows(&path, &flows, Settings::default(), &mut f);
        }
    }
    for path in yaml_files(&fixtures().join("upstream")) {
        let flows = golden().join("upstream").join(format!("{}.flows", stem(&path)));
        if flows.exists() {
            // The fixture carries the fake proxier's whole environment (some scenarios
            // vary the local-traffic detector, which the standard flags would override).
            n += check_flows(&path, &flows, Settings::default(), &mut f);
        }
    }
    f.finish("packet flows", n);
}

/// Incremental fixtures: `fixtures/NAME/NN-*.yaml` are whole cluster states; after each
/// step the next restore (full for the first, partial after) must match `golden/NAME/NN.iptables`.
#[test]
fn incremental_steps_match_partial_sync_goldens() {
    let mut f = Failures::default();
    let mut n = 0;
    for dir in step_dirs(&fixtures()) {
        let steps = yaml_files(&dir);
        let first = load(&steps[0], Settings::default());
        let mut trackers = first.trackers.clone();
        let config = first.config.clone();
        let mut prev = source::read_path(&steps[0]).unwrap();
        let mut rulesets = svcproxy::pipeline::render_iptables(&first);
        let mut applied = vec![partial::Applied::unknown(); rulesets.len()];
        for (i, step) in steps.iter().enumerate() {
            let state = source::read_path(step).unwrap();
            let mut changes = vec![Default::default(); rulesets.len()];
            if i > 0 {
                for e in source::events_between(&prev, &state) {
                    trackers.apply(&e);
                }
                changes = trackers.commit();
            }
            let mut text = String::new();
            for ((rs, t), (ap, ch)) in rulesets.iter_mut().zip(&trackers.families).zip(applied.iter_mut().zip(&changes)) {
                let ch: &svcproxy::track::Changes = ch;
                let (svcs, eps) = t.view();
                rs.update(svcs, eps, &ch.services);
                if rulesets_len_gt1(&config) {
                    text.push_str(if rs.ctx.family.is_v6() { "# ip6tables\n" } else { "# iptables\n" });
                }
                text.push_str(&partial::next_restore(ap, rs, &ch.services, false));
                *ap = partial::Applied::record(rs);
            }
            n += 1;
            let name = format!("{:02}.iptables", i + 1);
            f.add(check_golden(&golden().join(stem(&dir)).join(name), &text));
            prev = state;
        }
        let _ = Event::ServiceDeleted;
    }
    f.finish("incremental steps", n);
}

fn rulesets_len_gt1(c: &svcproxy::config::Config) -> bool {
    c.families.len() > 1
}

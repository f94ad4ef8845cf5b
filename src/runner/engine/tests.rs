//! The engine against fake kernels: partial syncs send only the change and never read the
//! kernel; a failure makes the next sync compare with the kernel; stale UDP conntrack
//! entries are cleared; IPVS mode follows changes too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::*;
use crate::config::Settings;
use crate::iptables::conntrack::RecordingConntrack;
use crate::netfilter::fake::{Call, FakeIptables, SharedFake};
use crate::iptables::sync::sync;
use crate::ipvs::fake::{FakeIpset, FakeLinks};
use crate::ipvs::netlink::FakeIpvs;
use crate::ipvs::proxier::{Paths, Proxier as IpvsProxier};
use crate::model::EndpointSlice;
use crate::pipeline;
use crate::source::{self, ClusterState};

fn demo_state() -> ClusterState {
    source::read_path(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml")).unwrap()
}

fn slice(state: &ClusterState, ns: &str, service: &str) -> EndpointSlice {
    state.slices.iter().find(|s| s.service.namespace == ns && s.service.name == service).unwrap().clone()
}

fn iptables_engine(state: ClusterState) -> (Engine, SharedFake, RecordingConntrack) {
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    let kernel: SharedFake = Arc::new(Mutex::new(FakeIptables::new()));
    let conntrack = RecordingConntrack::default();
    let engine = Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(conntrack.clone()));
    (engine, kernel, conntrack)
}

/// Calls since the last look, as ("save"|"restore", lines).
fn calls(kernel: &SharedFake) -> Vec<(&'static str, usize)> {
    let mut k = kernel.lock().unwrap();
    let out = k
        .calls
        .iter()
        .map(|c| match c {
            Call::Save(..) => ("save", 0),
            Call::Restore(_, text) => ("restore", text.lines().count()),
            Call::Check(..) => ("check", 0),
        })
        .collect();
    k.calls.clear();
    out
}

/// What a full sync would still change in every family (nothing, if all went right).
fn drift(engine: &Engine, kernel: &SharedFake) -> usize {
    let Proxier::Iptables(p) = &engine.proxier else { panic!("iptables mode") };
    let mut k = kernel.lock().unwrap();
    p.rulesets.iter().map(|rs| sync(&mut *k, rs, true).unwrap().delta.changes.len()).sum()
}

#[test]
fn partial_syncs_send_only_the_change_and_never_read_the_kernel() {
    let state = demo_state();
    let mut web = slice(&state, "shop", "web");
    let (mut engine, kernel, _) = iptables_engine(state);

    // The first sync cannot trust memory: it reads the kernel, even when asked for a partial one.
    engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));

    web.endpoints.remove(0);
    engine.apply(&[Event::SliceApplied(Arc::new(web.clone()))]);
    let outcome = engine.sync(false).unwrap();
    let seen = calls(&kernel);
    assert!(seen.iter().all(|c| c.0 == "restore"), "{seen:?}");
    assert!(outcome.restore_lines > 0 && outcome.restore_lines < 12, "{outcome:?}");
    assert_eq!(drift(&engine, &kernel), 0);

    // Nothing changed: nothing sent.
    calls(&kernel);
    assert_eq!(engine.sync(false).unwrap().restore_lines, 0);
    assert!(calls(&kernel).is_empty());

    // A full sync reads the kernel again.
    engine.sync(true).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));
}

#[test]
fn after_a_failed_restore_the_next_sync_compares_with_the_kernel() {
    let state = demo_state();
    let mut web = slice(&state, "shop", "web");
    let (mut engine, kernel, _) = iptables_engine(state);
    engine.sync(true).unwrap();

    web.endpoints.remove(0);
    engine.apply(&[Event::SliceApplied(Arc::new(web.clone()))]);
    kernel.lock().unwrap().fail_next = Some("line 3 failed".into());
    assert!(engine.sync(false).is_err());
    assert_ne!(drift(&engine, &kernel), 0, "the kernel kept its rules");

    calls(&kernel);
    engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"), "the kernel's state was unknown: read it");
    assert_eq!(drift(&engine, &kernel), 0);
}

#[test]
fn a_removed_udp_endpoint_has_its_conntrack_entries_cleared() {
    let state = demo_state();
    let mut dns = slice(&state, "kube-system", "kube-dns");
    let (mut engine, _, conntrack) = iptables_engine(state);
    engine.sync(true).unwrap();
    assert!(conntrack.flushed.lock().unwrap().is_empty());

    let gone = dns.endpoints.remove(0).ip;
    engine.apply(&[Event::SliceApplied(Arc::new(dns))]);
    engine.sync(false).unwrap();
    let flushed = conntrack.flushed.lock().unwrap();
    assert!(!flushed.is_empty());
    assert!(flushed.iter().all(|f| f.reply_src == Some(gone) && f.addr.protocol == "udp"), "{flushed:?}");
}

#[test]
fn a_topology_change_re_renders_and_resyncs_fully() {
    let (mut engine, kernel, _) = iptables_engine(demo_state());
    engine.sync(true).unwrap();
    let mut labels = engine.config.node_labels.clone();
    labels.insert("topology.kubernetes.io/zone".into(), "zone-elsewhere".into());
    assert!(engine.set_node_labels(labels.clone()));
    assert!(!engine.set_node_labels(labels));
    calls(&kernel);
    engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));
    assert_eq!(drift(&engine, &kernel), 0);
}

/// An IPVS-mode engine over fake kernels, its node-local files under `dir`.
fn ipvs_engine(state: ClusterState, dir: &std::path::Path) -> Engine {
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    let sys = dir.join("sys");
    for s in crate::ipvs::kernel_state::sysctls(false) {
        let f = sys.join(s.path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, "0\n").unwrap();
    }
    let proxier = IpvsProxier {
        ipvs: Box::new(FakeIpvs::new()),
        links: Box::new(FakeLinks::default()),
        ipset: Box::new(FakeIpset::default()),
        iptables: Box::new(FakeIptables::new()),
        paths: Paths { grace_file: dir.join("grace"), grace_period_secs: 0, proc_sys: sys },
    };
    Engine::ipvs(loaded.config, loaded.trackers, proxier)
}

/// Real servers in the fake IPVS kernel, over every virtual server.
fn ipvs_dests(engine: &mut Engine) -> usize {
    let Proxier::Ipvs(p) = &mut engine.proxier else { panic!("ipvs mode") };
    crate::ipvs::observe::services(p.ipvs.as_mut()).unwrap().iter().map(|(_, dests)| dests.len()).sum()
}

#[test]
fn ipvs_mode_follows_endpoint_changes() {
    let state = demo_state();
    let mut web = slice(&state, "shop", "web");
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-{}", std::process::id()));
    let mut engine = ipvs_engine(state, &dir);
    let first = engine.sync(true).unwrap();
    assert!(first.ipvs_ops > 0 && first.restore_lines > 0);

    let before = ipvs_dests(&mut engine);
    let again = engine.sync(false).unwrap();
    assert_eq!((again.ipvs_ops, again.restore_lines), (0, 0), "nothing changed");

    // One of web's two endpoints goes: its real server leaves every virtual server of web
    // (ClusterIP and NodePort ones; with no grace period, at once).
    web.endpoints.remove(0);
    engine.apply(&[Event::SliceApplied(Arc::new(web))]);
    let change = engine.sync(false).unwrap();
    assert!(change.ipvs_ops > 0);
    assert!(ipvs_dests(&mut engine) < before);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failure_in_one_family_leaves_every_later_family_to_a_full_sync() {
    let state = demo_state();
    let mut web = slice(&state, "shop", "web");
    let (mut engine, kernel, _) = iptables_engine(state);
    assert_eq!(engine.trackers.families.len(), 2, "the demo node is dual-stack");
    engine.sync(true).unwrap();
    web.endpoints.remove(0);
    engine.apply(&[Event::SliceApplied(Arc::new(web))]);
    kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    assert!(engine.sync(false).is_err());
    kernel.lock().unwrap().calls.clear();
    engine.sync(false).unwrap();
    let saved: Vec<crate::net::IpFamily> =
        kernel.lock().unwrap().calls.iter().filter_map(|c| match c { Call::Save(f, _) => Some(*f), _ => None }).collect();
    assert!(saved.contains(&crate::net::IpFamily::V4) && saved.contains(&crate::net::IpFamily::V6), "{saved:?}");
    assert_eq!(drift(&engine, &kernel), 0);
}

/// The watch loop's wake-ups over a fake kernel, at instants the test chooses.
struct Loop {
    engine: Engine,
    kernel: SharedFake,
    shared: crate::serve::SharedState,
}

impl Loop {
    fn new() -> Self {
        let (engine, kernel, _) = iptables_engine(demo_state());
        let schedule = crate::runner::Schedule::new(crate::runner::Timing::default());
        let shared = Arc::new(crate::serve::Shared::new(schedule));
        Loop { engine, kernel, shared }
    }

    /// Runs the loop's next wake-up; returns when it was.
    fn wake(&mut self) -> std::time::Instant {
        let at = self.shared.schedule.lock().unwrap().next().expect("ready");
        crate::runner::watch::wake(&mut self.engine, &self.shared, at);
        at
    }

    /// A counter or histogram count from /metrics.
    fn metric(&self, name: &str) -> u64 {
        let text = self.shared.metrics.encode();
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{name} in {text}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

#[test]
fn periodic_syncs_are_partial_and_check_the_canaries_instead_of_reading_the_kernel() {
    let mut l = Loop::new();
    let base = std::time::Instant::now();
    l.shared.schedule.lock().unwrap().set_ready(base);
    assert_eq!(l.wake(), base);
    assert!(calls(&l.kernel).iter().any(|c| c.0 == "save"), "the first sync is full");
    let mut last = base;
    for _ in 0..5 {
        let at = l.wake();
        assert_eq!(at, last + std::time::Duration::from_secs(30), "one per sync period");
        last = at;
        let seen = calls(&l.kernel);
        assert!(seen.iter().all(|c| c.0 == "check"), "a periodic sync reads nothing and sends nothing: {seen:?}");
        assert_eq!(seen.len(), 6, "3 canaries in each of 2 families: {seen:?}");
    }
    assert_eq!(l.metric("kubeproxy_sync_full_proxy_rules_duration_seconds_count"), 1);
    assert_eq!(l.metric("kubeproxy_sync_partial_proxy_rules_duration_seconds_count"), 5);
    assert_eq!((l.metric("svcproxy_canary_checks_total"), l.metric("svcproxy_canary_lost_total")), (5, 0));

    // A change between periodic syncs is partial too.
    let mut web = slice(&demo_state(), "shop", "web");
    web.endpoints.remove(0);
    l.engine.apply(&[Event::SliceApplied(Arc::new(web))]);
    l.shared.schedule.lock().unwrap().changed(last + std::time::Duration::from_secs(1));
    l.wake();
    let seen = calls(&l.kernel);
    assert!(seen.iter().any(|c| c.0 == "restore") && seen.iter().all(|c| c.0 != "save"), "{seen:?}");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

#[test]
fn a_flushed_nat_table_is_seen_at_the_next_check_and_a_full_sync_restores_it() {
    let mut l = Loop::new();
    let base = std::time::Instant::now();
    l.shared.schedule.lock().unwrap().set_ready(base);
    l.wake();
    l.wake();
    assert_eq!(l.metric("svcproxy_canary_lost_total"), 0);
    // `iptables -t nat -F` by someone else: every rule goes, every chain stays.
    l.kernel.lock().unwrap().flush_table(crate::net::IpFamily::V4, "nat");
    assert_ne!(drift(&l.engine, &l.kernel), 0);
    calls(&l.kernel);

    let at = l.wake();
    assert_eq!(at, base + std::time::Duration::from_secs(60), "within one sync period");
    assert_eq!(l.metric("svcproxy_canary_lost_total"), 1);
    assert!(calls(&l.kernel).iter().any(|c| c.0 == "save"), "a full sync");
    assert_eq!(l.metric("kubeproxy_sync_full_proxy_rules_duration_seconds_count"), 2);
    assert_eq!(drift(&l.engine, &l.kernel), 0, "the rules are back");
    {
        let Proxier::Iptables(p) = &mut l.engine.proxier else { panic!("iptables mode") };
        assert_eq!(p.canary_lost().unwrap(), None, "and the canary with them");
    }
    calls(&l.kernel);
    l.wake();
    let seen = calls(&l.kernel);
    assert!(seen.iter().all(|c| c.0 == "check"), "then partial again: {seen:?}");
    assert_eq!(l.metric("svcproxy_canary_lost_total"), 1);
}

#[test]
fn new_node_labels_make_the_next_wake_up_a_full_sync() {
    let mut l = Loop::new();
    let base = std::time::Instant::now();
    l.shared.schedule.lock().unwrap().set_ready(base);
    l.wake();
    l.wake();
    assert_eq!(l.metric("kubeproxy_sync_full_proxy_rules_duration_seconds_count"), 1);
    let mut labels = l.engine.config.node_labels.clone();
    labels.insert("topology.kubernetes.io/zone".into(), "zone-elsewhere".into());
    let node = crate::model::Node { labels, ..Default::default() };
    crate::runner::watch::on_message(&mut l.engine, &l.shared, crate::source::watch::SourceMsg::Node { node: Some(node), deleting: false });
    calls(&l.kernel);
    l.wake();
    assert!(calls(&l.kernel).iter().any(|c| c.0 == "save"), "compared with the kernel");
    assert_eq!(l.metric("kubeproxy_sync_full_proxy_rules_duration_seconds_count"), 2, "and counted as full");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

#[test]
fn full_syncs_re_assert_route_localnet_and_partial_ones_leave_sysctls_alone() {
    let (mut engine, _kernel, _ct) = iptables_engine(demo_state());
    let root = std::env::temp_dir().join(format!("svcproxy-engine-sysctl-{}", std::process::id()));
    let f = root.join("net/ipv4/conf/all/route_localnet");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "0\n").unwrap();
    engine.sysctl_root = Some(root.clone());
    engine.sync(true).unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "1", "a full sync sets it");
    std::fs::write(&f, "0\n").unwrap();
    engine.sync(false).unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "0\n", "a partial sync reads nothing of the kernel");
    engine.sync(true).unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "1", "the next full sync repairs it");
    let _ = std::fs::remove_dir_all(&root);
}

/// kube-proxy's network-programming SLI: a slice change stamped 40 s ago by the
/// EndpointSlice controller is observed at 40 s or more once programmed; one stamped before
/// the proxy started is not this proxy's to measure.
#[test]
fn network_programming_latency_is_measured_from_the_slices_trigger_time() {
    let mut l = Loop::new();
    let base = std::time::Instant::now();
    l.shared.schedule.lock().unwrap().set_ready(base);
    l.wake();
    let count = |l: &Loop| l.metric("kubeproxy_network_programming_duration_seconds_count");
    assert_eq!(count(&l), 0, "the initial lists carry no stamps");
    let forty_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(40);
    // The tracker started before the stamp (it is 40 s old only for this test's clock).
    let mut web = slice(&demo_state(), "shop", "web");
    web.endpoints.remove(0);
    web.trigger_time = Some(forty_ago);
    let before_start = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
    let mut db = slice(&demo_state(), "shop", "web");
    db.id.name = "web-other".into();
    db.endpoints.clear();
    db.trigger_time = Some(before_start);
    for t in &mut l.engine.trackers.families {
        t.endpoints.set_started_for_test(forty_ago - std::time::Duration::from_secs(1));
    }
    l.engine.apply(&[Event::SliceApplied(Arc::new(web)), Event::SliceApplied(Arc::new(db))]);
    l.shared.schedule.lock().unwrap().changed(base + std::time::Duration::from_secs(1));
    l.wake();
    assert_eq!(count(&l), 1, "one stamped change, the one older than the proxy skipped");
    let text = l.shared.metrics.encode();
    let under_40 = text.lines().find(|s| s.starts_with("kubeproxy_network_programming_duration_seconds_bucket{le=\"39.0\"}")).unwrap();
    let at_45 = text.lines().find(|s| s.starts_with("kubeproxy_network_programming_duration_seconds_bucket{le=\"45.0\"}")).unwrap();
    assert!(under_40.ends_with(" 0") && at_45.ends_with(" 1"), "observed at 40 s or more: {under_40} / {at_45}");
    assert_eq!(l.metric("svcproxy_change_to_sync_duration_seconds_count"), 2, "svcproxy's own figure, per sync");
}

/// The no-local-endpoint gauge is kept from each commit's changed services; it always
/// equals a recount of every service.
#[test]
fn no_local_endpoint_counts_follow_changes_without_walking_every_service() {
    let state = demo_state();
    let (mut engine, _kernel, _ct) = iptables_engine(state.clone());
    let recount = |e: &Engine| {
        e.trackers.families.iter().map(|t| {
            let (s, eps) = t.view();
            crate::select::no_local_endpoints(s, eps)
        }).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    assert_eq!(engine.no_local_endpoints(), recount(&engine));
    let mut counts = vec![engine.no_local_endpoints()];
    for s in &state.slices {
        let mut emptied = s.clone();
        emptied.endpoints.clear();
        engine.apply(&[Event::SliceApplied(Arc::new(emptied))]);
        engine.sync(false).unwrap();
        assert_eq!(engine.no_local_endpoints(), recount(&engine), "after emptying {}", s.id);
        counts.push(engine.no_local_endpoints());
    }
    assert!(counts.windows(2).any(|w| w[0] != w[1]), "the count moved at least once: {counts:?}");
}

/// kube-proxy's rule counts of the last sync (full syncs write every rule) and its conntrack
/// reconciler's families (per IP family, from the stale flows a sync clears).
#[test]
fn a_full_sync_sets_the_last_rule_counts_and_a_cleared_flow_feeds_the_reconciler_families() {
    let mut l = Loop::new();
    let base = std::time::Instant::now();
    l.shared.schedule.lock().unwrap().set_ready(base);
    l.wake();
    let gauge = |l: &Loop, name: &str| l.shared.metrics.encode().lines().find_map(|s| s.strip_prefix(name).map(|v| v.trim().to_string()));
    let Proxier::Iptables(p) = &l.engine.proxier else { panic!("iptables mode") };
    let (filter, nat) = p.rule_counts();
    // kube-proxy's count: every `-A` line of the full restore input, per table.
    let text: String = p.rulesets.iter().map(|rs| crate::iptables::restore::write(rs, crate::iptables::restore::Scope::Full, &[])).collect();
    let appends = |table: &str| text.split("COMMIT\n").filter(|t| t.starts_with(&format!("*{table}\n"))).map(|t| t.lines().filter(|l| l.starts_with("-A ")).count()).sum::<usize>();
    assert_eq!((filter, nat), (appends("filter"), appends("nat")));
    assert!(nat > 0);
    assert_eq!(gauge(&l, "kubeproxy_sync_proxy_rules_iptables_last{table=\"nat\"}"), Some(nat.to_string()));
    assert_eq!(gauge(&l, "kubeproxy_sync_proxy_rules_iptables_last{table=\"filter\"}"), Some(filter.to_string()));
    assert_eq!(gauge(&l, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}"), None, "nothing stale yet");

    let mut dns = slice(&demo_state(), "kube-system", "kube-dns");
    dns.endpoints.remove(0);
    l.engine.apply(&[Event::SliceApplied(Arc::new(dns))]);
    l.shared.schedule.lock().unwrap().changed(base + std::time::Duration::from_secs(1));
    l.wake();
    assert_eq!(gauge(&l, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}"), Some("1".into()));
    let deleted: u64 = gauge(&l, "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}").unwrap().parse().unwrap();
    assert!(deleted > 0, "the recorder reports each flush as deleted");
    assert_eq!(gauge(&l, "kubeproxy_sync_proxy_rules_iptables_last{table=\"nat\"}"), Some(nat.to_string()), "a partial sync leaves the full sync's count");
}

/// The per-family iptables reports of an outcome.
fn reports(outcome: &Outcome) -> &[(crate::net::IpFamily, crate::iptables::sync::SyncReport)] {
    match &outcome.detail {
        Detail::Iptables(r) => r,
        Detail::Ipvs(_) => panic!("iptables mode"),
    }
}

/// What a fake kernel holds in a table, as `iptables-save` prints it.
fn saved(kernel: &SharedFake, family: crate::net::IpFamily, table: &str) -> String {
    kernel.lock().unwrap().save_table(family, table)
}

#[test]
fn a_dry_run_compares_every_family_with_the_kernel_and_sends_nothing() {
    let (mut engine, kernel, conntrack) = iptables_engine(demo_state());
    // Asked for a partial sync, a dry run still compares everything with the kernel.
    let outcome = engine.sync_as(false, Pass::DryRun).unwrap();
    let families: Vec<_> = reports(&outcome).iter().map(|(f, _)| *f).collect();
    assert_eq!(families, [crate::net::IpFamily::V4, crate::net::IpFamily::V6]);
    assert!(reports(&outcome).iter().all(|(_, r)| !r.delta.is_empty() && !r.applied), "an empty kernel differs in every family");
    let seen = calls(&kernel);
    assert!(seen.iter().any(|c| c.0 == "save") && seen.iter().all(|c| c.0 == "save"), "read only: {seen:?}");
    assert!(!saved(&kernel, crate::net::IpFamily::V4, "nat").contains("KUBE-SERVICES"), "no rule reached the kernel");
    assert!(conntrack.flushed.lock().unwrap().is_empty());

    // Nothing was sent, so the kernel is not trusted: the next sync reads it and applies.
    let applied = engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));
    assert_eq!(reports(&applied).iter().map(|(_, r)| r.delta.restore_lines()).collect::<Vec<_>>(),
        reports(&outcome).iter().map(|(_, r)| r.delta.restore_lines()).collect::<Vec<_>>(), "the dry run showed what the sync sent");
    assert_eq!(drift(&engine, &kernel), 0);
    assert!(reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|(_, r)| r.delta.is_empty()));
}

#[test]
fn a_dry_run_finds_stale_flows_but_clears_none() {
    let state = demo_state();
    let mut dns = slice(&state, "kube-system", "kube-dns");
    let (mut engine, _, conntrack) = iptables_engine(state);
    engine.sync(true).unwrap();
    dns.endpoints.remove(0);
    engine.apply(&[Event::SliceApplied(Arc::new(dns))]);
    let outcome = engine.sync_as(false, Pass::DryRun).unwrap();
    assert!(reports(&outcome).iter().any(|(_, r)| !r.flushes.is_empty()), "{outcome:?}");
    assert!(conntrack.flushed.lock().unwrap().is_empty());
    assert!(outcome.reconciled.is_empty());
}

#[test]
fn a_one_shot_engine_leaves_no_canary_behind_and_a_watch_engine_does() {
    let (engine, kernel, _) = iptables_engine(demo_state());
    let mut one_shot = engine.without_canaries();
    one_shot.sync(true).unwrap();
    assert!(!saved(&kernel, crate::net::IpFamily::V4, "nat").contains("KUBE-PROXY-CANARY"));
    assert!(saved(&kernel, crate::net::IpFamily::V4, "nat").contains("KUBE-SERVICES"));

    let (mut watch, kernel, _) = iptables_engine(demo_state());
    watch.sync(true).unwrap();
    assert!(saved(&kernel, crate::net::IpFamily::V4, "nat").contains("KUBE-PROXY-CANARY"));
}

#[test]
fn a_failure_in_a_later_family_keeps_the_earlier_families_reports_and_sysctls() {
    let (mut engine, kernel, _) = iptables_engine(demo_state());
    engine.sync(true).unwrap();
    let root = std::env::temp_dir().join(format!("svcproxy-engine-failure-{}", std::process::id()));
    let f = root.join("net/ipv4/conf/all/route_localnet");
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "0\n").unwrap();
    engine.sysctl_root = Some(root.clone());
    {
        let mut k = kernel.lock().unwrap();
        k.flush_table(crate::net::IpFamily::V6, "nat");
        k.fail_next = Some("line 2 failed".into());
    }
    let Err(SyncFailure::Iptables(failure)) = engine.sync(true) else { panic!("the IPv6 restore fails") };
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(failure.failed.family, crate::net::IpFamily::V6);
    assert_eq!(failure.failed.done.len(), 1);
    assert_eq!(failure.failed.done[0].0, crate::net::IpFamily::V4);
    assert!(failure.failed.done[0].1.delta.is_empty(), "IPv4 was in sync");
    assert_eq!(failure.sysctls.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["net/ipv4/conf/all/route_localnet"]);
    assert_eq!(failure.to_string(), failure.failed.error.to_string(), "shown as the family's error itself");
}

#[test]
fn an_ipvs_dry_run_reports_what_the_sync_then_does_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-dry-{}", std::process::id()));
    let mut engine = ipvs_engine(demo_state(), &dir);
    let dry = engine.sync_as(false, Pass::DryRun).unwrap();
    let Detail::Ipvs(report) = &dry.detail else { panic!("ipvs mode") };
    assert!(!report.is_empty() && dry.ipvs_ops > 0, "an empty kernel differs");
    assert_eq!(ipvs_dests(&mut engine), 0, "nothing reached IPVS");

    let applied = engine.sync(true).unwrap();
    assert_eq!(applied.ipvs_ops, dry.ipvs_ops, "the dry run showed what the sync did");
    assert!(ipvs_dests(&mut engine) > 0);
    let again = engine.sync_as(true, Pass::DryRun).unwrap();
    let Detail::Ipvs(report) = &again.detail else { panic!("ipvs mode") };
    assert!(report.is_empty(), "{}", report.diff_text());
    let _ = std::fs::remove_dir_all(dir);
}

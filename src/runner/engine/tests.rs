//! The engine against fake kernels: partial syncs send only the change and never read the
//! kernel; a failure makes the next sync compare with the kernel; the conntrack reconciler
//! deletes stale UDP flows in every mode; IPVS mode follows changes too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::*;
use crate::config::Settings;
use crate::conntrack::table::fake::FakeFlows;
use crate::netfilter::ctnetlink::{wire::IPPROTO_UDP, Flow, Tuple};
use crate::xtables::fake::{Call, FakeIptables, SharedFake};
use crate::iptables::sync::sync;
use crate::ipvs::fake::{FakeIpset, FakeLinks};
use crate::ipvs::netlink::FakeIpvs;
use crate::ipvs::proxier::{Paths, Proxier as IpvsProxier};
use crate::model::EndpointSlice;
use crate::pipeline;
use crate::settings::kinds::KubeProxyVersion;
use crate::source::{self, ClusterState};

fn demo_state() -> ClusterState {
    source::read_path(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml")).unwrap()
}

fn slice(state: &ClusterState, ns: &str, service: &str) -> EndpointSlice {
    state.slices.iter().find(|s| s.service.namespace == ns && s.service.name == service).unwrap().clone()
}

/// A slice of `service` without its first endpoint; returns the endpoint's address too.
fn without_first_endpoint(state: &ClusterState, ns: &str, service: &str) -> (Event, std::net::IpAddr) {
    let mut s = slice(state, ns, service);
    let gone = s.endpoints.remove(0).ip;
    (Event::SliceApplied(Arc::new(s)), gone)
}

fn iptables_engine(state: ClusterState) -> (Engine, SharedFake, FakeFlows) {
    let conntrack = FakeFlows::default();
    let (engine, kernel) = iptables_engine_over(state, conntrack.clone());
    (engine, kernel, conntrack)
}

/// An iptables-mode engine over a new fake iptables and the given flow table.
fn iptables_engine_over(state: ClusterState, conntrack: FakeFlows) -> (Engine, SharedFake) {
    let flags = Settings { nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    let kernel: SharedFake = Arc::new(Mutex::new(FakeIptables::new()));
    (Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(conntrack)), kernel)
}

/// One UDP flow to each ClusterIP and UDP port of the service per endpoint, answered by
/// that endpoint, in every family the engine serves (committed maps: after a sync).
fn udp_flows_of(engine: &Engine, ns: &str, name: &str) -> Vec<Flow> {
    let id = crate::model::NamespacedName::new(ns, name);
    let mut out = Vec::new();
    for t in &engine.trackers.families {
        let (services, endpoints) = t.view();
        let client: std::net::IpAddr = if t.family.is_v6() { "fd00:99::9".parse().unwrap() } else { "198.18.99.9".parse().unwrap() };
        for (spn, sp) in services.iter().filter(|(k, sp)| k.service == id && sp.protocol == crate::model::Protocol::Udp) {
            for ep in endpoints.get(spn).map(|e| e.as_slice()).unwrap_or_default() {
                let sport = 40000 + out.len() as u16;
                out.push(Flow {
                    orig: Tuple { src: client, dst: sp.cluster_ip, proto: IPPROTO_UDP, sport, dport: sp.port },
                    reply: Tuple { src: ep.ip, dst: client, proto: IPPROTO_UDP, sport: ep.port, dport: sport },
                    zone: 0,
                    id: out.len() as u32 + 1,
                    status: 0,
                    timeout: 30,
                });
            }
        }
    }
    assert!(!out.is_empty(), "{ns}/{name} has UDP endpoints");
    out
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
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, kernel, _) = iptables_engine(state);

    // The first sync cannot trust memory: it reads the kernel, even when asked for a partial one.
    engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));

    engine.apply(&[web]);
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
fn a_partial_sync_of_many_services_is_one_iptables_nft_commit() {
    // Each restore is a kernel commit that validates the whole table: a partial sync of
    // more services than a full sync's chunk still goes as one restore.
    let text = crate::gen::yaml(&crate::gen::GenSpec { services: 400, endpoints: 3, seed: 4 });
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("generated.yaml"), &text, &mut state).unwrap();
    let changed: Vec<EndpointSlice> = state.slices.iter().step_by(3).cloned().collect();
    let (mut engine, kernel, _) = iptables_engine(state);
    engine.sync(true).unwrap();
    assert!(calls(&kernel).iter().filter(|c| c.0 == "restore").count() > 2, "the full sync went in chunks");

    let events: Vec<Event> = changed
        .into_iter()
        .map(|mut s| {
            s.endpoints.pop();
            Event::SliceApplied(Arc::new(s))
        })
        .collect();
    assert!(events.len() > 2 * crate::iptables::sync::NFT_CHUNK_SERVICES && events.len() < crate::iptables::sync::NFT_PARTIAL_CHUNK_SERVICES);
    engine.apply(&events);
    engine.sync(false).unwrap();
    let seen = calls(&kernel);
    assert_eq!(seen.iter().filter(|c| c.0 == "restore").count(), 1, "{seen:?}");
    assert!(seen.iter().all(|c| c.0 == "restore"), "{seen:?}");
    assert_eq!(drift(&engine, &kernel), 0);
}

#[test]
fn after_a_failed_restore_the_next_sync_compares_with_the_kernel() {
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, kernel, _) = iptables_engine(state);
    engine.sync(true).unwrap();

    engine.apply(&[web]);
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
    let (dns, gone) = without_first_endpoint(&state, "kube-system", "kube-dns");
    let (mut engine, _, conntrack) = iptables_engine(state);
    engine.sync(true).unwrap();
    let healthy = udp_flows_of(&engine, "kube-system", "kube-dns");
    healthy.iter().for_each(|f| conntrack.add(*f));
    let first = engine.sync(true).unwrap();
    assert!(first.reconciled.is_empty(), "no UDP endpoint changed: no run");
    assert!(conntrack.deleted.lock().unwrap().is_empty());

    engine.apply(&[dns]);
    let outcome = engine.sync(false).unwrap();
    let deleted = conntrack.deleted.lock().unwrap().clone();
    assert!(!deleted.is_empty());
    assert!(deleted.iter().all(|f| f.reply.src == gone), "{deleted:?}");
    assert_eq!(conntrack.flows.lock().unwrap().len(), healthy.len() - deleted.len(), "the other endpoints' flows stay");
    let family = crate::net::IpFamily::of(&gone);
    assert_eq!(outcome.reconciled.iter().map(|r| (r.family, r.deleted)).collect::<Vec<_>>(), [(family, Some(deleted.len()))]);
}

/// kube-proxy's reconciler runs after a process's first sync (every endpoint is a change):
/// a flow cached before any rule (not NATed) or left by an endpoint that went while the
/// proxy was down is deleted; a healthy flow is kept.
#[test]
fn a_first_sync_deletes_flows_no_serving_endpoint_answers_and_keeps_healthy_ones() {
    let (mut engine, _, conntrack) = iptables_engine(demo_state());
    // The maps are committed by a dry run, which also lists without deleting.
    let dry = engine.sync_as(true, Pass::DryRun).unwrap();
    assert!(dry.reconciled.iter().all(|r| r.stale.is_empty() && r.deleted.is_none()));
    let healthy = udp_flows_of(&engine, "kube-system", "kube-dns");
    let mut unnated = healthy[0];
    unnated.reply.src = unnated.orig.dst;
    unnated.orig.sport += 1000;
    unnated.id = 1000;
    let mut departed = healthy[0];
    departed.reply.src = "198.18.250.250".parse().unwrap();
    departed.orig.sport += 2000;
    departed.id = 2000;
    healthy.iter().chain([&unnated, &departed]).for_each(|f| conntrack.add(*f));

    // A new process over the same kernel.
    let (mut engine, _) = iptables_engine_over(demo_state(), conntrack.clone());
    let dry = engine.sync_as(true, Pass::DryRun).unwrap();
    let listed: Vec<Flow> = dry.reconciled.iter().flat_map(|r| r.stale.clone()).collect();
    assert_eq!(listed, [unnated, departed], "a dry run lists them");
    assert!(conntrack.deleted.lock().unwrap().is_empty(), "and deletes none");
    let outcome = engine.sync(true).unwrap();
    assert_eq!(*conntrack.deleted.lock().unwrap(), [unnated, departed]);
    assert_eq!(*conntrack.flows.lock().unwrap(), healthy, "a restart keeps healthy flows");
    assert_eq!(outcome.reconciled.iter().filter_map(|r| r.deleted).sum::<usize>(), 2);
    assert!(engine.sync(false).unwrap().reconciled.is_empty(), "nothing changed: no run");
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
    ipvs_engine_recording(state, dir).0
}

/// [`ipvs_engine`], with the flow table its reconciler works on.
fn ipvs_engine_recording(state: ClusterState, dir: &std::path::Path) -> (Engine, FakeFlows) {
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), nfacct: Some(false), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    let sys = crate::ipvs::fake::proc_sys(dir);
    let conntrack = FakeFlows::default();
    let proxier = IpvsProxier {
        ipvs: Box::new(FakeIpvs::new()),
        links: Box::new(FakeLinks::default()),
        ipset: Box::new(FakeIpset::default()),
        iptables: Box::new(FakeIptables::new()),
        paths: Paths { grace_file: dir.join("grace"), grace_period_secs: 0, proc_sys: sys },
        memory: None,
        canaries: true,
    };
    (Engine::ipvs(loaded.config, loaded.trackers, proxier, Box::new(conntrack.clone())), conntrack)
}

/// Real servers in the fake IPVS kernel, over every virtual server.
fn ipvs_dests(engine: &mut Engine) -> usize {
    let Proxier::Ipvs(p) = &mut engine.proxier else { panic!("ipvs mode") };
    crate::ipvs::observe::services(p.ipvs.as_mut()).unwrap().iter().map(|(_, dests)| dests.len()).sum()
}

#[test]
fn ipvs_mode_follows_endpoint_changes() {
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-{}", std::process::id()));
    let mut engine = ipvs_engine(state, &dir);
    let first = engine.sync(true).unwrap();
    assert!(first.ipvs_ops > 0 && first.restore_lines > 0);

    let before = ipvs_dests(&mut engine);
    let again = engine.sync(false).unwrap();
    assert_eq!((again.ipvs_ops, again.restore_lines), (0, 0), "nothing changed");

    // One of web's two endpoints goes: its real server leaves every virtual server of web
    // (ClusterIP and NodePort ones; with no grace period, at once).
    engine.apply(&[web]);
    let change = engine.sync(false).unwrap();
    assert!(change.ipvs_ops > 0);
    assert!(ipvs_dests(&mut engine) < before);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn ipvs_mode_clears_a_removed_udp_endpoints_flows_after_the_sync() {
    let state = demo_state();
    let (event, gone) = without_first_endpoint(&state, "kube-system", "kube-dns");
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-ct-{}", std::process::id()));
    let (mut engine, conntrack) = ipvs_engine_recording(state, &dir);
    let first = engine.sync(true).unwrap();
    assert!(!first.reconciled.is_empty() && first.reconciled.iter().all(|r| r.deleted == Some(0)), "a first sync runs the reconciler: {:?}", first.reconciled);
    udp_flows_of(&engine, "kube-system", "kube-dns").iter().for_each(|f| conntrack.add(*f));

    engine.apply(&[event]);
    let outcome = engine.sync(false).unwrap();
    let Proxier::Ipvs(p) = &mut engine.proxier else { panic!("ipvs mode") };
    let still = crate::ipvs::observe::services(p.ipvs.as_mut()).unwrap();
    assert!(still.iter().all(|(_, dests)| dests.iter().all(|d| d.rs.addr != gone)), "flows are cleared after IPVS lost the endpoint");
    let deleted = conntrack.deleted.lock().unwrap().clone();
    assert!(!deleted.is_empty());
    assert!(deleted.iter().all(|f| f.reply.src == gone && f.orig.dport == 53), "{deleted:?}");
    let family = crate::net::IpFamily::of(&gone);
    assert_eq!(outcome.reconciled.iter().map(|r| (r.family, r.deleted)).collect::<Vec<_>>(), [(family, Some(deleted.len()))]);
    assert!(engine.sync(false).unwrap().reconciled.is_empty(), "nothing more is stale");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn ipvs_mode_clears_no_flows_for_a_removed_tcp_endpoint() {
    let state = demo_state();
    let (event, _) = without_first_endpoint(&state, "shop", "web");
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-ct-tcp-{}", std::process::id()));
    let (mut engine, conntrack) = ipvs_engine_recording(state, &dir);
    engine.sync(true).unwrap();
    engine.apply(&[event]);
    let outcome = engine.sync(false).unwrap();
    assert!(outcome.ipvs_ops > 0, "the endpoint left IPVS");
    assert!(outcome.reconciled.is_empty() && conntrack.deleted.lock().unwrap().is_empty(), "no UDP endpoint changed: no run");
    let _ = std::fs::remove_dir_all(dir);
}

/// A failed `iptables-save` is the read's failure (kube-proxy does not count it as a restore
/// failure), and nothing is written.
#[test]
fn a_failed_read_is_the_reads_failure() {
    let (mut engine, kernel, _) = iptables_engine(demo_state());
    kernel.lock().unwrap().fail_next_save = Some("cannot read".into());
    let Err(SyncFailure::Iptables(failure)) = engine.sync(true) else { panic!("the read fails") };
    assert_eq!(failure.failed.first.phase, crate::driver::Phase::Read);
    let failed = failure.failed.first.family;
    let wrote = kernel.lock().unwrap().calls.iter().any(|c| matches!(c, crate::xtables::fake::Call::Restore(f, _) if *f == failed));
    assert!(!wrote, "the family whose read failed wrote nothing");
}

/// The families are independent, as kube-proxy's per-family proxiers are: IPv4's failed
/// restore does not stop IPv6's sync, and only IPv4 compares with the kernel again next.
#[test]
fn a_failing_family_leaves_the_other_synced_and_only_itself_to_a_full_sync() {
    use crate::net::IpFamily::{V4, V6};
    let (mut engine, kernel, _) = iptables_engine(demo_state());
    assert_eq!(engine.trackers.families.len(), 2, "the demo node is dual-stack");
    kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    let Err(SyncFailure::Iptables(failure)) = engine.sync(true) else { panic!("IPv4's restore fails") };
    assert_eq!((failure.failed.first.family, failure.failed.more.len()), (V4, 0));
    assert_eq!(failure.failed.first.phase, crate::driver::Phase::Restore, "a refused restore is the write's failure");
    assert_eq!(failure.failed.done.iter().map(|s| s.family).collect::<Vec<_>>(), [V6], "IPv6 still synced");
    assert!(saved(&kernel, V6, "nat").contains("KUBE-SERVICES") && !saved(&kernel, V4, "nat").contains("KUBE-SERVICES"));
    kernel.lock().unwrap().calls.clear();
    engine.sync(false).unwrap();
    let saved: Vec<crate::net::IpFamily> =
        kernel.lock().unwrap().calls.iter().filter_map(|c| match c { Call::Save(f, _) => Some(*f), _ => None }).collect();
    assert!(saved.contains(&V4) && !saved.contains(&V6), "{saved:?}");
    assert_eq!(drift(&engine, &kernel), 0);
}

#[test]
fn a_sync_carries_every_message_waiting_for_it() {
    let mut l = Loop::new();
    l.start();
    let state = demo_state();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let mut sent = 0;
    for s in state.slices.iter().filter(|s| !s.endpoints.is_empty()) {
        let mut s = s.clone();
        s.endpoints.pop();
        tx.try_send(crate::source::watch::SourceMsg::Events(vec![Event::SliceApplied(Arc::new(s))])).unwrap();
        sent += 1;
    }
    assert!(sent > 3, "the demo has {sent} slices with endpoints");
    assert_eq!(crate::runner::watch::take_waiting(&mut l.engine, &l.shared, &mut rx), sent);
    assert!(rx.try_recv().is_err(), "nothing left waiting");
    assert!(l.engine.pending().1 >= sent - 1, "{:?} of {sent}", l.engine.pending());
    l.wake();
    assert_eq!(l.engine.pending(), (0, 0), "one sync carried them all");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

/// The watch loop's wake-ups over a fake kernel, at instants the test chooses.
struct Loop {
    engine: Engine,
    kernel: SharedFake,
    shared: crate::serve::SharedState,
    /// The engine's conntrack table (iptables mode's loop).
    flows: FakeFlows,
}

impl Loop {
    fn new() -> Self {
        let (engine, kernel, flows) = iptables_engine(demo_state());
        Loop::over(engine, kernel, flows, crate::config::Mode::Iptables)
    }

    /// The loop over `engine`, with `mode`'s metrics (`kernel`: iptables mode's, or unused).
    fn over(engine: Engine, kernel: SharedFake, flows: FakeFlows, mode: crate::config::Mode) -> Self {
        let mut shared = crate::serve::Shared::new(crate::schedule::Schedule::new(crate::schedule::Timing::default()));
        shared.metrics.register_mode(mode);
        Loop { engine, kernel, shared: Arc::new(shared), flows }
    }

    /// Makes the first sync due now and runs it; returns when it was.
    fn start(&mut self) -> std::time::Instant {
        let now = std::time::Instant::now();
        self.shared.schedule.lock().unwrap().set_ready(now);
        assert_eq!(self.wake(), now, "the first wake-up is the one made ready");
        now
    }

    /// Hands `events` to the loop, as its sources do.
    fn send(&mut self, events: Vec<Event>) {
        crate::runner::watch::on_message(&mut self.engine, &self.shared, crate::source::watch::SourceMsg::Events(events));
    }

    /// Runs the loop's next wake-up; returns when it was.
    fn wake(&mut self) -> std::time::Instant {
        let at = self.shared.schedule.lock().unwrap().next().expect("ready");
        crate::runner::watch::wake(&mut self.engine, &self.shared, at);
        at
    }

    /// A counter or histogram count from /metrics (`name` with its labels, if any).
    fn metric(&self, name: &str) -> u64 {
        self.sample(name).unwrap_or_else(|| panic!("{name} in {}", self.shared.metrics.encode())).parse().unwrap()
    }

    /// A sample's value, if the series exists.
    fn sample(&self, name: &str) -> Option<String> {
        let text = self.shared.metrics.encode();
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name))?;
        line.split_whitespace().nth(1).map(str::to_string)
    }
}

/// `name` with kube-proxy's `ip_family` label.
fn of(name: &str, family: &str) -> String {
    format!("{name}{{ip_family=\"{family}\"}}")
}

const FULL: &str = "kubeproxy_sync_full_proxy_rules_duration_seconds_count";
const PARTIAL: &str = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count";

/// Each family of a pass is observed on its own, as kube-proxy's per-family proxiers are;
/// a failed restore counts against its family, whose (failed) sync is timed too.
#[test]
fn each_family_is_observed_on_its_own_and_a_failure_counts_against_its_family() {
    let mut l = Loop::new();
    l.start();
    for family in ["IPv4", "IPv6"] {
        assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_duration_seconds_count", family)), 1);
        assert_eq!(l.metric(&of(FULL, family)), 1);
        assert!(l.sample(&of("kubeproxy_sync_proxy_rules_last_timestamp_seconds", family)).is_some());
        assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", family)), None);
    }
    assert_eq!(l.sample("kubeproxy_sync_proxy_rules_duration_seconds_count"), None, "no series without the label");

    // An IPv4-only change whose restore the kernel refuses.
    l.send(vec![without_first_endpoint(&demo_state(), "shop", "web").0]);
    assert!(l.sample(&of("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "IPv4")).is_some());
    assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "IPv6")), None, "queued for the changed family only");
    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.wake();
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "IPv4")), 1);
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "IPv4")), 1);
    assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "IPv6")), None);
    assert_eq!(l.metric(&of(PARTIAL, "IPv4")), 1, "the failed sync is timed, as kube-proxy times it");
    assert_eq!(l.sample(&of(PARTIAL, "IPv6")), None, "IPv6 had no changes: its proxier would not have synced");

    // The retry is full, in the failed family alone.
    l.wake();
    assert_eq!((l.metric(&of(FULL, "IPv4")), l.metric(&of(FULL, "IPv6"))), (2, 1));
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

#[test]
fn periodic_syncs_are_partial_and_check_the_canaries_instead_of_reading_the_kernel() {
    let mut l = Loop::new();
    let base = l.start();
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
    for family in ["IPv4", "IPv6"] {
        assert_eq!((l.metric(&of(FULL, family)), l.metric(&of(PARTIAL, family))), (1, 5), "{family}");
    }
    assert_eq!((l.metric("svcproxy_canary_checks_total"), l.metric("svcproxy_canary_lost_total")), (5, 0));

    // A change between periodic syncs is partial too.
    l.engine.apply(&[without_first_endpoint(&demo_state(), "shop", "web").0]);
    l.shared.schedule.lock().unwrap().changed(last + std::time::Duration::from_secs(1));
    l.wake();
    let seen = calls(&l.kernel);
    assert!(seen.iter().any(|c| c.0 == "restore") && seen.iter().all(|c| c.0 != "save"), "{seen:?}");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

#[test]
fn with_table_summaries_idle_checks_run_no_check_until_a_table_changes_or_a_sync_writes() {
    let mut l = Loop::new();
    l.kernel.lock().unwrap().summaries = true;
    l.start();
    let checks = |l: &Loop| calls(&l.kernel).iter().filter(|c| c.0 == "check").count();
    checks(&l);
    // The full sync created the canaries: the first check proves them, later ones skip.
    l.wake();
    assert_eq!(checks(&l), 6, "3 canaries in each of 2 families");
    for _ in 0..3 {
        l.wake();
        assert_eq!(checks(&l), 0, "nothing changed: no -C");
    }
    // Someone else adds a rule to filter: that table alone is checked.
    l.kernel.lock().unwrap().restore(crate::net::IpFamily::V4, "*filter\n:OTHER - [0:0]\n-A OTHER -j ACCEPT\nCOMMIT\n").unwrap();
    let last = l.wake();
    assert_eq!(checks(&l), 1);
    // A partial sync that writes: its family's tables are all checked next time.
    l.engine.apply(&[without_first_endpoint(&demo_state(), "shop", "web").0]);
    l.shared.schedule.lock().unwrap().changed(last + std::time::Duration::from_secs(1));
    l.wake();
    assert!(calls(&l.kernel).iter().any(|c| c.0 == "restore"), "the change was sent");
    l.wake();
    let seen = checks(&l);
    assert_eq!(seen, 3, "after our own write every table of that family is checked (without the forget, only nat, whose summary changed)");
    l.wake();
    assert_eq!(checks(&l), 0);
    assert_eq!(l.metric("svcproxy_canary_lost_total"), 0);
    // A flush is seen through the summary.
    l.kernel.lock().unwrap().flush_table(crate::net::IpFamily::V4, "nat");
    l.wake();
    assert_eq!(l.metric("svcproxy_canary_lost_total"), 1);
}

#[test]
fn a_flushed_nat_table_is_seen_at_the_next_check_and_a_full_sync_restores_it() {
    let mut l = Loop::new();
    let base = l.start();
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
    assert_eq!(l.metric(&of(FULL, "IPv4")), 2);
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
    l.start();
    l.wake();
    assert_eq!(l.metric(&of(FULL, "IPv4")), 1);
    let mut labels = l.engine.config.node_labels.clone();
    labels.insert("topology.kubernetes.io/zone".into(), "zone-elsewhere".into());
    let node = crate::model::Node { labels, ..Default::default() };
    crate::runner::watch::on_message(&mut l.engine, &l.shared, crate::source::watch::SourceMsg::Node { node: Some(node), deleting: false });
    calls(&l.kernel);
    l.wake();
    assert!(calls(&l.kernel).iter().any(|c| c.0 == "save"), "compared with the kernel");
    assert_eq!(l.metric(&of(FULL, "IPv4")), 2, "and counted as full");
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
    let base = l.start();
    let count = |l: &Loop| l.sample(&of("kubeproxy_network_programming_duration_seconds_count", "IPv4"));
    assert_eq!(count(&l), None, "the initial lists carry no stamps");
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
    assert_eq!(count(&l), Some("1".into()), "one stamped change, the one older than the proxy skipped");
    assert_eq!(l.sample(&of("kubeproxy_network_programming_duration_seconds_count", "IPv6")), None, "an IPv4 slice: IPv4's series");
    let text = l.shared.metrics.encode();
    let under_40 = text.lines().find(|s| s.starts_with("kubeproxy_network_programming_duration_seconds_bucket{le=\"39.0\",ip_family=\"IPv4\"}")).unwrap();
    let at_45 = text.lines().find(|s| s.starts_with("kubeproxy_network_programming_duration_seconds_bucket{le=\"45.0\",ip_family=\"IPv4\"}")).unwrap();
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
            (t.family, crate::select::no_local_endpoints(s, eps))
        }).collect::<Vec<_>>()
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
/// reconciler's metrics (per IP family, each run observed, its deleted flows counted).
#[test]
fn a_full_sync_sets_the_last_rule_counts_and_a_cleared_flow_feeds_the_reconciler_families() {
    let mut l = Loop::new();
    let base = l.start();
    let gauge = |l: &Loop, name: &str| l.shared.metrics.encode().lines().find_map(|s| s.strip_prefix(name).map(|v| v.trim().to_string()));
    let Proxier::Iptables(p) = &l.engine.proxier else { panic!("iptables mode") };
    let counts = p.rule_counts();
    assert_eq!(counts.len(), 2, "both families");
    let mut v4_nat = 0;
    for (rs, (family, (filter, nat))) in p.rulesets.iter().zip(counts) {
        // kube-proxy's count: every `-A` line of the family's full restore input, per table.
        let text = crate::iptables::restore::write(rs, crate::iptables::restore::Scope::Full, &[]);
        let appends = |table: &str| text.split("COMMIT\n").filter(|t| t.starts_with(&format!("*{table}\n"))).map(|t| t.lines().filter(|l| l.starts_with("-A ")).count()).sum::<usize>();
        assert_eq!((filter, nat), (appends("filter"), appends("nat")), "{family:?}");
        assert!(nat > 0);
        let f = family.api_name();
        assert_eq!(gauge(&l, &format!("kubeproxy_sync_proxy_rules_iptables_last{{table=\"nat\",ip_family=\"{f}\"}}")), Some(nat.to_string()));
        assert_eq!(gauge(&l, &format!("kubeproxy_sync_proxy_rules_iptables_last{{table=\"filter\",ip_family=\"{f}\"}}")), Some(filter.to_string()));
        assert_eq!(gauge(&l, &format!("kubeproxy_sync_proxy_rules_iptables_total{{table=\"nat\",ip_family=\"{f}\"}}")), Some(nat.to_string()));
        if family == crate::net::IpFamily::V4 {
            v4_nat = nat;
        }
    }
    assert_eq!(gauge(&l, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}"), Some("1".into()), "a first sync runs it");
    assert_eq!(gauge(&l, "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}"), Some("0".into()));
    udp_flows_of(&l.engine, "kube-system", "kube-dns").iter().for_each(|f| l.flows.add(*f));

    let (dns, gone) = without_first_endpoint(&demo_state(), "kube-system", "kube-dns");
    assert!(gone.is_ipv4());
    l.engine.apply(&[dns]);
    l.shared.schedule.lock().unwrap().changed(base + std::time::Duration::from_secs(1));
    l.wake();
    assert_eq!(gauge(&l, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}"), Some("2".into()));
    let deleted: u64 = gauge(&l, "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}").unwrap().parse().unwrap();
    assert_eq!(deleted as usize, l.flows.deleted.lock().unwrap().len());
    assert!(deleted > 0);
    assert_eq!(gauge(&l, "kubeproxy_sync_proxy_rules_iptables_last{table=\"nat\",ip_family=\"IPv4\"}"), Some(v4_nat.to_string()), "a partial sync leaves the full sync's count");
}

/// The per-family iptables reports of an outcome.
fn reports(outcome: &Outcome) -> Vec<(crate::net::IpFamily, &crate::iptables::sync::SyncReport)> {
    match &outcome.detail {
        Detail::Iptables(r) => r.iter().map(|s| (s.family, &s.report)).collect(),
        _ => panic!("iptables mode"),
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
    assert!(conntrack.deleted.lock().unwrap().is_empty());

    // Nothing was sent, so the kernel is not trusted: the next sync reads it and applies.
    let applied = engine.sync(false).unwrap();
    assert!(calls(&kernel).iter().any(|c| c.0 == "save"));
    assert_eq!(reports(&applied).iter().map(|(_, r)| r.delta.restore_lines()).collect::<Vec<_>>(),
        reports(&outcome).iter().map(|(_, r)| r.delta.restore_lines()).collect::<Vec<_>>(), "the dry run showed what the sync sent");
    assert_eq!(drift(&engine, &kernel), 0);
    assert!(reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|(_, r)| r.delta.is_empty()));
}

/// In iptables and IPVS mode alike, a dry run lists the flows a removed UDP endpoint left
/// stale and deletes none; the sync that follows deletes what it listed.
#[test]
fn a_dry_run_finds_stale_flows_but_clears_none() {
    let state = demo_state();
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-ct-dry-{}", std::process::id()));
    let (iptables, _, iptables_flows) = iptables_engine(state.clone());
    for (mut engine, conntrack) in [(iptables, iptables_flows), ipvs_engine_recording(state.clone(), &dir)] {
        let (dns, gone) = without_first_endpoint(&state, "kube-system", "kube-dns");
        engine.sync(true).unwrap();
        udp_flows_of(&engine, "kube-system", "kube-dns").iter().for_each(|f| conntrack.add(*f));
        engine.apply(&[dns]);
        let dry = engine.sync_as(false, Pass::DryRun).unwrap();
        let listed: Vec<Flow> = dry.reconciled.iter().flat_map(|r| r.stale.clone()).collect();
        assert!(!listed.is_empty() && listed.iter().all(|f| f.reply.src == gone), "{dry:?}");
        assert!(dry.reconciled.iter().all(|r| r.deleted.is_none()) && conntrack.deleted.lock().unwrap().is_empty());
        engine.sync(false).unwrap();
        assert_eq!(*conntrack.deleted.lock().unwrap(), listed);
    }
    let _ = std::fs::remove_dir_all(dir);
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
    assert_eq!(failure.failed.first.family, crate::net::IpFamily::V6);
    assert_eq!(failure.failed.done.len(), 1);
    assert_eq!(failure.failed.done[0].family, crate::net::IpFamily::V4);
    assert!(failure.failed.done[0].report.delta.is_empty(), "IPv4 was in sync");
    assert_eq!(failure.sysctls.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["net/ipv4/conf/all/route_localnet"]);
    assert_eq!(failure.to_string(), failure.failed.first.error.to_string(), "shown as the family's error itself");
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

/// An nftables-mode engine over the fake nftables.
fn nftables_engine(state: ClusterState, version: KubeProxyVersion) -> (Engine, crate::nftables::fake::SharedNft) {
    let (engine, nft, _) = nftables_engine_ct(state, version);
    (engine, nft)
}

fn nftables_engine_ct(state: ClusterState, version: KubeProxyVersion) -> (Engine, crate::nftables::fake::SharedNft, FakeFlows) {
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Nftables), kube_proxy_version: Some(version), ..Settings::default() };
    let loaded = pipeline::load(state, flags, Settings::default()).unwrap();
    let nft = crate::nftables::fake::FakeNft::shared();
    let ct = FakeFlows::default();
    let engine = Engine::nftables(loaded.config, loaded.trackers, Box::new(nft.clone()), Box::new(ct.clone()));
    (engine, nft, ct)
}

#[test]
fn nftables_partial_syncs_send_only_the_change_never_read_the_kernel_and_clear_stale_udp_flows() {
    for version in [KubeProxyVersion::V1_34, KubeProxyVersion::V1_37] {
        partial_syncs_send_only_the_change(version);
    }
}

fn partial_syncs_send_only_the_change(version: KubeProxyVersion) {
    use crate::nftables::fake::Call;
    let state = demo_state();
    let (dns, gone) = without_first_endpoint(&state, "kube-system", "kube-dns");
    let (mut engine, nft, ct) = nftables_engine_ct(state, version);
    // The first sync cannot trust memory: full, even when asked for a partial one.
    let first = engine.sync(false).unwrap();
    assert!(nft_reports(&first)[0].lines > 100);
    udp_flows_of(&engine, "kube-system", "kube-dns").iter().for_each(|f| ct.add(*f));
    nft.lock().unwrap().calls.clear();

    engine.apply(&[dns]);
    let outcome = engine.sync(false).unwrap();
    let calls = std::mem::take(&mut nft.lock().unwrap().calls);
    assert!(calls.iter().all(|c| matches!(c, Call::Run(_))), "nothing read: {calls:?}");
    let Call::Run(text) = &calls[0] else { unreachable!() };
    assert!(!text.contains("add table") && !text.contains("shop/"), "only kube-dns: {text}");
    assert!(outcome.restore_lines > 0 && outcome.restore_lines < 40, "{outcome:?}");
    // v1.34's table has a chain per endpoint, which goes; v1.36's DNATs from the service chain.
    let stale_endpoint_chain = nft_reports(&outcome).iter().any(|r| r.stale.iter().any(|s| s.contains(&format!("__{gone}/"))));
    assert_eq!(stale_endpoint_chain, (version.nftables_table() == crate::nftables::context::NftablesTable::V134), "{version}: {outcome:?}");
    let adds_gone = text.lines().any(|l| l.starts_with("add rule") && l.contains(&format!("{gone}")));
    assert!(text.contains("add rule ip kube-proxy service-") && !adds_gone, "{version}: the service chain is rewritten without {gone}: {text}");
    let deleted = ct.deleted.lock().unwrap().clone();
    assert!(!deleted.is_empty() && deleted.iter().all(|f| f.reply.src == gone), "{deleted:?}");

    // Nothing changed: nothing sent.
    engine.sync(false).unwrap();
    assert!(nft.lock().unwrap().calls.iter().all(|c| !matches!(c, Call::Run(_))));
    // The kernel ends where a full sync would have taken it.
    assert!(nft_reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())));
}

fn nft_reports(outcome: &Outcome) -> &[crate::nftables::sync::Report] {
    match &outcome.detail {
        Detail::Nftables(r) => r,
        _ => panic!("nftables mode"),
    }
}

#[test]
fn an_nftables_sync_is_one_transaction_per_family_and_a_dry_run_after_it_finds_nothing() {
    for version in [KubeProxyVersion::V1_34, KubeProxyVersion::V1_37] {
        one_transaction_per_family(version);
    }
}

fn one_transaction_per_family(version: KubeProxyVersion) {
    use crate::nftables::apply::NftRead as _;
    use crate::nftables::fake::Call;
    use crate::net::IpFamily;
    let state = demo_state();
    let (web, gone) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, nft) = nftables_engine(state, version);
    let dry = engine.sync_as(true, Pass::DryRun).unwrap();
    assert!(nft_reports(&dry).iter().all(|r| r.diff.as_ref().is_some_and(|d| !d.is_empty()) && !r.applied));
    assert!(nft.lock().unwrap().calls.iter().all(|c| !matches!(c, Call::Run(_))), "a dry run sends nothing");

    let outcome = engine.sync(true).unwrap();
    let runs = nft.lock().unwrap().take_runs();
    assert_eq!(runs.len(), 4, "per family, one transaction that declares and one that fills (nftables::chunked, without a bound)");
    assert!(runs[0].starts_with("add table ip kube-proxy") && runs[2].starts_with("add table ip6 kube-proxy"));
    assert!(runs[1].starts_with("flush chain ip kube-proxy") && runs[3].starts_with("flush chain ip6 kube-proxy"));
    assert_eq!(outcome.restore_lines, runs.iter().map(|t| t.lines().count()).sum::<usize>());
    // The kernel holds what render prints.
    let Proxier::Nftables(p) = &engine.proxier else { panic!("nftables mode") };
    let want = nft.lock().unwrap().canonical(IpFamily::V4, &crate::nftables::model::write(&p.families[0].ruleset.table(), crate::nftables::model::Form::Dump)).unwrap();
    assert_eq!(nft.lock().unwrap().listing(IpFamily::V4).unwrap(), want);
    let clean = engine.sync_as(true, Pass::DryRun).unwrap();
    assert!(nft_reports(&clean).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())));

    // An endpoint goes: the dry run names it, the sync removes it.
    engine.apply(&[web]);
    let dry = engine.sync_as(true, Pass::DryRun).unwrap();
    let text = nft_reports(&dry)[0].diff.as_ref().unwrap().text("ip kube-proxy");
    assert!(text.contains(&format!("{gone}")) && text.contains("- "), "{version}: {text}");
    let synced = engine.sync(true).unwrap();
    // v1.34's table: its endpoint chain is stale and deleted; v1.36's has none.
    let stale = nft_reports(&synced)[0].stale.iter().filter(|s| s.contains(&format!("__{gone}/"))).count();
    assert_eq!(stale, usize::from(version.nftables_table() == crate::nftables::context::NftablesTable::V134), "{version}");
    assert!(!nft.lock().unwrap().listing(IpFamily::V4).unwrap().contains(&format!("{gone}")), "{version}");
    assert!(nft_reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())));
}

#[test]
fn a_conversion_between_partial_syncs_writes_each_chain_as_the_ruleset_holds_it_then() {
    let state = demo_state();
    let (web, gone) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    engine.sync(true).unwrap();
    let Proxier::Nftables(p) = &engine.proxier else { panic!("nftables mode") };
    let chains: Vec<String> = p.families[0].ruleset.table().objects.chains.iter().map(|c| c.name.clone()).filter(|c| c.starts_with("service-")).collect();
    let (web_chain, dns_chains): (Vec<&String>, Vec<&String>) = (chains.iter().filter(|c| c.contains("shop/web")).collect(), chains.iter().filter(|c| c.contains("kube-dns")).collect());
    assert!(web_chain.len() == 1 && !dns_chains.is_empty(), "{chains:?}");
    let (web_chain, dns_chains) = (web_chain[0].clone(), dns_chains.into_iter().cloned().collect::<Vec<_>>());
    convert_chains(&mut engine, chains.clone());

    // Between batches: an endpoint of web goes, kube-dns goes.
    assert_eq!(engine.convert_step(false).unwrap(), chains.len(), "one batch holds the demo's chains");
    convert_chains(&mut engine, chains.clone());
    engine.apply(&[web, Event::ServiceDeleted(crate::model::NamespacedName::new("kube-system", "kube-dns"))]);
    engine.sync(false).unwrap();
    nft.lock().unwrap().calls.clear();
    let mut steps = 0;
    while engine.converting() && steps < 10 {
        engine.convert_step(false).unwrap();
        steps += 1;
    }
    assert!(!engine.converting(), "the conversion ends");
    let runs = nft.lock().unwrap().take_runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(!runs[0].contains(&web_chain) && !runs[0].contains(&format!("{gone}")), "web's chain, which the partial sync wrote as it is now, is not converted again: {}", runs[0]);
    assert!(runs[0].contains("flush chain ip kube-proxy service-"), "{}", runs[0]);
    assert!(dns_chains.iter().all(|c| !runs[0].contains(c.as_str())), "kube-dns's chains, gone, are skipped: {}", runs[0]);
    // The kernel ends where a full sync would have taken it.
    assert!(nft_reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())));
}

/// The IPv4 transactions among `runs`.
fn v4_runs(runs: Vec<String>) -> Vec<String> {
    runs.into_iter().filter(|r| r.contains(" ip kube-proxy ")).collect()
}

/// The demo's IPv4 service chains (kube-proxy's `service-` chains), after a first sync.
fn service_chains(engine: &Engine) -> Vec<String> {
    let Proxier::Nftables(p) = &engine.proxier else { panic!("nftables mode") };
    p.families[0].ruleset.table().objects.chains.iter().map(|c| c.name.clone()).filter(|c| c.starts_with("service-") && c.contains('/')).collect()
}

#[test]
fn a_partial_sync_while_converting_carries_a_batch_in_its_transaction() {
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (api, _) = without_first_endpoint(&state, "shop", "api");
    let (web_back, web_gone) = (Event::SliceApplied(Arc::new(slice(&state, "shop", "web"))), web.clone());
    let (mut engine, nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    engine.sync(true).unwrap();
    let chains = service_chains(&engine);
    let of = |s: &str| chains.iter().filter(|c| c.contains(s)).cloned().collect::<Vec<_>>();
    let (web_chains, api_chains) = (of("shop/web/"), of("shop/api/"));
    assert!(!web_chains.is_empty() && !api_chains.is_empty() && chains.len() > web_chains.len() + api_chains.len() + 1, "{chains:?}");
    convert_chains(&mut engine, chains.clone());
    nft.lock().unwrap().calls.clear();

    // The first partial sync is the pacing's probe: it carries no batch, and drops the
    // chains it wrote itself from the conversion.
    engine.apply(&[web]);
    let first = engine.sync(false).unwrap();
    let runs = v4_runs(nft.lock().unwrap().take_runs());
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains(&format!("flush chain ip kube-proxy {}\n", web_chains[0])), "{}", runs[0]);
    assert_eq!(runs[0].matches("flush chain ip kube-proxy service-").count(), web_chains.len(), "only web's chains: {}", runs[0]);
    assert_eq!(nft_reports(&first)[0].converted, 0);
    assert_eq!(left(&engine), chains.len() - web_chains.len(), "web's chains need no conversion any more");

    // The next carries a batch in its transaction; the syncs that follow (web's endpoint
    // back, gone again, …) carry the rest, the bound growing while batches cost little.
    engine.apply(&[api]);
    let second = engine.sync(false).unwrap();
    let mut carried = v4_runs(nft.lock().unwrap().take_runs());
    assert_eq!(carried.len(), 1, "one transaction for the change and the batch: {carried:?}");
    let report = &nft_reports(&second)[0];
    assert!(report.converted > 0 && report.lines == carried[0].lines().count(), "{report:?}");
    assert!(api_chains.iter().all(|c| carried[0].matches(&format!("flush chain ip kube-proxy {c}\n")).count() == 1), "api's chains are written once, by the partial: {}", carried[0]);
    let mut converted = report.converted;
    let mut syncs = 1;
    while engine.converting() && syncs < 20 {
        engine.apply(&[if syncs % 2 == 1 { web_back.clone() } else { web_gone.clone() }]);
        converted += nft_reports(&engine.sync(false).unwrap())[0].converted;
        carried.extend(v4_runs(nft.lock().unwrap().take_runs()));
        syncs += 1;
    }
    assert!(!engine.converting(), "the list is drained");
    assert_eq!(carried.len(), syncs, "one transaction a sync: {carried:?}");
    let want: Vec<&String> = chains.iter().filter(|c| !web_chains.contains(c) && !api_chains.contains(c)).collect();
    assert_eq!(converted, want.len());
    assert!(want.iter().all(|c| carried.iter().any(|r| r.contains(&format!("flush chain ip kube-proxy {c}\n")))), "{carried:?}");
    assert!(nft_reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())), "the kernel holds kube-proxy's table");
}

#[test]
fn a_partial_sync_that_deletes_chains_carries_no_batch() {
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    engine.sync(true).unwrap();
    let chains = service_chains(&engine);
    let api_chains: Vec<String> = chains.iter().filter(|c| c.contains("shop/api/")).cloned().collect();
    assert!(!api_chains.is_empty(), "{chains:?}");
    convert_chains(&mut engine, chains.clone());
    engine.apply(&[web]);
    engine.sync(false).unwrap();
    let before = left(&engine);
    nft.lock().unwrap().calls.clear();

    // A kernel that refuses deleting a chain with its last reference would refuse the
    // batch with it: the deleting sync goes as it would without a conversion.
    engine.apply(&[Event::ServiceDeleted(crate::model::NamespacedName::new("shop", "api"))]);
    let synced = engine.sync(false).unwrap();
    let runs = v4_runs(nft.lock().unwrap().take_runs());
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains(&format!("delete chain ip kube-proxy {}\n", api_chains[0])), "{}", runs[0]);
    assert_eq!(nft_reports(&synced)[0].converted, 0);
    assert_eq!(left(&engine), before - api_chains.len(), "only the chains that went leave the list");
    assert!(!engine.conversion_blocked(), "nothing was refused");
}

#[test]
fn a_refused_batch_leaves_the_partial_alone_and_the_conversion_list_kept() {
    let state = demo_state();
    let changes: Vec<Event> = ["web", "api", "checkout"].iter().map(|s| without_first_endpoint(&state, "shop", s).0).collect();
    let (mut engine, nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    engine.sync(true).unwrap();
    // A chain whose refill the kernel refuses: an endpoint chain it jumps to is gone.
    let Proxier::Nftables(p) = &engine.proxier else { panic!("nftables mode") };
    let rules = p.families[0].ruleset.table().objects.rules;
    let (bad, endpoint) = rules
        .iter()
        .filter(|r| r.chain.contains("shop/cart/"))
        .find_map(|r| Some((r.chain.clone(), r.text().split("goto ").nth(1)?.split_whitespace().next()?.to_string())))
        .expect("cart's service chain goes to endpoint chains");
    nft.lock().unwrap().run(&format!("flush chain ip kube-proxy {bad}\nflush chain ip kube-proxy {endpoint}\ndelete chain ip kube-proxy {endpoint}\n")).unwrap();
    let good = service_chains(&engine).into_iter().find(|c| c.contains("default/kubernetes/")).unwrap();
    convert_chains(&mut engine, vec![good.clone(), bad.clone()]);
    let mut changes = changes.into_iter();
    engine.apply(&[changes.next().unwrap()]);
    engine.sync(false).unwrap();
    nft.lock().unwrap().calls.clear();

    // After the probe, the batch rides along, is refused, and the partial goes alone.
    engine.apply(&[changes.next().unwrap()]);
    let synced = engine.sync(false).unwrap();
    let runs = v4_runs(nft.lock().unwrap().take_runs());
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[0].contains(&format!("flush chain ip kube-proxy {bad}\n")) && runs[0].contains("shop/api/"), "{}", runs[0]);
    assert!(!runs[1].contains(&bad) && !runs[1].contains(&good) && runs[1].contains("shop/api/"), "the partial alone: {}", runs[1]);
    assert!(nft_reports(&synced)[0].applied && nft_reports(&synced)[0].converted == 0);
    assert_eq!(left(&engine), 2, "the list is kept");
    assert!(engine.conversion_blocked(), "the next batch waits for a step alone, which the watch runs at once");

    // The next sync carries no batch; the next step alone fails and ends the conversion.
    engine.apply(&[changes.next().unwrap()]);
    engine.sync(false).unwrap();
    let runs = v4_runs(nft.lock().unwrap().take_runs());
    assert!(runs.len() == 1 && !runs[0].contains(&bad) && runs[0].contains("shop/checkout/"), "{runs:?}");
    assert_eq!(left(&engine), 2);
    assert!(engine.convert_step(true).is_err(), "the refused batch, alone");
    assert!(!engine.converting() && !engine.conversion_blocked());
}

fn convert_chains(engine: &mut Engine, chains: Vec<String>) {
    let Proxier::Nftables(p) = &mut engine.proxier else { panic!("nftables mode") };
    p.convert_chains(chains);
}

#[test]
fn a_refused_nftables_transaction_keeps_the_previous_rules_and_says_which_family() {
    use crate::net::IpFamily;
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    engine.sync(true).unwrap();
    let before = nft.lock().unwrap().listing(IpFamily::V4);
    engine.apply(&[web]);
    nft.lock().unwrap().fail_next = Some("Error: Could not process rule".into());
    let Err(SyncFailure::Nftables(failure)) = engine.sync(true) else { panic!("the IPv4 transaction fails") };
    assert_eq!((failure.first.family, failure.done.len()), (crate::net::IpFamily::V4, 1), "IPv6 still synced");
    assert!(failure.first.error.error.to_string().contains("Could not process rule"), "{failure}");
    assert_eq!(nft.lock().unwrap().listing(IpFamily::V4), before, "the previous rules still serve");
    engine.sync(true).unwrap();
    assert_ne!(nft.lock().unwrap().listing(IpFamily::V4), before, "the next sync applies the change");
}

/// IPVS mode syncs its families in one pass: each family is observed, with the pass's time.
#[test]
fn an_ipvs_pass_is_observed_once_per_family() {
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-metrics-{}", std::process::id()));
    let mut l = Loop::over(ipvs_engine(demo_state(), &dir), SharedFake::default(), FakeFlows::default(), crate::config::Mode::Ipvs);
    l.start();
    let _ = std::fs::remove_dir_all(&dir);
    let sum = |family| l.sample(&of("kubeproxy_sync_proxy_rules_duration_seconds_sum", family)).unwrap();
    let count = |family| l.metric(&of("kubeproxy_sync_proxy_rules_duration_seconds_count", family));
    assert_eq!((count("IPv4"), count("IPv6")), (1, 1));
    assert_eq!(sum("IPv4"), sum("IPv6"), "one pass, one time for each family");
    assert!(l.sample(&of("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "IPv6")).is_some());
    let text = l.shared.metrics.encode();
    assert!(!text.contains("kubeproxy_sync_proxy_rules_iptables_total") && !text.contains("kubeproxy_sync_full_proxy_rules"), "not IPVS mode's families: {text}");
}

/// IPVS mode runs kube-proxy's conntrack reconciler per family: after the first sync in
/// every family with UDP endpoints, then only in the family whose UDP endpoints changed.
#[test]
fn an_ipvs_sync_clearing_flows_feeds_the_reconciler_families() {
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-reconciler-{}", std::process::id()));
    let mut l = Loop::over(ipvs_engine(demo_state(), &dir), SharedFake::default(), FakeFlows::default(), crate::config::Mode::Ipvs);
    let base = l.start();
    let reconciles = |l: &Loop, family| l.sample(&of("kubeproxy_conntrack_reconciler_sync_duration_seconds_count", family));
    let first = (reconciles(&l, "IPv4"), reconciles(&l, "IPv6"));

    let (event, gone) = without_first_endpoint(&demo_state(), "kube-system", "kube-dns");
    l.engine.apply(&[event]);
    l.shared.schedule.lock().unwrap().changed(base + std::time::Duration::from_secs(1));
    l.wake();
    let _ = std::fs::remove_dir_all(&dir);
    let (cleared, other) = if gone.is_ipv4() { ("IPv4", "IPv6") } else { ("IPv6", "IPv4") };
    let count = |v: Option<String>| v.map_or(0, |v| v.parse::<u64>().unwrap());
    let before = if cleared == "IPv4" { (first.0.clone(), first.1.clone()) } else { (first.1.clone(), first.0.clone()) };
    assert!(count(before.0.clone()) >= 1, "the first sync ran it where the UDP endpoint is");
    assert_eq!(count(reconciles(&l, cleared)), count(before.0) + 1);
    assert_eq!(count(reconciles(&l, other)), count(before.1), "a family whose UDP endpoints did not change does no conntrack work");
}

/// kube-proxy's change counters count every event its trackers receive, changed or not: a
/// Service event once per family proxier, an EndpointSlice event once, in its family's.
#[test]
fn change_counters_count_events_as_kube_proxys_trackers_receive_them() {
    let mut l = Loop::new();
    let state = demo_state();
    let svc = Arc::new(state.services.iter().find(|s| s.id.name == "web").unwrap().clone());
    let mut web = slice(&state, "shop", "web");
    web.endpoints.remove(0);
    let web = Arc::new(web);
    let events = vec![Event::ServiceApplied(svc), Event::SliceApplied(web.clone()), Event::SliceApplied(web)];
    l.send(events);
    assert_eq!(l.metric("kubeproxy_sync_proxy_rules_service_changes_total"), 2, "an unchanged Service, seen by both family proxiers");
    assert_eq!(l.metric("kubeproxy_sync_proxy_rules_endpoint_changes_total"), 2, "two events of an IPv4 slice, the second a no-op");
    assert_eq!(l.metric("kubeproxy_sync_proxy_rules_endpoint_changes_pending"), 1);
}

/// A mode without canaries (nftables here; IPVS alike) syncs once per sync period, not
/// back to back once a period has passed since the last full sync.
#[test]
fn without_canaries_periodic_syncs_still_come_one_per_sync_period() {
    let (engine, _nft) = nftables_engine(demo_state(), KubeProxyVersion::NEWEST);
    let mut l = Loop::over(engine, SharedFake::default(), FakeFlows::default(), crate::config::Mode::Nftables);
    let mut last = l.start();
    for i in 1..5u32 {
        let at = l.wake();
        assert_eq!(at, last + std::time::Duration::from_secs(30), "wake-up {i}: one per sync period");
        last = at;
    }
}

/// kube-proxy counts a restore failure only when iptables-restore itself refused or failed:
/// a failed read of the kernel (iptables-save) is a failed sync, timed, that counts none.
#[test]
fn only_a_failed_restore_counts_as_a_restore_failure() {
    let mut l = Loop::new();
    l.kernel.lock().unwrap().fail_next_save = Some("iptables-save: cannot read".into());
    l.start();
    assert_eq!(l.metric(&of(FULL, "IPv4")), 1, "the failed sync is timed");
    assert_eq!(l.metric("svcproxy_syncs_total{result=\"error\"}"), 1);
    for family in ["IPv4", "IPv6"] {
        assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", family)), None, "a read is not a restore");
    }
    // The retry's restore is refused: that one counts, against its family.
    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.wake();
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "IPv4")), 1);
    assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "IPv4")), None, "a full sync's");
}

/// IPVS mode: a refused iptables-restore counts against the family it was for; a failed
/// iptables-save counts none.
#[test]
fn an_ipvs_restore_failure_counts_against_its_family_and_a_failed_read_counts_none() {
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-restore-{}", std::process::id()));
    let mut engine = ipvs_engine(demo_state(), &dir);
    let kernel: SharedFake = Arc::new(Mutex::new(FakeIptables::new()));
    let Proxier::Ipvs(p) = &mut engine.proxier else { panic!("ipvs mode") };
    p.iptables = Box::new(kernel.clone());
    kernel.lock().unwrap().fail_next_save = Some("iptables-save: cannot read".into());
    let mut l = Loop::over(engine, kernel, FakeFlows::default(), crate::config::Mode::Ipvs);
    l.start();
    let failures = |l: &Loop| ["IPv4", "IPv6"].map(|f| l.sample(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", f)));
    assert_eq!(l.metric("svcproxy_syncs_total{result=\"error\"}"), 1);
    assert_eq!(failures(&l), [None, None], "a read is not a restore");
    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.wake();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(l.metric("svcproxy_syncs_total{result=\"error\"}"), 2);
    assert_eq!(failures(&l), [Some("1".to_string()), None], "the first restore is IPv4's");
}

/// nftables mode counts kube-proxy's nftables sync failures: a refused transaction, against
/// its family.
#[test]
fn a_refused_nftables_transaction_counts_as_a_sync_failure_of_its_family() {
    let (engine, nft) = nftables_engine(demo_state(), KubeProxyVersion::NEWEST);
    nft.lock().unwrap().fail_next = Some("Error: Could not process rule".into());
    let mut l = Loop::over(engine, SharedFake::default(), FakeFlows::default(), crate::config::Mode::Nftables);
    l.start();
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "IPv4")), 1);
    assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "IPv6")), None);
    assert!(!l.shared.metrics.encode().contains("kubeproxy_sync_proxy_rules_iptables_restore_failures"), "not nftables mode's family");
}

/// kube-proxy's pending gauges count what its trackers count: the endpoint one, slice events
/// that changed something (two on one service are two); the service one, the services whose
/// ports differ from the synced ones in the tracker that got the last Service event (IPv6's
/// in dual-stack). A sync zeroes both as it takes the changes, even one that then fails.
#[test]
fn pending_gauges_count_what_kube_proxys_trackers_count() {
    let mut l = Loop::new();
    l.start();
    let state = demo_state();
    let service = |name: &str| state.services.iter().find(|s| s.id.name == name).unwrap().clone();
    let gauges = |l: &Loop| {
        let g = |name: &str| l.sample(name).unwrap_or_else(|| panic!("{name}"));
        (g("kubeproxy_sync_proxy_rules_service_changes_pending"), g("kubeproxy_sync_proxy_rules_endpoint_changes_pending"))
    };

    l.send(vec![Event::ServiceApplied(Arc::new(service("web")))]);
    assert_eq!(gauges(&l).0, "0", "an unchanged Service is no change");
    let mut web = service("web");
    web.ports[0].port += 1;
    l.send(vec![Event::ServiceApplied(Arc::new(web))]);
    assert_eq!(gauges(&l).0, "0", "an IPv4-only Service: IPv6's tracker, the last to get it, has nothing pending");
    let mut api = service("api");
    api.ports[0].port += 1;
    l.send(vec![Event::ServiceApplied(Arc::new(api))]);
    assert_eq!(gauges(&l).0, "1");

    let original = slice(&state, "shop", "web");
    let mut fewer = original.clone();
    fewer.endpoints.remove(0);
    l.send(vec![Event::SliceApplied(Arc::new(fewer)), Event::SliceApplied(Arc::new(original))]);
    assert_eq!(gauges(&l).1, "2", "two changing events on one service");

    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.wake();
    assert_eq!(l.metric("svcproxy_syncs_total{result=\"error\"}"), 1);
    assert_eq!(gauges(&l), ("0".to_string(), "0".to_string()), "taken by the sync, which then failed");
}

/// The families are independent, as kube-proxy's per-family proxiers are: one failing does
/// not stop the other, which syncs and is observed as synced; the failing one is retried.
#[test]
fn a_failing_family_does_not_stop_the_others_sync_or_its_observation() {
    let mut l = Loop::new();
    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.start();
    let last = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
    assert_eq!(l.sample(&of(last, "IPv4")), None);
    assert!(l.sample(&of(last, "IPv6")).is_some(), "IPv6 synced");
    assert_eq!((l.metric(&of(FULL, "IPv4")), l.metric(&of(FULL, "IPv6"))), (1, 1), "the failed sync is timed too");
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "IPv4")), 1);
    assert!(l.sample("kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\",ip_family=\"IPv6\"}").is_some(), "IPv6's rule count");
    l.wake();
    assert!(l.sample(&of(last, "IPv4")).is_some(), "the retry synced IPv4");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

/// kube-proxy's per-family proxiers each sync for their own reasons: a change in one family
/// syncs (and is observed in) that family alone, sending nothing for the other; a periodic
/// sync is every family's.
#[test]
fn a_family_syncs_only_for_its_own_changes_or_a_periodic_sync() {
    let mut l = Loop::new();
    let base = l.start();
    let count = |l: &Loop, family| l.metric(&of("kubeproxy_sync_proxy_rules_duration_seconds_count", family));
    assert_eq!((count(&l, "IPv4"), count(&l, "IPv6")), (1, 1));
    let last_v6 = l.sample(&of("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "IPv6"));

    l.send(vec![without_first_endpoint(&demo_state(), "shop", "web").0]);
    calls(&l.kernel);
    let at = l.wake();
    assert!(at < base + std::time::Duration::from_secs(30), "a change's sync, not a periodic one");
    assert_eq!((count(&l, "IPv4"), count(&l, "IPv6")), (2, 1), "only IPv4 changed");
    assert_eq!(l.sample(&of(PARTIAL, "IPv6")), None);
    assert_eq!(l.sample(&of("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "IPv6")), last_v6, "IPv6 did not sync");
    assert!(l.kernel.lock().unwrap().calls.iter().all(|c| !matches!(c, Call::Restore(crate::net::IpFamily::V6, _))), "nothing sent for IPv6");

    let periodic = l.wake();
    assert!(periodic > at && periodic >= base + std::time::Duration::from_secs(30), "the periodic sync (with the canary check)");
    assert_eq!((count(&l, "IPv4"), count(&l, "IPv6")), (3, 2), "every family's");
    assert_eq!(drift(&l.engine, &l.kernel), 0);
}

/// IPVS mode's one pass programs every family, but a family is observed only when its
/// kube-proxy proxier would have synced: for its own changes (here IPv4's) or a periodic sync.
#[test]
fn an_ipvs_pass_for_one_familys_change_is_observed_in_that_family_alone() {
    let dir = std::env::temp_dir().join(format!("svcproxy-engine-ipvs-one-family-{}", std::process::id()));
    let mut l = Loop::over(ipvs_engine(demo_state(), &dir), SharedFake::default(), FakeFlows::default(), crate::config::Mode::Ipvs);
    l.start();
    l.send(vec![without_first_endpoint(&demo_state(), "shop", "web").0]);
    l.wake();
    let _ = std::fs::remove_dir_all(&dir);
    let count = |family| l.metric(&of("kubeproxy_sync_proxy_rules_duration_seconds_count", family));
    assert_eq!((count("IPv4"), count("IPv6")), (2, 1));
}

/// kube-proxy's queued timestamp: a family's proxier queues a sync at each slice event of its
/// family that changes something (a second change to a service already pending included)
/// and at each Service event that leaves its tracker with pending changes.
#[test]
fn each_change_queues_a_sync_in_its_family() {
    let mut l = Loop::new();
    l.start();
    let queued = |l: &Loop, family| l.sample(&of("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", family));
    let original = slice(&demo_state(), "shop", "web");
    let mut fewer = original.clone();
    fewer.endpoints.remove(0);
    l.send(vec![Event::SliceApplied(Arc::new(fewer))]);
    let first = queued(&l, "IPv4").expect("queued for IPv4");
    assert_eq!(queued(&l, "IPv6"), None);
    std::thread::sleep(std::time::Duration::from_millis(5));
    l.send(vec![Event::SliceApplied(Arc::new(original))]);
    let second = queued(&l, "IPv4").expect("queued for IPv4");
    assert!(second.parse::<f64>().unwrap() > first.parse::<f64>().unwrap(), "the second change to the pending service queues again: {first} {second}");
    // A Service event while IPv4's tracker has a Service change pending: IPv4 queues, IPv6
    // (nothing pending) does not.
    let state = demo_state();
    let mut web = state.services.iter().find(|s| s.id.name == "web").unwrap().clone();
    web.ports[0].port += 1;
    l.send(vec![Event::ServiceApplied(Arc::new(web))]);
    assert_eq!(queued(&l, "IPv6"), None);
}

/// In a pass where one family fails, the family that synced still observes the network
/// programming of its changes (kube-proxy's proxiers observe their own).
#[test]
fn a_family_that_synced_beside_a_failing_one_observes_its_network_programming() {
    let mut l = Loop::new();
    let base = l.start();
    let a_second_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    for t in &mut l.engine.trackers.families {
        t.endpoints.set_started_for_test(a_second_ago - std::time::Duration::from_secs(1));
    }
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let mut api = state.slices.iter().find(|s| s.service.name == "api" && s.family == crate::net::IpFamily::V6).unwrap().clone();
    api.endpoints.remove(0);
    api.trigger_time = Some(a_second_ago);
    l.engine.apply(&[web, Event::SliceApplied(Arc::new(api))]);
    l.shared.schedule.lock().unwrap().changed(base + std::time::Duration::from_secs(1));
    l.kernel.lock().unwrap().fail_next = Some("line 2 failed".into());
    l.wake();
    assert_eq!(l.metric(&of("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "IPv4")), 1, "IPv4's restore was refused");
    assert_eq!(l.metric(&of("kubeproxy_network_programming_duration_seconds_count", "IPv6")), 1, "IPv6 synced its change");
}

/// The nftables ruleset keeps no copy of the cluster: every service port it holds is the
/// trackers' own `Arc`s (the port and its endpoints), after the first sync and after a
/// partial one, and a port the trackers dropped is gone from it.
#[test]
fn the_nftables_ruleset_shares_the_trackers_ports_and_endpoints() {
    let state = demo_state();
    let (web, _) = without_first_endpoint(&state, "shop", "web");
    let (mut engine, _nft) = nftables_engine(state, KubeProxyVersion::NEWEST);
    let shared = |engine: &Engine| {
        let Proxier::Nftables(p) = &engine.proxier else { panic!("nftables mode") };
        let mut ports = 0;
        for (rs, t) in p.rulesets().zip(&engine.trackers.families) {
            let (services, endpoints) = t.view();
            assert_eq!(rs.services.keys().collect::<Vec<_>>(), services.keys().collect::<Vec<_>>());
            for (k, inputs) in &rs.services {
                assert!(Arc::ptr_eq(&inputs.service, &services[k]), "{k}: the port is the trackers' allocation");
                match (&inputs.endpoints, endpoints.get(k)) {
                    (Some(a), Some(b)) => assert!(Arc::ptr_eq(a, b), "{k}: the endpoints are the trackers' allocation"),
                    (None, None) => {}
                    (a, b) => panic!("{k}: {a:?} against the trackers' {b:?}"),
                }
                ports += 1;
            }
        }
        ports
    };
    engine.sync(true).unwrap();
    assert!(shared(&engine) > 0);
    engine.apply(&[web]);
    engine.sync(false).unwrap();
    shared(&engine);
}

/// A cluster of three services on one port each: `a` and `b` (TCP 80, targetPort 8080)
/// select overlapping pods, `c` has session affinity; `eps[i]` are the endpoints of each
/// (IP's last octet, on this node when even).
fn hairpin_state(eps: [&[u8]; 3], with_b: bool) -> ClusterState {
    let mut text = String::from(
        "apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  name: node-1\n  ips: [192.168.10.11]\noptions:\n  ipFamily: ipv4\n  clusterCIDR: 10.244.0.0/16\n",
    );
    for (i, (name, list)) in ["a", "b", "c"].iter().zip(eps).enumerate() {
        if *name == "b" && !with_b {
            continue;
        }
        let affinity = if *name == "c" { "  sessionAffinity: ClientIP\n" } else { "" };
        text += &format!(
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: ns\nspec:\n  clusterIP: 10.96.0.{}\n{affinity}  ports:\n  - name: p\n    port: 80\n    protocol: TCP\n    targetPort: 8080\n",
            10 + i
        );
        text += &format!("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-x\n  namespace: ns\n  labels:\n    kubernetes.io/service-name: {name}\naddressType: IPv4\nendpoints:\n");
        for o in list {
            let node = if o % 2 == 0 { "node-1" } else { "node-2" };
            text += &format!("- addresses: [10.244.1.{o}]\n  conditions: {{ready: true, serving: true, terminating: false}}\n  nodeName: {node}\n");
        }
        text += "ports:\n- name: p\n  port: 8080\n  protocol: TCP\n";
    }
    let mut state = ClusterState::default();
    source::file::read_str(std::path::Path::new("hairpin.yaml"), &text, &mut state).unwrap();
    state
}

/// Partial syncs over random endpoint changes (pods shared by two services, one with
/// session affinity, a service that comes and goes) end where a full sync would, in the
/// table of every kube-proxy version svcproxy writes; the `hairpin-connections` element
/// of a pod two services reach stays while either does.
#[test]
fn nftables_partial_syncs_never_drift_from_a_full_sync_in_either_table() {
    use crate::net::IpFamily;
    for version in [KubeProxyVersion::V1_34, KubeProxyVersion::V1_37] {
        let mut rng = crate::gen::Rng::new(7);
        let pick = |rng: &mut crate::gen::Rng| -> Vec<u8> { (2..8u8).filter(|_| rng.below(2) == 0).collect() };
        let (mut eps, mut with_b) = ([vec![2, 3], vec![2, 5], vec![4]], true);
        let start = hairpin_state([&eps[0], &eps[1], &eps[2]], with_b);
        let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Nftables), kube_proxy_version: Some(version), ..Settings::default() };
        let loaded = pipeline::load(start.clone(), flags, Settings::default()).unwrap();
        let nft = crate::nftables::fake::FakeNft::shared();
        let mut engine = Engine::nftables(loaded.config, loaded.trackers, Box::new(nft.clone()), Box::new(FakeFlows::default()));
        engine.sync(true).unwrap();
        let mut last = start;
        let mut hairpins_seen = 0;
        for step in 0..60 {
            match rng.below(4) {
                0 => with_b = !with_b,
                i => eps[i - 1] = pick(&mut rng),
            }
            let next = hairpin_state([&eps[0], &eps[1], &eps[2]], with_b);
            let mut events: Vec<Event> = Vec::new();
            for s in &last.services {
                if !next.services.iter().any(|n| n.id == s.id) {
                    events.push(Event::ServiceDeleted(s.id.clone()));
                }
            }
            for s in &last.slices {
                if !next.slices.iter().any(|n| n.id == s.id) {
                    events.push(Event::SliceDeleted(Arc::new(s.clone())));
                }
            }
            events.extend(next.services.iter().map(|s| Event::ServiceApplied(Arc::new(s.clone()))));
            events.extend(next.slices.iter().map(|s| Event::SliceApplied(Arc::new(s.clone()))));
            engine.apply(&events);
            engine.sync(false).unwrap();
            let dry = engine.sync_as(true, Pass::DryRun).unwrap();
            for r in nft_reports(&dry) {
                let d = r.diff.as_ref().unwrap();
                assert!(d.is_empty(), "{version} step {step}: a partial sync drifted:\n{}", d.text("ip kube-proxy"));
            }
            let listing = nft.lock().unwrap().listing(IpFamily::V4).unwrap();
            // 10.244.1.2 is local: reached by `a` or `c` when it lists 2, by `b` when b exists and lists 2.
            let reached = eps[0].contains(&2) || eps[2].contains(&2) || (with_b && eps[1].contains(&2));
            let held = listing.contains("10.244.1.2 . 10.244.1.2 . tcp . 8080");
            assert_eq!(held, reached && (version.nftables_table() == crate::nftables::context::NftablesTable::V136), "{version} step {step}: {eps:?} b={with_b}");
            hairpins_seen += usize::from(held);
            last = next;
        }
        assert_eq!(hairpins_seen > 0, (version.nftables_table() == crate::nftables::context::NftablesTable::V136), "the walk reached the shared hairpin");
    }
}

/// ServiceCIDR objects reach nftables mode's drop rule (a full re-render); the
/// `serviceCIDRs` option overrides them; iptables mode's rules do not use them.
#[test]
fn service_cidrs_re_render_nftables_mode_unless_the_option_sets_them() {
    let cidr: crate::net::Cidr = crate::net::Cidr::parse_sloppy("10.96.0.0/16").unwrap();
    let (mut engine, nft) = nftables_engine(demo_state(), KubeProxyVersion::V1_37);
    engine.sync(true).unwrap();
    let listed = |nft: &crate::nftables::fake::SharedNft| nft.lock().unwrap().listing(crate::net::IpFamily::V4).unwrap_or_default();
    assert!(!listed(&nft).contains("Drop traffic to unallocated ClusterIPs"));
    assert!(engine.set_service_cidrs(vec![cidr]), "the rules change");
    assert!(!engine.set_service_cidrs(vec![cidr]), "the same list changes nothing");
    // One partial sync of the family, with no tracker change: the chain rewritten, alone.
    let runs = |nft: &crate::nftables::fake::SharedNft| nft.lock().unwrap().take_runs();
    runs(&nft);
    let outcome = engine.sync_families(false, false).unwrap();
    assert_eq!(outcome.synced.iter().map(|s| (s.family, s.full)).collect::<Vec<_>>(), [(crate::net::IpFamily::V4, false)], "IPv4 alone, partially");
    let sent = runs(&nft);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].contains("flush chain ip kube-proxy cluster-ips-check") && !sent[0].contains("add table") && !sent[0].contains("flush set"), "{}", sent[0]);
    assert!(listed(&nft).contains("ip daddr { 10.96.0.0/16 } drop comment \"Drop traffic to unallocated ClusterIPs\""), "{}", listed(&nft));
    assert!(nft_reports(&engine.sync_as(true, Pass::DryRun).unwrap()).iter().all(|r| r.diff.as_ref().is_some_and(|d| d.is_empty())), "as a full sync would leave it");
    assert!(engine.set_service_cidrs(Vec::new()));
    engine.sync(false).unwrap();
    assert!(!listed(&nft).contains("Drop traffic to unallocated ClusterIPs"));

    let (mut iptables, _, _) = iptables_engine(demo_state());
    assert!(!iptables.set_service_cidrs(vec![cidr]), "iptables mode's rules do not use them");
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Nftables), service_cidrs: Some(vec!["10.100.0.0/16".into()]), ..Settings::default() };
    let loaded = pipeline::load(demo_state(), flags, Settings::default()).unwrap();
    let mut fixed = Engine::nftables(loaded.config, loaded.trackers, Box::new(crate::nftables::fake::FakeNft::shared()), Box::new(FakeFlows::default()));
    assert!(!fixed.set_service_cidrs(vec![cidr]), "the option overrides the objects");
    assert_eq!(fixed.config.service_cidrs.iter().map(|c| c.to_string()).collect::<Vec<_>>(), ["10.100.0.0/16"]);
}

/// kube-proxy v1.37 (#138571): in iptables mode a full sync due only to the full-sync
/// period is partial for a family in large-cluster mode (no `iptables-save`), and full for
/// one under the threshold; any other full sync stays full.
#[test]
fn a_periodic_full_sync_is_skipped_in_large_cluster_mode_only() {
    for (threshold, large) in [(1, true), (1000, false)] {
        let flags = Settings { nfacct: Some(false), large_cluster_endpoints_threshold: Some(threshold), ..Settings::default() };
        let loaded = pipeline::load(demo_state(), flags, Settings::default()).unwrap();
        let kernel: SharedFake = Arc::new(Mutex::new(FakeIptables::new()));
        let mut engine = Engine::iptables(loaded.config, loaded.trackers, Box::new(kernel.clone()), Box::new(FakeFlows::default()));
        engine.sync(true).unwrap();
        calls(&kernel);
        let outcome = engine.sync_families_periodic_full().unwrap();
        let read = calls(&kernel).iter().any(|c| c.0 == "save");
        assert_eq!(read, !large, "threshold {threshold}: the periodic full sync reads the kernel unless in large-cluster mode");
        assert!(outcome.synced.iter().all(|s| s.full != large), "{:?}", outcome.synced);
        engine.sync_families(true, true).unwrap();
        assert!(calls(&kernel).iter().any(|c| c.0 == "save"), "threshold {threshold}: a forced or first full sync stays full");
        assert_eq!(drift(&engine, &kernel), 0);
    }
}

/// kube-proxy v1.37's NodeManager: the process ends when this Node is deleted or its IPs
/// (first address, and the first of the other family) change from those read at start.
#[test]
fn a_deleted_node_or_one_whose_ips_changed_ends_the_watch() {
    use crate::runner::watch::node_gone_or_moved;
    let node = |addrs: &[&str]| crate::model::Node { name: "n1".into(), labels: Default::default(), addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(), pod_cidrs: Vec::new() };
    let start: Vec<std::net::IpAddr> = vec!["198.19.1.1".parse().unwrap(), "fd00:19:1::1".parse().unwrap()];
    assert_eq!(node_gone_or_moved(Some(&start), None).as_deref(), Some("this Node was deleted"));
    assert_eq!(node_gone_or_moved(Some(&start), Some(&node(&["198.19.1.1", "198.19.1.9", "fd00:19:1::1"]))), None, "the same host IPs");
    assert!(node_gone_or_moved(Some(&start), Some(&node(&["198.19.1.2", "fd00:19:1::1"]))).is_some_and(|w| w.contains("198.19.1.2")));
    assert_eq!(node_gone_or_moved(Some(&start), Some(&node(&[]))), None, "a Node without addresses changes nothing");
    assert_eq!(node_gone_or_moved(None, Some(&node(&["198.19.1.1"]))), None, "none read at start: the first seen are taken");
}

/// The chains a conversion has still to convert, all families.
fn left(engine: &Engine) -> usize {
    engine.conversion_left().iter().map(|(_, n)| n).sum()
}

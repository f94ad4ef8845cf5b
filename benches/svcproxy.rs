//! `cargo bench`: svcproxy in process on generated clusters (1,000, 5,000, 10,000 and
//! 50,000 services × 10 endpoints; `SVCPROXY_BENCH_SIZES=1000,10000` picks others):
//! parse + track (YAML, and JSON `kind: List` up to 10,000), the full iptables render beside writing the same bytes, the full IPVS
//! plan, and a one-endpoint change (at every size up to 10,000; in IPVS mode its
//! incremental plan, beside the full plan). Ten samples each, their
//! median in BENCHMARKS.md (`scripts/bench` writes it from criterion's output).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode};

use svcproxy::bench::{self, report, Discard, InputFormat, OneEndpoint};
use svcproxy::track::Event;
use svcproxy::pipeline;

const ENDPOINTS: usize = 10;
/// The one-endpoint change is measured at sizes up to this.
const CHANGE_MAX: usize = report::CHANGE_SIZE;

fn sizes() -> Vec<usize> {
    match std::env::var("SVCPROXY_BENCH_SIZES") {
        Ok(list) => list.split(',').map(|s| s.trim().parse().expect("SVCPROXY_BENCH_SIZES: a comma list of numbers")).collect(),
        Err(_) => report::SIZES.to_vec(),
    }
}

/// A group of ten samples taking about seven times `per_iter` in all (at least a second):
/// one iteration per sample for the slow ones (criterion then says it cannot complete ten
/// samples in that time, and takes as long as it needs), many for the fast ones.
fn group<'a>(c: &'a mut Criterion, name: &str, per_iter: Duration) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(per_iter.clamp(Duration::from_millis(200), Duration::from_secs(1)))
        .measurement_time((per_iter * 7).max(Duration::from_secs(1)));
    g
}

/// How long one call of `f` takes (run once: also a warm-up).
fn once<R>(f: impl FnOnce() -> R) -> Duration {
    let t = Instant::now();
    black_box(f());
    t.elapsed()
}

fn cluster(c: &mut Criterion, n: usize) {
    let text = bench::generated(n, ENDPOINTS);
    let id = |name: &str| BenchmarkId::new(name, n);

    let per = once(|| bench::load_text(&text).expect("the generated cluster loads"));
    let mut g = group(c, "parse_track", per);
    g.bench_function(BenchmarkId::from_parameter(n), |b| b.iter(|| bench::load_text(black_box(&text)).unwrap()));
    g.finish();
    let loaded = bench::load_text(&text).unwrap();
    drop(text);
    if n <= CHANGE_MAX {
        // The same cluster as one JSON `kind: List` (what `kubectl get -o json` prints).
        let json = bench::generated_as(n, ENDPOINTS, InputFormat::JsonList).expect("the generated cluster as JSON");
        let per = once(|| bench::load_text(&json).expect("the generated JSON list loads"));
        let mut g = group(c, "parse_track_json", per);
        g.bench_function(BenchmarkId::from_parameter(n), |b| b.iter(|| bench::load_text(black_box(&json)).unwrap()));
        g.finish();
    }

    let rulesets = pipeline::render_iptables(&loaded);
    let restore = pipeline::iptables_text(&rulesets);
    let per = once(|| pipeline::iptables_text(&pipeline::render_iptables(&loaded)));
    let mut g = group(c, "render", per);
    g.bench_function(id("iptables"), |b| b.iter(|| pipeline::iptables_text(&pipeline::render_iptables(black_box(&loaded)))));
    g.bench_function(id("ruleset"), |b| b.iter(|| pipeline::render_iptables(black_box(&loaded))));
    g.bench_function(id("text"), |b| b.iter(|| pipeline::iptables_text(black_box(&rulesets))));
    g.finish();
    drop(rulesets);

    let per = once(|| bench::write_same_bytes(&restore));
    let mut g = group(c, "write_bytes", per);
    g.bench_function(id("lines"), |b| b.iter(|| bench::write_same_bytes(black_box(&restore))));
    g.bench_function(id("copy"), |b| b.iter(|| black_box(&restore).clone()));
    g.finish();
    drop(restore);

    let per = once(|| svcproxy::ipvs::plan_all(&loaded.config, &loaded.trackers));
    let mut g = group(c, "ipvs", per);
    g.bench_function(id("plan"), |b| b.iter(|| svcproxy::ipvs::plan_all(&loaded.config, black_box(&loaded.trackers))));
    g.finish();
}

/// Times `iters` one-endpoint changes made by `change` to the cluster as generated; the
/// change is taken back, untimed, after each.
fn changes<S, R>(one: &mut OneEndpoint, state: &mut S, iters: u64, change: impl Fn(&mut OneEndpoint, &mut S, &Event) -> R) -> Duration {
    let (add, revert) = (one.add.clone(), one.revert.clone());
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        black_box(change(one, state, &add));
        total += t.elapsed();
        change(one, state, &revert);
    }
    total
}

fn one_endpoint(c: &mut Criterion, n: usize) {
    let mut one = OneEndpoint::new(n, ENDPOINTS).expect("the generated cluster loads");
    let mut proxier = one.proxier(Box::new(Discard::default())).expect("the first sync");
    let id = |name: &str| BenchmarkId::new(name, n);
    // Trackers and ruleset only, then kube-proxy's restore text from them.
    let commit_update = |one: &mut OneEndpoint, _: &mut (), e: &Event| one.step(e);
    let kube_proxy = |one: &mut OneEndpoint, _: &mut (), e: &Event| {
        let changes = one.step(e);
        one.kube_proxy_partial(&changes)
    };
    // svcproxy's watch-mode sync into a kernel that keeps nothing: commit, update,
    // the restore text from the changed service alone.
    let watch = |one: &mut OneEndpoint, p: &mut svcproxy::iptables::proxier::Proxier, e: &Event| {
        one.watch_sync(p, e).expect("a watch-mode sync")
    };
    let per = changes(&mut one, &mut (), 3, kube_proxy) / 3;
    let mut g = group(c, "one_endpoint", per);
    g.bench_function(id("commit_update"), |b| b.iter_custom(|iters| changes(&mut one, &mut (), iters, commit_update)));
    g.bench_function(id("svcproxy_partial"), |b| b.iter_custom(|iters| changes(&mut one, &mut proxier, iters, watch)));
    g.bench_function(id("kube_proxy_partial"), |b| b.iter_custom(|iters| changes(&mut one, &mut (), iters, kube_proxy)));
    g.finish();
    ipvs_plan_change(c, &mut one);
}

/// IPVS mode's plan of the one-endpoint change: only the changed service re-planned
/// (what a partial sync plans), beside the full plan of the same cluster.
fn ipvs_plan_change(c: &mut Criterion, one: &mut OneEndpoint) {
    use svcproxy::ipvs::plan::{incremental::FamilyPlanner, Context};
    let n = one.services;
    let t = &one.loaded.trackers.families[0];
    let (s, e) = t.view();
    let mut planner = FamilyPlanner::new(Context::new(&one.loaded.config, t.family), s, e);
    // The change is committed untimed; only the planner's update is timed.
    let update = |one: &mut OneEndpoint, planner: &mut FamilyPlanner, event: &Event| {
        one.loaded.trackers.apply(event);
        let changed = one.loaded.trackers.commit().swap_remove(0).services;
        let (s, e) = one.loaded.trackers.families[0].view();
        let t = Instant::now();
        black_box(planner.update(s, e, &changed));
        t.elapsed()
    };
    let (add, revert) = (one.add.clone(), one.revert.clone());
    let mut g = group(c, "ipvs_change", Duration::from_millis(1));
    g.bench_function(BenchmarkId::new("plan_partial", n), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += update(one, &mut planner, &add);
                update(one, &mut planner, &revert);
            }
            total
        })
    });
    let per = once(|| svcproxy::ipvs::plan_all(&one.loaded.config, &one.loaded.trackers));
    g.measurement_time((per * 7).max(Duration::from_secs(1)));
    g.bench_function(BenchmarkId::new("plan_full", n), |b| b.iter(|| svcproxy::ipvs::plan_all(&one.loaded.config, black_box(&one.loaded.trackers))));
    // What a full sync plans with now: the full plan and every port's contribution kept.
    let t = &one.loaded.trackers.families[0];
    let ctx = Context::new(&one.loaded.config, t.family);
    g.bench_function(BenchmarkId::new("planner_new", n), |b| b.iter(|| {
        let (s, e) = t.view();
        FamilyPlanner::new(ctx.clone(), black_box(s), e)
    }));
    g.finish();
    ipvs_sync_change(c, one);
}

/// A whole partial IPVS-mode sync of the one-endpoint change into fake kernels (the
/// change committed untimed): plan, reconcile against memory, send.
fn ipvs_sync_change(c: &mut Criterion, one: &mut OneEndpoint) {
    use svcproxy::ipvs::fake::{FakeIpset, FakeLinks};
    use svcproxy::ipvs::netlink::FakeIpvs;
    use svcproxy::ipvs::proxier::{Paths, Proxier};
    let n = one.services;
    let dir = std::env::temp_dir().join(format!("svcproxy-bench-ipvs-{}", std::process::id()));
    for s in svcproxy::node::sysctl::ipvs_for_this_kernel(false) {
        let f = dir.join("sys").join(s.path);
        std::fs::create_dir_all(f.parent().expect("a sysctl path has a parent")).expect("a scratch directory");
        std::fs::write(&f, &s.value).expect("a scratch file");
    }
    let mut p = Proxier {
        ipvs: Box::new(FakeIpvs::new()),
        links: Box::new(FakeLinks::default()),
        ipset: Box::new(FakeIpset::default()),
        iptables: Box::new(svcproxy::xtables::fake::FakeIptables::new()),
        paths: Paths { grace_file: dir.join("grace"), grace_period_secs: 0, proc_sys: dir.join("sys") },
        memory: None,
        canaries: false,
    };
    let none: Vec<svcproxy::track::Changes> = one.loaded.trackers.families.iter().map(|_| Default::default()).collect();
    p.sync(&one.loaded.config, &one.loaded.trackers, &none, true, svcproxy::driver::Pass::Apply).expect("the first (full) sync");
    let sync = |one: &mut OneEndpoint, p: &mut Proxier, event: &Event| {
        one.loaded.trackers.apply(event);
        let changes = one.loaded.trackers.commit();
        let t = Instant::now();
        black_box(p.sync(&one.loaded.config, &one.loaded.trackers, &changes, false, svcproxy::driver::Pass::Apply).expect("a partial sync"));
        t.elapsed()
    };
    let (add, revert) = (one.add.clone(), one.revert.clone());
    let mut g = group(c, "ipvs_change", Duration::from_millis(1));
    g.bench_function(BenchmarkId::new("sync_partial", n), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += sync(one, &mut p, &add);
                sync(one, &mut p, &revert);
            }
            total
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(dir);
}

fn all(c: &mut Criterion) {
    for n in sizes() {
        cluster(c, n);
        if n <= CHANGE_MAX {
            one_endpoint(c, n);
        }
    }
}

criterion_group!(benches, all);
criterion_main!(benches);

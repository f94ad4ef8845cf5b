//! `svcproxy-bench conntrack` (issue 34): the conntrack reconciler alone against a real
//! kernel table. In the current network namespace (scripts/bench-conntrack runs it in a
//! fresh one; the root namespace is refused) it creates, over ctnetlink, N UDP flows for a
//! generated cluster whose service ports are made UDP: most of them healthy (to a
//! ClusterIP, a load-balancer IP or a NodePort, answered by a serving endpoint, and some
//! to no service at all), S of them stale (answered by an address that is no endpoint,
//! or not NATed: answered by the service address itself), and some TCP flows the
//! reconciler must not look at. Then it runs [`Reconciler::run`] over [`NetlinkFlows`]
//! round after round (the stale flows created again before each), measuring each run's
//! wall time, user and sys CPU (`getrusage`, the kernel's share of the dump and the
//! deletes included: both run in this process's system calls) and the RSS it added, and
//! checks each run by a dump of its own: every stale flow gone, every healthy and TCP
//! flow still there. The same rounds again split into the reconciler's phases (plan,
//! dump alone, dump with the stale test, delete) say where the time goes.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::conntrack::{plan::Targets, NetlinkFlows, Reconciler};
use crate::gen::Rng;
use crate::model::{EndpointsMap, Protocol, ServicePortMap};
use crate::net::IpFamily;
use crate::netfilter::ctnetlink::{wire, Ctnetlink, Flow, Tuple};
use crate::source::ClusterState;

/// What to build and run.
#[derive(Clone)]
pub struct Spec {
    /// UDP flows to create (healthy and stale together).
    pub flows: usize,
    /// Of which stale.
    pub stale: usize,
    /// TCP flows besides (never the reconciler's).
    pub tcp: usize,
    /// Reconciler runs (and as many phase rounds).
    pub rounds: usize,
    /// Also time the reconciler's phases apart, `rounds` times.
    pub phases: bool,
    /// Create the stale flows once more at the end, so the table is the one each run read
    /// (for `conntrack -L` to list next).
    pub leave_stale: bool,
    /// Seconds every flow is created with (it must outlive the benchmark).
    pub timeout: u32,
    pub seed: u64,
    /// The heap count of the binary's allocator, when it has one.
    pub heap: Option<&'static (dyn HeapProbe + Sync)>,
}

/// A count of the heap bytes a stretch allocates and frees (the benchmark binary's global
/// allocator): `stop` returns the highest net growth since `start` and the net at the end.
pub trait HeapProbe {
    fn start(&self);
    fn stop(&self) -> (i64, i64);
}

/// Percent of a generated cluster's services whose ports are made UDP (the generator
/// writes TCP only; the reconciler looks at UDP service ports only).
pub fn make_udp(state: &mut ClusterState, percent: u8) -> usize {
    let mut made = std::collections::BTreeSet::new();
    for (i, svc) in state.services.iter_mut().enumerate() {
        if i % 100 < percent as usize {
            svc.ports.iter_mut().for_each(|p| p.protocol = Protocol::Udp);
            made.insert(svc.id.clone());
        }
    }
    for slice in state.slices.iter_mut().filter(|s| made.contains(&s.service)) {
        slice.ports.iter_mut().for_each(|p| p.protocol = Protocol::Udp);
    }
    made.len()
}

/// One UDP service port with serving endpoints, as the flows are made for it.
struct Port {
    cluster_ip: IpAddr,
    port: u16,
    node_port: u16,
    vips: Vec<IpAddr>,
    serving: Vec<IpAddr>,
    target: u16,
}

/// What a created flow is meant to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Healthy,
    Stale,
    Tcp,
}

/// The flows created, by kind (for counts and checks).
pub struct Flows {
    pub healthy: Vec<Flow>,
    pub stale: Vec<Flow>,
    pub tcp: Vec<Flow>,
    /// Healthy flows by what they go to: ClusterIP, load-balancer IP, NodePort, no service.
    pub healthy_mix: [usize; 4],
    /// Stale flows by kind: endpoint gone (ClusterIP), not NATed, endpoint gone (NodePort).
    pub stale_mix: [usize; 3],
    /// Original tuple → kind and reply tuple, for the checks after each run.
    by_orig: HashMap<Tuple, (Kind, Tuple)>,
}

const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 10);

/// The k-th flow's client: (198.18.0.0/15 address, source port), distinct for every k
/// below 131,072 × 64,512, so every original and reply tuple is distinct.
fn client(k: usize) -> (IpAddr, u16) {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (k % 131_072) as u32);
    (IpAddr::V4(ip), 1024 + (k / 131_072) as u16)
}

/// An address that is no endpoint of any generated service (they are in 10.128.0.0/9
/// from 10.128.0.2 up, 10,000 × 10 reaching 10.129.134.x): 10.250.0.0/16.
fn gone(k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 250, (k >> 8) as u8, (k & 0xff) as u8))
}

fn flow(k: usize, proto: u8, dst: IpAddr, dport: u16, reply_src: IpAddr, reply_sport: u16, timeout: u32) -> Flow {
    let (c, sport) = client(k);
    Flow {
        orig: Tuple { src: c, dst, proto, sport, dport },
        reply: Tuple { src: reply_src, dst: c, proto, sport: reply_sport, dport: sport },
        zone: 0,
        id: 0,
        status: wire::IPS_SEEN_REPLY | wire::IPS_ASSURED,
        timeout,
    }
}

/// The flows for one family's committed maps (IPv4): deterministic for a seed. Each is
/// checked against the reconciler's own rule ([`Targets::is_stale`]) as made, so a flow
/// meant healthy that the rule calls stale (or the reverse) is an error here, not a
/// surprise after the run.
pub fn make_flows(spec: &Spec, services: &ServicePortMap, endpoints: &EndpointsMap) -> anyhow::Result<Flows> {
    let mut ports = Vec::new();
    for (name, svc) in services {
        if svc.protocol != Protocol::Udp || !svc.cluster_ip.is_ipv4() {
            continue;
        }
        let Some(eps) = endpoints.get(name) else { continue };
        let serving: Vec<IpAddr> = eps.iter().filter(|e| e.serving).map(|e| e.ip).collect();
        let Some(target) = eps.first().map(|e| e.port) else { continue };
        if serving.is_empty() {
            continue;
        }
        let vips = svc.load_balancer_vips.iter().chain(&svc.external_ips).copied().collect();
        ports.push(Port { cluster_ip: svc.cluster_ip, port: svc.port, node_port: svc.node_port, vips, serving, target });
    }
    anyhow::ensure!(!ports.is_empty(), "the cluster has no UDP service port with a serving endpoint");
    anyhow::ensure!(spec.stale <= spec.flows, "--stale {} is more than --flows {}", spec.stale, spec.flows);
    let with_vip: Vec<usize> = (0..ports.len()).filter(|&i| !ports[i].vips.is_empty()).collect();
    let with_np: Vec<usize> = (0..ports.len()).filter(|&i| ports[i].node_port != 0).collect();
    anyhow::ensure!(spec.flows + spec.tcp < 131_072 * 60_000, "too many flows");
    let targets = Targets::new(services, endpoints);
    let mut rng = Rng::new(spec.seed);
    let t = spec.timeout;
    let udp = wire::IPPROTO_UDP;
    let mut out = Flows {
        healthy: Vec::with_capacity(spec.flows - spec.stale),
        stale: Vec::with_capacity(spec.stale),
        tcp: Vec::with_capacity(spec.tcp),
        healthy_mix: [0; 4],
        stale_mix: [0; 3],
        by_orig: HashMap::with_capacity(spec.flows + spec.tcp),
    };
    let mut k = 0;
    for _ in 0..spec.flows - spec.stale {
        let p = &ports[rng.below(ports.len())];
        let ep = p.serving[rng.below(p.serving.len())];
        let (f, mix) = match rng.below(100) {
            0..=9 => {
                let dst = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1 + (k % 254) as u8));
                (flow(k, udp, dst, 53, dst, 53, t), 3)
            }
            10..=19 if !with_np.is_empty() => {
                let p = &ports[with_np[rng.below(with_np.len())]];
                let ep = p.serving[rng.below(p.serving.len())];
                (flow(k, udp, IpAddr::V4(NODE_IP), p.node_port, ep, p.target, t), 2)
            }
            20..=24 if !with_vip.is_empty() => {
                let p = &ports[with_vip[rng.below(with_vip.len())]];
                let ep = p.serving[rng.below(p.serving.len())];
                (flow(k, udp, p.vips[rng.below(p.vips.len())], p.port, ep, p.target, t), 1)
            }
            _ => (flow(k, udp, p.cluster_ip, p.port, ep, p.target, t), 0),
        };
        anyhow::ensure!(!targets.is_stale(&f), "made healthy, the plan calls it stale: {f}");
        out.healthy_mix[mix] += 1;
        out.by_orig.insert(f.orig, (Kind::Healthy, f.reply));
        out.healthy.push(f);
        k += 1;
    }
    for i in 0..spec.stale {
        let p = &ports[rng.below(ports.len())];
        let (f, mix) = match i % 3 {
            1 => (flow(k, udp, p.cluster_ip, p.port, p.cluster_ip, p.port, t), 1),
            2 if !with_np.is_empty() => {
                let p = &ports[with_np[rng.below(with_np.len())]];
                (flow(k, udp, IpAddr::V4(NODE_IP), p.node_port, gone(k), p.target, t), 2)
            }
            _ => (flow(k, udp, p.cluster_ip, p.port, gone(k), p.target, t), 0),
        };
        anyhow::ensure!(targets.is_stale(&f), "made stale, the plan keeps it: {f}");
        out.stale_mix[mix] += 1;
        out.by_orig.insert(f.orig, (Kind::Stale, f.reply));
        out.stale.push(f);
        k += 1;
    }
    for _ in 0..spec.tcp {
        // To a service, answered by no endpoint: stale, were it UDP.
        let p = &ports[rng.below(ports.len())];
        let f = flow(k, wire::IPPROTO_TCP, p.cluster_ip, p.port, gone(k), p.target, t);
        out.by_orig.insert(f.orig, (Kind::Tcp, f.reply));
        out.tcp.push(f);
        k += 1;
    }
    anyhow::ensure!(out.by_orig.len() == k, "{} distinct original tuples for {k} flows", out.by_orig.len());
    Ok(out)
}

/// One measured stretch: wall, user and sys CPU of this process (its system calls' kernel
/// work included), its RSS before and its peak during (VmHWM, reset before).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub wall: Duration,
    pub user: Duration,
    pub sys: Duration,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    /// The most heap the stretch held beyond what it started with (bytes; 0 without a probe).
    pub heap_peak: i64,
    /// What it still held at its end.
    pub heap_kept: i64,
}

impl Sample {
    pub fn cpu(&self) -> Duration {
        self.user + self.sys
    }
    pub fn extra_kib(&self) -> u64 {
        self.hwm_kib.saturating_sub(self.rss_kib)
    }
}

fn rusage() -> (Duration, Duration) {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let d = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    (d(ru.ru_utime), d(ru.ru_stime))
}

fn status_kib(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// Runs `f`, measured (its heap by `heap`, when given).
pub fn measure<T>(heap: Option<&(dyn HeapProbe + Sync)>, f: impl FnOnce() -> T) -> (T, Sample) {
    // Resets VmHWM to the current RSS (Linux 4.0+), so the peak read after is this stretch's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_kib = status_kib("VmRSS:");
    let (u0, s0) = rusage();
    heap.inspect(|h| h.start());
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed();
    let (heap_peak, heap_kept) = heap.map_or((0, 0), |h| h.stop());
    let (u1, s1) = rusage();
    let hwm_kib = status_kib("VmHWM:");
    (out, Sample { wall, user: u1.saturating_sub(u0), sys: s1.saturating_sub(s0), rss_kib, hwm_kib, heap_peak, heap_kept })
}

/// What a dump of the table after a run found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Found {
    pub healthy: usize,
    pub stale: usize,
    pub tcp: usize,
    /// Flows the benchmark did not create (none in a fresh namespace).
    pub other: usize,
}

/// Dumps the IPv4 table (UDP then TCP) and sorts what is there by what it was made as.
pub fn check(flows: &Flows) -> anyhow::Result<Found> {
    let mut found = Found::default();
    let mut ct = Ctnetlink::open()?;
    for proto in [wire::IPPROTO_UDP, wire::IPPROTO_TCP] {
        ct.dump(wire::AF_INET, Some(proto), |f| match flows.by_orig.get(&f.orig) {
            Some((Kind::Healthy, reply)) if *reply == f.reply => found.healthy += 1,
            Some((Kind::Stale, reply)) if *reply == f.reply => found.stale += 1,
            Some((Kind::Tcp, reply)) if *reply == f.reply => found.tcp += 1,
            _ => found.other += 1,
        })?;
    }
    Ok(found)
}

/// Errors unless the table holds every healthy and TCP flow and no stale one.
fn verify(flows: &Flows, when: &str) -> anyhow::Result<Found> {
    let found = check(flows).with_context(|| format!("the check dump {when}"))?;
    let want = Found { healthy: flows.healthy.len(), stale: 0, tcp: flows.tcp.len(), other: 0 };
    anyhow::ensure!(found == want, "{when}: the table holds {found:?}, want {want:?}");
    Ok(found)
}

/// One row of the results: what was measured, in which round, and what it did.
#[derive(Debug, Clone)]
pub struct Row {
    pub what: &'static str,
    pub round: usize,
    pub sample: Sample,
    pub listed: usize,
    pub stale: usize,
    pub deleted: usize,
}

/// Everything one benchmark measured.
pub struct Results {
    pub udp_ports: usize,
    pub flows: Flows,
    pub create: Sample,
    pub rows: Vec<Row>,
}

/// Creates the flows in the current network namespace, runs the reconciler `rounds` times
/// (and its phases apart), checking the table after each. `log` gets progress lines.
pub fn run(spec: &Spec, services: &ServicePortMap, endpoints: &EndpointsMap, log: &mut dyn FnMut(&str)) -> anyhow::Result<Results> {
    refuse_root_netns()?;
    let flows = make_flows(spec, services, endpoints)?;
    let targets = Targets::new(services, endpoints);
    let udp_ports = services.values().filter(|s| s.protocol == Protocol::Udp).count();
    drop(targets);
    let before = check(&flows).context("the first dump (is ctnetlink there? nf_conntrack_netlink)")?;
    anyhow::ensure!(before == Found::default(), "the table is not empty ({before:?}): run in a fresh network namespace");
    let mut ct = Ctnetlink::open()?;
    let (created, create_sample) = measure(spec.heap, || -> anyhow::Result<usize> {
        let mut n = 0;
        for set in [&flows.healthy, &flows.stale, &flows.tcp] {
            n += create(&mut ct, set).context("creating the flows (nf_conntrack_max reached?)")?;
        }
        Ok(n)
    });
    let created = created?;
    log(&format!("created {created} flows in {:.2} s ({:.2} s CPU)", create_sample.wall.as_secs_f64(), create_sample.cpu().as_secs_f64()));
    let found = check(&flows)?;
    let want = Found { healthy: flows.healthy.len(), stale: flows.stale.len(), tcp: flows.tcp.len(), other: 0 };
    anyhow::ensure!(found == want, "after creating: the table holds {found:?}, want {want:?}");

    let mut rows = Vec::new();
    let n_stale = flows.stale.len();
    for round in 0..spec.rounds {
        if round > 0 {
            create(&mut ct, &flows.stale).context("creating the stale flows again")?;
        }
        let (r, sample) = measure(spec.heap, || {
            let mut rec = Reconciler::new(Box::new(NetlinkFlows::default()));
            rec.owe_all(IpFamily::V4);
            let r = rec.run(IpFamily::V4, services, endpoints, false);
            (r.listed, r.stale.len(), r.deleted, r.error)
        });
        let (listed, stale, deleted, error) = r;
        anyhow::ensure!(error.is_none(), "round {round}: the reconciler failed: {}", error.unwrap_or_default());
        let deleted = deleted.unwrap_or(0);
        log(&format!(
            "reconcile {round}: {:.1} ms wall, {:.1} ms user + {:.1} ms sys, +{} KiB RSS; listed {listed}, stale {stale}, deleted {deleted}",
            ms(sample.wall),
            ms(sample.user),
            ms(sample.sys),
            sample.extra_kib()
        ));
        verify(&flows, &format!("after reconcile round {round}"))?;
        anyhow::ensure!(
            (listed, stale, deleted) == (flows.healthy.len() + n_stale, n_stale, n_stale),
            "round {round}: listed {listed}, stale {stale}, deleted {deleted}; want {}, {n_stale}, {n_stale}",
            flows.healthy.len() + n_stale
        );
        rows.push(Row { what: "reconcile", round, sample, listed, stale, deleted });
    }

    // After a first run of every flow, a change to one service: its stale flows made again,
    // a run owed that service alone reads its address and port (the kernel filtering).
    let one = flows.stale[0].orig;
    let changed = services
        .iter()
        .find(|(_, sp)| sp.cluster_ip == one.dst && sp.port == one.dport && sp.protocol == crate::model::Protocol::Udp)
        .map(|(n, _)| n.service.clone())
        .context("the first stale flow's service")?;
    let its_stale: Vec<Flow> = flows.stale.iter().filter(|f| f.orig.dst == one.dst && f.orig.dport == one.dport).copied().collect();
    let mut rec = Reconciler::new(Box::new(NetlinkFlows::default()));
    rec.owe_all(IpFamily::V4);
    anyhow::ensure!(rec.run(IpFamily::V4, services, endpoints, false).error.is_none(), "the first run failed");
    for round in 0..spec.rounds {
        create(&mut ct, &its_stale).context("creating one service's stale flows again")?;
        let (r, sample) = measure(spec.heap, || {
            rec.owe(IpFamily::V4, [changed.clone()]);
            let r = rec.run(IpFamily::V4, services, endpoints, false);
            (r.scope, r.listed, r.stale.len(), r.deleted, r.error)
        });
        let (scope, listed, stale, deleted, error) = r;
        anyhow::ensure!(error.is_none(), "changed round {round}: {}", error.unwrap_or_default());
        let deleted = deleted.unwrap_or(0);
        anyhow::ensure!(matches!(scope, crate::conntrack::Scope::Changed(_)), "changed round {round}: read {scope:?}");
        anyhow::ensure!((stale, deleted) == (its_stale.len(), its_stale.len()), "changed round {round}: stale {stale}, deleted {deleted}, want {}", its_stale.len());
        log(&format!("reconcile_changed {round}: {scope:?}, {:.1} ms wall, {:.1} ms CPU; listed {listed}, deleted {deleted}", ms(sample.wall), ms(sample.cpu())));
        rows.push(Row { what: "reconcile_changed", round, sample, listed, stale, deleted });
    }

    for round in 0..if spec.phases { spec.rounds } else { 0 } {
        create(&mut ct, &flows.stale).context("creating the stale flows again")?;
        let (targets, s) = measure(spec.heap, || Targets::new(services, endpoints));
        rows.push(Row { what: "plan", round, sample: s, listed: 0, stale: 0, deleted: 0 });
        // The stale test alone, over the flows as made (in memory: no kernel, no parsing).
        let (n, s) = measure(spec.heap, || flows.healthy.iter().chain(&flows.stale).filter(|f| targets.is_stale(f)).count());
        rows.push(Row { what: "test_in_memory", round, sample: s, listed: flows.healthy.len() + n_stale, stale: n, deleted: 0 });
        let (n, s) = measure(spec.heap, || -> anyhow::Result<usize> { Ok(Ctnetlink::open()?.dump(wire::AF_INET, Some(wire::IPPROTO_UDP), |_| {})?.flows) });
        let n = n?;
        rows.push(Row { what: "dump", round, sample: s, listed: n, stale: 0, deleted: 0 });
        let (found, s) = measure(spec.heap, || -> anyhow::Result<(usize, Vec<Flow>)> {
            let mut stale = Vec::new();
            let n = Ctnetlink::open()?
                .dump(wire::AF_INET, Some(wire::IPPROTO_UDP), |f| {
                    if targets.is_stale(f) {
                        stale.push(*f);
                    }
                })?
                .flows;
            Ok((n, stale))
        });
        let (n, stale) = found?;
        rows.push(Row { what: "dump_filter", round, sample: s, listed: n, stale: stale.len(), deleted: 0 });
        // One service's flows (the first stale flow's destination), then one NodePort's.
        let one = flows.stale[0].orig;
        let (n1, s) = measure(spec.heap, || targeted_dump(Some(one.dst), wire::IPPROTO_UDP, one.dport));
        rows.push(Row { what: "dump_one_service", round, sample: s, listed: n1?, stale: 0, deleted: 0 });
        if let Some(np) = flows.stale.iter().find(|f| f.orig.dst == IpAddr::V4(NODE_IP)) {
            let (n2, s) = measure(spec.heap, || targeted_dump(None, wire::IPPROTO_UDP, np.orig.dport));
            rows.push(Row { what: "dump_one_nodeport", round, sample: s, listed: n2?, stale: 0, deleted: 0 });
        }
        let (d, s) = measure(spec.heap, || Ctnetlink::open().and_then(|mut c| c.delete(&stale)));
        let d = d?;
        rows.push(Row { what: "delete", round, sample: s, listed: 0, stale: stale.len(), deleted: d.deleted });
        anyhow::ensure!(stale.len() == n_stale && d.deleted == n_stale, "phases {round}: stale {}, deleted {}, want {n_stale}", stale.len(), d.deleted);
        verify(&flows, &format!("after phase round {round}"))?;
        log(&format!("phases {round}: {}", rows.iter().filter(|r| r.round == round && r.what != "reconcile").map(|r| format!("{} {:.1} ms CPU", r.what, ms(r.sample.cpu()))).collect::<Vec<_>>().join(", ")));
    }
    if spec.leave_stale {
        create(&mut ct, &flows.stale).context("creating the stale flows again")?;
        let found = check(&flows)?;
        anyhow::ensure!(found == want, "at the end: the table holds {found:?}, want {want:?}");
    }
    Ok(Results { udp_ports, flows, create: create_sample, rows })
}

/// Flows per [`Ctnetlink::create`] call: each create is acknowledged, and the kernel
/// queues every answer of a batch before the first `recv`; 1,024 acks (an skb each, about
/// 1 KiB of the socket's receive buffer apiece) overflow the default 208 KiB buffer
/// (ENOBUFS), so creates go 100 to a batch here.
const CREATE_CHUNK: usize = 100;

fn create(ct: &mut Ctnetlink, flows: &[Flow]) -> Result<usize, crate::netfilter::ctnetlink::CtError> {
    let mut n = 0;
    for chunk in flows.chunks(CREATE_CHUNK) {
        n += ct.create(chunk)?;
    }
    Ok(n)
}

/// A dump the kernel filters to one original destination (`CTA_FILTER`, Linux 5.8+):
/// address, protocol and port, or (no address) protocol and port, as a NodePort's: what
/// the reconciler reads per changed service address after its first run. Returns the
/// flows read.
pub fn targeted_dump(dst: Option<IpAddr>, proto: u8, dport: u16) -> anyhow::Result<usize> {
    let filter = wire::DumpFilter { proto, dst, dport: Some(dport) };
    Ok(Ctnetlink::open()?.dump_to(wire::AF_INET, Some(filter), |_| {})?.flows)
}

/// The benchmark creates flows in the namespace it runs in: never the host's. The initial
/// namespace is kthreadd's (pid 2; pid 1's link may be unreadable in a container), else
/// the one where `nf_conntrack_max` is writable (read-only in every other namespace).
fn refuse_root_netns() -> anyhow::Result<()> {
    let mine = std::fs::read_link("/proc/self/ns/net").context("reading /proc/self/ns/net")?;
    let init = ["/proc/2/ns/net", "/proc/1/ns/net"].iter().find_map(|p| std::fs::read_link(p).ok());
    let is_init = match init {
        Some(init) => init == mine,
        None => {
            use std::os::unix::fs::PermissionsExt as _;
            let meta = std::fs::metadata("/proc/sys/net/netfilter/nf_conntrack_max").context("no /proc/sys/net/netfilter/nf_conntrack_max (nf_conntrack not loaded?)")?;
            meta.permissions().mode() & 0o200 != 0
        }
    };
    anyhow::ensure!(!is_init, "this is the initial network namespace ({}): run in a fresh one (ip netns add X; ip netns exec X ...)", mine.display());
    Ok(())
}

/// The kinds of rows: the reconciler's runs, then its phases apart: `plan`
/// ([`Targets::new`]), `test_in_memory` (the stale test over the flows as made, no
/// kernel), `dump` (the UDP dump streamed and parsed, nothing done with a flow),
/// `dump_filter` (the same with the stale test, the stale flows kept), `delete`; and,
/// not the reconciler's, [`targeted_dump`]s of one service's and one NodePort's flows.
const WHATS: [&str; 9] = ["reconcile", "reconcile_changed", "plan", "test_in_memory", "dump", "dump_filter", "delete", "dump_one_service", "dump_one_nodeport"];

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

impl Results {
    /// The rows as TSV (one per run and phase).
    pub fn tsv(&self) -> String {
        let mut out = String::from("what\tround\twall_ms\tuser_ms\tsys_ms\tcpu_ms\trss_kib\textra_rss_kib\theap_peak_kib\theap_kept_kib\tlisted\tstale\tdeleted\n");
        for r in &self.rows {
            let s = &r.sample;
            out.push_str(&format!(
                "{}\t{}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{}\t{}\t{:.1}\t{:.1}\t{}\t{}\t{}\n",
                r.what,
                r.round,
                ms(s.wall),
                ms(s.user),
                ms(s.sys),
                ms(s.cpu()),
                s.rss_kib,
                s.extra_kib(),
                s.heap_peak as f64 / 1024.0,
                s.heap_kept as f64 / 1024.0,
                r.listed,
                r.stale,
                r.deleted
            ));
        }
        out
    }

    /// Medians per kind of row: `WHAT_METRIC value` lines (for the script).
    pub fn figures(&self) -> String {
        let mut out = format!(
            "udp_flows {}\nhealthy {}\nstale {}\ntcp_flows {}\nudp_service_ports {}\ncreate_wall_ms {:.1}\ncreate_cpu_ms {:.1}\n",
            self.flows.healthy.len() + self.flows.stale.len(),
            self.flows.healthy.len(),
            self.flows.stale.len(),
            self.flows.tcp.len(),
            self.udp_ports,
            ms(self.create.wall),
            ms(self.create.cpu())
        );
        for what in WHATS {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.what == what).collect();
            if rows.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&Sample) -> f64| median(rows.iter().map(|r| f(&r.sample)).collect());
            out.push_str(&format!("{what}_runs {}\n", rows.len()));
            out.push_str(&format!("{what}_listed {}\n", rows[0].listed));
            out.push_str(&format!("{what}_wall_ms {:.1}\n", m(&|s| ms(s.wall))));
            out.push_str(&format!("{what}_user_ms {:.1}\n", m(&|s| ms(s.user))));
            out.push_str(&format!("{what}_sys_ms {:.1}\n", m(&|s| ms(s.sys))));
            out.push_str(&format!("{what}_cpu_ms {:.1}\n", m(&|s| ms(s.cpu()))));
            out.push_str(&format!("{what}_cpu_ms_min {:.1}\n", rows.iter().map(|r| ms(r.sample.cpu())).fold(f64::INFINITY, f64::min)));
            out.push_str(&format!("{what}_cpu_ms_max {:.1}\n", rows.iter().map(|r| ms(r.sample.cpu())).fold(0.0, f64::max)));
            out.push_str(&format!("{what}_extra_rss_kib {}\n", median(rows.iter().map(|r| r.sample.extra_kib() as f64).collect())));
            out.push_str(&format!("{what}_rss_kib {}\n", median(rows.iter().map(|r| r.sample.rss_kib as f64).collect())));
            out.push_str(&format!("{what}_heap_peak_kib {:.1}\n", median(rows.iter().map(|r| r.sample.heap_peak as f64 / 1024.0).collect())));
            out.push_str(&format!("{what}_heap_kept_kib {:.1}\n", median(rows.iter().map(|r| r.sample.heap_kept as f64 / 1024.0).collect())));
        }
        out
    }

    /// A human summary: the mix and the medians.
    pub fn summary(&self) -> String {
        let f = &self.flows;
        let udp = f.healthy.len() + f.stale.len();
        let mut out = format!(
            "{udp} UDP flows for {} UDP service ports: {} healthy (ClusterIP {}, load-balancer IP {}, NodePort {}, no service {}), {} stale (endpoint gone {}, not NATed {}, NodePort endpoint gone {}); {} TCP flows\n",
            self.udp_ports,
            f.healthy.len(),
            f.healthy_mix[0],
            f.healthy_mix[1],
            f.healthy_mix[2],
            f.healthy_mix[3],
            f.stale.len(),
            f.stale_mix[0],
            f.stale_mix[1],
            f.stale_mix[2],
            f.tcp.len()
        );
        out.push_str("| run (median) | runs | wall ms | user ms | sys ms | CPU ms | CPU ms / 100,000 UDP flows | RSS added KiB | heap peak KiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for what in WHATS {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.what == what).collect();
            if rows.is_empty() {
                continue;
            }
            let m = |g: &dyn Fn(&Sample) -> f64| median(rows.iter().map(|r| g(&r.sample)).collect());
            let cpu = m(&|s| ms(s.cpu()));
            out.push_str(&format!(
                "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.1} |\n",
                rows.len(),
                m(&|s| ms(s.wall)),
                m(&|s| ms(s.user)),
                m(&|s| ms(s.sys)),
                cpu,
                cpu * 100_000.0 / udp.max(1) as f64,
                m(&|s| s.extra_kib() as f64),
                m(&|s| s.heap_peak as f64 / 1024.0)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(flows: usize, stale: usize, tcp: usize) -> Spec {
        Spec { flows, stale, tcp, rounds: 1, phases: false, leave_stale: false, timeout: 60, seed: 1, heap: None }
    }

    fn cluster(udp_percent: u8) -> crate::pipeline::Loaded {
        let mut state = ClusterState::default();
        crate::source::file::read_str(std::path::Path::new("g.yaml"), &crate::bench::generated(60, 3), &mut state).unwrap();
        assert_eq!(make_udp(&mut state, udp_percent), 60 * udp_percent as usize / 100);
        crate::bench::load(state).unwrap()
    }

    #[test]
    fn flows_are_distinct_and_as_the_plan_calls_them() {
        let loaded = cluster(100);
        let (services, endpoints) = loaded.trackers.families[0].view();
        let f = make_flows(&spec(900, 30, 40), services, endpoints).unwrap();
        assert_eq!((f.healthy.len(), f.stale.len(), f.tcp.len()), (870, 30, 40));
        assert_eq!(f.healthy_mix.iter().sum::<usize>(), 870);
        assert!(f.healthy_mix.iter().all(|n| *n > 0), "{:?}", f.healthy_mix);
        assert_eq!(f.stale_mix, [10, 10, 10]);
        assert_eq!(f.by_orig.len(), 940);
        let replies: std::collections::HashSet<Tuple> = f.healthy.iter().chain(&f.stale).chain(&f.tcp).map(|f| f.reply).collect();
        assert_eq!(replies.len(), 940);
        let targets = Targets::new(services, endpoints);
        assert!(f.stale.iter().all(|x| targets.is_stale(x)) && !f.healthy.iter().any(|x| targets.is_stale(x)));
        // Deterministic for a seed.
        assert_eq!(make_flows(&spec(900, 30, 40), services, endpoints).unwrap().healthy, f.healthy);
    }

    #[test]
    fn a_cluster_without_udp_ports_is_refused() {
        let loaded = cluster(0);
        let (services, endpoints) = loaded.trackers.families[0].view();
        assert!(make_flows(&spec(10, 1, 0), services, endpoints).is_err());
    }
}

//! The packet-path benchmark's pieces (scripts/bench-socketlb): the cluster it syncs, whose
//! addresses stay in 198.18.0.0/15 and one of whose Services is backed by real pods; the
//! echo server those pods run; and the load generator, several threads each with one
//! request in flight, counting new TCP connections (connect, small request, reply read to
//! the server's close, then an abortive close) or UDP request/response pairs (unconnected
//! sockets, `sendto` per request) over a fixed time, each request's target chosen as a
//! [`Pick`] says (round-robin, or per socket as a Service picks).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The Service port and the pods' port, per protocol.
pub const TCP_PORT: u16 = 80;
pub const TCP_TARGET: u16 = 8080;
pub const UDP_PORT: u16 = 53;
pub const UDP_TARGET: u16 = 5353;
/// What the client sends and the server answers.
const REQUEST: &[u8] = b"GET /\n";
const REPLY: &[u8] = b"ok\n";

/// Service `i`'s ClusterIP: 198.19.128.1 on, inside the lab's 198.18.0.0/15 and apart
/// from the pods' 198.18.0.0/16 (at most 32,767 Services).
pub fn cluster_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 128, 0)) + 1 + i as u32)
}

/// The address of endpoint `j` of Service `i` when no pod answers it: 198.18.16.0 to
/// 198.18.255.255 (repeating past 61,440 endpoints; a repeat is an address in two slices).
fn unanswered_endpoint(i: usize, j: usize, endpoints: usize) -> Ipv4Addr {
    let idx = (i * endpoints + j) % 61_440;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 16, 0)) + idx as u32)
}

/// A cluster of `services` Services, each with a TCP port (80 → 8080) and a UDP port
/// (53 → 5353) and `endpoints` ready endpoints; Service `target`'s endpoints are `pods`
/// (so `pods.len()` must be `endpoints`), every other endpoint an address no pod holds.
/// The node is `node-0`, the cluster CIDR 198.18.0.0/16.
pub fn cluster(services: usize, endpoints: usize, target: usize, pods: &[Ipv4Addr]) -> anyhow::Result<String> {
    anyhow::ensure!(services > 0 && services <= 32_767, "services: 1 to 32767, not {services}");
    anyhow::ensure!(target < services, "target {target}: there are {services} services");
    anyhow::ensure!(pods.len() == endpoints, "{} pods for {endpoints} endpoints", pods.len());
    let mut s = String::with_capacity(services * (700 + endpoints * 120));
    s.push_str("# written by svcproxy-bench socketlb-cluster\napiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\n");
    s.push_str("node:\n  name: node-0\n  ips: [198.19.0.254]\n  labels: {topology.kubernetes.io/zone: zone-0}\n");
    s.push_str("options:\n  ipFamily: ipv4\n  clusterCIDR: 198.18.0.0/16\n");
    for i in 0..services {
        let ip = cluster_ip(i);
        let _ = write!(
            s,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: bench\nspec:\n  type: ClusterIP\n  clusterIP: {ip}\n  clusterIPs: [{ip}]\n  ports:\n  - name: web\n    port: {TCP_PORT}\n    protocol: TCP\n    targetPort: {TCP_TARGET}\n  - name: dns\n    port: {UDP_PORT}\n    protocol: UDP\n    targetPort: {UDP_TARGET}\n"
        );
        let _ = write!(
            s,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-{i}-abcde\n  namespace: bench\n  labels:\n    kubernetes.io/service-name: svc-{i}\naddressType: IPv4\nendpoints:\n"
        );
        let addrs: Vec<(Ipv4Addr, &str)> = if i == target {
            pods.iter().map(|p| (*p, "node-0")).collect()
        } else {
            (0..endpoints).map(|j| (unanswered_endpoint(i, j, endpoints), "node-1")).collect()
        };
        for (addr, node) in addrs {
            let _ = write!(s, "- addresses: [{addr}]\n  conditions: {{ready: true, serving: true, terminating: false}}\n  nodeName: {node}\n");
        }
        let _ = write!(s, "ports:\n- name: web\n  port: {TCP_TARGET}\n  protocol: TCP\n- name: dns\n  port: {UDP_TARGET}\n  protocol: UDP\n");
    }
    Ok(s)
}

/// Runs the echo server on `ip` until `stop` is set: `tcp_threads` threads accepting on
/// one listener (each connection: read the request, write the reply, close; the client's
/// reset then ends it, so no side keeps a TIME_WAIT), and one thread answering each UDP
/// datagram with its own bytes.
pub fn serve(ip: Ipv4Addr, tcp_threads: usize, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let listener = TcpListener::bind((ip, TCP_TARGET)).map_err(|e| anyhow::anyhow!("bind {ip}:{TCP_TARGET}/tcp: {e}"))?;
    let udp = UdpSocket::bind((ip, UDP_TARGET)).map_err(|e| anyhow::anyhow!("bind {ip}:{UDP_TARGET}/udp: {e}"))?;
    serve_on(listener, udp, tcp_threads, stop)
}

/// [`serve`] on sockets already bound.
pub fn serve_on(listener: TcpListener, udp: UdpSocket, tcp_threads: usize, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    udp.set_read_timeout(Some(Duration::from_millis(200)))?;
    std::thread::scope(|scope| {
        for _ in 0..tcp_threads.max(1) {
            let listener = listener.try_clone().expect("cloning the listener");
            let stop = stop.clone();
            scope.spawn(move || {
                let mut buf = [0u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    // accept() blocks; the process exits (or is killed) to end it.
                    if let Ok((mut conn, _)) = listener.accept() {
                        if conn.read(&mut buf).is_ok_and(|n| n > 0) {
                            let _ = conn.write_all(REPLY);
                        }
                    }
                }
            });
        }
        let stop = stop.clone();
        scope.spawn(move || {
            let mut buf = [0u8; 512];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..n], from);
                }
            }
        });
    });
    Ok(())
}

/// What the generator measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// New TCP connections: connect, send the request, read the reply to EOF, close with a
    /// reset (SO_LINGER 0). Neither side keeps a TIME_WAIT: a server's TIME_WAIT for a
    /// 4-tuple that the next connection reaches through DNAT (whose sequence numbers the
    /// client derived from the ClusterIP) holds that connect a whole SYN retry, which would
    /// measure the TIME_WAIT table instead of the path.
    Tcp,
    /// UDP request/response: `sendto` on one of the thread's unconnected sockets (in
    /// turn), `recvfrom` on it.
    Udp,
}

/// How each request's target is chosen among the targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Each request to the next target in turn, thread `t` of `T` starting at `t` and
    /// stepping by `T`: every target about equally often, whatever the sockets.
    RoundRobin,
    /// As a Service without session affinity picks: one target at random for each socket,
    /// kept for the socket's life. A TCP connection is a new socket (a new pick); a
    /// thread's UDP sockets keep theirs for the whole run, as the socket-LB programs keep an
    /// unconnected socket's pick and the rules' conntrack entry keeps its flow's.
    PerSocket,
}

/// One load run's settings.
#[derive(Debug, Clone)]
pub struct Load {
    pub kind: Kind,
    /// The targets, chosen among per request as `pick` says.
    pub targets: Vec<SocketAddr>,
    pub pick: Pick,
    pub threads: usize,
    /// UDP: unconnected sockets per thread, used in turn (one request in flight still).
    pub udp_sockets: usize,
    /// Seeds the per-socket picks (each thread draws from its own stream of it).
    pub seed: u64,
    pub duration: Duration,
    /// How long one request may take before it counts as an error.
    pub timeout: Duration,
}

/// One thread's choice of socket and target for each request, apart from the sockets
/// themselves so that the spread it gives is tested.
pub struct Chooser {
    pick: Pick,
    kind: Kind,
    targets: usize,
    /// Round-robin: the position of the next request, and the step (the thread count).
    position: usize,
    step: usize,
    /// UDP: the next socket, and with [`Pick::PerSocket`] the target each socket keeps.
    socket: usize,
    sockets: usize,
    kept: Vec<usize>,
    rng: crate::gen::Rng,
}

impl Chooser {
    /// Thread `thread` of `threads` of `load` (its per-socket picks drawn here, for UDP).
    pub fn new(load: &Load, thread: usize, threads: usize) -> Self {
        let targets = load.targets.len().max(1);
        let sockets = match load.kind {
            Kind::Udp => load.udp_sockets.max(1),
            Kind::Tcp => 1,
        };
        let mut rng = crate::gen::Rng::new(mix(load.seed ^ mix(thread as u64 + 1)));
        let kept = match (load.pick, load.kind) {
            (Pick::PerSocket, Kind::Udp) => (0..sockets).map(|_| rng.below(targets)).collect(),
            _ => Vec::new(),
        };
        Chooser { pick: load.pick, kind: load.kind, targets, position: thread, step: threads.max(1), socket: 0, sockets, kept, rng }
    }

    /// The next request's socket (an index into the thread's UDP sockets; 0 for TCP) and
    /// target (an index into the load's targets).
    pub fn choose(&mut self) -> (usize, usize) {
        let socket = self.socket;
        self.socket = (self.socket + 1) % self.sockets;
        let target = match (self.pick, self.kind) {
            (Pick::RoundRobin, _) => {
                let t = self.position % self.targets;
                self.position = self.position.wrapping_add(self.step);
                t
            }
            (Pick::PerSocket, Kind::Udp) => self.kept[socket],
            (Pick::PerSocket, Kind::Tcp) => self.rng.below(self.targets),
        };
        (socket, target)
    }

    /// The targets the thread's UDP sockets keep ([`Pick::PerSocket`]; empty otherwise).
    pub fn kept(&self) -> &[usize] {
        &self.kept
    }
}

/// splitmix64's finaliser: seeds that differ in one bit give unrelated streams.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A load run's result.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Outcome {
    /// Requests answered.
    pub ops: u64,
    /// Requests failed (refused, timed out, a wrong reply).
    pub errors: u64,
    /// From the threads' start to the last one's end.
    pub elapsed: Duration,
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `load`: every thread starts together and stops at the deadline, finishing its
/// request in flight.
pub fn run(load: &Load) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!load.targets.is_empty(), "no target");
    let threads = load.threads.max(1);
    let start = Arc::new(Barrier::new(threads));
    let per: Vec<Option<Counted>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let start = start.clone();
                scope.spawn(move || worker(load, t, threads, &start))
            })
            .collect();
        handles.into_iter().map(|h| h.join().ok()).collect()
    });
    let per: Vec<Counted> = per.into_iter().collect::<Option<_>>().ok_or_else(|| anyhow::anyhow!("a load thread panicked"))?;
    // From the first thread's start to the last one's end.
    let first = per.iter().map(|c| c.started).min().expect("at least one thread");
    let last = per.iter().map(|c| c.ended).max().expect("at least one thread");
    Ok(Outcome { ops: per.iter().map(|c| c.ok).sum(), errors: per.iter().map(|c| c.failed).sum(), elapsed: last - first })
}

/// One thread's count and its span.
struct Counted {
    ok: u64,
    failed: u64,
    started: Instant,
    ended: Instant,
}

/// One thread's loop, to the deadline.
fn worker(load: &Load, t: usize, threads: usize, start: &Barrier) -> Counted {
    let mut chooser = Chooser::new(load, t, threads);
    let udp: Vec<UdpSocket> = match load.kind {
        Kind::Udp => (0..load.udp_sockets.max(1))
            .map(|_| {
                let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("binding the UDP socket");
                s.set_read_timeout(Some(load.timeout)).expect("setting the UDP timeout");
                s
            })
            .collect(),
        Kind::Tcp => Vec::new(),
    };
    start.wait();
    let started = Instant::now();
    let deadline = started + load.duration;
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        let (socket, target) = chooser.choose();
        let dst = load.targets[target];
        let answered = match load.kind {
            Kind::Tcp => tcp_once(dst, load.timeout, &mut buf),
            Kind::Udp => udp_once(&udp[socket], dst, &mut buf),
        };
        if answered {
            ok += 1;
        } else {
            failed += 1;
        }
    }
    Counted { ok, failed, started, ended: Instant::now() }
}

fn tcp_once(dst: SocketAddr, timeout: Duration, buf: &mut [u8]) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&dst, timeout) else { return false };
    if s.set_read_timeout(Some(timeout)).is_err() || s.write_all(REQUEST).is_err() {
        return false;
    }
    let mut got = 0;
    loop {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => {
                got += k;
                if got == buf.len() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    let answered = &buf[..got] == REPLY;
    abort(&s);
    answered
}

/// SO_LINGER 0: the close that follows sends a reset and keeps no TIME_WAIT.
fn abort(s: &TcpStream) {
    use std::os::fd::AsRawFd as _;
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket and a linger struct of the size given.
    unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, (&raw const l).cast(), std::mem::size_of::<libc::linger>() as libc::socklen_t);
    }
}

fn udp_once(s: &UdpSocket, dst: SocketAddr, buf: &mut [u8]) -> bool {
    if s.send_to(REQUEST, dst).is_err() {
        return false;
    }
    // A late answer to an earlier request that timed out is skipped, not counted.
    for _ in 0..4 {
        match s.recv_from(buf) {
            Ok((k, _)) if &buf[..k] == REQUEST => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
    false
}

/// The machine's CPU time from /proc/stat, in clock ticks: (busy, total) over every CPU.
pub fn machine_cpu() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_loads_with_the_target_backed_by_the_pods() {
        let pods: Vec<Ipv4Addr> = (1..=3).map(|k| Ipv4Addr::new(198, 18, 1, k)).collect();
        let text = cluster(50, 3, 25, &pods).unwrap();
        let loaded = crate::bench::load_text(&text).unwrap();
        let (services, endpoints) = loaded.trackers.families[0].view();
        assert_eq!(services.len(), 100, "a TCP and a UDP port per Service");
        let eps = endpoints.values().map(|e| e.len()).sum::<usize>();
        assert_eq!(eps, 50 * 2 * 3);
        // Every address is in the lab's 198.18.0.0/15; the target's are the pods'.
        let lab = |ip: Ipv4Addr| ip.octets()[0] == 198 && (ip.octets()[1] & 0xfe) == 18;
        for line in text.lines() {
            for w in line.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
                if let Ok(ip) = w.parse::<Ipv4Addr>() {
                    assert!(lab(ip), "{ip} is outside 198.18.0.0/15");
                }
            }
        }
        let at = text.find("name: svc-25-abcde").unwrap();
        let slice = &text[at..at + 600];
        assert!(slice.contains("[198.18.1.1]") && slice.contains("[198.18.1.3]"), "{slice}");
        assert_eq!(cluster_ip(25), Ipv4Addr::new(198, 19, 128, 26));
        assert!(text.contains("clusterIP: 198.19.128.26\n"));
        assert!(cluster(10, 2, 3, &pods).is_err(), "pods and endpoints must agree");
        assert!(cluster(10, 3, 10, &pods).is_err(), "the target must be one of the services");
    }

    fn load(kind: Kind, targets: Vec<SocketAddr>, threads: usize, millis: u64) -> Load {
        Load { kind, targets, pick: Pick::RoundRobin, threads, udp_sockets: 1, seed: 7, duration: Duration::from_millis(millis), timeout: Duration::from_secs(1) }
    }

    fn targets(n: u8) -> Vec<SocketAddr> {
        (1..=n).map(|k| SocketAddr::from((Ipv4Addr::new(198, 18, 1, k), 5353))).collect()
    }

    /// The first `requests` (socket, target) choices of thread `t` of `threads`.
    fn choices(load: &Load, t: usize, threads: usize, requests: usize) -> Vec<(usize, usize)> {
        let mut c = Chooser::new(load, t, threads);
        (0..requests).map(|_| c.choose()).collect()
    }

    #[test]
    fn round_robin_sends_each_thread_through_every_target_in_turn() {
        for kind in [Kind::Tcp, Kind::Udp] {
            let load = Load { udp_sockets: 3, ..load(kind, targets(10), 8, 1) };
            let first = choices(&load, 0, 8, 5);
            let sockets = if kind == Kind::Udp { vec![0, 1, 2, 0, 1] } else { vec![0; 5] };
            assert_eq!(first, sockets.into_iter().zip([0, 8, 6, 4, 2]).collect::<Vec<_>>(), "{kind:?}");
            // Ten requests from each of the 8 threads: every target 8 times.
            let mut count = [0; 10];
            for t in 0..8 {
                choices(&load, t, 8, 10).iter().for_each(|&(_, target)| count[target] += 1);
            }
            assert_eq!(count, [8; 10], "{kind:?}");
        }
    }

    #[test]
    fn per_socket_keeps_a_udp_sockets_pick_and_draws_one_per_tcp_connection() {
        let udp = Load { pick: Pick::PerSocket, udp_sockets: 4, ..load(Kind::Udp, targets(10), 8, 1) };
        let c = Chooser::new(&udp, 3, 8);
        let kept = c.kept().to_vec();
        assert_eq!(kept.len(), 4);
        let got = choices(&udp, 3, 8, 40);
        for (i, &(socket, target)) in got.iter().enumerate() {
            assert_eq!(socket, i % 4, "the sockets in turn");
            assert_eq!(target, kept[socket], "socket {socket} keeps its pick");
        }
        assert_eq!(choices(&udp, 3, 8, 40), got, "the same seed and thread, the same picks");
        // One socket a thread: the thread's every request goes to one target.
        let one = Load { udp_sockets: 1, ..udp.clone() };
        let got = choices(&one, 0, 8, 20);
        assert!(got.iter().all(|&c| c == got[0]), "{got:?}");
        // TCP: a new pick per connection, every target drawn, none far from a tenth.
        let tcp = Load { pick: Pick::PerSocket, ..load(Kind::Tcp, targets(10), 8, 1) };
        let mut count = [0u32; 10];
        choices(&tcp, 0, 8, 100_000).iter().for_each(|&(socket, target)| {
            assert_eq!(socket, 0);
            count[target] += 1;
        });
        assert!(count.iter().all(|&n| (9_000..11_000).contains(&n)), "{count:?}");
    }

    /// The spread that sets a Service run apart from a round-robin one: 8 threads with one
    /// UDP socket each, each socket's pick uniform over 10 pods, reach 10 × (1 − 0.9⁸) ≈ 5.7
    /// distinct pods on average; with 8 sockets a thread (64 picks), nearly all 10.
    #[test]
    fn per_socket_picks_spread_as_a_services_random_picks_do() {
        let distinct = |udp_sockets: usize, seed: u64| {
            let load = Load { pick: Pick::PerSocket, udp_sockets, seed, ..load(Kind::Udp, targets(10), 8, 1) };
            let mut used = [false; 10];
            (0..8).for_each(|t| Chooser::new(&load, t, 8).kept().iter().for_each(|&k| used[k] = true));
            used.iter().filter(|&&u| u).count()
        };
        let runs = 2_000;
        let mean = |sockets| (0..runs).map(|seed| distinct(sockets, seed)).sum::<usize>() as f64 / runs as f64;
        let one = mean(1);
        assert!((5.55..5.85).contains(&one), "{one}");
        let eight = mean(8);
        assert!(eight > 9.9, "{eight}");
        // Seeds give different picks (the rounds sample different spreads).
        assert!((0..20).map(|seed| distinct(1, seed)).collect::<std::collections::BTreeSet<_>>().len() > 1);
    }

    /// The server and the generator over loopback (no root): every request answered.
    #[test]
    fn the_generator_counts_answers_from_the_server() {
        let ip = Ipv4Addr::new(127, 0, 0, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let udp = UdpSocket::bind((ip, 0)).unwrap();
        let (tcp_port, udp_port) = (listener.local_addr().unwrap().port(), udp.local_addr().unwrap().port());
        let server = {
            let stop = stop.clone();
            std::thread::spawn(move || serve_on(listener, udp, 2, stop))
        };
        for (kind, port) in [(Kind::Tcp, tcp_port), (Kind::Udp, udp_port)] {
            for (pick, udp_sockets) in [(Pick::RoundRobin, 1), (Pick::PerSocket, 3)] {
                let load = Load { udp_sockets, pick, ..load(kind, vec![SocketAddr::from((ip, port))], 2, 200) };
                let out = run(&load).unwrap();
                assert!(out.ops > 10 && out.errors == 0, "{kind:?} {pick:?}: {out:?}");
                assert!(out.elapsed >= Duration::from_millis(200) && out.rate() > 0.0, "{out:?}");
            }
        }
        // Nothing listens here: every connect fails and is counted as an error.
        let closed = TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap();
        let load = Load { timeout: Duration::from_millis(100), ..load(Kind::Tcp, vec![closed], 1, 50) };
        let out = run(&load).unwrap();
        assert!(out.ops == 0 && out.errors > 0, "{out:?}");
        stop.store(true, Ordering::Relaxed);
        // The accept threads block: wake each with a connection.
        for _ in 0..2 {
            let _ = TcpStream::connect((ip, tcp_port));
        }
        server.join().unwrap().unwrap();
        let (busy, total) = machine_cpu();
        assert!(total > 0 && busy <= total);
    }
}

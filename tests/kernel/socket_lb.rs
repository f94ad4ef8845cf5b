//! `--socket-lb`'s programs (`netfilter::bpf`) against the real kernel: a cgroup v2 and a
//! bpffs mounted at the test's own mount points, a child cgroup of the test's, the
//! programs attached to it alone. A client process moved into that cgroup, in the lab's
//! node namespace, reaches a ClusterIP that no rule and no route knows, over TCP,
//! connected UDP and unconnected UDP, IPv4 and IPv6, by the socket translation alone:
//! both pods answer, and the client sees the Service address as its peer (getpeername,
//! recvmsg). A Service with no endpoints refuses `connect()`. The same client outside the
//! cgroup, and inside it after cleanup, finds the ClusterIP unreachable. `svcproxy sync
//! --socket-lb`, one-shot and in watch mode, writes the maps from a cluster file and
//! follows its endpoint changes; a one-shot sync that removes a backend closes the
//! UDP sockets a pod's clients had connected to it, so they move on within a second.
//! `ClientIP` session affinity: each client pod sticks to one backend as it does through
//! the rules alone, an entry naming a backend that left the Service is not followed, and
//! each use refreshes an entry's timeout. An unconnected UDP socket that keeps its pick
//! still sees replies from the Service address after its backend changes. A pod reaches an external IP and a
//! load-balancer IP through the socket path with the answers of the rules alone, and a
//! restart of svcproxy drops no flow and refuses no new socket.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use svcproxy::model::Protocol;
use svcproxy::netfilter::bpf::kernel::{self, Maps};
use svcproxy::netfilter::bpf::maps::{AffinityKey, AffinityValue, BackendKey, Counter, ServiceKey, ServiceValue};

use crate::dataplane::{cluster_yaml, ep4, ep6, pod_ip4, pod_ip6, pod_name, svc, sync_args, tcp, udp};
use crate::harness::{skip, Case, CaseResult, Ctx};
use crate::netns::{run_bounded, run_ok, Backend, Lab, Ns};
use crate::stream_client::now_ms;

pub const CLIENT_FLAG: &str = "__svk_socklb_client";
/// A client that keeps one socket and sends every 100 ms (`stream_main`).
pub const STREAM_FLAG: &str = "__svk_socklb_stream";
/// A TCP server that keeps each connection open and answers every line (`hold_main`).
pub const HOLD_FLAG: &str = "__svk_socklb_hold";

const SVC4: &str = "198.19.200.10";
const SVC6: &str = "fd00:99::10";
const EMPTY4: &str = "198.19.200.11";
const PORT: u16 = 80;
const POD_PORT: u16 = 8080;
/// Each attempt's connect and read limit.
const ATTEMPT: Duration = Duration::from_millis(1500);

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("socket_lb_cluster_ip_reached_by_socket_translation_alone", translation_alone),
        Case::new("socket_lb_one_shot_sync_writes_the_maps_and_follows_endpoints", one_shot_sync),
        Case::new("socket_lb_watch_mode_follows_endpoint_changes", watch_mode),
        Case::new("socket_lb_removed_backend_sockets_are_closed", removed_backend_sockets_closed),
        Case::new("socket_lb_unconnected_udp_replies_follow_backend_changes", unconnected_follows_changes),
        Case::new("socket_lb_client_ip_affinity_sticks_as_the_rules_do", affinity),
        Case::new("socket_lb_external_and_load_balancer_ips_answer_as_the_rules_do", external_addresses),
        Case::new("socket_lb_restart_drops_nothing", restart),
    ]
}

/// The test's own cgroup v2 and bpffs mounts, its child cgroup and the pin directory;
/// dropping it detaches, unpins, removes the cgroup and unmounts, whatever failed before.
struct Rig {
    dir: PathBuf,
    cgroup_mount: PathBuf,
    bpffs: PathBuf,
    cgroup: PathBuf,
    pins: PathBuf,
    mounted: Vec<PathBuf>,
}

static RIGS: AtomicU32 = AtomicU32::new(0);

impl Rig {
    fn new() -> Result<Rig, String> {
        let n = RIGS.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("svk{}-socklb-{n}", std::process::id()));
        let mut rig = Rig {
            cgroup_mount: dir.join("cgroup"),
            bpffs: dir.join("bpffs"),
            cgroup: dir.join("cgroup").join(format!("svk{}-socklb-{n}", std::process::id())),
            pins: dir.join("bpffs").join("svcproxy"),
            dir,
            mounted: vec![],
        };
        for d in [&rig.cgroup_mount, &rig.bpffs] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let cg = rig.cgroup_mount.to_string_lossy().into_owned();
        run_ok(&["mount", "-t", "cgroup2", "none", &cg], None)?;
        rig.mounted.push(rig.cgroup_mount.clone());
        let bpf = rig.bpffs.to_string_lossy().into_owned();
        run_ok(&["mount", "-t", "bpf", "bpf", &bpf], None)?;
        rig.mounted.push(rig.bpffs.clone());
        std::fs::create_dir(&rig.cgroup).map_err(|e| format!("creating cgroup {}: {e}", rig.cgroup.display()))?;
        Ok(rig)
    }

    fn procs(&self) -> String {
        self.cgroup.join("cgroup.procs").to_string_lossy().into_owned()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Err(e) = kernel::cleanup(&self.pins) {
            eprintln!("socket-lb rig: cleanup: {e}");
        }
        // The cgroup empties when the clients have exited: bounded retries.
        for _ in 0..50 {
            match std::fs::remove_dir(&self.cgroup) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        for m in self.mounted.iter().rev() {
            let m = m.to_string_lossy().into_owned();
            if let Err(e) = run_bounded(&["umount", &m], None, Duration::from_secs(10)) {
                eprintln!("socket-lb rig: umount {m}: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the client printed for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// The peer the socket reports (getpeername or recvfrom), the pod that answered.
    Ok { peer: SocketAddr, pod: String },
    Refused,
    Unreachable,
    Other(String),
}

/// Runs the client `count` times in `ns`, first moving itself into the cgroup whose
/// `cgroup.procs` is `procs` ("-": stays where it is).
fn client(ns: &Ns, procs: &str, mode: &str, dst: &str, count: u32) -> Result<Vec<Answer>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?.to_string_lossy().into_owned();
    let (port, n, ms) = (PORT.to_string(), count.to_string(), ATTEMPT.as_millis().to_string());
    let limit = ATTEMPT * 2 * count + Duration::from_secs(5);
    let out = ns.exec_limit(&[&exe, CLIENT_FLAG, procs, mode, dst, &port, &n, &ms], None, limit)?;
    if !out.status.success() {
        return Err(format!("socket-lb client failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let answers: Vec<Answer> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["ok", peer, pod, ..] => match peer.parse() {
                    Ok(peer) => Answer::Ok { peer, pod: pod.to_string() },
                    Err(_) => Answer::Other(l.to_string()),
                },
                ["refused"] => Answer::Refused,
                ["unreachable"] => Answer::Unreachable,
                _ => Answer::Other(l.to_string()),
            }
        })
        .collect();
    if answers.len() != count as usize {
        return Err(format!("client reported {} of {count} attempts: {answers:?}", answers.len()));
    }
    Ok(answers)
}

/// Client mode: `PROCS tcp|udp|udp-unconnected IP PORT COUNT TIMEOUT_MS`; one line per
/// attempt: `ok PEER POD`, `refused`, `unreachable`, `error WHAT`.
pub fn client_main_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(STREAM_FLAG) => stream_main(&args),
        Some(HOLD_FLAG) => hold_main(&args),
        Some(CLIENT_FLAG) => {}
        _ => return,
    }
    let parse = || -> Option<(String, String, SocketAddr, u32, Duration)> {
        let ip: IpAddr = args.get(4)?.parse().ok()?;
        let port: u16 = args.get(5)?.parse().ok()?;
        let count: u32 = args.get(6)?.parse().ok()?;
        let ms: u64 = args.get(7)?.parse().ok()?;
        Some((args.get(2)?.clone(), args.get(3)?.clone(), SocketAddr::new(ip, port), count.min(200), Duration::from_millis(ms.clamp(10, 10_000))))
    };
    let Some((procs, mode, dst, count, timeout)) = parse() else {
        eprintln!("usage: {CLIENT_FLAG} PROCS tcp|udp|udp-unconnected IP PORT COUNT TIMEOUT_MS");
        std::process::exit(2);
    };
    // Into the test's cgroup before any socket exists: the hooks see this process's calls.
    if procs != "-" {
        if let Err(e) = std::fs::write(&procs, "0") {
            eprintln!("joining {procs}: {e}");
            std::process::exit(1);
        }
    }
    let mut out = std::io::stdout().lock();
    for _ in 0..count {
        let line = match attempt(&mode, dst, timeout) {
            Ok((peer, reply)) => format!("ok {peer} {}", reply.split_whitespace().next().unwrap_or("?")),
            Err(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "refused".to_string(),
                std::io::ErrorKind::NetworkUnreachable | std::io::ErrorKind::HostUnreachable => "unreachable".to_string(),
                _ => format!("error {e}"),
            },
        };
        let _ = writeln!(out, "{line}");
    }
    std::process::exit(0);
}

/// One attempt: the peer the socket reports, and the server's line (`<pod> <client ip>`).
fn attempt(mode: &str, dst: SocketAddr, timeout: Duration) -> std::io::Result<(SocketAddr, String)> {
    let any: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let mut buf = [0u8; 512];
    match mode {
        "tcp" => {
            let mut s = TcpStream::connect_timeout(&dst, timeout)?;
            let peer = s.peer_addr()?;
            s.set_read_timeout(Some(timeout))?;
            let n = s.read(&mut buf)?;
            Ok((peer, String::from_utf8_lossy(&buf[..n]).into_owned()))
        }
        "udp" => {
            let s = UdpSocket::bind(any)?;
            s.connect(dst)?;
            let peer = s.peer_addr()?;
            s.set_read_timeout(Some(timeout))?;
            s.send(b"ping\n")?;
            let n = s.recv(&mut buf)?;
            Ok((peer, String::from_utf8_lossy(&buf[..n]).into_owned()))
        }
        "udp-unconnected" => {
            let s = UdpSocket::bind(any)?;
            s.set_read_timeout(Some(timeout))?;
            s.send_to(b"ping\n", dst)?;
            let (n, from) = s.recv_from(&mut buf)?;
            Ok((from, String::from_utf8_lossy(&buf[..n]).into_owned()))
        }
        other => Err(std::io::Error::other(format!("unknown mode {other}"))),
    }
}

/// Creates a hash map of the given shape and pins it at `path` (raw `bpf(2)`: what an
/// older build would have left there).
fn pin_hash_map(path: &Path, key: u32, value: u32, entries: u32) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt as _;
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_OBJ_PIN: libc::c_long = 6;
    const BPF_MAP_TYPE_HASH: u32 = 1;
    // union bpf_attr, zeroed past the fields set (the kernel checks that).
    let mut attr = [0u8; 128];
    for (i, v) in [BPF_MAP_TYPE_HASH, key, value, entries].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: bpf(2) reads `attr`, 128 bytes this frame owns.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_ptr(), attr.len()) };
    if fd < 0 {
        return Err(format!("BPF_MAP_CREATE: {}", std::io::Error::last_os_error()));
    }
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    let mut pin = [0u8; 128];
    pin[..8].copy_from_slice(&(cpath.as_ptr() as u64).to_ne_bytes());
    pin[8..12].copy_from_slice(&(fd as u32).to_ne_bytes());
    // SAFETY: as above; `cpath` outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_PIN, pin.as_ptr(), pin.len()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the fd was returned by BPF_MAP_CREATE above and is closed once.
    unsafe { libc::close(fd as libc::c_int) };
    if r < 0 {
        return Err(format!("BPF_OBJ_PIN {}: {err}", path.display()));
    }
    Ok(())
}

fn service(maps: &mut Maps, addr: &str, proto: Protocol, backend_id: u32, backends: &[SocketAddr]) -> Result<(), String> {
    for (slot, b) in backends.iter().enumerate() {
        maps.put_backend(&BackendKey { backend_id, slot: slot as u32 }, *b).map_err(|e| e.to_string())?;
    }
    let key = ServiceKey { addr: addr.parse().unwrap(), port: PORT, proto };
    let value = ServiceValue { backend_id, count: backends.len() as u16, no_backends: backends.is_empty(), affinity: None };
    maps.put_service(&key, &value).map_err(|e| e.to_string())
}

/// Root, the tools, and the programs in this build (else SKIPPED, saying which).
fn require(ctx: &Ctx, tools: &[&str]) -> CaseResult {
    ctx.require(tools)?;
    if !svcproxy::netfilter::bpf::object::built() {
        return Err(skip("svcproxy was built without clang: the socket-LB programs are not in this binary (apt-get install clang libbpf-dev, then rebuild)"));
    }
    Ok(())
}

/// Which pods answered `count` attempts of `mode` to `svc`, each seeing the Service as its peer.
fn answered_by(ctx: &Ctx, node: &Ns, procs: &str, mode: &str, svc: &str, count: u32) -> Result<std::collections::BTreeSet<String>, String> {
    let answers = client(node, procs, mode, svc, count)?;
    let want = SocketAddr::new(svc.parse().unwrap(), PORT);
    let mut pods = std::collections::BTreeSet::new();
    for ans in &answers {
        match ans {
            Answer::Ok { peer, pod } if *peer == want => {
                pods.insert(pod.clone());
            }
            other => return Err(format!("{mode} to {svc}: {other:?} (want an answer from {want}; all: {answers:?})")),
        }
    }
    ctx.log(format!("{mode} {svc}: {count} answers from {pods:?}"));
    Ok(pods)
}

fn translation_alone(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount"])?;
    let mut lab = Lab::new("socklb")?;
    let a = lab.add_pod("sl-a", "198.18.1.2", Some("fd00:18:1::2"))?;
    let b = lab.add_pod("sl-b", "198.18.1.3", Some("fd00:18:1::3"))?;
    for pod in [&a, &b] {
        pod.serve_tcp(POD_PORT)?;
        pod.serve_udp(POD_PORT)?;
    }
    let rig = Rig::new()?;
    // An earlier build's `lb_services` (8-byte values) pinned where the maps go: the
    // attach replaces it rather than loading programs the verifier would refuse with it.
    std::fs::create_dir_all(&rig.pins).map_err(|e| e.to_string())?;
    pin_hash_map(&rig.pins.join(svcproxy::netfilter::bpf::maps::SERVICES), 20, 8, 16)?;
    let done = kernel::attach(&rig.pins, &rig.cgroup).map_err(|e| e.to_string())?;
    ctx.log(format!("attached: {done:?}"));
    let info = aya::maps::MapData::from_pin(rig.pins.join(svcproxy::netfilter::bpf::maps::SERVICES)).and_then(|m| m.info()).map_err(|e| e.to_string())?;
    crate::ensure!(info.value_size() == 12 && info.max_entries() == 65536, "the misshapen pin was replaced: value {} entries {}", info.value_size(), info.max_entries());
    crate::ensure!(done.attached == 8 && done.replaced == 0, "every hook attached once: {done:?}");

    let mut maps = Maps::open(&rig.pins).map_err(|e| e.to_string())?;
    let v4: Vec<SocketAddr> = [a.ipv4, b.ipv4].iter().map(|ip| SocketAddr::new(IpAddr::V4(*ip), POD_PORT)).collect();
    let v6: Vec<SocketAddr> = [a.ipv6.unwrap(), b.ipv6.unwrap()].iter().map(|ip| SocketAddr::new(IpAddr::V6(*ip), POD_PORT)).collect();
    service(&mut maps, SVC4, Protocol::Tcp, 1, &v4)?;
    service(&mut maps, SVC4, Protocol::Udp, 2, &v4)?;
    service(&mut maps, SVC6, Protocol::Tcp, 3, &v6)?;
    service(&mut maps, SVC6, Protocol::Udp, 4, &v6)?;
    service(&mut maps, EMPTY4, Protocol::Tcp, 5, &[])?;
    let held = maps.services().map_err(|e| e.to_string())?;
    crate::ensure!(held.len() == 5, "five Service entries read back: {held:?}");

    let node = lab.node().clone();
    let procs = rig.procs();
    let t0 = Instant::now();
    for (mode, svc) in [("tcp", SVC4), ("udp", SVC4), ("udp-unconnected", SVC4), ("tcp", SVC6), ("udp", SVC6), ("udp-unconnected", SVC6)] {
        let answers = client(&node, &procs, mode, svc, 16)?;
        ctx.log(format!("{mode} {svc}: {answers:?}"));
        let want: SocketAddr = SocketAddr::new(svc.parse().unwrap(), PORT);
        let mut pods = std::collections::BTreeSet::new();
        for ans in &answers {
            match ans {
                Answer::Ok { peer, pod } => {
                    crate::ensure!(*peer == want, "{mode} to {svc}: the socket's peer is {peer}, not the Service's {want}");
                    pods.insert(pod.clone());
                }
                other => return Err(format!("{mode} to {svc}: {other:?} (all: {answers:?})").into()),
            }
        }
        // 16 random picks of two: both appear unless a 1-in-32768 chance.
        crate::ensure!(pods.len() == 2, "{mode} to {svc}: answered only by {pods:?}");
    }
    ctx.log(format!("translated checks took {:?}", t0.elapsed()));

    // A second attach (a restart, a newer binary) replaces every link, the maps kept.
    let again = kernel::attach(&rig.pins, &rig.cgroup).map_err(|e| e.to_string())?;
    crate::ensure!(again.attached == 8 && again.replaced == 8, "every hook replaced: {again:?}");
    let pods = answered_by(ctx, &node, &procs, "tcp", SVC4, 16)?;
    crate::ensure!(pods.len() == 2, "after the replacement both pods still answer: {pods:?}");

    let refused = client(&node, &procs, "tcp", EMPTY4, 3)?;
    crate::ensure!(refused.iter().all(|a| *a == Answer::Refused), "a Service with no endpoints refuses connect(): {refused:?}");

    // Controls: outside the cgroup nothing translates, and no route knows the ClusterIP.
    let outside = client(&node, "-", "tcp", SVC4, 2)?;
    crate::ensure!(outside.iter().all(|a| *a == Answer::Unreachable), "outside the cgroup the ClusterIP is unreachable: {outside:?}");

    let translated = maps.counter(false, Counter::Translated).map_err(|e| e.to_string())?;
    let translated6 = maps.counter(true, Counter::Translated).map_err(|e| e.to_string())?;
    let no_backend = maps.counter(false, Counter::NoBackend).map_err(|e| e.to_string())?;
    ctx.log(format!("counters: translated v4 {translated} v6 {translated6}, no backend v4 {no_backend}"));
    crate::ensure!(translated >= 64 && translated6 >= 48, "every translation counted: v4 {translated}, v6 {translated6}");
    crate::ensure!(no_backend == 3, "three refusals counted: {no_backend}");

    // Cleanup detaches: the same client in the cgroup now finds the ClusterIP unreachable,
    // and nothing of svcproxy's is left under the bpffs.
    drop(maps);
    let cleaned = kernel::cleanup(&rig.pins).map_err(|e| e.to_string())?;
    ctx.log(format!("cleanup: {cleaned:?}"));
    crate::ensure!(cleaned.links == 8 && cleaned.maps == 5 && cleaned.dir_removed, "cleanup removed every pin: {cleaned:?}");
    // The kernel frees an unpinned link in a work item: detached soon, not at once.
    let mut after = Vec::new();
    for _ in 0..20 {
        after = client(&node, &procs, "tcp", SVC4, 2)?;
        if after.iter().all(|a| *a == Answer::Unreachable) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::ensure!(after.iter().all(|a| *a == Answer::Unreachable), "after cleanup the programs are detached: {after:?}");
    crate::ensure!(!Path::new(&rig.pins).exists(), "the pin directory is gone");
    drop(rig);
    drop(lab);
    Ok(())
}

/// The cluster file of the `sync` cases: `sl-web` (TCP and UDP port 80, v4 and v6) with
/// the endpoints of `pods`, and `sl-empty` with none.
fn sync_cluster(pods: &[u8]) -> String {
    let mut s = svc("sl-web", SYNC_SVC4, vec![tcp("web", PORT), udp("dns", PORT)], pods.iter().map(|k| ep4(*k)).collect());
    s.cluster_ips.push(SYNC_SVC6.to_string());
    s.eps6 = pods.iter().map(|k| ep6(*k)).collect();
    let empty = svc("sl-empty", "198.19.255.11", vec![tcp("web", PORT)], vec![]);
    cluster_yaml(&[s, empty])
}

const SYNC_SVC4: &str = "198.19.255.10";
const SYNC_SVC6: &str = "fd00:19:ff::10";

/// `svcproxy sync --socket-lb` (iptables mode, one-shot) with the rig's cgroup and pin
/// directory: the ClusterIP, unrouted in the node namespace so no rule can be what
/// answers, is reached by TCP and UDP on both families, and conntrack holds no flow to it
/// (no DNAT happened); a dry run right after finds nothing to change; a second sync without one pod's endpoint moves every new socket
/// to the other pod and leaves no slot of the old generation.
fn one_shot_sync(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount", "conntrack", "iptables-nft", "iptables-nft-restore"])?;
    let mut lab = Lab::new("socklbsync")?;
    for k in [1, 2] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_tcp(crate::dataplane::EP_PORT)?;
        pod.serve_udp(5353)?;
    }
    let rig = Rig::new()?;
    let (svc4, svc6) = (SYNC_SVC4, SYNC_SVC6);
    let cluster = sync_cluster;
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let sync = |text: &str, dry: bool, code: i32| -> Result<String, String> {
        let path = crate::svcproxy::temp_yaml(text)?;
        let p = crate::svcproxy::path_str(&path).to_string();
        let mut args = sync_args(&p, dry);
        args.extend_from_slice(&["--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins]);
        let r = crate::svcproxy::run_expect(lab.node(), Backend::Nft, &args, code);
        let _ = std::fs::remove_file(&path);
        r
    };
    let pending = sync(&cluster(&[1, 2]), true, 1)?;
    ctx.log(format!("dry run before: {}", pending.split("# socket-lb").nth(1).unwrap_or("(no socket-lb section)")));
    crate::ensure!(pending.contains("+ 198.19.255.10:80/tcp -> 198.18.1.2:8080 198.18.2.2:8080"), "the dry run names the entries: {pending}");
    crate::ensure!(!rig.pins.exists(), "a dry run attaches nothing");
    sync(&cluster(&[1, 2]), false, 0)?;
    sync(&cluster(&[1, 2]), true, 0).map_err(|e| format!("a dry run right after the sync wants changes: {e}"))?;

    let node = lab.node().clone();
    let procs = rig.procs();
    for (mode, addr) in [("tcp", svc4), ("udp", svc4), ("tcp", svc6), ("udp-unconnected", svc6)] {
        let pods = answered_by(ctx, &node, &procs, mode, addr, 16)?;
        crate::ensure!(pods.len() == 2, "{mode} to {addr}: both pods answer: {pods:?}");
    }
    let refused = client(&node, &procs, "tcp", "198.19.255.11", 2)?;
    crate::ensure!(refused.iter().all(|a| *a == Answer::Refused), "no endpoints: refused: {refused:?}");
    // The rules are loaded, so conntrack tracks the node's flows: they name the pods, and
    // none was DNATed from the ClusterIP (the socket carried the pod's address from the start).
    for (family, addr, pod) in [("ipv4", svc4, pod_ip4(1)), ("ipv6", svc6, pod_ip6(1))] {
        let to_svc = node.run(&["conntrack", "-L", "-f", family, "-d", addr])?;
        let to_pod = node.run(&["conntrack", "-L", "-f", family, "-d", &pod])?;
        ctx.log(format!("conntrack to {addr}: {to_svc:?}; to {pod}: {} flow(s)", to_pod.lines().count()));
        crate::ensure!(to_svc.trim().is_empty(), "no flow to the ClusterIP {addr}: {to_svc}");
        crate::ensure!(to_pod.lines().count() > 0, "the pod's flows are tracked (the check above can see flows)");
    }

    sync(&cluster(&[2]), false, 0)?;
    for (mode, addr) in [("tcp", svc4), ("udp", svc6)] {
        let pods = answered_by(ctx, &node, &procs, mode, addr, 8)?;
        crate::ensure!(pods.iter().eq([pod_name(2)].iter()), "{mode} to {addr}: only pod2 is left: {pods:?}");
    }
    let maps = Maps::open(&rig.pins).map_err(|e| e.to_string())?;
    let held = svcproxy::socketlb::apply::read_held(&maps).map_err(|e| e.to_string())?;
    crate::ensure!(held.orphans.is_empty(), "no slot of the old generation is left: {:?}", held.orphans);
    crate::ensure!(held.services.len() == 5, "v4 and v6 TCP and UDP, and the empty Service: {:?}", held.services.keys());
    drop(maps);
    drop(rig);
    drop(lab);
    Ok(())
}

/// `svcproxy sync --watch --socket-lb` from a cluster file: the maps are written after the
/// first sync, and an endpoint removed from the file moves every new socket to the pod
/// left, within a bounded wait, rewriting only that Service's entries; `/metrics` shows
/// the programs' counters.
fn watch_mode(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount", "iptables-nft", "iptables-nft-restore"])?;
    let mut lab = Lab::new("socklbwatch")?;
    for k in [1, 2] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_tcp(crate::dataplane::EP_PORT)?;
        pod.serve_udp(5353)?;
    }
    let rig = Rig::new()?;
    let file = crate::svcproxy::temp_yaml(&sync_cluster(&[1, 2]))?;
    let p = crate::svcproxy::path_str(&file).to_string();
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let mut argv = sync_args(&p, false);
    argv.extend_from_slice(&[
        "--watch", "--poll-interval", "100ms", "--iptables-backend", "nft", "--min-sync-period", "0s",
        "--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0",
        "--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins,
    ]);
    let log = rig.dir.join("svcproxy.log");
    let node = lab.node().clone();
    let daemon = crate::watch_e2e::spawn_svcproxy(&node.name, &argv, &[], &log)?;
    let procs = rig.procs();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let waited = crate::watch_e2e::until("the first sync's socket-LB entries", Duration::from_secs(20), || {
        matches!(answered_by(ctx, &node, &procs, "tcp", SYNC_SVC4, 8), Ok(p) if p.len() == 2)
    })
    .map_err(|e| format!("{e}; svcproxy log:\n{}", log_text()))?;
    ctx.log(format!("both pods answer through the socket path {waited:?} after start"));
    let pods = answered_by(ctx, &node, &procs, "udp", SYNC_SVC6, 16)?;
    crate::ensure!(pods.len() == 2, "udp to {SYNC_SVC6}: both pods: {pods:?}");
    let read = || -> Result<svcproxy::socketlb::diff::Held, String> {
        let maps = Maps::open(&rig.pins).map_err(|e| e.to_string())?;
        svcproxy::socketlb::apply::read_held(&maps).map_err(|e| e.to_string())
    };
    let before = read()?;
    let empty_key = ServiceKey { addr: "198.19.255.11".parse().unwrap(), port: PORT, proto: Protocol::Tcp };
    let web_key = ServiceKey { addr: SYNC_SVC4.parse().unwrap(), port: PORT, proto: Protocol::Tcp };

    // Rewritten in one rename, so the poller never reads half a file.
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, sync_cluster(&[2])).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, &file).map_err(|e| e.to_string())?;
    let only2 = std::collections::BTreeSet::from([pod_name(2)]);
    let waited = crate::watch_e2e::until("every socket on pod2 after pod1's endpoint went", Duration::from_secs(20), || {
        matches!(answered_by(ctx, &node, &procs, "tcp", SYNC_SVC4, 8), Ok(p) if p == only2)
    })
    .map_err(|e| format!("{e}; svcproxy log:\n{}", log_text()))?;
    ctx.log(format!("pod1's endpoint gone from the maps {waited:?} after the file changed"));
    let pods = answered_by(ctx, &node, &procs, "udp-unconnected", SYNC_SVC6, 8)?;
    crate::ensure!(pods == only2, "udp to {SYNC_SVC6}: only pod2: {pods:?}");
    // The programs' counters on /metrics (the address the daemon logged).
    let metrics: SocketAddr = log_text()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics=").and_then(|a| a.parse().ok()))
        .ok_or_else(|| format!("no metrics address in the log:\n{}", log_text()))?;
    let body = crate::watch_e2e::in_netns(&node.name, move || crate::watch_e2e::http_get(metrics, "/metrics"))
        .join()
        .map_err(|_| "the metrics scrape panicked".to_string())??;
    let sample = |family: &str, result: &str| -> Option<f64> {
        let head = format!("svcproxy_socket_lb_sockets_total{{ip_family=\"{family}\",result=\"{result}\"}} ");
        body.lines().find_map(|l| l.strip_prefix(head.as_str()).and_then(|v| v.trim().parse().ok()))
    };
    ctx.log(format!("metrics: v4 translated {:?}, v6 translated {:?}, v6 reversed {:?}", sample("IPv4", "translated"), sample("IPv6", "translated"), sample("IPv6", "reversed")));
    crate::ensure!(sample("IPv4", "translated").is_some_and(|v| v >= 16.0), "IPv4 translations on /metrics");
    crate::ensure!(sample("IPv6", "reversed").is_some_and(|v| v >= 8.0), "IPv6 replies reversed on /metrics (unconnected UDP)");
    // pod1's removal loads the socket iterators right after the maps are written (so
    // maybe after the clients above saw it), and their counts join the programs' (no
    // socket was open to close).
    let destroyed = crate::watch_e2e::until("the closed sockets' count on /metrics", Duration::from_secs(10), || {
        // A kernel before 6.5 cannot close sockets: said once, and no count.
        if log_text().contains("closing sockets of removed backends unsupported") {
            ctx.log("this kernel has no bpf_sock_destroy: no closed-socket count expected");
            return true;
        }
        let scrape = crate::watch_e2e::in_netns(&node.name, move || crate::watch_e2e::http_get(metrics, "/metrics")).join();
        matches!(scrape, Ok(Ok(b)) if b.contains("svcproxy_socket_lb_sockets_total{ip_family=\"IPv4\",result=\"destroyed\"} 0"))
    });
    destroyed.map_err(|e| format!("{e}; svcproxy log:\n{}", log_text()))?;
    drop(daemon);
    let held = read()?;
    crate::ensure!(held.orphans.is_empty(), "no slot of an old generation is left: {:?}", held.orphans);
    // Only the changed Service's entries were written: the other keeps its generation.
    crate::ensure!(held.services.get(&empty_key) == before.services.get(&empty_key), "the unchanged Service's entry is untouched");
    crate::ensure!(held.services[&web_key].0.backend_id != before.services[&web_key].0.backend_id, "the changed Service has a new generation");
    ctx.log(format!("svcproxy log:\n{}", log_text()));
    crate::ensure!(log_text().contains("socket-lb programs attached"), "the attach is logged");
    let _ = std::fs::remove_file(&file);
    drop(rig);
    drop(lab);
    Ok(())
}

/// Stream client: `PROCS udp|udp-unconnected|tcp IP PORT COUNT [WAIT_MS]`
/// (`stream_client::run`; 300 ms for each answer unless WAIT_MS). Exits after COUNT sends.
fn stream_main(args: &[String]) -> ! {
    let parse = || -> Option<(String, String, SocketAddr, u32, u64)> {
        let ip: IpAddr = args.get(4)?.parse().ok()?;
        let port: u16 = args.get(5)?.parse().ok()?;
        let wait = match args.get(7) {
            Some(ms) => ms.parse::<u64>().ok().filter(|&ms| ms > 0)?.min(5000),
            None => 300,
        };
        Some((args.get(2)?.clone(), args.get(3)?.clone(), SocketAddr::new(ip, port), args.get(6)?.parse::<u32>().ok()?.min(300), wait))
    };
    let Some((procs, mode, dst, count, wait)) = parse() else {
        eprintln!("usage: {STREAM_FLAG} PROCS udp|udp-unconnected|tcp IP PORT COUNT [WAIT_MS]");
        std::process::exit(2);
    };
    if let Err(e) = crate::stream_client::run(&procs, &mode, dst, count, Duration::from_millis(wait)) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    std::process::exit(0)
}

/// Hold server: `IP PORT NAME`. Every connection is kept and each line it sends is
/// answered with `NAME`; exits when its parent (the test) is gone.
fn hold_main(args: &[String]) -> ! {
    let (Some(ip), Some(port), Some(name)) = (args.get(2).and_then(|a| a.parse::<IpAddr>().ok()), args.get(3).and_then(|a| a.parse::<u16>().ok()), args.get(4).cloned()) else {
        eprintln!("usage: {HOLD_FLAG} IP PORT NAME");
        std::process::exit(2);
    };
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(300));
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(0);
        }
    });
    let listener = std::net::TcpListener::bind(SocketAddr::new(ip, port)).unwrap_or_else(|e| {
        eprintln!("bind {ip}:{port}: {e}");
        std::process::exit(1)
    });
    // At most 64 connections at once (the case opens a handful).
    let open = std::sync::Arc::new(AtomicU32::new(0));
    for conn in listener.incoming() {
        let Ok(mut c) = conn else { continue };
        if open.load(Ordering::SeqCst) >= 64 {
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (name, open) = (name.clone(), open.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n) = c.read(&mut buf) {
                if n == 0 || c.write_all(format!("{name}\n").as_bytes()).is_err() {
                    break;
                }
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
    std::process::exit(0)
}

/// One stream client's lines: (ms, what).
fn stream_lines(path: &Path) -> Vec<(u128, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').and_then(|(t, rest)| Some((t.parse().ok()?, rest.to_string()))))
        .collect()
}

/// A pod (its own network namespace, its process in the test's cgroup) streams to a
/// ClusterIP over connected UDP (v4 and v6), unconnected UDP and TCP while the Service
/// has pod1 alone; `svcproxy sync --socket-lb` then replaces pod1 by pod2. pod1 keeps
/// serving, so only closing its sockets moves the UDP clients: each connected UDP
/// client's socket fails, it reconnects, and within 1 s of the sync every UDP client is
/// answered by pod2, and none by pod1 after it. The TCP connection drains on pod1, as
/// kube-proxy leaves TCP. A socket the same pod connected to pod1's own address is not the
/// socket path's, and is left alone.
fn removed_backend_sockets_closed(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount", "iptables-nft", "iptables-nft-restore"])?;
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(skip("no /sys/kernel/btf/vmlinux: the socket iterators need the kernel's BTF"));
    }
    let mut lab = Lab::new("socklbdestroy")?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?.to_string_lossy().into_owned();
    let mut children = Vec::new();
    for k in [1, 2] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_udp(5353)?;
        for ip in [pod_ip4(k), pod_ip6(k)] {
            children.push(pod.ns.spawn(&[&exe, HOLD_FLAG, &ip, &crate::dataplane::EP_PORT.to_string(), &pod_name(k)])?);
        }
    }
    let client_pod = lab.add_pod("cl", "198.18.9.2", Some("fd00:18:9::2"))?;
    let rig = Rig::new()?;
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let node = lab.node().clone();
    let sync = |pods: &[u8]| -> Result<String, String> {
        let path = crate::svcproxy::temp_yaml(&sync_cluster(pods))?;
        let p = crate::svcproxy::path_str(&path).to_string();
        let mut args = sync_args(&p, false);
        args.extend_from_slice(&["--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins]);
        let out = crate::svcproxy::run(&node, Backend::Nft, &args)?;
        let _ = std::fs::remove_file(&path);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("svcproxy sync failed ({}): {stderr}", out.status));
        }
        Ok(stderr)
    };
    sync(&[1])?;

    let streams = [("udp", SYNC_SVC4), ("udp", SYNC_SVC6), ("udp-unconnected", SYNC_SVC4), ("tcp", SYNC_SVC4)];
    let procs = rig.procs();
    let mut logs = Vec::new();
    for (i, (mode, addr)) in streams.iter().enumerate() {
        let log = rig.dir.join(format!("stream-{i}.log"));
        // 60 sends, 6 s: started, then the sync, then at least 1 s after it.
        children.push(client_pod.ns.spawn_logged(&[&exe, STREAM_FLAG, &procs, mode, addr, &PORT.to_string(), "60"], &log)?);
        logs.push(log);
    }
    // A control: a socket connected to pod1's own address, never translated, is not closed.
    let direct_log = rig.dir.join("stream-direct.log");
    let direct = client_pod.ns.spawn_logged(&[&exe, STREAM_FLAG, &procs, "udp", &pod_ip4(1), "5353", "60"], &direct_log)?;
    let all_on_pod1 = || logs.iter().chain([&direct_log]).all(|l| stream_lines(l).iter().filter(|(_, w)| *w == format!("ok {}", pod_name(1))).count() >= 5);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !all_on_pod1() {
        if Instant::now() > deadline {
            let seen: Vec<_> = logs.iter().map(|l| stream_lines(l)).collect();
            return Err(format!("the clients are not all answered by pod1 before the change: {seen:?}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let t_start = now_ms();
    let said = sync(&[2])?;
    let t_synced = now_ms();
    ctx.log(format!("sync removing pod1 took {} ms: {}", t_synced - t_start, said.trim()));
    if said.contains("this kernel has no bpf_sock_destroy") {
        return Err(skip("this kernel has no bpf_sock_destroy (Linux 6.5 or later): sockets of removed backends stay open"));
    }
    let closed: Option<u64> = said
        .lines()
        .find(|l| l.contains("removed backend(s) closed"))
        .and_then(|l| l.split("socket-lb: ").nth(1)?.split_whitespace().next()?.parse().ok());
    // Connected UDP v4 and v6: two sockets (the unconnected one has no peer; TCP drains).
    crate::ensure!(closed.is_some_and(|n| n >= 2), "the sync closed the connected UDP sockets on pod1: {said}");

    let deadline = Instant::now() + Duration::from_secs(10);
    let first_client = children.len() - streams.len();
    children.push(direct);
    for c in &mut children[first_client..] {
        while c.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                return Err("a stream client did not finish in time".to_string().into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let (pod1, pod2) = (format!("ok {}", pod_name(1)), format!("ok {}", pod_name(2)));
    for ((mode, addr), log) in streams.iter().zip(&logs) {
        let lines = stream_lines(log);
        let after: Vec<&(u128, String)> = lines.iter().filter(|(t, _)| *t >= t_synced).collect();
        ctx.log(format!("{mode} {addr}: {} lines after the sync: {:?}", after.len(), after.iter().take(6).collect::<Vec<_>>()));
        if *mode == "tcp" {
            let drained = !after.is_empty() && after.iter().all(|(_, w)| *w == pod1);
            crate::ensure!(drained, "tcp to {addr}: the established connection drains on pod1, uncut: {lines:?}");
            continue;
        }
        crate::ensure!(!after.iter().any(|(_, w)| *w == pod1), "{mode} to {addr}: answered by pod1 after the sync removed it: {lines:?}");
        let moved = after.iter().find(|(_, w)| *w == pod2).map(|(t, _)| t - t_synced);
        crate::ensure!(moved.is_some_and(|ms| ms <= 1000), "{mode} to {addr}: pod2 answers within 1 s of the sync (after {moved:?} ms): {lines:?}");
        let ahead = after.iter().rev().take(10).filter(|(_, w)| *w == pod2).count();
        crate::ensure!(ahead == 10, "{mode} to {addr}: pod2 answers every send at the end: {lines:?}");
        if *mode != "udp-unconnected" {
            // The socket itself failed: the client saw it and connected again.
            let failed = lines.iter().any(|(t, w)| *t >= t_start && w.starts_with("err") && !w.starts_with("err timeout"));
            crate::ensure!(failed, "{mode} to {addr}: the socket on pod1 was closed under the client: {lines:?}");
        }
    }
    let lines = stream_lines(&direct_log);
    let untouched = lines.len() == 60 && lines.iter().all(|(_, w)| *w == pod1);
    crate::ensure!(untouched, "the socket connected to pod1's address directly is left alone: {lines:?}");
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(rig);
    drop(lab);
    Ok(())
}

/// An unconnected UDP socket keeps its pick per datagram without rewriting its record,
/// so the record must still follow a change: one socket sends to a ClusterIP every 100 ms
/// (each reply checked to come from the Service address: recvmsg's reversal) while the
/// maps change under it. First the Service's generation keeps its id while its one slot
/// is rewritten from pod a to pod b (what a generation id handed out again after a restart
/// looks like to a socket that kept its pick); then a new generation holds pod a again.
/// Within 1 s of each change the other pod answers, and no reply ever shows a pod's own
/// address.
fn unconnected_follows_changes(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount"])?;
    let mut lab = Lab::new("socklbkeep")?;
    let a = lab.add_pod("sl-ka", "198.18.1.2", None)?;
    let b = lab.add_pod("sl-kb", "198.18.1.3", None)?;
    for pod in [&a, &b] {
        pod.serve_udp(POD_PORT)?;
    }
    let rig = Rig::new()?;
    kernel::attach(&rig.pins, &rig.cgroup).map_err(|e| e.to_string())?;
    let mut maps = Maps::open(&rig.pins).map_err(|e| e.to_string())?;
    let (to_a, to_b) = (SocketAddr::new(IpAddr::V4(a.ipv4), POD_PORT), SocketAddr::new(IpAddr::V4(b.ipv4), POD_PORT));
    service(&mut maps, SVC4, Protocol::Udp, 7, &[to_a])?;

    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?.to_string_lossy().into_owned();
    let log = rig.dir.join("keep.log");
    // 50 sends, 5 s: the two changes and at least 1 s after each.
    let mut child = lab.node().spawn_logged(&[&exe, STREAM_FLAG, &rig.procs(), "udp-unconnected", SVC4, &PORT.to_string(), "50"], &log)?;
    let answered_since = |pod: &str, since: u128| stream_lines(&log).iter().filter(|(t, w)| *t >= since && *w == format!("ok {pod}")).count();
    let wait_for = |pod: &str, since: u128, what: &str| -> Result<u128, String> {
        let deadline = Instant::now() + Duration::from_secs(3);
        while answered_since(pod, since) < 3 {
            if Instant::now() > deadline {
                return Err(format!("{what}: {pod} does not answer the socket: {:?}", stream_lines(&log)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let first = stream_lines(&log).iter().find(|(t, w)| *t >= since && *w == format!("ok {pod}")).map_or(0, |(t, _)| *t);
        Ok(first - since)
    };
    wait_for(&a.name, 0, "before any change")?;

    // The same generation id and slot, another backend.
    let t1 = now_ms();
    maps.put_backend(&BackendKey { backend_id: 7, slot: 0 }, to_b).map_err(|e| e.to_string())?;
    let moved = wait_for(&b.name, t1, "slot 0 of generation 7 rewritten")?;
    ctx.log(format!("the reused generation's new backend answered after {moved} ms"));
    crate::ensure!(moved <= 1000, "pod b answers within 1 s of the slot's rewrite ({moved} ms)");

    // A new generation: pod a again.
    let t2 = now_ms();
    service(&mut maps, SVC4, Protocol::Udp, 8, &[to_a])?;
    maps.delete_backend(&BackendKey { backend_id: 7, slot: 0 }).map_err(|e| e.to_string())?;
    let back = wait_for(&a.name, t2, "generation 8")?;
    ctx.log(format!("the new generation's backend answered after {back} ms"));
    crate::ensure!(back <= 1000, "pod a answers within 1 s of the new generation ({back} ms)");

    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the stream client did not finish in time".to_string().into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = stream_lines(&log);
    ctx.log(format!("{} lines: {:?}", lines.len(), lines.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>()));
    crate::ensure!(lines.len() == 50, "the client reported every send: {lines:?}");
    let unreversed: Vec<_> = lines.iter().filter(|(_, w)| w.contains("a reply from")).collect();
    crate::ensure!(unreversed.is_empty(), "every reply is seen from the Service address: {unreversed:?}");
    // From a pod's first answer after a change to the next change, no other pod answers
    // (a late reply, on a loaded host, is a timeout, not a wrong answer).
    let (ok_a, ok_b) = (format!("ok {}", a.name), format!("ok {}", b.name));
    let first = |pod: &str, since: u128| lines.iter().find(|(t, w)| *t >= since && w == pod).map_or(u128::MAX, |(t, _)| *t);
    let (b_from, a_from) = (first(&ok_b, t1), first(&ok_a, t2));
    let stray: Vec<_> = lines
        .iter()
        .filter(|(t, w)| (*t >= b_from && *t < t2 && w.starts_with("ok") && *w != ok_b) || (*t >= a_from && w.starts_with("ok") && *w != ok_a) || (*t < t1 && *w != ok_a && !w.starts_with("err timeout")))
        .collect();
    crate::ensure!(stray.is_empty(), "the socket keeps one pick while the set is unchanged: {stray:?} (all: {lines:?})");
    let reversed = maps.counter(false, Counter::Reversed).map_err(|e| e.to_string())?;
    let ok = lines.iter().filter(|(_, w)| w.starts_with("ok")).count() as u64;
    crate::ensure!(reversed >= ok, "each answered datagram counted as reversed: {reversed} < {ok}");
    drop(maps);
    drop(rig);
    drop(lab);
    Ok(())
}

const STICKY4: &str = "198.19.255.40";
const STICKY6: &str = "fd00:19:ff::40";
const PLAIN4: &str = "198.19.255.41";
const BRIEF4: &str = "198.19.255.42";
/// The client pods of the affinity case, each in its own network namespace.
const CLIENTS: [(&str, &str, &str); 2] = [("sl-ca", "198.18.101.2", "fd00:18:101::2"), ("sl-cb", "198.18.102.2", "fd00:18:102::2")];

/// `sl-sticky` (ClientIP affinity, 10800 s; TCP and UDP port 80, v4 and v6), `sl-plain`
/// (the same endpoints, no affinity) and `sl-brief` (affinity for 1 s, TCP v4), each with
/// the endpoints of `pods`.
fn affinity_cluster(pods: &[u8]) -> String {
    let mut sticky = svc("sl-sticky", STICKY4, vec![tcp("web", PORT), udp("dns", PORT)], pods.iter().map(|k| ep4(*k)).collect());
    sticky.cluster_ips.push(STICKY6.to_string());
    sticky.eps6 = pods.iter().map(|k| ep6(*k)).collect();
    sticky.affinity = true;
    let plain = svc("sl-plain", PLAIN4, vec![tcp("web", PORT)], pods.iter().map(|k| ep4(*k)).collect());
    let mut brief = svc("sl-brief", BRIEF4, vec![tcp("web", PORT)], pods.iter().map(|k| ep4(*k)).collect());
    brief.affinity = true;
    let brief = cluster_yaml(&[brief]).replace("timeoutSeconds: 10800", "timeoutSeconds: 1");
    format!("{}---\n{brief}", cluster_yaml(&[sticky, plain]))
}

/// The one pod that answered every attempt, or why not.
fn one_pod(ctx: &Ctx, ns: &Ns, procs: &str, mode: &str, svc: &str, count: u32) -> Result<String, String> {
    let pods = answered_by(ctx, ns, procs, mode, svc, count)?;
    match pods.len() {
        1 => Ok(pods.into_iter().next().expect("one")),
        _ => Err(format!("{mode} to {svc} from {}: {count} attempts answered by {pods:?}, not one pod", ns.name)),
    }
}

/// The affinity map's entries of one Service key, per client netns cookie.
fn affinity_of(pins: &Path, key: &ServiceKey) -> Result<std::collections::BTreeMap<u64, AffinityValue>, String> {
    let maps = Maps::open(pins).map_err(|e| e.to_string())?;
    Ok(maps.affinity().map_err(|e| e.to_string())?.into_iter().filter(|(k, _)| k.service == *key).map(|(k, v)| (k.netns_cookie, v)).collect())
}

/// Writes one affinity entry as the programs would (svcproxy itself never does).
fn forge_affinity(pins: &Path, key: &AffinityKey, value: &AffinityValue) -> Result<(), String> {
    let data = aya::maps::MapData::from_pin(pins.join(svcproxy::netfilter::bpf::maps::AFFINITY)).map_err(|e| e.to_string())?;
    let mut map: aya::maps::HashMap<aya::maps::MapData, [u8; 32], [u8; 40]> =
        aya::maps::Map::from_map_data(data).map_err(|e| e.to_string())?.try_into().map_err(|e: aya::maps::MapError| e.to_string())?;
    map.insert(key.encode(), value.encode(), 0).map_err(|e| e.to_string())
}

fn pod_of(addr: SocketAddr) -> String {
    (1..=3u8).find(|k| addr.ip().to_string() == pod_ip4(*k) || addr.ip().to_string() == pod_ip6(*k)).map(pod_name).unwrap_or_else(|| addr.to_string())
}

/// `ClientIP` affinity through the socket path, against the rules alone: three pods
/// behind `sl-sticky`, two client pods. With the rules only, and then with
/// `--socket-lb` (no conntrack flow to the ClusterIP: the socket path answered), every
/// client lands on one pod for TCP, UDP (connected and not), v4 and v6, while the
/// Service without affinity spreads; each client's entry names the pod that answered.
/// A forged fresh entry is followed (found by address in the set); once its pod leaves
/// the Service it is not, and a client whose pod stayed keeps it across the change.
/// With a 1 s timeout, uses 300 ms apart keep one pod for longer than the timeout
/// (each use moves the entry's time, its backend kept); after 1.5 s idle the entry is rewritten (the pick then may
/// differ, which is logged, not asserted).
fn affinity(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount", "conntrack", "iptables-nft", "iptables-nft-restore"])?;
    let mut lab = Lab::new("socklbaff")?;
    for k in [1, 2, 3] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_tcp(crate::dataplane::EP_PORT)?;
        pod.serve_udp(5353)?;
    }
    let mut clients = Vec::new();
    for (name, v4, v6) in CLIENTS {
        clients.push(lab.add_pod(name, v4, Some(v6))?.ns.clone());
    }
    let rig = Rig::new()?;
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let sync = |text: &str, socket_lb: bool| -> Result<String, String> {
        let path = crate::svcproxy::temp_yaml(text)?;
        let p = crate::svcproxy::path_str(&path).to_string();
        let mut args = sync_args(&p, false);
        if socket_lb {
            args.extend_from_slice(&["--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins]);
        }
        let r = crate::svcproxy::run_expect(lab.node(), Backend::Nft, &args, 0);
        let _ = std::fs::remove_file(&path);
        r
    };
    const N: u32 = 12;
    let sticky_checks = [("tcp", STICKY4), ("udp", STICKY4), ("tcp", STICKY6), ("udp", STICKY6)];

    // The rules alone (no program attached; the client stays outside the cgroup).
    sync(&affinity_cluster(&[1, 2, 3]), false)?;
    for ns in &clients {
        for (mode, addr) in sticky_checks {
            one_pod(ctx, ns, "-", mode, addr, N).map_err(|e| format!("rules only: {e}"))?;
        }
        let spread = answered_by(ctx, ns, "-", "tcp", PLAIN4, N)?;
        crate::ensure!(spread.len() >= 2, "rules only: the Service without affinity spreads: {spread:?}");
    }

    // The socket path: the same answers, and no flow to a ClusterIP.
    sync(&affinity_cluster(&[1, 2, 3]), true)?;
    lab.conntrack_flush()?;
    let procs = rig.procs();
    let mut first = Vec::new();
    for ns in &clients {
        let mut got = Vec::new();
        for (mode, addr) in sticky_checks.iter().copied().chain([("udp-unconnected", STICKY4), ("udp-unconnected", STICKY6)]) {
            got.push(one_pod(ctx, ns, &procs, mode, addr, N).map_err(|e| format!("socket path: {e}"))?);
        }
        // Connected and unconnected UDP sockets of one pod share its entry.
        crate::ensure!(got[1] == got[4] && got[3] == got[5], "{}: UDP sockets of one pod went to {got:?}", ns.name);
        let spread = answered_by(ctx, ns, &procs, "tcp", PLAIN4, N)?;
        crate::ensure!(spread.len() >= 2, "socket path: the Service without affinity spreads: {spread:?}");
        first.push(got[0].clone());
    }
    for (family, addr) in [("ipv4", STICKY4), ("ipv6", STICKY6)] {
        let to_svc = lab.node().run(&["conntrack", "-L", "-f", family, "-d", addr])?;
        crate::ensure!(to_svc.trim().is_empty(), "no flow to the ClusterIP {addr}: the socket path answered, not the rules: {to_svc}");
    }
    let tcp4 = ServiceKey { addr: STICKY4.parse().unwrap(), port: PORT, proto: Protocol::Tcp };
    let entries = affinity_of(&rig.pins, &tcp4)?;
    ctx.log(format!("affinity entries of {STICKY4}/tcp: {entries:?}; first picks {first:?}"));
    crate::ensure!(entries.len() == 2, "one entry per client pod (netns): {entries:?}");
    let named: std::collections::BTreeSet<String> = entries.values().map(|v| pod_of(v.backend)).collect();
    let picked: std::collections::BTreeSet<String> = first.iter().cloned().collect();
    crate::ensure!(named == picked, "the entries name the pods that answered: {named:?} vs {picked:?}");

    // `trace --live --socket-lb` reads the same maps: the backends, the affinity, and both
    // clients pinned, each entry followed.
    let state = crate::svcproxy::temp_yaml(&affinity_cluster(&[1, 2, 3]))?;
    let traced = crate::svcproxy::run_expect(
        lab.node(),
        Backend::Nft,
        &[
            "trace", "--from", crate::svcproxy::path_str(&state), "--live", "--iptables-backend", "nft", "--socket-lb", "--socket-lb-pin-dir", &pins,
            "--src", CLIENTS[0].1, "--dst", &format!("{STICKY4}:{PORT}"), "--output", "json",
        ],
        0,
    );
    let _ = std::fs::remove_file(&state);
    let traced = traced?;
    let traced: serde_json::Value = serde_json::from_str(&traced).map_err(|e| format!("trace --live JSON: {e}: {traced}"))?;
    let s = &traced["socket_lb"];
    ctx.log(format!("trace --live --socket-lb: {s}"));
    crate::ensure!(s["source"] == "maps" && s["affinity_seconds"] == 10800 && s["branches"].as_array().is_some_and(|b| b.len() == 3), "the live trace reads the maps: {traced}");
    let pinned = s["pinned"].as_array().cloned().unwrap_or_default();
    crate::ensure!(pinned.len() == 2 && pinned.iter().all(|p| p["followed"] == true), "both clients pinned and followed: {pinned:?}");

    // Client A's netns cookie: the one entry of a Service only A has used.
    let (a_ns, b_ns) = (&clients[0], &clients[1]);
    let brief4 = ServiceKey { addr: BRIEF4.parse().unwrap(), port: PORT, proto: Protocol::Tcp };
    one_pod(ctx, a_ns, &procs, "tcp", BRIEF4, 1)?;
    let only_a = affinity_of(&rig.pins, &brief4)?;
    crate::ensure!(only_a.len() == 1, "one client, one entry: {only_a:?}");
    let cookie_a = *only_a.keys().next().expect("one");
    let value_a = *entries.get(&cookie_a).ok_or_else(|| format!("A's cookie {cookie_a} has no entry of {STICKY4}/tcp: {entries:?}"))?;
    crate::ensure!(pod_of(value_a.backend) == first[0], "A's entry names A's pod: {value_a:?}, {}", first[0]);
    // A fresh entry naming another pod, from no generation (found by its address): followed.
    let other = (1..=3u8).map(pod_name).find(|p| *p != first[0]).expect("three pods");
    let other_ip = pod_ip4((1..=3u8).find(|k| pod_name(*k) == other).expect("a pod"));
    let forged = AffinityValue { backend_id: 0, slot: 0, backend: SocketAddr::new(other_ip.parse().unwrap(), crate::dataplane::EP_PORT), ..value_a };
    forge_affinity(&rig.pins, &AffinityKey { netns_cookie: cookie_a, service: tcp4 }, &forged)?;
    let a_now = one_pod(ctx, a_ns, &procs, "tcp", STICKY4, 4)?;
    crate::ensure!(a_now == other, "a fresh entry naming {other} is followed: {a_now}");
    let a_pod = a_now;
    let b_pod = one_pod(ctx, b_ns, &procs, "tcp", STICKY4, 4)?;

    // A's pod leaves the Service (it still serves): A moves to one other pod, B keeps its
    // own pod unless it was A's.
    let gone: u8 = (1..=3u8).find(|k| pod_name(*k) == a_pod).expect("a pod of the three");
    let left: Vec<u8> = (1..=3u8).filter(|k| *k != gone).collect();
    sync(&affinity_cluster(&left), true)?;
    let a_after = one_pod(ctx, a_ns, &procs, "tcp", STICKY4, N)?;
    crate::ensure!(a_after != a_pod, "the entry naming {a_pod}, no longer in the Service, is not followed: {a_after}");
    let b_after = one_pod(ctx, b_ns, &procs, "tcp", STICKY4, N)?;
    if b_pod != a_pod {
        crate::ensure!(b_after == b_pod, "{b_pod} is still in the Service: B keeps it across the change: {b_after}");
    }
    let a6 = one_pod(ctx, a_ns, &procs, "udp", STICKY6, N)?;
    crate::ensure!(a6 != a_pod, "v6: {a_pod} left the Service: {a6}");

    // A 1 s timeout: uses 300 ms apart keep one pod for 2.4 s.
    let mut seen = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    // The longest time two consecutive uses can be apart: from the start of one attempt
    // to the end of the next (a stalled host may stretch it past the timeout).
    let (mut widest, mut last_start) = (Duration::ZERO, None::<Instant>);
    let mut first_use = None;
    for i in 0..8 {
        let start = Instant::now();
        seen.insert(one_pod(ctx, a_ns, &procs, "tcp", BRIEF4, 1)?);
        if let Some(prev) = last_start {
            widest = widest.max(prev.elapsed());
        }
        last_start = Some(start);
        if i == 0 {
            first_use = affinity_of(&rig.pins, &brief4)?.get(&cookie_a).copied();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let span = t0.elapsed();
    let before = affinity_of(&rig.pins, &brief4)?;
    if widest < Duration::from_millis(950) {
        crate::ensure!(seen.len() == 1, "each use refreshes the 1 s entry: {seen:?} over {span:?}");
        // The entry that kept the pod is the first use's, its time moved by the uses that
        // followed it (refreshed in place, the backend unchanged).
        let (first_use, last) = (
            first_use.ok_or_else(|| "no entry of A after its first use".to_string())?,
            before.get(&cookie_a).copied().ok_or_else(|| "no entry of A after its uses".to_string())?,
        );
        crate::ensure!(
            last.backend == first_use.backend && last.last_used_ns >= first_use.last_used_ns + 1_500_000_000,
            "the uses refreshed the entry's time: after the first {first_use:?}, after the last {last:?}"
        );
    } else {
        ctx.log(format!("two uses were up to {widest:?} apart (a loaded host): the stickiness over 1 s is not asserted"));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let again = one_pod(ctx, a_ns, &procs, "tcp", BRIEF4, 1)?;
    let after = affinity_of(&rig.pins, &brief4)?;
    ctx.log(format!("1 s affinity: {seen:?} for {span:?}; after 1.5 s idle: {again} (a new pick may differ)"));
    let refreshed = after.iter().any(|(c, v)| before.get(c).is_some_and(|old| v.last_used_ns >= old.last_used_ns + 1_400_000_000) && pod_of(v.backend) == again);
    crate::ensure!(refreshed, "the stale entry was rewritten by the next use: before {before:?}, after {after:?}");
    drop(rig);
    drop(lab);
    Ok(())
}

const EXT_CLUSTER4: &str = "198.19.255.60";
const EXT_IP4: &str = "198.19.2.60";
const LB_CLUSTER4: &str = "198.19.255.61";
const LB_IP4: &str = "198.19.2.61";
const FW_CLUSTER4: &str = "198.19.255.62";
const FW_IP4: &str = "198.19.2.62";

/// `sl-ext`: an external IP with `externalTrafficPolicy: Local`, pod2 on another node (so
/// only the short-circuit of local traffic reaches it); `sl-lb`: a load-balancer IP;
/// `sl-fw`: a load-balancer IP whose source ranges leave the lab's pods out. TCP and UDP.
fn external_cluster() -> String {
    let both = || vec![tcp("web", PORT), udp("dns", PORT)];
    let mut ext = svc("sl-ext", EXT_CLUSTER4, both(), vec![ep4(1), ep4(2).on(crate::dataplane::OTHER_NODE)]);
    ext.external_ips = vec![EXT_IP4.to_string()];
    ext.etp_local = true;
    let mut lb = svc("sl-lb", LB_CLUSTER4, both(), vec![ep4(1), ep4(2)]);
    lb.ty = "LoadBalancer";
    lb.lb_ips = vec![LB_IP4.to_string()];
    let mut fw = svc("sl-fw", FW_CLUSTER4, both(), vec![ep4(1), ep4(2)]);
    fw.ty = "LoadBalancer";
    fw.lb_ips = vec![FW_IP4.to_string()];
    fw.source_ranges = vec!["203.0.113.0/24".to_string()];
    cluster_yaml(&[ext, lb, fw])
}

/// In iptables and nftables mode: a client pod (its own network namespace) reaches an
/// external IP and a load-balancer IP over TCP, connected and unconnected UDP: with the
/// rules alone (the client outside the cgroup) and then with `--socket-lb` (inside it) the same pods answer (with
/// `externalTrafficPolicy: Local`, both: local traffic is short-circuited to every
/// endpoint), each reply seen from the Service address, and with the socket path no
/// conntrack flow to either address. A load-balancer IP whose source ranges leave the
/// pod out has no map entry and is dropped by the rules either way.
fn external_addresses(ctx: &mut Ctx) -> CaseResult {
    require(ctx, &["ip", "mount", "umount", "conntrack", "iptables-nft", "iptables-nft-restore", "nft"])?;
    for mode in ["iptables", "nftables"] {
        external_addresses_in(ctx, mode)?;
    }
    Ok(())
}

/// [`external_addresses`] in one proxy mode (its own lab: no other mode's rules).
fn external_addresses_in(ctx: &mut Ctx, proxy_mode: &str) -> CaseResult {
    ctx.log(format!("{proxy_mode} mode"));
    let mut lab = Lab::new(if proxy_mode == "nftables" { "socklbextn" } else { "socklbext" })?;
    for k in [1, 2] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_tcp(crate::dataplane::EP_PORT)?;
        pod.serve_udp(5353)?;
    }
    let client_ns = lab.add_pod("sl-cx", "198.18.103.2", Some("fd00:18:103::2"))?.ns.clone();
    let rig = Rig::new()?;
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let sync_as = |socket_lb: bool, dry: bool, code: i32| -> Result<String, String> {
        let path = crate::svcproxy::temp_yaml(&external_cluster())?;
        let p = crate::svcproxy::path_str(&path).to_string();
        let mut args = sync_args(&p, dry);
        args.extend_from_slice(&["--proxy-mode", proxy_mode]);
        if socket_lb {
            args.extend_from_slice(&["--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins]);
        }
        let r = crate::svcproxy::run_expect(lab.node(), Backend::Nft, &args, code);
        let _ = std::fs::remove_file(&path);
        r
    };
    let checks: Vec<(&str, &str)> = ["tcp", "udp", "udp-unconnected"].iter().flat_map(|m| [(*m, EXT_IP4), (*m, LB_IP4)]).collect();
    const N: u32 = 16;
    let both: std::collections::BTreeSet<String> = [pod_name(1), pod_name(2)].into();

    let sync = |socket_lb: bool| sync_as(socket_lb, false, 0);
    sync(false)?;
    // The dry run lists the external addresses' entries, and not the source-ranged one.
    let pending = sync_as(true, true, 1)?;
    for want in ["+ 198.19.2.60:80/tcp -> 198.18.1.2:8080 198.18.2.2:8080", "+ 198.19.2.61:80/udp -> 198.18.1.2:5353 198.18.2.2:5353"] {
        crate::ensure!(pending.contains(want), "the dry run names {want}: {pending}");
    }
    crate::ensure!(!pending.contains(FW_IP4), "no entry for {FW_IP4}: {pending}");
    let mut rules = Vec::new();
    for (mode, addr) in &checks {
        let pods = answered_by(ctx, &client_ns, "-", mode, addr, N).map_err(|e| format!("rules only: {e}"))?;
        crate::ensure!(pods == both, "rules only: {mode} to {addr}: local traffic short-circuited to both pods: {pods:?}");
        rules.push(pods);
    }
    let fw = client(&client_ns, "-", "tcp", FW_IP4, 1)?;
    crate::ensure!(!matches!(fw[0], Answer::Ok { .. }), "rules only: the source ranges drop the pod's traffic: {fw:?}");

    sync(true)?;
    lab.conntrack_flush()?;
    let procs = rig.procs();
    for ((mode, addr), by_rules) in checks.iter().zip(&rules) {
        let pods = answered_by(ctx, &client_ns, &procs, mode, addr, N).map_err(|e| format!("socket path: {e}"))?;
        crate::ensure!(pods == *by_rules, "socket path: {mode} to {addr}: {pods:?}, the rules: {by_rules:?}");
    }
    for addr in [EXT_IP4, LB_IP4] {
        let to_svc = lab.node().run(&["conntrack", "-L", "-f", "ipv4", "-d", addr])?;
        crate::ensure!(to_svc.trim().is_empty(), "no flow to {addr}: the socket path answered, not the rules: {to_svc}");
    }
    let to_pod = lab.node().run(&["conntrack", "-L", "-f", "ipv4", "-d", &pod_ip4(1)])?;
    crate::ensure!(to_pod.lines().count() > 0, "the pods' flows are tracked (the check above can see flows)");
    let held = svcproxy::socketlb::apply::read_held(&Maps::open(&rig.pins).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let key = |addr: &str, proto| ServiceKey { addr: addr.parse().unwrap(), port: PORT, proto };
    for addr in [EXT_IP4, LB_IP4] {
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let entry = held.services.get(&key(addr, proto)).and_then(|(_, b)| b.clone());
            crate::ensure!(entry.is_some_and(|b| b.len() == 2), "{addr}/{proto:?} holds both pods: {:?}", held.services.keys());
        }
    }
    crate::ensure!(!held.services.contains_key(&key(FW_IP4, Protocol::Tcp)), "a source-ranged load-balancer IP is left to the rules: {:?}", held.services.keys());
    let fw = client(&client_ns, &procs, "tcp", FW_IP4, 1)?;
    crate::ensure!(!matches!(fw[0], Answer::Ok { .. }), "socket path: not translated, so the rules drop it: {fw:?}");
    ctx.log(format!("socket path and rules agree on {} checks; {FW_IP4}: {fw:?}", checks.len()));
    drop(rig);
    drop(lab);
    Ok(())
}

/// A fresh stream client of `count` sends (a new socket, `connect()` for TCP and
/// connected UDP), run to its end: the pods that answered, or why not every send was.
fn fresh_stream(rig: &Rig, ns: &Ns, mode: &str, addr: &str, count: u32) -> Result<std::collections::BTreeSet<String>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?.to_string_lossy().into_owned();
    let n = RIGS.fetch_add(1, Ordering::SeqCst);
    let log = rig.dir.join(format!("fresh-{n}.log"));
    let mut child = ns.spawn_logged(&[&exe, STREAM_FLAG, &rig.procs(), mode, addr, &PORT.to_string(), &count.to_string()], &log)?;
    let deadline = Instant::now() + Duration::from_millis(500) * count + Duration::from_secs(5);
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{mode} to {addr}: a fresh client did not finish"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = stream_lines(&log);
    let pods: std::collections::BTreeSet<String> = lines.iter().filter_map(|(_, w)| w.strip_prefix("ok ").map(str::to_string)).collect();
    if lines.len() != count as usize || lines.iter().any(|(_, w)| !w.starts_with("ok ")) {
        return Err(format!("{mode} to {addr}: a fresh client's sends not all answered: {lines:?}"));
    }
    Ok(pods)
}

/// A restart drops nothing: `svcproxy sync --watch --socket-lb` is running; a client pod
/// keeps a TCP connection, a connected UDP socket and an unconnected one to a ClusterIP,
/// each sending every 100 ms; svcproxy is stopped (SIGTERM) and a new process started
/// with the same settings (the pinned maps and links stay). Every send before, during and
/// after the restart is answered, each socket by the same pod throughout (the
/// unconnected one seeing the Service as the reply's source); new sockets connect while
/// no svcproxy runs and after the new one synced; no flow to the ClusterIP is tracked
/// (the socket path, not the rules, answered them all); the new process's first sync
/// writes no entry (it found the maps as wanted).
fn restart(ctx: &mut Ctx) -> CaseResult {
    const SENDS: usize = 300;
    require(ctx, &["ip", "mount", "umount", "conntrack", "iptables-nft", "iptables-nft-restore"])?;
    let mut lab = Lab::new("socklbrestart")?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?.to_string_lossy().into_owned();
    let mut children = Vec::new();
    for k in [1, 2] {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_udp(5353)?;
        children.push(pod.ns.spawn(&[&exe, HOLD_FLAG, &pod_ip4(k), &crate::dataplane::EP_PORT.to_string(), &pod_name(k)])?);
    }
    let client_pod = lab.add_pod("sl-cr", "198.18.104.2", Some("fd00:18:104::2"))?;
    let rig = Rig::new()?;
    let file = crate::svcproxy::temp_yaml(&sync_cluster(&[1, 2]))?;
    let p = crate::svcproxy::path_str(&file).to_string();
    let (cg, pins) = (rig.cgroup.to_string_lossy().into_owned(), rig.pins.to_string_lossy().into_owned());
    let mut argv = sync_args(&p, false);
    argv.extend_from_slice(&[
        "--watch", "--poll-interval", "100ms", "--iptables-backend", "nft", "--min-sync-period", "0s",
        "--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0",
        "--socket-lb", "--socket-lb-cgroup", &cg, "--socket-lb-pin-dir", &pins,
    ]);
    let node = lab.node().clone();
    let procs = rig.procs();
    let (log1, log2) = (rig.dir.join("svcproxy-1.log"), rig.dir.join("svcproxy-2.log"));
    let read_log = |l: &Path| std::fs::read_to_string(l).unwrap_or_default();
    let first = crate::watch_e2e::spawn_svcproxy(&node.name, &argv, &[], &log1)?;
    // The rules answer from both pods too: the programs must be attached before the flows
    // that must not reach conntrack begin.
    crate::watch_e2e::until("the first process's socket-LB entries", Duration::from_secs(20), || {
        read_log(&log1).contains("socket-lb programs attached") && matches!(answered_by(ctx, &client_pod.ns, &procs, "udp", SYNC_SVC4, 8), Ok(p) if p.len() == 2)
    })
    .map_err(|e| format!("{e}; svcproxy log:\n{}", read_log(&log1)))?;
    lab.conntrack_flush()?;

    let streams = [("tcp", SYNC_SVC4), ("udp", SYNC_SVC4), ("udp-unconnected", SYNC_SVC4), ("udp", SYNC_SVC6)];
    let mut logs = Vec::new();
    let first_stream = children.len();
    for (i, (mode, addr)) in streams.iter().enumerate() {
        let log = rig.dir.join(format!("restart-stream-{i}.log"));
        // 300 sends, 30 s: before, across and after the restart, with room for a slow
        // restart on a loaded machine; each answer waited for up to a second (late is not lost).
        children.push(client_pod.ns.spawn_logged(&[&exe, STREAM_FLAG, &procs, mode, addr, &PORT.to_string(), &SENDS.to_string(), "1000"], &log)?);
        logs.push(log);
    }
    let answered = |n: usize| logs.iter().all(|l| stream_lines(l).iter().filter(|(_, w)| w.starts_with("ok ")).count() >= n);
    crate::watch_e2e::until("every stream answered before the restart", Duration::from_secs(15), || answered(5))?;

    // Stopped as a node stops it; the pins stay.
    let t_stop = now_ms();
    // SAFETY: kill(2) on the daemon's pid, a child of this process not yet reaped.
    unsafe { libc::kill(first.0.id() as libc::pid_t, libc::SIGTERM) };
    let mut first = first;
    let stopped = crate::watch_e2e::until("the first process to exit on SIGTERM", Duration::from_secs(10), || first.0.try_wait().ok().flatten().is_some());
    if stopped.is_err() {
        let _ = first.0.kill();
    }
    drop(first);
    let t_gone = now_ms();
    crate::ensure!(rig.pins.join("link_sock_connect4").exists(), "the links stay pinned after the process exits");
    // New sockets while no svcproxy runs: the programs and maps still answer.
    for mode in ["tcp", "udp", "udp-unconnected"] {
        let pods = fresh_stream(&rig, &client_pod.ns, mode, SYNC_SVC4, 3).map_err(|e| format!("while stopped: {e}"))?;
        ctx.log(format!("while stopped: a new {mode} socket answered by {pods:?}"));
    }
    let t_start = now_ms();
    let second = crate::watch_e2e::spawn_svcproxy(&node.name, &argv, &[], &log2)?;
    crate::watch_e2e::until("the second process's socket-LB pass", Duration::from_secs(20), || read_log(&log2).contains("socket-lb programs attached"))
        .map_err(|e| format!("{e}; svcproxy log:\n{}", read_log(&log2)))?;
    let t_synced = now_ms();
    for mode in ["tcp", "udp", "udp-unconnected"] {
        let pods = fresh_stream(&rig, &client_pod.ns, mode, SYNC_SVC4, 3).map_err(|e| format!("after the restart: {e}"))?;
        ctx.log(format!("after the restart: a new {mode} socket answered by {pods:?}"));
    }
    ctx.log(format!("stopped at +0 ms, gone at +{} ms, restarted at +{} ms, attached at +{} ms", t_gone - t_stop, t_start - t_stop, t_synced - t_stop));

    let deadline = Instant::now() + Duration::from_secs(45);
    for c in &mut children[first_stream..] {
        while c.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                return Err("a stream client did not finish in time".to_string().into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for ((mode, addr), log) in streams.iter().zip(&logs) {
        let lines = stream_lines(log);
        let bad: Vec<&(u128, String)> = lines.iter().filter(|(_, w)| !w.starts_with("ok ")).collect();
        crate::ensure!(lines.len() == SENDS && bad.is_empty(), "{mode} to {addr}: every send answered across the restart: {bad:?} of {} lines", lines.len());
        let pods: std::collections::BTreeSet<&str> = lines.iter().map(|(_, w)| w.as_str()).collect();
        crate::ensure!(pods.len() == 1, "{mode} to {addr}: one pod throughout: {pods:?}");
        let after = lines.iter().filter(|(t, _)| *t > t_synced).count();
        crate::ensure!(after >= 10, "{mode} to {addr}: data exchanged after the new process synced ({after} sends)");
        let during = lines.iter().filter(|(t, _)| *t >= t_gone && *t <= t_start).count();
        ctx.log(format!("{mode} {addr}: {} sends, all answered by {pods:?}; {during} while no svcproxy ran, {after} after the restart", lines.len()));
    }
    for (family, addr) in [("ipv4", SYNC_SVC4), ("ipv6", SYNC_SVC6)] {
        let to_svc = node.run(&["conntrack", "-L", "-f", family, "-d", addr])?;
        crate::ensure!(to_svc.trim().is_empty(), "no flow to the ClusterIP {addr}: the socket path answered throughout: {to_svc}");
    }
    let said = read_log(&log2);
    ctx.log(format!("second svcproxy log:\n{said}"));
    crate::ensure!(said.contains("replaced=8"), "the new process replaced the eight links: {said}");
    crate::ensure!(!said.contains("socket-lb synced"), "the new process found the maps as wanted, writing nothing: {said}");
    drop(second);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_file(&file);
    drop(rig);
    drop(lab);
    Ok(())
}

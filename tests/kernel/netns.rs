//! The lab: a kube-proxy-style node built from network namespaces, veth pairs
//! and real sockets. Nothing is created in the host netns, there is no default
//! route anywhere, and only 198.18.0.0/15 and fd00::/8 addresses are used.
//!
//! ```text
//!                       [svk<pid>-<n>-<hint>-ext]  "external client"
//!                          eth0 198.19.1.2/24  fd00:19:1::2/64
//!                          routes 198.18.0.0/15, fd00::/8 via the node
//!                               ||
//!   [svk<pid>-<n>-<hint>-node]  vext 198.19.1.1/24  fd00:19:1::1/64  (= the "node IP")
//!      ip_forward=1, service CIDR routes: `<cidr> dev vext src <node IP>`
//!      vp<k> 198.19.0.<k>/32  fd00:19::<k>/128 ==veth== eth0 of pod k
//!      route <pod ip>/32 dev vp<k>
//!                               ||
//!   [svk<pid>-<n>-<hint>-<pod>]  eth0 <pod ipv4>/32 [<pod ipv6>/128]
//!      routes 198.18.0.0/15 via 198.19.0.<k>, fd00::/8 via fd00:19::<k>
//! ```
//!
//! Address plan: 198.19.0.0/24 and fd00:19::/64 are the node ends of pod links,
//! 198.19.1.0/24 and fd00:19:1::/64 the external link; pods and services may use
//! the rest of 198.18.0.0/15 and fd00::/8 (pods normally 198.18.0.0/16).
//!
//! Clients and servers are this test binary re-executed inside a namespace
//! (`ip netns exec NS <self> __svk_client|__svk_server ...`, see
//! [`helper_main_if_requested`]): std sockets, exact error kinds, one client
//! process per batch of connections, one server process per listener. Every
//! server reply is `<pod name> <peer address>`, so masquerade is visible.
//!
//! Every namespace created is registered in a process-wide list and deleted by
//! `Drop` (or by [`teardown_all_live`] after a case timed out). Only processes
//! inside our namespaces (`ip netns pids`) are killed; only our namespaces are
//! deleted.

#![allow(dead_code)] // a helper library: not every helper is used by every test

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::which;

/// The node's address on the external link ("node IP": NodePort target, source of node traffic).
pub const NODE_IP4: &str = "198.19.1.1";
pub const NODE_IP6: &str = "fd00:19:1::1";
/// The external client's address.
pub const EXT_IP4: &str = "198.19.1.2";
pub const EXT_IP6: &str = "fd00:19:1::2";

/// Default limit for one helper command (ip, iptables-restore, ...).
const CMD_LIMIT: Duration = Duration::from_secs(30);
/// Upper bound for connections in one `connect` call.
pub const MAX_CONNECT_COUNT: u32 = 1000;
/// Hidden argv[1] that turns the test binary into the connection client.
pub const CLIENT_FLAG: &str = "__svk_client";
/// Hidden argv[1] that turns the test binary into a pod's echo server.
pub const SERVER_FLAG: &str = "__svk_server";
/// Prefix of every namespace this code creates: `svk<pid>-<n>-...`.
pub const NS_PREFIX: &str = "svk";

static COUNTER: AtomicU32 = AtomicU32::new(0);
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

// ---------------------------------------------------------------------------
// running commands, always bounded in time

/// Run `argv` with an optional stdin, killing it after `limit`.
pub fn run_bounded(argv: &[&str], stdin: Option<&[u8]>, limit: Duration) -> Result<Output, String> {
    let Some((prog, rest)) = argv.split_first() else {
        return Err("empty command".into());
    };
    let path = which(prog).ok_or_else(|| format!("{prog}: not found"))?;
    let mut cmd = Command::new(path);
    cmd.args(rest)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: spawn failed: {e}", argv.join(" ")))?;
    if let Some(data) = stdin {
        let mut si = child.stdin.take().expect("piped stdin");
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = si.write_all(&data);
        });
    }
    let rx_out = reader(child.stdout.take().expect("piped stdout"));
    let rx_err = reader(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + limit;
    let mut nap = Duration::from_micros(500);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("{}: wait failed: {e}", argv.join(" "))),
        }
    };
    // A grandchild holding the pipes open must not hang us: bounded reads.
    let stdout = rx_out
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or_default();
    let stderr = rx_err
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{}: killed after the {:.0}s limit",
            argv.join(" "),
            limit.as_secs_f64()
        )),
    }
}

fn reader(mut r: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        let _ = tx.send(v);
    });
    rx
}

/// Run and require exit status 0; returns stdout.
pub fn run_ok(argv: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
    let out = run_bounded(argv, stdin, CMD_LIMIT)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed ({}): {}{}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    }
}

// ---------------------------------------------------------------------------
// one namespace

/// A network namespace of ours (a name under /run/netns).
#[derive(Clone, Debug)]
pub struct Ns {
    pub name: String,
}

impl Ns {
    /// `ip netns exec NAME argv...`, bounded; the raw output (any exit status).
    pub fn exec(&self, argv: &[&str]) -> Result<Output, String> {
        self.exec_limit(argv, None, CMD_LIMIT)
    }
    pub fn exec_limit(
        &self,
        argv: &[&str],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Output, String> {
        let prog = which(argv.first().ok_or("empty command")?)
            .ok_or_else(|| format!("{}: not found", argv[0]))?;
        let prog = prog.to_string_lossy().into_owned();
        let mut full = vec!["ip", "netns", "exec", &self.name, &prog];
        full.extend_from_slice(&argv[1..]);
        run_bounded(&full, stdin, limit)
    }
    /// Like `exec` but requires success; returns stdout.
    pub fn run(&self, argv: &[&str]) -> Result<String, String> {
        self.run_stdin(argv, None)
    }
    pub fn run_stdin(&self, argv: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let out = self.exec_limit(argv, stdin.map(str::as_bytes), CMD_LIMIT)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "[{}] `{}` failed ({}): {}{}",
                self.name,
                argv.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            ))
        }
    }
    /// `ip -n NAME args...` (no exec needed), requires success.
    pub fn ip(&self, args: &[&str]) -> Result<String, String> {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        run_ok(&full, None)
    }
    /// Several ip commands in one process (`ip -n NAME -batch -`); stops at the first error.
    pub fn ip_batch(&self, lines: &[String]) -> Result<(), String> {
        let text = lines.join("\n") + "\n";
        run_ok(
            &["ip", "-n", &self.name, "-batch", "-"],
            Some(text.as_bytes()),
        )
        .map(|_| ())
        .map_err(|e| format!("{e}\nbatch was:\n{text}"))
    }
    /// `sysctl -qw k=v ...` inside the namespace.
    pub fn sysctl(&self, kvs: &[&str]) -> Result<(), String> {
        let mut argv = vec!["sysctl", "-qw"];
        argv.extend_from_slice(kvs);
        self.run(&argv).map(|_| ())
    }
    /// Start a long-running process inside the namespace (stdio to /dev/null).
    pub fn spawn(&self, argv: &[&str]) -> Result<Child, String> {
        self.spawn_stdout(argv, Stdio::null())
    }
    /// Like [`Ns::spawn`], its stdout written to `out` (created or truncated), for a
    /// long-running process whose output the test reads while it runs.
    pub fn spawn_logged(&self, argv: &[&str], out: &std::path::Path) -> Result<Child, String> {
        let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
        self.spawn_stdout(argv, Stdio::from(file))
    }
    fn spawn_stdout(&self, argv: &[&str], stdout: Stdio) -> Result<Child, String> {
        let prog = which(argv[0]).ok_or_else(|| format!("{}: not found", argv[0]))?;
        Command::new(which("ip").ok_or("ip: not found")?)
            .args(["netns", "exec", &self.name])
            .arg(prog)
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("[{}] spawn {}: {e}", self.name, argv.join(" ")))
    }
    /// PIDs of all processes in this namespace.
    pub fn pids(&self) -> Vec<u32> {
        run_ok(&["ip", "netns", "pids", &self.name], None)
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Names of all namespaces under /run/netns (anyone's).
pub fn netns_list() -> Vec<String> {
    run_ok(&["ip", "netns", "list"], None)
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// This process's namespace-name prefix: `svk<pid>-`.
pub fn own_prefix() -> String {
    format!("{NS_PREFIX}{}-", std::process::id())
}

/// Kill every process in each namespace (ip netns pids), then delete it.
/// Returns problems (empty = clean).
fn destroy_namespaces(names: &[String]) -> Vec<String> {
    let me = std::process::id();
    let mut problems = vec![];
    let existing: BTreeSet<String> = netns_list().into_iter().collect();
    for name in names {
        if !existing.contains(name) {
            LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
            continue;
        }
        let ns = Ns { name: name.clone() };
        for _round in 0..3 {
            let pids: Vec<u32> = ns.pids().into_iter().filter(|&p| p != me).collect();
            if pids.is_empty() {
                break;
            }
            let mut argv = vec!["kill".to_string(), "-KILL".to_string()];
            argv.extend(pids.iter().map(u32::to_string));
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let _ = run_bounded(&argv, None, Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = run_ok(&["ip", "netns", "del", name], None) {
            problems.push(e);
        }
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }
    let after: BTreeSet<String> = netns_list().into_iter().collect();
    for name in names {
        if after.contains(name) {
            problems.push(format!("namespace {name} still exists after teardown"));
        }
    }
    problems
}

/// Tear down every namespace this process still has registered (used by the
/// harness after a case exceeded its time limit).
pub fn teardown_all_live() {
    let names: Vec<String> = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    if !names.is_empty() {
        say!(
            "    [teardown] emergency teardown of {} namespace(s): {}",
            names.len(),
            names.join(" ")
        );
        for p in destroy_namespaces(&names) {
            say!("    [teardown] {p}");
        }
    }
}

/// Final safety net: any namespace of this process still present is removed
/// and reported (a non-empty result means something leaked).
pub fn leftovers_at_exit() -> Vec<String> {
    let prefix = own_prefix();
    let mut names: BTreeSet<String> = netns_list()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.extend(
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    if names.is_empty() {
        return vec![];
    }
    let names: Vec<String> = names.into_iter().collect();
    let mut out = vec![format!(
        "namespaces left behind (now removed): {}",
        names.join(" ")
    )];
    out.extend(destroy_namespaces(&names));
    out
}

/// Namespaces named `svk<pid>-...` whose pid is no longer running (aborted
/// runs). Removed only if `SVCPROXY_KERNEL_SWEEP_STALE=1`, else just listed:
/// another pid namespace sharing /run/netns could own a live one.
pub fn stale_namespaces(remove: bool) -> Vec<String> {
    let me = std::process::id();
    let stale: Vec<String> = netns_list()
        .into_iter()
        .filter(|n| {
            let Some(rest) = n.strip_prefix(NS_PREFIX) else {
                return false;
            };
            let Some((pid, tail)) = rest.split_once('-') else {
                return false;
            };
            let Ok(pid) = pid.parse::<u32>() else {
                return false;
            };
            let counter_ok = tail
                .split('-')
                .next()
                .map(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
                .unwrap_or(false);
            counter_ok && pid != me && !pid_alive(pid)
        })
        .collect();
    if remove && !stale.is_empty() {
        destroy_namespaces(&stale);
    }
    stale
}

/// Is `pid` a running (non-zombie) process?
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(|st| st != "Z" && st != "X")
            .unwrap_or(false),
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------
// iptables backends

/// Which iptables implementation: the library's own type; one Lab never mixes them
/// (pitfall 2).
pub use svcproxy::xtables::apply::Backend;

/// What the tests ask of a [`Backend`] beside the library's `binary(family, tool)`.
pub trait BackendTools: Copy {
    /// `bin(false, "restore")` → `iptables-nft-restore`; tool "" → `iptables-nft`.
    fn bin(self, v6: bool, tool: &str) -> String;
    /// Every binary of this backend, for `Ctx::require`.
    fn tools(self) -> Vec<String>;
}

impl BackendTools for Backend {
    fn bin(self, v6: bool, tool: &str) -> String {
        self.binary(if v6 { svcproxy::net::IpFamily::V6 } else { svcproxy::net::IpFamily::V4 }, tool)
    }
    fn tools(self) -> Vec<String> {
        let mut v = vec![];
        for v6 in [false, true] {
            for t in ["", "restore", "save"] {
                v.push(self.bin(v6, t));
            }
        }
        v
    }
}

/// iptables (or ip6tables) of one backend, run inside the lab's node netns.
pub struct Ipt<'a> {
    lab: &'a Lab,
    pub backend: Backend,
    pub v6: bool,
}

impl Ipt<'_> {
    pub fn binary(&self, tool: &str) -> String {
        self.backend.bin(self.v6, tool)
    }
    /// `<fam>-<backend>-restore FLAGS` with `text` on stdin, in the node netns.
    pub fn restore(&self, text: &str, flags: &[&str]) -> Result<(), String> {
        let bin = self.binary("restore");
        let mut argv = vec![bin.as_str()];
        if self.backend == Backend::Legacy {
            argv.extend(["-w", "10"]); // legacy takes the global /run/xtables.lock
        }
        argv.extend_from_slice(flags);
        self.lab
            .node
            .run_stdin(&argv, Some(text))
            .map(|_| ())
            .map_err(|e| format!("{e}\n--- input was:\n{text}"))
    }
    /// `<fam>-<backend>-save -t TABLE` in the node netns.
    pub fn save(&self, table: &str) -> Result<String, String> {
        let bin = self.binary("save");
        self.lab.node.run(&[&bin, "-t", table])
    }
    /// `<fam>-<backend> ARGS` in the node netns (e.g. `-t nat -S`).
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let bin = self.binary("");
        let mut argv = vec![bin.as_str()];
        if self.backend == Backend::Legacy {
            argv.extend(["-w", "10"]);
        }
        argv.extend_from_slice(args);
        self.lab.node.run(&argv)
    }
}

// ---------------------------------------------------------------------------
// pods and servers

/// A pod: its own namespace, routed /32 (and /128) behind the node.
#[derive(Clone, Debug)]
pub struct Pod {
    pub name: String,
    pub ns: Ns,
    pub ipv4: Ipv4Addr,
    pub ipv6: Option<Ipv6Addr>,
    /// 1-based; the node end of its link is `vp<index>`, 198.19.0.<index>, fd00:19::<index>.
    pub index: u32,
    node: Ns,
    servers: Arc<Mutex<Vec<Child>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl Pod {
    /// The node's address on this pod's link (what a masqueraded packet from the node carries).
    pub fn node_side_ip4(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 19, 0, self.index as u8)
    }
    pub fn node_side_ip6(&self) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x19, 0, 0, 0, 0, 0, self.index as u16)
    }
    /// TCP server on `port` (IPv4, and IPv6 if the pod has it); each connection
    /// gets one line `<pod name> <peer address>`. Returns once it answers.
    pub fn serve_tcp(&self, port: u16) -> Result<(), String> {
        self.serve(Proto::Tcp, port)
    }
    /// UDP server on `port`: each datagram is answered with `<pod name> <peer address>`.
    pub fn serve_udp(&self, port: u16) -> Result<(), String> {
        self.serve(Proto::Udp, port)
    }

    fn serve(&self, proto: Proto, port: u16) -> Result<(), String> {
        let mut ips: Vec<IpAddr> = vec![IpAddr::V4(self.ipv4)];
        if let Some(v6) = self.ipv6 {
            ips.push(IpAddr::V6(v6));
        }
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let exe = exe.to_string_lossy().into_owned();
        for ip in &ips {
            let (ip_s, port_s) = (ip.to_string(), port.to_string());
            let child =
                self.ns
                    .spawn(&[&exe, SERVER_FLAG, proto.name(), &ip_s, &port_s, &self.name])?;
            self.servers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(child);
        }
        // Wait (bounded: 50 tries, ~10 s at most) until each listener answers directly from the node.
        for ip in &ips {
            let t0 = Instant::now();
            let mut last = String::new();
            let mut up = false;
            for _ in 0..50 {
                match run_client(
                    &self.node,
                    &ip.to_string(),
                    port,
                    proto,
                    1,
                    Duration::from_millis(500),
                ) {
                    Ok(t) if t.by_pod.get(&self.name) == Some(&1) => {
                        up = true;
                        break;
                    }
                    Ok(t) => last = t.to_string(),
                    Err(e) => last = e,
                }
                if t0.elapsed() > Duration::from_secs(10) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !up {
                return Err(format!(
                    "{} server of pod {} on {ip}:{port} did not answer: {last}",
                    proto.name(),
                    self.name
                ));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// connections

/// Where a connection starts.
#[derive(Clone, Copy, Debug)]
pub enum Where<'a> {
    Node,
    Pod(&'a str),
    External,
}

/// The outcome of a batch of connections.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub attempts: u32,
    /// Answers per pod name.
    pub by_pod: BTreeMap<String, u32>,
    /// Source addresses the pods saw (masquerade shows here), with counts.
    pub sources_seen: BTreeMap<String, u32>,
    /// (pod, source it saw) pairs.
    pub seen: BTreeSet<(String, String)>,
    /// Connection refused: TCP RST or ICMP port unreachable (REJECT).
    pub refused: u32,
    /// No answer within the per-connection timeout (DROP, black hole).
    pub timed_out: u32,
    /// The send itself failed with EPERM: netfilter dropped (DROP or REJECT) the
    /// packet on the *local* OUTPUT path. UDP from the node sees this instead of
    /// a timeout/refusal; TCP retransmits silently instead.
    pub eperm: u32,
    /// Anything else (host unreachable, no reply after connect, ...), one entry each.
    pub errors: Vec<String>,
    /// Slowest refused attempt and slowest answered attempt, in ms.
    pub max_refused_ms: u64,
    pub max_ok_ms: u64,
}

impl Tally {
    pub fn answered(&self) -> u32 {
        self.by_pod.values().sum()
    }
    pub fn count(&self, pod: &str) -> u32 {
        self.by_pod.get(pod).copied().unwrap_or(0)
    }
    /// Did `pod` see a connection from `src`?
    pub fn saw(&self, pod: &str, src: &str) -> bool {
        self.seen.contains(&(pod.to_string(), src.to_string()))
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} attempts: answered {:?}", self.attempts, self.by_pod)?;
        write!(
            f,
            ", refused={}, timed_out={}, eperm={}, errors={}",
            self.refused,
            self.timed_out,
            self.eperm,
            self.errors.len()
        )?;
        if !self.errors.is_empty() {
            write!(f, " (first: {})", self.errors[0])?;
        }
        write!(f, "; pods saw {:?}", self.seen)?;
        write!(
            f,
            "; max ms ok={} refused={}",
            self.max_ok_ms, self.max_refused_ms
        )
    }
}

/// Run the client (this binary in client mode) inside `ns`.
fn run_client(
    ns: &Ns,
    dst: &str,
    port: u16,
    proto: Proto,
    count: u32,
    per_conn: Duration,
) -> Result<Tally, String> {
    if count == 0 || count > MAX_CONNECT_COUNT {
        return Err(format!(
            "connection count {count} out of range 1..={MAX_CONNECT_COUNT}"
        ));
    }
    let ip: IpAddr = dst
        .parse()
        .map_err(|e| format!("bad destination {dst:?}: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let (port_s, count_s, ms_s) = (
        port.to_string(),
        count.to_string(),
        per_conn.as_millis().to_string(),
    );
    let ip_s = ip.to_string();
    // Each connection takes at most ~2x per_conn (connect + read); plus slack.
    let limit = per_conn * 2 * count + Duration::from_secs(5);
    let out = ns.exec_limit(
        &[
            &exe,
            CLIENT_FLAG,
            proto.name(),
            &ip_s,
            &port_s,
            &count_s,
            &ms_s,
        ],
        None,
        limit,
    )?;
    if !out.status.success() {
        return Err(format!(
            "client in {} failed ({}): {}",
            ns.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut t = Tally::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.splitn(3, ' ');
        let (kind, ms, rest) = (
            w.next().unwrap_or(""),
            w.next().unwrap_or("0"),
            w.next().unwrap_or(""),
        );
        let ms: u64 = ms.parse().unwrap_or(0);
        t.attempts += 1;
        match kind {
            "ok" => {
                let mut r = rest.split_whitespace();
                let pod = r.next().unwrap_or("?").to_string();
                let src = r
                    .next()
                    .unwrap_or("?")
                    .trim_matches(|c| c == '[' || c == ']');
                // canonicalise any address (e.g. uncompressed IPv6)
                let src = src
                    .parse::<IpAddr>()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| src.to_string());
                *t.by_pod.entry(pod.clone()).or_default() += 1;
                *t.sources_seen.entry(src.clone()).or_default() += 1;
                t.seen.insert((pod, src));
                t.max_ok_ms = t.max_ok_ms.max(ms);
            }
            "refused" => {
                t.refused += 1;
                t.max_refused_ms = t.max_refused_ms.max(ms);
            }
            "timeout" => t.timed_out += 1,
            "eperm" => t.eperm += 1,
            _ => t.errors.push(format!("{kind} after {ms}ms: {rest}")),
        }
    }
    if t.attempts != count {
        return Err(format!(
            "client reported {} of {count} attempts: {}",
            t.attempts,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(t)
}

/// Call first thing in `main`: if argv[1] is [`CLIENT_FLAG`] or
/// [`SERVER_FLAG`], act as the connection client / a pod server and exit.
pub fn helper_main_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some(CLIENT_FLAG) => client_main(&args),
        Some(SERVER_FLAG) => server_main(&args),
        _ => {}
    }
}

/// Client: args `proto dst port count timeout_ms`. Prints one line per
/// attempt: `ok MS <reply>`, `refused MS`, `timeout MS`, `eperm MS`,
/// `error MS <what>`.
fn client_main(args: &[String]) -> ! {
    let parse = || -> Option<(Proto, SocketAddr, u32, Duration)> {
        let proto = match args.get(2)?.as_str() {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            _ => return None,
        };
        let ip: IpAddr = args.get(3)?.parse().ok()?;
        let port: u16 = args.get(4)?.parse().ok()?;
        let count: u32 = args.get(5)?.parse().ok()?;
        let ms: u64 = args.get(6)?.parse().ok()?;
        Some((
            proto,
            SocketAddr::new(ip, port),
            count.min(MAX_CONNECT_COUNT),
            Duration::from_millis(ms.clamp(10, 60_000)),
        ))
    };
    let Some((proto, addr, count, timeout)) = parse() else {
        eprintln!("usage: {CLIENT_FLAG} tcp|udp IP PORT COUNT TIMEOUT_MS");
        std::process::exit(2);
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for _ in 0..count {
        let t0 = Instant::now();
        let r = match proto {
            Proto::Tcp => attempt_tcp(addr, timeout),
            Proto::Udp => attempt_udp(addr, timeout),
        };
        let ms = t0.elapsed().as_millis();
        let line = match r {
            Ok(reply) => format!("ok {ms} {}", reply.lines().next().unwrap_or("").trim()),
            Err(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => format!("refused {ms}"),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("timeout {ms}")
                }
                std::io::ErrorKind::PermissionDenied => format!("eperm {ms}"),
                k => format!("error {ms} {k:?}: {e}"),
            },
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    std::process::exit(0);
}

/// Server: args `proto ip port name`. TCP: every accepted connection gets
/// `<name> <peer ip>\n` and is closed. UDP: every datagram is answered with
/// the same line. Single process, no fork (socat's `UDP-RECVFROM,fork` lost
/// ~5% of back-to-back datagrams). Exits when its parent (the test) is gone.
fn server_main(args: &[String]) -> ! {
    let parse = || -> Option<(Proto, SocketAddr, String)> {
        let proto = match args.get(2)?.as_str() {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            _ => return None,
        };
        let ip: IpAddr = args.get(3)?.parse().ok()?;
        let port: u16 = args.get(4)?.parse().ok()?;
        Some((proto, SocketAddr::new(ip, port), args.get(5)?.clone()))
    };
    let Some((proto, addr, name)) = parse() else {
        eprintln!("usage: {SERVER_FLAG} tcp|udp IP PORT NAME");
        std::process::exit(2);
    };
    // Orphan watchdog: if the test process dies (even by SIGKILL), exit.
    let parent = parent_pid();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(300));
        if parent_pid() != parent {
            std::process::exit(0);
        }
    });
    let reply = |peer: SocketAddr| format!("{name} {}\n", peer.ip());
    match proto {
        Proto::Tcp => {
            let l = std::net::TcpListener::bind(addr).unwrap_or_else(|e| {
                eprintln!("bind {addr}: {e}");
                std::process::exit(1)
            });
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let Ok(peer) = c.peer_addr() else { continue };
                let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = c.write_all(reply(peer).as_bytes());
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
        Proto::Udp => {
            let s = UdpSocket::bind(addr).unwrap_or_else(|e| {
                eprintln!("bind {addr}: {e}");
                std::process::exit(1)
            });
            let mut buf = [0u8; 2048];
            loop {
                if let Ok((_, peer)) = s.recv_from(&mut buf) {
                    let _ = s.send_to(reply(peer).as_bytes(), peer);
                }
            }
        }
    }
    std::process::exit(0)
}

fn parent_pid() -> u32 {
    // /proc/self/stat: "pid (comm) state ppid ..."; comm may contain spaces.
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()))
        })
        .unwrap_or(0)
}

fn attempt_tcp(addr: SocketAddr, timeout: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.contains(&b'\n') || buf.len() > 1024 {
                    break;
                }
            }
            // A timeout *after* the connect succeeded is not a "dropped" SYN.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(std::io::Error::other(format!(
                    "connected but no reply within {timeout:?}"
                )))
            }
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "connected, then read failed: {e}"
                )))
            }
        }
    }
    if buf.is_empty() {
        return Err(std::io::Error::other(
            "connected but the server closed without a reply",
        ));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn attempt_udp(addr: SocketAddr, timeout: Duration) -> std::io::Result<String> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(addr)?;
    s.set_read_timeout(Some(timeout))?;
    s.send(b"ping\n")?;
    let mut buf = [0u8; 1024];
    let n = s.recv(&mut buf)?; // ICMP port unreachable -> ConnectionRefused
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

// ---------------------------------------------------------------------------
// the lab

pub struct Lab {
    /// `svk<pid>-<n>-<hint>`; every namespace name starts with it.
    pub prefix: String,
    node: Ns,
    ext: Ns,
    pods: Vec<Pod>,
    servers: Arc<Mutex<Vec<Child>>>,
    /// Our namespaces, in creation order.
    owned: Vec<String>,
    backend: Mutex<Option<Backend>>,
    connect_timeout: Duration,
    torn_down: bool,
}

fn in_v4_range(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 198 && (o[1] == 18 || o[1] == 19)
}
fn in_v6_range(a: Ipv6Addr) -> bool {
    a.segments()[0] >> 8 == 0xfd
}
/// Addresses the lab itself uses for links (pods must not take them).
fn reserved_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 198 && o[1] == 19 && o[2] <= 1
}
fn reserved_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    s[0] == 0xfd00 && s[1] == 0x19 && (s[2] == 0 || s[2] == 1) && s[3] == 0
}

fn ip_bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(a) => (u32::from(a) as u128, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

/// Do two prefixes of the same family overlap?
fn overlaps(a: IpAddr, alen: u8, b: IpAddr, blen: u8) -> bool {
    let ((x, width), (y, _)) = (ip_bits(a), ip_bits(b));
    if a.is_ipv4() != b.is_ipv4() {
        return false;
    }
    let len = alen.min(blen) as u32;
    let shift = width as u32 - len;
    let (x, y) = if shift >= 128 {
        (0, 0)
    } else {
        (x >> shift, y >> shift)
    };
    x == y
}

/// Check that a CIDR lies inside the allowed ranges and off the lab's own links.
fn check_cidr(cidr: &str) -> Result<(IpAddr, u8), String> {
    let (ip, len) = cidr
        .split_once('/')
        .ok_or_else(|| format!("{cidr}: not a CIDR"))?;
    let ip: IpAddr = ip.parse().map_err(|e| format!("{cidr}: {e}"))?;
    let len: u8 = len.parse().map_err(|e| format!("{cidr}: {e}"))?;
    let ok = match ip {
        IpAddr::V4(a) => in_v4_range(a) && (15..=32).contains(&len),
        IpAddr::V6(a) => in_v6_range(a) && (8..=128).contains(&len),
    };
    if !ok {
        return Err(format!("{cidr}: outside 198.18.0.0/15 / fd00::/8"));
    }
    let reserved: [(IpAddr, u8); 3] = [
        (IpAddr::V4(Ipv4Addr::new(198, 19, 0, 0)), 23),
        (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x19, 0, 0, 0, 0, 0, 0)),
            64,
        ),
        (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x19, 1, 0, 0, 0, 0, 0)),
            64,
        ),
    ];
    if let Some((r, rl)) = reserved.iter().find(|(r, rl)| overlaps(ip, len, *r, *rl)) {
        return Err(format!("{cidr}: overlaps the lab's link range {r}/{rl}"));
    }
    Ok((ip, len))
}

impl Lab {
    /// Create the node and external-client namespaces. `hint` (e.g. "nft")
    /// only makes the names readable: `svk<pid>-<n>-<hint>-node`.
    pub fn new(hint: &str) -> Result<Lab, String> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let hint: String = hint
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(12)
            .collect::<String>()
            .to_ascii_lowercase();
        let prefix = if hint.is_empty() {
            format!("{}{n}", own_prefix())
        } else {
            format!("{}{n}-{hint}", own_prefix())
        };
        let mut lab = Lab {
            node: Ns {
                name: format!("{prefix}-node"),
            },
            ext: Ns {
                name: format!("{prefix}-ext"),
            },
            prefix,
            pods: vec![],
            servers: Arc::new(Mutex::new(vec![])),
            owned: vec![],
            backend: Mutex::new(None),
            connect_timeout: Duration::from_secs(2),
            torn_down: false,
        };
        // On error the partially built lab is dropped, which tears it down.
        lab.build()?;
        Ok(lab)
    }

    fn add_ns(&mut self, name: &str) -> Result<Ns, String> {
        if netns_list().iter().any(|n| n == name) {
            return Err(format!(
                "namespace {name} already exists (not ours: refusing to touch it)"
            ));
        }
        run_ok(&["ip", "netns", "add", name], None)?;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
        self.owned.push(name.to_string());
        let ns = Ns {
            name: name.to_string(),
        };
        // DAD off before any interface exists (interfaces copy conf/default).
        ns.sysctl(&[
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_dad=0",
        ])?;
        Ok(ns)
    }

    fn build(&mut self) -> Result<(), String> {
        let node = self.add_ns(&self.node.name.clone())?;
        let ext = self.add_ns(&self.ext.name.clone())?;
        node.sysctl(&[
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.forwarding=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
            // REJECT answers with ICMP, which is rate limited per peer (burst 6,
            // then 1/s) and per netns (burst 50, each message costing 0-2
            // credits at random): bursts of refused connections would turn into
            // timeouts. An empty ratemask exempts every ICMP type from both.
            "net.ipv4.icmp_ratemask=0",
            "net.ipv6.icmp.ratemask=",
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv6.icmp.ratelimit=0",
        ])?;
        node.ip_batch(&[
            "link set lo up".into(),
            format!("link add vext type veth peer name eth0 netns {}", ext.name),
            format!("addr add {NODE_IP4}/24 dev vext"),
            format!("addr add {NODE_IP6}/64 dev vext nodad"),
            "link set vext up".into(),
        ])?;
        ext.ip_batch(&[
            "link set lo up".into(),
            format!("addr add {EXT_IP4}/24 dev eth0"),
            format!("addr add {EXT_IP6}/64 dev eth0 nodad"),
            "link set eth0 up".into(),
            format!("route add 198.18.0.0/15 via {NODE_IP4} dev eth0"),
            format!("route add fd00::/8 via {NODE_IP6} dev eth0"),
        ])?;
        self.assert_no_default_route()
    }

    pub fn node(&self) -> &Ns {
        &self.node
    }
    pub fn external(&self) -> &Ns {
        &self.ext
    }
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }
    pub fn pod(&self, name: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| p.name == name)
    }
    /// All namespace names of this lab (node, ext, pods).
    pub fn namespaces(&self) -> Vec<String> {
        self.owned.clone()
    }
    pub fn set_connect_timeout(&mut self, t: Duration) {
        self.connect_timeout = t;
    }

    /// Add a pod namespace with `ipv4` (/32) and optionally `ipv6` (/128),
    /// linked to the node by its own veth pair.
    pub fn add_pod(&mut self, name: &str, ipv4: &str, ipv6: Option<&str>) -> Result<Pod, String> {
        if name.is_empty()
            || name.len() > 20
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "pod name {name:?}: use [a-z0-9-], at most 20 chars"
            ));
        }
        if name == "node" || name == "ext" || self.pod(name).is_some() {
            return Err(format!("pod name {name:?} is taken"));
        }
        let v4: Ipv4Addr = ipv4.parse().map_err(|e| format!("{ipv4}: {e}"))?;
        if !in_v4_range(v4) || reserved_v4(v4) {
            return Err(format!(
                "{v4}: pods must use 198.18.0.0/15 outside 198.19.0.0/23"
            ));
        }
        let v6: Option<Ipv6Addr> = match ipv6 {
            None => None,
            Some(s) => {
                let a: Ipv6Addr = s.parse().map_err(|e| format!("{s}: {e}"))?;
                if !in_v6_range(a) || reserved_v6(a) {
                    return Err(format!(
                        "{a}: pods must use fd00::/8 outside fd00:19::/64, fd00:19:1::/64"
                    ));
                }
                Some(a)
            }
        };
        let index = self.pods.len() as u32 + 1;
        if index > 250 {
            return Err("at most 250 pods".into());
        }
        let ns = self.add_ns(&format!("{}-{name}", self.prefix))?;
        let (gw4, gw6) = (
            Ipv4Addr::new(198, 19, 0, index as u8),
            Ipv6Addr::new(0xfd00, 0x19, 0, 0, 0, 0, 0, index as u16),
        );
        let dev = format!("vp{index}");
        let mut node_cmds = vec![
            format!("link add {dev} type veth peer name eth0 netns {}", ns.name),
            format!("addr add {gw4}/32 dev {dev}"),
        ];
        if v6.is_some() {
            node_cmds.push(format!("addr add {gw6}/128 dev {dev} nodad"));
        }
        node_cmds.push(format!("link set {dev} up"));
        node_cmds.push(format!("route add {v4}/32 dev {dev} src {gw4}"));
        if let Some(a) = v6 {
            node_cmds.push(format!("route add {a}/128 dev {dev} src {gw6}"));
        }
        self.node.ip_batch(&node_cmds)?;
        let mut pod_cmds = vec![
            "link set lo up".into(),
            format!("addr add {v4}/32 dev eth0"),
        ];
        if let Some(a) = v6 {
            pod_cmds.push(format!("addr add {a}/128 dev eth0 nodad"));
        }
        pod_cmds.push("link set eth0 up".into());
        pod_cmds.push(format!("route add {gw4}/32 dev eth0 scope link src {v4}"));
        pod_cmds.push(format!(
            "route add 198.18.0.0/15 via {gw4} dev eth0 src {v4}"
        ));
        if let Some(a) = v6 {
            pod_cmds.push(format!("route add {gw6}/128 dev eth0 src {a}"));
            pod_cmds.push(format!("route add fd00::/8 via {gw6} dev eth0 src {a}"));
        }
        ns.ip_batch(&pod_cmds)?;
        let pod = Pod {
            name: name.to_string(),
            ns,
            ipv4: v4,
            ipv6: v6,
            index,
            node: self.node.clone(),
            servers: self.servers.clone(),
        };
        self.pods.push(pod.clone());
        Ok(pod)
    }

    /// Route a service range (ClusterIP / ExternalIP / LoadBalancer CIDR) in the
    /// node netns: `<cidr> dev vext src <node IP>`. Without it connect() from the
    /// node fails with ENETUNREACH before nat OUTPUT can DNAT (pitfall 3).
    /// Undoable with `unroute_service_cidr`.
    pub fn route_service_cidr(&self, cidr: &str) -> Result<(), String> {
        let (ip, _) = check_cidr(cidr)?;
        let src = if ip.is_ipv4() { NODE_IP4 } else { NODE_IP6 };
        self.node
            .ip(&["route", "replace", cidr, "dev", "vext", "src", src])
            .map(|_| ())
    }
    pub fn unroute_service_cidr(&self, cidr: &str) -> Result<(), String> {
        check_cidr(cidr)?;
        self.node
            .ip(&["route", "del", cidr, "dev", "vext"])
            .map(|_| ())
    }

    /// No namespace of the lab has a default route (IPv4 or IPv6).
    pub fn assert_no_default_route(&self) -> Result<(), String> {
        for name in &self.owned {
            let ns = Ns { name: name.clone() };
            for fam in ["-4", "-6"] {
                let out = ns.ip(&[fam, "route", "show", "default"])?;
                if !out.trim().is_empty() {
                    return Err(format!(
                        "{name}: default route present ({fam}): {}",
                        out.trim()
                    ));
                }
            }
        }
        Ok(())
    }

    fn ns_of(&self, from: Where) -> Result<&Ns, String> {
        match from {
            Where::Node => Ok(&self.node),
            Where::External => Ok(&self.ext),
            Where::Pod(name) => self
                .pod(name)
                .map(|p| &p.ns)
                .ok_or_else(|| format!("no pod named {name:?}")),
        }
    }

    /// Make `count` connections (each with a new source port) from `from` to
    /// `dst:port`. Each attempt is bounded by the lab's connect timeout (2 s
    /// unless changed), so a DROP costs that much per attempt.
    pub fn connect(
        &self,
        from: Where,
        dst: &str,
        port: u16,
        proto: Proto,
        count: u32,
    ) -> Result<Tally, String> {
        run_client(
            self.ns_of(from)?,
            dst,
            port,
            proto,
            count,
            self.connect_timeout,
        )
    }

    /// `conntrack -F` (IPv4 and IPv6) in the node netns.
    pub fn conntrack_flush(&self) -> Result<(), String> {
        self.node.run(&["conntrack", "-F"])?;
        self.node.run(&["conntrack", "-F", "-f", "ipv6"])?;
        Ok(())
    }

    /// iptables of `backend` in the node netns. The first call fixes the lab's
    /// backend; asking for the other one later panics (never mix, pitfall 2).
    pub fn iptables(&self, backend: Backend) -> Ipt<'_> {
        self.try_iptables(backend, false)
            .unwrap_or_else(|e| panic!("{e}"))
    }
    /// ip6tables of `backend` in the node netns (same backend rule).
    pub fn ip6tables(&self, backend: Backend) -> Ipt<'_> {
        self.try_iptables(backend, true)
            .unwrap_or_else(|e| panic!("{e}"))
    }
    /// Like `iptables`/`ip6tables` but an error instead of a panic on a backend mix.
    pub fn try_iptables(&self, backend: Backend, v6: bool) -> Result<Ipt<'_>, String> {
        let mut b = self.backend.lock().unwrap_or_else(|e| e.into_inner());
        match *b {
            None => *b = Some(backend),
            Some(old) if old != backend => {
                return Err(format!(
                    "lab {} already uses the {} backend; mixing iptables backends in one netns is not allowed, use a second Lab",
                    self.prefix,
                    old.name()
                ))
            }
            Some(_) => {}
        }
        Ok(Ipt {
            lab: self,
            backend,
            v6,
        })
    }

    /// Kill our servers, kill every process left in our namespaces, delete
    /// them. Idempotent; `Drop` calls it.
    pub fn teardown(&mut self) -> Result<(), String> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        {
            let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
            for c in servers.iter_mut() {
                let _ = c.kill();
            }
            for c in servers.iter_mut() {
                let _ = c.wait();
            }
            servers.clear();
        }
        // Pods first, then ext, then node (reverse creation order).
        let names: Vec<String> = self.owned.iter().rev().cloned().collect();
        let problems = destroy_namespaces(&names);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            let _ = writeln!(
                std::io::stderr(),
                "lab {}: teardown problems: {e}",
                self.prefix
            );
        }
    }
}

//! vmcheck: proves `NetlinkIpvs` against a real IPVS kernel. Run it as root inside
//! the rig (it changes the IPVS tables of its network namespace):
//!
//! ```text
//! rig/run-vmcheck.sh [--vs 10000] [--rs 10] [--window 128] [--estimation 1]
//! # which is:
//! cargo build --release --example vmcheck --target x86_64-unknown-linux-musl
//! VM_MEM=1024 VM_TIMEOUT=900 rig/ipvs-vm.sh target/x86_64-unknown-linux-musl/release/examples/vmcheck
//! ```
//!
//! It checks, in one run: info against /proc; the same script of ops (with the
//! kernel's refusals) through the kernel and through `FakeIpvs`, one by one and as
//! a batch, comparing every outcome and the final dumps; the dumps against
//! `ipvsadm -Sn`; timeouts; then programs `--vs` virtual servers × `--rs` real
//! servers in one batch and times it beside `ipvsadm --restore` of the same text
//! (`--estimation 0` turns the kernel's rate estimators off meanwhile).
//! Last line: `VMCHECK PASS …` (exit 0) or `VMCHECK FAIL …` (exit 1; 2 if it
//! could not run at all).

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use svcproxy::ipvs::netlink::{Errno, Error, FakeIpvs, Ipvs, NetlinkIpvs, DEFAULT_WINDOW};
use svcproxy::ipvs::values::{Forward, Op, Protocol, RealServer, Timeouts, VirtualServer};

struct Args {
    vs: usize,
    rs: usize,
    window: usize,
    /// `net.ipv4.vs.run_estimation` during the bulk test (1, the kernel's default, or 0).
    estimation: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { vs: 10_000, rs: 10, window: DEFAULT_WINDOW, estimation: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = value.parse().map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--vs" => args.vs = n,
            "--rs" => args.rs = n,
            "--window" => args.window = n,
            "--estimation" => args.estimation = n.min(1),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// Named checks; failures are listed again at the end.
#[derive(Default)]
struct Checks {
    total: usize,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl Display) -> bool {
        self.total += 1;
        if ok {
            println!("ok    {name}");
        } else {
            println!("FAIL  {name}: {detail}");
            self.failed.push(name.to_string());
        }
        ok
    }

    fn eq<T: PartialEq + Debug>(&mut self, name: &str, got: T, want: T) -> bool {
        let detail = format!("\n  got:  {got:?}\n  want: {want:?}");
        self.check(name, got == want, detail)
    }

    fn ok<T>(&mut self, name: &str, result: Result<T, Error>) -> Option<T> {
        match result {
            Ok(value) => {
                self.check(name, true, "");
                Some(value)
            }
            Err(err) => {
                self.check(name, false, error_chain(&err));
                None
            }
        }
    }

    fn summary(&self) -> ExitCode {
        if self.failed.is_empty() {
            println!("VMCHECK PASS: {} checks", self.total);
            ExitCode::SUCCESS
        } else {
            let names = self.failed.join(", ");
            println!(
                "VMCHECK FAIL: {} of {} checks failed: {names}",
                self.failed.len(),
                self.total
            );
            ExitCode::from(1)
        }
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!(
                "vmcheck: {msg}\nusage: vmcheck [--vs N] [--rs N] [--window N] [--estimation 0|1]"
            );
            return ExitCode::from(2);
        }
    };
    let mut ipvs = match NetlinkIpvs::connect() {
        Ok(ipvs) => ipvs.with_window(args.window),
        Err(err) => {
            println!("VMCHECK FAIL: cannot open IPVS netlink: {}", error_chain(&err));
            return ExitCode::from(2);
        }
    };
    let mut checks = Checks::default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("kernel {}, IPVS family id {:#x}", kernel.trim(), ipvs.family_id());
    check_info(&mut ipvs, &mut checks);
    check_one_by_one(&mut ipvs, &mut checks);
    check_batched(&mut ipvs, &mut checks);
    check_timeouts(&mut ipvs, &mut checks);
    check_refusal_flood(&mut ipvs, &mut checks);
    check_bulk(&mut ipvs, &mut checks, &args);
    checks.ok("flush at the end", ipvs.flush());
    checks.summary()
}

fn check_info(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let Some(info) = checks.ok("info", ipvs.info()) else { return };
    let proc = std::fs::read_to_string("/proc/net/ip_vs").unwrap_or_default();
    let want = format!("IP Virtual Server version {} (size={})", info.version, info.conn_tab_size);
    checks.eq("info agrees with /proc/net/ip_vs", proc.lines().next(), Some(want.as_str()));
    show_info_bytes(checks);
}

/// The GET_INFO exchange as raw datagrams (through the trace hook), for the record.
fn show_info_bytes(checks: &mut Checks) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let traced = NetlinkIpvs::connect().map(|c| {
        c.with_trace(move |dir, bytes| {
            if let Ok(mut seen) = sink.lock() {
                seen.push(format!("{dir:?} {}", hex(bytes)));
            }
        })
    });
    let info = traced.and_then(|mut c| c.info());
    let lines = seen.lock().map(|s| s.clone()).unwrap_or_default();
    // the family was resolved before the hook: the request, its reply, the (capped) ACK
    checks.check("trace: GET_INFO datagrams seen", info.is_ok() && lines.len() == 3, lines.len());
    lines.iter().for_each(|line| println!("      {line}"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// The services of the scripted test: both families, three protocols,
/// rr and sh, with and without persistence, one with a /24 netmask.
fn script_services() -> Vec<VirtualServer> {
    let mut netmasked = VirtualServer::new(ip("10.0.0.3"), 80, Protocol::Tcp).persistent(60);
    netmasked.netmask = 24;
    vec![
        VirtualServer::new(ip("10.0.0.1"), 80, Protocol::Tcp),
        VirtualServer::new(ip("10.0.0.1"), 53, Protocol::Udp).scheduler("sh").persistent(10800),
        VirtualServer::new(ip("10.0.0.2"), 3868, Protocol::Sctp),
        VirtualServer::new(ip("2001:db8::1"), 443, Protocol::Tcp).persistent(300),
        VirtualServer::new(ip("2001:db8::1"), 53, Protocol::Udp).scheduler("sh").persistent(10800),
        VirtualServer::new(ip("2001:db8::2"), 3868, Protocol::Sctp),
        netmasked,
    ]
}

fn backend(vs: &VirtualServer, n: u8, weight: u32) -> RealServer {
    let addr = match vs.addr {
        IpAddr::V4(_) => IpAddr::from([10, 1, 0, n]),
        IpAddr::V6(_) => ip(&format!("2001:db8:1::{n}")),
    };
    RealServer::new(addr, vs.port + 8000, weight)
}

/// Adds, refusals (EEXIST, ENOENT, ESRCH, EINVAL), weight 0, deletes, edits.
fn script() -> Vec<Op> {
    let services = script_services();
    let mut ops = vec![Op::Flush];
    ops.extend(services.iter().cloned().map(Op::AddService));
    ops.push(Op::AddService(services[0].clone()));
    ops.push(Op::AddService(
        VirtualServer::new(ip("10.0.0.9"), 1, Protocol::Tcp).scheduler("nosuch"),
    ));
    for vs in &services {
        ops.extend((1..=3).map(|n| Op::AddDest(vs.clone(), backend(vs, n, u32::from(n)))));
    }
    let (web, dns) = (&services[0], &services[3]);
    let missing = VirtualServer::new(ip("10.0.0.99"), 80, Protocol::Tcp);
    ops.extend([
        Op::AddDest(web.clone(), backend(web, 1, 9)),
        Op::AddDest(missing.clone(), backend(web, 1, 1)),
        Op::AddDest(web.clone(), backend(dns, 1, 1)),
        Op::UpdateDest(web.clone(), backend(web, 2, 0)),
        Op::UpdateDest(web.clone(), backend(web, 7, 0)),
        Op::DelDest(web.clone(), backend(web, 3, 0)),
        Op::DelDest(web.clone(), backend(web, 3, 0)),
        Op::UpdateService(web.clone().scheduler("wrr").persistent(600)),
        Op::UpdateService(missing.clone()),
        Op::DelService(services[5].clone()),
        Op::DelService(missing),
    ]);
    ops
}

fn outcome(result: Result<(), Error>) -> Result<(), Option<Errno>> {
    result.map_err(|e| e.errno())
}

/// The script op by op on the kernel and on the fake: same outcome each time, same end state.
fn check_one_by_one(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let mut fake = FakeIpvs::new();
    let mut same = true;
    for op in script() {
        let (kernel, model) = (outcome(ipvs.run(&op)), outcome(fake.run(&op)));
        if kernel != model {
            println!("      {op}: kernel {kernel:?}, fake {model:?}");
            same = false;
        }
    }
    checks.check(
        "each op: kernel and fake answer alike (incl. EEXIST/ENOENT/ESRCH/EINVAL)",
        same,
        "see above",
    );
    compare_state(ipvs, &mut fake, checks, "one by one");
    compare_ipvsadm(ipvs, checks);
}

/// The same script as one batch (window 4, so that it spans windows).
fn check_batched(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let ops = script();
    let mut fake = FakeIpvs::new();
    let mut small = match NetlinkIpvs::connect() {
        Ok(ipvs) => ipvs.with_window(4),
        Err(err) => {
            checks.check("second socket", false, error_chain(&err));
            return;
        }
    };
    let (Some(kernel), Some(model)) =
        (checks.ok("batch applied", small.apply(&ops)), fake.apply(&ops).ok())
    else {
        return;
    };
    let failures = |r: &svcproxy::ipvs::netlink::BatchReport| -> Vec<(usize, Option<Errno>)> {
        r.failed.iter().map(|f| (f.index, f.error.errno())).collect()
    };
    checks.eq("batch: same refused ops as the fake", failures(&kernel), failures(&model));
    if let Some(first) = kernel.failed.first() {
        println!("      e.g. {}", error_chain(&first.error));
    }
    compare_state(ipvs, &mut fake, checks, "batched");
}

type State = BTreeMap<String, Vec<String>>;

/// Services and their real servers as sorted text, through any client.
fn state(ipvs: &mut dyn Ipvs) -> Result<State, Error> {
    let mut state = State::new();
    for observed in ipvs.services()? {
        let mut dests: Vec<String> =
            ipvs.dests(&observed.vs)?.iter().map(|d| format!("{:?}", d.rs)).collect();
        dests.sort();
        state.insert(format!("{:?}", observed.vs), dests);
    }
    Ok(state)
}

fn compare_state(ipvs: &mut NetlinkIpvs, fake: &mut FakeIpvs, checks: &mut Checks, how: &str) {
    let (Some(kernel), Some(model)) =
        (checks.ok(&format!("{how}: dumps"), state(ipvs)), state(fake).ok())
    else {
        return;
    };
    checks.eq(&format!("{how}: kernel dump equals the fake's state"), kernel, model);
}

/// `-t`, `-u`, `--sctp-service` and the address as ipvsadm -S prints them.
fn ipvsadm_service(vs: &VirtualServer) -> String {
    let proto = match vs.protocol {
        Protocol::Tcp => "-t",
        Protocol::Udp => "-u",
        Protocol::Sctp => "--sctp-service",
    };
    format!("{proto} {}", hostport(vs.addr, vs.port))
}

fn hostport(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// One `ipvsadm -S -n` line for a virtual server.
fn service_line(vs: &VirtualServer) -> String {
    let mut line = format!("-A {} -s {}", ipvsadm_service(vs), vs.scheduler);
    if let Some(timeout) = vs.persistent {
        line += &format!(" -p {timeout}");
        match vs.addr {
            IpAddr::V4(_) if vs.netmask != 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(vs.netmask)).unwrap_or(0);
                line += &format!(" -M {}", std::net::Ipv4Addr::from(mask));
            }
            IpAddr::V6(_) if vs.netmask != 128 => line += &format!(" -M {}", vs.netmask),
            _ => {}
        }
    }
    line
}

/// One `ipvsadm -S -n` line for a real server.
fn dest_line(vs: &VirtualServer, rs: &RealServer) -> String {
    let fwd = match rs.fwd {
        Forward::Masq => "-m",
        Forward::Tunnel => "-i",
        Forward::DirectRoute | Forward::Local | Forward::Bypass => "-g",
    };
    let target = hostport(rs.addr, rs.port);
    format!("-a {} -r {target} {fwd} -w {}", ipvsadm_service(vs), rs.weight)
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> =
        text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    lines.sort();
    lines
}

fn ipvsadm_save() -> Result<String, String> {
    let out = Command::new("ipvsadm").arg("-Sn").output().map_err(|e| format!("ipvsadm: {e}"))?;
    if !out.status.success() {
        return Err(format!("ipvsadm -Sn: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What we read through netlink, rendered like ipvsadm, equals what ipvsadm reads.
fn compare_ipvsadm(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let mut ours = String::new();
    let Some(services) = checks.ok("dump for ipvsadm comparison", ipvs.services()) else { return };
    for observed in &services {
        ours += &(service_line(&observed.vs) + "\n");
        for dest in ipvs.dests(&observed.vs).unwrap_or_default() {
            ours += &(dest_line(&observed.vs, &dest.rs) + "\n");
        }
    }
    match ipvsadm_save() {
        Ok(theirs) => {
            let same = checks.eq(
                "netlink dump equals ipvsadm -Sn",
                sorted_lines(&ours),
                sorted_lines(&theirs),
            );
            if same {
                print!("{}", theirs.lines().map(|l| format!("      {l}\n")).collect::<String>());
            }
        }
        Err(err) => {
            checks.check("ipvsadm -Sn", false, err);
        }
    }
}

/// Batches where every op is refused: all the errors must come back, none lost to
/// a full receive buffer, whatever window is asked for (it is capped).
fn check_refusal_flood(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let vs = VirtualServer::new(ip("10.0.0.1"), 80, Protocol::Tcp);
    checks.ok("flood: flush", ipvs.flush());
    checks.ok("flood: one service", ipvs.add_service(&vs));
    for window in [DEFAULT_WINDOW, 256, 512, 1024] {
        let ops = vec![Op::AddService(vs.clone()); window];
        let client = NetlinkIpvs::connect().map(|c| c.with_window(window));
        let used = client.as_ref().map_or(0, NetlinkIpvs::window);
        let reported = client.and_then(|mut c| c.apply(&ops)).map(|r| r.failed.len());
        let name = format!("flood: {window} refused ops (window {used}) all reported");
        checks.eq(&name, reported.ok(), Some(window));
    }
    checks.ok("flood: flush after", ipvs.flush());
}

fn check_timeouts(ipvs: &mut NetlinkIpvs, checks: &mut Checks) {
    let defaults = Timeouts { tcp: 900, tcp_fin: 120, udp: 300 };
    checks.eq("timeouts: kernel defaults", ipvs.timeouts().ok(), Some(defaults));
    let set = Timeouts { tcp: 1000, tcp_fin: 100, udp: 200 };
    checks.ok("set timeouts 1000 100 200", ipvs.set_timeouts(&set));
    checks.eq("timeouts read back", ipvs.timeouts().ok(), Some(set));
    let shown = Command::new("ipvsadm").args(["-L", "--timeout"]).output().map(|o| o.stdout);
    let shown = String::from_utf8_lossy(&shown.unwrap_or_default()).trim().to_string();
    checks.eq(
        "ipvsadm -L --timeout agrees",
        shown.as_str(),
        "Timeout (tcp tcpfin udp): 1000 100 200",
    );
    checks
        .ok("set only tcpfin", ipvs.set_timeouts(&Timeouts { tcp_fin: 60, ..Timeouts::default() }));
    checks.eq(
        "zero leaves the others",
        ipvs.timeouts().ok(),
        Some(Timeouts { tcp_fin: 60, ..set }),
    );
    checks.ok("restore default timeouts", ipvs.set_timeouts(&defaults));
}

/// A kube-proxy-like table: TCP ClusterIPs in 10.96/12, every tenth with
/// ClientIP affinity, `rs` endpoints each in 10.128/9.
fn bulk_table(vs_count: usize, rs_count: usize) -> Vec<(VirtualServer, Vec<RealServer>)> {
    (0..vs_count)
        .map(|i| {
            let [_, _, b, c] = (i as u32).to_be_bytes();
            let mut vs =
                VirtualServer::new(IpAddr::from([10, 96 + b / 16, b % 16, c]), 80, Protocol::Tcp);
            if i % 10 == 0 {
                vs = vs.persistent(10800);
            }
            let dests = (0..rs_count)
                .map(|j| {
                    let [_, x, y, z] = ((i * rs_count + j) as u32).to_be_bytes();
                    RealServer::new(IpAddr::from([10, 128 + x, y, z]), 8080, 1)
                })
                .collect();
            (vs, dests)
        })
        .collect()
}

fn bulk_ops(table: &[(VirtualServer, Vec<RealServer>)]) -> Vec<Op> {
    let mut ops = Vec::with_capacity(table.len() * (1 + table.first().map_or(0, |t| t.1.len())));
    for (vs, dests) in table {
        ops.push(Op::AddService(vs.clone()));
        ops.extend(dests.iter().map(|rs| Op::AddDest(vs.clone(), *rs)));
    }
    ops
}

fn bulk_text(table: &[(VirtualServer, Vec<RealServer>)]) -> String {
    let mut text = String::new();
    for (vs, dests) in table {
        text += &(service_line(vs) + "\n");
        for rs in dests {
            text += &(dest_line(vs, rs) + "\n");
        }
    }
    text
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn check_bulk(ipvs: &mut NetlinkIpvs, checks: &mut Checks, args: &Args) {
    let table = bulk_table(args.vs, args.rs);
    let ops = bulk_ops(&table);
    let want = sorted_lines(&bulk_text(&table));
    let estimation = std::fs::write(ESTIMATION, format!("{}\n", args.estimation));
    checks.check(
        "bulk: set net.ipv4.vs.run_estimation",
        estimation.is_ok(),
        format!("{estimation:?}"),
    );
    checks.ok("bulk: flush", ipvs.flush());
    let start = Instant::now();
    let report = checks.ok("bulk: batch applied", ipvs.apply(&ops));
    let ours = start.elapsed();
    checks.check("bulk: no op refused", report.is_some_and(|r| r.is_ok()), "some ops failed");
    let start = Instant::now();
    let services = ipvs.services().map(|s| s.len());
    println!("      dump of {:?} virtual servers took {}", services, secs(start.elapsed()));
    checks.eq("bulk: virtual servers dumped", services.ok(), Some(args.vs));
    let after_ours = ipvsadm_save().map(|t| sorted_lines(&t));
    checks.check("bulk: ipvsadm -Sn shows the table", after_ours.as_ref() == Ok(&want), "differs");
    time_full_dump(ipvs, checks, args);
    time_unpipelined(ipvs, checks, &ops);
    checks.ok("bulk: flush before ipvsadm", ipvs.flush());
    let theirs = time_ipvsadm_restore(&bulk_text(&table), checks);
    let after_theirs = ipvsadm_save().map(|t| sorted_lines(&t));
    checks.check(
        "bulk: ipvsadm --restore built the same table",
        after_theirs == after_ours,
        "differs",
    );
    report_bulk(checks, args, ops.len(), ours, theirs);
}

/// Reads everything back through netlink: all services, then each one's real servers.
fn time_full_dump(ipvs: &mut NetlinkIpvs, checks: &mut Checks, args: &Args) {
    let start = Instant::now();
    let dests = state(ipvs).map(|s| s.values().map(Vec::len).sum::<usize>());
    println!(
        "      full dump (services, then real servers of each) took {}",
        secs(start.elapsed())
    );
    checks.eq("bulk: real servers dumped", dests.ok(), Some(args.vs * args.rs));
}

/// The same ops with window 1 (one request, one ACK at a time) on a fresh table.
fn time_unpipelined(ipvs: &mut NetlinkIpvs, checks: &mut Checks, ops: &[Op]) {
    checks.ok("bulk: flush before window 1", ipvs.flush());
    let start = Instant::now();
    let result = NetlinkIpvs::connect().and_then(|c| c.with_window(1).apply(ops));
    let took = start.elapsed();
    let ok = result.as_ref().is_ok_and(svcproxy::ipvs::netlink::BatchReport::is_ok);
    checks.check("bulk: window 1 applied too", ok, format!("{:?}", result.map(|r| r.failed.len())));
    println!("BULK same ops, window 1 (one ACK per op): {}", secs(took));
}

/// Per-service and per-server rate estimation; a timer walks every estimator.
const ESTIMATION: &str = "/proc/sys/net/ipv4/vs/run_estimation";

fn time_ipvsadm_restore(text: &str, checks: &mut Checks) -> Option<Duration> {
    let path = "/tmp/ipvsadm-restore.txt";
    let written = File::create(path).and_then(|mut f| f.write_all(text.as_bytes()));
    if !checks.check("bulk: restore file written", written.is_ok(), format!("{written:?}")) {
        return None;
    }
    let input = File::open(path).ok()?;
    let start = Instant::now();
    let status = Command::new("ipvsadm").arg("--restore").stdin(Stdio::from(input)).status();
    let took = start.elapsed();
    let ok = status.as_ref().is_ok_and(std::process::ExitStatus::success);
    checks.check("bulk: ipvsadm --restore succeeded", ok, format!("{status:?}")).then_some(took)
}

fn report_bulk(
    checks: &mut Checks,
    args: &Args,
    ops: usize,
    ours: Duration,
    theirs: Option<Duration>,
) {
    let rate = ops as f64 / ours.as_secs_f64();
    println!(
        "BULK {} VS x {} RS = {ops} ops, run_estimation={}: NetlinkIpvs::apply (window {}) {} ({rate:.0} ops/s)",
        args.vs,
        args.rs,
        args.estimation,
        args.window,
        secs(ours)
    );
    let Some(theirs) = theirs else { return };
    let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
    println!(
        "BULK ipvsadm --restore of the same {ops} lines: {} ({ratio:.1}x slower)",
        secs(theirs)
    );
    checks.check("bulk: faster than ipvsadm --restore", ours < theirs, format!("{ratio:.2}"));
}

//! Issue 34's kernel tier: UDP flows follow their Service. A client that reuses one UDP
//! source port (as DNS resolvers and DaemonSet agents do) keeps one conntrack flow for as
//! long as it sends; these cases check that the flow is moved (its entry deleted, so the
//! next packet is NATed afresh) whenever the entry no longer matches the Service, in each
//! mode: iptables-nft (`nft_udp_flow_*`), iptables-legacy (`legacy_udp_flow_*`) and
//! nftables (`nftables_udp_flow_*`), with `svcproxy sync --watch --from FILE` in the lab's
//! node namespace.
//!
//! Two streams run through every case, each a long-running client (this binary in the
//! hidden [`STREAM_FLAG`] mode) bound to one source port, connected, sending every 100 ms
//! and logging per send the wall-clock time and which pod answered (or `none`, `refused`):
//! the `client` pod to the ClusterIP 198.19.255.53:53, and the external namespace to the
//! NodePort 198.19.1.1:30053. pod1 and pod2 each answer with their own name and keep
//! answering whatever the Service says.
//!
//! | case | what happens | must hold |
//! |---|---|---|
//! | `boot_race` | the streams send before any svcproxy rule exists (conntrack caches the flows un-NATed, asserted), then svcproxy starts with pod1 | pod1 answers within 2 s of the first sync |
//! | `zero_to_one_endpoint` | no endpoints (flows rejected, asserted), then pod1 | pod1 answers within 2 s of the sync |
//! | `endpoint_replaced_while_running` | pod1 replaced by pod2 while svcproxy runs | pod2 answers within 2 s of the sync, pod1 never again |
//! | `restart_keeps_the_flow` | two endpoints; svcproxy stopped and started on the same file | the other pod never answers, no second without answers; `conntrack -E` sees no DESTROY/NEW of the flow (a `conntrack -D` at the end must show one), its id stays and its packet counter grows by every send |
//! | `endpoint_removed_while_down` | svcproxy stopped, pod1 removed from the file, svcproxy started | pod2 answers within 2 s of the first sync |
//!
//! "The sync" is the `synced` line svcproxy logs when a sync has finished (its timestamp);
//! the latency is from it to the arrival of the first reply from the right pod (its send
//! time in the client's log plus the time the reply took). Each stream is watched for
//! 3.5 s after the sync, or for 1 s after the right pod first answered.
//!
//! The node namespace gets a test-owned nftables table (`inet svk_ct`) that uses conntrack
//! before any svcproxy rule exists (the kernel tracks a namespace's packets only once some
//! rule there uses conntrack), and conntrack accounting. The service range is routed to
//! the external namespace's address, which does not forward: an unmatched ClusterIP packet
//! leaves the node's POSTROUTING (so its flow is confirmed) and is dropped silently there.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::dataplane::{self, cluster_yaml, ep4, svc, udp, Port, Svc, CLIENT, CLIENT_IP4};
use crate::harness::{Case, CaseError, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Ns};
use crate::svcproxy::{path_str, temp_yaml};
use crate::watch_e2e::{spawn_svcproxy, until, Daemon};

/// Hidden argv[1]: the long-running fixed-source-port UDP client (one line per send).
const STREAM_FLAG: &str = "__svk_udp_stream";

const CIP: &str = "198.19.255.53";
const PORT: u16 = 53;
const NODE_PORT: u16 = 30053;
const CLIENT_SPORT: u16 = 40053;
const EXT_SPORT: u16 = 40054;
/// A send every INTERVAL; its reply is waited for REPLY_WAIT.
const INTERVAL: Duration = Duration::from_millis(100);
const REPLY_WAIT: Duration = Duration::from_millis(90);
/// A stream's bounds: sends and seconds (a case is far shorter; the case kills it).
const STREAM_SENDS: u32 = 900;
const STREAM_SECS: u64 = 100;
/// From the end of the sync to the first reply from the right pod.
const DEADLINE_MS: i64 = 2000;
/// Unanswered sends in a row across a restart that count as an outage (one second).
const MAX_GAP: usize = 10;
/// How long after the sync the streams are watched when the right pod has not answered.
const WATCH_AFTER_SYNC_MS: i64 = 3500;

// ---------------------------------------------------------------------------
// the cases

pub fn cases() -> Vec<Case> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(STREAM_FLAG) {
        stream_main(&args);
    }
    let mut cases = vec![];
    per_backend!(
        cases,
        udp_flow_boot_race,
        udp_flow_zero_to_one_endpoint,
        udp_flow_endpoint_replaced_while_running,
        udp_flow_restart_keeps_the_flow,
        udp_flow_endpoint_removed_while_down,
    );
    cases.push(Case::new("nftables_udp_flow_boot_race", |c| udp_flow_boot_race(c, Mode::Nftables)));
    cases.push(Case::new("nftables_udp_flow_zero_to_one_endpoint", |c| udp_flow_zero_to_one_endpoint(c, Mode::Nftables)));
    cases.push(Case::new("nftables_udp_flow_endpoint_replaced_while_running", |c| udp_flow_endpoint_replaced_while_running(c, Mode::Nftables)));
    cases.push(Case::new("nftables_udp_flow_restart_keeps_the_flow", |c| udp_flow_restart_keeps_the_flow(c, Mode::Nftables)));
    cases.push(Case::new("nftables_udp_flow_endpoint_removed_while_down", |c| udp_flow_endpoint_removed_while_down(c, Mode::Nftables)));
    cases
}

/// Case 1: the streams' flows are cached un-NATed before any rule exists; svcproxy's
/// first sync (pod1) must move them.
fn udp_flow_boot_race(ctx: &mut Ctx, m: impl Into<Mode>) -> CaseResult {
    let mut t = Test::new(ctx, m.into(), "boot race", &[1])?;
    t.start_streams()?;
    t.wait_sends(10)?;
    for i in 0..t.streams.len() {
        let s = &t.streams[i];
        let mut seen: Vec<String> = s.sends().iter().map(|x| x.got.clone()).collect();
        seen.dedup();
        t.ctx.log(format!("{}: before svcproxy the sends saw {seen:?}", s.what));
        ensure!(s.sends().iter().all(|x| x.answers().next().is_none()), "{}: {} answered before any rule exists:\n{}", t.what(), s.what, s.tail(12, None));
        let flows = flows_of(&t.lab, &s.src, s.sport)?;
        let cached = flows.iter().any(|f| f.orig_dst == s.dst && f.orig_dport == s.port.to_string() && f.reply_src == s.dst);
        t.ctx.log(format!("{}: flows before svcproxy:\n{}", s.what, lines(&flows)));
        ensure!(
            cached,
            "{}: {}: the un-NATed flow (orig dst {}:{}, reply src {}) is not cached before svcproxy starts: the case would prove nothing; conntrack has:\n{}",
            t.what(), s.what, s.dst, s.port, s.dst, lines(&flows)
        );
    }
    let started = now_ms();
    let sync = t.proxy.start()?;
    t.ctx.log(format!("svcproxy started at {}, first sync finished at {}", clock(started), clock(sync)));
    t.follow("pod1", started, sync)
}

/// Case 2: no endpoints (the streams are refused), then pod1.
fn udp_flow_zero_to_one_endpoint(ctx: &mut Ctx, m: impl Into<Mode>) -> CaseResult {
    let mut t = Test::new(ctx, m.into(), "zero to one endpoint", &[])?;
    t.proxy.start()?;
    t.start_streams()?;
    t.wait_sends(10)?;
    for s in &t.streams {
        let sends = s.sends();
        let refused = sends.iter().filter(|x| x.got == "refused").count();
        ensure!(
            sends.iter().all(|x| x.pod().is_none()) && refused > 0,
            "{}: {} with no endpoints: want refusals (REJECT) and no answer:\n{}",
            t.what(), s.what, s.tail(12, None)
        );
        t.ctx.log(format!("{}: {} sends, {refused} refused, none answered", s.what, sends.len()));
    }
    let written = t.proxy.write(&[dns(&[1])])?;
    let sync = t.proxy.synced_after(written)?;
    t.ctx.log(format!("file written at {}, synced at {}", clock(written), clock(sync)));
    t.follow("pod1", written, sync)
}

/// Case 3: pod1 replaced by pod2 while svcproxy runs; pod1 still answers.
fn udp_flow_endpoint_replaced_while_running(ctx: &mut Ctx, m: impl Into<Mode>) -> CaseResult {
    let mut t = Test::new(ctx, m.into(), "endpoint replaced while running", &[1])?;
    t.proxy.start()?;
    t.start_streams()?;
    t.answered_by("pod1")?;
    let written = t.proxy.write(&[dns(&[2])])?;
    let sync = t.proxy.synced_after(written)?;
    t.ctx.log(format!("file written at {}, synced at {}", clock(written), clock(sync)));
    t.follow("pod2", written, sync)
}

/// Case 4: svcproxy restarted on the same file: the flows stay on their pods, as the same
/// conntrack entries.
fn udp_flow_restart_keeps_the_flow(ctx: &mut Ctx, m: impl Into<Mode>) -> CaseResult {
    let mut t = Test::new(ctx, m.into(), "restart with nothing changed", &[1, 2])?;
    t.proxy.start()?;
    t.start_streams()?;
    let pods = t.answered_by_any()?;
    // Each flow: its entry before the restart (id, packets) and when it was read.
    let mut before = vec![];
    for s in &t.streams {
        let f = (one_flow(&t, s)?, now_ms());
        t.ctx.log(format!("{}: on {}; flow before the restart: {}", s.what, pods[before.len()], f.0.line));
        before.push(f);
    }
    let events_path = temp_yaml("")?;
    let mut events = Watcher(Some(t.lab.node().spawn_logged(&["conntrack", "-E", "-p", "udp", "-o", "id"], &events_path)?));
    std::thread::sleep(Duration::from_millis(300));

    let stopped = t.proxy.stop()?;
    std::thread::sleep(Duration::from_millis(1000));
    let sync = t.proxy.start()?;
    t.ctx.log(format!("stopped at {}, restarted, first sync at {}", clock(stopped), clock(sync)));
    t.wait_until_ms(sync + WATCH_AFTER_SYNC_MS)?;

    for (i, s) in t.streams.iter().enumerate() {
        let (own, sends) = (pods[i].as_str(), s.sends());
        let other: Vec<&Send> = sends.iter().filter(|x| x.answers().any(|p| p != own)).collect();
        let window: Vec<&Send> = sends.iter().filter(|x| x.t >= stopped - 200).collect();
        let (missed, longest) = gaps(&window, own);
        t.ctx.log(format!("{}: {} sends from the stop on, {missed} not answered by {own}, longest gap {longest} sends", s.what, window.len()));
        ensure!(
            longest < MAX_GAP,
            "{}: {}: {longest} sends in a row unanswered across the restart (an outage; at most {} allowed):\n{}",
            t.what(), s.what, MAX_GAP - 1, s.tail(15, Some(sync))
        );
        ensure!(
            other.is_empty(),
            "{}: {}: the flow left {own} across the restart ({} replies from another pod; stopped {}, synced {}):\n{}",
            t.what(), s.what, other.len(), clock(stopped), clock(sync), s.tail(15, Some(sync))
        );
        let (after, read) = (one_flow(&t, s)?, now_ms());
        let (before, then) = (&before[i].0, before[i].1);
        t.ctx.log(format!("{}: flow after the restart: {}", s.what, after.line));
        // A recreated entry may get the old id back (it is a hash of the entry's address,
        // which the slab can hand out again), but not the old packet count: the count must
        // have grown by every send in between.
        ensure!(
            after.id == before.id && after.id.is_some(),
            "{}: {}: the conntrack entry changed across the restart (id {:?} -> {:?}):\n  before: {}\n  after:  {}",
            t.what(), s.what, before.id, after.id, before.line, after.line
        );
        let between = sends.iter().filter(|x| x.t > then && x.t < read).count() as u64;
        let grown = after.packets.unwrap_or(0).saturating_sub(before.packets.unwrap_or(u64::MAX));
        t.ctx.log(format!("{}: packets {:?} -> {:?}, {between} sends in between", s.what, before.packets, after.packets));
        ensure!(
            grown + 2 >= between && between > 0,
            "{}: {}: the flow's packet counter grew by {grown}, but {between} sends went in between (a new entry?):\n  before: {}\n  after:  {}",
            t.what(), s.what, before.line, after.line
        );
    }
    // Positive control: deleting the first flow by hand must show up in the event log.
    let s = &t.streams[0];
    t.lab.node().run(&["conntrack", "-D", "-p", "udp", "--orig-src", &s.src, "--sport", &s.sport.to_string()])?;
    std::thread::sleep(Duration::from_millis(300));
    events.stop();
    let text = std::fs::read_to_string(&events_path).unwrap_or_default();
    let _ = std::fs::remove_file(&events_path);
    let of = |s: &Stream| -> Vec<String> {
        text.lines().filter(|l| Flow::parse(l).is_some_and(|f| f.orig_src == s.src && f.orig_sport == s.sport.to_string())).map(String::from).collect()
    };
    // The control's DESTROY, and after it the flow the next send creates, end the first
    // stream's events: only those before the control count.
    let control = of(s).iter().position(|l| l.contains("[DESTROY]"));
    ensure!(
        control.is_some(),
        "{}: the conntrack event log misses the DESTROY of a hand-deleted flow, so it proves nothing:\n{text}",
        t.what()
    );
    for (i, s) in t.streams.iter().enumerate() {
        let mut ev = of(s);
        if i == 0 {
            ev.truncate(control.unwrap_or(0));
        }
        let churn: Vec<&String> = ev.iter().filter(|l| l.contains("[DESTROY]") || l.contains("[NEW]")).collect();
        t.ctx.log(format!("{}: {} conntrack event(s) across the restart: {ev:?}", s.what, ev.len()));
        ensure!(
            churn.is_empty(),
            "{}: {}: the flow was deleted or recreated across the restart:\n{}\nclient:\n{}",
            t.what(), s.what, churn.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n"), s.tail(15, Some(sync))
        );
    }
    Ok(())
}

/// Case 5: svcproxy stopped, pod1 removed from the file (it still answers), svcproxy
/// started: its first sync must move the flows to pod2.
fn udp_flow_endpoint_removed_while_down(ctx: &mut Ctx, m: impl Into<Mode>) -> CaseResult {
    let mut t = Test::new(ctx, m.into(), "endpoint removed while down", &[1])?;
    t.proxy.start()?;
    t.start_streams()?;
    t.answered_by("pod1")?;
    let stopped = t.proxy.stop()?;
    t.proxy.write(&[dns(&[2])])?;
    t.wait_until_ms(stopped + 500)?;
    // Down, its rules stay in place: the flows stay on pod1.
    for s in &t.streams {
        let down: Vec<Send> = s.sends().into_iter().filter(|x| x.t > stopped).collect();
        ensure!(
            !down.is_empty() && down.iter().all(|x| x.answers().all(|p| p == "pod1")) && down.iter().any(|x| x.pod() == Some("pod1")),
            "{}: {}: while svcproxy was down the flow left pod1 or went unanswered:\n{}",
            t.what(), s.what, s.tail(12, None)
        );
    }
    let started = now_ms();
    let sync = t.proxy.start()?;
    t.ctx.log(format!("stopped at {}, pod1 removed from the file, started at {}, first sync at {}", clock(stopped), clock(started), clock(sync)));
    t.follow("pod2", started, sync)
}

// ---------------------------------------------------------------------------
// one case's lab, proxy and streams

#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    Iptables(Backend),
    Nftables,
}

impl From<Backend> for Mode {
    fn from(b: Backend) -> Mode {
        Mode::Iptables(b)
    }
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Iptables(b) => format!("iptables-{}", b.name()),
            Mode::Nftables => "nftables".into(),
        }
    }
}

/// The UDP Service: a NodePort (so a ClusterIP too) with the endpoints `pod<k>`.
fn dns(eps: &[u8]) -> Svc {
    let port = Port { node_port: Some(NODE_PORT), ..udp("dns", PORT) };
    let mut s = svc("dns", CIP, vec![port], eps.iter().map(|k| ep4(*k)).collect());
    s.ty = "NodePort";
    s
}

struct Test<'c> {
    ctx: &'c Ctx,
    mode: Mode,
    case: &'static str,
    // Dropped in this order: the streams, the proxy, then the lab.
    streams: Vec<Stream>,
    proxy: Proxy,
    lab: Lab,
}

impl<'c> Test<'c> {
    /// The lab (pod1, pod2 serving UDP, the client pod), conntrack in use in the node
    /// before any rule of svcproxy's, the service range routed to a silent drop, and the
    /// cluster file with the endpoints `eps` (svcproxy not started).
    fn new(ctx: &'c Ctx, mode: Mode, case: &'static str, eps: &[u8]) -> Result<Test<'c>, CaseError> {
        let mut tools = vec!["ip", "conntrack", "sysctl", "kill", "nft"];
        let bins: Vec<String> = match mode {
            Mode::Iptables(b) => netns::BackendTools::tools(b),
            Mode::Nftables => vec!["unshare".into()],
        };
        tools.extend(bins.iter().map(String::as_str));
        ctx.require(&tools)?;
        let backend = match mode {
            Mode::Iptables(b) => b,
            Mode::Nftables => Backend::Nft,
        };
        let lab = dataplane::lab(ctx, backend, &[1, 2], true)?;
        let node = lab.node();
        node.run_stdin(
            &["nft", "-f", "-"],
            Some("table inet svk_ct {\n  chain pre { type filter hook prerouting priority 0; ct state new counter; }\n  chain out { type filter hook output priority 0; ct state new counter; }\n}\n"),
        )?;
        // Packet counters per flow; events for every flow (the default, 2, gives a flow
        // events only if a listener existed when it was created).
        node.sysctl(&["net.netfilter.nf_conntrack_acct=1", "net.netfilter.nf_conntrack_events=1"])?;
        // Unmatched ClusterIP packets leave the node (their flow is confirmed) towards the
        // external namespace, which does not forward them: a silent drop, not a refusal.
        node.ip(&["route", "replace", dataplane::SVC_CIDR4, "via", netns::EXT_IP4, "dev", "vext"])?;
        let fwd = lab.external().run(&["sysctl", "-n", "net.ipv4.ip_forward"])?;
        if fwd.trim() != "0" {
            return Err(format!("the external namespace forwards (ip_forward={}): ClusterIP packets would not be dropped there", fwd.trim()).into());
        }
        let proxy = Proxy::new(&lab, mode, &[dns(eps)])?;
        ctx.log(format!("[{}] {case}: lab {}, endpoints {eps:?}", mode.name(), lab.prefix));
        Ok(Test { ctx, mode, case, streams: vec![], proxy, lab })
    }

    /// `[mode] case` for messages.
    fn what(&self) -> String {
        format!("[{}] {}", self.mode.name(), self.case)
    }

    fn start_streams(&mut self) -> Result<(), String> {
        let client = self.lab.pod(CLIENT).ok_or("no client pod")?.ns.clone();
        self.streams.push(Stream::start("ClusterIP from the client pod", &client, CLIENT_IP4, CIP, PORT, CLIENT_SPORT)?);
        let ext = self.lab.external().clone();
        self.streams.push(Stream::start("NodePort from outside", &ext, netns::EXT_IP4, netns::NODE_IP4, NODE_PORT, EXT_SPORT)?);
        Ok(())
    }

    /// Until every stream has logged `n` sends (bounded).
    fn wait_sends(&self, n: usize) -> Result<(), String> {
        until("the streams' first sends", Duration::from_secs(10) + INTERVAL * n as u32, || self.streams.iter().all(|s| s.sends().len() >= n))
            .map(|_| ())
            .map_err(|e| format!("{}: {e}: {}", self.what(), self.tails(None)))
    }

    /// Until every stream has logged a send at `ms` or later (bounded).
    fn wait_until_ms(&self, ms: i64) -> Result<(), String> {
        let limit = Duration::from_millis((ms - now_ms()).max(0) as u64) + Duration::from_secs(10);
        until("the streams to go on sending", limit, || self.streams.iter().all(|s| s.sends().last().is_some_and(|x| x.t >= ms)))
            .map(|_| ())
            .map_err(|e| format!("{}: {e}: {}", self.what(), self.tails(None)))
    }

    /// Until each stream has 5 answers, all from `pod` (bounded).
    fn answered_by(&self, pod: &str) -> Result<(), String> {
        let pods = self.answered_by_any()?;
        if pods.iter().any(|p| p != pod) {
            return Err(format!("{}: want every stream answered by {pod} before the change: {}", self.what(), self.tails(None)));
        }
        Ok(())
    }

    /// Until each stream has 5 answers; each stream's one pod (fails if a stream's answers
    /// came from two pods).
    fn answered_by_any(&self) -> Result<Vec<String>, String> {
        until("the streams to be answered", Duration::from_secs(15), || {
            self.streams.iter().all(|s| s.sends().iter().filter(|x| x.pod().is_some()).count() >= 5)
        })
        .map_err(|e| format!("{}: {e}: {}\nsvcproxy:\n{}", self.what(), self.tails(None), self.proxy.log_tail(20)))?;
        let mut pods = vec![];
        for s in &self.streams {
            let mut seen: Vec<String> = s.sends().iter().flat_map(|x| x.answers().map(String::from).collect::<Vec<_>>()).collect();
            seen.sort();
            seen.dedup();
            if seen.len() != 1 {
                return Err(format!("{}: {}: one flow answered by {seen:?}:\n{}", self.what(), s.what, s.tail(20, None)));
            }
            pods.push(seen.remove(0));
        }
        Ok(pods)
    }

    fn tails(&self, sync: Option<i64>) -> String {
        self.streams.iter().map(|s| format!("\n{}:\n{}", s.what, s.tail(12, sync))).collect()
    }

    /// Each stream must be answered by `want` within [`DEADLINE_MS`] of `sync` (the end
    /// of the sync that made the change, begun at `since`), and by no other pod after it.
    fn follow(&self, want: &str, since: i64, sync: i64) -> CaseResult {
        // Watch until each stream has been answered by `want` for a second, or has sent
        // for WATCH_AFTER_SYNC_MS past the sync (bounded in wall time too).
        let watch = |s: &Stream| {
            let sends = s.sends();
            let last = sends.last().map(|x| x.t).unwrap_or(0);
            let first = sends.iter().find(|x| x.pod() == Some(want)).map(|x| x.t);
            last >= sync + WATCH_AFTER_SYNC_MS || first.is_some_and(|f| last >= f + 1000)
        };
        let limit = Duration::from_millis((sync + WATCH_AFTER_SYNC_MS - now_ms()).max(0) as u64) + Duration::from_secs(10);
        let _ = until("the streams to follow", limit, || self.streams.iter().all(watch));
        let mut failures = vec![];
        for s in &self.streams {
            let sends = s.sends();
            let first = sends.iter().position(|x| x.pod() == Some(want));
            let verdict = match first {
                None => {
                    let after: Vec<&Send> = sends.iter().filter(|x| x.t > sync).collect();
                    let mut seen: Vec<&str> = after.iter().map(|x| x.got.as_str()).collect();
                    seen.sort();
                    seen.dedup();
                    Err(format!(
                        "{}: {}: never answered by {want} ({} sends in {} ms after the sync, which saw only {seen:?})",
                        self.what(),
                        s.what,
                        after.len(),
                        after.last().map(|x| x.t - sync).unwrap_or(0)
                    ))
                }
                Some(i) => {
                    let x = &sends[i];
                    // From the end of the sync to the reply's arrival.
                    let lat = x.t + x.rtt - sync;
                    let wrong: Vec<&Send> = sends[i..].iter().filter(|y| y.answers().any(|p| p != want)).collect();
                    self.ctx.log(format!("{}: first reply from {want} {lat:+} ms from the end of the sync (send #{}), {} sends since", s.what, x.seq, sends.len() - i));
                    if x.t < since {
                        Err(format!("{}: {}: answered by {want} before the change began (at {}): a broken setup", self.what(), s.what, clock(since)))
                    } else if lat > DEADLINE_MS {
                        Err(format!("{}: {}: answered by {want} only {lat} ms after the sync (limit {DEADLINE_MS} ms)", self.what(), s.what))
                    } else if !wrong.is_empty() {
                        Err(format!("{}: {}: after moving to {want}, answered again by another pod ({} sends)", self.what(), s.what, wrong.len()))
                    } else {
                        Ok(lat)
                    }
                }
            };
            if let Err(e) = verdict {
                let flows = flows_of(&self.lab, &s.src, s.sport).map(|f| lines(&f)).unwrap_or_else(|e| e);
                failures.push(format!("{e}\n  client log (send number, sent ms from the end of the sync, result, ms waited):\n{}\n  conntrack now:\n{flows}", s.tail(15, Some(sync))));
            }
        }
        if !failures.is_empty() {
            return Err(CaseError::Fail(format!("{}\n  svcproxy (last lines):\n{}", failures.join("\n"), self.proxy.log_tail(6))));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// svcproxy in watch mode, stopped and started

struct Proxy {
    mode: Mode,
    node: String,
    file: PathBuf,
    log: PathBuf,
    daemon: Option<Daemon>,
    starts: u32,
}

impl Proxy {
    fn new(lab: &Lab, mode: Mode, svcs: &[Svc]) -> Result<Proxy, String> {
        let file = temp_yaml(&cluster_yaml(svcs))?;
        let log = file.with_extension("log");
        Ok(Proxy { mode, node: lab.node().name.clone(), file, log, daemon: None, starts: 0 })
    }

    /// Rewrites the cluster file; the time it was written.
    fn write(&self, svcs: &[Svc]) -> Result<i64, String> {
        let t = now_ms();
        std::fs::write(&self.file, cluster_yaml(svcs)).map_err(|e| format!("{}: {e}", self.file.display()))?;
        Ok(t)
    }

    /// Starts `svcproxy sync --watch`; the end of its first sync.
    fn start(&mut self) -> Result<i64, String> {
        if self.daemon.is_some() {
            return Err("svcproxy is already running".into());
        }
        let p = path_str(&self.file).to_string();
        let mut argv = dataplane::sync_args(&p, false);
        argv.extend(["--watch", "--poll-interval", "100ms", "--healthz-bind-address", "127.0.0.1:10256"]);
        match self.mode {
            Mode::Iptables(b) => argv.extend(["--iptables-backend", b.name()]),
            Mode::Nftables => argv.extend(["--mode", "nftables"]),
        }
        self.starts += 1;
        self.log = self.file.with_extension(format!("log{}", self.starts));
        let started = now_ms();
        self.daemon = Some(spawn_svcproxy(&self.node, &argv, &[], &self.log)?);
        self.synced_after(started - 1)
    }

    /// Stops svcproxy with SIGTERM (as a rolling update does); the time it was stopped.
    fn stop(&mut self) -> Result<i64, String> {
        let Some(mut d) = self.daemon.take() else {
            return Err("svcproxy is not running".into());
        };
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(d.0.id() as i32, libc::SIGTERM) };
        let gone = until("svcproxy to exit on SIGTERM", Duration::from_secs(10), || matches!(d.0.try_wait(), Ok(Some(_))));
        let t = now_ms();
        drop(d);
        gone.map_err(|e| format!("{e}\n{}", self.log_tail(10)))?;
        Ok(t)
    }

    /// The end of the first sync logged after `t` (bounded); fails on a failed sync.
    fn synced_after(&self, t: i64) -> Result<i64, String> {
        let mut found = None;
        let mut failed = None;
        let _ = until("a sync", Duration::from_secs(30), || {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            for l in text.lines() {
                if l.contains("sync failed") {
                    failed = Some(l.to_string());
                    return true;
                }
                if l.contains(" synced ") || l.ends_with(" synced") {
                    if let Some(ts) = log_time(l).filter(|ts| *ts > t) {
                        found = Some(ts);
                        return true;
                    }
                }
            }
            false
        });
        if let Some(l) = failed {
            return Err(format!("svcproxy ({}) failed a sync: {l}\n{}", self.mode.name(), self.log_tail(20)));
        }
        found.ok_or_else(|| format!("svcproxy ({}) logged no sync after {} within 30 s:\n{}", self.mode.name(), clock(t), self.log_tail(20)))
    }

    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let l: Vec<&str> = text.lines().collect();
        l[l.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        drop(self.daemon.take());
        let _ = std::fs::remove_file(&self.file);
        for i in 1..=self.starts {
            let _ = std::fs::remove_file(self.file.with_extension(format!("log{i}")));
        }
    }
}

/// The timestamp a tracing log line starts with, in ms since the epoch.
fn log_time(line: &str) -> Option<i64> {
    let ts: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
    Some(ts.as_millisecond())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `HH:MM:SS.mmm` (UTC) of a time in ms since the epoch.
fn clock(ms: i64) -> String {
    let s = ms.rem_euclid(86_400_000);
    format!("{:02}:{:02}:{:02}.{:03}", s / 3_600_000, s / 60_000 % 60, s / 1000 % 60, s % 1000)
}

// ---------------------------------------------------------------------------
// the streams

/// A fixed-source-port client running in the background, its log in a file.
struct Stream {
    what: &'static str,
    src: String,
    dst: String,
    port: u16,
    sport: u16,
    out: PathBuf,
    child: Option<Child>,
}

/// One send: its number, time (ms since the epoch), and what came back: a pod's name,
/// `none`, `refused`, `eperm` or `error:<kind>`; `late` replies (to an earlier send) read
/// before it.
#[derive(Clone, Debug)]
struct Send {
    seq: u32,
    t: i64,
    /// From the send to the reply (or the end of the wait), ms.
    rtt: i64,
    got: String,
    late: Vec<String>,
    line: String,
}

impl Send {
    fn pod(&self) -> Option<&str> {
        self.got.starts_with("pod").then_some(self.got.as_str())
    }
    /// Every pod this send's slot heard from.
    fn answers(&self) -> impl Iterator<Item = &str> {
        self.pod().into_iter().chain(self.late.iter().map(String::as_str))
    }
}

impl Stream {
    fn start(what: &'static str, ns: &Ns, src: &str, dst: &str, port: u16, sport: u16) -> Result<Stream, String> {
        let out = temp_yaml("")?; // a fresh name, the client's output
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let exe = exe.to_string_lossy().into_owned();
        let (port_s, sport_s, every, wait, n, secs) = (
            port.to_string(),
            sport.to_string(),
            INTERVAL.as_millis().to_string(),
            REPLY_WAIT.as_millis().to_string(),
            STREAM_SENDS.to_string(),
            STREAM_SECS.to_string(),
        );
        let child = ns.spawn_logged(&[&exe, STREAM_FLAG, dst, &port_s, &sport_s, &every, &wait, &n, &secs], &out)?;
        Ok(Stream { what, src: src.into(), dst: dst.into(), port, sport, out, child: Some(child) })
    }

    fn sends(&self) -> Vec<Send> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter(|l| l.ends_with(';'))
            .filter_map(|l| {
                let mut w = l.trim_end_matches(';').split_whitespace();
                let seq = w.next()?.parse().ok()?;
                let t = w.next()?.parse().ok()?;
                let got = w.next()?.to_string();
                let rtt = w.next()?.parse().ok()?;
                let late = w.find_map(|x| x.strip_prefix("late=")).map(|x| x.split(',').map(String::from).collect()).unwrap_or_default();
                Some(Send { seq, t, rtt, got, late, line: l.to_string() })
            })
            .collect()
    }

    /// The last `n` sends, with times from `sync` when given.
    fn tail(&self, n: usize, sync: Option<i64>) -> String {
        let sends = self.sends();
        sends[sends.len().saturating_sub(n)..]
            .iter()
            .map(|x| match sync {
                Some(s) => format!("    #{} sent {:+} ms {} ({} ms){}", x.seq, x.t - s, x.got, x.rtt, if x.late.is_empty() { String::new() } else { format!(" late={}", x.late.join(",")) }),
                None => format!("    {}", x.line),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.out);
    }
}

/// Sends not answered by `own`, and the longest run of them.
fn gaps(sends: &[&Send], own: &str) -> (usize, usize) {
    let (mut missed, mut run, mut longest) = (0, 0, 0);
    for x in sends {
        if x.pod() == Some(own) {
            run = 0;
        } else {
            missed += 1;
            run += 1;
            longest = longest.max(run);
        }
    }
    (missed, longest)
}

/// The stream client: args `DST PORT SPORT INTERVAL_MS WAIT_MS COUNT MAX_SECS`. Binds
/// SPORT once, connects, sends every INTERVAL_MS (at most COUNT sends, MAX_SECS seconds)
/// and waits WAIT_MS for the reply; one line per send on stdout:
/// `SEQ EPOCH_MS RESULT RTT_MS [late=POD,...];` with RESULT a pod's name, `none`,
/// `refused`, `eperm` or `error:<kind>`.
fn stream_main(args: &[String]) -> ! {
    use std::io::Write as _;
    use std::net::{IpAddr, SocketAddr, UdpSocket};
    let parse = || -> Option<(SocketAddr, u16, Duration, Duration, u32, Duration)> {
        let ip: IpAddr = args.get(2)?.parse().ok()?;
        let port: u16 = args.get(3)?.parse().ok()?;
        let sport: u16 = args.get(4)?.parse().ok()?;
        let every: u64 = args.get(5)?.parse().ok()?;
        let wait: u64 = args.get(6)?.parse().ok()?;
        let count: u32 = args.get(7)?.parse().ok()?;
        let secs: u64 = args.get(8)?.parse().ok()?;
        Some((
            SocketAddr::new(ip, port),
            sport,
            Duration::from_millis(every.clamp(10, 10_000)),
            Duration::from_millis(wait.clamp(10, 10_000)),
            count.min(10_000),
            Duration::from_secs(secs.min(600)),
        ))
    };
    let Some((dst, sport, every, wait, count, max)) = parse() else {
        eprintln!("usage: {STREAM_FLAG} DST PORT SPORT INTERVAL_MS WAIT_MS COUNT MAX_SECS");
        std::process::exit(2);
    };
    let bind: SocketAddr = if dst.is_ipv4() { ([0, 0, 0, 0], sport).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, sport).into() };
    let s = match UdpSocket::bind(bind).and_then(|s| s.connect(dst).map(|_| s)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bind {bind} / connect {dst}: {e}");
            std::process::exit(1);
        }
    };
    let kind = |e: &std::io::Error| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "refused".to_string(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "none".to_string(),
        std::io::ErrorKind::PermissionDenied => "eperm".to_string(),
        k => format!("error:{k:?}"),
    };
    let name = |b: &[u8]| String::from_utf8_lossy(b).split_whitespace().next().unwrap_or("?").to_string();
    let mut out = std::io::stdout().lock();
    let start = Instant::now();
    let mut buf = [0u8; 512];
    for seq in 0..count {
        if start.elapsed() > max {
            break;
        }
        // Replies that came after their send's wait (and errors still pending).
        let mut late = vec![];
        if s.set_nonblocking(true).is_ok() {
            for _ in 0..16 {
                match s.recv(&mut buf) {
                    Ok(n) => late.push(name(&buf[..n])),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {}
                }
            }
            let _ = s.set_nonblocking(false);
        }
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
        let t0 = Instant::now();
        let got = match s.send(format!("ping {seq}\n").as_bytes()) {
            Err(e) => kind(&e),
            Ok(_) => {
                let _ = s.set_read_timeout(Some(wait));
                match s.recv(&mut buf) {
                    Ok(n) => name(&buf[..n]),
                    Err(e) => kind(&e),
                }
            }
        };
        let late = if late.is_empty() { String::new() } else { format!(" late={}", late.join(",")) };
        let _ = writeln!(out, "{seq} {t} {got} {}{late};", t0.elapsed().as_millis());
        let _ = out.flush();
        let next = every * (seq + 1);
        if let Some(d) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(d);
        }
    }
    std::process::exit(0)
}

// ---------------------------------------------------------------------------
// conntrack

/// One `conntrack -L`/`-E` line, parsed: the original tuple's source, port and
/// destination, the reply's source, its id and packet count (original direction).
#[derive(Clone, Debug)]
struct Flow {
    orig_src: String,
    orig_sport: String,
    orig_dst: String,
    orig_dport: String,
    reply_src: String,
    id: Option<u64>,
    packets: Option<u64>,
    line: String,
}

impl Flow {
    fn parse(line: &str) -> Option<Flow> {
        let kv: Vec<(&str, &str)> = line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let nth = |k: &str, n: usize| kv.iter().filter(|(a, _)| *a == k).nth(n).map(|(_, v)| v.to_string());
        Some(Flow {
            orig_src: nth("src", 0)?,
            orig_sport: nth("sport", 0)?,
            orig_dst: nth("dst", 0)?,
            orig_dport: nth("dport", 0)?,
            reply_src: nth("src", 1)?,
            id: nth("id", 0).and_then(|v| v.parse().ok()),
            packets: nth("packets", 0).and_then(|v| v.parse().ok()),
            line: line.trim().to_string(),
        })
    }
}

/// The node's UDP conntrack entries from `src:sport`.
fn flows_of(lab: &Lab, src: &str, sport: u16) -> Result<Vec<Flow>, String> {
    let out = lab.node().exec(&["conntrack", "-L", "-p", "udp", "--orig-src", src, "--sport", &sport.to_string(), "-o", "id"])?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter_map(Flow::parse).collect())
}

/// The stream's one conntrack entry (fails unless there is exactly one).
fn one_flow(t: &Test, s: &Stream) -> Result<Flow, String> {
    let mut f = flows_of(&t.lab, &s.src, s.sport)?;
    if f.len() != 1 {
        return Err(format!("{}: {}: want one conntrack entry, got {}:\n{}", t.what(), s.what, f.len(), lines(&f)));
    }
    Ok(f.remove(0))
}

fn lines(flows: &[Flow]) -> String {
    if flows.is_empty() {
        return "    (none)".into();
    }
    flows.iter().map(|f| format!("    {}", f.line)).collect::<Vec<_>>().join("\n")
}

/// `conntrack -E` running in the node; `stop` ends it with SIGTERM (its output flushed).
struct Watcher(Option<Child>);

impl Watcher {
    fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = until("conntrack -E to exit", Duration::from_secs(5), || matches!(c.try_wait(), Ok(Some(_))));
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

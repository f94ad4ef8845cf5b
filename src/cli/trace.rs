//! `svcproxy trace`: where does a packet go? Walks the rendered rules (or, with `--live`,
//! the kernel's) and prints every branch: the rules it matches, where it is DNATed with
//! what probability, whether it is masqueraded, dropped or rejected. In IPVS mode
//! (`--mode ipvs`) also the virtual server it hits, its scheduler, persistence and real
//! servers with their weights and shares. In nftables mode (`--mode nftables`) the base
//! chains, verdict map elements and chains of the `kube-proxy` table, each endpoint of a
//! `numgen` dispatch with its share. With `--socket-lb`, a socket from a pod or the node
//! to an address the socket-LB programs translate is shown taking that path first.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::render::load;
use super::sync::BackendArg;
use super::{ConfigFlags, EXIT_OK};
use crate::config::Mode;
use crate::iptables::restore::{self, Scope};
use crate::xtables::Dump;
use crate::ipvs::plan::SetId;
use crate::model::Protocol;
use crate::net::{parse_ip_sloppy, IpFamily};
use crate::nftables::model::NftFamily;
use crate::pipeline;
use crate::runner::live;
use crate::trace::ipvs::{IpvsTrace, Table};
use crate::trace::socketlb::{self, SocketTrace};
use crate::trace::{self, Entry, Env, Packet, Sets, Trace, Verdict};

pub const EXAMPLES: &str = "\
Examples:
  # Where does a pod's DNS query to kube-dns go?
  svcproxy trace --from fixtures/demo.yaml --src 10.244.1.99 --dst 10.96.0.10:53 --proto udp
  # Why is this LoadBalancer connection from outside dropped?
  svcproxy trace --from fixtures/demo.yaml --src 192.0.2.200 --dst 192.0.2.50:443 --entry outside
  # The same question asked of the rules in the kernel
  svcproxy trace --from fixtures/demo.yaml --live --src 10.244.1.99 --dst 10.96.0.1:443
  # In IPVS mode: the virtual server, its real servers and weights
  svcproxy trace --mode ipvs --from fixtures/demo.yaml --src 10.244.1.99 --dst 10.96.0.10:53 --proto udp
  # In nftables mode: the verdict maps and chains of the kube-proxy table
  svcproxy trace --mode nftables --from fixtures/demo.yaml --src 10.244.1.99 --dst 10.96.0.10:53 --proto udp
  # With socket-level load balancing: the socket is translated before the rules
  svcproxy trace --socket-lb --from fixtures/demo.yaml --src 10.244.1.99 --dst 10.96.0.10:53 --proto udp";

/// Where the traced packet comes from (`--entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// a pod on this node (nat PREROUTING)
    Pod,
    /// a process on the node (nat OUTPUT)
    Node,
    /// outside the node (nat PREROUTING)
    Outside,
}

impl Origin {
    /// The hook the packet enters the rules at.
    fn entry(self) -> Entry {
        if self == Origin::Node { Entry::Output } else { Entry::Prerouting }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceOutput {
    Text,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub config: ConfigFlags,

    /// Source address (IP or IP:port); default for --entry node: the node's IP (in IPVS
    /// mode, an address on kube-ipvs0 is its own source, as the kernel picks it)
    #[arg(long, value_name = "IP[:PORT]")]
    pub src: Option<String>,

    /// Destination IP:port
    #[arg(long, value_name = "IP:PORT")]
    pub dst: String,

    #[arg(long, value_enum, default_value = "tcp")]
    pub proto: Proto,

    /// Where the packet enters
    #[arg(long, value_enum, default_value = "pod")]
    pub entry: Origin,

    /// Trace what the kernel holds instead of the rendered rules: iptables-save (IPVS mode:
    /// also ipset save and the IPVS virtual servers, read over netlink; nftables mode: the
    /// kube-proxy table as nft list table prints it)
    #[arg(long)]
    pub live: bool,

    /// iptables backend for --live
    #[arg(long, value_enum, default_value = "auto")]
    pub iptables_backend: BackendArg,

    /// ClientIP affinity already pins the source to this endpoint chain (KUBE-SEP-…,
    /// iptables mode; endpoint-… or its affinity-… set, nftables mode; IPVS mode shows the
    /// virtual server's persistence instead)
    #[arg(long, value_name = "CHAIN")]
    pub affinity: Vec<String>,

    #[arg(long, value_enum, default_value = "text")]
    pub output: TraceOutput,

    /// The node load-balances local sockets (sync --socket-lb): a trace from a pod or the
    /// node to an address the socket-LB programs hold shows that path before the rules
    /// (from the plan of the same state; with --live, from the pinned maps)
    #[arg(long)]
    pub socket_lb: bool,

    /// With --live --socket-lb: the directory of the pinned maps (default: sync's)
    #[arg(long, value_name = "DIR")]
    pub socket_lb_pin_dir: Option<std::path::PathBuf>,
}

fn parse_addr(s: &str, what: &str) -> anyhow::Result<(IpAddr, Option<u16>)> {
    if let Some(ip) = parse_ip_sloppy(s.trim_start_matches('[').trim_end_matches(']')) {
        return Ok((ip, None));
    }
    let (host, port) = s.rsplit_once(':').with_context(|| format!("{what}: {s:?} is not IP or IP:PORT"))?;
    let ip = parse_ip_sloppy(host.trim_start_matches('[').trim_end_matches(']'))
        .with_context(|| format!("{what}: {host:?} is not an IP address"))?;
    let port = port.parse().with_context(|| format!("{what}: {port:?} is not a port"))?;
    Ok((ip, Some(port)))
}

/// What `addrtype LOCAL` sees: the node's addresses and loopback.
fn local_ips(loaded: &pipeline::Loaded, family: IpFamily) -> BTreeSet<IpAddr> {
    let mut local_ips: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
    local_ips.extend(loaded.config.interface_addresses.iter().flatten().copied());
    local_ips.insert(loaded.config.node_ip(family));
    local_ips.insert(family.loopback());
    local_ips
}

/// The packet to trace: `--src` (or the source the kernel would pick for a packet from
/// the node: the address itself when it is one of the node's `own` addresses, else the
/// node's IP), `--dst`, `--proto`.
fn packet(args: &TraceArgs, loaded: &pipeline::Loaded, own: &BTreeSet<IpAddr>) -> anyhow::Result<Packet> {
    let (dst, dport) = parse_addr(&args.dst, "--dst")?;
    let Some(dport) = dport else { bail!("--dst needs a port (IP:PORT)") };
    let src = match &args.src {
        Some(s) => parse_addr(s, "--src")?.0,
        None if args.entry == Origin::Node && own.contains(&dst) => dst,
        None if args.entry == Origin::Node => loaded.config.node_ip(IpFamily::of(&dst)),
        None => bail!("--src is needed unless --entry node"),
    };
    let protocol = match args.proto {
        Proto::Tcp => Protocol::Tcp,
        Proto::Udp => Protocol::Udp,
        Proto::Sctp => Protocol::Sctp,
    };
    Ok(Packet { src, dst, protocol, dport, in_interface: None })
}

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.config)?;
    let family = IpFamily::of(&parse_addr(&args.dst, "--dst")?.0);
    match loaded.config.mode {
        Mode::Ipvs => return run_ipvs(args, &loaded, family),
        Mode::Nftables => return run_nftables(args, &loaded, family),
        Mode::Iptables => {}
    }
    let packet = packet(args, &loaded, &BTreeSet::new())?;
    let dump = rules(args, &loaded, family)?;
    let env = Env { local_ips: local_ips(&loaded, family), affinity: args.affinity.iter().cloned().collect() };
    let t = trace::trace(&dump, &env, packet.clone(), args.entry.entry());
    let cached = cached_flows(args, &packet, t.outcomes.iter().map(|o| &o.verdict))?;
    let socket = socket_path(args, &loaded, &packet)?;
    print(args, &t, cached, socket, text(&t, args.entry))
}

fn run_ipvs(args: &TraceArgs, loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<ExitCode> {
    if !args.affinity.is_empty() {
        bail!("--affinity names iptables-mode KUBE-SEP chains; in IPVS mode ClientIP affinity is the virtual server's persistence, which the trace shows");
    }
    let (dump, sets, table) = if args.live { live::ipvs(args.iptables_backend.chosen(), family)? } else { rendered_ipvs(loaded, family)? };
    let mut local_ips = local_ips(loaded, family);
    // kube-ipvs0's addresses are the node's: KUBE-IPVS-IPS lists them.
    let bound: BTreeSet<IpAddr> = sets.addresses(&SetId::IpvsIps.name(family)).into_iter().collect();
    local_ips.extend(bound.iter().copied());
    let packet = packet(args, loaded, &bound)?;
    let env = Env { local_ips, affinity: BTreeSet::new() };
    let t = trace::ipvs::trace(&dump, &env, &sets, &table, packet.clone(), args.entry.entry());
    let cached = cached_flows(args, &packet, t.outcomes.iter().map(|o| &o.verdict))?;
    let socket = socket_path(args, loaded, &packet)?;
    print(args, &t, cached, socket, ipvs_text(&t, args.entry))
}

fn run_nftables(args: &TraceArgs, loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<ExitCode> {
    if let Some(a) = args.affinity.iter().find(|a| !a.starts_with("endpoint-") && !a.starts_with("affinity-")) {
        bail!("--affinity {a}: in nftables mode, name an endpoint chain (endpoint-…) or its affinity set (affinity-…)");
    }
    let table = if args.live { live::nftables(family)? } else { rendered_nftables(loaded, family)? };
    let packet = packet(args, loaded, &BTreeSet::new())?;
    let env = Env { local_ips: local_ips(loaded, family), affinity: args.affinity.iter().cloned().collect() };
    let t = trace::nftables::trace(&table, &env, packet.clone(), args.entry.entry())
        .with_context(|| format!("cannot trace the {} {} table", table.family.nft_word(), table.name))?;
    let cached = cached_flows(args, &packet, t.outcomes.iter().map(|o| &o.verdict))?;
    let socket = socket_path(args, loaded, &packet)?;
    print(args, &t, cached, socket, nftables_text(&t, args.entry))
}

/// With `--live`, the conntrack flows the packet matches (from `--src`'s port, if given),
/// each with whether the rule walk's `verdicts` send it the same way; `None` otherwise.
fn cached_flows<'a>(args: &TraceArgs, packet: &Packet, verdicts: impl Iterator<Item = &'a trace::Verdict> + Clone) -> anyhow::Result<Option<Vec<trace::conntrack::Cached>>> {
    if !args.live {
        return Ok(None);
    }
    let sport = match &args.src {
        Some(s) => parse_addr(s, "--src")?.1,
        None => None,
    };
    let flows = live::flows(packet)?;
    Ok(Some(trace::conntrack::cached(packet, sport, &flows, verdicts)))
}

/// With `--socket-lb`, what the socket-LB programs do with a socket from a pod or the
/// node to the packet's destination (`None`: not on, from outside, or left to the rules).
fn socket_path(args: &TraceArgs, loaded: &pipeline::Loaded, packet: &Packet) -> anyhow::Result<Option<SocketTrace>> {
    if !args.socket_lb || args.entry == Origin::Outside {
        return Ok(None);
    }
    if !args.live {
        return Ok(trace::socketlb::trace(&pipeline::socket_lb_wanted(loaded), packet, socketlb::Source::Plan));
    }
    let pins = match &args.socket_lb_pin_dir {
        Some(p) => p.clone(),
        None => crate::settings::defaults::defaulted(crate::settings::Settings::default()).socket_lb_pin_dir.unwrap_or_default().into(),
    };
    let maps = live::socket_lb(&pins).with_context(|| format!("the socket-LB maps under {}", pins.display()))?;
    Ok(trace::socketlb::trace(&maps.wanted, packet, socketlb::Source::Maps).map(|t| t.with_pinned(&maps.affinity, maps.now_ns)))
}

/// Prints a trace: its text (after the cached flows' lines and the socket path), or its
/// JSON (with a `conntrack` list of the cached flows when `--live`, and the `socket_lb`
/// path when a socket takes it).
fn print<T: serde::Serialize>(args: &TraceArgs, t: &T, cached: Option<Vec<trace::conntrack::Cached>>, socket: Option<SocketTrace>, text: String) -> anyhow::Result<ExitCode> {
    match args.output {
        TraceOutput::Json => {
            // The trace's own fields first, in their order, then the flows and the socket path.
            #[derive(serde::Serialize)]
            struct Out<'a, T> {
                #[serde(flatten)]
                trace: &'a T,
                #[serde(skip_serializing_if = "Option::is_none")]
                conntrack: Option<Vec<trace::conntrack::Cached>>,
                #[serde(skip_serializing_if = "Option::is_none")]
                socket_lb: Option<SocketTrace>,
            }
            let json = serde_json::to_string_pretty(&Out { trace: t, conntrack: cached, socket_lb: socket })?;
            super::out(&format!("{json}\n"))?
        }
        TraceOutput::Text => {
            let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
            let flows = cached.as_deref().map(trace::conntrack::text).unwrap_or_default();
            let socket = socket.as_ref().map(socket_text).unwrap_or_default();
            super::out(&format!("{first}\n{flows}{socket}{rest}"))?
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// The socket path's lines: the translation with each backend's share, the affinity, the
/// pinned clients, and that the rules after it see only sockets the programs do not.
pub(crate) fn socket_text(t: &SocketTrace) -> String {
    let from = match t.source {
        socketlb::Source::Plan => "the plan",
        socketlb::Source::Maps => "the pinned maps",
    };
    let mut out = format!("socket: connect()/sendmsg() to {}/{} is translated by the socket-LB programs before any packet ({from}):\n", t.service, t.protocol.lower());
    for b in &t.branches {
        let what = match &b.verdict {
            Verdict::Reject => "REFUSED: connect() fails with ECONNREFUSED (the service has no endpoints)".to_string(),
            v => format!("to {v}"),
        };
        out.push_str(&format!("{:6.2}%  {what}\n", b.probability * 100.0));
    }
    if let Some(s) = t.affinity_seconds {
        out.push_str(&format!("         ClientIP affinity {s}s: a client (its network namespace: a pod, or the node) keeps its backend while it comes back within {s}s and the backend stays\n"));
    }
    for p in &t.pinned {
        let state = if p.followed { "followed" } else { "expired or its backend gone: a new pick" };
        out.push_str(&format!("         pinned: netns {} -> {} ({state})\n", p.netns_cookie, p.backend));
    }
    out.push_str("the rules below see only sockets outside the programs' cgroup, or with the programs detached:\n");
    out
}

/// The family's `kube-proxy` table as svcproxy renders it from the cluster state.
fn rendered_nftables(loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<crate::nftables::model::Table> {
    Ok(crate::nftables::render_all(&loaded.config, &loaded.trackers)
        .into_iter()
        .find(|rs| rs.ctx.family == family)
        .with_context(|| format!("no {family} table: the cluster state is rendered for other families (see --ip-family)"))?
        .table())
}

/// The rendered IPVS plan of the family: its iptables rules (with the jumps a sync adds),
/// its ipsets and its virtual servers.
fn rendered_ipvs(loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<(Dump, Sets, Table)> {
    let plan = crate::ipvs::plan_all(&loaded.config, &loaded.trackers)
        .into_iter()
        .find(|p| p.family == family)
        .with_context(|| format!("no {family} plan: the cluster state is planned for other families (see --ip-family)"))?;
    Ok((trace::ipvs::rendered_rules(&plan), Sets::from_plan(&plan), Table::from_plan(&plan)))
}


fn rules(args: &TraceArgs, loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<Dump> {
    if args.live {
        return Ok(live::iptables(args.iptables_backend.chosen(), family)?);
    }
    let rs = pipeline::render_iptables(loaded)
        .into_iter()
        .find(|rs| rs.ctx.node.family == family)
        .with_context(|| format!("no {family} rules: the cluster state is rendered for other families (see --ip-family)"))?;
    Ok(restore::dump(&rs, Scope::Full, &[]))
}

fn text(t: &Trace, entry: Origin) -> String {
    let p = &t.packet;
    let mut out = format!("packet: {} {} -> {}:{} from {entry:?} ({})\n", p.protocol.lower(), p.src, p.dst, p.dport,
        if t.entry == Entry::Output { "nat OUTPUT" } else { "nat PREROUTING" });
    for o in &t.outcomes {
        let verdict = match &o.verdict {
            Verdict::Undecided => "no service rule matched: not a service address (delivered as addressed)".to_string(),
            Verdict::Drop => "DROPPED".to_string(),
            Verdict::Reject => "REJECTED (the service has no endpoints)".to_string(),
            Verdict::Accept => "ACCEPTED by the filter table".to_string(),
            v => format!("DNAT to {v}"),
        };
        let masq = if o.masquerade { ", masqueraded" } else { "" };
        out.push_str(&format!("{:6.2}%  {verdict}{masq}\n", o.probability * 100.0));
        steps(&mut out, &o.path, &o.notes);
    }
    out
}

fn nftables_text(t: &trace::nftables::Trace, entry: Origin) -> String {
    let p = &t.packet;
    let hook = if t.entry == Entry::Output { "hook output" } else { "hook prerouting" };
    let mut out = format!("packet: {} {} -> {}:{} from {entry:?} (nftables mode, {hook})\n", p.protocol.lower(), p.src, p.dst, p.dport);
    for o in &t.outcomes {
        let why = o.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
        let verdict = match &o.verdict {
            Verdict::Undecided => "no service rule matched: not a service address (delivered as addressed)".to_string(),
            Verdict::Drop => format!("DROPPED{why}"),
            Verdict::Reject => format!("REJECTED{why}"),
            v => format!("DNAT to {v}"),
        };
        let masq = if o.masquerade { ", masqueraded" } else { "" };
        out.push_str(&format!("{:6.2}%  {verdict}{masq}\n", o.probability * 100.0));
        steps(&mut out, &o.path, &[]);
    }
    out
}

fn steps(out: &mut String, path: &[String], notes: &[String]) {
    for step in path {
        out.push_str(&format!("         {step}\n"));
    }
    for note in notes {
        out.push_str(&format!("         ? {note}\n"));
    }
}

fn percent(p: Option<f64>) -> String {
    match p {
        Some(p) => format!("{:6.2}%", p * 100.0),
        None => format!("{:>7}", "?"),
    }
}

fn ipvs_text(t: &IpvsTrace, entry: Origin) -> String {
    let p = &t.packet;
    let hook = if t.entry == Entry::Output { "nat OUTPUT" } else { "nat PREROUTING" };
    let mut out = format!("packet: {} {} -> {}:{} from {entry:?} (IPVS mode, {hook})\n", p.protocol.lower(), p.src, p.dst, p.dport);
    for vs in &t.virtual_servers {
        let service = vs.service.as_ref().map(|s| format!(" ({s})")).unwrap_or_default();
        let persistence = match &vs.persistence {
            Some(pe) => {
                let group = if pe.netmask == if vs.address.is_ipv4() { 32 } else { 128 } {
                    String::new()
                } else {
                    format!(", clients grouped by /{}", pe.netmask)
                };
                format!("persistent {0}s (ClientIP affinity{group}: a client's new connections go where its first one went, until {0}s after its last)", pe.timeout_seconds)
            }
            None => "not persistent".into(),
        };
        let addr = crate::net::join_host_port(&vs.address, vs.port);
        out.push_str(&format!("virtual server: {} {addr}{service}, scheduler {}, {persistence}\n", vs.protocol.upper(), vs.scheduler));
        if vs.real_servers.is_empty() {
            out.push_str("  no real servers\n");
        }
        for r in &vs.real_servers {
            let rs = crate::net::join_host_port(&r.address, r.port);
            let forward = if r.forward == "masq" { String::new() } else { format!(" ({})", r.forward) };
            let share = match (r.draining, r.share) {
                (true, _) => ": draining, never chosen for new connections".to_string(),
                (false, Some(s)) => format!(": {:.2}% of new connections", s * 100.0),
                (false, None) => String::new(),
            };
            out.push_str(&format!("  real server {rs} weight {}{forward}{share}\n", r.weight));
        }
        out.push_str(&format!("  {}\n", vs.selection));
    }
    for o in &t.outcomes {
        let masq = if o.masquerade { ", masqueraded" } else { "" };
        out.push_str(&format!("{}  {}{masq}\n", percent(o.probability), o.reason));
        steps(&mut out, &o.path, &o.notes);
    }
    out
}

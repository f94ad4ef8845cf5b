//! `svcproxy trace`: where does a packet go? Walks the rendered rules (or, with `--live`,
//! the kernel's) and prints every branch: the rules it matches, where it is DNATed with
//! what probability, whether it is masqueraded, dropped or rejected.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use serde::Serialize;

use super::render::load;
use super::sync::BackendArg;
use super::{ConfigFlags, EXIT_OK};
use crate::iptables::apply::{ExecRestorer, Restorer};
use crate::iptables::restore::{self, Dump, Scope};
use crate::net::{parse_ip_sloppy, IpFamily};
use crate::pipeline;
use crate::trace::{self, Entry, Env, Packet, Trace};

pub const EXAMPLES: &str = "\
Examples:
  # Where does a pod's DNS query to kube-dns go?
  svcproxy trace --from fixtures/demo.yaml --src 10.244.1.99 --dst 10.96.0.10:53 --proto udp
  # Why is this LoadBalancer connection from outside dropped?
  svcproxy trace --from fixtures/demo.yaml --src 192.0.2.200 --dst 192.0.2.50:443 --entry outside
  # The same question asked of the rules in the kernel
  svcproxy trace --from fixtures/demo.yaml --live --src 10.244.1.99 --dst 10.96.0.1:443";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum From {
    /// a pod on this node (nat PREROUTING)
    Pod,
    /// a process on the node (nat OUTPUT)
    Node,
    /// outside the node (nat PREROUTING)
    Outside,
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

    /// Source address (IP or IP:port); default: the node's IP for --entry node
    #[arg(long, value_name = "IP[:PORT]")]
    pub src: Option<String>,

    /// Destination IP:port
    #[arg(long, value_name = "IP:PORT")]
    pub dst: String,

    #[arg(long, value_enum, default_value = "tcp")]
    pub proto: Proto,

    /// Where the packet enters
    #[arg(long, value_enum, default_value = "pod")]
    pub entry: From,

    /// Trace the rules in the kernel (iptables-save) instead of the rendered ones
    #[arg(long)]
    pub live: bool,

    /// iptables backend for --live
    #[arg(long, value_enum, default_value = "auto")]
    pub iptables_backend: BackendArg,

    /// ClientIP affinity already pins the source to this endpoint chain (KUBE-SEP-…)
    #[arg(long, value_name = "CHAIN")]
    pub affinity: Vec<String>,

    #[arg(long, value_enum, default_value = "text")]
    pub output: TraceOutput,
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

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let loaded = load(&args.config)?;
    let (dst, dport) = parse_addr(&args.dst, "--dst")?;
    let Some(dport) = dport else { bail!("--dst needs a port (IP:PORT)") };
    let family = IpFamily::of(&dst);
    let src = match &args.src {
        Some(s) => parse_addr(s, "--src")?.0,
        None if args.entry == From::Node => loaded.config.node_ip(family),
        None => bail!("--src is needed unless --entry node"),
    };
    let dump = rules(args, &loaded, family)?;
    let mut local_ips: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
    local_ips.extend(loaded.config.interface_addresses.iter().flatten().copied());
    local_ips.insert(loaded.config.node_ip(family));
    let env = Env { local_ips, affinity: args.affinity.iter().cloned().collect() };
    let protocol = format!("{:?}", args.proto).to_lowercase();
    let packet = Packet { src, dst, protocol, dport, in_interface: None };
    let entry = if args.entry == From::Node { Entry::Output } else { Entry::Prerouting };
    let t = trace::trace(&dump, &env, packet, entry);
    match args.output {
        TraceOutput::Json => super::out(&format!("{}\n", serde_json::to_string_pretty(&t)?))?,
        TraceOutput::Text => super::out(&text(&t, args.entry))?,
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn rules(args: &TraceArgs, loaded: &pipeline::Loaded, family: IpFamily) -> anyhow::Result<Dump> {
    if args.live {
        let mut r = ExecRestorer::new(args.iptables_backend.resolve());
        let mut text = String::new();
        for table in ["filter", "nat"] {
            text.push_str(&r.save(family, table)?);
        }
        return Ok(restore::parse(&text)?);
    }
    let rs = pipeline::render_iptables(loaded)
        .into_iter()
        .find(|rs| rs.ctx.family == family)
        .with_context(|| format!("no {family} rules: the cluster state is rendered for other families (see --ip-family)"))?;
    Ok(restore::parse(&restore::write(&rs, Scope::Full, &[]))?)
}

fn text(t: &Trace, entry: From) -> String {
    let p = &t.packet;
    let mut out = format!("packet: {} {} -> {}:{} from {entry:?} ({})\n", p.protocol, p.src, p.dst, p.dport,
        if t.entry == Entry::Output { "nat OUTPUT" } else { "nat PREROUTING" });
    for o in &t.outcomes {
        let verdict = match o.verdict.as_str() {
            "" => "no service rule matched: not a service address (delivered as addressed)".to_string(),
            "DROP" => "DROPPED".to_string(),
            "REJECT" => "REJECTED (the service has no endpoints)".to_string(),
            "ACCEPT" => "ACCEPTED by the filter table".to_string(),
            v => format!("DNAT to {v}"),
        };
        let masq = if o.masquerade { ", masqueraded" } else { "" };
        out.push_str(&format!("{:6.2}%  {verdict}{masq}\n", o.probability * 100.0));
        for step in &o.path {
            out.push_str(&format!("         {step}\n"));
        }
    }
    out
}

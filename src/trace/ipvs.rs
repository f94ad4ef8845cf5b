//! The tracer in IPVS mode: kube-proxy's IPVS-mode iptables rules walked with the same
//! matcher (ipset membership from the plan or `ipset save`), and the IPVS virtual server
//! the packet hits, at the place the kernel runs it:
//!
//! * from a pod or from outside: nat PREROUTING; then, for a node address (kube-ipvs0's
//!   included), filter INPUT and IPVS (`ip_vs_remote_request`, LOCAL_IN after the filter
//!   table); else filter FORWARD and the packet is routed on as addressed;
//! * from the node: nat OUTPUT, then IPVS (`ip_vs_local_request`, LOCAL_OUT after nat);
//!   without a virtual server, filter OUTPUT (and filter INPUT for a node address);
//! * a packet IPVS forwarded (VS/NAT: destination rewritten to the real server) goes
//!   through filter OUTPUT (`-m ipvs` sees its virtual server) and nat POSTROUTING, where
//!   it is masqueraded or not.
//!
//! A virtual server without a real server that may take new connections (none, or all
//! weight 0) makes IPVS answer ICMP port unreachable and drop the packet (`ip_vs_leave`):
//! the client sees "connection refused". That is what kube-proxy's IPVS mode leaves for a
//! service without endpoints: the virtual server, with no real servers.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use super::{run_chain, Branch, Cx, Entry, Env, Flow, Packet, Sets, Verdict};
use crate::xtables::Dump;
use crate::ipvs::values::{Forward, Protocol, RealServer, ServiceKey, VirtualServer};
use crate::ipvs::plan::FamilyState;
use crate::ipvs::text::{dest_line, service_line};
use crate::net::join_host_port;

/// One virtual server as the tracer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Virtual {
    pub vs: VirtualServer,
    pub reals: Vec<RealServer>,
    /// The service port it serves, when known (rendered plans).
    pub service: Option<String>,
}

/// The virtual servers, by protocol, address and port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    servers: BTreeMap<ServiceKey, Virtual>,
}

impl Table {
    pub fn insert(&mut self, mut v: Virtual) {
        v.reals.sort_by_key(|r| (r.addr, r.port));
        self.servers.insert(v.vs.key(), v);
    }

    pub fn from_plan(plan: &FamilyState) -> Table {
        let mut t = Table::default();
        for d in plan.services.values() {
            t.insert(Virtual { vs: d.vs.clone(), reals: d.reals.clone(), service: Some(d.owner.to_string()) });
        }
        t
    }

    /// The kernel's lookup: protocol, address and port; then a port-0 (all ports)
    /// persistent virtual server on the address.
    fn lookup(&self, p: &Packet) -> Option<&Virtual> {
        let key = ServiceKey { addr: p.dst, port: p.dport, protocol: p.protocol };
        self.servers.get(&key).or_else(|| {
            self.servers.get(&ServiceKey { port: 0, ..key }).filter(|v| v.vs.persistent.is_some())
        })
    }
}

/// The iptables rules of a plan as the kernel holds them after a sync: the plan's rules
/// and the jumps from the built-in chains, which kube-proxy (and svcproxy) prepend one by
/// one in kube-proxy's order, so the last one comes first.
pub fn rendered_rules(plan: &FamilyState) -> Dump {
    let mut dump = crate::xtables::table::dump_all(&plan.iptables);
    for j in crate::ipvs::plan::rules::jumps().iter().rev() {
        if let Some(t) = dump.tables.get_mut(j.table) {
            t.append(&j.rule());
        }
    }
    dump
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Persistence {
    pub timeout_seconds: u32,
    /// Clients are grouped by this prefix (full length: one client per address).
    pub netmask: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealReport {
    pub address: IpAddr,
    pub port: u16,
    pub weight: u32,
    pub forward: &'static str,
    /// Its share of new connections, when the scheduler's choice follows the weights.
    pub share: Option<f64>,
    /// Weight 0: kept for its connections, never chosen for new ones.
    pub draining: bool,
}

/// A virtual server the packet hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VirtualReport {
    #[serde(serialize_with = "super::verdict::serialize_protocol")]
    pub protocol: Protocol,
    pub address: IpAddr,
    pub port: u16,
    pub service: Option<String>,
    pub scheduler: String,
    pub persistence: Option<Persistence>,
    /// As `ipvsadm -Sn` prints it.
    pub ipvsadm: String,
    /// How the scheduler picks a real server.
    pub selection: String,
    pub real_servers: Vec<RealReport>,
}

/// What finally happens on one branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IpvsOutcome {
    /// The real server (`ip:port`), `DROP`, `REJECT`, `ACCEPT` (the filter table accepted
    /// it, no virtual server) or undecided (no service rule and no virtual server).
    pub verdict: Verdict,
    /// `None` when the scheduler does not pick by weight (lc, sh, …).
    pub probability: Option<f64>,
    pub masquerade: bool,
    /// The outcome in words.
    pub reason: String,
    /// The virtual server (`TCP 10.96.0.1:443`) it went through.
    pub virtual_server: Option<String>,
    /// The rules matched and the IPVS entries used, in order (`TABLE -A …`, `ipvs -A …`).
    pub path: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IpvsTrace {
    pub mode: &'static str,
    pub packet: Packet,
    pub entry: Entry,
    pub virtual_servers: Vec<VirtualReport>,
    pub outcomes: Vec<IpvsOutcome>,
}

/// How a scheduler picks, and each real server's share of new connections when that
/// follows from the weights alone (rr: equal among weight > 0; wrr: weight / sum).
pub fn shares(vs: &VirtualServer, reals: &[RealServer]) -> (String, Vec<Option<f64>>) {
    let live: Vec<&RealServer> = reals.iter().filter(|r| r.weight > 0).collect();
    let sum: f64 = live.iter().map(|r| f64::from(r.weight)).sum();
    let share = |f: &dyn Fn(&RealServer) -> f64| reals.iter().map(|r| (r.weight > 0).then(|| f(r))).collect();
    // IP_VS_SVC_F_SCHED2: sh-port / mh-port (the source port is hashed too).
    let port = if vs.flags & 0x10 != 0 { " and port" } else { "" };
    let none = || vec![None; reals.len()];
    match vs.scheduler.as_str() {
        "rr" => ("rr (round robin): new connections take turns among the real servers with weight > 0".into(),
            share(&|_| 1.0 / live.len() as f64)),
        "wrr" => ("wrr (weighted round robin): new connections in proportion to the weights".into(),
            share(&|r| f64::from(r.weight) / sum)),
        "lc" => ("lc (least connection): the real server with the fewest connections; no fixed shares".into(), none()),
        "wlc" => ("wlc (weighted least connection): the fewest connections per unit of weight; no fixed shares".into(), none()),
        "sed" => ("sed (shortest expected delay): by active connections and weight; no fixed shares".into(), none()),
        "nq" => ("nq (never queue): an idle real server, else shortest expected delay; no fixed shares".into(), none()),
        "sh" => (format!("sh (source hashing): a hash of the client's address{port} picks the real server, fixed per client"), none()),
        "mh" => (format!("mh (maglev hashing): a hash of the client's address{port} picks the real server, fixed per client"), none()),
        "dh" => ("dh (destination hashing): a hash of the destination address picks the real server".into(), none()),
        "lblc" | "lblcr" => (format!("{} (locality-based least connection): per destination address, by connections; no fixed shares", vs.scheduler), none()),
        "fo" => ("fo (weighted failover): the available real server with the highest weight".into(), none()),
        "ovf" => ("ovf (weighted overflow): the highest-weight real server until its connections exceed its weight".into(), none()),
        s => (format!("{s}: the tracer does not model how this scheduler picks"), none()),
    }
}

fn forward_name(f: Forward) -> &'static str {
    match f {
        Forward::Masq => "masq",
        Forward::Local => "local",
        Forward::Tunnel => "tunnel",
        Forward::DirectRoute => "route",
        Forward::Bypass => "bypass",
    }
}

fn report(v: &Virtual) -> VirtualReport {
    let (selection, shares) = shares(&v.vs, &v.reals);
    VirtualReport {
        protocol: v.vs.protocol,
        address: v.vs.addr,
        port: v.vs.port,
        service: v.service.clone(),
        scheduler: v.vs.scheduler.clone(),
        persistence: v.vs.persistent.map(|timeout_seconds| Persistence { timeout_seconds, netmask: v.vs.netmask }),
        ipvsadm: service_line(&v.vs),
        selection,
        real_servers: v
            .reals
            .iter()
            .zip(shares)
            .map(|(r, share)| RealReport {
                address: r.addr,
                port: r.port,
                weight: r.weight,
                forward: forward_name(r.fwd),
                share,
                draining: r.weight == 0,
            })
            .collect(),
    }
}

struct Tracer<'a> {
    cx: Cx<'a>,
    table: &'a Table,
    servers: Vec<VirtualReport>,
    outcomes: Vec<IpvsOutcome>,
}

/// Traces one packet in IPVS mode. `env.local_ips` should hold the addresses on
/// kube-ipvs0: they are the node's (`addrtype LOCAL`, local delivery).
pub fn trace(dump: &Dump, env: &Env, sets: &Sets, table: &Table, packet: Packet, entry: Entry) -> IpvsTrace {
    let mut t = Tracer { cx: Cx { dump, env, sets }, table, servers: Vec::new(), outcomes: Vec::new() };
    let start = Branch::new(packet.clone());
    match entry {
        Entry::Prerouting => {
            for (b, flow) in run_chain(&t.cx, "nat", "PREROUTING", start, 0) {
                if let Some(v) = flow.stopped() {
                    t.stop(b, v, "nat PREROUTING", None, Some(1.0));
                } else if env.local_ips.contains(&b.packet.dst) {
                    t.input(b);
                } else {
                    t.forward(b);
                }
            }
        }
        Entry::Output => {
            for (b, flow) in run_chain(&t.cx, "nat", "OUTPUT", start, 0) {
                match flow.stopped() {
                    Some(v) => t.stop(b, v, "nat OUTPUT", None, Some(1.0)),
                    None => t.local_out(b),
                }
            }
        }
    }
    IpvsTrace { mode: "ipvs", packet, entry, virtual_servers: t.servers, outcomes: t.outcomes }
}

fn what(p: &Packet) -> String {
    format!("{} {}", p.protocol.lower(), join_host_port(&p.dst, p.dport))
}

impl Tracer<'_> {
    /// Records an outcome. `share`: the real server's share of new connections (1 when
    /// IPVS did not choose; `None` when the scheduler's choice has no fixed shares); the
    /// outcome's probability is that times the branch's.
    fn push(&mut self, b: Branch, verdict: Verdict, share: Option<f64>, masquerade: bool, reason: String, vs: Option<ServiceKey>) {
        self.outcomes.push(IpvsOutcome {
            verdict,
            probability: share.map(|s| s * b.probability),
            masquerade,
            reason,
            virtual_server: vs.map(|k| k.to_string()),
            path: b.path,
            notes: b.notes,
        });
    }

    /// DROP or REJECT at `hook` (after IPVS when `vs` is set).
    fn stop(&mut self, b: Branch, verdict: &Verdict, hook: &str, vs: Option<ServiceKey>, share: Option<f64>) {
        let word = if *verdict == Verdict::Drop { "DROPPED" } else { "REJECTED" };
        let mut reason = format!("{word} in {hook}");
        match (vs, self.table.lookup(&b.packet)) {
            (Some(_), _) => reason.push_str(", after IPVS chose the real server"),
            (None, Some(v)) => reason.push_str(&format!(", before it reaches IPVS virtual server {}", v.vs.key())),
            (None, None) if self.cx.env.local_ips.contains(&b.packet.dst) => {
                reason.push_str(&format!(" (there is no IPVS virtual server for {})", what(&b.packet)))
            }
            (None, None) => {}
        }
        self.push(b, verdict.clone(), share, false, reason, vs);
    }

    fn delivered(&mut self, b: Branch, accepted: bool) {
        let reason = format!(
            "{}no IPVS virtual server for {}: delivered to the node itself (whatever listens there)",
            if accepted { "ACCEPTED by filter INPUT; " } else { "" },
            what(&b.packet)
        );
        self.push(b, if accepted { Verdict::Accept } else { Verdict::Undecided }, Some(1.0), false, reason, None);
    }

    /// A packet for a node address: filter INPUT, then IPVS.
    fn input(&mut self, b: Branch) {
        for (b, flow) in run_chain(&self.cx, "filter", "INPUT", b, 0) {
            if let Some(v) = flow.stopped() {
                self.stop(b, v, "filter INPUT", None, Some(1.0));
                continue;
            }
            match self.table.lookup(&b.packet) {
                Some(v) => self.schedule(b, v),
                None => self.delivered(b, matches!(&flow, Flow::Done(Verdict::Accept))),
            }
        }
    }

    /// A packet for another host: filter FORWARD, nat POSTROUTING.
    fn forward(&mut self, b: Branch) {
        for (b, flow) in run_chain(&self.cx, "filter", "FORWARD", b, 0) {
            match flow.stopped() {
                Some(v) => self.stop(b, v, "filter FORWARD", None, Some(1.0)),
                None => self.leave(b, None, Some(1.0), "not a node address: routed on as addressed (not a service address)"),
            }
        }
    }

    /// A packet from the node: IPVS at LOCAL_OUT, or filter OUTPUT (and INPUT when it is
    /// for the node itself).
    fn local_out(&mut self, b: Branch) {
        if let Some(v) = self.table.lookup(&b.packet) {
            return self.schedule(b, v);
        }
        for (b, flow) in run_chain(&self.cx, "filter", "OUTPUT", b, 0) {
            if let Some(v) = flow.stopped() {
                self.stop(b, v, "filter OUTPUT", None, Some(1.0));
            } else if self.cx.env.local_ips.contains(&b.packet.dst) {
                for (b, flow) in run_chain(&self.cx, "filter", "INPUT", b, 0) {
                    match flow.stopped() {
                        Some(v) => self.stop(b, v, "filter INPUT", None, Some(1.0)),
                        None => self.delivered(b, matches!(&flow, Flow::Done(Verdict::Accept))),
                    }
                }
            } else {
                self.leave(b, None, Some(1.0), "not a service address: sent as addressed");
            }
        }
    }

    /// IPVS picks a real server (or has none to pick).
    fn schedule(&mut self, mut b: Branch, v: &Virtual) {
        let key = v.vs.key();
        let report = report(v);
        if !self.servers.iter().any(|s| s.ipvsadm == report.ipvsadm) {
            self.servers.push(report.clone());
        }
        b.path.push(format!("ipvs {}", service_line(&v.vs)));
        b.state.ipvs = Some(key);
        let chosen: Vec<(&RealServer, Option<f64>)> =
            v.reals.iter().zip(report.real_servers.iter().map(|r| r.share)).filter(|(r, _)| r.weight > 0).collect();
        if chosen.is_empty() {
            let why = if v.reals.is_empty() { "has no real servers" } else { "has only draining real servers (weight 0)" };
            let reason = format!(
                "REJECTED by IPVS: virtual server {key} {why}; IPVS answers ICMP port unreachable (connection refused) and drops the packet"
            );
            return self.push(b, Verdict::Reject, Some(1.0), false, reason, Some(key));
        }
        for (rs, share) in chosen {
            let mut nb = b.clone();
            nb.path.push(format!("ipvs {}", dest_line(&v.vs, rs)));
            if matches!(rs.fwd, Forward::Masq | Forward::Local) {
                nb.packet.dst = rs.addr;
                nb.packet.dport = rs.port;
                nb.state.dnat = true;
            }
            for (ob, flow) in run_chain(&self.cx, "filter", "OUTPUT", nb, 0) {
                match flow.stopped() {
                    Some(verdict) => self.stop(ob, verdict, "filter OUTPUT", Some(key), share),
                    None => {
                        let reason = format!("IPVS to {}", join_host_port(&rs.addr, rs.port));
                        self.leave(ob, Some(key), share, &reason);
                    }
                }
            }
        }
    }

    /// nat POSTROUTING, then the packet leaves: masqueraded if it reached MASQUERADE.
    fn leave(&mut self, b: Branch, vs: Option<ServiceKey>, share: Option<f64>, reason: &str) {
        for (pb, flow) in run_chain(&self.cx, "nat", "POSTROUTING", b, 0) {
            if let Some(v) = flow.stopped() {
                self.stop(pb, v, "nat POSTROUTING", vs, share);
                continue;
            }
            let masquerade = matches!(&flow, Flow::Done(Verdict::Masquerade));
            let verdict = if vs.is_some() { Verdict::Dnat(join_host_port(&pb.packet.dst, pb.packet.dport)) } else { Verdict::Undecided };
            self.push(pb, verdict, share, masquerade, reason.to_string(), vs);
        }
    }
}

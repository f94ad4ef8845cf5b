//! Plans as text: the virtual servers as `ipvsadm -Sn` prints them, the `kube-ipvs0`
//! addresses, the ipsets as `ipset restore` input and the iptables restore text, each
//! under a `# …` header. Used by `render --mode ipvs`, the goldens and dry-run diffs.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::values::{Forward, Protocol, RealServer, VirtualServer};
use super::plan::{ipsets, FamilyState};
use crate::net::{join_host_port, IpFamily};

/// `-t`/`-u`/`--sctp-service` and `addr:port` (ipvsadm's service spelling).
fn service_spec(vs: &VirtualServer) -> String {
    let flag = match vs.protocol {
        Protocol::Tcp => "-t",
        Protocol::Udp => "-u",
        Protocol::Sctp => "--sctp-service",
    };
    format!("{flag} {}", join_host_port(&vs.addr, vs.port))
}

/// ipvsadm's names for the scheduler flags of `sh` and `mh` (`flag-N` for others).
fn sched_flags(vs: &VirtualServer) -> Vec<String> {
    let names: [&str; 3] = match vs.scheduler.as_str() {
        "sh" => ["sh-fallback", "sh-port", "flag-3"],
        "mh" => ["mh-fallback", "mh-port", "flag-3"],
        _ => ["flag-1", "flag-2", "flag-3"],
    };
    [0x08u32, 0x10, 0x20].iter().zip(names).filter(|(bit, _)| vs.flags & **bit != 0).map(|(_, n)| n.to_string()).collect()
}

/// The `-A` line of a virtual server, as `ipvsadm -Sn` writes it.
pub fn service_line(vs: &VirtualServer) -> String {
    let mut s = format!("-A {} -s {}", service_spec(vs), vs.scheduler);
    let flags = sched_flags(vs);
    if !flags.is_empty() {
        let _ = write!(s, " -b {}", flags.join(","));
    }
    if let Some(timeout) = vs.persistent {
        let _ = write!(s, " -p {timeout}");
        match vs.addr {
            IpAddr::V4(_) if vs.netmask != 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(vs.netmask)).unwrap_or(0);
                let _ = write!(s, " -M {}", std::net::Ipv4Addr::from(mask));
            }
            IpAddr::V6(_) if vs.netmask != 128 => {
                let _ = write!(s, " -M {}", vs.netmask);
            }
            _ => {}
        }
    }
    if vs.flags & 0x04 != 0 {
        s.push_str(" -o");
    }
    s
}

/// The `-a` line of a real server, as `ipvsadm -Sn` writes it.
pub fn dest_line(vs: &VirtualServer, rs: &RealServer) -> String {
    let fwd = match rs.fwd {
        Forward::Masq => "-m",
        Forward::Tunnel => "-i",
        Forward::DirectRoute | Forward::Local | Forward::Bypass => "-g",
    };
    let mut s = format!("-a {} -r {} {fwd} -w {}", service_spec(vs), join_host_port(&rs.addr, rs.port), rs.weight);
    if rs.upper_threshold != 0 {
        let _ = write!(s, " -x {}", rs.upper_threshold);
    }
    if rs.lower_threshold != 0 {
        let _ = write!(s, " -y {}", rs.lower_threshold);
    }
    s
}

/// Every family's virtual servers, each followed by its real servers.
pub fn ipvsadm(plans: &[FamilyState]) -> String {
    let mut out = String::new();
    for plan in plans {
        for d in plan.services.values() {
            out.push_str(&service_line(&d.vs));
            out.push('\n');
            for rs in &d.reals {
                out.push_str(&dest_line(&d.vs, rs));
                out.push('\n');
            }
        }
    }
    out
}

/// One `ADDR/PREFIX` line per address bound to `kube-ipvs0`.
pub fn addresses(plans: &[FamilyState]) -> String {
    let mut out = String::new();
    for plan in plans {
        let prefix = if plan.family.is_v6() { 128 } else { 32 };
        for ip in &plan.bound {
            let _ = writeln!(out, "{ip}/{prefix}");
        }
    }
    out
}

/// `ipset restore` input for one family: each set's `create` line, then its entries.
pub fn ipset_restore(plan: &FamilyState) -> String {
    let mut out = String::new();
    for (id, entries) in &plan.sets {
        let _ = writeln!(out, "{}", ipsets::create_line(*id, plan.family));
        let name = id.name(plan.family);
        for e in entries {
            let _ = writeln!(out, "add {name} {e}");
        }
    }
    out
}

/// The whole render: four sections.
pub fn render(plans: &[FamilyState]) -> String {
    let mut out = String::from("# ipvsadm -Sn\n");
    out.push_str(&ipvsadm(plans));
    out.push_str("# kube-ipvs0\n");
    out.push_str(&addresses(plans));
    out.push_str("# ipset\n");
    for plan in plans {
        out.push_str(&ipset_restore(plan));
    }
    for plan in plans {
        out.push_str(if plan.family == IpFamily::V6 { "# ip6tables\n" } else { "# iptables\n" });
        out.push_str(&crate::xtables::table::write_all(&plan.iptables));
    }
    out
}

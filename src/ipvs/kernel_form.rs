//! Small kernel-side pieces of IPVS mode: the sysctls kube-proxy sets, the
//! graceful-termination memory kept between one-shot runs, and the iptables rules in the
//! form `iptables-save` prints them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::values::{Protocol, ServiceKey};
use super::reconcile::Grace;
use crate::netfilter::jumps::Jump;
use crate::netfilter::{Dump, Rule, Table};
use crate::node::sysctl::{self, Sysctl};

/// The sysctls kube-proxy's IPVS proxier sets on this kernel (see [`crate::node::sysctl::ipvs`]).
pub fn sysctls(strict_arp: bool) -> Vec<Sysctl> {
    sysctl::ipvs(strict_arp, sysctl::kernel_version(Path::new("/proc/sys")))
}

/// kube-proxy's IPVS jumps, as the iptables delta wants them.
pub fn jumps() -> Vec<Jump> {
    super::plan::rules::JUMPS
        .iter()
        .map(|(table, from, to, comment)| Jump::new(table, from, to, false, comment))
        .collect()
}

/// The rules as the kernel holds them: the `ipvs` match as `iptables-save` prints it
/// (libxt_ipvs: `--vproto` as a number, then `--vaddr`, then `--vport`), so a synced node
/// compares equal.
pub fn kernel_form(tables: &[Table]) -> Dump {
    let mut dump = Dump::default();
    for t in tables {
        let kernel = Table { rules: t.rules.iter().map(|r| ipvs_match(r).unwrap_or_else(|| r.clone())).collect(), ..t.clone() };
        kernel.add_to(&mut dump);
    }
    dump
}

fn ipvs_match(rule: &Rule) -> Option<Rule> {
    let words = rule.args.words();
    let at = |flag: &str| words.iter().position(|w| *w == flag);
    let (a, p, v) = (at("--vaddr")?, at("--vproto")?, at("--vport")?);
    if !(a + 2 == p && p + 2 == v) {
        return None;
    }
    let named = *words.get(p + 1)?;
    let number = Protocol::from_name(named).map(|p| p.number().to_string());
    let proto = number.as_deref().unwrap_or(named);
    let mut fixed: Vec<&str> = words[..a].to_vec();
    fixed.extend(["--vproto", proto, "--vaddr", words.get(a + 1)?, "--vport", words.get(v + 1)?]);
    fixed.extend(words.get(v + 2..)?.iter().copied());
    Some(Rule::new(&rule.chain, fixed, rule.target.clone()))
}

/// Reads the terminating-since memory (`PROTO VADDR VPORT RADDR RPORT SINCE` lines);
/// missing or unreadable means none (each server then starts its bound anew).
pub fn read_grace(path: &Path) -> Grace {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut grace = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [p, va, vp, ra, rp, since] = w.as_slice() else { continue };
        let parsed = (|| {
            let protocol = Protocol::from_number(p.parse().ok()?)?;
            let key = ServiceKey { addr: va.parse::<IpAddr>().ok()?, port: vp.parse().ok()?, protocol };
            Some(((key, ra.parse::<IpAddr>().ok()?, rp.parse::<u16>().ok()?), since.parse::<u64>().ok()?))
        })();
        if let Some((k, v)) = parsed {
            grace.insert(k, v);
        }
    }
    grace
}

pub fn write_grace(path: &Path, grace: &Grace) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text: String = grace
        .iter()
        .map(|((k, ra, rp), since)| format!("{} {} {} {ra} {rp} {since}\n", k.protocol.number(), k.addr, k.port))
        .collect();
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::Target;

    #[test]
    fn ipvs_match_in_kernel_form() {
        let mut filter = Table::new("filter");
        filter.chains.push("KUBE-IPVS-OUT-FILTER".into());
        filter.rules.push(Rule::new("KUBE-IPVS-OUT-FILTER", "-s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80".split(' '), Target::Drop));
        filter.rules.push(Rule::new("X", [""; 0], Target::jump("Y")));
        assert_eq!(
            kernel_form(&[filter]).to_text(),
            "*filter\n:KUBE-IPVS-OUT-FILTER - [0:0]\n-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80 -j DROP\n-A X -j Y\nCOMMIT\n"
        );
    }

    #[test]
    fn grace_round_trips() {
        let dir = std::env::temp_dir().join(format!("svcproxy-grace-{}", std::process::id()));
        let path = dir.join("g");
        let key = ServiceKey { addr: "10.0.0.1".parse().unwrap(), port: 80, protocol: Protocol::Tcp };
        let grace: Grace = [((key, "10.244.0.1".parse().unwrap(), 8080), 42)].into();
        write_grace(&path, &grace).unwrap();
        assert_eq!(read_grace(&path), grace);
        let _ = std::fs::remove_dir_all(dir);
    }
}

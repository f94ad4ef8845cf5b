//! Self-tests of the kernel harness on a hand-written kube-proxy-like ruleset
//! (no renderer involved): the lab itself is proven before svcproxy's rules use it.
//! Usage of the whole binary:
//!
//! ```text
//! cargo test --test kernel                      # all cases (root needed, else SKIPPED)
//! cargo test --test kernel -- nft_ --nocapture  # filter by substring, show case logs
//! CI=true cargo test --test kernel              # a SKIPPED case counts as FAILED
//! SVCPROXY_KERNEL_FORCE_SKIP=1 ...              # simulate an unprivileged run
//! SVCPROXY_KERNEL_CASE_TIMEOUT=60 ...           # per-case hard limit (default 120 s)
//! ```
//!
//! The cases here are self-tests of the harness on a hand-written
//! kube-proxy-like ruleset; the project's rendered rules plug into the same
//! `Lab` (`lab.iptables(b).restore(&rendered, &["--noflush"])`).

use crate::harness;
use crate::netns;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Case, CaseError, CaseResult, Ctx};
use netns::{Backend, Lab, Proto, Where};
use netns::BackendTools as _;

// ---------------------------------------------------------------------------
// addresses (198.18.0.0/15 and fd00::/8 only)

const CLUSTER_CIDR4: &str = "198.18.0.0/16";
const CLUSTER_CIDR6: &str = "fd00:18::/32";
const SVC_CIDR4: &str = "198.19.255.0/24";
const SVC_CIDR6: &str = "fd00:19:ff::/112";
const EXT_CIDR4: &str = "198.19.2.0/24"; // ExternalIPs / LoadBalancer IPs
const CIP4: &str = "198.19.255.10";
const CIP6: &str = "fd00:19:ff::10";
const EXTERNAL_IP4: &str = "198.19.2.10";
const NODE_PORT: u16 = 30080;
const SVC_PORT: u16 = 80;
const EP_PORT: u16 = 8080;
const UDP_SVC_PORT: u16 = 53;
const UDP_EP_PORT: u16 = 5353;
/// Ports on the ClusterIP that the filter table REJECTs / DROPs.
const REJECT_PORT: u16 = 81;
const DROP_PORT: u16 = 82;
const N: u32 = 40;

// ---------------------------------------------------------------------------
// a kube-proxy-like ruleset, written by hand (no renderer involved)

/// kube-proxy-style chain name: PREFIX + 16 base32 chars of a hash. (kube-proxy
/// uses sha256; any stable 16-char name is fine for these self-tests.)
fn chain(prefix: &str, key: &str) -> String {
    const B32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::from(prefix);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..2u64 {
        for b in key.bytes().chain(round.to_le_bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        for i in 0..8 {
            out.push(B32[((h >> (i * 5)) & 31) as usize] as char);
        }
    }
    out
}

struct Svc {
    spn: &'static str,
    proto: Proto,
    cluster_ip: &'static str,
    port: u16,
    /// (endpoint ip, port)
    eps: Vec<(String, u16)>,
    affinity: bool,
    node_port: Option<u16>,
    external_ip: Option<&'static str>,
}

impl Svc {
    fn web(v6: bool, eps: Vec<(String, u16)>) -> Svc {
        Svc {
            spn: "default/web:http",
            proto: Proto::Tcp,
            cluster_ip: if v6 { CIP6 } else { CIP4 },
            port: SVC_PORT,
            eps,
            affinity: false,
            node_port: None,
            external_ip: None,
        }
    }
}

fn host_port(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The nat table, kube-proxy style (KUBE-SERVICES → KUBE-SVC → KUBE-SEP → DNAT,
/// KUBE-MARK-MASQ / KUBE-POSTROUTING, KUBE-NODEPORTS / KUBE-EXT, `-m recent` affinity).
fn nat_rules(v6: bool, svcs: &[Svc]) -> String {
    let (cidr, host) = if v6 {
        (CLUSTER_CIDR6, "/128")
    } else {
        (CLUSTER_CIDR4, "/32")
    };
    let mut chains = vec![
        "KUBE-SERVICES".to_string(),
        "KUBE-NODEPORTS".into(),
        "KUBE-POSTROUTING".into(),
        "KUBE-MARK-MASQ".into(),
    ];
    let mut rules = vec![
        r#"-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#.to_string(),
        r#"-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#.into(),
        r#"-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING"#.into(),
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN".into(),
        "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000".into(),
        r#"-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully"#.into(),
        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000".into(),
    ];
    for s in svcs {
        let p = s.proto.name();
        let svc = chain("KUBE-SVC-", &format!("{}{p}", s.spn));
        let ext = chain("KUBE-EXT-", &format!("{}{p}", s.spn));
        chains.push(svc.clone());
        let spn = s.spn;
        rules.push(format!(
            r#"-A KUBE-SERVICES -d {}{host} -p {p} -m comment --comment "{spn} cluster IP" -m {p} --dport {} -j {svc}"#,
            s.cluster_ip, s.port
        ));
        rules.push(format!(
            r#"-A {svc} ! -s {cidr} -d {}{host} -p {p} -m comment --comment "{spn} cluster IP" -m {p} --dport {} -j KUBE-MARK-MASQ"#,
            s.cluster_ip, s.port
        ));
        if s.node_port.is_some() || s.external_ip.is_some() {
            chains.push(ext.clone());
            rules.push(format!(r#"-A {ext} -m comment --comment "masquerade traffic for {spn} external destinations" -j KUBE-MARK-MASQ"#));
            rules.push(format!("-A {ext} -j {svc}"));
        }
        if let Some(np) = s.node_port {
            rules.push(format!(r#"-A KUBE-NODEPORTS -p {p} -m comment --comment "{spn}" -m {p} --dport {np} -j {ext}"#));
        }
        if let Some(eip) = s.external_ip {
            rules.push(format!(
                r#"-A KUBE-SERVICES -d {eip}{host} -p {p} -m comment --comment "{spn} external IP" -m {p} --dport {} -j {ext}"#,
                s.port
            ));
        }
        let seps: Vec<String> = s
            .eps
            .iter()
            .map(|(ip, port)| chain("KUBE-SEP-", &format!("{spn}{p}{}", host_port(ip, *port))))
            .collect();
        if s.affinity {
            for ((ip, port), sep) in s.eps.iter().zip(&seps) {
                rules.push(format!(
                    r#"-A {svc} -m comment --comment "{spn} -> {}" -m recent --name {sep} --rcheck --seconds 10800 --reap -j {sep}"#,
                    host_port(ip, *port)
                ));
            }
        }
        let n = seps.len();
        for (i, ((ip, port), sep)) in s.eps.iter().zip(&seps).enumerate() {
            let hp = host_port(ip, *port);
            if i + 1 < n {
                rules.push(format!(
                    r#"-A {svc} -m comment --comment "{spn} -> {hp}" -m statistic --mode random --probability {:.10} -j {sep}"#,
                    1.0 / (n - i) as f64
                ));
            } else {
                rules.push(format!(
                    r#"-A {svc} -m comment --comment "{spn} -> {hp}" -j {sep}"#
                ));
            }
            chains.push(sep.clone());
            rules.push(format!(
                r#"-A {sep} -s {ip}{host} -m comment --comment "{spn}" -j KUBE-MARK-MASQ"#
            ));
            let rec = if s.affinity {
                format!("-m recent --name {sep} --set ")
            } else {
                String::new()
            };
            rules.push(format!(r#"-A {sep} -p {p} -m comment --comment "{spn}" -m {p} {rec}-j DNAT --to-destination {hp}"#));
        }
    }
    rules.push(
        r#"-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"#
            .into(),
    );
    let mut text = String::from("*nat\n");
    for c in &chains {
        text += &format!(":{c} - [0:0]\n");
    }
    for r in &rules {
        text += r;
        text += "\n";
    }
    text + "COMMIT\n"
}

/// The filter table: REJECT (service without endpoints) and DROP on the ClusterIP.
fn filter_rules(v6: bool) -> String {
    let (cip, host) = if v6 { (CIP6, "/128") } else { (CIP4, "/32") };
    let mut t = String::from("*filter\n:KUBE-SERVICES - [0:0]\n");
    t += r#"-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#;
    t += "\n";
    t += r#"-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#;
    t += "\n";
    for p in ["tcp", "udp"] {
        t += &format!(
            "-A KUBE-SERVICES -d {cip}{host} -p {p} -m comment --comment \"default/empty:{p} has no endpoints\" -m {p} --dport {REJECT_PORT} -j REJECT\n"
        );
        t += &format!("-A KUBE-SERVICES -d {cip}{host} -p {p} -m comment --comment \"default/blackhole:{p}\" -m {p} --dport {DROP_PORT} -j DROP\n");
    }
    t + "COMMIT\n"
}

// ---------------------------------------------------------------------------
// fixtures

const BASE_TOOLS: &[&str] = &["ip", "conntrack", "sysctl", "kill"];

fn require_backend(ctx: &Ctx, b: Backend) -> CaseResult {
    let tools = b.tools();
    let mut all: Vec<&str> = BASE_TOOLS.to_vec();
    all.extend(tools.iter().map(String::as_str));
    ctx.require(&all)
}

/// A lab with pod1/pod2 (endpoints, TCP :8080 and UDP :5353 when asked), a
/// non-endpoint "client" pod, and service routes for the ClusterIP and
/// ExternalIP ranges.
fn lab_with_pods(ctx: &Ctx, b: Backend, udp: bool) -> Result<Lab, CaseError> {
    require_backend(ctx, b)?;
    let mut lab = Lab::new(b.name())?;
    ctx.log(format!("lab {} (node {})", lab.prefix, lab.node().name));
    for (i, name) in ["pod1", "pod2"].iter().enumerate() {
        let k = i + 1;
        let pod = lab.add_pod(
            name,
            &format!("198.18.{k}.2"),
            Some(&format!("fd00:18:{k}::2")),
        )?;
        pod.serve_tcp(EP_PORT)?;
        if udp {
            pod.serve_udp(UDP_EP_PORT)?;
        }
    }
    lab.add_pod("client", "198.18.3.2", Some("fd00:18:3::2"))?;
    for cidr in [SVC_CIDR4, SVC_CIDR6, EXT_CIDR4] {
        lab.route_service_cidr(cidr)?;
    }
    lab.assert_no_default_route()?;
    ctx.log("pods up, servers answering");
    Ok(lab)
}

fn eps4(port: u16) -> Vec<(String, u16)> {
    vec![("198.18.1.2".into(), port), ("198.18.2.2".into(), port)]
}
fn eps6(port: u16) -> Vec<(String, u16)> {
    vec![("fd00:18:1::2".into(), port), ("fd00:18:2::2".into(), port)]
}

fn load(ctx: &Ctx, lab: &Lab, b: Backend, v6: bool, text: &str) -> CaseResult {
    let ipt = if v6 {
        lab.ip6tables(b)
    } else {
        lab.iptables(b)
    };
    let t0 = std::time::Instant::now();
    ipt.restore(text, &["--noflush"])?;
    ctx.log(format!(
        "{} --noflush: {} ms",
        ipt.binary("restore"),
        t0.elapsed().as_millis()
    ));
    Ok(())
}

fn both_got_some(t: &netns::Tally, what: &str) -> CaseResult {
    ensure!(
        t.errors.is_empty() && t.refused == 0 && t.timed_out == 0 && t.eperm == 0,
        "{what}: failed connections: {t}"
    );
    ensure!(
        t.count("pod1") > 0 && t.count("pod2") > 0,
        "{what}: no spreading: {t}"
    );
    ensure!(
        t.answered() == t.attempts,
        "{what}: answers from unexpected servers: {t}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// cases

fn spread_from_node_masq(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, false)?;
    load(
        ctx,
        &lab,
        b,
        false,
        &nat_rules(false, &[Svc::web(false, eps4(EP_PORT))]),
    )?;
    let t = lab.connect(Where::Node, CIP4, SVC_PORT, Proto::Tcp, N)?;
    ctx.log(format!("node -> {CIP4}:{SVC_PORT}: {t}"));
    both_got_some(&t, "node -> ClusterIP")?;
    // Node traffic is outside the clusterCIDR: KUBE-MARK-MASQ, MASQUERADE out of vp<k>.
    ensure!(
        t.saw("pod1", "198.19.0.1") && t.saw("pod2", "198.19.0.2"),
        "masquerade not visible: {t}"
    );
    ensure!(
        !t.sources_seen.contains_key(netns::NODE_IP4),
        "unmasqueraded node IP reached a pod: {t}"
    );
    let ct = lab
        .node()
        .run(&["conntrack", "-L", "-p", "tcp", "--orig-dst", CIP4])?;
    ensure!(
        ct.lines().count() >= 1,
        "no conntrack entries for the ClusterIP: {ct}"
    );
    ctx.log(format!(
        "conntrack: {} entries for {CIP4}",
        ct.lines().count()
    ));
    let saved = lab.iptables(b).save("nat")?;
    ensure!(
        saved.contains("KUBE-SERVICES") && saved.contains("MASQUERADE --random-fully"),
        "save lacks our rules:\n{saved}"
    );
    ensure!(!saved.contains("Warning"), "backend mix warning:\n{saved}");
    Ok(())
}

fn spread_from_pod(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, false)?;
    load(
        ctx,
        &lab,
        b,
        false,
        &nat_rules(false, &[Svc::web(false, eps4(EP_PORT))]),
    )?;
    let t = lab.connect(Where::Pod("client"), CIP4, SVC_PORT, Proto::Tcp, N)?;
    ctx.log(format!("client pod -> ClusterIP: {t}"));
    both_got_some(&t, "pod -> ClusterIP")?;
    // Pod traffic is inside the clusterCIDR: no masquerade, the pod IP is seen.
    ensure!(
        t.sources_seen.keys().eq(["198.18.3.2"].iter()),
        "pod source not preserved: {t}"
    );
    // Hairpin: pod1 -> ClusterIP -> pod1 is masqueraded by the KUBE-SEP -s rule.
    let h = lab.connect(Where::Pod("pod1"), CIP4, SVC_PORT, Proto::Tcp, 20)?;
    ctx.log(format!("pod1 -> ClusterIP (hairpin possible): {h}"));
    ensure!(
        h.errors.is_empty() && h.timed_out == 0 && h.refused == 0,
        "pod1 -> ClusterIP failed: {h}"
    );
    ensure!(!h.saw("pod1", "198.18.1.2"), "hairpin not masqueraded: {h}");
    if h.count("pod1") > 0 {
        ensure!(
            h.saw("pod1", "198.19.0.1"),
            "hairpin should be masqueraded to 198.19.0.1: {h}"
        );
    }
    Ok(())
}

fn clientip_affinity(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, false)?;
    let mut svc = Svc::web(false, eps4(EP_PORT));
    svc.affinity = true;
    load(ctx, &lab, b, false, &nat_rules(false, &[svc]))?;
    for from in [Where::Node, Where::Pod("client")] {
        let t = lab.connect(from, CIP4, SVC_PORT, Proto::Tcp, N)?;
        ctx.log(format!("{from:?} -> ClusterIP with affinity: {t}"));
        ensure!(
            t.errors.is_empty() && t.timed_out == 0 && t.refused == 0,
            "failed connections: {t}"
        );
        ensure!(
            t.by_pod.len() == 1 && t.answered() == N,
            "affinity not pinned from {from:?}: {t}"
        );
    }
    let recent = lab.node().run(&[
        "sh",
        "-c",
        "for f in /proc/net/xt_recent/KUBE-SEP-*; do echo \"$f $(cat $f)\"; done",
    ])?;
    ctx.log(format!("xt_recent: {}", recent.trim()));
    ensure!(
        recent.contains("src=198.19.1.1") && recent.contains("src=198.18.3.2"),
        "xt_recent lacks the clients:\n{recent}"
    );
    Ok(())
}

fn reject_is_refused(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, true)?;
    load(ctx, &lab, b, false, &filter_rules(false))?;
    load(ctx, &lab, b, true, &filter_rules(true))?;
    for (dst, v) in [(CIP4, "v4"), (CIP6, "v6")] {
        for proto in [Proto::Tcp, Proto::Udp] {
            for from in [Where::Node, Where::Pod("client")] {
                // IPv6 TCP: over veth the ICMPv6 error is delivered synchronously,
                // while connect() still owns the socket (TcpExtLockDroppedIcmps),
                // so it is only a soft error and the refusal comes with the first
                // SYN retransmit (~1 s). IPv4 and UDP are refused at once.
                let slow = v == "v6" && proto == Proto::Tcp;
                let (n, quick_ms) = if slow { (1, 1500) } else { (10, 500) };
                let t = lab.connect(from, dst, REJECT_PORT, proto, n)?;
                ctx.log(format!("{v} {} {from:?} -> REJECT port: {t}", proto.name()));
                if proto == Proto::Udp && matches!(from, Where::Node) {
                    // Locally generated UDP dropped in OUTPUT: sendmsg() fails with EPERM.
                    ensure!(
                        t.eperm == n,
                        "{v} udp from the node: expected {n} EPERM: {t}"
                    );
                } else {
                    ensure!(
                        t.refused == n,
                        "{v} {} from {from:?}: expected {n} refused: {t}",
                        proto.name()
                    );
                    ensure!(
                        t.max_refused_ms < quick_ms,
                        "{v} {} from {from:?}: refusal not quick: {t}",
                        proto.name()
                    );
                }
            }
        }
    }
    Ok(())
}

fn drop_times_out(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab_with_pods(ctx, b, true)?;
    load(ctx, &lab, b, false, &filter_rules(false))?;
    lab.set_connect_timeout(Duration::from_millis(500));
    for proto in [Proto::Tcp, Proto::Udp] {
        for from in [Where::Node, Where::Pod("client")] {
            let t = lab.connect(from, CIP4, DROP_PORT, proto, 2)?;
            ctx.log(format!("{} {from:?} -> DROP port: {t}", proto.name()));
            if proto == Proto::Udp && matches!(from, Where::Node) {
                ensure!(t.eperm == 2, "udp from the node: expected 2 EPERM: {t}");
            } else {
                ensure!(
                    t.timed_out == 2 && t.refused == 0 && t.answered() == 0,
                    "{} from {from:?}: expected 2 timeouts: {t}",
                    proto.name()
                );
            }
        }
    }
    Ok(())
}

fn nodeport_and_external_ip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, false)?;
    let mut svc = Svc::web(false, eps4(EP_PORT));
    svc.node_port = Some(NODE_PORT);
    svc.external_ip = Some(EXTERNAL_IP4);
    load(ctx, &lab, b, false, &nat_rules(false, &[svc]))?;
    for (dst, port, what) in [
        (netns::NODE_IP4, NODE_PORT, "NodePort"),
        (EXTERNAL_IP4, SVC_PORT, "ExternalIP"),
    ] {
        let t = lab.connect(Where::External, dst, port, Proto::Tcp, N)?;
        ctx.log(format!("external -> {what} {dst}:{port}: {t}"));
        both_got_some(&t, what)?;
        ensure!(
            t.saw("pod1", "198.19.0.1") && t.saw("pod2", "198.19.0.2"),
            "{what}: not masqueraded: {t}"
        );
        ensure!(
            !t.sources_seen.contains_key(netns::EXT_IP4),
            "{what}: client IP leaked unmasqueraded: {t}"
        );
    }
    // A port nobody serves on the node IP: refused by the node's own stack.
    let t = lab.connect(
        Where::External,
        netns::NODE_IP4,
        NODE_PORT + 1,
        Proto::Tcp,
        3,
    )?;
    ensure!(t.refused == 3, "unused node port should be refused: {t}");
    Ok(())
}

fn ipv6_clusterip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, false)?;
    load(
        ctx,
        &lab,
        b,
        true,
        &nat_rules(true, &[Svc::web(true, eps6(EP_PORT))]),
    )?;
    let t = lab.connect(Where::Node, CIP6, SVC_PORT, Proto::Tcp, N)?;
    ctx.log(format!("node -> [{CIP6}]:{SVC_PORT}: {t}"));
    both_got_some(&t, "v6 node -> ClusterIP")?;
    ensure!(
        t.saw("pod1", "fd00:19::1") && t.saw("pod2", "fd00:19::2"),
        "v6 masquerade not visible: {t}"
    );
    let t = lab.connect(Where::Pod("client"), CIP6, SVC_PORT, Proto::Tcp, N)?;
    ctx.log(format!("client -> [{CIP6}]:{SVC_PORT}: {t}"));
    both_got_some(&t, "v6 pod -> ClusterIP")?;
    ensure!(
        t.sources_seen.keys().eq(["fd00:18:3::2"].iter()),
        "v6 pod source not preserved: {t}"
    );
    let saved = lab.ip6tables(b).save("nat")?;
    ensure!(
        saved.contains("--to-destination [fd00:18:1::2]:8080"),
        "ip6tables save lacks DNAT:\n{saved}"
    );
    Ok(())
}

fn udp_clusterip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab_with_pods(ctx, b, true)?;
    let mut svc = Svc::web(false, eps4(UDP_EP_PORT));
    svc.spn = "kube-system/dns:dns";
    svc.proto = Proto::Udp;
    svc.port = UDP_SVC_PORT;
    load(ctx, &lab, b, false, &nat_rules(false, &[svc]))?;
    for from in [Where::Node, Where::Pod("client")] {
        let t = lab.connect(from, CIP4, UDP_SVC_PORT, Proto::Udp, N)?;
        ctx.log(format!("udp {from:?} -> ClusterIP: {t}"));
        both_got_some(&t, "udp")?;
    }
    let ct = lab
        .node()
        .run(&["conntrack", "-L", "-p", "udp", "--orig-dst", CIP4])?;
    ensure!(ct.lines().count() > 0, "no UDP conntrack entries");
    lab.conntrack_flush()?;
    let ct = lab
        .node()
        .run(&["conntrack", "-L", "-p", "udp", "--orig-dst", CIP4])?;
    ensure!(ct.trim().is_empty(), "conntrack -F left entries: {ct}");
    Ok(())
}

/// Topology invariants: no default route, only allowed addresses, nothing in the host netns.
fn lab_topology(ctx: &mut Ctx) -> CaseResult {
    ctx.require(BASE_TOOLS)?;
    let host_links_before = netns::run_ok(&["ip", "-o", "link"], None)?;
    let mut lab = Lab::new("topo")?;
    let p = lab.add_pod("web", "198.18.7.2", Some("fd00:18:7::2"))?;
    lab.add_pod("v4only", "198.18.8.2", None)?;
    lab.route_service_cidr(SVC_CIDR4)?;
    lab.assert_no_default_route()?;
    ensure!(
        lab.add_pod("bad", "10.0.0.2", None).is_err(),
        "an address outside 198.18.0.0/15 was accepted"
    );
    ensure!(
        lab.add_pod("bad2", "198.19.0.9", None).is_err(),
        "a reserved link address was accepted"
    );
    ensure!(
        lab.route_service_cidr("10.96.0.0/12").is_err(),
        "a service CIDR outside the range was accepted"
    );
    for name in lab.namespaces() {
        let ns = netns::Ns { name: name.clone() };
        let addrs = ns.ip(&["-o", "addr", "show", "scope", "global"])?;
        for line in addrs.lines() {
            let a = line.split_whitespace().nth(3).unwrap_or("");
            let ok = a.starts_with("198.18.") || a.starts_with("198.19.") || a.starts_with("fd");
            ensure!(ok, "{name}: address outside the allowed ranges: {line}");
        }
    }
    let host_links_after = netns::run_ok(&["ip", "-o", "link"], None)?;
    let names = |s: &str| -> BTreeSet<String> {
        s.lines()
            .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().to_string()))
            .collect()
    };
    let new: Vec<String> = names(&host_links_after)
        .difference(&names(&host_links_before))
        .cloned()
        .collect();
    ensure!(
        !new.iter()
            .any(|n| n.starts_with("vp") || n.starts_with("vext")),
        "links appeared in the host netns: {new:?}"
    );
    // Direct reachability node -> pod over v4 and v6.
    p.serve_tcp(9000)?;
    let t = lab.connect(Where::Node, "fd00:18:7::2", 9000, Proto::Tcp, 3)?;
    ensure!(t.count("web") == 3, "node -> pod over IPv6: {t}");
    let t = lab.connect(Where::External, "198.18.7.2", 9000, Proto::Tcp, 3)?;
    ensure!(
        t.count("web") == 3 && t.saw("web", netns::EXT_IP4),
        "external -> pod (routed, no NAT): {t}"
    );
    lab.teardown()?;
    Ok(())
}

/// Dropping a Lab removes every namespace and process it created, also after a panic.
fn teardown_leaves_nothing(ctx: &mut Ctx) -> CaseResult {
    ctx.require(BASE_TOOLS)?;
    let mut names = vec![];
    let mut pids = vec![];
    {
        let mut lab = Lab::new("td")?;
        for (i, n) in ["a", "b"].iter().enumerate() {
            let p = lab.add_pod(
                n,
                &format!("198.18.{}.2", 10 + i),
                Some(&format!("fd00:18:{}::2", 10 + i)),
            )?;
            p.serve_tcp(8080)?;
            p.serve_udp(5353)?;
            pids.extend(p.ns.pids());
        }
        names.extend(lab.namespaces());
        let listed = netns::netns_list();
        ensure!(
            names.iter().all(|n| listed.contains(n)),
            "namespaces missing before teardown"
        );
        ensure!(
            pids.len() >= 4,
            "expected 4 servers in the pod namespaces, got pids {pids:?}"
        );
        ctx.log(format!("namespaces {names:?}, server pids {pids:?}"));
    } // Drop
      // A panicking holder must tear down too.
    let panicked_names = std::thread::spawn(|| {
        let names = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let n2 = names.clone();
        let r = std::thread::spawn(move || {
            let mut lab = Lab::new("tdpanic").expect("lab");
            lab.add_pod("x", "198.18.12.2", None).expect("pod");
            *n2.lock().unwrap() = lab.namespaces();
            // resume_unwind: unwinds like a panic but skips the panic hook (no noise).
            std::panic::resume_unwind(Box::new("deliberate panic while holding a Lab"));
        })
        .join();
        assert!(r.is_err());
        let v = names.lock().unwrap().clone();
        v
    })
    .join()
    .map_err(|_| "helper thread failed")?;
    ensure!(
        panicked_names.len() == 3,
        "panic helper did not build its lab: {panicked_names:?}"
    );
    names.extend(panicked_names);
    let listed = netns::netns_list();
    let left: Vec<&String> = names.iter().filter(|n| listed.contains(n)).collect();
    ensure!(left.is_empty(), "namespaces left behind: {left:?}");
    let alive: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|&p| netns::pid_alive(p))
        .collect();
    ensure!(alive.is_empty(), "server processes still alive: {alive:?}");
    let ours: Vec<String> = listed
        .into_iter()
        .filter(|n| n.starts_with(&netns::own_prefix()))
        .collect();
    ensure!(
        ours.is_empty(),
        "namespaces of this process still listed: {ours:?}"
    );
    Ok(())
}

/// Asking one Lab for both backends panics (never mix backends in one netns).
fn backend_mix_refused(ctx: &mut Ctx) -> CaseResult {
    ctx.require(BASE_TOOLS)?;
    let lab = Lab::new("mix")?;
    lab.try_iptables(Backend::Nft, false)?;
    lab.try_iptables(Backend::Nft, true)?;
    let r = lab.try_iptables(Backend::Legacy, true);
    ensure!(r.is_err(), "mixing backends was allowed");
    ctx.log(format!(
        "refused as expected: {}",
        r.err().unwrap_or_default()
    ));
    ensure!(
        Backend::Legacy.bin(true, "save") == "ip6tables-legacy-save",
        "binary naming"
    );
    ensure!(
        Backend::Nft.bin(false, "restore") == "iptables-nft-restore",
        "binary naming"
    );
    Ok(())
}

/// Only with SVCPROXY_KERNEL_SELFTEST_HARNESS=1 (both must be reported FAILED,
/// with their labs torn down): a case that overruns its 3 s limit ...
fn harness_timeout_selftest(ctx: &mut Ctx) -> CaseResult {
    ctx.require(BASE_TOOLS)?;
    let mut lab = Lab::new("tmo")?;
    lab.add_pod("slow", "198.18.20.2", None)?.serve_tcp(8080)?;
    ctx.log("sleeping past the limit (bounded: 30 s)");
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// ... and a case that panics while holding a lab.
fn harness_panic_selftest(ctx: &mut Ctx) -> CaseResult {
    ctx.require(BASE_TOOLS)?;
    let mut lab = Lab::new("pnc")?;
    lab.add_pod("p", "198.18.21.2", None)?.serve_udp(5353)?;
    ctx.log("about to panic");
    let v: Vec<u32> = vec![];
    let _ = v[lab.pods().len()]; // index out of bounds
    Ok(())
}

/// The self-test cases.
pub fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new("lab_topology", lab_topology),
        Case::new("teardown_leaves_nothing", teardown_leaves_nothing),
        Case::new("backend_mix_refused", backend_mix_refused),
    ];
    per_backend!(
        cases,
        spread_from_node_masq,
        spread_from_pod,
        clientip_affinity,
        reject_is_refused,
        drop_times_out,
        nodeport_and_external_ip,
        ipv6_clusterip,
        udp_clusterip,
    );
    if harness::env_true("SVCPROXY_KERNEL_SELFTEST_HARNESS") {
        cases.push(
            Case::new("harness_timeout_selftest", harness_timeout_selftest)
                .with_timeout(Duration::from_secs(3)),
        );
        cases.push(Case::new("harness_panic_selftest", harness_panic_selftest));
    }
    cases
}

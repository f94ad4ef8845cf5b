//! The "from outside the node" tier: real connections into a node namespace that the
//! real `svcproxy sync` programmed, from the namespaces around it — the external client
//! beside the node (`Where::External`, 198.19.1.2 / fd00:19:1::2), the pods, and the
//! node itself — checking who answered and the source address each pod saw.
//!
//! Scenarios of issue 18 item 4 and where each is proved (both backends each):
//!
//! | scenario | case |
//! |---|---|
//! | NodePort, ETP Cluster, from outside: every pod, masqueraded | `out_nodeport_cluster` (v4 and v6; also `dp_nodeport`) |
//! | NodePort, ETP Local, from outside: local pods, client IP kept | `out_nodeport_local` (v4 and v6; also `dp_etp_local`) |
//! | NodePort on 127.0.0.1 from the node | `out_nodeport_cluster` (sources too), `dp_nodeport_localhost` (route_localnet) |
//! | LoadBalancer IP from inside (node, pods) and from outside, in and out of its source ranges | `out_lb_inside_and_outside` (also `dp_lb_source_ranges`) |
//! | external IP from outside | `out_external_ip` (v4 and v6; also `dp_external_ip`) |
//! | a pod reaching its own service (hairpin) | `out_hairpin` |
//! | health-check node port on the node IP: 200 with the local count, 503 with none | `hc_node_port_*` in node_setup.rs |
//!
//! Addresses are dataplane.rs's; IPv6 external IPs use fd00:19:2::/112.

use crate::dataplane::{
    connect, connect_quiet, dropped, ep4, ep6, lab, masq4, masq6, pod_ip4, sources_are, spread, svc, sync, tcp, Svc, CLIENT,
    CLIENT_IP4, CLIENT_IP6, N, OTHER_NODE,
};
use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Proto, Tally, Where};

const EXT_CIDR6: &str = "fd00:19:2::/112";

/// The outside tier, each case for both backends (`nft_out_*`, `legacy_out_*`).
pub fn cases() -> Vec<Case> {
    let mut cases = vec![];
    per_backend!(
        cases,
        out_hairpin,
        out_nodeport_cluster,
        out_nodeport_local,
        out_lb_inside_and_outside,
        out_external_ip,
    );
    cases
}

/// Each pod in `pods` answered and saw exactly the source `src(pod)`, nothing else.
fn each_saw_only(t: &Tally, pods: &[&str], src: impl Fn(&str) -> String, what: &str) -> CaseResult {
    for p in pods {
        let want = src(p);
        ensure!(t.saw(p, &want), "{what}: {p} never saw {want}: {t}");
        let other: Vec<_> = t.seen.iter().filter(|(q, s)| q == p && *s != want).collect();
        ensure!(other.is_empty(), "{what}: {p} saw sources other than {want}: {other:?}; {t}");
    }
    Ok(())
}

/// A dual-stack service with endpoints pod k for each k in `local` (this node) and
/// `remote` (another node) in both families.
fn dual(name: &'static str, cip4: &str, cip6: &str, local: &[u8], remote: &[u8]) -> Svc {
    let mut eps4: Vec<_> = local.iter().map(|&k| ep4(k)).collect();
    eps4.extend(remote.iter().map(|&k| ep4(k).on(OTHER_NODE)));
    let mut s = svc(name, cip4, vec![tcp("http", 80)], eps4);
    s.cluster_ips = vec![cip4.into(), cip6.into()];
    s.eps6 = local.iter().map(|&k| ep6(k)).collect();
    s.eps6.extend(remote.iter().map(|&k| ep6(k).on(OTHER_NODE)));
    s
}

// ---------------------------------------------------------------------------
// hairpin

/// A pod connecting to its own Service and answered by itself. kube-proxy's endpoint
/// chain marks packets *from* the endpoint for masquerade ("Handle traffic that loops
/// back to the originator with SNAT"): without it the reply would come from the pod's
/// own address, the packet arriving back on the pod's link with its own source address
/// is a martian and the connection never completes. So: pod1 answers pod1, and saw the
/// node end of its link; pod2 answering pod1 saw pod1's own address (no masquerade).
/// Then the one masquerade rule of pod1's endpoint chain is deleted by hand, and the
/// same hairpin connection no longer completes: the check depends on that rule.
fn out_hairpin(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2], false)?;
    let (own4, own6) = ("198.19.255.140", "fd00:19:ff::140");
    let (pair4, pair6) = ("198.19.255.141", "fd00:19:ff::141");
    let own = dual("own", own4, own6, &[1], &[]);
    let pair = dual("pair", pair4, pair6, &[1, 2], &[]);
    sync(ctx, &lab, b, "own (pod1), pair (pod1, pod2)", &[own, pair])?;

    let t = connect(ctx, &lab, Where::Pod("pod1"), own4, 80, Proto::Tcp, 10)?;
    spread(&t, &["pod1"], "pod1 -> its own service")?;
    each_saw_only(&t, &["pod1"], |p| masq4(&lab, p), "pod1 -> its own service (hairpin masqueraded)")?;
    let t = connect(ctx, &lab, Where::Pod("pod1"), own6, 80, Proto::Tcp, 10)?;
    spread(&t, &["pod1"], "v6 pod1 -> its own service")?;
    each_saw_only(&t, &["pod1"], |p| masq6(&lab, p), "v6 pod1 -> its own service (hairpin masqueraded)")?;

    let t = connect(ctx, &lab, Where::Pod("pod1"), pair4, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "pod1 -> a service it is one of two endpoints of")?;
    each_saw_only(&t, &["pod1"], |p| masq4(&lab, p), "pod1 -> pair, answered by itself")?;
    each_saw_only(&t, &["pod2"], |_| pod_ip4(1), "pod1 -> pair, answered by pod2 (no masquerade)")?;

    // Negative control: without the endpoint chain's masquerade rule, no hairpin.
    let nat = lab.iptables(b).save("nat")?;
    let rule = nat
        .lines()
        .find(|l| l.starts_with("-A KUBE-SEP-") && l.contains("dp/own:http") && l.contains("-s 198.18.1.2/32") && l.ends_with("-j KUBE-MARK-MASQ"))
        .ok_or_else(|| format!("no masquerade rule for pod1 in own's endpoint chain:\n{nat}"))?
        .to_string();
    ctx.log(format!("deleting {rule}"));
    delete_rule(&lab, b, &rule)?;
    lab.conntrack_flush()?;
    let t = connect_quiet(ctx, &mut lab, Where::Pod("pod1"), own4, 80, Proto::Tcp, 2)?;
    dropped(&t, "pod1 -> its own service without the endpoint's masquerade rule")?;
    Ok(())
}

/// Deletes one rule, given as an `iptables-save` line of the nat table, by feeding
/// `-D ...` to the backend's restore (which parses the quoting as save wrote it).
fn delete_rule(lab: &Lab, b: Backend, save_line: &str) -> CaseResult {
    let body = save_line.strip_prefix("-A ").ok_or("not an -A line")?;
    let text = format!("*nat\n-D {body}\nCOMMIT\n");
    lab.iptables(b).restore(&text, &["--noflush"])?;
    let nat = lab.iptables(b).save("nat")?;
    ensure!(!nat.lines().any(|l| l == save_line), "rule still present after deleting it: {save_line}");
    Ok(())
}

// ---------------------------------------------------------------------------
// NodePort, externalTrafficPolicy: Cluster

/// From outside, every endpoint (local or not) answers and sees the node's address on
/// its link (masqueraded), never the client's; the same from the node to its own node
/// IP and to 127.0.0.1 (localhost NodePorts, IPv4 only, as in kube-proxy).
fn out_nodeport_cluster(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2, 3], false)?;
    let mut s = dual("npc", "198.19.255.150", "fd00:19:ff::150", &[1, 3], &[2]);
    s.ty = "NodePort";
    s.ports[0].node_port = Some(30150);
    sync(ctx, &lab, b, "npc (NodePort 30150; pod1, pod3 local, pod2 remote)", &[s])?;
    let all = ["pod1", "pod2", "pod3"];

    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30150, Proto::Tcp, N)?;
    spread(&t, &all, "external -> NodePort (ETP Cluster)")?;
    each_saw_only(&t, &all, |p| masq4(&lab, p), "external -> NodePort (masqueraded)")?;
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP6, 30150, Proto::Tcp, N)?;
    spread(&t, &all, "v6 external -> NodePort (ETP Cluster)")?;
    each_saw_only(&t, &all, |p| masq6(&lab, p), "v6 external -> NodePort (masqueraded)")?;

    for dst in [netns::NODE_IP4, "127.0.0.1"] {
        let t = connect(ctx, &lab, Where::Node, dst, 30150, Proto::Tcp, N)?;
        spread(&t, &all, &format!("node -> {dst}:NodePort"))?;
        each_saw_only(&t, &all, |p| masq4(&lab, p), &format!("node -> {dst}:NodePort (masqueraded)"))?;
    }
    // IPv6 has no localhost NodePorts (kube-proxy: IPv4 only): ::1 is not DNATed.
    let t = connect(ctx, &lab, Where::Node, "::1", 30150, Proto::Tcp, 2)?;
    ensure!(t.answered() == 0 && t.refused == 2, "node -> [::1]:NodePort must be refused by the node's stack: {t}");
    Ok(())
}

// ---------------------------------------------------------------------------
// NodePort, externalTrafficPolicy: Local

/// From outside only the local endpoints answer, and they see the client's own address;
/// from the node the short-circuit sends node traffic to every endpoint, masqueraded;
/// from a pod (inside the cluster CIDR) to every endpoint, not masqueraded.
fn out_nodeport_local(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2, 3], false)?;
    let mk = |local: &[u8], remote: &[u8]| {
        let mut s = dual("npl", "198.19.255.160", "fd00:19:ff::160", local, remote);
        s.ty = "NodePort";
        s.etp_local = true;
        s.ports[0].node_port = Some(30160);
        s
    };
    sync(ctx, &lab, b, "npl (ETP Local; pod1, pod3 local, pod2 remote)", &[mk(&[1, 3], &[2])])?;
    let local = ["pod1", "pod3"];
    let all = ["pod1", "pod2", "pod3"];

    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30160, Proto::Tcp, N)?;
    spread(&t, &local, "external -> NodePort (ETP Local)")?;
    each_saw_only(&t, &local, |_| netns::EXT_IP4.into(), "external -> NodePort (ETP Local: client IP kept)")?;
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP6, 30160, Proto::Tcp, N)?;
    spread(&t, &local, "v6 external -> NodePort (ETP Local)")?;
    each_saw_only(&t, &local, |_| netns::EXT_IP6.into(), "v6 external -> NodePort (ETP Local: client IP kept)")?;

    let t = connect(ctx, &lab, Where::Node, netns::NODE_IP4, 30160, Proto::Tcp, N)?;
    spread(&t, &all, "node -> NodePort (ETP Local: LOCAL traffic goes to every endpoint)")?;
    each_saw_only(&t, &all, |p| masq4(&lab, p), "node -> NodePort (ETP Local: LOCAL traffic masqueraded)")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), netns::NODE_IP4, 30160, Proto::Tcp, N)?;
    spread(&t, &all, "pod -> NodePort (ETP Local: pod traffic goes to every endpoint)")?;
    sources_are(&t, &[CLIENT_IP4], "pod -> NodePort (ETP Local: pod traffic not masqueraded)")?;

    // No local endpoint: outside traffic is dropped in both families.
    sync(ctx, &lab, b, "npl (only pod2, remote)", &[mk(&[], &[2])])?;
    for dst in [netns::NODE_IP4, netns::NODE_IP6] {
        let t = connect_quiet(ctx, &mut lab, Where::External, dst, 30160, Proto::Tcp, 2)?;
        dropped(&t, &format!("external -> {dst}:NodePort without local endpoints"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// LoadBalancer IP

/// A LoadBalancer IP with `loadBalancerSourceRanges` is served to sources in the ranges
/// wherever they come from — outside, the node, a pod — and dropped for the others; one
/// without ranges is served to everyone. ETP Cluster: every answer masqueraded.
fn out_lb_inside_and_outside(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2], false)?;
    let lb = |name: &'static str, cip: &str, ip: &str, np: u16, ranges: &[&str]| {
        let mut s = svc(name, cip, vec![tcp("http", 80)], vec![ep4(1), ep4(2).on(OTHER_NODE)]);
        s.ty = "LoadBalancer";
        s.ports[0].node_port = Some(np);
        s.lb_ips = vec![ip.into()];
        s.source_ranges = ranges.iter().map(|r| r.to_string()).collect();
        s
    };
    // 198.19.1.0/24 holds the node IP and the external client; 198.18.9.0/24 the client pod.
    let (open, nodes, pods) = ("198.19.2.170", "198.19.2.171", "198.19.2.172");
    sync(
        ctx,
        &lab,
        b,
        "lb-open, lb-nodes (198.19.1.0/24), lb-pods (198.18.9.0/24)",
        &[
            lb("lb-open", "198.19.255.170", open, 30170, &[]),
            lb("lb-nodes", "198.19.255.171", nodes, 30171, &["198.19.1.0/24"]),
            lb("lb-pods", "198.19.255.172", pods, 30172, &["198.18.9.0/24"]),
        ],
    )?;
    let both = ["pod1", "pod2"];
    let served = [
        (Where::External, open),
        (Where::Node, open),
        (Where::Pod(CLIENT), open),
        (Where::External, nodes),
        (Where::Node, nodes),
        (Where::Pod(CLIENT), pods),
    ];
    for (from, ip) in served {
        let what = format!("{from:?} -> LB IP {ip} (source in range)");
        let t = connect(ctx, &lab, from, ip, 80, Proto::Tcp, 20)?;
        spread(&t, &both, &what)?;
        each_saw_only(&t, &both, |p| masq4(&lab, p), &what)?;
    }
    let refused_by_ranges = [(Where::Pod(CLIENT), nodes), (Where::External, pods), (Where::Node, pods)];
    for (from, ip) in refused_by_ranges {
        let t = connect_quiet(ctx, &mut lab, from, ip, 80, Proto::Tcp, 2)?;
        dropped(&t, &format!("{from:?} -> LB IP {ip} (source not in range)"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// external IPs

/// An external IP from outside (v4 and v6) and from the node: every endpoint, local or
/// not, masqueraded (ETP Cluster).
fn out_external_ip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    lab.route_service_cidr(EXT_CIDR6)?;
    let (eip4, eip6) = ("198.19.2.180", "fd00:19:2::180");
    let mut s = dual("eip", "198.19.255.180", "fd00:19:ff::180", &[1], &[2]);
    s.external_ips = vec![eip4.into(), eip6.into()];
    sync(ctx, &lab, b, "eip (externalIPs v4+v6; pod1 local, pod2 remote)", &[s])?;
    let both = ["pod1", "pod2"];
    for (from, dst) in [(Where::External, eip4), (Where::Node, eip4)] {
        let t = connect(ctx, &lab, from, dst, 80, Proto::Tcp, N)?;
        let what = format!("{from:?} -> external IP {dst}");
        spread(&t, &both, &what)?;
        each_saw_only(&t, &both, |p| masq4(&lab, p), &what)?;
    }
    for (from, dst) in [(Where::External, eip6), (Where::Node, eip6)] {
        let t = connect(ctx, &lab, from, dst, 80, Proto::Tcp, N)?;
        let what = format!("{from:?} -> external IP [{dst}]");
        spread(&t, &both, &what)?;
        each_saw_only(&t, &both, |p| masq6(&lab, p), &what)?;
    }
    // A pod's connection to the external IP is masqueraded too (the EXT chain marks all).
    let t = connect(ctx, &lab, Where::Pod(CLIENT), eip6, 80, Proto::Tcp, N)?;
    spread(&t, &both, "pod -> external IP v6")?;
    ensure!(!t.sources_seen.contains_key(CLIENT_IP6), "pod -> external IP v6 not masqueraded: {t}");
    Ok(())
}

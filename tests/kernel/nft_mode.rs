//! nftables mode on the real kernel (`nftables_*` cases): the real `svcproxy sync --mode
//! nftables` applies the `kube-proxy` tables with the real `nft` in the lab's node
//! namespace; what the kernel then lists holds the rules; a dry run right after finds
//! nothing to change; real connections to a ClusterIP (from the node and from a pod) and
//! to a NodePort (from outside the node) reach the pods; a transaction the kernel refuses
//! changes nothing (the previous rules keep serving) and the error names the line;
//! `svcproxy cleanup` removes both families' tables; kube-proxy's one-transaction text
//! (`render`) applied by a bare `nft -f` lists exactly as svcproxy's sync (two
//! transactions, reordered) does, and a sync over it changes no rule (migration); and `sync --watch --mode nftables`
//! follows an endpoint change with a partial sync (sent as a netlink batch), clearing the
//! UDP conntrack entries of the endpoint that went; a partial sync's batch the kernel
//! refuses changes nothing.

use crate::dataplane::{self, cluster_yaml, ep4, ep6, pod_ip4, svc, tcp, Port, Svc, CLIENT, CLIENT_IP4, EP_PORT, N, NODE};
use crate::harness::{Case, CaseError, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Proto, Where};
use crate::svcproxy::{path_str, run, run_expect, temp_yaml};

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_sync_reads_back_and_serves_clusterip_and_nodeport", sync_serves),
        Case::new("nftables_hairpin_is_masqueraded_in_both_kube_proxy_tables", hairpin),
        Case::new("nftables_refused_transaction_keeps_the_previous_rules", refused_keeps_rules),
        Case::new("nftables_cleanup_removes_both_tables", cleanup_removes_tables),
        Case::new("nftables_kube_proxys_transaction_and_svcproxys_sync_leave_the_same_tables", same_as_kube_proxy),
        Case::new("nftables_watch_partial_sync_follows_an_endpoint_change", watch_partial).with_timeout(std::time::Duration::from_secs(180)),
        Case::new("nftables_watch_clears_stale_udp_conntrack_entries", watch_udp_conntrack).with_timeout(std::time::Duration::from_secs(180)),
        Case::new("nftables_watch_refused_netlink_partial_sync_keeps_the_previous_rules", watch_refused_partial).with_timeout(std::time::Duration::from_secs(180)),
        Case::new("nftables_localhost_nodeports_serve_tcp_and_reject_and_count_udp", localhost_nodeports).with_timeout(std::time::Duration::from_secs(180)),
    ]
}

const CLUSTER_CIDRS: &str = "198.18.0.0/16,fd00:18::/32";
const CIP4: &str = "198.19.255.10";
const CIP6: &str = "fd00:19:ff::10";
const NODE_PORT: u16 = 30080;

/// The lab of the dataplane cases (pods 1 and 2, a client pod), for nftables mode.
fn lab(ctx: &Ctx) -> Result<Lab, CaseError> {
    ctx.require(&["ip", "conntrack", "sysctl", "kill", "nft", "unshare"])?;
    let lab = dataplane::lab(ctx, Backend::Nft, &[1, 2], false)?;
    Ok(lab)
}

fn web(eps: &[u8]) -> Svc {
    let mut s = svc("web", CIP4, vec![Port { node_port: Some(NODE_PORT), ..tcp("http", 80) }], eps.iter().map(|k| ep4(*k)).collect());
    s.ty = "NodePort";
    s.cluster_ips.push(CIP6.to_string());
    s.eps6 = eps.iter().map(|k| ep6(*k)).collect();
    s
}

fn args<'a>(path: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "sync", "--mode", "nftables", "--from", path, "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--node-ip", netns::NODE_IP6, "--cluster-cidr", CLUSTER_CIDRS,
    ];
    a.extend_from_slice(extra);
    a
}

/// `svcproxy sync --mode nftables` of `svcs` (exit 0), then its dry run (exit 0, nothing printed).
fn sync(ctx: &Ctx, lab: &Lab, svcs: &[Svc]) -> CaseResult {
    sync_with(ctx, lab, svcs, &[])
}

/// [`sync`] with more flags (the dry run too).
fn sync_with(ctx: &Ctx, lab: &Lab, svcs: &[Svc], extra: &[&str]) -> CaseResult {
    let path = temp_yaml(&cluster_yaml(svcs))?;
    let p = path_str(&path).to_string();
    let t = std::time::Instant::now();
    let out = run(lab.node(), Backend::Nft, &args(&p, extra))?;
    ctx.log(format!("sync: {} ms, exit {:?}: {}", t.elapsed().as_millis(), out.status.code(), String::from_utf8_lossy(&out.stderr).trim()));
    ensure!(out.status.code() == Some(0), "sync failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut dry = extra.to_vec();
    dry.push("--dry-run");
    let diff = run_expect(lab.node(), Backend::Nft, &args(&p, &dry), 0).map_err(|e| format!("a dry run right after the sync wants changes: {e}"))?;
    ensure!(diff.trim().is_empty(), "a clean dry run prints nothing, got:\n{diff}");
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// A pod reaching its own Service and answered by itself is masqueraded (else the reply
/// comes from its own address, a martian on its link, and the connection never
/// completes), in both tables: v1.34's endpoint chain marks it; v1.36's `masquerading`
/// chain matches it in `hairpin-connections` — and without that element, the same
/// connection fails (the check depends on the set). pod2 answering pod1 sees pod1's own
/// address.
fn hairpin(ctx: &mut Ctx) -> CaseResult {
    for version in ["1.34", "1.37"] {
        let mut lab = lab(ctx)?;
        let (own4, own6, pair4) = ("198.19.255.40", "fd00:19:ff::40", "198.19.255.41");
        let mut own = svc("own", own4, vec![tcp("http", 80)], vec![ep4(1)]);
        own.cluster_ips.push(own6.to_string());
        own.eps6 = vec![ep6(1)];
        let pair = svc("pair", pair4, vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
        sync_with(ctx, &lab, &[own, pair], &["--kube-proxy-version", version])?;
        let t = dataplane::connect(ctx, &lab, Where::Pod("pod1"), own4, 80, Proto::Tcp, 10)?;
        dataplane::spread(&t, &["pod1"], &format!("{version}: pod1 -> its own service"))?;
        dataplane::sources_are(&t, &[&dataplane::masq4(&lab, "pod1")], &format!("{version}: pod1 -> its own service (hairpin masqueraded)"))?;
        let t = dataplane::connect(ctx, &lab, Where::Pod("pod1"), own6, 80, Proto::Tcp, 10)?;
        dataplane::sources_are(&t, &[&dataplane::masq6(&lab, "pod1")], &format!("{version}: v6 pod1 -> its own service (hairpin masqueraded)"))?;
        let t = dataplane::connect(ctx, &lab, Where::Pod("pod1"), pair4, 80, Proto::Tcp, N)?;
        dataplane::spread(&t, &["pod1", "pod2"], &format!("{version}: pod1 -> pair"))?;
        ensure!(t.saw("pod1", &dataplane::masq4(&lab, "pod1")) && t.saw("pod2", &pod_ip4(1)), "{version}: pod1 -> pair: {t}");
        if version == "1.37" {
            let element = format!("{} . {} . tcp . {EP_PORT}", pod_ip4(1), pod_ip4(1));
            lab.node().run(&["nft", &format!("delete element ip kube-proxy hairpin-connections {{ {element} }}")])?;
            lab.conntrack_flush()?;
            let t = dataplane::connect_quiet(ctx, &mut lab, Where::Pod("pod1"), own4, 80, Proto::Tcp, 2)?;
            dataplane::dropped(&t, "1.37: pod1 -> its own service without its hairpin-connections element")?;
        }
    }
    Ok(())
}

fn listed(lab: &Lab, family: &str) -> Result<String, String> {
    lab.node().run(&["nft", "list", "table", family, "kube-proxy"])
}

fn sync_serves(ctx: &mut Ctx) -> CaseResult {
    let lab = lab(ctx)?;
    sync(ctx, &lab, &[web(&[1, 2])])?;
    let v4 = listed(&lab, "ip")?;
    let v6 = listed(&lab, "ip6")?;
    // v1.34's table DNATs in an endpoint chain, v1.36's from the service chain's map.
    let dnats = |t: &str, ip: &str, bracketed: &str| t.contains(&format!("dnat to {bracketed}:{EP_PORT}")) || t.contains(&format!(": {ip} . {EP_PORT}"));
    let ip1 = pod_ip4(1).to_string();
    ensure!(dnats(&v4, &ip1, &ip1) && v4.contains(&format!("{CIP4} . tcp . 80")), "the ip table lacks the service:\n{v4}");
    ensure!(dnats(&v6, "fd00:18:1::2", "[fd00:18:1::2]"), "the ip6 table lacks the endpoint:\n{v6}");
    ensure!(!lab.node().run(&["iptables-nft-save", "-t", "nat"]).unwrap_or_default().contains("KUBE-SERVICES"), "no iptables rules were written");

    let t = dataplane::connect(ctx, &lab, Where::Node, CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "node -> ClusterIP")?;
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "pod -> ClusterIP")?;
    dataplane::sources_are(&t, &[CLIENT_IP4], "pod -> ClusterIP (inside the cluster CIDR: no masquerade)")?;
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP6, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "pod -> IPv6 ClusterIP")?;
    let t = dataplane::connect(ctx, &lab, Where::External, netns::NODE_IP4, NODE_PORT, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "outside -> NodePort")?;

    // One endpoint goes: a second sync removes its chain, and only pod2 answers.
    sync(ctx, &lab, &[web(&[2])])?;
    let v4 = listed(&lab, "ip")?;
    ensure!(!v4.contains(&pod_ip4(1)), "pod1's endpoint chain is gone:\n{v4}");
    let t = dataplane::connect(ctx, &lab, Where::External, netns::NODE_IP4, NODE_PORT, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod2"], "outside -> NodePort after pod1 left")?;
    Ok(())
}

/// A chain the next ruleset needs is planted as a base chain (a chain the kernel will not
/// let a map element `goto`): the kernel refuses the whole transaction.
fn refused_keeps_rules(ctx: &mut Ctx) -> CaseResult {
    let lab = lab(ctx)?;
    sync(ctx, &lab, &[web(&[1, 2])])?;
    let before = listed(&lab, "ip")?;
    let more = [web(&[1, 2]), svc("new", "198.19.255.20", vec![tcp("http", 80)], vec![ep4(2)])];
    let path = temp_yaml(&cluster_yaml(&more))?;
    let p = path_str(&path).to_string();
    let rendered = run_expect(lab.node(), Backend::Nft, &["render", "--mode", "nftables", "--from", &p, "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--cluster-cidr", CLUSTER_CIDRS], 0)?;
    let chain = rendered
        .lines()
        .find_map(|l| l.strip_prefix("add chain ip kube-proxy service-").filter(|c| c.contains("-dp/new/tcp/")))
        .map(|c| format!("service-{c}"))
        .ok_or("render names no service chain for dp/new")?;
    lab.node().run(&["nft", &format!("add chain ip kube-proxy {chain} {{ type filter hook input priority 0 ; }}")])?;
    let planted = listed(&lab, "ip")?;

    let out = run(lab.node(), Backend::Nft, &args(&p, &[]))?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ctx.log(&err);
    ensure!(out.status.code() == Some(2), "exit {:?}, want 2: {err}", out.status.code());
    ensure!(err.contains("refused the transaction at line") && err.contains(&chain) && err.contains(">  "), "the error names the refused line: {err}");
    ensure!(listed(&lab, "ip")? == planted, "the refused transaction changed the table");
    ensure!(planted.len() > before.len() && planted.contains(&chain), "the plant is all that differs");
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "the previous rules still serve")?;

    // With the plant gone, the same sync goes through.
    lab.node().run(&["nft", &format!("delete chain ip kube-proxy {chain}")])?;
    sync(ctx, &lab, &more)?;
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.20", 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod2"], "the new service")?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Both families' tables as `nft list table` prints them.
fn both(lab: &Lab) -> Result<String, String> {
    Ok(format!("{}{}", listed(lab, "ip")?, listed(lab, "ip6")?))
}

/// svcproxy's full sync into an empty kernel (netlink batches), then (tables deleted)
/// kube-proxy's one-transaction text as `render` prints it, applied by a bare `nft -f`: the
/// kernel lists the same tables; then svcproxy syncs over kube-proxy's tables (a node
/// switching proxies) and changes no rule; and (tables deleted) its sync through `nft -f`
/// (`--nft-netlink false`) lists the same again.
fn same_as_kube_proxy(ctx: &mut Ctx) -> CaseResult {
    let lab = lab(ctx)?;
    let svcs = [web(&[1, 2]), svc("api", "198.19.255.20", vec![tcp("http", 80), tcp("grpc", 81)], vec![ep4(1), ep4(2)])];
    sync(ctx, &lab, &svcs)?;
    let staged = both(&lab)?;
    ensure!(staged.contains("numgen random mod 2 vmap") || staged.contains("numgen random mod 2 map"), "the service chains balance over two endpoints:\n{staged}");

    let path = temp_yaml(&cluster_yaml(&svcs))?;
    let p = path_str(&path).to_string();
    let mut render = args(&p, &[]);
    render[0] = "render";
    let text = run_expect(lab.node(), Backend::Nft, &render, 0)?;
    let kp = temp_yaml(&text)?;
    lab.node().run(&["nft", "delete", "table", "ip", "kube-proxy"])?;
    lab.node().run(&["nft", "delete", "table", "ip6", "kube-proxy"])?;
    lab.node().run(&["nft", "-f", path_str(&kp)])?;
    let one = both(&lab)?;
    ensure!(one == staged, "kube-proxy's one transaction lists otherwise than svcproxy's sync:\n--- one transaction\n{one}\n--- svcproxy\n{staged}");

    let out = run(lab.node(), Backend::Nft, &args(&p, &[]))?;
    ensure!(out.status.code() == Some(0), "sync over kube-proxy's tables failed: {}", String::from_utf8_lossy(&out.stderr));
    ensure!(both(&lab)? == one, "svcproxy's sync over kube-proxy's tables changed them");

    // The same sync through `nft -f` (--nft-netlink=false) leaves the same tables.
    lab.node().run(&["nft", "delete", "table", "ip", "kube-proxy"])?;
    lab.node().run(&["nft", "delete", "table", "ip6", "kube-proxy"])?;
    let out = run(lab.node(), Backend::Nft, &args(&p, &["--nft-netlink", "false"]))?;
    ensure!(out.status.code() == Some(0), "sync through nft failed: {}", String::from_utf8_lossy(&out.stderr));
    ensure!(both(&lab)? == one, "svcproxy's sync through nft -f lists otherwise than through netlink");
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "pod -> ClusterIP after the switch")?;
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&kp);
    Ok(())
}

fn cleanup_removes_tables(ctx: &mut Ctx) -> CaseResult {
    let lab = lab(ctx)?;
    sync(ctx, &lab, &[web(&[1])])?;
    let would = run_expect(lab.node(), Backend::Nft, &["cleanup", "--dry-run"], 1)?;
    ctx.log(&would);
    ensure!(would.contains("nftables: would remove table ip kube-proxy") && would.contains("nftables: would remove table ip6 kube-proxy"), "{would}");
    ensure!(listed(&lab, "ip").is_ok(), "a dry run removes nothing");
    run_expect(lab.node(), Backend::Nft, &["cleanup"], 0)?;
    let tables = lab.node().run(&["nft", "list", "tables"])?;
    ensure!(!tables.contains("kube-proxy"), "tables left: {tables}");
    let again = run_expect(lab.node(), Backend::Nft, &["cleanup", "--dry-run"], 0)?;
    ensure!(!again.contains("nftables"), "nothing left to remove: {again}");
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, 5);
    ensure!(t.map(|t| t.answered()).unwrap_or(0) == 0, "the ClusterIP no longer answers");
    Ok(())
}

/// `svcproxy sync --watch --mode nftables` of the cluster file at `path`, its log at `log`.
fn watch_daemon(lab: &Lab, path: &str, log: &std::path::Path, extra: &[&str]) -> Result<crate::watch_e2e::Daemon, String> {
    let mut flags = vec!["--watch", "--poll-interval", "100ms", "--healthz-bind-address", "127.0.0.1:10256"];
    flags.extend_from_slice(extra);
    let argv = args(path, &flags);
    crate::watch_e2e::spawn_svcproxy(&lab.node().name, &argv, &[], log)
}

/// A watch daemon following a cluster file in the lab's node, past its first (full) sync;
/// dropped, it stops the daemon and removes the file and the log.
struct Watching {
    path: std::path::PathBuf,
    /// `path` as an argument.
    p: String,
    log: std::path::PathBuf,
    daemon: Option<crate::watch_e2e::Daemon>,
}

impl Watching {
    fn start(lab: &Lab, yaml: &str) -> Result<Watching, String> {
        Watching::start_with(lab, yaml, &[])
    }

    /// [`Watching::start`] with more flags.
    fn start_with(lab: &Lab, yaml: &str, extra: &[&str]) -> Result<Watching, String> {
        let path = temp_yaml(yaml)?;
        let p = path_str(&path).to_string();
        let log = path.with_extension("log");
        let daemon = Some(watch_daemon(lab, &p, &log, extra)?);
        let w = Watching { path, p, log, daemon };
        crate::watch_e2e::until("the first (full) sync", std::time::Duration::from_secs(60), || sync_count(lab, FULL) >= 1.0)
            .map_err(|e| format!("{e}\n{}", w.log_text()))?;
        Ok(w)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        drop(self.daemon.take());
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A sync metric of the watch daemon in the lab's node namespace (0 when not served yet).
fn sync_count(lab: &Lab, name: &'static str) -> f64 {
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], 10249).into();
    crate::watch_e2e::metric_at(&lab.node().name, metrics, name).unwrap_or(0.0)
}

const FULL: &str = "kubeproxy_sync_full_proxy_rules_duration_seconds_count";
const PARTIAL: &str = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count";
/// Partial syncs' transactions sent as netlink batches, and through `nft -f` (IPv4).
const BY_NETLINK4: &str = "svcproxy_nftables_partial_writes_total{ip_family=\"IPv4\",writer=\"netlink\"}";
const BY_NFT4: &str = "svcproxy_nftables_partial_writes_total{ip_family=\"IPv4\",writer=\"nft\"}";
const FAILURES4: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"}";

/// `svcproxy sync --watch --mode nftables` from a file: the first sync is full, the change
/// of an endpoint then goes in a partial sync (its metric counts it), the table ends as a
/// one-shot sync would leave it (a dry run finds nothing), and connections follow.
fn watch_partial(ctx: &mut Ctx) -> CaseResult {
    use crate::watch_e2e::until;
    use std::time::Duration;
    let lab = lab(ctx)?;
    let w = Watching::start(&lab, &cluster_yaml(&[web(&[1, 2])]))?;
    let (path, p, log_text) = (&w.path, &w.p, || w.log_text());
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "watch: pod -> ClusterIP")?;

    let partial_before = sync_count(&lab, PARTIAL);
    std::fs::write(path, cluster_yaml(&[web(&[2])])).map_err(|e| e.to_string())?;
    let took = until("pod1 gone from the table", Duration::from_secs(60), || listed(&lab, "ip").is_ok_and(|l| !l.contains(&pod_ip4(1))))
        .map_err(|e| format!("{e}\n{}", log_text()))?;
    ctx.log(format!("endpoint change programmed {} ms after the file changed", took.as_millis()));
    until("the partial sync counted", Duration::from_secs(10), || sync_count(&lab, PARTIAL) > partial_before).map_err(|e| format!("{e}\n{}", log_text()))?;
    ensure!(sync_count(&lab, FULL) == 1.0, "the change went in a partial sync, not a full one:\n{}", log_text());
    ensure!(sync_count(&lab, BY_NETLINK4) >= 1.0 && sync_count(&lab, BY_NFT4) == 0.0, "the partial sync went as a netlink batch, not through nft:\n{}", log_text());
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod2"], "watch: after pod1 left")?;
    let diff = run_expect(lab.node(), Backend::Nft, &args(p, &["--dry-run"]), 0).map_err(|e| format!("after the partial sync a dry run wants changes: {e}"))?;
    ensure!(diff.trim().is_empty(), "{diff}");
    ctx.log(log_text());
    Ok(())
}

/// `KubeProxyNFTablesLocalhostNodePorts` with `--nodeport-addresses primary,localhost` (kube-proxy
/// v1.37): a TCP connection from the node to 127.0.0.1:NODEPORT (and [::1]:NODEPORT) reaches
/// the service's pods through the userspace proxy (the kernel has no rule for it: without
/// the gate, nothing listens there and it is refused), its listeners counted per family;
/// a UDP packet to 127.0.0.1:NODEPORT is rejected by `localhost-nodeport-reject-udp` (the
/// node's stack would refuse it too, so the named counter, read back in
/// `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`, is what shows the rule
/// took it); the same UDP NodePort on the node IP still reaches its pods. Then, the control:
/// with `--nodeport-addresses primary` no proxy runs, and TCP to 127.0.0.1 is rejected and
/// counted as well; with the gate off again, the chains and counters go.
fn localhost_nodeports(ctx: &mut Ctx) -> CaseResult {
    use crate::watch_e2e::until;
    use std::time::Duration;
    ctx.require(&["ip", "conntrack", "sysctl", "kill", "nft", "unshare"])?;
    let lab = dataplane::lab(ctx, Backend::Nft, &[1, 2], true)?;
    let mut dns = svc("dns", "198.19.255.53", vec![Port { node_port: Some(30053), ..dataplane::udp("dns", 53) }], vec![ep4(1), ep4(2)]);
    dns.ty = "NodePort";
    let flags = ["--feature-gates", "KubeProxyNFTablesLocalhostNodePorts=true", "--nodeport-addresses", "primary,localhost"];
    // A one-shot sync, then its dry run finds nothing to change (named counters compare).
    sync_with(ctx, &lab, &[web(&[1, 2]), dns.clone()], &flags)?;
    let w = Watching::start_with(&lab, &cluster_yaml(&[web(&[1, 2]), dns]), &flags)?;
    let log_text = || w.log_text();
    let listeners = |family: &'static str| sync_count(&lab, family);
    until("both families' listeners", Duration::from_secs(20), || {
        listeners("kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"}") == 1.0 && listeners("kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv6\"}") == 1.0
    })
    .map_err(|e| format!("{e}\n{}", log_text()))?;

    let t = dataplane::connect(ctx, &lab, Where::Node, "127.0.0.1", NODE_PORT, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "node -> 127.0.0.1:NodePort (tcp, userspace proxy)")?;
    let t = dataplane::connect(ctx, &lab, Where::Node, "::1", NODE_PORT, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "node -> [::1]:NodePort (tcp, userspace proxy)")?;

    let rejected = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv4\",protocol=\"UDP\"}";
    let before = sync_count(&lab, rejected);
    let t = dataplane::connect(ctx, &lab, Where::Node, "127.0.0.1", 30053, Proto::Udp, 5)?;
    dataplane::refused(&t, "node -> 127.0.0.1:NodePort (udp)")?;
    let after = sync_count(&lab, rejected);
    ensure!(after - before >= 5.0, "the 5 UDP packets to 127.0.0.1:30053 were not counted by the reject rule ({before} -> {after}):\n{}", listed(&lab, "ip")?);
    let t = dataplane::connect(ctx, &lab, Where::External, netns::NODE_IP4, 30053, Proto::Udp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "external -> node IP:NodePort (udp)")?;
    ctx.log(log_text());
    drop(w);

    // The control: the gate on, but nodePortAddresses without loopback: no proxy, so TCP is
    // rejected on loopback too, and counted as such.
    let mut dns = svc("dns", "198.19.255.53", vec![Port { node_port: Some(30053), ..dataplane::udp("dns", 53) }], vec![ep4(1), ep4(2)]);
    dns.ty = "NodePort";
    let flags = ["--feature-gates", "KubeProxyNFTablesLocalhostNodePorts=true", "--nodeport-addresses", "primary"];
    let w = Watching::start_with(&lab, &cluster_yaml(&[web(&[1, 2]), dns]), &flags)?;
    let tcp_rejected = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family=\"IPv4\",protocol=\"TCP\"}";
    let before = sync_count(&lab, tcp_rejected);
    let t = dataplane::connect(ctx, &lab, Where::Node, "127.0.0.1", NODE_PORT, Proto::Tcp, 5)?;
    dataplane::refused(&t, "no proxy: node -> 127.0.0.1:NodePort (tcp)")?;
    let after = sync_count(&lab, tcp_rejected);
    ensure!(after - before >= 5.0, "no proxy: the TCP connections to 127.0.0.1 were not counted ({before} -> {after}):\n{}", w.log_text());
    let t = dataplane::connect(ctx, &lab, Where::External, netns::NODE_IP4, NODE_PORT, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "no proxy: external -> node IP:NodePort (tcp)")?;
    drop(w);

    // The gate off again: its chains and counters go at the first full sync.
    let w = Watching::start(&lab, &cluster_yaml(&[web(&[1, 2])]))?;
    let l = listed(&lab, "ip")?;
    ensure!(!l.contains("localhost-nodeport-reject"), "the gate's chains or counters stayed:\n{l}\n{}", w.log_text());
    Ok(())
}

/// A partial sync's netlink batch that the kernel refuses (a chain the change needs is
/// planted as a base chain, which a map element may not `goto`) changes nothing: the table
/// lists as planted and the previous rules keep serving; with the plant gone, the next
/// (full) sync programs the change.
fn watch_refused_partial(ctx: &mut Ctx) -> CaseResult {
    use crate::watch_e2e::until;
    use std::time::Duration;
    let lab = lab(ctx)?;
    let w = Watching::start(&lab, &cluster_yaml(&[web(&[1, 2])]))?;
    let (path, log_text) = (&w.path, || w.log_text());

    let more = [web(&[1, 2]), svc("new", "198.19.255.20", vec![tcp("http", 80)], vec![ep4(2)])];
    let more_path = temp_yaml(&cluster_yaml(&more))?;
    let rendered = run_expect(lab.node(), Backend::Nft, &["render", "--mode", "nftables", "--from", path_str(&more_path), "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--cluster-cidr", CLUSTER_CIDRS], 0)?;
    let chain = rendered
        .lines()
        .find_map(|l| l.strip_prefix("add chain ip kube-proxy service-").filter(|c| c.contains("-dp/new/tcp/")))
        .map(|c| format!("service-{c}"))
        .ok_or("render names no service chain for dp/new")?;
    lab.node().run(&["nft", &format!("add chain ip kube-proxy {chain} {{ type filter hook input priority 0 ; }}")])?;
    let planted = listed(&lab, "ip")?;
    let failures = sync_count(&lab, FAILURES4);
    let by_netlink = sync_count(&lab, BY_NETLINK4);
    std::fs::write(path, cluster_yaml(&more)).map_err(|e| e.to_string())?;
    until("the refused sync counted", Duration::from_secs(60), || sync_count(&lab, FAILURES4) > failures).map_err(|e| format!("{e}\n{}", log_text()))?;
    ensure!(listed(&lab, "ip")? == planted, "the refused batch changed the table:\n{}", log_text());
    ensure!(sync_count(&lab, BY_NETLINK4) == by_netlink && sync_count(&lab, BY_NFT4) == 0.0, "no partial sync succeeded and none went through nft");
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), CIP4, 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod1", "pod2"], "the previous rules still serve")?;

    lab.node().run(&["nft", &format!("delete chain ip kube-proxy {chain}")])?;
    until("the change programmed after the plant went", Duration::from_secs(90), || listed(&lab, "ip").is_ok_and(|l| l.contains("198.19.255.20 . tcp . 80")))
        .map_err(|e| format!("{e}\n{}", log_text()))?;
    let t = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.20", 80, Proto::Tcp, N)?;
    dataplane::spread(&t, &["pod2"], "the new service")?;
    let _ = std::fs::remove_file(&more_path);
    Ok(())
}

/// Watch mode clears the UDP conntrack entries DNATed to an endpoint that went, as the
/// other modes do: the same client source ports then reach the endpoint that stays.
fn watch_udp_conntrack(ctx: &mut Ctx) -> CaseResult {
    use crate::watch_e2e::until;
    use std::time::Duration;
    ctx.require(&["ip", "conntrack", "sysctl", "kill", "nft", "unshare"])?;
    let lab = dataplane::lab(ctx, Backend::Nft, &[1, 2], true)?;
    let cip = "198.19.255.110";
    let dns = |eps: &[u8]| svc("dns", cip, vec![dataplane::udp("dns", 53)], eps.iter().map(|k| ep4(*k)).collect());
    let w = Watching::start(&lab, &cluster_yaml(&[dns(&[1, 2])]))?;
    let (path, log_text) = (&w.path, || w.log_text());

    let ports: Vec<u16> = (41001..41017).collect();
    let before = dataplane::udp_fixed(&lab, CLIENT, cip, 53, &ports)?;
    ctx.log(format!("fixed source ports before: {before:?}"));
    ensure!(before.values().all(|p| p == "pod1" || p == "pod2"), "not answered by the endpoints: {before:?}");
    let victim = before[&ports[0]].clone();
    let (victim_k, keep_k) = if victim == "pod1" { (1, 2) } else { (2, 1) };
    let (victim_ip, keep) = (pod_ip4(victim_k), format!("pod{keep_k}"));
    let (_, stale) = dataplane::udp_conntrack(&lab, cip, &victim_ip)?;
    ensure!(!stale.is_empty(), "no conntrack entry to {victim_ip} before the change");

    let partial_before = sync_count(&lab, PARTIAL);
    std::fs::write(path, cluster_yaml(&[dns(&[keep_k])])).map_err(|e| e.to_string())?;
    until("the partial sync", Duration::from_secs(60), || sync_count(&lab, PARTIAL) > partial_before).map_err(|e| format!("{e}\n{}", log_text()))?;
    let (all, stale) = dataplane::udp_conntrack(&lab, cip, &victim_ip)?;
    ctx.log(format!("conntrack after: {} entries, {} to {victim_ip}", all.len(), stale.len()));
    ensure!(stale.is_empty(), "entries DNATed to the removed endpoint survived the partial sync:\n{}\n{}", stale.join("\n"), log_text());
    let after = dataplane::udp_fixed(&lab, CLIENT, cip, 53, &ports)?;
    ensure!(after.values().all(|p| *p == keep), "the same source ports must now reach {keep}: {after:?}");
    Ok(())
}

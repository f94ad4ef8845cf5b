//! Dataplane cases: the real `svcproxy sync` programs the lab's node namespace from a
//! cluster file built here (with the lab's real addresses), then real connections check
//! what kube-proxy's rules are for: spreading, masquerade, session affinity, NodePorts,
//! external IPs, load-balancer source ranges, `externalTrafficPolicy: Local`, REJECT
//! for services without endpoints, terminating endpoints, partial syncs, IPv6, UDP
//! conntrack hygiene, and `svcproxy cleanup`. Every case runs once per iptables backend.
//!
//! Every sync is followed by `svcproxy sync --dry-run`, which must exit 0 (nothing left
//! to change). Addresses (198.18.0.0/15 and fd00::/8 only):
//!
//! | what | address |
//! |---|---|
//! | pod k (endpoints) | 198.18.k.2, fd00:18:k::2; TCP :8080, UDP :5353 |
//! | client pod (inside the cluster CIDR, not an endpoint) | 198.18.9.2, fd00:18:9::2 |
//! | ClusterIPs | 198.19.255.0/24, fd00:19:ff::/112 |
//! | ExternalIPs, LoadBalancer IPs | 198.19.2.0/24 |
//! | node IP / external client | 198.19.1.1 / 198.19.1.2 (fd00:19:1::1 / ::2) |
//! | cluster CIDR | 198.18.0.0/16, fd00:18::/32 |
//!
//! Endpoints "on other nodes" are real pods of the lab whose slice entry names
//! another node (`node-2`): the rules decide, not reachability.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::harness::{Case, CaseError, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Proto, Tally, Where};
use crate::netns::BackendTools as _;
use crate::svcproxy;

// ---------------------------------------------------------------------------
// addresses and names

pub(crate) const NODE: &str = "node-1";
pub(crate) const OTHER_NODE: &str = "node-2";
const NS: &str = "dp";
const CLUSTER_CIDRS: &str = "198.18.0.0/16,fd00:18::/32";
pub(crate) const SVC_CIDR4: &str = "198.19.255.0/24";
pub(crate) const SVC_CIDR6: &str = "fd00:19:ff::/112";
pub(crate) const EXT_CIDR4: &str = "198.19.2.0/24";
pub(crate) const CLIENT: &str = "client";
pub(crate) const CLIENT_IP4: &str = "198.18.9.2";
pub(crate) const CLIENT_IP6: &str = "fd00:18:9::2";
pub(crate) const EP_PORT: u16 = 8080;
const UDP_EP_PORT: u16 = 5353;
/// Connections per spreading check.
pub(crate) const N: u32 = 40;
/// Per-connection timeout where no answer is expected (a reply takes a few ms).
const DROP_WAIT: Duration = Duration::from_millis(500);
/// Per-connection timeout otherwise (the lab's default; generous for a loaded host).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

pub(crate) fn pod_ip4(k: u8) -> String {
    format!("198.18.{k}.2")
}
pub(crate) fn pod_ip6(k: u8) -> String {
    format!("fd00:18:{k}::2")
}
pub(crate) fn pod_name(k: u8) -> String {
    format!("pod{k}")
}

// ---------------------------------------------------------------------------
// cluster files, built in code

#[derive(Clone, Debug)]
pub(crate) struct Port {
    pub(crate) name: &'static str,
    pub(crate) proto: Proto,
    pub(crate) port: u16,
    pub(crate) target: u16,
    pub(crate) node_port: Option<u16>,
}

pub(crate) fn tcp(name: &'static str, port: u16) -> Port {
    Port { name, proto: Proto::Tcp, port, target: EP_PORT, node_port: None }
}
pub(crate) fn udp(name: &'static str, port: u16) -> Port {
    Port { name, proto: Proto::Udp, port, target: UDP_EP_PORT, node_port: None }
}

#[derive(Clone, Debug)]
pub(crate) struct Ep {
    pub(crate) ip: String,
    pub(crate) node: &'static str,
    pub(crate) ready: bool,
    pub(crate) serving: bool,
    pub(crate) terminating: bool,
}

/// A ready endpoint on this node.
pub(crate) fn ep4(k: u8) -> Ep {
    Ep { ip: pod_ip4(k), node: NODE, ready: true, serving: true, terminating: false }
}
pub(crate) fn ep6(k: u8) -> Ep {
    Ep { ip: pod_ip6(k), ..ep4(k) }
}
impl Ep {
    pub(crate) fn on(mut self, node: &'static str) -> Ep {
        self.node = node;
        self
    }
    /// Shutting down but still serving (ready:false, serving:true, terminating:true).
    fn terminating(mut self) -> Ep {
        self.ready = false;
        self.serving = true;
        self.terminating = true;
        self
    }
    /// Shutting down and no longer serving.
    fn not_serving(mut self) -> Ep {
        self.ready = false;
        self.serving = false;
        self.terminating = true;
        self
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Svc {
    pub(crate) name: &'static str,
    /// ClusterIP, NodePort, LoadBalancer
    pub(crate) ty: &'static str,
    pub(crate) cluster_ips: Vec<String>,
    pub(crate) ports: Vec<Port>,
    pub(crate) external_ips: Vec<String>,
    pub(crate) lb_ips: Vec<String>,
    pub(crate) source_ranges: Vec<String>,
    pub(crate) etp_local: bool,
    pub(crate) affinity: bool,
    pub(crate) eps4: Vec<Ep>,
    pub(crate) eps6: Vec<Ep>,
}

pub(crate) fn svc(name: &'static str, cluster_ip: &str, ports: Vec<Port>, eps4: Vec<Ep>) -> Svc {
    Svc {
        name,
        ty: "ClusterIP",
        cluster_ips: vec![cluster_ip.to_string()],
        ports,
        external_ips: vec![],
        lb_ips: vec![],
        source_ranges: vec![],
        etp_local: false,
        affinity: false,
        eps4,
        eps6: vec![],
    }
}

fn quoted(v: &[String]) -> String {
    v.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")
}

fn proto_k8s(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "TCP",
        Proto::Udp => "UDP",
    }
}

impl Svc {
    /// The Service and one EndpointSlice per family of its ClusterIPs.
    fn yaml(&self) -> String {
        let mut y = String::new();
        let fams: Vec<&str> = self
            .cluster_ips
            .iter()
            .map(|ip| if ip.contains(':') { "IPv6" } else { "IPv4" })
            .collect();
        let _ = writeln!(y, "apiVersion: v1\nkind: Service\nmetadata:\n  name: {}\n  namespace: {NS}\nspec:", self.name);
        let _ = writeln!(y, "  type: {}", self.ty);
        let _ = writeln!(y, "  clusterIP: \"{}\"", self.cluster_ips[0]);
        let _ = writeln!(y, "  clusterIPs: [{}]", quoted(&self.cluster_ips));
        let _ = writeln!(y, "  ipFamilies: [{}]", fams.join(", "));
        let policy = if fams.len() > 1 { "RequireDualStack" } else { "SingleStack" };
        let _ = writeln!(y, "  ipFamilyPolicy: {policy}");
        if self.ty != "ClusterIP" || !self.external_ips.is_empty() {
            let etp = if self.etp_local { "Local" } else { "Cluster" };
            let _ = writeln!(y, "  externalTrafficPolicy: {etp}");
        }
        if self.affinity {
            y += "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: 10800\n";
        }
        if !self.external_ips.is_empty() {
            let _ = writeln!(y, "  externalIPs: [{}]", quoted(&self.external_ips));
        }
        if !self.source_ranges.is_empty() {
            let _ = writeln!(y, "  loadBalancerSourceRanges: [{}]", quoted(&self.source_ranges));
        }
        let _ = writeln!(y, "  selector:\n    app: {}\n  ports:", self.name);
        for p in &self.ports {
            let _ = writeln!(
                y,
                "  - name: {}\n    port: {}\n    protocol: {}\n    targetPort: {}",
                p.name,
                p.port,
                proto_k8s(p.proto),
                p.target
            );
            if let Some(np) = p.node_port {
                let _ = writeln!(y, "    nodePort: {np}");
            }
        }
        if !self.lb_ips.is_empty() {
            y += "status:\n  loadBalancer:\n    ingress:\n";
            for ip in &self.lb_ips {
                let _ = writeln!(y, "    - ip: \"{ip}\"\n      ipMode: VIP");
            }
        }
        for fam in &fams {
            let (eps, suffix) = if *fam == "IPv6" { (&self.eps6, "v6") } else { (&self.eps4, "v4") };
            let _ = writeln!(
                y,
                "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {}-{suffix}\n  namespace: {NS}\n  labels:\n    kubernetes.io/service-name: {}\naddressType: {fam}",
                self.name, self.name
            );
            if eps.is_empty() {
                y += "endpoints: []\n";
            } else {
                y += "endpoints:\n";
                for e in eps {
                    let _ = writeln!(
                        y,
                        "- addresses: [\"{}\"]\n  conditions: {{ready: {}, serving: {}, terminating: {}}}\n  nodeName: {}",
                        e.ip, e.ready, e.serving, e.terminating, e.node
                    );
                }
            }
            y += "ports:\n";
            for p in &self.ports {
                let _ = writeln!(
                    y,
                    "- name: {}\n  port: {}\n  protocol: {}",
                    p.name,
                    p.target,
                    proto_k8s(p.proto)
                );
            }
        }
        y
    }
}

pub(crate) fn cluster_yaml(svcs: &[Svc]) -> String {
    let docs: Vec<String> = svcs.iter().map(Svc::yaml).collect();
    if docs.is_empty() {
        // An empty cluster: no services at all.
        return "apiVersion: v1\nkind: List\nitems: []\n".into();
    }
    docs.join("---\n")
}

// ---------------------------------------------------------------------------
// running svcproxy in the lab

pub(crate) fn sync_args(path: &str, dry_run: bool) -> Vec<&str> {
    let mut a = vec![
        "sync",
        "--from",
        path,
        "--hostname-override",
        NODE,
        "--node-ip",
        netns::NODE_IP4,
        "--node-ip",
        netns::NODE_IP6,
        "--cluster-cidr",
        CLUSTER_CIDRS,
    ];
    if dry_run {
        a.push("--dry-run");
    }
    a
}

/// `svcproxy sync` of `svcs` in the node netns (exit 0), then `sync --dry-run` (exit 0:
/// nothing left to change).
pub(crate) fn sync(ctx: &Ctx, lab: &Lab, b: Backend, what: &str, svcs: &[Svc]) -> CaseResult {
    let text = cluster_yaml(svcs);
    let path = svcproxy::temp_yaml(&text)?;
    let p = svcproxy::path_str(&path).to_string();
    let t0 = Instant::now();
    let r = (|| -> Result<(), String> {
        svcproxy::run_expect(lab.node(), b, &sync_args(&p, false), 0)
            .map_err(|e| format!("sync {what}: {e}\n--- cluster file:\n{text}"))?;
        let synced = t0.elapsed().as_millis();
        let diff = svcproxy::run_expect(lab.node(), b, &sync_args(&p, true), 0)
            .map_err(|e| format!("sync --dry-run right after sync {what} wants changes: {e}"))?;
        ctx.log(format!(
            "sync {what}: {synced} ms; --dry-run clean ({} bytes of output)",
            diff.len()
        ));
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    r.map_err(CaseError::Fail)
}

// ---------------------------------------------------------------------------
// the lab

const BASE_TOOLS: &[&str] = &["ip", "conntrack", "sysctl", "kill"];

fn require(ctx: &Ctx, b: Backend) -> CaseResult {
    let tools = b.tools();
    let mut all: Vec<&str> = BASE_TOOLS.to_vec();
    all.extend(tools.iter().map(String::as_str));
    ctx.require(&all)
}

/// A lab with endpoint pods `pod<k>` for each k in `pods` (TCP :8080, and UDP :5353 if
/// `udp`; IPv4 and IPv6), a non-endpoint `client` pod, and the service ranges routed.
pub(crate) fn lab(ctx: &Ctx, b: Backend, pods: &[u8], udp: bool) -> Result<Lab, CaseError> {
    require(ctx, b)?;
    let mut lab = Lab::new(b.name())?;
    ctx.log(format!("lab {} (node {})", lab.prefix, lab.node().name));
    for &k in pods {
        let pod = lab.add_pod(&pod_name(k), &pod_ip4(k), Some(&pod_ip6(k)))?;
        pod.serve_tcp(EP_PORT)?;
        if udp {
            pod.serve_udp(UDP_EP_PORT)?;
        }
    }
    lab.add_pod(CLIENT, CLIENT_IP4, Some(CLIENT_IP6))?;
    for cidr in [SVC_CIDR4, SVC_CIDR6, EXT_CIDR4] {
        lab.route_service_cidr(cidr)?;
    }
    lab.assert_no_default_route()?;
    ctx.log("pods up, servers answering");
    Ok(lab)
}

pub(crate) fn connect(ctx: &Ctx, lab: &Lab, from: Where, dst: &str, port: u16, proto: Proto, n: u32) -> Result<Tally, CaseError> {
    let t = lab.connect(from, dst, port, proto, n)?;
    ctx.log(format!("{} {from:?} -> {dst}:{port} x{n}: {t}", proto.name()));
    Ok(t)
}

/// Like [`connect`] with the short [`DROP_WAIT`] per attempt, for where no answer is expected.
pub(crate) fn connect_quiet(ctx: &Ctx, lab: &mut Lab, from: Where, dst: &str, port: u16, proto: Proto, n: u32) -> Result<Tally, CaseError> {
    lab.set_connect_timeout(DROP_WAIT);
    let t = connect(ctx, lab, from, dst, port, proto, n);
    lab.set_connect_timeout(ANSWER_WAIT);
    t
}

/// Every attempt answered, by exactly the pods in `pods`, each at least once.
pub(crate) fn spread(t: &Tally, pods: &[&str], what: &str) -> CaseResult {
    ensure!(
        t.errors.is_empty() && t.refused == 0 && t.timed_out == 0 && t.eperm == 0,
        "{what}: failed connections: {t}"
    );
    ensure!(t.answered() == t.attempts, "{what}: not every attempt answered: {t}");
    for p in pods {
        ensure!(t.count(p) > 0, "{what}: {p} got nothing: {t}");
    }
    ensure!(
        t.by_pod.keys().all(|k| pods.contains(&k.as_str())),
        "{what}: answered by pods other than {pods:?}: {t}"
    );
    Ok(())
}

/// Nothing answered, and every attempt timed out (DROP; not refused).
pub(crate) fn dropped(t: &Tally, what: &str) -> CaseResult {
    ensure!(
        t.answered() == 0 && t.refused == 0 && t.errors.is_empty() && t.timed_out == t.attempts,
        "{what}: expected every attempt to time out (dropped): {t}"
    );
    Ok(())
}

/// Every attempt refused, quickly (REJECT).
pub(crate) fn refused(t: &Tally, what: &str) -> CaseResult {
    ensure!(t.refused == t.attempts, "{what}: expected every attempt refused: {t}");
    ensure!(t.max_refused_ms < 500, "{what}: refusal not immediate: {t}");
    Ok(())
}

/// The only sources the pods saw.
pub(crate) fn sources_are(t: &Tally, srcs: &[&str], what: &str) -> CaseResult {
    ensure!(
        t.sources_seen.keys().all(|s| srcs.contains(&s.as_str())),
        "{what}: pods saw sources other than {srcs:?}: {t}"
    );
    Ok(())
}

/// What masquerade from the node looks like to pod k: its link's node end.
pub(crate) fn masq4(lab: &Lab, pod: &str) -> String {
    lab.pod(pod).map(|p| p.node_side_ip4().to_string()).unwrap_or_default()
}
pub(crate) fn masq6(lab: &Lab, pod: &str) -> String {
    lab.pod(pod).map(|p| p.node_side_ip6().to_string()).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// 1. ClusterIP: spread, masquerade for node traffic, none for pod traffic

fn dp_clusterip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    let cip = "198.19.255.10";
    sync(ctx, &lab, b, "web", &[svc("web", cip, vec![tcp("http", 80)], vec![ep4(1), ep4(2)])])?;

    let t = connect(ctx, &lab, Where::Node, cip, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "node -> ClusterIP")?;
    ensure!(
        t.saw("pod1", &masq4(&lab, "pod1")) && t.saw("pod2", &masq4(&lab, "pod2")),
        "node -> ClusterIP: masquerade not seen: {t}"
    );
    sources_are(&t, &[&masq4(&lab, "pod1"), &masq4(&lab, "pod2")], "node -> ClusterIP")?;

    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "pod -> ClusterIP")?;
    sources_are(&t, &[CLIENT_IP4], "pod -> ClusterIP (inside the cluster CIDR: no masquerade)")?;

    let nat = lab.iptables(b).save("nat")?;
    ensure!(
        nat.contains(&format!("--to-destination {}:{EP_PORT}", pod_ip4(1))),
        "nat table lacks the DNAT to pod1:\n{nat}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Session affinity (ClientIP)

fn dp_session_affinity(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2, 3], false)?;
    let cip = "198.19.255.20";
    let mut s = svc("sticky", cip, vec![tcp("http", 80)], vec![ep4(1), ep4(2), ep4(3)]);
    s.affinity = true;
    sync(ctx, &lab, b, "sticky (ClientIP)", &[s])?;
    for from in [Where::Node, Where::Pod(CLIENT)] {
        let t = connect(ctx, &lab, from, cip, 80, Proto::Tcp, N)?;
        ensure!(
            t.errors.is_empty() && t.refused == 0 && t.timed_out == 0 && t.eperm == 0,
            "{from:?}: failed connections: {t}"
        );
        ensure!(
            t.by_pod.len() == 1 && t.answered() == N,
            "{from:?}: ClientIP affinity did not pin all {N} connections to one pod: {t}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. NodePort from outside (externalTrafficPolicy: Cluster)

fn dp_nodeport(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    let mut s = svc("np", "198.19.255.30", vec![tcp("http", 80)], vec![ep4(1), ep4(2).on(OTHER_NODE)]);
    s.ty = "NodePort";
    s.ports[0].node_port = Some(30080);
    sync(ctx, &lab, b, "np (NodePort 30080)", &[s])?;
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30080, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "external -> NodePort")?;
    ensure!(
        t.saw("pod1", &masq4(&lab, "pod1")) && t.saw("pod2", &masq4(&lab, "pod2")),
        "external -> NodePort: not masqueraded: {t}"
    );
    ensure!(
        !t.sources_seen.contains_key(netns::EXT_IP4),
        "external -> NodePort: client IP reached a pod (ETP Cluster must masquerade): {t}"
    );
    // A node port nobody owns is answered by the node's own stack (refused).
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30081, Proto::Tcp, 2)?;
    ensure!(t.refused == 2, "unused node port should be refused by the node: {t}");
    Ok(())
}

/// NodePorts answer on 127.0.0.1 from the node (iptables.localhostNodePorts, on by
/// default) only with `route_localnet=1`, which kube-proxy sets and so must svcproxy: the
/// sync sets it in the node's namespace, and the connection reaches the pods.
fn dp_nodeport_localhost(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    let route_localnet = || lab.node().run(&["sysctl", "-n", "net.ipv4.conf.all.route_localnet"]).map(|s| s.trim().to_string());
    ensure!(route_localnet()? == "0", "a fresh namespace starts with route_localnet=0");
    let mut s = svc("np", "198.19.255.31", vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    s.ty = "NodePort";
    s.ports[0].node_port = Some(30090);
    sync(ctx, &lab, b, "np (NodePort 30090)", &[s])?;
    ensure!(route_localnet()? == "1", "sync set route_localnet for localhost NodePorts");
    let t = connect(ctx, &lab, Where::Node, "127.0.0.1", 30090, Proto::Tcp, 20)?;
    spread(&t, &["pod1", "pod2"], "node -> 127.0.0.1:NodePort")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 4. ExternalIP from outside

fn dp_external_ip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    let eip = "198.19.2.10";
    let mut s = svc("eip", "198.19.255.40", vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    s.external_ips = vec![eip.into()];
    sync(ctx, &lab, b, "eip (externalIPs)", &[s])?;
    let t = connect(ctx, &lab, Where::External, eip, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "external -> ExternalIP")?;
    sources_are(&t, &[&masq4(&lab, "pod1"), &masq4(&lab, "pod2")], "external -> ExternalIP (masqueraded)")?;
    // From a pod the external IP is served too, and masqueraded as well: with
    // externalTrafficPolicy Cluster the EXT chain marks every packet, pods included.
    let t = connect(ctx, &lab, Where::Pod(CLIENT), eip, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "pod -> ExternalIP")?;
    sources_are(&t, &[&masq4(&lab, "pod1"), &masq4(&lab, "pod2")], "pod -> ExternalIP (masqueraded)")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 5. LoadBalancer with loadBalancerSourceRanges

fn dp_lb_source_ranges(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2], false)?;
    let (lb_in, lb_out) = ("198.19.2.20", "198.19.2.21");
    let lb = |name: &'static str, cip: &str, ip: &str, np: u16, range: &str| {
        let mut s = svc(name, cip, vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
        s.ty = "LoadBalancer";
        s.ports[0].node_port = Some(np);
        s.lb_ips = vec![ip.into()];
        s.source_ranges = vec![range.into()];
        s
    };
    // The client 198.19.1.2 is inside 198.19.1.0/24 and outside 198.18.200.0/24.
    let allowed = lb("lb-in", "198.19.255.50", lb_in, 30050, "198.19.1.0/24");
    let denied = lb("lb-out", "198.19.255.51", lb_out, 30051, "198.18.200.0/24");
    sync(ctx, &lab, b, "lb-in, lb-out", &[allowed.clone(), denied.clone()])?;

    let t = connect(ctx, &lab, Where::External, lb_in, 80, Proto::Tcp, 20)?;
    spread(&t, &["pod1", "pod2"], "external (in range) -> LB IP")?;
    let t = connect_quiet(ctx, &mut lab, Where::External, lb_out, 80, Proto::Tcp, 2)?;
    dropped(&t, "external (not in range) -> LB IP")?;
    // The NodePort of a LoadBalancer is not subject to the source ranges.
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30051, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "external -> NodePort of the source-ranged LB")?;

    // Narrow the first one: the same client is now dropped there too.
    let mut narrowed = allowed;
    narrowed.source_ranges = vec!["198.18.201.0/24".into()];
    sync(ctx, &lab, b, "lb-in narrowed", &[narrowed, denied])?;
    let t = connect_quiet(ctx, &mut lab, Where::External, lb_in, 80, Proto::Tcp, 2)?;
    dropped(&t, "external -> LB IP after its range excluded the client")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 6. externalTrafficPolicy: Local

fn dp_etp_local(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2, 3], false)?;
    let (cip, eip, np) = ("198.19.255.60", "198.19.2.60", 30060);
    let mk = |eps: Vec<Ep>| {
        let mut s = svc("local", cip, vec![tcp("http", 80)], eps);
        s.ty = "NodePort";
        s.etp_local = true;
        s.ports[0].node_port = Some(np);
        s.external_ips = vec![eip.into()];
        s
    };
    // pod1 and pod3 on this node, pod2 on another node.
    sync(ctx, &lab, b, "local: pod1, pod3 local, pod2 remote", &[mk(vec![ep4(1), ep4(2).on(OTHER_NODE), ep4(3)])])?;
    for (dst, port, what) in [(netns::NODE_IP4, np, "NodePort"), (eip, 80, "ExternalIP")] {
        let t = connect(ctx, &lab, Where::External, dst, port, Proto::Tcp, N)?;
        spread(&t, &["pod1", "pod3"], &format!("external -> {what} (ETP Local)"))?;
        sources_are(&t, &[netns::EXT_IP4], &format!("external -> {what}: client source preserved"))?;
    }
    // Cluster traffic still uses every endpoint (internalTrafficPolicy: Cluster).
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2", "pod3"], "pod -> ClusterIP of an ETP Local service")?;

    // No local endpoint left: external traffic is dropped; the ClusterIP still works.
    sync(ctx, &lab, b, "local: only pod2 (remote)", &[mk(vec![ep4(2).on(OTHER_NODE)])])?;
    for (dst, port, what) in [(netns::NODE_IP4, np, "NodePort"), (eip, 80, "ExternalIP")] {
        let t = connect_quiet(ctx, &mut lab, Where::External, dst, port, Proto::Tcp, 2)?;
        dropped(&t, &format!("external -> {what} without local endpoints"))?;
    }
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, 80, Proto::Tcp, 10)?;
    spread(&t, &["pod2"], "pod -> ClusterIP, only a remote endpoint")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 7. No endpoints: REJECT, TCP and UDP

fn dp_no_endpoints_reject(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1], true)?;
    let cip = "198.19.255.70";
    let mut s = svc("empty", cip, vec![tcp("http", 80), udp("dns", 53)], vec![]);
    s.ty = "NodePort";
    s.ports[0].node_port = Some(30070);
    s.ports[1].node_port = Some(30070);
    sync(ctx, &lab, b, "empty (no endpoints)", &[s])?;
    for proto in [Proto::Tcp, Proto::Udp] {
        let port = if proto == Proto::Tcp { 80 } else { 53 };
        let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, port, proto, 5)?;
        refused(&t, &format!("pod -> ClusterIP {} without endpoints", proto.name()))?;
        let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30070, proto, 5)?;
        refused(&t, &format!("external -> NodePort {} without endpoints", proto.name()))?;
    }
    let t = connect(ctx, &lab, Where::Node, cip, 80, Proto::Tcp, 5)?;
    refused(&t, "node -> ClusterIP tcp without endpoints")?;
    // UDP rejected in the node's own OUTPUT fails send() with EPERM (README pitfall 2).
    let t = connect(ctx, &lab, Where::Node, cip, 53, Proto::Udp, 5)?;
    ensure!(t.eperm == 5, "node -> ClusterIP udp without endpoints: expected EPERM: {t}");
    Ok(())
}

// ---------------------------------------------------------------------------
// 8. Terminating endpoints

fn dp_terminating(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2, 3, 4], false)?;
    let cip = "198.19.255.80";
    let mk = |eps: Vec<Ep>| svc("rollout", cip, vec![tcp("http", 80)], eps);
    // pod3 starts terminating (still serving) while pod1, pod2 are ready; pod4 has
    // stopped serving already.
    sync(ctx, &lab, b, "rollout: pod3 terminating", &[mk(vec![ep4(1), ep4(2), ep4(3).terminating(), ep4(4).not_serving()])])?;
    for from in [Where::Node, Where::Pod(CLIENT)] {
        let t = connect(ctx, &lab, from, cip, 80, Proto::Tcp, N)?;
        spread(&t, &["pod1", "pod2"], "with ready endpoints, a terminating one gets no new connections")?;
    }
    // Only terminating endpoints left: the serving one takes the traffic (fallback).
    sync(ctx, &lab, b, "rollout: only pod3 serving+terminating", &[mk(vec![ep4(3).terminating(), ep4(4).not_serving()])])?;
    for from in [Where::Node, Where::Pod(CLIENT)] {
        let t = connect(ctx, &lab, from, cip, 80, Proto::Tcp, 20)?;
        spread(&t, &["pod3"], "only serving+terminating endpoints: fallback to them")?;
    }
    // Gone: no endpoints, refused.
    sync(ctx, &lab, b, "rollout: no endpoints", &[mk(vec![])])?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, 80, Proto::Tcp, 5)?;
    refused(&t, "all endpoints gone")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// 9. Partial syncs on the live kernel

fn state_a() -> Vec<Svc> {
    vec![
        svc("alpha", "198.19.255.91", vec![tcp("http", 80)], vec![ep4(1)]),
        svc("beta", "198.19.255.92", vec![tcp("http", 80)], vec![ep4(1), ep4(2)]),
    ]
}
fn state_b() -> Vec<Svc> {
    let mut gamma = svc("gamma", "198.19.255.93", vec![tcp("http", 80)], vec![ep4(2)]);
    gamma.ty = "NodePort";
    gamma.ports[0].node_port = Some(30093);
    vec![
        // one endpoint added
        svc("alpha", "198.19.255.91", vec![tcp("http", 80)], vec![ep4(1), ep4(2)]),
        // beta removed, gamma added
        gamma,
    ]
}

/// Our rules (`svcproxy::owned_rules`) in both families.
fn our_rules(lab: &Lab, b: Backend) -> Result<String, String> {
    let mut out = String::new();
    for v6 in [false, true] {
        let _ = writeln!(out, "# {}", if v6 { "ip6tables" } else { "iptables" });
        out += &svcproxy::owned_rules(lab.node(), b, v6)?;
        out.push('\n');
    }
    Ok(out)
}

/// The same lines in sorted order (to tell an ordering difference from a content one).
fn sorted_lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort_unstable();
    v
}

fn first_difference(a: &str, b: &str) -> String {
    let (al, bl): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    for i in 0..al.len().max(bl.len()) {
        let (x, y) = (al.get(i).copied().unwrap_or("<end>"), bl.get(i).copied().unwrap_or("<end>"));
        if x != y {
            return format!("line {}:\n  after the sequence: {x}\n  fresh sync:         {y}", i + 1);
        }
    }
    "identical".into()
}

fn dp_partial_sync(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2], false)?;
    sync(ctx, &lab, b, "A", &state_a())?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.91", 80, Proto::Tcp, 10)?;
    spread(&t, &["pod1"], "A: alpha")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.92", 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "A: beta")?;
    let t = connect_quiet(ctx, &mut lab, Where::Pod(CLIENT), "198.19.255.93", 80, Proto::Tcp, 1);
    ensure!(t.as_ref().map(|t| t.answered() == 0).unwrap_or(true), "A: gamma answered before it exists");

    sync(ctx, &lab, b, "B (alpha +pod2, -beta, +gamma)", &state_b())?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.91", 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "B: alpha with its new endpoint")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), "198.19.255.93", 80, Proto::Tcp, 10)?;
    spread(&t, &["pod2"], "B: gamma ClusterIP")?;
    let t = connect(ctx, &lab, Where::External, netns::NODE_IP4, 30093, Proto::Tcp, 10)?;
    spread(&t, &["pod2"], "B: gamma NodePort")?;
    let t = connect_quiet(ctx, &mut lab, Where::Pod(CLIENT), "198.19.255.92", 80, Proto::Tcp, 1)?;
    ensure!(t.answered() == 0, "B: removed service beta still answers: {t}");

    // Back to A and forward to B again: the end state must not depend on the path.
    sync(ctx, &lab, b, "A again", &state_a())?;
    sync(ctx, &lab, b, "B again", &state_b())?;
    let after_sequence = our_rules(&lab, b)?;

    let fresh = Lab::new(&format!("{}fresh", b.name()))?;
    ctx.log(format!("fresh lab {}", fresh.prefix));
    sync(ctx, &fresh, b, "B directly (fresh lab)", &state_b())?;
    let direct = our_rules(&fresh, b)?;
    ensure!(
        after_sequence == direct,
        "rules after A -> B -> A -> B differ from a fresh sync to B ({}): {}\n--- after the sequence:\n{after_sequence}\n--- fresh:\n{direct}",
        if sorted_lines(&after_sequence) == sorted_lines(&direct) { "only in order" } else { "in content" },
        first_difference(&after_sequence, &direct)
    );
    ensure!(
        after_sequence.contains("KUBE-SVC-") && !after_sequence.contains("dp/beta"),
        "unexpected rules after the sequence:\n{after_sequence}"
    );
    ctx.log(format!("rules identical ({} lines)", after_sequence.lines().count()));
    Ok(())
}

// ---------------------------------------------------------------------------
// 10. IPv6 ClusterIP (dual-stack service)

fn dp_ipv6_clusterip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], false)?;
    let (cip4, cip6) = ("198.19.255.100", "fd00:19:ff::100");
    let mut s = svc("dual", cip4, vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    s.cluster_ips = vec![cip4.into(), cip6.into()];
    s.eps6 = vec![ep6(1), ep6(2)];
    // An IPv6-primary single-stack service too.
    let mut only6 = svc("only6", "fd00:19:ff::101", vec![tcp("http", 80)], vec![]);
    only6.eps6 = vec![ep6(2)];
    sync(ctx, &lab, b, "dual, only6", &[s, only6])?;

    let t = connect(ctx, &lab, Where::Node, cip6, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "v6 node -> ClusterIP")?;
    sources_are(&t, &[&masq6(&lab, "pod1"), &masq6(&lab, "pod2")], "v6 node -> ClusterIP (masqueraded)")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip6, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "v6 pod -> ClusterIP")?;
    sources_are(&t, &[CLIENT_IP6], "v6 pod -> ClusterIP (not masqueraded)")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), "fd00:19:ff::101", 80, Proto::Tcp, 10)?;
    spread(&t, &["pod2"], "v6-only service")?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip4, 80, Proto::Tcp, N)?;
    spread(&t, &["pod1", "pod2"], "v4 side of the dual-stack service")?;
    let nat6 = lab.ip6tables(b).save("nat")?;
    ensure!(
        nat6.contains(&format!("--to-destination [{}]:{EP_PORT}", pod_ip6(1))),
        "ip6tables nat lacks the DNAT to pod1:\n{nat6}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 11. UDP ClusterIP and stale conntrack entries

/// Hidden argv[1] for a UDP client that sends from fixed source ports (the lab's client
/// takes a new port per attempt). `main` builds the case list right after
/// `netns::helper_main_if_requested`, so [`cases`] serves it.
const UDP_FIXED_FLAG: &str = "__svk_dp_udp_fixed";

/// Args: `dst port timeout_ms srcport...`; one line per source port:
/// `udpfixed SRCPORT ok <reply>` | `udpfixed SRCPORT fail <what>`.
fn udp_fixed_client_main(args: &[String]) -> ! {
    use std::io::Write as _;
    use std::net::{IpAddr, SocketAddr, UdpSocket};
    let parse = || -> Option<(SocketAddr, Duration, Vec<u16>)> {
        let ip: IpAddr = args.get(2)?.parse().ok()?;
        let port: u16 = args.get(3)?.parse().ok()?;
        let ms: u64 = args.get(4)?.parse().ok()?;
        let srcs: Option<Vec<u16>> = args[5..].iter().map(|s| s.parse().ok()).collect();
        Some((SocketAddr::new(ip, port), Duration::from_millis(ms.clamp(10, 10_000)), srcs?))
    };
    let Some((dst, timeout, srcs)) = parse() else {
        eprintln!("usage: {UDP_FIXED_FLAG} IP PORT TIMEOUT_MS SRCPORT...");
        std::process::exit(2);
    };
    let mut out = std::io::stdout().lock();
    for sp in srcs.into_iter().take(64) {
        let r = (|| -> std::io::Result<String> {
            let bind: SocketAddr = if dst.is_ipv4() { ([0, 0, 0, 0], sp).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, sp).into() };
            let s = UdpSocket::bind(bind)?;
            s.connect(dst)?;
            s.set_read_timeout(Some(timeout))?;
            s.send(b"ping\n")?;
            let mut buf = [0u8; 512];
            let n = s.recv(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
        })();
        let line = match r {
            Ok(reply) => format!("udpfixed {sp} ok {reply}"),
            Err(e) => format!("udpfixed {sp} fail {:?}: {e}", e.kind()),
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    std::process::exit(0)
}

/// Source port -> the pod that answered (or `!<error>`), from fixed source ports in `from`.
pub(crate) fn udp_fixed(lab: &Lab, from: &str, dst: &str, port: u16, srcs: &[u16]) -> Result<BTreeMap<u16, String>, String> {
    let ns = &lab.pod(from).ok_or_else(|| format!("no pod {from}"))?.ns;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let exe = exe.to_string_lossy().into_owned();
    let mut argv: Vec<String> = vec![exe, UDP_FIXED_FLAG.into(), dst.into(), port.to_string(), "700".into()];
    argv.extend(srcs.iter().map(u16::to_string));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let limit = Duration::from_millis(700 * srcs.len() as u64) + Duration::from_secs(5);
    let out = ns.exec_limit(&argv, None, limit)?;
    if !out.status.success() {
        return Err(format!("fixed-port UDP client failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.splitn(4, ' ');
        if w.next() != Some("udpfixed") {
            continue;
        }
        let sp: u16 = w.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let res = match (w.next(), w.next()) {
            (Some("ok"), Some(reply)) => reply.split_whitespace().next().unwrap_or("?").to_string(),
            (_, rest) => format!("!{}", rest.unwrap_or("")),
        };
        m.insert(sp, res);
    }
    if m.len() != srcs.len() {
        return Err(format!("fixed-port UDP client reported {} of {} ports: {}", m.len(), srcs.len(), String::from_utf8_lossy(&out.stdout)));
    }
    Ok(m)
}

/// Conntrack entries (node netns) for UDP to `dst`, and those whose reply comes from `ep`.
pub(crate) fn udp_conntrack(lab: &Lab, dst: &str, ep: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let out = lab.node().exec(&["conntrack", "-L", "-p", "udp", "--orig-dst", dst])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(String::from).collect();
    let src = format!("src={ep}");
    let to_ep = all.iter().filter(|l| l.split_whitespace().any(|w| w == src)).cloned().collect();
    Ok((all, to_ep))
}

fn dp_udp_conntrack(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let lab = lab(ctx, b, &[1, 2], true)?;
    let cip = "198.19.255.110";
    let mk = |eps: Vec<Ep>| svc("dns", cip, vec![udp("dns", 53)], eps);
    sync(ctx, &lab, b, "dns: pod1, pod2", &[mk(vec![ep4(1), ep4(2)])])?;
    let t = connect(ctx, &lab, Where::Pod(CLIENT), cip, 53, Proto::Udp, N)?;
    spread(&t, &["pod1", "pod2"], "udp pod -> ClusterIP")?;
    let t = connect(ctx, &lab, Where::Node, cip, 53, Proto::Udp, 10)?;
    ensure!(t.answered() == 10, "udp node -> ClusterIP: {t}");

    let ports: Vec<u16> = (41001..41017).collect();
    let before = udp_fixed(&lab, CLIENT, cip, 53, &ports)?;
    ctx.log(format!("fixed source ports before: {before:?}"));
    ensure!(
        before.values().all(|p| p == "pod1" || p == "pod2"),
        "fixed-port UDP client not answered by the endpoints: {before:?}"
    );
    // Remove the endpoint the first port's flow is pinned to (conntrack), keep the other.
    let victim = before[&ports[0]].clone();
    let (victim_k, keep_k) = if victim == "pod1" { (1, 2) } else { (2, 1) };
    let (victim_ip, keep) = (pod_ip4(victim_k), pod_name(keep_k));
    let pinned: Vec<u16> = before.iter().filter(|(_, p)| **p == victim).map(|(s, _)| *s).collect();
    let (all, stale) = udp_conntrack(&lab, cip, &victim_ip)?;
    ctx.log(format!("conntrack before: {} entries, {} to {victim} ({victim_ip})", all.len(), stale.len()));
    ensure!(!stale.is_empty(), "no conntrack entry to {victim_ip} before the change:\n{}", all.join("\n"));

    sync(ctx, &lab, b, &format!("dns: only {keep}"), &[mk(vec![ep4(keep_k)])])?;
    let (all, stale) = udp_conntrack(&lab, cip, &victim_ip)?;
    ctx.log(format!("conntrack after: {} entries, {} to {victim_ip}", all.len(), stale.len()));
    ensure!(
        stale.is_empty(),
        "conntrack entries DNATed to the removed endpoint {victim_ip} survived the sync:\n{}",
        stale.join("\n")
    );
    // The victim still serves: a stale entry would still send these ports to it.
    let after = udp_fixed(&lab, CLIENT, cip, 53, &ports)?;
    ctx.log(format!("fixed source ports after: {after:?} (pinned to {victim} before: {pinned:?})"));
    ensure!(
        after.values().all(|p| *p == keep),
        "after removing {victim}, the same source ports must reach {keep}: {after:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 12. cleanup

/// Lines of `<fam>-save` (all tables) mentioning a KUBE- chain other than KUBE-FIREWALL.
fn kube_lines(lab: &Lab, b: Backend, v6: bool) -> Result<Vec<String>, String> {
    let text = lab.node().run(&[&b.bin(v6, "save")])?;
    Ok(text
        .lines()
        .filter(|l| {
            l.split(|c: char| c.is_whitespace() || c == ':')
                .any(|w| w.starts_with("KUBE-") && w != "KUBE-FIREWALL")
        })
        .map(String::from)
        .collect())
}

fn dp_cleanup(ctx: &mut Ctx, b: Backend) -> CaseResult {
    let mut lab = lab(ctx, b, &[1, 2], false)?;
    let (cip4, cip6) = ("198.19.255.120", "fd00:19:ff::120");
    let mut web = svc("web", cip4, vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    web.ty = "LoadBalancer";
    web.ports[0].node_port = Some(30120);
    web.lb_ips = vec!["198.19.2.120".into()];
    web.source_ranges = vec!["198.19.1.0/24".into()];
    web.cluster_ips = vec![cip4.into(), cip6.into()];
    web.eps6 = vec![ep6(1), ep6(2)];
    let mut dns = svc("dns", "198.19.255.121", vec![udp("dns", 53)], vec![ep4(1)]);
    dns.affinity = true;
    let empty = svc("empty", "198.19.255.122", vec![tcp("http", 80)], vec![]);
    sync(ctx, &lab, b, "web (dual-stack LB), dns, empty", &[web, dns, empty])?;
    for (dst, what) in [(cip4, "v4"), (cip6, "v6")] {
        let t = connect(ctx, &lab, Where::Pod(CLIENT), dst, 80, Proto::Tcp, N)?;
        spread(&t, &["pod1", "pod2"], &format!("{what} ClusterIP before cleanup"))?;
    }
    for v6 in [false, true] {
        ensure!(!kube_lines(&lab, b, v6)?.is_empty(), "no KUBE- rules after the sync (v6={v6})");
    }

    let out = svcproxy::run_expect(lab.node(), b, &["cleanup"], 0)?;
    ctx.log(format!("cleanup: {} line(s) of output", out.lines().count()));
    for v6 in [false, true] {
        let left = kube_lines(&lab, b, v6)?;
        ensure!(
            left.is_empty(),
            "{} still holds KUBE- rules/chains after cleanup:\n{}",
            b.bin(v6, "save"),
            left.join("\n")
        );
    }
    let kept = lab.iptables(b).save("filter")?;
    ctx.log(format!(
        "left in filter (kubelet's, kept like kube-proxy does): {} line(s) naming KUBE-FIREWALL",
        kept.lines().filter(|l| l.contains("KUBE-FIREWALL")).count()
    ));
    svcproxy::run_expect(lab.node(), b, &["cleanup", "--dry-run"], 0)
        .map_err(|e| format!("cleanup --dry-run after cleanup should find nothing: {e}"))?;

    for (dst, what) in [(cip4, "v4"), (cip6, "v6")] {
        let t = connect_quiet(ctx, &mut lab, Where::Pod(CLIENT), dst, 80, Proto::Tcp, 1)?;
        ensure!(t.answered() == 0, "{what} ClusterIP still answers after cleanup: {t}");
    }
    let t = connect_quiet(ctx, &mut lab, Where::External, netns::NODE_IP4, 30120, Proto::Tcp, 1)?;
    ensure!(t.answered() == 0, "NodePort still answers after cleanup: {t}");
    Ok(())
}

// ---------------------------------------------------------------------------

/// The dataplane cases, each for both backends (`nft_dp_*`, `legacy_dp_*`).
pub fn cases() -> Vec<Case> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(UDP_FIXED_FLAG) {
        udp_fixed_client_main(&args);
    }
    let mut cases = vec![];
    per_backend!(
        cases,
        dp_clusterip,
        dp_session_affinity,
        dp_nodeport,
        dp_nodeport_localhost,
        dp_external_ip,
        dp_lb_source_ranges,
        dp_etp_local,
        dp_no_endpoints_reject,
        dp_terminating,
        dp_partial_sync,
        dp_ipv6_clusterip,
        dp_udp_conntrack,
        dp_cleanup,
    );
    cases
}

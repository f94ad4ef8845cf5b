//! `svcproxy trace` against real packets: for each question, the tracer's answer (from the
//! rendered rules, no kernel) must match what real connections through the synced kernel
//! do — which endpoints answer, whether the source is masqueraded, DROP (timeout) or
//! REJECT (refused). In nftables mode the rendered `kube-proxy` table is loaded with
//! `nft -f` and `trace --mode nftables` is asked the same questions, from the rendered
//! table and, with `--live`, from the table the kernel lists: both answer alike; once for
//! kube-proxy v1.34's table and once for v1.37's (`--kube-proxy-version`). And v1.37's
//! table of every fixture with flows (`golden/NAME.flows`), loaded into the kernel: each
//! flow traced with `--live` answers as from the rendered table.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab, Ns, Proto, Where};
use crate::netns::BackendTools as _;
use crate::svcproxy::{bin, path_str, repo, run_expect, temp_yaml};

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    per_backend!(v, trace_matches_real_packets);
    v.push(Case::new("nftables_trace_matches_real_packets", |ctx| nftables_trace_matches_real_packets(ctx, "1.34")));
    v.push(Case::new("nftables_v137_trace_matches_real_packets", |ctx| nftables_trace_matches_real_packets(ctx, "1.37")));
    v.push(Case::new("nftables_v137_live_traces_every_flow_as_rendered", v137_live_traces_every_flow_as_rendered).with_timeout(Duration::from_secs(600)));
    v
}

const CLUSTER: &str = r#"apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec: {type: ClusterIP, clusterIP: 198.19.255.10, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: app, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- {addresses: [198.18.1.2], nodeName: node-1}
- {addresses: [198.18.2.2], nodeName: node-2}
ports: [{name: http, port: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: shop, namespace: app}
spec:
  type: LoadBalancer
  clusterIP: 198.19.255.20
  loadBalancerSourceRanges: [198.19.9.0/24]
  ports: [{name: https, port: 443, protocol: TCP, nodePort: 30443}]
status: {loadBalancer: {ingress: [{ip: 198.19.3.10}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shop-1, namespace: app, labels: {kubernetes.io/service-name: shop}}
addressType: IPv4
endpoints:
- {addresses: [198.18.1.2], nodeName: node-1}
ports: [{name: https, port: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: app}
spec: {type: ClusterIP, clusterIP: 198.19.255.30, ports: [{name: http, port: 80, protocol: TCP}]}
"#;

const FLAGS: [&str; 10] = ["--hostname-override", "node-1", "--node-ip", "198.19.1.1", "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4", "--nfacct", "false"];

/// The tracer's answer: verdicts (DNAT targets or DROP/REJECT) and whether any branch
/// is masqueraded.
fn trace(file: &str, entry: &str, src: &str, dst: &str) -> Result<(BTreeSet<String>, bool), String> {
    let branches = trace_branches(&["--mode", "iptables"], file, entry, src, dst)?;
    Ok((branches.iter().map(|(v, _)| v.clone()).collect(), branches.iter().any(|(_, m)| *m)))
}

/// Each branch of the tracer's answer (`mode`: `--mode …` and any more flags): its verdict
/// and whether it is masqueraded.
fn trace_branches(mode: &[&str], file: &str, entry: &str, src: &str, dst: &str) -> Result<Vec<(String, bool)>, String> {
    let mut args = vec!["trace", "--from", file, "--entry", entry, "--src", src, "--dst", dst, "--output", "json"];
    args.extend_from_slice(mode);
    args.extend_from_slice(&FLAGS);
    let out = std::process::Command::new(bin()).args(&args).output().map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("trace output: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    let outcomes = v["outcomes"].as_array().cloned().unwrap_or_default();
    Ok(outcomes.iter().filter_map(|o| Some((o["verdict"].as_str()?.to_owned(), o["masquerade"] == Value::Bool(true)))).collect())
}

/// Each branch of an nftables trace, from the rendered table or (`live`, run in `ns`)
/// from the kernel's: verdict, share, masquerade, why, and how many rules and elements
/// its path went through (the kernel words a few statements its own way).
fn nft_outcomes(ns: &Ns, live: bool, version: &str, file: &str, entry: &str, src: &str, dst: &str) -> Result<Vec<String>, String> {
    let mut args = vec!["--kube-proxy-version", version, "--from", file, "--entry", entry, "--src", src, "--dst", dst];
    args.extend_from_slice(&FLAGS);
    nft_branches(ns, live, &args)
}

/// [`nft_outcomes`] of `trace --mode nftables ARGS`.
fn nft_branches(ns: &Ns, live: bool, trace_args: &[&str]) -> Result<Vec<String>, String> {
    let mut args = vec![bin(), "trace", "--mode", "nftables", "--output", "json"];
    args.extend_from_slice(trace_args);
    if live {
        args.push("--live");
    }
    let out = ns.exec(&args)?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("trace output: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    let outcomes = v["outcomes"].as_array().ok_or_else(|| format!("no outcomes: {v}"))?;
    Ok(outcomes
        .iter()
        .map(|o| format!("{} {} {} {} {}", o["verdict"], o["probability"], o["masquerade"], o["reason"], o["path"].as_array().map_or(0, Vec::len)))
        .collect())
}

fn trace_matches_real_packets(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore")])?;
    let mut lab = Lab::new(b.name())?;
    for (i, name) in ["pod1", "pod2"].iter().enumerate() {
        lab.add_pod(name, &format!("198.18.{}.2", i + 1), None)?.serve_tcp(8080)?;
    }
    lab.route_service_cidr("198.19.255.0/24")?;
    lab.route_service_cidr("198.19.3.0/24")?;
    let file = temp_yaml(CLUSTER)?;
    let f = path_str(&file);
    let mut sync = vec!["sync", "--from", f];
    sync.extend_from_slice(&FLAGS);
    run_expect(lab.node(), b, &sync, 0)?;

    // 1. From the node to the ClusterIP: both pods, masqueraded.
    let (verdicts, masq) = trace(f, "node", "198.19.1.1", "198.19.255.10:80")?;
    let want: BTreeSet<String> = ["198.18.1.2:8080", "198.18.2.2:8080"].iter().map(|s| s.to_string()).collect();
    ensure!(verdicts == want && masq, "trace said {verdicts:?} masq={masq}");
    let t = lab.connect(Where::Node, "198.19.255.10", 80, Proto::Tcp, 20)?;
    ensure!(t.count("pod1") > 0 && t.count("pod2") > 0, "real packets: {t:?}");
    ensure!(!t.sources_seen.contains_key("198.19.1.1"), "trace says masqueraded; the pods saw the node IP: {t:?}");

    // 2. From outside the source ranges to the LoadBalancer IP: dropped.
    let (verdicts, _) = trace(f, "outside", "198.19.1.2", "198.19.3.10:443")?;
    ensure!(verdicts == BTreeSet::from(["DROP".to_string()]), "trace said {verdicts:?}");
    let t = lab.connect(Where::External, "198.19.3.10", 443, Proto::Tcp, 3)?;
    ensure!(t.timed_out == 3 && t.answered() == 0, "DROP means timeouts: {t:?}");

    // 3. The same client to the NodePort (not subject to source ranges): answered.
    let (verdicts, masq) = trace(f, "outside", "198.19.1.2", "198.19.1.1:30443")?;
    ensure!(verdicts == BTreeSet::from(["198.18.1.2:8080".to_string()]) && masq, "trace said {verdicts:?} masq={masq}");
    let t = lab.connect(Where::External, "198.19.1.1", 30443, Proto::Tcp, 5)?;
    ensure!(t.count("pod1") == 5, "real packets: {t:?}");

    // 4. A service without endpoints: rejected at once.
    let (verdicts, _) = trace(f, "node", "198.19.1.1", "198.19.255.30:80")?;
    ensure!(verdicts == BTreeSet::from(["REJECT".to_string()]), "trace said {verdicts:?}");
    let t = lab.connect(Where::Node, "198.19.255.30", 80, Proto::Tcp, 3)?;
    ensure!(t.refused == 3, "REJECT means refused: {t:?}");
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// The same questions in nftables mode, on kube-proxy `version`'s table rendered and
/// loaded with `nft -f`; one nftables mode answers otherwise: a ClusterIP's port that is
/// no service port is rejected (cluster-ips-check); and a pod reaching itself through its
/// service (hairpin: an endpoint chain's rule in v1.34, `hairpin-connections` in v1.37).
fn nftables_trace_matches_real_packets(ctx: &mut Ctx, version: &str) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let mut lab = Lab::new("nfttrace")?;
    for (i, name) in ["pod1", "pod2"].iter().enumerate() {
        lab.add_pod(name, &format!("198.18.{}.2", i + 1), None)?.serve_tcp(8080)?;
    }
    lab.route_service_cidr("198.19.255.0/24")?;
    lab.route_service_cidr("198.19.3.0/24")?;
    let file = temp_yaml(CLUSTER)?;
    let f = path_str(&file);
    let mut render = vec!["render", "--mode", "nftables", "--kube-proxy-version", version, "--from", f];
    render.extend_from_slice(&FLAGS);
    let out = std::process::Command::new(bin()).args(&render).output().map_err(|e| e.to_string())?;
    ensure!(out.status.success(), "render: {}", String::from_utf8_lossy(&out.stderr));
    lab.node().run_stdin(&["nft", "-f", "-"], Some(&String::from_utf8_lossy(&out.stdout)))?;
    let mode = ["--mode", "nftables", "--kube-proxy-version", version];
    let branches = |entry, src, dst| trace_branches(&mode, f, entry, src, dst);
    let trace = |entry, src, dst| -> Result<(BTreeSet<String>, bool), String> {
        let b = branches(entry, src, dst)?;
        Ok((b.iter().map(|(v, _)| v.clone()).collect(), b.iter().any(|(_, m)| *m)))
    };
    // --live reads the table the kernel lists and answers as the rendered table does.
    let questions = [
        ("node", "198.19.1.1", "198.19.255.10:80"),
        ("outside", "198.19.1.2", "198.19.3.10:443"),
        ("outside", "198.19.9.7", "198.19.3.10:443"),
        ("outside", "198.19.1.2", "198.19.1.1:30443"),
        ("node", "198.19.1.1", "198.19.255.30:80"),
        ("node", "198.19.1.1", "198.19.255.10:81"),
        ("pod", "198.18.1.2", "198.19.255.10:80"),
    ];
    for (entry, src, dst) in questions {
        let rendered = nft_outcomes(lab.node(), false, version, f, entry, src, dst)?;
        let live = nft_outcomes(lab.node(), true, version, f, entry, src, dst)?;
        ensure!(!rendered.is_empty() && live == rendered, "{entry} {src} -> {dst}: --live said {live:?}, the rendered table {rendered:?}");
    }
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<String>>();

    // 1. From the node to the ClusterIP: both pods, masqueraded.
    let (verdicts, masq) = trace("node", "198.19.1.1", "198.19.255.10:80")?;
    ensure!(verdicts == set(&["198.18.1.2:8080", "198.18.2.2:8080"]) && masq, "trace said {verdicts:?} masq={masq}");
    let t = lab.connect(Where::Node, "198.19.255.10", 80, Proto::Tcp, 20)?;
    ensure!(t.count("pod1") > 0 && t.count("pod2") > 0, "real packets: {t:?}");
    ensure!(!t.sources_seen.contains_key("198.19.1.1"), "trace says masqueraded; the pods saw the node IP: {t:?}");

    // 2. From outside the source ranges to the LoadBalancer IP: dropped.
    let (verdicts, _) = trace("outside", "198.19.1.2", "198.19.3.10:443")?;
    ensure!(verdicts == set(&["DROP"]), "trace said {verdicts:?}");
    let t = lab.connect(Where::External, "198.19.3.10", 443, Proto::Tcp, 3)?;
    ensure!(t.timed_out == 3 && t.answered() == 0, "DROP means timeouts: {t:?}");

    // 3. The same client to the NodePort (not subject to source ranges): answered.
    let (verdicts, masq) = trace("outside", "198.19.1.2", "198.19.1.1:30443")?;
    ensure!(verdicts == set(&["198.18.1.2:8080"]) && masq, "trace said {verdicts:?} masq={masq}");
    let t = lab.connect(Where::External, "198.19.1.1", 30443, Proto::Tcp, 5)?;
    ensure!(t.count("pod1") == 5, "real packets: {t:?}");

    // 4. A service without endpoints, and 5. a port of a ClusterIP that is no service
    // port: rejected at once.
    for dst in ["198.19.255.30:80", "198.19.255.10:81"] {
        let (verdicts, _) = trace("node", "198.19.1.1", dst)?;
        ensure!(verdicts == set(&["REJECT"]), "{dst}: trace said {verdicts:?}");
        let (ip, port) = dst.split_once(':').unwrap_or_default();
        let t = lab.connect(Where::Node, ip, port.parse().unwrap_or_default(), Proto::Tcp, 3)?;
        ensure!(t.refused == 3, "{dst}: REJECT means refused: {t:?}");
    }

    // 6. pod1 to its own service: when it reaches itself, masqueraded (else the answer,
    // from its own address, is a martian on its link); when it reaches pod2, not.
    let got = branches("pod", "198.18.1.2", "198.19.255.10:80")?;
    let want = vec![("198.18.1.2:8080".to_string(), true), ("198.18.2.2:8080".to_string(), false)];
    ensure!(got == want, "trace said {got:?}");
    let t = lab.connect(Where::Pod("pod1"), "198.19.255.10", 80, Proto::Tcp, 20)?;
    ensure!(t.count("pod1") > 0 && t.count("pod2") > 0, "real packets: {t:?}");
    ensure!(!t.saw("pod1", "198.18.1.2") && t.saw("pod2", "198.18.1.2"), "pod1 must see a masqueraded source, pod2 pod1's own: {t:?}");
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// A flow's source, protocol and destination (`ip:port` or `[ip]:port`).
type Flow = [String; 3];

/// Each fixture with flows: the fixture, and its flows from `golden/NAME.flows`.
fn fixtures_with_flows() -> Result<Vec<(std::path::PathBuf, Vec<Flow>)>, String> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(repo().join("golden")).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "flows"));
    files.sort();
    for flows in files {
        let stem = flows.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let fixture = repo().join("fixtures").join(format!("{stem}.yaml"));
        if !fixture.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&flows).map_err(|e| format!("{}: {e}", flows.display()))?;
        let mut list = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let c: Vec<&str> = line.split('|').map(str::trim).collect();
            if c.len() != 7 {
                return Err(format!("{}: bad flow line {line}", flows.display()));
            }
            let dst = if c[3].contains(':') { format!("[{}]:{}", c[3], c[4]) } else { format!("{}:{}", c[3], c[4]) };
            list.push([c[1].to_owned(), c[2].to_lowercase(), dst]);
        }
        out.push((fixture, list));
    }
    Ok(out)
}

/// kube-proxy v1.37's table of every fixture with flows, loaded with `nft -f` (over the
/// previous one): every flow traced from the kernel's listing (`--live`: `meta mark`
/// arithmetic, `dnat ip to numgen … map`, wrapped element lists) answers as from the
/// rendered table: the same branches, shares, masquerade, reasons and path lengths.
fn v137_live_traces_every_flow_as_rendered(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftlive")?;
    let (mut fixtures, mut flows) = (0, 0);
    for (fixture, list) in fixtures_with_flows()? {
        let f = path_str(&fixture);
        let out = std::process::Command::new(bin()).args(["render", "--mode", "nftables", "--kube-proxy-version", "1.37", "--from", f]).output().map_err(|e| e.to_string())?;
        ensure!(out.status.success(), "render {f}: {}", String::from_utf8_lossy(&out.stderr));
        let reset = "add table ip kube-proxy\ndelete table ip kube-proxy\nadd table ip6 kube-proxy\ndelete table ip6 kube-proxy\n";
        lab.node().run_stdin(&["nft", "-f", "-"], Some(&format!("{reset}{}", String::from_utf8_lossy(&out.stdout))))?;
        fixtures += 1;
        for [src, proto, dst] in &list {
            let args = ["--kube-proxy-version", "1.37", "--from", f, "--src", src, "--proto", proto, "--dst", dst];
            let rendered = nft_branches(lab.node(), false, &args)?;
            let live = nft_branches(lab.node(), true, &args)?;
            ensure!(!rendered.is_empty() && live == rendered, "{f}: {src} -> {dst} {proto}: --live said {live:?}, the rendered table {rendered:?}");
            flows += 1;
        }
    }
    ensure!(fixtures >= 30 && flows >= 200, "only {flows} flows of {fixtures} fixtures");
    ctx.log(format!("{flows} flows of {fixtures} fixtures traced alike from the rendered and the listed v1.37 tables"));
    Ok(())
}

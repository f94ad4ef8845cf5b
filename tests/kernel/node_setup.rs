//! kube-proxy's node set-up on the real kernel, in a namespace the test made:
//! `kube-proxy --init-only` (svcproxy under that name) tunes the per-namespace conntrack
//! timeouts and sets `route_localnet`, leaves `nf_conntrack_max` alone with
//! `--conntrack-max-per-core=0`, and, like kube-proxy, stops with an error naming the
//! sysctl when it must raise `nf_conntrack_max` where it cannot (a non-initial namespace
//! makes it read-only) — before anything global (the module's hashsize) is touched.

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab};
use crate::netns::BackendTools as _;
use crate::svcproxy::bin;

pub fn cases() -> Vec<Case> {
    let mut cases = vec![Case::new("init_only_tunes_conntrack_and_sets_sysctls_in_the_namespace", init_only)];
    per_backend!(cases, hc_node_port_on_the_node_ip);
    cases
}

fn init_only(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "sysctl"])?;
    let lab = Lab::new("init")?;
    let dir = std::env::temp_dir().join(format!("svk-kube-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let kube_proxy = dir.join("kube-proxy");
    let _ = std::fs::remove_file(&kube_proxy);
    std::os::unix::fs::symlink(bin(), &kube_proxy).map_err(|e| e.to_string())?;
    let kp = kube_proxy.to_str().unwrap_or_default();
    let node = lab.node();
    let get = |name: &str| node.run(&["sysctl", "-n", name]).map(|s| s.trim().to_string());
    let max_before = get("net.netfilter.nf_conntrack_max")?;
    let hash_before = std::fs::read_to_string("/sys/module/nf_conntrack/parameters/hashsize").unwrap_or_default();

    node.run(&[
        kp,
        "--init-only",
        "--hostname-override=node-1",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=2h",
        "--conntrack-tcp-timeout-close-wait=30m",
        "--conntrack-udp-timeout=40s",
        "--conntrack-tcp-be-liberal",
    ])?;
    ensure!(get("net.netfilter.nf_conntrack_tcp_timeout_established")? == "7200", "tcp established timeout set");
    ensure!(get("net.netfilter.nf_conntrack_tcp_timeout_close_wait")? == "1800", "close-wait timeout set");
    ensure!(get("net.netfilter.nf_conntrack_udp_timeout")? == "40", "udp timeout set");
    ensure!(get("net.netfilter.nf_conntrack_tcp_be_liberal")? == "1", "tcp_be_liberal set");
    ensure!(get("net.ipv4.conf.all.route_localnet")? == "1", "route_localnet set for localhost NodePorts");
    ensure!(get("net.netfilter.nf_conntrack_max")? == max_before, "maxPerCore 0 leaves nf_conntrack_max");

    // Raising nf_conntrack_max is not allowed here: kube-proxy stops, and so does svcproxy.
    let out = node.exec(&[kp, "--init-only", "--hostname-override=node-1", "--conntrack-max-per-core=1000000"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ctx.log(format!("exit {:?}: {err}", out.status.code()));
    ensure!(!out.status.success(), "an nf_conntrack_max that cannot be raised stops kube-proxy --init-only");
    ensure!(err.contains("could not set conntrack parameters") && err.contains("nf_conntrack_max"), "the error names the sysctl: {err}");
    ensure!(
        std::fs::read_to_string("/sys/module/nf_conntrack/parameters/hashsize").unwrap_or_default() == hash_before,
        "the global hashsize was not touched"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

const LB: &str = "apiVersion: v1
kind: Service
metadata: {name: lb, namespace: app}
spec:
  type: LoadBalancer
  clusterIP: \"198.19.255.20\"
  clusterIPs: [\"198.19.255.20\"]
  ipFamilies: [IPv4]
  externalTrafficPolicy: Local
  healthCheckNodePort: 32000
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080, nodePort: 30800}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: lb-v4
  namespace: app
  labels: {kubernetes.io/service-name: lb}
addressType: IPv4
endpoints:
- addresses: [\"198.18.1.2\"]
  conditions: {ready: true}
  nodeName: NODE
- addresses: [\"198.18.3.2\"]
  conditions: {ready: true}
  nodeName: NODE
- addresses: [\"198.18.2.2\"]
  conditions: {ready: true}
  nodeName: node-2
ports:
- {name: http, port: 8080, protocol: TCP}
";

/// The health-check node port of an `externalTrafficPolicy: Local` LoadBalancer answers on
/// the node IP — where a cloud load balancer probes it — even with `/healthz` on
/// 127.0.0.1, probed from the namespace outside the node: 200 with the local endpoint
/// count (two of three endpoints are on this node), 503 with a count of 0 once none is.
fn hc_node_port_on_the_node_ip(ctx: &mut Ctx, b: Backend) -> CaseResult {
    use std::time::Duration;

    use crate::netns::NODE_IP4;
    use crate::watch_e2e::{http_get, in_netns, spawn_svcproxy, until};

    let mut tools = vec!["ip".to_string()];
    tools.extend(b.tools());
    ctx.require(&tools.iter().map(String::as_str).collect::<Vec<_>>())?;
    let lab = Lab::new(&format!("hcnp{}", b.name()))?;
    let file = crate::svcproxy::temp_yaml(&LB.replace("NODE", "node-1"))?;
    let log = crate::svcproxy::temp_yaml("")?;
    let node = lab.node().name.clone();
    let ext = lab.external().name.clone();
    let from = file.display().to_string();
    let argv = ["sync", "--watch", "--from", &from, "--iptables-backend", b.name(), "--hostname-override", "node-1", "--node-ip", NODE_IP4,
        "--ip-family", "ipv4", "--nfacct=false", "--conntrack-max-per-core=0", "--min-sync-period", "0s",
        "--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"];
    let _daemon = spawn_svcproxy(&node, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let probe = || {
        let ext = ext.clone();
        in_netns(&ext, || http_get(format!("{NODE_IP4}:32000").parse().unwrap(), "/")).join().ok().and_then(|r| r.ok()).unwrap_or_default()
    };
    until("200 from the health-check node port on the node IP", Duration::from_secs(20), || probe().starts_with("HTTP/1.1 200"))
        .map_err(|e| format!("{e}: last answer {:?}\nsvcproxy log:\n{}", probe(), logs()))?;
    let body = probe();
    ensure!(body.contains("\"localEndpoints\":2"), "the local count: {body}");
    std::fs::write(&file, LB.replace("NODE", "node-2")).map_err(|e| e.to_string())?;
    until("503 once no endpoint is local", Duration::from_secs(20), || probe().starts_with("HTTP/1.1 503"))
        .map_err(|e| format!("{e}: last answer {:?}\nsvcproxy log:\n{}", probe(), logs()))?;
    let body = probe();
    ensure!(body.contains("\"localEndpoints\":0"), "the local count with none local: {body}");
    Ok(())
}

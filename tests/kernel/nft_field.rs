//! kube-proxy v1.36+'s nftables table as a real node lists it (the only listing of that
//! table we could read: a node running kube-proxy's nftables mode, from a public
//! write-up; chain and set bodies as `nft list table ip kube-proxy` printed them). The
//! same cluster rendered by svcproxy (`--kube-proxy-version 1.37`) and loaded by `nft -f`
//! lists those chains with the same rules, and those sets with the same elements; a dry
//! run for v1.34's table over it says which table the kernel holds.

use std::collections::BTreeSet;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab};
use crate::svcproxy::{path_str, run, temp_yaml};

pub fn cases() -> Vec<Case> {
    vec![Case::new("nftables_v137_table_lists_as_a_kube_proxy_node_lists_it", field_listing)]
}

/// The node `pi` (192.168.0.231, pods in 10.244.0.0/16): the API server's Service, an
/// unready DNS Service and a two-pod Service on this node.
const CLUSTER: &str = "\
apiVersion: svcproxy.dev/v1alpha1
kind: SvcproxyFixture
node:
  name: pi
  ips: [192.168.0.231]
  interfaceAddresses:
    eth0: [192.168.0.231/24]
    lo: [127.0.0.1/8]
options:
  mode: nftables
  ipFamily: ipv4
  clusterCIDR: 10.244.0.0/16
  nodePortAddresses: [192.168.0.231/32]
---
apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: https, port: 443, protocol: TCP, targetPort: 6443}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kubernetes, namespace: default, labels: {kubernetes.io/service-name: kubernetes}}
addressType: IPv4
endpoints:
- addresses: [192.168.0.231]
  conditions: {ready: true}
ports: [{name: https, port: 6443, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, port: 53, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: backend-api, namespace: kproxy-lab}
spec:
  clusterIP: 10.100.192.23
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 9898}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-api-k47lx, namespace: kproxy-lab, labels: {kubernetes.io/service-name: backend-api}}
addressType: IPv4
endpoints:
- addresses: [10.244.0.8]
  conditions: {ready: true}
  nodeName: pi
- addresses: [10.244.0.10]
  conditions: {ready: true}
  nodeName: pi
ports: [{name: http, port: 9898, protocol: TCP}]
";

/// The chains as the node listed them (`nft list table ip kube-proxy`).
const CHAINS: &[(&str, &[&str])] = &[
    (
        "services",
        &[
            "ip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\"",
            "ip daddr . meta l4proto . th dport vmap @service-ips",
            "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        ],
    ),
    (
        "masquerading",
        &[
            "meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random",
            "ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random",
        ],
    ),
    ("service-2QRHZV4L-default/kubernetes/tcp/https", &["meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 192.168.0.231 . 6443 }"]),
    (
        "service-YVSKLJHA-kproxy-lab/backend-api/tcp/http",
        &["meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.244.0.10 . 9898, 1 : 10.244.0.8 . 9898 }"],
    ),
];

/// The sets' elements as the node listed them.
const SETS: &[(&str, &[&str])] = &[
    ("hairpin-connections", &["10.244.0.8 . 10.244.0.8 . tcp . 9898", "10.244.0.10 . 10.244.0.10 . tcp . 9898"]),
    ("cluster-ips", &["10.96.0.1", "10.96.0.10", "10.100.192.23"]),
    ("nodeport-ips", &["192.168.0.231"]),
    (
        "service-ips",
        &["10.100.192.23 . tcp . 80 : goto service-YVSKLJHA-kproxy-lab/backend-api/tcp/http", "10.96.0.1 . tcp . 443 : goto service-2QRHZV4L-default/kubernetes/tcp/https"],
    ),
];

fn field_listing(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "nft"])?;
    let lab = Lab::new("nftfield")?;
    let path = temp_yaml(CLUSTER)?;
    let out = run(lab.node(), Backend::Nft, &["render", "--mode", "nftables", "--kube-proxy-version", "1.37", "--from", path_str(&path)])?;
    ensure!(out.status.success(), "render failed: {}", String::from_utf8_lossy(&out.stderr));
    lab.node().run_stdin(&["nft", "-f", "-"], Some(&String::from_utf8_lossy(&out.stdout)))?;
    let listed = lab.node().run(&["nft", "list", "table", "ip", "kube-proxy"])?;
    for (chain, want) in CHAINS {
        let got = block(&listed, &format!("chain {chain} {{"));
        ensure!(got == *want, "chain {chain}: listed\n{}\nwhere the node listed\n{}", got.join("\n"), want.join("\n"));
    }
    for (set, want) in SETS {
        let got: BTreeSet<String> = elements(&block(&listed, &format!("{set} {{")));
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        ensure!(got == want, "set {set}: listed {got:?} where the node listed {want:?}");
    }
    ctx.log(format!("{} chains and {} sets list as on the kube-proxy node", CHAINS.len(), SETS.len()));
    // A dry run for v1.34's table over it says which table the kernel holds and how to keep it.
    let dry = run(lab.node(), Backend::Nft, &["sync", "--mode", "nftables", "--kube-proxy-version", "1.35", "--dry-run", "--from", path_str(&path)])?;
    let err = String::from_utf8_lossy(&dry.stderr);
    ensure!(err.contains("kube-proxy v1.36's nftables table") && err.contains("--kube-proxy-version 1.37"), "the dry run does not name the table the kernel holds: {err}");
    Ok(())
}

/// The lines of the block that opens with a line ending in `head` (`chain NAME {`,
/// `NAME {` of a set or map), trimmed, up to its closing brace.
fn block(listing: &str, head: &str) -> Vec<String> {
    let mut lines = listing.lines().map(str::trim).skip_while(|l| !(l.ends_with(head) && (l.starts_with("chain ") || l.starts_with("set ") || l.starts_with("map "))));
    lines.next();
    lines.take_while(|l| *l != "}").map(str::to_owned).collect()
}

/// The elements of a set or map block (`elements = { a, b,\n c }`).
fn elements(block: &[String]) -> BTreeSet<String> {
    let text = block.join(" ");
    let Some(body) = text.split("elements = {").nth(1) else { return BTreeSet::new() };
    body.split('}').next().unwrap_or_default().split(',').map(|e| e.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|e| !e.is_empty()).collect()
}

//! A deterministic cluster generator for benchmarks and scale tests: N services × M
//! endpoints with a realistic mix (mostly ClusterIP; some NodePort; LoadBalancers, half of
//! them with source ranges; some with externalTrafficPolicy Local; a fifth with two ports;
//! a few with ClientIP affinity; a few terminating endpoints), written as ordinary
//! Service/EndpointSlice YAML so every mode and tool reads the same input.

pub mod state;

use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenSpec {
    pub services: usize,
    pub endpoints: usize,
    pub seed: u64,
}

/// xorshift64*: small, fast, deterministic.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() >> 33) as usize % n.max(1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ClusterIp,
    NodePort,
    LoadBalancer { ranges: bool, local: bool },
}

/// The node the generated cluster is rendered for.
pub const NODE: &str = "node-0";
const NODES: usize = 100;

fn ip(base: Ipv4Addr, offset: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base).wrapping_add(offset as u32))
}

/// The `SvcproxyFixture` document every generated cluster starts with: node-0, IPv4.
pub fn header(spec: &GenSpec) -> String {
    format!(
        "# generated: {} services x {} endpoints, seed {}\napiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  name: {NODE}\n  ips: [192.168.0.10]\n  labels: {{topology.kubernetes.io/zone: zone-0}}\noptions:\n  ipFamily: ipv4\n  clusterCIDR: 10.128.0.0/9\n",
        spec.services, spec.endpoints, spec.seed
    )
}

/// The whole cluster as multi-document YAML, starting with a `SvcproxyFixture` for node-0.
pub fn yaml(spec: &GenSpec) -> String {
    let mut out = String::with_capacity(spec.services * (900 + 120 * spec.endpoints));
    out.push_str(&header(spec));
    let mut rng = Rng::new(spec.seed);
    let mut next_node_port = 30000u32;
    for i in 0..spec.services {
        write_service(&mut out, spec, &mut rng, i, &mut next_node_port);
    }
    out
}

fn write_service(out: &mut String, spec: &GenSpec, rng: &mut Rng, i: usize, next_node_port: &mut u32) {
    let ns = format!("ns-{}", i % 50);
    let name = format!("svc-{i}");
    let mut kind = match rng.percent() {
        0..=69 => Kind::ClusterIp,
        70..=84 => Kind::NodePort,
        p => Kind::LoadBalancer { ranges: p % 2 == 0, local: p >= 95 },
    };
    if kind != Kind::ClusterIp && *next_node_port + 2 > 32767 {
        kind = Kind::ClusterIp;
    }
    let two_ports = rng.percent() < 20;
    let affinity = rng.percent() < 3;
    let cluster_ip = ip(Ipv4Addr::new(10, 96, 0, 1), i);
    let type_name = match kind {
        Kind::ClusterIp => "ClusterIP",
        Kind::NodePort => "NodePort",
        Kind::LoadBalancer { .. } => "LoadBalancer",
    };
    let _ = write!(out, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  type: {type_name}\n  clusterIP: {cluster_ip}\n  clusterIPs: [{cluster_ip}]\n");
    if let Kind::LoadBalancer { ranges, local } = kind {
        if local {
            let _ = write!(out, "  externalTrafficPolicy: Local\n  healthCheckNodePort: {}\n", 32000 + (i % 700));
        }
        if ranges {
            out.push_str("  loadBalancerSourceRanges: [203.0.113.0/24, 198.51.100.0/25]\n");
        }
    }
    if affinity {
        out.push_str("  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 10800}}\n");
    }
    out.push_str("  ports:\n");
    let ports: &[(&str, u16, u16)] = if two_ports { &[("http", 80, 8080), ("metrics", 9090, 9090)] } else { &[("http", 80, 8080)] };
    for (pname, port, target) in ports {
        let _ = write!(out, "  - name: {pname}\n    port: {port}\n    protocol: TCP\n    targetPort: {target}\n");
        if kind != Kind::ClusterIp {
            let _ = writeln!(out, "    nodePort: {next_node_port}");
            *next_node_port += 1;
        }
    }
    if matches!(kind, Kind::LoadBalancer { .. }) {
        let _ = write!(out, "status:\n  loadBalancer:\n    ingress:\n    - ip: {}\n", ip(Ipv4Addr::new(100, 64, 0, 1), i));
    }
    write_slice(out, spec, rng, i, &ns, &name, ports);
}

fn write_slice(out: &mut String, spec: &GenSpec, rng: &mut Rng, i: usize, ns: &str, name: &str, ports: &[(&str, u16, u16)]) {
    let _ = write!(out, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-abcde\n  namespace: {ns}\n  labels:\n    kubernetes.io/service-name: {name}\naddressType: IPv4\nendpoints:\n");
    for j in 0..spec.endpoints {
        let addr = ip(Ipv4Addr::new(10, 128, 0, 2), i * spec.endpoints + j);
        let node = (i + j) % NODES;
        let terminating = rng.percent() < 2;
        let cond = if terminating { "{ready: false, serving: true, terminating: true}" } else { "{ready: true, serving: true, terminating: false}" };
        let _ = write!(out, "- addresses: [{addr}]\n  conditions: {cond}\n  nodeName: node-{node}\n  zone: zone-{}\n", node % 3);
    }
    out.push_str("ports:\n");
    for (pname, _, target) in ports {
        let _ = write!(out, "- name: {pname}\n  port: {target}\n  protocol: TCP\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{file::read_str, ClusterState};

    #[test]
    fn generated_clusters_are_deterministic_and_readable() {
        let spec = GenSpec { services: 200, endpoints: 3, seed: 7 };
        let a = yaml(&spec);
        assert_eq!(a, yaml(&spec));
        assert_ne!(a, yaml(&GenSpec { seed: 8, ..spec }));
        let mut st = ClusterState::default();
        read_str(std::path::Path::new("gen.yaml"), &a, &mut st).unwrap();
        assert_eq!(st.services.len(), 200);
        assert_eq!(st.slices.len(), 200);
        let lbs = st.services.iter().filter(|s| s.service_type == crate::model::ServiceType::LoadBalancer).count();
        assert!(lbs > 10 && lbs < 60, "{lbs}");
    }
}

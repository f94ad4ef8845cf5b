//! Services and EndpointSlices written back as the YAML the file source reads: a
//! generated cluster moved through random changes (`ipvs::walk`) becomes a file a real
//! kernel's test can feed to watch mode, one file per step.

use std::fmt::Write as _;

use crate::model::{EndpointSlice, ProxyLabels, Service, ServiceType, TrafficPolicy};
use crate::source::{LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME};

/// `header` (a `SvcproxyFixture` document, as [`super::header`] writes it), then each
/// service and each slice as one document.
pub fn yaml<'a>(header: &str, services: impl IntoIterator<Item = &'a Service>, slices: &[EndpointSlice]) -> String {
    let mut out = String::from(header);
    for svc in services {
        service(&mut out, svc);
    }
    for s in slices {
        slice(&mut out, s);
    }
    out
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    let words: Vec<String> = items.iter().map(T::to_string).collect();
    format!("[{}]", words.join(", "))
}

fn labels(out: &mut String, l: &ProxyLabels, service_name: Option<&str>) {
    if l.service_proxy_name.is_none() && !l.headless && service_name.is_none() {
        return;
    }
    out.push_str("  labels:\n");
    if let Some(name) = service_name {
        let _ = writeln!(out, "    {LABEL_SERVICE_NAME}: {name}");
    }
    if let Some(p) = &l.service_proxy_name {
        let _ = writeln!(out, "    {LABEL_SERVICE_PROXY_NAME}: {p:?}");
    }
    if l.headless {
        let _ = writeln!(out, "    {LABEL_HEADLESS}: \"\"");
    }
}

fn type_name(t: ServiceType) -> &'static str {
    match t {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => "NodePort",
        ServiceType::LoadBalancer => "LoadBalancer",
        ServiceType::ExternalName => "ExternalName",
    }
}

fn service(out: &mut String, svc: &Service) {
    let _ = write!(out, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {}\n  namespace: {}\n", svc.id.name, svc.id.namespace);
    labels(out, &svc.proxy_labels, None);
    let _ = writeln!(out, "spec:\n  type: {}", type_name(svc.service_type));
    if let Some(first) = svc.cluster_ips.first() {
        let _ = write!(out, "  clusterIP: {first}\n  clusterIPs: {}\n", list(&svc.cluster_ips));
    }
    if !svc.external_ips.is_empty() {
        let _ = writeln!(out, "  externalIPs: {}", list(&svc.external_ips));
    }
    if svc.external_traffic_policy == TrafficPolicy::Local {
        out.push_str("  externalTrafficPolicy: Local\n");
    }
    if svc.internal_traffic_policy == TrafficPolicy::Local {
        out.push_str("  internalTrafficPolicy: Local\n");
    }
    if svc.health_check_node_port != 0 {
        let _ = writeln!(out, "  healthCheckNodePort: {}", svc.health_check_node_port);
    }
    if let Some(timeout) = svc.session_affinity {
        let _ = writeln!(out, "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {timeout}}}}}");
    }
    if !svc.load_balancer_source_ranges.is_empty() {
        let _ = writeln!(out, "  loadBalancerSourceRanges: {}", list(&svc.load_balancer_source_ranges));
    }
    out.push_str("  ports:\n");
    for p in &svc.ports {
        let _ = write!(out, "  - name: {:?}\n    port: {}\n    protocol: {}\n", p.name, p.port, p.protocol.upper());
        if p.node_port != 0 {
            let _ = writeln!(out, "    nodePort: {}", p.node_port);
        }
    }
    if !svc.ingress.is_empty() {
        out.push_str("status:\n  loadBalancer:\n    ingress:\n");
        for ing in &svc.ingress {
            let _ = writeln!(out, "    - ip: {}", ing.ip);
            if ing.proxy_mode {
                out.push_str("      ipMode: Proxy\n");
            }
        }
    }
}

fn names(set: &std::collections::BTreeSet<String>) -> String {
    let words: Vec<String> = set.iter().map(|n| format!("{{name: {n}}}")).collect();
    format!("[{}]", words.join(", "))
}

fn slice(out: &mut String, s: &EndpointSlice) {
    let _ = write!(out, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {}\n  namespace: {}\n", s.id.name, s.id.namespace);
    labels(out, &s.proxy_labels, Some(&s.service.name));
    let _ = writeln!(out, "addressType: {}", s.family.api_name());
    out.push_str(if s.endpoints.is_empty() { "endpoints: []\n" } else { "endpoints:\n" });
    for ep in &s.endpoints {
        let _ = writeln!(out, "- addresses: [{}]\n  conditions: {{ready: {}, serving: {}, terminating: {}}}", ep.ip, ep.ready, ep.serving, ep.terminating);
        if let Some(node) = &ep.node_name {
            let _ = writeln!(out, "  nodeName: {node}");
        }
        if let Some(zone) = &ep.zone {
            let _ = writeln!(out, "  zone: {zone}");
        }
        if !ep.zone_hints.is_empty() || !ep.node_hints.is_empty() {
            out.push_str("  hints:\n");
            if !ep.zone_hints.is_empty() {
                let _ = writeln!(out, "    forZones: {}", names(&ep.zone_hints));
            }
            if !ep.node_hints.is_empty() {
                let _ = writeln!(out, "    forNodes: {}", names(&ep.node_hints));
            }
        }
    }
    out.push_str(if s.ports.is_empty() { "ports: []\n" } else { "ports:\n" });
    for p in &s.ports {
        let _ = write!(out, "- name: {:?}\n  port: {}\n  protocol: {}\n", p.name, p.port, p.protocol.upper());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{self, GenSpec};
    use crate::ipvs::walk::Walk;
    use crate::source::{file::read_str, ClusterState};
    use std::path::Path;

    fn read(text: &str) -> ClusterState {
        let mut st = ClusterState::default();
        read_str(Path::new("written.yaml"), text, &mut st).expect("the written cluster reads back");
        st
    }

    #[test]
    fn a_generated_cluster_written_back_reads_as_the_same_objects() {
        let spec = GenSpec { services: 300, endpoints: 4, seed: 11 };
        let first = read(&gen::yaml(&spec));
        let again = read(&yaml(&gen::header(&spec), &first.services, &first.slices));
        assert_eq!(again.services, first.services);
        assert_eq!(again.slices, first.slices);
        assert!(first.services.iter().any(|s| s.session_affinity.is_some()));
        assert!(first.services.iter().any(|s| !s.ingress.is_empty()));
    }

    #[test]
    fn every_step_of_a_walk_written_back_reads_as_the_walks_objects() {
        let mut walk = Walk::new(60, 3, 5);
        let header = gen::header(&GenSpec { services: 60, endpoints: 3, seed: 5 });
        for step in 0..25 {
            walk.step(3);
            let (services, slices) = walk.current();
            let st = read(&yaml(&header, services.iter().copied(), slices));
            assert_eq!(st.services.len(), services.len(), "step {step}");
            for (read, want) in st.services.iter().zip(&services) {
                // kube-proxy keeps a health-check node port only for a Local LoadBalancer.
                let hc = if want.service_type == ServiceType::LoadBalancer && want.external_traffic_policy == TrafficPolicy::Local { want.health_check_node_port } else { 0 };
                assert_eq!(read, &Service { health_check_node_port: hc, ..(*want).clone() }, "step {step}");
            }
            assert_eq!(&st.slices, slices, "step {step}");
        }
    }
}

//! A service port's elements in the shared sets and verdict maps: its ClusterIP in
//! `cluster-ips`, and its ClusterIP, external IPs, load-balancer IPs and NodePort in
//! `service-ips`/`service-nodeports` (or, with nowhere to go, in the `no-endpoint-*` maps),
//! load-balancer IPs with source ranges in `firewall-ips`.

use super::wiring::Wiring;
use crate::model::ServicePort;
use crate::nftables::model::Objects;
use crate::nftables::names::{CLUSTER_IPS, FIREWALL_IPS, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, SERVICE_IPS, SERVICE_NODEPORTS};

pub fn write(p: &Wiring, out: &mut Objects) {
    cluster_ip(p, out);
    external_ips(p, out);
    load_balancer_ips(p, out);
    node_port(p, out);
}

/// `IP . proto . port`.
fn ip_key(ip: &std::net::IpAddr, p: &Wiring) -> Vec<String> {
    vec![ip.to_string(), p.proto.to_owned(), p.svc.port.to_string()]
}

fn goto(chain: &str) -> Vec<String> {
    vec![format!("goto {chain}")]
}

/// An element of a `no-endpoint-*` map, commented with the service port.
fn refuse(out: &mut Objects, map: &str, key: Vec<String>, verdict: &str, p: &Wiring) {
    out.element(map, key, vec![verdict.to_owned()], Some(&p.spn));
}

fn cluster_ip(p: &Wiring, out: &mut Objects) {
    let svc: &ServicePort = p.svc;
    out.element(CLUSTER_IPS, vec![svc.cluster_ip.to_string()], vec![], None);
    match &p.internal_refusal {
        None => out.element(SERVICE_IPS, ip_key(&svc.cluster_ip, p), goto(&p.internal_chain), None),
        Some(v) => refuse(out, NO_ENDPOINT_SERVICES, ip_key(&svc.cluster_ip, p), v, p),
    }
}

fn external_ips(p: &Wiring, out: &mut Objects) {
    for ip in &p.svc.external_ips {
        if p.has_endpoints {
            out.element(SERVICE_IPS, ip_key(ip, p), goto(&p.chains.external), None);
        }
        if let Some(v) = &p.external_refusal {
            refuse(out, NO_ENDPOINT_SERVICES, ip_key(ip, p), v, p);
        }
    }
}

fn load_balancer_ips(p: &Wiring, out: &mut Objects) {
    for ip in &p.svc.load_balancer_vips {
        if p.has_endpoints {
            out.element(SERVICE_IPS, ip_key(ip, p), goto(&p.chains.external), None);
        }
        if p.uses_firewall_chain {
            out.element(FIREWALL_IPS, ip_key(ip, p), goto(&p.chains.firewall), None);
        }
    }
    if let Some(v) = &p.external_refusal {
        for ip in &p.svc.load_balancer_vips {
            refuse(out, NO_ENDPOINT_SERVICES, ip_key(ip, p), v, p);
        }
    }
}

fn node_port(p: &Wiring, out: &mut Objects) {
    if p.svc.node_port == 0 {
        return;
    }
    let key = || vec![p.proto.to_owned(), p.svc.node_port.to_string()];
    if p.has_endpoints {
        out.element(SERVICE_NODEPORTS, key(), goto(&p.chains.external), None);
    }
    if let Some(v) = &p.external_refusal {
        refuse(out, NO_ENDPOINT_NODEPORTS, key(), v, p);
    }
}

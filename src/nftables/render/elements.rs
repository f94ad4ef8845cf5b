//! A service port's elements in the shared sets and verdict maps: its ClusterIP in
//! `cluster-ips`, and its ClusterIP, external IPs, load-balancer IPs and NodePort in
//! `service-ips`/`service-nodeports` (or, with nowhere to go, in the `no-endpoint-*` maps),
//! load-balancer IPs with source ranges in `firewall-ips`.

use std::net::IpAddr;

use super::wiring::Wiring;
use crate::model::ServicePort;
use crate::nftables::context::Context;
use crate::nftables::model::{Key, Objects, Part};
use crate::nftables::names::{localhost_nodeport_reject_chain, LOCALHOST_NODEPORT_REJECT_PORTS, CLUSTER_IPS, FIREWALL_IPS, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, SERVICE_IPS, SERVICE_NODEPORTS};
use crate::nftables::stmt::Verdict;

pub fn write(ctx: &Context, p: &Wiring, out: &mut Objects) {
    cluster_ip(p, out);
    external_ips(p, out);
    load_balancer_ips(p, out);
    node_port(ctx, p, out);
}

/// `IP . proto . port`.
fn ip_key(ip: IpAddr, p: &Wiring) -> Key {
    Key::of([Part::Addr(ip), Part::Proto(p.svc.protocol), Part::Port(p.svc.port)])
}

fn goto(chain: &str) -> Option<Verdict> {
    Some(Verdict::Goto(chain.to_owned()))
}

/// An element of a `no-endpoint-*` map, commented with the service port.
fn refuse(out: &mut Objects, map: &str, key: Key, verdict: &Verdict, p: &Wiring) {
    out.element(map, key, Some(verdict.clone()), Some(element_comment(&p.spn)));
}

/// The longest comment nft accepts ("comment too long, 128 characters maximum allowed";
/// knftables' `CommentLengthMax`).
const COMMENT_MAX: usize = 128;

/// The service port's name cut to [`COMMENT_MAX`] bytes, as kube-proxy v1.37 cuts it
/// (`truncateNFTablesComment`, pkg/proxy/nftables/proxier.go @7b8fb5e): a namespace and a
/// name of 63 characters and a port name of 15 make 143, which nft refuses, failing the
/// whole transaction. Names are ASCII (DNS labels); a non-ASCII one is cut at the last
/// character boundary within the limit.
fn element_comment(spn: &str) -> &str {
    if spn.len() <= COMMENT_MAX {
        return spn;
    }
    let mut end = COMMENT_MAX;
    while !spn.is_char_boundary(end) {
        end -= 1;
    }
    &spn[..end]
}

fn cluster_ip(p: &Wiring, out: &mut Objects) {
    let svc: &ServicePort = p.svc;
    out.element(CLUSTER_IPS, Key::of([Part::Addr(svc.cluster_ip)]), None, None);
    match &p.internal_refusal {
        None => out.element(SERVICE_IPS, ip_key(svc.cluster_ip, p), goto(&p.internal_chain), None),
        Some(v) => refuse(out, NO_ENDPOINT_SERVICES, ip_key(svc.cluster_ip, p), v, p),
    }
}

fn external_ips(p: &Wiring, out: &mut Objects) {
    for ip in &p.svc.external_ips {
        if p.has_endpoints {
            out.element(SERVICE_IPS, ip_key(*ip, p), goto(&p.chains.external), None);
        }
        if let Some(v) = &p.external_refusal {
            refuse(out, NO_ENDPOINT_SERVICES, ip_key(*ip, p), v, p);
        }
    }
}

fn load_balancer_ips(p: &Wiring, out: &mut Objects) {
    for ip in &p.svc.load_balancer_vips {
        if p.has_endpoints {
            out.element(SERVICE_IPS, ip_key(*ip, p), goto(&p.chains.external), None);
        }
        if p.uses_firewall_chain {
            out.element(FIREWALL_IPS, ip_key(*ip, p), goto(&p.chains.firewall), None);
        }
    }
    if let Some(v) = &p.external_refusal {
        for ip in &p.svc.load_balancer_vips {
            refuse(out, NO_ENDPOINT_SERVICES, ip_key(*ip, p), v, p);
        }
    }
}

fn node_port(ctx: &Context, p: &Wiring, out: &mut Objects) {
    if p.svc.node_port == 0 {
        return;
    }
    let key = || Key::of([Part::Proto(p.svc.protocol), Part::Port(p.svc.node_port)]);
    // Rejected on loopback whether or not it has endpoints (kube-proxy v1.37, the gate on).
    if ctx.localhost.is_some_and(|lh| lh.rejected().contains(&p.proto)) {
        out.element(LOCALHOST_NODEPORT_REJECT_PORTS, key(), goto(&localhost_nodeport_reject_chain(p.proto)), None);
    }
    if p.has_endpoints {
        out.element(SERVICE_NODEPORTS, key(), goto(&p.chains.external), None);
    }
    if let Some(v) = &p.external_refusal {
        refuse(out, NO_ENDPOINT_NODEPORTS, key(), v, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::names::NO_ENDPOINT_SERVICES;

    #[test]
    fn a_comment_is_cut_to_128_bytes() {
        let short = "ns/svc:port";
        assert_eq!(element_comment(short), short);
        let exact = "a".repeat(128);
        assert_eq!(element_comment(&exact), exact);
        let long = format!("{}/{}:{}", "n".repeat(63), "s".repeat(63), "p".repeat(15));
        assert_eq!(long.len(), 143);
        assert_eq!(element_comment(&long), &long[..128]);
        // Never inside a character.
        let wide = format!("{}é", "a".repeat(127));
        assert_eq!(element_comment(&wide), "a".repeat(127));
    }

    /// A service with no endpoints and the longest names the API allows renders a
    /// `no-endpoint-services` element whose comment nft accepts.
    #[test]
    fn the_longest_service_port_name_renders_a_comment_nft_accepts() {
        let (ns, name, port) = ("n".repeat(63), "s".repeat(63), "p".repeat(15));
        let text = format!(
            "apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  name: node-1\n  ips: [192.168.10.11]\noptions:\n  ipFamily: ipv4\n---\n\
             apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterIP: 10.96.0.50\n  ports:\n  - name: {port}\n    port: 80\n    protocol: TCP\n"
        );
        let mut state = crate::source::ClusterState::default();
        crate::source::file::read_str(std::path::Path::new("long.yaml"), &text, &mut state).expect("fixture");
        let flags = crate::settings::Settings { mode: Some(crate::settings::kinds::ProxyMode::Nftables), ..Default::default() };
        let loaded = crate::pipeline::load(state, flags, Default::default()).expect("load");
        let tables: Vec<_> = crate::nftables::render_all(&loaded.config, &loaded.trackers).iter().map(|r| r.table()).collect();
        let comments: Vec<String> = tables
            .iter()
            .flat_map(|t| t.objects.elements.iter())
            .filter(|e| e.set == NO_ENDPOINT_SERVICES)
            .filter_map(|e| e.comment.clone())
            .collect();
        let full = format!("{ns}/{name}:{port}");
        assert_eq!(comments, vec![full[..128].to_owned()]);
    }
}

//! kube-proxy's per-service-port loop of the IPVS `syncProxyRules`: virtual servers on
//! the ClusterIP, external IPs, load-balancer VIPs and NodePorts, their real servers, the
//! bound addresses and the ipset entries.

use std::net::IpAddr;

use super::ipsets::{ip_port, ip_port_ip, ip_port_net, SetId};
use super::{Context, Desired, NoNodeAccess, FamilyState};
use crate::ipvs::values::{RealServer, VirtualServer};
use crate::model::{Endpoint, Protocol, ServicePort, ServicePortName};
use crate::select::{categorize, Categorized};

/// kube-utils `FlagSourceHash` (`IP_VS_SVC_F_SCHED2`, `mh-port`), which kube-proxy sets
/// for the `mh` scheduler.
pub const FLAG_SOURCE_HASH: u32 = 0x10;

/// The real servers of one virtual server: local endpoints when the policy is Local and
/// there are some, else the cluster endpoints (kubernetes#97081). Weight 1, sorted.
fn reals(cat: &Categorized, only_local: bool) -> Vec<RealServer> {
    let eps: &[&Endpoint] = if only_local && !cat.local.is_empty() { &cat.local } else { &cat.cluster };
    let mut out: Vec<RealServer> = eps.iter().map(|e| RealServer::new(e.ip, e.port, 1)).collect();
    out.sort_by_key(|r| (r.addr, r.port));
    out.dedup_by_key(|r| (r.addr, r.port));
    out
}

/// What every virtual server of one service port shares.
struct Port<'a> {
    ctx: &'a Context,
    name: &'a ServicePortName,
    svc: &'a ServicePort,
}

impl Port<'_> {
    fn proto(&self) -> &'static str {
        self.svc.protocol.lower()
    }

    fn virtual_server(&self, addr: IpAddr, port: u16) -> VirtualServer {
        let mut vs = VirtualServer::new(addr, port, self.svc.protocol).scheduler(&self.ctx.scheduler);
        if let Some(timeout) = self.svc.session_affinity {
            vs = vs.persistent(timeout);
        }
        if self.ctx.scheduler == "mh" {
            vs.flags |= FLAG_SOURCE_HASH;
        }
        vs
    }

    fn add(&self, plan: &mut FamilyState, addr: IpAddr, port: u16, reals: &[RealServer]) {
        let vs = self.virtual_server(addr, port);
        plan.services.insert(vs.key(), Desired { vs, reals: reals.to_vec(), owner: self.name.clone() });
    }
}

pub fn add_service(ctx: &Context, plan: &mut FamilyState, name: &ServicePortName, svc: &ServicePort, eps: &[Endpoint]) {
    let port = Port { ctx, name, svc };
    let p = port.proto();
    for e in eps.iter().filter(|e| e.is_local) {
        plan.insert_entry(SetId::LoopBack, ip_port_ip(&e.ip, p, e.port, &e.ip));
    }
    let cat = categorize(eps, svc, ctx.locality());
    let internal = reals(&cat, svc.internal_policy_local);
    let external = reals(&cat, svc.external_policy_local);

    plan.insert_entry(SetId::ClusterIp, ip_port(&svc.cluster_ip, p, svc.port));
    port.add(plan, svc.cluster_ip, svc.port, &internal);
    plan.bound.insert(svc.cluster_ip);

    for ip in &svc.external_ips {
        let set = if svc.external_policy_local { SetId::ExternalIpLocal } else { SetId::ExternalIp };
        plan.insert_entry(set, ip_port(ip, p, svc.port));
        port.add(plan, *ip, svc.port, &external);
        if !ctx.node_addresses.contains(ip) {
            plan.bound.insert(*ip);
        }
    }
    for ip in &svc.load_balancer_vips {
        load_balancer_entries(&port, plan, ip);
        port.add(plan, *ip, svc.port, &external);
        if !ctx.node_addresses.contains(ip) {
            plan.bound.insert(*ip);
        }
    }
    if svc.node_port != 0 {
        // kube-proxy `continue`s without node IPs, skipping the health-check entry too.
        if ctx.node_port_ips.is_empty() {
            return;
        }
        node_port_entries(&port, plan);
        for ip in &ctx.node_port_ips {
            port.add(plan, *ip, svc.node_port, &external);
        }
    }
    if svc.health_check_node_port != 0 {
        plan.insert_entry(SetId::HealthCheckNodePort, svc.health_check_node_port.to_string());
    }
}

fn load_balancer_entries(port: &Port, plan: &mut FamilyState, ip: &IpAddr) {
    let (svc, p) = (port.svc, port.proto());
    let entry = ip_port(ip, p, svc.port);
    plan.insert_entry(SetId::LoadBalancer, entry.clone());
    if svc.external_policy_local {
        plan.insert_entry(SetId::LoadBalancerLocal, entry.clone());
    }
    if svc.load_balancer_source_ranges.is_empty() {
        return;
    }
    plan.insert_entry(SetId::LoadBalancerFw, entry);
    let mut allow_from_node = false;
    for cidr in &svc.load_balancer_source_ranges {
        plan.insert_entry(SetId::LoadBalancerSourceCidr, ip_port_net(ip, p, svc.port, cidr));
        allow_from_node |= cidr.contains(&port.ctx.node.node_ip);
    }
    if allow_from_node {
        plan.insert_entry(SetId::LoadBalancerSourceIp, ip_port_ip(ip, p, svc.port, ip));
    } else {
        plan.no_node_access.insert(NoNodeAccess { ip: *ip, proto: p, port: svc.port });
    }
}

fn node_port_entries(port: &Port, plan: &mut FamilyState) {
    let svc = port.svc;
    let (set, local) = match svc.protocol {
        Protocol::Tcp => (SetId::NodePortTcp, SetId::NodePortLocalTcp),
        Protocol::Udp => (SetId::NodePortUdp, SetId::NodePortLocalUdp),
        Protocol::Sctp => (SetId::NodePortSctp, SetId::NodePortLocalSctp),
    };
    let entries: Vec<String> = match svc.protocol {
        Protocol::Sctp => port.ctx.node_port_ips.iter().map(|ip| ip_port(ip, "sctp", svc.node_port)).collect(),
        _ => vec![svc.node_port.to_string()],
    };
    for e in &entries {
        plan.insert_entry(set, e.clone());
        if svc.external_policy_local {
            plan.insert_entry(local, e.clone());
        }
    }
}

//! A service port's rules in the top-level chains, written on every sync: its ClusterIP,
//! external IPs, load-balancer IPs and NodePort in nat `KUBE-SERVICES`/`KUBE-NODEPORTS`,
//! or the filter rules refusing them; the load-balancer firewall drop; the health-check
//! node port accept.

use super::context::Context;
use crate::netfilter::nfacct::NFACCT_LOCALHOST_NODEPORTS;
use super::wiring::{Wiring, Refusal};
use super::ServiceRules;
use crate::xtables::names::{KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES};
use crate::xtables::{Rule, Target};

pub fn write(ctx: &Context, p: &Wiring, out: &mut ServiceRules) {
    cluster_ip(p, out);
    external_ips(p, out);
    load_balancer_ips(p, out);
    node_port(ctx, p, out);
    health_check_node_port(p, &mut out.filter);
}

/// `-A CHAIN -m comment --comment C -m proto -p proto -d IP --dport PORT -j TARGET`
fn capture(out: &mut Vec<Rule>, chain: &'static str, comment: &str, p: &Wiring, ip: &str, port: u16, target: Target) {
    let port = port.to_string();
    out.push(Rule::new(chain, ["-m", "comment", "--comment", comment, "-m", p.proto, "-p", p.proto, "-d", ip, "--dport", &port], target));
}

fn refuse(out: &mut Vec<Rule>, chain: &'static str, r: &Refusal, p: &Wiring, ip: &str, port: u16) {
    capture(out, chain, &r.comment, p, ip, port, r.target.clone());
}

fn cluster_ip(p: &Wiring, out: &mut ServiceRules) {
    let ip = p.svc.cluster_ip.to_string();
    match &p.internal_refusal {
        None => {
            let comment = format!("{} cluster IP", p.spn);
            capture(&mut out.nat_top, KUBE_SERVICES, &comment, p, &ip, p.svc.port, Target::jump(&p.internal_chain));
        }
        Some(r) => refuse(&mut out.filter, KUBE_SERVICES, r, p, &ip, p.svc.port),
    }
}

fn external_ips(p: &Wiring, out: &mut ServiceRules) {
    let comment = format!("{} external IP", p.spn);
    for eip in &p.svc.external_ips {
        let ip = eip.to_string();
        if p.has_endpoints {
            capture(&mut out.nat_top, KUBE_SERVICES, &comment, p, &ip, p.svc.port, Target::jump(&p.chains.ext));
        }
        if let Some(r) = &p.external_refusal {
            refuse(&mut out.filter, KUBE_EXTERNAL_SERVICES, r, p, &ip, p.svc.port);
        }
    }
}

fn load_balancer_ips(p: &Wiring, out: &mut ServiceRules) {
    let comment = format!("{} loadbalancer IP", p.spn);
    let fw_comment = format!("{} traffic not accepted by {}", p.spn, p.chains.fw);
    for vip in &p.svc.load_balancer_vips {
        let ip = vip.to_string();
        if p.has_endpoints {
            capture(&mut out.nat_top, KUBE_SERVICES, &comment, p, &ip, p.svc.port, Target::jump(p.load_balancer_chain()));
        }
        if p.uses_firewall_chain {
            capture(&mut out.filter, KUBE_PROXY_FIREWALL, &fw_comment, p, &ip, p.svc.port, Target::Drop);
        }
    }
    if let Some(r) = &p.external_refusal {
        for vip in &p.svc.load_balancer_vips {
            refuse(&mut out.filter, KUBE_EXTERNAL_SERVICES, r, p, &vip.to_string(), p.svc.port);
        }
    }
}

fn node_port(ctx: &Context, p: &Wiring, out: &mut ServiceRules) {
    if p.svc.node_port == 0 {
        return;
    }
    let np = p.svc.node_port.to_string();
    if p.has_endpoints {
        let (spn, proto, ext): (&str, &str, Target) = (&p.spn, p.proto, Target::jump(&p.chains.ext));
        if !ctx.is_v6() && ctx.localhost_node_ports && ctx.nfacct {
            out.nat_top.push(Rule::new(KUBE_NODEPORTS, ["-m", "comment", "--comment", spn, "-m", proto, "-p", proto,
                "-d", "127.0.0.0/8", "--dport", &np, "-m", "nfacct", "--nfacct-name", NFACCT_LOCALHOST_NODEPORTS],
                ext.clone()));
        }
        out.nat_top.push(Rule::new(KUBE_NODEPORTS, ["-m", "comment", "--comment", spn, "-m", proto, "-p", proto,
            "--dport", &np], ext));
    }
    if let Some(r) = &p.external_refusal {
        out.filter.push(Rule::new(KUBE_EXTERNAL_SERVICES, ["-m", "comment", "--comment", &r.comment, "-m", "addrtype",
            "--dst-type", "LOCAL", "-m", p.proto, "-p", p.proto, "--dport", &np], r.target.clone()));
    }
}

fn health_check_node_port(p: &Wiring, filter: &mut Vec<Rule>) {
    if p.svc.health_check_node_port == 0 {
        return;
    }
    let comment = format!("{} health check node port", p.spn);
    let port = p.svc.health_check_node_port.to_string();
    filter.push(Rule::new(KUBE_NODEPORTS, ["-m", "comment", "--comment", &comment, "-m", "tcp", "-p", "tcp",
        "--dport", &port], Target::Accept));
}

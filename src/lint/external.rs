//! External addresses that are also ClusterIPs: kube-proxy would send traffic meant for
//! one Service to another (both rules match the same destination).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Finding, Input, ObjectId};

/// SP052: with kube-proxy's `AllowServiceExternalIPs` gate off, a Service's `spec.externalIPs`
/// get no rules in any mode (kube-proxy v1.37, KEP-5707): traffic to them is not served.
pub fn unserved(input: &Input) -> Vec<Finding> {
    if !input.options.external_ips_off {
        return Vec::new();
    }
    let mut out: Vec<Finding> = input
        .state
        .services
        .iter()
        .filter(|svc| !svc.external_ips.is_empty())
        .map(|svc| {
            let ips: Vec<String> = svc.external_ips.iter().map(ToString::to_string).collect();
            let msg = format!("external IPs {} get no rules: kube-proxy's feature gate AllowServiceExternalIPs is off", ips.join(", "));
            Finding::new("SP052", vec![ObjectId::new("Service", &svc.id)], msg)
        })
        .collect();
    out.sort();
    out
}

/// SP050 (externalIPs) and SP051 (load-balancer ingress IPs), one per Service and IP.
pub fn check(input: &Input) -> Vec<Finding> {
    let mut cluster: BTreeMap<IpAddr, Vec<ObjectId>> = BTreeMap::new();
    for svc in &input.state.services {
        for ip in &svc.cluster_ips {
            cluster.entry(*ip).or_default().push(ObjectId::new("Service", &svc.id));
        }
    }
    let mut out = Vec::new();
    for svc in &input.state.services {
        let me = ObjectId::new("Service", &svc.id);
        let ingress = svc.ingress.iter().map(|i| i.ip);
        let addrs = svc.external_ips.iter().map(|ip| ("SP050", "external IP", *ip)).chain(ingress.map(|ip| ("SP051", "load-balancer IP", ip)));
        for (code, what, ip) in addrs {
            let Some(owners) = cluster.get(&ip) else { continue };
            let mut objs = vec![me.clone()];
            objs.extend(owners.iter().filter(|o| **o != me).cloned());
            let whose: Vec<String> = owners.iter().map(ToString::to_string).collect();
            let msg = format!("{what} {ip} is the ClusterIP of {}", whose.join(", "));
            out.push(Finding::new(code, objs, msg));
        }
    }
    out.sort();
    out.dedup();
    out
}

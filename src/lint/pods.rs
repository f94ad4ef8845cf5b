//! Services against their Pods (only when the input holds Pods): selectors that select
//! nothing, Pods without an IP, named target ports that do not resolve, and endpoints
//! pointing at Pods that are gone or not ready.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Finding, Input, ObjectId};
use crate::derive::pods::{eligible, node_missing, resolve_port, selects};
use crate::model::{NamespacedName, Node};
use crate::source::extra::{ObjectRef, Pod, ServiceBackend, TargetPort};

/// SP040–SP045.
pub fn check(input: &Input) -> Vec<Finding> {
    let pods = &input.state.extra.pods;
    if pods.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for b in input.state.extra.backends.iter().filter(|b| b.selector.is_some() && !b.external_name) {
        out.extend(selection(b, pods, &input.state.nodes));
    }
    out.extend(references(input));
    out
}

fn pod_ids(pods: &[&Pod]) -> Vec<ObjectId> {
    pods.iter().map(|p| ObjectId::new("Pod", &p.id)).collect()
}

fn names(pods: &[&Pod]) -> String {
    pods.iter().map(|p| p.id.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// SP040, SP043–SP046 for one Service.
fn selection(b: &ServiceBackend, pods: &[Pod], nodes: &[Node]) -> Vec<Finding> {
    let svc = ObjectId::new("Service", &b.id);
    let mut selected: Vec<&Pod> = pods.iter().filter(|p| selects(b, p)).collect();
    selected.sort_by(|x, y| x.id.cmp(&y.id));
    if selected.is_empty() {
        let sel: Vec<String> = b.selector.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
        let msg = format!("selector {} matches no Pod in namespace {}: the Service has no endpoints", sel.join(","), b.id.namespace);
        return vec![Finding::new("SP040", vec![svc], msg)];
    }
    let mut out = Vec::new();
    let no_ip: Vec<&Pod> = selected.iter().copied().filter(|p| p.ips.is_empty() && !p.terminal).collect();
    if !no_ip.is_empty() {
        let mut objs = vec![svc.clone()];
        objs.extend(pod_ids(&no_ip));
        let msg = format!("selected Pod(s) {} have no IP yet and are left out of the endpoints", names(&no_ip));
        out.push(Finding::new("SP044", objs, msg));
    }
    let away: Vec<&Pod> = selected.iter().copied().filter(|p| eligible(p) && node_missing(p, b, nodes)).collect();
    if !away.is_empty() {
        let mut objs = vec![svc.clone()];
        objs.extend(pod_ids(&away));
        let msg = format!("selected Pod(s) {} run on a Node the input does not hold and are left out (the controller skips them until the Node exists)", names(&away));
        out.push(Finding::new("SP046", objs, msg));
    }
    let ok = endpoint_pods(b, pods, nodes);
    for port in b.ports.iter().filter(|p| matches!(p.target, TargetPort::Name(_))) {
        let TargetPort::Name(target) = &port.target else { continue };
        let missing: Vec<&Pod> = ok.iter().copied().filter(|p| resolve_port(port, p).is_none()).collect();
        let what = format!("port {:?} ({}/{}) targets the container port named {target:?}", port.name, port.port, port.protocol.upper());
        if !ok.is_empty() && missing.len() == ok.len() {
            let msg = format!("{what}, which none of the {} selected Pods declares: the port has no endpoints", ok.len());
            out.push(Finding::new("SP043", vec![svc.clone()], msg));
        } else if !missing.is_empty() {
            let mut objs = vec![svc.clone()];
            objs.extend(pod_ids(&missing));
            let msg = format!("{what}, which Pod(s) {} do not declare: they are left out for this port", names(&missing));
            out.push(Finding::new("SP045", objs, msg));
        }
    }
    out
}

/// The selected Pods that become endpoints, in name order.
pub fn endpoint_pods<'a>(b: &ServiceBackend, pods: &'a [Pod], nodes: &[Node]) -> Vec<&'a Pod> {
    let mut out: Vec<&Pod> =
        pods.iter().filter(|p| selects(b, p) && eligible(p) && !node_missing(p, b, nodes)).collect();
    out.sort_by(|x, y| x.id.cmp(&y.id));
    out
}

/// Whether SP043 reports the service port `name`/`protocol`: a named targetPort that
/// none of the endpoint Pods declares (so SP091 need not report it again).
pub fn unresolved_everywhere(input: &Input, svc: &NamespacedName, name: &str, protocol: crate::model::Protocol) -> bool {
    let Some(b) = input.state.extra.backends.iter().find(|b| &b.id == svc && b.selector.is_some()) else { return false };
    let Some(port) = b.ports.iter().find(|p| p.name == name && p.protocol == protocol) else { return false };
    let ok = endpoint_pods(b, &input.state.extra.pods, &input.state.nodes);
    matches!(port.target, TargetPort::Name(_)) && !ok.is_empty() && ok.iter().all(|p| resolve_port(port, p).is_none())
}

/// One endpoint seen in a slice or Endpoints object of `service`.
struct Seen<'a> {
    service: NamespacedName,
    holder: ObjectId,
    ip: Option<IpAddr>,
    ready: bool,
    target: &'a ObjectRef,
}

/// Endpoints pointing at Pods, in slices and Endpoints of Services that exist (those of
/// missing Services are leftovers, SP030 and SP031).
fn seen_endpoints<'a>(input: &Input<'a>) -> Vec<Seen<'a>> {
    let mut out: Vec<Seen<'a>> = Vec::new();
    for r in &input.state.extra.slice_refs {
        let Some(svc) = &r.service else { continue };
        let service = NamespacedName::new(r.slice.namespace.clone(), svc.clone());
        for e in &r.endpoints {
            let Some(target) = e.target.as_ref().filter(|t| t.kind == "Pod") else { continue };
            let holder = ObjectId::new("EndpointSlice", &r.slice);
            out.push(Seen { service: service.clone(), holder, ip: e.ip, ready: e.ready, target });
        }
    }
    for ep in &input.state.extra.endpoints {
        for s in &ep.subsets {
            let all = s.addresses.iter().map(|a| (a, true)).chain(s.not_ready.iter().map(|a| (a, false)));
            for (a, ready) in all {
                let Some(target) = a.target.as_ref().filter(|t| t.kind == "Pod") else { continue };
                let holder = ObjectId::new("Endpoints", &ep.id);
                out.push(Seen { service: ep.id.clone(), holder, ip: Some(a.ip), ready, target });
            }
        }
    }
    out.retain(|s| input.state.services.iter().any(|svc| svc.id == s.service));
    out
}

/// `(code, service, pod)` → the slices and Endpoints holding it, and its address.
type Refs = BTreeMap<(&'static str, NamespacedName, NamespacedName), (Vec<ObjectId>, Option<IpAddr>)>;

/// SP041 and SP042, once per Service and Pod (a Pod in both a slice and the Endpoints
/// of its Service is one problem).
fn references(input: &Input) -> Vec<Finding> {
    let pods: BTreeMap<&NamespacedName, &Pod> = input.state.extra.pods.iter().map(|p| (&p.id, p)).collect();
    let tolerant: Vec<&NamespacedName> =
        input.state.extra.backends.iter().filter(|b| b.publish_not_ready).map(|b| &b.id).collect();
    let mut found = Refs::new();
    for s in seen_endpoints(input) {
        let code = match pods.get(&s.target.id) {
            None => "SP041",
            Some(p) if s.ready && !p.ready && !p.terminating && !tolerant.contains(&&s.service) => "SP042",
            Some(_) => continue,
        };
        let entry = found.entry((code, s.service.clone(), s.target.id.clone())).or_default();
        entry.0.push(s.holder);
        entry.1 = entry.1.or(s.ip);
    }
    let mut out = Vec::new();
    for ((code, service, pod), (mut holders, ip)) in found {
        holders.sort();
        holders.dedup();
        let ip = ip.map_or_else(String::new, |ip| format!(" {ip}"));
        let msg = match code {
            "SP041" => format!("endpoint{ip} of Service {service} refers to Pod {pod}, which does not exist"),
            _ => format!("endpoint{ip} of Service {service} is ready but Pod {pod} is not Ready"),
        };
        let mut objs = vec![ObjectId::new("Pod", &pod)];
        objs.extend(holders);
        out.push(Finding::new(code, objs, msg));
    }
    out
}

//! What svcproxy did with the input: objects and fields it skipped (the reader's notes),
//! endpoints it derived, Endpoints it did not mirror, and slices that would render
//! oddly (a service port no slice carries, a slice of a family the Service lacks). A
//! port no slice carries because its named targetPort resolves on no Pod is SP043's.

use std::collections::BTreeSet;

use super::{Finding, Input, ObjectId};
use crate::derive::{DerivedFrom, NotMirrored};
use crate::model::{NamespacedName, Service};
use crate::net::IpFamily;

/// SP060, SP061, SP090, SP091 and SP092.
pub fn check(input: &Input) -> Vec<Finding> {
    let mut out = Vec::new();
    // An object read twice is said once, naming the object (so the finding also carries
    // where it was read) and both places.
    let duplicates: Vec<_> = input.state.duplicates.iter().map(|d| (d, d.note())).collect();
    for note in input.state.notes.iter().filter(|n| !duplicates.iter().any(|(_, dn)| dn == *n)) {
        // The place goes in `locations` (as for every other finding), the text in the message.
        let mut f = Finding::new("SP090", Vec::new(), note.text.clone());
        if !note.path.as_os_str().is_empty() {
            f.locations = vec![match note.line {
                0 => note.path.display().to_string(),
                line => format!("{}:{line}", note.path.display()),
            }];
        }
        out.push(f);
    }
    for (d, _) in &duplicates {
        out.push(Finding::new("SP090", vec![ObjectId::new(d.kind, &d.id)], d.describe()));
    }
    for d in &input.derived.derived {
        let n: usize = d.slices.iter().map(|s| s.slice.endpoints.len()).sum();
        let (obj, how) = match d.from {
            DerivedFrom::Pods => (ObjectId::new("Service", &d.service), "from its Pods, as the EndpointSlice controller would"),
            DerivedFrom::Endpoints => (ObjectId::new("Endpoints", &d.service), "from it, as the mirroring controller would"),
        };
        let why = if d.replaced > 0 { format!("replacing {} in the input", d.replaced) } else { "the input has none".to_string() };
        let msg = format!("{} EndpointSlice(s) with {n} endpoint(s) derived {how} ({why})", d.slices.len());
        out.push(Finding::new("SP060", vec![obj], msg));
    }
    for (id, why) in &input.derived.not_mirrored {
        let msg = match why {
            NotMirrored::SkipMirror | NotMirrored::LeaderElection | NotMirrored::ExternalName => format!("not mirrored: {why}"),
            // Only worth saying when nothing else gives the Service endpoints.
            NotMirrored::HasSelector if !input.state.slices.iter().any(|s| &s.service == id) => format!(
                "not mirrored: {why}; the input has neither an EndpointSlice for it nor Pods to derive one from, so it has no endpoints"
            ),
            NotMirrored::HasSelector | NotMirrored::NoService => continue,
        };
        out.push(Finding::new("SP061", vec![ObjectId::new("Endpoints", id)], msg));
    }
    let derived: BTreeSet<&NamespacedName> = input.derived.derived.iter().map(|d| &d.service).collect();
    for svc in input.state.services.iter().filter(|s| !s.cluster_ips.is_empty() && !derived.contains(&s.id)) {
        out.extend(odd_slices(input, svc));
    }
    out
}

/// SP091 and SP092 for one Service with ClusterIPs and slices from the input.
fn odd_slices(input: &Input, svc: &Service) -> Vec<Finding> {
    let mut out = Vec::new();
    let slices: Vec<_> = input.state.slices.iter().filter(|s| s.service == svc.id).collect();
    let families: BTreeSet<IpFamily> = svc.cluster_ips.iter().map(IpFamily::of).collect();
    for s in slices.iter().filter(|s| !families.contains(&s.family)) {
        let msg = format!(
            "{} slice of Service {}, which has no {} ClusterIP: kube-proxy never uses it",
            s.family.api_name(),
            svc.id,
            s.family.api_name()
        );
        out.push(Finding::new("SP092", vec![ObjectId::new("EndpointSlice", &s.id)], msg));
    }
    let used: Vec<_> = slices.iter().filter(|s| families.contains(&s.family) && !s.endpoints.is_empty()).collect();
    if used.is_empty() {
        return out;
    }
    for p in &svc.ports {
        if used.iter().any(|s| s.ports.iter().any(|sp| sp.name == p.name && sp.protocol == p.protocol))
            || super::pods::unresolved_everywhere(input, &svc.id, &p.name, p.protocol)
        {
            continue;
        }
        let carried: BTreeSet<String> =
            used.iter().flat_map(|s| s.ports.iter().map(|sp| format!("{:?}/{}", sp.name, sp.protocol.upper()))).collect();
        let msg = format!(
            "port {:?} ({}/{}) is in none of its EndpointSlices (they carry {}): kube-proxy rejects its traffic",
            p.name,
            p.port,
            p.protocol.upper(),
            if carried.is_empty() { "no ports".to_string() } else { carried.into_iter().collect::<Vec<_>>().join(", ") }
        );
        out.push(Finding::new("SP091", vec![ObjectId::new("Service", &svc.id)], msg));
    }
    out
}

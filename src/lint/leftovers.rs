//! Leftovers the endpoint controllers delete: EndpointSlices labelled for a Service that
//! does not exist, and Endpoints without a Service (leader-election locks excepted, as
//! the endpoints controller's leftover check excepts them).

use std::collections::BTreeSet;

use super::{Finding, Input, ObjectId};
use crate::model::NamespacedName;

/// SP030 and SP031.
pub fn check(input: &Input) -> Vec<Finding> {
    let services: BTreeSet<&NamespacedName> = input.state.services.iter().map(|s| &s.id).collect();
    let mut out = Vec::new();
    for r in &input.state.extra.slice_refs {
        let Some(name) = &r.service else { continue };
        let svc = NamespacedName::new(r.slice.namespace.clone(), name.clone());
        if !services.contains(&svc) {
            let msg = format!("it belongs to Service {svc}, which does not exist (the EndpointSlice controller deletes such slices)");
            out.push(Finding::new("SP030", vec![ObjectId::new("EndpointSlice", &r.slice)], msg));
        }
    }
    for e in &input.state.extra.endpoints {
        if !services.contains(&e.id) && !e.leader_election {
            let msg = "no Service of that name exists (the endpoints controller deletes such Endpoints)";
            out.push(Finding::new("SP031", vec![ObjectId::new("Endpoints", &e.id)], msg));
        }
    }
    out
}

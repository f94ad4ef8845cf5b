//! Filling a [`ClusterState`] with derived slices: for each Service the controllers
//! manage and the input gives no EndpointSlice for, the slices they would write; with
//! `force` (`--derive-endpoints`), those replace whatever slices the input has.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{mirror, slices_from_pods, DerivedSlice, NotMirrored};
use crate::model::NamespacedName;
use crate::source::extra::ServiceBackend;
use crate::source::{ClusterState, Note};

/// Where a Service's derived slices came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DerivedFrom {
    Pods,
    Endpoints,
}

/// The slices derived for one Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Derivation {
    pub service: NamespacedName,
    pub from: DerivedFrom,
    pub slices: Vec<DerivedSlice>,
    /// Slices of the input dropped for these (`force` only).
    pub replaced: usize,
}

/// What [`complete`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub derived: Vec<Derivation>,
    /// Endpoints not mirrored, with why (in input order).
    pub not_mirrored: Vec<(NamespacedName, NotMirrored)>,
}

/// Derives the missing slices (all of them with `force`) into `state.slices`.
pub fn complete(state: &mut ClusterState, force: bool) -> Report {
    let have_slices: BTreeSet<NamespacedName> = state
        .extra
        .slice_refs
        .iter()
        .filter_map(|r| r.service.as_ref().map(|s| NamespacedName::new(r.slice.namespace.clone(), s.clone())))
        .collect();
    let backends: BTreeMap<&NamespacedName, &ServiceBackend> = state.extra.backends.iter().map(|b| (&b.id, b)).collect();
    let has_pods = !state.extra.pods.is_empty();
    let mut report = Report::default();
    for svc in &state.services {
        let Some(backend) = backends.get(&svc.id) else { continue };
        if backend.external_name || backend.selector.is_none() {
            continue;
        }
        if force || (has_pods && !have_slices.contains(&svc.id)) {
            let slices = slices_from_pods(svc, backend, &state.extra.pods, &state.nodes);
            report.derived.push(Derivation { service: svc.id.clone(), from: DerivedFrom::Pods, slices, replaced: 0 });
        }
    }
    for ep in &state.extra.endpoints {
        let svc = state.services.iter().find(|s| s.id == ep.id);
        let pair = svc.and_then(|s| backends.get(&s.id).map(|b| (s, *b)));
        match mirror(ep, pair) {
            Ok(slices) if force || !have_slices.contains(&ep.id) => report.derived.push(Derivation {
                service: ep.id.clone(),
                from: DerivedFrom::Endpoints,
                slices,
                replaced: 0,
            }),
            Ok(_) => {}
            Err(why) => report.not_mirrored.push((ep.id.clone(), why)),
        }
    }
    for d in &mut report.derived {
        let before = state.slices.len();
        state.slices.retain(|s| s.service != d.service);
        d.replaced = before - state.slices.len();
        state.slices.extend(d.slices.iter().map(|s| s.slice.clone()));
    }
    report
}

/// [`complete`], with one note per derived Service in `state.notes` (for the commands
/// that print notes).
pub fn complete_with_notes(state: &mut ClusterState, force: bool) -> Report {
    let report = complete(state, force);
    for d in &report.derived {
        let kind = match d.from {
            DerivedFrom::Pods => "Service",
            DerivedFrom::Endpoints => "Endpoints",
        };
        let (path, line) = state
            .extra
            .origins
            .get(&(kind.to_string(), d.service.clone()))
            .cloned()
            .unwrap_or_default();
        let n: usize = d.slices.iter().map(|s| s.slice.endpoints.len()).sum();
        let ready: usize = d.slices.iter().map(|s| s.slice.endpoints.iter().filter(|e| e.ready).count()).sum();
        let what = match d.from {
            DerivedFrom::Pods => "from Pods (EndpointSlice controller)",
            DerivedFrom::Endpoints => "from v1/Endpoints (mirroring controller)",
        };
        let replaced = if d.replaced > 0 { format!(", replacing {} in the input", d.replaced) } else { String::new() };
        state.notes.push(Note {
            path,
            line,
            text: format!("{kind} {}: {} EndpointSlice(s) with {n} endpoint(s) ({ready} ready) derived {what}{replaced}", d.service, d.slices.len()),
        });
    }
    report
}

/// What the commands do to every read in watch mode from files: [`complete_with_notes`],
/// which can change nothing unless there are Pods or legacy Endpoints to derive from, or
/// `force` (`--derive-endpoints`).
pub struct Completion {
    pub force: bool,
}

impl crate::source::fileset::Finish for Completion {
    fn needed(&self, state: &ClusterState) -> bool {
        self.force || !state.extra.pods.is_empty() || !state.extra.endpoints.is_empty()
    }

    fn finish(&self, state: &mut ClusterState) {
        complete_with_notes(state, self.force);
    }
}

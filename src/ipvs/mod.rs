//! IPVS mode. `plan` is the pure planner (what kube-proxy's IPVS proxier would program),
//! `text` prints plans, and `netlink` is svcproxy's own IPVS generic-netlink client
//! (messages as pure types, a synchronous client behind a trait, an in-memory fake).

pub mod canary;
pub mod cleanup;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod grace;
pub mod ipset;
pub mod kernel_form;
pub mod link;
pub mod netlink;
pub mod memory;
pub mod observe;
pub mod partial;
pub mod plan;
pub mod proxier;
pub mod reconcile;
pub mod sync;
pub mod text;
pub mod values;
#[cfg(any(test, feature = "bench"))]
pub mod walk;

use crate::config::Config;

/// Plans every family the trackers hold (IPv4 first).
pub fn plan_all(cfg: &Config, trackers: &crate::track::Trackers) -> Vec<plan::FamilyState> {
    trackers
        .families
        .iter()
        .map(|t| {
            let (services, endpoints) = t.view();
            plan::plan(&plan::Context::new(cfg, t.family), services, endpoints)
        })
        .collect()
}

//! Endpoints the controllers would write, computed from the objects they read:
//! EndpointSlices from Pods, as the EndpointSlice controller builds them ([`pods`]), and
//! from legacy `v1/Endpoints`, as the EndpointSlice mirroring controller copies them
//! ([`mirror`]). Pure: values in, values out; [`complete`] fills a [`ClusterState`].

pub mod complete;
pub mod mirror;
pub mod pods;

use serde::Serialize;

use crate::model::EndpointSlice;
use crate::source::extra::ObjectRef;

pub use complete::{complete, complete_with_notes, Completion, Derivation, DerivedFrom, Report};
pub use mirror::{mirror, NotMirrored};
pub use pods::slices_from_pods;

/// What a model endpoint cannot hold but a slice endpoint carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EndpointInfo {
    /// `hostname` (a Pod's `spec.hostname` when its subdomain is the service's name).
    pub hostname: Option<String>,
    /// `targetRef`.
    pub target: Option<ObjectRef>,
}

/// A derived slice; `info[i]` goes with `slice.endpoints[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DerivedSlice {
    pub slice: EndpointSlice,
    pub info: Vec<EndpointInfo>,
}

//! Sources of cluster state. Each turns Kubernetes objects into model values
//! ([`crate::model`]) and nothing else: this is the only place that knows kube types.

pub mod apiserver;
pub mod client_metrics;
pub mod connect;
pub mod convert;
pub mod convert_extra;
pub mod events;
pub mod error;
pub mod extra;
pub mod file;
pub mod fileset;
mod json;
pub mod objects;
pub mod ratelimit;
mod reuse;
pub mod watch;
mod yaml;

pub use error::{FieldError, SourceError};
pub use file::{events_between, read_path, ClusterState, Note};
pub use objects::Objects;

/// Label whose presence hands a Service (and its slices) to another proxy.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Label the EndpointSlice controller puts on slices of headless services.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Label tying an EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

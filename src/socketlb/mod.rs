//! Socket-level load balancing (`--socket-lb`, docs/socket-lb.md): from the endpoint
//! selection every mode uses to the socket-LB maps. [`plan`] says which map entries a
//! family wants (pure); [`diff`] turns held entries and wanted ones into per-Service
//! changes that never leave a Service without backends mid-update (pure); [`apply`]
//! writes them through a [`apply::Table`], the pinned maps on a node; [`destroy`] closes
//! the sockets of the backends a change removed.

pub mod apply;
pub mod destroy;
pub mod diff;
pub mod plan;

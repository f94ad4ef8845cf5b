//! IPVS over generic netlink, without ipvsadm or libnl.
//!
//! - [`msg`]: the family's messages as values (bytes ⇄ [`msg::IpvsMessage`]); pure.
//! - [`crate::ipvs::values`] (above this module, so the planner need not import the wire
//!   code): what svcproxy wants (`VirtualServer`, `RealServer`) and what the kernel
//!   reports besides (`ObservedVirtualServer`, `ObservedRealServer`).
//! - [`convert`]: which message each `Op` becomes and how replies read; pure.
//! - [`Ipvs`]: the client trait; [`NetlinkIpvs`] talks to the kernel (and pipelines
//!   batches with [`Ipvs::apply`]), [`FakeIpvs`] is an in-memory kernel that logs calls.

mod client;
pub mod convert;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fake;
mod kernel;
pub mod msg;

#[cfg(test)]
mod convert_tests;
#[cfg(test)]
mod fake_tests;
#[cfg(test)]
mod msg_tests;

pub use client::{BatchReport, Failure, Ipvs};
pub use error::{Errno, Error};
#[cfg(any(test, feature = "testing"))]
pub use fake::FakeIpvs;
pub use kernel::{Direction, NetlinkIpvs, DEFAULT_WINDOW};

//! ctnetlink, the kernel's conntrack table over netlink: [`wire`] (the messages, pure,
//! checked against the bytes `conntrack` 1.4.7 and the kernel exchange, `testdata/`) and
//! [`socket`] (one socket: dumps streamed flow by flow, deletes and creates in batches).
//! No crate models ctnetlink's messages (`netlink-packet-netfilter` 0.4, the one on our
//! `netlink-packet-core`, has nflog and part of nf_tables only; docs/architecture.md), so
//! this is our own, on the same attribute framing as the nf_tables code
//! ([`crate::netfilter::nlattr`]).

pub mod socket;
pub mod wire;

pub use socket::{CtError, Ctnetlink, Deleted, DumpStats};
pub use wire::{Flow, Tuple};

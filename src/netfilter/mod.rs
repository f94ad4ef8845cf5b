//! The netfilter layer below the modes: what iptables mode, IPVS mode, the tracer and
//! cleanup all stand on. Rules are values here ([`rule`]): a chain and its words, written
//! to restore text by one writer and read back from the kernel's text by one parser;
//! [`canon`] is `iptables-save`'s canonical form, which desired rules are compared in;
//! [`apply`] runs `iptables-save`/`iptables-restore` behind the `Restorer` trait;
//! [`conntrack`] clears the UDP/SCTP flows a sync made stale, in every mode; [`phase`]
//! says which step of a sync failed (kube-proxy counts only a failed restore).

pub mod apply;
pub mod canon;
pub mod ctnetlink;
pub mod canary;
pub mod delta;
pub mod dump;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod jumps;
pub mod names;
pub mod nlattr;
pub mod nfacct;
pub mod rule;
pub mod table;
pub mod tableinfo;
pub mod target;
pub mod thin;
pub mod view;

pub use dump::{Dump, Op, TableDump};
pub use rule::{quote, Args, Chain, Rule};
pub use table::Table;
pub use target::Target;

//! iptables the tool, below the modes: what iptables mode, IPVS mode's iptables rules, the
//! tracer and cleanup all stand on. Rules are values here ([`rule`]): a chain and its
//! words, written to restore text by one writer and read back from the kernel's text by
//! one parser; [`canon`] is `iptables-save`'s canonical form, which desired rules are
//! compared in; [`apply`] runs `iptables-save`/`iptables-restore` behind the `Restorer`
//! trait; [`names`] holds kube-proxy's chain names; [`canary`] and [`tableinfo`] tell when
//! the kernel lost rules.

pub mod apply;
pub mod canary;
pub mod canon;
pub mod delta;
pub mod dump;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod jumps;
pub mod names;
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

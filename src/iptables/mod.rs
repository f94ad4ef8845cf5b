//! iptables mode: chain names, the pure renderer, restore text (both ways), and the
//! partial-sync planner. Nothing here spawns a process.

pub mod apply;
pub mod canary;
pub mod canon;
pub mod check;
pub mod conntrack;
pub mod cleanup;
pub mod delta;
pub mod fake;
pub mod incremental;
pub mod jumps;
pub mod nfacct;
pub mod names;
pub mod partial;
pub mod proxier;
pub mod render;
pub mod restore;
pub mod sync;

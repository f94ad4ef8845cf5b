//! The runner: when to sync (a pure schedule) and the loops that drive syncs from
//! sources (one-shot, or watching).

pub mod engine;
pub mod schedule;
pub mod watch;

pub use schedule::{Kind, Schedule, Timing};

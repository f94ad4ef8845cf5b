//! The runner: when to sync (a pure schedule), the engine (the trackers and the mode's
//! proxier) and the watch loop that owns it. A one-shot sync is `svcproxy sync`
//! (`cli::sync`), which does not use the runner.

pub mod engine;
pub mod schedule;
pub mod watch;

pub use schedule::{Kind, Schedule, Timing};

//! The runner: the engine (the trackers and the mode's proxier) and the watch loop that
//! owns it, syncing when [`crate::schedule`] says. A one-shot `svcproxy sync` (`cli::sync`) is
//! the engine's first (full) sync, without the loop.

pub mod cleanup;
pub mod engine;
pub mod live;
pub mod memory;
pub mod node;
pub mod socketlb;
pub mod watch;

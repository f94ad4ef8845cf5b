//! svcproxy: a Kubernetes node service proxy.
//!
//! Data flows one way, and the modules follow it:
//! `source` (files, API server) → `track` (change trackers) → `select` (endpoint
//! selection) → `iptables::render` / `ipvs::plan` / `nftables::render` (pure) → each
//! mode's sync → `netfilter` (the layer below the modes; the kernel, behind traits).
//! `schedule` says when, `runner` drives the engine, `serve` reports; `cli` is the edge.
//! docs/architecture.md has a line per module.
//!
//! Two features hold what the node binary does not need: `testing` (the fake kernels) and
//! `bench` (generated clusters and the benchmarks' shared code, `bench` and `gen`, used by
//! the svcproxy-bench binary). Every test target gets both through the crate's own
//! dev-dependency.

#[cfg(any(test, feature = "bench"))]
pub mod bench;
pub mod cli;
pub mod config;
pub mod conntrack;
pub mod derive;
pub mod driver;
#[cfg(any(test, feature = "bench"))]
pub mod gen;
pub mod intern;
pub mod iptables;
pub mod ipvs;
pub mod lint;
pub mod model;
pub mod net;
pub mod netfilter;
pub mod nftables;
pub mod node;
pub mod pipeline;
pub mod runner;
pub mod schedule;
pub mod select;
pub mod socketlb;
pub mod serve;
pub mod settings;
pub mod source;
pub mod trace;
pub mod track;
pub mod wiring;
pub mod xtables;

//! svcproxy: a Kubernetes node service proxy.
//!
//! Data flows one way, and the modules follow it:
//! `source` (files, API server) → `track` (change trackers) → `select` (endpoint
//! selection) → `iptables` / `ipvs` (pure renderers) → `*::apply` (the kernel).

pub mod bench;
pub mod cli;
pub mod config;
pub mod derive;
pub mod gen;
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
pub mod select;
pub mod serve;
pub mod settings;
pub mod source;
pub mod trace;
pub mod track;

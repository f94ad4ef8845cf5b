//! The socket-LB programs' kernel interface (docs/socket-lb.md), beside nf_tables and
//! ctnetlink: the clang-built object ([`object`]), the map keys and values as the programs
//! read them ([`maps`], pure), and loading, attaching to a cgroup v2 directory, pinning,
//! map reads and writes and cleanup ([`kernel`], through aya), and the socket iterators
//! that close sockets of removed backends ([`destroy`]).

pub mod destroy;
pub mod kernel;
pub mod maps;
pub mod object;

use std::path::PathBuf;

/// A failure of the socket-LB kernel interface, naming the object, map, program or path.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "svcproxy was built without clang: the socket-LB programs (bpf/socket_lb.c) are not in this binary; \
         install clang and libbpf-dev and rebuild to use --socket-lb"
    )]
    NotBuilt,
    #[error("loading the socket-LB object (maps pinned under {pins}): {}", chain(&**source))]
    Load { pins: PathBuf, source: Box<aya::EbpfError> },
    #[error("socket-LB program {program}: {what}: {}", chain(&**source))]
    Program { program: &'static str, what: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("socket-LB map {map}: {what}: {}", chain(&**source))]
    Map { map: &'static str, what: &'static str, source: Box<aya::maps::MapError> },
    #[error("closing sockets of removed backends is not possible on this kernel: {0}")]
    Unsupported(String),
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
}

/// An error and its causes on one line: aya's errors name the call, their sources the
/// kernel's errno (and the verifier's log).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        // Some of aya's messages already end with their source's.
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

//! The `svcproxy` binary: parse, run, print the error chain once, exit with a code.

use std::process::ExitCode;

use clap::Parser;
use svcproxy::cli::{self, kube_proxy, Cli};

fn main() -> ExitCode {
    limit_malloc_arenas();
    let result = if kube_proxy::invoked_as_kube_proxy(std::env::args_os().next().as_deref()) {
        kube_proxy::run(kube_proxy::KubeProxyCli::parse())
    } else {
        cli::run(Cli::parse())
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::from(cli::EXIT_OK);
            }
            eprintln!("svcproxy: error: {err:#}");
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

/// glibc gives threads that allocate their own malloc arenas (up to eight per core), and
/// memory freed in one arena is never reused by another: the render threads would build
/// the ruleset beside the garbage the parse left in the main arena. With two arenas a
/// 10k-service render peaks at 140 MiB rather than 148 MiB (BENCHMARKS.md). A
/// `MALLOC_ARENA_MAX` in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

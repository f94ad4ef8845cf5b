//! The `svcproxy` binary: parse, run, print the error chain once, exit with a code.

use std::process::ExitCode;

use clap::Parser;
use svcproxy::cli::{self, kube_proxy, Cli};

fn main() -> ExitCode {
    svcproxy::runner::memory::limit_arenas();
    let result = if kube_proxy::invoked_as_kube_proxy(std::env::args_os().next().as_deref()) {
        kube_proxy::run(kube_proxy::KubeProxyCli::parse())
    } else {
        cli::run(Cli::parse())
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if cli::is_broken_pipe(&err) {
                return ExitCode::from(cli::EXIT_OK);
            }
            eprintln!("svcproxy: error: {err:#}");
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

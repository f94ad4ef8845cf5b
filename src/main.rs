//! The `svcproxy` binary: parse, run, print the error chain once, exit with a code.

use std::process::ExitCode;

use clap::Parser;
use svcproxy::cli::{self, kube_proxy, Cli};
use svcproxy::runner::memory::{limit_arenas, Lifetime};

fn main() -> ExitCode {
    // Parsing starts no thread, so the arenas can still be chosen after it.
    let result = if kube_proxy::invoked_as_kube_proxy(std::env::args_os().next().as_deref()) {
        let args = kube_proxy::KubeProxyCli::parse();
        limit_arenas(Lifetime::Daemon);
        kube_proxy::run(args)
    } else {
        let args = Cli::parse();
        limit_arenas(args.lifetime());
        cli::run(args)
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

//! The `svcproxy` binary: parse, run, print the error chain once, exit with a code.

use std::process::ExitCode;

use clap::Parser;
use svcproxy::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli::run(cli) {
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

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

//! `svcproxy-bench`: the benchmark tooling, kept out of the node binary. It writes the
//! generated clusters every benchmark runs on and measures svcproxy on them; scripts/bench,
//! scripts/bench-kernel and scripts/bench-canary drive it (BENCHMARKS.md). Built with the
//! `bench` feature: `cargo build --release --features bench --bin svcproxy-bench`.

mod commands;
mod heap;
mod load;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

use std::process::ExitCode;

use clap::Parser;
use svcproxy::cli::{is_broken_pipe, EXIT_ERROR, EXIT_OK};

fn main() -> ExitCode {
    match commands::run(commands::Cli::parse()) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::from(EXIT_OK),
        Err(err) => {
            eprintln!("svcproxy-bench: error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

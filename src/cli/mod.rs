//! The command line: clap definitions and one `run` per command. Commands print, and
//! return an exit code; errors go up with context to `main`, which prints them once.

pub mod cleanup;
pub mod flags;
pub mod kube_proxy;
pub mod lint;
pub mod render;
pub mod sync;
pub mod trace;
pub mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use flags::ConfigFlags;

/// Exit codes, like diff(1): 0 = nothing to report, 1 = differences / changes pending,
/// 2 = error.
pub const EXIT_OK: u8 = 0;
pub const EXIT_CHANGES: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

const ABOUT: &str = "A Kubernetes node service proxy: kube-proxy-identical iptables and IPVS rules, faster and easier to inspect";

#[derive(Debug, Parser)]
#[command(name = "svcproxy", version, about = ABOUT, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the rules kube-proxy would program for a cluster state (no kernel access)
    #[command(after_help = render::EXAMPLES)]
    Render(Box<render::RenderArgs>),
    /// Program this node's rules from a cluster state (once); --dry-run shows the diff
    #[command(after_help = sync::EXAMPLES)]
    Sync(Box<sync::SyncArgs>),
    /// Show where a packet goes: chains, endpoints with probabilities, masquerade, drops
    #[command(after_help = trace::EXAMPLES)]
    Trace(Box<trace::TraceArgs>),
    /// Check a cluster dump as the API server's repair and endpoint controllers would
    #[command(after_help = lint::AFTER_HELP)]
    Lint(Box<lint::LintArgs>),
    /// Remove every rule and chain kube-proxy and svcproxy own (both families and backends, nftables tables too)
    Cleanup(cleanup::CleanupArgs),
    /// Print shell completions
    #[command(after_help = "Example:\n  svcproxy completions bash > /etc/bash_completion.d/svcproxy")]
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff)
    #[command(hide = true)]
    Man,
    /// Print every setting (flags, config-file fields) and what svcproxy does with it (Markdown)
    Settings,
}

impl Cli {
    /// Whether this command runs as a daemon (a watch mode) or once.
    pub fn lifetime(&self) -> crate::runner::memory::Lifetime {
        use crate::runner::memory::Lifetime;
        match &self.command {
            Command::Sync(args) if args.watch.watch => Lifetime::Daemon,
            _ => Lifetime::OneShot,
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) surfaces as an error `main` treats as success.
pub fn out(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Whether `err` is a closed stdout (`| head`), which a binary's `main` treats as success.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Render(args) => render::run(&args),
        Command::Sync(args) => sync::run(&args),
        Command::Trace(args) => trace::run(&args),
        Command::Lint(args) => lint::run(&args),
        Command::Cleanup(args) => cleanup::run(&args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "svcproxy", &mut std::io::stdout());
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Settings => {
            out(&crate::settings::reference())?;
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Man => {
            std::io::stdout().write_all(&man_page()?)?;
            Ok(ExitCode::from(EXIT_OK))
        }
    }
}

/// The man page, generated from the clap model (`man/svcproxy.1` is this, checked by a test).
pub fn man_page() -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let cmd = Cli::command();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("svcproxy-{}", sub.get_name());
        let sub = sub.clone().name(name);
        clap_mangen::Man::new(sub).render(&mut buf)?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use crate::runner::memory::Lifetime;
    use clap::Parser;

    #[test]
    fn only_a_watch_mode_is_a_daemon() {
        let life = |args: &[&str]| Cli::try_parse_from(std::iter::once("svcproxy").chain(args.iter().copied())).map(|c| c.lifetime()).unwrap();
        assert_eq!(life(&["sync", "--from", "x.yaml", "--watch"]), Lifetime::Daemon);
        assert_eq!(life(&["sync", "--from", "x.yaml"]), Lifetime::OneShot);
        assert_eq!(life(&["render", "--from", "x.yaml"]), Lifetime::OneShot);
    }
}

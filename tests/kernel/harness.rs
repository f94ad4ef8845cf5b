//! A tiny custom test runner for the real-kernel tests (`harness = false`).
//!
//! * Cases are `fn(&mut Ctx) -> CaseResult`, listed in `main.rs`.
//! * Positional argv words are substring filters (`--exact` makes them exact);
//!   `--skip WORD` excludes; cargo/libtest flags (`--nocapture`,
//!   `--test-threads N`, `--color X`, `-q`, ...) are accepted and ignored.
//!   `--list` prints the cases like libtest does.
//! * A case returns `Err(CaseError::Skip(reason))` (usually via
//!   [`Ctx::require`]) when it cannot run here: not root, a tool is missing.
//!   Under CI (`CI` set to anything but empty, `0` or `false`: tests/support/ci.rs)
//!   a skip counts as a failure.
//! * Each case runs in its own thread with a hard time limit (default 120 s,
//!   `SVCPROXY_KERNEL_CASE_TIMEOUT=<secs>` overrides). On expiry the case is
//!   reported as failed and the `on_timeout` hook tears down what the case
//!   left behind (the case's own Drop guards still run whenever it ends).
//! * Output: one `test NAME ... ok|FAILED|SKIPPED (reason)` line per case,
//!   failure details, and a last line `kernel: N passed, N failed, N skipped`.
//!   Exit status 1 when anything failed.
//!
//! Env: `CI`, `SVCPROXY_KERNEL_FORCE_SKIP=1` (makes `require` skip, to
//! exercise the skip path without dropping root), `SVCPROXY_KERNEL_VERBOSE=1`
//! (print every case's log, also enabled by `--nocapture`).

#![allow(dead_code)] // a helper library: not every helper is used by every test

#[path = "../support/ci.rs"]
mod ci;

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a case did not pass.
#[derive(Debug, Clone)]
pub enum CaseError {
    Fail(String),
    Skip(String),
}

pub type CaseResult = Result<(), CaseError>;

/// `return Err(skip("why"))` from a case that cannot run here.
pub fn skip(reason: impl Into<String>) -> CaseError {
    CaseError::Skip(reason.into())
}

impl From<String> for CaseError {
    fn from(s: String) -> Self {
        CaseError::Fail(s)
    }
}
impl From<&str> for CaseError {
    fn from(s: &str) -> Self {
        CaseError::Fail(s.to_string())
    }
}
impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseError::Fail(s) => write!(f, "{s}"),
            CaseError::Skip(s) => write!(f, "skipped: {s}"),
        }
    }
}

/// `println!` that never panics: a closed stdout (`cargo test ... | head`)
/// must not kill the runner before the labs are torn down.
#[macro_export]
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)+);
    }};
}

/// `print!` counterpart of [`say!`] (flushes).
#[macro_export]
macro_rules! say_nonl {
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let mut o = std::io::stdout();
        let _ = write!(o, $($arg)+);
        let _ = o.flush();
    }};
}

/// `ensure!(cond, "format", args..)`: fail the case with the message unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::harness::CaseError::Fail(format!(
                "{} (at {}:{}: `{}`)", format!($($arg)+), file!(), line!(), stringify!($cond)
            )));
        }
    };
}

/// One named test case.
#[derive(Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub run: fn(&mut Ctx) -> CaseResult,
    /// Overrides the default per-case time limit.
    pub timeout: Option<Duration>,
}

impl Case {
    pub const fn new(name: &'static str, run: fn(&mut Ctx) -> CaseResult) -> Case {
        Case {
            name,
            run,
            timeout: None,
        }
    }
    pub const fn with_timeout(mut self, t: Duration) -> Case {
        self.timeout = Some(t);
        self
    }
}

/// Handed to every case: its name, a log (printed on failure or when verbose)
/// and the `require` check.
pub struct Ctx {
    pub name: String,
    pub started: Instant,
    log: Arc<Mutex<Vec<String>>>,
    verbose: bool,
}

pub const FORCE_SKIP_ENV: &str = "SVCPROXY_KERNEL_FORCE_SKIP";

impl Ctx {
    /// Append a line to the case log (kept, printed on failure / when verbose).
    pub fn log(&self, msg: impl AsRef<str>) {
        let line = format!(
            "[{:>6.2}s] {}",
            self.started.elapsed().as_secs_f64(),
            msg.as_ref()
        );
        if self.verbose {
            say!("    {line}");
        }
        if let Ok(mut l) = self.log.lock() {
            l.push(line);
        }
    }

    /// Skip unless we are root and every tool is on PATH (or in an sbin dir).
    /// `SVCPROXY_KERNEL_FORCE_SKIP=1` forces the skip (simulates a non-root run).
    pub fn require(&self, tools: &[&str]) -> CaseResult {
        if env_true(FORCE_SKIP_ENV) {
            return Err(CaseError::Skip(format!(
                "{FORCE_SKIP_ENV}=1: simulated unprivileged run"
            )));
        }
        if !is_root() {
            return Err(CaseError::Skip(
                "needs root (network namespaces, iptables)".into(),
            ));
        }
        let missing: Vec<&str> = tools
            .iter()
            .copied()
            .filter(|t| which(t).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(CaseError::Skip(format!(
                "missing tool(s): {} (apt-get install -y iptables ipset iproute2 conntrack procps)",
                missing.join(", ")
            )));
        }
        Ok(())
    }
}

/// Is this environment variable set to a truthy value (`1`, `true`, `yes`)?
pub fn env_true(name: &str) -> bool {
    matches!(
        std::env::var(name)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref(),
        Ok("1") | Ok("true") | Ok("yes") | Ok("on")
    )
}

/// Effective uid 0? (std only: read /proc/self/status.)
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Find an executable on PATH, falling back to the sbin directories (cargo's
/// PATH for non-login shells often lacks /usr/sbin, where iptables lives).
pub fn which(tool: &str) -> Option<PathBuf> {
    if tool.contains('/') {
        let p = PathBuf::from(tool);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [
        "/usr/local/sbin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/bin",
        "/bin",
    ];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| is_executable(p))
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runner options.
pub struct Options {
    /// Name used in the closing line (`<suite>: N passed, ...`).
    pub suite: &'static str,
    /// Called after a case exceeded its time limit, to tear down whatever it
    /// left (e.g. kill processes in and delete the case's namespaces).
    pub on_timeout: fn(),
    /// Called once before the closing line (final safety net; returns lines
    /// to report, e.g. leftovers it had to clean up; non-empty = failure).
    pub at_exit: fn() -> Vec<String>,
    pub default_timeout: Duration,
}

enum Verdict {
    Pass,
    Fail(String),
    Skip(String),
}

struct Args {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    ignored_only: bool,
    nocapture: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        filters: vec![],
        skips: vec![],
        exact: false,
        list: false,
        ignored_only: false,
        nocapture: false,
    };
    // libtest flags that take a separate value; the value must not become a filter.
    const WITH_VALUE: &[&str] = &[
        "--test-threads",
        "--color",
        "--format",
        "--logfile",
        "-Z",
        "--shuffle-seed",
    ];
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--skip" => {
                if let Some(v) = it.next() {
                    a.skips.push(v)
                }
            }
            "--exact" => a.exact = true,
            "--list" => a.list = true,
            "--ignored" => a.ignored_only = true,
            "--nocapture" | "--no-capture" | "--show-output" => a.nocapture = true,
            s if WITH_VALUE.contains(&s) => {
                it.next();
            }
            s if s.starts_with('-') => {} // --quiet, --test-threads=2, --include-ignored, ...
            _ => a.filters.push(arg),
        }
    }
    a
}

/// Run the selected cases; returns the process exit code.
pub fn run(cases: &[Case], opts: Options) -> i32 {
    let args = parse_args();
    let selected: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| {
            let m = |f: &String| {
                if args.exact {
                    c.name == f
                } else {
                    c.name.contains(f.as_str())
                }
            };
            (args.filters.is_empty() || args.filters.iter().any(m))
                && !args.skips.iter().any(|s| c.name.contains(s.as_str()))
        })
        .collect();
    if args.list {
        if !args.ignored_only {
            for c in &selected {
                say!("{}: test", c.name);
            }
        }
        say!();
        say!(
            "{} tests, 0 benchmarks",
            if args.ignored_only { 0 } else { selected.len() }
        );
        return 0;
    }
    let selected = if args.ignored_only { vec![] } else { selected };
    let ci = ci::under_ci();
    let verbose = args.nocapture || env_true("SVCPROXY_KERNEL_VERBOSE");
    let default_timeout = std::env::var("SVCPROXY_KERNEL_CASE_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(opts.default_timeout);

    say!();
    say!(
        "running {} kernel test case(s){}",
        selected.len(),
        if ci {
            " (CI: a skipped case counts as a FAILURE)"
        } else {
            ""
        }
    );
    let t_all = Instant::now();
    let (mut passed, mut failed, mut skipped) = (0u32, 0u32, 0u32);
    let mut failures: Vec<(String, String, Vec<String>)> = vec![];
    let mut ci_skips: Vec<String> = vec![];

    for case in &selected {
        let limit = case.timeout.unwrap_or(default_timeout);
        say_nonl!("test {} ... ", case.name);
        if verbose {
            say!();
        }
        let _ = std::io::stdout().flush();
        let t0 = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (verdict, _timed_out) = run_one(case, limit, log.clone(), verbose, opts.on_timeout);
        let secs = t0.elapsed().as_secs_f64();
        if verbose {
            say_nonl!("test {} ... ", case.name);
        }
        let log_lines = log.lock().map(|l| l.clone()).unwrap_or_default();
        match verdict {
            Verdict::Pass => {
                passed += 1;
                say!("ok [{secs:.2}s]");
            }
            Verdict::Skip(reason) if ci => {
                failed += 1;
                say!("FAILED (SKIPPED under CI: {reason})");
                ci_skips.push(case.name.to_string());
                failures.push((
                    case.name.to_string(),
                    format!("skipped under CI, which forbids skips: {reason}"),
                    vec![],
                ));
            }
            Verdict::Skip(reason) => {
                skipped += 1;
                say!("SKIPPED ({reason})");
            }
            Verdict::Fail(msg) => {
                failed += 1;
                say!("FAILED [{secs:.2}s]");
                failures.push((case.name.to_string(), msg, log_lines));
            }
        }
    }

    let leftovers = (opts.at_exit)();
    if !leftovers.is_empty() {
        failed += 1;
        failures.push(("<teardown at exit>".into(), leftovers.join("\n"), vec![]));
    }

    if !failures.is_empty() {
        say!();
        say!("failures:");
        for (name, msg, log) in &failures {
            say!();
            say!("---- {name} ----");
            for l in msg.lines() {
                say!("  {l}");
            }
            if !log.is_empty() && !verbose {
                say!("  log:");
                for l in log {
                    say!("    {l}");
                }
            }
        }
    }
    if !ci_skips.is_empty() {
        say!();
        say!(
            "!!!!!! CI: {} case(s) were SKIPPED and are counted as FAILED: {}",
            ci_skips.len(),
            ci_skips.join(", ")
        );
        say!("!!!!!! the kernel tests need root, iproute2, iptables (nft+legacy), conntrack");
    }
    say!();
    say!(
        "kernel tests finished in {:.2}s",
        t_all.elapsed().as_secs_f64()
    );
    say!(
        "{}: {passed} passed, {failed} failed, {skipped} skipped",
        opts.suite
    );
    let _ = std::io::stdout().flush();
    if failed > 0 {
        1
    } else {
        0
    }
}

/// Run one case in its own thread; returns (verdict, timed_out).
fn run_one(
    case: &Case,
    limit: Duration,
    log: Arc<Mutex<Vec<String>>>,
    verbose: bool,
    on_timeout: fn(),
) -> (Verdict, bool) {
    let (tx, rx) = mpsc::channel::<CaseResult>();
    let f = case.run;
    let name = case.name.to_string();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut ctx = Ctx {
                name,
                started: Instant::now(),
                log,
                verbose,
            };
            let r = f(&mut ctx);
            let _ = tx.send(r);
        });
    let handle = match handle {
        Ok(h) => h,
        Err(e) => {
            return (
                Verdict::Fail(format!("could not spawn the case thread: {e}")),
                false,
            )
        }
    };
    match rx.recv_timeout(limit) {
        Ok(r) => {
            let _ = handle.join();
            (to_verdict(r), false)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The thread ended without sending: it panicked (Drop guards ran during unwinding).
            let msg = match handle.join() {
                Err(p) => panic_message(&p),
                Ok(()) => "case thread ended without a result".into(),
            };
            (Verdict::Fail(format!("panicked: {msg}")), false)
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // A thread cannot be killed. The on_timeout hook tears down what the
            // case left (kills the processes in its namespaces, deletes them),
            // which makes its pending operations fail fast; then give the thread
            // a bounded grace period to finish and run its own Drop guards.
            on_timeout();
            let grace = Instant::now();
            let mut note = "its thread did not finish within 10s of the teardown and was abandoned";
            while grace.elapsed() < Duration::from_secs(10) {
                if handle.is_finished() {
                    note = "its thread finished after the emergency teardown";
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (
                Verdict::Fail(format!(
                    "TIMED OUT after {:.0}s (hard per-case limit); {note}",
                    limit.as_secs_f64()
                )),
                true,
            )
        }
    }
}

fn to_verdict(r: CaseResult) -> Verdict {
    match r {
        Ok(()) => Verdict::Pass,
        Err(CaseError::Fail(m)) => Verdict::Fail(m),
        Err(CaseError::Skip(m)) => Verdict::Skip(m),
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

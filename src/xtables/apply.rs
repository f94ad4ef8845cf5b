//! The only code that runs iptables: `iptables-save` to read what the kernel holds and
//! `iptables-restore --noflush --counters` to change it, for one backend (nft or legacy)
//! and both families, behind the [`Restorer`] trait (with [`super::fake::FakeIptables`]
//! for tests).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::net::IpFamily;
use super::tableinfo::{ProbeError, TableInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Nft,
    Legacy,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
        }
    }

    /// `iptables-nft-restore`, `ip6tables-legacy-save`, …
    pub fn binary(self, family: IpFamily, tool: &str) -> String {
        let base = if family.is_v6() { "ip6tables" } else { "iptables" };
        if tool.is_empty() {
            format!("{base}-{}", self.name())
        } else {
            format!("{base}-{}-{tool}", self.name())
        }
    }
}

/// Runs `cmd` with its output captured and `stdin` written to it (`None`: no input). A
/// write error means the process died early; its exit status says why. (nft and ipset
/// run through it; `iptables-restore`, which streams its input, spawns on its own.)
pub fn run_piped(cmd: &mut Command, stdin: Option<&str>) -> std::io::Result<std::process::Output> {
    let input = if stdin.is_some() { Stdio::piped() } else { Stdio::null() };
    let mut child = cmd.stdin(input).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    child.wait_with_output()
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("cannot run {binary}: {error}")]
    Spawn {
        binary: String,
        error: std::io::Error,
    },
    #[error("iptables-restore rejected table {table}, line {line} ({text:?}): {message}")]
    Rejected { table: String, line: usize, text: String, message: String },
    #[error("{binary} failed: {message}")]
    Failed { binary: String, message: String },
}

/// Restore input written piece by piece to the sink it is given ([`Restorer::restore_from`]).
pub type Input<'a> = dyn Fn(&mut dyn FnMut(&str)) + 'a;

/// Reads and writes one backend's rules.
pub trait Restorer {
    fn backend(&self) -> Backend;
    /// `iptables-save -t TABLE` output.
    fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError>;
    /// [`Restorer::save`]'s output handed to `each` line by line (without newlines). The
    /// real binary's output is read as it comes, never held whole (at 10,000 services
    /// the nat table's is ~45 MB); the default reads it whole first.
    fn save_lines(&mut self, family: IpFamily, table: &str, each: &mut dyn FnMut(&str)) -> Result<(), RestoreError> {
        self.save(family, table)?.lines().for_each(each);
        Ok(())
    }
    /// `iptables-save` of every table that exists (creating none).
    fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError>;
    /// Applies restore input atomically (`--noflush --counters`, waiting for the xtables lock).
    fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError>;
    /// [`Restorer::restore`] of the input `input` hands to its sink piece by piece.
    /// `input` may be called more than once (to quote a refused line). The real binaries
    /// are fed the pieces as they come, so the input is never held whole (at 10,000
    /// services a first sync's is ~60 MB); the default collects them.
    fn restore_from(&mut self, family: IpFamily, input: &Input) -> Result<(), RestoreError> {
        let mut text = String::new();
        input(&mut |piece| text.push_str(piece));
        self.restore(family, &text)
    }
    /// `iptables -w -t TABLE -C CHAIN RULE…`: whether the rule is there (false also when
    /// its chain or table is not). The cheapest query that reads one rule: on iptables-nft
    /// it fetches that one chain (BENCHMARKS.md: the canary check).
    fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError>;
    /// The kernel's summary of `table` (entry count, size, hook offsets), read without
    /// copying a rule; only iptables-legacy has one ([`super::tableinfo`]).
    fn table_info(&mut self, _family: IpFamily, _table: &str) -> Result<TableInfo, ProbeError> {
        Err(ProbeError::Unsupported)
    }
}

/// What the kernel holds could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Save(#[from] RestoreError),
    #[error("cannot parse iptables-save output of table {table}: {error}")]
    Parse { table: String, error: super::dump::ParseError },
}

/// `iptables-save -t TABLE` of one family's `tables`, each read and parsed alone, in one
/// dump in that order; a table the kernel does not have is left out. What every mode's
/// comparison with the kernel reads.
pub fn read(r: &mut dyn Restorer, family: IpFamily, tables: &[&str]) -> Result<super::Dump, ReadError> {
    let mut live = super::Dump::default();
    for table in tables {
        let mut parser = super::dump::Parser::default();
        // The first line that cannot be read stops the parse; the rest is drained.
        let mut failed = None;
        r.save_lines(family, table, &mut |line| {
            if failed.is_none() {
                failed = parser.line(line).err();
            }
        })?;
        let parsed = match failed {
            Some(error) => Err(error),
            None => parser.finish(),
        };
        let mut dump = parsed.map_err(|error| ReadError::Parse { table: table.to_string(), error })?;
        if let Some(t) = dump.tables.remove(*table) {
            live.order.push(table.to_string());
            live.tables.insert(table.to_string(), t);
        }
    }
    Ok(live)
}

/// A binary's output as text, without a copy when it is UTF-8 (it always is: rule text).
fn text_of(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Runs the real binaries.
#[derive(Debug, Clone)]
pub struct ExecRestorer {
    pub backend: Backend,
    /// Seconds to wait for the xtables lock (`-w`).
    pub lock_wait_secs: u32,
}

impl ExecRestorer {
    pub fn new(backend: Backend) -> Self {
        ExecRestorer { backend, lock_wait_secs: 5 }
    }
}

impl Restorer for ExecRestorer {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn save(&mut self, family: IpFamily, table: &str) -> Result<String, RestoreError> {
        let mut text = String::new();
        self.save_lines(family, table, &mut |line| {
            text.push_str(line);
            text.push('\n');
        })?;
        Ok(text)
    }

    fn save_lines(&mut self, family: IpFamily, table: &str, each: &mut dyn FnMut(&str)) -> Result<(), RestoreError> {
        let binary = self.backend.binary(family, "save");
        let spawn = |error| RestoreError::Spawn { binary: binary.clone(), error };
        // stderr is read after stdout: iptables-save writes a line or two there at most,
        // far below a pipe's buffer, so it cannot block on it while stdout is read.
        let mut child = Command::new(&binary).args(["-t", table]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(spawn)?;
        let mut read = Ok(());
        if let Some(stdout) = child.stdout.take() {
            let mut reader = std::io::BufReader::with_capacity(1 << 16, stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match std::io::BufRead::read_until(&mut reader, b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        each(text.strip_suffix('\n').unwrap_or(&text));
                    }
                    Err(error) => {
                        read = Err(error);
                        break;
                    }
                }
            }
        }
        let out = child.wait_with_output().map_err(spawn)?;
        read.map_err(spawn)?;
        if !out.status.success() {
            let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // A table that was never created: nothing to read.
            if message.contains("does not exist") {
                return Ok(());
            }
            return Err(RestoreError::Failed { binary, message });
        }
        Ok(())
    }

    fn save_all(&mut self, family: IpFamily) -> Result<String, RestoreError> {
        let binary = self.backend.binary(family, "save");
        let out = Command::new(&binary).output().map_err(|error| RestoreError::Spawn { binary: binary.clone(), error })?;
        if !out.status.success() {
            return Err(RestoreError::Failed { binary, message: String::from_utf8_lossy(&out.stderr).trim().to_string() });
        }
        Ok(text_of(out.stdout))
    }

    fn restore(&mut self, family: IpFamily, text: &str) -> Result<(), RestoreError> {
        self.restore_from(family, &|sink| sink(text))
    }

    fn restore_from(&mut self, family: IpFamily, input: &Input) -> Result<(), RestoreError> {
        let binary = self.backend.binary(family, "restore");
        let wait = self.lock_wait_secs.to_string();
        let mut child = Command::new(&binary)
            .args(["-w", &wait, "--noflush", "--counters"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| RestoreError::Spawn { binary: binary.clone(), error })?;
        if let Some(stdin) = child.stdin.take() {
            let mut stdin = std::io::BufWriter::with_capacity(1 << 16, stdin);
            // A write error means the process died early; its exit status says why, so
            // the rest of the input is not written.
            let mut broken = false;
            input(&mut |piece| {
                if !broken {
                    broken = stdin.write_all(piece.as_bytes()).is_err();
                }
            });
            let _ = stdin.flush();
        }
        let out = child.wait_with_output().map_err(|error| RestoreError::Spawn { binary: binary.clone(), error })?;
        if out.status.success() {
            return Ok(());
        }
        // Refused: the input again, whole this time, to quote the line it names.
        let mut text = String::new();
        input(&mut |piece| text.push_str(piece));
        Err(rejected(&text, &String::from_utf8_lossy(&out.stderr), &binary))
    }

    fn check(&mut self, family: IpFamily, table: &str, chain: &str, rule: &[&str]) -> Result<bool, RestoreError> {
        let binary = self.backend.binary(family, "");
        let wait = self.lock_wait_secs.to_string();
        let out = Command::new(&binary)
            .args(["-w", &wait, "-t", table, "-C", chain])
            .args(rule)
            .output()
            .map_err(|error| RestoreError::Spawn { binary: binary.clone(), error })?;
        // 1: no such rule, chain or table (both backends); anything else is a failure to ask.
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(RestoreError::Failed { binary, message: String::from_utf8_lossy(&out.stderr).trim().to_string() }),
        }
    }

    fn table_info(&mut self, family: IpFamily, table: &str) -> Result<TableInfo, ProbeError> {
        match self.backend {
            Backend::Legacy => super::tableinfo::probe(family, table),
            Backend::Nft => Err(ProbeError::Unsupported),
        }
    }
}

/// At most this many lines of the tool's complaint are kept.
const MESSAGE_LINES: usize = 20;
/// Lines of input shown before and after the failing one.
const CONTEXT: usize = 3;

/// Maps iptables-restore's complaint (`line N failed`, `line N: …`) to the input line, in
/// an error a person reads in one screen: the failing line with a few lines around it, or,
/// when the kernel refused a whole table at COMMIT (iptables-legacy checks a table only
/// as it commits it), the table's size and what to try — never the whole table.
pub fn rejected(input: &str, stderr: &str, binary: &str) -> RestoreError {
    let message = capped(stderr.trim());
    let Some(n) = failing_line(&message).filter(|n| *n >= 1) else {
        return RestoreError::Failed { binary: binary.to_string(), message };
    };
    let lines: Vec<&str> = input.lines().collect();
    let text = lines.get(n - 1).copied().unwrap_or("").to_string();
    let start = lines[..(n - 1).min(lines.len())].iter().rposition(|l| l.starts_with('*'));
    let table = start.and_then(|i| lines[i].strip_prefix('*')).unwrap_or("").to_string();
    // The error names the line already: a complaint that says only that is not repeated.
    let said = if says_only_the_line(&message, n) { String::new() } else { format!("{message}\n") };
    let message = if text == "COMMIT" {
        let body = &lines[start.map_or(0, |i| i + 1)..(n - 1).min(lines.len())];
        let rules = body.iter().filter(|l| l.starts_with('-')).count();
        let chains = body.iter().filter(|l| l.starts_with(':')).count();
        format!(
            "{said}the kernel refused table {table} as a whole when it was committed ({rules} rules in {chains} chains): {binary} checks a table only at COMMIT, so it cannot name the rule. \
             Usual causes: a match or target module this kernel lacks, a jump to a chain the input does not declare, or a table too large for the legacy backend (try --iptables-backend nft)."
        )
    } else {
        format!("{said}{}", around(&lines, n))
    };
    RestoreError::Rejected { table, line: n, text, message }
}

/// Whether a tool's complaint is only `[prog: ]line N failed` for the line `n`.
fn says_only_the_line(message: &str, n: usize) -> bool {
    let rest = message.rsplit_once(": ").map_or(message, |(_, r)| r);
    !message.contains('\n') && rest == format!("line {n} failed")
}

/// Input line `n` (1-based) of `lines` marked `>`, with [`CONTEXT`] numbered lines each
/// side: what every refused-input error (iptables-restore, nft) shows.
pub(crate) fn around(lines: &[&str], n: usize) -> String {
    let from = n.saturating_sub(CONTEXT + 1);
    let to = (n + CONTEXT).min(lines.len());
    let context: Vec<String> = (from..to).map(|i| format!("{} {:>6} | {}", if i + 1 == n { ">" } else { " " }, i + 1, lines[i])).collect();
    context.join("\n")
}

/// The first lines of a tool's complaint, with a count of the rest.
pub(crate) fn capped(message: &str) -> String {
    let total = message.lines().count();
    if total <= MESSAGE_LINES {
        return message.to_string();
    }
    let head: Vec<&str> = message.lines().take(MESSAGE_LINES).collect();
    format!("{}\n… ({} more lines)", head.join("\n"), total - MESSAGE_LINES)
}

fn failing_line(message: &str) -> Option<usize> {
    for part in message.split("line ").skip(1) {
        let digits: String = part.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = digits.parse() {
            return Some(n);
        }
    }
    None
}

/// Picks the backend the way kube-proxy's image does (iptables-wrapper): the one whose
/// mangle table holds kubelet's KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY chain, else the
/// one holding more rules, nft on a tie (and when neither binary answers).
pub fn detect_backend() -> Backend {
    // Without `-t`, iptables-save lists only tables that exist: probing must not create
    // legacy tables on an nft host (or the reverse).
    let all = |b: Backend| -> String {
        Command::new(b.binary(IpFamily::V4, "save"))
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let dumps = [all(Backend::Nft), all(Backend::Legacy)];
    for (b, dump) in [Backend::Nft, Backend::Legacy].into_iter().zip(&dumps) {
        if dump.contains("KUBE-IPTABLES-HINT") || dump.contains("KUBE-KUBELET-CANARY") {
            return b;
        }
    }
    let count = |d: &str| d.lines().filter(|l| l.starts_with("-A")).count();
    if count(&dumps[1]) > count(&dumps[0]) {
        Backend::Legacy
    } else {
        Backend::Nft
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_at_commit_gives_the_tables_size_and_what_to_try_never_its_rules() {
        let mut input = String::from("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n");
        for i in 0..5000 {
            input.push_str(&format!("-A KUBE-SERVICES -d 10.0.{}.{}/32 -j KUBE-NODEPORTS\n", i / 250, i % 250));
        }
        input.push_str("COMMIT\n");
        let commit = input.lines().count();
        let e = rejected(&input, &format!("iptables-restore: line {commit} failed\n"), "iptables-legacy-restore").to_string();
        assert!(e.contains("refused table nat as a whole") && e.contains("(5000 rules in 2 chains)") && e.contains("--iptables-backend nft"), "{e}");
        assert!(e.lines().count() < 10 && !e.contains("-A KUBE-SERVICES"), "one screen, no rules: {e}");
        assert_eq!(e.matches(&format!("line {commit}")).count(), 1, "the line is named once: {e}");
    }

    #[test]
    fn a_rejected_line_is_shown_with_its_neighbours_and_a_long_complaint_is_cut() {
        let input: String = (1..=20).map(|i| format!("-A X -j R{i}\n")).collect::<String>();
        let input = format!("*filter\n:X - [0:0]\n{input}COMMIT\n");
        let e = rejected(&input, "line 12: bad\n", "iptables-nft-restore").to_string();
        assert!(e.contains(">     12 | -A X -j R10") && e.contains("       9 | -A X -j R7") && e.contains("      15 | -A X -j R13"), "{e}");
        assert!(!e.contains("R14") && !e.contains("R6\n"), "three lines each side: {e}");
        let noisy: String = (0..500).map(|i| format!("warning {i}\n")).collect();
        let e = rejected("*nat\nCOMMIT\n", &noisy, "iptables-nft-restore").to_string();
        assert!(e.lines().count() <= 22 && e.contains("(480 more lines)"), "{e}");
    }

    #[test]
    fn restore_errors_name_the_table_and_line() {
        let input = "*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j KUBE-NOPE\nCOMMIT\n";
        let e = rejected(input, "iptables-restore v1.8.9 (nf_tables): \nline 6: RULE_APPEND failed (No such file or directory): rule in chain KUBE-SERVICES\n", "iptables-nft-restore");
        match e {
            RestoreError::Rejected { table, line, text, .. } => {
                assert_eq!((table.as_str(), line, text.as_str()), ("nat", 6, "-A KUBE-SERVICES -j KUBE-NOPE"));
            }
            other => panic!("{other:?}"),
        }
        let e = rejected(input, "iptables-restore: line 6 failed\n", "iptables-legacy-restore");
        assert!(matches!(e, RestoreError::Rejected { line: 6, .. }));
    }
}

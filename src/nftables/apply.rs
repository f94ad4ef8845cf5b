//! The only code that runs `nft`: one transaction per call (`nft -f -`, atomic: the
//! kernel takes all of it or none), the live `kube-proxy` table as `nft list` prints it,
//! the names of its chains and sets, and how the kernel would list a ruleset (applied in
//! a scratch network namespace, so nothing of the node's changes) — behind the
//! [`NftWrite`] and [`NftRead`] traits ([`Nft`]: both), with [`super::fake::FakeNft`]
//! for tests. The binary, as kube-proxy's knftables runs it; on the node the
//! transactions go over netlink instead ([`super::netlink`], unless `--nft-netlink=false`).

use std::process::Command;

use super::delta::LiveTable;
use super::model::{NftFamily, Script};
use crate::net::IpFamily;
use super::names::TABLE;
use crate::xtables::apply::{around, capped, run_piped};

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("cannot run {binary}: {error}")]
    Spawn { binary: String, error: std::io::Error },
    #[error("nft refused the transaction at line {line} ({text:?}); nothing of it was applied: {message}")]
    Rejected { line: usize, text: String, message: String },
    /// The kernel refused a netlink batch ([`super::netlink`]): the message of that line.
    #[error("the kernel refused the transaction at line {line} ({text:?}), sent as a netlink batch; nothing of it was applied: {message}")]
    Refused { line: usize, text: String, message: String },
    #[error("{command} failed: {message}")]
    Failed { command: String, message: String },
}

/// The chains and sets (not maps) a table holds, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub chains: Vec<String>,
    pub sets: Vec<String>,
}

/// Which writer applied a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `nft -f -`.
    Nft,
    /// One nf_tables netlink batch ([`super::netlink`]).
    Netlink,
}

/// What a transaction is to a full write of a table (a full sync's transactions; after a
/// cold start, the conversion's batches too), which a writer may record until
/// [`NftWrite::full_sync_done`] (netlink: the anonymous sets it creates, [`super::anonrecord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Not part of one (a partial sync's transaction, cleanup's): it ends any under way.
    Alone,
    /// A full sync's first transaction: a full write begins.
    First,
    /// A full write's next transaction (the conversion's begins one when none is under way).
    Next,
}

/// Writes one node's nftables, a transaction at a time (atomic: the kernel takes all of
/// it or none).
pub trait NftWrite {
    /// Runs `text` as one transaction; says which writer applied it.
    fn run(&mut self, text: &str, part: Part) -> Result<Via, NftError>;
    /// [`NftWrite::run`] of a transaction svcproxy wrote: its text, unless the writer
    /// encodes the rules' values themselves ([`super::netlink::NetlinkNft`]).
    fn run_script(&mut self, script: &Script<'_>, part: Part) -> Result<Via, NftError>;
    /// How long (in lines of `nft -f` text) a full sync's batches may be
    /// ([`super::chunked`]), when each transaction costs only its own commit; `None`
    /// (`nft -f`, which reads the whole table before every run): two transactions.
    fn batch_lines(&self) -> Option<usize>;
    /// The full write of `family` sent its last transaction ([`Part`]): a writer that
    /// records what it created does it now ([`super::netlink::NetlinkNft`]).
    fn full_sync_done(&mut self, family: IpFamily);
}

/// Reads one node's `kube-proxy` tables.
pub trait NftRead {
    /// `nft list table FAMILY kube-proxy`; `None` when there is no such table.
    fn list(&mut self, family: IpFamily) -> Result<Option<String>, NftError>;
    /// The `kube-proxy` table's chains and sets; `None` when there is no such table.
    fn names(&mut self, family: IpFamily) -> Result<Option<Names>, NftError>;
    /// How the kernel lists the `kube-proxy` table that `text` creates from nothing
    /// (applied in a scratch network namespace: the node's rules are not touched).
    fn canonical(&mut self, family: IpFamily, text: &str) -> Result<String, NftError>;
    /// A full sync's read: the table's names ([`NftRead::names`]; `None`: no table) and,
    /// when the client reads the table rule by rule (netlink: [`super::delta`]), its live
    /// contents (`None`: not read, and every chain is refilled).
    fn read_for_sync(&mut self, family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError>;
}

/// One node's nftables, read and written (a sync does both).
pub trait Nft: NftRead + NftWrite + Send {}

impl<T: NftRead + NftWrite + Send> Nft for T {}

/// Runs the real `nft`.
#[derive(Debug, Clone)]
pub struct ExecNft {
    pub binary: String,
}

impl Default for ExecNft {
    fn default() -> Self {
        ExecNft { binary: "nft".into() }
    }
}

impl ExecNft {
    fn output(&self, args: &[&str], stdin: Option<&str>) -> Result<std::process::Output, NftError> {
        run_piped(Command::new(&self.binary).args(args), stdin).map_err(|error| NftError::Spawn { binary: self.binary.clone(), error })
    }

    /// `nft list …` output, or `None` when nft says the table is not there.
    fn list_cmd(&self, args: &[&str]) -> Result<Option<String>, NftError> {
        let out = self.output(args, None)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("No such file or directory") {
                return Ok(None);
            }
            return Err(NftError::Failed { command: format!("{} {}", self.binary, args.join(" ")), message: capped(stderr.trim()) });
        }
        Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
    }
}

impl NftWrite for ExecNft {
    fn run(&mut self, text: &str, _: Part) -> Result<Via, NftError> {
        let out = self.output(&["-f", "-"], Some(text))?;
        if out.status.success() {
            return Ok(Via::Nft);
        }
        Err(rejected(text, &String::from_utf8_lossy(&out.stderr)))
    }

    fn run_script(&mut self, script: &Script<'_>, part: Part) -> Result<Via, NftError> {
        self.run(script.text(), part)
    }

    fn batch_lines(&self) -> Option<usize> {
        None
    }

    fn full_sync_done(&mut self, _: IpFamily) {}
}

impl NftRead for ExecNft {
    fn list(&mut self, family: IpFamily) -> Result<Option<String>, NftError> {
        self.list_cmd(&["list", "table", family.nft_word(), TABLE])
    }

    fn names(&mut self, family: IpFamily) -> Result<Option<Names>, NftError> {
        let f = family.nft_word();
        let Some(chains) = self.list_cmd(&["list", "chains", f])? else { return Ok(None) };
        // Terse: the sets without their elements.
        let sets = self.list_cmd(&["-t", "list", "sets", f])?.unwrap_or_default();
        Ok(table_names(&chains, "chain").map(|chains| Names { chains, sets: table_names(&sets, "set").unwrap_or_default() }))
    }

    fn read_for_sync(&mut self, family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError> {
        Ok(self.names(family)?.map(|names| (names, None)))
    }

    fn canonical(&mut self, family: IpFamily, text: &str) -> Result<String, NftError> {
        // One shell in one new network namespace: apply, then list what the kernel made.
        let script = "\"$0\" -f - && \"$0\" list table \"$1\" \"$2\"";
        let out = run_piped(Command::new("unshare").args(["--net", "sh", "-c", script, &self.binary, family.nft_word(), TABLE]), Some(text))
            .map_err(|error| NftError::Spawn { binary: "unshare".into(), error })?;
        if !out.status.success() {
            return Err(match rejected(text, &String::from_utf8_lossy(&out.stderr)) {
                NftError::Failed { message, .. } => NftError::Failed { command: "unshare --net nft -f - (the desired ruleset, in a scratch namespace)".into(), message },
                other => other,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The names of one kind of object (`chain`, `set`) of the `kube-proxy` table in an
/// `nft list chains|sets FAMILY` listing; `None` when the table is not in it.
pub fn table_names(listing: &str, kind: &str) -> Option<Vec<String>> {
    let mut in_table = false;
    let mut found = false;
    let mut out = Vec::new();
    for line in listing.lines() {
        if let Some(head) = line.strip_prefix("table ") {
            in_table = head.split_whitespace().nth(1) == Some(TABLE);
            found |= in_table;
            continue;
        }
        if !in_table || !line.starts_with('\t') || line.starts_with("\t\t") {
            continue;
        }
        let mut words = line.split_whitespace();
        if words.next() == Some(kind) {
            if let Some(name) = words.next() {
                out.push(name.to_string());
            }
        }
    }
    found.then_some(out)
}

/// nft's complaint (`/dev/stdin:LINE:COL-COL: Error: …`, then the line and carets) as an
/// error a person reads in one screen: the refused line with a few lines around it.
pub fn rejected(input: &str, stderr: &str) -> NftError {
    let message = capped(stderr.trim());
    let Some(n) = failing_line(&message).filter(|n| *n >= 1) else {
        return NftError::Failed { command: "nft -f -".into(), message };
    };
    let lines: Vec<&str> = input.lines().collect();
    let text = lines.get(n - 1).copied().unwrap_or("").to_string();
    // nft repeats the line with carets under it; keep only its `Error:` lines.
    let said: Vec<&str> = message.lines().filter(|l| l.contains("Error:")).collect();
    NftError::Rejected { line: n, text, message: format!("{}\n{}", said.join("\n"), around(&lines, n)) }
}

/// The line number in `/dev/stdin:12:5-9: Error: …` (or `stdin:12:…`).
fn failing_line(message: &str) -> Option<usize> {
    message.lines().find_map(|l| {
        let rest = l.split("stdin:").nth(1)?;
        rest.split(':').next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_line_is_shown_with_its_neighbours() {
        let input: String = (1..=20).map(|i| format!("add rule ip kube-proxy c ip daddr 10.0.0.{i} accept\n")).collect();
        let stderr = "/dev/stdin:12:38-46: Error: Could not resolve hostname: Name or service not known\nadd rule ip kube-proxy c ip daddr 10.0.0.12 accept\n                                     ^^^^^^^^^\n";
        let e = rejected(&input, stderr);
        let NftError::Rejected { line, text, message } = &e else { panic!("{e:?}") };
        assert_eq!((*line, text.as_str()), (12, "add rule ip kube-proxy c ip daddr 10.0.0.12 accept"));
        assert!(message.contains(">     12 | add rule") && message.contains("       9 | ") && message.contains("      15 | "), "{message}");
        assert!(!message.contains("10.0.0.16") && !message.contains("^^^"), "three lines each side, no carets: {message}");
        assert!(e.to_string().contains("nothing of it was applied"), "{e}");
    }

    #[test]
    fn a_complaint_without_a_line_is_kept_whole_but_short() {
        let noisy: String = (0..500).map(|i| format!("Error: {i}\n")).collect();
        let e = rejected("add table ip kube-proxy\n", &noisy).to_string();
        assert!(e.lines().count() <= 22 && e.contains("(480 more lines)"), "{e}");
    }

    #[test]
    fn names_come_from_the_kube_proxy_table_only() {
        let listing = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\ntable ip kube-proxy {\n\tchain services {\n\t}\n\tchain service-X-ns/a/tcp/p {\n\t}\n}\n";
        assert_eq!(table_names(listing, "chain"), Some(vec!["services".to_string(), "service-X-ns/a/tcp/p".to_string()]));
        assert_eq!(table_names("table ip filter {\n}\n", "chain"), None);
    }
}

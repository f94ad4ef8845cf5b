//! Running the svcproxy binary inside a test namespace, and reading rules back.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::netns::{Backend, Ns};
use crate::netns::BackendTools as _;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_svcproxy")
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `svcproxy ARGS` inside `ns` with the given iptables backend.
pub fn run(ns: &Ns, backend: Backend, args: &[&str]) -> Result<Output, String> {
    let mut argv = vec![bin()];
    argv.extend_from_slice(args);
    if matches!(args.first(), Some(&"sync")) {
        argv.extend_from_slice(&["--iptables-backend", backend.name()]);
    }
    ns.exec(&argv)
}

/// Like [`run`], but the command must exit with `code`; returns stdout.
pub fn run_expect(ns: &Ns, backend: Backend, args: &[&str], code: i32) -> Result<String, String> {
    let out = run(ns, backend, args)?;
    if out.status.code() != Some(code) {
        return Err(format!(
            "svcproxy {}: exit {:?}, want {code}\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes a cluster state to a temporary file owned by this test process.
pub fn temp_yaml(text: &str) -> Result<PathBuf, String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("svk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let p = dir.join(format!("cluster-{}.yaml", N.fetch_add(1, Ordering::SeqCst)));
    std::fs::write(&p, text).map_err(|e| e.to_string())?;
    Ok(p)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// `iptables-save` of our owned chains only (what a sync or a golden determines), in
/// iptables-save's order (chains sorted, rules in chain order): comparable across
/// namespaces.
pub fn owned_rules(ns: &Ns, backend: Backend, v6: bool) -> Result<String, String> {
    let out = ns.run(&[&backend.bin(v6, "save")])?;
    let mut table = String::new();
    let mut lines: Vec<String> = Vec::new();
    for l in out.lines() {
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(rest) = l.strip_prefix("-A ") {
            let chain = rest.split(' ').next().unwrap_or("");
            if chain.starts_with("KUBE-") {
                lines.push(format!("{table} {l}"));
            }
        } else if let Some(decl) = l.strip_prefix(':') {
            let chain = decl.split(' ').next().unwrap_or("");
            if chain.starts_with("KUBE-") {
                lines.push(format!("{table} :{chain}"));
            }
        }
    }
    Ok(lines.join("\n"))
}

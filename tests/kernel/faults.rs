//! Faults, with nothing lost: a restore the kernel rejects, a missing iptables binary, and
//! (legacy) an xtables lock held too long. Each time: exit 2, an error that says what
//! failed (for a rejected restore: the table and the failing line with its text), and the
//! rules that were in place stay in place.

use std::process::Command;
use std::time::Duration;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab};
use crate::netns::BackendTools as _;
use crate::svcproxy::{bin, owned_rules, path_str, run, run_expect, temp_yaml};

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    per_backend!(v, rejected_restore_keeps_rules, missing_binary_keeps_rules);
    v.push(Case::new("legacy_xtables_lock_held_keeps_rules", lock_held_keeps_rules).with_timeout(Duration::from_secs(60)));
    v
}

const CLUSTER: &str = "apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode: {name: node-a, ips: [198.19.1.1]}\noptions: {ipFamily: ipv4, clusterCIDR: 198.18.0.0/16}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: app}\nspec:\n  clusterIP: 198.19.255.10\n  ports: [{name: http, port: 80, protocol: TCP}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: app, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints:\n- addresses: [198.18.1.2]\n  nodeName: node-a\nports: [{name: http, port: 8080, protocol: TCP}]\n";

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// nfacct matches whose counters do not exist: the kernel rejects the restore.
fn rejected_restore_keeps_rules(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore")])?;
    let lab = Lab::new(b.name())?;
    let file = temp_yaml(CLUSTER)?;
    run_expect(lab.node(), b, &["sync", "--from", path_str(&file), "--nfacct=false"], 0)?;
    let before = owned_rules(lab.node(), b, false)?;
    let changed = temp_yaml(&CLUSTER.replace("198.18.1.2]", "198.18.1.2]\n- addresses: [198.18.2.2]"))?;
    let out = run(lab.node(), b, &["sync", "--from", path_str(&changed), "--nfacct=true"])?;
    let err = stderr_of(&out);
    ctx.log(&err);
    ensure!(out.status.code() == Some(2), "exit {:?}, want 2: {err}", out.status.code());
    // iptables-nft names the failing rule, shown with its neighbours; iptables-legacy refuses
    // the table only at COMMIT, and the error says so with its size instead of listing it.
    let named = match b {
        Backend::Nft => err.contains("nfacct") && err.contains("> "),
        Backend::Legacy => err.contains("as a whole") && err.contains("rules in"),
    };
    ensure!(err.contains("rejected table") && named, "the error names the table and the failing line: {err}");
    ensure!(err.lines().count() < 30, "one screen: {} lines", err.lines().count());
    ensure!(err.contains("left as they were"), "the error says the rules were kept: {err}");
    ensure!(owned_rules(lab.node(), b, false)? == before, "the rules changed after a failed restore");
    // The next sync (without the bad setting) succeeds and converges.
    run_expect(lab.node(), b, &["sync", "--from", path_str(&changed), "--nfacct=false"], 0)?;
    run_expect(lab.node(), b, &["sync", "--from", path_str(&changed), "--nfacct=false", "--dry-run"], 0)?;
    Ok(())
}

fn missing_binary_keeps_rules(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", "env", &b.bin(false, "restore")])?;
    let lab = Lab::new(b.name())?;
    let file = temp_yaml(CLUSTER)?;
    run_expect(lab.node(), b, &["sync", "--from", path_str(&file), "--nfacct=false"], 0)?;
    let before = owned_rules(lab.node(), b, false)?;
    let out = lab.node().exec(&["env", "PATH=/nonexistent", bin(), "sync", "--from", path_str(&file), "--nfacct=false", "--iptables-backend", b.name()])?;
    let err = stderr_of(&out);
    ensure!(out.status.code() == Some(2), "exit {:?}, want 2: {err}", out.status.code());
    ensure!(err.contains(&format!("cannot run {}", b.bin(false, "save"))), "the error names the binary: {err}");
    ensure!(owned_rules(lab.node(), b, false)? == before, "rules changed");
    Ok(())
}

/// iptables-legacy serialises writers with /run/xtables.lock (host-wide): hold it for a
/// few seconds and sync with a 1 s wait.
fn lock_held_keeps_rules(ctx: &mut Ctx) -> CaseResult {
    let b = Backend::Legacy;
    ctx.require(&["ip", "flock", &b.bin(false, "restore")])?;
    let lab = Lab::new(b.name())?;
    let file = temp_yaml(CLUSTER)?;
    run_expect(lab.node(), b, &["sync", "--from", path_str(&file), "--nfacct=false"], 0)?;
    let before = owned_rules(lab.node(), b, false)?;
    let mut holder = Command::new("flock")
        .args(["/run/xtables.lock", "-c", "sleep 4"])
        .spawn()
        .map_err(|e| format!("flock: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let changed = temp_yaml(&CLUSTER.replace("198.18.1.2]", "198.18.1.2]\n- addresses: [198.18.2.2]"))?;
    let out = run(lab.node(), b, &["sync", "--from", path_str(&changed), "--nfacct=false", "--iptables-lock-wait", "1"]);
    let _ = holder.wait();
    let out = out?;
    let err = stderr_of(&out);
    ctx.log(&err);
    ensure!(out.status.code() == Some(2), "exit {:?}, want 2: {err}", out.status.code());
    ensure!(err.to_lowercase().contains("xtables lock"), "the error says the lock was held: {err}");
    ensure!(owned_rules(lab.node(), b, false)? == before, "rules changed");
    Ok(())
}

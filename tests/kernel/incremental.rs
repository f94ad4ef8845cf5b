//! Watch mode's partial syncs on the real kernel, both backends. After the first (full)
//! sync, svcproxy trusts what it sent and sends only what each change needs: one more
//! endpoint, services removed and added back (in-place `-D`/`-I` on the top-level chains),
//! every service changed at once (on nft, in chunks). After each step the rules must be
//! exactly those a one-shot sync compares against (`sync --dry-run` finds nothing), and
//! the metrics must show that the steps were partial syncs, not full ones.

use std::time::Duration;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab, NODE_IP4};
use crate::netns::BackendTools as _;
use crate::svcproxy::run;
use crate::watch_e2e::{metric_at, spawn_svcproxy, until};

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    per_backend!(v, watch_partial_syncs_leave_what_a_full_sync_would);
    v
}

/// The generated cluster `svcproxy-bench generate --services N --endpoints 4 --seed S` writes.
fn generate(services: usize, seed: u64) -> String {
    svcproxy::gen::yaml(&svcproxy::gen::GenSpec { services, endpoints: 4, seed })
}

/// `base` with one more ready endpoint for service `svc-I`.
fn one_more_endpoint(base: &str, i: usize) -> Result<String, String> {
    let head = format!("\n  name: svc-{i}-abcde\n");
    let at = base.find(&head).ok_or_else(|| format!("no slice for svc-{i}"))?;
    let ports = at + base[at..].find("\nports:\n").ok_or("slice without ports")? + 1;
    Ok(format!("{}- addresses: [10.127.255.254]\n  conditions: {{ready: true}}\n  nodeName: node-1\n{}", &base[..ports], &base[ports..]))
}

fn metric(node: &str, name: &'static str) -> f64 {
    metric_at(node, format!("{NODE_IP4}:10249").parse().unwrap(), name).unwrap_or(-1.0)
}

fn watch_partial_syncs_leave_what_a_full_sync_would(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore")])?;
    let lab = Lab::new(&format!("{}inc", b.name()))?;
    let dir = std::env::temp_dir().join(format!("svk-inc-{}-{}", std::process::id(), b.name()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("cluster.yaml");
    let write = |text: &str| -> Result<(), String> {
        // Whole files only: the watcher must never read half of one.
        let tmp = dir.join(".next");
        std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &file)).map_err(|e| e.to_string())
    };
    let base = generate(200, 1);
    let steps = [
        ("one more endpoint", one_more_endpoint(&base, 100)?),
        ("50 services removed", generate(150, 1)),
        ("the 50 services back", generate(200, 1)),
        ("every service changed at once", generate(200, 2)),
        ("back to the start", base.clone()),
    ];
    write(&base)?;

    let log = crate::svcproxy::temp_yaml("")?;
    let node = lab.node().name.clone();
    let (from, healthz, metrics) = (file.display().to_string(), format!("{NODE_IP4}:10256"), format!("{NODE_IP4}:10249"));
    let argv = ["sync", "--watch", "--from", &from, "--iptables-backend", b.name(), "--nfacct=false", "--min-sync-period", "0s",
        "--sync-period", "1h", "--healthz-bind-address", &healthz, "--metrics-bind-address", &metrics];
    let _daemon = spawn_svcproxy(&node, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let clean = |what: &str| -> Result<Duration, String> {
        let from = file.display().to_string();
        until(what, Duration::from_secs(90), || {
            run(lab.node(), b, &["sync", "--dry-run", "--from", &from, "--nfacct=false"]).map(|o| o.status.code() == Some(0)).unwrap_or(false)
        })
        .map_err(|e| format!("{e}\nsvcproxy log:\n{}", logs()))
    };
    clean("the first (full) sync")?;
    for (what, text) in &steps {
        write(text)?;
        let took = clean(what)?;
        ctx.log(format!("{what}: in the kernel after {} ms", took.as_millis()));
    }
    let full = metric(&node, "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}");
    let partial = metric(&node, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}");
    let failed = metric(&node, "svcproxy_syncs_total{result=\"error\"}");
    ctx.log(format!("syncs: {full} full, {partial} partial, {failed} failed"));
    ensure!(full == 1.0, "only the first sync was full: {full} full syncs\n{}", logs());
    ensure!(partial >= steps.len() as f64, "{partial} partial syncs for {} steps", steps.len());
    ensure!(failed <= 0.0, "{failed} failed syncs\n{}", logs());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

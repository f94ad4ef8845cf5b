//! Loss detection on the real kernel, both backends: watch mode with a 1 s sync period,
//! from a file. While nothing changes, periodic syncs are partial (one full sync, the
//! first) and each period checks the KUBE-PROXY-CANARY rules. Then someone else wipes the
//! nat table three ways (`iptables -t nat -F`, which keeps every chain; `-F` then `-X`;
//! an `iptables-restore` of an empty nat table): each time the next check notices, one
//! full sync puts the rules back, and a ClusterIP answers again. With a short
//! `--full-sync-period`, full syncs come back on their own.

use std::time::Duration;

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{Backend, Lab, Proto, Where, NODE_IP4};
use crate::netns::BackendTools as _;
use crate::svcproxy::run;
use crate::watch_e2e::{metric_at, spawn_svcproxy, until};

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    per_backend!(v, watch_repairs_a_wiped_nat_table_within_a_few_sync_periods, watch_runs_a_full_sync_every_full_sync_period);
    v.push(Case::new("legacy_watch_skips_the_check_of_an_unchanged_table_and_still_notices_a_deleted_canary", legacy_skips_unchanged_and_notices_a_deleted_canary));
    v
}

const CIP: &str = "198.19.255.10";

const CLUSTER: &str = "apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  type: ClusterIP
  clusterIP: \"198.19.255.10\"
  clusterIPs: [\"198.19.255.10\"]
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-v4
  namespace: app
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [\"198.18.1.2\"]
  conditions: {ready: true}
  nodeName: node-1
ports:
- {name: http, port: 8080, protocol: TCP}
";

/// Someone else's change to the node's rules.
type Wipe<'a> = dyn Fn() -> Result<(), String> + 'a;

fn metric(node: &str, name: &'static str) -> f64 {
    metric_at(node, format!("{NODE_IP4}:10249").parse().unwrap(), name).unwrap_or(-1.0)
}

fn watch_repairs_a_wiped_nat_table_within_a_few_sync_periods(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore"), &b.bin(false, "")])?;
    let mut lab = Lab::new(&format!("{}can", b.name()))?;
    lab.add_pod("pod1", "198.18.1.2", None)?.serve_tcp(8080)?;
    lab.route_service_cidr("198.19.255.0/24")?;
    lab.set_connect_timeout(Duration::from_millis(300));
    let file = crate::svcproxy::temp_yaml(CLUSTER)?;
    let from = file.display().to_string();
    let log = crate::svcproxy::temp_yaml("")?;
    let node = lab.node().name.clone();
    let common = ["--hostname-override", "node-1", "--node-ip", NODE_IP4, "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4", "--nfacct=false"];
    let metrics = format!("{NODE_IP4}:10249");
    let mut argv = vec!["sync", "--watch", "--from", &from, "--iptables-backend", b.name()];
    argv.extend(common);
    argv.extend(["--min-sync-period", "0s", "--sync-period", "1s", "--metrics-bind-address", &metrics]);
    let _daemon = spawn_svcproxy(&node, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let with_log = |e: String| format!("{e}\nsvcproxy log:\n{}", logs());
    let answers = || lab.connect(Where::Node, CIP, 80, Proto::Tcp, 1).map(|t| t.answered() == 1).unwrap_or(false);
    let mut dry_run = common.to_vec();
    dry_run.splice(0..0, ["sync", "--dry-run", "--from", from.as_str()]);
    let in_sync = || run(lab.node(), b, &dry_run).map(|o| o.status.code() == Some(0)).unwrap_or(false);
    let count = |name| metric(&node, name);
    let full = "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}";
    let lost = "svcproxy_canary_lost_total";
    let checks = "svcproxy_canary_checks_total";

    until("the first sync", Duration::from_secs(20), || answers() && in_sync()).map_err(with_log)?;
    // Nothing changes for a few sync periods: checks, and partial syncs only.
    until("3 canary checks", Duration::from_secs(20), || count(checks) >= 3.0).map_err(with_log)?;
    let (f, l) = (count(full), count(lost));
    let partial = count("kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}");
    ctx.log(format!("idle: {f} full, {partial} partial syncs, {} checks, {l} lost", count(checks)));
    ensure!(f == 1.0 && l == 0.0 && partial >= 2.0, "idle: {f} full syncs (want 1), {partial} partial, {l} canaries lost\n{}", logs());

    let ipt = lab.iptables(b);
    let wipes: [(&str, &Wipe); 3] = [
        ("iptables -t nat -F", &|| ipt.run(&["-t", "nat", "-F"]).map(|_| ())),
        ("iptables -t nat -F; iptables -t nat -X", &|| ipt.run(&["-t", "nat", "-F"]).and_then(|_| ipt.run(&["-t", "nat", "-X"])).map(|_| ())),
        ("iptables-restore of an empty nat table", &|| ipt.restore("*nat\nCOMMIT\n", &[])),
    ];
    for (n, (what, wipe)) in wipes.iter().enumerate() {
        let before = (count(full), count(lost));
        wipe()?;
        let gone = !ipt.run(&["-t", "nat", "-S", "PREROUTING"])?.contains("KUBE-SERVICES");
        ensure!(gone, "{what} left the jump to KUBE-SERVICES");
        let took = until("the canary check to notice", Duration::from_secs(10), || count(lost) >= before.1 + 1.0).map_err(with_log)?;
        until("the rules to come back", Duration::from_secs(10), || in_sync() && answers()).map_err(with_log)?;
        let canary = ipt.run(&["-t", "nat", "-C", "KUBE-PROXY-CANARY", "-j", "RETURN"]).is_ok();
        let after = (count(full), count(lost));
        ctx.log(format!("{what}: noticed after {} ms; full syncs {} -> {}, lost {} -> {}", took.as_millis(), before.0, after.0, before.1, after.1));
        ensure!(after.1 == n as f64 + 1.0, "{what}: {} canary losses in all (want {})\n{}", after.1, n + 1, logs());
        ensure!(after.0 == before.0 + 1.0, "{what}: {} full syncs for one loss\n{}", after.0 - before.0, logs());
        ensure!(canary, "{what}: the nat canary was not recreated");
    }
    ensure!(count("svcproxy_syncs_total{result=\"error\"}") <= 0.0, "failed syncs\n{}", logs());
    Ok(())
}

fn watch_runs_a_full_sync_every_full_sync_period(ctx: &mut Ctx, b: Backend) -> CaseResult {
    ctx.require(&["ip", &b.bin(false, "restore"), &b.bin(false, "")])?;
    let lab = Lab::new(&format!("{}fsp", b.name()))?;
    let file = crate::svcproxy::temp_yaml(CLUSTER)?;
    let log = crate::svcproxy::temp_yaml("")?;
    let node = lab.node().name.clone();
    let (from, metrics) = (file.display().to_string(), format!("{NODE_IP4}:10249"));
    let argv = ["sync", "--watch", "--from", &from, "--iptables-backend", b.name(), "--hostname-override", "node-1", "--node-ip", NODE_IP4,
        "--ip-family", "ipv4", "--nfacct=false", "--min-sync-period", "0s", "--sync-period", "500ms", "--full-sync-period", "2s",
        "--metrics-bind-address", &metrics];
    let _daemon = spawn_svcproxy(&node, &argv, &[], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let count = |name| metric(&node, name);
    let full = "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}";
    let partial = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}";
    until("3 full syncs", Duration::from_secs(30), || count(full) >= 3.0).map_err(|e| format!("{e}\n{}", logs()))?;
    let (f, p) = (count(full), count(partial));
    ctx.log(format!("{f} full, {p} partial syncs"));
    // Between two full syncs 2 s apart, the 500 ms periodic syncs are partial.
    ensure!(p >= f, "{f} full and only {p} partial syncs\n{}", logs());
    ensure!(count("svcproxy_canary_lost_total") == 0.0, "no canary was lost\n{}", logs());
    Ok(())
}

/// iptables-legacy: while nothing changes, the nat table's `-C` is skipped (its x_tables
/// summary is what it was when the canary was last found); deleting the canary rule alone
/// (not a flush) changes the summary, and the next check notices and repairs.
fn legacy_skips_unchanged_and_notices_a_deleted_canary(ctx: &mut Ctx) -> CaseResult {
    let b = Backend::Legacy;
    ctx.require(&["ip", &b.bin(false, "restore"), &b.bin(false, "")])?;
    let lab = Lab::new("legacyskip")?;
    let file = crate::svcproxy::temp_yaml(CLUSTER)?;
    let log = crate::svcproxy::temp_yaml("")?;
    let node = lab.node().name.clone();
    let (from, metrics) = (file.display().to_string(), format!("{NODE_IP4}:10249"));
    let argv = ["sync", "--watch", "--from", &from, "--iptables-backend", b.name(), "--hostname-override", "node-1", "--node-ip", NODE_IP4,
        "--ip-family", "ipv4", "--nfacct=false", "--min-sync-period", "0s", "--sync-period", "500ms", "--metrics-bind-address", &metrics];
    let _daemon = spawn_svcproxy(&node, &argv, &[("SVCPROXY_LOG", "info,svcproxy::xtables::canary=debug")], &log)?;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let with_log = |e: String| format!("{e}\nsvcproxy log:\n{}", logs());
    let count = |name| metric(&node, name);
    let lost = "svcproxy_canary_lost_total";
    let full = "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}";
    let skipped_nat = || logs().lines().filter(|l| l.contains("canary check skipped") && l.contains("nat")).count();

    until("the nat check skipped twice", Duration::from_secs(20), || skipped_nat() >= 2).map_err(with_log)?;
    ensure!(count(lost) == 0.0, "a canary lost while idle\n{}", logs());
    let before = count(full);
    let ipt = lab.iptables(b);
    ipt.run(&["-t", "nat", "-D", "KUBE-PROXY-CANARY", "-j", "RETURN"])?;
    let took = until("the check to notice the deleted canary", Duration::from_secs(10), || count(lost) >= 1.0).map_err(with_log)?;
    // The full sync's metric is recorded after its canaries are back: wait for both.
    until("a full sync after the loss", Duration::from_secs(10), || count(full) >= before + 1.0).map_err(with_log)?;
    until("the canary to come back", Duration::from_secs(10), || ipt.run(&["-t", "nat", "-C", "KUBE-PROXY-CANARY", "-j", "RETURN"]).is_ok()).map_err(with_log)?;
    ctx.log(format!("nat check skipped {} times while idle; the deleted canary noticed after {} ms", skipped_nat(), took.as_millis()));
    ensure!(count(lost) == 1.0, "{} losses for one deletion\n{}", count(lost), logs());
    Ok(())
}

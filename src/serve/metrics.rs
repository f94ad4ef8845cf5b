//! kube-proxy's metrics (same names and meanings), plus svcproxy's own, in a
//! prometheus-client registry served at `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// kube-proxy's labels of the rule-count gauges, in its order: `table`, `ip_family`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    pub table: String,
    pub ip_family: String,
}

impl TableLabel {
    pub fn of(table: &str, family: crate::net::IpFamily) -> Self {
        TableLabel { table: table.to_string(), ip_family: family.api_name().to_string() }
    }
}

/// kube-proxy's labels of the no-local-endpoints gauge, in its order: `traffic_policy`, `ip_family`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    pub traffic_policy: String,
    pub ip_family: String,
}

impl PolicyLabel {
    pub fn of(traffic_policy: &str, family: crate::net::IpFamily) -> Self {
        PolicyLabel { traffic_policy: traffic_policy.to_string(), ip_family: family.api_name().to_string() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

/// kube-proxy's `ip_family` label: `IPv4` or `IPv6`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub ip_family: String,
}

impl FamilyLabel {
    pub fn of(family: crate::net::IpFamily) -> Self {
        FamilyLabel { ip_family: family.api_name().to_string() }
    }
}

/// The family and the writer (`netlink`, `nft`) of an nftables partial sync's transaction.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabel {
    pub ip_family: String,
    pub writer: String,
}

impl WriterLabel {
    pub fn of(family: crate::net::IpFamily, via: crate::nftables::apply::Via) -> Self {
        let writer = match via {
            crate::nftables::apply::Via::Netlink => "netlink",
            crate::nftables::apply::Via::Nft => "nft",
        };
        WriterLabel { ip_family: family.api_name().to_string(), writer: writer.to_string() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

type FGauge = Gauge<f64, AtomicU64>;
/// A histogram per `ip_family`, each with the buckets its constructor gives.
type PerFamily = Family<FamilyLabel, Histogram, fn() -> Histogram>;

/// kube-proxy's families carry `ip_family` wherever its one-proxier-per-family design
/// observes them per family (sync durations, timestamps, failures, rule counts,
/// no-local endpoints, network programming, the conntrack reconciler); the change
/// counters and the health counters are its process-wide ones.
pub struct Metrics {
    pub registry: Registry,
    pub sync_duration: PerFamily,
    pub full_sync_duration: PerFamily,
    pub partial_sync_duration: PerFamily,
    pub network_programming_duration: PerFamily,
    pub change_to_sync_duration: Histogram,
    pub last_sync_timestamp: Family<FamilyLabel, FGauge>,
    pub last_queued_timestamp: Family<FamilyLabel, FGauge>,
    pub service_changes_pending: Gauge,
    pub service_changes_total: Counter,
    pub endpoint_changes_pending: Gauge,
    pub endpoint_changes_total: Counter,
    pub restore_failures: Family<FamilyLabel, Counter>,
    pub partial_restore_failures: Family<FamilyLabel, Counter>,
    pub nftables_sync_failures: Family<FamilyLabel, Counter>,
    pub nftables_cleanup_failures: Family<FamilyLabel, Counter>,
    /// svcproxy's: nftables partial syncs' transactions by writer (netlink, or nft when
    /// the netlink encoder does not know what they hold).
    pub nftables_partial_writes: Family<WriterLabel, Counter>,
    /// svcproxy's: the chains a cold start's interim table has still to convert.
    pub nftables_interim_chains: Family<FamilyLabel, Gauge>,
    pub rules: Family<TableLabel, Gauge>,
    pub rules_last: Family<TableLabel, Gauge>,
    pub conntrack_reconcile_duration: PerFamily,
    pub conntrack_deleted: Family<FamilyLabel, Counter>,
    /// svcproxy's: conntrack reconciler runs that failed (the run stays owed, retried after
    /// the family's next sync).
    pub conntrack_failures: Family<FamilyLabel, Counter>,
    pub syncs: Family<ResultLabel, Counter>,
    pub malformed_objects: Counter,
    pub no_local_endpoints: Family<PolicyLabel, Gauge>,
    pub healthz: Family<CodeLabel, Counter>,
    pub livez: Family<CodeLabel, Counter>,
    pub canary_checks: Counter,
    pub canary_lost: Counter,
    /// nftables mode's localhost NodePort proxy (`KubeProxyNFTablesLocalhostNodePorts`).
    pub localhost_nodeports: super::localhost_nodeports::ProxyMetrics,
}

/// kube-proxy's sync-duration buckets: `ExponentialBuckets(0.001, 2, 15)` (1 ms to 16.384 s).
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// kube-proxy's network-programming buckets: 0, 0.25 s, 0.5 s, every second to 59 s, every
/// 5 s to 115 s, every 30 s to 5 min (so a p99 up to 300 s shows).
pub fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0, 0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

fn network_programming() -> Histogram {
    Histogram::new(network_programming_buckets())
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            sync_duration: Family::new_with_constructor(seconds),
            full_sync_duration: Family::new_with_constructor(seconds),
            partial_sync_duration: Family::new_with_constructor(seconds),
            network_programming_duration: Family::new_with_constructor(network_programming),
            change_to_sync_duration: seconds(),
            last_sync_timestamp: Family::default(),
            last_queued_timestamp: Family::default(),
            service_changes_pending: Gauge::default(),
            service_changes_total: Counter::default(),
            endpoint_changes_pending: Gauge::default(),
            endpoint_changes_total: Counter::default(),
            restore_failures: Family::default(),
            partial_restore_failures: Family::default(),
            nftables_sync_failures: Family::default(),
            nftables_cleanup_failures: Family::default(),
            nftables_partial_writes: Family::default(),
            nftables_interim_chains: Family::default(),
            rules: Family::default(),
            rules_last: Family::default(),
            conntrack_reconcile_duration: Family::new_with_constructor(seconds),
            conntrack_deleted: Family::default(),
            conntrack_failures: Family::default(),
            syncs: Family::default(),
            malformed_objects: Counter::default(),
            no_local_endpoints: Family::default(),
            healthz: Family::default(),
            livez: Family::default(),
            canary_checks: Counter::default(),
            canary_lost: Counter::default(),
            localhost_nodeports: Default::default(),
        };
        m.register()
    }

    fn register(mut self) -> Self {
        let r = &mut self.registry;
        r.register("kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", self.sync_duration.clone());
        r.register("kubeproxy_network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", self.network_programming_duration.clone());
        r.register(
            "svcproxy_change_to_sync_duration_seconds",
            "From the oldest change svcproxy queued to the end of the sync that programmed it, in seconds",
            self.change_to_sync_duration.clone(),
        );
        r.register("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", self.last_sync_timestamp.clone());
        r.register("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", self.last_queued_timestamp.clone());
        r.register("kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes", self.service_changes_pending.clone());
        r.register("kubeproxy_sync_proxy_rules_service_changes", "Cumulative proxy rules Service changes", self.service_changes_total.clone());
        r.register("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes", self.endpoint_changes_pending.clone());
        r.register("kubeproxy_sync_proxy_rules_endpoint_changes", "Cumulative proxy rules Endpoint changes", self.endpoint_changes_total.clone());
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            self.no_local_endpoints.clone(),
        );
        r.register("kubeproxy_proxy_healthz", "Cumulative proxy healthz HTTP status", self.healthz.clone());
        r.register("kubeproxy_proxy_livez", "Cumulative proxy livez HTTP status", self.livez.clone());
        r.register("svcproxy_syncs", "Syncs run, by result", self.syncs.clone());
        r.register("svcproxy_malformed_objects", "Objects skipped because they could not be read", self.malformed_objects.clone());
        r.register("svcproxy_conntrack_reconciler_failures", "Conntrack reconciler runs that failed to list or delete flows (retried after the family's next sync)", self.conntrack_failures.clone());
        r.register("svcproxy_canary_checks", "Checks of the KUBE-PROXY-CANARY rules (iptables mode, once per sync period)", self.canary_checks.clone());
        r.register("svcproxy_canary_lost", "Checks that found a KUBE-PROXY-CANARY rule gone (each forces a full sync)", self.canary_lost.clone());
        r.register_collector(Box::new(super::process::ProcessCollector));
        self
    }

    /// The families kube-proxy registers only in some modes (`RegisterMetrics(mode)`): the
    /// full and partial sync durations (iptables, nftables), the restore failures (iptables,
    /// IPVS), the partial-restore failures and rule counts (iptables), the nftables sync and
    /// cleanup failures (nftables), the conntrack reconciler's (every mode). Call once, for
    /// the mode that runs.
    pub fn register_mode(&mut self, mode: crate::config::Mode) {
        use crate::config::Mode::{Iptables, Ipvs, Nftables};
        let r = &mut self.registry;
        if matches!(mode, Iptables | Nftables) {
            r.register("kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", self.full_sync_duration.clone());
            r.register("kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", self.partial_sync_duration.clone());
        }
        if matches!(mode, Iptables | Ipvs) {
            r.register("kubeproxy_sync_proxy_rules_iptables_restore_failures", "Cumulative proxy iptables restore failures", self.restore_failures.clone());
        }
        if mode == Iptables {
            r.register("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures", "Cumulative proxy iptables partial restore failures", self.partial_restore_failures.clone());
            r.register("kubeproxy_sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", self.rules.clone());
            r.register("kubeproxy_sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync", self.rules_last.clone());
        }
        if mode == Nftables {
            r.register("kubeproxy_sync_proxy_rules_nftables_sync_failures", "Cumulative proxy nftables sync failures", self.nftables_sync_failures.clone());
            r.register("kubeproxy_sync_proxy_rules_nftables_cleanup_failures", "Cumulative proxy nftables cleanup failures", self.nftables_cleanup_failures.clone());
            r.register(
                "kubeproxy_nftables_localhost_nodeport_listeners",
                "Number of active localhost NodePort userspace proxy listeners",
                self.localhost_nodeports.listeners.clone(),
            );
            r.register(
                "kubeproxy_nftables_localhost_nodeport_listener_creation_failures",
                "Number of localhost NodePort userspace proxy listener creation failures",
                self.localhost_nodeports.creation_failures.clone(),
            );
            r.register(
                "svcproxy_nftables_partial_writes",
                "nftables partial syncs' transactions by writer: netlink, or nft for what the netlink encoder does not know",
                self.nftables_partial_writes.clone(),
            );
            r.register(
                "svcproxy_nftables_interim_chains",
                "Chains of a cold start's interim nftables table still to convert to kube-proxy's rules",
                self.nftables_interim_chains.clone(),
            );
        }
        r.register("kubeproxy_conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds", self.conntrack_reconcile_duration.clone());
        r.register("kubeproxy_conntrack_reconciler_deleted_entries", "Cumulative conntrack flows deleted by conntrack reconciler", self.conntrack_deleted.clone());
    }

    /// nftables mode's `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`, read
    /// from the kernel's named counters at each scrape (kube-proxy registers it in nftables
    /// mode only).
    pub fn register_localhost_rejected(&mut self, collector: super::localhost_nodeports::RejectedCollector) {
        self.registry.register_collector(Box::new(collector));
    }

    /// `--socket-lb`'s counters, read from the pinned maps at each scrape.
    pub fn register_socket_lb(&mut self, collector: super::socketlb::SocketLbCollector) {
        self.registry.register_collector(Box::new(collector));
    }

    /// iptables mode's nfacct-backed families, read from the kernel at each scrape (kube-proxy
    /// registers them in iptables mode only).
    pub fn register_nfacct(&mut self, collector: super::nfacct::NfacctCollector) {
        self.registry.register_collector(Box::new(collector));
    }

    /// OpenMetrics text (what prometheus-client writes).
    pub fn encode(&self) -> String {
        super::open_metrics(&self.registry)
    }
}

/// OpenMetrics text as the classic format (0.0.4): a counter family `x` is named by its
/// sample `x_total` in HELP and TYPE, `# UNIT`, `# EOF` and `_created` samples go.
pub fn to_classic_text(open: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in open.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line.strip_prefix("# HELP ").map(|r| ("# HELP ", r)).or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        if let Some((kind, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if counters.contains(name) { format!("{name}_total") } else { name.to_string() };
            out.push_str(&format!("{kind}{name} {tail}\n"));
            continue;
        }
        let sample_name = line.split(['{', ' ']).next().unwrap_or("");
        if sample_name.strip_suffix("_created").is_some_and(|base| counters.contains(base)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod classic_tests {
    use super::*;

    #[test]
    fn buckets_are_kube_proxys() {
        let b = network_programming_buckets();
        assert_eq!((b.len(), b[0], b[3], b[61], b[62], b[73], *b.last().unwrap()), (81, 0.0, 1.0, 59.0, 60.0, 115.0, 300.0));
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Iptables);
        let v4 = FamilyLabel::of(crate::net::IpFamily::V4);
        m.sync_duration.get_or_create(&v4).observe(0.01);
        m.conntrack_reconcile_duration.get_or_create(&v4).observe(0.01);
        let text = m.encode();
        for family in ["kubeproxy_sync_proxy_rules_duration_seconds_bucket", "kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket"] {
            let bounds: Vec<&str> = text.lines().filter(|l| l.starts_with(family)).collect();
            assert_eq!(bounds.len(), 16, "15 bounds and +Inf: {bounds:?}");
            assert!(bounds.iter().any(|l| l.contains("le=\"16.384\"")) && !bounds.iter().any(|l| l.contains("le=\"32.768\"")), "{bounds:?}");
        }
    }

    /// Each family kube-proxy observes per IP family is one series per family, with
    /// kube-proxy's label names in its order.
    #[test]
    fn per_family_series_carry_kube_proxys_labels() {
        use crate::net::IpFamily::{V4, V6};
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Iptables);
        for (family, secs) in [(V4, 0.002), (V6, 0.5)] {
            m.sync_duration.get_or_create(&FamilyLabel::of(family)).observe(secs);
            m.network_programming_duration.get_or_create(&FamilyLabel::of(family)).observe(secs);
            m.last_sync_timestamp.get_or_create(&FamilyLabel::of(family)).set(1.7e9);
            m.rules.get_or_create(&TableLabel::of("nat", family)).set(7);
            m.no_local_endpoints.get_or_create(&PolicyLabel::of("internal", family)).set(1);
        }
        m.restore_failures.get_or_create(&FamilyLabel::of(V6)).inc();
        let text = to_classic_text(&m.encode());
        for line in [
            "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\",ip_family=\"IPv4\"} 1",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.256\",ip_family=\"IPv6\"} 0",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\",ip_family=\"IPv6\"} 1",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"} 1700000000.0",
            "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\",ip_family=\"IPv4\"} 7",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy=\"internal\",ip_family=\"IPv6\"} 1",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let unlabelled = |name: &str| text.lines().any(|l| l.starts_with(&format!("{name} ")));
        assert!(!unlabelled("kubeproxy_sync_proxy_rules_last_timestamp_seconds") && !unlabelled("kubeproxy_sync_proxy_rules_duration_seconds_count"));
    }

    #[test]
    fn counters_are_named_by_their_sample_and_openmetrics_markers_go() {
        let open = "# HELP foo A thing.\n# TYPE foo counter\nfoo_total 3\nfoo_created 1.7e9\n# HELP g A gauge.\n# TYPE g gauge\n# UNIT g seconds\ng 2\n# EOF\n";
        assert_eq!(to_classic_text(open), "# HELP foo_total A thing.\n# TYPE foo_total counter\nfoo_total 3\n# HELP g A gauge.\n# TYPE g gauge\ng 2\n");
        let m = Metrics::new();
        m.syncs.get_or_create(&ResultLabel { result: "success".into() }).inc();
        let text = to_classic_text(&m.encode());
        assert!(text.contains("# TYPE svcproxy_syncs_total counter") && !text.contains("# EOF"), "{text}");
    }
}

#[cfg(test)]
mod upstream_tests {
    use super::*;

    /// kube-proxy v1.34's families svcproxy registers (pkg/proxy/metrics/metrics.go): name
    /// as the classic text names it, type, help (prometheus-client adds a final period).
    const KUBE_PROXY: [(&str, &str, &str); 23] = [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram", "SyncProxyRules latency in seconds"),
        ("kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram", "SyncProxyRules latency in seconds for full resyncs"),
        ("kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram", "SyncProxyRules latency in seconds for partial resyncs"),
        ("kubeproxy_network_programming_duration_seconds", "histogram", "In Cluster Network Programming Latency in seconds"),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", "The last time proxy rules were successfully synced"),
        ("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", "The last time a sync of proxy rules was queued"),
        ("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", "Pending proxy rules Endpoint changes"),
        ("kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", "Cumulative proxy rules Endpoint changes"),
        ("kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", "Pending proxy rules Service changes"),
        ("kubeproxy_sync_proxy_rules_service_changes_total", "counter", "Cumulative proxy rules Service changes"),
        ("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "counter", "Cumulative proxy iptables restore failures"),
        ("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "counter", "Cumulative proxy iptables partial restore failures"),
        ("kubeproxy_sync_proxy_rules_iptables_total", "gauge", "Total number of iptables rules owned by kube-proxy"),
        ("kubeproxy_sync_proxy_rules_iptables_last", "gauge", "Number of iptables rules written by kube-proxy in last sync"),
        ("kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", "Number of services with a Local traffic policy and no endpoints"),
        ("kubeproxy_proxy_healthz_total", "counter", "Cumulative proxy healthz HTTP status"),
        ("kubeproxy_proxy_livez_total", "counter", "Cumulative proxy livez HTTP status"),
        ("kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram", "ReconcileConntrackFlowsLatency latency in seconds"),
        ("kubeproxy_conntrack_reconciler_deleted_entries_total", "counter", "Cumulative conntrack flows deleted by conntrack reconciler"),
        ("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter", "Cumulative proxy nftables sync failures"),
        ("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter", "Cumulative proxy nftables cleanup failures"),
        ("kubeproxy_nftables_localhost_nodeport_listeners", "gauge", "Number of active localhost NodePort userspace proxy listeners"),
        ("kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total", "counter", "Number of localhost NodePort userspace proxy listener creation failures"),
    ];

    /// Every labelled family with a series (an empty family is not written at all, as
    /// client_golang writes none for a vector without children).
    fn filled() -> Metrics {
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Iptables);
        let v4 = FamilyLabel::of(crate::net::IpFamily::V4);
        for h in [&m.sync_duration, &m.full_sync_duration, &m.partial_sync_duration, &m.network_programming_duration, &m.conntrack_reconcile_duration] {
            h.get_or_create(&v4).observe(0.1);
        }
        m.last_sync_timestamp.get_or_create(&v4).set(1.0);
        m.last_queued_timestamp.get_or_create(&v4).set(1.0);
        for c in [&m.restore_failures, &m.partial_restore_failures, &m.conntrack_deleted] {
            c.get_or_create(&v4).inc();
        }
        m.rules.get_or_create(&TableLabel::of("nat", crate::net::IpFamily::V4)).set(1);
        m.rules_last.get_or_create(&TableLabel::of("nat", crate::net::IpFamily::V4)).set(1);
        m.no_local_endpoints.get_or_create(&PolicyLabel::of("internal", crate::net::IpFamily::V4)).set(1);
        m.healthz.get_or_create(&CodeLabel { code: "200".into() }).inc();
        m.livez.get_or_create(&CodeLabel { code: "200".into() }).inc();
        m
    }

    /// nftables mode's own families, each with a series.
    fn filled_nftables() -> Metrics {
        let mut m = Metrics::new();
        m.register_mode(crate::config::Mode::Nftables);
        let v4 = FamilyLabel::of(crate::net::IpFamily::V4);
        m.nftables_sync_failures.get_or_create(&v4).inc();
        m.nftables_cleanup_failures.get_or_create(&v4).inc();
        m.localhost_nodeports.listeners.get_or_create(&v4).set(2);
        m.localhost_nodeports.creation_failures.get_or_create(&v4).inc();
        m
    }

    #[test]
    fn every_family_has_kube_proxys_name_type_and_help() {
        let text = to_classic_text(&filled().encode()) + &to_classic_text(&filled_nftables().encode());
        for (name, kind, help) in KUBE_PROXY {
            assert!(text.lines().any(|l| l == format!("# TYPE {name} {kind}")), "# TYPE {name} {kind} in\n{text}");
            assert!(text.lines().any(|l| l == format!("# HELP {name} {help}.")), "# HELP {name} {help} in\n{text}");
        }
    }
}

#[cfg(test)]
mod mode_tests {
    use super::*;
    use crate::config::Mode;

    /// The families written in each mode, once every one of them has a series.
    fn written(mode: Mode) -> Vec<String> {
        let mut m = Metrics::new();
        m.register_mode(mode);
        let v4 = FamilyLabel::of(crate::net::IpFamily::V4);
        for h in [&m.full_sync_duration, &m.partial_sync_duration, &m.conntrack_reconcile_duration] {
            h.get_or_create(&v4).observe(0.1);
        }
        for c in [&m.restore_failures, &m.partial_restore_failures, &m.nftables_sync_failures, &m.nftables_cleanup_failures, &m.conntrack_deleted] {
            c.get_or_create(&v4).inc();
        }
        m.rules.get_or_create(&TableLabel::of("nat", crate::net::IpFamily::V4)).set(1);
        m.rules_last.get_or_create(&TableLabel::of("nat", crate::net::IpFamily::V4)).set(1);
        to_classic_text(&m.encode()).lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).map(str::to_string).collect()
    }

    /// kube-proxy's `RegisterMetrics(mode)`: what only some modes register.
    #[test]
    fn each_mode_registers_kube_proxys_families_for_it() {
        let moded = [
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
            "kubeproxy_sync_proxy_rules_iptables_total",
            "kubeproxy_sync_proxy_rules_iptables_last",
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        ];
        let has = |mode| -> Vec<bool> {
            let w = written(mode);
            moded.iter().map(|f| w.iter().any(|x| x == f)).collect()
        };
        assert_eq!(has(Mode::Iptables), [true, true, true, true, true, true, true, true, false, false]);
        assert_eq!(has(Mode::Ipvs), [false, false, true, false, false, false, true, true, false, false]);
        assert_eq!(has(Mode::Nftables), [true, true, false, false, false, false, true, true, true, true]);
    }
}

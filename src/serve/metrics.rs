//! kube-proxy's metrics (same names and meanings), plus svcproxy's own, in a
//! prometheus-client registry served at `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    pub table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

type FGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    pub registry: Registry,
    pub sync_duration: Histogram,
    pub full_sync_duration: Histogram,
    pub partial_sync_duration: Histogram,
    pub network_programming_duration: Histogram,
    pub last_sync_timestamp: FGauge,
    pub last_queued_timestamp: FGauge,
    pub service_changes_pending: Gauge,
    pub service_changes_total: Counter,
    pub endpoint_changes_pending: Gauge,
    pub endpoint_changes_total: Counter,
    pub restore_failures: Counter,
    pub partial_restore_failures: Counter,
    pub rules: Family<TableLabel, Gauge>,
    pub syncs: Family<ResultLabel, Counter>,
    pub malformed_objects: Counter,
    pub canary_checks: Counter,
    pub canary_lost: Counter,
}

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
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
            sync_duration: seconds(),
            full_sync_duration: seconds(),
            partial_sync_duration: seconds(),
            network_programming_duration: seconds(),
            last_sync_timestamp: FGauge::default(),
            last_queued_timestamp: FGauge::default(),
            service_changes_pending: Gauge::default(),
            service_changes_total: Counter::default(),
            endpoint_changes_pending: Gauge::default(),
            endpoint_changes_total: Counter::default(),
            restore_failures: Counter::default(),
            partial_restore_failures: Counter::default(),
            rules: Family::default(),
            syncs: Family::default(),
            malformed_objects: Counter::default(),
            canary_checks: Counter::default(),
            canary_lost: Counter::default(),
        };
        m.register()
    }

    fn register(mut self) -> Self {
        let r = &mut self.registry;
        r.register("kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", self.sync_duration.clone());
        r.register("kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency of full syncs in seconds", self.full_sync_duration.clone());
        r.register("kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency of partial syncs in seconds", self.partial_sync_duration.clone());
        r.register("kubeproxy_network_programming_duration_seconds", "In-cluster network programming latency in seconds", self.network_programming_duration.clone());
        r.register("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", self.last_sync_timestamp.clone());
        r.register("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", self.last_queued_timestamp.clone());
        r.register("kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes", self.service_changes_pending.clone());
        r.register("kubeproxy_sync_proxy_rules_service_changes", "Cumulative proxy rules Service changes", self.service_changes_total.clone());
        r.register("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes", self.endpoint_changes_pending.clone());
        r.register("kubeproxy_sync_proxy_rules_endpoint_changes", "Cumulative proxy rules Endpoint changes", self.endpoint_changes_total.clone());
        r.register("kubeproxy_sync_proxy_rules_iptables_restore_failures", "Cumulative proxy iptables restore failures", self.restore_failures.clone());
        r.register("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures", "Cumulative proxy iptables partial restore failures", self.partial_restore_failures.clone());
        r.register("kubeproxy_sync_proxy_rules_iptables", "Total number of iptables rules owned by kube-proxy", self.rules.clone());
        r.register("svcproxy_syncs", "Syncs run, by result", self.syncs.clone());
        r.register("svcproxy_malformed_objects", "Objects skipped because they could not be read", self.malformed_objects.clone());
        r.register("svcproxy_canary_checks", "Checks of the KUBE-PROXY-CANARY rules (iptables mode, once per sync period)", self.canary_checks.clone());
        r.register("svcproxy_canary_lost", "Checks that found a KUBE-PROXY-CANARY rule gone (each forces a full sync)", self.canary_lost.clone());
        self
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

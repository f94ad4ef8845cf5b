//! component-base's SLI registry, served at `/metrics/slis` on the metrics port as kube-proxy
//! serves it: `kubernetes_healthcheck{name,type}` (1 when the last run of a check passed,
//! else 0), `kubernetes_healthchecks_total{name,type,status}` and
//! `process_start_time_seconds`. The metrics port's `/healthz` runs its one check, `ping`
//! (type `healthz`, the path's first segment); a DELETE of `/metrics/slis` resets them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabel {
    pub name: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckStatusLabel {
    pub name: String,
    pub r#type: String,
    pub status: String,
}

pub struct Slis {
    pub registry: Registry,
    healthcheck: Family<CheckLabel, Gauge>,
    healthchecks: Family<CheckStatusLabel, Counter>,
}

impl Default for Slis {
    fn default() -> Self {
        Slis::new()
    }
}

impl Slis {
    pub fn new() -> Self {
        let mut s = Slis { registry: Registry::default(), healthcheck: Family::default(), healthchecks: Family::default() };
        // component-base's help texts; the registry ends each with the period.
        s.registry.register("kubernetes_healthcheck", "This metric records the result of a single healthcheck", s.healthcheck.clone());
        s.registry.register("kubernetes_healthchecks", "This metric records the results of all healthcheck", s.healthchecks.clone());
        s.registry.register_collector(Box::new(super::process::StartTimeCollector));
        s
    }

    /// One run of the check `name` of the endpoint `kind` (`healthz`).
    pub fn observe(&self, name: &str, kind: &str, passed: bool) {
        let check = CheckLabel { name: name.into(), r#type: kind.into() };
        self.healthcheck.get_or_create(&check).set(i64::from(passed));
        let status = if passed { "success" } else { "error" };
        self.healthchecks.get_or_create(&CheckStatusLabel { name: name.into(), r#type: kind.into(), status: status.into() }).inc();
    }

    /// component-base's reset (a DELETE of the endpoint): every series goes.
    pub fn reset(&self) {
        self.healthcheck.clear();
        self.healthchecks.clear();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        super::open_metrics(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_sets_its_gauge_and_counts_by_status_and_a_reset_clears_both() {
        let s = Slis::new();
        s.observe("ping", "healthz", true);
        s.observe("ping", "healthz", true);
        let text = s.encode();
        assert!(text.contains("# HELP kubernetes_healthcheck This metric records the result of a single healthcheck.\n"), "{text}");
        assert!(text.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1\n"), "{text}");
        assert!(text.contains("kubernetes_healthchecks_total{name=\"ping\",type=\"healthz\",status=\"success\"} 2\n"), "{text}");
        assert!(text.contains("process_start_time_seconds "), "{text}");
        s.observe("ping", "healthz", false);
        let text = s.encode();
        assert!(text.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 0\n"), "{text}");
        assert!(text.contains("status=\"error\"} 1\n"), "{text}");
        s.reset();
        assert!(!s.encode().contains("name=\"ping\""));
    }
}

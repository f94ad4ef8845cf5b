//! Every default, once: kube-proxy's defaulting (`SetDefaults_KubeProxyConfiguration` of
//! v1alpha1, and the Linux `platformApplyDefaults`) for the file settings, and svcproxy's own
//! settings' defaults. [`crate::config::resolve`] resolves over this layer, and
//! `--write-config-to` and `/configz` write its file settings. A field whose zero kube-proxy
//! replaces with a default is read from the file as unset ([`ZERO_MEANS_DEFAULT`]).
//!
//! Defaults that are not kube-proxy's defaulting stay where kube-proxy has them: the node
//! name (the host's), the IPVS scheduler (`rr`, the IPVS proxier's when `ipvs.scheduler` is
//! empty) and the QPS/burst/content type constants (`config::client`, used here).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::kinds::{Families, KubeProxyVersion, LocalMode, LogFormat, ProxyMode};
use super::value::{bind_address, default_server_addresses, Raw, SettingValue};
use super::{row, Settings};

/// File paths whose zero value kube-proxy's defaulting replaces (`if x == 0 { x = default }`).
pub const ZERO_MEANS_DEFAULT: &[&str] = &[
    row::iptables_sync_period.path(),
    row::iptables_min_sync_period.path(),
    row::ipvs_sync_period.path(),
    row::nftables_sync_period.path(),
    row::nftables_min_sync_period.path(),
    row::config_sync_period.path(),
    row::kube_api_qps.path(),
    row::kube_api_burst.path(),
];

/// kube-proxy's defaults for `clientConnection` (v1alpha1 defaulting).
pub const DEFAULT_QPS: f32 = 5.0;
pub const DEFAULT_BURST: i32 = 10;
pub const DEFAULT_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

const fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

/// The layer with every unset file setting given kube-proxy's default.
pub fn defaulted(s: Settings) -> Settings {
    let bind = s.bind_address.clone().unwrap_or_else(|| "0.0.0.0".into());
    // The server addresses as watch mode binds them (kube-proxy's defaults by bindAddress's
    // family, a missing port appended); the deprecated port flags are not part of the file.
    let (healthz, metrics) = default_server_addresses(s.bind_address.as_deref());
    let resolved = bind_address(s.healthz_bind_address.as_deref(), None, healthz)
        .and_then(|h| Ok((h, bind_address(s.metrics_bind_address.as_deref(), None, metrics)?)))
        .ok();
    let shown = |a: Option<std::net::SocketAddr>, raw: &Option<String>| a.map(|a| a.to_string()).or_else(|| raw.clone());
    let healthz = shown(resolved.and_then(|v| v.0), &s.healthz_bind_address);
    let metrics = shown(resolved.and_then(|v| v.1), &s.metrics_bind_address);
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let defaults = Settings {
        bind_address: Some(bind),
        healthz_bind_address: healthz,
        metrics_bind_address: metrics,
        oom_score_adj: Some(-999),
        iptables_sync_period: secs(30),
        iptables_min_sync_period: secs(1),
        localhost_node_ports: Some(true),
        ipvs_sync_period: secs(30),
        // Not defaulted by kube-proxy (pkg/proxy/apis/config/v1alpha1/defaults.go): Go's zero, 0s.
        ipvs_min_sync_period: Some(Duration::ZERO),
        nftables_sync_period: secs(30),
        nftables_min_sync_period: secs(1),
        conntrack_max_per_core: Some(32 * 1024),
        conntrack_min: Some(128 * 1024),
        masquerade_bit: Some(14),
        nftables_masquerade_bit: Some(14),
        conntrack_tcp_established_timeout: secs(24 * 3600),
        conntrack_tcp_close_wait_timeout: secs(3600),
        conntrack_udp_timeout: Some(Duration::ZERO),
        conntrack_udp_stream_timeout: Some(Duration::ZERO),
        config_sync_period: secs(15 * 60),
        kube_api_content_type: Some(DEFAULT_CONTENT_TYPE.into()),
        kube_api_qps: Some(DEFAULT_QPS),
        kube_api_burst: Some(DEFAULT_BURST),
        feature_gates: Some(BTreeMap::new()),
        // component-base's SetRecommendedLoggingConfiguration.
        log_format: Some(LogFormat::Text),
        log_flush_frequency: Some(Raw(json!("5s"))),
        log_verbosity: Some(0),
        log_options: Some(Raw(json!({"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}))),
        // Linux's platformApplyDefaults.
        mode: Some(ProxyMode::Iptables),
        detect_local_mode: Some(LocalMode::ClusterCidr),
        // svcproxy's own settings (not in the file).
        ip_family: Some(Families::Auto),
        random_fully: Some(true),
        nfacct: Some(true),
        nft_netlink: Some(true),
        socket_lb: Some(false),
        socket_lb_cgroup: Some("/sys/fs/cgroup".into()),
        socket_lb_pin_dir: Some("/sys/fs/bpf/svcproxy".into()),
        kube_proxy_version: Some(KubeProxyVersion::NEWEST),
        // kube-proxy's FullSyncPeriod, a constant there.
        full_sync_period: secs(3600),
        // kube-proxy's largeClusterEndpointsThreshold, a constant there.
        large_cluster_endpoints_threshold: Some(1000),
        ..Settings::default()
    };
    let s = Settings {
        iptables_sync_period: nonzero(s.iptables_sync_period),
        ipvs_sync_period: nonzero(s.ipvs_sync_period),
        nftables_sync_period: nonzero(s.nftables_sync_period),
        config_sync_period: nonzero(s.config_sync_period),
        kube_api_qps: s.kube_api_qps.filter(|q| *q != 0.0),
        kube_api_burst: s.kube_api_burst.filter(|b| *b != 0),
        log_flush_frequency: s.log_flush_frequency.filter(|f| !f.is_zero()),
        ..s
    };
    // Fields whose written form is normalised (the port appended) take it from `defaults`.
    Settings { healthz_bind_address: None, metrics_bind_address: None, bind_address: None, ..s }.over(defaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_and_zero_fields_get_kube_proxys_defaults() {
        let d = defaulted(Settings { iptables_sync_period: Some(Duration::ZERO), conntrack_max_per_core: Some(0), ..Settings::default() });
        assert_eq!(d.iptables_sync_period, secs(30), "zero means default");
        assert_eq!(d.conntrack_max_per_core, Some(0), "a pointer field's zero stays");
        assert_eq!(d.healthz_bind_address.as_deref(), Some("0.0.0.0:10256"));
        assert_eq!(d.oom_score_adj, Some(-999));
        assert_eq!(d.mode, Some(ProxyMode::Iptables));
        assert_eq!(d.ipvs_min_sync_period, Some(Duration::ZERO), "kube-proxy defaults ipvs.minSyncPeriod to nothing: 0s");
        assert_eq!(d.iptables_min_sync_period, secs(1));
    }

    #[test]
    fn svcproxys_own_defaults_are_not_written_to_the_file() {
        let d = defaulted(Settings::default());
        assert_eq!((d.random_fully, d.nfacct, d.ip_family), (Some(true), Some(true), Some(Families::Auto)));
        let written = super::super::file::to_document(&d, true);
        assert!(written.get("randomFully").is_none() && written.get("fullSyncPeriod").is_none(), "{written}");
        assert_eq!(written["ipvs"]["scheduler"], "", "rr is the IPVS proxier's, as in kube-proxy");
    }

    #[test]
    fn addresses_get_their_port_and_the_bind_family() {
        let d = defaulted(Settings { healthz_bind_address: Some("127.0.0.1".into()), bind_address: Some("fd00::1".into()), ..Settings::default() });
        assert_eq!(d.healthz_bind_address.as_deref(), Some("127.0.0.1:10256"));
        assert_eq!(d.metrics_bind_address.as_deref(), Some("[::1]:10249"));
        assert_eq!(d.bind_address.as_deref(), Some("fd00::1"));
    }
}

//! kube-proxy's defaulting (`SetDefaults_KubeProxyConfiguration` of v1alpha1, and the Linux
//! `platformApplyDefaults`): the effective value of every file setting, for
//! `--write-config-to`. A field whose zero kube-proxy replaces with a default is read from
//! the file as unset ([`ZERO_MEANS_DEFAULT`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde_json::json;

use super::kinds::{LocalMode, LogFormat, ProxyMode};
use super::value::{Raw, SettingValue};
use super::Settings;

/// File paths whose zero value kube-proxy's defaulting replaces (`if x == 0 { x = default }`).
pub const ZERO_MEANS_DEFAULT: &[&str] = &[
    "iptables.syncPeriod",
    "iptables.minSyncPeriod",
    "ipvs.syncPeriod",
    "nftables.syncPeriod",
    "nftables.minSyncPeriod",
    "configSyncPeriod",
    "clientConnection.qps",
    "clientConnection.burst",
];

const fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

/// `addr` with `port` appended when it has none (kube-proxy's `AppendPortIfNeeded`).
fn with_port(addr: &str, port: u16) -> String {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return addr.to_string();
    }
    match addr.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        Ok(ip) => format!("{ip}:{port}"),
        Err(_) => addr.to_string(),
    }
}

/// The layer with every unset file setting given kube-proxy's default.
pub fn defaulted(s: Settings) -> Settings {
    let bind = s.bind_address.clone().unwrap_or_else(|| "0.0.0.0".into());
    let v4 = bind.parse::<IpAddr>().map_or(true, |ip| ip.is_ipv4());
    let (any, local) = if v4 { ("0.0.0.0", "127.0.0.1") } else { ("[::]", "[::1]") };
    let healthz = match &s.healthz_bind_address {
        Some(a) => with_port(a, super::super::config::node::HEALTHZ_PORT),
        None => format!("{any}:10256"),
    };
    let metrics = match &s.metrics_bind_address {
        Some(a) => with_port(a, super::super::config::node::METRICS_PORT),
        None => format!("{local}:10249"),
    };
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let defaults = Settings {
        bind_address: Some(bind),
        healthz_bind_address: Some(healthz),
        metrics_bind_address: Some(metrics),
        oom_score_adj: Some(-999),
        iptables_sync_period: secs(30),
        iptables_min_sync_period: secs(1),
        localhost_node_ports: Some(true),
        ipvs_sync_period: secs(30),
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
        kube_api_content_type: Some(crate::config::client::DEFAULT_CONTENT_TYPE.into()),
        kube_api_qps: Some(crate::config::client::DEFAULT_QPS),
        kube_api_burst: Some(crate::config::client::DEFAULT_BURST),
        feature_gates: Some(BTreeMap::new()),
        // component-base's SetRecommendedLoggingConfiguration.
        log_format: Some(LogFormat::Text),
        log_flush_frequency: Some(Raw(json!("5s"))),
        log_verbosity: Some(0),
        log_options: Some(Raw(json!({"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}))),
        // Linux's platformApplyDefaults.
        mode: Some(ProxyMode::Iptables),
        detect_local_mode: Some(LocalMode::ClusterCidr),
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
    }

    #[test]
    fn addresses_get_their_port_and_the_bind_family() {
        let d = defaulted(Settings { healthz_bind_address: Some("127.0.0.1".into()), bind_address: Some("fd00::1".into()), ..Settings::default() });
        assert_eq!(d.healthz_bind_address.as_deref(), Some("127.0.0.1:10256"));
        assert_eq!(d.metrics_bind_address.as_deref(), Some("[::1]:10249"));
        assert_eq!(d.bind_address.as_deref(), Some("fd00::1"));
    }
}

//! A `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`) file, so users can reuse
//! their kube-proxy config. Only the fields svcproxy uses are read; the rest are accepted
//! and ignored, as a newer kube-proxy's fields would be.

use std::path::Path;

use serde::Deserialize;

use super::settings::Settings;
use super::ConfigError;

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct KubeProxyConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
    hostname_override: Option<String>,
    bind_address: Option<String>,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: Option<String>,
    detect_local_mode: Option<String>,
    detect_local: DetectLocal,
    mode: Option<String>,
    node_port_addresses: Option<Vec<String>>,
    iptables: Iptables,
    ipvs: Ipvs,
    conntrack: Conntrack,
    client_connection: ClientConnection,
}

/// componentbaseconfig's `ClientConnectionConfiguration`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ClientConnection {
    kubeconfig: Option<String>,
    qps: Option<f32>,
    burst: Option<i32>,
    content_type: Option<String>,
    accept_content_types: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct DetectLocal {
    bridge_interface: Option<String>,
    interface_name_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Iptables {
    masquerade_all: Option<bool>,
    masquerade_bit: Option<u32>,
    localhost_node_ports: Option<bool>,
    sync_period: Option<String>,
    min_sync_period: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Ipvs {
    scheduler: Option<String>,
    #[serde(rename = "excludeCIDRs")]
    exclude_cidrs: Option<Vec<String>>,
    #[serde(rename = "strictARP")]
    strict_arp: Option<bool>,
    tcp_timeout: Option<String>,
    tcp_fin_timeout: Option<String>,
    udp_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Conntrack {
    tcp_be_liberal: Option<bool>,
}

/// Reads the file into a settings layer.
pub fn read(path: &Path) -> Result<Settings, ConfigError> {
    let err = |reason: String| ConfigError::File { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let cfg: KubeProxyConfiguration = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
    if cfg.kind.as_deref().is_some_and(|k| k != "KubeProxyConfiguration") {
        return Err(err(format!("kind {:?} is not KubeProxyConfiguration", cfg.kind.unwrap_or_default())));
    }
    if cfg.api_version.as_deref().is_some_and(|v| v != API_VERSION) {
        return Err(err(format!("apiVersion {:?} is not {API_VERSION}", cfg.api_version.unwrap_or_default())));
    }
    let dur = |field: &str, v: Option<String>| -> Result<Option<f64>, ConfigError> {
        v.filter(|s| !s.is_empty() && s != "0s")
            .map(|s| parse_duration(&s).ok_or_else(|| err(format!("{field}: invalid duration {s:?}"))))
            .transpose()
    };
    let secs = |field: &str, v: Option<String>| dur(field, v).map(|d| d.map(|d| d.round() as u32));
    Ok(Settings {
        mode: cfg.mode.filter(|m| !m.is_empty()),
        hostname_override: cfg.hostname_override.filter(|s| !s.is_empty()),
        node_ips: cfg.bind_address.filter(|a| !a.is_empty() && a != "0.0.0.0" && a != "::").map(|a| vec![a]),
        cluster_cidr: cfg.cluster_cidr.filter(|s| !s.is_empty()),
        detect_local_mode: cfg.detect_local_mode.filter(|s| !s.is_empty()),
        pod_bridge_interface: cfg.detect_local.bridge_interface.filter(|s| !s.is_empty()),
        pod_interface_name_prefix: cfg.detect_local.interface_name_prefix.filter(|s| !s.is_empty()),
        node_port_addresses: cfg.node_port_addresses,
        masquerade_all: cfg.iptables.masquerade_all,
        masquerade_bit: cfg.iptables.masquerade_bit,
        localhost_node_ports: cfg.iptables.localhost_node_ports,
        sync_period_secs: dur("iptables.syncPeriod", cfg.iptables.sync_period)?,
        min_sync_period_secs: dur("iptables.minSyncPeriod", cfg.iptables.min_sync_period)?,
        ipvs_scheduler: cfg.ipvs.scheduler.filter(|s| !s.is_empty()),
        ipvs_exclude_cidrs: cfg.ipvs.exclude_cidrs,
        ipvs_strict_arp: cfg.ipvs.strict_arp,
        ipvs_tcp_timeout: secs("ipvs.tcpTimeout", cfg.ipvs.tcp_timeout)?,
        ipvs_tcpfin_timeout: secs("ipvs.tcpFinTimeout", cfg.ipvs.tcp_fin_timeout)?,
        ipvs_udp_timeout: secs("ipvs.udpTimeout", cfg.ipvs.udp_timeout)?,
        conntrack_tcp_be_liberal: cfg.conntrack.tcp_be_liberal,
        kubeconfig: cfg.client_connection.kubeconfig.filter(|s| !s.is_empty()),
        // Zero is "unset" in the file (kube-proxy's defaulting replaces it).
        kube_api_qps: cfg.client_connection.qps.filter(|q| *q != 0.0),
        kube_api_burst: cfg.client_connection.burst.filter(|b| *b != 0),
        kube_api_content_type: cfg.client_connection.content_type.filter(|s| !s.is_empty()),
        kube_api_accept_content_types: cfg.client_connection.accept_content_types.filter(|s| !s.is_empty()),
        ..Settings::default()
    })
}

/// Go duration strings as Kubernetes writes them (`30s`, `1m0s`, `1h`, `500ms`).
pub fn parse_duration(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("30s"), Some(30.0));
        assert_eq!(parse_duration("1m0s"), Some(60.0));
        assert_eq!(parse_duration("1h30m"), Some(5400.0));
        assert_eq!(parse_duration("500ms"), Some(0.5));
        assert_eq!(parse_duration("15"), None);
        assert_eq!(parse_duration(""), None);
    }
}

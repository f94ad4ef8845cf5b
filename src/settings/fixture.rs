//! A fixture document's first object (`node:` and `options:`) as a [`Settings`] layer.

use super::kinds::{Families, LocalMode, ProxyMode};
use super::Settings;
use crate::config::ConfigError;
use crate::source::fixture::FixtureDoc;

impl Settings {
    /// The fixture's layer; a named value (mode, ipFamily, detectLocalMode) that is not one
    /// of its names is an error naming the option.
    pub fn from_fixture(doc: &FixtureDoc) -> Result<Settings, ConfigError> {
        let n = &doc.node;
        let o = doc.options.clone();
        let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let mode = given(o.mode).map(|m| ProxyMode::parse(&m)).transpose().map_err(|e| invalid("options.mode", e))?;
        let ip_family = given(o.ip_family).map(|f| Families::parse(&f)).transpose().map_err(|e| invalid("options.ipFamily", e))?;
        let detect_local_mode =
            given(o.detect_local_mode).map(|m| LocalMode::parse(&m)).transpose().map_err(|e| invalid("options.detectLocalMode", e))?;
        Ok(Settings {
            mode,
            ip_family,
            hostname_override: n.name.clone(),
            node_ips: (!n.ips.is_empty()).then(|| n.ips.clone()),
            node_labels: (!n.labels.is_empty()).then(|| n.labels.clone()),
            node_pod_cidrs: (!n.pod_cidrs.is_empty()).then(|| n.pod_cidrs.clone()),
            cluster_cidr: o.cluster_cidr,
            detect_local_mode,
            pod_bridge_interface: o.pod_bridge_interface,
            pod_interface_name_prefix: o.pod_interface_name_prefix,
            masquerade_bit: o.masquerade_bit,
            masquerade_all: o.masquerade_all,
            masquerade_mark: o.masquerade_mark,
            interface_addresses: (!n.interface_addresses.is_empty())
                .then(|| n.interface_addresses.values().flatten().cloned().collect()),
            node_port_addresses: o.node_port_addresses,
            localhost_node_ports: o.localhost_node_ports,
            random_fully: o.random_fully,
            nfacct: o.nfacct,
            conntrack_tcp_be_liberal: o.conntrack_tcp_be_liberal,
            large_cluster_endpoints_threshold: o.large_cluster_endpoints_threshold,
            service_proxy_name: o.service_proxy_name,
            ipvs_scheduler: o.ipvs_scheduler,
            ipvs_strict_arp: o.ipvs_strict_arp,
            ipvs_exclude_cidrs: o.ipvs_exclude_cidrs,
            ..Settings::default()
        })
    }
}

fn invalid(setting: &'static str, reason: String) -> ConfigError {
    ConfigError::Invalid { setting, reason }
}

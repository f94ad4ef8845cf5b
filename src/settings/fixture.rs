//! A fixture document's first object (`node:` and `options:`) as a [`Settings`] layer.

use super::Settings;
use crate::source::fixture::FixtureDoc;

impl Settings {
    pub fn from_fixture(doc: &FixtureDoc) -> Settings {
        let n = &doc.node;
        let o = doc.options.clone();
        Settings {
            mode: o.mode,
            ip_family: o.ip_family,
            hostname_override: n.name.clone(),
            node_ips: (!n.ips.is_empty()).then(|| n.ips.clone()),
            node_labels: (!n.labels.is_empty()).then(|| n.labels.clone()),
            node_pod_cidrs: (!n.pod_cidrs.is_empty()).then(|| n.pod_cidrs.clone()),
            cluster_cidr: o.cluster_cidr,
            detect_local_mode: o.detect_local_mode,
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
        }
    }
}

//! One layer of settings, every field optional. Layers come from a fixture's first
//! document, a KubeProxyConfiguration file and the command line; [`Settings::over`]
//! stacks them, and [`super::resolve`] turns the stack into a [`super::Config`].

use std::collections::BTreeMap;

use crate::source::fixture::FixtureDoc;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub mode: Option<String>,
    pub ip_family: Option<String>,
    pub hostname_override: Option<String>,
    pub node_ips: Option<Vec<String>>,
    pub node_labels: Option<BTreeMap<String, String>>,
    pub node_pod_cidrs: Option<Vec<String>>,
    pub cluster_cidr: Option<String>,
    pub detect_local_mode: Option<String>,
    pub pod_bridge_interface: Option<String>,
    pub pod_interface_name_prefix: Option<String>,
    pub masquerade_bit: Option<u32>,
    pub masquerade_all: Option<bool>,
    pub masquerade_mark: Option<String>,
    pub interface_addresses: Option<Vec<String>>,
    pub node_port_addresses: Option<Vec<String>>,
    pub localhost_node_ports: Option<bool>,
    pub random_fully: Option<bool>,
    pub nfacct: Option<bool>,
    pub conntrack_tcp_be_liberal: Option<bool>,
    pub large_cluster_endpoints_threshold: Option<usize>,
    pub service_proxy_name: Option<String>,
    pub ipvs_scheduler: Option<String>,
    pub ipvs_strict_arp: Option<bool>,
    pub ipvs_exclude_cidrs: Option<Vec<String>>,
    pub ipvs_tcp_timeout: Option<u32>,
    pub ipvs_tcpfin_timeout: Option<u32>,
    pub ipvs_udp_timeout: Option<u32>,
    pub sync_period_secs: Option<f64>,
    pub min_sync_period_secs: Option<f64>,
    /// `clientConnection.kubeconfig` / `--kubeconfig`.
    pub kubeconfig: Option<String>,
    /// `clientConnection.qps` / `--kube-api-qps`.
    pub kube_api_qps: Option<f32>,
    /// `clientConnection.burst` / `--kube-api-burst`.
    pub kube_api_burst: Option<i32>,
    /// `clientConnection.contentType` / `--kube-api-content-type`.
    pub kube_api_content_type: Option<String>,
    /// `clientConnection.acceptContentTypes`.
    pub kube_api_accept_content_types: Option<String>,
}

macro_rules! over {
    ($top:expr, $under:expr, $($f:ident),*) => {
        Settings { $($f: $top.$f.or($under.$f),)* }
    };
}

impl Settings {
    /// `self` wins where it has a value; `under` fills the rest.
    pub fn over(self, under: Settings) -> Settings {
        over!(self, under, mode, ip_family, hostname_override, node_ips, node_labels, node_pod_cidrs,
            cluster_cidr, detect_local_mode, pod_bridge_interface, pod_interface_name_prefix,
            masquerade_bit, masquerade_all, masquerade_mark, interface_addresses, node_port_addresses, localhost_node_ports, random_fully,
            nfacct, conntrack_tcp_be_liberal, large_cluster_endpoints_threshold, service_proxy_name,
            ipvs_scheduler, ipvs_strict_arp, ipvs_exclude_cidrs, ipvs_tcp_timeout, ipvs_tcpfin_timeout,
            ipvs_udp_timeout, sync_period_secs, min_sync_period_secs, kubeconfig, kube_api_qps, kube_api_burst,
            kube_api_content_type, kube_api_accept_content_types)
    }

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

//! Resolved, immutable settings. The CLI validates flags into a [`Settings`] layer, stacks
//! it over a KubeProxyConfiguration file and a fixture's options, and [`resolve`] turns the
//! stack (plus this node's `v1/Node`, when the input has it) into a [`Config`].

pub mod client;
pub mod context;
pub mod node;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::settings::Settings;
use crate::settings::{defaults, row};
use crate::settings::kinds::{Families, KubeProxyVersion, ProxyMode};

use crate::model::Node;
use crate::net::{parse_ip_sloppy, Cidr, IpFamily};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{setting}: {reason}")]
    Invalid { setting: &'static str, reason: String },
}

fn invalid(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { setting, reason: reason.into() }
}

/// The proxy mode (`mode`).
pub use crate::settings::kinds::ProxyMode as Mode;

/// How traffic from local pods is recognised (`detectLocalMode`).
pub use crate::settings::kinds::LocalMode as LocalDetectMode;
/// Which of kube-proxy's two nftables tables is written (from `--kube-proxy-version`).
pub use crate::settings::kinds::NftablesTable;

/// How traffic from local pods is told apart (kube-proxy's `LocalTrafficDetector`); each
/// mode writes its own match from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalDetector {
    /// From the pods' CIDR (`ClusterCIDR`, `NodeCIDR`).
    Source(Cidr),
    /// In on a pod interface: one name, or (`wildcard`) every name starting with `name`.
    Interface { name: String, wildcard: bool },
}

/// The detector as iptables match arguments: "is from a local pod" and "is not".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IptablesDetector {
    pub if_local: Vec<String>,
    pub if_not_local: Vec<String>,
}

impl LocalDetector {
    /// iptables' words (`-s CIDR`, `-i NAME`, a wildcard written `NAME+`), as pkg/proxy/util's
    /// detectors build them.
    pub fn iptables(&self) -> IptablesDetector {
        let (flag, value) = match self {
            LocalDetector::Source(cidr) => ("-s", cidr.to_string()),
            LocalDetector::Interface { name, wildcard } => ("-i", if *wildcard { format!("{name}+") } else { name.clone() }),
        };
        IptablesDetector { if_local: vec![flag.into(), value.clone()], if_not_local: vec!["!".into(), flag.into(), value] }
    }
}

/// IPVS-mode settings.
#[derive(Debug, Clone, PartialEq)]
pub struct IpvsConfig {
    pub scheduler: String,
    pub strict_arp: bool,
    pub exclude_cidrs: Vec<Cidr>,
    pub tcp_timeout: u32,
    pub tcpfin_timeout: u32,
    pub udp_timeout: u32,
}

/// kube-proxy's `conntrack:` settings with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ConntrackConfig {
    /// 0 (or less): leave `nf_conntrack_max` as it is.
    pub max_per_core: i32,
    pub min: i32,
    /// `None` or zero: leave the sysctl as it is.
    pub tcp_established_timeout: Option<Duration>,
    pub tcp_close_wait_timeout: Option<Duration>,
    pub tcp_be_liberal: bool,
    /// Zero: leave it.
    pub udp_timeout: Duration,
    pub udp_stream_timeout: Duration,
}

impl Default for ConntrackConfig {
    /// kube-proxy's v1alpha1 defaults (from [`defaults::defaulted`]).
    fn default() -> Self {
        ConntrackConfig::resolve(&defaults::defaulted(Settings::default())).expect("settings::defaults gives every conntrack default")
    }
}

impl ConntrackConfig {
    /// From the defaulted layer.
    fn resolve(s: &Settings) -> Result<Self, ConfigError> {
        Ok(ConntrackConfig {
            max_per_core: given(s.conntrack_max_per_core, row::conntrack_max_per_core.path())?,
            min: given(s.conntrack_min, row::conntrack_min.path())?,
            tcp_established_timeout: s.conntrack_tcp_established_timeout,
            tcp_close_wait_timeout: s.conntrack_tcp_close_wait_timeout,
            tcp_be_liberal: s.conntrack_tcp_be_liberal.unwrap_or_default(),
            udp_timeout: s.conntrack_udp_timeout.unwrap_or_default(),
            udp_stream_timeout: s.conntrack_udp_stream_timeout.unwrap_or_default(),
        })
    }
}

/// A 32-bit number in one of the forms nftables mode's rules are read back in: decimal
/// without leading zeros, or `0x` and one to eight lowercase hex digits.
fn nft_number(w: &str) -> bool {
    match w.strip_prefix("0x") {
        Some(h) => (1..=8).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        None => !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) && (w == "0" || !w.starts_with('0')) && w.parse::<u32>().is_ok(),
    }
}

/// A setting the defaulted layer always has; `None` means `settings::defaults` lacks its
/// default, which is reported rather than replaced by a second default here.
fn given<T>(v: Option<T>, setting: &'static str) -> Result<T, ConfigError> {
    v.ok_or_else(|| invalid(setting, "has no value and no default (settings::defaults misses it)"))
}

/// Where the socket-LB programs attach (a cgroup v2 directory) and pin their maps and
/// links (a bpffs directory svcproxy owns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketLbConfig {
    pub cgroup: PathBuf,
    pub pins: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub mode: Mode,
    /// The families to proxy, IPv4 first.
    pub families: Vec<IpFamily>,
    pub node_name: String,
    pub node_labels: BTreeMap<String, String>,
    /// This node's IPs (the first of each family is the primary).
    pub node_ips: Vec<IpAddr>,
    pub node_pod_cidrs: Vec<Cidr>,
    pub cluster_cidrs: Vec<Cidr>,
    pub detect_local_mode: LocalDetectMode,
    pub pod_bridge_interface: String,
    pub pod_interface_name_prefix: String,
    pub masquerade_bit: u32,
    pub masquerade_all: bool,
    /// ServiceCIDRs (nftables mode drops traffic to their unallocated addresses): the
    /// `serviceCIDRs` option's, or else the ServiceCIDR objects'.
    pub service_cidrs: Vec<Cidr>,
    /// Whether the `serviceCIDRs` option set them (ServiceCIDR objects then change nothing).
    pub service_cidrs_option: bool,
    /// The `AllowServiceExternalIPs` feature gate (default on): off, `spec.externalIPs`
    /// get no rules in any mode (kube-proxy v1.37, KEP-5707).
    pub allow_external_ips: bool,
    /// The `KubeProxyNFTablesLocalhostNodePorts` feature gate (alpha, default off): in
    /// nftables mode, localhost NodePorts are rejected and counted, and TCP ones served by
    /// a userspace proxy where `nodePortAddresses` names loopback (kube-proxy v1.37).
    pub nft_localhost_node_ports: bool,
    /// Overrides the formatted mark (kube-proxy's unit-test fake); normally `None`.
    pub masquerade_mark_text: Option<String>,
    /// The node's interface addresses, when known (else the node IPs and loopback).
    pub interface_addresses: Option<Vec<IpAddr>>,
    /// Empty: NodePorts on every local address.
    pub node_port_addresses: Vec<Cidr>,
    pub localhost_node_ports: bool,
    pub random_fully: bool,
    pub nfacct: bool,
    /// nftables mode: transactions as netlink batches (else through `nft -f`).
    pub nft_netlink: bool,
    /// `--socket-lb`: where the socket-LB programs attach and pin (`None`: off).
    pub socket_lb: Option<SocketLbConfig>,
    /// The kube-proxy release whose rules to write (`--kube-proxy-version`).
    pub kube_proxy_version: KubeProxyVersion,
    /// Conntrack tuning (the daemon applies it at start; see [`crate::node::conntrack`]).
    pub conntrack: ConntrackConfig,
    pub large_cluster_endpoints_threshold: usize,
    pub service_proxy_name: Option<String>,
    pub ipvs: IpvsConfig,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    /// How often watch mode's sync compares everything with the kernel (kube-proxy's
    /// `FullSyncPeriod`, 1 h).
    pub full_sync_period: Duration,
}

impl Config {
    /// The node's primary IP of a family; kube-proxy assumes loopback when it finds none.
    pub fn node_ip(&self, family: IpFamily) -> IpAddr {
        self.node_ips.iter().copied().find(|ip| IpFamily::of(ip) == family).unwrap_or(family.loopback())
    }

    /// The local-traffic detector for a family, or `None` (kube-proxy's no-op detector).
    pub fn local_detector(&self, family: IpFamily) -> Option<LocalDetector> {
        let of_family = |cidrs: &[Cidr]| cidrs.iter().find(|c| c.family() == family).copied();
        match self.detect_local_mode {
            LocalDetectMode::ClusterCidr => of_family(&self.cluster_cidrs).map(LocalDetector::Source),
            LocalDetectMode::NodeCidr => of_family(&self.node_pod_cidrs).map(LocalDetector::Source),
            LocalDetectMode::BridgeInterface => Some(LocalDetector::Interface { name: self.pod_bridge_interface.clone(), wildcard: false }),
            LocalDetectMode::InterfaceNamePrefix => Some(LocalDetector::Interface { name: self.pod_interface_name_prefix.clone(), wildcard: true }),
            LocalDetectMode::None => None,
        }
    }

    /// The masquerade mark as kube-proxy formats it (Go `%#08x`: `0x00004000`).
    pub fn masquerade_mark(&self) -> String {
        if let Some(m) = &self.masquerade_mark_text {
            return m.clone();
        }
        format!("{:#010x}", 1u32 << self.masquerade_bit)
    }

    /// `nodePortAddresses` of one family; empty means every local address.
    pub fn node_port_cidrs(&self, family: IpFamily) -> Vec<Cidr> {
        let cidrs: Vec<Cidr> = self.node_port_addresses.iter().filter(|c| c.family() == family).copied().collect();
        if cidrs.iter().any(|c| c.prefix() == 0) {
            return Vec::new();
        }
        cidrs
    }

    /// kube-proxy v1.37's `ContainsExplicitLoopback`: whether `nodePortAddresses` names a
    /// loopback CIDR of this family (`localhost`, `127.0.0.1/32`, `::1/128`; not `all`, whose
    /// zero CIDR only contains it). Where it does, nftables mode's userspace proxy serves
    /// TCP NodePorts on that family's loopback address (with the gate on).
    pub fn node_port_addresses_name_loopback(&self, family: IpFamily) -> bool {
        self.node_port_addresses.iter().any(|c| c.family() == family && c.prefix() > 0 && c.addr().is_loopback())
    }

    /// Whether NodePorts answer on 127.0.0.1 for this family (never on IPv6; on IPv4 only
    /// when enabled and `nodePortAddresses` covers IPv4 loopback).
    pub fn localhost_node_ports(&self, family: IpFamily) -> bool {
        if family.is_v6() || !self.localhost_node_ports {
            return false;
        }
        let cidrs = self.node_port_cidrs(family);
        let loopback = IpFamily::V4.loopback();
        cidrs.is_empty() || cidrs.iter().any(|c| c.contains(&loopback) || c.addr().is_loopback())
    }

    /// The addresses NodePorts are bound to when `nodePortAddresses` is set: every
    /// interface address inside one of the CIDRs (kube-proxy's `GetNodeIPs`), sorted.
    /// Without known interfaces, the node IPs and loopback stand for them.
    pub fn node_port_ips(&self, family: IpFamily) -> Vec<IpAddr> {
        let cidrs = self.node_port_cidrs(family);
        let fallback: Vec<IpAddr> = self
            .node_ips
            .iter()
            .copied()
            .chain([IpFamily::V4.loopback(), IpFamily::V6.loopback()])
            .collect();
        let mut ips: Vec<IpAddr> = self
            .interface_addresses
            .as_ref()
            .unwrap_or(&fallback)
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == family && cidrs.iter().any(|c| c.contains(ip)))
            .collect();
        ips.sort();
        ips.dedup();
        ips
    }
}

/// Resolves a settings stack over its defaults ([`defaults::defaulted`]: kube-proxy's and
/// svcproxy's, each known there only). `nodes` are the `v1/Node` objects of the input: the
/// one named like this node contributes addresses, pod CIDRs and labels not set otherwise.
pub fn resolve(s: Settings, nodes: &[Node]) -> Result<Config, ConfigError> {
    let s = defaults::defaulted(s);
    let node_name = match s.hostname_override.clone() {
        Some(n) if !n.trim().is_empty() => n.trim().to_lowercase(),
        _ => default_hostname(),
    };
    let node = nodes.iter().rev().find(|n| n.name == node_name);
    // `--node-ip`, else kube-proxy's bindAddress (unless unspecified), else the Node's.
    let bind_address = s.bind_address.clone().filter(|a| !matches!(a.trim(), "" | "0.0.0.0" | "::")).map(|a| vec![a]);
    let node_ips = match s.node_ips.as_ref().or(bind_address.as_ref()) {
        Some(list) => parse_node_ips(list)?,
        None => node.map(Node::host_ips).unwrap_or_default(),
    };
    let node_pod_cidrs = match &s.node_pod_cidrs {
        Some(list) => parse_cidrs("node pod CIDRs", list)?,
        None => node.map(|n| n.pod_cidrs.clone()).unwrap_or_default(),
    };
    let node_labels = s.node_labels.clone().or_else(|| node.map(|n| n.labels.clone())).unwrap_or_default();
    let cluster_cidrs = match &s.cluster_cidr {
        Some(list) => parse_cidrs(row::cluster_cidr.flag(), &split_list(list))?,
        None => Vec::new(),
    };
    let proxy_mode = given(s.mode, row::mode.path())?;
    // nftables mode reads its own `nftables.*` fields, else the common ones.
    let (masquerade_bit, masquerade_all) = match proxy_mode {
        ProxyMode::Nftables => (s.nftables_masquerade_bit.or(s.masquerade_bit), s.nftables_masquerade_all.or(s.masquerade_all)),
        _ => (s.masquerade_bit, s.masquerade_all),
    };
    let masquerade_bit = given(masquerade_bit, row::masquerade_bit.path())?;
    if masquerade_bit > 31 {
        return Err(invalid("--masquerade-bit", format!("{masquerade_bit} is not in 0-31")));
    }
    if let (ProxyMode::Nftables, Some(m)) = (proxy_mode, &s.masquerade_mark) {
        if !nft_number(m) {
            return Err(invalid(row::masquerade_mark.path(), format!("{m:?} is not a number as nftables rules write it (decimal, or 0x and 1-8 lowercase hex digits)")));
        }
    }
    let node_port_addresses = resolve_node_port_addresses(s.node_port_addresses.as_deref(), &node_ips)?;
    if let Some(gates) = &s.feature_gates {
        crate::settings::gates::check(gates).map_err(|e| invalid(row::feature_gates.path(), e))?;
        crate::settings::gates::check_supported(gates, proxy_mode).map_err(|e| invalid(row::feature_gates.path(), e))?;
    }
    let service_cidrs = match &s.service_cidrs {
        Some(list) => parse_cidrs("serviceCIDRs", list)?,
        None => Vec::new(),
    };
    let config = Config {
        mode: proxy_mode,
        families: Vec::new(),
        node_name,
        node_labels,
        node_ips,
        node_pod_cidrs,
        cluster_cidrs,
        detect_local_mode: given(s.detect_local_mode, row::detect_local_mode.path())?,
        pod_bridge_interface: s.pod_bridge_interface.clone().unwrap_or_default(),
        pod_interface_name_prefix: s.pod_interface_name_prefix.clone().unwrap_or_default(),
        masquerade_bit,
        masquerade_all: masquerade_all.unwrap_or_default(),
        service_cidrs_option: !service_cidrs.is_empty(),
        allow_external_ips: s.feature_gates.as_ref().is_none_or(|g| crate::settings::gates::enabled(g, "AllowServiceExternalIPs")),
        nft_localhost_node_ports: s.feature_gates.as_ref().is_some_and(|g| crate::settings::gates::enabled(g, "KubeProxyNFTablesLocalhostNodePorts")),
        service_cidrs,
        masquerade_mark_text: s.masquerade_mark.clone(),
        interface_addresses: match &s.interface_addresses {
            Some(list) => Some(parse_interface_addresses(list)?),
            None => None,
        },
        node_port_addresses,
        localhost_node_ports: given(s.localhost_node_ports, row::localhost_node_ports.path())?,
        random_fully: given(s.random_fully, row::random_fully.flag())?,
        nfacct: given(s.nfacct, row::nfacct.flag())?,
        nft_netlink: given(s.nft_netlink, row::nft_netlink.flag())?,
        socket_lb: if given(s.socket_lb, row::socket_lb.flag())? {
            Some(SocketLbConfig {
                cgroup: given(s.socket_lb_cgroup.clone(), row::socket_lb_cgroup.flag())?.into(),
                pins: given(s.socket_lb_pin_dir.clone(), row::socket_lb_pin_dir.flag())?.into(),
            })
        } else {
            None
        },
        kube_proxy_version: given(s.kube_proxy_version, row::kube_proxy_version.flag())?,
        conntrack: ConntrackConfig::resolve(&s)?,
        large_cluster_endpoints_threshold: given(s.large_cluster_endpoints_threshold, "largeClusterEndpointsThreshold")?,
        service_proxy_name: s.service_proxy_name.clone().filter(|n| !n.is_empty()),
        ipvs: resolve_ipvs(&s)?,
        sync_period: given(s.sync_period_for(proxy_mode), "syncPeriod")?,
        min_sync_period: given(s.min_sync_period_for(proxy_mode), "minSyncPeriod")?,
        full_sync_period: given(s.full_sync_period, row::full_sync_period.flag())?,
    };
    check_detector(&config)?;
    let families = parse_families(given(s.ip_family, row::ip_family.flag())?, &config);
    Ok(Config { families, ..config })
}

fn default_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".to_string())
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

fn parse_node_ips(list: &[String]) -> Result<Vec<IpAddr>, ConfigError> {
    let mut ips = Vec::new();
    for item in list.iter().flat_map(|s| split_list(s)) {
        let ip = parse_ip_sloppy(&item).ok_or_else(|| invalid(row::node_ips.flag(), format!("invalid IP {item:?}")))?;
        ips.push(ip);
    }
    Ok(ips)
}

/// `ip/prefix` (or a bare IP) per interface address.
fn parse_interface_addresses(list: &[String]) -> Result<Vec<IpAddr>, ConfigError> {
    list.iter()
        .map(|s| {
            let ip = s.split('/').next().unwrap_or("");
            parse_ip_sloppy(ip).ok_or_else(|| invalid("node.interfaceAddresses", format!("invalid address {s:?}")))
        })
        .collect()
}

fn parse_cidrs(setting: &'static str, list: &[String]) -> Result<Vec<Cidr>, ConfigError> {
    list.iter()
        .map(|s| Cidr::parse_sloppy(s.trim()).ok_or_else(|| invalid(setting, format!("invalid CIDR {s:?}"))))
        .collect()
}

fn check_detector(c: &Config) -> Result<(), ConfigError> {
    match c.detect_local_mode {
        LocalDetectMode::BridgeInterface if c.pod_bridge_interface.is_empty() => {
            Err(invalid(row::pod_bridge_interface.flag(), "required with --detect-local-mode BridgeInterface"))
        }
        LocalDetectMode::InterfaceNamePrefix if c.pod_interface_name_prefix.is_empty() => Err(invalid(
            row::pod_interface_name_prefix.flag(),
            "required with --detect-local-mode InterfaceNamePrefix",
        )),
        _ => Ok(()),
    }
}

/// `nodePortAddresses`: CIDRs and keywords in any combination (the newest kube-proxy's
/// reading): `primary` (this node's primary IP of each family), `localhost` (127.0.0.0/8 and
/// ::1/128) and `all` (0.0.0.0/0 and ::/0).
/// kube-proxy's `validateKubeProxyNodePortAddress` (v1.37): each keyword at most once, every
/// other entry a CIDR; every error, joined as Go's aggregate joins several.
fn check_node_port_addresses(items: &[String]) -> Result<(), ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = format!("KubeProxyConfiguration.NodePortAddresses[{i}]");
        if matches!(item.as_str(), "primary" | "localhost" | "all") {
            if !seen.insert(item.as_str()) {
                errors.push(format!("{field}: Duplicate value: {item:?}"));
            }
        } else if Cidr::parse_sloppy(item).is_none() {
            errors.push(format!("{field}: Invalid value: {item:?}: must be a valid CIDR or one of the keywords 'primary', 'localhost', 'all'"));
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(invalid(row::node_port_addresses.flag(), errors.remove(0))),
        _ => Err(invalid(row::node_port_addresses.flag(), format!("[{}]", errors.join(", ")))),
    }
}

/// kube-proxy's logging validation of `flushFrequency` (v1.35, PR #133540): the flag must
/// be above zero; the file's `0` is defaulted (to 5s), a negative one refused.
pub fn check_log_flush_frequency(flags: &Settings, file: &Settings) -> Result<(), ConfigError> {
    let refused = |raw: &crate::settings::value::Raw, zero_refused: bool| {
        let text = match &raw.0 {
            serde_json::Value::String(t) => t.trim().to_string(),
            // A number in the file is nanoseconds (component-base's TimeOrMetaDuration).
            serde_json::Value::Number(n) => {
                let ns = n.as_f64().unwrap_or(0.0);
                let bad = ns < 0.0 || (zero_refused && ns == 0.0);
                return bad.then(|| format!("logging.flushFrequency: Invalid value: {n}: Must be greater than zero"));
            }
            other => other.to_string(),
        };
        let (negative, magnitude) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(&text)),
        };
        let Ok(d) = crate::settings::value::parse_go_duration(magnitude) else { return None };
        let bad = (negative && !d.is_zero()) || (zero_refused && d.is_zero());
        bad.then(|| format!("logging.flushFrequency: Invalid value: {text:?}: Must be greater than zero"))
    };
    if let Some(e) = flags.log_flush_frequency.as_ref().and_then(|f| refused(f, true)) {
        return Err(invalid(row::log_flush_frequency.flag(), e));
    }
    if let Some(e) = file.log_flush_frequency.as_ref().and_then(|f| refused(f, false)) {
        return Err(invalid(row::log_flush_frequency.path(), e));
    }
    Ok(())
}

fn resolve_node_port_addresses(list: Option<&[String]>, node_ips: &[IpAddr]) -> Result<Vec<Cidr>, ConfigError> {
    let items: Vec<String> = list.unwrap_or_default().iter().flat_map(|s| split_list(s)).collect();
    check_node_port_addresses(&items)?;
    let mut cidrs = Vec::new();
    for item in &items {
        match item.as_str() {
            "primary" => {
                for fam in [IpFamily::V4, IpFamily::V6] {
                    if let Some(ip) = node_ips.iter().find(|ip| IpFamily::of(ip) == fam && !ip.is_loopback()) {
                        cidrs.extend(Cidr::new(*ip, if fam.is_v6() { 128 } else { 32 }));
                    }
                }
            }
            "localhost" => cidrs.extend(parse_cidrs(row::node_port_addresses.flag(), &["127.0.0.0/8".into(), "::1/128".into()])?),
            "all" => cidrs.extend(parse_cidrs(row::node_port_addresses.flag(), &["0.0.0.0/0".into(), "::/0".into()])?),
            _ => cidrs.extend(parse_cidrs(row::node_port_addresses.flag(), std::slice::from_ref(item))?),
        }
    }
    Ok(cidrs)
}

fn resolve_ipvs(s: &Settings) -> Result<IpvsConfig, ConfigError> {
    Ok(IpvsConfig {
        // kube-proxy's defaulting leaves it empty; its IPVS proxier takes rr then.
        scheduler: s.ipvs_scheduler.clone().filter(|x| !x.is_empty()).unwrap_or_else(|| "rr".into()),
        strict_arp: s.ipvs_strict_arp.unwrap_or_default(),
        exclude_cidrs: parse_cidrs(row::ipvs_exclude_cidrs.flag(), s.ipvs_exclude_cidrs.as_deref().unwrap_or_default())?,
        tcp_timeout: whole_secs(s.ipvs_tcp_timeout),
        tcpfin_timeout: whole_secs(s.ipvs_tcpfin_timeout),
        udp_timeout: whole_secs(s.ipvs_udp_timeout),
    })
}

/// IPVS timeouts are whole seconds (0: leave the kernel's).
fn whole_secs(d: Option<Duration>) -> u32 {
    d.map_or(0, |d| u32::try_from(d.as_secs_f64().round() as u64).unwrap_or(u32::MAX))
}

fn parse_families(f: Families, c: &Config) -> Vec<IpFamily> {
    match f {
        Families::Ipv4 => vec![IpFamily::V4],
        Families::Ipv6 => vec![IpFamily::V6],
        Families::Both => vec![IpFamily::V4, IpFamily::V6],
        // The families this node has addresses in (or its cluster CIDRs), else IPv4.
        Families::Auto => {
            let has = |f: IpFamily| {
                c.node_ips.iter().any(|ip| IpFamily::of(ip) == f) || c.cluster_cidrs.iter().any(|x| x.family() == f)
            };
            let fams: Vec<IpFamily> = [IpFamily::V4, IpFamily::V6].into_iter().filter(|f| has(*f)).collect();
            if fams.is_empty() { vec![IpFamily::V4] } else { fams }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn node_port_addresses_are_validated_as_kube_proxy_v1_37_does() {
        assert!(check_node_port_addresses(&items(&["primary", "localhost", "all", "10.0.0.0/8"])).is_ok());
        assert_eq!(
            check_node_port_addresses(&items(&["primary", "primary"])).unwrap_err().to_string(),
            "--nodeport-addresses: KubeProxyConfiguration.NodePortAddresses[1]: Duplicate value: \"primary\""
        );
        assert_eq!(
            check_node_port_addresses(&items(&["10.0.0.0/8", "bogus", "all", "all"])).unwrap_err().to_string(),
            "--nodeport-addresses: [KubeProxyConfiguration.NodePortAddresses[1]: Invalid value: \"bogus\": must be a valid CIDR or one of the keywords 'primary', 'localhost', 'all', \
             KubeProxyConfiguration.NodePortAddresses[3]: Duplicate value: \"all\"]"
        );
        // A CIDR may repeat; only keywords may not.
        assert!(check_node_port_addresses(&items(&["10.0.0.0/8", "10.0.0.0/8"])).is_ok());
        let mut s = Settings::default();
        s.set_from_flag("nodeport-addresses", "primary,primary").unwrap().unwrap();
        assert!(resolve(s, &[]).unwrap_err().to_string().contains("Duplicate value: \"primary\""));
    }

    #[test]
    fn log_flush_frequency_must_be_positive_as_in_component_base() {
        let flag = |v: &str| {
            let mut s = Settings::default();
            s.set_from_flag("log-flush-frequency", v).unwrap().unwrap();
            s
        };
        let file = |v: serde_json::Value| Settings { log_flush_frequency: Some(crate::settings::value::Raw(v)), ..Settings::default() };
        let none = Settings::default();
        assert!(check_log_flush_frequency(&flag("5s"), &none).is_ok());
        assert_eq!(
            check_log_flush_frequency(&flag("0s"), &none).unwrap_err().to_string(),
            "--log-flush-frequency: logging.flushFrequency: Invalid value: \"0s\": Must be greater than zero"
        );
        assert!(check_log_flush_frequency(&flag("-1s"), &none).unwrap_err().to_string().contains("Invalid value: \"-1s\": Must be greater than zero"));
        // The file's zero is defaulted; a negative one is refused.
        assert!(check_log_flush_frequency(&none, &file(serde_json::json!(0))).is_ok());
        assert!(check_log_flush_frequency(&none, &file(serde_json::json!("0s"))).is_ok());
        assert!(check_log_flush_frequency(&none, &file(serde_json::json!("-2s"))).unwrap_err().to_string().starts_with("logging.flushFrequency: logging.flushFrequency: Invalid value"));
        assert!(check_log_flush_frequency(&none, &file(serde_json::json!(-5))).is_err());
        assert!(check_log_flush_frequency(&none, &file(serde_json::json!("5s"))).is_ok());
    }

    fn cfg(s: Settings) -> Config {
        resolve(Settings { hostname_override: Some("n".into()), ..s }, &[]).unwrap()
    }

    #[test]
    fn node_port_address_keywords_combine_with_cidrs() {
        let c = |list: &[&str]| {
            let s = Settings { node_ips: Some(vec!["10.1.0.5".into(), "fd00::5".into()]), node_port_addresses: Some(list.iter().map(|s| s.to_string()).collect()), ..Default::default() };
            cfg(s).node_port_addresses.iter().map(|c| c.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(c(&["primary"]), ["10.1.0.5/32", "fd00::5/128"]);
        assert_eq!(c(&["localhost", "192.168.0.0/16"]), ["127.0.0.0/8", "::1/128", "192.168.0.0/16"]);
        assert_eq!(c(&["primary,localhost"]).len(), 4);
        assert_eq!(c(&["all"]), ["0.0.0.0/0", "::/0"]);
        assert!(resolve(Settings { node_port_addresses: Some(vec!["somewhere".into()]), ..Default::default() }, &[]).is_err());
    }

    #[test]
    fn nothing_set_resolves_to_the_defaults_and_ipvs_syncs_on_every_change() {
        let c = cfg(Settings::default());
        assert_eq!((c.mode, c.masquerade_bit, c.detect_local_mode), (Mode::Iptables, 14, LocalDetectMode::ClusterCidr));
        assert!(c.localhost_node_ports && c.random_fully && c.nfacct && !c.masquerade_all);
        assert_eq!((c.large_cluster_endpoints_threshold, c.families.as_slice()), (1000, &[IpFamily::V4][..]));
        assert_eq!((c.sync_period, c.min_sync_period, c.full_sync_period), (Duration::from_secs(30), Duration::from_secs(1), Duration::from_secs(3600)));
        assert_eq!(c.conntrack, ConntrackConfig::default());
        assert_eq!((c.conntrack.max_per_core, c.conntrack.tcp_close_wait_timeout), (32 * 1024, Some(Duration::from_secs(3600))));
        assert_eq!(c.ipvs.scheduler, "rr");
        // kube-proxy gives ipvs.minSyncPeriod no default: 0s.
        let ipvs = cfg(Settings { mode: Some(ProxyMode::Ipvs), ..Default::default() });
        assert_eq!((ipvs.sync_period, ipvs.min_sync_period), (Duration::from_secs(30), Duration::ZERO));
        let flag = cfg(Settings { mode: Some(ProxyMode::Ipvs), min_sync_period: Some(Duration::from_secs(2)), ..Default::default() });
        assert_eq!(flag.min_sync_period, Duration::from_secs(2), "--min-sync-period wins");
    }

    /// nftables mode reads the mark text once into a rule's number: one it cannot write
    /// back as it was given is refused, naming the setting.
    #[test]
    fn nftables_mode_refuses_a_mark_text_its_rules_cannot_write() {
        let nft = |m: &str| {
            let s = Settings { mode: Some(ProxyMode::Nftables), masquerade_mark: Some(m.into()), hostname_override: Some("n".into()), ..Default::default() };
            resolve(s, &[]).map(|c| c.masquerade_mark())
        };
        assert_eq!(nft("0x4000").unwrap(), "0x4000");
        assert_eq!(nft("16384").unwrap(), "16384");
        for odd in ["0X4000", "0x4000A", "016384", "0x", "4294967296", "0x000000001"] {
            let e = nft(odd).unwrap_err().to_string();
            assert!(e.contains("masquerade") && e.contains(odd), "{odd}: {e}");
        }
        let ipt = Settings { mode: Some(ProxyMode::Iptables), masquerade_mark: Some("0X4000".into()), hostname_override: Some("n".into()), ..Default::default() };
        assert_eq!(resolve(ipt, &[]).unwrap().masquerade_mark(), "0X4000", "iptables mode passes its text on");
    }

    #[test]
    fn masquerade_mark_is_go_percent_hash_08x() {
        assert_eq!(cfg(Settings::default()).masquerade_mark(), "0x00004000");
        assert_eq!(cfg(Settings { masquerade_bit: Some(0), ..Default::default() }).masquerade_mark(), "0x00000001");
    }

    #[test]
    fn flags_override_lower_layers() {
        let file = Settings { masquerade_bit: Some(10), masquerade_all: Some(true), ..Default::default() };
        let flags = Settings { masquerade_bit: Some(12), ..Default::default() };
        let c = cfg(flags.over(file));
        assert_eq!((c.masquerade_bit, c.masquerade_all), (12, true));
    }

    #[test]
    fn node_object_supplies_ips_labels_and_pod_cidrs() {
        let node = Node {
            name: "n".into(),
            labels: [("topology.kubernetes.io/zone".to_string(), "z1".to_string())].into(),
            addresses: vec!["10.1.0.5".parse().unwrap()],
            pod_cidrs: vec![Cidr::parse_sloppy("10.244.1.0/24").unwrap()],
        };
        let c = resolve(
            Settings { hostname_override: Some("N".into()), detect_local_mode: Some(LocalDetectMode::NodeCidr), ..Default::default() },
            &[node],
        )
        .unwrap();
        assert_eq!(c.node_ip(IpFamily::V4), "10.1.0.5".parse::<IpAddr>().unwrap());
        assert_eq!(c.local_detector(IpFamily::V4).unwrap().iptables().if_not_local, ["!", "-s", "10.244.1.0/24"]);
        assert_eq!(c.node_labels["topology.kubernetes.io/zone"], "z1");
    }

    #[test]
    fn localhost_node_ports_need_ipv4_loopback_in_node_port_addresses() {
        let c = cfg(Settings { node_port_addresses: Some(vec!["192.168.0.0/24".into()]), ..Default::default() });
        assert!(!c.localhost_node_ports(IpFamily::V4));
        let c = cfg(Settings { node_port_addresses: Some(vec!["127.0.0.0/8".into()]), ..Default::default() });
        assert!(c.localhost_node_ports(IpFamily::V4));
        assert!(!c.localhost_node_ports(IpFamily::V6));
    }
}

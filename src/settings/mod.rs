//! Every setting, declared once. The table below gives each setting its type, its path in
//! kube-proxy's `KubeProxyConfiguration` file, its kube-proxy flag (and svcproxy's aliases),
//! and what svcproxy does with it; the [`Settings`] layer type, stacking ([`Settings::over`]),
//! the file reader ([`file`]), the file writer and the start-up notes are derived from it.
//!
//! A [`Settings`] value is one layer, every field optional: a fixture document, the
//! `--config` file and the command line each give one; [`crate::config::resolve`] turns
//! the stack into the effective [`crate::config::Config`].

pub mod defaults;
pub mod file;
pub mod fixture;
pub mod flags;
pub mod gates;
pub mod kinds;
pub mod value;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use kinds::{Families, KubeProxyVersion, LocalMode, LogFormat, ProxyMode};
use value::{Raw, SettingValue};

/// What svcproxy does with a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// It acts, as in kube-proxy.
    Acts,
    /// Accepted; it has no meaning for svcproxy (why).
    NoEffect(&'static str),
    /// It has a meaning svcproxy does not carry out yet (what happens instead).
    NotYet(&'static str),
}

/// Which commands take a setting's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// It changes the rules: every command that builds them (render, sync, trace, lint).
    Rules,
    /// It runs the node (API client, servers, sync timing, kernel tuning): `sync` only.
    Node,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    /// The field's name in [`Settings`].
    pub name: &'static str,
    /// Its dotted path in a `KubeProxyConfiguration` (`None`: not a file setting).
    pub file: Option<&'static str>,
    /// Its flags: kube-proxy's name first (where kube-proxy has one), then svcproxy's aliases.
    pub flags: &'static [&'static str],
    /// The first flag with its dashes (`--kube-api-qps`).
    dashed: Option<&'static str>,
    pub scope: Scope,
    pub shape: value::FlagShape,
    pub value_name: &'static str,
    pub effect: Effect,
    pub help: &'static str,
}

impl Info {
    /// How messages name the setting: its first flag (`--kube-api-qps`), else its file path.
    pub const fn flag(&self) -> &'static str {
        match (self.dashed, self.file) {
            (Some(f), _) | (None, Some(f)) => f,
            (None, None) => self.name,
        }
    }

    /// How messages about the file name the setting: its path, else its first flag.
    pub const fn path(&self) -> &'static str {
        match (self.file, self.dashed) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => self.name,
        }
    }
}

macro_rules! file_path {
    (none) => {
        None
    };
    ($p:literal) => {
        Some($p)
    };
}

macro_rules! dashed {
    () => {
        None
    };
    ($first:literal $(, $rest:literal)*) => {
        Some(concat!("--", $first))
    };
}

macro_rules! settings {
    ($( $field:ident : $ty:ty, $scope:ident, file $file:tt, flags [$($flag:literal),*], $effect:expr, $help:literal; )*) => {
        /// One layer of settings (see the module documentation).
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct Settings {
            $( #[doc = $help] pub $field: Option<$ty>, )*
        }

        /// Each setting's row by its field's name (`row::kube_api_qps`), for code that names
        /// the setting (`row::kube_api_qps.flag()`) instead of spelling it again.
        #[allow(non_upper_case_globals)]
        pub mod row {
            use super::*;
            $( pub const $field: Info = Info {
                name: stringify!($field),
                file: file_path!($file),
                flags: &[$($flag),*],
                dashed: dashed!($($flag),*),
                scope: Scope::$scope,
                shape: <$ty as SettingValue>::SHAPE,
                value_name: <$ty as SettingValue>::VALUE_NAME,
                effect: $effect,
                help: $help,
            }; )*
        }

        /// The table, in declaration order.
        pub static TABLE: &[Info] = &[ $( row::$field, )* ];

        impl Settings {
            /// `self` wins where it has a value; `under` fills the rest.
            pub fn over(self, under: Settings) -> Settings {
                Settings { $( $field: self.$field.or(under.$field), )* }
            }

            /// Sets the setting at a file path; `None` if no setting has that path.
            fn set_from_file(&mut self, path: &str, v: &Value) -> Option<Result<(), String>> {
                $(
                    if file_path!($file) == Some(path) {
                        return Some(<$ty as SettingValue>::from_json(v).map(|x| self.$field = x));
                    }
                )*
                None
            }

            /// Sets the setting a fixture option names: its file path, or its name compared
            /// without case and underscores (`randomFully`, `conntrackTCPBeLiberal`); `None`
            /// if no setting has that path or name.
            pub fn set_from_option(&mut self, key: &str, v: &Value) -> Option<Result<(), String>> {
                if let Some(set) = self.set_from_file(key, v) {
                    return Some(set);
                }
                $(
                    if same_name(stringify!($field), key) {
                        return Some(<$ty as SettingValue>::from_json(v).map(|x| self.$field = x));
                    }
                )*
                None
            }

            /// Sets the setting a flag names from one occurrence of it (repeated list
            /// flags accumulate); `None` if no setting has that flag.
            pub fn set_from_flag(&mut self, flag: &str, text: &str) -> Option<Result<(), String>> {
                $(
                    if [$($flag),*].contains(&flag) {
                        let parsed = <$ty as SettingValue>::parse_flag(text);
                        return Some(parsed.map(|x| {
                            self.$field = Some(match self.$field.take() {
                                Some(earlier) => earlier.append(x),
                                None => x,
                            });
                        }));
                    }
                )*
                None
            }

            /// Each file setting this layer has, as (path, value); with `all`, every file
            /// setting, the unset ones as Go writes its zero values.
            pub fn file_values(&self, all: bool) -> Vec<(&'static str, Value)> {
                let mut out = Vec::new();
                $(
                    if let Some(path) = file_path!($file) {
                        match &self.$field {
                            Some(v) => out.push((path, v.to_json())),
                            None if all => out.push((path, <$ty as SettingValue>::zero_json())),
                            None => {}
                        }
                    }
                )*
                out
            }

            /// Each setting that has a flag, as (its first flag, this layer's value as the
            /// flag prints it back or `None`, how an unset flag of its type prints), for
            /// the metrics port's `/flagz`.
            pub fn flag_values(&self) -> Vec<(&'static str, Option<String>, String)> {
                let mut out = Vec::new();
                $(
                    let flags: &[&'static str] = &[$($flag),*];
                    if let Some(flag) = flags.first() {
                        let zero = if matches!(<$ty as SettingValue>::SHAPE, value::FlagShape::List) {
                            "[]".to_string()
                        } else {
                            value::flag_text(&<$ty as SettingValue>::zero_json())
                        };
                        out.push((*flag, self.$field.as_ref().map(|v| value::flag_text(&v.to_json())), zero));
                    }
                )*
                out
            }

            /// The name of every setting this layer has a non-zero value for.
            pub fn set_names(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(
                    if self.$field.as_ref().is_some_and(|v| !v.is_zero()) {
                        out.push(stringify!($field));
                    }
                )*
                out
            }
        }
    };
}

settings! {
    // --- kube-proxy's KubeProxyConfiguration (v1alpha1), in its order ---
    feature_gates: BTreeMap<String, bool>, Rules, file "featureGates", flags ["feature-gates"], Effect::Acts,
        "Feature gates (NAME=true|false,...), checked as kube-proxy v1.37 does: an unknown gate, a locked one set against its value, or an enabled one whose dependency is off stops it; KubeProxyIPVS=false refuses ipvs mode; AllowServiceExternalIPs=false programs no rules for spec.externalIPs; KubeProxyNFTablesLocalhostNodePorts=true rejects and counts localhost NodePorts in nftables mode, and serves TCP ones with a userspace proxy where nodePortAddresses names loopback";
    kubeconfig: String, Node, file "clientConnection.kubeconfig", flags ["kubeconfig"], Effect::Acts,
        "kubeconfig file for the API server";
    kube_api_accept_content_types: String, Node, file "clientConnection.acceptContentTypes", flags [], Effect::Acts,
        "Accept header for API requests (the client speaks JSON only)";
    kube_api_content_type: String, Node, file "clientConnection.contentType", flags ["kube-api-content-type"], Effect::Acts,
        "Content type of API requests (the client speaks JSON only)";
    kube_api_qps: f32, Node, file "clientConnection.qps", flags ["kube-api-qps"], Effect::Acts,
        "Requests per second to the API server (<= 0: no limit)";
    kube_api_burst: i32, Node, file "clientConnection.burst", flags ["kube-api-burst"], Effect::Acts,
        "Requests allowed in a burst above the QPS";
    log_format: LogFormat, Node, file "logging.format", flags ["logging-format", "log-format"], Effect::Acts,
        "Log format: text or json";
    log_verbosity: u32, Node, file "logging.verbosity", flags ["v"], Effect::Acts,
        "Log verbosity (klog's -v: 0-1 info, 2-3 debug, 4+ trace)";
    log_vmodule: Raw, Node, file "logging.vmodule", flags ["vmodule"],
        Effect::NoEffect("per-file verbosity is klog's; svcproxy filters with SVCPROXY_LOG"),
        "klog's per-file verbosity";
    log_flush_frequency: Raw, Node, file "logging.flushFrequency", flags ["log-flush-frequency"],
        Effect::NoEffect("svcproxy's logs are written as they happen"),
        "klog's flush interval";
    log_options: Raw, Node, file "logging.options", flags [],
        Effect::NoEffect("klog's output options (split streams, buffers)"),
        "klog's output options";
    hostname_override: String, Rules, file "hostnameOverride", flags ["hostname-override"], Effect::Acts,
        "This node's name (as in EndpointSlice nodeName)";
    bind_address: String, Rules, file "bindAddress", flags ["bind-address"], Effect::Acts,
        "This node's primary IP (0.0.0.0 or :: : from the Node object)";
    healthz_bind_address: String, Node, file "healthzBindAddress", flags ["healthz-bind-address"], Effect::Acts,
        "IP or IP:port of /healthz and /livez";
    metrics_bind_address: String, Node, file "metricsBindAddress", flags ["metrics-bind-address"], Effect::Acts,
        "IP or IP:port of /metrics";
    bind_address_hard_fail: bool, Node, file "bindAddressHardFail", flags ["bind-address-hard-fail"], Effect::Acts,
        "Exit when the health or metrics port cannot be bound (else log it and go on)";
    enable_profiling: bool, Node, file "enableProfiling", flags ["profiling"], Effect::Acts,
        "Profiling on the metrics port: /debug/pprof/profile?seconds=N (a CPU profile in pprof's format), /debug/pprof/cmdline";
    show_hidden_metrics_for_version: String, Node, file "showHiddenMetricsForVersion", flags ["show-hidden-metrics-for-version"],
        Effect::NoEffect("svcproxy hides no metrics"),
        "Show metrics hidden since this version";
    mode: ProxyMode, Rules, file "mode", flags ["proxy-mode", "mode"], Effect::Acts,
        "Proxy mode: iptables, ipvs or nftables";
    masquerade_bit: u32, Rules, file "iptables.masqueradeBit", flags ["iptables-masquerade-bit", "masquerade-bit"], Effect::Acts,
        "The fwmark bit marking packets to masquerade";
    masquerade_all: bool, Rules, file "iptables.masqueradeAll", flags ["masquerade-all"], Effect::Acts,
        "Masquerade all traffic sent to ClusterIPs";
    localhost_node_ports: bool, Rules, file "iptables.localhostNodePorts", flags ["iptables-localhost-nodeports"], Effect::Acts,
        "Allow NodePorts on 127.0.0.1 (IPv4)";
    snat_node_internal_ip: bool, Rules, file "iptables.snatNodeInternalIP", flags [],
        Effect::NotYet("SNAT uses the egress interface's address"),
        "SNAT service traffic to the node's InternalIP";
    iptables_sync_period: Duration, Node, file "iptables.syncPeriod", flags ["iptables-sync-period"], Effect::Acts,
        "Sync period in iptables mode";
    iptables_min_sync_period: Duration, Node, file "iptables.minSyncPeriod", flags ["iptables-min-sync-period"], Effect::Acts,
        "Minimum time between syncs in iptables mode";
    ipvs_sync_period: Duration, Node, file "ipvs.syncPeriod", flags ["ipvs-sync-period"], Effect::Acts,
        "Sync period in IPVS mode";
    ipvs_min_sync_period: Duration, Node, file "ipvs.minSyncPeriod", flags ["ipvs-min-sync-period"], Effect::Acts,
        "Minimum time between syncs in IPVS mode";
    ipvs_scheduler: String, Rules, file "ipvs.scheduler", flags ["ipvs-scheduler"], Effect::Acts,
        "IPVS scheduler";
    ipvs_exclude_cidrs: Vec<String>, Rules, file "ipvs.excludeCIDRs", flags ["ipvs-exclude-cidrs"], Effect::Acts,
        "CIDRs whose IPVS services are never cleaned up";
    ipvs_strict_arp: bool, Rules, file "ipvs.strictARP", flags ["ipvs-strict-arp"], Effect::Acts,
        "Set arp_ignore=1 and arp_announce=2";
    ipvs_tcp_timeout: Duration, Node, file "ipvs.tcpTimeout", flags ["ipvs-tcp-timeout"], Effect::Acts,
        "IPVS idle TCP timeout (0: as is)";
    ipvs_tcpfin_timeout: Duration, Node, file "ipvs.tcpFinTimeout", flags ["ipvs-tcpfin-timeout"], Effect::Acts,
        "IPVS TCP timeout after FIN (0: as is)";
    ipvs_udp_timeout: Duration, Node, file "ipvs.udpTimeout", flags ["ipvs-udp-timeout"], Effect::Acts,
        "IPVS UDP timeout (0: as is)";
    nftables_masquerade_bit: u32, Rules, file "nftables.masqueradeBit", flags [], Effect::Acts,
        "The fwmark bit in nftables mode";
    nftables_masquerade_all: bool, Rules, file "nftables.masqueradeAll", flags [], Effect::Acts,
        "Masquerade all ClusterIP traffic in nftables mode";
    nftables_sync_period: Duration, Node, file "nftables.syncPeriod", flags [], Effect::Acts,
        "Sync period in nftables mode";
    nftables_min_sync_period: Duration, Node, file "nftables.minSyncPeriod", flags [], Effect::Acts,
        "Minimum time between syncs in nftables mode";
    winkernel_network_name: String, Node, file "winkernel.networkName", flags [],
        Effect::NoEffect("Windows only"), "Windows HNS network";
    winkernel_source_vip: String, Node, file "winkernel.sourceVip", flags [],
        Effect::NoEffect("Windows only"), "Windows source VIP";
    winkernel_enable_dsr: bool, Node, file "winkernel.enableDSR", flags [],
        Effect::NoEffect("Windows only"), "Windows DSR";
    winkernel_root_hns_endpoint_name: String, Node, file "winkernel.rootHnsEndpointName", flags [],
        Effect::NoEffect("Windows only"), "Windows root HNS endpoint";
    winkernel_forward_health_check_vip: bool, Node, file "winkernel.forwardHealthCheckVip", flags [],
        Effect::NoEffect("Windows only"), "Windows health-check VIP forwarding";
    detect_local_mode: LocalMode, Rules, file "detectLocalMode", flags ["detect-local-mode"], Effect::Acts,
        "How traffic from local pods is recognised: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None";
    pod_bridge_interface: String, Rules, file "detectLocal.bridgeInterface", flags ["pod-bridge-interface"], Effect::Acts,
        "The pod bridge, with detect-local-mode BridgeInterface";
    pod_interface_name_prefix: String, Rules, file "detectLocal.interfaceNamePrefix", flags ["pod-interface-name-prefix"], Effect::Acts,
        "The pod interface prefix, with detect-local-mode InterfaceNamePrefix";
    cluster_cidr: String, Rules, file "clusterCIDR", flags ["cluster-cidr"], Effect::Acts,
        "Pod network CIDRs (comma list, one per family)";
    node_port_addresses: Vec<String>, Rules, file "nodePortAddresses", flags ["nodeport-addresses"], Effect::Acts,
        "Addresses NodePorts answer on: CIDRs and the keywords primary, localhost, all, in any combination";
    oom_score_adj: i32, Node, file "oomScoreAdj", flags ["oom-score-adj"], Effect::Acts,
        "oom_score_adj of the process [-1000, 1000] (as kube-proxy: -999)";
    conntrack_max_per_core: i32, Node, file "conntrack.maxPerCore", flags ["conntrack-max-per-core"], Effect::Acts,
        "Conntrack entries per CPU core";
    conntrack_min: i32, Node, file "conntrack.min", flags ["conntrack-min"], Effect::Acts,
        "Minimum conntrack entries";
    conntrack_tcp_established_timeout: Duration, Node, file "conntrack.tcpEstablishedTimeout", flags ["conntrack-tcp-timeout-established"], Effect::Acts,
        "Idle timeout of established TCP connections";
    conntrack_tcp_close_wait_timeout: Duration, Node, file "conntrack.tcpCloseWaitTimeout", flags ["conntrack-tcp-timeout-close-wait"], Effect::Acts,
        "Timeout of TCP connections in CLOSE_WAIT";
    conntrack_tcp_be_liberal: bool, Rules, file "conntrack.tcpBeLiberal", flags ["conntrack-tcp-be-liberal"], Effect::Acts,
        "Liberal TCP conntrack (no INVALID drop rule)";
    conntrack_udp_timeout: Duration, Node, file "conntrack.udpTimeout", flags ["conntrack-udp-timeout"], Effect::Acts,
        "Idle timeout of unreplied UDP entries";
    conntrack_udp_stream_timeout: Duration, Node, file "conntrack.udpStreamTimeout", flags ["conntrack-udp-timeout-stream"], Effect::Acts,
        "Idle timeout of assured UDP entries";
    config_sync_period: Duration, Node, file "configSyncPeriod", flags ["config-sync-period"],
        Effect::NoEffect("kube-rs watchers keep no informer cache to resync; they relist after errors"),
        "Informer resync period";
    port_range: String, Node, file "portRange", flags [],
        Effect::NoEffect("unused by kube-proxy too (the userspace proxy is gone)"),
        "Userspace proxy port range";
    windows_run_as_service: bool, Node, file "windowsRunAsService", flags [],
        Effect::NoEffect("Windows only"), "Windows service integration";

    // --- kube-proxy's flags without a file field ---
    master: String, Node, file none, flags ["master"], Effect::Acts,
        "The API server's URL (overrides the kubeconfig's)";
    healthz_port: i32, Node, file none, flags ["healthz-port"], Effect::Acts,
        "Deprecated: the port of --healthz-bind-address (0: no health server)";
    metrics_port: i32, Node, file none, flags ["metrics-port"], Effect::Acts,
        "Deprecated: the port of --metrics-bind-address (0: no metrics server)";

    log_json_info_buffer_size: String, Node, file none, flags ["log-json-info-buffer-size"],
        Effect::NoEffect("klog's JSON buffering (logging.options.json in the file)"), "klog's JSON info buffer";
    log_json_split_stream: bool, Node, file none, flags ["log-json-split-stream"],
        Effect::NoEffect("klog's stream split (logging.options.json in the file); svcproxy logs to stderr"), "klog's JSON stream split";
    log_text_info_buffer_size: String, Node, file none, flags ["log-text-info-buffer-size"],
        Effect::NoEffect("klog's text buffering (logging.options.text in the file)"), "klog's text info buffer";
    log_text_split_stream: bool, Node, file none, flags ["log-text-split-stream"],
        Effect::NoEffect("klog's stream split (logging.options.text in the file); svcproxy logs to stderr"), "klog's text stream split";

    // --- svcproxy's own settings (no file field) ---
    ip_family: Families, Rules, file none, flags ["ip-family"], Effect::Acts,
        "IP families to proxy: ipv4, ipv6, both or auto";
    node_ips: Vec<String>, Rules, file none, flags ["node-ip"], Effect::Acts,
        "This node's IPs (one per family)";
    random_fully: bool, Rules, file none, flags ["random-fully"], Effect::Acts,
        "MASQUERADE --random-fully";
    nfacct: bool, Rules, file none, flags ["nfacct"], Effect::Acts,
        "kube-proxy's nfacct counters";
    kube_proxy_version: KubeProxyVersion, Rules, file none, flags ["kube-proxy-version"], Effect::Acts,
        "The kube-proxy release (1.33 to 1.37; default 1.37, the newest) whose rules to write, so that a node switching from it sees no rule change: nftables mode writes v1.34's table for 1.33 to 1.35 and v1.37's for 1.36 and 1.37; the other modes' rules are the same for all";
    nft_netlink: bool, Node, file none, flags ["nft-netlink"], Effect::Acts,
        "nftables mode: send transactions as nf_tables netlink batches (false: every one through nft -f, as kube-proxy's knftables)";
    socket_lb: bool, Node, file none, flags ["socket-lb"], Effect::Acts,
        "Socket-level load balancing (docs/socket-lb.md): cgroup eBPF programs send a local socket's connect() or sendmsg() to a ClusterIP straight to a backend, chosen as the rules choose, beside the mode's unchanged rules, after each sync (one-shot and watch); svcproxy must be built with clang";
    socket_lb_cgroup: String, Node, file none, flags ["socket-lb-cgroup"], Effect::Acts,
        "The cgroup v2 directory the socket-LB programs attach to: every process in it or below is translated";
    socket_lb_pin_dir: String, Node, file none, flags ["socket-lb-pin-dir"], Effect::Acts,
        "The bpffs directory holding the socket-LB maps and links, so that they outlive a one-shot sync and a restart finds them";
    service_proxy_name: String, Rules, file none, flags ["service-proxy-name"], Effect::Acts,
        "Proxy only objects labelled service.kubernetes.io/service-proxy-name=NAME";
    sync_period: Duration, Node, file none, flags ["sync-period"], Effect::Acts,
        "Sync period in every mode: a partial sync and a check of the KUBE-PROXY-CANARY rules at least this often";
    min_sync_period: Duration, Node, file none, flags ["min-sync-period"], Effect::Acts,
        "Minimum time between syncs in every mode";
    full_sync_period: Duration, Node, file none, flags ["full-sync-period"], Effect::Acts,
        "How often a full sync (compared with the kernel) runs; kube-proxy's is a constant 1h; 0s: every sync period";

    // --- fixture documents only (a node's facts, kube-proxy's unit-test knobs) ---
    node_labels: BTreeMap<String, String>, Rules, file none, flags [], Effect::Acts, "This node's labels";
    node_pod_cidrs: Vec<String>, Rules, file none, flags [], Effect::Acts, "This node's pod CIDRs";
    masquerade_mark: String, Rules, file none, flags [], Effect::Acts, "The mark text (kube-proxy's unit-test fake)";
    service_cidrs: Vec<String>, Rules, file none, flags [], Effect::Acts, "ServiceCIDRs of the cluster (nftables mode drops traffic to their unallocated addresses); set, it overrides the ServiceCIDR objects read";
    interface_addresses: Vec<String>, Rules, file none, flags [], Effect::Acts, "This node's interface addresses";
    large_cluster_endpoints_threshold: usize, Rules, file none, flags [], Effect::Acts, "Endpoints above which the large-cluster rules apply";
}

/// Whether `key` spells the setting `name` (`random_fully`: `randomFully`, `RANDOM_FULLY`).
fn same_name(name: &str, key: &str) -> bool {
    let mut k = key.chars().filter(|c| *c != '_');
    name.chars().filter(|c| *c != '_').all(|c| k.next().is_some_and(|x| x.eq_ignore_ascii_case(&c))) && k.next().is_none()
}

/// The table as a Markdown reference (docs/settings.md is this, checked by a test).
pub fn reference() -> String {
    let mut out = String::from(
        "# Settings\n\nEvery setting svcproxy knows, generated from `src/settings/mod.rs` (`svcproxy settings`).\n\
         *File*: its path in a `KubeProxyConfiguration` (kubeproxy.config.k8s.io/v1alpha1). *Flags*: kube-proxy's name\n\
         first, then svcproxy's aliases. *Commands*: `rules` settings are taken by render, sync, trace and lint; `node`\n\
         settings by sync (and the kube-proxy command) only. A fixture's `options:` takes any setting by its name (case and\n\
         underscores aside: `randomFully`) or its file path (`iptables.masqueradeBit`).\n\n\
         | setting | file | flags | commands | what svcproxy does |\n|---|---|---|---|---|\n",
    );
    for i in TABLE {
        let file = i.file.map_or_else(|| "—".to_string(), |f| format!("`{f}`"));
        let flags = if i.flags.is_empty() { "—".to_string() } else { i.flags.iter().map(|f| format!("`--{f}`")).collect::<Vec<_>>().join(", ") };
        let scope = match i.scope {
            Scope::Rules => "rules",
            Scope::Node => "node",
        };
        let does = match i.effect {
            Effect::Acts => format!("acts: {}", i.help),
            Effect::NoEffect(why) => format!("accepted without effect: {why}"),
            Effect::NotYet(instead) => format!("not carried out yet: {instead} (said at start when set)"),
        };
        out.push_str(&format!("| `{}` | {file} | {flags} | {scope} | {does} |\n", i.name));
    }
    out
}

impl Settings {
    /// One line for each setting this layer sets that does not act as in kube-proxy.
    pub fn notes(&self) -> Vec<String> {
        let set = self.set_names();
        TABLE
            .iter()
            .filter(|i| set.contains(&i.name))
            .filter_map(|i| {
                let name = i.file.map(String::from).unwrap_or_else(|| format!("--{}", i.flags.first().unwrap_or(&i.name)));
                match i.effect {
                    Effect::Acts => None,
                    Effect::NoEffect(why) => Some(format!("{name} is accepted without effect: {why}")),
                    Effect::NotYet(instead) => Some(format!("{name} is not carried out yet: {instead}")),
                }
            })
            .collect()
    }

    /// The sync period for `mode`: svcproxy's `--sync-period`, else the mode's own.
    pub fn sync_period_for(&self, mode: ProxyMode) -> Option<Duration> {
        let own = match mode {
            ProxyMode::Ipvs => self.ipvs_sync_period,
            ProxyMode::Nftables => self.nftables_sync_period,
            ProxyMode::Iptables => self.iptables_sync_period,
        };
        self.sync_period.or(own.filter(|d| !d.is_zero()))
    }

    /// The minimum sync period for `mode` (zero is a value: sync on every change).
    pub fn min_sync_period_for(&self, mode: ProxyMode) -> Option<Duration> {
        let own = match mode {
            ProxyMode::Ipvs => self.ipvs_min_sync_period,
            ProxyMode::Nftables => self.nftables_min_sync_period,
            ProxyMode::Iptables => self.iptables_min_sync_period,
        };
        self.min_sync_period.or(own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_print_each_flag_as_pflag_does() {
        let mut s = Settings::default();
        s.set_from_flag("proxy-mode", "nftables").unwrap().unwrap();
        s.set_from_flag("nodeport-addresses", "primary,10.0.0.0/8").unwrap().unwrap();
        s.set_from_flag("feature-gates", "B=false,A=true").unwrap().unwrap();
        let values = s.flag_values();
        let of = |flag: &str| values.iter().find(|(f, ..)| *f == flag).cloned().unwrap_or_else(|| panic!("{flag}"));
        assert_eq!(of("proxy-mode"), ("proxy-mode", Some("nftables".into()), "".into()));
        assert_eq!(of("nodeport-addresses"), ("nodeport-addresses", Some("[primary,10.0.0.0/8]".into()), "[]".into()));
        assert_eq!(of("feature-gates").1.as_deref(), Some("A=true,B=false"));
        assert_eq!(of("bind-address-hard-fail"), ("bind-address-hard-fail", None, "false".into()));
        assert!(values.iter().all(|(f, ..)| !f.starts_with('-')), "names without dashes");
        assert_eq!(values.len(), TABLE.iter().filter(|i| !i.flags.is_empty()).count());
    }

    #[test]
    fn a_row_names_its_setting_by_flag_or_path() {
        assert_eq!((row::kube_api_qps.flag(), row::kube_api_qps.path()), ("--kube-api-qps", "clientConnection.qps"));
        assert_eq!((row::masquerade_bit.flag(), row::kube_api_accept_content_types.flag()), ("--iptables-masquerade-bit", "clientConnection.acceptContentTypes"));
        assert_eq!(TABLE.iter().map(|i| i.name).collect::<Vec<_>>().first(), Some(&"feature_gates"));
    }

    #[test]
    fn every_setting_has_one_row_and_paths_and_flags_are_unique() {
        let mut paths = std::collections::BTreeSet::new();
        let mut flags = std::collections::BTreeSet::new();
        for i in TABLE {
            if let Some(p) = i.file {
                assert!(paths.insert(p), "file path {p} twice");
            }
            for f in i.flags {
                assert!(flags.insert(*f), "flag --{f} twice");
            }
        }
        assert!(paths.len() >= 55, "every KubeProxyConfiguration field has a row: {}", paths.len());
    }

    #[test]
    fn a_fixture_option_names_one_setting_by_name_or_path() {
        for i in TABLE {
            let by_name: Vec<&str> = TABLE.iter().filter(|j| same_name(j.name, i.name)).map(|j| j.name).collect();
            assert_eq!(by_name, [i.name], "{} is spelled like another setting", i.name);
            if let Some(p) = i.file {
                let other = TABLE.iter().find(|j| j.name != i.name && same_name(j.name, p));
                assert!(other.is_none(), "path {p} is also the name of {other:?}");
            }
        }
        let mut s = Settings::default();
        s.set_from_option("conntrackTCPBeLiberal", &Value::Bool(true)).unwrap().unwrap();
        s.set_from_option("iptables.masqueradeAll", &Value::Bool(true)).unwrap().unwrap();
        s.set_from_option("nftables_masquerade_all", &Value::Bool(false)).unwrap().unwrap();
        assert_eq!((s.conntrack_tcp_be_liberal, s.masquerade_all, s.nftables_masquerade_all), (Some(true), Some(true), Some(false)));
        assert!(s.set_from_option("masqueradeAl", &Value::Bool(true)).is_none());
        assert!(s.set_from_option("randomFullyy", &Value::Bool(true)).is_none());
    }

    #[test]
    fn list_flags_accumulate_and_others_keep_the_last() {
        let mut s = Settings::default();
        s.set_from_flag("nodeport-addresses", "10.0.0.0/8").unwrap().unwrap();
        s.set_from_flag("nodeport-addresses", "192.168.0.0/16,fd00::/8").unwrap().unwrap();
        assert_eq!(s.node_port_addresses.as_ref().map(Vec::len), Some(3));
        s.set_from_flag("proxy-mode", "ipvs").unwrap().unwrap();
        s.set_from_flag("mode", "iptables").unwrap().unwrap();
        assert_eq!(s.mode, Some(ProxyMode::Iptables));
        assert!(s.set_from_flag("proxy-mode", "userspace").unwrap().is_err());
        assert!(s.set_from_flag("iptables-sync-period", "30").unwrap().is_err(), "a Go duration needs its unit");
        assert!(s.set_from_flag("no-such-flag", "x").is_none());
    }

    #[test]
    fn sync_periods_follow_the_mode_and_svcproxys_flag_wins() {
        let s = Settings {
            iptables_sync_period: Some(Duration::from_secs(30)),
            ipvs_sync_period: Some(Duration::from_secs(60)),
            iptables_min_sync_period: Some(Duration::ZERO),
            ..Settings::default()
        };
        assert_eq!(s.sync_period_for(ProxyMode::Ipvs), Some(Duration::from_secs(60)));
        assert_eq!(s.sync_period_for(ProxyMode::Iptables), Some(Duration::from_secs(30)));
        assert_eq!(s.min_sync_period_for(ProxyMode::Iptables), Some(Duration::ZERO));
        let flag = Settings { sync_period: Some(Duration::from_secs(5)), ..s };
        assert_eq!(flag.sync_period_for(ProxyMode::Ipvs), Some(Duration::from_secs(5)));
    }

    #[test]
    fn notes_name_what_is_set_and_does_not_act() {
        let s = Settings {
            enable_profiling: Some(true),
            show_hidden_metrics_for_version: Some("1.33".into()),
            winkernel_enable_dsr: Some(false),
            masquerade_all: Some(true),
            snat_node_internal_ip: Some(true),
            ..Settings::default()
        };
        let notes = s.notes();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("showHiddenMetricsForVersion is accepted without effect"), "{notes:?}");
        assert!(notes[1].starts_with("iptables.snatNodeInternalIP is not carried out yet"), "{notes:?}");
    }
}

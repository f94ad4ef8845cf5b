//! kube-proxy's config file, `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`),
//! read into a [`Settings`] layer through the table: every field of the targeted kube-proxy
//! is known. As kube-proxy does for v1alpha1, a field it does not know is not an error:
//! the file is decoded leniently and the strict-decoding error is reported (as a note,
//! naming the field). A known field of the wrong type is an error naming file and field.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::defaults::ZERO_MEANS_DEFAULT;
use super::{Settings, TABLE};

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FileError {
    pub path: PathBuf,
    pub reason: String,
}

/// A config file's settings, and what to say about it once at start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileSettings {
    pub settings: Settings,
    /// Fields the file has that the targeted kube-proxy does not know.
    pub unknown: Vec<String>,
}

impl FileSettings {
    /// The lines to log at start: kube-proxy's lenient-decoding message, and every set
    /// field that does not act as in kube-proxy.
    pub fn notes(&self, path: &Path) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unknown.is_empty() {
            let fields: Vec<String> = self.unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
            out.push(format!(
                "{}: using lenient decoding as strict decoding failed: strict decoding error: {} (ignored)",
                path.display(),
                fields.join(", ")
            ));
        }
        out.extend(self.settings.notes().into_iter().map(|n| format!("{}: {n}", path.display())));
        out
    }
}

/// Reads a config file.
pub fn read(path: &Path) -> Result<FileSettings, FileError> {
    let err = |reason: String| FileError { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    parse(&text).map_err(err)
}

/// Parses a config file's text (YAML or JSON).
pub fn parse(text: &str) -> Result<FileSettings, String> {
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let obj = match doc {
        Value::Object(o) => o,
        Value::Null => Map::new(),
        other => return Err(format!("expected a KubeProxyConfiguration object, found {other}")),
    };
    match obj.get("kind").and_then(Value::as_str) {
        None | Some(KIND) => {}
        Some(k) => return Err(format!("kind {k:?} is not {KIND}")),
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some(API_VERSION) => {}
        Some(v) => return Err(format!("apiVersion {v:?} is not {API_VERSION}")),
    }
    let mut out = FileSettings::default();
    walk("", &obj, &mut out)?;
    // Where kube-proxy's defaulting replaces a zero, the zero is "not set".
    let zeros: Vec<&str> = out.settings.file_values(false).into_iter().filter(|(p, v)| is_zero_json(v) && ZERO_MEANS_DEFAULT.contains(p)).map(|(p, _)| p).collect();
    for path in zeros {
        out.settings.set_from_file(path, &Value::Null);
    }
    Ok(out)
}

fn walk(prefix: &str, obj: &Map<String, Value>, out: &mut FileSettings) -> Result<(), String> {
    for (key, value) in obj {
        if prefix.is_empty() && (key == "apiVersion" || key == "kind") {
            continue;
        }
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match out.settings.set_from_file(&path, value) {
            Some(Ok(())) => {}
            Some(Err(reason)) => return Err(format!("{path}: {reason}")),
            None => match value {
                Value::Object(inner) if is_section(&path) => walk(&path, inner, out)?,
                Value::Null if is_section(&path) => {}
                _ => out.unknown.push(path),
            },
        }
    }
    Ok(())
}

fn is_zero_json(v: &Value) -> bool {
    match v {
        Value::String(s) => s == "0s",
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Whether some setting lives under `path.`.
fn is_section(path: &str) -> bool {
    TABLE.iter().filter_map(|i| i.file).any(|p| p.len() > path.len() && p.starts_with(path) && p.as_bytes()[path.len()] == b'.')
}

/// A layer's file settings as a `KubeProxyConfiguration` document; with `all`, every
/// field, as kube-proxy's `--write-config-to` writes them.
pub fn to_document(settings: &Settings, all: bool) -> Value {
    let mut root = Map::new();
    root.insert("apiVersion".into(), Value::from(API_VERSION));
    root.insert("kind".into(), Value::from(KIND));
    for (path, value) in settings.file_values(all) {
        let mut node = &mut root;
        let mut parts = path.split('.').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                node.insert(part.to_string(), value.clone());
            } else {
                let next = node.entry(part.to_string()).or_insert_with(|| Value::Object(Map::new()));
                if !next.is_object() {
                    *next = Value::Object(Map::new());
                }
                node = next.as_object_mut().expect("just made an object");
            }
        }
    }
    Value::Object(root)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const KUBEADM: &str = r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

    #[test]
    fn kubeadms_file_reads_whole_with_nothing_unknown_and_nothing_to_say() {
        let f = parse(KUBEADM).unwrap();
        assert!(f.unknown.is_empty(), "{:?}", f.unknown);
        assert_eq!(f.settings.kubeconfig.as_deref(), Some("/var/lib/kube-proxy/kubeconfig.conf"));
        assert_eq!(f.settings.cluster_cidr.as_deref(), Some("10.244.0.0/16"));
        assert_eq!(f.settings.mode, None, "\"\" is unset");
        assert_eq!(f.settings.iptables_sync_period, None, "0s is kube-proxy's 'use the default'");
        assert_eq!(f.settings.iptables_min_sync_period, None);
        assert_eq!(f.settings.ipvs_min_sync_period, Some(Duration::ZERO), "IPVS has no default: 0s stays");
        assert_eq!(f.settings.conntrack_udp_timeout, Some(Duration::ZERO), "0s: leave the sysctl as is");
        assert!(f.notes(Path::new("c")).is_empty(), "zero values say nothing: {:?}", f.notes(Path::new("c")));
    }

    #[test]
    fn an_unknown_field_is_named_and_the_rest_is_read() {
        let f = parse("kind: KubeProxyConfiguration\nmode: ipvs\nfoo: 1\niptables:\n  masqueradeBitt: 3\n").unwrap();
        assert_eq!(f.settings.mode, Some(super::super::kinds::ProxyMode::Ipvs));
        assert_eq!(f.unknown, vec!["foo".to_string(), "iptables.masqueradeBitt".to_string()]);
        let notes = f.notes(Path::new("/etc/kp.conf"));
        assert!(notes[0].contains("lenient decoding") && notes[0].contains("\"iptables.masqueradeBitt\""), "{notes:?}");
    }

    #[test]
    fn a_known_field_of_the_wrong_type_is_an_error_naming_it() {
        let e = parse("iptables:\n  masqueradeBit: fourteen\n").unwrap_err();
        assert!(e.starts_with("iptables.masqueradeBit: "), "{e}");
        let e = parse("iptables:\n  syncPeriod: 30\n").unwrap_err();
        assert!(e.starts_with("iptables.syncPeriod: "), "a duration is a string with its unit: {e}");
    }

    #[test]
    fn wrong_kind_or_version_is_an_error() {
        assert!(parse("kind: KubeletConfiguration\n").unwrap_err().contains("KubeletConfiguration"));
        assert!(parse("apiVersion: kubeproxy.config.k8s.io/v1beta9\n").unwrap_err().contains("v1beta9"));
    }

    #[test]
    fn written_documents_read_back_the_same() {
        let f = parse(KUBEADM).unwrap();
        let doc = to_document(&f.settings, false);
        let again = parse(&serde_json::to_string(&doc).unwrap()).unwrap();
        assert_eq!(again.settings, f.settings);
        assert_eq!(doc["clientConnection"]["kubeconfig"], "/var/lib/kube-proxy/kubeconfig.conf");
    }
}

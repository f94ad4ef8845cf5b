//! How svcproxy reaches the API server: kube-proxy's `clientConnection` (kubeconfig, qps,
//! burst, contentType) and `--master`, resolved from the settings layers into one
//! [`ClientConnection`]. Pure: the environment is passed in; [`crate::source::connect`]
//! builds the client.
//!
//! Which server, as kube-proxy's `createClient` decides it:
//! - a kubeconfig named by `--kubeconfig` or by `clientConnection.kubeconfig` in the
//!   `--config` file (the flag wins, as every svcproxy flag does over the file), with
//!   `--master`, if given, replacing its server;
//! - else `$KUBECONFIG`, which kube-proxy never reads (svcproxy only, for running it by hand);
//! - else `--master` alone;
//! - else the pod's in-cluster service account: kube-proxy's last resort, which dials the
//!   `kubernetes` Service's ClusterIP, reachable only once some proxy has programmed it.

use std::path::{Path, PathBuf};

use super::Settings;
use crate::settings::defaults::{DEFAULT_BURST, DEFAULT_CONTENT_TYPE, DEFAULT_QPS};
use crate::settings::row;

/// Where the API server's address and credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A kubeconfig file; `named_by` says which setting named it (for messages).
    File { path: PathBuf, named_by: String, master: Option<String> },
    /// `$KUBECONFIG`: one path or a `:`-separated list, merged as kubectl does.
    Env { value: String, master: Option<String> },
    /// `--master` alone: its URL, no credentials.
    Master(String),
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the token file).
    InCluster,
}

/// Everything needed to build the API client.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    pub endpoint: Endpoint,
    /// Requests per second, client-go's token bucket; `<= 0` means no limit.
    pub qps: f32,
    pub burst: i32,
    pub content_type: String,
    pub accept_content_types: String,
    /// Lines to log once at start (settings that cannot act as written).
    pub notes: Vec<String>,
}

impl ClientConnection {
    /// Resolves the client settings. `flags` and `file` are the command-line and
    /// `--config` layers (`config_path` names the file in messages); `env_kubeconfig`
    /// is `$KUBECONFIG`.
    pub fn resolve(
        flags: &Settings,
        file: &Settings,
        config_path: Option<&Path>,
        master: Option<&str>,
        env_kubeconfig: Option<&str>,
    ) -> ClientConnection {
        let mut notes = Vec::new();
        let master = master.map(str::trim).filter(|m| !m.is_empty()).map(String::from);
        let in_file = |field: &str| match config_path {
            Some(p) => format!("{field} in {}", p.display()),
            None => field.to_string(),
        };
        let flag = flags.kubeconfig.as_deref().filter(|k| !k.is_empty());
        let from_file = file.kubeconfig.as_deref().filter(|k| !k.is_empty());
        if let (Some(f), Some(c)) = (flag, from_file) {
            if f != c {
                notes.push(format!(
                    "--kubeconfig {f} is used, not {c} ({}); kube-proxy ignores --kubeconfig when --config is given",
                    in_file(row::kubeconfig.path())
                ));
            }
        }
        let endpoint = match (flag, from_file, env_kubeconfig.filter(|e| !e.is_empty()), master.clone()) {
            (Some(path), _, _, master) => Endpoint::File { path: path.into(), named_by: row::kubeconfig.flag().into(), master },
            (None, Some(path), _, master) => {
                Endpoint::File { path: path.into(), named_by: in_file(row::kubeconfig.path()), master }
            }
            (None, None, Some(value), master) => Endpoint::Env { value: value.to_string(), master },
            (None, None, None, Some(url)) => Endpoint::Master(url),
            (None, None, None, None) => Endpoint::InCluster,
        };
        let merged = flags.clone().over(file.clone());
        let content_type = merged.kube_api_content_type.unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into());
        let accept_content_types = merged.kube_api_accept_content_types.unwrap_or_default();
        if content_type.contains("protobuf") || accept_content_types.contains("protobuf") {
            notes.push(format!(
                "clientConnection contentType {content_type:?}: the Rust client (kube-rs) speaks JSON only, so requests and watches use application/json"
            ));
        }
        ClientConnection {
            endpoint,
            qps: merged.kube_api_qps.filter(|q| *q != 0.0).unwrap_or(DEFAULT_QPS),
            burst: merged.kube_api_burst.filter(|b| *b != 0).unwrap_or(DEFAULT_BURST),
            content_type,
            accept_content_types,
            notes,
        }
    }

    /// The server this connection is pinned to by `--master`, if any.
    pub fn master(&self) -> Option<&str> {
        match &self.endpoint {
            Endpoint::File { master, .. } | Endpoint::Env { master, .. } => master.as_deref(),
            Endpoint::Master(url) => Some(url),
            Endpoint::InCluster => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kc(path: &str) -> Settings {
        Settings { kubeconfig: Some(path.into()), ..Settings::default() }
    }

    fn none() -> Settings {
        Settings::default()
    }

    #[test]
    fn the_config_files_kubeconfig_is_used_without_any_flag() {
        let c = ClientConnection::resolve(&none(), &kc("/var/lib/kube-proxy/kubeconfig.conf"), Some(Path::new("/var/lib/kube-proxy/config.conf")), None, None);
        assert_eq!(
            c.endpoint,
            Endpoint::File {
                path: "/var/lib/kube-proxy/kubeconfig.conf".into(),
                named_by: "clientConnection.kubeconfig in /var/lib/kube-proxy/config.conf".into(),
                master: None
            }
        );
        assert_eq!((c.qps, c.burst), (5.0, 10), "kube-proxy's defaults");
    }

    #[test]
    fn flags_then_file_then_env_then_master_then_in_cluster() {
        let flag = ClientConnection::resolve(&kc("/a"), &kc("/b"), None, None, Some("/c"));
        assert!(matches!(&flag.endpoint, Endpoint::File { path, named_by, .. } if path == Path::new("/a") && named_by == "--kubeconfig"));
        assert!(flag.notes.iter().any(|n| n.contains("kube-proxy ignores --kubeconfig")), "{:?}", flag.notes);
        let env = ClientConnection::resolve(&none(), &none(), None, Some("https://10.0.0.1:6443"), Some("/c"));
        assert_eq!(env.endpoint, Endpoint::Env { value: "/c".into(), master: Some("https://10.0.0.1:6443".into()) });
        let master = ClientConnection::resolve(&none(), &none(), None, Some("https://10.0.0.1:6443"), None);
        assert_eq!(master.endpoint, Endpoint::Master("https://10.0.0.1:6443".into()));
        assert_eq!(master.master(), Some("https://10.0.0.1:6443"));
        let empty = ClientConnection::resolve(&kc(""), &kc(""), None, Some(" "), Some(""));
        assert_eq!(empty.endpoint, Endpoint::InCluster, "empty values name nothing");
    }

    #[test]
    fn master_overrides_the_kubeconfigs_server() {
        let c = ClientConnection::resolve(&none(), &kc("/b"), None, Some("https://192.0.2.1:6443"), None);
        assert_eq!(c.master(), Some("https://192.0.2.1:6443"));
        assert!(matches!(c.endpoint, Endpoint::File { .. }));
    }

    #[test]
    fn qps_burst_and_content_type_flags_over_file_over_defaults() {
        let file = Settings { kube_api_qps: Some(20.0), kube_api_burst: Some(40), kube_api_content_type: Some("application/json".into()), ..none() };
        let flags = Settings { kube_api_qps: Some(-1.0), ..none() };
        let c = ClientConnection::resolve(&flags, &file, None, None, None);
        assert_eq!((c.qps, c.burst, c.content_type.as_str()), (-1.0, 40, "application/json"));
        assert!(c.notes.is_empty(), "JSON needs no note: {:?}", c.notes);
        let d = ClientConnection::resolve(&none(), &none(), None, None, None);
        assert_eq!(d.content_type, DEFAULT_CONTENT_TYPE);
        assert_eq!(d.notes.len(), 1, "protobuf is said once: {:?}", d.notes);
    }
}

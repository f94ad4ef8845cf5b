//! The API client, built from a resolved [`ClientConnection`]: the kubeconfig (or the
//! in-cluster service account) it names, `--master` over its server, and client-go's
//! client-side rate limit (qps, burst) as a layer under kube-rs.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::ratelimit::RateLimitLayer;
use crate::config::client::{ClientConnection, Endpoint};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    // The kube errors are shown, not chained: their Display already holds their causes.
    #[error("cannot read the kubeconfig {path} (named by {named_by}): {error}")]
    Kubeconfig { path: PathBuf, named_by: String, error: kube::config::KubeconfigError },
    #[error("cannot read $KUBECONFIG ({value}): {error}")]
    Env { value: String, error: kube::config::KubeconfigError },
    #[error("--master: {url:?} is not a URL: {reason}")]
    Master { url: String, reason: String },
    #[error(
        "no kubeconfig or API server named (set clientConnection.kubeconfig in the --config file, --kubeconfig, --master or $KUBECONFIG), and no in-cluster service account: {0}"
    )]
    InCluster(kube::config::InClusterError),
    #[error("cannot build the API client: {0}")]
    Client(kube::Error),
}

fn master_uri(url: &str) -> Result<http::Uri, ConnectError> {
    url.parse().map_err(|e: http::uri::InvalidUri| ConnectError::Master { url: url.into(), reason: e.to_string() })
}

/// The kube-rs configuration the connection names (no client yet).
pub async fn config(conn: &ClientConnection) -> Result<kube::Config, ConnectError> {
    let opts = KubeConfigOptions::default();
    let mut config = match &conn.endpoint {
        Endpoint::File { path, named_by, .. } => {
            let err = |error| ConnectError::Kubeconfig { path: path.clone(), named_by: named_by.clone(), error };
            let kc = Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &opts).await.map_err(err)?
        }
        Endpoint::Env { value, .. } => {
            let err = |error| ConnectError::Env { value: value.clone(), error };
            let merged = std::env::split_paths(value)
                .filter(|p| !p.as_os_str().is_empty())
                .try_fold(Kubeconfig::default(), |m, p| Kubeconfig::read_from(p).and_then(|c| m.merge(c)))
                .map_err(err)?;
            kube::Config::from_custom_kubeconfig(merged, &opts).await.map_err(err)?
        }
        Endpoint::Master(url) => kube::Config::new(master_uri(url)?),
        Endpoint::InCluster => kube::Config::incluster().map_err(ConnectError::InCluster)?,
    };
    if let Some(url) = conn.master() {
        config.cluster_url = master_uri(url)?;
    }
    Ok(config)
}

/// Where `config` points, for the start-up log line.
pub fn describe(conn: &ClientConnection, config: &kube::Config) -> String {
    let from = match &conn.endpoint {
        Endpoint::File { path, named_by, .. } => format!("kubeconfig {} (named by {named_by})", path.display()),
        Endpoint::Env { value, .. } => format!("$KUBECONFIG {value}"),
        Endpoint::Master(_) => crate::settings::row::master.flag().into(),
        Endpoint::InCluster => "the in-cluster service account".into(),
    };
    format!("{} from {from}", config.cluster_url)
}

/// The User-Agent sent with every request, shaped like kube-proxy's
/// (`kube-proxy/<version> (<os>/<arch>) kubernetes/<commit>`): `svcproxy/<version>
/// (<os>/<arch>) <commit>`, the architecture in Go's names, the commit from
/// `SVCPROXY_GIT_COMMIT` at build time or `unknown`.
pub fn user_agent() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    let commit = option_env!("SVCPROXY_GIT_COMMIT").filter(|c| !c.is_empty()).unwrap_or("unknown");
    format!("svcproxy/{} ({}/{arch}) {commit}", env!("CARGO_PKG_VERSION"), std::env::consts::OS)
}

/// The API client: `config` with the connection's rate limit and [`user_agent`].
pub fn client(conn: &ClientConnection, config: kube::Config) -> Result<kube::Client, ConnectError> {
    client_with_metrics(conn, config, None)
}

/// [`client`], its requests counted in client-go's REST client metrics.
pub fn client_with_metrics(
    conn: &ClientConnection,
    mut config: kube::Config,
    metrics: Option<std::sync::Arc<super::client_metrics::ClientMetrics>>,
) -> Result<kube::Client, ConnectError> {
    let host = config.cluster_url.authority().map(|a| a.to_string()).unwrap_or_default();
    if let Ok(value) = http::HeaderValue::from_str(&user_agent()) {
        config.headers.retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, value));
    }
    let builder = kube::client::ClientBuilder::try_from(config).map_err(ConnectError::Client)?;
    // Counted inside the rate limit: latency is the request's, not the wait for a token.
    let limit = RateLimitLayer::new(conn.qps, conn.burst);
    Ok(match metrics {
        Some(m) => builder.with_layer(&super::client_metrics::MetricsLayer::new(m, host)).with_layer(&limit).build(),
        None => builder.with_layer(&limit).build(),
    })
}

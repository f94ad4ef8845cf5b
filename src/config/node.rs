//! The settings that run the node rather than shape the rules: where health and metrics
//! are served, and how logs are written. Pure; the CLI binds and initialises.

use std::net::SocketAddr;

use super::{invalid, ConfigError, Settings};
use crate::settings::row;
use crate::settings::value::{bind_address, default_server_addresses};

/// Where the servers listen (`None`: that server is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Servers {
    pub healthz: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
    /// A port that cannot be bound stops the proxy (`bindAddressHardFail`); else it is logged.
    pub hard_fail: bool,
}

pub use crate::settings::kinds::LogFormat;

/// How logs are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logging {
    pub format: LogFormat,
    /// A tracing filter directive (`info`, `debug`, `trace`).
    pub level: &'static str,
}

/// kube-proxy's defaults follow `bindAddress`'s family: `0.0.0.0:10256` and
/// `127.0.0.1:10249`, or `[::]:10256` and `[::1]:10249` for an IPv6 bindAddress.
pub fn servers(s: &Settings) -> Result<Servers, ConfigError> {
    let (healthz, metrics) = default_server_addresses(s.bind_address.as_deref());
    Ok(Servers {
        healthz: bind_address(s.healthz_bind_address.as_deref(), s.healthz_port, healthz).map_err(|r| invalid(row::healthz_bind_address.path(), r))?,
        metrics: bind_address(s.metrics_bind_address.as_deref(), s.metrics_port, metrics).map_err(|r| invalid(row::metrics_bind_address.path(), r))?,
        hard_fail: s.bind_address_hard_fail.unwrap_or(false),
    })
}

/// `logging.format` / `--logging-format`, and klog's verbosity mapped onto levels:
/// 0–1 info, 2–3 debug, 4 and above trace.
pub fn logging(s: &Settings) -> Result<Logging, ConfigError> {
    let format = s.log_format.unwrap_or(LogFormat::Text);
    let level = match s.log_verbosity.unwrap_or(0) {
        0..=1 => "info",
        2..=3 => "debug",
        _ => "trace",
    };
    Ok(Logging { format, level })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(healthz: Option<&str>, port: Option<i32>) -> Settings {
        Settings { healthz_bind_address: healthz.map(String::from), healthz_port: port, ..Settings::default() }
    }

    #[test]
    fn kube_proxys_address_forms() {
        let h = |v, p| servers(&s(v, p)).unwrap().healthz;
        assert_eq!(h(None, None), Some("0.0.0.0:10256".parse().unwrap()));
        assert_eq!(h(Some("127.0.0.1"), None), Some("127.0.0.1:10256".parse().unwrap()), "an IP alone keeps the port");
        assert_eq!(h(Some("10.0.0.1:9000"), None), Some("10.0.0.1:9000".parse().unwrap()));
        assert_eq!(h(Some(":9000"), None), Some("0.0.0.0:9000".parse().unwrap()));
        assert_eq!(h(Some("[::1]"), None), Some("[::1]:10256".parse().unwrap()));
        assert_eq!(h(None, Some(0)), None, "--healthz-port=0 turns it off");
        assert_eq!(h(Some("127.0.0.1"), Some(8080)), Some("127.0.0.1:8080".parse().unwrap()));
        assert!(servers(&s(Some("localhost:1"), None)).is_err());
        let v6 = Settings { bind_address: Some("fd00::1".into()), ..Settings::default() };
        let got = servers(&v6).unwrap();
        assert_eq!((got.healthz, got.metrics), (Some("[::]:10256".parse().unwrap()), Some("[::1]:10249".parse().unwrap())));
    }

    #[test]
    fn klog_verbosity_and_format() {
        let l = |v: u32| logging(&Settings { log_verbosity: Some(v), ..Settings::default() }).unwrap().level;
        assert_eq!((l(0), l(2), l(4), l(9)), ("info", "debug", "trace", "trace"));
        assert_eq!(logging(&Settings { log_format: Some(LogFormat::Json), ..Settings::default() }).unwrap().format, LogFormat::Json);
    }
}

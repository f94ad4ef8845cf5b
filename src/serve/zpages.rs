//! `/statusz` and `/flagz` on the metrics port, as kube-proxy v1.36+ serves them (apiserver's
//! `pkg/server/statusz` and `pkg/server/flagz`; on by default through the `ComponentStatusz`
//! and `ComponentFlagz` gates): a text page for people (its delimiter chosen at random on
//! each request, so that nothing parses it), and for `statusz` the `config.k8s.io` JSON.

use std::time::{SystemTime, UNIX_EPOCH};

/// The name both pages give the component.
pub const COMPONENT: &str = "kube-proxy";

const WARNING: &str =
    "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.";

/// The delimiters apiserver picks from.
const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];

/// What a request's `Accept` header asks of a zpage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Text,
    /// `application/json;as=<Kind>;v=<version>;g=config.k8s.io`; v1alpha1 is deprecated.
    Json { v1alpha1: bool },
    /// Nothing this page serves (YAML, CBOR, JSON without `as=`, protobuf, ...).
    NotAcceptable,
}

/// Negotiates as apiserver's zpages do: no `Accept` (or a blank one) is text; otherwise the
/// media ranges in order of their `q`: `text/plain` (or a wildcard) is text, JSON only with
/// the page's kind, group `config.k8s.io` and a known version.
pub fn negotiate(accept: Option<&str>, kind: &str) -> Wanted {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else { return Wanted::Text };
    let mut ranges: Vec<(f32, &str)> = accept
        .split(',')
        .map(|r| {
            let q = r.split(';').skip(1).find_map(|p| p.trim().strip_prefix("q=")?.parse::<f32>().ok()).unwrap_or(1.0);
            (q, r)
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, range) in ranges {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .filter(|(k, _)| k != "q")
            .collect();
        let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        match media.as_str() {
            "text/plain" | "text/*" | "*/*" if param("as").is_none() => return Wanted::Text,
            "application/json" if param("as") == Some(kind) && param("g") == Some("config.k8s.io") => match param("v") {
                Some("v1beta1") => return Wanted::Json { v1alpha1: false },
                Some("v1alpha1") => return Wanted::Json { v1alpha1: true },
                _ => {}
            },
            _ => {}
        }
    }
    Wanted::NotAcceptable
}

/// apiserver's deprecation warning for a v1alpha1 answer.
pub fn deprecated_warning(page: &str) -> String {
    format!("299 - \"This version of the {page} endpoint is deprecated. Please use a newer version.\"")
}

/// The body of a 406: the media types these pages serve.
pub fn not_acceptable() -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "only the following media types are accepted: text/plain, application/json",
        "reason": "NotAcceptable",
        "code": 406,
    })
    .to_string()
}

/// A delimiter chosen anew for each request.
pub fn random_delimiter() -> &'static str {
    use std::hash::{BuildHasher, Hasher};
    let n = std::collections::hash_map::RandomState::new().build_hasher().finish();
    DELIMITERS[(n % DELIMITERS.len() as u64) as usize]
}

/// What `/statusz` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The process's start, in whole seconds since the epoch (as component-base reads it).
    pub started: u64,
    pub now: SystemTime,
    pub binary_version: String,
    /// The kube-proxy release whose behaviour is emulated (`--kube-proxy-version`).
    pub emulation_version: String,
    /// The metrics port's top-level paths, sorted (`/statusz` itself is not one).
    pub paths: Vec<String>,
}

/// What `/statusz` says for the Go version: there is none.
pub const GO_VERSION: &str = "none (svcproxy is written in Rust)";

impl Status {
    fn uptime_seconds(&self) -> u64 {
        self.now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()).saturating_sub(self.started)
    }

    /// apiserver's text page (`statusz/textserializer.go`).
    pub fn text(&self, delim: &str) -> String {
        let up = self.uptime_seconds();
        let uptime = format!("{} hr {:02} min {:02} sec", up / 3600, (up / 60) % 60, up % 60);
        let emulation = if self.emulation_version.is_empty() { String::new() } else { format!("Emulation version{delim} {}", self.emulation_version) };
        let paths = if self.paths.is_empty() { String::new() } else { format!("Paths{delim} {}", self.paths.join(" ")) };
        format!(
            "\n{COMPONENT} statusz\n{WARNING}\n\nStarted{delim} {}\nUp{delim} {uptime}\nGo version{delim} {GO_VERSION}\nBinary version{delim} {}\n{emulation}\n{paths}\n",
            unix_date(self.started),
            self.binary_version
        )
    }

    /// The `config.k8s.io` `Statusz` object, its fields in the Go type's order.
    pub fn json(&self, v1alpha1: bool) -> String {
        let version = if v1alpha1 { "config.k8s.io/v1alpha1" } else { "config.k8s.io/v1beta1" };
        let mut fields = vec![
            ("kind", serde_json::json!("Statusz")),
            ("apiVersion", serde_json::json!(version)),
            ("metadata", serde_json::json!({ "name": COMPONENT })),
            ("startTime", serde_json::json!(rfc3339(self.started))),
            ("uptimeSeconds", serde_json::json!(self.uptime_seconds())),
            ("goVersion", serde_json::json!(GO_VERSION)),
            ("binaryVersion", serde_json::json!(self.binary_version)),
        ];
        if !self.emulation_version.is_empty() {
            fields.push(("emulationVersion", serde_json::json!(self.emulation_version)));
        }
        fields.push(("paths", serde_json::json!(self.paths)));
        ordered_json(&fields)
    }
}

/// A JSON object with its fields in the order given, and a newline, as Go's encoder writes it.
pub fn ordered_json(fields: &[(&str, serde_json::Value)]) -> String {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", serde_json::Value::from(*k))).collect();
    format!("{{{}}}\n", body.join(","))
}

/// apiserver's flagz text page (`flagz/textserializer.go`): every flag, sorted by name.
pub fn flagz_text(flags: &[(String, String)], delim: &str) -> String {
    let mut sorted: Vec<&(String, String)> = flags.iter().collect();
    sorted.sort();
    let mut out = format!("\n{COMPONENT} flagz\n{WARNING}\n");
    for (name, value) in sorted {
        out.push_str(&format!("{name}{delim}{value}\n"));
    }
    out
}

/// The date of `seconds` since the epoch as Go's `time.UnixDate` writes it, in UTC.
pub fn unix_date(seconds: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(seconds);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let weekday = DAYS[((seconds / 86_400) % 7) as usize];
    format!("{weekday} {} {d:>2} {h:02}:{mi:02}:{s:02} UTC {y}", MONTHS[(mo - 1) as usize])
}

fn rfc3339(seconds: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(seconds);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Year, month, day, hour, minute, second of a UTC time (Howard Hinnant's days-to-civil).
fn civil(seconds: u64) -> (i64, u32, u32, u64, u64, u64) {
    let days = (seconds / 86_400) as i64;
    let rem = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, (rem / 60) % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_as_go_writes_them() {
        assert_eq!(unix_date(0), "Thu Jan  1 00:00:00 UTC 1970");
        assert_eq!(unix_date(1_795_934_013), "Sun Nov 29 06:33:33 UTC 2026");
        assert_eq!(rfc3339(1_795_934_013), "2026-11-29T06:33:33Z");
        assert_eq!(unix_date(951_782_400), "Tue Feb 29 00:00:00 UTC 2000");
    }

    #[test]
    fn negotiation_as_apiserver_s_zpages() {
        assert_eq!(negotiate(None, "Statusz"), Wanted::Text);
        assert_eq!(negotiate(Some("  "), "Statusz"), Wanted::Text);
        assert_eq!(negotiate(Some("*/*"), "Statusz"), Wanted::Text);
        assert_eq!(negotiate(Some("text/plain"), "Flagz"), Wanted::Text);
        assert_eq!(negotiate(Some("application/json;as=Statusz;v=v1beta1;g=config.k8s.io"), "Statusz"), Wanted::Json { v1alpha1: false });
        assert_eq!(negotiate(Some("application/json;as=Statusz;v=v1alpha1;g=config.k8s.io"), "Statusz"), Wanted::Json { v1alpha1: true });
        assert_eq!(negotiate(Some("application/json;as=Flagz;v=v1beta1;g=config.k8s.io"), "Statusz"), Wanted::NotAcceptable);
        assert_eq!(negotiate(Some("application/json"), "Statusz"), Wanted::NotAcceptable);
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf"), "Statusz"), Wanted::NotAcceptable);
        assert_eq!(
            negotiate(Some("text/plain;q=0.5, application/json;as=Statusz;v=v1beta1;g=config.k8s.io"), "Statusz"),
            Wanted::Json { v1alpha1: false }
        );
    }

    fn status() -> Status {
        Status {
            started: 1_795_934_013,
            now: UNIX_EPOCH + std::time::Duration::from_secs(1_795_934_013 + 3723),
            binary_version: "0.1.0".into(),
            emulation_version: "1.37".into(),
            paths: vec!["/configz".into(), "/flagz".into(), "/healthz".into(), "/metrics".into(), "/proxyMode".into()],
        }
    }

    #[test]
    fn the_statusz_page_in_apiserver_s_layout() {
        assert_eq!(
            status().text(": "),
            "\nkube-proxy statusz\nWarning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n\
             \nStarted:  Sun Nov 29 06:33:33 UTC 2026\nUp:  1 hr 02 min 03 sec\nGo version:  none (svcproxy is written in Rust)\nBinary version:  0.1.0\n\
             Emulation version:  1.37\nPaths:  /configz /flagz /healthz /metrics /proxyMode\n"
        );
        let json: serde_json::Value = serde_json::from_str(&status().json(false)).unwrap();
        assert_eq!(json["kind"], "Statusz");
        assert_eq!(json["apiVersion"], "config.k8s.io/v1beta1");
        assert_eq!(json["metadata"]["name"], "kube-proxy");
        assert_eq!(json["startTime"], "2026-11-29T06:33:33Z");
        assert_eq!(json["uptimeSeconds"], 3723);
        assert_eq!(json["paths"][4], "/proxyMode");
        assert!(status().json(false).starts_with("{\"kind\":\"Statusz\",\"apiVersion\":"), "field order");
    }

    #[test]
    fn the_flagz_page_sorted_by_flag() {
        let flags = vec![("proxy-mode".to_string(), "nftables".to_string()), ("cluster-cidr".to_string(), "10.0.0.0/8".to_string())];
        assert_eq!(
            flagz_text(&flags, "="),
            "\nkube-proxy flagz\nWarning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n\
             cluster-cidr=10.0.0.0/8\nproxy-mode=nftables\n"
        );
        assert!(DELIMITERS.contains(&random_delimiter()));
    }
}

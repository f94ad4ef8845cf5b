//! The types a setting can have, and how each is read from a KubeProxyConfiguration value,
//! written back to one, and parsed from a kube-proxy flag (pflag syntax).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;

/// How a flag of this type takes its value on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagShape {
    /// `--flag` means true; `--flag=false` (pflag's bools).
    Bool,
    /// One value: `--flag=v` or `--flag v`.
    One,
    /// Comma-separated and repeatable (pflag's string slices).
    List,
}

/// A setting's value type.
pub trait SettingValue: Sized + Clone + PartialEq + std::fmt::Debug {
    const SHAPE: FlagShape = FlagShape::One;
    /// The placeholder in `--help`.
    const VALUE_NAME: &'static str = "VALUE";
    /// From the file; `Ok(None)` for what the file format treats as unset (`""`, null).
    fn from_json(v: &Value) -> Result<Option<Self>, String>;
    fn to_json(&self) -> Value;
    /// From one flag occurrence's text.
    fn parse_flag(s: &str) -> Result<Self, String>;
    /// Appends a later occurrence of the same flag (lists); others keep the last.
    fn append(self, later: Self) -> Self {
        later
    }
    /// The type's zero (Go's), which a file writes for "not set".
    fn is_zero(&self) -> bool;
    /// How Go writes an unset field of this type (`""`, `false`, `0`, `0s`, `null`).
    fn zero_json() -> Value {
        Value::Null
    }
}

fn expected(what: &str, v: &Value) -> String {
    format!("expected {what}, found {v}")
}

impl SettingValue for bool {
    const SHAPE: FlagShape = FlagShape::Bool;
    const VALUE_NAME: &'static str = "BOOL";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            _ => Err(expected("true or false", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::Bool(*self)
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        // Go's strconv.ParseBool.
        match s {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            _ => Err(format!("{s:?} is not a boolean (true or false)")),
        }
    }
    fn zero_json() -> Value {
        Value::Bool(false)
    }
    fn is_zero(&self) -> bool {
        !*self
    }
}

macro_rules! integer {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
    const VALUE_NAME: &'static str = "N";
            fn from_json(v: &Value) -> Result<Option<Self>, String> {
                match v {
                    Value::Null => Ok(None),
                    Value::Number(n) => n.as_i64().and_then(|i| <$t>::try_from(i).ok()).map(Some)
                        .ok_or_else(|| format!("{n} is not a {} integer", stringify!($t))),
                    _ => Err(expected("an integer", v)),
                }
            }
            fn to_json(&self) -> Value {
                Value::from(*self)
            }
            fn parse_flag(s: &str) -> Result<Self, String> {
                s.trim().parse().map_err(|_| format!("{s:?} is not a {} integer", stringify!($t)))
            }
            fn zero_json() -> Value {
        Value::from(0)
    }
    fn is_zero(&self) -> bool {
                *self == 0
            }
        }
    )*};
}
integer!(i32, u32, usize);

impl SettingValue for f32 {
    const VALUE_NAME: &'static str = "NUMBER";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::Number(n) => n.as_f64().map(|f| Some(f as f32)).ok_or_else(|| expected("a number", v)),
            _ => Err(expected("a number", v)),
        }
    }
    fn to_json(&self) -> Value {
        // Whole numbers as integers (Go writes `qps: 5`); others through the shortest
        // decimal text, so 0.1 is written 0.1, not 0.10000000149.
        if self.fract() == 0.0 && self.abs() < 1e15 {
            return Value::from(*self as i64);
        }
        self.to_string().parse::<f64>().map(Value::from).unwrap_or(Value::Null)
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        s.trim().parse().map_err(|_| format!("{s:?} is not a number"))
    }
    fn zero_json() -> Value {
        Value::from(0)
    }
    fn is_zero(&self) -> bool {
        *self == 0.0
    }
}

impl SettingValue for String {
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            _ => Err(expected("a string", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::String(self.clone())
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        Ok(s.to_string())
    }
    fn zero_json() -> Value {
        Value::from("")
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

impl SettingValue for Vec<String> {
    const SHAPE: FlagShape = FlagShape::List;
    const VALUE_NAME: &'static str = "LIST";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(String::from).ok_or_else(|| expected("a list of strings", v)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            _ => Err(expected("a list of strings", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::Array(self.iter().cloned().map(Value::String).collect())
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        Ok(s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
    }
    fn append(mut self, later: Self) -> Self {
        self.extend(later);
        self
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

impl SettingValue for Duration {
    const VALUE_NAME: &'static str = "DURATION";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => parse_go_duration(s).map(Some),
            // metav1.Duration is a string in the file; a bare number is refused, as in Go.
            _ => Err(expected("a duration like 30s or 1m0s", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::String(format_go_duration(*self))
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        parse_go_duration(s)
    }
    fn zero_json() -> Value {
        Value::from("0s")
    }
    fn is_zero(&self) -> bool {
        self.is_zero()
    }
}

/// `A=true,B=false` on the command line (component-base's MapStringBool), a map in the file.
impl SettingValue for BTreeMap<String, bool> {
    const VALUE_NAME: &'static str = "NAME=BOOL,...";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::Object(m) => m
                .iter()
                .map(|(k, b)| b.as_bool().map(|b| (k.clone(), b)).ok_or_else(|| format!("{k}: expected true or false, found {b}")))
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(Some),
            _ => Err(expected("a map of names to true/false", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::Object(self.iter().map(|(k, b)| (k.clone(), Value::Bool(*b))).collect())
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not NAME=true|false"))?;
            out.insert(k.trim().to_string(), bool::parse_flag(v.trim()).map_err(|e| format!("{k}: {e}"))?);
        }
        Ok(out)
    }
    fn append(mut self, later: Self) -> Self {
        self.extend(later);
        self
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// Labels and other string maps (fixture documents only).
impl SettingValue for BTreeMap<String, String> {
    const VALUE_NAME: &'static str = "KEY=VALUE,...";
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        match v {
            Value::Null => Ok(None),
            Value::Object(m) => m
                .iter()
                .map(|(k, s)| s.as_str().map(|s| (k.clone(), s.to_string())).ok_or_else(|| format!("{k}: expected a string, found {s}")))
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(Some),
            _ => Err(expected("a map of strings", v)),
        }
    }
    fn to_json(&self) -> Value {
        Value::Object(self.iter().map(|(k, s)| (k.clone(), Value::String(s.clone()))).collect())
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
            out.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(out)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A value svcproxy keeps as written without reading into it (settings without effect
/// whose shape is a structure, e.g. `logging.options`).
#[derive(Debug, Clone, PartialEq)]
pub struct Raw(pub Value);

impl SettingValue for Raw {
    fn from_json(v: &Value) -> Result<Option<Self>, String> {
        Ok((!v.is_null()).then(|| Raw(v.clone())))
    }
    fn to_json(&self) -> Value {
        self.0.clone()
    }
    fn parse_flag(s: &str) -> Result<Self, String> {
        Ok(Raw(Value::String(s.to_string())))
    }
    fn is_zero(&self) -> bool {
        match &self.0 {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            // Quantities such as logging.options' infoBufferSize are strings: "0" is their zero.
            Value::String(s) => s.is_empty() || s == "0",
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.values().all(|v| Raw(v.clone()).is_zero()),
        }
    }
}

/// Go's `time.ParseDuration` (`30s`, `1m0s`, `1h30m`, `500ms`, `0`); a sign is refused.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 30s, 500ms or 1m30s");
    let mut rest = s.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[u..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Go's `Duration.String()`: `1h0m0s`, `30s`, `1.5s`, `500ms`, `0s`.
pub fn format_go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        let (unit, div) = if ns < 1_000 { ("ns", 1u128) } else if ns < 1_000_000 { ("µs", 1_000) } else { ("ms", 1_000_000) };
        return format!("{}{unit}", trim_fraction(ns, div));
    }
    let h = ns / 3_600_000_000_000;
    let m = (ns / 60_000_000_000) % 60;
    let s = trim_fraction(ns % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

fn trim_fraction(n: u128, div: u128) -> String {
    let (whole, frac) = (n / div, n % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// kube-proxy's health-check and metrics ports.
pub const HEALTHZ_PORT: u16 = 10256;
pub const METRICS_PORT: u16 = 10249;

/// The servers' default addresses (health checks, metrics), following `bindAddress`'s
/// family: `0.0.0.0:10256` and `127.0.0.1:10249`, or `[::]:10256` and `[::1]:10249` for
/// an IPv6 bindAddress.
pub fn default_server_addresses(bind_address: Option<&str>) -> (SocketAddr, SocketAddr) {
    let v6 = bind_address.and_then(|a| a.trim().parse::<IpAddr>().ok()).is_some_and(|ip| ip.is_ipv6());
    let (any, local): (IpAddr, IpAddr) =
        if v6 { (Ipv6Addr::UNSPECIFIED.into(), Ipv6Addr::LOCALHOST.into()) } else { (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::LOCALHOST.into()) };
    (SocketAddr::new(any, HEALTHZ_PORT), SocketAddr::new(local, METRICS_PORT))
}

/// A server's bind address setting: `IP:port`, `IP` (the default port) or `:port` (all
/// addresses); the deprecated port flag replaces the port, and 0 turns the server off
/// (`None`). `Err` says why the value is not one.
pub fn bind_address(value: Option<&str>, port: Option<i32>, default: SocketAddr) -> Result<Option<SocketAddr>, String> {
    let bad = |v: &str| format!("{v:?} is not IP, IP:port or :port");
    let mut addr = match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => default,
        Some(v) => {
            if let Ok(a) = v.parse::<SocketAddr>() {
                a
            } else if let Ok(ip) = v.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
                SocketAddr::new(ip, default.port())
            } else if let Some(p) = v.strip_prefix(':') {
                SocketAddr::new(default.ip(), p.parse().map_err(|_| bad(v))?)
            } else {
                return Err(bad(v));
            }
        }
    };
    match port {
        Some(0) => return Ok(None),
        Some(p) => addr.set_port(u16::try_from(p).map_err(|_| format!("port {p} is not in 0-65535"))?),
        None => {}
    }
    Ok(Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_both_ways() {
        for (text, secs) in [("30s", 30.0), ("1m0s", 60.0), ("1h30m", 5400.0), ("500ms", 0.5), ("0", 0.0), ("1.5s", 1.5)] {
            assert_eq!(parse_go_duration(text).unwrap().as_secs_f64(), secs, "{text}");
        }
        for bad in ["15", "", "1x", "-1s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
        for (secs, text) in [(0.0, "0s"), (30.0, "30s"), (60.0, "1m0s"), (3600.0, "1h0m0s"), (900.0, "15m0s"), (1.5, "1.5s"), (0.5, "500ms")] {
            assert_eq!(format_go_duration(Duration::from_secs_f64(secs)), text);
        }
    }

    #[test]
    fn flags_in_pflag_syntax() {
        assert_eq!(bool::parse_flag("T"), Ok(true));
        assert!(bool::parse_flag("yes").is_err());
        let gates = BTreeMap::<String, bool>::parse_flag("A=true, B=false").unwrap();
        assert_eq!(gates, BTreeMap::from([("A".into(), true), ("B".into(), false)]));
        assert!(BTreeMap::<String, bool>::parse_flag("A").is_err());
        assert_eq!(Vec::<String>::parse_flag("10.0.0.0/8, 192.168.0.0/16").unwrap().append(vec!["fd00::/8".into()]).len(), 3);
    }

    #[test]
    fn file_zero_values() {
        assert_eq!(String::from_json(&Value::from("")), Ok(None));
        assert_eq!(i32::from_json(&Value::from(0)), Ok(Some(0)), "a pointer field's zero is a value");
        assert!(i32::from_json(&Value::from("5")).is_err());
        assert_eq!(Duration::from_json(&Value::from("1m0s")), Ok(Some(Duration::from_secs(60))));
        assert_eq!(f32::from_json(&Value::from(5)).unwrap().unwrap().to_json(), Value::from(5), "Go writes qps: 5");
        assert_eq!(0.5f32.to_json(), Value::from(0.5));
    }
}

/// A value as pflag prints its flag back (`Value.String()`): lists in brackets, maps as
/// sorted `k=v` pairs, whole floats without a fraction.
pub fn flag_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        Value::Array(items) => format!("[{}]", items.iter().map(flag_text).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", flag_text(v))).collect();
            pairs.sort();
            pairs.join(",")
        }
    }
}

#[cfg(test)]
mod flag_text_tests {
    use super::*;

    #[test]
    fn values_print_as_pflag_prints_them() {
        assert_eq!(flag_text(&serde_json::json!("iptables")), "iptables");
        assert_eq!(flag_text(&serde_json::json!(5.0)), "5");
        assert_eq!(flag_text(&serde_json::json!(0.5)), "0.5");
        assert_eq!(flag_text(&serde_json::json!(14)), "14");
        assert_eq!(flag_text(&serde_json::json!(["primary", "10.0.0.0/8"])), "[primary,10.0.0.0/8]");
        assert_eq!(flag_text(&serde_json::json!({"B": false, "A": true})), "A=true,B=false");
        assert_eq!(flag_text(&serde_json::Value::Null), "");
    }
}

//! The settings whose values are one of a few names, as enums: parsed once, where they are
//! read (flag or file), with the accepted names in the error.

use serde_json::Value;

use super::value::SettingValue;

macro_rules! named {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Result<Self, String> {
                match s.trim() {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!("{other:?} is not {}", Self::NAMES.join(", "))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl SettingValue for $name {
            const VALUE_NAME: &'static str = stringify!($name);
            fn from_json(v: &Value) -> Result<Option<Self>, String> {
                match v {
                    Value::Null => Ok(None),
                    Value::String(s) if s.is_empty() => Ok(None),
                    Value::String(s) => Self::parse(s).map(Some),
                    _ => Err(format!("expected one of {}, found {v}", Self::NAMES.join(", "))),
                }
            }
            fn to_json(&self) -> Value {
                Value::from(self.as_str())
            }
            fn parse_flag(s: &str) -> Result<Self, String> {
                Self::parse(s)
            }
            fn is_zero(&self) -> bool {
                false
            }
            fn zero_json() -> Value {
                Value::from("")
            }
        }
    };
}

named!(
    /// `mode`: kube-proxy's proxy modes on Linux.
    ProxyMode { Iptables = "iptables", Ipvs = "ipvs", Nftables = "nftables" }
);

named!(
    /// `detectLocalMode`.
    LocalMode {
        ClusterCidr = "ClusterCIDR",
        NodeCidr = "NodeCIDR",
        BridgeInterface = "BridgeInterface",
        InterfaceNamePrefix = "InterfaceNamePrefix",
        None = "None",
    }
);

named!(
    /// svcproxy's `--ip-family`: which families to proxy.
    Families { Ipv4 = "ipv4", Ipv6 = "ipv6", Both = "both", Auto = "auto" }
);

named!(
    /// `logging.format`.
    LogFormat { Text = "text", Json = "json" }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_both_ways_and_errors_list_them() {
        assert_eq!(ProxyMode::parse("ipvs"), Ok(ProxyMode::Ipvs));
        assert_eq!(LocalMode::parse("NodeCIDR").unwrap().as_str(), "NodeCIDR");
        assert_eq!(ProxyMode::parse("userspace").unwrap_err(), "\"userspace\" is not iptables, ipvs, nftables");
        assert_eq!(ProxyMode::from_json(&Value::from("")), Ok(None), "\"\" is unset");
    }
}

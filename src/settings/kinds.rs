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
    /// svcproxy's `--kube-proxy-version`: the kube-proxy release whose rules to write, so that
    /// a node switching from it sees no rule change. Only nftables mode's table differs
    /// between them (see [`KubeProxyVersion::nftables_table`]).
    KubeProxyVersion { V1_33 = "1.33", V1_34 = "1.34", V1_35 = "1.35", V1_36 = "1.36", V1_37 = "1.37" }
);

impl KubeProxyVersion {
    /// The newest release whose rules svcproxy writes, the default.
    pub const NEWEST: KubeProxyVersion = KubeProxyVersion::V1_37;

    /// Which of kube-proxy's two nftables tables this release writes.
    pub fn nftables_table(self) -> NftablesTable {
        match self {
            KubeProxyVersion::V1_33 | KubeProxyVersion::V1_34 | KubeProxyVersion::V1_35 => NftablesTable::V134,
            KubeProxyVersion::V1_36 | KubeProxyVersion::V1_37 => NftablesTable::V136,
        }
    }
}

/// kube-proxy's two nftables tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NftablesTable {
    /// v1.34's (also v1.33 and v1.35; read at 531be81): a `mark-for-masquerade` chain, an
    /// endpoint chain per endpoint with its own hairpin rule.
    V134,
    /// v1.36's and later (kubernetes PR #135800, in v1.36.0-alpha.1, and #136499; read at
    /// master 7b8fb5e): hairpin traffic masqueraded through the `hairpin-connections` set,
    /// inline `mark set` rules, endpoint chains for session affinity only.
    V136,
}

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

    #[test]
    fn kube_proxy_versions_split_at_the_nftables_masquerade_rework() {
        let old: Vec<NftablesTable> = ["1.33", "1.34", "1.35"].iter().map(|v| KubeProxyVersion::parse(v).unwrap().nftables_table()).collect();
        let new: Vec<NftablesTable> = ["1.36", "1.37"].iter().map(|v| KubeProxyVersion::parse(v).unwrap().nftables_table()).collect();
        assert_eq!((old, new), (vec![NftablesTable::V134; 3], vec![NftablesTable::V136; 2]));
        assert_eq!(KubeProxyVersion::NEWEST.as_str(), "1.37");
        assert_eq!(KubeProxyVersion::parse("1.32").unwrap_err(), "\"1.32\" is not 1.33, 1.34, 1.35, 1.36, 1.37");
    }
}

//! A fixture's first document (`kind: SvcproxyFixture`: `node:` and `options:`) as a [`Settings`] layer.
//! `options:` is read through the table: each key is a setting's name or file path and its
//! value is read by that setting's own type, so no setting is spelled here.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::value::SettingValue;
use super::Settings;

pub const FIXTURE_KIND: &str = "SvcproxyFixture";

/// The document: this node's facts and the options (see `fixtures/README.md`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FixtureDoc {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub node: FixtureNode,
    #[serde(default)]
    pub options: FixtureOptions,
}

/// `node:`: what the CLI would otherwise learn from flags or the Node object.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FixtureNode {
    pub name: Option<String>,
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub pod_cidrs: Vec<String>,
    /// The node's interface addresses (`ip/prefix`) by interface name, for resolving
    /// `nodePortAddresses` as kube-proxy does from the host's interfaces.
    #[serde(default)]
    pub interface_addresses: BTreeMap<String, Vec<String>>,
}

/// A fixture's `options:`: a settings layer, plus the two knobs of incremental fixtures,
/// which are not settings (they say what one step of a test does).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FixtureOptions {
    pub settings: Settings,
    /// `forceFullSync`: this step is a full sync (as after a failed restore).
    pub force_full_sync: Option<bool>,
    /// `staleChainCleanupDue`: whether stale chains are deleted in this step (kube-proxy
    /// deletes them only once per sync period in large clusters).
    pub stale_chain_cleanup_due: Option<bool>,
}

impl FixtureOptions {
    /// Sets what `key` names from its value; the error is the reason (the caller names
    /// the file and the field).
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "forceFullSync" => bool::from_json(v).map(|b| self.force_full_sync = b),
            "staleChainCleanupDue" => bool::from_json(v).map(|b| self.stale_chain_cleanup_due = b),
            _ => self.settings.set_from_option(key, v).unwrap_or_else(|| {
                Err(format!(
                    "unknown option `{key}`: an option is a setting's name (ipFamily, randomFully, …) or its KubeProxyConfiguration path (iptables.masqueradeBit, …), as `svcproxy settings` lists them, or forceFullSync or staleChainCleanupDue"
                ))
            }),
        }
    }
}

impl<'de> Deserialize<'de> for FixtureOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OptionsVisitor)
    }
}

struct OptionsVisitor;

impl<'de> Visitor<'de> for OptionsVisitor {
    type Value = FixtureOptions;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of settings to values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FixtureOptions, A::Error> {
        let mut out = FixtureOptions::default();
        while let Some(key) = map.next_key::<String>()? {
            // Set inside the value's deserialization, so an error names `options.KEY`.
            map.next_value_seed(OptionSeed { key: &key, out: &mut out })?;
        }
        Ok(out)
    }

    fn visit_unit<E>(self) -> Result<FixtureOptions, E> {
        Ok(FixtureOptions::default())
    }

    fn visit_none<E>(self) -> Result<FixtureOptions, E> {
        Ok(FixtureOptions::default())
    }
}

/// One option's value, read into the layer.
struct OptionSeed<'a> {
    key: &'a str,
    out: &'a mut FixtureOptions,
}

impl<'de> DeserializeSeed<'de> for OptionSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let v = Value::deserialize(d)?;
        self.out.set(self.key, &v).map_err(de::Error::custom)
    }
}

impl Settings {
    /// The fixture's layer: its options, and what `node:` says about this node.
    pub fn from_fixture(doc: &FixtureDoc) -> Settings {
        let n = &doc.node;
        let node = Settings {
            hostname_override: n.name.clone(),
            node_ips: (!n.ips.is_empty()).then(|| n.ips.clone()),
            node_labels: (!n.labels.is_empty()).then(|| n.labels.clone()),
            node_pod_cidrs: (!n.pod_cidrs.is_empty()).then(|| n.pod_cidrs.clone()),
            interface_addresses: (!n.interface_addresses.is_empty())
                .then(|| n.interface_addresses.values().flatten().cloned().collect()),
            ..Settings::default()
        };
        node.over(doc.options.settings.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::kinds::{Families, ProxyMode};
    use super::*;

    fn options(yaml: &str) -> Result<FixtureOptions, String> {
        let v: Value = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn options_are_settings_by_name_or_path_read_by_their_own_types() {
        let o = options(
            "mode: ipvs\nipFamily: both\nclusterCIDR: 10.0.0.0/8\nconntrackTCPBeLiberal: true\nipvsExcludeCIDRs: [10.1.0.0/16]\n\
             iptables.masqueradeBit: 12\nrandomFully: false\nsyncPeriod: 1m0s\nmasqueradeMark: '0x4000'\nforceFullSync: true\n",
        )
        .unwrap();
        let s = &o.settings;
        assert_eq!((s.mode, s.ip_family), (Some(ProxyMode::Ipvs), Some(Families::Both)));
        assert_eq!(s.cluster_cidr.as_deref(), Some("10.0.0.0/8"));
        assert_eq!((s.conntrack_tcp_be_liberal, s.random_fully, s.masquerade_bit), (Some(true), Some(false), Some(12)));
        assert_eq!(s.ipvs_exclude_cidrs.as_deref(), Some(&["10.1.0.0/16".to_string()][..]));
        assert_eq!(s.sync_period, Some(Duration::from_secs(60)));
        assert_eq!(s.masquerade_mark.as_deref(), Some("0x4000"));
        assert_eq!((o.force_full_sync, o.stale_chain_cleanup_due), (Some(true), None));
        assert_eq!(options("mode: \"\"\n").unwrap().settings.mode, None, "\"\" is unset, as in the file");
    }

    #[test]
    fn a_bad_value_or_an_unknown_option_names_the_option() {
        assert_eq!(options("masqueradeBit: x\n").unwrap_err(), "masqueradeBit: expected an integer, found \"x\"");
        assert_eq!(options("mode: userspace\n").unwrap_err(), "mode: \"userspace\" is not iptables, ipvs, nftables");
        assert_eq!(options("syncPeriod: 30\n").unwrap_err(), "syncPeriod: expected a duration like 30s or 1m0s, found 30");
        let e = options("bogus: 1\n").unwrap_err();
        assert!(e.starts_with("bogus: unknown option `bogus`: an option is a setting's name"), "{e}");
    }

    #[test]
    fn node_facts_join_the_options() {
        let doc: FixtureDoc = serde_json::from_value(serde_json::json!({
            "node": {"name": "n1", "ips": ["10.1.0.5"], "interfaceAddresses": {"eth0": ["10.1.0.5/24"]}},
            "options": {"nfacct": false, "hostnameOverride": "ignored"},
        }))
        .unwrap();
        let s = Settings::from_fixture(&doc);
        assert_eq!(s.hostname_override.as_deref(), Some("n1"), "node.name wins over the option");
        assert_eq!(s.node_ips.as_deref(), Some(&["10.1.0.5".to_string()][..]));
        assert_eq!(s.interface_addresses.as_deref(), Some(&["10.1.0.5/24".to_string()][..]));
        assert_eq!(s.nfacct, Some(false));
    }
}

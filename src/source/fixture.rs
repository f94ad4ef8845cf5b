//! The optional first document of a fixture (`kind: SvcproxyFixture`): the node and the
//! options the CLI would otherwise take from flags. See `fixtures/README.md`.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::settings::fixture::FixtureOptions;

pub const FIXTURE_KIND: &str = "SvcproxyFixture";

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

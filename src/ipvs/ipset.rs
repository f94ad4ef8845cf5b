//! kube-proxy's ipsets on the node: read with `ipset save`, changed with
//! `ipset restore -exist` (what kube-proxy's ipset runner does, as text).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use super::plan::{ipsets, FamilyState};
use crate::net::IpFamily;
use crate::xtables::apply::run_piped;

#[derive(Debug, thiserror::Error)]
pub enum IpsetError {
    #[error("cannot run ipset: {0}")]
    Spawn(std::io::Error),
    #[error("ipset {what} failed: {message}")]
    Failed { what: String, message: String },
}

/// Runs `ipset`.
pub trait IpsetRunner {
    fn save(&mut self) -> Result<String, IpsetError>;
    /// `ipset restore -exist` of `text`.
    fn restore(&mut self, text: &str) -> Result<(), IpsetError>;
}

pub struct ExecIpset;

impl IpsetRunner for ExecIpset {
    fn save(&mut self) -> Result<String, IpsetError> {
        let out = Command::new("ipset").arg("save").output().map_err(IpsetError::Spawn)?;
        if !out.status.success() {
            return Err(IpsetError::Failed { what: "save".into(), message: String::from_utf8_lossy(&out.stderr).trim().into() });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn restore(&mut self, text: &str) -> Result<(), IpsetError> {
        let out = run_piped(Command::new("ipset").args(["restore", "-exist"]), Some(text)).map_err(IpsetError::Spawn)?;
        if out.status.success() {
            return Ok(());
        }
        Err(IpsetError::Failed { what: "restore".into(), message: String::from_utf8_lossy(&out.stderr).trim().into() })
    }
}

/// Sets and their entries, as `ipset save` lists them.
pub type Live = BTreeMap<String, BTreeSet<String>>;

/// Parses `ipset save` output (`create NAME …` and `add NAME ENTRY …` lines).
pub fn parse_save(text: &str) -> Live {
    let mut live = Live::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("create"), Some(name), _) => {
                live.entry(name.to_string()).or_default();
            }
            (Some("add"), Some(name), Some(entry)) => {
                live.entry(name.to_string()).or_default().insert(entry.to_string());
            }
            _ => {}
        }
    }
    live
}

/// Every set name svcproxy (and kube-proxy) may own, both families.
pub fn all_names() -> BTreeSet<String> {
    ipsets::ALL.iter().flat_map(|id| [id.name(IpFamily::V4), id.name(IpFamily::V6)]).collect()
}

/// What changes in the sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// `create` lines of missing sets.
    pub create: Vec<String>,
    pub add: Vec<(String, String)>,
    pub del: Vec<(String, String)>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.add.is_empty() && self.del.is_empty()
    }

    /// Restore input for creations and additions (before iptables needs them).
    pub fn add_text(&self) -> String {
        let mut out: String = self.create.iter().map(|c| format!("{c}\n")).collect();
        out.extend(self.add.iter().map(|(n, e)| format!("add {n} {e}\n")));
        out
    }

    /// Restore input for deletions (after the rest).
    pub fn del_text(&self) -> String {
        self.del.iter().map(|(n, e)| format!("del {n} {e}\n")).collect()
    }

    /// For `--dry-run`.
    pub fn diff_text(&self) -> String {
        let mut out: String = self.create.iter().map(|c| format!("+{c}\n")).collect();
        out.extend(self.add.iter().map(|(n, e)| format!("+add {n} {e}\n")));
        out.extend(self.del.iter().map(|(n, e)| format!("-add {n} {e}\n")));
        out
    }
}

/// The changes that make the live sets what the plans want.
pub fn delta<'a>(plans: impl IntoIterator<Item = &'a FamilyState>, live: &Live) -> Delta {
    let mut d = Delta::default();
    let empty = BTreeSet::new();
    for plan in plans {
        for (id, want) in &plan.sets {
            let name = id.name(plan.family);
            let have = match live.get(&name) {
                Some(h) => h,
                None => {
                    d.create.push(ipsets::create_line(*id, plan.family));
                    &empty
                }
            };
            d.add.extend(want.difference(have).map(|e| (name.clone(), e.clone())));
            d.del.extend(have.difference(want).map(|e| (name.clone(), e.clone())));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_output_parses_and_deltas_are_minimal() {
        let live = parse_save(
            "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
             add KUBE-CLUSTER-IP 10.96.0.1,tcp:443\nadd KUBE-CLUSTER-IP 10.96.0.2,tcp:80\n",
        );
        assert_eq!(live["KUBE-CLUSTER-IP"].len(), 2);
        let mut plan = crate::ipvs::plan::tests_support::empty(IpFamily::V4);
        plan.sets.get_mut(&ipsets::SetId::ClusterIp).unwrap().insert("10.96.0.1,tcp:443".into());
        plan.sets.get_mut(&ipsets::SetId::ClusterIp).unwrap().insert("10.96.0.3,tcp:53".into());
        let d = delta([&plan], &live);
        assert_eq!(d.add, [("KUBE-CLUSTER-IP".to_string(), "10.96.0.3,tcp:53".to_string())]);
        assert_eq!(d.del, [("KUBE-CLUSTER-IP".to_string(), "10.96.0.2,tcp:80".to_string())]);
        assert_eq!(d.create.len(), 16);
    }
}

//! In-memory links and ipsets for IPVS-mode tests that need no root (the IPVS fake is
//! [`super::netlink::FakeIpvs`]; iptables' is [`crate::netfilter::fake::FakeIptables`]).

use std::collections::{BTreeMap, BTreeSet};

use super::ipset::{IpsetError, IpsetRunner};
use super::link::{LinkAddress, LinkError, Links};

/// Links and addresses in memory.
#[derive(Debug, Clone, Default)]
pub struct FakeLinks {
    pub links: BTreeMap<String, u32>,
    pub addrs: BTreeSet<LinkAddress>,
}

impl Links for FakeLinks {
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, LinkError> {
        Ok(self.links.get(name).copied())
    }
    fn add_dummy(&mut self, name: &str) -> Result<(), LinkError> {
        let n = self.links.len() as u32 + 10;
        self.links.entry(name.to_string()).or_insert(n);
        Ok(())
    }
    fn delete_link(&mut self, index: u32) -> Result<(), LinkError> {
        self.links.retain(|_, i| *i != index);
        self.addrs.retain(|a| a.index != index);
        Ok(())
    }
    fn addresses(&mut self) -> Result<Vec<LinkAddress>, LinkError> {
        Ok(self.addrs.iter().copied().collect())
    }
    fn add_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        self.addrs.insert(a);
        Ok(())
    }
    fn del_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        self.addrs.remove(&a);
        Ok(())
    }
}

/// Keeps sets as `ipset save` would print them.
#[derive(Debug, Clone, Default)]
pub struct FakeIpset {
    pub sets: BTreeMap<String, BTreeSet<String>>,
}

impl IpsetRunner for FakeIpset {
    fn save(&mut self) -> Result<String, IpsetError> {
        let mut out = String::new();
        for (name, entries) in &self.sets {
            out.push_str(&format!("create {name} hash:ip,port family inet hashsize 1024 maxelem 65536\n"));
            out.extend(entries.iter().map(|e| format!("add {name} {e}\n")));
        }
        Ok(out)
    }
    fn restore(&mut self, text: &str) -> Result<(), IpsetError> {
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["create", name, ..] => {
                    self.sets.entry(name.to_string()).or_default();
                }
                ["add", name, e] => {
                    self.sets.entry(name.to_string()).or_default().insert(e.to_string());
                }
                ["del", name, e] => {
                    self.sets.entry(name.to_string()).or_default().remove(*e);
                }
                _ => return Err(IpsetError::Failed { what: "restore".into(), message: line.into() }),
            }
        }
        Ok(())
    }
}

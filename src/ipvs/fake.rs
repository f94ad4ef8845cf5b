//! In-memory links and ipsets for IPVS-mode tests that need no root (the IPVS fake is
//! [`super::netlink::FakeIpvs`]; iptables' is [`crate::xtables::fake::FakeIptables`]),
//! and [`Shared`] handles on all three that a test keeps after handing them to a proxier.
//! Each counts what was read from it (links: `reads`; ipsets: `saves`; IPVS: its log).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::collections::{BTreeMap, BTreeSet};

use super::ipset::{IpsetError, IpsetRunner};
use super::link::{LinkAddress, LinkError, Links};
use super::netlink::{Error, FakeIpvs, Ipvs};
use super::values::{Info, ObservedRealServer, ObservedVirtualServer, Op, Timeouts, VirtualServer};

/// A `/proc/sys` at `dir/sys` holding IPVS mode's sysctls, each 0.
pub fn proc_sys(dir: &std::path::Path) -> std::path::PathBuf {
    let sys = dir.join("sys");
    for s in crate::node::sysctl::ipvs_for_this_kernel(false) {
        let f = sys.join(s.path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, "0\n").unwrap();
    }
    sys
}

/// Links and addresses in memory.
#[derive(Debug, Clone, Default)]
pub struct FakeLinks {
    pub links: BTreeMap<String, u32>,
    pub addrs: BTreeSet<LinkAddress>,
    /// Lookups and address listings so far.
    pub reads: usize,
}

impl Links for FakeLinks {
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, LinkError> {
        self.reads += 1;
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
        self.reads += 1;
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
    /// `ipset save`s so far.
    pub saves: usize,
    /// `ipset restore` inputs so far.
    pub restores: Vec<String>,
}

impl IpsetRunner for FakeIpset {
    fn save(&mut self) -> Result<String, IpsetError> {
        self.saves += 1;
        let mut out = String::new();
        for (name, entries) in &self.sets {
            out.push_str(&format!("create {name} hash:ip,port family inet hashsize 1024 maxelem 65536\n"));
            out.extend(entries.iter().map(|e| format!("add {name} {e}\n")));
        }
        Ok(out)
    }
    fn restore(&mut self, text: &str) -> Result<(), IpsetError> {
        self.restores.push(text.to_string());
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

/// A fake a test keeps a handle on after handing a clone to a proxier.
pub type Shared<T> = Arc<Mutex<T>>;

/// The fake behind a handle (a test that panicked holding it has failed already).
pub fn lock<T>(shared: &Shared<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Links for Shared<FakeLinks> {
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, LinkError> {
        lock(self).link_index(name)
    }
    fn add_dummy(&mut self, name: &str) -> Result<(), LinkError> {
        lock(self).add_dummy(name)
    }
    fn delete_link(&mut self, index: u32) -> Result<(), LinkError> {
        lock(self).delete_link(index)
    }
    fn addresses(&mut self) -> Result<Vec<LinkAddress>, LinkError> {
        lock(self).addresses()
    }
    fn add_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        lock(self).add_address(a)
    }
    fn del_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        lock(self).del_address(a)
    }
}

impl IpsetRunner for Shared<FakeIpset> {
    fn save(&mut self) -> Result<String, IpsetError> {
        lock(self).save()
    }
    fn restore(&mut self, text: &str) -> Result<(), IpsetError> {
        lock(self).restore(text)
    }
}

impl Ipvs for Shared<FakeIpvs> {
    fn info(&mut self) -> Result<Info, Error> {
        lock(self).info()
    }
    fn services(&mut self) -> Result<Vec<ObservedVirtualServer>, Error> {
        lock(self).services()
    }
    fn dests(&mut self, vs: &VirtualServer) -> Result<Vec<ObservedRealServer>, Error> {
        lock(self).dests(vs)
    }
    fn timeouts(&mut self) -> Result<Timeouts, Error> {
        lock(self).timeouts()
    }
    fn run(&mut self, op: &Op) -> Result<(), Error> {
        lock(self).run(op)
    }
}

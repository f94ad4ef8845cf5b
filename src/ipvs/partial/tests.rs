//! Partial IPVS-mode syncs against fake kernels that count their reads: a partial sync
//! reads nothing (but the real servers of a virtual server losing some), sends only what
//! moved, and after every step of random change sequences the kernel is what a full sync
//! from scratch makes, and a full comparison finds nothing to do.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::config::Settings;
use crate::ipvs::fake::{lock, FakeIpset, FakeLinks, Shared};
use crate::ipvs::link::LinkAddress;
use crate::ipvs::netlink::FakeIpvs;
use crate::ipvs::proxier::{Paths, Proxier};
use crate::ipvs::sync::{self, Kernel, Options};
use crate::ipvs::values::{Call, RealServer, VirtualServer};
use crate::ipvs::walk::Walk;
use crate::driver::Pass;
use crate::net::IpFamily;
use crate::xtables::apply::Restorer;
use crate::xtables::fake::SharedFake;
use crate::pipeline::{self, Loaded};
use crate::runner::engine::Engine;
use crate::track::Event;

/// Fake kernels with handles kept, one `eth0` address, and a directory for node files.
#[derive(Clone)]
struct Fakes {
    ipvs: Shared<FakeIpvs>,
    links: Shared<FakeLinks>,
    ipset: Shared<FakeIpset>,
    iptables: SharedFake,
    dir: std::path::PathBuf,
}

impl Fakes {
    fn new(dir: &std::path::Path) -> Fakes {
        let mut links = FakeLinks::default();
        links.links.insert("eth0".into(), 2);
        links.addrs.insert(LinkAddress { index: 2, ip: "192.168.10.11".parse().unwrap(), prefix: 24 });
        crate::ipvs::fake::proc_sys(dir);
        Fakes {
            ipvs: Shared::default(),
            links: std::sync::Arc::new(std::sync::Mutex::new(links)),
            ipset: Shared::default(),
            iptables: SharedFake::default(),
            dir: dir.to_path_buf(),
        }
    }

    fn proxier(&self, grace_period_secs: u64) -> Proxier {
        Proxier {
            ipvs: Box::new(self.ipvs.clone()),
            links: Box::new(self.links.clone()),
            ipset: Box::new(self.ipset.clone()),
            iptables: Box::new(self.iptables.clone()),
            paths: Paths { grace_file: self.dir.join("grace"), grace_period_secs, proc_sys: self.dir.join("sys") },
            memory: None,
            canaries: true,
        }
    }

    /// Reads so far: (IPVS dumps and queries, link reads, `ipset save`s, `iptables-save`s).
    fn reads(&self) -> (usize, usize, usize, usize) {
        let ipvs = lock(&self.ipvs).log().iter().filter(|c| !matches!(c, Call::Op(_) | Call::Batch(_))).count();
        let saves = self.iptables.lock().unwrap().calls.iter().filter(|c| matches!(c, crate::xtables::fake::Call::Save(..))).count();
        (ipvs, lock(&self.links).reads, lock(&self.ipset).saves, saves)
    }

    /// What a full comparison would still change (nothing, when the kernel is as planned).
    fn full_comparison(&self, loaded: &Loaded) -> String {
        let (mut ipvs, mut links, mut ipset, mut ipt) = (self.ipvs.clone(), self.links.clone(), self.ipset.clone(), self.iptables.clone());
        let mut k = Kernel { ipvs: &mut ipvs, links: &mut links, ipset: &mut ipset, iptables: &mut ipt };
        let opts = Options { dry_run: true, grace_file: self.dir.join("grace"), grace_period_secs: 0, now_secs: 0, proc_sys: self.dir.join("sys") };
        sync::sync(&loaded.config, &loaded.trackers, &mut k, &opts).unwrap().diff_text()
    }

    /// The kernel's state, comparable between two fakes.
    fn state(&self, families: &[IpFamily]) -> String {
        let mut out = String::new();
        let mut ipvs = self.ipvs.clone();
        for (vs, dests) in crate::ipvs::observe::services(&mut ipvs).unwrap() {
            let rs: Vec<RealServer> = dests.iter().map(|d| d.rs).collect();
            out.push_str(&format!("{:?} {rs:?}\n", vs.vs));
        }
        let links = lock(&self.links);
        let index = links.links.get("kube-ipvs0").copied();
        let bound: BTreeSet<IpAddr> = links.addrs.iter().filter(|a| Some(a.index) == index).map(|a| a.ip).collect();
        out.push_str(&format!("bound {bound:?}\n"));
        for (name, entries) in lock(&self.ipset).sets.iter() {
            out.push_str(&format!("set {name} {entries:?}\n"));
        }
        for f in families {
            for table in ["nat", "filter"] {
                out.push_str(&self.iptables.clone().save(*f, table).unwrap());
            }
        }
        out
    }
}

fn load(walk: &Walk) -> Loaded {
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), nfacct: Some(false), ..Settings::default() };
    pipeline::load(walk.state.clone(), flags, Settings::default()).unwrap()
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("svcproxy-ipvs-partial-{name}-{}", std::process::id()))
}

#[test]
fn random_partial_syncs_never_drift_from_a_full_sync_and_read_nothing() {
    let dir = temp("walk");
    for seed in [5, 17] {
        let mut walk = Walk::new(60, 3, seed);
        let mut loaded = load(&walk);
        let fakes = Fakes::new(&dir);
        let mut p = fakes.proxier(0);
        let none: Vec<crate::track::Changes> = loaded.trackers.families.iter().map(|_| Default::default()).collect();
        p.sync(&loaded.config, &loaded.trackers, &none, true, Pass::Apply).unwrap();
        let mut sent = 0;
        for step in 0..40 {
            for ev in walk.step(1 + step % 3) {
                loaded.trackers.apply(&ev);
            }
            let changes = loaded.trackers.commit();
            let reads = fakes.reads();
            let logged = lock(&fakes.ipvs).log().len();
            let report = p.sync(&loaded.config, &loaded.trackers, &changes, false, Pass::Apply).unwrap();
            sent += report.changes.ops.len();
            let after = fakes.reads();
            assert_eq!((after.1, after.2, after.3), (reads.1, reads.2, reads.3), "seed {seed} step {step}: a partial sync read links, ipsets or iptables");
            let dumped = lock(&fakes.ipvs).log()[logged..].iter().filter(|c| matches!(c, Call::Services)).count();
            assert_eq!(dumped, 0, "seed {seed} step {step}: IPVS dumped");

            assert_eq!(fakes.full_comparison(&loaded), "", "seed {seed} step {step}: a full sync would still change this");
            let fresh = Fakes::new(&dir.join("fresh"));
            fresh.proxier(0).sync(&loaded.config, &loaded.trackers, &none, true, Pass::Apply).unwrap();
            assert_eq!(fakes.state(&loaded.config.families), fresh.state(&loaded.config.families), "seed {seed} step {step}");
        }
        assert!(sent > 40, "seed {seed}: the walk sent too little ({sent} IPVS operations)");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_periodic_sync_of_the_engine_is_partial_and_reads_nothing() {
    let dir = temp("engine");
    let walk = Walk::new(20, 3, 9);
    let loaded = load(&walk);
    let fakes = Fakes::new(&dir);
    let mut engine = Engine::ipvs(loaded.config, loaded.trackers, fakes.proxier(0), Box::new(crate::conntrack::table::fake::FakeFlows::default()));
    engine.sync(true).unwrap();
    let (ipvs_reads, link_reads, ipset_saves, iptables_saves) = fakes.reads();
    assert!(ipvs_reads > 0 && link_reads > 0 && ipset_saves == 1 && iptables_saves > 0, "the full sync read the kernel");

    let idle = engine.sync(false).unwrap();
    assert_eq!((idle.ipvs_ops, idle.restore_lines), (0, 0));
    let mut slice = walk.state.slices.iter().find(|s| s.endpoints.len() > 1).unwrap().clone();
    let mut e = slice.endpoints[0].clone();
    e.ip = "10.202.0.9".parse().unwrap();
    slice.endpoints.push(e);
    engine.apply(&[Event::SliceApplied(std::sync::Arc::new(slice))]);
    let change = engine.sync(false).unwrap();
    assert!(change.ipvs_ops > 0 && change.ipvs_ops < 10, "{} operations for one endpoint", change.ipvs_ops);
    assert_eq!(change.restore_lines, 0, "no iptables lines for an endpoint");
    assert_eq!(fakes.reads(), (ipvs_reads, link_reads, ipset_saves, iptables_saves), "the partial syncs read nothing");
    assert!(lock(&fakes.ipset).restores.last().is_some_and(|r| r.lines().count() <= 2), "one loop-back entry at most");

    // A full sync (hourly, after a failure) reads everything again and finds nothing to do.
    let full = engine.sync(true).unwrap();
    assert_eq!((full.ipvs_ops, full.restore_lines), (0, 0));
    assert!(fakes.reads().2 == ipset_saves + 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failed_partial_sync_makes_the_next_one_full() {
    let dir = temp("failure");
    let walk = Walk::new(20, 3, 13);
    let mut loaded = load(&walk);
    let fakes = Fakes::new(&dir);
    let mut p = fakes.proxier(0);
    let none: Vec<crate::track::Changes> = loaded.trackers.families.iter().map(|_| Default::default()).collect();
    p.sync(&loaded.config, &loaded.trackers, &none, true, Pass::Apply).unwrap();
    let mut slice = walk.state.slices[0].clone();
    let mut e = slice.endpoints[0].clone();
    e.ip = "10.202.0.7".parse().unwrap();
    slice.endpoints.push(e);
    loaded.trackers.apply(&Event::SliceApplied(std::sync::Arc::new(slice)));
    let changes = loaded.trackers.commit();
    // The kernel refuses the new real server (someone deleted its virtual server).
    lock(&fakes.ipvs).fail_next(crate::ipvs::netlink::Errno::NoService);
    assert!(p.sync(&loaded.config, &loaded.trackers, &changes, false, Pass::Apply).is_err());
    assert!(p.memory.is_none(), "a failure drops the memory");
    let saves = fakes.reads().2;
    p.sync(&loaded.config, &loaded.trackers, &none, false, Pass::Apply).unwrap();
    assert_eq!(fakes.reads().2, saves + 1, "the sync after a failure is full");
    assert_eq!(fakes.full_comparison(&loaded), "");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn graceful_termination_runs_from_memory_and_is_persisted() {
    let dir = temp("grace");
    let walk = Walk::new(10, 3, 21);
    let loaded = load(&walk);
    let fakes = Fakes::new(&dir);
    let mut engine = Engine::ipvs(loaded.config, loaded.trackers, fakes.proxier(3600), Box::new(crate::conntrack::table::fake::FakeFlows::default()));
    engine.sync(true).unwrap();
    // A TCP service with several endpoints; its first endpoint has open connections.
    let (vs, gone, slice) = {
        let ipvs = lock(&fakes.ipvs);
        let mut dump = ipvs.clone();
        let services = crate::ipvs::observe::services(&mut dump).unwrap();
        let (vs, dests) = services
            .iter()
            .find(|(v, d)| v.vs.protocol == crate::ipvs::values::Protocol::Tcp && d.len() > 1)
            .expect("a TCP virtual server with two real servers");
        let slice = walk.state.slices.iter().find(|s| s.endpoints.iter().any(|e| e.ip == dests[0].rs.addr)).unwrap().clone();
        (vs.vs.clone(), dests[0].rs, slice)
    };
    lock(&fakes.ipvs).set_conns(vs.key(), gone.addr, gone.port, 3, 0);
    let mut slice = slice;
    slice.endpoints.retain(|e| e.ip != gone.addr);
    engine.apply(&[Event::SliceApplied(std::sync::Arc::new(slice))]);
    let reads = fakes.reads();
    engine.sync(false).unwrap();
    let weight = |fakes: &Fakes, vs: &VirtualServer| {
        let mut ipvs = fakes.ipvs.clone();
        crate::ipvs::netlink::Ipvs::dests(&mut ipvs, vs).unwrap().iter().find(|d| d.rs.addr == gone.addr).map(|d| d.rs.weight)
    };
    assert_eq!(weight(&fakes, &vs), Some(0), "draining, not deleted");
    let grace = std::fs::read_to_string(dir.join("grace")).unwrap();
    assert!(grace.contains(&gone.addr.to_string()), "persisted: {grace}");
    let (after, _, saves, ipt) = fakes.reads();
    assert_eq!((saves, ipt), (reads.2, reads.3));
    assert!(after - reads.0 <= 4, "only the real servers of the changed virtual servers were read ({} reads)", after - reads.0);

    // Still open: still draining, from memory. Drained: deleted, and forgotten in the file.
    engine.sync(false).unwrap();
    assert_eq!(weight(&fakes, &vs), Some(0));
    lock(&fakes.ipvs).set_conns(vs.key(), gone.addr, gone.port, 0, 0);
    engine.sync(false).unwrap();
    assert_eq!(weight(&fakes, &vs), None, "deleted once drained");
    assert!(!std::fs::read_to_string(dir.join("grace")).unwrap().contains(&gone.addr.to_string()));
    assert_eq!(fakes.reads().2, reads.2, "no ipset save throughout");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_engine_notices_a_lost_canary_link_or_ipvs_table_and_syncs_fully() {
    let dir = temp("canary");
    let walk = Walk::new(10, 3, 4);
    let loaded = load(&walk);
    let fakes = Fakes::new(&dir);
    let family = loaded.config.families[0];
    let mut engine = Engine::ipvs(loaded.config, loaded.trackers, fakes.proxier(0), Box::new(crate::conntrack::table::fake::FakeFlows::default()));
    assert!(engine.has_canaries());
    assert_eq!(engine.canary_lost().unwrap(), None, "no memory yet: the next sync is full anyway");
    engine.sync(true).unwrap();
    assert_eq!(engine.canary_lost().unwrap(), None);

    // Someone flushes nat: every rule goes, the canary's too.
    fakes.iptables.lock().unwrap().flush_table(family, "nat");
    assert_eq!(engine.canary_lost().unwrap().map(|l| l.table), Some("nat"));
    engine.sync(true).unwrap();
    assert_eq!(engine.canary_lost().unwrap(), None, "a full sync restores it");

    // Someone deletes kube-ipvs0 (and with it every bound address).
    let index = lock(&fakes.links).links["kube-ipvs0"];
    crate::ipvs::link::Links::delete_link(&mut *lock(&fakes.links), index).unwrap();
    assert_eq!(engine.canary_lost().unwrap().map(|l| l.table), Some("kube-ipvs0"));
    engine.sync(true).unwrap();
    assert_eq!(engine.canary_lost().unwrap(), None);

    // Someone runs `ipvsadm -C`.
    crate::ipvs::netlink::Ipvs::flush(&mut *lock(&fakes.ipvs)).unwrap();
    assert_eq!(engine.canary_lost().unwrap().map(|l| l.table), Some("ipvs"));
    engine.sync(true).unwrap();
    assert_eq!(engine.canary_lost().unwrap(), None);
    assert_eq!(fakes.full_comparison(&load(&walk)), "");
    let _ = std::fs::remove_dir_all(dir);
}

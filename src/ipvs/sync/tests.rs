//! The whole sync against fakes (IPVS, links, ipset, iptables): a first sync changes
//! everything, a dry run after it reports nothing, and the kernel ends as planned.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::*;
use crate::config::Settings;
use crate::xtables::fake::FakeIptables;
use crate::ipvs::fake::{FakeIpset, FakeLinks};
use crate::ipvs::link::LinkAddress;
use crate::ipvs::netlink::FakeIpvs;

fn demo() -> crate::pipeline::Loaded {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo.yaml");
    let state = crate::source::read_path(&path).unwrap();
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), ..Settings::default() };
    crate::pipeline::load(state, flags, Settings::default()).unwrap()
}

fn opts(dry_run: bool, dir: &std::path::Path) -> Options {
    Options {
        dry_run,
        grace_file: dir.join("grace"),
        grace_period_secs: 600,
        now_secs: 1000,
        proc_sys: dir.join("sys"),
    }
}

#[test]
fn first_sync_programs_the_plan_and_a_dry_run_after_it_is_clean() {
    let dir = std::env::temp_dir().join(format!("svcproxy-ipvs-sync-{}", std::process::id()));
    let loaded = demo();
    crate::ipvs::fake::proc_sys(&dir);
    let (mut ipvs, mut links, mut ipset, mut ipt) = (FakeIpvs::new(), FakeLinks::default(), FakeIpset::default(), FakeIptables::new());
    // The node's own address, as the kernel lists it.
    links.links.insert("eth0".into(), 2);
    links.addrs.insert(LinkAddress { index: 2, ip: "192.168.10.11".parse().unwrap(), prefix: 24 });
    let mut k = Kernel { ipvs: &mut ipvs, links: &mut links, ipset: &mut ipset, iptables: &mut ipt };
    let first = sync(&loaded.config, &loaded.trackers, &mut k, &opts(false, &dir)).unwrap();
    assert!(first.link_missing && !first.changes.ops.is_empty() && !first.ipsets.add.is_empty());
    let again = sync(&loaded.config, &loaded.trackers, &mut k, &opts(true, &dir)).unwrap();
    assert!(again.is_empty(), "{}", again.diff_text());
    let plans = crate::ipvs::plan_all(&loaded.config, &loaded.trackers);
    let want: BTreeSet<IpAddr> = plans.iter().flat_map(|p| p.bound.iter().copied()).collect();
    let index = links.links["kube-ipvs0"];
    let have: BTreeSet<IpAddr> = links.addrs.iter().filter(|a| a.index == index).map(|a| a.ip).collect();
    assert_eq!(have, want);
    let dumped = crate::ipvs::observe::services(&mut ipvs).unwrap();
    assert_eq!(dumped.len(), plans.iter().map(|p| p.services.len()).sum::<usize>());
    assert_eq!(std::fs::read_to_string(dir.join("sys/net/ipv4/vs/conntrack")).unwrap(), "1");
    let _ = std::fs::remove_dir_all(dir);
}

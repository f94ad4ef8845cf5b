use std::sync::Arc;

use super::table::fake::FakeFlows;
use super::*;
use crate::model::{Endpoint, Protocol, ServicePort, ServicePortName};
use crate::model::NamespacedName;
use crate::netfilter::ctnetlink::{wire::DumpFilter, wire::IPPROTO_UDP, Tuple};

fn maps(endpoint: &str) -> (ServicePortMap, EndpointsMap) {
    let spn = ServicePortName { service: NamespacedName::new("ns", "dns"), port: "dns".into(), protocol: Protocol::Udp };
    let sp = ServicePort::plain(spn.clone(), "198.19.0.10".parse().unwrap(), 53);
    let ep = Endpoint { ip: endpoint.parse().unwrap(), port: 5353, is_local: false, ready: true, serving: true, terminating: false, zone_hints: Default::default(), node_hints: Default::default() };
    ([(spn.clone(), Arc::new(sp))].into_iter().collect(), [(spn, Arc::new(vec![ep]))].into_iter().collect())
}

fn flow(sport: u16, reply_src: &str) -> Flow {
    let c = "198.18.0.9".parse().unwrap();
    Flow {
        orig: Tuple { src: c, dst: "198.19.0.10".parse().unwrap(), proto: IPPROTO_UDP, sport, dport: 53 },
        reply: Tuple { src: reply_src.parse().unwrap(), dst: c, proto: IPPROTO_UDP, sport: 5353, dport: sport },
        zone: 0,
        id: sport as u32,
        status: 0,
        timeout: 30,
    }
}

#[test]
fn stale_flows_are_deleted_healthy_ones_kept_and_the_run_is_paid() {
    let table = FakeFlows::default();
    let (healthy, gone, unnated) = (flow(1, "198.18.1.2"), flow(2, "198.18.2.2"), flow(3, "198.19.0.10"));
    for f in [healthy, gone, unnated] {
        table.add(f);
    }
    let mut r = Reconciler::new(Box::new(table.clone()));
    r.owe_all(IpFamily::V4);
    let (s, e) = maps("198.18.1.2");
    let out = r.run(IpFamily::V4, &s, &e, false);
    assert_eq!((out.listed, out.deleted, &out.error), (3, Some(2), &None));
    assert_eq!(out.stale, [gone, unnated]);
    assert_eq!(*table.flows.lock().unwrap(), [healthy]);
    assert!(!r.is_owed(IpFamily::V4));
}

#[test]
fn a_dry_run_lists_and_deletes_nothing() {
    let table = FakeFlows::default();
    table.add(flow(2, "198.18.2.2"));
    let mut r = Reconciler::new(Box::new(table.clone()));
    r.owe_all(IpFamily::V4);
    let (s, e) = maps("198.18.1.2");
    let out = r.run(IpFamily::V4, &s, &e, true);
    assert_eq!((out.stale.len(), out.deleted), (1, None));
    assert_eq!(table.flows.lock().unwrap().len(), 1);
    assert!(r.is_owed(IpFamily::V4), "a dry run pays nothing");
}

#[test]
fn a_failed_listing_is_reported_and_leaves_the_run_owed() {
    let table = FakeFlows::default();
    table.add(flow(2, "198.18.2.2"));
    *table.fail.lock().unwrap() = Some(libc::EPERM);
    let mut r = Reconciler::new(Box::new(table.clone()));
    r.owe_all(IpFamily::V4);
    let (s, e) = maps("198.18.1.2");
    let out = r.run(IpFamily::V4, &s, &e, false);
    assert_eq!(out.deleted, None);
    assert!(out.error.as_deref().is_some_and(|m| m.contains("dump") && m.contains("not permitted")), "{:?}", out.error);
    assert!(r.is_owed(IpFamily::V4));
    let again = r.run(IpFamily::V4, &s, &e, false);
    assert_eq!((again.deleted, again.error), (Some(1), None));
    assert!(!r.is_owed(IpFamily::V4));
}

#[test]
fn after_a_first_run_of_every_flow_a_change_reads_only_the_changed_services_flows() {
    let table = FakeFlows::default();
    table.add(flow(1, "198.18.1.2"));
    let mut r = Reconciler::new(Box::new(table.clone()));
    let (s, e) = maps("198.18.1.2");
    let dns = NamespacedName::new("ns", "dns");
    // A first run reads every UDP flow, whatever it is owed.
    r.owe(IpFamily::V4, [dns.clone()]);
    assert_eq!(r.run(IpFamily::V4, &s, &e, false).scope, Scope::All);
    assert_eq!(table.dumps.lock().unwrap().drain(..).collect::<Vec<_>>(), [DumpFilter::proto(IPPROTO_UDP)]);
    // Then a change reads its service's address and port alone, the kernel filtering.
    let (s2, e2) = maps("198.18.2.2");
    r.owe(IpFamily::V4, [dns.clone()]);
    let out = r.run(IpFamily::V4, &s2, &e2, false);
    assert_eq!((out.scope, out.deleted), (Scope::Changed(1), Some(1)));
    let want = DumpFilter { proto: IPPROTO_UDP, dst: Some("198.19.0.10".parse().unwrap()), dport: Some(53) };
    assert_eq!(table.dumps.lock().unwrap().drain(..).collect::<Vec<_>>(), [want]);
    // A failed run makes the next one read everything again.
    *table.fail.lock().unwrap() = Some(libc::EIO);
    r.owe(IpFamily::V4, [dns]);
    assert!(r.run(IpFamily::V4, &s2, &e2, false).error.is_some());
    assert_eq!(r.run(IpFamily::V4, &s2, &e2, false).scope, Scope::All);
}

use std::sync::Arc;

use super::*;
use crate::config::{self, Settings};
use crate::model::{Endpoint, NamespacedName, Protocol, ServicePort};

fn cfg(scheduler: &str) -> crate::config::Config {
    let s = Settings {
        hostname_override: Some("node-1".into()),
        node_ips: Some(vec!["192.168.0.2".into()]),
        ipvs_scheduler: Some(scheduler.into()),
        mode: Some(crate::settings::kinds::ProxyMode::Ipvs),
        ..Default::default()
    };
    config::resolve(s, &[]).unwrap()
}

fn spn(name: &str) -> ServicePortName {
    ServicePortName { service: NamespacedName::new("ns", name), port: "p".into(), protocol: Protocol::Tcp }
}

fn port(cip: &str) -> ServicePort {
    ServicePort::plain(spn("svc"), cip.parse().unwrap(), 80)
}

fn ep(ip: &str, local: bool) -> Endpoint {
    Endpoint {
        ip: ip.parse().unwrap(),
        port: 8080,
        is_local: local,
        ready: true,
        serving: true,
        terminating: false,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    }
}

fn run(cfg: &crate::config::Config, svc: ServicePort, eps: Vec<Endpoint>) -> FamilyState {
    let mut services = ServicePortMap::new();
    let mut endpoints = EndpointsMap::new();
    services.insert(spn("svc"), Arc::new(svc));
    endpoints.insert(spn("svc"), Arc::new(eps));
    plan(&Context::new(cfg, IpFamily::V4), &services, &endpoints)
}

#[test]
fn cluster_ip_is_bound_and_load_balanced() {
    let p = run(&cfg("rr"), port("10.96.0.10"), vec![ep("10.244.1.1", false), ep("10.244.0.5", true)]);
    assert_eq!(p.services.len(), 1);
    let d = p.services.values().next().unwrap();
    assert_eq!(d.vs.scheduler, "rr");
    assert_eq!(d.reals.iter().map(|r| r.addr.to_string()).collect::<Vec<_>>(), ["10.244.0.5", "10.244.1.1"]);
    assert!(p.bound.contains(&"10.96.0.10".parse().unwrap()));
    assert!(p.set(SetId::ClusterIp).contains("10.96.0.10,tcp:80"));
    assert!(p.set(SetId::LoopBack).contains("10.244.0.5,tcp:8080,10.244.0.5"));
    assert!(p.set(SetId::IpvsIps).contains("10.96.0.10"));
}

#[test]
fn mh_gets_source_hash_flag_and_affinity_is_persistence() {
    let mut svc = port("10.96.0.10");
    svc.session_affinity = Some(600);
    let p = run(&cfg("mh"), svc, vec![ep("10.244.1.1", false)]);
    let d = p.services.values().next().unwrap();
    assert_eq!(d.vs.flags, 0x10);
    assert_eq!(d.vs.persistent, Some(600));
    assert_eq!(d.vs.netmask, 32);
}

#[test]
fn etp_local_nodeport_falls_back_to_cluster_endpoints_without_local_ones() {
    let mut svc = port("10.96.0.10");
    svc.node_port = 30080;
    svc.external_policy_local = true;
    let p = run(&cfg("rr"), svc.clone(), vec![ep("10.244.1.1", false)]);
    let np = &p.services[&ServiceKey { addr: "192.168.0.2".parse().unwrap(), port: 30080, protocol: crate::ipvs::values::Protocol::Tcp }];
    assert_eq!(np.reals.len(), 1);
    assert!(p.set(SetId::NodePortLocalTcp).contains("30080"));
    let p = run(&cfg("rr"), svc, vec![ep("10.244.1.1", false), ep("10.244.0.5", true)]);
    let np = &p.services[&ServiceKey { addr: "192.168.0.2".parse().unwrap(), port: 30080, protocol: crate::ipvs::values::Protocol::Tcp }];
    assert_eq!(np.reals.iter().map(|r| r.addr.to_string()).collect::<Vec<_>>(), ["10.244.0.5"]);
    assert!(!p.bound.contains(&"192.168.0.2".parse().unwrap()));
}

#[test]
fn external_ip_on_the_node_is_not_bound() {
    let mut svc = port("10.96.0.10");
    svc.external_ips = vec!["192.168.0.2".parse().unwrap(), "1.2.3.4".parse().unwrap()];
    let p = run(&cfg("rr"), svc, vec![]);
    assert!(p.bound.contains(&"1.2.3.4".parse().unwrap()));
    assert!(!p.bound.contains(&"192.168.0.2".parse().unwrap()));
    assert_eq!(p.services.len(), 3);
}

//! [`FakeIpvs`] answers like the kernel and logs every call.

use std::net::IpAddr;

use crate::ipvs::values::{Call, Forward, Op, Protocol, RealServer, Timeouts, VirtualServer};
use super::{Errno, FakeIpvs, Ipvs};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn web() -> VirtualServer {
    VirtualServer::new(ip("10.0.0.1"), 80, Protocol::Tcp)
}

fn pod(last: u8, weight: u32) -> RealServer {
    RealServer::new(IpAddr::from([10, 1, 0, last]), 8080, weight)
}

fn errno<T: std::fmt::Debug>(result: Result<T, super::Error>) -> Errno {
    result.expect_err("should fail").errno().expect("a kernel error")
}

#[test]
fn services_and_dests_read_back() {
    let mut ipvs = FakeIpvs::new();
    let dns =
        VirtualServer::new(ip("2001:db8::a"), 53, Protocol::Udp).scheduler("sh").persistent(10800);
    ipvs.add_service(&web()).unwrap();
    ipvs.add_service(&dns).unwrap();
    ipvs.add_dest(&web(), &pod(1, 1)).unwrap();
    ipvs.add_dest(&web(), &pod(2, 1)).unwrap();
    ipvs.update_dest(&web(), &pod(2, 0)).unwrap();
    let services: Vec<VirtualServer> = ipvs.services().unwrap().into_iter().map(|o| o.vs).collect();
    assert_eq!(services, vec![web(), dns.clone()]);
    let dests: Vec<RealServer> = ipvs.dests(&web()).unwrap().into_iter().map(|o| o.rs).collect();
    assert_eq!(dests, vec![pod(1, 1), pod(2, 0)]);
    assert!(ipvs.dests(&dns).unwrap().is_empty());
}

#[test]
fn errors_are_the_kernels() {
    let mut ipvs = FakeIpvs::new();
    assert_eq!(errno(ipvs.del_service(&web())), Errno::NoService);
    assert_eq!(errno(ipvs.add_dest(&web(), &pod(1, 1))), Errno::NoService);
    assert_eq!(errno(ipvs.add_service(&web().scheduler("nope"))), Errno::NotFound);
    ipvs.add_service(&web()).unwrap();
    assert_eq!(errno(ipvs.add_service(&web())), Errno::Exists);
    ipvs.add_dest(&web(), &pod(1, 1)).unwrap();
    assert_eq!(errno(ipvs.add_dest(&web(), &pod(1, 5))), Errno::Exists);
    assert_eq!(errno(ipvs.update_dest(&web(), &pod(9, 1))), Errno::NotFound);
    assert_eq!(errno(ipvs.del_dest(&web(), &pod(9, 1))), Errno::NotFound);
    assert_eq!(errno(ipvs.add_dest(&web(), &pod(3, i32::MAX as u32 + 1))), Errno::Range);
    let v6_dest = RealServer::new(ip("2001:db8::1"), 80, 1);
    assert_eq!(errno(ipvs.add_dest(&web(), &v6_dest)), Errno::Invalid);
    let tunnel = RealServer { fwd: Forward::Tunnel, ..v6_dest };
    ipvs.add_dest(&web(), &tunnel).unwrap();
    let mut v6 = VirtualServer::new(ip("2001:db8::1"), 80, Protocol::Sctp);
    v6.netmask = 0;
    assert_eq!(errno(ipvs.add_service(&v6)), Errno::Invalid);
    assert!(ipvs.add_service(&web()).unwrap_err().is_exists());
    assert!(ipvs.del_service(&v6).unwrap_err().is_not_found());
}

#[test]
fn every_call_is_logged_failures_too() {
    let mut ipvs = FakeIpvs::new();
    ipvs.add_service(&web()).unwrap();
    let _ = ipvs.add_service(&web());
    ipvs.dests(&web()).unwrap();
    ipvs.flush().unwrap();
    assert_eq!(
        ipvs.log(),
        [
            Call::Op(Op::AddService(web())),
            Call::Op(Op::AddService(web())),
            Call::Dests(web().key()),
            Call::Op(Op::Flush),
        ]
    );
    assert_eq!(ipvs.ops().len(), 3);
    assert!(ipvs.services().unwrap().is_empty());
    assert_eq!(ipvs.take_log().len(), 5);
    assert!(ipvs.log().is_empty());
}

#[test]
fn injected_failure_hits_the_next_call_only() {
    let mut ipvs = FakeIpvs::new();
    ipvs.fail_next(Errno::NoMemory);
    assert_eq!(errno(ipvs.add_service(&web())), Errno::NoMemory);
    assert!(ipvs.services().unwrap().is_empty());
    ipvs.add_service(&web()).unwrap();
}

#[test]
fn zero_timeouts_are_left_alone() {
    let mut ipvs = FakeIpvs::new();
    assert_eq!(ipvs.timeouts().unwrap(), Timeouts { tcp: 900, tcp_fin: 120, udp: 300 });
    ipvs.set_timeouts(&Timeouts { tcp: 1000, tcp_fin: 0, udp: 200 }).unwrap();
    assert_eq!(ipvs.timeouts().unwrap(), Timeouts { tcp: 1000, tcp_fin: 120, udp: 200 });
    assert_eq!(
        errno(ipvs.set_timeouts(&Timeouts { tcp: u32::MAX, ..Default::default() })),
        Errno::Invalid
    );
}

#[test]
fn apply_reports_refused_ops_and_goes_on() {
    let mut ipvs = FakeIpvs::with_state([(web(), vec![pod(1, 1)])]);
    let ops = vec![
        Op::AddService(web()),
        Op::AddDest(web(), pod(2, 1)),
        Op::DelDest(web(), pod(7, 0)),
        Op::UpdateService(web().scheduler("wrr")),
    ];
    let report = ipvs.apply(&ops).unwrap();
    assert_eq!(report.ops, 4);
    let failed: Vec<(usize, Option<Errno>)> =
        report.failed.iter().map(|f| (f.index, f.error.errno())).collect();
    assert_eq!(failed, vec![(0, Some(Errno::Exists)), (2, Some(Errno::NotFound))]);
    assert_eq!(ipvs.services().unwrap()[0].vs.scheduler, "wrr");
    assert_eq!(ipvs.dests(&web()).unwrap().len(), 2);
}

#[test]
fn errors_name_call_and_errno() {
    let mut ipvs = FakeIpvs::new();
    let err = ipvs.add_dest(&web(), &pod(1, 3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "add real server 10.1.0.1:8080 weight 3 to TCP 10.0.0.1:80: No such process (ESRCH)"
    );
    assert_eq!(err.call(), Some(&Call::Op(Op::AddDest(web(), pod(1, 3)))));
}

#[test]
fn clients_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<super::NetlinkIpvs>();
    send::<FakeIpvs>();
    send::<super::Error>();
}

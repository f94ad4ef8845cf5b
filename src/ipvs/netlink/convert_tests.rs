//! [`super::convert`]: requests from ops, domain values from kernel replies.

use std::net::IpAddr;

use netlink_packet_core::DefaultNla;

use super::convert::{netmask_prefix, netmask_raw, observed_dest, observed_service, op_request};
use super::msg::{DestAttr as D, Flags, InetAddr, IpvsAttr as A, IpvsCmd, ServiceAttr as S};
use crate::ipvs::values::{Forward, Op, Protocol, RealServer, Timeouts, VirtualServer};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn kernel_service(af: u16, addr: &str, flags: u32, timeout: u32, netmask: u32) -> Vec<S> {
    vec![
        S::AddressFamily(af),
        S::Protocol(132),
        S::Address(InetAddr::from(ip(addr))),
        S::Port(3868),
        S::SchedName("sh".into()),
        S::Flags(Flags { flags, mask: u32::MAX }),
        S::Timeout(timeout),
        S::Netmask(netmask),
        S::Stats64(vec![0x0c, 0, 1, 0, 7, 0, 0, 0, 0, 0, 0, 0]), // conns = 7
    ]
}

#[test]
fn service_reads_without_kernel_flags() {
    // hashed (0x2) + persistent (0x1) + sh-fallback (0x8), 255.255.255.0
    let mask = u32::from_ne_bytes([255, 255, 255, 0]);
    let observed =
        observed_service(&kernel_service(2, "10.0.0.2", 0xb, 60, mask)).unwrap().unwrap();
    let mut expected =
        VirtualServer::new(ip("10.0.0.2"), 3868, Protocol::Sctp).scheduler("sh").persistent(60);
    expected.netmask = 24;
    expected.flags = 0x8;
    assert_eq!(observed.vs, expected);
    assert_eq!(observed.stats.map(|s| s.conns), Some(7));
}

#[test]
fn service_timeout_without_persistence_is_ignored() {
    let observed =
        observed_service(&kernel_service(10, "2001:db8::1", 0x2, 300, 128)).unwrap().unwrap();
    assert_eq!(
        observed.vs,
        VirtualServer::new(ip("2001:db8::1"), 3868, Protocol::Sctp).scheduler("sh")
    );
}

#[test]
fn services_svcproxy_cannot_express_are_skipped() {
    let fwmark = vec![S::AddressFamily(2), S::Fwmark(100), S::SchedName("wrr".into())];
    assert_eq!(observed_service(&fwmark), Ok(None));
    let mut esp = kernel_service(2, "10.0.0.2", 2, 0, u32::MAX);
    esp[1] = S::Protocol(50);
    assert_eq!(observed_service(&esp), Ok(None));
}

#[test]
fn broken_services_are_errors() {
    let odd_mask = u32::from_ne_bytes([255, 0, 255, 0]);
    assert!(observed_service(&kernel_service(2, "10.0.0.2", 2, 0, odd_mask)).is_err());
    assert!(observed_service(&kernel_service(7, "10.0.0.2", 2, 0, u32::MAX)).is_err());
    let mut no_port = kernel_service(2, "10.0.0.2", 2, 0, u32::MAX);
    no_port.remove(3);
    assert!(observed_service(&no_port).is_err());
}

#[test]
fn dest_reads_counters_apart() {
    let attrs = vec![
        D::Address(InetAddr::from(ip("2001:db8::10"))),
        D::Port(8443),
        D::FwdMethod(2),
        D::Weight(5),
        D::UpperThreshold(100),
        D::LowerThreshold(10),
        D::ActiveConns(3),
        D::InactiveConns(4),
        D::PersistentConns(1),
        D::AddressFamily(10),
        D::Other(DefaultNla::new(99, vec![])),
    ];
    let observed = observed_dest(&attrs, 2).unwrap();
    let rs = RealServer {
        fwd: Forward::Tunnel,
        upper_threshold: 100,
        lower_threshold: 10,
        ..RealServer::new(ip("2001:db8::10"), 8443, 5)
    };
    assert_eq!(observed.rs, rs);
    assert_eq!(
        (observed.active_conns, observed.inactive_conns, observed.persistent_conns),
        (3, 4, 1)
    );
    assert_eq!(observed.stats, None);
    // without DEST_ATTR_ADDR_FAMILY (older kernels) the service's family applies
    let v4 = [D::Address(InetAddr::from(ip("10.1.0.1"))), D::Port(80), D::FwdMethod(0)];
    assert_eq!(observed_dest(&v4, 2).unwrap().rs, RealServer::new(ip("10.1.0.1"), 80, 0));
    assert!(observed_dest(&v4[..2], 2).is_err());
}

#[test]
fn netmask_encodings() {
    for prefix in 0..=32u8 {
        let raw = netmask_raw(ip("10.0.0.1"), prefix);
        assert_eq!(netmask_prefix(2, raw), Some(prefix));
    }
    assert_eq!(netmask_raw(ip("10.0.0.1"), 32).to_ne_bytes(), [255, 255, 255, 255]);
    assert_eq!(netmask_raw(ip("10.0.0.1"), 20).to_ne_bytes(), [255, 255, 240, 0]);
    assert_eq!(netmask_raw(ip("::1"), 64), 64);
    assert_eq!(netmask_prefix(10, 128), Some(128));
    assert_eq!(netmask_prefix(10, 129), None);
}

#[test]
fn persistence_and_flags_make_the_request() {
    let mut vs =
        VirtualServer::new(ip("2001:db8::1"), 443, Protocol::Tcp).scheduler("mh").persistent(300);
    vs.netmask = 64;
    vs.flags = 0x8 | 0x2; // the hashed bit is the kernel's, never sent
    let msg = op_request(&Op::UpdateService(vs));
    assert_eq!(msg.cmd, IpvsCmd::SetService);
    let A::Service(attrs) = &msg.attrs[0] else { panic!("no service") };
    assert_eq!(
        &attrs[4..],
        [
            S::SchedName("mh".into()),
            S::Flags(Flags { flags: 0x9, mask: u32::MAX }),
            S::Timeout(300),
            S::Netmask(64),
        ]
    );
}

#[test]
fn deletes_send_identities_only() {
    let vs = VirtualServer::new(ip("10.0.0.1"), 80, Protocol::Udp).persistent(5);
    let msg = op_request(&Op::DelDest(vs.clone(), RealServer::new(ip("10.1.0.1"), 53, 7)));
    assert_eq!(msg.cmd, IpvsCmd::DelDest);
    let lens: Vec<usize> = msg
        .attrs
        .iter()
        .map(|a| match a {
            A::Service(s) => s.len(),
            A::Dest(d) => d.len(),
            _ => 0,
        })
        .collect();
    assert_eq!(lens, [4, 3]);
    assert_eq!(
        op_request(&Op::DelService(vs)).attrs,
        vec![A::Service(match &msg.attrs[0] {
            A::Service(s) => s.clone(),
            _ => unreachable!(),
        })]
    );
}

#[test]
fn zero_timeouts_are_not_sent() {
    let msg = op_request(&Op::SetTimeouts(Timeouts { tcp: 0, tcp_fin: 30, udp: 0 }));
    assert_eq!((msg.cmd, msg.attrs), (IpvsCmd::SetConfig, vec![A::TimeoutTcpFin(30)]));
}

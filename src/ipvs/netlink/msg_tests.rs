//! Byte round trips for [`super::msg`].
//!
//! Three kinds of bytes:
//! - requests as this module builds them, every byte explained;
//! - requests ipvsadm 1.31 (libnl 3.7) sent, captured with nlmon in the rig:
//!   `EXTRA_MODULES=nlmon EXTRA_FILES=/usr/bin/tcpdump rig/ipvs-vm.sh rig/nlmon-capture.sh`
//!   (the command is in each comment). libnl marks nests with `NLA_F_NESTED`, which
//!   this module does not emit, so those re-emit equal to the capture with that bit cleared;
//! - replies of the rig's kernel (Debian 6.1.0-56-amd64, IPVS 1.2.1) from the same
//!   capture, which re-emit byte for byte.
//!
//! In the captures the IPVS family id is 0x20 and the sequence/port numbers are libnl's.

use std::net::{Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, ParseableParametrized,
};
use netlink_packet_generic::{GenlHeader, GenlMessage};

use super::convert::op_request;
use super::msg::{
    DestAttr as D, Flags, InetAddr, IpvsAttr as A, IpvsCmd, IpvsMessage, ServiceAttr as S,
};
use crate::ipvs::values::{Op, Protocol, RealServer, VirtualServer};

type Msg = NetlinkMessage<GenlMessage<IpvsMessage>>;

const FAMILY: u16 = 0x20;
const REQ_ACK: u16 = 0x05; // NLM_F_REQUEST | NLM_F_ACK
const REQ_ACK_DUMP: u16 = 0x305; // … | NLM_F_ROOT | NLM_F_MATCH (libnl asks for an ACK on dumps too)
const MULTI: u16 = 0x02; // NLM_F_MULTI, on every message of a dump reply

fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn message(flags: u16, seq: u32, pid: u32, cmd: IpvsCmd, attrs: Vec<A>) -> Msg {
    let mut genl = GenlMessage::from_payload(IpvsMessage::new(cmd, attrs));
    genl.set_resolved_family_id(FAMILY);
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    header.port_number = pid;
    let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(genl));
    msg.finalize();
    msg
}

fn emit(msg: &Msg) -> Vec<u8> {
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// `raw` parses into `expected`, and `expected` emits `raw`.
fn assert_round_trip(raw: &[u8], expected: &Msg) {
    assert_eq!(&Msg::deserialize(raw).expect("parses"), expected);
    assert_eq!(emit(expected), raw);
}

/// As [`assert_round_trip`] for libnl's bytes (`what` sent them): equal once
/// `NLA_F_NESTED` is cleared on the top-level attributes.
fn assert_round_trip_libnl(what: &str, raw: &[u8], expected: &Msg) {
    assert_eq!(&Msg::deserialize(raw).expect(what), expected, "{what}");
    let mut unflagged = raw.to_vec();
    let mut at = 20;
    while at + 4 <= unflagged.len() {
        let len = u16::from_ne_bytes([unflagged[at], unflagged[at + 1]]) as usize;
        unflagged[at + 3] &= 0x7f;
        at += (len + 3) & !3;
    }
    assert_ne!(unflagged, raw, "{what}: the capture should carry NLA_F_NESTED");
    assert_eq!(emit(expected), unflagged, "{what}");
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> InetAddr {
    Ipv4Addr::new(a, b, c, d).into()
}

fn v6(s: &str) -> InetAddr {
    s.parse::<Ipv6Addr>().unwrap().into()
}

fn identity(af: u16, proto: u16, addr: InetAddr, port: u16) -> Vec<S> {
    vec![S::AddressFamily(af), S::Protocol(proto), S::Address(addr), S::Port(port)]
}

/// A full service entry: identity, scheduler, flags (mask all), timeout, netmask.
fn full(identity: Vec<S>, sched: &str, flags: u32, timeout: u32, netmask: u32) -> Vec<S> {
    let mut attrs = identity;
    attrs.extend([
        S::SchedName(sched.into()),
        S::Flags(Flags { flags, mask: u32::MAX }),
        S::Timeout(timeout),
        S::Netmask(netmask),
    ]);
    attrs
}

/// What ipvsadm sends as the destination of -a/-e/-d: family first, tunnel fields zero.
fn libnl_dest(af: u16, addr: InetAddr, port: u16, fwd: u32, weight: u32) -> Vec<D> {
    vec![
        D::AddressFamily(af),
        D::Address(addr),
        D::Port(port),
        D::FwdMethod(fwd),
        D::Weight(weight),
        D::TunType(0),
        D::TunPort(0),
        D::TunFlags(0),
        D::UpperThreshold(0),
        D::LowerThreshold(0),
    ]
}

/// Nested `IPVS_STATS_ATTR_*` as the kernel sends them for an idle entry.
fn zero_stats(wide: bool) -> Vec<u8> {
    let width = |kind: u16| if wide || kind == 4 || kind == 5 { 8 } else { 4 };
    let nlas: Vec<DefaultNla> = (1..=10).map(|k| DefaultNla::new(k, vec![0; width(k)])).collect();
    let mut raw = vec![0; nlas.as_slice().buffer_len()];
    nlas.as_slice().emit(&mut raw);
    raw
}

#[test]
fn new_service_tcp_v4_as_built_here() {
    #[rustfmt::skip]
    let raw = [
        0x68, 0x00, 0x00, 0x00, // nlmsg_len 104
        0x20, 0x00,             // nlmsg_type: the IPVS family id (resolved through nlctrl)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x01, 0x00, 0x00, 0x00, // sequence number 1
        0x00, 0x00, 0x00, 0x00, // port id 0: the kernel
        0x01, 0x01, 0x00, 0x00, // genl: cmd IPVS_CMD_NEW_SERVICE, version 1, reserved
        0x54, 0x00, 0x01, 0x00, // IPVS_CMD_ATTR_SERVICE, 84 bytes (nested, no NLA_F_NESTED: as the kernel)
        0x06, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, // IPVS_SVC_ATTR_AF: AF_INET (u16) + 2 padding
        0x06, 0x00, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00, // IPVS_SVC_ATTR_PROTOCOL: IPPROTO_TCP + padding
        0x14, 0x00, 0x03, 0x00,                         // IPVS_SVC_ATTR_ADDR, 16 bytes (nf_inet_addr):
        0x0a, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, //   10.0.0.1, then zeros
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x06, 0x00, 0x04, 0x00, 0x00, 0x50, 0x00, 0x00, // IPVS_SVC_ATTR_PORT: 80, big-endian + padding
        0x07, 0x00, 0x06, 0x00, b'r', b'r', 0x00, 0x00, // IPVS_SVC_ATTR_SCHED_NAME: "rr\0" + padding
        0x0c, 0x00, 0x07, 0x00,                         // IPVS_SVC_ATTR_FLAGS, struct ip_vs_flags:
        0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, //   flags 0, mask all
        0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, // IPVS_SVC_ATTR_TIMEOUT: 0 (not persistent)
        0x08, 0x00, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, // IPVS_SVC_ATTR_NETMASK: 255.255.255.255
    ];
    let attrs = vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 1), 80), "rr", 0, 0, u32::MAX))];
    assert_round_trip(&raw, &message(REQ_ACK, 1, 0, IpvsCmd::NewService, attrs.clone()));
    // and it is what NetlinkIpvs sends for this virtual server
    let vs = VirtualServer::new([10, 0, 0, 1].into(), 80, Protocol::Tcp);
    assert_eq!(op_request(&Op::AddService(vs)), IpvsMessage::new(IpvsCmd::NewService, attrs));
}

/// ipvsadm's commands on services and destinations: each parses into the attributes
/// built here, which re-emit its bytes (but for `NLA_F_NESTED`).
#[test]
fn service_and_dest_commands_from_ipvsadm() {
    let netmask_24 = u32::from_ne_bytes([0xff, 0xff, 0xff, 0x00]);
    let cases = [
        (
            "`ipvsadm -A -t 10.0.0.1:80 -s rr`: the same attributes as built here.",
            "68000000 2000 0500 9a7a026b 7400c04f 01010000
             54000180 0600010002000000 0600020006000000 140003000a000001000000000000000000000000
             0600040000500000 0700060072720000 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff",
            (0x6b027a9a, 0x4fc00074, IpvsCmd::NewService),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 1), 80), "rr", 0, 0, u32::MAX))],
        ),
        (
            "`ipvsadm -A -u 10.0.0.1:53 -s sh -p 10800`: UDP, persistent flag and timeout.",
            "68000000 2000 0500 9b7a026b 78008048 01010000
             54000180 0600010002000000 0600020011000000 140003000a000001000000000000000000000000
             0600040000350000 0700060073680000 0c00070001000000ffffffff 08000800302a0000
             08000900ffffffff",
            (0x6b027a9b, 0x48800078, IpvsCmd::NewService),
            vec![A::Service(full(identity(2, 17, v4(10, 0, 0, 1), 53), "sh", 1, 10800, u32::MAX))],
        ),
        (
            "`ipvsadm -A --sctp-service 10.0.0.2:3868 -s rr`: protocol 132.",
            "68000000 2000 0500 9b7a026b 7a008048 01010000
             54000180 0600010002000000 0600020084000000 140003000a000002000000000000000000000000
             060004000f1c0000 0700060072720000 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff",
            (0x6b027a9b, 0x4880007a, IpvsCmd::NewService),
            vec![A::Service(full(identity(2, 132, v4(10, 0, 0, 2), 3868), "rr", 0, 0, u32::MAX))],
        ),
        (
            "`ipvsadm -A -t [2001:db8::1]:443 -s rr -p 300`: AF_INET6, netmask = prefix length 128.",
            "68000000 2000 0500 9c7a026b 7c004048 01010000
             54000180 060001000a000000 0600020006000000 1400030020010db8000000000000000000000001
             06000400 01bb0000 0700060072720000 0c00070001000000ffffffff 080008002c010000
             0800090080000000",
            (0x6b027a9c, 0x4840007c, IpvsCmd::NewService),
            vec![A::Service(full(identity(10, 6, v6("2001:db8::1"), 443), "rr", 1, 300, 128))],
        ),
        (
            "`ipvsadm -A -t 10.0.0.3:80 -s rr -p 60 -M 255.255.255.0`: the mask in network order.",
            "68000000 2000 0500 9d7a026b 80004048 01010000
             54000180 0600010002000000 0600020006000000 140003000a000003000000000000000000000000
             0600040000500000 0700060072720000 0c00070001000000ffffffff 080008003c000000
             08000900ffffff00",
            (0x6b027a9d, 0x48400080, IpvsCmd::NewService),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 3), 80), "rr", 1, 60, netmask_24))],
        ),
        (
            "`ipvsadm -E -t 10.0.0.1:80 -s wrr`.",
            "68000000 2000 0500 9d7a026b 8400004f 02010000
             54000180 0600010002000000 0600020006000000 140003000a000001000000000000000000000000
             0600040000500000 0800060077727200 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff",
            (0x6b027a9d, 0x4f000084, IpvsCmd::SetService),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 1), 80), "wrr", 0, 0, u32::MAX))],
        ),
        (
            "`ipvsadm -D -t 10.0.0.3:80`: ipvsadm sends a full entry with an empty scheduler.",
            "68000000 2000 0500 9f7a026b 9000804f 03010000
             54000180 0600010002000000 0600020006000000 140003000a000003000000000000000000000000
             0600040000500000 0500060000000000 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff",
            (0x6b027a9f, 0x4f800090, IpvsCmd::DelService),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 3), 80), "", 0, 0, u32::MAX))],
        ),
        (
            "`ipvsadm -a -t [2001:db8::1]:443 -r [2001:db8::10]:8443 -m -w 0`.",
            "c8000000 2000 0500 9c7a026b 7e004048 05010000
             54000180 060001000a000000 0600020006000000 1400030020010db8000000000000000000000001
             0600040001bb0000 0500060000000000 0c00070000000000ffffffff 0800080000000000
             0800090080000000
             60000280 06000b000a000000 1400010020010db8000000000000000000000010 0600020020fb0000
             0800030000000000 0800040000000000 05000d0000000000 06000e0000000000 06000f0000000000
             0800050000000000 0800060000000000",
            (0x6b027a9c, 0x4840007e, IpvsCmd::NewDest),
            vec![A::Service(full(identity(10, 6, v6("2001:db8::1"), 443), "", 0, 0, 128)), A::Dest(libnl_dest(10, v6("2001:db8::10"), 8443, 0, 0))],
        ),
        (
            "`ipvsadm -e -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 0` (graceful termination).",
            "c8000000 2000 0500 9d7a026b 8200004f 06010000
             54000180 0600010002000000 0600020006000000 140003000a000001000000000000000000000000
             0600040000500000 0500060000000000 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff
             60000280 06000b0002000000 140001000a010001000000000000000000000000 060002001f900000
             0800030000000000 0800040000000000 05000d0000000000 06000e0000000000 06000f0000000000
             0800050000000000 0800060000000000",
            (0x6b027a9d, 0x4f000082, IpvsCmd::SetDest),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 1), 80), "", 0, 0, u32::MAX)), A::Dest(libnl_dest(2, v4(10, 1, 0, 1), 8080, 0, 0))],
        ),
        (
            "`ipvsadm -d -t 10.0.0.1:80 -r 10.1.0.1:8080` (ipvsadm fills in its defaults: -g, -w 1).",
            "c8000000 2000 0500 9e7a026b 8600c04e 07010000
             54000180 0600010002000000 0600020006000000 140003000a000001000000000000000000000000
             0600040000500000 0500060000000000 0c00070000000000ffffffff 0800080000000000
             08000900ffffffff
             60000280 06000b0002000000 140001000a010001000000000000000000000000 060002001f900000
             0800030003000000 0800040001000000 05000d0000000000 06000e0000000000 06000f0000000000
             0800050000000000 0800060000000000",
            (0x6b027a9e, 0x4ec00086, IpvsCmd::DelDest),
            vec![A::Service(full(identity(2, 6, v4(10, 0, 0, 1), 80), "", 0, 0, u32::MAX)), A::Dest(libnl_dest(2, v4(10, 1, 0, 1), 8080, 3, 1))],
        ),
    ];
    for (command, hex, (seq, pid, cmd), attrs) in cases {
        assert_round_trip_libnl(command, &unhex(hex), &message(REQ_ACK, seq, pid, cmd, attrs));
    }
}

#[test]
fn new_dest_as_built_here() {
    #[rustfmt::skip]
    let raw = [
        0x8c, 0x00, 0x00, 0x00, 0x20, 0x00, 0x05, 0x00, // nlmsg_len 140, IPVS, REQUEST | ACK
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sequence 7, port id 0
        0x05, 0x01, 0x00, 0x00, // genl: cmd IPVS_CMD_NEW_DEST, version 1
        0x30, 0x00, 0x01, 0x00, // IPVS_CMD_ATTR_SERVICE, 48 bytes: identity only
        0x06, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, //   AF_INET
        0x06, 0x00, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00, //   IPPROTO_TCP
        0x14, 0x00, 0x03, 0x00, 0x0a, 0x00, 0x00, 0x01, //   10.0.0.1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
        0x06, 0x00, 0x04, 0x00, 0x00, 0x50, 0x00, 0x00, //   port 80
        0x48, 0x00, 0x02, 0x00, // IPVS_CMD_ATTR_DEST, 72 bytes
        0x06, 0x00, 0x0b, 0x00, 0x02, 0x00, 0x00, 0x00, //   IPVS_DEST_ATTR_ADDR_FAMILY: AF_INET
        0x14, 0x00, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x01, //   IPVS_DEST_ATTR_ADDR: 10.1.0.1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
        0x06, 0x00, 0x02, 0x00, 0x1f, 0x90, 0x00, 0x00, //   IPVS_DEST_ATTR_PORT: 8080, big-endian
        0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, //   IPVS_DEST_ATTR_FWD_METHOD: masquerade (0)
        0x08, 0x00, 0x04, 0x00, 0x02, 0x00, 0x00, 0x00, //   IPVS_DEST_ATTR_WEIGHT: 2
        0x08, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, //   IPVS_DEST_ATTR_U_THRESH: 0
        0x08, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, //   IPVS_DEST_ATTR_L_THRESH: 0
    ];
    let service = identity(2, 6, v4(10, 0, 0, 1), 80);
    let dest = vec![
        D::AddressFamily(2),
        D::Address(v4(10, 1, 0, 1)),
        D::Port(8080),
        D::FwdMethod(0),
        D::Weight(2),
        D::UpperThreshold(0),
        D::LowerThreshold(0),
    ];
    let attrs = vec![A::Service(service), A::Dest(dest)];
    assert_round_trip(&raw, &message(REQ_ACK, 7, 0, IpvsCmd::NewDest, attrs.clone()));
    let vs = VirtualServer::new([10, 0, 0, 1].into(), 80, Protocol::Tcp);
    let rs = RealServer::new([10, 1, 0, 1].into(), 8080, 2);
    assert_eq!(op_request(&Op::AddDest(vs, rs)), IpvsMessage::new(IpvsCmd::NewDest, attrs));
}

#[test]
fn get_dest_dump_v6_as_built_here() {
    #[rustfmt::skip]
    let raw = [
        0x44, 0x00, 0x00, 0x00, 0x20, 0x00, 0x01, 0x03, // nlmsg_len 68, IPVS, REQUEST | DUMP
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sequence 9, port id 0
        0x08, 0x01, 0x00, 0x00, // genl: cmd IPVS_CMD_GET_DEST, version 1
        0x30, 0x00, 0x01, 0x00, // IPVS_CMD_ATTR_SERVICE, 48 bytes: which service
        0x06, 0x00, 0x01, 0x00, 0x0a, 0x00, 0x00, 0x00, //   AF_INET6
        0x06, 0x00, 0x02, 0x00, 0x11, 0x00, 0x00, 0x00, //   IPPROTO_UDP
        0x14, 0x00, 0x03, 0x00, 0x20, 0x01, 0x0d, 0xb8, //   2001:db8::35
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x35,
        0x06, 0x00, 0x04, 0x00, 0x00, 0x35, 0x00, 0x00, //   port 53
    ];
    let attrs = vec![A::Service(identity(10, 17, v6("2001:db8::35"), 53))];
    assert_round_trip(&raw, &message(0x301, 9, 0, IpvsCmd::GetDest, attrs));
}

/// `ipvsadm -Sn`, second request: the destinations of TCP 10.0.0.1:80.
#[test]
fn get_dest_dump_from_ipvsadm() {
    let raw = unhex(
        "44000000 2000 0503 9f7a026b 8c004062 08010000
         30000180 0600010002000000 0600020006000000 140003000a000001000000000000000000000000
         0600040000500000",
    );
    let attrs = vec![A::Service(identity(2, 6, v4(10, 0, 0, 1), 80))];
    let expected = message(REQ_ACK_DUMP, 0x6b027a9f, 0x6240008c, IpvsCmd::GetDest, attrs);
    assert_round_trip_libnl("ipvsadm -Sn", &raw, &expected);
}

/// The kernel's reply to that kind of dump: one destination, weight 0, with
/// tunnel fields, counters, address family and both stats nests.
#[test]
fn dest_dump_reply_from_kernel() {
    let raw = unhex(
        "64010000 2000 0200 9f7a026b 8c00400d 05010000
         50010200 1400010020010db8000000000000000000000010 0600020020fb0000
         0800030000000000 0800040000000000 05000d0000000000 06000e0000000000 06000f0000000000
         0800050000000000 0800060000000000 0800070000000000 0800080000000000 0800090000000000
         06000b000a000000
         5c000a00 0800010000000000 0800020000000000 0800030000000000 0c0004000000000000000000
         0c0005000000000000000000 0800060000000000 0800070000000000 0800080000000000
         0800090000000000 08000a0000000000
         7c000c00 0c0001000000000000000000 0c0002000000000000000000 0c0003000000000000000000
         0c0004000000000000000000 0c0005000000000000000000 0c0006000000000000000000
         0c0007000000000000000000 0c0008000000000000000000 0c0009000000000000000000
         0c000a000000000000000000",
    );
    let dest = vec![
        D::Address(v6("2001:db8::10")),
        D::Port(8443),
        D::FwdMethod(0),
        D::Weight(0),
        D::TunType(0),
        D::TunPort(0),
        D::TunFlags(0),
        D::UpperThreshold(0),
        D::LowerThreshold(0),
        D::ActiveConns(0),
        D::InactiveConns(0),
        D::PersistentConns(0),
        D::AddressFamily(10),
        D::Stats(zero_stats(false)),
        D::Stats64(zero_stats(true)),
    ];
    let expected = message(MULTI, 0x6b027a9f, 0x0d40008c, IpvsCmd::NewDest, vec![A::Dest(dest)]);
    assert_round_trip(&raw, &expected);
}

/// `ipvsadm -Sn`, first request: dump all services (no attributes).
#[test]
fn get_service_dump_from_ipvsadm() {
    let raw = unhex("14000000 2000 0503 9f7a026b 8c00804f 04010000");
    assert_round_trip(
        &raw,
        &message(REQ_ACK_DUMP, 0x6b027a9f, 0x4f80008c, IpvsCmd::GetService, vec![]),
    );
}

/// One service of the kernel's dump reply: SCTP 10.0.0.2:3868 rr. Flags show the
/// kernel's own IP_VS_SVC_F_HASHED; both stats nests come raw.
#[test]
fn service_dump_reply_from_kernel() {
    let raw = unhex(
        "40010000 2000 0200 9f7a026b 8c00804f 01010000
         2c010100 0600010002000000 0600020084000000 140003000a000002000000000000000000000000
         060004000f1c0000 0700060072720000 0c00070002000000ffffffff 0800080000000000
         08000900ffffffff
         5c000a00 0800010000000000 0800020000000000 0800030000000000 0c0004000000000000000000
         0c0005000000000000000000 0800060000000000 0800070000000000 0800080000000000
         0800090000000000 08000a0000000000
         7c000c00 0c0001000000000000000000 0c0002000000000000000000 0c0003000000000000000000
         0c0004000000000000000000 0c0005000000000000000000 0c0006000000000000000000
         0c0007000000000000000000 0c0008000000000000000000 0c0009000000000000000000
         0c000a000000000000000000",
    );
    let mut service = full(identity(2, 132, v4(10, 0, 0, 2), 3868), "rr", 2, 0, u32::MAX);
    service.extend([S::Stats(zero_stats(false)), S::Stats64(zero_stats(true))]);
    let expected =
        message(MULTI, 0x6b027a9f, 0x4f80008c, IpvsCmd::NewService, vec![A::Service(service)]);
    assert_round_trip(&raw, &expected);
}

/// `ipvsadm -C`.
#[test]
fn flush_from_ipvsadm() {
    let raw = unhex("14000000 2000 0500 9a7a026b 7200c04f 11010000");
    assert_round_trip(&raw, &message(REQ_ACK, 0x6b027a9a, 0x4fc00072, IpvsCmd::Flush, vec![]));
}

#[test]
fn zero_all_as_built_here() {
    #[rustfmt::skip]
    let raw = [
        0x14, 0x00, 0x00, 0x00, 0x20, 0x00, 0x05, 0x00, // nlmsg_len 20, IPVS, REQUEST | ACK
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sequence 3, port id 0
        0x10, 0x01, 0x00, 0x00, // genl: cmd IPVS_CMD_ZERO, version 1; no service: all counters
    ];
    assert_round_trip(&raw, &message(REQ_ACK, 3, 0, IpvsCmd::Zero, vec![]));
}

/// What every ipvsadm run asks first, and the kernel's answer (cmd SET_INFO):
/// version 0x010201 (1.2.1), connection table size 4096. Info attribute numbers
/// 1 and 2 are the service/destination numbers of other commands.
#[test]
fn get_info_and_reply() {
    let request = unhex("14000000 2000 0500 9a7a026b 72000025 0f010000");
    assert_round_trip(
        &request,
        &message(REQ_ACK, 0x6b027a9a, 0x25000072, IpvsCmd::GetInfo, vec![]),
    );
    let reply =
        unhex("24000000 2000 0000 9a7a026b 72000025 0e010000 0800010001020100 0800020000100000");
    let attrs = vec![A::InfoVersion(0x010201), A::InfoConnTabSize(4096)];
    assert_round_trip(&reply, &message(0, 0x6b027a9a, 0x25000072, IpvsCmd::SetInfo, attrs));
}

/// `ipvsadm --set 1000 100 200`, then `ipvsadm -L --timeout` and the kernel's reply.
#[test]
fn set_and_get_config() {
    let set = unhex(
        "2c000000 2000 0500 9e7a026b 8800c04e 0c010000 08000400e8030000 0800050064000000
         08000600c8000000",
    );
    let timeouts = vec![A::TimeoutTcp(1000), A::TimeoutTcpFin(100), A::TimeoutUdp(200)];
    assert_round_trip(
        &set,
        &message(REQ_ACK, 0x6b027a9e, 0x4ec00088, IpvsCmd::SetConfig, timeouts.clone()),
    );
    let get = unhex("14000000 2000 0500 9e7a026b 8a00c04e 0d010000");
    assert_round_trip(&get, &message(REQ_ACK, 0x6b027a9e, 0x4ec0008a, IpvsCmd::GetConfig, vec![]));
    let reply = unhex(
        "2c000000 2000 0000 9e7a026b 8a00c04e 0c010000 08000400e8030000 0800050064000000
         08000600c8000000",
    );
    assert_round_trip(&reply, &message(0, 0x6b027a9e, 0x4ec0008a, IpvsCmd::SetConfig, timeouts));
}

#[test]
fn unknown_attributes_and_commands_are_kept() {
    let attrs = vec![
        A::Service(vec![S::AddressFamily(2), S::Other(DefaultNla::new(0x50, vec![1, 2, 3]))]),
        A::Dest(vec![D::Other(DefaultNla::new(0x8040, vec![]))]),
        A::Other(DefaultNla::new(0x63, vec![9, 9, 9, 9, 9])),
    ];
    let msg = message(REQ_ACK, 5, 0, IpvsCmd::Other(0x42), attrs);
    let raw = emit(&msg);
    assert_eq!(Msg::deserialize(&raw).unwrap(), msg);
}

fn parse_attrs(cmd: u8, attrs: &[u8]) -> Result<IpvsMessage, netlink_packet_core::DecodeError> {
    IpvsMessage::parse_with_param(attrs, GenlHeader { cmd, version: 1 })
}

#[test]
fn malformed_attributes_are_errors() {
    // IPVS_SVC_ATTR_PORT with 3 bytes, inside a service
    let short_port = unhex("0c000100 07000400 005000 00");
    assert!(parse_attrs(1, &short_port).is_err());
    // IPVS_SVC_ATTR_ADDR with 5 bytes
    let odd_addr = unhex("10000100 09000300 0a00000100 000000");
    assert!(parse_attrs(1, &odd_addr).is_err());
    // an attribute claiming more bytes than there are
    let overlong = unhex("20000100 06000100 0200");
    assert!(parse_attrs(1, &overlong).is_err());
    // a timeout of 2 bytes
    assert!(parse_attrs(12, &unhex("06000400 e803 0000")).is_err());
    // an address of 4 bytes is read as IPv4 (older senders)
    let short_addr = parse_attrs(1, &unhex("0c000100 08000300 0a000001")).unwrap();
    assert_eq!(short_addr.attrs, vec![A::Service(vec![S::Address(v4(10, 0, 0, 1))])]);
}

/// Every truncation and every single-byte corruption of a reply parses or errs; never panics.
#[test]
fn damaged_input_never_panics() {
    let raw = emit(&message(0, 1, 0, IpvsCmd::NewService, {
        let mut service = full(identity(10, 6, v6("2001:db8::1"), 443), "rr", 3, 300, 128);
        service.push(S::Stats64(zero_stats(true)));
        vec![A::Service(service), A::Dest(libnl_dest(10, v6("::1"), 1, 0, 0))]
    }));
    for cut in 0..raw.len() {
        let _ = Msg::deserialize(&raw[..cut]);
        let _ = parse_attrs(1, &raw[20..cut.max(20)]);
    }
    for at in 0..raw.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut bad = raw.clone();
            bad[at] ^= flip;
            let _ = Msg::deserialize(&bad);
        }
    }
}

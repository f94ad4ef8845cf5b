use super::*;
use crate::netfilter::nlattr::{Message, Messages};

/// The '>' (sent) and '<' (received) records of a capture file.
fn capture(text: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let hex = |h: &str| (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    for l in text.lines() {
        if let Some(h) = l.strip_prefix("> ") {
            sent.push(hex(h.trim()));
        } else if let Some(h) = l.strip_prefix("< ") {
            got.push(hex(h.trim()));
        }
    }
    (sent, got)
}

fn flows(records: &[Vec<u8>]) -> Vec<Flow> {
    let mut out = Vec::new();
    for r in records {
        for m in Messages(r) {
            if let Message::Data { kind, body, .. } = m {
                assert_eq!(kind, NFNL_SUBSYS_CTNETLINK << 8 | MSG_NEW);
                out.push(parse_flow(body).unwrap());
            }
        }
    }
    out
}

fn t(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> Tuple {
    Tuple { src: src.parse().unwrap(), dst: dst.parse().unwrap(), proto, sport, dport }
}

fn seq_of(msg: &[u8]) -> u32 {
    u32::from_ne_bytes(msg[8..12].try_into().unwrap())
}

#[test]
fn an_unfiltered_dump_request_is_the_conntrack_tools() {
    for (file, family) in [(include_str!("../testdata/dump-ipv4.txt"), AF_INET), (include_str!("../testdata/dump-ipv6.txt"), AF_INET6)] {
        let (sent, _) = capture(file);
        assert_eq!(dump_request(seq_of(&sent[0]), family, None), sent[0]);
    }
}

#[test]
fn the_kernels_dump_replies_parse_into_flows() {
    let (_, got) = capture(include_str!("../testdata/dump-ipv4.txt"));
    let f = flows(&got);
    assert_eq!(f.len(), 3, "{f:#?}");
    let nated = f.iter().find(|x| x.orig.sport == 40000).unwrap();
    assert_eq!(nated.orig, t("198.18.0.5", "198.19.0.10", IPPROTO_UDP, 40000, 53));
    assert_eq!(nated.reply, t("198.18.1.2", "198.18.0.5", IPPROTO_UDP, 5353, 40000));
    assert_eq!((nated.zone, nated.status & IPS_SEEN_REPLY), (0, IPS_SEEN_REPLY));
    assert!(nated.id != 0 && nated.timeout > 0 && nated.timeout <= 100);
    let tcp = f.iter().find(|x| x.orig.proto == IPPROTO_TCP).unwrap();
    assert_eq!(tcp.orig, t("198.18.0.6", "198.19.0.10", IPPROTO_TCP, 40001, 80));
    let zoned = f.iter().find(|x| x.orig.dport == 30053).unwrap();
    assert_eq!((zoned.zone, zoned.reply.src), (3, "198.18.2.2".parse().unwrap()));

    let (_, got) = capture(include_str!("../testdata/dump-ipv6.txt"));
    let f = flows(&got);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].orig, t("fd00:18::5", "fd00:19::10", IPPROTO_UDP, 40000, 53));
    assert_eq!(f[0].reply, t("fd00:18:1::2", "fd00:18::5", IPPROTO_UDP, 5353, 40000));
    assert_eq!(f[0].zone, 7);
}

#[test]
fn a_delete_names_the_flows_tuple_and_zone_as_the_tool_does_and_its_id() {
    let (_, got) = capture(include_str!("../testdata/dump-ipv6.txt"));
    let flow = flows(&got)[0];
    let (sent, _) = capture(include_str!("../testdata/delete-ipv6.txt"));
    let tool = &sent[0];
    let mut mine = Vec::new();
    delete_request(&mut mine, seq_of(tool), &flow, true);
    // nlmsghdr (but its length) and nfgenmsg as the tool's.
    assert_eq!(mine[4..20], tool[4..20]);
    let tool_attrs: Vec<_> = AttrIter(&tool[20..]).collect();
    let mine_attrs: Vec<_> = AttrIter(&mine[20..]).collect();
    let get = |a: &[(u16, &[u8])], k: u16| a.iter().find(|(t, _)| *t == k).map(|(_, v)| v.to_vec());
    assert_eq!(get(&mine_attrs, CTA_TUPLE_ORIG), get(&tool_attrs, CTA_TUPLE_ORIG), "original tuple");
    assert_eq!(get(&mine_attrs, CTA_ZONE), get(&tool_attrs, CTA_ZONE), "zone");
    assert_eq!(get(&mine_attrs, CTA_ID), Some(flow.id.to_be_bytes().to_vec()));
    assert_eq!(mine_attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [CTA_TUPLE_ORIG, CTA_ZONE, CTA_ID]);
    assert_eq!(u32::from_ne_bytes(mine[0..4].try_into().unwrap()) as usize, mine.len());
}

#[test]
fn a_protocol_filtered_dump_carries_the_protocol_and_the_filter_flags() {
    let r = dump_request(5, AF_INET, Some(IPPROTO_UDP));
    let attrs: Vec<_> = AttrIter(&r[20..]).collect();
    assert_eq!(attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [CTA_TUPLE_ORIG, CTA_FILTER]);
    let proto: Vec<_> = AttrIter(attrs[0].1).collect();
    assert_eq!(proto, [(CTA_TUPLE_PROTO, &[5, 0, 1, 0, 17, 0, 0, 0][..])]);
    let filter: Vec<_> = AttrIter(attrs[1].1).collect();
    assert_eq!(filter, [(CTA_FILTER_ORIG_FLAGS, &8u32.to_ne_bytes()[..]), (CTA_FILTER_REPLY_FLAGS, &[0, 0, 0, 0][..])]);
}

#[test]
fn a_created_flow_reads_back_as_itself() {
    let flow = Flow { orig: t("198.18.0.9", "198.19.0.1", IPPROTO_UDP, 1, 2), reply: t("198.18.5.5", "198.18.0.9", IPPROTO_UDP, 3, 1), zone: 0, id: 0, status: IPS_SEEN_REPLY | IPS_CONFIRMED, timeout: 60 };
    let mut m = Vec::new();
    create_request(&mut m, 1, &flow);
    let Some(Message::Data { body, .. }) = Messages(&m).next() else { panic!() };
    assert_eq!(parse_flow(body), Ok(flow));
}

#[test]
fn a_flow_without_its_tuples_is_an_error_naming_what_is_missing() {
    assert_eq!(parse_flow(&[2, 0, 0, 0]), Err(WireError::Missing("original tuple")));
    let mut a = Attrs::default();
    a.nest(CTA_TUPLE_ORIG, |n| {
        n.nest(CTA_TUPLE_IP, |ip| {
            ip.bytes(CTA_IP_V4_SRC, &[1, 2]);
        });
    });
    let mut body = vec![2, 0, 0, 0];
    body.extend_from_slice(&a.0);
    assert_eq!(parse_flow(&body), Err(WireError::Length("IPv4 source", 2)));
}

#[test]
fn a_dump_to_one_address_and_port_filters_by_them_in_the_kernel() {
    let f = DumpFilter { proto: IPPROTO_UDP, dst: Some("fd00:19::10".parse().unwrap()), dport: Some(53) };
    let r = dump_request_to(5, AF_INET6, Some(&f));
    let attrs: Vec<_> = AttrIter(&r[20..]).collect();
    let orig: Vec<_> = AttrIter(attrs[0].1).collect();
    assert_eq!(orig.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [CTA_TUPLE_IP, CTA_TUPLE_PROTO]);
    let ip: Vec<_> = AttrIter(orig[0].1).collect();
    assert_eq!(ip, [(CTA_IP_V6_DST, &"fd00:19::10".parse::<std::net::Ipv6Addr>().unwrap().octets()[..])]);
    let proto: Vec<_> = AttrIter(orig[1].1).collect();
    assert_eq!(proto, [(CTA_PROTO_NUM, &[17][..]), (CTA_PROTO_DST_PORT, &[0, 53][..])]);
    let filter: Vec<_> = AttrIter(attrs[1].1).collect();
    // CTA_FILTER_F_CTA_IP_DST | CTA_FILTER_F_CTA_PROTO_NUM | CTA_FILTER_F_CTA_PROTO_DST_PORT.
    assert_eq!(filter[0], (CTA_FILTER_ORIG_FLAGS, &(2u32 | 8 | 32).to_ne_bytes()[..]));
    let nodeport = DumpFilter { dst: None, dport: Some(30053), ..f };
    let mut flow = Flow { orig: t("fd00:18::5", "fd00:19::99", IPPROTO_UDP, 1, 30053), reply: t("fd00:18:1::2", "fd00:18::5", IPPROTO_UDP, 5353, 1), zone: 0, id: 1, status: 0, timeout: 1 };
    assert!(nodeport.matches(&flow) && !f.matches(&flow));
    flow.orig.proto = IPPROTO_TCP;
    assert!(!nodeport.matches(&flow));
}

//! The listed form of the one reader ([`super::parse_listed`]): rules as nft 1.0.6 lists
//! them read into the renderer's values, and kept out of svcproxy's own words.

use super::*;

/// Rules as nft 1.0.6 lists them, each with the renderer's words for it (`live`'s tests read
/// them through a listed table too).
pub(crate) const KERNEL_WORDS: &[(&str, &str)] = &[
    ("ip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000", "ip daddr @cluster-ips ip saddr != 10.244.0.0/16 mark set mark or 0x00004000"),
    ("meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random", "mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random"),
    ("meta mark & 0x00004000 == 0x00000000 return", "mark and 0x00004000 == 0 return"),
    ("ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random", "ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"),
    ("meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.244.0.10 . 9898, 1 : 10.244.0.8 . 9898 }", "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.0.10 . 9898 , 1 : 10.244.0.8 . 9898 }"),
    ("meta l4proto udp dnat ip6 to numgen random mod 1 map { 0 : fd00:10:180::1 . 53 }", "meta l4proto udp dnat ip6 addr . port to numgen random mod 1 map { 0 : fd00:10:180::1 . 53 }"),
    ("numgen random mod 2 vmap { 0 : goto a, 1 : goto b }", "numgen random mod 2 vmap { 0 : goto a , 1 : goto b }"),
    ("meta l4proto tcp dnat to 10.0.0.5:8080", "meta l4proto tcp dnat to 10.0.0.5:8080"),
    ("meta l4proto tcp dnat to [fd00::5]:8080", "meta l4proto tcp dnat to [fd00::5]:8080"),
    ("ip daddr @cluster-ips iifname != \"veth*\" meta mark set meta mark | 0x00004000", "ip daddr @cluster-ips iifname != veth* mark set mark or 0x00004000"),
    ("iifname \"cbr0\" goto service-X", "iifname cbr0 goto service-X"),
    ("ip saddr != { 198.51.100.0/25, 203.0.113.0/24 } drop", "ip saddr != { 198.51.100.0/25 , 203.0.113.0/24 } drop"),
    ("ip6 daddr . meta l4proto . th dport vmap @service-ips", "ip6 daddr . meta l4proto . th dport vmap @service-ips"),
    ("meta l4proto . th dport vmap @service-nodeports", "meta l4proto . th dport vmap @service-nodeports"),
    ("ip6 saddr @affinity-X goto endpoint-X", "ip6 saddr @affinity-X goto endpoint-X"),
    ("update @affinity-X { ip saddr }", "update @affinity-X { ip saddr }"),
    ("counter name \"localhost-nodeport-rejected-udp\" reject", "counter name \"localhost-nodeport-rejected-udp\" reject"),
    ("fib daddr type local ct state new jump x", "fib daddr type local ct state new jump x"),
    ("udp dport 53 accept", "udp dport 53 accept"),
    ("numgen random mod 2 0 goto endpoint-a", "numgen random mod 2 == 0 goto endpoint-a"),
    ("meta l4proto tcp numgen random mod 3 2 dnat to 10.0.0.5:8080", "meta l4proto tcp numgen random mod 3 == 2 dnat to 10.0.0.5:8080"),
    ("meta l4proto udp numgen random mod 2 1 dnat to [fd00::5]:53 comment \"a, b\"", "meta l4proto udp numgen random mod 2 == 1 dnat to [fd00::5]:53 comment \"a, b\""),
    ("iifname \"veth*\" goto service-X comment \"short-circuit pod traffic\"", "iifname veth* goto service-X comment \"short-circuit pod traffic\""),
    ("fib saddr type local meta mark set meta mark | 0x00004000 comment \"masquerade local traffic\"", "fib saddr type local mark set mark or 0x00004000 comment \"masquerade local traffic\""),
];

/// `listed` read, then written: the renderer's words.
fn words(listed: &str) -> String {
    parse_listed(listed).unwrap_or_else(|e| panic!("{listed}: {e}")).to_string()
}

#[test]
fn the_kernels_words_read_into_the_renderers_values() {
    for &(listed, rendered) in KERNEL_WORDS {
        assert_eq!(words(listed), rendered, "{listed}");
    }
    let body = parse_listed("fib saddr type local meta mark set meta mark | 0x00004000 comment \"masquerade local traffic\"").unwrap();
    assert_eq!(body.comment.as_deref(), Some("masquerade local traffic"));
    assert_eq!(body.stmts[1], Stmt::Action(Action::MarkSet { op: MarkOp::Or, value: Num::Hex { value: 0x4000, digits: 8 } }));
}

#[test]
fn the_renderers_words_read_as_they_parse() {
    for rendered in [
        "mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random",
        "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.0.0.1 . 80 , 1 : 10.0.0.2 . 80 }",
        "ip daddr { 10.96.0.0/16,10.97.0.0/16 } reject",
        "ip saddr != { 10.0.0.0/8 , 192.168.0.1 } drop",
        "numgen random mod 2 vmap { 0 : goto a , 1 : goto b } comment \"x, y\"",
        "numgen random mod 65536 == 65535 meta l4proto tcp dnat to 10.0.0.1:80",
    ] {
        assert_eq!(parse_listed(rendered), parse_body(rendered), "{rendered}");
    }
}

/// Each variation of the listed form stays out of svcproxy's own words, which must
/// write back as read.
#[test]
fn the_kernels_words_are_not_read_as_svcproxys() {
    for (listed, word, found, expected) in [
        ("meta mark & 0x4000 != 0 return", 2, "mark", Expected::Word("l4proto")),
        ("iifname \"cbr0\" goto x", 2, "\"cbr0\"", Expected::Name),
        ("meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 10.0.0.1 . 80 }", 6, "to", Expected::Word("addr")),
        ("ip saddr != { 10.0.0.0/8, 192.168.0.1 } drop", 5, "10.0.0.0/8,", Expected::Prefix),
        ("tcp dport 080 accept", 3, "080", Expected::Port),
        ("ip daddr  10.0.0.1 drop", 3, "10.0.0.1", Expected::OneSpace),
    ] {
        assert!(parse_listed(listed).is_ok(), "{listed}");
        let e = parse_body(listed).unwrap_err();
        assert_eq!((e.word, e.found.as_deref(), e.expected), (word, Some(found), expected), "{listed}: {e}");
    }
}

#[test]
fn a_form_outside_the_vocabulary_names_its_word() {
    let e = parse_listed("ip daddr 198.18.9.9 log prefix \"x\" drop").unwrap_err();
    assert_eq!((e.word, e.found.as_deref(), e.expected), (4, Some("log"), Expected::Statement));
    let e = parse_listed("ip daddr 198.18.9.9 counter drop").unwrap_err();
    assert_eq!((e.word, e.found.as_deref(), e.expected), (5, Some("drop"), Expected::Word("name")), "an anonymous counter is not kube-proxy's");
    let e = parse_listed("meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.0.0.1 . 80, 0 : 10.0.0.2 . 80 }").unwrap_err();
    assert_eq!((e.found.as_deref(), e.expected), (Some("0"), Expected::NumgenKey), "{e}");
    let e = parse_listed("numgen random mod 2 2 goto a").unwrap_err();
    assert_eq!((e.word, e.found.as_deref(), e.expected), (5, Some("2"), Expected::NumgenKey), "a value never drawn");
    let e = parse_listed("numgen random mod 2 goto a").unwrap_err();
    assert_eq!((e.word, e.found.as_deref(), e.expected), (5, Some("goto"), Expected::NumgenKey));
    let e = parse_listed("meta mark set meta mark & 0x4000").unwrap_err();
    assert!(e.to_string().contains("\"&\""), "{e}");
    assert_eq!(parse_listed("").unwrap_err().expected, Expected::Statement);
    assert_eq!(parse_listed("accept comment \"x").unwrap_err().expected, Expected::ClosingQuote);
}

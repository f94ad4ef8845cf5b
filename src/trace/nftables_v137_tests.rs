//! The nftables tracer on kube-proxy's v1.36+ table (the one the renderer writes by default
//! from v1.37 on): inline masquerade marks, the `masquerading` chain with its hairpin set,
//! `dnat … to numgen random mod N map { … }` dispatch, affinity services' endpoint chains.
//! Every case runs on the table as svcproxy writes it and as `nft list` (nft 1.0.6) printed
//! it back from a network namespace, and must answer alike on both.

use std::collections::BTreeSet;

use super::nftables::{trace, Trace};
use super::{Entry, Env, Packet, Verdict};
use crate::model::Protocol;
use crate::nftables::fake::FakeNft;
use crate::nftables::live;
use crate::nftables::model::Table;
use crate::net::IpFamily;

/// The v1.36+ `ip` table as svcproxy writes it (`nft -f` input): node 192.168.0.2, pods in
/// 10.0.0.0/8 (the local-traffic detector), the masquerade mark 0x00004000, and
///
/// * ns/web:http, ClusterIP 172.30.0.41:80/tcp, NodePort 3001 (eTP Cluster): endpoints
///   10.180.0.1:80 (on this node) and 10.180.0.2:80;
/// * ns/dns:dns, ClusterIP 172.30.0.10:53/udp: one endpoint, 10.180.0.3:53 (on this node);
/// * ns/loc:http, ClusterIP 172.30.0.50:80/tcp, NodePort 3002 (eTP Local): endpoints
///   10.180.0.1:8080 (on this node) and 10.180.0.4:8080;
/// * ns/sticky:http, ClusterIP 172.30.0.60:80/tcp, ClientIP affinity: endpoints
///   10.180.0.1:9000 (on this node) and 10.180.0.2:9000.
const RENDERED_V4: &str = r#"add table ip kube-proxy { comment "rules for kube-proxy" ; }
add chain ip kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ip kube-proxy filter-output-pre-dnat { type filter hook output priority -110 ; }
add chain ip kube-proxy filter-input { type filter hook input priority 0 ; }
add chain ip kube-proxy filter-forward { type filter hook forward priority 0 ; }
add chain ip kube-proxy filter-output { type filter hook output priority 0 ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy nodeport-endpoints-check
add chain ip kube-proxy service-endpoints-check
add chain ip kube-proxy firewall-check
add chain ip kube-proxy services
add chain ip kube-proxy masquerading
add chain ip kube-proxy cluster-ips-check
add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }
add chain ip kube-proxy service-WEB
add chain ip kube-proxy external-WEB
add chain ip kube-proxy service-DNS
add chain ip kube-proxy service-LOC
add chain ip kube-proxy local-LOC
add chain ip kube-proxy external-LOC
add chain ip kube-proxy endpoint-S1
add chain ip kube-proxy endpoint-S2
add chain ip kube-proxy service-STICKY
add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add set ip kube-proxy hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add set ip kube-proxy affinity-S1 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip kube-proxy affinity-S2 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check
add rule ip kube-proxy filter-input ct state new jump service-endpoints-check
add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output ct state new jump service-endpoints-check
add rule ip kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ip kube-proxy filter-output-pre-dnat ct state new jump firewall-check
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy filter-forward ct state new jump cluster-ips-check
add rule ip kube-proxy filter-output ct state new jump cluster-ips-check
add rule ip kube-proxy reject-chain reject
add rule ip kube-proxy masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random
add rule ip kube-proxy masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"
add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip kube-proxy nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip kube-proxy services ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
add rule ip kube-proxy external-WEB mark set mark or 0x00004000 comment "masquerade"
add rule ip kube-proxy external-WEB goto service-WEB
add rule ip kube-proxy service-WEB meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }
add rule ip kube-proxy service-DNS meta l4proto udp dnat ip addr . port to numgen random mod 1 map { 0 : 10.180.0.3 . 53 }
add rule ip kube-proxy external-LOC ip saddr 10.0.0.0/8 goto service-LOC comment "short-circuit pod traffic"
add rule ip kube-proxy external-LOC fib saddr type local mark set mark or 0x00004000 comment "masquerade local traffic"
add rule ip kube-proxy external-LOC fib saddr type local goto service-LOC comment "short-circuit local traffic"
add rule ip kube-proxy external-LOC goto local-LOC
add rule ip kube-proxy service-LOC meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 8080 , 1 : 10.180.0.4 . 8080 }
add rule ip kube-proxy local-LOC meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.180.0.1 . 8080 }
add rule ip kube-proxy service-STICKY ip saddr @affinity-S1 goto endpoint-S1
add rule ip kube-proxy service-STICKY ip saddr @affinity-S2 goto endpoint-S2
add rule ip kube-proxy service-STICKY numgen random mod 2 vmap { 0 : goto endpoint-S1 , 1 : goto endpoint-S2 }
add rule ip kube-proxy endpoint-S1 update @affinity-S1 { ip saddr }
add rule ip kube-proxy endpoint-S1 meta l4proto tcp dnat to 10.180.0.1:9000
add rule ip kube-proxy endpoint-S2 update @affinity-S2 { ip saddr }
add rule ip kube-proxy endpoint-S2 meta l4proto tcp dnat to 10.180.0.2:9000
add element ip kube-proxy cluster-ips { 172.30.0.41 }
add element ip kube-proxy cluster-ips { 172.30.0.10 }
add element ip kube-proxy cluster-ips { 172.30.0.50 }
add element ip kube-proxy cluster-ips { 172.30.0.60 }
add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 comment "ns/web:http" : goto service-WEB }
add element ip kube-proxy service-nodeports { tcp . 3001 comment "ns/web:http" : goto external-WEB }
add element ip kube-proxy service-ips { 172.30.0.10 . udp . 53 comment "ns/dns:dns" : goto service-DNS }
add element ip kube-proxy service-ips { 172.30.0.50 . tcp . 80 comment "ns/loc:http" : goto service-LOC }
add element ip kube-proxy service-nodeports { tcp . 3002 comment "ns/loc:http" : goto external-LOC }
add element ip kube-proxy service-ips { 172.30.0.60 . tcp . 80 comment "ns/sticky:http" : goto service-STICKY }
add element ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 80 }
add element ip kube-proxy hairpin-connections { 10.180.0.3 . 10.180.0.3 . udp . 53 }
add element ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 8080 }
add element ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 9000 }
"#;

/// [`RENDERED_V4`] as `nft list table ip kube-proxy` prints it.
const LISTED_V4: &str = r#"table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 172.30.0.10, 172.30.0.41,
			     172.30.0.50, 172.30.0.60 }
	}

	set hairpin-connections {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		comment "service hairpin connections"
		elements = { 10.180.0.1 . 10.180.0.1 . tcp . 9000,
			     10.180.0.3 . 10.180.0.3 . udp . 53,
			     10.180.0.1 . 10.180.0.1 . tcp . 80,
			     10.180.0.1 . 10.180.0.1 . tcp . 8080 }
	}

	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to services with no endpoints"
	}

	map no-endpoint-nodeports {
		type inet_proto . inet_service : verdict
		comment "vmap to drop or reject packets to service nodeports with no endpoints"
	}

	map firewall-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "destinations that are subject to LoadBalancerSourceRanges"
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { 172.30.0.10 . udp . 53 comment "ns/dns:dns" : goto service-DNS,
			     172.30.0.41 . tcp . 80 comment "ns/web:http" : goto service-WEB,
			     172.30.0.50 . tcp . 80 comment "ns/loc:http" : goto service-LOC,
			     172.30.0.60 . tcp . 80 comment "ns/sticky:http" : goto service-STICKY }
	}

	map service-nodeports {
		type inet_proto . inet_service : verdict
		comment "NodePort traffic"
		elements = { tcp . 3001 comment "ns/web:http" : goto external-WEB,
			     tcp . 3002 comment "ns/loc:http" : goto external-LOC }
	}

	set affinity-S1 {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	set affinity-S2 {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	chain filter-prerouting-pre-dnat {
		type filter hook prerouting priority dstnat - 10; policy accept;
		ct state new jump firewall-check
	}

	chain filter-output-pre-dnat {
		type filter hook output priority -110; policy accept;
		ct state new jump firewall-check
	}

	chain filter-input {
		type filter hook input priority filter; policy accept;
		ct state new jump nodeport-endpoints-check
		ct state new jump service-endpoints-check
	}

	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
	}

	chain filter-output {
		type filter hook output priority filter; policy accept;
		ct state new jump service-endpoints-check
		ct state new jump cluster-ips-check
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}

	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}

	chain nodeport-endpoints-check {
		ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports
	}

	chain service-endpoints-check {
		ip daddr . meta l4proto . th dport vmap @no-endpoint-services
	}

	chain firewall-check {
		ip daddr . meta l4proto . th dport vmap @firewall-ips
	}

	chain services {
		ip daddr @cluster-ips ip saddr != 10.0.0.0/8 meta mark set meta mark | 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
		ip daddr . meta l4proto . th dport vmap @service-ips
		fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
	}

	chain masquerading {
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
		ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
	}

	chain cluster-ips-check {
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
		ip daddr 172.30.0.0/16 drop comment "Drop traffic to unallocated ClusterIPs"
	}

	chain reject-chain {
		comment "helper for @no-endpoint-services / @no-endpoint-nodeports"
		reject
	}

	chain service-WEB {
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.180.0.1 . 80, 1 : 10.180.0.2 . 80 }
	}

	chain external-WEB {
		meta mark set meta mark | 0x00004000 comment "masquerade"
		goto service-WEB
	}

	chain service-DNS {
		meta l4proto udp dnat ip to numgen random mod 1 map { 0 : 10.180.0.3 . 53 }
	}

	chain service-LOC {
		meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.180.0.1 . 8080, 1 : 10.180.0.4 . 8080 }
	}

	chain local-LOC {
		meta l4proto tcp dnat ip to numgen random mod 1 map { 0 : 10.180.0.1 . 8080 }
	}

	chain external-LOC {
		ip saddr 10.0.0.0/8 goto service-LOC comment "short-circuit pod traffic"
		fib saddr type local meta mark set meta mark | 0x00004000 comment "masquerade local traffic"
		fib saddr type local goto service-LOC comment "short-circuit local traffic"
		goto local-LOC
	}

	chain endpoint-S1 {
		update @affinity-S1 { ip saddr }
		meta l4proto tcp dnat to 10.180.0.1:9000
	}

	chain endpoint-S2 {
		update @affinity-S2 { ip saddr }
		meta l4proto tcp dnat to 10.180.0.2:9000
	}

	chain service-STICKY {
		ip saddr @affinity-S1 goto endpoint-S1
		ip saddr @affinity-S2 goto endpoint-S2
		numgen random mod 2 vmap { 0 : goto endpoint-S1, 1 : goto endpoint-S2 }
	}
}
"#;

/// An `ip6` table: ns/web:http over SCTP, ClusterIP fd00:172:30::41 port 80, endpoints
/// fd00:10:180::1 (on this node) and fd00:10:180::2; pod traffic comes in on `veth*`.
const RENDERED_V6: &str = r#"add table ip6 kube-proxy { comment "rules for kube-proxy" ; }
add chain ip6 kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ip6 kube-proxy filter-forward { type filter hook forward priority 0 ; }
add chain ip6 kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip6 kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip6 kube-proxy firewall-check
add chain ip6 kube-proxy services
add chain ip6 kube-proxy masquerading
add chain ip6 kube-proxy cluster-ips-check
add chain ip6 kube-proxy service-WEB
add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment "Active ClusterIPs" ; }
add set ip6 kube-proxy hairpin-connections { type ipv6_addr . ipv6_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }
add map ip6 kube-proxy firewall-ips { type ipv6_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add rule ip6 kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ip6 kube-proxy nat-prerouting jump services
add rule ip6 kube-proxy nat-postrouting jump masquerading
add rule ip6 kube-proxy filter-forward ct state new jump cluster-ips-check
add rule ip6 kube-proxy masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random
add rule ip6 kube-proxy masquerading ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip6 kube-proxy cluster-ips-check ip6 daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ip6 kube-proxy firewall-check ip6 daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip6 kube-proxy services ip6 daddr @cluster-ips iifname != veth* mark set mark or 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips
add rule ip6 kube-proxy service-WEB meta l4proto sctp dnat ip6 addr . port to numgen random mod 2 map { 0 : fd00:10:180::1 . 80 , 1 : fd00:10:180::2 . 80 }
add element ip6 kube-proxy cluster-ips { fd00:172:30::41 }
add element ip6 kube-proxy service-ips { fd00:172:30::41 . sctp . 80 comment "ns/web:http" : goto service-WEB }
add element ip6 kube-proxy hairpin-connections { fd00:10:180::1 . fd00:10:180::1 . sctp . 80 }
"#;

/// [`RENDERED_V6`] as `nft list table ip6 kube-proxy` prints it.
const LISTED_V6: &str = r#"table ip6 kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv6_addr
		comment "Active ClusterIPs"
		elements = { fd00:172:30::41 }
	}

	set hairpin-connections {
		type ipv6_addr . ipv6_addr . inet_proto . inet_service
		comment "service hairpin connections"
		elements = { fd00:10:180::1 . fd00:10:180::1 . sctp . 80 }
	}

	map firewall-ips {
		type ipv6_addr . inet_proto . inet_service : verdict
		comment "destinations that are subject to LoadBalancerSourceRanges"
	}

	map service-ips {
		type ipv6_addr . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = { fd00:172:30::41 . sctp . 80 comment "ns/web:http" : goto service-WEB }
	}

	chain filter-prerouting-pre-dnat {
		type filter hook prerouting priority dstnat - 10; policy accept;
		ct state new jump firewall-check
	}

	chain filter-forward {
		type filter hook forward priority filter; policy accept;
		ct state new jump cluster-ips-check
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}

	chain firewall-check {
		ip6 daddr . meta l4proto . th dport vmap @firewall-ips
	}

	chain services {
		ip6 daddr @cluster-ips iifname != "veth*" meta mark set meta mark | 0x00004000 comment "masquerade clusterIP traffic from outside cluster"
		ip6 daddr . meta l4proto . th dport vmap @service-ips
	}

	chain masquerading {
		meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random
		ct status dnat ip6 saddr . ip6 daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
	}

	chain cluster-ips-check {
		ip6 daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
	}

	chain service-WEB {
		meta l4proto sctp dnat ip6 to numgen random mod 2 map { 0 : fd00:10:180::1 . 80, 1 : fd00:10:180::2 . 80 }
	}
}
"#;

/// The table `text` (`nft -f` input) makes, read back as values (through the fake nft, which
/// lists rules in the words they were written in).
fn rendered(text: &str, family: IpFamily) -> Table {
    let mut nft = FakeNft::new();
    nft.run(text).unwrap();
    live::read(&nft.listing(family).unwrap(), family).unwrap()
}

fn listed(text: &str, family: IpFamily) -> Table {
    live::read(text, family).unwrap()
}

/// Both wordings of a table: as written, as listed.
fn both(rendered_text: &str, listed_text: &str, family: IpFamily) -> [(&'static str, Table); 2] {
    [("rendered", rendered(rendered_text, family)), ("listed", listed(listed_text, family))]
}

fn v4() -> [(&'static str, Table); 2] {
    both(RENDERED_V4, LISTED_V4, IpFamily::V4)
}

fn env(local: &[&str], affinity: &[&str]) -> Env {
    Env { local_ips: local.iter().map(|s| s.parse().unwrap()).collect::<BTreeSet<_>>(), affinity: affinity.iter().map(|s| s.to_string()).collect() }
}

fn node() -> Env {
    env(&["192.168.0.2", "127.0.0.1"], &[])
}


fn run(t: &Table, env: &Env, src: &str, dst: &str, protocol: Protocol, entry: Entry) -> Trace {
    trace(t, env, Packet::to(src, dst, protocol), entry).unwrap()
}

fn tcp(t: &Table, src: &str, dst: &str, entry: Entry) -> Trace {
    run(t, &node(), src, dst, Protocol::Tcp, entry)
}

/// Each branch: verdict, probability, masqueraded.
fn branches(t: &Trace) -> Vec<(String, f64, bool)> {
    t.outcomes.iter().map(|o| (o.verdict.to_string(), o.probability, o.masquerade)).collect()
}

fn want(b: &[(&str, f64, bool)]) -> Vec<(String, f64, bool)> {
    b.iter().map(|&(v, p, m)| (v.to_owned(), p, m)).collect()
}

const POD: &str = "10.180.0.9";
const OUTSIDE: &str = "192.0.2.9";
const NODE: &str = "192.168.0.2";

#[test]
fn a_clusterip_from_a_pod_is_spread_over_its_endpoints_unmasqueraded() {
    for (form, t) in v4() {
        let got = tcp(&t, POD, "172.30.0.41:80", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:80", 0.5, false), ("10.180.0.2:80", 0.5, false)]), "{form}");
    }
    let got = tcp(&rendered(RENDERED_V4, IpFamily::V4), POD, "172.30.0.41:80", Entry::Prerouting);
    assert_eq!(
        got.outcomes[1].path,
        [
            "ip kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check",
            "ip kube-proxy nat-prerouting jump services",
            "ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
            "ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 comment \"ns/web:http\" : goto service-WEB }",
            "ip kube-proxy service-WEB meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }",
            "ip kube-proxy filter-forward ct state new jump service-endpoints-check",
            "ip kube-proxy filter-forward ct state new jump cluster-ips-check",
            "ip kube-proxy nat-postrouting jump masquerading",
        ]
    );
}

#[test]
fn a_clusterip_from_outside_the_cluster_or_the_node_is_marked_and_masqueraded() {
    for (form, t) in v4() {
        for (src, entry) in [(OUTSIDE, Entry::Prerouting), (NODE, Entry::Output)] {
            let got = tcp(&t, src, "172.30.0.41:80", entry);
            assert_eq!(branches(&got), want(&[("10.180.0.1:80", 0.5, true), ("10.180.0.2:80", 0.5, true)]), "{form} from {src}");
        }
    }
    let got = tcp(&rendered(RENDERED_V4, IpFamily::V4), OUTSIDE, "172.30.0.41:80", Entry::Prerouting);
    let path = &got.outcomes[0].path;
    assert_eq!(
        path[2],
        "ip kube-proxy services ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\""
    );
    assert_eq!(path.last().unwrap(), "ip kube-proxy masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random");
    let listed = tcp(&listed(LISTED_V4, IpFamily::V4), OUTSIDE, "172.30.0.41:80", Entry::Prerouting);
    assert_eq!(
        listed.outcomes[0].path.last().unwrap(),
        "ip kube-proxy masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random",
        "the listed table, read back in the renderer's words (nftables::live)"
    );
}

#[test]
fn a_marked_packet_that_is_rejected_is_not_masqueraded() {
    for (form, t) in v4() {
        let got = tcp(&t, OUTSIDE, "172.30.0.41:81", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("REJECT", 1.0, false)]), "{form}: masquerading is in postrouting, which it never reaches");
        assert!(got.outcomes[0].path.iter().any(|l| l.contains(" services ip daddr @cluster-ips ip saddr != 10.0.0.0/8 ")), "{form}: it was marked");
    }
}

#[test]
fn masquerade_all_marks_a_pods_clusterip_traffic_too() {
    let from = "ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\"";
    let to = "ip daddr @cluster-ips mark set mark or 0x00004000 comment \"masquerade all clusterIP traffic\"";
    let listed_from = "ip daddr @cluster-ips ip saddr != 10.0.0.0/8 meta mark set meta mark | 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\"";
    let listed_to = "ip daddr @cluster-ips meta mark set meta mark | 0x00004000 comment \"masquerade all clusterIP traffic\"";
    assert!(RENDERED_V4.contains(from) && LISTED_V4.contains(listed_from));
    for (form, t) in both(&RENDERED_V4.replace(from, to), &LISTED_V4.replace(listed_from, listed_to), IpFamily::V4) {
        let got = tcp(&t, POD, "172.30.0.41:80", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:80", 0.5, true), ("10.180.0.2:80", 0.5, true)]), "{form}");
        assert!(got.outcomes[0].path.iter().any(|l| l.ends_with("comment \"masquerade all clusterIP traffic\"")), "{form}: {:?}", got.outcomes[0].path);
    }
}

#[test]
fn a_nodeport_with_cluster_policy_is_masqueraded_from_outside_and_from_the_node() {
    for (form, t) in v4() {
        for (src, entry) in [(OUTSIDE, Entry::Prerouting), (NODE, Entry::Output)] {
            let got = tcp(&t, src, "192.168.0.2:3001", entry);
            assert_eq!(branches(&got), want(&[("10.180.0.1:80", 0.5, true), ("10.180.0.2:80", 0.5, true)]), "{form} from {src}");
            assert!(got.outcomes[0].path.iter().any(|l| l.starts_with("ip kube-proxy external-WEB ") && l.ends_with("comment \"masquerade\"")), "{form}");
        }
    }
}

#[test]
fn a_nodeport_with_local_policy_keeps_outside_sources_on_local_endpoints() {
    for (form, t) in v4() {
        let got = tcp(&t, OUTSIDE, "192.168.0.2:3002", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:8080", 1.0, false)]), "{form}: from outside, local endpoints only, source kept");
        let got = tcp(&t, NODE, "192.168.0.2:3002", Entry::Output);
        assert_eq!(branches(&got), want(&[("10.180.0.1:8080", 0.5, true), ("10.180.0.4:8080", 0.5, true)]), "{form}: from the node, all endpoints, masqueraded");
        let got = tcp(&t, POD, "192.168.0.2:3002", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:8080", 0.5, false), ("10.180.0.4:8080", 0.5, false)]), "{form}: from a pod, short-circuited");
    }
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded_as_a_hairpin() {
    for (form, t) in v4() {
        let got = tcp(&t, "10.180.0.1", "172.30.0.41:80", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:80", 0.5, true), ("10.180.0.2:80", 0.5, false)]), "{form}");
        let tail = &got.outcomes[0].path[got.outcomes[0].path.len() - 2..];
        assert!(tail[0].contains(" masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random"), "{form}: {tail:?}");
        assert_eq!(tail[1], "ip kube-proxy hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 80 }", "{form}");
        // Through a NodePort of eTP Local: short-circuited as pod traffic, then the hairpin.
        let got = tcp(&t, "10.180.0.1", "192.168.0.2:3002", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:8080", 0.5, true), ("10.180.0.4:8080", 0.5, false)]), "{form}");
    }
}

#[test]
fn a_service_with_one_endpoint_takes_it_always() {
    for (form, t) in v4() {
        let got = run(&t, &node(), POD, "172.30.0.10:53", Protocol::Udp, Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.3:53", 1.0, false)]), "{form}");
        let got = run(&t, &node(), "10.180.0.3", "172.30.0.10:53", Protocol::Udp, Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.3:53", 1.0, true)]), "{form}: its own endpoint, a hairpin");
        let got = tcp(&t, POD, "172.30.0.10:53", Entry::Prerouting);
        assert_eq!((got.summary().0.as_str(), got.outcomes[0].reason.as_deref()), ("REJECT", Some("Reject traffic to invalid ports of ClusterIPs")), "{form}: TCP to a UDP port");
    }
}

#[test]
fn session_affinity_keeps_endpoint_chains_without_the_old_hairpin_rule() {
    for (form, t) in v4() {
        let got = tcp(&t, POD, "172.30.0.60:80", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:9000", 0.5, false), ("10.180.0.2:9000", 0.5, false)]), "{form}");
        assert!(got.outcomes[0].path.contains(&"ip kube-proxy endpoint-S1 update @affinity-S1 { ip saddr }".to_owned()), "{form}");
        for pinned in ["affinity-S2", "endpoint-S2"] {
            let got = run(&t, &env(&["192.168.0.2"], &[pinned]), POD, "172.30.0.60:80", Protocol::Tcp, Entry::Prerouting);
            assert_eq!(branches(&got), want(&[("10.180.0.2:9000", 1.0, false)]), "{form} {pinned}");
        }
        let got = tcp(&t, "10.180.0.1", "172.30.0.60:80", Entry::Prerouting);
        assert_eq!(branches(&got), want(&[("10.180.0.1:9000", 0.5, true), ("10.180.0.2:9000", 0.5, false)]), "{form}: the hairpin is the set's now");
    }
}

#[test]
fn ipv6_dnat_maps_and_hairpins() {
    let v6 = |src: &str, iface: &str, t: &Table| trace(t, &env(&["fd00:192:168::2"], &[]), Packet { in_interface: Some(iface.into()), ..Packet::to(src, "[fd00:172:30::41]:80", Protocol::Sctp) }, Entry::Prerouting).unwrap();
    for (form, t) in both(RENDERED_V6, LISTED_V6, IpFamily::V6) {
        let got = v6("fd00:10:180::9", "veth9", &t);
        assert_eq!(branches(&got), want(&[("[fd00:10:180::1]:80", 0.5, false), ("[fd00:10:180::2]:80", 0.5, false)]), "{form}");
        let got = v6("2001:db8::9", "eth0", &t);
        assert_eq!(branches(&got), want(&[("[fd00:10:180::1]:80", 0.5, true), ("[fd00:10:180::2]:80", 0.5, true)]), "{form}: not from a pod interface");
        let got = v6("fd00:10:180::1", "veth1", &t);
        assert_eq!(branches(&got), want(&[("[fd00:10:180::1]:80", 0.5, true), ("[fd00:10:180::2]:80", 0.5, false)]), "{form}: hairpin");
        assert_eq!(got.outcomes[0].path.last().unwrap(), "ip6 kube-proxy hairpin-connections { fd00:10:180::1 . fd00:10:180::1 . sctp . 80 }", "{form}");
    }
}

#[test]
fn the_listed_table_answers_as_the_rendered_one_everywhere() {
    let [(_, r), (_, l)] = v4();
    let mut n = 0;
    for src in [POD, OUTSIDE, NODE, "10.180.0.1", "10.180.0.3"] {
        for dst in ["172.30.0.41:80", "172.30.0.41:81", "172.30.0.10:53", "172.30.0.50:80", "172.30.0.60:80", "172.30.0.99:80", "192.168.0.2:3001", "192.168.0.2:3002", "192.168.0.2:3003", "127.0.0.1:3001"] {
            for protocol in [Protocol::Tcp, Protocol::Udp] {
                for entry in [Entry::Prerouting, Entry::Output] {
                    let (a, b) = (run(&r, &node(), src, dst, protocol, entry), run(&l, &node(), src, dst, protocol, entry));
                    let answer = |t: &Trace| t.outcomes.iter().map(|o| (o.verdict.clone(), o.probability, o.masquerade, o.reason.clone(), o.path.len())).collect::<Vec<_>>();
                    assert_eq!(answer(&a), answer(&b), "{src} -> {dst} {protocol:?} {entry:?}");
                    n += usize::from(a.outcomes.iter().any(|o| o.verdict != Verdict::Undecided));
                }
            }
        }
    }
    assert!(n > 40, "only {n} packets were decided");
}

#[test]
fn a_dnat_map_that_does_not_read_is_an_error() {
    let good = "map { 0 : 10.180.0.3 . 53 }";
    assert!(RENDERED_V4.contains(good));
    // Read into values before any trace: the table does not read, naming the chain and word.
    let mut nft = FakeNft::new();
    nft.run(&RENDERED_V4.replace(good, "map { 0 : 10.180.0.3:53 }")).unwrap();
    let e = live::read(&nft.listing(IpFamily::V4).unwrap(), IpFamily::V4).unwrap_err();
    assert!(matches!(&e, live::LiveError::Rule { chain, source, .. } if chain == "service-DNS" && source.found.as_deref() == Some("10.180.0.3:53")), "{e}");
}

/// `KubeProxyNFTablesLocalhostNodePorts` (fixtures/nftables-localhost-nodeports.yaml,
/// rendered, then read back as listed): from the node, UDP and SCTP to a loopback NodePort
/// go through `localhost-nodeport-reject-ports` to their chain, are counted and rejected,
/// and say why; TCP is left to the userspace proxy (no rule takes it), as is UDP to the
/// node IP (DNATed to its endpoint).
#[test]
fn localhost_node_ports_are_rejected_but_tcp_passes() {
    let state = crate::source::read_path(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/nftables-localhost-nodeports.yaml"))).unwrap();
    let flags = crate::settings::Settings { mode: Some(crate::settings::kinds::ProxyMode::Nftables), ..Default::default() };
    let loaded = crate::pipeline::load(state, flags, Default::default()).unwrap();
    let rulesets = crate::nftables::render_all(&loaded.config, &loaded.trackers);
    let written = crate::nftables::text(&rulesets, crate::nftables::model::Form::Transaction);
    let local = env(&["192.168.10.11", "127.0.0.1", "fd00:192:168:10::11", "::1"], &[]);
    for family in [IpFamily::V4, IpFamily::V6] {
        let (lo, node) = if family == IpFamily::V4 { ("127.0.0.1", "192.168.10.11") } else { ("[::1]", "[fd00:192:168:10::11]") };
        let src = if family == IpFamily::V4 { "127.0.0.1" } else { "::1" };
        let t = rendered(&written, family);
        for (proto, port) in [(Protocol::Udp, 30053), (Protocol::Sctp, 30132)] {
            if family == IpFamily::V6 {
                continue; // apps/dns and apps/sctp-feed are IPv4 only
            }
            let tr = run(&t, &local, src, &format!("{lo}:{port}"), proto, Entry::Output);
            assert_eq!(tr.summary().0, "REJECT", "{family:?} {proto:?}: {tr:?}");
            let o = &tr.outcomes[0];
            assert!(o.reason.as_deref().is_some_and(|r| r.contains("localhost NodePort")), "{o:?}");
            assert!(o.path.iter().any(|l| l.contains("counter name \"localhost-nodeport-rejected-")), "{:?}", o.path);
        }
        let tr = run(&t, &local, src, &format!("{lo}:30080"), Protocol::Tcp, Entry::Output);
        assert_eq!(tr.summary().0, "", "{family:?}: TCP on loopback is the proxy's, no rule takes it: {tr:?}");
        if family == IpFamily::V4 {
            let tr = run(&t, &local, src, &format!("{node}:30053"), Protocol::Udp, Entry::Output);
            assert_eq!(tr.summary().0, "10.244.1.53:5353", "{tr:?}");
        }
    }
}

//! The kernel's `kube-proxy` table, as `nft list table` prints it, read into the values
//! the renderer makes ([`Table`]), so `trace --live` walks what the node really holds
//! with the same tracer as the rendered table. Built on [`Listing`] (objects, their lines
//! and elements). Each rule is read once into the statement values ([`parse_listed`]: the
//! kernel's `meta mark` arithmetic, numgen maps and quoted names included) and its text
//! written from them, so a listed rule equals the rendered one; a rule outside the
//! vocabulary is an error naming its chain and word.

use super::element;
use super::listing::Listing;
use super::model::{Chain, Objects, Rule, Set, Table};
use crate::net::IpFamily;
use super::names::{TABLE, TABLE_COMMENT};
use super::stmt::{parse_listed, ParseError};

/// Why a listed table cannot be read into values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LiveError {
    #[error("{object}: element {element:?}: {source}")]
    Element { object: String, element: String, source: Box<ParseError> },
    #[error("chain {chain}: rule {rule:?}: {source}")]
    Rule { chain: String, rule: String, source: Box<ParseError> },
}

/// `nft list table FAMILY kube-proxy` output → the table's chains, sets, maps, rules and
/// elements, in the kernel's order. Counters and dynamic sets' run-time members are left
/// out (as [`Listing`] leaves them out).
pub fn read(text: &str, family: IpFamily) -> Result<Table, LiveError> {
    let listing = Listing::parse(text);
    let mut objects = Objects::default();
    for (key, obj) in &listing.objects {
        let Some((kind, name)) = key.split_once(' ') else { continue };
        match kind {
            "chain" => {
                let mut chain = Chain::regular(name);
                for line in &obj.lines {
                    if line.starts_with("type ") {
                        continue; // a base chain's hook: the tracer knows the base chains by name
                    }
                    if let Some(c) = line.strip_prefix("comment ") {
                        chain.comment = Some(unquote(c).to_owned());
                        continue;
                    }
                    objects.rule(rule(name, line)?);
                }
                objects.chain(chain);
            }
            "set" | "map" => {
                let mut set = if kind == "map" { Set::map(name, "", None) } else { Set::plain(name, "", None) };
                for line in &obj.lines {
                    if let Some(t) = line.strip_prefix("type ") {
                        set.kind = t.to_owned();
                    } else if let Some(c) = line.strip_prefix("comment ") {
                        set.comment = Some(unquote(c).to_owned());
                    }
                }
                for e in &obj.elements {
                    let read = element::parse(name, e).map_err(|source| LiveError::Element { object: key.clone(), element: e.clone(), source: Box::new(source) })?;
                    objects.elements.push(read);
                }
                objects.sets.push(set);
            }
            _ => {}
        }
    }
    Ok(Table { family, name: TABLE, comment: TABLE_COMMENT, objects })
}

/// A listed rule, read into the renderer's values and written from them.
fn rule(chain: &str, line: &str) -> Result<Rule, LiveError> {
    let body = parse_listed(line).map_err(|e| LiveError::Rule { chain: chain.to_owned(), rule: line.to_owned(), source: Box::new(e) })?;
    Ok(Rule::of(chain, body))
}

fn unquote(s: &str) -> &str {
    s.trim().trim_start_matches('"').trim_end_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::model::Element;
    use crate::nftables::stmt::{parse_body, Verdict};

    const LISTED: &str = r#"table ip kube-proxy {
	comment "rules for kube-proxy"
	set cluster-ips {
		type ipv4_addr
		comment "Active ClusterIPs"
		elements = { 10.96.0.1, 10.96.0.10 }
	}

	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.20 . tcp . 80 comment "ns/gone:http" : goto reject-chain }
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . udp . 53 : goto service-FY5PMXPG-kube-system/kube-dns/udp/dns }
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain cluster-ips-check {
		ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
	}

	chain reject-chain {
		comment "helper for @no-endpoint-services / @no-endpoint-nodeports"
		reject
	}
}
"#;

    #[test]
    fn a_listed_table_reads_into_the_renderers_values() {
        let t = read(LISTED, IpFamily::V4).unwrap();
        let o = &t.objects;
        let chains: Vec<&str> = o.chains.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(chains, ["cluster-ips-check", "nat-prerouting", "reject-chain"]);
        assert_eq!(o.chains[2].comment.as_deref(), Some("helper for @no-endpoint-services / @no-endpoint-nodeports"));
        assert!(o.rules.contains(&Rule::new("nat-prerouting", "jump services")));
        assert!(o.rules.contains(&Rule::commented("cluster-ips-check", "ip daddr @cluster-ips reject", "Reject traffic to invalid ports of ClusterIPs")));
        assert!(o.rules.contains(&Rule::new("reject-chain", "reject")));
        let gone = o.elements.iter().find(|e| e.set == "no-endpoint-services").unwrap();
        assert_eq!(gone, &Element::parsed("no-endpoint-services", "10.96.0.20 . tcp . 80 comment \"ns/gone:http\" : goto reject-chain"));
        let dns = o.elements.iter().find(|e| e.set == "service-ips").unwrap();
        assert_eq!(dns.value, Some(Verdict::Goto("service-FY5PMXPG-kube-system/kube-dns/udp/dns".into())));
        let ips: Vec<String> = o.elements.iter().filter(|e| e.set == "cluster-ips").map(|e| e.key.to_string()).collect();
        assert_eq!(ips, ["10.96.0.1", "10.96.0.10"]);
        assert!(o.sets.iter().any(|s| s.name == "service-ips" && s.is_map && s.kind.ends_with(": verdict")));
    }

    /// `listed` (a rule as nft 1.0.6 lists it) read from a table: the rule of the values
    /// `rendered` parses to, with the same text.
    fn reads_as(listed: &str, rendered: &str) {
        let text = format!("table ip kube-proxy {{\n\tchain c {{\n\t\t{listed}\n\t}}\n}}\n");
        let t = read(&text, IpFamily::V4).unwrap_or_else(|e| panic!("{listed}: {e}"));
        let want = Rule::of("c", parse_body(rendered).unwrap_or_else(|e| panic!("{rendered}: {e}")));
        assert_eq!(t.objects.rules, std::slice::from_ref(&want), "{listed}");
        assert_eq!(t.objects.rules[0].text(), rendered.split(" comment \"").next().unwrap());
        assert_eq!(t.objects.rules[0].stmts(), want.stmts());
    }

    #[test]
    fn kube_proxy_v137_statements_are_read_in_the_renderers_words() {
        for &(listed, rendered) in crate::nftables::stmt::KERNEL_WORDS {
            reads_as(listed, rendered);
        }
        // Through the table's reader, as `trace --live` reads it.
        let listed = "table ip kube-proxy {\n chain external-X {\n fib saddr type local meta mark set meta mark | 0x00004000 comment \"masquerade local traffic\"\n }\n}\n";
        let t = read(listed, IpFamily::V4).unwrap();
        assert_eq!(t.objects.rules, [Rule::commented("external-X", "fib saddr type local mark set mark or 0x00004000", "masquerade local traffic")]);
    }

    #[test]
    fn a_rule_outside_the_vocabulary_is_an_error_naming_its_chain_and_word() {
        let text = "table ip kube-proxy {\n chain services {\n ip daddr 198.18.9.9 counter packets 3 bytes 180 drop\n }\n}\n";
        let e = read(text, IpFamily::V4).unwrap_err();
        assert!(matches!(&e, LiveError::Rule { chain, source, .. } if chain == "services" && source.found.as_deref() == Some("drop")), "{e:?}");
        assert!(e.to_string().starts_with("chain services: rule \"ip daddr 198.18.9.9 counter drop\": word 5 \"drop\""), "{e}");
    }

    #[test]
    fn an_element_without_a_key_is_an_error_naming_its_object() {
        let text = "table ip kube-proxy {\n map service-ips {\n type ipv4_addr : verdict\n elements = { : drop }\n }\n}\n";
        let e = read(text, IpFamily::V4).unwrap_err();
        assert!(e.to_string().starts_with("map service-ips: element"), "{e}");
    }
}

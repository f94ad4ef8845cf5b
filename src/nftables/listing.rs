//! `nft list table` output read into values that compare: per object (the table's own
//! properties, each chain, set, map and named counter) its lines in order (type, hook, flags, rules) and
//! its elements as a set. Counters' numbers and the elements the kernel adds to dynamic
//! (session-affinity) sets are left out: they change with traffic, not with the rules.
//! A dry run compares the live table with the desired one as the kernel lists it
//! ([`super::apply::NftRead::canonical`]), so both sides are in the kernel's own words.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One chain, set or map (or, under the key `table`, the table's own lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Object {
    pub lines: Vec<String>,
    pub elements: BTreeSet<String>,
}

/// A listed table: objects by `chain NAME` / `set NAME` / `map NAME` / `counter NAME` /
/// `table`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub objects: BTreeMap<String, Object>,
}

impl Listing {
    /// Reads `nft list table` output (empty text: no table, no objects).
    pub fn parse(text: &str) -> Listing {
        let mut objects: BTreeMap<String, Object> = BTreeMap::new();
        let mut current: Option<String> = None;
        let mut pending = String::new();
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            // A statement that opens more braces than it closes goes on over the next lines.
            if !pending.is_empty() {
                pending.push(' ');
            }
            pending.push_str(line);
            if depth(&pending) > 0 && !opens_object(&pending) && !pending.starts_with("table ") {
                continue;
            }
            let stmt = std::mem::take(&mut pending);
            if stmt.starts_with("table ") {
                current = None;
                continue;
            }
            if opens_object(&stmt) {
                let key = stmt.trim_end_matches('{').trim().to_string();
                objects.entry(key.clone()).or_default();
                current = Some(key);
                continue;
            }
            if stmt == "}" {
                current = None;
                continue;
            }
            // A named counter's numbers change with traffic, not with the rules.
            if current.as_deref().is_some_and(|k| k.starts_with("counter ")) && stmt.starts_with("packets ") {
                continue;
            }
            let key = current.clone().unwrap_or_else(|| "table".to_string());
            let obj = objects.entry(key).or_default();
            match stmt.strip_prefix("elements = {") {
                Some(body) => obj.elements.extend(split_elements(body.trim_end_matches('}'))),
                None => obj.lines.push(normalise(&stmt)),
            }
        }
        for obj in objects.values_mut() {
            if obj.lines.iter().any(|l| l.starts_with("flags ") && l.contains("dynamic")) {
                obj.elements.clear();
            }
        }
        Listing { objects }
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

fn opens_object(stmt: &str) -> bool {
    let mut words = stmt.split_whitespace();
    matches!(words.next(), Some("chain" | "set" | "map" | "counter")) && stmt.ends_with('{') && words.count() == 2
}

/// Braces opened and not closed, outside quotes.
fn depth(s: &str) -> i32 {
    let mut d = 0;
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => d += 1,
            '}' if !quoted => d -= 1,
            _ => {}
        }
    }
    d
}

/// Elements separated by commas outside quotes and braces.
pub(crate) fn split_elements(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut d = 0;
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => d += 1,
            '}' if !quoted => d -= 1,
            ',' if !quoted && d == 0 => {
                out.push(normalise(&cur));
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(normalise(&cur));
    out.retain(|e| !e.is_empty());
    out
}

/// One space between words; a counter's numbers dropped; an element's `expires` dropped.
fn normalise(s: &str) -> String {
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "counter" if words.get(i + 1) == Some(&"packets") => {
                out.push("counter");
                i += 5;
            }
            "expires" => i += 2,
            w => {
                out.push(w);
                i += 1;
            }
        }
    }
    out.join(" ")
}

/// What differs between a live and a desired table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Per object that differs: its key and the lines of the difference (`+`/`-`).
    pub objects: Vec<(String, Vec<String>)>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Objects added, removed or changed.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// The diff as text, under a `# FAMILY kube-proxy` heading (nothing when empty).
    pub fn text(&self, heading: &str) -> String {
        if self.is_empty() {
            return String::new();
        }
        let mut out = format!("# {heading}\n");
        for (key, lines) in &self.objects {
            let _ = writeln!(out, "{key}");
            for l in lines {
                let _ = writeln!(out, "  {l}");
            }
        }
        out
    }
}

/// The changes that take `live` to `desired`.
pub fn diff(live: &Listing, desired: &Listing) -> Diff {
    let empty = Object::default();
    let keys: BTreeSet<&String> = live.objects.keys().chain(desired.objects.keys()).collect();
    let mut objects = Vec::new();
    for key in keys {
        let (l, d) = (live.objects.get(key), desired.objects.get(key));
        let mut lines = Vec::new();
        match (l, d) {
            (Some(_), None) => lines.push("- (removed)".to_string()),
            (None, Some(_)) => lines.push("+ (added)".to_string()),
            _ => {}
        }
        let (l, d) = (l.unwrap_or(&empty), d.unwrap_or(&empty));
        if l.lines != d.lines {
            let (from, to) = changed_middle(&l.lines, &d.lines);
            lines.extend(from.iter().map(|s| format!("- {s}")));
            lines.extend(to.iter().map(|s| format!("+ {s}")));
        }
        lines.extend(l.elements.difference(&d.elements).map(|e| format!("- element {e}")));
        lines.extend(d.elements.difference(&l.elements).map(|e| format!("+ element {e}")));
        if !lines.is_empty() {
            objects.push((key.clone(), lines));
        }
    }
    Diff { objects }
}

/// The differing middles of two line lists (their common beginning and end cut off).
fn changed_middle<'a>(a: &'a [String], b: &'a [String]) -> (&'a [String], &'a [String]) {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    (&a[head..a.len() - tail], &b[head..b.len() - tail])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: &str = "table ip kube-proxy {
\tcomment \"rules for kube-proxy\"
\tset cluster-ips {
\t\ttype ipv4_addr
\t\tcomment \"Active ClusterIPs\"
\t\telements = { 10.96.0.1, 10.96.0.10,
\t\t\t     10.100.12.34 }
\t}

\tset affinity-X {
\t\ttype ipv4_addr
\t\tflags dynamic,timeout
\t\ttimeout 3h
\t\telements = { 198.18.9.2 timeout 3h expires 2h59m58s }
\t}

\tmap service-ips {
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\telements = { 10.96.0.10 . udp . 53 comment \"a, b\" : goto service-A,
\t\t\t     10.96.0.1 . tcp . 443 : goto service-B }
\t}

\tchain services {
\t\tip daddr . meta l4proto . th dport vmap @service-ips
\t\tnumgen random mod 2 vmap { 0 : goto e1, 1 : goto e2 }
\t}

\tchain reject-chain {
\t\treject counter packets 3 bytes 180
\t}

\tcounter localhost-nodeport-rejected-udp {
\t\tpackets 7 bytes 420
\t}

\tchain localhost-nodeport-reject-udp {
\t\tcounter name \"localhost-nodeport-rejected-udp\" reject
\t}
}
";

    #[test]
    fn a_listing_reads_into_objects_with_elements_as_sets() {
        let l = Listing::parse(LIVE);
        let keys: Vec<&str> = l.objects.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["chain localhost-nodeport-reject-udp", "chain reject-chain", "chain services", "counter localhost-nodeport-rejected-udp", "map service-ips", "set affinity-X", "set cluster-ips", "table"]
        );
        assert!(l.objects["counter localhost-nodeport-rejected-udp"].lines.is_empty(), "a named counter's numbers are not compared");
        assert_eq!(l.objects["chain localhost-nodeport-reject-udp"].lines, ["counter name \"localhost-nodeport-rejected-udp\" reject"]);
        assert_eq!(l.objects["set cluster-ips"].elements.len(), 3);
        assert_eq!(l.objects["map service-ips"].elements.iter().next().unwrap(), "10.96.0.1 . tcp . 443 : goto service-B");
        assert!(l.objects["map service-ips"].elements.contains("10.96.0.10 . udp . 53 comment \"a, b\" : goto service-A"), "a comma in quotes");
        assert_eq!(l.objects["chain services"].lines[1], "numgen random mod 2 vmap { 0 : goto e1, 1 : goto e2 }");
        assert!(l.objects["set affinity-X"].elements.is_empty(), "the kernel's own entries are not compared");
        assert_eq!(l.objects["chain reject-chain"].lines, ["reject counter"]);
        assert_eq!(l.objects["table"].lines, ["comment \"rules for kube-proxy\""]);
    }

    #[test]
    fn the_same_table_differs_in_nothing_and_a_change_is_named() {
        let live = Listing::parse(LIVE);
        let reordered = LIVE.replace("10.96.0.1, 10.96.0.10,", "10.96.0.10, 10.96.0.1,").replace("packets 3 bytes 180", "packets 9 bytes 540").replace("packets 7 bytes 420", "packets 8 bytes 480");
        assert!(diff(&live, &Listing::parse(&reordered)).is_empty(), "element order and counters do not count");

        let changed = LIVE.replace("10.100.12.34 }", "10.100.12.35 }").replace("mod 2 vmap { 0 : goto e1, 1 : goto e2 }", "mod 1 vmap { 0 : goto e1 }");
        let d = diff(&live, &Listing::parse(&changed));
        let text = d.text("ip kube-proxy");
        assert_eq!(d.len(), 2, "{text}");
        assert!(text.contains("- element 10.100.12.34\n") && text.contains("+ element 10.100.12.35\n"), "{text}");
        assert!(text.contains("chain services\n  - numgen random mod 2") && text.contains("  + numgen random mod 1 vmap { 0 : goto e1 }"), "{text}");
        assert!(!text.contains("jump") && !text.contains("vmap @service-ips"), "unchanged lines are not shown: {text}");

        let gone = diff(&live, &Listing::default());
        assert_eq!(gone.len(), 8, "every object, the named counter too");
        assert!(gone.text("ip kube-proxy").contains("chain services\n  - (removed)\n"));
        assert!(diff(&Listing::default(), &Listing::default()).text("x").is_empty());
    }
}

//! A set's or map's element as values: its key's parts (an address, a protocol, a port:
//! what the `kube-proxy` table's set types `ipv4_addr`, `ipv6_addr`, `inet_proto` and
//! `inet_service` hold, alone or concatenated) and a verdict map's verdict. One writer
//! (`Display`: the `nft -f` words, which `nft list` prints alike) and one reader of those
//! words ([`parse`]: the statement reader's, a [`ParseError`] naming the word), and [`Key::decode`], the key
//! from the kernel's bytes. The encoder and the tracer match on [`Part`] without a
//! catch-all, so a new kind of part does not compile until both know it. Pure.

use std::fmt::{self, Display, Formatter};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Serialize, Serializer};

use super::model::family_of_word;
use super::stmt::{Cursor, Expected, Form, ParseError, Verdict};
use crate::model::Protocol;
use crate::net::IpFamily;

/// One part of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// `ipv4_addr` / `ipv6_addr`.
    Addr(IpAddr),
    /// `inet_proto`.
    Proto(Protocol),
    /// `inet_service`.
    Port(u16),
}

/// A key: one part, or a concatenation (`A . B . C`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Vec<Part>);

impl Key {
    pub fn of(parts: impl IntoIterator<Item = Part>) -> Self {
        Key(parts.into_iter().collect())
    }

    pub fn parts(&self) -> &[Part] {
        &self.0
    }

    /// The key of a set of type `kind` (`ipv4_addr . inet_proto . inet_service : verdict`)
    /// from the kernel's bytes (each part of a concatenation padded to four); `None` for
    /// any other type or bytes that are not one key of it.
    pub fn decode(kind: &str, bytes: &[u8], family: IpFamily) -> Option<Key> {
        let types: Vec<&str> = kind.split(':').next()?.split('.').map(str::trim).collect();
        let concat = types.len() > 1;
        let mut parts = Vec::with_capacity(types.len());
        let mut at = 0;
        for t in types {
            let (len, width) = match (t, family) {
                ("ipv4_addr", IpFamily::V4) => (4, 4),
                ("ipv6_addr", IpFamily::V6) => (16, 16),
                ("inet_proto", _) if concat => (1, 4),
                ("inet_service", _) if concat => (2, 4),
                _ => return None,
            };
            let field = bytes.get(at..at + width)?;
            if field[len..].iter().any(|b| *b != 0) {
                return None;
            }
            let v = &field[..len];
            parts.push(match t {
                "ipv4_addr" => Part::Addr(Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?).into()),
                "ipv6_addr" => Part::Addr(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?).into()),
                "inet_proto" => Part::Proto(Protocol::from_number(u16::from(v[0]))?),
                _ => Part::Port(u16::from_be_bytes([v[0], v[1]])),
            });
            at += width;
        }
        (at == bytes.len()).then_some(Key(parts))
    }
}

/// An element of a set (no `value`) or of a verdict map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Element {
    pub set: String,
    #[serde(serialize_with = "words")]
    pub key: Key,
    #[serde(serialize_with = "words")]
    pub value: Option<Verdict>,
    pub comment: Option<String>,
}

/// `render --output json` writes a key and a value as lists of words (`["10.0.0.1",
/// "tcp", "80"]`, `["goto service-…"]`, `[]`).
fn words<'a, T, S>(items: &'a T, s: S) -> Result<S::Ok, S::Error>
where
    &'a T: IntoIterator,
    <&'a T as IntoIterator>::Item: Display,
    S: Serializer,
{
    s.collect_seq(items.into_iter().map(|i| i.to_string()))
}

impl<'a> IntoIterator for &'a Key {
    type Item = &'a Part;
    type IntoIter = std::slice::Iter<'a, Part>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Element {
    /// Tests: an element written as `nft -f` words (`KEY comment "C" : VERDICT`), read
    /// into values (a form outside the vocabulary panics, naming the word).
    #[cfg(any(test, feature = "testing"))]
    pub fn parsed(set: &str, body: &str) -> Self {
        parse(set, body).unwrap_or_else(|e| panic!("{body:?}: {e}"))
    }
}

impl Display for Part {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Part::Addr(ip) => ip.fmt(f),
            Part::Proto(p) => f.write_str(p.lower()),
            Part::Port(n) => n.fmt(f),
        }
    }
}

impl Display for Key {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" . ")?;
            }
            p.fmt(f)?;
        }
        Ok(())
    }
}

/// What goes between an element line's braces: `KEY`, then ` comment "C"`, then ` :
/// VERDICT` (the order nft lists them in).
impl Display for Element {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.key.fmt(f)?;
        if let Some(c) = &self.comment {
            // nft reads the comment as one quoted string (kube-proxy's hold no quote).
            write!(f, " comment \"{c}\"")?;
        }
        if let Some(v) = &self.value {
            write!(f, " : {v}")?;
        }
        Ok(())
    }
}

impl Part {
    /// An address, `tcp`/`udp`/`sctp`, or a port in decimal.
    fn parse(w: &str) -> Option<Part> {
        if let Ok(ip) = w.parse::<IpAddr>() {
            return Some(Part::Addr(ip));
        }
        if let Some(p) = Protocol::from_name(w) {
            return Some(Part::Proto(p));
        }
        let port: u16 = w.parse().ok()?;
        (port.to_string() == w).then_some(Part::Port(port))
    }
}

/// Reads an element of `set` as `nft -f` takes it and `nft list` prints it (`10.96.0.10 .
/// udp . 53 comment "ns/svc:port" : goto service-…`): the inverse of its `Display`, by the
/// statement reader in its lenient form (any spacing).
pub fn parse(set: &str, body: &str) -> Result<Element, ParseError> {
    let mut c = Cursor::new(body, Form::Listed)?;
    let mut parts = vec![c.value(Expected::KeyPart, Part::parse)?];
    while c.eat(".") {
        parts.push(c.value(Expected::KeyPart, Part::parse)?);
    }
    let comment = if c.eat("comment") { Some(c.quoted(Expected::Comment)?.to_owned()) } else { None };
    let value = if c.eat(":") { Some(c.verdict()?) } else { None };
    c.end(Expected::OneOf(&[".", "comment", ":"]))?;
    Ok(Element { set: set.to_owned(), key: Key(parts), value, comment })
}

/// One `add element FAMILY TABLE SET { … }` or `delete element …` line of `nft -f` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementLine {
    pub add: bool,
    pub family: IpFamily,
    pub table: String,
    pub element: Element,
}

/// Reads an `add element` / `delete element` line of one element.
pub fn parse_line(line: &str) -> Result<ElementLine, ParseError> {
    let words: Vec<&str> = line.trim().splitn(6, char::is_whitespace).collect();
    let bad = |at: usize, expected| ParseError { word: at + 1, found: words.get(at).map(|w| (*w).to_owned()), expected };
    let add = match words[0] {
        "add" => true,
        "delete" => false,
        _ => return Err(bad(0, Expected::OneOf(&["add", "delete"]))),
    };
    if words.get(1) != Some(&"element") {
        return Err(bad(1, Expected::Word("element")));
    }
    let family = words.get(2).and_then(|w| family_of_word(w)).ok_or_else(|| bad(2, Expected::Family))?;
    let (Some(table), Some(set)) = (words.get(3), words.get(4)) else { return Err(bad(words.len(), Expected::Name)) };
    let body = words.get(5).and_then(|r| r.strip_prefix('{')?.strip_suffix('}')).ok_or_else(|| bad(5, Expected::Word("{")))?;
    let element = parse(set, body).map_err(|e| ParseError { word: e.word + 6, ..e })?;
    Ok(ElementLine { add, family, table: (*table).to_owned(), element })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_write_and_read_back_word_for_word() {
        for body in [
            "10.0.0.1",
            "fd00:10:180::1 . fd00:10:180::1 . sctp . 80",
            "172.30.0.10 . udp . 53 comment \"ns/dns:dns\" : goto service-DNS",
            "tcp . 3001 : goto external-WEB",
            "10.0.0.2 . tcp . 80 comment \"ns/gone:http\" : drop",
            "udp . 30053 : jump x",
        ] {
            let e = parse("s", body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(e.to_string(), body);
        }
        let e = Element::parsed("service-ips", "10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto x");
        assert_eq!(e.key.parts(), [Part::Addr("10.0.0.1".parse().unwrap()), Part::Proto(Protocol::Tcp), Part::Port(80)]);
        assert_eq!((e.value.clone(), e.comment.as_deref()), (Some(Verdict::Goto("x".into())), Some("ns/a:p")));
        assert_eq!(serde_json::to_value(&e).unwrap(), serde_json::json!({"set": "service-ips", "key": ["10.0.0.1", "tcp", "80"], "value": ["goto x"], "comment": "ns/a:p"}));
        // As nft lists it: any spacing.
        assert_eq!(parse("s", "  10.0.0.1  .  tcp . 80   : goto x ").unwrap().to_string(), "10.0.0.1 . tcp . 80 : goto x");
    }

    #[test]
    fn a_word_outside_the_vocabulary_is_an_error_naming_it() {
        for (body, word, found) in [
            (": drop", 1, Some(":")),
            ("10.0.0.1 , 10.0.0.2", 2, Some(",")),
            ("10.0.0.1 . icmp", 3, Some("icmp")),
            ("10.0.0.1 . tcp . 080", 5, Some("080")),
            ("10.0.0.1 comment x", 3, Some("x")),
            ("10.0.0.1 : goto", 4, None),
            ("10.0.0.1 : mangle x", 3, Some("mangle")),
            ("10.0.0.1 timeout 3h", 2, Some("timeout")),
            ("", 1, None),
        ] {
            let e = parse("s", body).unwrap_err();
            assert_eq!((e.word, e.found.as_deref()), (word, found), "{body}: {e}");
        }
    }

    #[test]
    fn a_line_reads_into_its_verb_family_table_and_element() {
        let l = parse_line("add element ip6 kube-proxy cluster-ips { fd00::1 }").unwrap();
        assert_eq!((l.add, l.family, l.table.as_str(), l.element.set.as_str(), l.element.to_string()), (true, IpFamily::V6, "kube-proxy", "cluster-ips", "fd00::1".into()));
        assert!(!parse_line("delete element ip t m { tcp . 80 }").unwrap().add);
        assert_eq!(parse_line("add element ip t m { 10.0.0.1 , 10.0.0.2 }").unwrap_err().word, 8);
        assert!(parse_line("add element inet t m { 10.0.0.1 }").is_err());
        assert!(parse_line("add element ip t m 10.0.0.1").is_err());
    }

    #[test]
    fn keys_are_decoded_from_the_kernels_bytes() {
        let d = |kind: &str, bytes: &[u8], fam| Key::decode(kind, bytes, fam).map(|k| k.to_string());
        assert_eq!(d("ipv4_addr . inet_proto . inet_service : verdict", &[10, 0, 0, 1, 17, 0, 0, 0, 0, 53, 0, 0], IpFamily::V4).as_deref(), Some("10.0.0.1 . udp . 53"));
        assert_eq!(d("ipv4_addr", &[10, 0, 0, 1], IpFamily::V4).as_deref(), Some("10.0.0.1"));
        let mut v6 = vec![0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(d("ipv6_addr", &v6, IpFamily::V6).as_deref(), Some("fd00::1"));
        v6.extend([6, 0, 0, 0, 1, 0xbb, 0, 0]);
        assert_eq!(d("ipv6_addr . inet_proto . inet_service", &v6, IpFamily::V6).as_deref(), Some("fd00::1 . tcp . 443"));
        assert_eq!(d("ipv4_addr . inet_proto . inet_service", &[10, 0, 0, 1, 47, 0, 0, 0, 0, 53, 0, 0], IpFamily::V4), None, "an unknown protocol");
        assert_eq!(d("ipv4_addr", &[10, 0, 0, 1, 0], IpFamily::V4), None, "a longer key");
        assert_eq!(d("ipv4_addr", &[10, 0, 0, 1], IpFamily::V6), None, "the other family");
        assert_eq!(d("ether_addr", &[0; 6], IpFamily::V4), None);
    }
}

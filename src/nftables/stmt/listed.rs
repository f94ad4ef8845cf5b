//! The other reader of statements: a rule as `nft list` prints it (nft 1.0.6) → the values
//! the renderer's words parse to, so a rule read from the kernel writes the renderer's
//! words. The kernel words some statements its own way: `meta mark set meta mark | M`
//! (`^`) for `mark set mark or M` (`xor`), `meta mark & M != 0x00000000` for
//! `mark and M != 0`, `dnat ip to numgen … map { 0 : A . P, 1 : … }` without
//! `addr . port`, `numgen random mod N K` without `==`, `, ` between a set's or a map's
//! items, quoted interface names. The
//! renderer's own words are read too (the fake nft lists rules as they were written).
//! Unlike [`super::parse`] it is lenient about spacing and writing (addresses and numbers
//! are taken as values), since it reads what a kernel prints; a statement outside the
//! vocabulary is still a [`ParseError`] naming the word.
//!
//! What the kernel changes of the values themselves stays changed: an anonymous set comes
//! back sorted with adjacent addresses merged (a set of one is a plain value), and its
//! items are read as [`Sep::Spaced`] unless every comma is tight (`a,b`).

use std::net::IpAddr;

use super::parse::{decimal, number, protocol};
use crate::nftables::model::family_of_word;
use super::*;
use super::reader::Reader;

/// Reads a listed rule's statements and comment.
pub fn parse_listed(text: &str) -> Result<Body, ParseError> {
    let mut c = Cursor { toks: tokens(text)?, at: 0 };
    c.body()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Quoted(&'a str),
    /// `,`; tight when no space is on either side (`a,b`).
    Comma { tight: bool },
}

/// Words split at whitespace and at commas outside quotes; a quoted string is one word.
fn tokens(text: &str) -> Result<Vec<Tok<'_>>, ParseError> {
    let mut toks = Vec::new();
    let mut rest = text.trim_start();
    let mut spaced_before = true;
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').ok_or_else(|| ParseError { word: toks.len() + 1, found: Some(rest.to_owned()), expected: Expected::ClosingQuote })?;
            toks.push(Tok::Quoted(&q[..end]));
            rest = &q[end + 1..];
        } else if let Some(r) = rest.strip_prefix(',') {
            let tight = !spaced_before && !r.is_empty() && !r.starts_with(char::is_whitespace);
            toks.push(Tok::Comma { tight });
            rest = r;
        } else {
            let end = rest.find(|c: char| c.is_whitespace() || c == ',').unwrap_or(rest.len());
            toks.push(Tok::Word(&rest[..end]));
            rest = &rest[end..];
        }
        let trimmed = rest.trim_start();
        spaced_before = trimmed.len() != rest.len();
        rest = trimmed;
    }
    Ok(toks)
}

struct Cursor<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

impl<'a> Reader<'a> for Cursor<'a> {
    fn peek(&self) -> Option<&'a str> {
        match self.toks.get(self.at) {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }

    fn at(&self) -> usize {
        self.at
    }

    fn seek(&mut self, at: usize) {
        self.at = at;
    }

    fn error_at(&self, at: usize, expected: Expected) -> ParseError {
        let found = self.toks.get(at).map(|t| match t {
            Tok::Word(w) => (*w).to_owned(),
            Tok::Quoted(q) => format!("\"{q}\""),
            Tok::Comma { .. } => ",".to_owned(),
        });
        ParseError { word: at + 1, found, expected }
    }
}

impl<'a> Cursor<'a> {
    /// A quoted string, or (as the renderer writes names) a word.
    fn name(&mut self, expected: Expected) -> Result<&'a str, ParseError> {
        match self.toks.get(self.at) {
            Some(Tok::Quoted(q) | Tok::Word(q)) => {
                self.at += 1;
                Ok(q)
            }
            _ => Err(self.error(expected)),
        }
    }

    /// After an item of `{ … }`: `,` (whether tight) or `}` (`None`).
    fn item_end(&mut self) -> Result<Option<bool>, ParseError> {
        match self.toks.get(self.at) {
            Some(Tok::Comma { tight }) => {
                self.at += 1;
                Ok(Some(*tight))
            }
            Some(Tok::Word("}")) => {
                self.at += 1;
                Ok(None)
            }
            _ => Err(self.error(Expected::OneOf(&[",", "}"]))),
        }
    }

    fn body(&mut self) -> Result<Body, ParseError> {
        let mut stmts = Vec::new();
        let mut comment = None;
        while self.at < self.toks.len() {
            if self.eat("comment") {
                match self.toks.get(self.at) {
                    Some(Tok::Quoted(c)) => comment = Some((*c).to_owned()),
                    _ => return Err(self.error(Expected::Comment)),
                }
                self.at += 1;
                if self.at < self.toks.len() {
                    return Err(self.error(Expected::End));
                }
                break;
            }
            stmts.push(self.stmt()?);
        }
        if stmts.is_empty() {
            return Err(self.error(Expected::Statement));
        }
        Ok(Body { stmts, comment })
    }

    fn stmt(&mut self) -> Result<Stmt, ParseError> {
        let at = self.at;
        let first = self.word(Expected::Statement)?;
        Ok(match first {
            "ip" | "ip6" => {
                let family = family_of_word(first).expect("ip or ip6");
                let dir = self.dir()?;
                if self.continues_key() {
                    self.keyed(Selector::Addr(family, dir))?
                } else {
                    let negated = self.eat("!=");
                    Stmt::Match(Match::Addr { family, dir, negated, value: self.addr_value()? })
                }
            }
            "meta" => match self.word(Expected::OneOf(&["l4proto", "mark"]))? {
                "l4proto" if self.continues_key() => self.keyed(Selector::L4proto)?,
                "l4proto" => Stmt::Match(Match::L4proto(self.value(Expected::Protocol, protocol)?)),
                "mark" => self.meta_mark()?,
                _ => return Err(self.error_at(self.at - 1, Expected::OneOf(&["l4proto", "mark"]))),
            },
            "mark" => self.mark()?,
            "th" => {
                self.expect("dport")?;
                if !self.continues_key() {
                    return Err(self.error(Expected::OneOf(&[".", "vmap"])));
                }
                self.keyed(Selector::ThDport)?
            }
            "tcp" | "udp" | "sctp" => {
                let proto = protocol(first).expect("a protocol");
                self.expect("dport")?;
                Stmt::Match(Match::Dport { proto, port: self.value(Expected::Port, |w| w.parse().ok())? })
            }
            "iifname" => {
                let negated = self.eat("!=");
                let at = self.at;
                let w = self.name(Expected::Name)?;
                let (name, wildcard) = w.strip_suffix('*').map_or((w, false), |n| (n, true));
                if name.is_empty() || name.contains('*') {
                    return Err(self.error_at(at, Expected::Name));
                }
                Stmt::Match(Match::Iifname { negated, name: Ifname { name: name.to_owned(), wildcard } })
            }
            "fib" => {
                let dir = self.dir()?;
                self.expect("type")?;
                self.expect("local")?;
                Stmt::Match(Match::FibLocal(dir))
            }
            "ct" => {
                let ct = match self.word(Expected::OneOf(&["state", "status"]))? {
                    "state" => self.expect("new").map(|()| Ct::StateNew)?,
                    "status" => self.expect("dnat").map(|()| Ct::StatusDnat)?,
                    _ => return Err(self.error_at(self.at - 1, Expected::OneOf(&["state", "status"]))),
                };
                Stmt::Match(Match::Ct(ct))
            }
            "numgen" => {
                let modulus = self.numgen_mod()?;
                if self.eat("vmap") {
                    Stmt::Vmap(Vmap::Numgen { modulus, arms: self.arms(modulus, Self::verdict)? })
                } else {
                    // The kernel lists the comparison without `==` (`numgen random mod 2 0`).
                    self.eat("==");
                    Stmt::Match(Match::Numgen { modulus, value: self.numgen_key(modulus)? })
                }
            }
            "masquerade" => Stmt::Action(Action::Masquerade { fully_random: self.eat("fully-random") }),
            "dnat" => Stmt::Action(Action::Dnat(self.dnat()?)),
            "update" => {
                let set = self.set_ref()?;
                self.expect("{")?;
                let key = self.concat()?;
                self.expect("}")?;
                Stmt::Action(Action::Update { set, key })
            }
            "reject" => Stmt::Action(Action::Reject),
            "counter" => {
                self.expect("name")?;
                let name = match self.toks.get(self.at) {
                    Some(Tok::Quoted(n)) if !n.is_empty() => (*n).to_owned(),
                    _ => return Err(self.error(Expected::CounterName)),
                };
                self.at += 1;
                Stmt::Action(Action::Counter { name })
            }
            "accept" | "drop" | "return" | "jump" | "goto" => {
                self.at = at;
                Stmt::Verdict(self.verdict()?)
            }
            _ => return Err(self.error_at(at, Expected::Statement)),
        })
    }

    fn addr_value(&mut self) -> Result<AddrValue, ParseError> {
        let Some(w) = self.peek() else { return Err(self.error(Expected::AddrValue)) };
        if w.starts_with('@') {
            return Ok(AddrValue::Named(self.set_ref()?));
        }
        if !self.eat("{") {
            return Ok(AddrValue::Prefix(self.value(Expected::AddrValue, prefix)?));
        }
        let mut items = Vec::new();
        let mut tight = true;
        loop {
            items.push(self.value(Expected::Prefix, prefix)?);
            match self.item_end()? {
                Some(t) => tight &= t,
                None => break,
            }
        }
        let sep = if tight { Sep::Tight } else { Sep::Spaced };
        Ok(AddrValue::Anon(AnonSet::new(items, sep).expect("at least one item read")))
    }

    /// After `meta mark`: `& M == V` / `!= V`, or `set meta mark | M` / `^ M`.
    fn meta_mark(&mut self) -> Result<Stmt, ParseError> {
        if self.eat("&") {
            let mask = self.value(Expected::Number, number)?;
            let negated = self.comparison()?;
            // The kernel prints 0 as `0x00000000`; the renderer writes `0`.
            let value = match self.value(Expected::Number, number)? {
                v if v.value() == 0 => Num::Dec(0),
                v => v,
            };
            return Ok(Stmt::Match(Match::Mark { mask, negated, value }));
        }
        if !self.eat("set") {
            return Err(self.error(Expected::OneOf(&["&", "set"])));
        }
        self.expect("meta")?;
        self.expect("mark")?;
        let op = self.value(Expected::OneOf(&["|", "^"]), |w| match w {
            "|" => Some(MarkOp::Or),
            "^" => Some(MarkOp::Xor),
            _ => None,
        })?;
        Ok(Stmt::Action(Action::MarkSet { op, value: self.value(Expected::Number, number)? }))
    }

    /// After `mark` (the renderer's words): `and M == V` / `!= V`, or `set mark or M` / `xor M`.
    fn mark(&mut self) -> Result<Stmt, ParseError> {
        if self.eat("and") {
            let mask = self.value(Expected::Number, number)?;
            let negated = self.comparison()?;
            let value = self.value(Expected::Number, number)?;
            return Ok(Stmt::Match(Match::Mark { mask, negated, value }));
        }
        if !self.eat("set") {
            return Err(self.error(Expected::OneOf(&["and", "set"])));
        }
        self.expect("mark")?;
        let op = self.value(Expected::OneOf(&["or", "xor"]), |w| match w {
            "or" => Some(MarkOp::Or),
            "xor" => Some(MarkOp::Xor),
            _ => None,
        })?;
        Ok(Stmt::Action(Action::MarkSet { op, value: self.value(Expected::Number, number)? }))
    }

    /// `==` (false) or `!=` (true).
    fn comparison(&mut self) -> Result<bool, ParseError> {
        self.value(Expected::OneOf(&["==", "!="]), |w| match w {
            "==" => Some(false),
            "!=" => Some(true),
            _ => None,
        })
    }

    /// `{ K : V, … }`: each key below `modulus`, once.
    fn arms<T>(&mut self, modulus: u32, mut arm: impl FnMut(&mut Self) -> Result<T, ParseError>) -> Result<Vec<(u32, T)>, ParseError> {
        self.expect("{")?;
        let mut out: Vec<(u32, T)> = Vec::new();
        loop {
            let at = self.at;
            let k: u32 = self.value(Expected::NumgenKey, decimal)?;
            if k >= modulus || out.iter().any(|(seen, _)| *seen == k) {
                return Err(self.error_at(at, Expected::NumgenKey));
            }
            self.expect(":")?;
            out.push((k, arm(self)?));
            if self.item_end()?.is_none() {
                return Ok(out);
            }
        }
    }

    /// `to A:P`, or `ip [addr . port] to numgen random mod N map { K : A . P, … }`.
    fn dnat(&mut self) -> Result<Dnat, ParseError> {
        if self.eat("to") {
            let (addr, port) = self.value(Expected::HostPort, host_port)?;
            return Ok(Dnat::To { addr, port });
        }
        let family = self.value(Expected::OneOf(&["to", "ip", "ip6"]), family_of_word)?;
        if self.eat("addr") {
            self.expect(".")?;
            self.expect("port")?;
        }
        self.expect("to")?;
        self.expect("numgen")?;
        let modulus = self.numgen_mod()?;
        self.expect("map")?;
        let arms = self.arms(modulus, |c| {
            let addr = c.value(Expected::Address, |w| w.parse::<IpAddr>().ok())?;
            c.expect(".")?;
            Ok((addr, c.value(Expected::Port, |w| w.parse().ok())?))
        })?;
        Ok(Dnat::Numgen { family, modulus, arms: arms.into_iter().map(|(k, (a, p))| (k, a, p)).collect() })
    }

}

/// An address, or one with a prefix length that fits it.
fn prefix(w: &str) -> Option<Prefix> {
    let Some((a, len)) = w.split_once('/') else { return Some(Prefix { addr: w.parse().ok()?, len: None }) };
    let addr: IpAddr = a.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    (len <= if addr.is_ipv4() { 32 } else { 128 }).then_some(Prefix { addr, len: Some(len) })
}

/// `IP:PORT`, or `[IP]:PORT` for IPv6.
fn host_port(w: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = w.rsplit_once(':')?;
    let addr = match host.strip_prefix('[') {
        Some(h) => h.strip_suffix(']')?.parse().ok().filter(IpAddr::is_ipv6)?,
        None => host.parse().ok().filter(IpAddr::is_ipv4)?,
    };
    Some((addr, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `listed` read, then written: the renderer's words.
    fn words(listed: &str) -> String {
        parse_listed(listed).unwrap_or_else(|e| panic!("{listed}: {e}")).to_string()
    }

    #[test]
    fn the_kernels_words_read_into_the_renderers_values() {
        for (listed, rendered) in [
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
        ] {
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
}

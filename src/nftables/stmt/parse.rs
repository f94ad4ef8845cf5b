//! The one reader of statements: `nft -f` words → values, the inverse of [`super::display`].
//! It reads the words exactly as the writer writes them (canonical addresses, numbers
//! without leading zeros), so what it reads writes back byte for byte; anything else is a
//! [`ParseError`] naming the word and what was expected there.

use std::fmt;
use std::net::IpAddr;

use super::*;
use super::reader::Reader;
use crate::nftables::model::family_of_word;

/// What the parser wanted where it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The first word of a statement.
    Statement,
    /// This word.
    Word(&'static str),
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// `ip` or `ip6`.
    Family,
    /// `saddr` or `daddr`.
    Dir,
    /// A key part: `ip saddr`, `ip6 daddr`, `meta l4proto`, `th dport`.
    Selector,
    /// An address as written canonically (`10.0.0.1`, `fd00::1`).
    Address,
    /// An address, or one with a prefix length that fits it.
    Prefix,
    /// An address, a prefix, `{ … }` or `@set`.
    AddrValue,
    /// One separator throughout a set: `{ a,b }` or `{ a , b }`.
    OneSeparator,
    /// `tcp`, `udp` or `sctp`.
    Protocol,
    /// A decimal number (no leading zeros) or a lowercase `0x` hex one, fitting 32 bits.
    Number,
    /// A port (0-65535, decimal).
    Port,
    /// `IP:PORT` (IPv4) or `[IP]:PORT` (IPv6).
    HostPort,
    /// A chain's or an interface's name.
    Name,
    /// `@NAME`.
    SetRef,
    /// `accept`, `drop`, `return`, `jump CHAIN`, `goto CHAIN`.
    Verdict,
    /// A numgen key below the modulus, each once.
    NumgenKey,
    /// The comment's double-quoted string.
    Comment,
    /// A named counter's double-quoted name.
    CounterName,
    /// The quote closing a string.
    ClosingQuote,
    /// One space between words, none before the first or after the last.
    OneSpace,
    /// Nothing more (the comment ends a rule).
    End,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Statement => f.write_str("a statement"),
            Expected::Word(w) => write!(f, "{w:?}"),
            Expected::OneOf(ws) => write!(f, "one of {}", ws.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(", ")),
            Expected::Family => f.write_str("\"ip\" or \"ip6\""),
            Expected::Dir => f.write_str("\"saddr\" or \"daddr\""),
            Expected::Selector => f.write_str("a key part (ip saddr, ip daddr, meta l4proto, th dport)"),
            Expected::Address => f.write_str("an address in canonical form"),
            Expected::Prefix => f.write_str("an address or prefix in canonical form"),
            Expected::AddrValue => f.write_str("an address, a prefix, { … } or @set"),
            Expected::OneSeparator => f.write_str("one separator throughout the set (a,b or a , b)"),
            Expected::Protocol => f.write_str("tcp, udp or sctp"),
            Expected::Number => f.write_str("a 32-bit number (decimal, or 0x and lowercase hex)"),
            Expected::Port => f.write_str("a port number"),
            Expected::HostPort => f.write_str("IP:PORT or [IP]:PORT"),
            Expected::Name => f.write_str("a name"),
            Expected::SetRef => f.write_str("@ and a set's name"),
            Expected::Verdict => f.write_str("a verdict (accept, drop, return, jump CHAIN, goto CHAIN)"),
            Expected::NumgenKey => f.write_str("a numgen key below the modulus, not repeated"),
            Expected::Comment => f.write_str("a double-quoted comment"),
            Expected::CounterName => f.write_str("a double-quoted counter name"),
            Expected::ClosingQuote => f.write_str("a closing double quote"),
            Expected::OneSpace => f.write_str("one space between words, none before the first or after the last"),
            Expected::End => f.write_str("the end of the rule"),
        }
    }
}

/// Where reading stopped: the word (counted from 1 in the text read; `None` past its end)
/// and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub word: usize,
    pub found: Option<String>,
    pub expected: Expected,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.found {
            Some(w) => write!(f, "word {} {w:?}: expected {}", self.word, self.expected),
            None => write!(f, "end of rule: expected {}", self.expected),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads a rule's statements and comment (what follows `add rule FAMILY TABLE CHAIN`).
pub fn parse_body(text: &str) -> Result<Body, ParseError> {
    let mut p = Words::new(text)?;
    let body = p.body()?;
    Ok(body)
}

/// Reads a verdict alone (`goto C`, `drop`): a verdict map element's value.
pub fn parse_verdict(text: &str) -> Result<Verdict, ParseError> {
    let mut p = Words::new(text)?;
    let v = p.verdict()?;
    if p.at < p.toks.len() {
        return Err(p.error(Expected::End));
    }
    Ok(v)
}

/// Reads one `add rule FAMILY TABLE CHAIN BODY` line.
pub fn parse_add_rule(line: &str) -> Result<AddRule, ParseError> {
    let mut p = Words::new(line)?;
    p.expect("add")?;
    p.expect("rule")?;
    let family = p.family()?;
    let table = p.word(Expected::Name)?.to_owned();
    let chain = p.word(Expected::Name)?.to_owned();
    let body = p.body()?;
    Ok(AddRule { family, table, chain, body })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Quoted(&'a str),
}

/// A cursor over a text's words; a double-quoted string is one word.
struct Words<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

impl<'a> Reader<'a> for Words<'a> {
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
        });
        ParseError { word: at + 1, found, expected }
    }
}

impl<'a> Words<'a> {
    /// Words are separated by one space, as the writer separates them, so that what is
    /// read writes back as it was.
    fn new(text: &'a str) -> Result<Self, ParseError> {
        let mut toks = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let spacing = |toks: &Vec<Tok<'_>>, rest: &str| {
                let found = rest.split_whitespace().next().map(str::to_owned);
                ParseError { word: toks.len() + 1, found, expected: Expected::OneSpace }
            };
            if rest.starts_with(char::is_whitespace) {
                return Err(spacing(&toks, rest));
            }
            if let Some(q) = rest.strip_prefix('"') {
                let Some(end) = q.find('"') else {
                    return Err(ParseError { word: toks.len() + 1, found: Some(rest.to_owned()), expected: Expected::ClosingQuote });
                };
                toks.push(Tok::Quoted(&q[..end]));
                rest = &q[end + 1..];
            } else {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                toks.push(Tok::Word(&rest[..end]));
                rest = &rest[end..];
            }
            if rest.is_empty() {
                break;
            }
            match rest.strip_prefix(' ') {
                Some(r) if !r.is_empty() => rest = r,
                _ => return Err(spacing(&toks, rest)),
            }
        }
        Ok(Words { toks, at: 0 })
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
                    let value = self.addr_value()?;
                    Stmt::Match(Match::Addr { family, dir, negated, value })
                }
            }
            "meta" => {
                self.expect("l4proto")?;
                if self.continues_key() {
                    self.keyed(Selector::L4proto)?
                } else {
                    Stmt::Match(Match::L4proto(self.value(Expected::Protocol, protocol)?))
                }
            }
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
                Stmt::Match(Match::Dport { proto, port: self.value(Expected::Port, decimal)? })
            }
            "iifname" => {
                let negated = self.eat("!=");
                let name = self.value(Expected::Name, |w| {
                    let (name, wildcard) = w.strip_suffix('*').map_or((w, false), |n| (n, true));
                    (!name.is_empty() && !name.contains('*')).then(|| Ifname { name: name.to_owned(), wildcard })
                })?;
                Stmt::Match(Match::Iifname { negated, name })
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
            "mark" => self.mark()?,
            "numgen" => self.numgen()?,
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

    fn family(&mut self) -> Result<IpFamily, ParseError> {
        self.value(Expected::Family, family_of_word)
    }

    fn addr_value(&mut self) -> Result<AddrValue, ParseError> {
        let Some(w) = self.peek() else { return Err(self.error(Expected::AddrValue)) };
        if w.starts_with('@') {
            return Ok(AddrValue::Named(self.set_ref()?));
        }
        if !self.eat("{") {
            return Ok(AddrValue::Prefix(self.value(Expected::AddrValue, prefix)?));
        }
        // `{ a,b }` (one word) or `{ a , b }` (a word each): not both, which would not be
        // written back as read.
        let mut items = Vec::new();
        let mut sep = Sep::Tight;
        let mut joined = None;
        loop {
            let at = self.at;
            let w = self.word(Expected::Prefix)?;
            if w.contains(',') {
                joined = Some(at);
            }
            for part in w.split(',') {
                items.push(prefix(part).ok_or_else(|| self.error_at(at, Expected::Prefix))?);
            }
            match self.word(Expected::OneOf(&[",", "}"]))? {
                "}" => break,
                "," => sep = Sep::Spaced,
                _ => return Err(self.error_at(self.at - 1, Expected::OneOf(&[",", "}"]))),
            }
        }
        if let (Some(at), Sep::Spaced) = (joined, sep) {
            return Err(self.error_at(at, Expected::OneSeparator));
        }
        Ok(AddrValue::Anon(AnonSet::new(items, sep).expect("at least one item read")))
    }

    fn mark(&mut self) -> Result<Stmt, ParseError> {
        if self.eat("and") {
            let mask = self.value(Expected::Number, number)?;
            let negated = match self.word(Expected::OneOf(&["==", "!="]))? {
                "==" => false,
                "!=" => true,
                _ => return Err(self.error_at(self.at - 1, Expected::OneOf(&["==", "!="]))),
            };
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
        let value = self.value(Expected::Number, number)?;
        Ok(Stmt::Action(Action::MarkSet { op, value }))
    }

    /// `{ K : V , … }`: each key below `modulus`, once; `arm` reads a value.
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
            match self.word(Expected::OneOf(&[",", "}"]))? {
                "}" => return Ok(out),
                "," => {}
                _ => return Err(self.error_at(self.at - 1, Expected::OneOf(&[",", "}"]))),
            }
        }
    }

    /// After `numgen`: `random mod N == K` or `random mod N vmap { … }`.
    fn numgen(&mut self) -> Result<Stmt, ParseError> {
        let modulus = self.numgen_mod()?;
        match self.word(Expected::OneOf(&["==", "vmap"]))? {
            "==" => self.numgen_key(modulus).map(|value| Stmt::Match(Match::Numgen { modulus, value })),
            "vmap" => Ok(Stmt::Vmap(Vmap::Numgen { modulus, arms: self.arms(modulus, Self::verdict)? })),
            _ => Err(self.error_at(self.at - 1, Expected::OneOf(&["==", "vmap"]))),
        }
    }

    fn dnat(&mut self) -> Result<Dnat, ParseError> {
        if self.eat("to") {
            let (addr, port) = self.value(Expected::HostPort, host_port)?;
            return Ok(Dnat::To { addr, port });
        }
        let family = self.value(Expected::OneOf(&["to", "ip", "ip6"]), family_of_word)?;
        for w in ["addr", ".", "port", "to", "numgen"] {
            self.expect(w)?;
        }
        let modulus = self.numgen_mod()?;
        self.expect("map")?;
        let arms = self.arms(modulus, |p| {
            let addr = p.value(Expected::Address, address)?;
            p.expect(".")?;
            Ok((addr, p.value(Expected::Port, decimal)?))
        })?;
        Ok(Dnat::Numgen { family, modulus, arms: arms.into_iter().map(|(k, (a, p))| (k, a, p)).collect() })
    }

}

pub(super) fn protocol(w: &str) -> Option<Protocol> {
    match w {
        "tcp" => Some(Protocol::Tcp),
        "udp" => Some(Protocol::Udp),
        "sctp" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// Decimal digits as the writer writes them: no sign, no leading zero.
pub(super) fn decimal<T: std::str::FromStr>(w: &str) -> Option<T> {
    let canonical = !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) && (w == "0" || !w.starts_with('0'));
    canonical.then(|| w.parse().ok()).flatten()
}

pub(super) fn number(w: &str) -> Option<Num> {
    match w.strip_prefix("0x") {
        Some(h) => {
            let ok = (1..=8).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            ok.then(|| Num::Hex { value: u32::from_str_radix(h, 16).expect("checked hex digits"), digits: h.len() as u8 })
        }
        None => decimal(w).map(Num::Dec),
    }
}

/// An address in the form it is written back in.
fn address(w: &str) -> Option<IpAddr> {
    let a: IpAddr = w.parse().ok()?;
    (a.to_string() == w).then_some(a)
}

fn prefix(w: &str) -> Option<Prefix> {
    let Some((a, len)) = w.split_once('/') else { return Some(Prefix { addr: address(w)?, len: None }) };
    let addr = address(a)?;
    let len: u8 = decimal(len)?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some(Prefix { addr, len: Some(len) })
}

/// `IP:PORT`, or `[IP]:PORT` for IPv6.
fn host_port(w: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = w.rsplit_once(':')?;
    let addr = match host.strip_prefix('[') {
        Some(h) => address(h.strip_suffix(']')?).filter(IpAddr::is_ipv6)?,
        None => address(host).filter(IpAddr::is_ipv4)?,
    };
    Some((addr, decimal(port)?))
}

/// A number alone (a masquerade mark from the settings), as [`Words`] reads one.
impl std::str::FromStr for Num {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Num, ParseError> {
        number(s).ok_or_else(|| ParseError { word: 1, found: Some(s.to_owned()), expected: Expected::Number })
    }
}

/// An address or prefix alone (a ServiceCIDR), as [`Words`] reads one.
impl std::str::FromStr for Prefix {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Prefix, ParseError> {
        prefix(s).ok_or_else(|| ParseError { word: 1, found: Some(s.to_owned()), expected: Expected::Prefix })
    }
}

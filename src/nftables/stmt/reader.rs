//! The one reader of rule words, for both texts read into statements: svcproxy's own
//! `nft -f` words ([`Form::Written`]) and the kernel's listing of them ([`Form::Listed`]).
//! The grammar is one; each place the kernel words a statement otherwise is a named
//! variation of the [`Form`].

use std::net::IpAddr;
use std::str::FromStr;

use super::*;
use crate::nftables::model::family_of_word;

/// Which text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// svcproxy's words exactly as [`super::display`] writes them, so that what is read
    /// writes back byte for byte.
    Written,
    /// A rule as `nft list` prints it ([`super::parse_listed`]); the renderer's words are read too.
    Listed,
}

impl Form {
    /// Words one space apart, none before the first or after the last; otherwise any white
    /// space, and a comma is a word of its own (the kernel's `a, b`).
    fn one_space(self) -> bool {
        self == Form::Written
    }

    /// Addresses, ports and prefix lengths only as the writer spells them; otherwise in any
    /// spelling that reads as the value.
    fn canonical(self) -> bool {
        self == Form::Written
    }

    /// The kernel's own words read too: `meta mark & M != V`, `meta mark set meta mark | M`,
    /// `numgen random mod N K` without `==`, `dnat ip to numgen …` without `addr . port`,
    /// quoted interface names.
    fn kernels_words(self) -> bool {
        self == Form::Listed
    }

    fn address(self, w: &str) -> Option<IpAddr> {
        let a: IpAddr = w.parse().ok()?;
        (!self.canonical() || a.to_string() == w).then_some(a)
    }

    fn decimal<T: FromStr>(self, w: &str) -> Option<T> {
        if self.canonical() { decimal(w) } else { w.parse().ok() }
    }

    /// An address, or one with a prefix length that fits it.
    pub(super) fn prefix(self, w: &str) -> Option<Prefix> {
        let Some((a, len)) = w.split_once('/') else { return Some(Prefix { addr: self.address(w)?, len: None }) };
        let addr = self.address(a)?;
        let len: u8 = self.decimal(len)?;
        (len <= if addr.is_ipv4() { 32 } else { 128 }).then_some(Prefix { addr, len: Some(len) })
    }

    /// `IP:PORT`, or `[IP]:PORT` for IPv6.
    fn host_port(self, w: &str) -> Option<(IpAddr, u16)> {
        let (host, port) = w.rsplit_once(':')?;
        let addr = match host.strip_prefix('[') {
            Some(h) => self.address(h.strip_suffix(']')?).filter(IpAddr::is_ipv6)?,
            None => self.address(host).filter(IpAddr::is_ipv4)?,
        };
        Some((addr, self.decimal(port)?))
    }
}

/// Decimal digits as the writer writes them: no sign, no leading zero.
pub(super) fn decimal<T: FromStr>(w: &str) -> Option<T> {
    let canonical = !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) && (w == "0" || !w.starts_with('0'));
    canonical.then(|| w.parse().ok()).flatten()
}

/// Decimal, or `0x` and one to eight lowercase hex digits (kept: the writer writes them back).
pub(super) fn number(w: &str) -> Option<Num> {
    match w.strip_prefix("0x") {
        Some(h) => {
            let ok = (1..=8).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            let value = u32::from_str_radix(h, 16).ok().filter(|_| ok)?;
            Some(Num::Hex { value, digits: h.len() as u8 })
        }
        None => decimal(w).map(Num::Dec),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tok<'a> {
    Word(&'a str),
    Quoted(&'a str),
    /// A comma apart from the words ([`Form::one_space`] off); tight when no space is on
    /// either side (`a,b`).
    Comma { tight: bool },
}

impl<'a> Tok<'a> {
    pub(crate) fn word(self) -> Option<&'a str> {
        match self {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }

    fn quoted(self) -> Option<&'a str> {
        match self {
            Tok::Quoted(q) => Some(q),
            _ => None,
        }
    }
}

/// The words of the mark statements after the first `mark`: svcproxy's (`mark and M != V`,
/// `mark set mark or M`) or the kernel's (`meta mark & M != V`, `meta mark set meta mark | M`).
struct MarkWords {
    /// A test's first word, then an update's.
    and_set: &'static [&'static str],
    /// What an update combines with the value.
    mark: &'static [&'static str],
    /// [`MarkOp::Or`]'s word, then [`MarkOp::Xor`]'s.
    or_xor: &'static [&'static str],
    /// The kernel prints a compared 0 as `0x00000000`, which the renderer writes `0`.
    zero_as_hex: bool,
}

impl MarkWords {
    const WRITTEN: MarkWords = MarkWords { and_set: &["and", "set"], mark: &["mark"], or_xor: &["or", "xor"], zero_as_hex: false };
    const KERNEL: MarkWords = MarkWords { and_set: &["&", "set"], mark: &["meta", "mark"], or_xor: &["|", "^"], zero_as_hex: true };
}

/// A cursor over a text's words; a double-quoted string is one word.
pub(crate) struct Cursor<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
    form: Form,
}

impl<'a> Cursor<'a> {
    /// Splits `text` into words: at white space, and (the kernel's spacing) at commas.
    pub(crate) fn new(text: &'a str, form: Form) -> Result<Self, ParseError> {
        let mut toks = Vec::new();
        let mut rest = text;
        loop {
            let next = rest.trim_start();
            let gap = &rest[..rest.len() - next.len()];
            // In svcproxy's words, spacing that is not the writer's would not write back as read.
            let want = if toks.is_empty() || next.is_empty() { "" } else { " " };
            if form.one_space() && gap != want {
                let found = next.split_whitespace().next().map(str::to_owned);
                return Err(ParseError { word: toks.len() + 1, found, expected: Expected::OneSpace });
            }
            rest = next;
            if rest.is_empty() {
                return Ok(Cursor { toks, at: 0, form });
            }
            if let Some(q) = rest.strip_prefix('"') {
                let end = q.find('"').ok_or_else(|| ParseError { word: toks.len() + 1, found: Some(rest.to_owned()), expected: Expected::ClosingQuote })?;
                toks.push(Tok::Quoted(&q[..end]));
                rest = &q[end + 1..];
            } else if let Some(r) = rest.strip_prefix(',').filter(|_| !form.one_space()) {
                let tight = gap.is_empty() && !toks.is_empty() && r.starts_with(|c: char| !c.is_whitespace());
                toks.push(Tok::Comma { tight });
                rest = r;
            } else {
                let end = rest.find(|c: char| c.is_whitespace() || (c == ',' && !form.one_space())).unwrap_or(rest.len());
                toks.push(Tok::Word(&rest[..end]));
                rest = &rest[end..];
            }
        }
    }

    /// The next token when it is a plain word.
    pub(crate) fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.at).and_then(|t| t.word())
    }

    /// An error naming the token at `at`.
    fn error_at(&self, at: usize, expected: Expected) -> ParseError {
        let found = self.toks.get(at).map(|t| match t {
            Tok::Word(w) => (*w).to_owned(),
            Tok::Quoted(q) => format!("\"{q}\""),
            Tok::Comma { .. } => ",".to_owned(),
        });
        ParseError { word: at + 1, found, expected }
    }

    /// An error at the next word.
    fn error(&self, expected: Expected) -> ParseError {
        self.error_at(self.at, expected)
    }

    /// The next token if `take` takes it, or `expected` as the error.
    fn take(&mut self, expected: Expected, take: impl FnOnce(Tok<'a>) -> Option<&'a str>) -> Result<&'a str, ParseError> {
        let s = self.toks.get(self.at).copied().and_then(take).ok_or_else(|| self.error(expected))?;
        self.at += 1;
        Ok(s)
    }

    /// The next token if it is a quoted string (its quotes dropped), or `expected` as the error.
    pub(crate) fn quoted(&mut self, expected: Expected) -> Result<&'a str, ParseError> {
        self.take(expected, Tok::quoted)
    }

    /// The next word (not a quoted string), or `expected` as the error.
    pub(crate) fn word(&mut self, expected: Expected) -> Result<&'a str, ParseError> {
        self.take(expected, Tok::word)
    }

    pub(crate) fn eat(&mut self, w: &str) -> bool {
        let yes = self.peek() == Some(w);
        if yes {
            self.at += 1;
        }
        yes
    }

    pub(crate) fn expect(&mut self, w: &'static str) -> Result<(), ParseError> {
        if self.eat(w) { Ok(()) } else { Err(self.error(Expected::Word(w))) }
    }

    /// Parses the next word with `f`, or fails with `expected` naming it.
    pub(crate) fn value<T>(&mut self, expected: Expected, f: impl FnOnce(&'a str) -> Option<T>) -> Result<T, ParseError> {
        let at = self.at;
        let w = self.word(expected)?;
        f(w).ok_or_else(|| self.error_at(at, expected))
    }

    /// The next token, whatever it is.
    pub(crate) fn next_tok(&mut self) -> Option<Tok<'a>> {
        let t = self.toks.get(self.at).copied()?;
        self.at += 1;
        Some(t)
    }

    pub(crate) fn done(&self) -> bool {
        self.at >= self.toks.len()
    }

    /// Nothing more to read, or `expected` as the error.
    pub(crate) fn end(&self, expected: Expected) -> Result<(), ParseError> {
        if self.done() { Ok(()) } else { Err(self.error(expected)) }
    }

    /// A rule's statements and its comment (`comment "…"`, last).
    pub(super) fn body(&mut self) -> Result<Body, ParseError> {
        let mut stmts = Vec::new();
        let mut comment = None;
        while self.at < self.toks.len() {
            if self.eat("comment") {
                comment = Some(self.quoted(Expected::Comment)?.to_owned());
                self.end(Expected::End)?;
            } else {
                stmts.push(self.stmt()?);
            }
        }
        if stmts.is_empty() {
            return Err(self.error(Expected::Statement));
        }
        Ok(Body { stmts, comment })
    }

    fn stmt(&mut self) -> Result<Stmt, ParseError> {
        let form = self.form;
        let at = self.at;
        let first = self.word(Expected::Statement)?;
        if let Some(family) = family_of_word(first) {
            let dir = self.dir()?;
            if self.continues_key() {
                return self.keyed(Selector::Addr(family, dir));
            }
            let negated = self.eat("!=");
            return Ok(Stmt::Match(Match::Addr { family, dir, negated, value: self.addr_value()? }));
        }
        if let Some(proto) = Protocol::from_name(first) {
            self.expect("dport")?;
            return Ok(Stmt::Match(Match::Dport { proto, port: self.value(Expected::Port, |w| form.decimal(w))? }));
        }
        Ok(match first {
            "meta" => {
                let expected = if form.kernels_words() { Expected::OneOf(&["l4proto", "mark"]) } else { Expected::Word("l4proto") };
                match self.word(expected)? {
                    "l4proto" if self.continues_key() => self.keyed(Selector::L4proto)?,
                    "l4proto" => Stmt::Match(Match::L4proto(self.value(Expected::Protocol, Protocol::from_name)?)),
                    "mark" if form.kernels_words() => self.mark(&MarkWords::KERNEL)?,
                    _ => return Err(self.error_at(self.at - 1, expected)),
                }
            }
            "mark" => self.mark(&MarkWords::WRITTEN)?,
            "th" => {
                self.expect("dport")?;
                if !self.continues_key() {
                    return Err(self.error(Expected::OneOf(&[".", "vmap"])));
                }
                self.keyed(Selector::ThDport)?
            }
            "iifname" => {
                let negated = self.eat("!=");
                let at = self.at;
                let w = self.take(Expected::Name, |t| t.word().or(t.quoted().filter(|_| form.kernels_words())))?;
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
                let name = self.take(Expected::CounterName, |t| t.quoted().filter(|n| !n.is_empty()))?;
                Stmt::Action(Action::Counter { name: name.to_owned() })
            }
            "accept" | "drop" | "return" | "jump" | "goto" => {
                self.at = at;
                Stmt::Verdict(self.verdict()?)
            }
            _ => return Err(self.error_at(at, Expected::Statement)),
        })
    }

    fn dir(&mut self) -> Result<Dir, ParseError> {
        self.value(Expected::Dir, |w| match w {
            "saddr" => Some(Dir::Saddr),
            "daddr" => Some(Dir::Daddr),
            _ => None,
        })
    }

    /// An address or prefix, `@set`, or `{ … }`.
    fn addr_value(&mut self) -> Result<AddrValue, ParseError> {
        let form = self.form;
        let Some(w) = self.peek() else { return Err(self.error(Expected::AddrValue)) };
        if w.starts_with('@') {
            return Ok(AddrValue::Named(self.set_ref()?));
        }
        let open = self.at;
        if !self.eat("{") {
            return Ok(AddrValue::Prefix(self.value(Expected::AddrValue, |w| form.prefix(w))?));
        }
        // `{ a,b }` (one word; the kernel's tight commas) or `{ a , b }`: in svcproxy's words
        // not both, which would not be written back as read.
        let (mut items, mut tight, mut joined) = (Vec::new(), true, None);
        loop {
            let at = self.at;
            let w = self.word(Expected::Prefix)?;
            if w.contains(',') {
                joined = Some(at);
            }
            for part in w.split(',') {
                items.push(form.prefix(part).ok_or_else(|| self.error_at(at, Expected::Prefix))?);
            }
            match self.item_end()? {
                Some(t) => tight &= t,
                None => break,
            }
        }
        let sep = if tight { Sep::Tight } else { Sep::Spaced };
        if let (Some(at), Sep::Spaced) = (joined, sep) {
            return Err(self.error_at(at, Expected::OneSeparator));
        }
        AnonSet::new(items, sep).map(AddrValue::Anon).ok_or_else(|| self.error_at(open, Expected::Prefix))
    }

    /// After an item of `{ … }`: a comma (whether tight) or `}` (`None`).
    fn item_end(&mut self) -> Result<Option<bool>, ParseError> {
        let tight = match self.toks.get(self.at) {
            Some(Tok::Comma { tight }) => Some(*tight),
            Some(Tok::Word(",")) => Some(false),
            Some(Tok::Word("}")) => None,
            _ => return Err(self.error(Expected::OneOf(&[",", "}"]))),
        };
        self.at += 1;
        Ok(tight)
    }

    /// After `mark` (the kernel's `meta mark`): a test `and M == V` / `!= V`, or an update
    /// `set mark or M` / `xor M`.
    fn mark(&mut self, words: &MarkWords) -> Result<Stmt, ParseError> {
        if self.eat(words.and_set[0]) {
            let mask = self.value(Expected::Number, number)?;
            let negated = self.value(Expected::OneOf(&["==", "!="]), |w| match w {
                "==" => Some(false),
                "!=" => Some(true),
                _ => None,
            })?;
            let value = match self.value(Expected::Number, number)? {
                v if words.zero_as_hex && v.value() == 0 => Num::Dec(0),
                v => v,
            };
            return Ok(Stmt::Match(Match::Mark { mask, negated, value }));
        }
        if !self.eat(words.and_set[1]) {
            return Err(self.error(Expected::OneOf(words.and_set)));
        }
        for &w in words.mark {
            self.expect(w)?;
        }
        let op = self.value(Expected::OneOf(words.or_xor), |w| match words.or_xor.iter().position(|&o| o == w)? {
            0 => Some(MarkOp::Or),
            _ => Some(MarkOp::Xor),
        })?;
        Ok(Stmt::Action(Action::MarkSet { op, value: self.value(Expected::Number, number)? }))
    }

    /// After `numgen`: `random mod N == K` or `random mod N vmap { … }`.
    fn numgen(&mut self) -> Result<Stmt, ParseError> {
        let modulus = self.numgen_mod()?;
        if self.eat("vmap") {
            return Ok(Stmt::Vmap(Vmap::Numgen { modulus, arms: self.arms(modulus, Self::verdict)? }));
        }
        if !self.eat("==") && !self.form.kernels_words() {
            return Err(self.error(Expected::OneOf(&["==", "vmap"])));
        }
        // Below the modulus, so that it can hold.
        let at = self.at;
        let value: u32 = self.value(Expected::NumgenKey, decimal)?;
        if value >= modulus {
            return Err(self.error_at(at, Expected::NumgenKey));
        }
        Ok(Stmt::Match(Match::Numgen { modulus, value }))
    }

    /// `random mod N`, after `numgen`.
    fn numgen_mod(&mut self) -> Result<u32, ParseError> {
        self.expect("random")?;
        self.expect("mod")?;
        self.value(Expected::Number, decimal)
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
            if self.item_end()?.is_none() {
                return Ok(out);
            }
        }
    }

    /// `to A:P`, or `ip addr . port to numgen random mod N map { K : A . P , … }`.
    fn dnat(&mut self) -> Result<Dnat, ParseError> {
        let form = self.form;
        if self.eat("to") {
            let (addr, port) = self.value(Expected::HostPort, |w| form.host_port(w))?;
            return Ok(Dnat::To { addr, port });
        }
        let family = self.value(Expected::OneOf(&["to", "ip", "ip6"]), family_of_word)?;
        if !form.kernels_words() || self.peek() == Some("addr") {
            for w in ["addr", ".", "port"] {
                self.expect(w)?;
            }
        }
        self.expect("to")?;
        self.expect("numgen")?;
        let modulus = self.numgen_mod()?;
        self.expect("map")?;
        let arms = self.arms(modulus, |c| {
            let addr = c.value(Expected::Address, |w| form.address(w))?;
            c.expect(".")?;
            Ok((addr, c.value(Expected::Port, |w| form.decimal(w))?))
        })?;
        Ok(Dnat::Numgen { family, modulus, arms: arms.into_iter().map(|(k, (a, p))| (k, a, p)).collect() })
    }

    /// Whether a key goes on (` . `) or is looked up in a verdict map next.
    fn continues_key(&self) -> bool {
        matches!(self.peek(), Some(".") | Some("vmap"))
    }

    fn selector(&mut self) -> Result<Selector, ParseError> {
        let at = self.at;
        let w = self.word(Expected::Selector)?;
        if let Some(family) = family_of_word(w) {
            return Ok(Selector::Addr(family, self.dir()?));
        }
        match w {
            "meta" => self.expect("l4proto").map(|()| Selector::L4proto),
            "th" => self.expect("dport").map(|()| Selector::ThDport),
            _ => Err(self.error_at(at, Expected::Selector)),
        }
    }

    /// `A . B . C`.
    fn concat(&mut self) -> Result<Concat, ParseError> {
        let first = self.selector()?;
        self.concat_from(first)
    }

    fn concat_from(&mut self, first: Selector) -> Result<Concat, ParseError> {
        let mut parts = vec![first];
        while self.eat(".") {
            parts.push(self.selector()?);
        }
        Ok(Concat(parts))
    }

    /// A key from its first part (taken), then `vmap @MAP` or (two parts or more) `@SET`.
    fn keyed(&mut self, first: Selector) -> Result<Stmt, ParseError> {
        let key = self.concat_from(first)?;
        if self.eat("vmap") {
            return Ok(Stmt::Vmap(Vmap::Named { key, map: self.set_ref()? }));
        }
        let at = self.at;
        let set = self.set_ref()?;
        if key.0.len() < 2 {
            return Err(self.error_at(at, Expected::OneOf(&[".", "vmap"])));
        }
        Ok(Stmt::Match(Match::InSet { key, set }))
    }

    fn set_ref(&mut self) -> Result<String, ParseError> {
        self.value(Expected::SetRef, |w| w.strip_prefix('@').filter(|n| !n.is_empty()).map(str::to_owned))
    }

    pub(crate) fn verdict(&mut self) -> Result<Verdict, ParseError> {
        let at = self.at;
        Ok(match self.word(Expected::Verdict)? {
            "accept" => Verdict::Accept,
            "drop" => Verdict::Drop,
            "return" => Verdict::Return,
            "jump" => Verdict::Jump(self.word(Expected::Name)?.to_owned()),
            "goto" => Verdict::Goto(self.word(Expected::Name)?.to_owned()),
            _ => return Err(self.error_at(at, Expected::Verdict)),
        })
    }
}

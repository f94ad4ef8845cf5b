//! Reading statements from `nft -f` words, the inverse of [`super::display`], and from
//! `nft list`'s ([`parse_listed`]): the entry points and the [`ParseError`] naming the word
//! and what was expected there. `nft -f` words are read exactly as the writer writes them
//! (canonical addresses, numbers without leading zeros, [`Form::Written`]), so what is
//! read writes back byte for byte.

use std::fmt;

use super::reader::{number, Cursor, Form};
use super::*;
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
    /// A set element's key part: an address, a protocol, a port.
    KeyPart,
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
            Expected::KeyPart => f.write_str("an address, tcp, udp, sctp or a port"),
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
            None => write!(f, "end of the text: expected {}", self.expected),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads a rule's statements and comment (what follows `add rule FAMILY TABLE CHAIN`).
pub fn parse_body(text: &str) -> Result<Body, ParseError> {
    Cursor::new(text, Form::Written)?.body()
}

/// Reads a rule's statements and comment as `nft list` prints them (nft 1.0.6), in the
/// reader's [`Form::Listed`]: the kernel's words for some statements (`meta mark & M !=
/// 0x00000000`, `meta mark set meta mark | M`, `dnat ip to numgen … map` without `addr .
/// port`, `numgen random mod N K`, `, ` between items, quoted interface names) and the
/// renderer's own, in any spacing. What the kernel changes of the values stays changed: an
/// anonymous set comes back sorted with adjacent addresses merged (a set of one is a plain
/// value), its items read as [`Sep::Spaced`] unless every comma is tight (`a,b`).
pub fn parse_listed(text: &str) -> Result<Body, ParseError> {
    Cursor::new(text, Form::Listed)?.body()
}

/// Reads a verdict alone (`goto C`, `drop`): a verdict map element's value.
pub fn parse_verdict(text: &str) -> Result<Verdict, ParseError> {
    let mut c = Cursor::new(text, Form::Written)?;
    let v = c.verdict()?;
    c.end(Expected::End)?;
    Ok(v)
}

/// Reads one `add rule FAMILY TABLE CHAIN BODY` line.
pub fn parse_add_rule(line: &str) -> Result<AddRule, ParseError> {
    let mut c = Cursor::new(line, Form::Written)?;
    c.expect("add")?;
    c.expect("rule")?;
    let family = c.value(Expected::Family, family_of_word)?;
    let table = c.word(Expected::Name)?.to_owned();
    let chain = c.word(Expected::Name)?.to_owned();
    let body = c.body()?;
    Ok(AddRule { family, table, chain, body })
}

/// A number alone (a masquerade mark from the settings), as [`Cursor`] reads one.
impl std::str::FromStr for Num {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Num, ParseError> {
        number(s).ok_or_else(|| ParseError { word: 1, found: Some(s.to_owned()), expected: Expected::Number })
    }
}

/// An address or prefix alone (a ServiceCIDR), as [`Cursor`] reads one.
impl std::str::FromStr for Prefix {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Prefix, ParseError> {
        Form::Written.prefix(s).ok_or_else(|| ParseError { word: 1, found: Some(s.to_owned()), expected: Expected::Prefix })
    }
}

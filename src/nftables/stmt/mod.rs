//! The statements of a `kube-proxy` table's rules as typed values: every form svcproxy's
//! renderer writes for kube-proxy v1.34's table and the v1.36+ one (`Context::table`),
//! and the few more of kube-proxy's own test tables. One writer ([`display`]: the exact
//! `nft -f` words) and one reader ([`reader`]) of two forms: [`parse_body`], those words
//! back, a [`ParseError`] naming the word it stopped at; [`parse_listed`], the same values
//! from a rule as `nft list` prints it; its [`Cursor`] reads set elements and the encoder's
//! other lines too. There is no catch-all: a form not here is an error, so a new form is
//! added here first. Pure.
//!
//! Families are `net::IpFamily`; the word a rule spells for one (`ip`/`ip6`) is
//! [`crate::nftables::model::NftFamily`]'s.

mod display;
mod parse;
mod reader;
#[cfg(test)]
mod listed_tests;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use display::Stmts;
#[cfg(test)]
pub(crate) use listed_tests::KERNEL_WORDS;
pub(crate) use reader::{Cursor, Form, Tok};
pub use parse::{parse_add_rule, parse_body, parse_listed, parse_verdict, Expected, ParseError};

pub use crate::model::Protocol;
use crate::net::IpFamily;

/// A rule's statements in order, and its comment (`comment "…"`, written last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub stmts: Vec<Stmt>,
    pub comment: Option<String>,
}

impl Body {
    /// Whether the rule binds an anonymous set or map, which the kernel creates with it:
    /// an address set of two or more items, a `numgen` verdict map or DNAT map.
    pub fn binds_anonymous_set(&self) -> bool {
        self.stmts.iter().any(|s| match s {
            Stmt::Match(Match::Addr { value: AddrValue::Anon(set), .. }) => set.items().len() > 1,
            Stmt::Match(Match::Addr { value: AddrValue::Prefix(_) | AddrValue::Named(_), .. }) => false,
            Stmt::Match(
                Match::L4proto(_) | Match::Dport { .. } | Match::Iifname { .. } | Match::FibLocal(_) | Match::Ct(_) | Match::Mark { .. } | Match::InSet { .. },
            ) => false,
            // Compared in a register: no set.
            Stmt::Match(Match::Numgen { .. }) => false,
            Stmt::Vmap(Vmap::Numgen { .. }) | Stmt::Action(Action::Dnat(Dnat::Numgen { .. })) => true,
            Stmt::Vmap(Vmap::Named { .. }) | Stmt::Action(Action::Dnat(Dnat::To { .. })) => false,
            Stmt::Action(Action::MarkSet { .. } | Action::Masquerade { .. } | Action::Update { .. } | Action::Reject | Action::Counter { .. }) => false,
            Stmt::Verdict(_) => false,
        })
    }
}

/// `add rule FAMILY TABLE CHAIN BODY`: one line of `nft -f` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRule {
    pub family: IpFamily,
    pub table: String,
    pub chain: String,
    pub body: Body,
}

/// One statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// A test: the rule goes on only if it holds.
    Match(Match),
    /// A key looked up in a verdict map: the verdict found is taken.
    Vmap(Vmap),
    /// Something done to the packet or its connection.
    Action(Action),
    Verdict(Verdict),
}

/// Source or destination address (also `fib saddr`/`fib daddr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Saddr,
    Daddr,
}

/// What one part of a key loads: `ip saddr`, `ip6 daddr`, `meta l4proto`, `th dport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    Addr(IpFamily, Dir),
    L4proto,
    ThDport,
}

/// A key of one or more parts, written `A . B . C`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concat(pub Vec<Selector>);

/// An address or a prefix (`10.0.0.1`, `10.0.0.0/8`); a bare address is not `/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: Option<u8>,
}

/// How an anonymous set's elements are separated: kube-proxy writes its ServiceCIDRs
/// `a,b` and load-balancer source ranges `a , b`. A set of one element is [`Sep::Tight`]
/// (it is written the same either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sep {
    Tight,
    Spaced,
}

/// `{ a,b }` or `{ a , b }`: never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnonSet {
    items: Vec<Prefix>,
    sep: Sep,
}

impl AnonSet {
    /// `None` for no items (nft refuses `{ }`); one item is always [`Sep::Tight`].
    pub fn new(items: Vec<Prefix>, sep: Sep) -> Option<Self> {
        if items.is_empty() {
            return None;
        }
        let sep = if items.len() == 1 { Sep::Tight } else { sep };
        Some(AnonSet { items, sep })
    }

    pub fn items(&self) -> &[Prefix] {
        &self.items
    }

    pub fn sep(&self) -> Sep {
        self.sep
    }
}

/// What an address is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrValue {
    Prefix(Prefix),
    Anon(AnonSet),
    /// `@name`: a named set.
    Named(String),
}

/// An interface name, or (`veth*`) a prefix of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ifname {
    pub name: String,
    pub wildcard: bool,
}

/// A connection-tracking test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ct {
    /// `ct state new`.
    StateNew,
    /// `ct status dnat`.
    StatusDnat,
}

/// A number as written: decimal, or hex with its digits (`0x4000` and `0x00004000` are
/// both kube-proxy's, in its v1.34 tests and v1.37 tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Num {
    Dec(u32),
    Hex { value: u32, digits: u8 },
}

impl Num {
    pub fn value(self) -> u32 {
        match self {
            Num::Dec(v) | Num::Hex { value: v, .. } => v,
        }
    }
}

/// A test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// `ip daddr 10.0.0.1`, `ip saddr != 10.0.0.0/8`, `ip daddr { a,b }`, `ip6 daddr @set`.
    Addr { family: IpFamily, dir: Dir, negated: bool, value: AddrValue },
    /// `meta l4proto tcp`.
    L4proto(Protocol),
    /// `tcp dport 80`.
    Dport { proto: Protocol, port: u16 },
    /// `iifname veth*`, `iifname != cbr0`.
    Iifname { negated: bool, name: Ifname },
    /// `fib daddr type local`: the address is one of this host's.
    FibLocal(Dir),
    Ct(Ct),
    /// `mark and MASK == VALUE` (`!=` when negated).
    Mark { mask: Num, negated: bool, value: Num },
    /// `ip saddr . ip daddr . meta l4proto . th dport @set`: a key of two or more parts in
    /// a named set (one address part is [`Match::Addr`]).
    InSet { key: Concat, set: String },
    /// `numgen random mod N == K`: a fresh random number below N (one per expression the
    /// kernel evaluates) is K, so it holds for 1/N of the packets.
    Numgen { modulus: u32, value: u32 },
}

/// A verdict map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vmap {
    /// `ip daddr . meta l4proto . th dport vmap @map`.
    Named { key: Concat, map: String },
    /// `numgen random mod N vmap { 0 : goto a , 1 : goto b }`.
    Numgen { modulus: u32, arms: Vec<(u32, Verdict)> },
}

/// `mark set mark or M` / `xor M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkOp {
    Or,
    Xor,
}

/// Where a DNAT sends the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dnat {
    /// `dnat to 10.0.0.1:80`, `dnat to [fd00::1]:53`.
    To { addr: IpAddr, port: u16 },
    /// `dnat ip addr . port to numgen random mod N map { 0 : A . P , … }`.
    Numgen { family: IpFamily, modulus: u32, arms: Vec<(u32, IpAddr, u16)> },
}

/// A statement that acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `mark set mark or 0x4000`.
    MarkSet { op: MarkOp, value: Num },
    /// `masquerade`, `masquerade fully-random`.
    Masquerade { fully_random: bool },
    Dnat(Dnat),
    /// `update @set { ip saddr }`: the key added to a dynamic set.
    Update { set: String, key: Concat },
    /// `reject` (the family's default: port unreachable).
    Reject,
    /// `counter name "C"`: counts into the table's named counter `C`.
    Counter { name: String },
}

/// A verdict, as a rule's last statement or a verdict map's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

//! The statement values the renderer builds its rules from: shorthands for the forms it
//! writes often, and the [`Context`]'s text (the mark, the local-traffic detector, the
//! ServiceCIDRs) read into values.
//!
//! The context's text is read with the vocabulary's own reader. What it does not read (a
//! fixture's mark written `0X4000`, an interface name holding a `*`) stays text, and so does
//! the one rule holding it ([`rule`]): `nft -f` gets the words it always got.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::nftables::context::{Context, NftablesTable};
use crate::nftables::model::Rule;
use crate::nftables::names::MARK_MASQ;
use crate::nftables::stmt::{parse_body, Action, AddrValue, AnonSet, Body, Concat, Dir, MarkOp, Match, Num, Prefix, Selector, Sep, Stmt, Verdict, Vmap};

/// A rule's statements and comment.
pub fn body(stmts: impl IntoIterator<Item = Stmt>, comment: Option<&str>) -> Body {
    Body { stmts: stmts.into_iter().collect(), comment: comment.map(str::to_owned) }
}

/// A statement, or a piece of the context's text the vocabulary does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Value(Stmt),
    Text(String),
}

impl From<Stmt> for Piece {
    fn from(s: Stmt) -> Self {
        Piece::Value(s)
    }
}

/// A rule made with the context's text: of values when every piece is one, else of text
/// (the pieces' words, as they were always written).
pub fn rule(chain: &str, pieces: impl IntoIterator<Item = Piece>, comment: Option<&str>) -> Rule {
    let pieces: Vec<Piece> = pieces.into_iter().collect();
    if pieces.iter().all(|p| matches!(p, Piece::Value(_))) {
        let stmts = pieces.into_iter().filter_map(|p| if let Piece::Value(s) = p { Some(s) } else { None });
        return Rule::of(chain, body(stmts, comment));
    }
    let words: Vec<String> = pieces
        .iter()
        .map(|p| match p {
            Piece::Value(s) => s.to_string(),
            Piece::Text(t) => t.clone(),
        })
        .collect();
    Rule { comment: comment.map(str::to_owned), ..Rule::new(chain, words.join(" ")) }
}

/// `ip saddr VALUE` / `ip daddr VALUE` (`!=` when negated; `ip6` alike).
pub fn addr(ctx: &Context, dir: Dir, negated: bool, value: AddrValue) -> Stmt {
    Stmt::Match(Match::Addr { family: ctx.family, dir, negated, value })
}

/// `ip daddr VALUE` (`!=` when negated; `ip6` alike).
pub fn daddr(ctx: &Context, negated: bool, value: AddrValue) -> Stmt {
    addr(ctx, Dir::Daddr, negated, value)
}

/// One address, no prefix length.
pub fn host(ip: IpAddr) -> AddrValue {
    AddrValue::Prefix(Prefix { addr: ip, len: None })
}

/// `@NAME`.
pub fn named(set: &str) -> AddrValue {
    AddrValue::Named(set.into())
}

/// `KEY vmap @MAP`.
pub fn vmap(key: Vec<Selector>, map: &str) -> Stmt {
    Stmt::Vmap(Vmap::Named { key: Concat(key), map: map.into() })
}

/// `ip daddr . meta l4proto . th dport` (`ip6` alike): a service's address, protocol and port.
pub fn address_key(ctx: &Context) -> Vec<Selector> {
    vec![Selector::Addr(ctx.family, Dir::Daddr), Selector::L4proto, Selector::ThDport]
}

/// `meta l4proto . th dport`: a NodePort's protocol and port.
pub fn port_key() -> Vec<Selector> {
    vec![Selector::L4proto, Selector::ThDport]
}

/// `ip daddr 127.0.0.0/8` (`ip6 daddr ::1`), or `!=` when negated: loopback.
pub fn loopback(ctx: &Context, negated: bool) -> Stmt {
    let prefix = if ctx.ip_family.is_v6() {
        Prefix { addr: Ipv6Addr::LOCALHOST.into(), len: None }
    } else {
        Prefix { addr: Ipv4Addr::new(127, 0, 0, 0).into(), len: Some(8) }
    };
    daddr(ctx, negated, AddrValue::Prefix(prefix))
}

pub fn verdict(v: Verdict) -> Stmt {
    Stmt::Verdict(v)
}

/// `jump CHAIN`.
pub fn jump(chain: &str) -> Stmt {
    verdict(Verdict::Jump(chain.into()))
}

/// `goto CHAIN`.
pub fn goto(chain: &str) -> Stmt {
    verdict(Verdict::Goto(chain.into()))
}

pub fn action(a: Action) -> Stmt {
    Stmt::Action(a)
}

/// `masquerade fully-random`.
pub fn masquerade_fully_random() -> Stmt {
    action(Action::Masquerade { fully_random: true })
}

/// `mark and M == 0` (`!= 0` when negated): whether the masquerade mark is unset.
pub fn mark_is_zero(ctx: &Context, negated: bool) -> Piece {
    match mark(ctx) {
        Some(mask) => Stmt::Match(Match::Mark { mask, negated, value: Num::Dec(0) }).into(),
        None => Piece::Text(format!("mark and {} {} 0", ctx.mark, if negated { "!=" } else { "==" })),
    }
}

/// `mark set mark or M` / `xor M`: the masquerade mark set or cleared.
pub fn mark_set(ctx: &Context, op: MarkOp) -> Piece {
    match mark(ctx) {
        Some(value) => action(Action::MarkSet { op, value }).into(),
        None => Piece::Text(format!("mark set mark {} {}", if op == MarkOp::Or { "or" } else { "xor" }, ctx.mark)),
    }
}

/// What marks a packet for masquerade: v1.34's `jump mark-for-masquerade`, v1.36's mark
/// set inline.
pub fn mark_masq(ctx: &Context) -> Piece {
    match ctx.table {
        NftablesTable::V134 => jump(MARK_MASQ).into(),
        NftablesTable::V136 => mark_set(ctx, MarkOp::Or),
    }
}

fn mark(ctx: &Context) -> Option<Num> {
    ctx.mark.parse().ok()
}

/// The local-traffic detector's test (`ip saddr C`, `iifname veth*`), `None` without one.
pub fn if_local(ctx: &Context) -> Option<Piece> {
    ctx.detector.as_ref().map(|d| one_stmt(&d.if_local))
}

/// Its negation (`ip saddr != C`, `iifname != veth*`).
pub fn if_not_local(ctx: &Context) -> Option<Piece> {
    ctx.detector.as_ref().map(|d| one_stmt(&d.if_not_local))
}

/// One statement read from the context's text, or the text.
fn one_stmt(text: &str) -> Piece {
    match parse_body(text) {
        Ok(Body { mut stmts, comment: None }) if stmts.len() == 1 => Piece::Value(stmts.remove(0)),
        _ => Piece::Text(text.to_owned()),
    }
}

/// `ip daddr { A,B }`: the ServiceCIDRs of the family, `None` without any.
pub fn in_service_cidrs(ctx: &Context) -> Option<Piece> {
    let prefixes: Result<Vec<Prefix>, _> = ctx.service_cidrs.iter().map(|c| c.parse::<Prefix>()).collect();
    match prefixes.ok().and_then(|p| AnonSet::new(p, Sep::Tight)) {
        Some(set) => Some(daddr(ctx, false, AddrValue::Anon(set)).into()),
        None if ctx.service_cidrs.is_empty() => None,
        None => Some(Piece::Text(format!("{} daddr {{ {} }}", ctx.ip(), ctx.service_cidrs.join(",")))),
    }
}

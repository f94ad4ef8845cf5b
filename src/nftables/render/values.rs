//! The statement values the renderer builds its rules from: shorthands for the forms it
//! writes often, and the [`Context`]'s values (the mark, the local-traffic detector, the
//! ServiceCIDRs, read once where they enter) as statements.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::nftables::context::{Context, NftablesTable};
use crate::nftables::model::Rule;
use crate::nftables::names::MARK_MASQ;
use crate::nftables::stmt::{Action, AddrValue, AnonSet, Body, Concat, Dir, MarkOp, Match, Num, Prefix, Selector, Sep, Stmt, Verdict, Vmap};

/// A rule's statements and comment.
pub fn body(stmts: impl IntoIterator<Item = Stmt>, comment: Option<&str>) -> Body {
    Body { stmts: stmts.into_iter().collect(), comment: comment.map(str::to_owned) }
}

/// A rule of these statements and this comment.
pub fn rule(chain: &str, stmts: impl IntoIterator<Item = Stmt>, comment: Option<&str>) -> Rule {
    Rule::of(chain, body(stmts, comment))
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
    let prefix = if ctx.family.is_v6() {
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
pub fn mark_is_zero(ctx: &Context, negated: bool) -> Stmt {
    Stmt::Match(Match::Mark { mask: ctx.mark, negated, value: Num::Dec(0) })
}

/// `mark set mark or M` / `xor M`: the masquerade mark set or cleared.
pub fn mark_set(ctx: &Context, op: MarkOp) -> Stmt {
    action(Action::MarkSet { op, value: ctx.mark })
}

/// What marks a packet for masquerade: v1.34's `jump mark-for-masquerade`, v1.36's mark
/// set inline.
pub fn mark_masq(ctx: &Context) -> Stmt {
    match ctx.table {
        NftablesTable::V134 => jump(MARK_MASQ),
        NftablesTable::V136 => mark_set(ctx, MarkOp::Or),
    }
}

/// The local-traffic detector's test (`ip saddr C`, `iifname veth*`), `None` without one.
pub fn if_local(ctx: &Context) -> Option<Stmt> {
    ctx.detector.as_ref().map(|d| Stmt::Match(d.if_local.clone()))
}

/// Its negation (`ip saddr != C`, `iifname != veth*`).
pub fn if_not_local(ctx: &Context) -> Option<Stmt> {
    ctx.detector.as_ref().map(|d| Stmt::Match(d.if_not_local.clone()))
}

/// `ip daddr { A,B }`: the ServiceCIDRs of the family, `None` without any.
pub fn in_service_cidrs(ctx: &Context) -> Option<Stmt> {
    AnonSet::new(ctx.service_cidrs.clone(), Sep::Tight).map(|set| daddr(ctx, false, AddrValue::Anon(set)))
}

//! The one writer of statements: the exact words `nft -f` reads, as kube-proxy writes them.

use std::fmt::{self, Display, Formatter};

use super::*;
use crate::net::join_host_port;
use crate::nftables::model::NftFamily;

impl Display for AddRule {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "add rule {} {} {} {}", self.family.nft_word(), self.table, self.chain, self.body)
    }
}

/// Statements without the comment: what `model::Rule::rule` holds.
pub struct Stmts<'a>(pub &'a [Stmt]);

impl Display for Stmts<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        join(f, self.0, " ", |f, s| s.fmt(f))
    }
}

/// `items`, each written by `item`, with `sep` between them.
fn join<T>(f: &mut Formatter<'_>, items: &[T], sep: &str, item: impl Fn(&mut Formatter<'_>, &T) -> fmt::Result) -> fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        item(f, x)?;
    }
    Ok(())
}

impl Display for Body {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        Stmts(&self.stmts).fmt(f)?;
        if let Some(c) = &self.comment {
            // nft reads the comment as one quoted string (kube-proxy's hold no quote).
            write!(f, " comment \"{c}\"")?;
        }
        Ok(())
    }
}

impl Display for Stmt {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Stmt::Match(m) => m.fmt(f),
            Stmt::Vmap(v) => v.fmt(f),
            Stmt::Action(a) => a.fmt(f),
            Stmt::Verdict(v) => v.fmt(f),
        }
    }
}

impl Display for Dir {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::Saddr => "saddr",
            Dir::Daddr => "daddr",
        })
    }
}

impl Display for Selector {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Addr(fam, dir) => write!(f, "{} {dir}", fam.nft_word()),
            Selector::L4proto => f.write_str("meta l4proto"),
            Selector::ThDport => f.write_str("th dport"),
        }
    }
}

impl Display for Concat {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        join(f, &self.0, " . ", |f, s| s.fmt(f))
    }
}

impl Display for Prefix {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.len {
            Some(len) => write!(f, "{}/{len}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

impl Display for AnonSet {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let sep = match self.sep {
            Sep::Tight => ",",
            Sep::Spaced => " , ",
        };
        f.write_str("{ ")?;
        join(f, &self.items, sep, |f, p| p.fmt(f))?;
        f.write_str(" }")
    }
}

impl Display for AddrValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            AddrValue::Prefix(p) => p.fmt(f),
            AddrValue::Anon(s) => s.fmt(f),
            AddrValue::Named(n) => write!(f, "@{n}"),
        }
    }
}

impl Display for Ifname {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.wildcard {
            f.write_str("*")?;
        }
        Ok(())
    }
}

impl Display for Num {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match *self {
            Num::Dec(v) => write!(f, "{v}"),
            Num::Hex { value, digits } => write!(f, "0x{value:0width$x}", width = usize::from(digits)),
        }
    }
}

/// `!= ` before a negated value, nothing before another.
fn not(negated: bool) -> &'static str {
    if negated { "!= " } else { "" }
}

impl Display for Match {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Match::Addr { family, dir, negated, value } => write!(f, "{} {dir} {}{value}", family.nft_word(), not(*negated)),
            Match::L4proto(p) => write!(f, "meta l4proto {}", p.lower()),
            Match::Dport { proto, port } => write!(f, "{} dport {port}", proto.lower()),
            Match::Iifname { negated, name } => write!(f, "iifname {}{name}", not(*negated)),
            Match::FibLocal(dir) => write!(f, "fib {dir} type local"),
            Match::Ct(Ct::StateNew) => f.write_str("ct state new"),
            Match::Ct(Ct::StatusDnat) => f.write_str("ct status dnat"),
            Match::Mark { mask, negated, value } => {
                write!(f, "mark and {mask} {} {value}", if *negated { "!=" } else { "==" })
            }
            Match::InSet { key, set } => write!(f, "{key} @{set}"),
            Match::Numgen { modulus, value } => write!(f, "numgen random mod {modulus} == {value}"),
        }
    }
}

impl Display for Vmap {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Vmap::Named { key, map } => write!(f, "{key} vmap @{map}"),
            Vmap::Numgen { modulus, arms } => {
                write!(f, "numgen random mod {modulus} vmap {{ ")?;
                join(f, arms, " , ", |f, (k, v)| write!(f, "{k} : {v}"))?;
                f.write_str(" }")
            }
        }
    }
}

impl Display for Dnat {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Dnat::To { addr, port } => write!(f, "dnat to {}", join_host_port(addr, *port)),
            Dnat::Numgen { family, modulus, arms } => {
                write!(f, "dnat {} addr . port to numgen random mod {modulus} map {{ ", family.nft_word())?;
                join(f, arms, " , ", |f, (k, addr, port)| write!(f, "{k} : {addr} . {port}"))?;
                f.write_str(" }")
            }
        }
    }
}

impl Display for Action {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Action::MarkSet { op: MarkOp::Or, value } => write!(f, "mark set mark or {value}"),
            Action::MarkSet { op: MarkOp::Xor, value } => write!(f, "mark set mark xor {value}"),
            Action::Masquerade { fully_random: true } => f.write_str("masquerade fully-random"),
            Action::Masquerade { fully_random: false } => f.write_str("masquerade"),
            Action::Dnat(d) => d.fmt(f),
            Action::Update { set, key } => write!(f, "update @{set} {{ {key} }}"),
            Action::Reject => f.write_str("reject"),
            Action::Counter { name } => write!(f, "counter name \"{name}\""),
        }
    }
}

impl Display for Verdict {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Return => f.write_str("return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

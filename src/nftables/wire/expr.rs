//! A rule's statements ([`crate::nftables::stmt`]'s values, read once from the text
//! svcproxy's renderer writes) → nf_tables expressions, exactly as nft 1.0.6 encodes them,
//! so that `nft list` prints the rule back as it prints nft's own: the register choice of
//! concatenations, prefixes loaded as whole bytes (or the whole address and masked), a
//! one-element anonymous set turned into a comparison, merged intervals of an anonymous
//! set, numgen's anonymous verdict map, and kube-proxy v1.37's forms (inline `mark set mark
//! or M` after any match, `mark and M != 0`, `ct status dnat`, a concatenation looked up in
//! a named set, `dnat ip addr . port to numgen … map { … }` with its anonymous map of
//! address . port), and `numgen random mod N == K` (the cold start's interim table).
//! Every statement is matched: a form the encoder does not send is refused by name
//! ([`Unsupported`], so the transaction goes through `nft -f`).

use std::net::IpAddr;

use super::attr::Attrs;
use super::batch::{Batch, Unsupported};
use super::WireFamily;
use crate::net::IpFamily;

use super::nfta::{self, reg};
use crate::nftables::stmt::{self, Action, AddrValue, Body, Concat, Dir, Dnat, Match, MarkOp, Selector, Stmt, Vmap};

use super::nfta::cmp::{EQ as CMP_EQ, NEQ as CMP_NEQ};
use super::nfta::meta::{IIFNAME as META_IIFNAME, L4PROTO as META_L4PROTO, MARK as META_MARK};
use super::nfta::payload::{NETWORK_HEADER as NFT_PAYLOAD_NETWORK, TRANSPORT_HEADER as NFT_PAYLOAD_TRANSPORT};

pub const VERDICT_DROP: i32 = 0;
pub const VERDICT_ACCEPT: i32 = 1;
pub const VERDICT_JUMP: i32 = -3;
pub const VERDICT_GOTO: i32 = -4;
pub const VERDICT_RETURN: i32 = -5;

/// An expression list being built.
struct Exprs(Attrs);

impl Exprs {
    fn expr(&mut self, name: &str, f: impl FnOnce(&mut Attrs)) {
        use nfta::expr as e;
        self.0.nest(e::LIST_ELEM, |x| {
            x.str(e::NAME, name);
            x.nest(e::DATA, f);
        });
    }

    fn payload(&mut self, dreg: u32, base: u32, offset: u32, len: u32) {
        use nfta::payload as p;
        self.expr("payload", |a| {
            a.be32(p::DREG, dreg).be32(p::BASE, base).be32(p::OFFSET, offset).be32(p::LEN, len);
        });
    }

    fn cmp(&mut self, op: u32, data: &[u8]) {
        use nfta::cmp as c;
        self.expr("cmp", |a| {
            a.be32(c::SREG, reg::R1).be32(c::OP, op).nest(c::DATA, |d| {
                d.bytes(nfta::expr::DATA_VALUE, data);
            });
        });
    }

    /// `with_op`: nft writes the boolean operation attribute for `mark` arithmetic only.
    fn bitwise(&mut self, mask: &[u8], xor: &[u8], with_op: bool) {
        use nfta::bitwise as b;
        self.expr("bitwise", |a| {
            a.be32(b::SREG, reg::R1).be32(b::DREG, reg::R1);
            if with_op {
                a.be32(b::OP, b::BOOL);
            }
            a.be32(b::LEN, mask.len() as u32).nest(b::MASK, |m| {
                m.bytes(nfta::expr::DATA_VALUE, mask);
            });
            a.nest(b::XOR, |x| {
                x.bytes(nfta::expr::DATA_VALUE, xor);
            });
        });
    }

    fn meta_load(&mut self, key: u32, dreg: u32) {
        use nfta::meta as m;
        self.expr("meta", |a| {
            a.be32(m::KEY, key).be32(m::DREG, dreg);
        });
    }

    fn verdict(&mut self, code: i32, chain: Option<&str>) {
        use nfta::immediate as i;
        self.expr("immediate", |a| {
            a.be32(i::DREG, reg::VERDICT).nest(i::DATA, |d| {
                verdict_data(d, code, chain);
            });
        });
    }

    fn immediate(&mut self, dreg: u32, data: &[u8]) {
        use nfta::immediate as i;
        self.expr("immediate", |a| {
            a.be32(i::DREG, dreg).nest(i::DATA, |d| {
                d.bytes(nfta::expr::DATA_VALUE, data);
            });
        });
    }

    /// `numgen random mod n` into register 1.
    fn numgen(&mut self, n: u32) {
        use nfta::numgen as g;
        self.expr("numgen", |a| {
            a.be32(g::DREG, reg::R1).be32(g::MODULUS, n).be32(g::TYPE, g::RANDOM).be32(g::OFFSET, 0);
        });
    }

    fn lookup(&mut self, set: &str, id: Option<u32>, dreg: Option<u32>, inverted: bool) {
        use nfta::lookup as l;
        self.expr("lookup", |a| {
            a.be32(l::SREG, reg::R1);
            if let Some(d) = dreg {
                a.be32(l::DREG, d);
            }
            a.str(l::SET, set);
            if let Some(id) = id {
                a.be32(l::SET_ID, id);
            }
            if inverted {
                a.be32(l::FLAGS, l::F_INV);
            }
        });
    }
}

/// `NFTA_DATA_VERDICT` inside a data attribute.
pub fn verdict_data(d: &mut Attrs, code: i32, chain: Option<&str>) {
    use nfta::expr as e;
    d.nest(e::DATA_VERDICT, |v| {
        v.be32(e::VERDICT_CODE, code as u32);
        if let Some(c) = chain {
            v.str(e::VERDICT_CHAIN, c);
        }
    });
}

/// The register nft loads the part of a concatenation at byte `offset` into.
fn concat_reg(offset: u32) -> u32 {
    if offset.is_multiple_of(16) { 1 + offset / 16 } else { 8 + offset / 4 }
}

/// A protocol's number (`meta l4proto`, an `inet_proto` key part): every `IPPROTO_*` of
/// [`stmt::Protocol`] fits a byte.
pub fn proto_byte(p: stmt::Protocol) -> u8 {
    p.number() as u8
}

/// An address of the family, as bytes (`None`: the other family's).
pub fn ip_bytes(fam: IpFamily, ip: IpAddr) -> Option<Vec<u8>> {
    match (fam, ip) {
        (IpFamily::V4, IpAddr::V4(a)) => Some(a.octets().to_vec()),
        (IpFamily::V6, IpAddr::V6(a)) => Some(a.octets().to_vec()),
        _ => None,
    }
}

/// An address and prefix length (`None`: the whole address) → (bytes, length), the host
/// bits cleared.
fn prefix_bytes(fam: IpFamily, p: &stmt::Prefix) -> Option<(Vec<u8>, u32)> {
    let len = p.len.map_or(fam.addr_len() * 8, u32::from);
    let mut bytes = ip_bytes(fam, p.addr)?;
    if len > fam.addr_len() * 8 {
        return None;
    }
    bytes.iter_mut().zip(mask(len, fam.addr_len() as usize)).for_each(|(b, m)| *b &= m);
    Some((bytes, len))
}

/// The mask of a prefix of `len` bits over `n` bytes.
fn mask(len: u32, n: usize) -> Vec<u8> {
    let bits = |i: usize| (len as usize).saturating_sub(i * 8).min(8);
    (0..n).map(|i| if bits(i) == 0 { 0 } else { 0xffu8 << (8 - bits(i)) }).collect()
}

/// An address or prefix compared: a byte-aligned prefix loads only its bytes; another
/// (`/0` too) loads the whole address and masks it.
fn compare(fam: IpFamily, off: u32, value: &stmt::Prefix, neg: bool, x: &mut Exprs) -> Option<()> {
    let (bytes, len) = prefix_bytes(fam, value)?;
    let op = if neg { CMP_NEQ } else { CMP_EQ };
    if len % 8 == 0 && len > 0 {
        let n = (len / 8) as usize;
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, n as u32);
        x.cmp(op, &bytes[..n]);
    } else {
        let full = fam.addr_len();
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, full);
        x.bitwise(&mask(len, full as usize), &vec![0u8; full as usize], false);
        x.cmp(op, &bytes);
    }
    Some(())
}

/// One part of a concatenation: what it loads and how many bytes of the key it takes.
#[derive(Debug, Clone, Copy)]
enum Sel {
    /// `ip saddr` / `ip daddr` (… `ip6`): the address at this network header offset.
    Addr(u32),
    /// `meta l4proto`.
    L4proto,
    /// `th dport`.
    Dport,
}

impl Sel {
    /// Its bytes in a concatenation's key (each part padded to four).
    fn len(self, fam: IpFamily) -> u32 {
        match self {
            Sel::Addr(_) => fam.addr_len(),
            Sel::L4proto | Sel::Dport => 4,
        }
    }

    fn load(self, fam: IpFamily, x: &mut Exprs, reg: u32) {
        match self {
            Sel::Addr(off) => x.payload(reg, NFT_PAYLOAD_NETWORK, off, fam.addr_len()),
            Sel::L4proto => x.meta_load(META_L4PROTO, reg),
            // The destination port: bytes 2-3 of the TCP, UDP and SCTP headers alike.
            Sel::Dport => x.payload(reg, NFT_PAYLOAD_TRANSPORT, 2, 2),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The statements. Every one of the vocabulary is matched here, so a new form does not
// compile until it is encoded (or refused by name).

/// Encodes one rule's statements; anonymous sets it needs go into `b` first.
pub fn body(b: &mut Batch, fam: IpFamily, table: &str, body: &Body) -> Result<Attrs, Unsupported> {
    let mut x = Exprs(Attrs::default());
    for st in &body.stmts {
        stmt(b, fam, table, st, &mut x)?;
    }
    Ok(x.0)
}

fn refused(what: &str) -> Unsupported {
    Unsupported(format!("{what} (not in the netlink encoder)"))
}

fn stmt(b: &mut Batch, fam: IpFamily, table: &str, st: &Stmt, x: &mut Exprs) -> Result<(), Unsupported> {
    let bad = |what: &str| Unsupported(what.to_owned());
    match st {
        Stmt::Match(m) => match m {
            Match::Addr { family, dir, negated, value } => {
                if *family != fam {
                    return Err(bad("an address of the other family"));
                }
                let off = off_of(fam, *dir);
                match value {
                    AddrValue::Named(set) => {
                        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, fam.addr_len());
                        x.lookup(set, b.set_id(fam, set), None, *negated);
                    }
                    AddrValue::Prefix(p) => compare(fam, off, p, *negated, x).ok_or_else(|| bad("an address"))?,
                    AddrValue::Anon(set) if set.items().len() == 1 => {
                        compare(fam, off, &set.items()[0], *negated, x).ok_or_else(|| bad("an address"))?;
                    }
                    AddrValue::Anon(set) => {
                        let (id, name) = super::anon::interval_set(b, fam, table, *dir == Dir::Saddr, set.items()).ok_or_else(|| bad("an anonymous set"))?;
                        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, fam.addr_len());
                        x.lookup(&name, Some(id), None, *negated);
                    }
                }
            }
            Match::L4proto(p) => {
                x.meta_load(META_L4PROTO, reg::R1);
                x.cmp(CMP_EQ, &[proto_byte(*p)]);
            }
            Match::Dport { .. } => return Err(refused("`PROTO dport N`")),
            Match::Iifname { negated, name } => {
                let data = if name.wildcard {
                    name.name.as_bytes().to_vec()
                } else {
                    let mut v = name.name.as_bytes().to_vec();
                    if v.len() >= 16 {
                        return Err(bad("an interface name of 16 bytes or more"));
                    }
                    v.resize(16, 0);
                    v
                };
                x.meta_load(META_IIFNAME, reg::R1);
                x.cmp(if *negated { CMP_NEQ } else { CMP_EQ }, &data);
            }
            Match::FibLocal(dir) => {
                use nfta::fib;
                let flags = if *dir == Dir::Saddr { fib::F_SADDR } else { fib::F_DADDR };
                x.expr("fib", |a| {
                    a.be32(fib::FLAGS, flags).be32(fib::RESULT, fib::RESULT_ADDRTYPE).be32(fib::DREG, reg::R1);
                });
                x.cmp(CMP_EQ, &fib::RTN_LOCAL.to_ne_bytes());
            }
            Match::Ct(c) => {
                use nfta::ct;
                let (key, bit) = match c {
                    stmt::Ct::StateNew => (ct::STATE, ct::STATE_NEW),
                    stmt::Ct::StatusDnat => (ct::STATUS, ct::STATUS_DNAT),
                };
                x.expr("ct", |a| {
                    a.be32(ct::KEY, key).be32(ct::DREG, reg::R1);
                });
                x.bitwise(&bit.to_ne_bytes(), &[0; 4], false);
                x.cmp(CMP_NEQ, &[0; 4]);
            }
            Match::Mark { mask, negated, value } => {
                x.meta_load(META_MARK, reg::R1);
                x.bitwise(&mask.value().to_ne_bytes(), &[0; 4], true);
                x.cmp(if *negated { CMP_NEQ } else { CMP_EQ }, &value.value().to_ne_bytes());
            }
            Match::InSet { key, set } => {
                load_key(fam, key, x)?;
                x.lookup(set, b.set_id(fam, set), None, false);
            }
            Match::Numgen { modulus, value } => {
                // The random number is a host-order integer in the register.
                x.numgen(*modulus);
                x.cmp(CMP_EQ, &value.to_ne_bytes());
            }
        },
        Stmt::Vmap(v) => match v {
            Vmap::Named { key, map } => {
                load_key(fam, key, x)?;
                x.lookup(map, b.set_id(fam, map), Some(reg::VERDICT), false);
            }
            Vmap::Numgen { modulus, arms } => {
                let arms: Vec<(u32, i32, Option<String>)> = arms.iter().map(|(k, v)| (*k, verdict_code(v).0, verdict_code(v).1.map(str::to_owned))).collect();
                let (id, name) = super::anon::verdict_map(b, fam, table, &arms);
                x.numgen(*modulus);
                x.lookup(&name, Some(id), Some(reg::VERDICT), false);
            }
        },
        Stmt::Action(a) => match a {
            Action::MarkSet { op, value } => {
                let m = value.value();
                let (mask, xor) = match op {
                    MarkOp::Or => (!m, m),
                    MarkOp::Xor => (u32::MAX, m),
                };
                x.meta_load(META_MARK, reg::R1);
                x.bitwise(&mask.to_ne_bytes(), &xor.to_ne_bytes(), true);
                x.expr("meta", |a| {
                    a.be32(nfta::meta::KEY, META_MARK).be32(nfta::meta::SREG, reg::R1);
                });
            }
            Action::Masquerade { fully_random } => {
                x.expr("masq", |a| {
                    if *fully_random {
                        a.be32(nfta::masq::FLAGS, nfta::masq::RANDOM_FULLY);
                    }
                });
            }
            Action::Dnat(Dnat::To { addr: ip, port }) => {
                use nfta::nat;
                let ip = ip_bytes(fam, *ip).ok_or_else(|| bad("a DNAT address of the other family"))?;
                x.immediate(reg::R1, &ip);
                x.immediate(reg::R2, &port.to_be_bytes());
                x.expr("nat", |a| {
                    a.be32(nat::TYPE, nat::DNAT).be32(nat::FAMILY, fam.nfproto() as u32).be32(nat::REG_ADDR_MIN, reg::R1);
                    a.be32(nat::REG_PROTO_MIN, reg::R2).be32(nat::FLAGS, nat::PROTO_SPECIFIED);
                });
            }
            Action::Dnat(Dnat::Numgen { family, modulus, arms }) => {
                if *family != fam {
                    return Err(bad("a DNAT map of the other family"));
                }
                let mut data_arms = Vec::with_capacity(arms.len());
                for (k, ip, port) in arms {
                    let mut data = ip_bytes(fam, *ip).ok_or_else(|| bad("a DNAT address of the other family"))?;
                    data.extend(port.to_be_bytes());
                    data.extend([0, 0]);
                    data_arms.push((*k, data));
                }
                let (id, name) = super::anon::data_map(b, fam, table, &data_arms);
                x.numgen(*modulus);
                x.lookup(&name, Some(id), Some(reg::R1), false);
                let port_reg = concat_reg(fam.addr_len());
                use nfta::nat;
                x.expr("nat", |a| {
                    a.be32(nat::TYPE, nat::DNAT).be32(nat::FAMILY, fam.nfproto() as u32).be32(nat::REG_ADDR_MIN, reg::R1).be32(nat::REG_PROTO_MIN, port_reg);
                });
            }
            Action::Update { set, key } => {
                // nft's dynset of kube-proxy's affinity sets: the source address only.
                let [Selector::Addr(family, Dir::Saddr)] = key.0.as_slice() else { return Err(refused("an update key other than the source address")) };
                if *family != fam {
                    return Err(bad("an update key of the other family"));
                }
                x.payload(reg::R1, NFT_PAYLOAD_NETWORK, fam.saddr_off(), fam.addr_len());
                let id = b.set_id(fam, set);
                use nfta::dynset as d;
                x.expr("dynset", |a| {
                    a.be32(d::SREG_KEY, reg::R1).be32(d::OP, d::OP_UPDATE).str(d::SET_NAME, set);
                    if let Some(id) = id {
                        a.be32(d::SET_ID, id);
                    }
                });
            }
            Action::Reject => {
                let code = fam.reject_code();
                x.expr("reject", |a| {
                    a.be32(nfta::reject::TYPE, nfta::reject::ICMP_UNREACH).bytes(nfta::reject::ICMP_CODE, &[code]);
                });
            }
            Action::Counter { name } => {
                // nftnl puts the name without its NUL (unlike the other strings).
                x.expr("objref", |a| {
                    a.be32(nfta::objref::IMM_TYPE, nfta::obj::COUNTER).bytes(nfta::objref::IMM_NAME, name.as_bytes());
                });
            }
        },
        Stmt::Verdict(v) => {
            let (code, chain) = verdict_code(v);
            x.verdict(code, chain);
        }
    }
    Ok(())
}

fn off_of(fam: IpFamily, dir: Dir) -> u32 {
    match dir {
        Dir::Saddr => fam.saddr_off(),
        Dir::Daddr => fam.daddr_off(),
    }
}

/// A verdict's code and chain, as `NFTA_DATA_VERDICT` holds them.
pub fn verdict_code(v: &stmt::Verdict) -> (i32, Option<&str>) {
    match v {
        stmt::Verdict::Accept => (VERDICT_ACCEPT, None),
        stmt::Verdict::Drop => (VERDICT_DROP, None),
        stmt::Verdict::Return => (VERDICT_RETURN, None),
        stmt::Verdict::Jump(c) => (VERDICT_JUMP, Some(c)),
        stmt::Verdict::Goto(c) => (VERDICT_GOTO, Some(c)),
    }
}

/// Each part of a concatenated key loaded, in order, into the register nft gives its
/// byte offset in the key.
fn load_key(fam: IpFamily, key: &Concat, x: &mut Exprs) -> Result<(), Unsupported> {
    let mut at = 0;
    for sel in &key.0 {
        let s = match sel {
            Selector::Addr(family, _) if *family != fam => return Err(Unsupported("a key part of the other family".into())),
            Selector::Addr(_, dir) => Sel::Addr(off_of(fam, *dir)),
            Selector::L4proto => Sel::L4proto,
            Selector::ThDport => Sel::Dport,
        };
        s.load(fam, x, concat_reg(at));
        at += s.len(fam);
    }
    Ok(())
}

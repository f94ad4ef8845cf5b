//! A rule's words (the vocabulary svcproxy's nftables renderer writes, as kube-proxy
//! writes it) → nf_tables expressions, exactly as nft 1.0.6 encodes them, so that
//! `nft list` prints the rule back as it prints nft's own: the register choice of
//! concatenations, prefixes loaded as whole bytes (or the whole address and masked), a
//! one-element anonymous set turned into a comparison, merged intervals of an anonymous
//! set, numgen's anonymous verdict map, and kube-proxy v1.37's forms (inline `mark set mark
//! or M` after any match, `mark and M != 0`, `ct status dnat`, a concatenation looked up in
//! a named set, `dnat ip addr . port to numgen … map { … }` with its anonymous map of
//! address . port). Anything else is [`Unsupported`].

use std::net::IpAddr;

use super::attr::Attrs;
use super::batch::{Batch, Unsupported};
use super::tokens::Cursor;
use super::Family;

use super::nfta::{self, reg};

const NFT_PAYLOAD_NETWORK: u32 = nfta::payload::NETWORK_HEADER;
const NFT_PAYLOAD_TRANSPORT: u32 = nfta::payload::TRANSPORT_HEADER;
const CMP_EQ: u32 = nfta::cmp::EQ;
const CMP_NEQ: u32 = nfta::cmp::NEQ;
const META_MARK: u32 = nfta::meta::MARK;
const META_IIFNAME: u32 = nfta::meta::IIFNAME;
const META_L4PROTO: u32 = nfta::meta::L4PROTO;
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

/// `verdict [chain]` words → (code, chain).
pub fn verdict<'a>(word: &str, cur: &mut Cursor<'a>) -> Option<(i32, Option<&'a str>)> {
    Some(match word {
        "jump" => (VERDICT_JUMP, Some(cur.word()?)),
        "goto" => (VERDICT_GOTO, Some(cur.word()?)),
        "drop" => (VERDICT_DROP, None),
        "accept" => (VERDICT_ACCEPT, None),
        "return" => (VERDICT_RETURN, None),
        _ => return None,
    })
}

pub fn proto_number(p: &str) -> Option<u8> {
    match p {
        "tcp" => Some(nfta::proto::TCP),
        "udp" => Some(nfta::proto::UDP),
        "sctp" => Some(nfta::proto::SCTP),
        _ => None,
    }
}

/// An address of the family, as bytes.
pub fn addr(fam: Family, s: &str) -> Option<Vec<u8>> {
    match (fam, s.parse::<IpAddr>().ok()?) {
        (Family::Ip, IpAddr::V4(a)) => Some(a.octets().to_vec()),
        (Family::Ip6, IpAddr::V6(a)) => Some(a.octets().to_vec()),
        _ => None,
    }
}

/// `ADDR` or `ADDR/LEN` → (bytes, prefix length), the host bits cleared.
fn prefix(fam: Family, s: &str) -> Option<(Vec<u8>, u32)> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, l.parse::<u32>().ok()?),
        None => (s, fam.addr_len() * 8),
    };
    let mut bytes = addr(fam, a)?;
    if len > fam.addr_len() * 8 {
        return None;
    }
    for (i, b) in bytes.iter_mut().enumerate() {
        let bits = (len as usize).saturating_sub(i * 8).min(8);
        *b &= if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
    }
    Some((bytes, len))
}

/// Encodes one rule's words; anonymous sets it needs go into `b` first.
pub fn rule(b: &mut Batch, fam: Family, table: &str, cur: &mut Cursor<'_>) -> Result<(Attrs, Option<String>), Unsupported> {
    let mut x = Exprs(Attrs::default());
    let mut comment = None;
    while let Some(w) = cur.word() {
        statement(b, fam, table, w, cur, &mut x, &mut comment).ok_or_else(|| Unsupported(format!("rule word {w:?}")))?;
    }
    if !cur.done() {
        return Err(Unsupported("a quoted string where a word belongs".into()));
    }
    Ok((x.0, comment))
}

fn statement<'a>(b: &mut Batch, fam: Family, table: &str, w: &'a str, cur: &mut Cursor<'a>, x: &mut Exprs, comment: &mut Option<String>) -> Option<()> {
    match w {
        "comment" => *comment = Some(cur.quoted()?.to_owned()),
        "ct" => {
            // `ct state new` (NFT_CT_STATE, IP_CT_NEW's bit) / `ct status dnat`
            // (NFT_CT_STATUS, IPS_DST_NAT): the key loaded, its bit tested.
            use nfta::ct;
            let (key, bit) = match (cur.word()?, cur.word()?) {
                ("state", "new") => (ct::STATE, ct::STATE_NEW),
                ("status", "dnat") => (ct::STATUS, ct::STATUS_DNAT),
                _ => return None,
            };
            x.expr("ct", |a| {
                a.be32(ct::KEY, key).be32(ct::DREG, reg::R1);
            });
            x.bitwise(&bit.to_ne_bytes(), &[0; 4], false);
            x.cmp(CMP_NEQ, &[0; 4]);
        }
        "ip" | "ip6" => {
            if (w == "ip") != (fam == Family::Ip) {
                return None;
            }
            address_match(b, fam, table, cur, x)?;
        }
        "meta" => {
            cur.expect("l4proto")?;
            if cur.eat(".") {
                concat(b, fam, Sel::L4proto, cur, x)?;
            } else {
                let p = proto_number(cur.word()?)?;
                x.meta_load(META_L4PROTO, reg::R1);
                x.cmp(CMP_EQ, &[p]);
            }
        }
        "fib" => {
            use nfta::fib;
            let flags = match cur.word()? {
                "saddr" => fib::F_SADDR,
                "daddr" => fib::F_DADDR,
                _ => return None,
            };
            cur.expect("type")?;
            cur.expect("local")?;
            x.expr("fib", |a| {
                a.be32(fib::FLAGS, flags).be32(fib::RESULT, fib::RESULT_ADDRTYPE).be32(fib::DREG, reg::R1);
            });
            x.cmp(CMP_EQ, &fib::RTN_LOCAL.to_ne_bytes());
        }
        "iifname" => {
            let neg = cur.eat("!=");
            let name = cur.word()?;
            let data = match name.strip_suffix('*') {
                Some(p) => p.as_bytes().to_vec(),
                None => {
                    let mut v = name.as_bytes().to_vec();
                    if v.len() >= 16 {
                        return None;
                    }
                    v.resize(16, 0);
                    v
                }
            };
            x.meta_load(META_IIFNAME, reg::R1);
            x.cmp(if neg { CMP_NEQ } else { CMP_EQ }, &data);
        }
        "numgen" => numgen(b, fam, table, cur, x)?,
        "update" => {
            let set = cur.word()?.strip_prefix('@')?;
            cur.expect("{")?;
            let ip = cur.word()?;
            if (ip == "ip") != (fam == Family::Ip) {
                return None;
            }
            cur.expect("saddr")?;
            cur.expect("}")?;
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
        "mark" => mark(cur, x)?,
        "masquerade" => {
            let flags = if cur.eat("fully-random") { nfta::masq::RANDOM_FULLY } else { 0 };
            x.expr("masq", |a| {
                if flags != 0 {
                    a.be32(nfta::masq::FLAGS, flags);
                }
            });
        }
        "dnat" => {
            if !cur.eat("to") {
                return dnat_map(b, fam, table, cur, x);
            }
            let (ip, port) = dnat_target(fam, cur.word()?)?;
            use nfta::nat;
            x.immediate(reg::R1, &ip);
            x.immediate(reg::R2, &port.to_be_bytes());
            x.expr("nat", |a| {
                a.be32(nat::TYPE, nat::DNAT).be32(nat::FAMILY, fam.nfproto() as u32).be32(nat::REG_ADDR_MIN, reg::R1);
                a.be32(nat::REG_PROTO_MIN, reg::R2).be32(nat::FLAGS, nat::PROTO_SPECIFIED);
            });
        }
        "counter" => {
            // `counter name "C"`: a reference to the table's named counter C.
            cur.expect("name")?;
            let name = cur.quoted()?;
            // nftnl puts the name without its NUL (unlike the other strings).
            x.expr("objref", |a| {
                a.be32(nfta::objref::IMM_TYPE, nfta::obj::COUNTER).bytes(nfta::objref::IMM_NAME, name.as_bytes());
            });
        }
        "reject" => {
            let code = fam.reject_code();
            x.expr("reject", |a| {
                a.be32(nfta::reject::TYPE, nfta::reject::ICMP_UNREACH).bytes(nfta::reject::ICMP_CODE, &[code]);
            });
        }
        other => {
            let (code, chain) = verdict(other, cur)?;
            x.verdict(code, chain);
        }
    }
    Some(())
}

/// `ip daddr|saddr …` after the family word.
fn address_match(b: &mut Batch, fam: Family, table: &str, cur: &mut Cursor<'_>, x: &mut Exprs) -> Option<()> {
    let (off, saddr) = match cur.word()? {
        "saddr" => (fam.saddr_off(), true),
        "daddr" => (fam.daddr_off(), false),
        _ => return None,
    };
    if cur.eat(".") {
        return concat(b, fam, Sel::Addr(off), cur, x);
    }
    let neg = cur.eat("!=");
    let value = cur.word()?;
    if let Some(set) = value.strip_prefix('@') {
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, fam.addr_len());
        let id = b.set_id(fam, set);
        x.lookup(set, id, None, neg);
        return Some(());
    }
    if value == "{" {
        let items = cur.braced()?;
        if items.len() == 1 {
            return compare(fam, off, items[0], neg, x);
        }
        let (id, name) = super::anon::interval_set(b, fam, table, saddr, &items)?;
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, fam.addr_len());
        x.lookup(&name, Some(id), None, neg);
        return Some(());
    }
    compare(fam, off, value, neg, x)
}

/// An address or prefix compared: a byte-aligned prefix loads only its bytes; another
/// (`/0` too) loads the whole address and masks it.
fn compare(fam: Family, off: u32, value: &str, neg: bool, x: &mut Exprs) -> Option<()> {
    let (bytes, len) = prefix(fam, value)?;
    let op = if neg { CMP_NEQ } else { CMP_EQ };
    if len % 8 == 0 && len > 0 {
        let n = (len / 8) as usize;
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, n as u32);
        x.cmp(op, &bytes[..n]);
    } else {
        let full = fam.addr_len();
        x.payload(reg::R1, NFT_PAYLOAD_NETWORK, off, full);
        let mut mask = vec![0u8; full as usize];
        for (i, m) in mask.iter_mut().enumerate() {
            let bits = (len as usize).saturating_sub(i * 8).min(8);
            *m = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
        }
        x.bitwise(&mask, &vec![0u8; full as usize], false);
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
    /// The selector `first` (already taken) begins: `ip|ip6 saddr|daddr`, `meta l4proto`, `th dport`.
    fn parse(fam: Family, first: &str, cur: &mut Cursor<'_>) -> Option<Sel> {
        match first {
            "ip" | "ip6" if (first == "ip") == (fam == Family::Ip) => match cur.word()? {
                "saddr" => Some(Sel::Addr(fam.saddr_off())),
                "daddr" => Some(Sel::Addr(fam.daddr_off())),
                _ => None,
            },
            "meta" => cur.eat("l4proto").then_some(Sel::L4proto),
            "th" => cur.eat("dport").then_some(Sel::Dport),
            _ => None,
        }
    }

    /// Its bytes in a concatenation's key (each part padded to four).
    fn len(self, fam: Family) -> u32 {
        match self {
            Sel::Addr(_) => fam.addr_len(),
            Sel::L4proto | Sel::Dport => 4,
        }
    }

    fn load(self, fam: Family, x: &mut Exprs, reg: u32) {
        match self {
            Sel::Addr(off) => x.payload(reg, NFT_PAYLOAD_NETWORK, off, fam.addr_len()),
            Sel::L4proto => x.meta_load(META_L4PROTO, reg),
            // The destination port: bytes 2-3 of the TCP, UDP and SCTP headers alike.
            Sel::Dport => x.payload(reg, NFT_PAYLOAD_TRANSPORT, 2, 2),
        }
    }
}

/// A concatenation (`first . …`, the first `.` taken) looked up: `vmap @MAP` (a verdict)
/// or `@SET` (a match). Each part is loaded, in order, into the register nft gives its
/// byte offset in the key.
fn concat(b: &mut Batch, fam: Family, first: Sel, cur: &mut Cursor<'_>, x: &mut Exprs) -> Option<()> {
    let mut parts = vec![first];
    loop {
        let w = cur.word()?;
        parts.push(Sel::parse(fam, w, cur)?);
        if !cur.eat(".") {
            break;
        }
    }
    let mut at = 0;
    for p in &parts {
        p.load(fam, x, concat_reg(at));
        at += p.len(fam);
    }
    // A set or map made in this batch is named by its id too, as nft does.
    let dreg = cur.eat("vmap").then_some(reg::VERDICT);
    let set = cur.word()?.strip_prefix('@')?;
    x.lookup(set, b.set_id(fam, set), dreg, false);
    Some(())
}

/// `numgen random mod N vmap { 0 : goto A , 1 : goto B }`.
fn numgen(b: &mut Batch, fam: Family, table: &str, cur: &mut Cursor<'_>, x: &mut Exprs) -> Option<()> {
    cur.expect("random")?;
    cur.expect("mod")?;
    let n: u32 = cur.word()?.parse().ok()?;
    cur.expect("vmap")?;
    cur.expect("{")?;
    let mut arms = Vec::new();
    loop {
        let k: u32 = cur.word()?.parse().ok()?;
        cur.expect(":")?;
        let v = cur.word()?;
        let (code, chain) = verdict(v, cur)?;
        arms.push((k, code, chain.map(str::to_owned)));
        if cur.eat("}") {
            break;
        }
        cur.expect(",")?;
    }
    let (id, name) = super::anon::verdict_map(b, fam, table, &arms);
    x.numgen(n);
    x.lookup(&name, Some(id), Some(reg::VERDICT), false);
    Some(())
}

/// `dnat ip addr . port to numgen random mod N map { 0 : A . P , … }` (`ip6` likewise),
/// after `dnat`: numgen's index looked up in an anonymous map of address . port, the
/// address and the port NAT'ed to from the registers the lookup fills.
fn dnat_map(b: &mut Batch, fam: Family, table: &str, cur: &mut Cursor<'_>, x: &mut Exprs) -> Option<()> {
    let ip = cur.word()?;
    if (ip == "ip") != (fam == Family::Ip) {
        return None;
    }
    for w in ["addr", ".", "port", "to", "numgen", "random", "mod"] {
        cur.expect(w)?;
    }
    let n: u32 = cur.word()?.parse().ok()?;
    cur.expect("map")?;
    cur.expect("{")?;
    let mut arms = Vec::new();
    loop {
        let k: u32 = cur.word()?.parse().ok()?;
        cur.expect(":")?;
        let mut data = addr(fam, cur.word()?)?;
        cur.expect(".")?;
        let port: u16 = cur.word()?.parse().ok()?;
        data.extend(port.to_be_bytes());
        data.extend([0, 0]);
        arms.push((k, data));
        if cur.eat("}") {
            break;
        }
        cur.expect(",")?;
    }
    let (id, name) = super::anon::data_map(b, fam, table, &arms);
    x.numgen(n);
    x.lookup(&name, Some(id), Some(reg::R1), false);
    let port_reg = concat_reg(fam.addr_len());
    use nfta::nat;
    x.expr("nat", |a| {
        a.be32(nat::TYPE, nat::DNAT).be32(nat::FAMILY, fam.nfproto() as u32).be32(nat::REG_ADDR_MIN, reg::R1).be32(nat::REG_PROTO_MIN, port_reg);
    });
    Some(())
}

/// `mark set mark or|xor M` and `mark and M ==|!= V`.
fn mark(cur: &mut Cursor<'_>, x: &mut Exprs) -> Option<()> {
    let num = |s: &str| -> Option<u32> {
        match s.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    };
    x.meta_load(META_MARK, reg::R1);
    if cur.eat("set") {
        cur.expect("mark")?;
        let op = cur.word()?;
        let m = num(cur.word()?)?;
        let (mask, xor) = match op {
            "or" => (!m, m),
            "xor" => (u32::MAX, m),
            _ => return None,
        };
        x.bitwise(&mask.to_ne_bytes(), &xor.to_ne_bytes(), true);
        x.expr("meta", |a| {
            a.be32(nfta::meta::KEY, META_MARK).be32(nfta::meta::SREG, reg::R1);
        });
    } else {
        cur.expect("and")?;
        let m = num(cur.word()?)?;
        let op = match cur.word()? {
            "==" => CMP_EQ,
            "!=" => CMP_NEQ,
            _ => return None,
        };
        let v = num(cur.word()?)?;
        x.bitwise(&m.to_ne_bytes(), &[0; 4], true);
        x.cmp(op, &v.to_ne_bytes());
    }
    Some(())
}

/// `IP:PORT` (IPv4) or `[IP]:PORT` (IPv6).
fn dnat_target(fam: Family, s: &str) -> Option<(Vec<u8>, u16)> {
    let (ip, port) = match fam {
        Family::Ip => s.rsplit_once(':')?,
        Family::Ip6 => {
            let rest = s.strip_prefix('[')?;
            let (ip, port) = rest.split_once("]:")?;
            (ip, port)
        }
    };
    Some((addr(fam, ip)?, port.parse().ok()?))
}

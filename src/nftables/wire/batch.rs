//! `nft -f` text as svcproxy writes it (`add`/`flush`/`delete` of tables, chains, sets,
//! maps, rules and elements) → one nf_tables netlink batch carrying the same commands as
//! the messages nft 1.0.6 sends for them. A line outside that vocabulary makes the whole
//! text [`Unsupported`] (the caller runs `nft` instead).

use std::collections::HashMap;

use super::attr::{self, Attrs, Udata, NLM_F_APPEND, NLM_F_CREATE};
use super::expr;
use super::WireFamily;
use crate::net::IpFamily;
use crate::nftables::element::{self, Element, Key, Part};
use crate::nftables::model::{family_of_word, ElementOp, NftFamily, Rule, Script};
use crate::nftables::stmt::{Body, Cursor, Expected, Form, Tok};

use super::nfta::{self, chain as ch, elem, obj, rule as rl, set as st};
pub use super::nfta::msg::{DELCHAIN, DELOBJ, DELRULE, DELSET, DELSETELEM, DELTABLE, NEWCHAIN, NEWOBJ, NEWRULE, NEWSET, NEWSETELEM, NEWTABLE};

/// What the netlink writer does not encode (the text goes to `nft` instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not encodable as netlink: {0}")]
pub struct Unsupported(pub String);

/// A batch being built: its messages, sequence numbers and set ids.
#[derive(Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    seq: u32,
    /// The last id given to a named set, and to an anonymous one: nft numbers every named
    /// set of the text first, then the anonymous sets ([`encode_named`] sets the latter's
    /// start).
    next_id: u32,
    next_anon_id: u32,
    /// The sets this batch creates, by family and name: their ids.
    ids: HashMap<(u8, String), u32>,
    /// How many messages (begin and end not counted).
    pub messages: usize,
    /// The text line (1-based) each message came from, by sequence number - 1.
    pub lines: Vec<usize>,
    line: usize,
    /// The number the next anonymous set is named with (`__setN`, `__mapN`); `None`:
    /// nft's `__set%d` template, which the kernel fills by scanning every set of the table.
    pub anon_next: Option<u32>,
}

impl Batch {
    /// An anonymous set's name: `template` (`__set%d`, `__map%d`) as it is, or numbered
    /// by [`Batch::anon_next`].
    pub fn anon_name(&mut self, template: &str) -> String {
        match self.anon_next {
            Some(n) => {
                self.anon_next = Some(n.wrapping_add(1));
                template.replace("%d", &n.to_string())
            }
            None => template.to_owned(),
        }
    }

    /// The id of a named set this batch creates.
    pub fn new_set_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// The id of an anonymous set this batch creates.
    pub fn new_anon_id(&mut self) -> u32 {
        self.next_anon_id += 1;
        self.next_anon_id
    }

    /// The id of a set this batch creates (nft names it beside the set's name).
    pub fn set_id(&self, fam: IpFamily, name: &str) -> Option<u32> {
        self.ids.get(&(fam.nfproto(), name.to_owned())).copied()
    }

    pub fn push(&mut self, kind: u16, flags: u16, fam: IpFamily, a: &Attrs) {
        if self.bytes.is_empty() {
            attr::begin(&mut self.bytes, 0);
        }
        self.seq += 1;
        attr::message(&mut self.bytes, kind, flags, self.seq, fam.nfproto(), a);
        self.messages += 1;
        self.lines.push(self.line);
    }

    /// The batch built so far: its begin message and its messages, without the end
    /// (empty after [`Batch::finish`]).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The text line a message (by sequence number) came from.
    pub fn line_of(&self, seq: u32) -> Option<usize> {
        self.lines.get((seq as usize).checked_sub(1)?).copied()
    }

    /// The batch, framed (begin, messages, end; the last message asks for an
    /// acknowledgement), and the sequence number of that last message. `None`: empty.
    pub fn finish(&mut self) -> Option<(Vec<u8>, u32)> {
        if self.messages == 0 {
            return None;
        }
        let last = self.last_message_offset();
        let flags_at = last + 6;
        let flags = u16::from_ne_bytes([self.bytes[flags_at], self.bytes[flags_at + 1]]) | attr::NLM_F_ACK;
        self.bytes[flags_at..flags_at + 2].copy_from_slice(&flags.to_ne_bytes());
        let seq = self.seq;
        let mut bytes = std::mem::take(&mut self.bytes);
        attr::end(&mut bytes, seq + 1);
        Some((bytes, seq))
    }

    fn last_message_offset(&self) -> usize {
        let mut off = 0;
        let mut last = 0;
        while off + 4 <= self.bytes.len() {
            let len = u32::from_ne_bytes([self.bytes[off], self.bytes[off + 1], self.bytes[off + 2], self.bytes[off + 3]]) as usize;
            last = off;
            off += (len + 3) & !3;
        }
        last
    }
}

/// Encodes every line of `text`.
pub fn encode(text: &str) -> Result<Batch, Unsupported> {
    encode_named(text, None)
}

/// [`encode`], anonymous sets named from `anon_next` on (`None`: as nft names them).
///
/// Sent as nft 1.0.6 sends the same text: its named sets numbered before its anonymous
/// ones, and each run of `add element` lines to one set (nft collapses them into one
/// command and splits it again) sent first line first, then the others last to second.
pub fn encode_named(text: &str, anon_next: Option<u32>) -> Result<Batch, Unsupported> {
    encode_lines(text, None, anon_next)
}

/// [`encode_named`] of a transaction svcproxy wrote: its rule and element lines encoded
/// from the values they were written from (the words are not read again), the other
/// lines from their text.
pub fn encode_script(script: &Script<'_>, anon_next: Option<u32>) -> Result<Batch, Unsupported> {
    encode_lines(script.text(), Some(script), anon_next)
}

fn encode_lines(text: &str, script: Option<&Script<'_>>, anon_next: Option<u32>) -> Result<Batch, Unsupported> {
    let named = text.lines().filter(|l| declares_set(l)).count();
    let mut b = Batch { anon_next, next_anon_id: named as u32, ..Batch::default() };
    let mut run: Vec<Line<'_>> = Vec::new();
    let mut run_target = None;
    let mut rules = script.map_or(&[][..], |s| s.rules()).iter().peekable();
    let mut elements = script.map_or(&[][..], |s| s.elements()).iter().peekable();
    for (n, line) in text.lines().enumerate() {
        let at = line.as_ptr() as usize - text.as_ptr() as usize;
        let valued = rules.next_if(|(off, _)| *off == at).map(|&(_, r)| r);
        let element = elements.next_if(|(off, _)| *off == at).map(|(_, e)| e);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let l = Line { n, text: line, script, element };
        let target = match (script, element) {
            (Some(s), Some(ElementOp::Add(e))) => Some([s.family().nft_word(), s.table(), e.set.as_str()]),
            (_, Some(ElementOp::Delete(_))) => None,
            _ => element_target(line),
        };
        if target.is_none() || target != run_target {
            send_run(&mut b, &mut run)?;
            run_target = target;
        }
        match (valued, script) {
            (Some(rule), Some(s)) => {
                b.line = n + 1;
                rule_values(&mut b, s.family(), s.table(), rule).map_err(|Unsupported(why)| Unsupported(format!("line {}: {why}: {line:?}", n + 1)))?;
            }
            _ if target.is_some() => run.push(l),
            _ => one_line(&mut b, l)?,
        }
    }
    send_run(&mut b, &mut run)?;
    Ok(b)
}

/// A line of the text: its number (from 0), its words, and the element values the script
/// recorded for it.
#[derive(Clone, Copy)]
struct Line<'a> {
    n: usize,
    text: &'a str,
    script: Option<&'a Script<'a>>,
    element: Option<&'a ElementOp<'a>>,
}

/// One line: an element line from its values when the script recorded them, any other
/// from its text.
fn one_line(b: &mut Batch, l: Line<'_>) -> Result<(), Unsupported> {
    b.line = l.n + 1;
    let sent = match (l.script, l.element) {
        (Some(s), Some(op)) => set_element(b, s.family(), s.table(), matches!(op, ElementOp::Add(_)), op.element()),
        _ => command(b, l.text),
    };
    sent.map_err(|Unsupported(why)| Unsupported(format!("line {}: {why}: {:?}", l.n + 1, l.text)))
}

/// A run of `add element` lines to one set, in nft's order (first, then last to second).
fn send_run(b: &mut Batch, run: &mut Vec<Line<'_>>) -> Result<(), Unsupported> {
    if let Some((first, rest)) = run.split_first() {
        for &l in std::iter::once(first).chain(rest.iter().rev()) {
            one_line(b, l)?;
        }
    }
    run.clear();
    Ok(())
}

/// `add set` / `add map` lines: the named sets nft numbers first.
fn declares_set(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with("add set ") || l.starts_with("add map ")
}

/// The family, table and set an `add element` line adds to (its words 3 to 5).
fn element_target(line: &str) -> Option<[&str; 3]> {
    let rest = line.trim_start().strip_prefix("add element")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let mut w = rest.split_whitespace();
    Some([w.next()?, w.next()?, w.next()?])
}

fn unsupported(what: &str) -> Unsupported {
    Unsupported(what.to_owned())
}

fn command(b: &mut Batch, line: &str) -> Result<(), Unsupported> {
    // Most lines are rules: read once, by the statement reader; element lines by theirs.
    let l = line.trim_start();
    if l.starts_with("add rule ") {
        return add_rule(b, line);
    }
    if l.starts_with("add element ") || l.starts_with("delete element ") {
        let e = element::parse_line(line).map_err(|e| Unsupported(format!("an element: {e}")))?;
        return set_element(b, e.family, &e.table, e.add, &e.element);
    }
    let mut cur = Cursor::new(line, Form::Listed).map_err(|_| unsupported("an unclosed quote"))?;
    let verb = word(&mut cur).ok_or_else(|| unsupported("no verb"))?;
    let object = word(&mut cur).ok_or_else(|| unsupported("no object"))?;
    let fam = word(&mut cur).and_then(family_of_word).ok_or_else(|| unsupported("a family other than ip, ip6"))?;
    let table = word(&mut cur).ok_or_else(|| unsupported("no table"))?;
    match (verb, object) {
        ("add", "table") => add_table(b, fam, table, &mut cur),
        ("delete", "table") => {
            if !cur.done() {
                return Err(unsupported("words after the table"));
            }
            let mut a = Attrs::default();
            a.str(nfta::table::NAME, table);
            b.push(DELTABLE, 0, fam, &a);
            Ok(())
        }
        ("add", "chain") => add_chain(b, fam, table, &mut cur),
        ("add", "set") | ("add", "map") => add_set(b, fam, table, object == "map", &mut cur),
        ("flush", "chain") | ("delete", "chain") => {
            let name = one_name(&mut cur)?;
            let mut a = Attrs::default();
            if verb == "flush" {
                a.str(rl::TABLE, table).str(rl::CHAIN, name);
                b.push(DELRULE, 0, fam, &a);
            } else {
                a.str(ch::TABLE, table).str(ch::NAME, name);
                b.push(DELCHAIN, 0, fam, &a);
            }
            Ok(())
        }
        ("flush", "set") | ("flush", "map") => {
            let name = one_name(&mut cur)?;
            let mut a = Attrs::default();
            a.str(elem::LIST_SET, name).str(elem::LIST_TABLE, table);
            b.push(DELSETELEM, 0, fam, &a);
            Ok(())
        }
        // A named counter (kube-proxy v1.37's localhost NodePort rejections): created at
        // zero, as nft sends it; deleted with an empty data attribute, as nft does.
        ("add", "counter") | ("delete", "counter") => {
            let name = one_name(&mut cur)?;
            let mut a = Attrs::default();
            a.str(obj::TABLE, table).str(obj::NAME, name).be32(obj::TYPE, obj::COUNTER);
            if verb == "add" {
                a.nest(obj::DATA, |d| {
                    d.be64(obj::COUNTER_BYTES, 0).be64(obj::COUNTER_PACKETS, 0);
                });
                b.push(NEWOBJ, NLM_F_CREATE, fam, &a);
            } else {
                a.nest(obj::DATA, |_| {});
                b.push(DELOBJ, 0, fam, &a);
            }
            Ok(())
        }
        ("delete", "set") | ("delete", "map") => {
            let name = one_name(&mut cur)?;
            let mut a = Attrs::default();
            a.str(st::TABLE, table).str(st::NAME, name);
            b.push(DELSET, 0, fam, &a);
            Ok(())
        }
        _ => Err(unsupported("a command other than add/flush/delete of table, chain, set, map, rule, element, counter")),
    }
}

/// The next word (not a quoted string).
fn word<'a>(cur: &mut Cursor<'a>) -> Option<&'a str> {
    cur.word(Expected::Name).ok()
}

fn one_name<'a>(cur: &mut Cursor<'a>) -> Result<&'a str, Unsupported> {
    let name = word(cur).ok_or_else(|| unsupported("no name"))?;
    if !cur.done() {
        return Err(unsupported("words after the name"));
    }
    Ok(name)
}

fn comment_udata(c: &str) -> Result<Vec<u8>, Unsupported> {
    // nft refuses a comment longer than 128 bytes (NFTNL_UDATA_COMMENT_MAXLEN) and sends
    // one of 128 with its NUL; kube-proxy v1.37 cuts its element comments to 128.
    if c.len() > 128 {
        return Err(unsupported("a comment over 128 bytes"));
    }
    let mut u = Udata::default();
    u.str(0, c);
    Ok(u.0)
}

/// `{ comment "X" ; }` (tables), or the parts of a chain's or set's spec, as (key, words).
fn spec<'a>(cur: &mut Cursor<'a>) -> Result<Vec<(&'a str, Vec<Tok<'a>>)>, Unsupported> {
    let mut out = Vec::new();
    if cur.done() {
        return Ok(out);
    }
    cur.expect("{").map_err(|_| unsupported("a spec not in braces"))?;
    let mut part: Vec<Tok<'a>> = Vec::new();
    loop {
        match cur.next_tok() {
            None => return Err(unsupported("an unclosed spec")),
            Some(Tok::Word(w @ (";" | "}"))) => {
                if let Some(first) = part.first() {
                    let key = first.word().ok_or_else(|| unsupported("a spec part starting with a string"))?;
                    out.push((key, part.split_off(1)));
                    part.clear();
                }
                if w == "}" {
                    return if cur.done() { Ok(out) } else { Err(unsupported("words after a spec")) };
                }
            }
            Some(t) => part.push(t),
        }
    }
}

fn quoted_of(words: &[Tok<'_>]) -> Result<String, Unsupported> {
    match words {
        [Tok::Quoted(q)] => Ok((*q).to_owned()),
        _ => Err(unsupported("a comment that is not one quoted string")),
    }
}

fn add_table(b: &mut Batch, fam: IpFamily, table: &str, cur: &mut Cursor<'_>) -> Result<(), Unsupported> {
    let mut a = Attrs::default();
    a.str(nfta::table::NAME, table).be32(nfta::table::FLAGS, 0);
    for (key, words) in spec(cur)? {
        match key {
            "comment" => {
                a.bytes(nfta::table::USERDATA, &comment_udata(&quoted_of(&words)?)?);
            }
            _ => return Err(unsupported("a table spec other than a comment")),
        }
    }
    b.push(NEWTABLE, 0, fam, &a);
    Ok(())
}

fn hook_number(h: &str) -> Option<u32> {
    Some(match h {
        "prerouting" => 0,
        "input" => 1,
        "forward" => 2,
        "output" => 3,
        "postrouting" => 4,
        _ => return None,
    })
}

fn add_chain(b: &mut Batch, fam: IpFamily, table: &str, cur: &mut Cursor<'_>) -> Result<(), Unsupported> {
    let name = word(cur).ok_or_else(|| unsupported("no chain name"))?;
    let mut a = Attrs::default();
    a.str(ch::TABLE, table).str(ch::NAME, name);
    let mut comment = None;
    for (key, words) in spec(cur)? {
        match key {
            "type" => {
                let w: Vec<&str> = words.iter().filter_map(|t| t.word()).collect();
                let [kind, "hook", hook, "priority", prio] = w.as_slice() else { return Err(unsupported("a chain type other than `type K hook H priority N`")) };
                let hook = hook_number(hook).ok_or_else(|| unsupported("an unknown hook"))?;
                let prio: i32 = prio.parse().map_err(|_| unsupported("a priority that is not a number"))?;
                a.str(ch::TYPE, kind).nest(ch::HOOK, |h| {
                    h.be32(ch::HOOK_HOOKNUM, hook).be32(ch::HOOK_PRIORITY, prio as u32);
                });
            }
            "comment" => comment = Some(quoted_of(&words)?),
            _ => return Err(unsupported("a chain spec other than type and comment")),
        }
    }
    if let Some(c) = comment {
        a.bytes(ch::USERDATA, &comment_udata(&c)?);
    }
    b.push(NEWCHAIN, NLM_F_CREATE, fam, &a);
    Ok(())
}

/// A set or map key type: (nft's type id, length in the key, its parts' ids).
fn key_type(fam: IpFamily, words: &[&str]) -> Option<(u32, u32, usize)> {
    let mut id = 0u32;
    let mut len = 0u32;
    let mut parts = 0;
    for (i, w) in words.iter().enumerate() {
        if i % 2 == 1 {
            if *w != "." {
                return None;
            }
            continue;
        }
        let (t, l): (u32, u32) = match *w {
            "ipv4_addr" if fam == IpFamily::V4 => (7, 4),
            "ipv6_addr" if fam == IpFamily::V6 => (8, 16),
            "inet_proto" => (12, 1),
            "inet_service" => (13, 2),
            _ => return None,
        };
        id = (id << 6) | t;
        len += l.div_ceil(4) * 4;
        parts += 1;
    }
    (parts > 0).then_some((id, len, parts))
}

fn add_set(b: &mut Batch, fam: IpFamily, table: &str, is_map: bool, cur: &mut Cursor<'_>) -> Result<(), Unsupported> {
    let name = word(cur).ok_or_else(|| unsupported("no set name"))?;
    let mut flags = 0u32;
    let mut timeout = None;
    let mut comment = None;
    let mut typ: Option<(u32, u32, usize)> = None;
    for (key, words) in spec(cur)? {
        let w: Vec<&str> = words.iter().filter_map(|t| t.word()).collect();
        match key {
            "type" => {
                let (k, v) = match w.iter().position(|x| *x == ":") {
                    Some(p) => (&w[..p], Some(&w[p + 1..])),
                    None => (&w[..], None),
                };
                if is_map != v.is_some() || v.is_some_and(|v| v != ["verdict"]) {
                    return Err(unsupported("a map whose values are not verdicts"));
                }
                typ = Some(key_type(fam, k).ok_or_else(|| unsupported("a set type outside kube-proxy's"))?);
            }
            "flags" => {
                for f in w.iter().flat_map(|f| f.split(',')).filter(|f| !f.is_empty()) {
                    flags |= match f {
                        "dynamic" => st::F_EVAL,
                        "timeout" => st::F_TIMEOUT,
                        _ => return Err(unsupported("a set flag other than dynamic, timeout")),
                    };
                }
            }
            "timeout" => {
                let [t] = w.as_slice() else { return Err(unsupported("a timeout of several words")) };
                let secs: u64 = t.strip_suffix('s').and_then(|s| s.parse().ok()).ok_or_else(|| unsupported("a timeout not in seconds"))?;
                timeout = Some(secs * 1000);
            }
            "comment" => comment = Some(quoted_of(&words)?),
            _ => return Err(unsupported("a set spec other than type, flags, timeout, comment")),
        }
    }
    let (key_id, key_len, parts) = typ.ok_or_else(|| unsupported("a set without a type"))?;
    // A plain set holds one address or a concatenation; a map's key is a concatenation
    // (nft's user data differ).
    if (parts == 1 && (is_map || key_len != fam.addr_len())) || (!is_map && parts > 1 && (flags != 0 || timeout.is_some())) {
        return Err(unsupported("a set or map shape outside kube-proxy's"));
    }
    let id = b.new_set_id();
    b.ids.insert((fam.nfproto(), name.to_owned()), id);
    let mut ud = Udata::default();
    let mut a = Attrs::default();
    a.str(st::TABLE, table).str(st::NAME, name);
    // nft's user data of a concatenated key: byte order unset, a "typeof" of a
    // concatenation (expression type 13) with no parts.
    let mut concat_typeof = Udata::default();
    concat_typeof.u32(0, 13).put(1, &[]);
    if is_map {
        a.be32(st::FLAGS, flags | st::F_MAP).be32(st::KEY_TYPE, key_id).be32(st::KEY_LEN, key_len).be32(st::DATA_TYPE, nfta::datatype::VERDICT).be32(st::DATA_LEN, 0);
        ud.u32(0, 0).u32(1, 0).put(3, &concat_typeof.0).u32(6, 0);
    } else if parts > 1 {
        a.be32(st::FLAGS, flags).be32(st::KEY_TYPE, key_id).be32(st::KEY_LEN, key_len);
        ud.u32(0, 0).put(3, &concat_typeof.0);
    } else {
        a.be32(st::FLAGS, flags).be32(st::KEY_TYPE, key_id).be32(st::KEY_LEN, key_len);
        ud.u32(0, 2);
    }
    a.be32(st::ID, id);
    if let Some(t) = timeout {
        a.be64(st::TIMEOUT, t);
    }
    if let Some(c) = comment {
        let c = comment_udata(&c)?;
        ud.put(7, &c[2..]);
    }
    a.bytes(st::USERDATA, &ud.0);
    b.push(NEWSET, NLM_F_CREATE, fam, &a);
    Ok(())
}

/// A rule line of text (an `nft -f` file, a test) read into the statement vocabulary,
/// then encoded from the values.
fn add_rule(b: &mut Batch, line: &str) -> Result<(), Unsupported> {
    let rule = crate::nftables::stmt::parse_add_rule(line.trim()).map_err(|e| Unsupported(format!("rule: {e}")))?;
    encode_rule(b, rule.family, &rule.table, &rule.chain, &rule.body)
}

/// A rule svcproxy built, encoded from its values.
fn rule_values(b: &mut Batch, fam: IpFamily, table: &str, rule: &Rule) -> Result<(), Unsupported> {
    encode_rule(b, fam, table, &rule.chain, rule.stmts())
}

fn encode_rule(b: &mut Batch, fam: IpFamily, table: &str, chain: &str, body: &Body) -> Result<(), Unsupported> {
    let exprs = expr::body(b, fam, table, body)?;
    let mut a = Attrs::default();
    a.str(rl::TABLE, table).str(rl::CHAIN, chain).nest(rl::EXPRESSIONS, |n| n.0.extend_from_slice(&exprs.0));
    if let Some(c) = &body.comment {
        a.bytes(rl::USERDATA, &comment_udata(c)?);
    }
    b.push(NEWRULE, NLM_F_CREATE | NLM_F_APPEND, fam, &a);
    Ok(())
}

/// An element's key as the kernel holds it: an address as it is; in a concatenation, a
/// protocol or a port padded to four bytes.
fn key_bytes(fam: IpFamily, key: &Key) -> Result<Vec<u8>, Unsupported> {
    let concat = key.parts().len() > 1;
    let mut out = Vec::with_capacity(4 * key.parts().len() + 12);
    for part in key.parts() {
        match *part {
            Part::Addr(ip) => out.extend(expr::ip_bytes(fam, ip).ok_or_else(|| unsupported("an address of the other family"))?),
            Part::Proto(p) if concat => out.extend([expr::proto_byte(p), 0, 0, 0]),
            Part::Port(n) if concat => out.extend(n.to_be_bytes().into_iter().chain([0, 0])),
            // Alone, nft sends them unpadded; no set of kube-proxy's has such a key.
            Part::Proto(_) | Part::Port(_) => return Err(unsupported("a key of one protocol or port")),
        }
    }
    Ok(out)
}

/// One element added (key, verdict, comment) or deleted (key), from its values.
pub(crate) fn set_element(b: &mut Batch, fam: IpFamily, table: &str, add: bool, e: &Element) -> Result<(), Unsupported> {
    let key = key_bytes(fam, &e.key)?;
    let comment = e.comment.as_deref().filter(|_| add).map(comment_udata).transpose()?;
    let id = b.set_id(fam, &e.set).filter(|_| add);
    let mut a = Attrs::default();
    a.str(elem::LIST_TABLE, table).str(elem::LIST_SET, &e.set);
    if let Some(id) = id {
        a.be32(elem::LIST_SET_ID, id);
    }
    a.nest(elem::LIST_ELEMENTS, |list| {
        list.nest(nfta::expr::LIST_ELEM, |el| {
            el.nest(elem::KEY, |k| {
                k.bytes(nfta::expr::DATA_VALUE, &key);
            });
            if let Some(v) = e.value.as_ref().filter(|_| add) {
                let (code, chain) = expr::verdict_code(v);
                el.nest(elem::DATA, |d| expr::verdict_data(d, code, chain));
            }
            if let Some(c) = &comment {
                el.bytes(elem::USERDATA, c);
            }
        });
    });
    b.push(if add { NEWSETELEM } else { DELSETELEM }, if add { NLM_F_CREATE } else { 0 }, fam, &a);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_comment_of_128_bytes_is_encoded_and_one_of_129_is_not() {
        let c128 = "c".repeat(128);
        let u = super::comment_udata(&c128).expect("128 bytes, as nft sends them");
        assert_eq!((u[0], u[1] as usize, u.len()), (0, 129, 131), "type, length with the NUL, whole TLV");
        assert!(super::comment_udata(&"c".repeat(129)).is_err(), "nft refuses over 128 bytes");
    }

    use super::*;

    /// (message type, payload after nfgenmsg) of every nf_tables message in a finished
    /// batch (begin and end left out).
    pub(crate) fn messages(text: &str) -> Vec<(u16, Vec<u8>)> {
        let (bytes, _) = encode(text).unwrap().finish().unwrap();
        super::super::canon::objects(&bytes).map(|(kind, payload)| (kind, payload.to_vec())).collect()
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn text_outside_kube_proxys_vocabulary_is_unsupported() {
        for line in [
            "add table inet kube-proxy",
            "add rule ip kube-proxy c counter",
            "add rule ip kube-proxy c tcp dport 80 accept",
            "add set ip kube-proxy s { type ether_addr ; }",
            "add set ip kube-proxy s { type ipv4_addr ; flags interval ; }",
            "add map ip kube-proxy m { type ipv4_addr : ipv4_addr ; }",
            "add element ip kube-proxy s { 10.0.0.1 , 10.0.0.2 }",
            "add rule ip kube-proxy c ip6 daddr ::1 drop",
            "insert rule ip kube-proxy c drop",
        ] {
            assert!(encode(line).is_err(), "{line}");
        }
        assert!(encode("# a comment\n\nadd chain ip kube-proxy c\n").is_ok());
        assert_eq!(messages("delete table ip6 kube-proxy\n").iter().map(|m| m.0).collect::<Vec<_>>(), [DELTABLE]);
        assert!(encode("delete table ip kube-proxy now\n").is_err());
    }

    #[test]
    fn every_message_is_framed_and_only_the_last_asks_for_an_ack() {
        let mut b = encode("add table ip kube-proxy\nadd chain ip kube-proxy c\nflush chain ip kube-proxy c\n").unwrap();
        assert_eq!(b.line_of(3), Some(3));
        let (bytes, last) = b.finish().unwrap();
        assert_eq!(last, 3);
        let mut off = 0;
        let mut seen = Vec::new();
        while off < bytes.len() {
            let len = u32::from_ne_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(bytes[off + 4..off + 6].try_into().unwrap());
            let flags = u16::from_ne_bytes(bytes[off + 6..off + 8].try_into().unwrap());
            let seq = u32::from_ne_bytes(bytes[off + 8..off + 12].try_into().unwrap());
            seen.push((kind, flags & attr::NLM_F_ACK != 0, seq));
            off += (len + 3) & !3;
        }
        assert_eq!(off, bytes.len());
        let nft = |t: u16| (10 << 8) | t;
        assert_eq!(seen, [(0x10, false, 0), (nft(NEWTABLE), false, 1), (nft(NEWCHAIN), false, 2), (nft(DELRULE), true, 3), (0x11, false, 4)]);
    }

    #[test]
    fn concatenations_use_nfts_registers() {
        // ip6: the address fills register 1, the protocol goes into register 2 (a 128-bit
        // one, at byte 16), the port into 32-bit register 13 (byte 20).
        let m = messages("add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips\n");
        let rule = &m.iter().find(|(k, _)| *k == NEWRULE).unwrap().1;
        let meta_dreg_2 = [8, 0, 2, 0, 0, 0, 0, 16, 8, 0, 1, 0, 0, 0, 0, 2];
        assert!(contains(rule, &meta_dreg_2), "meta l4proto into register 2");
        let payload_reg_13 = [8, 0, 1, 0, 0, 0, 0, 13, 8, 0, 2, 0, 0, 0, 0, 2];
        assert!(contains(rule, &payload_reg_13), "th dport into register 13");
        // ip: 9 and 10.
        let m = messages("add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips\n");
        let rule = &m.iter().find(|(k, _)| *k == NEWRULE).unwrap().1;
        assert!(contains(rule, &[8, 0, 2, 0, 0, 0, 0, 16, 8, 0, 1, 0, 0, 0, 0, 9]));
        assert!(contains(rule, &[8, 0, 1, 0, 0, 0, 0, 10, 8, 0, 2, 0, 0, 0, 0, 2]));
    }

    #[test]
    fn a_large_numgen_map_is_split_under_64k_per_message() {
        let arms: Vec<String> = (0..2000).map(|i| format!("{i} : goto endpoint-XXXXXXXX-ns/name/tcp/port__10.{}.{}.1/8080", i / 256, i % 256)).collect();
        let text = format!("add rule ip kube-proxy service-x numgen random mod 2000 vmap {{ {} }}\n", arms.join(" , "));
        let m = messages(&text);
        let elems: Vec<&Vec<u8>> = m.iter().filter(|(k, _)| *k == NEWSETELEM).map(|(_, p)| p).collect();
        assert!(elems.len() >= 2, "{} element messages", elems.len());
        assert!(elems.iter().all(|p| p.len() < 65536 + 64));
        let total: usize = elems.iter().map(|p| p.windows(9).filter(|w| w == b"endpoint-").count()).sum();
        assert_eq!(total, 2000);
        // libnftnl's numbering goes on across messages, skipping the one that did not fit.
        let numbers = |p: &[u8]| -> Vec<u16> {
            let list = crate::nftables::wire::dump::AttrIter(p).find(|(t, _)| *t == 3).unwrap().1;
            crate::nftables::wire::dump::AttrIter(list).map(|(t, _)| t).collect()
        };
        let (first, second) = (numbers(elems[0]), numbers(elems[1]));
        assert_eq!(first[0], 1);
        assert_eq!(second[0] as usize, first.len() + 2);
        assert_eq!(m.iter().filter(|(k, _)| *k == NEWSET).count(), 1);
        assert_eq!(m.last().unwrap().0, NEWRULE, "the rule binds the map after its elements");
    }

    /// Every message of a finished batch as the capture script prints nft's: type, flags
    /// without `NLM_F_ACK`, family, payload after `nfgenmsg` in hex.
    fn printed(text: &str) -> Vec<String> {
        let (bytes, _) = encode(text).unwrap().finish().unwrap();
        let mut out = Vec::new();
        let mut off = 0;
        while off < bytes.len() {
            let len = u32::from_ne_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(bytes[off + 4..off + 6].try_into().unwrap());
            let flags = u16::from_ne_bytes(bytes[off + 6..off + 8].try_into().unwrap()) & !attr::NLM_F_ACK;
            if kind >> 8 == attr::NFNL_SUBSYS_NFTABLES {
                let hex: String = bytes[off + 20..off + len].iter().map(|b| format!("{b:02x}")).collect();
                out.push(format!("{} {flags:#x} {} {hex}", kind & 0xff, bytes[off + 16]));
            }
            off += (len + 3) & !3;
        }
        out
    }

    /// A capture's `nft -f` input (its `> ` lines) and nft's messages for it (`< ` lines).
    fn capture(data: &str) -> (String, Vec<&str>) {
        let text = data.lines().filter_map(|l| l.strip_prefix("> ")).map(|l| format!("{l}\n")).collect();
        (text, data.lines().filter_map(|l| l.strip_prefix("< ")).collect())
    }

    #[test]
    fn kube_proxy_v137_forms_are_sent_byte_for_byte_as_nft_sends_them() {
        // Inline marks after a set lookup, a detector and fib; `mark and M != 0`; `ct status
        // dnat` and a four-part concatenation looked up in a set of this batch; dnat maps
        // of address . port (N = 2 and 1, both families); the hairpin set and its elements,
        // one run of them sent first, then last to second; named sets numbered before
        // anonymous ones across both families.
        let (text, want) = capture(include_str!("testdata/nft106-v137.txt"));
        let got = printed(&text);
        assert!(want.len() > 30);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "message {}", i + 1);
        }
        assert_eq!(got.len(), want.len());
    }

    #[test]
    fn localhost_node_port_forms_are_sent_byte_for_byte_as_nft_sends_them() {
        // KubeProxyNFTablesLocalhostNodePorts: a named counter created (and deleted), a rule
        // counting in it by name before `reject`, loopback matched (a /8 loads one byte,
        // ::1 the whole address) before a concatenation looked up in a verdict map.
        let (text, want) = capture(include_str!("testdata/nft106-v137-localhost.txt"));
        assert_eq!(want.len(), 18);
        assert_eq!(printed(&text), want);
    }

    #[test]
    fn numgen_comparisons_are_sent_byte_for_byte_as_nft_sends_them() {
        // `numgen random mod N == K` (the cold start's interim table): numgen into register
        // 1, compared equal with K in host order; before a verdict, before and after a test
        // then a DNAT, both families, the largest key of a 16-bit modulus.
        let (text, want) = capture(include_str!("testdata/nft106-numgen-cmp.txt"));
        assert_eq!(want.len(), 12);
        assert_eq!(printed(&text), want);
    }

    #[test]
    fn a_run_of_elements_to_one_set_is_sent_first_then_last_to_second() {
        let text = "add element ip t a { 10.0.0.1 }\nadd element ip t a { 10.0.0.2 }\nadd element ip t a { 10.0.0.3 }\n\
                    add element ip t b { 10.0.1.1 }\nadd element ip t a { 10.0.0.4 }\nadd element ip t a { 10.0.0.5 }\n\
                    delete element ip t a { 10.0.0.4 }\ndelete element ip t a { 10.0.0.5 }\n";
        let m = messages(text);
        let last: Vec<u8> = m.iter().map(|(_, p)| p[p.len() - 1]).collect();
        assert_eq!(last, [1, 3, 2, 1, 4, 5, 4, 5]);
        let mut b = encode(text).unwrap();
        assert_eq!((1..=8).map(|s| b.line_of(s).unwrap()).collect::<Vec<_>>(), [1, 3, 2, 4, 5, 6, 7, 8], "each message still names its line");
        assert!(b.finish().is_some());
    }

    /// A script's element lines go as their values: the same bytes their words encode
    /// into, and an element whose words would not read back (a quote in its comment) too.
    #[test]
    fn a_scripts_elements_are_encoded_from_their_values() {
        let e = Element::parsed("service-ips", "10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto x");
        let mut s = Script::new(IpFamily::V4, "kube-proxy");
        s.element(&e);
        s.delete_element("cluster-ips", Key::of([Part::Addr("10.0.0.2".parse().unwrap())]));
        let bytes = |b: Result<Batch, Unsupported>| b.unwrap().finish().unwrap().0;
        assert_eq!(bytes(encode_script(&s, None)), bytes(encode(s.text())));
        let odd = Element { comment: Some("a \"b\" c".into()), ..e.clone() };
        let mut s = Script::new(IpFamily::V4, "kube-proxy");
        s.element(&odd);
        assert!(encode(s.text()).is_err(), "{}", s.text());
        assert!(contains(&bytes(encode_script(&s, None)), b"a \"b\" c\0"));
    }

    #[test]
    fn a_set_element_key_pads_each_part_to_four_bytes() {
        let m = messages("add element ip kube-proxy service-ips { 10.0.0.1 . tcp . 80 comment \"ns/a:p\" : goto x }\n");
        let p = &m[0].1;
        assert!(contains(p, &[10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]));
        assert!(contains(p, b"\x00\x07ns/a:p\x00"), "the comment as nftnl user data");
    }
}

/// Every golden nftables table encodes as netlink with no line left to `nft -f`: the
/// encoder covers everything the renderer writes (checked without root; the kernel tier
/// then checks the kernel lists it as `nft -f` of the same text would).
#[cfg(test)]
mod every_golden {
    #[test]
    fn every_golden_table_encodes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        let mut failures = Vec::new();
        let mut paths: Vec<_> = std::fs::read_dir(root.join("golden")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "nft")).collect();
        paths.sort();
        for path in &paths {
            let text = std::fs::read_to_string(path).unwrap();
            // A golden holds both families' tables, each headed by a comment line.
            let text: String = text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
            match super::encode(&text) {
                Ok(_) => n += 1,
                Err(e) => failures.push(format!("{}: {e}", path.display())),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(n > 50, "the goldens were read ({n})");
    }
}

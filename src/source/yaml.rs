//! A fast reader for the YAML that `kubectl get -o yaml`, `svcproxy generate` and
//! hand-written manifests mostly are: block mappings and sequences, single-line flow
//! collections, single-line plain and quoted scalars, comments and `---` document
//! markers. It builds the same `serde_json::Value` per document (and the same start line
//! of each top-level `items` element) that serde-saphyr does, several times faster.
//!
//! Anything outside that subset — anchors, aliases, tags, block scalars (`|`, `>`),
//! multi-line scalars or flow collections, directives, tabs, CR line ends, scalars whose
//! type serde-saphyr resolves by rules not copied here (`yes`, `0x1F`, `1.5`, `Null`, …),
//! duplicate keys, malformed text — is [`Unsupported`]: the caller reads the file with
//! serde-saphyr from the document it stopped at, so results and error messages are
//! serde-saphyr's whenever this reader is not sure. The differential tests in
//! [`super::file`] (`yaml_differential`: every YAML file of the repository, generated
//! clusters, random kubectl-shaped documents) check it against serde-saphyr.

use serde_json::{Map, Number, Value};

/// Why a document is left to serde-saphyr (for tests and debugging; never shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unsupported(pub &'static str);

type R<T> = Result<T, Unsupported>;

/// Deeper nesting than this (block or flow) is left to serde-saphyr, which has its own
/// limits: recursion here stays shallow.
const MAX_DEPTH: usize = 64;

/// One document: the line its root node starts on, the value, and the start line of each
/// element of a top-level `items` sequence.
#[derive(Debug, PartialEq)]
pub(super) struct Parsed {
    pub line: u64,
    pub value: Value,
    pub item_lines: Vec<u64>,
}

/// A document's root line, found by [`Documents::next_root`].
pub(super) struct Root<'t>(Line<'t>);

impl Root<'_> {
    /// The line's number.
    pub(super) fn line(&self) -> u64 {
        self.0.no
    }
}

/// A significant line (not blank, not only a comment).
#[derive(Clone, Copy)]
struct Line<'t> {
    no: u64,
    /// Where the line starts in the text.
    start: usize,
    indent: usize,
    /// The text after the indentation, without the line end.
    content: &'t str,
    /// Where the next line starts, and its number.
    next: usize,
    next_no: u64,
}

/// The documents of a text, one at a time.
pub(super) struct Documents<'t> {
    text: &'t str,
    pos: usize,
    no: u64,
    depth: usize,
}

impl<'t> Documents<'t> {
    pub(super) fn new(text: &'t str) -> Self {
        Documents { text, pos: 0, no: 1, depth: 0 }
    }

    /// The next non-null document, `None` at the end, or why this one is not read here
    /// (the reader is then spent).
    #[cfg(test)]
    pub(super) fn next_doc(&mut self) -> R<Option<Parsed>> {
        while let Some(root) = self.next_root()? {
            if let Some(parsed) = self.read(root)? {
                return Ok(Some(parsed));
            }
        }
        Ok(None)
    }

    /// The next document's root line (consumed), not read yet: [`Documents::read`] reads
    /// the document, [`Documents::skip`] passes over it. `None` at the end.
    pub(super) fn next_root(&mut self) -> R<Option<Root<'t>>> {
        while let Some(line) = self.peek()? {
            self.advance(&line);
            if !is_marker(&line)? {
                return Ok(Some(Root(line)));
            }
        }
        Ok(None)
    }

    /// The text of the document whose root line is `root`: from the start of that line to
    /// the start of the next `---` line, or to the end. A document read whole is exactly
    /// this text (the reader stops at the first `---` line), so the same text read again
    /// after another document gives the same value, its lines shifted by as many lines as
    /// its root line moved.
    pub(super) fn text_of(&self, root: &Root<'t>) -> &'t str {
        &self.text[root.0.start..doc_end(self.text.as_bytes(), root.0.next)]
    }

    /// Reads the document whose root line is `root` (the one [`Documents::next_root`] just
    /// returned): `None` when it is null.
    pub(super) fn read(&mut self, root: Root<'t>) -> R<Option<Parsed>> {
        let line = root.0;
        let mut item_lines = Vec::new();
        let value = self.node_at(&line, Some(&mut item_lines))?;
        match self.peek()? {
            None => {}
            Some(l) if is_marker(&l)? => {}
            Some(_) => return Err(Unsupported("content after the document's root node")),
        }
        Ok((!value.is_null()).then_some(Parsed { line: line.no, value, item_lines }))
    }

    /// Passes over the document whose root line is `root` (the one
    /// [`Documents::next_root`] just returned) without reading it.
    pub(super) fn skip(&mut self, root: Root<'t>) {
        let text = self.text_of(&root).as_bytes();
        self.pos = root.0.start + text.len();
        self.no = root.0.no + memchr::memchr_iter(b'\n', text).count() as u64;
    }

    /// The next significant line, not consumed.
    fn peek(&self) -> R<Option<Line<'t>>> {
        let (mut pos, mut no) = (self.pos, self.no);
        let bytes = self.text.as_bytes();
        while pos < bytes.len() {
            let end = memchr_newline(bytes, pos);
            let raw = &self.text[pos..end];
            let next = if end < bytes.len() { end + 1 } else { end };
            let indent = raw.bytes().take_while(|&b| b == b' ').count();
            let content = &raw[indent..];
            if content.starts_with('\t') || raw.ends_with('\r') {
                return Err(Unsupported("tab indentation or CR line end"));
            }
            if !(content.is_empty() || content.starts_with('#')) {
                return Ok(Some(Line { no, start: pos, indent, content: content.trim_end_matches(' '), next, next_no: no + 1 }));
            }
            (pos, no) = (next, no + 1);
        }
        Ok(None)
    }

    fn advance(&mut self, line: &Line) {
        (self.pos, self.no) = (line.next, line.next_no);
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Unsupported("nested too deep"));
        }
        Ok(())
    }

    /// The block node that starts at `line` (consumed), whose content starts at its
    /// indentation. `items`: the root node, whose `items` elements' lines are wanted.
    fn node_at(&mut self, line: &Line<'t>, items: Option<&mut Vec<u64>>) -> R<Value> {
        self.node(line.content, line.indent, line.no, items)
    }

    /// The block node whose first line's text from column `col` on is `s` (that line is
    /// consumed).
    fn node(&mut self, s: &'t str, col: usize, no: u64, items: Option<&mut Vec<u64>>) -> R<Value> {
        self.enter()?;
        let v = if is_seq_entry(s) {
            self.sequence(col, Some((s, no)), None)
        } else if mapping_key(s)?.is_some() {
            self.mapping(col, s, no, items)
        } else {
            let v = inline_value(s, 0)?;
            self.no_continuation(col)?;
            Ok(v)
        };
        self.depth -= 1;
        v
    }

    /// After a value ending a line: a following line indented deeper than `col` would
    /// continue it (a multi-line scalar) or be malformed; either is serde-saphyr's.
    fn no_continuation(&self, col: usize) -> R<()> {
        match self.peek()? {
            Some(l) if l.indent > col && !is_marker(&l)? => Err(Unsupported("a value continued on the next line")),
            _ => Ok(()),
        }
    }

    /// A block mapping at column `col`, whose first entry is `first` (on line `no`, already
    /// consumed).
    fn mapping(&mut self, col: usize, first: &'t str, no: u64, mut items: Option<&mut Vec<u64>>) -> R<Value> {
        let mut map = Map::new();
        let (mut s, mut no) = (first, no);
        loop {
            let (key, after) = mapping_key(s)?.ok_or(Unsupported("not a mapping entry"))?;
            let want_lines = items.is_some() && key == "items";
            let mut lines = Vec::new();
            let value = self.entry_value(after, col, no, want_lines.then_some(&mut lines))?;
            if want_lines {
                if let Some(out) = items.as_deref_mut() {
                    *out = lines;
                }
            }
            if map.insert(key, value).is_some() {
                return Err(Unsupported("a duplicate key"));
            }
            match self.peek()? {
                Some(l) if is_marker(&l)? => break,
                Some(l) if l.indent == col => {
                    if is_seq_entry(l.content) {
                        return Err(Unsupported("a sequence entry among mapping entries"));
                    }
                    self.advance(&l);
                    (s, no) = (l.content, l.no);
                }
                Some(l) if l.indent > col => return Err(Unsupported("a deeper line after a mapping value")),
                _ => break,
            }
        }
        Ok(Value::Object(map))
    }

    /// The value of a mapping entry at column `col` whose text after the `:` is `after`.
    fn entry_value(&mut self, after: &'t str, col: usize, no: u64, lines: Option<&mut Vec<u64>>) -> R<Value> {
        let rest = after.trim_start_matches(' ');
        if !(rest.is_empty() || rest.starts_with('#')) {
            if rest.len() == after.len() {
                return Err(Unsupported("no space after a key's colon"));
            }
            let v = inline_value(rest, 0)?;
            if let (Some(out), Value::Array(a)) = (lines, &v) {
                *out = vec![no; a.len()];
            }
            self.no_continuation(col)?;
            return Ok(v);
        }
        match self.peek()? {
            Some(l) if is_marker(&l)? => Ok(Value::Null),
            Some(l) if l.indent > col => {
                self.advance(&l);
                self.enter()?;
                let v = if is_seq_entry(l.content) {
                    self.sequence(l.indent, Some((l.content, l.no)), lines)
                } else {
                    self.node_at(&l, None)
                };
                self.depth -= 1;
                v
            }
            // kubectl's layout: a mapping's sequence value at the key's own indentation.
            Some(l) if l.indent == col && is_seq_entry(l.content) => {
                self.enter()?;
                let v = self.sequence(col, None, lines);
                self.depth -= 1;
                v
            }
            _ => Ok(Value::Null),
        }
    }

    /// A block sequence at column `col`; `first`: its first entry's line, already consumed.
    fn sequence(&mut self, col: usize, first: Option<(&'t str, u64)>, mut lines: Option<&mut Vec<u64>>) -> R<Value> {
        let mut out = Vec::new();
        let mut entry = first;
        loop {
            let (s, no) = match entry.take() {
                Some(e) => e,
                None => match self.peek()? {
                    Some(l) if is_marker(&l)? => break,
                    Some(l) if l.indent == col && is_seq_entry(l.content) => {
                        self.advance(&l);
                        (l.content, l.no)
                    }
                    Some(l) if l.indent > col => return Err(Unsupported("a deeper line after a sequence entry")),
                    _ => break,
                },
            };
            let after = &s[1..];
            let body = after.trim_start_matches(' ');
            if body.is_empty() || body.starts_with('#') {
                return Err(Unsupported("a sequence entry on its own line"));
            }
            if is_seq_entry(body) {
                return Err(Unsupported("a sequence in a sequence entry"));
            }
            let at = col + 1 + (after.len() - body.len());
            let v = if mapping_key(body)?.is_some() {
                self.enter()?;
                let v = self.mapping(at, body, no, None);
                self.depth -= 1;
                v?
            } else {
                let v = inline_value(body, 0)?;
                self.no_continuation(col)?;
                v
            };
            if let Some(l) = lines.as_deref_mut() {
                l.push(no);
            }
            out.push(v);
        }
        Ok(Value::Array(out))
    }
}

/// Where the first `---` line at or after `from` (a line's start) starts, or the end.
fn doc_end(bytes: &[u8], from: usize) -> usize {
    let mut at = from;
    while at < bytes.len() {
        if let Some(rest) = bytes[at..].strip_prefix(b"---") {
            let line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
            if line.iter().all(|&b| b == b' ') {
                return at;
            }
        }
        match memchr::memmem::find(&bytes[at..], b"\n---") {
            Some(i) => at += i + 1,
            None => break,
        }
    }
    bytes.len()
}

fn memchr_newline(bytes: &[u8], from: usize) -> usize {
    bytes[from..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| from + i)
}

/// A `---` line; other document-level syntax (`...`, `--- text`, `%` directives) is
/// serde-saphyr's.
fn is_marker(l: &Line) -> R<bool> {
    if l.indent != 0 {
        return Ok(false);
    }
    let c = l.content;
    if c == "---" {
        return Ok(true);
    }
    let starts = |m: &str| c.starts_with(m) && c[m.len()..].chars().next().is_none_or(|ch| ch == ' ');
    if starts("---") || starts("...") || c.starts_with('%') {
        return Err(Unsupported("document marker with content, document end or directive"));
    }
    Ok(false)
}

fn is_seq_entry(s: &str) -> bool {
    s == "-" || s.starts_with("- ")
}

/// When `s` starts with a mapping key followed by `:` (and a space or the line end): the
/// key and the text after the colon.
fn mapping_key(s: &str) -> R<Option<(String, &str)>> {
    let b = s.as_bytes();
    match b.first() {
        None => return Ok(None),
        Some(b'"' | b'\'') => {
            let (key, rest) = quoted(s)?;
            return match rest.strip_prefix(':') {
                Some(after) if after.is_empty() || after.starts_with(' ') => Ok(Some((key, after))),
                _ => Ok(None),
            };
        }
        Some(c) if b"-?:,[]{}#&*!|>%@`".contains(c) => return Ok(None),
        Some(_) => {}
    }
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b':' if i + 1 == b.len() || b[i + 1] == b' ' => {
                let key = s[..i].trim_end_matches(' ');
                check_key(key)?;
                return Ok(Some((key.to_string(), &s[i + 1..])));
            }
            b'#' if b[i - 1] == b' ' => return Ok(None),
            _ => {}
        }
        i += 1;
    }
    Ok(None)
}

/// Plain keys whose text serde-saphyr might resolve to something else first.
fn check_key(key: &str) -> R<()> {
    match key.as_bytes().first() {
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' || *c == b'/' => {}
        _ => return Err(Unsupported("a key that is empty or starts with a digit or sign")),
    }
    if special_word(key) {
        return Err(Unsupported("a key that reads as null or a boolean"));
    }
    Ok(())
}

/// Words serde-saphyr reads as null, booleans (YAML 1.1's too) or floats, in any case.
fn special_word(s: &str) -> bool {
    s.len() <= 8
        && ["y", "yes", "on", "n", "no", "off", "true", "false", "null", "inf", "infinity", "nan"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w))
}

/// A value written on one line (flow collection, quoted or plain scalar), with only a
/// comment allowed after it. `depth`: flow nesting so far.
fn inline_value(s: &str, depth: usize) -> R<Value> {
    let (v, rest) = match s.as_bytes()[0] {
        b'[' | b'{' | b'"' | b'\'' => flow_node(s, depth)?,
        c if b"-?:,]}#&*!|>%@`".contains(&c) && !(b"-:".contains(&c) && s.len() > 1 && s.as_bytes()[1] != b' ') => {
            return Err(Unsupported("a value starting with an indicator"));
        }
        _ => {
            let end = s.find(" #").unwrap_or(s.len());
            let text = s[..end].trim_end_matches(' ');
            if text.contains(": ") || text.ends_with(':') || text.contains('\t') {
                return Err(Unsupported("a colon in a plain value"));
            }
            (plain(text)?, &s[end..])
        }
    };
    let trimmed = rest.trim_start_matches(' ');
    if !(trimmed.is_empty() || trimmed.starts_with('#') && trimmed.len() < rest.len()) {
        return Err(Unsupported("text after a value"));
    }
    Ok(v)
}

/// A flow node at the start of `s`, and what follows it on the line.
fn flow_node(s: &str, depth: usize) -> R<(Value, &str)> {
    if depth > MAX_DEPTH {
        return Err(Unsupported("nested too deep"));
    }
    match s.as_bytes().first() {
        Some(b'[') => flow_seq(&s[1..], depth + 1),
        Some(b'{') => flow_map(&s[1..], depth + 1),
        Some(b'"' | b'\'') => {
            let (v, rest) = quoted(s)?;
            Ok((Value::String(v), rest))
        }
        Some(c) if b"-?:,[]{}#&*!|>%@`".contains(c) && !(b"-:".contains(c) && s.as_bytes().get(1).is_some_and(|b| !b" ,[]{}".contains(b))) => {
            Err(Unsupported("a flow value starting with an indicator"))
        }
        Some(_) => {
            let end = flow_plain_end(s)?;
            Ok((plain(s[..end].trim_end_matches(' '))?, &s[end..]))
        }
        None => Err(Unsupported("a flow collection continued on the next line")),
    }
}

/// Where a plain scalar inside a flow collection ends: at `,`, `]`, `}`; a `:` that could
/// end a key, a `#` or a `[`/`{` inside it are serde-saphyr's.
fn flow_plain_end(s: &str) -> R<usize> {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b',' | b']' | b'}' => return Ok(i),
            b'[' | b'{' | b'#' | b'\t' => return Err(Unsupported("an indicator in a flow scalar")),
            b':' if b.get(i + 1).is_none_or(|n| b" ,]}".contains(n)) => return Err(Unsupported("a colon ending a flow scalar")),
            _ => {}
        }
    }
    Err(Unsupported("a flow collection continued on the next line"))
}

fn flow_seq(mut s: &str, depth: usize) -> R<(Value, &str)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start_matches(' ');
        if let Some(rest) = s.strip_prefix(']') {
            if !out.is_empty() {
                return Err(Unsupported("a trailing comma in a flow sequence"));
            }
            return Ok((Value::Array(out), rest));
        }
        let (v, rest) = flow_node(s, depth)?;
        if flow_key_follows(rest) {
            return Err(Unsupported("a mapping in a flow sequence"));
        }
        out.push(v);
        let rest = rest.trim_start_matches(' ');
        match rest.as_bytes().first() {
            Some(b',') => s = &rest[1..],
            Some(b']') => return Ok((Value::Array(out), &rest[1..])),
            _ => return Err(Unsupported("a flow sequence not closed on its line")),
        }
    }
}

fn flow_key_follows(rest: &str) -> bool {
    rest.trim_start_matches(' ').starts_with(':')
}

fn flow_map(mut s: &str, depth: usize) -> R<(Value, &str)> {
    let mut map = Map::new();
    loop {
        s = s.trim_start_matches(' ');
        if let Some(rest) = s.strip_prefix('}') {
            if !map.is_empty() {
                return Err(Unsupported("a trailing comma in a flow mapping"));
            }
            return Ok((Value::Object(map), rest));
        }
        let (key, rest) = match s.as_bytes().first() {
            Some(b'"' | b'\'') => {
                let (k, rest) = quoted(s)?;
                (k, rest.strip_prefix(':').ok_or(Unsupported("a flow key without a colon"))?)
            }
            _ => {
                let i = s.find(": ").ok_or(Unsupported("a flow key without ': '"))?;
                let key = s[..i].trim_end_matches(' ');
                if key.bytes().any(|c| b",[]{}#:\t\"'".contains(&c)) {
                    return Err(Unsupported("an unusual flow key"));
                }
                check_key(key)?;
                (key.to_string(), &s[i + 1..])
            }
        };
        let rest = rest.trim_start_matches(' ');
        if rest.starts_with([',', '}']) {
            return Err(Unsupported("a flow key without a value"));
        }
        let (v, rest) = flow_node(rest, depth)?;
        if map.insert(key, v).is_some() {
            return Err(Unsupported("a duplicate key"));
        }
        let rest = rest.trim_start_matches(' ');
        match rest.as_bytes().first() {
            Some(b',') => s = &rest[1..],
            Some(b'}') => return Ok((Value::Object(map), &rest[1..])),
            _ => return Err(Unsupported("a flow mapping not closed on its line")),
        }
    }
}

/// A quoted scalar at the start of `s` (closed on the same line), and what follows it.
fn quoted(s: &str) -> R<(String, &str)> {
    let q = s.as_bytes()[0];
    let body = &s[1..];
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if q == b'\'' => {
                if body[i + 1..].starts_with('\'') {
                    out.push('\'');
                    chars.next();
                } else {
                    return Ok((out, &body[i + 1..]));
                }
            }
            '"' if q == b'"' => return Ok((out, &body[i + 1..])),
            '\\' if q == b'"' => {
                let (_, e) = chars.next().ok_or(Unsupported("an escaped line break"))?;
                match e {
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    '/' => out.push('/'),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'u' => {
                        let hex = body.get(i + 2..i + 6).ok_or(Unsupported("a short \\u escape"))?;
                        let ch = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                        out.push(ch.ok_or(Unsupported("a \\u escape that is not a character"))?);
                        for _ in 0..4 {
                            chars.next();
                        }
                    }
                    _ => return Err(Unsupported("an unusual escape")),
                }
            }
            '\t' => return Err(Unsupported("a tab in a quoted scalar")),
            c => out.push(c),
        }
    }
    Err(Unsupported("a quoted scalar continued on the next line"))
}

/// A plain scalar's value, as serde-saphyr resolves it for an untyped target, for the
/// spellings whose resolution is plain to see; the others are serde-saphyr's.
fn plain(s: &str) -> R<Value> {
    match s {
        "" => return Err(Unsupported("an empty plain scalar")),
        "null" | "~" => return Ok(Value::Null),
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let b = s.as_bytes();
    let first = b[0];
    if first.is_ascii_alphabetic() || first == b'_' || first == b'/' {
        if special_word(s) {
            return Err(Unsupported("a word serde-saphyr may read as null, a boolean or a float"));
        }
        return Ok(Value::String(s.to_string()));
    }
    if !(first.is_ascii_digit() || first == b'-' || first == b':') {
        return Err(Unsupported("a plain scalar starting with punctuation"));
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !digits.is_empty() && digits.len() <= 18 && digits.bytes().all(|c| c.is_ascii_digit()) {
        if digits.starts_with('0') && digits != "0" || s == "-0" {
            return Err(Unsupported("a leading zero"));
        }
        let n: i64 = s.parse().map_err(|_| Unsupported("an integer out of range"))?;
        return Ok(if n < 0 { Value::Number(Number::from(n)) } else { Value::Number(Number::from(n as u64)) });
    }
    // What no integer or float spelling has: two dots (IPv4 addresses, CIDRs, versions),
    // `::` (IPv6), a letter other than the hex digits, `x` and `o` (durations: `30s`,
    // `1m0s`; quantities: `10Gi`), or a character other than letters, digits, `.`, `_`,
    // `+`, `-` and `:` (`/`, `,`, `=`, a space, …).
    let dots = b.iter().filter(|&&c| c == b'.').count();
    let letter = first.is_ascii_digit() && b.iter().any(|c| c.is_ascii_alphabetic() && !c.is_ascii_hexdigit() && !b"xXoO".contains(c));
    let odd = b.iter().any(|c| !(c.is_ascii_alphanumeric() || b"._+-:".contains(c)));
    if dots >= 2 || s.contains("::") || letter || odd {
        return Ok(Value::String(s.to_string()));
    }
    Err(Unsupported("a plain scalar that may be a number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn docs(text: &str) -> R<Vec<(u64, Value, Vec<u64>)>> {
        let mut d = Documents::new(text);
        let mut out = Vec::new();
        while let Some(p) = d.next_doc()? {
            out.push((p.line, p.value, p.item_lines));
        }
        Ok(out)
    }

    #[test]
    fn reads_kubectls_layout() {
        let text = "# c\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n    labels: {k: \"1\", l: 'it''s'}\n  spec:\n    ports:\n    - port: 80\n      name: \"\"\n    clusterIPs: [10.0.0.1, fd00::1]\n\n-   kind: Pod   # c\n    m: -3\n---\n---\nx: ~\n";
        let got = docs(text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 2);
        assert_eq!(got[0].2, [5, 16]);
        assert_eq!(
            got[0].1,
            json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "labels": {"k": "1", "l": "it's"}},
                 "spec": {"ports": [{"port": 80, "name": ""}], "clusterIPs": ["10.0.0.1", "fd00::1"]}},
                {"kind": "Pod", "m": -3}]})
        );
        assert_eq!(got[1], (20, json!({"x": null}), vec![]));
    }

    #[test]
    fn leaves_what_it_does_not_know_to_serde_saphyr() {
        for text in [
            "a: &x 1\n", "a: *x\n", "a: !!str 1\n", "a: |\n  x\n", "a: >\n  x\n", "a: b\n  c\n", "a: [1,\n 2]\n",
            "%YAML 1.2\n---\na: 1\n", "--- a\n", "a: 1\n...\n", "a:\tb\n", "a: 1\r\n", "a: yes\n", "a: 0x1F\n",
            "a: 1.5\n", "a: Null\n", "a: 012\n", "a: 1\na: 2\n", "a: {b: 1, b: 2}\n", "a: [1, ]\n", "? a\n: b\n",
            "- - a\n", "a:\n- b\nc: d\n- e\n", "a: b: c\n", "1: a\n", "a: \"\\x41\"\n", "a: 'x\n  y'\n", "a: 1e3\n",
            "a: 99999999999999999999\n", "on: a\n", "a: {y: 1}\n", "a: [a:b: c]\n", "a: [x: 1]\n", "a: -\n",
        ] {
            assert!(docs(text).is_err(), "{text:?} should be serde-saphyr's: {:?}", docs(text));
        }
    }
}

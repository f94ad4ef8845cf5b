//! Cluster state from files: a file, a directory tree of files (`*.yaml`, `*.yml`,
//! `*.json`, read recursively in path order, as a support bundle or `kubectl cluster-info
//! dump --output-directory` lays them out), or `-` for stdin. A file holds YAML documents
//! (`---`-separated; JSON documents among them are YAML too) or a stream of JSON values
//! (what `jq '.items[]'` and `kubectl cluster-info dump` write). A document may be a plain
//! object, a `kind: List` (what `kubectl get … -o yaml` prints) or a typed list
//! (`ServiceList`, …: what the API server returns), whose items may omit apiVersion and
//! kind.
//!
//! Reading is all-or-nothing: the first bad object fails the whole read with an error
//! naming the file, the line its object starts on (its document's, where the parser
//! cannot tell), the list item, the object and the field.

// A SourceError names the file, line, object and field; it is returned once per run (or
// per skipped object in watch mode), so its size does not matter on the happy path.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;

use super::convert::{self, Skip};
use super::convert_extra;
use super::error::{FieldError, SourceError};
use super::extra::Extra;
use super::json::{self, scalars_as, Doc};
use super::yaml;
use crate::settings::fixture::{FixtureDoc, FIXTURE_KIND};
use crate::model::{EndpointSlice, NamespacedName, Node, Service};

/// Everything read from the inputs, in input order (a later object with the same
/// identity replaces an earlier one when fed to the trackers).
#[derive(Debug, Default, Clone)]
pub struct ClusterState {
    pub fixture: Option<FixtureDoc>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
    /// ServiceCIDR objects (nftables mode's drop rule for unallocated ClusterIPs).
    pub service_cidrs: Vec<crate::model::ServiceCidr>,
    /// One line for everything skipped (other kinds, ignored fields).
    pub notes: Vec<Note>,
    /// Pods, legacy Endpoints and what the endpoint controllers read of each Service.
    pub extra: Extra,
    /// Objects read more than once (same kind, namespace and name); the later copy is used.
    pub duplicates: Vec<Duplicate>,
    /// Where each object was last read, to find duplicates.
    pub(super) seen: BTreeMap<(&'static str, NamespacedName), (PathBuf, u64)>,
}

/// The same object (kind, namespace and name) read twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub kind: &'static str,
    pub id: NamespacedName,
    /// Where it was read before (`file`, line).
    pub first: (PathBuf, u64),
    /// Where it was read again: this copy is used.
    pub again: (PathBuf, u64),
}

impl Duplicate {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn object(&self) -> String {
        if self.id.namespace.is_empty() { self.id.name.clone() } else { self.id.to_string() }
    }

    /// What happened, naming both places.
    pub fn describe(&self) -> String {
        let at = |(p, l): &(PathBuf, u64)| format!("{}:{l}", p.display());
        format!(
            "{} {} is read twice: first at {}, again at {}; the later copy is used, the first is ignored",
            self.kind,
            self.object(),
            at(&self.first),
            at(&self.again)
        )
    }

    /// The warning render and sync print, at the later copy.
    pub fn note(&self) -> Note {
        Note { path: self.again.0.clone(), line: self.again.1, text: format!("warning: {}", self.describe()) }
    }
}

/// Something read but not used, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub path: PathBuf,
    pub line: u64,
    pub text: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            // About the input as a whole.
            0 if self.path.as_os_str().is_empty() => f.write_str(&self.text),
            // About a file or directory as a whole.
            0 => write!(f, "{}: {}", self.path.display(), self.text),
            line => write!(f, "{}:{line}: {}", self.path.display(), self.text),
        }
    }
}

/// Reads `path` (file, directory or `-`).
pub fn read_path(path: &Path) -> Result<ClusterState, SourceError> {
    let mut state = ClusterState::default();
    let (files, note) = input_files(path)?;
    state.notes.extend(note);
    for file in files {
        let text = read_text(&file)?;
        read_str(&file, &text, &mut state)?;
    }
    Ok(state)
}

/// The files `path` names: itself, or every `*.yaml`, `*.yml` and `*.json` file in the
/// directory tree under it (depth first, each directory's entries in name order), with a
/// note saying how many were read and which were skipped and why.
pub(crate) fn input_files(path: &Path) -> Result<(Vec<PathBuf>, Option<Note>), SourceError> {
    if path == Path::new("-") || !path.is_dir() {
        return Ok((vec![path.to_path_buf()], None));
    }
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    walk(path, &mut files, &mut skipped)?;
    let mut text = format!(
        "read {} file(s) (*.yaml, *.yml, *.json in this directory and every subdirectory, in path order)",
        files.len()
    );
    if !skipped.is_empty() {
        const SHOWN: usize = 10;
        let list: Vec<String> = skipped
            .iter()
            .take(SHOWN)
            .map(|(p, why): &(PathBuf, &str)| format!("{} ({why})", p.strip_prefix(path).unwrap_or(p).display()))
            .collect();
        let more = if skipped.len() > SHOWN { format!(" and {} more", skipped.len() - SHOWN) } else { String::new() };
        text.push_str(&format!("; skipped {}: {}{more}", skipped.len(), list.join(", ")));
    }
    Ok((files, Some(Note { path: path.to_path_buf(), line: 0, text })))
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>, skipped: &mut Vec<(PathBuf, &'static str)>) -> Result<(), SourceError> {
    let io = |error| SourceError::Io { path: dir.to_path_buf(), error };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        entries.push((entry.path(), entry.file_type().map_err(io)?));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (p, ty) in entries {
        let hidden = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ty.is_dir() {
            if hidden {
                skipped.push((p, "hidden directory"));
            } else {
                walk(&p, files, skipped)?;
            }
        } else if ty.is_symlink() && p.is_dir() {
            skipped.push((p, "link to a directory, not followed"));
        } else if !p.is_file() {
            skipped.push((p, "not a regular file"));
        } else if matches!(ext, "yaml" | "yml" | "json") {
            files.push(p);
        } else {
            skipped.push((p, "not .yaml, .yml or .json"));
        }
    }
    Ok(())
}

pub(super) fn read_text(path: &Path) -> Result<String, SourceError> {
    let io = |error| SourceError::Io { path: path.to_path_buf(), error };
    let bytes = if path == Path::new("-") {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).map_err(io)?;
        b
    } else {
        std::fs::read(path).map_err(io)?
    };
    decode(path, bytes)
}

/// UTF-8 text (a UTF-8 byte-order mark is dropped); UTF-16 (what Windows PowerShell's `>`
/// writes) is named as such rather than reported as invalid UTF-8.
fn decode(path: &Path, mut bytes: Vec<u8>) -> Result<String, SourceError> {
    let syntax = |message: String| SourceError::Syntax { path: path.to_path_buf(), message };
    let bom16 = bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]);
    // Without a byte-order mark: ASCII text in UTF-16 has a zero in every other byte.
    let nul16 = bytes.len() >= 2 && (bytes[0] == 0) != (bytes[1] == 0);
    if bom16 || nul16 {
        let what = if path == Path::new("-") { "the input" } else { "the file" };
        return Err(syntax(format!(
            "{what} is UTF-16; save it as UTF-8 (Windows PowerShell's `>` writes UTF-16: pipe to `Out-File -Encoding utf8 FILE` instead)"
        )));
    }
    if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        bytes.drain(..3);
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        syntax(format!("line {line}: not UTF-8 text (byte {at} is not valid UTF-8); save the file as UTF-8"))
    })
}

/// Watch mode's reading: every object that can be read, and one error per file, document
/// or object that cannot (skipped, never fatal).
pub fn read_path_lenient(path: &Path) -> (ClusterState, Vec<SourceError>) {
    let mut state = ClusterState::default();
    let mut errors = Vec::new();
    let files = match input_files(path) {
        Ok((f, note)) => {
            state.notes.extend(note);
            f
        }
        Err(e) => return (state, vec![e]),
    };
    for file in files {
        read_file_lenient(&file, &mut state, &mut errors);
    }
    (state, errors)
}

/// One file of [`read_path_lenient`] into `state`, its errors into `errors`.
pub(super) fn read_file_lenient(file: &Path, state: &mut ClusterState, errors: &mut Vec<SourceError>) {
    let read = read_text(file).and_then(|text| {
        each_document(file, &text, &mut Each(|doc, line, value| {
            if let Err(e) = read_doc(file, doc, line, value, state) {
                errors.push(e);
            }
            Ok(())
        }))
    });
    match read {
        Ok(note) => state.notes.extend(note),
        Err(e) => errors.push(e),
    }
}

/// Parses one file's text into `state`. `path` is only used in messages.
pub fn read_str(path: &Path, text: &str, state: &mut ClusterState) -> Result<(), SourceError> {
    let skipped = each_document(path, text, &mut Each(|doc, line, value| read_doc(path, doc, line, value, state)))?;
    state.notes.extend(skipped);
    Ok(())
}

/// What [`each_document`] hands a file's documents to.
pub(super) trait Visit<'t> {
    /// Whether the subset YAML reader's documents are to be offered to [`Visit::known`]
    /// (finding a document's text costs a scan of it).
    const TEXTS: bool = false;

    /// A document of the subset YAML reader, not read yet: its text
    /// ([`yaml::Documents::text_of`]) and root line. True when the visitor has taken it
    /// already (from an earlier read of the same text): it is then passed over.
    fn known(&mut self, _text: &'t str, _line: u64) -> bool {
        false
    }

    /// Document number `doc`, starting on line `line`; `text` is its text when it was
    /// offered to [`Visit::known`].
    fn doc(&mut self, doc: usize, line: u64, value: Doc<'t>, text: Option<&'t str>) -> Result<(), SourceError>;
}

/// A closure `f(document number, start line, document)` as a [`Visit`].
struct Each<F>(F);

impl<'t, F: FnMut(usize, u64, Doc<'t>) -> Result<(), SourceError>> Visit<'t> for Each<F> {
    fn doc(&mut self, doc: usize, line: u64, value: Doc<'t>, _: Option<&'t str>) -> Result<(), SourceError> {
        (self.0)(doc, line, value)
    }
}

/// Hands each document of a file to `v` (returning a note of what was skipped between
/// them), one at a time: a document is read, handed over and dropped before the next is
/// parsed, so a large multi-document dump is never held whole as a tree. A file of JSON
/// values (one, or a stream of them) goes through serde_json ([`json::each_value`]: fast,
/// and a list's items are read one at a time); everything else, JSON documents between
/// `---` lines included, through serde-saphyr. Stops at the first error (a syntax error,
/// or one `v` returns).
pub(super) fn each_document<'t, V: Visit<'t>>(path: &Path, text: &'t str, v: &mut V) -> Result<Option<Note>, SourceError> {
    // A line `---` cannot occur in JSON text: such a file is YAML documents (a container
    // log in a `kubectl cluster-info dump` may hold one: only what comes before is looked at).
    if text.trim_start().starts_with('{') && !has_separator_line(before_logs(text)) {
        return json::each_value(path, text, |doc, line, value| v.doc(doc, line, value, None));
    }
    // Most YAML (kubectl's, svcproxy's own) is read by the subset reader; from the first
    // document it does not know on, serde-saphyr reads the file, skipping the documents
    // already handed over, so its results and messages are serde-saphyr's.
    let mut fast = yaml::Documents::new(text);
    let mut doc = 0;
    while let Ok(next) = fast.next_root() {
        let Some(root) = next else { return Ok(None) };
        let doc_text = if V::TEXTS { Some(fast.text_of(&root)) } else { None };
        if doc_text.is_some_and(|t| v.known(t, root.line())) {
            fast.skip(root);
            doc += 1;
            continue;
        }
        match fast.read(root) {
            Ok(Some(parsed)) => {
                doc += 1;
                v.doc(doc, parsed.line, Doc::Tree { value: parsed.value, item_lines: parsed.item_lines }, doc_text)?;
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
    saphyr_documents(path, text, doc, |doc, line, value| v.doc(doc, line, value, None))
}

/// `text` up to the first container log of a `kubectl cluster-info dump`, if any.
fn before_logs(text: &str) -> &str {
    memchr::memmem::find(text.as_bytes(), b"\n==== START logs for container ").map_or(text, |i| &text[..i])
}

/// Whether a line of `text` other than the first is `---` (trailing whitespace aside).
/// The caller knows the first starts with `{` once leading whitespace is skipped. (Found
/// with a SIMD substring search: a 50 MB JSON list is looked at before it is parsed.)
fn has_separator_line(text: &str) -> bool {
    memchr::memmem::find_iter(text.as_bytes(), b"\n---").any(|i| {
        let rest = &text[i + 4..];
        rest[..rest.find('\n').unwrap_or(rest.len())].trim_end().is_empty()
    })
}

/// [`each_document`] by serde-saphyr, from the document after the first `skip` non-null
/// ones (which the caller has had).
fn saphyr_documents<'t>(
    path: &Path,
    text: &'t str,
    skip: usize,
    mut f: impl FnMut(usize, u64, Doc<'t>) -> Result<(), SourceError>,
) -> Result<Option<Note>, SourceError> {
    // serde-saphyr's default budget suits config files; a cluster dump has one document
    // per object. Size limits scale with the input; alias and anchor limits (the
    // expansion bombs) keep their defaults.
    let scaled = text.len().max(1 << 20);
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_documents: scaled,
            max_nodes: scaled,
            max_events: scaled * 2,
            max_total_scalar_bytes: scaled,
        },
    };
    let mut reader = text.as_bytes();
    let mut doc = 0;
    for item in serde_saphyr::read_with_options::<_, serde_saphyr::Spanned<YamlDoc>>(&mut reader, options) {
        let spanned = item.map_err(|e| {
            let at = e.location().map(|l| format!("line {}: ", l.line())).unwrap_or_default();
            SourceError::Syntax { path: path.to_path_buf(), message: format!("{at}malformed YAML: {e}") }
        })?;
        if spanned.value.value.is_null() {
            continue;
        }
        doc += 1;
        if doc <= skip {
            continue;
        }
        let YamlDoc { value, item_lines } = spanned.value;
        f(doc, spanned.referenced.line(), Doc::Tree { value, item_lines })?;
    }
    Ok(None)
}

/// A YAML document as a JSON value, with the start line of each element of its top-level
/// `items` (a list's objects), which serde-saphyr can tell.
struct YamlDoc {
    value: Value,
    item_lines: Vec<u64>,
}

impl<'de> serde::Deserialize<'de> for YamlDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(YamlDocVisitor)
    }
}

struct YamlDocVisitor;

impl YamlDocVisitor {
    fn plain(value: Value) -> YamlDoc {
        YamlDoc { value, item_lines: Vec::new() }
    }
}

impl<'de> serde::de::Visitor<'de> for YamlDocVisitor {
    type Value = YamlDoc;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<YamlDoc, A::Error> {
        let mut out = serde_json::Map::new();
        let mut item_lines = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "items" {
                match map.next_value::<Items>()? {
                    Items::Spanned(items) => {
                        item_lines = items.iter().map(|i| i.referenced.line()).collect();
                        Value::Array(items.into_iter().map(|i| i.value).collect())
                    }
                    Items::Other(v) => v,
                }
            } else {
                map.next_value::<Value>()?
            };
            out.insert(key, value);
        }
        Ok(YamlDoc { value: Value::Object(out), item_lines })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<YamlDoc, A::Error> {
        use serde::Deserialize;
        Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Self::plain)
    }

    scalars_as!(YamlDoc, Self::plain);
}

/// A document's `items`: a sequence keeps each element's place.
enum Items {
    Spanned(Vec<serde_saphyr::Spanned<Value>>),
    Other(Value),
}

impl<'de> serde::Deserialize<'de> for Items {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Items;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(Items::Spanned(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Items, A::Error> {
                use serde::Deserialize;
                Value::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Items::Other)
            }
            scalars_as!(Items, Items::Other);
        }
        d.deserialize_any(V)
    }
}

/// Where a document (or an item of a list) is, for messages.
struct At<'a> {
    path: &'a Path,
    /// The line the object starts on: its document's, or its own inside a list.
    line: u64,
    doc: usize,
    /// The index of the list item being read.
    item: Option<usize>,
    /// The start line of each item of the document's list, where the parser knows them.
    item_lines: &'a [u64],
}

impl At<'_> {
    fn doc_error(&self, message: impl Into<String>) -> SourceError {
        SourceError::Document { path: self.path.to_path_buf(), line: self.line, doc: self.doc, message: message.into() }
    }

    /// An error about the list item `object` (not yet known to be an object of a kind).
    fn item_error(&self, object: &str, message: &str) -> SourceError {
        match self.item {
            Some(i) => self.doc_error(format!("items[{i}] ({object}): {message}")),
            None => self.doc_error(message),
        }
    }

    fn field_error(&self, kind: &str, object: String, e: FieldError) -> SourceError {
        let object = match self.item {
            Some(i) => format!("{object} (items[{i}])"),
            None => object,
        };
        SourceError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            kind: kind.to_string(),
            object,
            field: e.field,
            reason: e.reason,
        }
    }

    fn note(&self, text: String) -> Note {
        Note { path: self.path.to_path_buf(), line: self.line, text }
    }
}

/// The lists read: `kind: List` (items carry their own kind) and the typed lists, whose
/// items' kind follows from the list's.
const LIST_KINDS: &[&str] = &["List", "ServiceList", "EndpointSliceList", "NodeList", "PodList", "EndpointsList", "ServiceCIDRList"];

/// Reads document number `doc` of `path`, which starts on line `line`.
pub(super) fn read_doc(path: &Path, doc: usize, line: u64, value: Doc, state: &mut ClusterState) -> Result<(), SourceError> {
    let at = |item_lines| At { path, line, doc, item: None, item_lines };
    match value {
        Doc::Tree { value, item_lines } => read_value(&at(&item_lines), value, state),
        Doc::List { head, items } => {
            let kind = head.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
            if !LIST_KINDS.contains(&kind.as_str()) {
                // Not a list svcproxy reads: the whole value, as any other document.
                let mut head = head;
                let items = items.into_iter().map(|(l, raw)| json::parse_item(path, l, raw)).collect::<Result<_, _>>()?;
                head.insert("items".to_string(), Value::Array(items));
                return read_value(&at(&[]), Value::Object(head), state);
            }
            let api_version = head.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
            read_json_items(&at(&[]), &kind, &api_version, items, state)
        }
    }
}

/// Reads the items of a list of kind `kind` (one of [`LIST_KINDS`]), each with its start
/// line, one at a time.
fn read_items(
    at: &At,
    kind: &str,
    api_version: &str,
    items: impl Iterator<Item = Result<(u64, Value), SourceError>>,
    state: &mut ClusterState,
) -> Result<(), SourceError> {
    // What the API server returns (and `kubectl get --raw`, `kubectl cluster-info dump`
    // print): items without apiVersion and kind, which are the list's.
    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
    for (i, item) in items.enumerate() {
        let (line, item) = item?;
        read_item(&At { line, item: Some(i), item_lines: &[], ..*at }, item_kind, api_version, item, state)?;
    }
    Ok(())
}

/// Reads the items of a JSON list of kind `kind` (one of [`LIST_KINDS`]) from their text:
/// Services and EndpointSlices straight into their kube types ([`json::direct_item`]),
/// anything else (or anything that fails so) as a value, which names what is wrong.
fn read_json_items(at: &At, kind: &str, api_version: &str, items: Vec<(u64, &RawValue)>, state: &mut ClusterState) -> Result<(), SourceError> {
    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
    for (i, (line, raw)) in items.into_iter().enumerate() {
        let at = At { line, item: Some(i), item_lines: &[], ..*at };
        match json::direct_item(raw, item_kind, api_version) {
            Some(json::Direct { kind, object, typed: json::Typed::Service(svc) }) => add_service(&at, kind, &object, *svc, state)?,
            Some(json::Direct { kind, object, typed: json::Typed::Slice(slice) }) => add_slice(&at, kind, &object, *slice, state)?,
            None => read_item(&at, item_kind, api_version, json::parse_item(at.path, line, raw)?, state)?,
        }
    }
    Ok(())
}

/// One item of a list: without apiVersion or kind, it takes the list's (`item_kind`,
/// `api_version`).
fn read_item(at: &At, item_kind: Option<&str>, api_version: &str, mut item: Value, state: &mut ClusterState) -> Result<(), SourceError> {
    if let (Some(item_kind), Value::Object(m)) = (item_kind, &mut item) {
        let missing = |m: &serde_json::Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).is_none_or(str::is_empty);
        if missing(m, "kind") {
            m.insert("kind".into(), item_kind.into());
        }
        if missing(m, "apiVersion") && !api_version.is_empty() {
            m.insert("apiVersion".into(), api_version.into());
        }
    }
    read_value(at, item, state)
}

fn read_value(at: &At, value: Value, state: &mut ClusterState) -> Result<(), SourceError> {
    let object = object_name(&value);
    let Value::Object(mut map) = value else {
        return Err(at.item_error(&object, "expected a Kubernetes object (a mapping with apiVersion and kind)"));
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    if LIST_KINDS.contains(&kind.as_str()) {
        let Some(Value::Array(items)) = map.remove("items") else {
            return Err(at.field_error(&kind, object, FieldError::new("items", "missing or not a list")));
        };
        let lines = at.item_lines;
        let items = items.into_iter().enumerate().map(|(i, item)| Ok((lines.get(i).copied().unwrap_or(at.line), item)));
        return read_items(at, &kind, &api_version, items, state);
    }
    let value = Value::Object(map);
    match (api_version.as_str(), kind.as_str()) {
        (_, FIXTURE_KIND) => read_fixture(at, value, state),
        ("v1", "Service") => add_service(at, &kind, &object, typed(at, &kind, &object, value)?, state),
        ("v1", "Pod") => add(at, ("Pod", &object, true), value, state, convert_extra::pod, |p| p.id.clone(), |s| &mut s.extra.pods),
        ("v1", "Endpoints") => {
            add(at, ("Endpoints", &object, true), value, state, convert_extra::endpoints, |e| e.id.clone(), |s| &mut s.extra.endpoints)
        }
        ("discovery.k8s.io/v1", "EndpointSlice") => add_slice(at, &kind, &object, typed(at, &kind, &object, value)?, state),
        ("v1", "Node") => {
            add(at, ("Node", &object, false), value, state, convert::node, |n| NamespacedName::new(String::new(), n.name.clone()), |s| &mut s.nodes)
        }
        ("networking.k8s.io/v1" | "networking.k8s.io/v1beta1", "ServiceCIDR") => {
            add(at, ("ServiceCIDR", &object, false), value, state, convert::service_cidr, |c| c.id.clone(), |s| &mut s.service_cidrs)
        }
        ("", _) | (_, "") => Err(at.item_error(&object, "missing apiVersion or kind")),
        _ => {
            // A list of another kind (`EventList` in a cluster-info dump) has no name.
            let what = match value.get("items").and_then(Value::as_array) {
                Some(items) if kind.ends_with("List") => format!("with {} item(s)", items.len()),
                _ => object,
            };
            state.notes.push(at.note(format!("skipped {api_version}/{kind} {what}: not a kind svcproxy reads")));
            Ok(())
        }
    }
}

/// An object of kind `what.0` (named `what.1` in messages; its origin recorded when
/// `what.2`), converted by `convert`, into `list` in place of an earlier copy.
fn add<K: DeserializeOwned, T>(
    at: &At,
    what: (&'static str, &str, bool),
    value: Value,
    state: &mut ClusterState,
    convert: fn(&K) -> Result<T, FieldError>,
    id: fn(&T) -> NamespacedName,
    list: fn(&mut ClusterState) -> &mut Vec<T>,
) -> Result<(), SourceError> {
    let (kind, object, origin) = what;
    let k: K = typed(at, kind, object, value)?;
    let t = convert(&k).map_err(|e| at.field_error(kind, object.to_string(), e))?;
    let tid = id(&t);
    if once(at, kind, &tid, state) {
        list(state).retain(|o| id(o) != tid);
    }
    if origin {
        record_origin(at, kind, &tid, state);
    }
    list(state).push(t);
    Ok(())
}

/// A Service read (as `kind`, named `object` in messages) into `state`.
fn add_service(at: &At, kind: &str, object: &str, svc: core::Service, state: &mut ClusterState) -> Result<(), SourceError> {
    let model = convert::service(&svc).map_err(|e| at.field_error(kind, object.to_string(), e))?;
    if once(at, "Service", &model.id, state) {
        state.services.retain(|s| s.id != model.id);
        state.extra.backends.retain(|b| b.id != model.id);
    }
    record_origin(at, kind, &model.id, state);
    if let Some(why) = unproxied_without_cluster_ip(&svc, &model) {
        state.notes.push(at.note(format!("{kind} {object}: {why}")));
    }
    match convert_extra::service_backend(&svc) {
        Ok(b) => state.extra.backends.push(b),
        Err(e) => state.notes.push(at.note(format!(
            "{kind} {object}: field {}: {} (ignored by endpoint derivation and lint)",
            e.field, e.reason
        ))),
    }
    state.services.push(model);
    Ok(())
}

/// An EndpointSlice read (as `kind`, named `object` in messages) into `state`.
fn add_slice(at: &At, kind: &str, object: &str, slice: discovery::EndpointSlice, state: &mut ClusterState) -> Result<(), SourceError> {
    let refs = convert_extra::slice_refs(&slice);
    if once(at, "EndpointSlice", &refs.slice, state) {
        state.extra.slice_refs.retain(|r| r.slice != refs.slice);
        state.slices.retain(|s| s.id != refs.slice);
    }
    record_origin(at, kind, &refs.slice, state);
    state.extra.slice_refs.push(refs);
    let mut skips = Vec::new();
    let converted = convert::endpoint_slice(&slice, &mut skips).map_err(|e| at.field_error(kind, object.to_string(), e))?;
    note_skips(at, kind, object, skips, state);
    state.slices.extend(converted);
    Ok(())
}

fn read_fixture(at: &At, value: Value, state: &mut ClusterState) -> Result<(), SourceError> {
    if state.fixture.is_some() {
        return Err(at.doc_error(format!("a second {FIXTURE_KIND} document (only one is allowed)")));
    }
    state.fixture = Some(typed(at, FIXTURE_KIND, "", value)?);
    Ok(())
}

/// Records where an object is read; when it was read before, records the duplicate (with
/// its warning) and returns true: the caller drops the earlier copy.
fn once(at: &At, kind: &'static str, id: &NamespacedName, state: &mut ClusterState) -> bool {
    let here = (at.path.to_path_buf(), at.line);
    let Some(first) = state.seen.insert((kind, id.clone()), here.clone()) else {
        return false;
    };
    let dup = Duplicate { kind, id: id.clone(), first, again: here };
    state.notes.push(dup.note());
    state.duplicates.push(dup);
    true
}

/// An object of a document read before, taken again from an earlier read of the same
/// text ([`super::reuse`]) as read on `line`: recorded as reading it records it (where it
/// was read; a duplicate when it was read before in the file, whose earlier copy the
/// caller must drop).
pub(super) fn replayed(path: &Path, line: u64, kind: &'static str, id: &NamespacedName, state: &mut ClusterState) {
    let at = At { path, line, doc: 0, item: None, item_lines: &[] };
    once(&at, kind, id, state);
    record_origin(&at, kind, id, state);
}

fn record_origin(at: &At, kind: &str, id: &crate::model::NamespacedName, state: &mut ClusterState) {
    state.extra.origins.insert((kind.to_string(), id.clone()), (at.path.to_path_buf(), at.line));
}

/// Why a Service read from a file gets no rules for want of a cluster IP (a manifest as
/// written, before the API server allocated one), or `None` (it has one, is headless —
/// `clusterIP: None` — or is an ExternalName, which never get rules).
fn unproxied_without_cluster_ip(svc: &core::Service, model: &crate::model::Service) -> Option<String> {
    if !model.cluster_ips.is_empty() || model.service_type == crate::model::ServiceType::ExternalName {
        return None;
    }
    let spec = svc.spec.as_ref()?;
    let headless = spec.cluster_ip.as_deref() == Some("None") || spec.cluster_ips.as_ref().is_some_and(|l| l.iter().any(|ip| ip == "None"));
    (!headless).then(|| "no spec.clusterIP (the API server allocates one when the Service is created): not proxied".to_string())
}

fn note_skips(at: &At, kind: &str, object: &str, skips: Vec<Skip>, state: &mut ClusterState) {
    for s in skips {
        state.notes.push(at.note(format!("{kind} {object}: field {}: {}", s.field, s.reason)));
    }
}

/// Deserializes into a kube type, naming the failing field's path.
fn typed<T: DeserializeOwned>(at: &At, kind: &str, object: &str, value: Value) -> Result<T, SourceError> {
    // Tracking the path costs an allocation per key and only matters when a field is
    // wrong: the value is read without it first, and again with it when that fails.
    if let Ok(t) = T::deserialize(&value) {
        return Ok(t);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "(object)".to_string() } else { path };
        at.field_error(kind, object.to_string(), FieldError::new(field, e.into_inner().to_string()))
    })
}

/// `namespace/name` (or just `name` for cluster-scoped objects) from raw metadata.
fn object_name(value: &Value) -> String {
    let meta = value.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("<unnamed>");
    match meta.and_then(|m| m.get("namespace")).and_then(Value::as_str) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The events that turn cluster state `old` into `new`: objects only in `old` are
/// deleted; objects new or changed in `new` are applied. An object equal in both gives no
/// event, so one changed object in a large file costs the trackers one event.
pub fn events_between(old: &ClusterState, new: &ClusterState) -> Vec<crate::track::Event> {
    let copy = |s: &Service| std::sync::Arc::new(s.clone());
    let copy_slice = |s: &EndpointSlice| std::sync::Arc::new(s.clone());
    super::objects::diff((&old.services, &old.slices), (&new.services, &new.slices), copy, copy_slice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ClusterState, SourceError> {
        let mut st = ClusterState::default();
        read_str(Path::new("t.yaml"), text, &mut st).map(|_| st)
    }

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: ns\nspec:\n  clusterIP: 10.0.0.1\n  ports:\n  - port: 80\n";

    #[test]
    fn reads_multi_document_yaml_and_lists() {
        let text = format!("{SVC}---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: x}}\n");
        let st = read(&format!("{text}---\napiVersion: v1\nkind: EventList\nitems: []\n")).unwrap();
        assert_eq!(st.services.len(), 1);
        assert_eq!(st.notes.len(), 2);
        assert!(st.notes[0].text.contains("skipped v1/ConfigMap x"), "{:?}", st.notes);
        assert_eq!(st.notes[1].text, "skipped v1/EventList with 0 item(s): not a kind svcproxy reads");
    }

    #[test]
    fn wrong_type_names_file_line_object_and_field() {
        let text = format!("{SVC}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: ns\nspec:\n  ports:\n  - port: eighty\n");
        let err = read(&text).unwrap_err().to_string();
        assert!(err.starts_with("t.yaml:11: Service ns/bad: field spec.ports[0].port:"), "{err}");
    }

    #[test]
    fn invalid_ip_is_an_error_with_its_field() {
        let text = SVC.replace("10.0.0.1", "10.0.0.300");
        let err = read(&text).unwrap_err().to_string();
        assert!(err.contains("Service ns/web: field spec.clusterIP: invalid IP address \"10.0.0.300\""), "{err}");
    }

    #[test]
    fn service_cidrs_are_read_in_lists_and_alone_and_a_bad_one_names_its_field() {
        let one = "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: kubernetes}\nspec: {cidrs: [10.96.0.0/16, 'fd00:10:96::/112']}\n";
        let list = "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDRList\nitems:\n- metadata: {name: more}\n  spec: {cidrs: [10.97.0.0/16, 10.96.0.0/16]}\n";
        let st = read(&format!("{one}---\n{list}")).unwrap();
        assert!(st.notes.is_empty(), "{:?}", st.notes);
        let names: Vec<&str> = st.service_cidrs.iter().map(|c| c.id.name.as_str()).collect();
        assert_eq!(names, ["kubernetes", "more"]);
        let all: Vec<String> = crate::model::service_cidrs(&st.service_cidrs).iter().map(|c| c.to_string()).collect();
        assert_eq!(all, ["10.96.0.0/16", "fd00:10:96::/112", "10.97.0.0/16"], "each once, in the order first read");
        let err = read(&one.replace("10.96.0.0/16", "10.96.0.0/33")).unwrap_err().to_string();
        assert!(err.contains("ServiceCIDR kubernetes: field spec.cidrs[0]: invalid CIDR \"10.96.0.0/33\""), "{err}");
    }

    #[test]
    fn malformed_yaml_names_the_line() {
        let err = read("apiVersion: v1\nkind: Service\nmetadata: [\n").unwrap_err().to_string();
        assert!(err.starts_with("t.yaml: line "), "{err}");
    }

    #[test]
    fn typed_list_items_take_the_lists_kind_and_errors_name_the_item_and_its_line() {
        let list = "apiVersion: v1\nkind: ServiceList\nmetadata: {resourceVersion: \"7\"}\nitems:\n- metadata: {name: a, namespace: ns}\n  spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n";
        let st = read(list).unwrap();
        assert_eq!(st.services.len(), 1);
        assert!(st.notes.is_empty(), "{:?}", st.notes);
        let bad = format!("{list}- metadata: {{name: b, namespace: ns}}\n  spec:\n    ports: [{{port: eighty}}]\n");
        let err = read(&bad).unwrap_err().to_string();
        assert!(err.starts_with("t.yaml:7: Service ns/b (items[1]): field spec.ports[0].port:"), "{err}");
        let slices = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSliceList\nitems:\n- metadata: {name: a-1, namespace: ns, labels: {kubernetes.io/service-name: a}}\n  addressType: IPv4\n  endpoints: [{addresses: [10.1.0.1]}]\n  ports: [{name: \"\", port: 8080}]\n";
        assert_eq!(read(slices).unwrap().slices.len(), 1);
    }

    #[test]
    fn an_untyped_list_item_without_kind_is_named_by_index_and_object() {
        let err = read("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x}\n- metadata: {name: cfg, namespace: ns}\n").unwrap_err().to_string();
        assert_eq!(err, "t.yaml:7: document 1: items[1] (ns/cfg): missing apiVersion or kind");
        let mut st = ClusterState::default();
        let err = read_str(Path::new("t.json"), r#"{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"q"}}]}"#, &mut st).unwrap_err();
        assert_eq!(err.to_string(), "t.json:1: document 1: items[0] (q): missing apiVersion or kind");
    }

    #[test]
    fn json_streams_and_json_documents_between_dashes_are_read() {
        let obj = |n: u8| format!(r#"{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "s{n}", "namespace": "ns"}}, "spec": {{"clusterIP": "10.0.0.{n}", "ports": [{{"port": 80}}]}}}}"#);
        let mut st = ClusterState::default();
        read_str(Path::new("t.json"), &format!("{}\n{}{}\n", obj(1), obj(2), obj(3)), &mut st).unwrap();
        assert_eq!(st.services.len(), 3);
        let mut st = ClusterState::default();
        read_str(Path::new("t.yaml"), &format!("{}\n---\n{}\n", obj(1), obj(2)), &mut st).unwrap();
        assert_eq!(st.services.len(), 2);
        // A bad object in a stream is found at its own line.
        let mut st = ClusterState::default();
        let text = format!("{}\n\n{}\n", obj(1), obj(2).replace("10.0.0.2", "10.0.0.300"));
        let err = read_str(Path::new("t.json"), &text, &mut st).unwrap_err().to_string();
        assert!(err.starts_with("t.json:3: Service ns/s2: field spec.clusterIP"), "{err}");
    }

    #[test]
    fn utf16_is_named_and_a_utf8_bom_is_dropped() {
        let utf16: Vec<u8> = "\u{feff}apiVersion: v1\n".encode_utf16().flat_map(u16::to_le_bytes).collect();
        let err = decode(Path::new("w.yaml"), utf16).unwrap_err().to_string();
        assert!(err.starts_with("w.yaml: the file is UTF-16; save it as UTF-8"), "{err}");
        let no_bom: Vec<u8> = "{}".encode_utf16().flat_map(u16::to_be_bytes).collect();
        assert!(decode(Path::new("-"), no_bom).unwrap_err().to_string().contains("the input is UTF-16"));
        assert_eq!(decode(Path::new("b.json"), b"\xEF\xBB\xBF{}".to_vec()).unwrap(), "{}");
        let err = decode(Path::new("l.yaml"), b"a: 1\nb: \xFF\n".to_vec()).unwrap_err().to_string();
        assert_eq!(err, "l.yaml: line 2: not UTF-8 text (byte 8 is not valid UTF-8); save the file as UTF-8");
    }

    #[test]
    fn directories_are_read_recursively_in_path_order_with_a_note() {
        let dir = std::env::temp_dir().join(format!("svcproxy-file-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, text) in [
            ("b/services.json", SVC.replace("web", "b")),
            ("a/deep/svc.yaml", SVC.replace("web", "a")),
            ("a/pods/p/logs.txt", "log".to_string()),
            ("c.yml", SVC.replace("web", "c")),
            (".git/x.yaml", SVC.to_string()),
        ] {
            std::fs::create_dir_all(dir.join(p).parent().unwrap()).unwrap();
            std::fs::write(dir.join(p), text).unwrap();
        }
        let st = read_path(&dir).unwrap();
        let names: Vec<_> = st.services.iter().map(|s| s.id.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(st.notes.len(), 1, "{:?}", st.notes);
        let note = st.notes[0].to_string();
        assert!(note.starts_with(&format!("{}: read 3 file(s)", dir.display())), "{note}");
        assert!(note.ends_with("; skipped 2: .git (hidden directory), a/pods/p/logs.txt (not .yaml, .yml or .json)"), "{note}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_object_read_twice_is_a_warning_naming_both_places_and_the_later_copy_is_used() {
        let pod = |ip: &str| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\nstatus: {{podIPs: [{{ip: {ip}}}]}}\n");
        let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n";
        let text = format!("{SVC}---\n{}---\n{}---\n{node}---\n{}---\n{node}", SVC.replace("10.0.0.1", "10.0.0.2"), pod("10.1.0.1"), pod("10.1.0.2"));
        let st = read(&text).unwrap();
        assert_eq!(st.services.len(), 1);
        assert_eq!(st.services[0].cluster_ips, ["10.0.0.2".parse::<std::net::IpAddr>().unwrap()]);
        assert_eq!(st.extra.backends.len(), 1);
        assert_eq!(st.extra.pods.len(), 1);
        assert_eq!(st.extra.pods[0].ips, ["10.1.0.2".parse::<std::net::IpAddr>().unwrap()]);
        assert_eq!(st.nodes.len(), 1);
        let notes: Vec<String> = st.notes.iter().map(ToString::to_string).collect();
        assert_eq!(notes, [
            "t.yaml:11: warning: Service ns/web is read twice: first at t.yaml:1, again at t.yaml:11; the later copy is used, the first is ignored",
            "t.yaml:30: warning: Pod ns/p is read twice: first at t.yaml:21, again at t.yaml:30; the later copy is used, the first is ignored",
            "t.yaml:35: warning: Node n1 is read twice: first at t.yaml:26, again at t.yaml:35; the later copy is used, the first is ignored",
        ]);
        assert_eq!(st.duplicates.len(), 3);
    }

    #[test]
    fn events_between_two_reads_are_the_changes_only() {
        let svc = |n: u8, ip: &str| SVC.replace("web", &format!("s{n}")).replace("10.0.0.1", ip);
        let before = read(&format!("{}---\n{}---\n{}", svc(1, "10.0.0.1"), svc(2, "10.0.0.2"), svc(3, "10.0.0.3"))).unwrap();
        let after = read(&format!("{}---\n{}---\n{}", svc(1, "10.0.0.1"), svc(2, "10.0.0.9"), svc(4, "10.0.0.4"))).unwrap();
        assert_eq!(super::super::objects::tests::names(&events_between(&before, &after)), ["delete ns/s3", "apply ns/s2", "apply ns/s4"]);
        assert!(events_between(&after, &after).is_empty(), "nothing changed: no event");
    }

    #[test]
    fn container_logs_between_json_values_are_skipped_with_a_note() {
        let svc = |n: u8| format!(r#"{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "s{n}", "namespace": "ns"}}, "spec": {{"clusterIP": "10.0.0.{n}", "ports": [{{"port": 80}}]}}}}"#);
        let log = |c: &str| format!("==== START logs for container {c} of pod ns/p ====\n{{\"msg\": \"not an object of the dump\"}}\n---\n==== END logs for container {c} of pod ns/p ====\n");
        let text = format!("{}\n{}{}\n{}{}\n", svc(1), log("a"), svc(2), log("b"), svc(3).replace("10.0.0.3", "10.0.0.999"));
        let mut st = ClusterState::default();
        let err = read_str(Path::new("d.json"), &text, &mut st).unwrap_err().to_string();
        assert!(err.starts_with("d.json:11: Service ns/s3: field spec.clusterIP"), "lines count the skipped logs: {err}");
        let mut st = ClusterState::default();
        read_str(Path::new("d.json"), &text.replace("10.0.0.999", "10.0.0.3"), &mut st).unwrap();
        assert_eq!(st.services.len(), 3);
        let notes: Vec<String> = st.notes.iter().map(ToString::to_string).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("d.json:2: skipped 2 container log(s)"), "{notes:?}");
        // An unterminated log runs to the end.
        let mut st = ClusterState::default();
        read_str(Path::new("d.json"), &format!("{}\n==== START logs for container a of pod ns/p ====\n{{", svc(1)), &mut st).unwrap();
        assert_eq!((st.services.len(), st.notes.len()), (1, 1));
    }

    #[test]
    fn a_json_list_read_straight_into_kube_types_gives_what_its_yaml_gives() {
        for seed in 1..4 {
            let yaml = crate::gen::yaml(&crate::gen::GenSpec { services: 80, endpoints: 3, seed });
            let json = crate::bench::json_list(&yaml).unwrap();
            let (mut a, mut b) = (ClusterState::default(), ClusterState::default());
            read_str(Path::new("c.yaml"), &yaml, &mut a).unwrap();
            read_str(Path::new("c.json"), &json, &mut b).unwrap();
            assert_eq!(a.services, b.services);
            assert_eq!(a.slices, b.slices);
            assert_eq!(a.extra.backends, b.extra.backends);
            assert_eq!(a.extra.slice_refs, b.extra.slice_refs);
            assert_eq!(a.extra.origins.keys().collect::<Vec<_>>(), b.extra.origins.keys().collect::<Vec<_>>());
            assert_eq!(a.notes.len(), b.notes.len());
            assert_eq!((a.services.len(), a.slices.len()), (80, 80));
        }
    }

    #[test]
    fn items_of_a_json_list_are_found_at_their_lines() {
        let text = "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"metadata\": {\"note\": \"items [\\\"x\\\", {\"},\n  \"items\": [\n    {\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"a\", \"namespace\": \"ns\"},\n     \"spec\": {\"clusterIP\": \"10.0.0.1\", \"ports\": [{\"port\": 80}]}},\n    {\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"b\", \"namespace\": \"ns\"},\n     \"spec\": {\"clusterIP\": \"10.0.0.2\", \"ports\": [{\"port\": \"eighty\"}]}}\n  ]\n}\n";
        let mut st = ClusterState::default();
        let err = read_str(Path::new("l.json"), text, &mut st).unwrap_err().to_string();
        assert!(err.starts_with("l.json:8: Service ns/b (items[1]): field spec.ports[0].port"), "{err}");
    }
}

/// The subset YAML reader ([`yaml`]) against serde-saphyr: on every YAML file of the
/// repository, generated clusters and random kubectl-shaped documents, each document the
/// subset reader hands over must be serde-saphyr's (value, line, item lines), and the
/// documents it leaves are read by serde-saphyr.
#[cfg(test)]
mod yaml_differential {
    use super::*;

    type Docs = Vec<(u64, Value, Vec<u64>)>;

    /// serde-saphyr's documents, and its error if it fails (after those documents).
    fn saphyr(text: &str) -> (Docs, Option<String>) {
        let mut out = Vec::new();
        let end = saphyr_documents(Path::new("t.yaml"), text, 0, |_, line, doc| {
            if let Doc::Tree { value, item_lines } = doc {
                out.push((line, value, item_lines));
            }
            Ok(())
        });
        (out, end.err().map(|e| e.to_string()))
    }

    /// The documents the subset reader hands over, and whether it read the whole text.
    fn subset(text: &str) -> (Docs, bool) {
        let mut d = yaml::Documents::new(text);
        let mut out = Vec::new();
        loop {
            match d.next_doc() {
                Ok(Some(p)) => out.push((p.line, p.value, p.item_lines)),
                Ok(None) => return (out, true),
                Err(_) => return (out, false),
            }
        }
    }

    /// Checks `text`: whether the subset reader read all of it, and how many documents it
    /// handed over of how many.
    fn same(name: &str, text: &str) -> (bool, usize, usize) {
        let (fast, whole) = subset(text);
        let (slow, error) = saphyr(text);
        let n = fast.len().min(slow.len());
        assert_eq!(fast[..n], slow[..n], "{name}: documents differ from serde-saphyr's");
        match error {
            None => {
                assert!(fast.len() <= slow.len(), "{name}: more documents than serde-saphyr's");
                if whole {
                    assert_eq!(fast.len(), slow.len(), "{name}: fewer documents than serde-saphyr's");
                }
            }
            Some(e) => assert!(!whole, "{name}: serde-saphyr fails ({e}) where the subset reader read the whole text"),
        }
        (whole, n, slow.len().max(fast.len()))
    }

    fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                yaml_files(&p, out);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
                out.push(p);
            }
        }
    }

    #[test]
    fn every_yaml_file_of_the_repository_reads_as_serde_saphyr_reads_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["fixtures", "golden", "tests", "examples", "deploy", "docs"] {
            yaml_files(&root.join(dir), &mut files);
        }
        assert!(files.len() > 150, "only {} YAML files found", files.len());
        let mut whole = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            whole += usize::from(same(&f.display().to_string(), &text).0);
        }
        // Most fixtures are in the subset: the comparison above is not vacuous.
        assert!(whole * 10 >= files.len() * 8, "only {whole} of {} files read whole by the subset reader", files.len());
    }

    #[test]
    fn generated_clusters_read_as_serde_saphyr_reads_them() {
        for seed in 1..4 {
            let text = crate::gen::yaml(&crate::gen::GenSpec { services: 60, endpoints: 4, seed });
            assert!(same(&format!("generated seed {seed}"), &text).0, "generated YAML is in the subset");
            let list = as_list(&text);
            assert!(same(&format!("generated list seed {seed}"), &list).0, "a kubectl-style list is in the subset");
        }
    }

    /// `text`'s documents as the items of one `kind: List`, laid out as kubectl does.
    fn as_list(text: &str) -> String {
        let mut out = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for doc in text.split("---\n") {
            for (i, line) in doc.lines().filter(|l| !l.starts_with('#')).enumerate() {
                out.push_str(if i == 0 { "- " } else { "  " });
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str("metadata:\n  resourceVersion: \"\"\n");
        out
    }

    /// Random kubectl-shaped documents: nested block mappings and sequences (at the key's
    /// indentation or deeper), flow collections, quoted and plain scalars of every
    /// resolution, comments, blank lines and lists.
    #[test]
    fn random_documents_read_as_serde_saphyr_reads_them() {
        let mut rng = Rng(0x5eed);
        let (mut read, mut all) = (0, 0);
        const N: usize = 1000;
        for i in 0..N {
            let mut text = String::new();
            for d in 0..1 + rng.below(3) {
                if d > 0 || rng.below(4) == 0 {
                    text.push_str("---\n");
                }
                if rng.below(5) == 0 {
                    text.push_str("# a comment\n\n");
                }
                let list = rng.below(3) == 0;
                mapping(&mut rng, &mut text, 0, 3, list, false);
            }
            let (_, fast, docs) = same(&format!("random document {i}:\n{text}"), &text);
            (read, all) = (read + fast, all + docs);
        }
        // Enough documents are in the subset for the comparison to mean something.
        assert!(read * 3 >= all * 2, "only {read} of {all} random documents read by the subset reader");
    }

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
            of[self.below(of.len() as u64) as usize]
        }
    }

    const KEYS: &[&str] = &["name", "namespace", "ports", "items", "kubernetes.io/service-name", "a-b_c", "spec", "x", "port", "\"quoted key\"", "'single'"];
    /// Scalars the subset reader reads, and (`TRICKY`) ones serde-saphyr resolves by
    /// rules it leaves to serde-saphyr, or that are not YAML at all.
    const SCALARS: &[&str] = &[
        "web", "10.96.0.1", "fd00::1", "2001:db8::1", "::1/128", "10.0.0.0/8", "127.0.0.1:10249", "80", "0", "-3", "true",
        "false", "null", "~", "\"80\"", "'it''s'", "\"a\\\"b\\\\c\\u00e9\"", "\"\"", "''", "http://x:80/y", "a b c", "TCP",
        "/path", "_x", "a#b", "v1.2.3", "1.2.3", "30s", "1m0s", "10Gi", "--flag=$(X)", "\"2024-01-01T00:00:00Z\"",
        "x # trailing comment", "{}", "[]", "[a, 1, \"b\"]", "{k: v, m: 1}", "[10.0.0.1, 10.0.0.2]",
        "{ready: true, serving: false}", "[[1, 2], {a: [b]}]", "a:b", "{\"json\": [1, \"x\"]}",
    ];
    const TRICKY: &[&str] = &[
        "yes", "No", "1.5", "1e3", "012", "0x1F", "2024-01-01T00:00:00Z", "99999999999999999999", "Null", "&anchor x", "!!str 5",
        ".inf", "-", "a: b", "[1, ]", "{a}", "'x", "1:30",
    ];

    fn scalar(rng: &mut Rng) -> &'static str {
        if rng.below(40) == 0 {
            rng.pick(TRICKY)
        } else {
            rng.pick(SCALARS)
        }
    }

    fn pad(out: &mut String, n: usize) {
        out.extend(std::iter::repeat_n(' ', n));
    }

    fn mapping(rng: &mut Rng, out: &mut String, indent: usize, depth: u64, list: bool, inline: bool) {
        let n = 1 + rng.below(4);
        let mut used = Vec::new();
        if list {
            pad(out, indent);
            out.push_str("kind: List\n");
            pad(out, indent);
            out.push_str("items:\n");
            let at = indent + 2 * rng.below(2) as usize;
            sequence(rng, out, at, depth, true);
            return;
        }
        for _ in 0..n {
            let key = rng.pick(KEYS);
            if used.contains(&key) && rng.below(30) != 0 {
                continue;
            }
            used.push(key);
            if !(inline && used.len() == 1) {
                pad(out, indent);
            }
            out.push_str(key);
            out.push(':');
            value(rng, out, indent, depth);
            if rng.below(10) == 0 {
                out.push('\n');
            }
        }
    }

    fn sequence(rng: &mut Rng, out: &mut String, indent: usize, depth: u64, objects: bool) {
        for _ in 0..1 + rng.below(3) {
            pad(out, indent);
            out.push_str("- ");
            if objects || rng.below(2) == 0 {
                mapping(rng, out, indent + 2, depth.saturating_sub(1), false, true);
            } else {
                out.push_str(scalar(rng));
                out.push('\n');
            }
        }
    }

    fn value(rng: &mut Rng, out: &mut String, indent: usize, depth: u64) {
        match if depth == 0 { 0 } else { rng.below(4) } {
            0 | 1 => {
                out.push(' ');
                out.push_str(scalar(rng));
                if rng.below(6) == 0 {
                    out.push_str("  # c");
                }
                out.push('\n');
            }
            2 => {
                out.push('\n');
                mapping(rng, out, indent + 2, depth - 1, false, false);
            }
            _ => {
                out.push('\n');
                // kubectl puts a sequence at its key's indentation; others indent it.
                let at = indent + 2 * rng.below(2) as usize;
                sequence(rng, out, at, depth - 1, false);
            }
        }
    }
}

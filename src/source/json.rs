//! Files of JSON values (one, or a stream of them as `jq '.items[]'` and `kubectl
//! cluster-info dump` write), read one value at a time. A value with an `items` array (a
//! `kind: List`, a typed list) is not parsed whole: its items are kept as slices of the
//! text and handed over one at a time, so a 50 MB list is never held as a tree (only the
//! text and the object being converted are in memory), and each item's line is where its
//! slice starts.

// A SourceError names the file and line; it is returned once per run.
#![allow(clippy::result_large_err)]

use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::SourceError;
use super::file::Note;

/// One document of a file, as a reader hands it over.
pub(super) enum Doc<'t> {
    /// A whole document, with the start line of each element of its top-level `items`
    /// where the parser can tell (YAML).
    Tree { value: Value, item_lines: Vec<u64> },
    /// A JSON object with an `items` array: its other fields, and each item's start line
    /// and text, parsed when it is read ([`parse_item`]).
    List { head: Map<String, Value>, items: Vec<(u64, &'t RawValue)> },
}

/// An item of a [`Doc::List`] as a value (the text was checked to be JSON when the list
/// was split, so this fails only past serde_json's nesting limit).
pub(super) fn parse_item(path: &Path, line: u64, raw: &RawValue) -> Result<Value, SourceError> {
    serde_json::from_str(raw.get()).map_err(|e| SourceError::Syntax {
        path: path.to_path_buf(),
        message: format!("line {}: malformed JSON: {e}", line + e.line().max(1) as u64 - 1),
    })
}

/// A list item read straight from its text into its kube type.
pub(super) struct Direct {
    /// Its kind, as messages name it.
    pub kind: &'static str,
    /// `namespace/name` (or `name`), as messages name it.
    pub object: String,
    pub typed: Typed,
}

pub(super) enum Typed {
    Service(Box<core::Service>),
    Slice(Box<discovery::EndpointSlice>),
}

/// An item's kind, apiVersion and name, read without building the rest.
#[derive(Deserialize)]
struct ItemHead<'t> {
    #[serde(rename = "apiVersion")]
    api_version: Option<&'t str>,
    kind: Option<&'t str>,
    #[serde(borrow)]
    metadata: Option<ItemMeta<'t>>,
}

#[derive(Deserialize)]
struct ItemMeta<'t> {
    name: Option<&'t str>,
    namespace: Option<&'t str>,
}

/// The item `raw` of a list whose items are of kind `item_kind` (a typed list) and
/// apiVersion `api_version`, when it is a Service or an EndpointSlice read without error
/// straight from its text (no value tree: most of a cluster's objects). `None`: anything
/// else, and anything unusual (a field of a wrong type, a repeated key, an escaped kind or
/// name), which the caller reads as a value and so names what is wrong as before.
pub(super) fn direct_item(raw: &RawValue, item_kind: Option<&str>, api_version: &str) -> Option<Direct> {
    let head: ItemHead = serde_json::from_str(raw.get()).ok()?;
    // A typed list's items take the list's kind and apiVersion when they have none (the
    // items of a `kind: List` do not).
    let kind = head.kind.filter(|k| !k.is_empty()).or(item_kind)?;
    let api = match head.api_version.filter(|v| !v.is_empty()) {
        Some(v) => v,
        None if item_kind.is_some() => api_version,
        None => return None,
    };
    let (kind, typed) = match (api, kind) {
        ("v1", "Service") => ("Service", Typed::Service(Box::new(serde_json::from_str(raw.get()).ok()?))),
        ("discovery.k8s.io/v1", "EndpointSlice") => {
            ("EndpointSlice", Typed::Slice(Box::new(serde_json::from_str(raw.get()).ok()?)))
        }
        _ => return None,
    };
    let meta = head.metadata.as_ref();
    let name = meta.and_then(|m| m.name).unwrap_or("<unnamed>");
    let object = match meta.and_then(|m| m.namespace) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    Some(Direct { kind, object, typed })
}

/// The first line of the container log a `kubectl cluster-info dump` writes to stdout
/// between two values (it ends with the matching `==== END logs for container …` line).
const LOG_START: &str = "==== START logs for container ";

/// Calls `f(document number, start line, document)` for each JSON value of `text`.
/// Container logs between them are skipped; what was skipped comes back as a note. Stops
/// at the first error (a syntax error, or one `f` returns).
pub(super) fn each_value<'t>(
    path: &Path,
    text: &'t str,
    mut f: impl FnMut(usize, u64, Doc<'t>) -> Result<(), SourceError>,
) -> Result<Option<Note>, SourceError> {
    let (mut base, mut lines) = (0, Lines::new(text));
    let mut doc = 0;
    let mut logs: Option<(u64, usize)> = None;
    'restart: loop {
        let mut stream = serde_json::Deserializer::from_str(&text[base..]).into_iter::<&RawValue>();
        loop {
            let rest = &text[base + stream.byte_offset()..];
            let start = text.len() - rest.trim_start().len();
            let line = lines.at(start);
            if let Some(header) = text[start..].lines().next().filter(|l| l.starts_with(LOG_START)) {
                logs.get_or_insert((line, 0)).1 += 1;
                base = log_end(text, start, header);
                continue 'restart;
            }
            match stream.next() {
                None => break 'restart,
                Some(Err(e)) => {
                    let at = line_in(text, base, e.line());
                    return Err(SourceError::Syntax { path: path.to_path_buf(), message: format!("line {at}: malformed JSON: {e}") });
                }
                Some(Ok(raw)) => {
                    doc += 1;
                    f(doc, line, split(path, text, raw, &mut lines)?)?;
                }
            }
        }
    }
    Ok(logs.map(|(first, n)| Note {
        path: path.to_path_buf(),
        line: first,
        text: format!("skipped {n} container log(s) (`==== START logs for container …` to `==== END logs …`, as `kubectl cluster-info dump` writes them)"),
    }))
}

/// Where the log starting at `start` with line `header` ends: after its END line, or at
/// the end of the text.
fn log_end(text: &str, start: usize, header: &str) -> usize {
    let end = header.replacen("==== START", "==== END", 1);
    text[start..].find(&format!("\n{end}")).map_or(text.len(), |i| {
        let from = start + i + 1;
        text[from..].find('\n').map_or(text.len(), |j| from + j + 1)
    })
}

/// A value of the text: an object with an `items` array becomes a [`Doc::List`], anything
/// else a [`Doc::Tree`].
fn split<'t>(path: &Path, text: &'t str, raw: &'t RawValue, lines: &mut Lines<'t>) -> Result<Doc<'t>, SourceError> {
    let syntax = |e: serde_json::Error| SourceError::Syntax { path: path.to_path_buf(), message: format!("malformed JSON: {e}") };
    if !raw.get().starts_with('{') {
        return Ok(Doc::Tree { value: serde_json::from_str(raw.get()).map_err(syntax)?, item_lines: Vec::new() });
    }
    let Head { mut head, items } = serde_json::from_str(raw.get()).map_err(syntax)?;
    match items {
        Some(Items::Array(items)) => {
            let items = items.into_iter().map(|item| (lines.at(offset(text, item)), item)).collect();
            Ok(Doc::List { head, items })
        }
        Some(Items::Other(value)) => {
            head.insert("items".to_string(), value);
            Ok(Doc::Tree { value: Value::Object(head), item_lines: Vec::new() })
        }
        None => Ok(Doc::Tree { value: Value::Object(head), item_lines: Vec::new() }),
    }
}

/// A JSON object's `items`: an array as the text of each element (split in the same pass
/// as the rest of the object), anything else as a value.
enum Items<'t> {
    Array(Vec<&'t RawValue>),
    Other(Value),
}

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Items<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(Items::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items<'de>, A::Error> {
                Value::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Items::Other)
            }
            fn visit_unit<E>(self) -> Result<Items<'de>, E> {
                Ok(Items::Other(Value::Null))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Items<'de>, E> {
                Ok(Items::Other(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Items<'de>, E> {
                Ok(Items::Other(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Items<'de>, E> {
                Ok(Items::Other(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Items<'de>, E> {
                Ok(Items::Other(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Items<'de>, E> {
                Ok(Items::Other(v.into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Byte offset of `raw` (a slice of `text`) in `text`.
fn offset(text: &str, raw: &RawValue) -> usize {
    raw.get().as_ptr() as usize - text.as_ptr() as usize
}

/// A JSON object's fields other than `items`, and `items`.
struct Head<'t> {
    head: Map<String, Value>,
    items: Option<Items<'t>>,
}

impl<'de> Deserialize<'de> for Head<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Head<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head<'de>, A::Error> {
                let (mut head, mut items) = (Map::new(), None);
                while let Some(key) = map.next_key::<String>()? {
                    if key == "items" {
                        // A repeated key: the last one counts, as for every other field.
                        items = Some(map.next_value()?);
                    } else {
                        head.insert(key, map.next_value()?);
                    }
                }
                Ok(Head { head, items })
            }
        }
        d.deserialize_map(V)
    }
}

/// Line numbers of byte offsets met in increasing order, counted once.
struct Lines<'t> {
    text: &'t str,
    counted: usize,
    line: u64,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Self {
        Lines { text, counted: 0, line: 1 }
    }

    /// The line of byte `offset` (not before the last one asked for).
    fn at(&mut self, offset: usize) -> u64 {
        let offset = offset.max(self.counted);
        self.line += self.text.as_bytes()[self.counted..offset].iter().filter(|&&b| b == b'\n').count() as u64;
        self.counted = offset;
        self.line
    }
}

/// The file line of line `rel` (1-based) of the text from byte `base` on.
fn line_in(text: &str, base: usize, rel: usize) -> u64 {
    (text.as_bytes()[..base].iter().filter(|&&b| b == b'\n').count() + rel.max(1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<(u64, Vec<u64>)> {
        let mut out = Vec::new();
        each_value(Path::new("t.json"), text, |_, line, doc| {
            out.push(match doc {
                Doc::Tree { .. } => (line, Vec::new()),
                Doc::List { items, .. } => (line, items.iter().map(|(l, _)| *l).collect()),
            });
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn list_items_are_found_at_their_lines_and_kept_as_text() {
        let text = "{\"kind\": \"List\",\n \"metadata\": {\"note\": \"items [\\\"x\\\", {\"},\n \"items\": [1,\n  [2,\n 3], \"]\",\n {\"items\": [4]}]}\n{\"a\": 1}\n";
        assert_eq!(docs(text), [(1, vec![3, 4, 5, 6]), (7, vec![])]);
        let mut heads = Vec::new();
        each_value(Path::new("t.json"), text, |_, _, doc| {
            if let Doc::List { head, items } = doc {
                heads.push((head.keys().cloned().collect::<Vec<_>>(), items.iter().map(|(_, r)| r.get().to_string()).collect::<Vec<_>>()));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(heads, [(vec!["kind".to_string(), "metadata".to_string()], vec!["1".into(), "[2,\n 3]".into(), "\"]\"".into(), "{\"items\": [4]}".into()])]);
    }

    #[test]
    fn items_that_are_not_an_array_stay_in_the_tree() {
        let mut values = Vec::new();
        each_value(Path::new("t.json"), "{\"kind\": \"List\", \"items\": {\"a\": 1}}", |_, _, doc| {
            if let Doc::Tree { value, .. } = doc {
                values.push(value);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(values, [serde_json::json!({"kind": "List", "items": {"a": 1}})]);
    }

    #[test]
    fn services_and_slices_are_read_straight_from_their_text_and_anything_unusual_is_left_to_the_value_path() {
        let item = |text: &str, item_kind, api| {
            let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
            direct_item(&raw, item_kind, api).map(|d| (d.kind, d.object, matches!(d.typed, Typed::Service(_))))
        };
        let svc = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"ports": [{"port": 80}]}}"#;
        assert_eq!(item(svc, None, ""), Some(("Service", "ns/a".to_string(), true)));
        let slice = r#"{"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": []}"#;
        assert_eq!(item(slice, Some("EndpointSlice"), "discovery.k8s.io/v1"), Some(("EndpointSlice", "s".to_string(), false)));
        // The items of a `kind: List` take no apiVersion from it.
        assert_eq!(item(&svc.replace(r#""apiVersion": "v1", "#, ""), None, "v1"), None);
        for unusual in [
            svc.replace("80}", "\"eighty\"}"),
            svc.replace(r#""name": "a""#, r#""name": "a", "name": "b""#),
            svc.replace("Service", "Serv\\u0069ce"),
            svc.replace("Service", "Pod"),
        ] {
            assert_eq!(item(&unusual, None, ""), None, "{unusual}");
        }
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let err = each_value(Path::new("t.json"), "{\"a\": 1}\n{\"items\": [1,\n 2,,]}", |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().starts_with("t.json: line 3: malformed JSON: "), "{err}");
    }
}

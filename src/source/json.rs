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

/// The object name of an item, read from its `metadata` text (borrowed: an escaped or
/// repeated name or namespace fails, and the item is left to the value path).
#[derive(Deserialize)]
struct ItemMeta<'t> {
    name: Option<&'t str>,
    namespace: Option<&'t str>,
}

/// An item read in one pass into the fields of a Service and of an EndpointSlice, as
/// k8s-openapi reads each (null is absent, other fields ignored); which of the two it is
/// follows from its kind and apiVersion once it is read. A field of the other kind that
/// does not read as that kind's type, or a repeated field, fails it (the value path then
/// reads it and names what is wrong).
#[derive(Default)]
struct AnyItem<'t> {
    api_version: Option<&'t str>,
    kind: Option<&'t str>,
    metadata: Option<&'t RawValue>,
    spec: Option<core::ServiceSpec>,
    status: Option<core::ServiceStatus>,
    address_type: Option<String>,
    endpoints: Option<Vec<discovery::Endpoint>>,
    ports: Option<Vec<discovery::EndpointPort>>,
}

/// The fields of an [`AnyItem`]; `Other` is any field neither kind reads.
#[derive(Clone, Copy)]
enum ItemField {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    AddressType,
    Endpoints,
    Ports,
    Other,
}

impl<'de> Deserialize<'de> for ItemField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ItemField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E>(self, v: &str) -> Result<ItemField, E> {
                Ok(match v {
                    "apiVersion" => ItemField::ApiVersion,
                    "kind" => ItemField::Kind,
                    "metadata" => ItemField::Metadata,
                    "spec" => ItemField::Spec,
                    "status" => ItemField::Status,
                    "addressType" => ItemField::AddressType,
                    "endpoints" => ItemField::Endpoints,
                    "ports" => ItemField::Ports,
                    _ => ItemField::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> Deserialize<'de> for AnyItem<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyItem<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Service or an EndpointSlice")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyItem<'de>, A::Error> {
                let (mut item, mut seen) = (AnyItem::default(), 0u16);
                while let Some(key) = map.next_key::<ItemField>()? {
                    if !matches!(key, ItemField::Other) {
                        let bit = 1 << key as u16;
                        if seen & bit != 0 {
                            return Err(serde::de::Error::custom("repeated field"));
                        }
                        seen |= bit;
                    }
                    match key {
                        ItemField::ApiVersion => item.api_version = Some(map.next_value()?),
                        ItemField::Kind => item.kind = Some(map.next_value()?),
                        ItemField::Metadata => item.metadata = map.next_value()?,
                        ItemField::Spec => item.spec = map.next_value()?,
                        ItemField::Status => item.status = map.next_value()?,
                        ItemField::AddressType => item.address_type = map.next_value()?,
                        ItemField::Endpoints => item.endpoints = map.next_value()?,
                        ItemField::Ports => item.ports = map.next_value()?,
                        ItemField::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(item)
            }
        }
        d.deserialize_map(V)
    }
}

/// The item `raw` of a list whose items are of kind `item_kind` (a typed list) and
/// apiVersion `api_version`, when it is a Service or an EndpointSlice read without error
/// straight from its text, in one pass (no value tree: most of a cluster's objects).
/// `None`: anything else, and anything unusual (a field of a wrong type, a repeated key,
/// an escaped kind or name), which the caller reads as a value and so names what is
/// wrong as before.
pub(super) fn direct_item(raw: &RawValue, item_kind: Option<&str>, api_version: &str) -> Option<Direct> {
    let item: AnyItem = serde_json::from_str(raw.get()).ok()?;
    // A typed list's items take the list's kind and apiVersion when they have none (the
    // items of a `kind: List` do not).
    let kind = item.kind.filter(|k| !k.is_empty()).or(item_kind)?;
    let api = match item.api_version.filter(|v| !v.is_empty()) {
        Some(v) => v,
        None if item_kind.is_some() => api_version,
        None => return None,
    };
    // What k8s-openapi checks: a kind or apiVersion in the text is the type's own.
    let own = |field: Option<&str>, value: &str| field.is_none_or(|f| f == value);
    let is = |a: &str, k: &str| api == a && kind == k && own(item.api_version, a) && own(item.kind, k);
    let meta_raw = item.metadata;
    let meta: Option<ItemMeta> = meta_raw.map(|m| serde_json::from_str(m.get())).transpose().ok()?;
    let metadata = || -> Option<_> {
        Some(meta_raw.map(|m| serde_json::from_str(m.get())).transpose().ok()?.unwrap_or_default())
    };
    let (kind, typed) = if is("v1", "Service") {
        ("Service", Typed::Service(Box::new(core::Service { metadata: metadata()?, spec: item.spec, status: item.status })))
    } else if is("discovery.k8s.io/v1", "EndpointSlice") {
        let slice = discovery::EndpointSlice {
            address_type: item.address_type.unwrap_or_default(),
            endpoints: item.endpoints,
            metadata: metadata()?,
            ports: item.ports,
        };
        ("EndpointSlice", Typed::Slice(Box::new(slice)))
    } else {
        return None;
    };
    let name = meta.as_ref().and_then(|m| m.name).unwrap_or("<unnamed>");
    let object = match meta.as_ref().and_then(|m| m.namespace) {
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
        let mut stream = serde_json::Deserializer::from_str(&text[base..]).into_iter::<Top>();
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
                Some(Ok(top)) => {
                    doc += 1;
                    f(doc, line, top.doc(text, &mut lines))?;
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

/// A value of the text, read in one pass: an object's fields other than `items` as
/// values and the elements of an `items` array as their text; anything else as a value.
enum Top<'t> {
    Object(Head<'t>),
    Other(Value),
}

impl<'t> Top<'t> {
    /// An object with an `items` array becomes a [`Doc::List`], anything else a
    /// [`Doc::Tree`].
    fn doc(self, text: &'t str, lines: &mut Lines<'t>) -> Doc<'t> {
        let tree = |value| Doc::Tree { value, item_lines: Vec::new() };
        let (mut head, items) = match self {
            Top::Object(Head { head, items }) => (head, items),
            Top::Other(value) => return tree(value),
        };
        match items {
            Some(Items::Array(items)) => {
                let items = items.into_iter().map(|item| (lines.at(offset(text, item)), item)).collect();
                Doc::List { head, items }
            }
            Some(Items::Other(value)) => {
                head.insert("items".to_string(), value);
                tree(Value::Object(head))
            }
            None => tree(Value::Object(head)),
        }
    }
}

/// A visitor's scalar cases (null, bool, numbers, string; an option's value is what it
/// holds): `$wrap` of the value as JSON. The YAML reader's visitors use it too.
macro_rules! scalars_as {
    ($out:ty, $wrap:expr) => {
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<$out, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_none<E>(self) -> Result<$out, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_unit<E>(self) -> Result<$out, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_bool<E>(self, v: bool) -> Result<$out, E> {
            Ok($wrap(v.into()))
        }
        fn visit_i64<E>(self, v: i64) -> Result<$out, E> {
            Ok($wrap(v.into()))
        }
        fn visit_u64<E>(self, v: u64) -> Result<$out, E> {
            Ok($wrap(v.into()))
        }
        fn visit_f64<E>(self, v: f64) -> Result<$out, E> {
            Ok($wrap(v.into()))
        }
        fn visit_str<E>(self, v: &str) -> Result<$out, E> {
            Ok($wrap(v.into()))
        }
    };
}
pub(super) use scalars_as;

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top<'de>, A::Error> {
                Head::visit(map).map(Top::Object)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Top<'de>, A::Error> {
                Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Top::Other)
            }
            scalars_as!(Top<'de>, Top::Other);
        }
        d.deserialize_any(V)
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
            scalars_as!(Items<'de>, Items::Other);
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

impl<'de> Head<'de> {
    fn visit<A: MapAccess<'de>>(mut map: A) -> Result<Head<'de>, A::Error> {
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
        self.line += newlines(&self.text.as_bytes()[self.counted..offset]);
        self.counted = offset;
        self.line
    }
}

/// The file line of line `rel` (1-based) of the text from byte `base` on.
fn line_in(text: &str, base: usize, rel: usize) -> u64 {
    newlines(&text.as_bytes()[..base]) + rel.max(1) as u64
}

/// The number of line feeds in `bytes`, counted in blocks of 255 into bytes (which the
/// compiler turns into wide compares: the count runs once over a 50 MB list).
fn newlines(bytes: &[u8]) -> u64 {
    bytes.chunks(255).map(|block| u64::from(block.iter().map(|&b| u8::from(b == b'\n')).sum::<u8>())).sum()
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
    fn direct_items_are_what_k8s_openapi_reads() {
        let svc = r#"{"apiVersion": "v1", "kind": "Service", "extra": {"a": [1, null]},
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}, "uid": "u"},
            "ports": [{"port": 1}], "endpoints": null,
            "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "p", "port": 80, "targetPort": "http"}], "type": "LoadBalancer"},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}"#;
        let slice = r#"{"addressType": "IPv4", "spec": {"type": "ClusterIP"},
            "endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": true}, "nodeName": "n", "zone": "z",
                           "targetRef": {"kind": "Pod", "name": "p", "namespace": "ns"}}],
            "metadata": {"name": "s", "labels": {"kubernetes.io/service-name": "a"}}, "ports": [{"port": 8080, "protocol": "TCP"}]}"#;
        let typed = |text: &str, item_kind, api| {
            let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
            direct_item(&raw, item_kind, api).map(|d| d.typed)
        };
        let Some(Typed::Service(read)) = typed(svc, None, "") else { panic!("the Service is read directly") };
        assert_eq!(*read, serde_json::from_str::<core::Service>(svc).unwrap());
        let without_meta = svc.replace(r#""metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}, "uid": "u"}"#, r#""metadata": null"#);
        let Some(Typed::Service(read)) = typed(&without_meta, None, "") else { panic!("a Service without metadata is read directly") };
        assert_eq!(*read, serde_json::from_str::<core::Service>(&without_meta).unwrap());
        for text in [slice.to_string(), slice.replace(r#""endpoints": [{"#, r#""endpoints": null, "x": [{"#)] {
            let Some(Typed::Slice(read)) = typed(&text, Some("EndpointSlice"), "discovery.k8s.io/v1") else { panic!("{text}") };
            assert_eq!(*read, serde_json::from_str::<discovery::EndpointSlice>(&text).unwrap(), "{text}");
        }
        // A field of the other kind that does not read as its type, a repeated field, a
        // kind of the text that is not the list's: left to the value path.
        for unusual in [svc.replace(r#""ports": [{"port": 1}]"#, r#""ports": 1"#), svc.replace(r#""endpoints": null"#, r#""spec": null"#)] {
            assert!(typed(&unusual, None, "").is_none(), "{unusual}");
        }
        assert!(typed(&slice.replace(r#""addressType""#, r#""kind": "", "addressType""#), Some("EndpointSlice"), "discovery.k8s.io/v1").is_none());
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let err = each_value(Path::new("t.json"), "{\"a\": 1}\n{\"items\": [1,\n 2,,]}", |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().starts_with("t.json: line 3: malformed JSON: "), "{err}");
    }
}

//! Cluster state from files: a file, a directory of files (`*.yaml`, `*.yml`, `*.json`,
//! read in name order), or `-` for stdin. YAML may hold several documents; a document may
//! be a plain object or a `kind: List` (what `kubectl get … -o yaml` prints).
//!
//! Reading is all-or-nothing: the first bad object fails the whole read with an error
//! naming the file, the line its document starts on, the object and the field.

// A SourceError names the file, line, object and field; it is returned once per run (or
// per skipped object in watch mode), so its size does not matter on the happy path.
#![allow(clippy::result_large_err)]

use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::convert::{self, Skip};
use super::convert_extra;
use super::error::{FieldError, SourceError};
use super::extra::Extra;
use super::fixture::{FixtureDoc, FIXTURE_KIND};
use crate::model::{EndpointSlice, Node, Service};

/// Everything read from the inputs, in input order (a later object with the same
/// identity replaces an earlier one when fed to the trackers).
#[derive(Debug, Default, Clone)]
pub struct ClusterState {
    pub fixture: Option<FixtureDoc>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
    /// One line for everything skipped (other kinds, ignored fields).
    pub notes: Vec<Note>,
    /// Pods, legacy Endpoints and what the endpoint controllers read of each Service.
    pub extra: Extra,
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
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.text)
    }
}

/// Reads `path` (file, directory or `-`).
pub fn read_path(path: &Path) -> Result<ClusterState, SourceError> {
    let mut state = ClusterState::default();
    for file in input_files(path)? {
        let text = read_text(&file)?;
        read_str(&file, &text, &mut state)?;
    }
    Ok(state)
}

fn input_files(path: &Path) -> Result<Vec<PathBuf>, SourceError> {
    if path == Path::new("-") || !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let io = |error| SourceError::Io { path: path.to_path_buf(), error };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let p = entry.map_err(io)?.path();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if p.is_file() && matches!(ext, "yaml" | "yml" | "json") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

fn read_text(path: &Path) -> Result<String, SourceError> {
    let io = |error| SourceError::Io { path: path.to_path_buf(), error };
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(io)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(io)
    }
}

/// Watch mode's reading: every object that can be read, and one error per file, document
/// or object that cannot (skipped, never fatal).
pub fn read_path_lenient(path: &Path) -> (ClusterState, Vec<SourceError>) {
    let mut state = ClusterState::default();
    let mut errors = Vec::new();
    let files = match input_files(path) {
        Ok(f) => f,
        Err(e) => return (state, vec![e]),
    };
    for file in files {
        let read = read_text(&file).and_then(|text| {
            each_document(&file, &text, |doc, line, value| {
                let at = At { path: &file, line, doc };
                if let Err(e) = read_value(&at, value, &mut state) {
                    errors.push(e);
                }
                Ok(())
            })
        });
        if let Err(e) = read {
            errors.push(e);
        }
    }
    (state, errors)
}

/// Parses one file's text into `state`. `path` is only used in messages.
pub fn read_str(path: &Path, text: &str, state: &mut ClusterState) -> Result<(), SourceError> {
    each_document(path, text, |doc, line, value| read_value(&At { path, line, doc }, value, state))
}

/// Calls `f(document number, start line, document)` for each document of a file, one at
/// a time: a document is read, handed over and dropped before the next is parsed, so a
/// large multi-document dump is never held whole as a tree. JSON goes through serde_json
/// (fast for large dumps); everything else through serde-saphyr. Stops at the first error
/// (a syntax error, or one `f` returns).
fn each_document(
    path: &Path,
    text: &str,
    mut f: impl FnMut(usize, u64, Value) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    if text.trim_start().starts_with('{') {
        let value = serde_json::from_str::<Value>(text).map_err(|e| SourceError::Syntax {
            path: path.to_path_buf(),
            message: format!("line {}: malformed JSON: {e}", e.line()),
        })?;
        return f(1, 1, value);
    }
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
    for item in serde_saphyr::read_with_options::<_, serde_saphyr::Spanned<Value>>(&mut reader, options) {
        let spanned = item.map_err(|e| {
            let at = e.location().map(|l| format!("line {}: ", l.line())).unwrap_or_default();
            SourceError::Syntax { path: path.to_path_buf(), message: format!("{at}malformed YAML: {e}") }
        })?;
        if spanned.value.is_null() {
            continue;
        }
        doc += 1;
        f(doc, spanned.referenced.line(), spanned.value)?;
    }
    Ok(())
}

/// Where a document is, for messages.
struct At<'a> {
    path: &'a Path,
    line: u64,
    doc: usize,
}

impl At<'_> {
    fn doc_error(&self, message: impl Into<String>) -> SourceError {
        SourceError::Document { path: self.path.to_path_buf(), line: self.line, doc: self.doc, message: message.into() }
    }

    fn field_error(&self, kind: &str, object: String, e: FieldError) -> SourceError {
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

fn read_value(at: &At, value: Value, state: &mut ClusterState) -> Result<(), SourceError> {
    let Value::Object(map) = &value else {
        return Err(at.doc_error("expected a Kubernetes object (a mapping with apiVersion and kind)"));
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let object = object_name(&value);
    match (api_version.as_str(), kind.as_str()) {
        (_, "List") | (_, "ServiceList") | (_, "EndpointSliceList") | (_, "NodeList") | (_, "PodList")
        | (_, "EndpointsList") => {
            let Some(items) = map.get("items").and_then(Value::as_array) else {
                return Err(at.field_error(&kind, object, FieldError::new("items", "missing or not a list")));
            };
            for item in items.clone() {
                read_value(at, item, state)?;
            }
            Ok(())
        }
        (_, FIXTURE_KIND) => read_fixture(at, value, state),
        ("v1", "Service") => {
            let svc: core::Service = typed(at, &kind, &object, value)?;
            let model = convert::service(&svc).map_err(|e| at.field_error(&kind, object.clone(), e))?;
            record_origin(at, &kind, &model.id, state);
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
        ("v1", "Pod") => {
            let pod: core::Pod = typed(at, &kind, &object, value)?;
            let pod = convert_extra::pod(&pod).map_err(|e| at.field_error(&kind, object.clone(), e))?;
            record_origin(at, &kind, &pod.id, state);
            state.extra.pods.push(pod);
            Ok(())
        }
        ("v1", "Endpoints") => {
            let ep: core::Endpoints = typed(at, &kind, &object, value)?;
            let ep = convert_extra::endpoints(&ep).map_err(|e| at.field_error(&kind, object.clone(), e))?;
            record_origin(at, &kind, &ep.id, state);
            state.extra.endpoints.push(ep);
            Ok(())
        }
        ("discovery.k8s.io/v1", "EndpointSlice") => {
            let slice: discovery::EndpointSlice = typed(at, &kind, &object, value)?;
            let refs = convert_extra::slice_refs(&slice);
            record_origin(at, &kind, &refs.slice, state);
            state.extra.slice_refs.push(refs);
            let mut skips = Vec::new();
            let converted = convert::endpoint_slice(&slice, &mut skips)
                .map_err(|e| at.field_error(&kind, object.clone(), e))?;
            note_skips(at, &kind, &object, skips, state);
            state.slices.extend(converted);
            Ok(())
        }
        ("v1", "Node") => {
            let node: core::Node = typed(at, &kind, &object, value)?;
            state.nodes.push(convert::node(&node).map_err(|e| at.field_error(&kind, object.clone(), e))?);
            Ok(())
        }
        ("", _) | (_, "") => Err(at.doc_error("missing apiVersion or kind")),
        _ => {
            state.notes.push(at.note(format!("skipped {api_version}/{kind} {object}: not a kind svcproxy reads")));
            Ok(())
        }
    }
}

fn read_fixture(at: &At, value: Value, state: &mut ClusterState) -> Result<(), SourceError> {
    if state.fixture.is_some() {
        return Err(at.doc_error(format!("a second {FIXTURE_KIND} document (only one is allowed)")));
    }
    state.fixture = Some(typed(at, FIXTURE_KIND, "", value)?);
    Ok(())
}

fn record_origin(at: &At, kind: &str, id: &crate::model::NamespacedName, state: &mut ClusterState) {
    state.extra.origins.insert((kind.to_string(), id.clone()), (at.path.to_path_buf(), at.line));
}

fn note_skips(at: &At, kind: &str, object: &str, skips: Vec<Skip>, state: &mut ClusterState) {
    for s in skips {
        state.notes.push(at.note(format!("{kind} {object}: field {}: {}", s.field, s.reason)));
    }
}

/// Deserializes into a kube type, naming the failing field's path.
fn typed<T: DeserializeOwned>(at: &At, kind: &str, object: &str, value: Value) -> Result<T, SourceError> {
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

/// The events that turn cluster state `old` into `new` (objects only in `old` are
/// deleted; objects in `new` are applied, unchanged ones included, as a relist would).
pub fn events_between(old: &ClusterState, new: &ClusterState) -> Vec<crate::track::Event> {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use crate::track::Event;
    let mut events = Vec::new();
    let new_services: BTreeSet<_> = new.services.iter().map(|s| &s.id).collect();
    for s in &old.services {
        if !new_services.contains(&s.id) {
            events.push(Event::ServiceDeleted(s.id.clone()));
        }
    }
    let new_slices: BTreeSet<_> = new.slices.iter().map(|s| &s.id).collect();
    for s in &old.slices {
        if !new_slices.contains(&s.id) {
            events.push(Event::SliceDeleted(Arc::new(s.clone())));
        }
    }
    events.extend(new.services.iter().map(|s| Event::ServiceApplied(Arc::new(s.clone()))));
    events.extend(new.slices.iter().map(|s| Event::SliceApplied(Arc::new(s.clone()))));
    events
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
        let st = read(&text).unwrap();
        assert_eq!(st.services.len(), 1);
        assert_eq!(st.notes.len(), 1);
        assert!(st.notes[0].text.contains("skipped v1/ConfigMap x"), "{:?}", st.notes);
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
    fn malformed_yaml_names_the_line() {
        let err = read("apiVersion: v1\nkind: Service\nmetadata: [\n").unwrap_err().to_string();
        assert!(err.starts_with("t.yaml: line "), "{err}");
    }
}

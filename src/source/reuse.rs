//! Reading a file again, taking each YAML document whose text did not change from the
//! file's last read instead of parsing and converting it again: in a large file, one
//! changed object costs one document's parse.
//!
//! A read keeps an index of its documents ([`DocIndex`]): the hash of each document's
//! text (its root line to the next `---` line, as the subset YAML reader reads it) and
//! the run of the read's Services or EndpointSlices it gave, by position, with the line
//! it started on. The next read of the file looks each document's text up: one found is
//! taken from the last read (its objects' very `Arc`s, their lines moved by as much as
//! the document moved, recorded as reading them records them), one not found is read.
//! The result is what a read of the new text alone gives, trimmed (see below).
//!
//! Only what is plain to take again is indexed: documents read by the subset reader
//! without an error, a note or a duplicate, that gave Services or EndpointSlices (not
//! both) and nothing else, in a read without duplicates. Everything else (JSON files,
//! serde-saphyr's documents, Pods, Nodes, fixtures, …) is read as before. A document
//! taken again brings no Service backends or slice references (nothing keeps them), so a
//! read that takes any is trimmed, as a kept read is when nothing needs them; the index
//! is used only for a file whose last read was trimmed.
//!
//! The index holds no object (positions into the read it belongs to) and is replaced
//! with every read.

// A SourceError names the file, line, object and field; it is returned once per skipped
// object, so its size does not matter on the happy path.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::error::SourceError;
use super::file::{self, ClusterState, Visit};
use super::json::Doc;
use super::objects::Objects;
use crate::model::{EndpointSlice, Service};

/// A document's text, hashed (SHA-256, cut to 128 bits).
type Key = [u8; 16];

fn key(text: &str) -> Key {
    let digest = Sha256::digest(text.as_bytes());
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// Which of a read's objects a document gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Services,
    Slices,
}

/// What one document gave: `len` of the read's Services or EndpointSlices from `start`,
/// the document's root line being `line`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    line: u64,
    kind: Kind,
    start: u32,
    len: u32,
}

impl Entry {
    fn range(&self) -> Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// The documents of one read of a file that a later read may take again.
#[derive(Debug, Default)]
pub(super) struct DocIndex {
    entries: HashMap<Key, Entry>,
}

impl DocIndex {
    /// How many documents it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bytes it takes (its table, without what the allocator adds).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.entries.capacity() * (size_of::<Key>() + size_of::<Entry>() + 1)
    }

    /// Its entries in key order, as text (the map's own order varies).
    #[cfg(test)]
    pub(super) fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.entries.iter().map(|(k, e)| format!("{k:02x?} {e:?}")).collect();
        out.sort();
        out
    }
}

/// A file's last read, as far as the next read takes from it: its index, objects and
/// the line each object was read on.
pub(super) struct Last<'a> {
    pub index: &'a DocIndex,
    pub objects: &'a Objects,
    pub service_lines: &'a [u64],
    pub slice_lines: &'a [u64],
}

/// A read of one file.
pub(super) struct Read {
    /// Everything read, without its Services and EndpointSlices (those are `objects`).
    pub rest: ClusterState,
    pub objects: Objects,
    pub index: DocIndex,
    /// Whether documents were taken from the last read: the read lacks their Service
    /// backends and slice references and must be trimmed.
    pub reused: bool,
}

/// Reads `file`, taking from `last` (when given) every document whose text it read too;
/// errors go to `errors`.
pub(super) fn read(file: &Path, last: Option<Last>, errors: &mut Vec<SourceError>) -> Read {
    let before = errors.len();
    let mut reader = Reader::new(file, last, errors);
    read_into(file, &mut reader);
    if !reader.state.duplicates.is_empty() && reader.reused() {
        // Objects taken again are placed by position, which a duplicate (an earlier copy
        // dropped) upsets: read the file whole instead.
        errors.truncate(before);
        reader = Reader::new(file, None, errors);
        read_into(file, &mut reader);
    }
    reader.finish()
}

fn read_into(file: &Path, reader: &mut Reader) {
    let read = file::read_text(file).and_then(|text| file::each_document(file, &text, reader));
    match read {
        Ok(note) => reader.state.notes.extend(note),
        Err(e) => reader.errors.push(e),
    }
}

/// The sizes of a read's lists, before and after a document: what it gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Marks {
    services: usize,
    slices: usize,
    backends: usize,
    slice_refs: usize,
    /// Everything a document taken again may not have given.
    others: [usize; 6],
    fixture: bool,
}

impl Marks {
    fn of(state: &ClusterState) -> Marks {
        let extra = &state.extra;
        Marks {
            services: state.services.len(),
            slices: state.slices.len(),
            backends: extra.backends.len(),
            slice_refs: extra.slice_refs.len(),
            others: [state.nodes.len(), state.notes.len(), state.duplicates.len(), extra.pods.len(), extra.endpoints.len(), state.service_cidrs.len()],
            fixture: state.fixture.is_some(),
        }
    }

    /// What a document that took the read from `self` to `after` gave, when it is plain to
    /// take again: only Services (each with its backend) or only EndpointSlices (each with
    /// its references), nothing else.
    fn given(&self, after: &Marks) -> Option<(Kind, usize)> {
        if (self.others, self.fixture) != (after.others, after.fixture) {
            return None;
        }
        let services = after.services.checked_sub(self.services)?;
        let slices = after.slices.checked_sub(self.slices)?;
        let plain = after.backends.checked_sub(self.backends)? == services && after.slice_refs.checked_sub(self.slice_refs)? == slices;
        match (services, slices) {
            _ if !plain => None,
            (n, 0) => Some((Kind::Services, n)),
            (0, n) => Some((Kind::Slices, n)),
            _ => None,
        }
    }
}

/// Reads a file's documents, taking those `last` has.
struct Reader<'a, 'l> {
    path: &'a Path,
    last: Option<Last<'l>>,
    state: ClusterState,
    errors: &'a mut Vec<SourceError>,
    /// The objects taken again, each with how many objects were read before it.
    services: Vec<(usize, Arc<Service>)>,
    slices: Vec<(usize, Arc<EndpointSlice>)>,
    /// The key of the document [`Visit::known`] did not find (about to be read).
    missed: Option<Key>,
    entries: HashMap<Key, Entry>,
}

impl<'a, 'l> Reader<'a, 'l> {
    fn new(path: &'a Path, last: Option<Last<'l>>, errors: &'a mut Vec<SourceError>) -> Self {
        Reader {
            path,
            last,
            state: ClusterState::default(),
            errors,
            services: Vec::new(),
            slices: Vec::new(),
            missed: None,
            entries: HashMap::new(),
        }
    }

    fn reused(&self) -> bool {
        !self.services.is_empty() || !self.slices.is_empty()
    }

    /// How many Services and EndpointSlices the read has so far: where the next goes.
    fn counts(&self) -> (usize, usize) {
        (self.state.services.len() + self.services.len(), self.state.slices.len() + self.slices.len())
    }

    /// Takes the document of `entry` from the last read as read on `line`.
    fn take(&mut self, entry: &Entry, line: u64) -> bool {
        let Some(last) = &self.last else { return false };
        let (objects, lines) = match entry.kind {
            Kind::Services => (last.objects.services.len(), last.service_lines),
            Kind::Slices => (last.objects.slices.len(), last.slice_lines),
        };
        let range = entry.range();
        if range.end > objects.min(lines.len()) || lines[range.clone()].iter().any(|&l| l < entry.line) {
            return false;
        }
        for i in range {
            let at = line + (lines[i] - entry.line);
            let path = self.path;
            match entry.kind {
                Kind::Services => {
                    let s = &last.objects.services[i];
                    file::replayed(path, at, "Service", &s.id, &mut self.state);
                    self.services.push((self.state.services.len(), Arc::clone(s)));
                }
                Kind::Slices => {
                    let s = &last.objects.slices[i];
                    file::replayed(path, at, "EndpointSlice", &s.id, &mut self.state);
                    self.slices.push((self.state.slices.len(), Arc::clone(s)));
                }
            }
        }
        true
    }

    fn finish(self) -> Read {
        let reused = self.reused();
        let mut rest = self.state;
        let fresh = Objects::take(&mut rest);
        let objects = Objects { services: interleave(fresh.services, self.services), slices: interleave(fresh.slices, self.slices) };
        // Positions hold in a read without duplicates only.
        let entries = if rest.duplicates.is_empty() { self.entries } else { HashMap::new() };
        Read { rest, objects, index: DocIndex { entries }, reused }
    }
}

impl<'t> Visit<'t> for Reader<'_, '_> {
    const TEXTS: bool = true;

    fn known(&mut self, text: &'t str, line: u64) -> bool {
        self.missed = None;
        let Some(last) = &self.last else { return false };
        let key = key(text);
        let Some(entry) = last.index.entries.get(&key).copied() else {
            self.missed = Some(key);
            return false;
        };
        let (services, slices) = self.counts();
        if !self.take(&entry, line) {
            self.missed = Some(key);
            return false;
        }
        let start = match entry.kind {
            Kind::Services => services,
            Kind::Slices => slices,
        };
        self.entries.insert(key, Entry { line, start: start as u32, ..entry });
        true
    }

    fn doc(&mut self, doc: usize, line: u64, value: Doc<'t>, text: Option<&'t str>) -> Result<(), SourceError> {
        let missed = self.missed.take();
        let (services, slices) = self.counts();
        let before = Marks::of(&self.state);
        if let Err(e) = file::read_doc(self.path, doc, line, value, &mut self.state) {
            self.errors.push(e);
            return Ok(());
        }
        let Some(text) = text else { return Ok(()) };
        if let Some((kind, len)) = before.given(&Marks::of(&self.state)) {
            let start = if kind == Kind::Services { services } else { slices };
            let (Ok(start), Ok(len)) = (u32::try_from(start), u32::try_from(len)) else { return Ok(()) };
            self.entries.insert(missed.unwrap_or_else(|| key(text)), Entry { line, kind, start, len });
        }
        Ok(())
    }
}

/// The objects read (`fresh`, in order) with those taken again, each placed after as many
/// of `fresh` as it says.
fn interleave<T>(fresh: Vec<Arc<T>>, taken: Vec<(usize, Arc<T>)>) -> Vec<Arc<T>> {
    if taken.is_empty() {
        return fresh;
    }
    let mut out = Vec::with_capacity(fresh.len() + taken.len());
    let mut taken = taken.into_iter().peekable();
    for (i, f) in fresh.into_iter().enumerate() {
        while let Some((_, t)) = taken.next_if(|(at, _)| *at <= i) {
            out.push(t);
        }
        out.push(f);
    }
    out.extend(taken.map(|(_, t)| t));
    out
}

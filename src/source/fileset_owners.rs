//! Who holds the last copy of each object across a [`FileSet`]'s files, kept between
//! merges and brought up to date for the files that changed only: the file watch's work
//! after a change is then the changed files' objects, not the cluster's.
//!
//! Each object read (kind and identity, as [`FileRead::keys`] lists them) is indexed by a
//! hash of its kind and identity (SHA-256 cut to 128 bits, as [`super::reuse`] keys
//! documents), with every file holding it in the order one read of every file meets it.
//! The last holder's file has the copy used; each holder after the first is a duplicate
//! across files of the one before it, kept per file until a change of its key.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{FileRead, FileSet};
use crate::model::{EndpointSlice, NamespacedName, Service};
use crate::source::file::{ClusterState, Duplicate};
use crate::source::objects::Objects;
use crate::track::Event;

/// Two words rather than a `u128`, whose 16-byte alignment would pad every entry.
type Key = (u64, u64);

fn key(kind: &str, id: &NamespacedName) -> Key {
    let mut hash = Sha256::new();
    for part in [kind, &id.namespace, &id.name] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    // Little-endian, as `u64::from_le_bytes` reads it, without a fallible conversion.
    let word = |at: usize| digest[at..at + 8].iter().rev().fold(0u64, |w, b| (w << 8) | u64::from(*b));
    (word(0), word(8))
}

/// One file's reading of an object.
#[derive(Debug, Clone, Copy)]
struct Holder {
    /// The file (see [`Owners::slots`]).
    slot: u32,
    /// The object's place in the file's [`FileRead::keys`].
    seq: u32,
    /// The line it was last read on.
    line: u64,
}

/// The files holding one object: nearly always one, held without an allocation.
#[derive(Debug)]
enum Holders {
    One(Holder),
    Many(Vec<Holder>),
}

impl Holders {
    fn list(&self) -> &[Holder] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Many(list) => list,
        }
    }

    /// Changes the list with `edit`; true when it is left empty.
    fn edit(&mut self, edit: impl FnOnce(&mut Vec<Holder>)) -> bool {
        let mut list = match std::mem::replace(self, Holders::Many(Vec::new())) {
            Holders::One(h) => vec![h],
            Holders::Many(list) => list,
        };
        edit(&mut list);
        let empty = list.is_empty();
        *self = if let [one] = list[..] { Holders::One(one) } else { Holders::Many(list) };
        empty
    }
}

/// An object with its place in the merge's order (the file's position, its place in it).
type Placed<T> = ((u32, u32), Arc<T>);

#[derive(Debug, Default)]
pub(super) struct Owners {
    /// Each file's slot, parallel to the set's files: a file keeps its slot while listed.
    slots: Vec<u32>,
    /// Each slot's position among the files (`u32::MAX`: free).
    rank: Vec<u32>,
    free: Vec<u32>,
    /// The files holding each object, in the order one read of every file meets them.
    holders: HashMap<Key, Holders>,
    /// Per slot, by place in the file: the duplicates across files whose later copy it has.
    across: Vec<BTreeMap<u32, Duplicate>>,
}

/// What a change of files touched: every object a read that came or went has (kind and
/// identity), and the Services' and EndpointSlices' copy used before it.
#[derive(Debug, Default)]
pub(super) struct Changes {
    keys: HashMap<Key, (&'static str, NamespacedName)>,
    services: HashMap<Key, Option<Placed<Service>>>,
    slices: HashMap<Key, Option<Placed<EndpointSlice>>>,
}

fn service_at(read: &FileRead, seq: u32) -> Option<&Arc<Service>> {
    read.objects.services.get(seq as usize)
}

fn slice_at(read: &FileRead, seq: u32) -> Option<&Arc<EndpointSlice>> {
    (seq as usize).checked_sub(read.objects.services.len()).and_then(|i| read.objects.slices.get(i))
}

impl Owners {
    fn rank(&self, slot: u32) -> usize {
        self.rank[slot as usize] as usize
    }

    /// The slot of the file with the copy used of `kind`/`id`.
    fn owner_slot(&self, kind: &str, id: &NamespacedName) -> Option<u32> {
        self.holders.get(&key(kind, id)).and_then(|h| h.list().last()).map(|h| h.slot)
    }

    /// The object used for `key`, as `at` finds it in its file (none when that file read
    /// the identity without giving the object).
    fn owner<'f, T: 'f>(&self, files: &'f [(PathBuf, FileRead)], key: Key, at: impl Fn(&'f FileRead, u32) -> Option<&'f Arc<T>>) -> Option<Placed<T>> {
        let holders = self.holders.get(&key)?.list();
        let slot = holders.last()?.slot;
        let rank = self.rank(slot);
        let read = &files[rank].1;
        holders.iter().filter(|h| h.slot == slot).find_map(|h| at(read, h.seq).map(|o| ((rank as u32, h.seq), Arc::clone(o))))
    }

    /// Records every object of `read` in `changes`, with the copy used now.
    fn note(&self, files: &[(PathBuf, FileRead)], read: &FileRead, changes: &mut Changes) {
        for ((kind, id), _) in read.keys() {
            let k = key(kind, id);
            let Entry::Vacant(e) = changes.keys.entry(k) else { continue };
            e.insert((kind, id.clone()));
            match kind {
                "Service" => drop(changes.services.insert(k, self.owner(files, k, service_at))),
                "EndpointSlice" => drop(changes.slices.insert(k, self.owner(files, k, slice_at))),
                _ => {}
            }
        }
    }

    fn unindex(&mut self, slot: u32, read: &FileRead) {
        for ((kind, id), _) in read.keys() {
            if let Entry::Occupied(mut e) = self.holders.entry(key(kind, id)) {
                if e.get_mut().edit(|list| list.retain(|h| h.slot != slot)) {
                    e.remove();
                }
            }
        }
        self.across[slot as usize].clear();
    }

    fn index(&mut self, slot: u32, read: &FileRead) {
        let (rank, holders) = (&self.rank, &mut self.holders);
        let place = |h: &Holder| (rank[h.slot as usize], h.seq);
        for (seq, (id, line)) in read.keys().enumerate() {
            let holder = Holder { slot, seq: seq as u32, line };
            match holders.entry(key(id.0, id.1)) {
                Entry::Vacant(e) => drop(e.insert(Holders::One(holder))),
                Entry::Occupied(mut e) => drop(e.get_mut().edit(|list| list.insert(list.partition_point(|h| place(h) < place(&holder)), holder))),
            }
        }
    }

    fn alloc(&mut self) -> u32 {
        if let Some(slot) = self.free.pop() {
            return slot;
        }
        self.rank.push(u32::MAX);
        self.across.push(BTreeMap::new());
        (self.rank.len() - 1) as u32
    }

    /// The duplicates across files of every key `changes` holds, as the holders now say.
    fn redo_across(&mut self, files: &[(PathBuf, FileRead)], changes: &Changes) {
        let (rank, across) = (&self.rank, &mut self.across);
        let place = |h: &Holder| (files[rank[h.slot as usize] as usize].0.clone(), h.line);
        for (k, (kind, id)) in &changes.keys {
            let Some(holders) = self.holders.get(k).map(Holders::list) else { continue };
            across[holders[0].slot as usize].remove(&holders[0].seq);
            for pair in holders.windows(2) {
                let (before, h) = (&pair[0], &pair[1]);
                // A duplicate across files names the first line its later file read it on.
                let read = &files[rank[h.slot as usize] as usize].1;
                let first_in_file = read.rest.duplicates.iter().find(|d| d.kind == *kind && d.id == *id).map(|d| d.first.1);
                let again = (place(h).0, first_in_file.unwrap_or(h.line));
                across[h.slot as usize].insert(h.seq, Duplicate { kind, id: id.clone(), first: place(before), again });
            }
        }
    }
}

impl FileSet {
    /// The files become `files` (in path order; `listing` is the path's note): those of
    /// `fresh` take that read, the others keep theirs (one listed and neither kept nor read
    /// starts empty: it is read at the next change of the path), a file no longer listed
    /// is dropped. The owners follow; `changes` records what every read that came or went
    /// holds (before anything moves).
    pub(super) fn replace(&mut self, listing: Option<super::Note>, files: &[PathBuf], mut fresh: HashMap<PathBuf, FileRead>, changes: &mut Changes) {
        let listed: std::collections::HashSet<&PathBuf> = files.iter().collect();
        fresh.retain(|p, _| listed.contains(p));
        let goes = |p: &PathBuf| fresh.contains_key(p) || !listed.contains(p);
        for (_, read) in self.files.iter().filter(|(p, _)| goes(p)) {
            self.owners.note(&self.files, read, changes);
        }
        for read in fresh.values() {
            self.owners.note(&self.files, read, changes);
        }
        let slots = std::mem::take(&mut self.owners.slots);
        let mut old: HashMap<PathBuf, (u32, FileRead)> = std::mem::take(&mut self.files).into_iter().zip(slots).map(|((p, r), s)| (p, (s, r))).collect();
        for (path, (slot, read)) in &old {
            if fresh.contains_key(path) || !listed.contains(path) {
                self.owners.unindex(*slot, read);
            }
        }
        // The files whose read is new: fresh, or listed and neither kept nor read.
        let mut came = Vec::new();
        for file in files {
            let (slot, read, new) = match (fresh.remove(file), old.remove(file)) {
                (Some(read), Some((slot, _))) => (slot, read, true),
                (Some(read), None) => (self.owners.alloc(), read, true),
                (None, Some((slot, read))) => (slot, read, false),
                (None, None) => (self.owners.alloc(), FileRead::default(), true),
            };
            if new {
                came.push(self.files.len());
            }
            self.files.push((file.clone(), read));
            self.owners.slots.push(slot);
        }
        for (_, (slot, _)) in old {
            self.owners.rank[slot as usize] = u32::MAX;
            self.owners.free.push(slot);
        }
        for (i, slot) in self.owners.slots.iter().enumerate() {
            self.owners.rank[*slot as usize] = i as u32;
        }
        for i in came {
            self.owners.index(self.owners.slots[i], &self.files[i].1);
        }
        self.owners.redo_across(&self.files, changes);
        self.listing = listing;
    }
}

impl FileSet {
    /// Makes each of `objects` that equals the copy used now of its identity that copy's
    /// allocation (what the trackers hold when they hold the files' merge unfinished).
    pub(super) fn share_used(&self, objects: &mut Objects) {
        fn share<T: PartialEq>(set: &FileSet, objects: &mut [Arc<T>], kind: &str, id: impl Fn(&T) -> &NamespacedName, at: impl Fn(&FileRead, u32) -> Option<&Arc<T>>) {
            for o in objects {
                let used = set.owners.owner(&set.files, key(kind, id(o)), &at);
                if let Some((_, used)) = used.filter(|(_, u)| !Arc::ptr_eq(u, o) && u == o) {
                    *o = used;
                }
            }
        }
        share(self, &mut objects.services, "Service", |s| &s.id, service_at);
        share(self, &mut objects.slices, "EndpointSlice", |s| &s.id, slice_at);
    }

    /// The events that take the trackers from the copies used before the changes to
    /// those used now, as [`Objects::events_since`] gives them between the two merges:
    /// objects gone deleted (in the old merge's order), objects new or changed applied (in
    /// the new one's), Services first. A copy used now that equals the one used before
    /// becomes its allocation.
    pub(super) fn events(&mut self, changes: Changes) -> Vec<Event> {
        let Changes { services, slices, .. } = changes;
        let (mut gone, mut gone_slices, mut applied, mut applied_slices) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (k, before) in services {
            match (before, self.owners.owner(&self.files, k, service_at)) {
                (Some((at, old)), None) => gone.push((at, Event::ServiceDeleted(old.id.clone()))),
                (Some((_, old)), Some(((rank, seq), now))) if old == now => {
                    self.files[rank as usize].1.objects.services[seq as usize] = old;
                }
                (_, Some((at, now))) => applied.push((at, Event::ServiceApplied(now))),
                (None, None) => {}
            }
        }
        for (k, before) in slices {
            match (before, self.owners.owner(&self.files, k, slice_at)) {
                (Some((at, old)), None) => gone_slices.push((at, Event::SliceDeleted(old))),
                (Some((_, old)), Some(((rank, seq), now))) if old == now => {
                    let read = &mut self.files[rank as usize].1;
                    let i = seq as usize - read.objects.services.len();
                    read.objects.slices[i] = old;
                }
                (_, Some((at, now))) => applied_slices.push((at, Event::SliceApplied(now))),
                (None, None) => {}
            }
        }
        let mut events = Vec::new();
        for mut list in [gone, gone_slices, applied, applied_slices] {
            list.sort_by_key(|(at, _)| *at);
            events.extend(list.into_iter().map(|(_, e)| e));
        }
        events
    }

    /// The merge without its Services and EndpointSlices, as [`FileSet::merge_rest`] gives
    /// it without `full`, from the owners: its cost is the files' other objects, notes and
    /// duplicates, not their Services and EndpointSlices.
    pub(super) fn rest(&self) -> ClusterState {
        let single = self.files.len() <= 1;
        let mut state = ClusterState::default();
        state.notes.extend(self.listing.clone());
        for (i, (_, read)) in self.files.iter().enumerate() {
            let slot = self.owners.slots[i];
            let owns = |kind: &str, id: &NamespacedName| single || self.owners.owner_slot(kind, id) == Some(slot);
            let rest = &read.rest;
            if state.fixture.is_none() {
                state.fixture.clone_from(&rest.fixture);
            }
            state.nodes.extend(rest.nodes.iter().filter(|n| owns("Node", &NamespacedName::new(String::new(), n.name.clone()))).cloned());
            state.service_cidrs.extend(rest.service_cidrs.iter().filter(|c| owns("ServiceCIDR", &c.id)).cloned());
            state.extra.pods.extend(rest.extra.pods.iter().filter(|p| owns("Pod", &p.id)).cloned());
            state.extra.endpoints.extend(rest.extra.endpoints.iter().filter(|e| owns("Endpoints", &e.id)).cloned());
            let across: Vec<&Duplicate> = if single { Vec::new() } else { self.owners.across[slot as usize].values().collect() };
            state.notes.extend(rest.notes.iter().cloned());
            state.notes.extend(across.iter().map(|d| d.note()));
            state.duplicates.extend(rest.duplicates.iter().cloned());
            state.duplicates.extend(across.into_iter().cloned());
        }
        state
    }
}

#[cfg(test)]
#[path = "fileset_owners_tests.rs"]
mod tests;

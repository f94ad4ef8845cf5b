//! Watch mode's reading of files, one file at a time: each file's read is kept on its own
//! (its Services and EndpointSlices as the `Arc`s the trackers hold, its other objects,
//! notes and duplicates within it), so a change re-reads only the files that changed. The
//! whole input is the merge of the kept reads, in path order, as one read of every file
//! gives it: an object read in two files is a duplicate whose later copy is used, and
//! what finishes a read (the commands derive EndpointSlices) runs on the merge.
//!
//! What a merge differs in from one read of every file: a duplicate across files is noted
//! after the later file's own notes rather than among them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use self::owners::{Changes, Owners};
use super::error::SourceError;
use super::file::{input_files, ClusterState, Duplicate, Note};
use super::objects::Objects;
use super::reuse::{self, DocIndex};

use crate::model::{EndpointSlice, NamespacedName, Service};
use crate::track::Event;

#[path = "fileset_owners.rs"]
mod owners;

/// What finishes the merged read before its objects are used (the commands derive
/// EndpointSlices from Pods and v1/Endpoints); the source knows nothing of it.
pub trait Finish {
    /// Whether [`Finish::finish`] can change a read whose Pods, Endpoints and nodes are
    /// those of `state` (its Services and EndpointSlices are left out). When it cannot,
    /// the merge skips it and each file keeps only what the trackers need.
    fn needed(&self, state: &ClusterState) -> bool;
    fn finish(&self, state: &mut ClusterState);
}

/// One file's read, kept until the file changes.
#[derive(Debug, Default)]
struct FileRead {
    objects: Objects,
    /// The line each of `objects.services` and `objects.slices` was (last) read on.
    service_lines: Vec<u64>,
    slice_lines: Vec<u64>,
    /// Everything else of the read: fixture, nodes, notes, Pods, legacy Endpoints, the
    /// duplicates within the file, and where each object other than those of `objects` was
    /// read (`seen`: Pods, Endpoints, Nodes, EndpointSlices that gave no slice). Its
    /// services, slices and origins are empty; its Service backends and slice references
    /// are dropped while nothing needs them (`trimmed`).
    rest: ClusterState,
    trimmed: bool,
    /// The documents the next read of the file may take from this one.
    docs: DocIndex,
}

impl FileRead {
    fn new(read: reuse::Read) -> FileRead {
        let reuse::Read { objects, mut rest, index, reused } = read;
        let mut line = |kind: &'static str, id: &NamespacedName| rest.seen.remove(&(kind, id.clone())).map_or(0, |(_, l)| l);
        let service_lines = objects.services.iter().map(|s| line("Service", &s.id)).collect();
        let slice_lines = objects.slices.iter().map(|s| line("EndpointSlice", &s.id)).collect();
        rest.extra.origins = BTreeMap::new();
        let mut read = FileRead { objects, service_lines, slice_lines, rest, trimmed: false, docs: index };
        if reused {
            read.trim();
        }
        read
    }

    /// What the next read of the file takes from this one: nothing unless it is trimmed (a
    /// read that takes documents again is trimmed; while something needs this one whole,
    /// the next is read whole too).
    fn last(&self) -> Option<reuse::Last<'_>> {
        self.trimmed.then_some(reuse::Last {
            index: &self.docs,
            objects: &self.objects,
            service_lines: &self.service_lines,
            slice_lines: &self.slice_lines,
        })
    }

    /// Every object read (kind, identity) with the line it was last read on.
    fn keys(&self) -> impl Iterator<Item = ((&'static str, &NamespacedName), u64)> {
        let services = self.objects.services.iter().zip(&self.service_lines).map(|(s, l)| (("Service", &s.id), *l));
        let slices = self.objects.slices.iter().zip(&self.slice_lines).map(|(s, l)| (("EndpointSlice", &s.id), *l));
        let rest = self.rest.seen.iter().map(|((k, id), (_, l))| ((*k, id), *l));
        services.chain(slices).chain(rest)
    }

    /// The line each object read more than once in this file was first read on.
    fn first_lines(&self) -> BTreeMap<(&'static str, &NamespacedName), u64> {
        let mut out = BTreeMap::new();
        for d in &self.rest.duplicates {
            out.entry((d.kind, &d.id)).or_insert(d.first.1);
        }
        out
    }

    /// Keeps the objects of `old` this read does not have (a read with errors deletes
    /// nothing: the object that failed may be one that disappeared).
    fn keep_unread(&mut self, old: &FileRead) {
        let services: BTreeSet<&NamespacedName> = self.objects.services.iter().map(|s| &s.id).collect();
        let slices: BTreeSet<&NamespacedName> = self.objects.slices.iter().map(|s| &s.id).collect();
        let kept_services: Vec<_> = old.objects.services.iter().zip(&old.service_lines).filter(|(s, _)| !services.contains(&s.id)).collect();
        let kept_slices: Vec<_> = old.objects.slices.iter().zip(&old.slice_lines).filter(|(s, _)| !slices.contains(&s.id)).collect();
        for (s, l) in kept_services {
            self.objects.services.push(s.clone());
            self.service_lines.push(*l);
        }
        for (s, l) in kept_slices {
            self.objects.slices.push(s.clone());
            self.slice_lines.push(*l);
        }
    }

    fn trim(&mut self) {
        if !self.trimmed {
            self.rest.extra.backends = Vec::new();
            self.rest.extra.slice_refs = Vec::new();
            self.trimmed = true;
        }
    }
}

/// Reads one file on its own, taking what it can from `last` (its last read); true when
/// something in it did not read.
fn read_one(file: &Path, last: Option<&FileRead>, errors: &mut Vec<SourceError>) -> (FileRead, bool) {
    let before = errors.len();
    let read = reuse::read(file, last.and_then(FileRead::last), errors);
    (FileRead::new(read), errors.len() > before)
}

/// Files read afresh: what [`FileSet::update`] takes.
#[derive(Debug, Default)]
pub struct Reads {
    files: Vec<(PathBuf, FileRead, bool)>,
    /// What did not read (objects skipped, files that could not be read).
    pub errors: Vec<SourceError>,
}

/// The kept read of every file of the watched path.
#[derive(Debug, Default)]
pub struct FileSet {
    /// What the path's listing says (a directory: how many files, which were skipped).
    listing: Option<Note>,
    /// Every file, in path order, with its read.
    files: Vec<(PathBuf, FileRead)>,
    /// Who has the copy used of each object, kept up to date with `files`.
    owners: Owners,
    /// The objects of the last merge when it was finished (the trackers hold them);
    /// `None` when they are the files' objects merged (the owners' copies).
    finished: Option<Objects>,
}

/// What a change of the files gives ([`FileSet::apply`]).
#[derive(Debug, Default)]
pub struct Change {
    /// What takes the trackers from the last merge to this one.
    pub events: Vec<Event>,
    /// The merge without its Services and EndpointSlices.
    pub rest: ClusterState,
    /// What did not read while merging (trimmed files read again), and second fixtures.
    pub errors: Vec<SourceError>,
}

/// A merge: the whole input's objects and everything else of it (without Services and
/// EndpointSlices: those are in `objects`).
#[derive(Debug, Default)]
pub struct Merged {
    pub objects: Objects,
    pub state: ClusterState,
}

impl FileSet {
    /// Reads every file of `path` (a file or a directory tree, as [`super::read_path`]).
    pub fn read(path: &Path) -> (FileSet, Vec<SourceError>) {
        let (files, listing) = match input_files(path) {
            Ok(listed) => listed,
            Err(e) => return (FileSet::default(), vec![e]),
        };
        let mut reads = FileSet::default().read_files(&files);
        let errors = std::mem::take(&mut reads.errors);
        let mut set = FileSet::default();
        set.update(listing, &files, reads, &Objects::default());
        (set, errors)
    }

    /// Reads `files` (those that changed), each on its own, each document that did not
    /// change taken from the file's kept read ([`reuse`]).
    pub fn read_files(&self, files: &[PathBuf]) -> Reads {
        let kept: BTreeMap<&Path, &FileRead> = self.files.iter().map(|(p, r)| (p.as_path(), r)).collect();
        let mut reads = Reads::default();
        for f in files {
            let (read, failed) = read_one(f, kept.get(f.as_path()).copied(), &mut reads.errors);
            reads.files.push((f.clone(), read, failed));
        }
        reads
    }

    /// The files are now `files` (in path order; `listing` is the path's note): those of
    /// `reads` take their new read, the others keep theirs, a file no longer listed is
    /// dropped. A read with errors keeps the file's objects it lacks. Each object read
    /// that equals `held`'s (what the trackers hold) becomes `held`'s allocation.
    pub fn update(&mut self, listing: Option<Note>, files: &[PathBuf], reads: Reads, held: &Objects) {
        let fresh = self.prepare(reads, |o| o.share(held));
        self.replace(listing, files, fresh, &mut Changes::default());
    }

    /// The fresh reads of `reads`, each made ready to replace its file's: a read with
    /// errors keeps the file's objects it lacks, and `share` makes objects the ones held.
    fn prepare(&self, reads: Reads, share: impl Fn(&mut Objects)) -> HashMap<PathBuf, FileRead> {
        let kept: HashMap<&Path, &FileRead> = self.files.iter().map(|(p, r)| (p.as_path(), r)).collect();
        let mut fresh = HashMap::new();
        for (path, mut read, failed) in reads.files {
            if let Some(kept) = kept.get(path.as_path()).filter(|_| failed) {
                read.keep_unread(kept);
            }
            share(&mut read.objects);
            fresh.insert(path, read);
        }
        fresh
    }

    /// A change of the files as the watch follows it: the files are now `listed` (as
    /// [`FileSet::update`]; `None`: the path could not be listed, nothing changes and
    /// `reads` are dropped), and the events take the trackers from the last merge to the
    /// new one. While nothing needs finishing, the work is the changed files' objects and
    /// the objects whose copy used changed with them ([`owners`]); a finished merge is
    /// merged and compared whole, as [`FileSet::merge`] and [`Objects::events_since`].
    pub fn apply(&mut self, listed: Option<(Option<Note>, &[PathBuf])>, reads: Reads, finish: &impl Finish) -> Change {
        let mut changes = Changes::default();
        let held = self.finished.take();
        if let Some((listing, files)) = listed {
            let fresh = match &held {
                Some(held) => self.prepare(reads, |o| o.share(held)),
                None => self.prepare(reads, |o| self.share_used(o)),
            };
            self.replace(listing, files, fresh, &mut changes);
        }
        if let Some(held) = held {
            let (mut merged, unfinished, errors) = self.merge_tracked(finish, &mut Changes::default());
            let events = merged.objects.events_since(&held);
            if unfinished.is_some() {
                self.finished = Some(merged.objects.clone());
            } else {
                // The trackers now hold the files' merge: as the files' own objects.
                self.share_all(&merged.objects);
            }
            return Change { events, rest: merged.state, errors };
        }
        let rest = self.rest();
        if !finish.needed(&rest) {
            self.files.iter_mut().for_each(|(_, f)| f.trim());
            let errors = self.second_fixtures();
            return Change { events: self.events(changes), rest, errors };
        }
        // The trackers hold the files' merge; the finished one follows it.
        let (mut merged, unfinished, errors) = self.merge_tracked(finish, &mut changes);
        let mut events = self.events(changes);
        if let Some(unfinished) = unfinished {
            events.extend(merged.objects.events_since(&unfinished));
            self.finished = Some(merged.objects.clone());
        }
        Change { events, rest: merged.state, errors }
    }

    /// The whole input: every file's read merged in path order, finished by `finish`
    /// when it needs to be. Files whose Service backends and slice references were
    /// dropped are read again when `finish` comes to need them (their errors returned).
    pub fn merge(&mut self, finish: &impl Finish) -> (Merged, Vec<SourceError>) {
        let (merged, unfinished, errors) = self.merge_tracked(finish, &mut Changes::default());
        self.finished = unfinished.map(|_| merged.objects.clone());
        (merged, errors)
    }

    /// Makes every file's object that equals `held`'s of its identity `held`'s allocation
    /// (as [`Objects::share`] for each file, `held` indexed once).
    fn share_all(&mut self, held: &Objects) {
        fn share<T: PartialEq>(reads: &mut [Arc<T>], held: &HashMap<&NamespacedName, &Arc<T>>, id: impl Fn(&T) -> &NamespacedName) {
            for read in reads {
                if let Some(h) = held.get(id(read)).filter(|h| !Arc::ptr_eq(h, read) && **h == read) {
                    *read = Arc::clone(h);
                }
            }
        }
        let services: HashMap<&NamespacedName, &Arc<Service>> = held.services.iter().map(|s| (&s.id, s)).collect();
        let slices: HashMap<&NamespacedName, &Arc<EndpointSlice>> = held.slices.iter().map(|s| (&s.id, s)).collect();
        for (_, read) in &mut self.files {
            share(&mut read.objects.services, &services, |s| &s.id);
            share(&mut read.objects.slices, &slices, |s| &s.id);
        }
    }

    /// [`FileSet::merge`], the files read again recorded in `changes`; with the merge
    /// unfinished when it was finished.
    fn merge_tracked(&mut self, finish: &impl Finish, changes: &mut Changes) -> (Merged, Option<Objects>, Vec<SourceError>) {
        let mut errors = self.second_fixtures();
        let merged = self.merge_rest(false);
        if !finish.needed(&merged.state) {
            self.files.iter_mut().for_each(|(_, f)| f.trim());
            return (merged, None, errors);
        }
        let mut again = HashMap::new();
        for (path, read) in self.files.iter().filter(|(_, f)| f.trimmed) {
            let (mut read_again, failed) = read_one(path, None, &mut errors);
            if failed {
                read_again.keep_unread(read);
            }
            read_again.objects.share(&read.objects);
            again.insert(path.clone(), read_again);
        }
        if !again.is_empty() {
            let paths: Vec<PathBuf> = self.files.iter().map(|(p, _)| p.clone()).collect();
            self.replace(self.listing.clone(), &paths, again, changes);
        }
        let Merged { objects, mut state } = self.merge_rest(true);
        state.services = objects.services.iter().map(|s| (**s).clone()).collect();
        state.slices = objects.slices.iter().map(|s| (**s).clone()).collect();
        finish.finish(&mut state);
        let mut finished = Objects::take(&mut state);
        finished.share(&objects);
        (Merged { objects: finished, state }, Some(objects), errors)
    }

    /// A fixture document in more than one file: an error for each after the first (one
    /// read of every file refuses the second; the merge uses the first, as the read
    /// would have had it, and says so at every merge while the files hold both).
    fn second_fixtures(&self) -> Vec<SourceError> {
        let mut with = self.files.iter().filter(|(_, f)| f.rest.fixture.is_some()).map(|(p, _)| p);
        let Some(first) = with.next() else { return Vec::new() };
        with.map(|path| SourceError::Syntax {
            path: path.clone(),
            message: format!("a second {} document (only one is allowed; the one in {} is used)", crate::settings::fixture::FIXTURE_KIND, first.display()),
        })
        .collect()
    }

    /// The merge without finishing; with `full`, the Service backends, slice references
    /// and origins too (what finishing reads).
    fn merge_rest(&self, full: bool) -> Merged {
        // Who has the last copy of each object, and the duplicates across files (one file
        // has none: it has the last copy of everything it read).
        let single = self.files.len() <= 1;
        let mut owner: BTreeMap<(&'static str, &NamespacedName), (usize, u64)> = BTreeMap::new();
        let mut across: Vec<Vec<Duplicate>> = vec![Vec::new(); self.files.len()];
        for (i, (path, read)) in self.files.iter().enumerate().filter(|_| !single) {
            let firsts = read.first_lines();
            for (key, last) in read.keys() {
                if let Some((j, before)) = owner.insert(key, (i, last)) {
                    let again = firsts.get(&key).copied().unwrap_or(last);
                    let first = (self.files[j].0.clone(), before);
                    across[i].push(Duplicate { kind: key.0, id: key.1.clone(), first, again: (path.clone(), again) });
                }
            }
        }
        let owns = |i: usize, kind: &'static str, id: &NamespacedName| single || owner.get(&(kind, id)).is_some_and(|(o, _)| *o == i);
        let mut m = Merged::default();
        m.state.notes.extend(self.listing.clone());
        for (i, ((path, read), across)) in self.files.iter().zip(across).enumerate() {
            let rest = &read.rest;
            m.objects.services.extend(read.objects.services.iter().filter(|s| owns(i, "Service", &s.id)).cloned());
            m.objects.slices.extend(read.objects.slices.iter().filter(|s| owns(i, "EndpointSlice", &s.id)).cloned());
            if m.state.fixture.is_none() {
                m.state.fixture.clone_from(&rest.fixture);
            }
            let node_owned = |n: &&crate::model::Node| owns(i, "Node", &NamespacedName::new(String::new(), n.name.clone()));
            m.state.nodes.extend(rest.nodes.iter().filter(node_owned).cloned());
            let cidr_owned = |c: &&crate::model::ServiceCidr| owns(i, "ServiceCIDR", &c.id);
            m.state.service_cidrs.extend(rest.service_cidrs.iter().filter(cidr_owned).cloned());
            let extra = &mut m.state.extra;
            extra.pods.extend(rest.extra.pods.iter().filter(|p| owns(i, "Pod", &p.id)).cloned());
            extra.endpoints.extend(rest.extra.endpoints.iter().filter(|e| owns(i, "Endpoints", &e.id)).cloned());
            if full {
                extra.backends.extend(rest.extra.backends.iter().filter(|b| owns(i, "Service", &b.id)).cloned());
                extra.slice_refs.extend(rest.extra.slice_refs.iter().filter(|r| owns(i, "EndpointSlice", &r.slice)).cloned());
                let origins = read.keys().filter(|((kind, _), _)| *kind != "Node");
                extra.origins.extend(origins.map(|((kind, id), line)| ((kind.to_string(), id.clone()), (path.clone(), line))));
            }
            m.state.notes.extend(rest.notes.iter().cloned());
            m.state.notes.extend(across.iter().map(Duplicate::note));
            m.state.duplicates.extend(rest.duplicates.iter().cloned());
            m.state.duplicates.extend(across);
        }
        m
    }
}

/// A directory of input files for this module's tests, removed when dropped.
#[cfg(test)]
struct Dir(PathBuf);

#[cfg(test)]
impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("svcproxy-fileset-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn write(&self, file: &str, docs: &[String]) {
        std::fs::write(self.0.join(file), docs.concat()).unwrap();
    }
}

#[cfg(test)]
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
#[path = "fileset_reuse_tests.rs"]
mod reuse_tests;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::derive::Completion;
    use crate::source::file::read_path_lenient;

    fn svc(name: &str, ip: &str) -> String {
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{clusterIP: {ip}, selector: {{app: {name}}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n---\n")
    }

    fn slice(name: &str, service: &str, ip: &str) -> String {
        format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: ns, labels: {{kubernetes.io/service-name: {service}}}}}\naddressType: IPv4\nendpoints:\n- addresses: [{ip}]\nports: [{{name: http, port: 8080, protocol: TCP}}]\n---\n")
    }

    fn pod(name: &str, app: &str, ip: &str) -> String {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, labels: {{app: {app}}}}}\nspec: {{containers: [{{name: c, image: x}}]}}\nstatus: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: \"True\"}}]}}\n---\n")
    }

    const BAD: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: ns}\nspec: {clusterIP: 10.0.0.300, ports: [{port: 80}]}\n---\n";

    const DERIVE: Completion = Completion { force: false };

    /// What one read of every file gives, finished as the commands finish it.
    fn reference(dir: &Path) -> ClusterState {
        let (mut state, _) = read_path_lenient(dir);
        crate::derive::complete_with_notes(&mut state, false);
        state
    }

    fn sorted<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
        let mut v: Vec<String> = items.into_iter().map(|t| t.to_string()).collect();
        v.sort();
        v
    }

    /// The merge is what one read of every file gives: the same objects in the same order,
    /// the same notes and duplicates (a duplicate across files is noted at another place
    /// in the list).
    fn assert_same(merged: &Merged, dir: &Path, step: &str) {
        let want = reference(dir);
        let services: Vec<_> = merged.objects.services.iter().map(|s| (**s).clone()).collect();
        let slices: Vec<_> = merged.objects.slices.iter().map(|s| (**s).clone()).collect();
        assert_eq!(services, want.services, "{step}: services");
        assert_eq!(slices, want.slices, "{step}: slices");
        assert_eq!(merged.state.nodes, want.nodes, "{step}: nodes");
        assert_eq!(merged.state.extra.pods, want.extra.pods, "{step}: pods");
        assert_eq!(sorted(&merged.state.notes), sorted(&want.notes), "{step}: notes");
        let dups = |d: &[Duplicate]| sorted(d.iter().map(Duplicate::describe));
        assert_eq!(dups(&merged.state.duplicates), dups(&want.duplicates), "{step}: duplicates");
    }

    /// One step of the watch: the files listed now, `changed` read again, merged, and the
    /// merge's objects made the ones held.
    fn step(set: &mut FileSet, dir: &Path, changed: &[&str], held: &mut Objects) -> Merged {
        let (files, listing) = input_files(dir).unwrap();
        let changed: Vec<PathBuf> = changed.iter().map(|c| dir.join(c)).collect();
        set.update(listing, &files, set.read_files(&changed), held);
        let (mut merged, errors) = set.merge(&DERIVE);
        assert!(errors.is_empty(), "{errors:?}");
        merged.objects.events_since(held);
        *held = merged.objects.clone();
        merged
    }

    fn names(objects: &Objects) -> Vec<String> {
        objects.services.iter().map(|s| format!("{}={}", s.id, s.cluster_ips[0])).collect()
    }

    #[test]
    fn a_fixture_document_in_a_second_file_is_an_error_and_the_first_is_used() {
        let dir = Dir::new("fixtures");
        let d = &dir.0;
        let fixture = |ip: &str| format!("apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  interfaceAddresses:\n    eth0:\n    - {ip}/24\n---\n");
        dir.write("a.yaml", &[fixture("192.168.0.2"), svc("s1", "10.0.0.1")]);
        dir.write("b.yaml", &[svc("s2", "10.0.0.2")]);
        let (mut set, errors) = FileSet::read(d);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(set.merge(&DERIVE).1.is_empty());
        dir.write("b.yaml", &[fixture("192.168.9.9"), svc("s2", "10.0.0.2")]);
        let (files, listing) = input_files(d).unwrap();
        let held = Objects::default();
        set.update(listing, &files, set.read_files(&[d.join("b.yaml")]), &held);
        let (merged, errors) = set.merge(&DERIVE);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 1, "{text:?}");
        assert!(text[0].starts_with(&format!("{}: a second SvcproxyFixture document", d.join("b.yaml").display())), "{text:?}");
        assert!(text[0].contains("a.yaml is used"), "{text:?}");
        let used = format!("{:?}", merged.state.fixture);
        assert!(used.contains("192.168.0.2") && !used.contains("192.168.9.9"), "{used}");
        assert_eq!(names(&merged.objects), ["ns/s1=10.0.0.1", "ns/s2=10.0.0.2"]);
    }

    #[test]
    fn kept_reads_merge_as_one_read_of_every_file_across_moves_duplicates_and_deletions() {
        let dir = Dir::new("merge");
        let d = dir.0.as_path();
        dir.write("a.yaml", &[svc("s1", "10.0.0.1"), slice("s1-x", "s1", "10.1.0.1")]);
        dir.write("b.yaml", &[svc("s2", "10.0.0.2"), slice("s2-x", "s2", "10.1.0.2")]);
        dir.write("c.yaml", &[svc("s3", "10.0.0.3")]);
        let (mut set, errors) = FileSet::read(d);
        assert!(errors.is_empty());
        let (mut first, _) = set.merge(&DERIVE);
        assert_same(&first, d, "start");
        let mut held = std::mem::take(&mut first.objects);

        // s1 and its slice move from a to b.
        dir.write("a.yaml", &["# empty\n".to_string()]);
        dir.write("b.yaml", &[svc("s2", "10.0.0.2"), slice("s2-x", "s2", "10.1.0.2"), svc("s1", "10.0.0.1"), slice("s1-x", "s1", "10.1.0.1")]);
        let m = step(&mut set, d, &["a.yaml", "b.yaml"], &mut held);
        assert_same(&m, d, "moved");
        assert_eq!(names(&m.objects), ["ns/s2=10.0.0.2", "ns/s1=10.0.0.1", "ns/s3=10.0.0.3"]);

        // c reads s2 again (another IP): a duplicate across files, the later copy used.
        dir.write("c.yaml", &[svc("s3", "10.0.0.3"), svc("s2", "10.0.0.22")]);
        let m = step(&mut set, d, &["c.yaml"], &mut held);
        assert_same(&m, d, "duplicate across files");
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.1", "ns/s3=10.0.0.3", "ns/s2=10.0.0.22"]);
        assert_eq!(m.state.duplicates.len(), 1);
        assert!(m.state.duplicates[0].describe().contains("b.yaml:1, again at"), "{}", m.state.duplicates[0].describe());

        // The earlier copy's file changes; the later copy still wins.
        dir.write("b.yaml", &[svc("s2", "10.0.0.29"), slice("s2-x", "s2", "10.1.0.2"), svc("s1", "10.0.0.1"), slice("s1-x", "s1", "10.1.0.1")]);
        let m = step(&mut set, d, &["b.yaml"], &mut held);
        assert_same(&m, d, "earlier copy changed");
        assert!(names(&m.objects).contains(&"ns/s2=10.0.0.22".to_string()));

        // The duplicate goes: b's copy is used again.
        dir.write("c.yaml", &[svc("s3", "10.0.0.3")]);
        let m = step(&mut set, d, &["c.yaml"], &mut held);
        assert_same(&m, d, "duplicate gone");
        assert!(m.state.duplicates.is_empty());
        assert!(names(&m.objects).contains(&"ns/s2=10.0.0.29".to_string()));

        // b is deleted: its objects go.
        std::fs::remove_file(d.join("b.yaml")).unwrap();
        let m = step(&mut set, d, &[], &mut held);
        assert_same(&m, d, "file deleted");
        assert_eq!(names(&m.objects), ["ns/s3=10.0.0.3"]);
        assert!(m.objects.slices.is_empty());
        assert!(m.state.notes[0].text.starts_with("read 2 file(s)"), "{:?}", m.state.notes);

        // One file left (no duplicates across files to look for), s1 back in it.
        std::fs::remove_file(d.join("c.yaml")).unwrap();
        dir.write("a.yaml", &[svc("s1", "10.0.0.1"), slice("s1-x", "s1", "10.1.0.1"), svc("s1", "10.0.0.11")]);
        let m = step(&mut set, d, &["a.yaml"], &mut held);
        assert_same(&m, d, "one file");
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.11"]);
        assert_eq!(m.state.duplicates.len(), 1, "within the file");
    }

    #[test]
    fn deleting_the_file_with_the_later_copy_brings_the_earlier_back_and_a_move_over_two_polls_deletes_then_applies() {
        let dir = Dir::new("later");
        let d = dir.0.as_path();
        dir.write("a.yaml", &[svc("s1", "10.0.0.1")]);
        dir.write("b.yaml", &[svc("s1", "10.0.0.2"), svc("s2", "10.0.0.3")]);
        let (mut set, _) = FileSet::read(d);
        let (first, _) = set.merge(&DERIVE);
        assert_same(&first, d, "start");
        assert_eq!(names(&first.objects), ["ns/s1=10.0.0.2", "ns/s2=10.0.0.3"]);
        let mut held = first.objects;

        std::fs::remove_file(d.join("b.yaml")).unwrap();
        let (files, listing) = input_files(d).unwrap();
        set.update(listing, &files, Reads::default(), &held);
        let (mut m, _) = set.merge(&DERIVE);
        assert_same(&m, d, "later copy's file deleted");
        let events: Vec<String> = m
            .objects
            .events_since(&held)
            .iter()
            .map(|e| match e {
                crate::track::Event::ServiceApplied(s) => format!("apply {}={}", s.id, s.cluster_ips[0]),
                crate::track::Event::ServiceDeleted(id) => format!("delete {id}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(events, ["delete ns/s2", "apply ns/s1=10.0.0.1"], "the earlier copy of s1 is used again");
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.1"]);
        assert!(m.state.duplicates.is_empty());
        held = m.objects;

        // s1 moves to c, a first (gone), c later (back).
        dir.write("a.yaml", &["# moved\n".to_string()]);
        let m = step(&mut set, d, &["a.yaml"], &mut held);
        assert!(m.objects.services.is_empty());
        dir.write("c.yaml", &[svc("s1", "10.0.0.1")]);
        let m = step(&mut set, d, &["c.yaml"], &mut held);
        assert_same(&m, d, "moved over two polls");
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.1"]);
    }

    #[test]
    fn a_file_that_no_longer_reads_keeps_its_objects_and_the_others_are_untouched() {
        let dir = Dir::new("malformed");
        let d = dir.0.as_path();
        dir.write("a.yaml", &[svc("s1", "10.0.0.1"), svc("s2", "10.0.0.2")]);
        dir.write("b.yaml", &[svc("s3", "10.0.0.3")]);
        let (mut set, _) = FileSet::read(d);
        let mut held = set.merge(&DERIVE).0.objects;

        // A bad object in a, and s2 gone from it: skipped and counted, s2 kept.
        dir.write("a.yaml", &[svc("s1", "10.0.0.11"), BAD.to_string()]);
        let (files, listing) = input_files(d).unwrap();
        let reads = set.read_files(&[d.join("a.yaml")]);
        assert_eq!(reads.errors.len(), 1, "{:?}", reads.errors);
        set.update(listing, &files, reads, &held);
        let (mut m, _) = set.merge(&DERIVE);
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.11", "ns/s2=10.0.0.2", "ns/s3=10.0.0.3"]);
        let events = m.objects.events_since(&held);
        assert_eq!(events.len(), 1, "only s1 changed: {events:?}");
        held = m.objects;

        // A file that does not parse at all: everything of it kept.
        dir.write("a.yaml", &["apiVersion: v1\nkind: Service\nmetadata: [\n".to_string()]);
        let (files, listing) = input_files(d).unwrap();
        let reads = set.read_files(&[d.join("a.yaml")]);
        assert_eq!(reads.errors.len(), 1);
        set.update(listing, &files, reads, &held);
        let (mut m, _) = set.merge(&DERIVE);
        assert!(m.objects.events_since(&held).is_empty(), "nothing deleted");
        held = m.objects;

        // Read whole again: what it no longer holds goes.
        dir.write("a.yaml", &[svc("s1", "10.0.0.11")]);
        let m = step(&mut set, d, &["a.yaml"], &mut held);
        assert_same(&m, d, "read whole again");
    }

    #[test]
    fn an_unchanged_file_is_not_read_again_and_its_objects_stay_the_ones_held() {
        let dir = Dir::new("unchanged");
        let d = dir.0.as_path();
        dir.write("a.yaml", &[svc("s1", "10.0.0.1")]);
        dir.write("b.yaml", &[svc("s2", "10.0.0.2"), slice("s2-x", "s2", "10.1.0.2")]);
        let (mut set, _) = FileSet::read(d);
        let mut held = set.merge(&DERIVE).0.objects;
        let before = held.clone();
        // b changes on disk, but only a is said to have changed: b's kept read is used.
        dir.write("b.yaml", &[svc("s2", "10.0.0.99")]);
        dir.write("a.yaml", &[svc("s1", "10.0.0.1"), svc("s4", "10.0.0.4")]);
        let m = step(&mut set, d, &["a.yaml"], &mut held);
        assert_eq!(names(&m.objects), ["ns/s1=10.0.0.1", "ns/s4=10.0.0.4", "ns/s2=10.0.0.2"]);
        assert!(Arc::ptr_eq(&m.objects.services[0], &before.services[0]), "a's unchanged s1: the allocation held");
        assert!(Arc::ptr_eq(&m.objects.services[2], &before.services[1]), "b, not read: the allocation held");
        assert!(Arc::ptr_eq(&m.objects.slices[0], &before.slices[0]));
    }

    #[test]
    fn slices_are_derived_across_files_and_again_when_pods_appear_later() {
        let dir = Dir::new("derive");
        let d = dir.0.as_path();
        dir.write("a.yaml", &[svc("web", "10.0.0.1"), svc("api", "10.0.0.2"), slice("api-x", "api", "10.1.0.9")]);
        dir.write("b.yaml", &["# no pods yet\n".to_string()]);
        let (mut set, _) = FileSet::read(d);
        let (first, _) = set.merge(&DERIVE);
        assert_same(&first, d, "no pods");
        assert!(set.files.iter().all(|(_, f)| f.trimmed), "nothing to derive: backends and slice references dropped");
        let mut held = first.objects;

        // Pods appear in b: web's slices are derived from them (a is read again for its
        // Service's selector); api has a slice of its own and keeps it.
        dir.write("b.yaml", &[pod("web-1", "web", "10.244.0.5"), pod("api-1", "api", "10.244.0.6")]);
        let m = step(&mut set, d, &["b.yaml"], &mut held);
        assert_same(&m, d, "pods appear");
        let web: Vec<_> = m.objects.slices.iter().filter(|s| s.service.name == "web").collect();
        assert_eq!(web.len(), 1, "{:?}", m.objects.slices);
        assert!(m.state.notes.iter().any(|n| n.text.contains("derived from Pods")), "{:?}", m.state.notes);

        // A Pod changes: derived again.
        dir.write("b.yaml", &[pod("web-1", "web", "10.244.0.7"), pod("api-1", "api", "10.244.0.6")]);
        let m = step(&mut set, d, &["b.yaml"], &mut held);
        assert_same(&m, d, "pod changed");

        // The Pods go: nothing derived, the files trimmed again.
        dir.write("b.yaml", &["# no pods\n".to_string()]);
        let m = step(&mut set, d, &["b.yaml"], &mut held);
        assert_same(&m, d, "pods gone");
        assert!(set.files.iter().all(|(_, f)| f.trimmed));
    }
}

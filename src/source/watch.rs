//! `--watch --from PATH`: follow files. The path (a file or a directory) is polled; when
//! a file's size, modification time or inode changes, and then holds still for one poll,
//! that file (only it) is read again; the other files keep their last read
//! ([`super::fileset`]). The difference between the merge of all files and the previous
//! one becomes events: objects gone are deleted, objects new or changed are applied,
//! unchanged ones give no event. An object that cannot be read is skipped and reported;
//! the rest of the file is used. The reader's notes are passed on when they change.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::{self, error::SendError};

use super::error::SourceError;
use super::file::{ClusterState, Note};
use super::fileset::{Change, FileSet, Finish, Merged};
use super::objects::Objects;
use crate::track::Event;

/// What a source tells the runner.
#[derive(Debug)]
pub enum SourceMsg {
    Events(Vec<Event>),
    /// Everything has been listed once: syncing may start.
    Ready,
    /// Objects that were skipped, with why.
    Malformed(Vec<String>),
    /// What the file reader says about the input (what was read or skipped, duplicates,
    /// derived slices, …), as one-shot commands print it: sent at start and whenever it
    /// differs from what was sent last, never on a poll that changes nothing.
    Notes(Vec<String>),
    /// The cluster's ServiceCIDRs changed: the whole list, as kube-proxy's handler gets it.
    ServiceCidrs(Vec<crate::net::Cidr>),
    /// This node changed (labels, addresses) or is being deleted.
    Node { node: Option<crate::model::Node>, deleting: bool },
}

type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>, u64)>;

/// Size, modification time and inode (a file replaced by a rename) of every file a read of `path` takes (a directory: the
/// same tree the reader walks, subdirectories included), so a change anywhere in it is
/// seen. A tree that cannot be listed fingerprints as empty; the read then says why.
fn fingerprint(path: &Path) -> Fingerprint {
    let mut files: Vec<PathBuf> = super::file::input_files(path).map(|(files, _)| files).unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let inode = meta.as_ref().map_or(0, std::os::unix::fs::MetadataExt::ino);
            let modified = meta.and_then(|m| m.modified().ok());
            (f, len, modified, inode)
        })
        .collect()
}

/// What the file watch starts from: every file's read, the objects of their merge (their
/// events were applied by the caller, whose trackers hold the same `Arc`s) and its notes.
#[derive(Debug, Default)]
pub struct Start {
    pub files: FileSet,
    pub objects: Objects,
    pub notes: Vec<Note>,
    /// The ServiceCIDRs of the start's read (the engine was loaded with them).
    pub service_cidrs: Vec<crate::net::Cidr>,
}

impl Start {
    /// Reads `path` as the watch reads it (each file on its own, then merged and finished
    /// by `finish`): the start, the rest of the merge (everything but the Services and
    /// EndpointSlices, which are `objects`) and what did not read.
    pub fn read(path: &Path, finish: &impl Finish) -> (Start, ClusterState, Vec<SourceError>) {
        let (mut files, mut errors) = FileSet::read(path);
        let (Merged { objects, state }, more) = files.merge(finish);
        errors.extend(more);
        let service_cidrs = crate::model::service_cidrs(&state.service_cidrs);
        (Start { files, objects, notes: state.notes.clone(), service_cidrs }, state, errors)
    }
}

/// Polls `path` every `interval` until the receiver goes away. `initial` is the state
/// already loaded (its events were applied by the caller). A change re-reads only the
/// files that changed; the others keep their last read ([`FileSet`]), and the changed
/// files' objects (and those whose copy in use moved to another file) become the events
/// ([`FileSet::apply`]; a whole merge and diff when `finish` must derive slices). An object
/// that did not change is kept as the allocation the trackers already hold, so the state is
/// held once.
///
/// A changed file is read once it has stayed the same for one interval and is not empty,
/// and the read is kept only if no file changed while it was read: a file being written
/// in place (`kubectl get … > dump.yaml` truncates it first) is never taken for an empty
/// cluster. A file that no longer reads whole keeps the objects it lacks; one that is gone
/// takes its objects with it.
pub async fn watch_files(path: PathBuf, interval: Duration, initial: Start, finish: impl Finish, tx: mpsc::Sender<SourceMsg>) {
    // Only the receiver going away ends it.
    let _ = poll_files(path, interval, initial, finish, tx).await;
}

async fn poll_files(path: PathBuf, interval: Duration, initial: Start, finish: impl Finish, tx: mpsc::Sender<SourceMsg>) -> Result<(), SendError<SourceMsg>> {
    // The trackers hold the start's objects; the file set knows them from here on. Dropped
    // here: an unbound field would live as long as this loop, and every first copy with it.
    let Start { mut files, objects, notes: initial_notes, service_cidrs: mut cidrs } = initial;
    drop(objects);
    let mut read_at = fingerprint(&path);
    let mut previous_poll = read_at.clone();
    let mut notes = Vec::new();
    if let Some(new) = changed_notes(&mut notes, &initial_notes) {
        tx.send(SourceMsg::Notes(new)).await?;
    }
    tx.send(SourceMsg::Ready).await?;
    loop {
        tokio::time::sleep(interval).await;
        let now = fingerprint(&path);
        // An empty file is one being rewritten (truncated, not yet written), however long
        // the writer takes: it is never read as a cluster with nothing in it. (To empty a
        // cluster on purpose, write a comment or `---`.)
        let written = now.iter().all(|(_, len, _, _)| *len > 0);
        let settled = written && (now == previous_poll || renamed_over(&read_at, &now));
        previous_poll = now.clone();
        if now == read_at || !settled {
            continue;
        }
        let clock = std::time::Instant::now();
        let listed = super::file::input_files(&path);
        let changed: Vec<PathBuf> = now.iter().filter(|f| !read_at.contains(f)).map(|(p, ..)| p.clone()).collect();
        let mut reads = files.read_files(&changed);
        if fingerprint(&path) != now {
            continue;
        }
        read_at = now;
        let read = clock.elapsed();
        let mut errors = std::mem::take(&mut reads.errors);
        // A path that cannot be listed changes nothing (it says why); every file is read
        // again once it can be.
        let names: Vec<PathBuf> = read_at.iter().map(|(p, ..)| p.clone()).collect();
        let change = match listed {
            Ok((_, listing)) => files.apply(Some((listing, &names)), reads, &finish),
            Err(e) => {
                errors.push(e);
                read_at = Vec::new();
                files.apply(None, reads, &finish)
            }
        };
        let merged = clock.elapsed();
        let Change { events, rest, errors: more } = change;
        errors.extend(more);
        if let Some(new) = changed_notes(&mut notes, &rest.notes) {
            tx.send(SourceMsg::Notes(new)).await?;
        }
        let now_cidrs = crate::model::service_cidrs(&rest.service_cidrs);
        drop(rest);
        if now_cidrs != cidrs {
            cidrs.clone_from(&now_cidrs);
            tx.send(SourceMsg::ServiceCidrs(now_cidrs)).await?;
        }
        if !errors.is_empty() {
            tx.send(SourceMsg::Malformed(errors.iter().map(SourceError::to_string).collect())).await?;
        }
        let (files_read, seconds) = (changed.len(), clock.elapsed().as_secs_f64());
        let (read_seconds, merge_seconds) = (read.as_secs_f64(), (merged - read).as_secs_f64());
        tracing::info!(files_read, read_seconds, merge_seconds, seconds, events = events.len(), "files re-read");
        tx.send(SourceMsg::Events(events)).await?;
    }
}

/// Whether every file that changed since `read_at` was there when it was read and has
/// been replaced by a rename since (another inode): such a file was written whole before
/// it took the name, so it need not hold still for a poll first.
fn renamed_over(read_at: &Fingerprint, now: &Fingerprint) -> bool {
    let before: std::collections::BTreeMap<&PathBuf, u64> = read_at.iter().map(|(p, _, _, inode)| (p, *inode)).collect();
    let mut changed = now.iter().filter(|f| !read_at.contains(f)).peekable();
    changed.peek().is_some() && changed.all(|(p, _, _, inode)| before.get(p).is_some_and(|old| old != inode))
}

/// `notes` as text when they differ from `last` (which becomes them) and are not
/// empty; `None` when there is nothing new to say.
fn changed_notes(last: &mut Vec<String>, notes: &[Note]) -> Option<Vec<String>> {
    let now: Vec<String> = notes.iter().map(ToString::to_string).collect();
    if now == *last {
        return None;
    }
    *last = now;
    (!last.is_empty()).then(|| last.clone())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_change_in_a_subdirectory_changes_the_fingerprint() {
        let dir = std::env::temp_dir().join(format!("svcproxy-fp-{}", std::process::id()));
        let sub = dir.join("ns1");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(dir.join("top.yaml"), "---\n").unwrap();
        let before = super::fingerprint(&dir);
        assert_eq!(before.len(), 1);
        std::fs::write(sub.join("services.json"), "{}").unwrap();
        let after = super::fingerprint(&dir);
        assert_eq!(after.len(), 2, "a new file in a subdirectory is part of the tree: {after:?}");
        std::fs::write(sub.join("services.json"), "{\"kind\": \"List\"}").unwrap();
        assert_ne!(super::fingerprint(&dir), after, "an edit in a subdirectory is seen");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use std::path::PathBuf;

    use super::*;
    use crate::source::Note;

    fn with_notes(texts: &[&str]) -> Vec<Note> {
        texts.iter().map(|t| Note { path: PathBuf::from("c.yaml"), line: 3, text: t.to_string() }).collect()
    }

    #[test]
    fn only_files_replaced_by_a_rename_skip_holding_still() {
        let f = |name: &str, len: u64, inode: u64| (PathBuf::from(name), len, None, inode);
        let read_at = vec![f("a.yaml", 10, 1), f("b.yaml", 10, 2)];
        assert!(renamed_over(&read_at, &vec![f("a.yaml", 12, 7), f("b.yaml", 10, 2)]), "a renamed over");
        assert!(!renamed_over(&read_at, &vec![f("a.yaml", 12, 1), f("b.yaml", 10, 2)]), "a written in place");
        assert!(!renamed_over(&read_at, &vec![f("a.yaml", 10, 1), f("b.yaml", 10, 2), f("c.yaml", 5, 9)]), "c is new");
        assert!(!renamed_over(&read_at, &vec![f("a.yaml", 12, 7), f("b.yaml", 11, 2)]), "b written in place");
        assert!(!renamed_over(&read_at, &read_at), "nothing changed");
    }

    #[test]
    fn notes_are_passed_on_when_they_change_and_not_when_they_go() {
        let mut last = Vec::new();
        assert_eq!(changed_notes(&mut last, &with_notes(&[])), None, "nothing to say");
        assert_eq!(changed_notes(&mut last, &with_notes(&["a"])), Some(vec!["c.yaml:3: a".to_string()]));
        assert_eq!(changed_notes(&mut last, &with_notes(&["a"])), None, "the same notes again");
        assert_eq!(changed_notes(&mut last, &with_notes(&["a", "b"])).map(|n| n.len()), Some(2));
        assert_eq!(changed_notes(&mut last, &with_notes(&[])), None, "gone: nothing to log");
        assert_eq!(changed_notes(&mut last, &with_notes(&["a"])).map(|n| n.len()), Some(1), "back: said again");
    }
}

//! The invariant of reading a file again with its last read ([`super::reuse`]): for any
//! old and new text, the read of the new text that takes documents from the old read is
//! a fresh read of the new text (objects, the lines they were read on, notes, duplicates,
//! errors, the index for the next read), trimmed as a kept read is.

use std::sync::Arc;

use super::*;

/// A file in a directory of its own, removed when dropped.
struct File(PathBuf);

impl File {
    fn new(name: &str) -> File {
        let dir = std::env::temp_dir().join(format!("svcproxy-reuse-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        File(dir.join("c.yaml"))
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.0.parent().map(std::fs::remove_dir_all);
    }
}

/// Everything of a kept read that the merge or the next read uses.
fn describe(read: &FileRead) -> String {
    let FileRead { objects, service_lines, slice_lines, rest, trimmed, docs } = read;
    format!("{objects:#?}\n{service_lines:?}\n{slice_lines:?}\n{rest:#?}\n{trimmed}\n{:#?}", docs.describe())
}

fn texts(errors: &[SourceError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// Reads `file` fresh and with `last`; asserts they are the same; returns the read with
/// reuse (trimmed, as the merge leaves a read nothing needs whole) and how many of its
/// objects are `last`'s very allocations.
fn check(file: &File, last: &FileRead, step: &str) -> (FileRead, usize) {
    let (mut fresh_errors, mut reuse_errors) = (Vec::new(), Vec::new());
    let (mut fresh, fresh_failed) = read_one(&file.0, None, &mut fresh_errors);
    let (mut again, again_failed) = read_one(&file.0, Some(last), &mut reuse_errors);
    fresh.trim();
    again.trim();
    assert_eq!(texts(&reuse_errors), texts(&fresh_errors), "{step}: errors");
    assert_eq!(again_failed, fresh_failed, "{step}");
    let (want, got) = (describe(&fresh), describe(&again));
    if want != got {
        let diff = similar::TextDiff::from_lines(&want, &got).unified_diff().header("fresh", "with reuse").to_string();
        panic!("{step}: the read with reuse differs from a fresh read:\n{diff}");
    }
    let taken = shared(&again.objects.services, &last.objects.services) + shared(&again.objects.slices, &last.objects.slices);
    (again, taken)
}

/// How many of `new` are allocations of `old`.
fn shared<T>(new: &[Arc<T>], old: &[Arc<T>]) -> usize {
    new.iter().filter(|n| old.iter().any(|o| Arc::ptr_eq(n, o))).count()
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// The documents of a YAML text (split at `---` lines), each ending with a line end.
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    docs.retain(|d| !d.trim().is_empty());
    docs
}

/// Documents to build files from: generated clusters' and those of every YAML file of
/// fixtures/, picked as often.
struct Pool {
    generated: Vec<String>,
    fixtures: Vec<String>,
}

impl Pool {
    /// A document in a namespace of its own (an object read twice is a duplicate, which
    /// the edits make on purpose).
    fn pick(&self, rng: &mut Rng) -> String {
        let from = if rng.below(2) == 0 { &self.generated } else { &self.fixtures };
        let unique = format!("namespace: u{}-", rng.below(1 << 30));
        from[rng.below(from.len())].replace("namespace: ", &unique)
    }
}

fn pool() -> Pool {
    let mut generated = Vec::new();
    for seed in 1..3 {
        generated.extend(documents(&crate::gen::yaml(&crate::gen::GenSpec { services: 30, endpoints: 3, seed })));
    }
    let mut pool = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() > 50, "only {} fixture files", files.len());
    for f in files {
        pool.extend(documents(&std::fs::read_to_string(f).unwrap()));
    }
    Pool { generated, fixtures: pool }
}

/// One random edit of `docs`: a document edited, inserted, deleted, moved, duplicated,
/// made malformed, or shifted by lines above it.
fn edit(rng: &mut Rng, docs: &mut Vec<String>, pool: &Pool) -> &'static str {
    let n = docs.len();
    let i = rng.below(n);
    match rng.below(15) {
        0..=2 if n > 0 => {
            // A digit changed (an IP, a port, a name: valid or not), or a name lengthened.
            let d = &mut docs[i];
            let digits: Vec<usize> = d.bytes().enumerate().filter(|(_, b)| b.is_ascii_digit()).map(|(j, _)| j).collect();
            if digits.is_empty() || rng.below(4) == 0 {
                *d = d.replacen("name: ", "name: x", 1);
            } else {
                let at = digits[rng.below(digits.len())];
                let digit = char::from(b'0' + rng.below(10) as u8);
                d.replace_range(at..at + 1, &digit.to_string());
            }
            "edited"
        }
        3 | 4 => {
            docs.insert(rng.below(n + 1), pool.pick(rng));
            "inserted"
        }
        5..=7 if n > 0 => {
            docs.remove(i);
            "deleted"
        }
        8 | 9 if n > 0 => {
            let d = docs.remove(i);
            docs.insert(rng.below(n), d);
            "moved"
        }
        10 if n > 0 => {
            docs.insert(rng.below(n + 1), docs[i].clone());
            "duplicated"
        }
        11 if n > 0 => {
            let bad = ["metadata: [\n", "\tx: 1\n", "  deeper: 1\n", "kind: Service\n", "x: 1\r\n", "--- a\n", "a: |\n  b\n"];
            let d = &mut docs[i];
            let lines: Vec<usize> = d.match_indices('\n').map(|(j, _)| j + 1).collect();
            let at = lines[rng.below(lines.len())];
            d.insert_str(at, bad[rng.below(bad.len())]);
            "made malformed"
        }
        12 | 13 if n > 0 => {
            let lines = ["# a comment\n", "\n", "   \n"];
            docs[i].insert_str(0, lines[rng.below(lines.len())]);
            "shifted"
        }
        _ => {
            docs.reverse();
            "reversed"
        }
    }
}

fn join(rng: &mut Rng, docs: &[String]) -> String {
    let mut text = String::new();
    if rng.below(3) == 0 {
        text.push_str("---\n");
    }
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            text.push_str(if rng.below(8) == 0 { "---   \n" } else { "---\n" });
        }
        text.push_str(d);
    }
    text
}

#[test]
fn a_read_with_reuse_is_a_fresh_read_of_the_new_text_across_random_edits() {
    let pool = pool();
    let file = File::new("random");
    let mut rng = Rng(0x0d0c_5eed);
    let (mut taken, mut objects) = (0, 0);
    for sequence in 0..14 {
        let mut docs: Vec<String> = (0..5 + rng.below(25)).map(|_| pool.pick(&mut rng)).collect();
        file.write(&join(&mut rng, &docs));
        let (mut last, _) = read_one(&file.0, None, &mut Vec::new());
        last.trim();
        for step in 0..15 {
            let mut what = Vec::new();
            for _ in 0..1 + rng.below(3) {
                what.push(edit(&mut rng, &mut docs, &pool));
            }
            let text = join(&mut rng, &docs);
            file.write(&text);
            let (next, n) = check(&file, &last, &format!("sequence {sequence} step {step} ({})", what.join(", ")));
            taken += n;
            objects += next.objects.services.len() + next.objects.slices.len();
            last = next;
        }
    }
    // Many objects are taken again (an edit changes a few documents; a duplicate or a
    // document serde-saphyr must read stops it): the comparison above is about reads that
    // did reuse.
    assert!(taken * 3 > objects, "only {taken} of {objects} objects taken from the last read");
}

#[test]
fn one_changed_document_of_a_generated_cluster_is_the_only_one_read_and_lines_move_with_the_text() {
    let file = File::new("generated");
    let text = crate::gen::yaml(&crate::gen::GenSpec { services: 200, endpoints: 4, seed: 7 });
    file.write(&text);
    let (mut last, failed) = read_one(&file.0, None, &mut Vec::new());
    assert!(!failed);
    last.trim();
    assert_eq!((last.objects.services.len(), last.objects.slices.len()), (200, 200));
    assert_eq!(last.docs.len(), 400, "every Service and EndpointSlice document is indexed");
    // A key, an entry and the table's slack: under 100 bytes a document (about 2 MB at
    // 10,000 services and their slices), no object held.
    assert!(last.docs.bytes() < 100 * 400, "{} bytes", last.docs.bytes());

    // One slice's endpoint changes: every other object is the last read's allocation.
    let changed = text.replacen("ready: true", "ready: false", 1);
    assert_ne!(changed, text);
    file.write(&changed);
    let (next, taken) = check(&file, &last, "one endpoint changed");
    assert_eq!(taken, 399);
    last = next;

    // Three lines above everything: the same objects, every line three further down.
    file.write(&format!("# one\n# two\n\n{changed}"));
    let (next, taken) = check(&file, &last, "moved down");
    assert_eq!(taken, 400);
    let moved: Vec<u64> = last.service_lines.iter().map(|l| l + 3).collect();
    assert_eq!(next.service_lines, moved);
}

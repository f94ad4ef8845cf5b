//! The import layering that docs/architecture.md declares, checked against the code.
//!
//! The "Layers" section of the page lists each top-level module of `src/` with the
//! modules it imports, and rules of the form `a::b -/-> c::d, e` (code in `a::b` imports
//! nothing under `c::d` or `e`). The scan reads every product source file (test files,
//! inline test modules and modules compiled only for tests or tooling, `#[cfg(test)]` or
//! `#[cfg(any(test, feature = …))]`, are left out), with comments and string literals
//! blanked, and resolves each `crate::…`, `super::…` and `self::…` path, groups
//! (`crate::{a, b::c}`) included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One product source file: its module path (`ipvs::plan::incremental`) and its code.
pub struct Source {
    pub file: String,
    pub module: Vec<String>,
    pub code: String,
}

/// The code of a Rust file with comments, string and char literals blanked to spaces
/// (newlines kept), so that a path in them is not an import.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r' && (next == Some(b'"') || next == Some(b'#')) && !ident_byte(b.get(i.wrapping_sub(1)).copied()) {
            // A raw string r"…" or r#"…"#.
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut end = j + 1;
            while end < b.len() && !(b[end] == b'"' && b[end + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes) {
                end += 1;
            }
            let stop = (end + 1 + hashes).min(b.len());
            for &x in &b[i..stop] {
                blank(&mut out, x);
            }
            i = stop;
        } else if c == b'"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let step = if b[i] == b'\\' { 2 } else { 1 };
                for &x in &b[i..(i + step).min(b.len())] {
                    blank(&mut out, x);
                }
                i += step;
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former is blanked.
            let close = if next == Some(b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                // A multi-byte char: find the quote within 5 bytes.
                b[i + 1..(i + 6).min(b.len())].iter().position(|&x| x == b'\'').map(|p| i + 1 + p).filter(|&e| e > i + 1 && !b[i + 1].is_ascii())
            };
            match close {
                Some(end) => {
                    for &x in &b[i..=end] {
                        blank(&mut out, x);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ident_byte(c: Option<u8>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Whether an attribute line makes the next item test- or tooling-only.
fn test_only_attr(line: &str) -> bool {
    let l: String = line.split_whitespace().collect();
    l == "#[cfg(test)]" || (l.starts_with("#[cfg(any(test,feature=") && l.ends_with(")]"))
}

/// `code` with every test- or tooling-only inline module removed, and the names of the
/// test- or tooling-only modules it declares in their own files.
fn product_code(code: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = String::new();
    let mut skipped_files = Vec::new();
    let mut n = 0;
    while n < lines.len() {
        let line = lines[n];
        let next = lines.get(n + 1).map(|l| l.trim()).unwrap_or("");
        let next = next.strip_prefix("pub ").unwrap_or(next);
        if test_only_attr(line) && next.starts_with("mod ") {
            let name = next["mod ".len()..].trim_end_matches(['{', ';', ' ']).trim().to_string();
            if next.ends_with(';') {
                skipped_files.push(name);
                n += 2;
                continue;
            }
            // Skip to the line that closes the module's brace.
            let mut depth = 0i32;
            let mut m = n + 1;
            while m < lines.len() {
                depth += lines[m].matches('{').count() as i32 - lines[m].matches('}').count() as i32;
                m += 1;
                if depth <= 0 {
                    break;
                }
            }
            n = m;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        n += 1;
    }
    (out, skipped_files)
}

/// Every product source file under `src/`, with its module path.
pub fn product_sources(root: &Path) -> Vec<Source> {
    let src = root.join("src");
    let mut out = Vec::new();
    walk(&src, &src, &mut out, &BTreeSet::new());
    out
}

fn walk(src: &Path, dir: &Path, out: &mut Vec<Source>, excluded: &BTreeSet<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).expect("read src").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    let mut excluded = excluded.clone();
    // Read the files first: a file may exclude a sibling (`mod x;`) or a folder.
    let mut files = Vec::new();
    for p in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "rs")) {
        let rel = p.strip_prefix(src).expect("under src").to_string_lossy().replace('\\', "/");
        if rel.starts_with("bin/") || rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let (code, test_mods) = product_code(&code_only(&std::fs::read_to_string(p).expect("read a source file")));
        // `a/mod.rs` or `a.rs` declares children in `a/`; `lib.rs` in `src/`.
        let stem = p.file_stem().expect("a name").to_string_lossy().to_string();
        let child_dir = if stem == "mod" || stem == "lib" { dir.to_path_buf() } else { dir.join(&stem) };
        for m in test_mods {
            excluded.insert(child_dir.join(format!("{m}.rs")));
            excluded.insert(child_dir.join(&m));
        }
        files.push((p.clone(), rel, code));
    }
    for (p, rel, code) in files {
        if excluded.contains(&p) || rel == "main.rs" {
            continue;
        }
        out.push(Source { file: format!("src/{rel}"), module: module_path(&rel), code });
    }
    for p in entries.iter().filter(|p| p.is_dir()) {
        if !excluded.contains(p) && !p.ends_with("bin") && !p.ends_with("tests") {
            walk(src, p, out, &excluded);
        }
    }
}

fn module_path(rel: &str) -> Vec<String> {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The absolute module paths a file's code names: `crate::a::b` as `[a, b]`, `super::x`
/// and `self::x` resolved from the file's module, groups expanded. Only path segments in
/// lower case are kept (a type or a function ends the path).
pub fn imports(src: &Source) -> BTreeSet<Vec<String>> {
    let code = src.code.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < code.len() {
        if ident_byte(i.checked_sub(1).map(|p| code[p])) || (i > 0 && code[i - 1] == b':') {
            i += 1;
            continue;
        }
        let rest = &src.code[i..];
        let base: Option<(Vec<String>, usize)> = if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("super::") || rest.starts_with("self::") {
            let mut module = src.module.clone();
            let mut at = 0;
            if rest.starts_with("self::") {
                at = "self::".len();
            }
            while src.code[i + at..].starts_with("super::") {
                module.pop();
                at += "super::".len();
            }
            Some((module, at))
        } else {
            None
        };
        match base {
            Some((module, at)) => {
                let end = path_tail(&src.code, i + at, &module, &mut out);
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    out
}

/// Reads the path (or group) at `at` below `base`, adding each module path it names;
/// returns where it ends.
fn path_tail(code: &str, mut at: usize, base: &[String], out: &mut BTreeSet<Vec<String>>) -> usize {
    let b = code.as_bytes();
    let mut path = base.to_vec();
    loop {
        while at < b.len() && b[at].is_ascii_whitespace() {
            at += 1;
        }
        if b.get(at) == Some(&b'{') {
            // A group: each member is a path below `path`.
            at += 1;
            loop {
                while at < b.len() && (b[at].is_ascii_whitespace() || b[at] == b',') {
                    at += 1;
                }
                if at >= b.len() || b[at] == b'}' {
                    break;
                }
                at = path_tail(code, at, &path, out);
            }
            return at + 1;
        }
        let start = at;
        while at < b.len() && (b[at].is_ascii_alphanumeric() || b[at] == b'_') {
            at += 1;
        }
        let word = &code[start..at];
        if word.is_empty() || word == "self" || !word.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        path.push(word.to_string());
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            break;
        }
    }
    // A path ending in a function or a macro names its module; one ending in a lower-case
    // item of a module (a function called, a constant) too: the module is what counts.
    if !path.is_empty() {
        out.insert(path);
    }
    at
}

/// The declared layering: each top-level module with the modules it may import, and the
/// `-/->` rules.
pub struct Declared {
    pub imports: BTreeMap<String, BTreeSet<String>>,
    pub forbidden: Vec<(String, Vec<String>)>,
}

/// Reads the indented block under the `## Layers` heading of docs/architecture.md.
pub fn declared(page: &str) -> Declared {
    let section = page.split("\n## Layers").nth(1).expect("docs/architecture.md has a `## Layers` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut imports = BTreeMap::new();
    let mut forbidden = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("    ")) {
        let line = line.trim();
        if let Some((lhs, rhs)) = line.split_once("-/->") {
            let deny = rhs.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            forbidden.push((lhs.trim().to_string(), deny));
        } else if let Some((lhs, rhs)) = line.split_once(':') {
            let allowed = rhs.split_whitespace().map(str::to_string).collect();
            assert!(imports.insert(lhs.trim().to_string(), allowed).is_none(), "`{}` is declared twice", lhs.trim());
        }
    }
    Declared { imports, forbidden }
}

fn starts_with(path: &[String], prefix: &str) -> bool {
    let prefix: Vec<&str> = prefix.split("::").collect();
    path.len() >= prefix.len() && path.iter().zip(&prefix).all(|(a, b)| a == b)
}

/// Every difference between the code and the declaration, one line each.
pub fn check(sources: &[Source], declared: &Declared) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for src in sources {
        let top = src.module.first().cloned().unwrap_or_else(|| "lib".to_string());
        let imports = imports(src);
        let uses = used.entry(top.clone()).or_default();
        for path in &imports {
            let Some(target) = path.first() else { continue };
            if *target != top {
                uses.insert(target.clone());
                if declared.imports.get(&top).is_some_and(|allowed| !allowed.contains(target)) {
                    problems.push(format!("{}: `{top}` imports `{}`, which the layers do not allow it", src.file, path.join("::")));
                }
            }
        }
        let module = src.module.join("::");
        for (lhs, deny) in &declared.forbidden {
            if !starts_with(&src.module, lhs) {
                continue;
            }
            for path in &imports {
                if let Some(d) = deny.iter().find(|d| starts_with(path, d)) {
                    problems.push(format!("{}: `{module}` imports `{}`: `{lhs} -/-> {d}`", src.file, path.join("::")));
                }
            }
        }
    }
    for (top, uses) in &used {
        match declared.imports.get(top) {
            None => problems.push(format!("`{top}` is not in the layers (docs/architecture.md)")),
            Some(allowed) => {
                for gone in allowed.difference(uses) {
                    problems.push(format!("the layers let `{top}` import `{gone}`, which it no longer does: take it out"));
                }
            }
        }
    }
    for top in declared.imports.keys().filter(|t| !used.contains_key(*t)) {
        problems.push(format!("the layers list `{top}`, which is not a module of src/"));
    }
    problems
}

/// The module paths a page names in backticks: `a::b`, and each member of a group
/// `a::{b, c::d}`.
pub fn named_modules(page: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for span in page.split('`').skip(1).step_by(2) {
        expand(span.trim(), "", &mut out);
    }
    out
}

fn expand(span: &str, prefix: &str, out: &mut BTreeSet<String>) {
    match span.split_once("::{") {
        Some((head, rest)) => {
            let base = format!("{prefix}{head}::");
            let inner = rest.rsplit_once('}').map_or(rest, |(i, _)| i);
            // Split at the group's own commas (not those of a nested group).
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(inner[start..i].trim(), &base, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(inner[start..].trim(), &base, out);
        }
        None => {
            let path = format!("{prefix}{span}");
            if path.contains("::") && path.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                out.insert(path);
            }
        }
    }
}

/// The second-level modules of `src/` (`ipvs::plan`), from the product sources.
pub fn second_level(sources: &[Source]) -> BTreeSet<String> {
    sources.iter().filter(|s| s.module.len() >= 2).map(|s| format!("{}::{}", s.module[0], s.module[1])).collect()
}

//! The house's rules that a reader can check with `grep`, checked here so they stay true:
//! each of kube-proxy's chain names is declared in one place. A string literal that is
//! one of kube-proxy's iptables chain names (or a per-service prefix) appears only in
//! `src/xtables/names.rs`; one of IPVS mode's own chains only in
//! `src/ipvs/plan/rules.rs`; one of nftables mode's names only in `src/nftables/names.rs`.
//! Everyone else imports the constant. Test code (a `tests.rs` or `*_tests.rs` file, a
//! `tests/` folder, an inline `#[cfg(test)] mod … {` to the end of its file) and comments
//! may spell names out; the few other exceptions are listed in [`EXCEPTIONS`], each with
//! its reason.
//!
//! Each setting is declared in one place too: its flags and its `KubeProxyConfiguration`
//! path are spelled only in its row of the `settings!` table (`src/settings/mod.rs`);
//! everything else reads them from `settings::TABLE` or uses the `Settings` field.
//!
//! And the imports follow the layers docs/architecture.md declares (`house/layers.rs`).

use std::path::{Path, PathBuf};

/// kube-proxy's iptables chains and per-service prefixes (`xtables::names`).
const IPTABLES: [&str; 14] = [
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-FORWARD",
    "KUBE-PROXY-FIREWALL",
    "KUBE-FIREWALL",
    "KUBE-PROXY-CANARY",
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// kube-proxy's IPVS mode's own chains (`ipvs::plan::rules`).
const IPVS: [&str; 5] = ["KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"];

/// kube-proxy's nftables table, chains, sets and maps (`nftables::names`).
const NFTABLES: [&str; 25] = [
    "kube-proxy",
    "rules for kube-proxy",
    "filter-prerouting-pre-dnat",
    "filter-output-pre-dnat",
    "filter-input",
    "filter-forward",
    "filter-output",
    "nat-prerouting",
    "nat-output",
    "nat-postrouting",
    "services",
    "service-ips",
    "service-nodeports",
    "nodeport-ips",
    "cluster-ips",
    "service-endpoints-check",
    "nodeport-endpoints-check",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "reject-chain",
    "cluster-ips-check",
    "firewall-ips",
    "firewall-check",
    "mark-for-masquerade",
    "masquerading",
];

/// (file, literal, why): the only literals allowed outside their one place.
const EXCEPTIONS: [(&str, &str, &str); 6] = [
    ("src/ipvs/plan/ipsets.rs", "KUBE-LOAD-BALANCER", "an ipset's name, which kube-proxy spells as the chain's"),
    ("src/source/apiserver.rs", "services", "the API resource in the RBAC rules, not the nftables chain"),
    ("src/cli/kube_proxy.rs", "kube-proxy", "the command's name (svcproxy runs as kube-proxy), not the nftables table"),
    ("src/serve/zpages.rs", "kube-proxy", "the component's name on /statusz and /flagz, not the nftables table"),
    ("src/bench/report.rs", "services", "a benchmark table's column, not the nftables chain"),
    ("src/source/events.rs", "kube-proxy", "the Events' reporting controller (client-go's recorder name), not the nftables table"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn is_test_file(rel: &str) -> bool {
    rel.ends_with("/tests.rs") || rel.ends_with("_tests.rs") || rel.contains("/tests/")
}

/// The string literals of one line of code (comments skipped; escapes kept as written).
fn literals(line: &str) -> Vec<&str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => break,
            b'\'' => {
                // A char literal ('"') or a lifetime: skip a quoted char.
                if bytes.get(i + 2) == Some(&b'\'') {
                    i += 3;
                    continue;
                }
                if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') {
                    i += 4;
                    continue;
                }
                i += 1;
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                out.push(&line[start..j.min(line.len())]);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// A literal names `name`: equal to it, or (a prefix ending in `-`) starting with it.
fn names(literal: &str, name: &str) -> bool {
    literal == name || (name.ends_with('-') && literal.starts_with(name))
}

/// One string literal of the source tree's non-test code: its file (relative to the
/// repository), 1-based line, and text.
struct Literal {
    file: String,
    line: usize,
    text: String,
}

/// Every string literal in `src/` outside test code and comments.
fn source_literals() -> Vec<Literal> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut out = Vec::new();
    let mut checked = 0;
    for path in &files {
        let rel = path.strip_prefix(root).expect("under the repository").to_string_lossy().replace('\\', "/");
        if is_test_file(&rel) {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(path).expect("read a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let next = lines.get(n + 1).map(|l| l.trim()).unwrap_or("");
            if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
                break;
            }
            out.extend(literals(line).into_iter().map(|lit| Literal { file: rel.clone(), line: n + 1, text: lit.to_string() }));
        }
    }
    assert!(checked > 100, "the scan read the source tree ({checked} files)");
    out
}

#[test]
fn each_chain_name_is_declared_in_one_place() {
    let groups: [(&[&str], &str); 3] =
        [(&IPTABLES, "src/xtables/names.rs"), (&IPVS, "src/ipvs/plan/rules.rs"), (&NFTABLES, "src/nftables/names.rs")];
    let mut found = Vec::new();
    let mut used = vec![false; EXCEPTIONS.len()];
    for Literal { file, line, text: lit } in source_literals() {
        for (list, home) in &groups {
            let Some(name) = list.iter().find(|name| names(&lit, name)) else { continue };
            if file == *home {
                continue;
            }
            match EXCEPTIONS.iter().position(|(f, l, _)| *f == file && names(&lit, l)) {
                Some(i) => used[i] = true,
                None => found.push(format!("{file}:{line}: \"{lit}\" spells {name}, declared in {home}")),
            }
        }
    }
    assert!(found.is_empty(), "chain names spelled outside their one place (import the constant):\n{}", found.join("\n"));
    let stale: Vec<_> = EXCEPTIONS.iter().zip(&used).filter(|(_, u)| !**u).map(|((f, l, _), _)| format!("{f}: {l}")).collect();
    assert!(stale.is_empty(), "exceptions nothing needs any more (remove them): {stale:?}");
}

/// Where every setting is declared: its row of the `settings!` table.
const SETTINGS_HOME: &str = "src/settings/mod.rs";

/// iptables words that happen to be spelled as a setting's flag, allowed anywhere:
/// `-m statistic --mode random`, the `-m nfacct` match, MASQUERADE's `--random-fully`.
const SETTING_HOMONYMS: [(&str, &str); 3] =
    [("--mode", "statistic's option"), ("nfacct", "the nfacct match"), ("--random-fully", "MASQUERADE's option")];

/// (file, literals, why): the settings spelled outside their row. Code that names a
/// setting takes the name from its row (`settings::row::NAME.flag()`, `.path()`).
const SETTING_EXCEPTIONS: [(&str, &[&str], &str); 2] = [
    ("src/config/mod.rs", &["--masquerade-bit"], "an error naming the alias, not kube-proxy's --iptables-masquerade-bit (row::masquerade_bit.flag())"),
    (
        "src/bench/soak.rs",
        &["--mode", "--master", "--hostname-override", "--cluster-cidr", "--ip-family", "--nfacct", "--metrics-bind-address", "--healthz-bind-address", "--logging-format"],
        "the soak starts svcproxy with a command line",
    ),
];

/// A literal that spells a setting's flag (`kube-api-qps`, `--kube-api-qps`,
/// `--kube-api-qps=…`) or its `KubeProxyConfiguration` path (`clientConnection.qps`).
fn spells_setting(literal: &str, info: &svcproxy::settings::Info) -> bool {
    let flag = |f: &&str| {
        let dashed = format!("--{f}");
        // A one-letter flag (`v`) is too short to tell from other text unless dashed.
        (f.len() > 1 && literal == *f) || literal == dashed || literal.starts_with(&format!("{dashed}="))
    };
    info.flags.iter().any(flag) || info.file.is_some_and(|path| literal == path)
}

#[test]
fn each_setting_is_declared_in_one_place() {
    let table = svcproxy::settings::TABLE;
    assert!(table.len() > 30, "the settings table ({} rows)", table.len());
    let mut found = Vec::new();
    let mut at_home = vec![false; table.len()];
    let mut used: Vec<Vec<bool>> = SETTING_EXCEPTIONS.iter().map(|(_, lits, _)| vec![false; lits.len()]).collect();
    let mut homonyms_used = [false; SETTING_HOMONYMS.len()];
    for Literal { file, line, text: lit } in source_literals() {
        for (i, info) in table.iter().enumerate().filter(|(_, info)| spells_setting(&lit, info)) {
            if file == SETTINGS_HOME {
                at_home[i] = true;
                continue;
            }
            let excepted = SETTING_EXCEPTIONS.iter().position(|(f, _, _)| *f == file).and_then(|e| {
                let at = SETTING_EXCEPTIONS[e].1.iter().position(|l| *l == lit)?;
                used[e][at] = true;
                Some(())
            });
            if let Some(h) = SETTING_HOMONYMS.iter().position(|(w, _)| *w == lit) {
                homonyms_used[h] = true;
            } else if excepted.is_none() {
                found.push(format!("{file}:{line}: \"{lit}\" spells setting {}, declared in {SETTINGS_HOME}", info.name));
            }
        }
    }
    assert!(found.is_empty(), "settings spelled outside their one place (name them with settings::row::NAME.flag() or .path()):\n{}", found.join("\n"));
    let mut stale: Vec<String> = SETTING_EXCEPTIONS
        .iter()
        .zip(&used)
        .flat_map(|((f, lits, _), u)| lits.iter().zip(u).filter(|(_, u)| !**u).map(move |(l, _)| format!("{f}: {l}")))
        .collect();
    stale.extend(SETTING_HOMONYMS.iter().zip(homonyms_used).filter(|(_, u)| !u).map(|((w, _), _)| format!("homonym {w}")));
    assert!(stale.is_empty(), "setting exceptions nothing needs any more (remove them): {stale:?}");
    let unseen: Vec<_> = table.iter().zip(&at_home).filter(|(i, seen)| !**seen && (!i.flags.is_empty() || i.file.is_some())).map(|(i, _)| i.name).collect();
    assert!(unseen.is_empty(), "settings whose flag or path the scan did not find in {SETTINGS_HOME}: {unseen:?}");
}

#[test]
fn the_scan_finds_a_literal_and_skips_comments() {
    assert_eq!(literals(r#"let a = ["-j", "KUBE-SERVICES"]; // "KUBE-FORWARD""#), ["-j", "KUBE-SERVICES"]);
    assert_eq!(literals(r#"/// "KUBE-SERVICES""#), Vec::<&str>::new());
    assert_eq!(literals(r#"f('"', "a\"b", 'x')"#), [r#"a\"b"#]);
    assert!(names("KUBE-SVC-ABC", "KUBE-SVC-"));
    assert!(!names("KUBE-SERVICES-X", "KUBE-SERVICES"));
    let qps = svcproxy::settings::TABLE.iter().find(|i| i.name == "kube_api_qps").expect("a row");
    assert!(spells_setting("--kube-api-qps=5", qps) && spells_setting("clientConnection.qps", qps) && !spells_setting("qps", qps));
}

#[path = "house/layers.rs"]
mod layers;

fn architecture_page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md")).expect("read docs/architecture.md")
}

/// The imports docs/architecture.md declares are the code's, both ways: a module that
/// imports one it may not fails, and so does a declared import no longer made.
#[test]
fn the_code_keeps_the_declared_layers() {
    let sources = layers::product_sources(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(sources.len() > 100, "the scan read the source tree ({} files)", sources.len());
    let problems = layers::check(&sources, &layers::declared(&architecture_page()));
    assert!(problems.is_empty(), "the layers in docs/architecture.md and the code differ:\n{}", problems.join("\n"));
}

/// docs/architecture.md names every module one level below the top (`ipvs::plan`), alone or
/// in a group (`ipvs::{plan, sync}`), so a new module comes with its line.
#[test]
fn the_architecture_page_names_every_module() {
    let sources = layers::product_sources(Path::new(env!("CARGO_MANIFEST_DIR")));
    let named = layers::named_modules(&architecture_page());
    let missing: Vec<String> = layers::second_level(&sources)
        .into_iter()
        .filter(|m| !named.iter().any(|n| n == m || n.starts_with(&format!("{m}::"))))
        .collect();
    assert!(missing.is_empty(), "docs/architecture.md names none of these modules: {missing:?}");
    let groups = layers::named_modules("`a::{b, c::{d, e}, f}` and `g::h` but not `x`");
    assert_eq!(groups.into_iter().collect::<Vec<_>>(), ["a::b", "a::c::d", "a::c::e", "a::f", "g::h"]);
}

/// The scan resolves the path forms the code uses and ignores comments and literals; the
/// check reports an undeclared import, a forbidden one and a stale declaration.
#[test]
fn the_layer_scan_resolves_paths_and_reports_each_difference() {
    let source = |module: &str, text: &str| layers::Source {
        file: format!("src/{}.rs", module.replace("::", "/")),
        module: module.split("::").map(str::to_string).collect(),
        code: layers::code_only(text),
    };
    let a = source(
        "ipvs::plan::incremental",
        "use crate::{model::Service, net::{IpFamily, Cidr}};\nuse super::super::netlink::Client;\n\
         // crate::runner in a comment\nlet s = \"crate::serve\"; let c = '\"'; fn f<'a>() { self::inner::g(); }\n\
         /* crate::cli */ let x = crate::track::Event::Gone;",
    );
    let paths: Vec<String> = layers::imports(&a).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["ipvs::netlink", "ipvs::plan::incremental::inner::g", "model", "net", "track"]);

    let page = "# x\n## Layers\n\n    ipvs: model net track wiring\n    ipvs::plan -/-> ipvs::netlink\n\n## Next\n";
    let problems = layers::check(&[a], &layers::declared(page));
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0].contains("`ipvs::plan::incremental` imports `ipvs::netlink`: `ipvs::plan -/-> ipvs::netlink`"), "{}", problems[0]);
    assert!(problems[1].contains("let `ipvs` import `wiring`, which it no longer does"), "{}", problems[1]);

    let b = || source("track", "use crate::runner::Engine;");
    let problems = layers::check(&[b()], &layers::declared("\n## Layers\n    track: model\n"));
    assert!(problems[0].contains("`track` imports `runner`, which the layers do not allow"), "{problems:#?}");
    let problems = layers::check(&[b()], &layers::declared(page));
    assert!(problems.iter().any(|p| p.contains("`track` is not in the layers")), "{problems:#?}");
}

//! Every rule the renderer makes is built as statement values, and its text reads back
//! into the same values: every golden cluster (svcproxy's fixtures, kube-proxy's nftables
//! and iptables scenarios), in both tables, as configured and with every gate turned on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::net::IpFamily;
use crate::nftables::context::{Context, LocalhostNodePorts, NftablesTable};
use crate::nftables::model::{rule_line, NftFamily, Table};
use crate::nftables::stmt::{parse_add_rule, Action, AddrValue, Match, Sep, Stmt, Verdict, Vmap};

fn yaml_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = entry.unwrap().path();
        if p.is_dir() {
            yaml_under(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml") {
            out.push(p);
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each golden cluster's top-level fixture, and each step of kube-proxy's scenarios.
fn golden_clusters() -> Vec<PathBuf> {
    let root = repo().join("fixtures");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    yaml_under(&root.join("upstream-nftables"), &mut out);
    yaml_under(&root.join("upstream"), &mut out);
    out.sort();
    out
}

/// The context with every gate on: localhost NodePorts (`proxy`: TCP's served in
/// userspace, not rejected), ServiceCIDRs (two, so the set's separator shows), and
/// masqueradeAll flipped.
fn all_gates(ctx: &Context, proxy: bool) -> Context {
    let cidrs = match ctx.family {
        IpFamily::V4 => ["10.96.0.0/16", "10.97.0.0/16"],
        IpFamily::V6 => ["fd00:10:96::/112", "fd00:10:97::/112"],
    };
    let service_cidrs = if ctx.service_cidrs.is_empty() { cidrs.map(|c| c.parse().unwrap()).to_vec() } else { ctx.service_cidrs.clone() };
    Context { localhost: Some(LocalhostNodePorts { proxy }), service_cidrs, masquerade_all: !ctx.masquerade_all, ..ctx.clone() }
}

/// Failures of `table`: rules whose line reads back otherwise.
fn check(origin: &str, table: &Table, forms: &mut BTreeSet<&'static str>, failures: &mut Vec<String>) {
    let head = format!("{} {}", table.family.nft_word(), table.name);
    for r in &table.objects.rules {
        let built = r.stmts();
        let mut line = String::new();
        rule_line(&mut line, &head, r);
        match parse_add_rule(line.trim_end_matches('\n')) {
            Ok(read) if read.body == *built && read.chain == r.chain => {}
            Ok(read) => failures.push(format!("{origin}: {line:?} built {built:?}, read back {:?}", read.body)),
            Err(e) => failures.push(format!("{origin}: {line:?}: {e}")),
        }
        built.stmts.iter().filter_map(form).for_each(|f| {
            forms.insert(f);
        });
    }
}

/// The forms made of the context's values, or only under a gate: each must be seen.
fn form(s: &Stmt) -> Option<&'static str> {
    Some(match s {
        Stmt::Match(Match::Addr { value: AddrValue::Anon(a), .. }) if a.sep() == Sep::Tight && a.items().len() > 1 => "ServiceCIDRs",
        Stmt::Match(Match::Addr { value: AddrValue::Anon(_), .. }) => "source ranges",
        Stmt::Match(Match::Addr { dir: crate::nftables::stmt::Dir::Saddr, negated: true, value: AddrValue::Prefix(_), .. }) => "detector: not from a CIDR",
        Stmt::Match(Match::Iifname { negated: false, .. }) => "detector: an interface",
        Stmt::Match(Match::Iifname { negated: true, name }) if name.wildcard => "detector: not an interface prefix",
        Stmt::Match(Match::Mark { .. }) => "mark test",
        Stmt::Action(Action::MarkSet { .. }) => "mark set",
        Stmt::Action(Action::Counter { .. }) => "localhost NodePort counter",
        Stmt::Action(Action::Update { .. }) => "affinity update",
        Stmt::Action(Action::Dnat(crate::nftables::stmt::Dnat::Numgen { .. })) => "DNAT map",
        Stmt::Vmap(Vmap::Numgen { .. }) => "endpoint chain map",
        Stmt::Verdict(Verdict::Jump(c)) if c == crate::nftables::names::MARK_MASQ => "jump to the mark chain",
        _ => return None,
    })
}

fn load(path: &Path) -> crate::pipeline::Loaded {
    use crate::settings::{kinds::ProxyMode, Settings};
    let state = crate::source::read_path(path).unwrap_or_else(|e| panic!("{e}"));
    let flags = Settings { mode: Some(ProxyMode::Nftables), ..Default::default() };
    crate::pipeline::load(state, flags, Default::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_rule_of_every_golden_cluster_is_built_as_values_that_read_back() {
    let clusters = golden_clusters();
    let (mut forms, mut failures, mut rules) = (BTreeSet::new(), Vec::new(), 0);
    for path in &clusters {
        let loaded = load(path);
        for t in &loaded.trackers.families {
            let (services, endpoints) = t.view();
            for table in [NftablesTable::V134, NftablesTable::V136] {
                let ctx = Context { table, ..Context::new(&loaded.config, t.family) };
                for (gates, ctx) in [("as configured", ctx.clone()), ("every gate", all_gates(&ctx, true)), ("every gate, no proxy", all_gates(&ctx, false))] {
                    let rendered = super::render(&ctx, services, endpoints).table();
                    rules += rendered.objects.rules.len();
                    let origin = format!("{} ({table:?}, {gates})", path.strip_prefix(repo()).unwrap_or(path).display());
                    check(&origin, &rendered, &mut forms, &mut failures);
                }
            }
        }
    }
    let first: Vec<&str> = failures.iter().take(20).map(String::as_str).collect();
    assert!(failures.is_empty(), "{} of {rules} rules, the first {}:\n{}", failures.len(), first.len(), first.join("\n"));
    let wanted = [
        "ServiceCIDRs",
        "source ranges",
        "detector: not from a CIDR",
        "detector: an interface",
        "detector: not an interface prefix",
        "mark test",
        "mark set",
        "localhost NodePort counter",
        "affinity update",
        "DNAT map",
        "endpoint chain map",
        "jump to the mark chain",
    ];
    let missing: Vec<&str> = wanted.into_iter().filter(|f| !forms.contains(f)).collect();
    assert!(missing.is_empty(), "forms no golden cluster rendered: {missing:?}");
    assert!(clusters.len() > 100 && rules > 10_000, "{} clusters, {rules} rules", clusters.len());
}

//! Golden tests. Every scenario — a fixture file, or a folder of steps (each a whole cluster
//! state) — goes through the CLI's code path: source → trackers → renderer → restore
//! text. Each step is synced twice: by svcproxy's watch-mode proxier, over a fake kernel,
//! and by kube-proxy's partial-restore bookkeeping (a full restore for the first step,
//! partial ones after). Each step is checked against whichever expectations exist beside
//! it in `golden/`:
//! - `.iptables`: our exact restore input (byte for byte; blessable): the full restore for
//!   the first step, then what watch mode sends (its partial syncs);
//! - `.kube-proxy`: kube-proxy's expected ruleset, after kube-proxy's test normalisation;
//! - `.flows`: packet flows traced through the full ruleset (never blessed, so a cosmetic
//!   re-bless cannot hide a behaviour change), and through kube-proxy's nftables table for
//!   the same state; `.nft-flows`: the flows kube-proxy's nftables mode answers otherwise,
//!   each with why;
//! - `.chains` / `.asserts`: single-chain and line/count assertions from upstream tests.
//!
//! Every full ruleset also passes the jump-consistency check and a parse round-trip.

mod support;

use svcproxy::settings::kinds::NftablesTable;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::*;
use svcproxy::config::Settings;
use svcproxy::model::Protocol;
use svcproxy::xtables::fake::{Call, FakeIptables, SharedFake};
use svcproxy::iptables::kube_proxy_restore::{self, Applied, SyncOptions};
use svcproxy::iptables::proxier::Proxier;
use svcproxy::iptables::render::Ruleset;
use support::iptables_check as check;
use svcproxy::iptables::restore;
use svcproxy::xtables::dump;
use svcproxy::pipeline::Loaded;
use svcproxy::source::{self, ClusterState};
use svcproxy::trace::{self, Entry, Env, Packet};

fn fixtures() -> PathBuf {
    repo().join("fixtures")
}

fn golden() -> PathBuf {
    repo().join("golden")
}

/// One step of a scenario: the config, the full rulesets, kube-proxy's restore text and
/// what svcproxy's watch mode sent (per family).
struct Step {
    loaded: Loaded,
    rulesets: Vec<Ruleset>,
    /// kube-proxy's restore input (full, then partial): what upstream's tests assert on.
    sent: Vec<String>,
    /// svcproxy's watch mode: every restore its proxier sent in this step's sync.
    watch: Vec<String>,
    first: bool,
}

fn family_header(rs: &Ruleset, n: usize) -> &'static str {
    match (n > 1, rs.ctx.node.family.is_v6()) {
        (false, _) => "",
        (true, false) => "# iptables\n",
        (true, true) => "# ip6tables\n",
    }
}

impl Step {
    /// The `.iptables` golden: the full restore of the first step (what `svcproxy render`
    /// prints), then the restore input watch mode sends for each later step.
    fn golden_text(&self) -> String {
        let texts = if self.first { &self.sent } else { &self.watch };
        let n = texts.len();
        self.rulesets.iter().zip(texts).map(|(rs, t)| format!("{}{t}", family_header(rs, n))).collect()
    }
}

/// The restores sent to `kernel` since the last look, joined per family (in `rulesets`' order).
fn restores_sent(kernel: &SharedFake, rulesets: &[Ruleset]) -> Vec<String> {
    let mut k = kernel.lock().unwrap();
    let sent = rulesets
        .iter()
        .map(|rs| {
            k.calls
                .iter()
                .filter_map(|c| match c {
                    Call::Restore(f, text) if *f == rs.ctx.node.family => Some(text.as_str()),
                    _ => None,
                })
                .collect()
        })
        .collect();
    k.calls.clear();
    sent
}

/// Runs a scenario: a single file (one full sync) or a folder of steps, through svcproxy's
/// watch-mode proxier over a fake kernel and through kube-proxy's partial restores.
fn run_scenario(path: &Path) -> Vec<Step> {
    let files = if path.is_dir() { yaml_files(path) } else { vec![path.to_path_buf()] };
    let mut loaded = load(&files[0], Settings::default());
    let kernel: SharedFake = Arc::new(Mutex::new(FakeIptables::new()));
    let mut proxier = Proxier::new(&loaded.config, &loaded.trackers, Box::new(kernel.clone()));
    let mut applied = vec![Applied::unknown(); proxier.rulesets.len()];
    let mut prev: Option<ClusterState> = None;
    let mut steps = Vec::new();
    for file in &files {
        let state = source::read_path(file).unwrap_or_else(|e| panic!("{e}"));
        let opts = state.fixture.as_ref().map(|f| f.options.clone()).unwrap_or_default();
        let mut changes = vec![Default::default(); proxier.rulesets.len()];
        if let Some(p) = &prev {
            for e in source::events_between(p, &state) {
                loaded.trackers.apply(&e);
            }
            changes = loaded.trackers.commit();
        }
        let force_full = opts.force_full_sync.unwrap_or(false);
        proxier
            .sync(&loaded.trackers, &changes, prev.is_none() || force_full)
            .unwrap_or_else(|e| panic!("{}: watch-mode sync: {e}", file.display()));
        let watch = restores_sent(&kernel, &proxier.rulesets);
        let sync = SyncOptions { full: force_full, delete_stale: opts.stale_chain_cleanup_due.unwrap_or(true) };
        let mut sent = Vec::new();
        for ((rs, ap), ch) in proxier.rulesets.iter().zip(applied.iter_mut()).zip(&changes) {
            let ch: &svcproxy::track::Changes = ch;
            let (text, after) = kube_proxy_restore::next_restore(ap, rs, &ch.services, sync);
            sent.push(text);
            *ap = after;
        }
        steps.push(Step { loaded: loaded.clone(), rulesets: proxier.rulesets.clone(), sent, watch, first: prev.is_none() });
        prev = Some(state);
    }
    steps
}

/// Every scenario under `dir`: `*.yaml` files and step folders, paired with the golden
/// base path of each step.
fn scenarios(dir: &Path, golden_dir: &Path, filter: &str) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for f in yaml_files_matching(dir, filter) {
        out.push((f.clone(), vec![golden_dir.join(stem(&f))]));
    }
    for d in step_dirs_matching(dir, filter) {
        // gen: generator scripts; lint, derive: fixtures of tests/lint.rs; installers: kube-proxy
        // invocations of tests/cli.rs; inputs: the input forms of tests/cli.rs (each file or
        // folder one cluster state, not steps); upstream-nftables: nftables mode's own
        // scenarios (below). None is an iptables golden scenario.
        if d.ends_with("gen") || d.ends_with("lint") || d.ends_with("derive") || d.ends_with("installers") || d.ends_with("inputs")
            || d.ends_with("upstream-nftables")
        {
            continue;
        }
        let bases = (1..=yaml_files(&d).len()).map(|i| golden_dir.join(stem(&d)).join(format!("{i:02}"))).collect();
        out.push((d, bases));
    }
    out
}

/// Every scenario `SVCPROXY_GOLDEN_FILTER` selects.
fn all_scenarios() -> Vec<(PathBuf, Vec<PathBuf>, bool)> {
    all_scenarios_matching(&golden_filter())
}

fn all_scenarios_matching(filter: &str) -> Vec<(PathBuf, Vec<PathBuf>, bool)> {
    let mut v: Vec<(PathBuf, Vec<PathBuf>, bool)> =
        scenarios(&fixtures(), &golden(), filter).into_iter().map(|(p, g)| (p, g, false)).collect();
    v.extend(scenarios(&fixtures().join("upstream"), &golden().join("upstream"), filter).into_iter().map(|(p, g)| (p, g, true)));
    v
}

fn with_ext(base: &Path, ext: &str) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

#[test]
fn goldens_match_byte_for_byte() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, upstream) in all_scenarios() {
        if upstream {
            continue;
        }
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            n += 1;
            f.add(check_golden(&with_ext(base, "iptables"), &step.golden_text()));
        }
    }
    f.finish("goldens", n);
}

#[test]
fn every_ruleset_is_consistent_and_round_trips() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, _, _) in all_scenarios() {
        for step in run_scenario(&path) {
            for rs in &step.rulesets {
                n += 1;
                let text = restore::write(rs, restore::Scope::Full, &[]);
                let dump = match dump::parse(&text) {
                    Ok(d) => d,
                    Err(e) => {
                        f.push(format!("{}: does not parse: {e}", path.display()));
                        continue;
                    }
                };
                if dump.to_text() != text {
                    f.push(format!("{}: parse round-trip differs:\n{}", path.display(), diff(&text, &dump.to_text())));
                }
                // The values a sync compares are the rules the text holds, line numbers included.
                let values = restore::dump(rs, restore::Scope::Full, &[]);
                if values != dump {
                    f.push(format!("{}: the rules as values differ from the text:\n{}", path.display(), diff(&text, &values.to_text())));
                }
                for p in check::check_jumps(&dump) {
                    f.push(format!("{} ({}): {p}", path.display(), rs.ctx.node.family));
                }
            }
        }
    }
    f.finish("consistency", n);
}

#[test]
fn upstream_scenarios_equal_kube_proxy_expected_rules() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, _) in all_scenarios() {
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            let Ok(expected) = std::fs::read_to_string(with_ext(base, "kube-proxy")) else { continue };
            n += 1;
            let normalised = check::sort_like_kube_proxy_tests(&dump::parse(&step.sent[0]).unwrap());
            if normalised != expected.trim_start() {
                f.push(format!("{}: differs from kube-proxy's expected rules:\n{}", base.display(), diff(&expected, &normalised)));
            }
        }
    }
    f.finish("kube-proxy rulesets", n);
}

/// Each `NAME.input` in `dir` normalised by `normalise` equals `NAME.output` (kube-proxy's
/// own test vectors for its normalisers).
fn check_vectors(dir: &Path, what: &str, normalise: impl Fn(&str) -> String) {
    let mut f = Failures::default();
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "input") {
            n += 1;
            let input = std::fs::read_to_string(&p).unwrap();
            let expected = std::fs::read_to_string(p.with_extension("output")).unwrap();
            let got = normalise(&input);
            if got != expected {
                f.push(format!("{}:\n{}", p.display(), diff(&expected, &got)));
            }
        }
    }
    f.finish(what, n);
}

#[test]
fn normaliser_matches_kube_proxy_vectors() {
    check_vectors(&golden().join("upstream/sort-iptables-rules"), "normaliser vectors", |input| {
        check::sort_like_kube_proxy_tests(&dump::parse(input).unwrap())
    });
}

fn local_ips(loaded: &Loaded) -> BTreeSet<IpAddr> {
    let mut ips: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
    ips.extend(loaded.config.interface_addresses.iter().flatten().copied());
    ips.insert("127.0.0.1".parse().unwrap());
    ips.insert("::1".parse().unwrap());
    ips
}

/// `name | source IP | protocol | dest IP | dest port | expected | masquerade`
fn check_flows(step: &Step, flows_path: &Path, f: &mut Failures) -> usize {
    let text = std::fs::read_to_string(flows_path).unwrap();
    let env = Env { local_ips: local_ips(&step.loaded), affinity: BTreeSet::new() };
    let mut n = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        n += 1;
        let c: Vec<&str> = line.split('|').map(str::trim).collect();
        let parsed = (c.len() == 7).then(|| (c[1].parse::<IpAddr>(), c[3].parse::<IpAddr>(), c[4].parse::<u16>()));
        let Some((Ok(src), Ok(dst), Ok(dport))) = parsed else {
            f.push(format!("{}: bad flow line: {line}", flows_path.display()));
            continue;
        };
        let (expected, masq) = (if c[5] == "-" { "" } else { c[5] }, c[6] == "true");
        let Some(rs) = step.rulesets.iter().find(|r| r.ctx.node.family == svcproxy::net::IpFamily::of(&dst)) else {
            f.push(format!("{}: {}: no ruleset for {dst}", flows_path.display(), c[0]));
            continue;
        };
        let dump = dump::parse(&restore::write(rs, restore::Scope::Full, &[])).unwrap();
        let Some(protocol) = Protocol::from_name(&c[2].to_lowercase()) else {
            f.push(format!("{}: {}: bad protocol {}", flows_path.display(), c[0], c[2]));
            continue;
        };
        let packet = Packet { src, dst, protocol, dport, in_interface: None };
        let (got, got_masq) = trace::trace(&dump, &env, packet, Entry::Prerouting).summary();
        if got != expected || got_masq != masq {
            f.push(format!("{}: flow {:?}: expected {expected:?} masq={masq}, traced {got:?} masq={got_masq}", flows_path.display(), c[0]));
        }
    }
    n
}

#[test]
fn packet_flows_reach_the_expected_endpoints() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, _) in all_scenarios() {
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            let flows = with_ext(base, "flows");
            if flows.exists() {
                n += check_flows(step, &flows, &mut f);
            }
        }
    }
    f.finish("packet flows", n);
}

/// `.flows` in nftables mode: every flow traced through kube-proxy's nftables table for the
/// same cluster state by `svcproxy::trace::nftables`. Where kube-proxy's nftables mode
/// answers differently from its iptables mode, `NAME.nft-flows` holds that flow's line
/// (same columns, same name) with a comment saying why; every line there must name a flow
/// of `.flows` and differ from it.
fn nftables_flows(flows: &str, overrides: Option<&str>, table: NftablesTable) -> Result<String, String> {
    let name = |l: &str| l.split('|').next().unwrap_or("").trim().to_owned();
    let data = |t: &str| t.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect::<Vec<_>>();
    let mut lines = data(flows);
    for o in overrides.map(|t| for_table(t, table)).map(|t| data(&t)).unwrap_or_default() {
        let Some(l) = lines.iter_mut().find(|l| name(l) == name(&o)) else { return Err(format!("nft-flows: no flow {:?} in .flows", name(&o))) };
        let columns = |l: &str| l.split('|').map(str::trim).map(str::to_owned).collect::<Vec<_>>();
        if columns(l) == columns(&o) {
            return Err(format!("nft-flows: flow {:?} is the same as in .flows", name(&o)));
        }
        *l = o;
    }
    Ok(lines.join("\n"))
}

/// The `.nft-flows` lines that hold for one of kube-proxy's nftables tables: a line after
/// a comment starting `# v1.36+:` holds for v1.36's table only (the default; v1.34's
/// answers as `.flows` does).
fn for_table(text: &str, table: NftablesTable) -> String {
    let mut out = Vec::new();
    let mut only_v136 = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            only_v136 = t.starts_with("# v1.36+:");
            continue;
        }
        if !t.is_empty() && (table == NftablesTable::V136 || !only_v136) {
            out.push(t);
        }
    }
    out.join("\n")
}

/// Each flow through the nftables table of each kube-proxy version svcproxy writes.
#[test]
fn packet_flows_agree_in_nftables_mode() {
    use svcproxy::settings::kinds::KubeProxyVersion;
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, _) in all_scenarios() {
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            let Ok(flows) = std::fs::read_to_string(with_ext(base, "flows")) else { continue };
            let overrides = std::fs::read_to_string(with_ext(base, "nft-flows")).ok();
            for version in [KubeProxyVersion::V1_34, KubeProxyVersion::NEWEST] {
                let mut config = step.loaded.config.clone();
                config.kube_proxy_version = version;
                let rulesets = svcproxy::nftables::render_all(&config, &step.loaded.trackers);
                let text = nftables_flows(&flows, overrides.as_deref(), version.nftables_table());
                match text.and_then(|text| check_nftables_flows(&rulesets, &local_ips(&step.loaded), &text)) {
                    Ok(flows) => n += flows,
                    Err(e) => f.push(format!("{} ({version}): {e}", base.display())),
                }
            }
        }
    }
    f.finish("packet flows in nftables mode", n);
}

/// `.chains`: blocks headed `*TABLE CHAIN`, each the exact rules of that chain in the
/// restore input sent (an empty block: no rules).
#[test]
fn upstream_chain_assertions_hold() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, _) in all_scenarios() {
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            let Ok(text) = std::fs::read_to_string(with_ext(base, "chains")) else { continue };
            let dump = dump::parse(&step.sent[0]).unwrap();
            for block in text.split('*').skip(1) {
                n += 1;
                let mut lines = block.lines();
                let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
                let expected: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
                let got: Vec<String> = dump.tables.get(header[0]).map(|t| {
                    t.rules_of(header[1]).map(|r| {
                        let mut s = format!("{} {}", r.op, r.chain);
                        for a in r.args.iter().chain(r.target.words()) {
                            s.push(' ');
                            s.push_str(&svcproxy::xtables::quote(a));
                        }
                        s
                    }).collect()
                }).unwrap_or_default();
                if got != expected {
                    f.push(format!("{}: {} {}: expected {expected:#?}, got {got:#?}", base.display(), header[0], header[1]));
                }
            }
        }
    }
    f.finish("chain assertions", n);
}

/// `.asserts`: line and count assertions on the restore input sent.
#[test]
fn upstream_line_assertions_hold() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, bases, _) in all_scenarios() {
        for (step, base) in run_scenario(&path).iter().zip(&bases) {
            let Ok(text) = std::fs::read_to_string(with_ext(base, "asserts")) else { continue };
            let sent = &step.sent[0];
            for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
                n += 1;
                if let Err(e) = check_assert(sent, line) {
                    f.push(format!("{}: {line}: {e}", base.display()));
                }
            }
        }
    }
    f.finish("line assertions", n);
}

fn check_assert(sent: &str, line: &str) -> Result<(), String> {
    let (key, value) = line.split_once(": ").ok_or("not `key: value`")?;
    let dnat: Vec<&str> = sent.lines().filter(|l| l.starts_with("-A KUBE-SEP-") && l.contains("-j DNAT")).collect();
    let ok = match key {
        "line" => sent.lines().any(|l| l == value),
        "line containing" => sent.lines().any(|l| l.contains(value)),
        "no line containing" => !sent.lines().any(|l| l.contains(value)),
        "count(-A KUBE-SEP-* ... -j DNAT lines)" => dnat.len().to_string() == value,
        "count(of those with --comment)" => dnat.iter().filter(|l| l.contains("--comment")).count().to_string() == value,
        k if k.starts_with("nat KUBE-SERVICES has a rule with -d ") => {
            let ip = k.trim_start_matches("nat KUBE-SERVICES has a rule with -d ");
            let nat = sent.split("*nat").nth(1).unwrap_or("");
            let has = nat.lines().any(|l| l.starts_with("-A KUBE-SERVICES ") && l.contains(&format!(" -d {ip} ")));
            has == (value == "yes")
        }
        _ => return Err("unknown assertion".into()),
    };
    if ok { Ok(()) } else { Err("does not hold".into()) }
}

/// IPVS mode: every `fixtures/*.yaml` rendered as `svcproxy render --mode ipvs` prints it,
/// against `golden/NAME.ipvs`.
#[test]
fn ipvs_goldens_match_byte_for_byte() {
    let mut f = Failures::default();
    let mut n = 0;
    for path in yaml_files(&fixtures()) {
        let flags = Settings { mode: Some(svcproxy::settings::kinds::ProxyMode::Ipvs), ..Settings::default() };
        let loaded = load(&path, flags);
        let plans = svcproxy::ipvs::plan_all(&loaded.config, &loaded.trackers);
        n += 1;
        f.add(check_golden(&golden().join(format!("{}.ipvs", stem(&path))), &svcproxy::ipvs::text::render(&plans)));
    }
    f.finish("ipvs goldens", n);
}

/// nftables mode: every `fixtures/*.yaml` rendered as `svcproxy render --mode nftables`
/// prints it (`nft -f` input), against `golden/NAME.nft`.
#[test]
fn nftables_goldens_match_byte_for_byte() {
    use svcproxy::nftables::{self, model::Form};
    let mut f = Failures::default();
    let mut n = 0;
    for path in yaml_files(&fixtures()) {
        let flags = Settings { mode: Some(svcproxy::settings::kinds::ProxyMode::Nftables), ..Settings::default() };
        let loaded = load(&path, flags);
        let rulesets = nftables::render_all(&loaded.config, &loaded.trackers);
        n += 1;
        f.add(check_golden(&golden().join(format!("{}.nft", stem(&path))), &nftables::text(&rulesets, Form::Transaction)));
    }
    f.finish("nftables goldens", n);
}

/// nftables mode against kube-proxy's own expectations (`fixtures/upstream-nftables/`,
/// pkg/proxy/nftables/proxier_test.go): the table as knftables' fake `Dump()` lists it
/// equals `golden/upstream-nftables/NAME.kube-proxy` (a step folder: `NAME/NN.kube-proxy`)
/// after kube-proxy's test normalisation (`sortNFTablesTransaction`), as
/// `assertNFTablesTransactionEqual` compares them. A step whose expectation is
/// `NN.kube-proxy-stale` holds service chains kube-proxy has flushed but keeps until a
/// later sync (sync state a render has not): it must equal once those empty chains are
/// set aside, and must have some. `NAME.elements`: element presence assertions.
#[test]
fn upstream_nftables_scenarios_equal_kube_proxy_expected_rules() {
    let mut f = Failures::default();
    let mut n = 0;
    for (path, base) in nftables_steps() {
        n += 1;
        if let Err(e) = check_nftables_step(&path, &base) {
            f.push(format!("{}: {e}", path.display()));
        }
    }
    f.finish("kube-proxy nftables rulesets", n);
}

/// Each upstream nftables scenario step (`fixtures/upstream-nftables/`) and the golden
/// base path of its expectations.
fn nftables_steps() -> Vec<(PathBuf, PathBuf)> {
    let dir = fixtures().join("upstream-nftables");
    let gold = golden().join("upstream-nftables");
    let mut steps: Vec<(PathBuf, PathBuf)> = yaml_files(&dir).into_iter().map(|p| (p.clone(), gold.join(stem(&p)))).collect();
    for d in step_dirs(&dir) {
        for (i, p) in yaml_files(&d).into_iter().enumerate() {
            steps.push((p, gold.join(stem(&d)).join(format!("{:02}", i + 1))));
        }
    }
    steps
}

fn check_nftables_step(path: &Path, base: &Path) -> Result<(), String> {
    let loaded = load(path, Settings::default());
    let rulesets = svcproxy::nftables::render_all(&loaded.config, &loaded.trackers);
    let mut checks = 0;
    if let Ok(text) = std::fs::read_to_string(with_ext(base, "elements")) {
        checks += 1;
        check_nftables_elements(&rulesets, &text)?;
    }
    if let Ok(text) = std::fs::read_to_string(with_ext(base, "flows")) {
        checks += 1;
        check_nftables_flows(&rulesets, &local_ips(&loaded), &text)?;
        // The flows are what a packet meets, not rule text: they hold for v1.36's table too.
        let mut config = loaded.config.clone();
        config.kube_proxy_version = svcproxy::settings::kinds::KubeProxyVersion::NEWEST;
        let newest = svcproxy::nftables::render_all(&config, &loaded.trackers);
        check_nftables_flows(&newest, &local_ips(&loaded), &text).map_err(|e| format!("in v1.37's table: {e}"))?;
    }
    for (ext, stale) in [("kube-proxy", false), ("kube-proxy-stale", true)] {
        if let Ok(text) = std::fs::read_to_string(with_ext(base, ext)) {
            checks += 1;
            check_nftables_table(&rulesets, &text, stale)?;
        }
    }
    if checks == 0 { Err(format!("{}: no expectation (.kube-proxy, .kube-proxy-stale, .elements, .flows)", base.display())) } else { Ok(()) }
}

fn check_nftables_table(rulesets: &[svcproxy::nftables::Ruleset], expected: &str, stale: bool) -> Result<(), String> {
    use svcproxy::nftables::{self, check::sort_like_kube_proxy_tests, model::Form};
    let got = sort_like_kube_proxy_tests(&nftables::text(rulesets, Form::Dump));
    let expected = if stale {
        let (kept, set_aside) = without_flushed_service_chains(expected);
        if set_aside == 0 {
            return Err("a -stale expectation without flushed service chains (rename it .kube-proxy)".into());
        }
        kept
    } else {
        expected.to_owned()
    };
    let want = sort_like_kube_proxy_tests(&expected);
    if want != got {
        return Err(format!("differs from kube-proxy's expected rules:\n{}", diff(&want, &got)));
    }
    Ok(())
}

/// `.flows` (as for iptables): each case traced through the rendered table of the
/// destination's family by `svcproxy::trace::nftables`.
fn check_nftables_flows(rulesets: &[svcproxy::nftables::Ruleset], local: &BTreeSet<IpAddr>, text: &str) -> Result<usize, String> {
    use svcproxy::trace::nftables as trace;
    let env = Env { local_ips: local.clone(), affinity: BTreeSet::new() };
    let mut errors = Vec::new();
    let mut n = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        n += 1;
        let c: Vec<&str> = line.split('|').map(str::trim).collect();
        let parsed = (c.len() == 7).then(|| (c[1].parse::<IpAddr>(), c[3].parse::<IpAddr>(), c[4].parse::<u16>()));
        let Some((Ok(src), Ok(dst), Ok(dport))) = parsed else { return Err(format!("bad flow line: {line}")) };
        let (expected, masq) = (if c[5] == "-" { "" } else { c[5] }, c[6] == "true");
        let Some(rs) = rulesets.iter().find(|r| r.ctx.family == svcproxy::net::IpFamily::of(&dst)) else {
            return Err(format!("{}: no ruleset for {dst}", c[0]));
        };
        let Some(protocol) = Protocol::from_name(&c[2].to_lowercase()) else { return Err(format!("{}: bad protocol {}", c[0], c[2])) };
        let packet = Packet { src, dst, protocol, dport, in_interface: None };
        match trace::trace(&rs.table(), &env, packet, Entry::Prerouting).map(|t| t.summary()) {
            Ok((got, got_masq)) if got == expected && got_masq == masq => {}
            Ok((got, got_masq)) => errors.push(format!("flow {:?}: expected {expected:?} masq={masq}, traced {got:?} masq={got_masq}", c[0])),
            Err(e) => errors.push(format!("flow {:?}: {e}", c[0])),
        }
    }
    if n == 0 {
        errors.push("no flow".into());
    }
    if errors.is_empty() { Ok(n) } else { Err(errors.join("\n")) }
}

/// `.elements`: lines `present|absent SET KEY` (key parts joined by ` . `), as upstream's
/// `FindElement` checks.
fn check_nftables_elements(rulesets: &[svcproxy::nftables::Ruleset], text: &str) -> Result<(), String> {
    let tables: Vec<_> = rulesets.iter().map(|r| r.table()).collect();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let mut words = line.splitn(3, ' ');
        let (want, set, key) = (words.next().unwrap_or(""), words.next().unwrap_or(""), words.next().unwrap_or(""));
        let found = tables.iter().flat_map(|t| &t.objects.elements).any(|e| e.set == set && e.key.to_string() == key);
        match (want, found) {
            ("present", true) | ("absent", false) => checked += 1,
            ("present", false) | ("absent", true) => return Err(format!("{line}: does not hold")),
            _ => return Err(format!("{line}: not `present|absent SET KEY`")),
        }
    }
    if checked == 0 { Err("no element assertion".into()) } else { Ok(()) }
}

/// The expectation without the service chains (names with a `/`) it declares with no rule,
/// and how many there were.
fn without_flushed_service_chains(text: &str) -> (String, usize) {
    let words = |l: &str| l.split(' ').map(str::to_owned).collect::<Vec<String>>();
    let has_rules = |name: &str| text.lines().map(words).any(|w| w.len() > 4 && w[1] == "rule" && w[4] == name);
    let flushed = |l: &str| {
        let w = words(l);
        w.len() == 5 && w[1] == "chain" && w[4].contains('/') && !has_rules(&w[4])
    };
    let kept: Vec<&str> = text.lines().filter(|l| !flushed(l)).collect();
    let set_aside = text.lines().filter(|l| flushed(l)).count();
    (kept.join("\n"), set_aside)
}

/// kube-proxy's `Test_sortNFTablesTransaction` vector(s), `golden/upstream-nftables/sort-nftables-transaction/*.input|.output`.
#[test]
fn nftables_normaliser_matches_kube_proxy_vectors() {
    check_vectors(&golden().join("upstream-nftables/sort-nftables-transaction"), "nftables normaliser vectors", |input| {
        svcproxy::nftables::check::sort_like_kube_proxy_tests(input)
    });
}

/// The expectations any scenario step may have beside it in golden/ (see the module
/// doc); only our own scenarios also pin `.iptables`.
const EXPECTATIONS: [&str; 5] = ["kube-proxy", "flows", "nft-flows", "chains", "asserts"];

/// The expectations an upstream nftables step may have (see
/// `upstream_nftables_scenarios_equal_kube_proxy_expected_rules`).
const NFT_EXPECTATIONS: [&str; 4] = ["kube-proxy", "kube-proxy-stale", "elements", "flows"];

/// Every file in golden/ is read by some test: the scenarios' expectations and the IPVS
/// plans here, kube-proxy's normaliser vectors, tests/lint.rs's lint and derive goldens
/// (one per fixture), and the goldens tests/cli.rs names. A golden nothing reads (its
/// fixture renamed or gone) is listed, whatever `SVCPROXY_GOLDEN_FILTER` says.
#[test]
fn every_golden_is_read_by_a_test() {
    let mut claimed: BTreeSet<PathBuf> = BTreeSet::new();
    for (_, bases, upstream) in all_scenarios_matching("") {
        claimed.extend(bases.iter().flat_map(|b| EXPECTATIONS.map(|ext| with_ext(b, ext))));
        if !upstream {
            claimed.extend(bases.iter().map(|b| with_ext(b, "iptables")));
        }
    }
    claimed.extend(yaml_files_matching(&fixtures(), "").iter().map(|p| golden().join(format!("{}.ipvs", stem(p)))));
    claimed.extend(yaml_files_matching(&fixtures(), "").iter().map(|p| golden().join(format!("{}.nft", stem(p)))));
    for base in nftables_steps().into_iter().map(|(_, base)| base) {
        claimed.extend(NFT_EXPECTATIONS.map(|ext| with_ext(&base, ext)));
    }
    for vectors in [golden().join("upstream/sort-iptables-rules"), golden().join("upstream-nftables/sort-nftables-transaction")] {
        for p in files_under(&vectors).into_iter().filter(|p| p.extension().is_some_and(|e| e == "input")) {
            claimed.insert(p.with_extension("output"));
            claimed.insert(p);
        }
    }
    for p in yaml_files_matching(&fixtures().join("lint"), "") {
        claimed.extend(["txt", "json"].map(|ext| golden().join(format!("lint/{}.{ext}", stem(&p)))));
    }
    for d in step_dirs_matching(&fixtures().join("derive"), "") {
        claimed.extend(["iptables", "json"].map(|ext| golden().join(format!("derive/{}.{ext}", stem(&d)))));
    }
    let cli = std::fs::read_to_string(repo().join("tests/cli.rs")).unwrap();
    let all = files_under(&golden());
    let named_by_cli = |p: &PathBuf| {
        let name = p.file_name().unwrap().to_string_lossy();
        cli.contains(&format!("\"{name}\"")) || cli.contains(&format!("/{name}\""))
    };
    claimed.extend(all.iter().filter(|p| named_by_cli(p)).cloned());
    let orphans: Vec<String> = all.iter().filter(|p| !claimed.contains(*p)).map(|p| p.strip_prefix(repo()).unwrap_or(p).display().to_string()).collect();
    assert!(all.len() > 100, "golden/ holds only {} files", all.len());
    assert!(orphans.is_empty(), "{} golden file(s) no test reads (rename or remove them with their fixture):\n{}", orphans.len(), orphans.join("\n"));
}

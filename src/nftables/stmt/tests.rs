//! The vocabulary against every rule svcproxy and kube-proxy write: each rule line of the
//! nftables goldens, kube-proxy's expected tables and the netlink tests' vocabulary is read
//! into values and written back byte for byte; so is every rule the renderer makes of
//! every fixture in both table versions (v1.34's and v1.36+'s). No form may be missing:
//! there is no catch-all to fall into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::nftables::model::{rule_line, NftFamily};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, keep, out);
        } else if keep(&p) {
            out.push(p);
        }
    }
}

/// A form: the statements' kinds and fixed words, names and addresses left out (what the
/// count of forms counts).
fn form(body: &Body) -> String {
    let mut words: Vec<String> = body
        .stmts
        .iter()
        .map(|s| match s {
            Stmt::Match(Match::Addr { family, dir, negated, value }) => {
                let v = match value {
                    AddrValue::Prefix(_) => "ADDR".to_owned(),
                    AddrValue::Anon(s) => format!("{{{:?}}}", s.sep()),
                    AddrValue::Named(_) => "@SET".to_owned(),
                };
                format!("{} {dir}{} {v}", family.nft_word(), if *negated { " !=" } else { "" })
            }
            Stmt::Match(Match::L4proto(_)) => "meta l4proto PROTO".into(),
            Stmt::Match(Match::Dport { .. }) => "PROTO dport PORT".into(),
            Stmt::Match(Match::Iifname { negated, name }) => format!("iifname{} NAME{}", if *negated { " !=" } else { "" }, if name.wildcard { "*" } else { "" }),
            Stmt::Match(Match::Mark { negated, .. }) => format!("mark and M {} V", if *negated { "!=" } else { "==" }),
            Stmt::Match(Match::InSet { key, .. }) => format!("{key} @SET"),
            Stmt::Match(Match::Numgen { .. }) => "numgen random mod N == K".into(),
            Stmt::Match(m) => m.to_string(),
            Stmt::Vmap(Vmap::Named { key, .. }) => format!("{key} vmap @MAP"),
            Stmt::Vmap(Vmap::Numgen { .. }) => "numgen random mod N vmap { … }".into(),
            Stmt::Action(Action::MarkSet { op: MarkOp::Or, .. }) => "mark set mark or M".into(),
            Stmt::Action(Action::MarkSet { op: MarkOp::Xor, .. }) => "mark set mark xor M".into(),
            Stmt::Action(Action::Dnat(Dnat::To { .. })) => "dnat to HOST:PORT".into(),
            Stmt::Action(Action::Dnat(Dnat::Numgen { family, .. })) => format!("dnat {} addr . port to numgen … map {{ … }}", family.nft_word()),
            Stmt::Action(Action::Update { key, .. }) => format!("update @SET {{ {key} }}"),
            Stmt::Action(a) => a.to_string(),
            Stmt::Verdict(Verdict::Jump(_)) => "jump CHAIN".into(),
            Stmt::Verdict(Verdict::Goto(_)) => "goto CHAIN".into(),
            Stmt::Verdict(v) => v.to_string(),
        })
        .collect();
    if body.comment.is_some() {
        words.push("comment".into());
    }
    words.join(" ")
}

/// Reads `line` and writes it back; a failure names the file and line.
fn round_trip(origin: &str, line: &str, forms: &mut BTreeMap<String, usize>) -> Result<Body, String> {
    let rule = parse_add_rule(line).map_err(|e| format!("{origin}: {e}\n  {line}"))?;
    let back = rule.to_string();
    if back != line {
        return Err(format!("{origin}: written back differently\n  read:    {line}\n  written: {back}"));
    }
    *forms.entry(form(&rule.body)).or_default() += 1;
    Ok(rule.body)
}

/// The rule lines of every stored nftables text: svcproxy's goldens (kube-proxy v1.37's
/// table), kube-proxy's expected tables (v1.34's) and its sort test's, the netlink
/// vocabulary test's and the captured batches' text.
fn stored_rule_lines() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    files_under(&root.join("golden"), &|p| p.extension().is_some_and(|e| e == "nft") || p.to_string_lossy().contains("upstream-nftables"), &mut files);
    files.push(root.join("tests/kernel/nft_netlink_vocabulary.nft"));
    files.push(root.join("src/nftables/wire/testdata/nft106-v137.txt"));
    files.push(root.join("src/nftables/wire/testdata/nft106-numgen-cmp.txt"));
    let mut lines = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            // The captured batch marks its text lines `> `.
            let line = line.strip_prefix("> ").unwrap_or(line);
            if line.starts_with("add rule ") {
                lines.push((format!("{rel}:{}", n + 1), line.to_owned()));
            }
        }
    }
    lines
}

#[test]
fn every_stored_rule_reads_and_writes_back_byte_for_byte() {
    let lines = stored_rule_lines();
    let mut forms = BTreeMap::new();
    let failures: Vec<String> = lines.iter().filter_map(|(origin, line)| round_trip(origin, line, &mut forms).err()).collect();
    assert!(failures.is_empty(), "{} of {} rules:\n{}", failures.len(), lines.len(), failures.join("\n"));
    // Both table versions were among them: v1.34's mark chain, v1.36+'s hairpin set.
    let has = |s: &str| lines.iter().any(|(_, l)| l.contains(s));
    assert!(has("jump mark-for-masquerade") && has("@hairpin-connections masquerade fully-random"));
    eprintln!("{} stored rules, {} forms:", lines.len(), forms.len());
    for (f, n) in &forms {
        eprintln!("{n:>6}  {f}");
    }
}

/// Every rule the renderer makes, of every fixture (svcproxy's, and kube-proxy's nftables
/// and iptables scenarios), in kube-proxy v1.34's table and in v1.36+'s; a rule it built as
/// values reads back into the same values.
#[test]
fn every_rendered_rule_in_both_table_versions_reads_and_writes_back() {
    use crate::nftables::{context::Context, render};
    use crate::settings::{kinds::ProxyMode, Settings};

    let root = root();
    let mut fixtures = Vec::new();
    let yaml = |p: &Path| p.extension().is_some_and(|e| e == "yaml");
    for entry in std::fs::read_dir(root.join("fixtures")).unwrap() {
        let p = entry.unwrap().path();
        if yaml(&p) {
            fixtures.push(p);
        }
    }
    files_under(&root.join("fixtures/upstream-nftables"), &yaml, &mut fixtures);
    files_under(&root.join("fixtures/upstream"), &yaml, &mut fixtures);
    fixtures.sort();
    let mut forms = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut rules, mut valued, mut versions) = (0, 0, [0usize; 2]);
    for path in &fixtures {
        let state = crate::source::read_path(path).unwrap_or_else(|e| panic!("{e}"));
        let flags = Settings { mode: Some(ProxyMode::Nftables), ..Default::default() };
        let loaded = crate::pipeline::load(state, flags, Default::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for t in &loaded.trackers.families {
            let (services, endpoints) = t.view();
            for (n, table) in [crate::nftables::context::NftablesTable::V134, crate::nftables::context::NftablesTable::V136].into_iter().enumerate() {
                let ctx = Context { table, ..Context::new(&loaded.config, t.family) };
                let table = render::render(&ctx, services, endpoints).table();
                let head = format!("{} {}", table.family.nft_word(), table.name);
                for r in &table.objects.rules {
                    let mut line = String::new();
                    rule_line(&mut line, &head, r);
                    let origin = format!("{} ({table:?} table)", path.strip_prefix(&root).unwrap().display());
                    match round_trip(&origin, line.trim_end_matches('\n'), &mut forms) {
                        Err(e) => failures.push(e),
                        Ok(read) if *r.stmts() != read => {
                            failures.push(format!("{origin}: built {:?}, read back {read:?}", r.stmts()));
                        }
                        Ok(_) => valued += 1,
                    }
                    rules += 1;
                    versions[n] += 1;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {rules} rules:\n{}", failures.len(), failures.join("\n"));
    assert!(versions[0] > 0 && versions[1] > 0, "both table versions rendered: {versions:?}");
    assert!(valued > 0, "no rule was built as values");
    eprintln!("{} fixtures, {rules} rendered rules ({valued} built as values), {} forms", fixtures.len(), forms.len());
}

/// A value → text → the same value, for values built by hand (the renderer's side).
#[test]
fn values_write_and_read_back() {
    let v4 = |s: &str| s.parse().unwrap();
    let cases = [
        Body {
            stmts: vec![
                Stmt::Match(Match::Addr {
                    family: IpFamily::V4,
                    dir: Dir::Daddr,
                    negated: false,
                    value: AddrValue::Anon(AnonSet::new(vec![Prefix { addr: v4("10.96.0.0"), len: Some(12) }, Prefix { addr: v4("10.0.0.0"), len: Some(8) }], Sep::Tight).unwrap()),
                }),
                Stmt::Verdict(Verdict::Drop),
            ],
            comment: Some("Drop traffic to unallocated ClusterIPs".into()),
        },
        Body {
            stmts: vec![
                Stmt::Match(Match::Mark { mask: Num::Hex { value: 0x4000, digits: 8 }, negated: true, value: Num::Dec(0) }),
                Stmt::Action(Action::MarkSet { op: MarkOp::Xor, value: Num::Hex { value: 0x4000, digits: 8 } }),
                Stmt::Action(Action::Masquerade { fully_random: true }),
            ],
            comment: None,
        },
        Body {
            stmts: vec![
                Stmt::Match(Match::L4proto(Protocol::Udp)),
                Stmt::Action(Action::Dnat(Dnat::Numgen {
                    family: IpFamily::V6,
                    modulus: 2,
                    arms: vec![(0, "fd00::1".parse().unwrap(), 53), (1, "fd00::2".parse().unwrap(), 53)],
                })),
            ],
            comment: None,
        },
        Body {
            stmts: vec![
                Stmt::Match(Match::Iifname { negated: true, name: Ifname { name: "veth".into(), wildcard: true } }),
                Stmt::Action(Action::Update { set: "aff".into(), key: Concat(vec![Selector::Addr(IpFamily::V4, Dir::Saddr)]) }),
                Stmt::Vmap(Vmap::Numgen { modulus: 2, arms: vec![(0, Verdict::Goto("a".into())), (1, Verdict::Jump("b".into()))] }),
            ],
            comment: None,
        },
        Body { stmts: vec![Stmt::Action(Action::Dnat(Dnat::To { addr: "fd00::1".parse().unwrap(), port: 53 }))], comment: None },
        Body {
            stmts: vec![
                Stmt::Match(Match::L4proto(Protocol::Tcp)),
                Stmt::Match(Match::Numgen { modulus: 3, value: 0 }),
                Stmt::Action(Action::Dnat(Dnat::To { addr: v4("10.0.0.1"), port: 80 })),
            ],
            comment: Some("ns/svc:http".into()),
        },
    ];
    let texts = [
        "ip daddr { 10.96.0.0/12,10.0.0.0/8 } drop comment \"Drop traffic to unallocated ClusterIPs\"",
        "mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random",
        "meta l4proto udp dnat ip6 addr . port to numgen random mod 2 map { 0 : fd00::1 . 53 , 1 : fd00::2 . 53 }",
        "iifname != veth* update @aff { ip saddr } numgen random mod 2 vmap { 0 : goto a , 1 : jump b }",
        "dnat to [fd00::1]:53",
        "meta l4proto tcp numgen random mod 3 == 0 dnat to 10.0.0.1:80 comment \"ns/svc:http\"",
    ];
    for (body, text) in cases.iter().zip(texts) {
        assert_eq!(body.to_string(), text);
        assert_eq!(&parse_body(text).unwrap(), body, "{text}");
    }
    // One element is written the same with either separator, and read as tight.
    let one = AnonSet::new(vec![Prefix { addr: v4("1.2.3.0"), len: Some(24) }], Sep::Spaced).unwrap();
    assert_eq!(one.sep(), Sep::Tight);
    assert!(AnonSet::new(vec![], Sep::Tight).is_none());
}

/// Where reading stops, and what it names.
#[test]
fn errors_name_the_word_and_what_was_expected() {
    let err = |text: &str| parse_body(text).unwrap_err();
    let cases: [(&str, usize, Option<&str>, Expected); 30] = [
        ("", 1, None, Expected::Statement),
        ("counter jump x", 2, Some("jump"), Expected::Word("name")),
        ("counter name reject", 3, Some("reject"), Expected::CounterName),
        ("flow jump x", 1, Some("flow"), Expected::Statement),
        ("ip daddr 10.0.0.1 jump", 5, None, Expected::Name),
        ("ip taddr 10.0.0.1", 2, Some("taddr"), Expected::Dir),
        ("ip daddr 10.0.0.01 drop", 3, Some("10.0.0.01"), Expected::AddrValue),
        ("ip daddr fd00:0::1 drop", 3, Some("fd00:0::1"), Expected::AddrValue),
        ("ip saddr != { 10.0.0.0/33 } drop", 5, Some("10.0.0.0/33"), Expected::Prefix),
        ("ip saddr != { 1.1.1.1 , 2.2.2.2,3.3.3.3 } drop", 7, Some("2.2.2.2,3.3.3.3"), Expected::OneSeparator),
        ("ip saddr != { 1.1.1.1 ; } drop", 6, Some(";"), Expected::OneOf(&[",", "}"])),
        ("meta l4proto icmp", 3, Some("icmp"), Expected::Protocol),
        ("meta mark 1", 2, Some("mark"), Expected::Word("l4proto")),
        ("th dport 80", 3, Some("80"), Expected::OneOf(&[".", "vmap"])),
        ("ip daddr . meta l4proto . th sport vmap @m", 8, Some("sport"), Expected::Word("dport")),
        ("ip daddr . meta l4proto services", 6, Some("services"), Expected::SetRef),
        ("mark and 0x4000 > 0 return", 4, Some(">"), Expected::OneOf(&["==", "!="])),
        ("mark set mark or 0X4000", 5, Some("0X4000"), Expected::Number),
        ("mark set mark and 0x4000", 4, Some("and"), Expected::OneOf(&["or", "xor"])),
        ("numgen random mod 2 vmap { 0 : goto a , 2 : goto b }", 12, Some("2"), Expected::NumgenKey),
        ("numgen random mod 2 vmap { 0 : goto a , 0 : goto b }", 12, Some("0"), Expected::NumgenKey),
        ("numgen random mod 2 == 2 goto a", 6, Some("2"), Expected::NumgenKey),
        ("numgen random mod 0 == 0 goto a", 6, Some("0"), Expected::NumgenKey),
        ("numgen random mod 2 == 01 goto a", 6, Some("01"), Expected::NumgenKey),
        ("numgen random mod 2 0 goto a", 5, Some("0"), Expected::OneOf(&["==", "vmap"])),
        ("dnat to 10.0.0.1", 3, Some("10.0.0.1"), Expected::HostPort),
        ("dnat to fd00::1:53", 3, Some("fd00::1:53"), Expected::HostPort),
        ("dnat inet addr . port to numgen random mod 1 map { 0 : 1.1.1.1 . 80 }", 2, Some("inet"), Expected::OneOf(&["to", "ip", "ip6"])),
        ("reject comment \"a\" drop", 4, Some("drop"), Expected::End),
        ("reject comment drop", 3, Some("drop"), Expected::Comment),
    ];
    for (text, word, found, expected) in cases {
        let e = err(text);
        assert_eq!((e.word, e.found.as_deref(), e.expected), (word, found, expected), "{text}: {e}");
    }
    for (text, word, found) in [
        ("reject  drop", 2, Some("drop")),
        (" reject", 1, Some("reject")),
        ("reject ", 2, None),
        ("reject\tdrop", 2, Some("drop")),
        ("reject comment \"a\"drop", 4, Some("drop")),
    ] {
        let e = err(text);
        assert_eq!((e.word, e.found.as_deref(), e.expected), (word, found, Expected::OneSpace), "{text:?}: {e}");
    }
    let open = err("reject comment \"open");
    assert_eq!((open.word, open.expected), (3, Expected::ClosingQuote));
    assert_eq!(err("ct status new").to_string(), "word 3 \"new\": expected \"dnat\"");
    assert_eq!(err("fib daddr type").to_string(), "end of the text: expected \"local\"");
    // The values the renderer's context will hold, read alone.
    assert_eq!("0x00004000".parse::<Num>(), Ok(Num::Hex { value: 0x4000, digits: 8 }));
    assert_eq!("16384".parse::<Num>(), Ok(Num::Dec(0x4000)));
    assert_eq!("0x".parse::<Num>().unwrap_err().expected, Expected::Number);
    assert_eq!("0x123456789".parse::<Num>().unwrap_err().expected, Expected::Number);
    assert_eq!("fd00:10:96::/112".parse::<Prefix>().map(|p| p.to_string()).as_deref(), Ok("fd00:10:96::/112"));
    assert_eq!("10.0.0.0/x".parse::<Prefix>().unwrap_err().found.as_deref(), Some("10.0.0.0/x"));
    let line = parse_add_rule("add rule inet kube-proxy services jump x").unwrap_err();
    assert_eq!((line.word, line.expected), (3, Expected::Family));
}

//! Every nftables golden's cluster traces, in kube-proxy v1.34's table and in v1.36+'s: a
//! packet to each service address and port the table holds (its ClusterIPs, external and
//! load-balancer IPs, firewalled destinations, NodePorts on the node's addresses), from
//! outside the node and from the node, reaches a verdict without a trace error. So every
//! statement the renderer writes is one the tracer reads.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use super::nftables::trace;
use super::{Entry, Env, Packet, Verdict};
use crate::model::Protocol;
use crate::nftables::model::{NftFamily, Part, Table};
use crate::nftables::names::{FIREWALL_IPS, NODEPORT_IPS, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, SERVICE_IPS, SERVICE_NODEPORTS};
use crate::settings::kinds::{KubeProxyVersion, ProxyMode};
use crate::settings::Settings;

/// The clusters with an nftables golden (`golden/NAME.nft` is `fixtures/NAME.yaml`'s).
fn golden_fixtures() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stems: Vec<String> = std::fs::read_dir(root.join("golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nft"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems.into_iter().map(|s| root.join("fixtures").join(format!("{s}.yaml"))).collect()
}

/// `fixtures/NAME.yaml` loaded for nftables mode.
fn load(path: &Path) -> crate::pipeline::Loaded {
    let state = crate::source::read_path(path).unwrap_or_else(|e| panic!("{e}"));
    let flags = Settings { mode: Some(ProxyMode::Nftables), ..Default::default() };
    crate::pipeline::load(state, flags, Default::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The table's transaction encodes from its rules' values into the batch its text encodes
/// into, byte for byte; else a failure.
fn encodes_alike(path: &Path, table: &Table, failures: &mut Vec<String>) {
    let script = crate::nftables::model::script(table, crate::nftables::model::Form::Transaction);
    match (crate::nftables::wire::encode_script(&script, None), crate::nftables::wire::encode(script.text())) {
        (Ok(values), Ok(text)) if values.bytes() == text.bytes() && values.lines == text.lines => {}
        (Ok(_), Ok(_)) => failures.push(format!("{} ({:?}): the values encode otherwise than the text", path.display(), table.family)),
        (Err(e), _) | (_, Err(e)) => failures.push(format!("{} ({:?}): {e}", path.display(), table.family)),
    }
}

/// The node's addresses of the table's family, and where packets come from: outside the
/// node, and the node's first address.
fn sources(table: &Table, local: &BTreeSet<IpAddr>) -> (Vec<IpAddr>, Vec<(IpAddr, Entry)>) {
    let v6 = table.family == crate::net::IpFamily::V6;
    let node: Vec<IpAddr> = local.iter().copied().filter(|ip| ip.is_ipv6() == v6).collect();
    let outside: IpAddr = if v6 { "2001:db8::9".parse().unwrap() } else { "203.0.113.9".parse().unwrap() };
    let mut sources = vec![(outside, Entry::Prerouting)];
    sources.extend(node.first().map(|&ip| (ip, Entry::Output)));
    (node, sources)
}

/// Each service destination of `table`: address, protocol, port. NodePorts are on the
/// `nodeport-ips` when the table has them, else on the node's addresses of its family.
fn destinations(table: &Table, node: &[IpAddr]) -> BTreeSet<(IpAddr, Protocol, u16)> {
    let nodeport_ips: Vec<IpAddr> = table
        .objects
        .elements
        .iter()
        .filter(|e| e.set == NODEPORT_IPS)
        .filter_map(|e| match e.key.parts() {
            [Part::Addr(ip)] => Some(*ip),
            _ => None,
        })
        .collect();
    let nodeport_ips = if table.objects.sets.iter().any(|s| s.name == NODEPORT_IPS) { nodeport_ips } else { node.to_vec() };
    let mut out = BTreeSet::new();
    for e in &table.objects.elements {
        let set = e.set.as_str();
        match *e.key.parts() {
            [Part::Addr(addr), Part::Proto(proto), Part::Port(port)] if [SERVICE_IPS, NO_ENDPOINT_SERVICES, FIREWALL_IPS].contains(&set) => {
                out.insert((addr, proto, port));
            }
            [Part::Proto(proto), Part::Port(port)] if [SERVICE_NODEPORTS, NO_ENDPOINT_NODEPORTS].contains(&set) => {
                for ip in &nodeport_ips {
                    out.insert((*ip, proto, port));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_golden_cluster_traces_to_a_verdict_in_both_tables() {
    let fixtures = golden_fixtures();
    let (mut traced, mut failures, mut tables) = (0, Vec::new(), BTreeSet::new());
    for path in &fixtures {
        let loaded = load(path);
        let mut local: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().collect();
        local.extend(loaded.config.interface_addresses.iter().flatten().copied());
        let env = Env { local_ips: local.iter().copied().chain(["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]).collect(), affinity: BTreeSet::new() };
        for version in [KubeProxyVersion::V1_34, KubeProxyVersion::NEWEST] {
            let mut config = loaded.config.clone();
            config.kube_proxy_version = version;
            for rs in crate::nftables::render_all(&config, &loaded.trackers) {
                let table = rs.table();
                encodes_alike(path, &table, &mut failures);
                let (node, sources) = sources(&table, &local);
                for (dst, protocol, dport) in destinations(&table, &node) {
                    for &(src, entry) in &sources {
                        let packet = Packet { src, dst, protocol, dport, in_interface: None };
                        let what = format!("{} ({version}, {:?}): {src} -> {dst} {protocol:?} {dport} ({entry:?})", path.display(), table.family);
                        match trace(&table, &env, packet, entry) {
                            Ok(t) if !t.outcomes.is_empty() && t.outcomes.iter().all(|o| o.verdict != Verdict::Undecided) => {
                                traced += 1;
                                tables.insert((version.as_str(), table.family.nft_word()));
                            }
                            Ok(t) => failures.push(format!("{what}: undecided: {:?}", t.outcomes)),
                            Err(e) => failures.push(format!("{what}: {e}")),
                        }
                    }
                }
            }
        }
    }
    eprintln!("{} goldens, {traced} packets traced", fixtures.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(fixtures.len() > 50 && traced > 500, "{} goldens, {traced} packets traced", fixtures.len());
    assert_eq!(tables.len(), 4, "both tables of both families traced: {tables:?}");
}

/// Every rule of every nftables golden (the table rendered for its cluster, whose `add
/// rule` lines are the golden's, byte for byte) is values that its text reads back into,
/// that the netlink encoder encodes (the table's transaction encoded from its rules' values
/// is the batch its text encodes into, byte for byte), and whose every statement the
/// tracer runs.
#[test]
fn every_golden_rule_reads_back_encodes_and_traces() {
    use crate::nftables::model::rule_line;
    use crate::nftables::stmt::parse_add_rule;
    use crate::nftables::wire::{expr, Batch};

    let fixtures = golden_fixtures();
    let (mut rules, mut statements, mut failures) = (0, 0, Vec::new());
    for path in &fixtures {
        let golden = std::fs::read_to_string(path.with_extension("nft").to_string_lossy().replace("/fixtures/", "/golden/")).unwrap();
        let want: Vec<&str> = golden.lines().filter(|l| l.starts_with("add rule ")).collect();
        let loaded = load(path);
        let env = Env { local_ips: loaded.config.node_ips.iter().copied().collect(), affinity: BTreeSet::new() };
        let mut got = Vec::new();
        for rs in crate::nftables::render_all(&loaded.config, &loaded.trackers) {
            let table = rs.table();
            let head = format!("{} {}", table.family.nft_word(), table.name);
            let mut batch = Batch::default();
            for r in &table.objects.rules {
                let mut line = String::new();
                rule_line(&mut line, &head, r);
                let line = line.trim_end_matches('\n').to_owned();
                let what = format!("{}: {line}", path.display());
                match parse_add_rule(&line) {
                    Ok(read) if read.body == *r.stmts() && read.chain == r.chain => {}
                    Ok(read) => failures.push(format!("{what}: reads back as {:?}", read.body)),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
                if let Err(e) = expr::body(&mut batch, table.family, table.name, r.stmts()) {
                    failures.push(format!("{what}: {e}"));
                }
                got.push(line);
                rules += 1;
            }
            encodes_alike(path, &table, &mut failures);
            let v6 = table.family == crate::net::IpFamily::V6;
            let (src, dst) = if v6 { ("2001:db8::9", "fd00:10:96::1") } else { ("203.0.113.9", "10.96.0.1") };
            let packet = Packet { src: src.parse().unwrap(), dst: dst.parse().unwrap(), protocol: Protocol::Tcp, dport: 80, in_interface: None };
            match super::nftables::each_statement(&table, &env, &packet) {
                Ok(n) => statements += n,
                Err(e) => failures.push(format!("{} ({:?}): {e}", path.display(), table.family)),
            }
        }
        if got != want {
            failures.push(format!("{}: the rendered rules are not the golden's ({} rendered, {} in the golden)", path.display(), got.len(), want.len()));
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(fixtures.len() > 50 && rules > 1000 && statements > rules, "{} goldens, {rules} rules, {statements} statements", fixtures.len());
}

/// The cold start's interim table of every golden cluster (every numgen map rewritten, in
/// both table versions and families) sends each packet of [`destinations`] where
/// kube-proxy's table sends it, with the same shares: the same verdicts, masquerade and
/// probabilities (to rounding), from outside and from the node, with and without the
/// source in an affinity set. It binds no numgen map, and its rules encode.
#[test]
fn every_golden_clusters_interim_table_traces_as_kube_proxys() {
    use std::collections::BTreeMap;

    use crate::nftables::cold;
    use crate::nftables::stmt::{Match, Stmt};
    use crate::nftables::wire::{expr, Batch};

    /// Each (verdict, masquerade)'s share.
    fn shares(t: &super::nftables::Trace) -> BTreeMap<(String, bool), f64> {
        let mut out = BTreeMap::new();
        for o in &t.outcomes {
            *out.entry((o.verdict.to_string(), o.masquerade)).or_insert(0.0) += o.probability;
        }
        out
    }

    let fixtures = golden_fixtures();
    let (mut compared, mut draws, mut failures) = (0, 0, Vec::new());
    for path in &fixtures {
        let loaded = load(path);
        let local: BTreeSet<IpAddr> = loaded.config.node_ips.iter().copied().chain(["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]).collect();
        for version in [KubeProxyVersion::V1_34, KubeProxyVersion::NEWEST] {
            let mut config = loaded.config.clone();
            config.kube_proxy_version = version;
            for rs in crate::nftables::render_all(&config, &loaded.trackers) {
                let table = rs.table();
                let Some(interim) = cold::interim(&table, 1) else { continue };
                let what = format!("{} ({version}, {:?})", path.display(), table.family);
                let mut batch = Batch::default();
                for r in &interim.table.objects.rules {
                    if r.stmts().binds_anonymous_set() && r.text().contains("numgen") {
                        failures.push(format!("{what}: the interim binds a numgen map: {}", r.text()));
                    }
                    draws += r.stmts().stmts.iter().filter(|s| matches!(s, Stmt::Match(Match::Numgen { .. }))).count();
                    if let Err(e) = expr::body(&mut batch, table.family, table.name, r.stmts()) {
                        failures.push(format!("{what}: {}: {e}", r.text()));
                    }
                }
                let (node, sources) = sources(&table, &local);
                // The first affinity set's endpoint pinned, as `--affinity` pins one.
                let pinned: BTreeSet<String> = table.objects.sets.iter().find(|s| s.name.starts_with("affinity-")).map(|s| s.name.clone()).into_iter().collect();
                for affinity in [BTreeSet::new(), pinned] {
                    let env = Env { local_ips: local.clone(), affinity };
                    for (dst, protocol, dport) in destinations(&table, &node) {
                        for &(src, entry) in &sources {
                            let packet = Packet { src, dst, protocol, dport, in_interface: None };
                            let (want, got) = match (trace(&table, &env, packet.clone(), entry), trace(&interim.table, &env, packet, entry)) {
                                (Ok(w), Ok(g)) => (shares(&w), shares(&g)),
                                (Err(e), _) | (_, Err(e)) => {
                                    failures.push(format!("{what}: {src} -> {dst}:{dport}: {e}"));
                                    continue;
                                }
                            };
                            let same = want.len() == got.len() && want.iter().zip(&got).all(|((wk, wp), (gk, gp))| wk == gk && (wp - gp).abs() < 1e-9);
                            if !same {
                                failures.push(format!("{what}: {src} -> {dst} {protocol:?} {dport} ({entry:?}): kube-proxy's table {want:?}, the interim {got:?}"));
                            }
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{} goldens, {compared} packets traced through both, {draws} numgen comparisons", fixtures.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(compared > 500 && draws > 50, "{compared} packets compared, {draws} numgen comparisons");
}

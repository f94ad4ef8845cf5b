//! Issue 37's cold start on the real kernel (`nftables_cold_start_*`): "a cold start's
//! interim state serves every Service at every step", with real packets.
//! - `cold::interim` of the rendered tables (kube-proxy v1.37's and v1.34's, both
//!   families), each `numgen random mod N` map replaced by rules that bind no set (N = 1:
//!   what it selects; N ≥ 2: `numgen random mod (N-i) == 0` draws), is applied into an
//!   empty kernel over netlink; then every ClusterIP port (TCP and UDP, v4 and v6) from a
//!   pod and both NodePorts from outside reach exactly their Service's endpoints (each of
//!   two or three at least once; with ClientIP affinity, one). Then each batch of `cold::conversion` (a small bound: one chain a batch) is
//!   applied alone (the second ip one after a partial sync's lines that rewrite the last
//!   interim chain's service in kube-proxy's form, one transaction, as a watch's partial
//!   sync carries a batch), and after each the same connections are made again. At the end the
//!   kernel lists what `nft -f` of kube-proxy's table lists in a fresh namespace.
//! - the binary (`SVCPROXY_NFT_INTERIM_MIN=1`) says its cold start went through the
//!   interim table for both families, lists as the direct apply, then serves every
//!   Service; a dry run is clean, and a second sync (not cold) has no interim step and
//!   refills no chain (its live read finds the converted chains as wanted).
//! - the binary with the default knobs over [`cold::INTERIM_MIN`] one-endpoint Services: the
//!   interim table, a conversion in several batches, kube-proxy's table at the end, and a
//!   sample of the Services served.
//! - a restart in the middle of a conversion: the binary's sync over a half-converted table
//!   keeps the interim chains (none refilled), resumes their conversion, ends in the table.
//!
//! The cluster: one-endpoint Services (TCP, UDP, TCP+UDP with a NodePort, ClientIP
//! affinity, dual-stack), two- and three-endpoint ones (dual-stack; one with ClientIP
//! affinity), and an `externalTrafficPolicy: Local` NodePort whose `local-` chain has one
//! endpoint and its cluster chain two.

use std::time::{Duration, Instant};

use svcproxy::config::Settings;
use svcproxy::nftables::apply::{NftRead, NftWrite, Part};
use svcproxy::net::IpFamily;
use svcproxy::nftables::model::{self, Form, NftFamily, Table};
use svcproxy::nftables::{self, cold};

use crate::dataplane::{self, cluster_yaml, ep4, ep6, svc, tcp, udp, Port, Svc, CLIENT, CLIENT_IP4, CLIENT_IP6, NODE, OTHER_NODE};
use crate::harness::{Case, CaseError, CaseResult, Ctx};
use crate::netns::{self, Backend, Lab, Ns, Proto, Where};
use crate::nft_chunked::{clear, with_netlink};
use crate::svcproxy::{bin, path_str, temp_yaml};

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("nftables_cold_start_interim_serves_every_service_at_every_step", every_step).with_timeout(Duration::from_secs(480)),
        Case::new("nftables_cold_start_of_the_binary_goes_through_the_interim_table", binary).with_timeout(Duration::from_secs(180)),
        Case::new("nftables_cold_start_over_the_default_bound_converts_in_several_batches", over_the_bound).with_timeout(Duration::from_secs(300)),
        Case::new("nftables_restart_in_the_middle_of_a_conversion_resumes_it", restart_mid_conversion).with_timeout(Duration::from_secs(180)),
    ]
}

const CLUSTER_CIDRS: &str = "198.18.0.0/16,fd00:18::/32";
/// A conversion batch's bound: every interim chain goes in a batch of its own.
const SMALL_BATCHES: usize = 3;
/// The conversion's batches per family, at most (a bound on the loop; the cluster has fewer chains).
const MAX_BATCHES: usize = 32;
const NP_CLUSTER: u16 = 30080;
const NP_LOCAL: u16 = 30081;

fn cluster() -> Vec<Svc> {
    let mut one_tcp = svc("one-tcp", "198.19.255.10", vec![tcp("http", 80)], vec![ep4(1)]);
    one_tcp.cluster_ips.push("fd00:19:ff::10".into());
    one_tcp.eps6 = vec![ep6(1)];
    let mut one_udp = svc("one-udp", "198.19.255.11", vec![udp("dns", 53)], vec![ep4(2)]);
    one_udp.cluster_ips.push("fd00:19:ff::11".into());
    one_udp.eps6 = vec![ep6(2)];
    let mut one_both = svc("one-both", "198.19.255.12", vec![Port { node_port: Some(NP_CLUSTER), ..tcp("http", 80) }, udp("dns", 53)], vec![ep4(3)]);
    one_both.ty = "NodePort";
    one_both.cluster_ips.push("fd00:19:ff::12".into());
    one_both.eps6 = vec![ep6(3)];
    let mut two_tcp = svc("two-tcp", "198.19.255.13", vec![tcp("http", 80)], vec![ep4(1), ep4(2)]);
    two_tcp.cluster_ips.push("fd00:19:ff::13".into());
    two_tcp.eps6 = vec![ep6(1), ep6(2)];
    let two_udp = svc("two-udp", "198.19.255.14", vec![udp("dns", 53)], vec![ep4(2), ep4(3)]);
    let mut sticky = svc("sticky", "198.19.255.15", vec![tcp("http", 80)], vec![ep4(1)]);
    sticky.affinity = true;
    // Cluster-wide two endpoints (a map); the local chain one (rewritten).
    let mut local = svc("local-np", "198.19.255.16", vec![Port { node_port: Some(NP_LOCAL), ..tcp("http", 80) }], vec![ep4(2), ep4(3).on(OTHER_NODE)]);
    local.ty = "NodePort";
    local.etp_local = true;
    let mut three_tcp = svc("three-tcp", "198.19.255.17", vec![tcp("http", 80)], vec![ep4(1), ep4(2), ep4(3)]);
    three_tcp.cluster_ips.push("fd00:19:ff::17".into());
    three_tcp.eps6 = vec![ep6(1), ep6(2), ep6(3)];
    let mut sticky_two = svc("sticky-two", "198.19.255.18", vec![tcp("http", 80)], vec![ep4(1), ep4(3)]);
    sticky_two.affinity = true;
    sticky_two.cluster_ips.push("fd00:19:ff::18".into());
    sticky_two.eps6 = vec![ep6(1), ep6(3)];
    vec![one_tcp, one_udp, one_both, two_tcp, two_udp, sticky, local, three_tcp, sticky_two]
}

/// A connection target and the pods that may (and, with two or more, each must) answer.
struct Target {
    from: Where<'static>,
    dst: &'static str,
    port: u16,
    proto: Proto,
    pods: &'static [&'static str],
    /// Whether the pods see the client's own address (else the node's: masqueraded).
    kept: bool,
    /// ClientIP affinity: one of `pods` answers every attempt.
    sticky: bool,
}

fn targets() -> Vec<Target> {
    let pod = |dst, port, proto, pods| Target { from: Where::Pod(CLIENT), dst, port, proto, pods, kept: true, sticky: false };
    let sticky = |dst, pods| Target { sticky: true, ..pod(dst, 80, Proto::Tcp, pods) };
    vec![
        pod("198.19.255.10", 80, Proto::Tcp, &["pod1"]),
        pod("fd00:19:ff::10", 80, Proto::Tcp, &["pod1"]),
        pod("198.19.255.11", 53, Proto::Udp, &["pod2"]),
        pod("fd00:19:ff::11", 53, Proto::Udp, &["pod2"]),
        pod("198.19.255.12", 80, Proto::Tcp, &["pod3"]),
        pod("198.19.255.12", 53, Proto::Udp, &["pod3"]),
        pod("fd00:19:ff::12", 53, Proto::Udp, &["pod3"]),
        pod("198.19.255.13", 80, Proto::Tcp, &["pod1", "pod2"]),
        pod("fd00:19:ff::13", 80, Proto::Tcp, &["pod1", "pod2"]),
        pod("198.19.255.14", 53, Proto::Udp, &["pod2", "pod3"]),
        pod("198.19.255.15", 80, Proto::Tcp, &["pod1"]),
        pod("198.19.255.16", 80, Proto::Tcp, &["pod2", "pod3"]),
        pod("198.19.255.17", 80, Proto::Tcp, &["pod1", "pod2", "pod3"]),
        pod("fd00:19:ff::17", 80, Proto::Tcp, &["pod1", "pod2", "pod3"]),
        sticky("198.19.255.18", &["pod1", "pod3"]),
        sticky("fd00:19:ff::18", &["pod1", "pod3"]),
        Target { from: Where::External, dst: netns::NODE_IP4, port: NP_CLUSTER, proto: Proto::Tcp, pods: &["pod3"], kept: false, sticky: false },
        Target { from: Where::External, dst: netns::NODE_IP6, port: NP_CLUSTER, proto: Proto::Tcp, pods: &["pod3"], kept: false, sticky: false },
        Target { from: Where::External, dst: netns::NODE_IP4, port: NP_LOCAL, proto: Proto::Tcp, pods: &["pod2"], kept: true, sticky: false },
    ]
}

/// Every target reached, by its Service's endpoints only, from the source address
/// kube-proxy's rules give (new conntrack entries: the rules as they are now decide).
fn serves(ctx: &Ctx, lab: &Lab, step: &str) -> CaseResult {
    lab.conntrack_flush()?;
    let t0 = Instant::now();
    let all = targets();
    for t in &all {
        // Each endpoint answers at least once: one of two misses by chance 2 in 2^24, one of
        // three 3 in (3/2)^40 (one in 3.7 million); a run makes a few hundred such checks.
        let n = match t.pods.len() {
            _ if t.sticky => 6,
            1 => 4,
            2 => 24,
            _ => 40,
        };
        let tally = dataplane::connect(ctx, lab, t.from, t.dst, t.port, t.proto, n)?;
        let what = format!("{step}: {} {:?} -> {}:{}", t.proto.name(), t.from, t.dst, t.port);
        if t.sticky {
            let chosen: Vec<&str> = t.pods.iter().copied().filter(|p| tally.count(p) > 0).collect();
            ensure!(chosen.len() == 1, "{what}: ClientIP affinity, one endpoint of {:?} answers every attempt: {tally}", t.pods);
            dataplane::spread(&tally, &chosen, &what)?;
        } else {
            dataplane::spread(&tally, t.pods, &what)?;
        }
        let v6 = t.dst.contains(':');
        let sources: Vec<String> = match (t.kept, t.from) {
            (true, Where::External) => vec![(if v6 { netns::EXT_IP6 } else { netns::EXT_IP4 }).to_string()],
            (true, _) => vec![(if v6 { CLIENT_IP6 } else { CLIENT_IP4 }).to_string()],
            (false, _) => t.pods.iter().map(|p| if v6 { dataplane::masq6(lab, p) } else { dataplane::masq4(lab, p) }).collect(),
        };
        dataplane::sources_are(&tally, &sources.iter().map(String::as_str).collect::<Vec<_>>(), &what)?;
    }
    ctx.log(format!("{step}: all {} targets served by their endpoints ({} ms)", all.len(), t0.elapsed().as_millis()));
    Ok(())
}

fn flags(version: &str) -> Result<Settings, String> {
    let mut s = Settings::default();
    let given = [
        ("proxy-mode", "nftables"),
        ("hostname-override", NODE),
        ("node-ip", netns::NODE_IP4),
        ("node-ip", netns::NODE_IP6),
        ("cluster-cidr", CLUSTER_CIDRS),
        ("kube-proxy-version", version),
    ];
    for (flag, value) in given {
        s.set_from_flag(flag, value).ok_or(format!("no setting has the flag --{flag}"))?.map_err(|e| format!("--{flag} {value}: {e}"))?;
    }
    Ok(s)
}

/// Both families' tables of `path`, as `svcproxy sync` with [`binary_args`] renders them.
fn render(path: &std::path::Path, version: &str) -> Result<Vec<Table>, String> {
    let state = svcproxy::source::read_path(path).map_err(|e| e.to_string())?;
    let loaded = svcproxy::pipeline::load(state, flags(version)?, Settings::default()).map_err(|e| e.to_string())?;
    Ok(nftables::render_all(&loaded.config, &loaded.trackers).iter().map(|r| r.table()).collect())
}

/// One transaction over svcproxy's netlink writer in `ns`, anonymous sets numbered above
/// those the kernel holds (as a sync numbers them); it must not fall back to `nft -f`.
fn apply(ns: &Ns, table: &Table, text: String) -> Result<(), String> {
    let family = table.family;
    with_netlink(ns, nftables::chunked::CHUNK_LINES, move |nl| {
        nl.names(family).map_err(|e| e.to_string())?;
        nl.run(&text, Part::Alone).map_err(|e| e.to_string())?;
        if nl.fallbacks > 0 {
            return Err("the transaction was not encodable as netlink".to_string());
        }
        Ok(())
    })?
}

/// What the kernel lists after `nft -f` of `tables` (kube-proxy's one transaction) in `fresh`.
fn direct(fresh: &Ns, tables: &[Table]) -> Result<String, String> {
    clear(fresh);
    for t in tables {
        fresh.run_stdin(&["nft", "-f", "-"], Some(&model::write(t, Form::Transaction))).map_err(|e| format!("nft -f of the {} table: {e}", t.family.nft_word()))?;
    }
    let listed = listing(fresh);
    clear(fresh);
    Ok(listed)
}

/// Both families' tables as `nft` lists them, without the elements traffic added (the
/// affinity sets' `expires` entries): what the rules made, comparable after connections.
fn listing(ns: &Ns) -> String {
    let mut out = String::new();
    for f in ["ip", "ip6"] {
        let text = ns.run(&["nft", "list", "table", f, "kube-proxy"]).unwrap_or_default();
        let mut block: Option<String> = None;
        for line in text.lines() {
            let b = match block.take() {
                Some(b) => b + line + "\n",
                None if line.trim_start().starts_with("elements = {") => line.to_string() + "\n",
                None => {
                    out.push_str(line);
                    out.push('\n');
                    continue;
                }
            };
            if !line.trim_end().ends_with('}') {
                block = Some(b);
            } else if !b.contains(" expires ") {
                out.push_str(&b);
            }
        }
    }
    out
}

fn first_difference(a: &str, b: &str) -> String {
    let at = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or_else(|| a.lines().count().min(b.lines().count()));
    format!("at line {}:\n  got:  {:?}\n  want: {:?}", at + 1, a.lines().nth(at).unwrap_or("(end)"), b.lines().nth(at).unwrap_or("(end)"))
}

fn lab(ctx: &Ctx) -> Result<(Lab, Lab), CaseError> {
    ctx.require(&["ip", "conntrack", "sysctl", "kill", "nft", "env"])?;
    let lab = dataplane::lab(ctx, Backend::Nft, &[1, 2, 3], true)?;
    let fresh = Lab::new("nftcoldref")?;
    Ok((lab, fresh))
}

fn every_step(ctx: &mut Ctx) -> CaseResult {
    let (lab, fresh) = lab(ctx)?;
    let node = lab.node();
    let path = temp_yaml(&cluster_yaml(&cluster()))?;
    for version in ["1.37", "1.34"] {
        clear(node);
        let tables = render(&path, version)?;
        ensure!(tables.len() == 2, "{version}: {} tables rendered, want ip and ip6", tables.len());
        let mut interims = Vec::new();
        for t in &tables {
            let i = cold::interim(t, 1).ok_or(format!("{version} {}: no one-endpoint map to rewrite", t.family.nft_word()))?;
            ensure!(i.table.objects.chains == t.objects.chains, "{version}: the interim table has other chains");
            ctx.log(format!("{version} {}: interim chains {:?}", t.family.nft_word(), i.chains));
            apply(node, t, model::write(&i.table, Form::Transaction)).map_err(|e| format!("{version}: the interim {} table: {e}", t.family.nft_word()))?;
            interims.push(i);
        }
        let interim_listing = listing(node);
        ensure!(!interim_listing.contains(" vmap {") && !interim_listing.contains(" map {"), "{version}: the interim table still binds a numgen map:\n{interim_listing}");
        // The kernel lists a draw without `==`.
        for draw in ["numgen random mod 3 0 ", "numgen random mod 2 0 "] {
            ensure!(interim_listing.contains(draw), "{version}: the interim table lacks {draw:?}:\n{interim_listing}");
        }
        serves(ctx, &lab, &format!("{version} interim"))?;
        let mut steps = 0;
        for (t, i) in tables.iter().zip(&interims) {
            let batches = cold::conversion(t, &i.chains, SMALL_BATCHES);
            ensure!(batches.len() >= 2 && batches.len() <= MAX_BATCHES, "{version} {}: {} conversion batches, want several (one chain each)", t.family.nft_word(), batches.len());
            if t.family == IpFamily::V4 {
                ensure!(batches.len() == i.chains.len() && i.chains.len() >= 5, "{version}: {} batches for {} chains", batches.len(), i.chains.len());
            }
            for (k, b) in batches.iter().enumerate() {
                // The second ip batch goes as a watch's partial sync carries it.
                let text = match i.chains.last() {
                    Some(last) if t.family == IpFamily::V4 && k == 1 => {
                        ctx.log(format!("{version} ip batch 2: carried after a partial sync's lines that rewrite {last}'s service"));
                        carried(t, last, b)?
                    }
                    _ => b.clone(),
                };
                apply(node, t, text).map_err(|e| format!("{version} {} batch {}: {e}\n{b}", t.family.nft_word(), k + 1))?;
                serves(ctx, &lab, &format!("{version} {} after batch {}/{}", t.family.nft_word(), k + 1, batches.len()))?;
                steps += 1;
            }
        }
        let converted = listing(node);
        let want = direct(fresh.node(), &tables)?;
        ensure!(converted == want, "{version}: the converted table lists otherwise than kube-proxy's applied directly, {}", first_difference(&converted, &want));
        ensure!(converted.contains("numgen random mod 1 ") && converted.contains("numgen random mod 3 "), "{version}: the converted table lacks kube-proxy's maps");
        ensure!(!converted.contains("numgen random mod 2 0 "), "{version}: a draw of the interim is left");
        ctx.log(format!("{version}: interim and {steps} conversion batches each served every Service; the end lists as kube-proxy's table ({} lines)", converted.lines().count()));
    }
    clear(node);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// `batch` in one transaction after a partial sync's lines that rewrite the service of
/// interim `chain` (its chains, in kube-proxy's form, as a change to it writes them; its
/// elements unchanged), as a watch's partial sync carries a conversion batch.
fn carried(t: &Table, chain: &str, batch: &str) -> Result<String, String> {
    let service = chain.splitn(3, '-').nth(2).ok_or(format!("{chain}: no service in the name"))?;
    let objects = model::Objects {
        chains: t.objects.chains.iter().filter(|c| c.name.contains(service)).cloned().collect(),
        rules: t.objects.rules.iter().filter(|r| r.chain.contains(service)).cloned().collect(),
        ..model::Objects::default()
    };
    let p = nftables::partial::partial(t.family, nftables::names::TABLE, &[&objects], &[&objects]);
    if objects.rules.is_empty() || !p.text.contains(&format!("flush chain {} {} {chain}\n", t.family.nft_word(), nftables::names::TABLE)) || !p.delete.is_empty() {
        return Err(format!("{chain}: the partial sync does not rewrite it alone:\n{}", p.text.text()));
    }
    Ok(format!("{}{batch}", p.text.text()))
}

fn binary_args(path: &str) -> Vec<&str> {
    vec!["sync", "--proxy-mode", "nftables", "--from", path, "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--node-ip", netns::NODE_IP6, "--cluster-cidr", CLUSTER_CIDRS, "--iptables-backend", "nft"]
}

/// `svcproxy sync` with every one-endpoint map count over the interim bound.
fn binary_sync(ns: &Ns, path: &str, extra: &[&str]) -> Result<(String, String), String> {
    let mut argv = vec!["env", "SVCPROXY_NFT_INTERIM_MIN=1", bin()];
    argv.extend(binary_args(path));
    argv.extend_from_slice(extra);
    let out = ns.exec(&argv)?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    if out.status.code() != Some(0) {
        return Err(format!("svcproxy {}: exit {:?}\nstderr:\n{stderr}", argv.join(" "), out.status.code()));
    }
    Ok((stdout, stderr))
}

fn binary(ctx: &mut Ctx) -> CaseResult {
    let (lab, fresh) = lab(ctx)?;
    let node = lab.node();
    let path = temp_yaml(&cluster_yaml(&cluster()))?;
    let p = path_str(&path).to_string();
    clear(node);
    let (_, err) = binary_sync(node, &p, &[])?;
    ctx.log(&err);
    let cold: Vec<&str> = err.lines().filter(|l| l.contains("cold start: every Service served after")).collect();
    ensure!(cold.len() == 2, "both families' cold start goes through the interim table, stderr:\n{err}");
    let want = direct(fresh.node(), &render(&path, "1.37")?)?;
    let got = listing(node);
    ensure!(got == want, "the binary's cold start lists otherwise than kube-proxy's table applied directly, {}", first_difference(&got, &want));
    let (diff, _) = binary_sync(node, &p, &["--dry-run"])?;
    ensure!(diff.trim().is_empty(), "a dry run after the cold start wants changes:\n{diff}");
    serves(ctx, &lab, "after the binary's cold start")?;
    let (_, again) = binary_sync(node, &p, &[])?;
    ctx.log(&again);
    ensure!(!again.contains("cold start"), "a sync over the live table is no cold start:\n{again}");
    let summaries: Vec<&str> = again.lines().filter(|l| l.contains("(nftables): ") && l.contains(" refilled")).collect();
    ensure!(summaries.len() == 2 && summaries.iter().all(|l| l.contains(" 0 refilled, 0 element change(s)")), "the live read finds the converted chains as the table wants them (none refilled):\n{again}");
    let second = listing(node);
    ensure!(second == want, "the second sync changed the table, {}", first_difference(&second, &want));
    clear(node);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// A restart in the middle of a conversion: the interim tables applied, half of the ip
/// family's chains converted, then the binary's sync over that table keeps the interim
/// chains serving (none refilled), converts them, and ends in kube-proxy's table.
fn restart_mid_conversion(ctx: &mut Ctx) -> CaseResult {
    let (lab, fresh) = lab(ctx)?;
    let node = lab.node();
    let path = temp_yaml(&cluster_yaml(&cluster()))?;
    let p = path_str(&path).to_string();
    clear(node);
    let tables = render(&path, "1.37")?;
    let mut left = 0;
    for t in &tables {
        let i = cold::interim(t, 1).ok_or(format!("{}: no one-endpoint map to rewrite", t.family.nft_word()))?;
        apply(node, t, model::write(&i.table, Form::Transaction)).map_err(|e| format!("the interim {} table: {e}", t.family.nft_word()))?;
        let converted = if t.family == IpFamily::V4 { i.chains.len() / 2 } else { 0 };
        ensure!(t.family == IpFamily::V6 || converted >= 2, "too few ip chains to convert half: {:?}", i.chains);
        for b in cold::conversion(t, &i.chains[..converted], SMALL_BATCHES) {
            apply(node, t, b).map_err(|e| format!("a conversion batch: {e}"))?;
        }
        left += i.chains.len() - converted;
    }
    serves(ctx, &lab, "half converted")?;
    let (_, err) = binary_sync(node, &p, &[])?;
    ctx.log(&err);
    let resumed: usize = err.lines().filter_map(|l| l.split("conversion resumed: ").nth(1)?.split(' ').next()?.parse::<usize>().ok()).sum();
    ensure!(resumed == left && !err.contains("cold start: every Service"), "the {left} chains left in the interim's form are kept and converted, stderr:\n{err}");
    let summaries: Vec<&str> = err.lines().filter(|l| l.contains("(nftables): ") && l.contains(" refilled")).collect();
    ensure!(summaries.len() == 2 && summaries.iter().all(|l| l.contains(" 0 refilled")), "no chain refilled by the sync itself:\n{err}");
    let want = direct(fresh.node(), &tables)?;
    let got = listing(node);
    ensure!(got == want, "after the resumed conversion the table lists otherwise than kube-proxy's, {}", first_difference(&got, &want));
    serves(ctx, &lab, "after the resumed conversion")?;
    clear(node);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Over the default bound: every Service one endpoint, one ClusterIP of [`MANY_CIDR`].
const MANY: usize = cold::INTERIM_MIN + 500;
const MANY_CIDR: &str = "198.19.32.0/20";

fn many_ip(i: usize) -> String {
    format!("198.19.{}.{}", 32 + i / 250, 1 + i % 250)
}

fn many_pod(i: usize) -> u8 {
    1 + (i % 3) as u8
}

/// `MANY` Services and their slices, written directly (the builders take static names).
fn many_yaml() -> String {
    let mut y = String::new();
    for i in 0..MANY {
        let (ip, ep) = (many_ip(i), dataplane::pod_ip4(many_pod(i)));
        y.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: many}}\nspec:\n  type: ClusterIP\n  clusterIP: \"{ip}\"\n  clusterIPs: [\"{ip}\"]\n  ipFamilies: [IPv4]\n  ports: [{{name: http, port: 80, protocol: TCP, targetPort: {port}}}]\n",
            port = dataplane::EP_PORT
        ));
        y.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{i}-v4, namespace: many, labels: {{kubernetes.io/service-name: s{i}}}}}\naddressType: IPv4\nendpoints:\n- addresses: [\"{ep}\"]\n  conditions: {{ready: true, serving: true, terminating: false}}\n  nodeName: {NODE}\nports: [{{name: http, port: {port}, protocol: TCP}}]\n",
            port = dataplane::EP_PORT
        ));
    }
    y
}

/// The binary, no knob set: the interim table and a conversion of every Service's chain
/// in batches of [`cold::CONVERSION_LINES`].
fn over_the_bound(ctx: &mut Ctx) -> CaseResult {
    let (lab, fresh) = lab(ctx)?;
    lab.route_service_cidr(MANY_CIDR)?;
    let node = lab.node();
    let path = temp_yaml(&many_yaml())?;
    let p = path_str(&path).to_string();
    clear(node);
    // The default bound: no knob, whatever this process's environment holds.
    let mut argv = vec!["env", "-u", "SVCPROXY_NFT_INTERIM_MIN", "-u", "SVCPROXY_NFT_BATCH_LINES", bin()];
    argv.extend(binary_args(&p));
    let t = Instant::now();
    let out = node.exec_limit(&argv, None, Duration::from_secs(120))?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ctx.log(format!("sync of {MANY} Services: {} ms, exit {:?}\n{err}", t.elapsed().as_millis(), out.status.code()));
    ensure!(out.status.code() == Some(0), "the sync failed: {err}");
    let line = err.lines().find(|l| l.contains("ip (nftables): cold start: every Service served after")).ok_or(format!("no interim cold start for the ip family:\n{err}"))?;
    ensure!(line.contains(&format!("{MANY} chain(s) to convert")), "every Service's chain is to be converted: {line}");
    let summary = err.lines().find(|l| l.contains("interim chain(s) converted to kube-proxy's rules in")).unwrap_or_default();
    ensure!(summary.contains(&format!("nftables: {MANY} interim chain(s) converted")), "every Service's chain is converted: {summary}");
    let batches: usize = summary.split(" batch(es)").next().and_then(|h| h.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    // Two lines a chain at least: several batches.
    ensure!(batches >= 2 * MANY / cold::CONVERSION_LINES, "the conversion goes in several batches: {summary}");
    let want = direct(fresh.node(), &render(&path, "1.37")?)?;
    let got = listing(node);
    ensure!(got == want, "the binary's cold start lists otherwise than kube-proxy's table applied directly, {}", first_difference(&got, &want));
    lab.conntrack_flush()?;
    for i in [0, 1, 2, MANY / 2, MANY - 3, MANY - 2, MANY - 1] {
        let pod = format!("pod{}", many_pod(i));
        let tally = dataplane::connect(ctx, &lab, Where::Pod(CLIENT), &many_ip(i), 80, Proto::Tcp, 3)?;
        dataplane::spread(&tally, &[pod.as_str()], &format!("service s{i}"))?;
    }
    clear(node);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

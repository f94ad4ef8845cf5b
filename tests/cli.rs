//! The binary end to end: exit codes, error messages that name file, line, object and
//! field, stdin input, JSON output, the man page and completions.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_svcproxy"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).current_dir(repo()).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("svcproxy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn render_demo_prints_the_golden() {
    let o = run(&["render", "--from", "fixtures/demo.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), std::fs::read_to_string(repo().join("golden/demo.iptables")).unwrap());
}

#[test]
fn render_reads_stdin() {
    let mut child = bin()
        .args(["render", "--from", "-", "--ip-family", "ipv4"])
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read_to_string(repo().join("fixtures/demo.yaml")).unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("-A KUBE-SERVICES -m comment --comment \"default/kubernetes:https cluster IP\""));
    assert!(!stdout(&o).contains("# ip6tables"));
}

#[test]
fn bad_field_exits_2_naming_file_line_object_and_field() {
    let p = temp_file(
        "bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: ok, namespace: ns}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec:\n  clusterIP: 10.0.0.2\n  externalIPs: [203.0.113.300]\n  ports: [{port: 80}]\n",
    );
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty(), "nothing is half-done: {}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("bad.yaml:6: Service shop/web: field spec.externalIPs[0]: invalid IP address \"203.0.113.300\""), "{e}");
}

#[test]
fn wrong_type_and_missing_field_are_named() {
    let p = temp_file("type.yaml", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, namespace: ns, labels: {kubernetes.io/service-name: web}}\nendpoints: []\n");
    let e = stderr(&run(&["render", "--from", p.to_str().unwrap()]));
    assert!(e.contains("type.yaml:1: EndpointSlice ns/s: field addressType: missing (want IPv4, IPv6 or FQDN)"), "{e}");
    let p = temp_file("type2.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ns}\nspec: {ports: [{port: \"eighty\"}]}\n");
    let e = stderr(&run(&["render", "--from", p.to_str().unwrap()]));
    assert!(e.contains("type2.yaml:1: Service ns/web: field spec.ports[0].port"), "{e}");
}

#[test]
fn fixture_options_are_settings_by_name_or_path_and_a_bad_one_is_named() {
    let svc = "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ns}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n";
    let fixture = |options: &str| format!("apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode: {{name: node-a}}\noptions: {{{options}}}\n{svc}");
    let p = temp_file("options.yaml", &fixture("ipFamily: ipv4, iptables.masqueradeBit: 12, randomFully: false"));
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rules = stdout(&o);
    assert!(rules.contains("-j MARK --or-mark 0x00001000\n"), "iptables.masqueradeBit acts: {rules}");
    assert!(rules.contains("requiring SNAT\" -j MASQUERADE\n") && !rules.contains("--random-fully"), "randomFully acts: {rules}");
    for (options, error) in [
        ("mode: userspace", "bad-options.yaml:1: SvcproxyFixture : field options.mode: \"userspace\" is not iptables, ipvs, nftables"),
        ("masqueradeBit: fourteen", "bad-options.yaml:1: SvcproxyFixture : field options.masqueradeBit: expected an integer, found \"fourteen\""),
        ("randomFuly: true", "bad-options.yaml:1: SvcproxyFixture : field options.randomFuly: unknown option `randomFuly`"),
    ] {
        let p = temp_file("bad-options.yaml", &fixture(options));
        let o = run(&["render", "--from", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{options}");
        assert!(stderr(&o).contains(error), "{options}: {}", stderr(&o));
    }
}

#[test]
fn malformed_yaml_and_missing_file_exit_2() {
    let p = temp_file("broken.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: [\n");
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("broken.yaml: line"), "{}", stderr(&o));
    let o = run(&["render", "--from", "/nonexistent/cluster.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/cluster.yaml: cannot read"), "{}", stderr(&o));
}

#[test]
fn other_kinds_are_skipped_with_a_note() {
    let p = temp_file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ns}\n");
    let o = run(&["render", "--from", p.to_str().unwrap(), "--hostname-override", "n"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("cm.yaml:1: skipped v1/ConfigMap ns/cfg"), "{}", stderr(&o));
}

#[test]
fn json_output_has_the_same_rules() {
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["family"], "ipv4");
    assert_eq!(v[1]["family"], "ipv6");
    let nat = &v[0]["tables"][1];
    assert_eq!(nat["table"], "nat");
    let n_rules: usize = nat["chains"].as_array().unwrap().iter().map(|c| c["rules"].as_array().unwrap().len()).sum();
    let text = std::fs::read_to_string(repo().join("golden/demo.iptables")).unwrap();
    let v4_nat = text.split("# ip6tables").next().unwrap().split("*nat").nth(1).unwrap();
    assert_eq!(n_rules, v4_nat.lines().filter(|l| l.starts_with("-A ")).count());
}

#[test]
fn man_page_is_generated_from_the_cli_and_up_to_date() {
    let o = run(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let committed = std::fs::read(repo().join("man/svcproxy.1")).unwrap_or_default();
    assert!(
        o.stdout == committed,
        "man/svcproxy.1 is stale: regenerate it with `cargo run -q -- man > man/svcproxy.1`"
    );
    assert!(stdout(&o).contains("hostname\\-override"), "flags are documented");
}

#[test]
fn completions_and_help_work() {
    let o = run(&["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("svcproxy"));
    let o = run(&["render", "--help"]);
    assert!(stdout(&o).contains("Examples:"));
    assert_eq!(run(&["render"]).status.code(), Some(2), "a missing --from is a usage error");
}

#[test]
fn flags_override_the_kube_proxy_config_file() {
    let cfg = temp_file(
        "kp.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\niptables:\n  masqueradeBit: 10\n  masqueradeAll: true\n",
    );
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--ip-family", "ipv4", "--config", cfg.to_str().unwrap(), "--masquerade-bit", "12"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("--or-mark 0x00001000"), "flag wins over the file");
    assert!(out.contains("--dport 53 -j KUBE-MARK-MASQ"), "masqueradeAll comes from the file");
}

/// The issue's invocation for kube-proxy's own scenarios, through the binary: the output
/// equals kube-proxy's expected ruleset after kube-proxy's test normalisation.
#[test]
fn upstream_scenarios_through_the_binary_equal_kube_proxy() {
    use support::iptables_check as check;
    for name in ["overall-iptables-rules", "bad-ips"] {
        let fixture = format!("fixtures/upstream/{name}.yaml");
        let o = run(&[
            "render", "--mode", "iptables", "--ip-family", "ipv4", "--from", &fixture,
            "--hostname-override", "test-node", "--node-ip", "192.168.0.2", "--cluster-cidr", "10.0.0.0/8",
            "--detect-local-mode", "ClusterCIDR", "--masquerade-bit", "14",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let normalised = check::sort_like_kube_proxy_tests(&svcproxy::xtables::dump::parse(&stdout(&o)).unwrap());
        let expected = std::fs::read_to_string(repo().join(format!("golden/upstream/{name}.kube-proxy"))).unwrap();
        assert_eq!(normalised, expected, "{name}");
    }
}

/// `svcproxy trace` answers the two questions operators ask of the demo cluster; the
/// outputs are pinned in golden/ (bless with SVCPROXY_BLESS=1 outside CI).
#[test]
fn trace_answers_the_demo_questions() {
    let cases: [(&str, &[&str]); 7] = [
        ("demo.trace-dns.txt", &["--src", "10.244.1.99", "--dst", "10.96.0.10:53", "--proto", "udp"]),
        ("demo.trace-lb-outside-ranges.txt", &["--src", "192.0.2.200", "--dst", "192.0.2.50:443", "--entry", "outside"]),
        ("demo.trace-ipvs-dns.txt", &["--mode", "ipvs", "--src", "10.244.1.99", "--dst", "10.96.0.10:53", "--proto", "udp"]),
        ("demo.trace-ipvs-lb-outside-ranges.txt", &["--mode", "ipvs", "--src", "192.0.2.200", "--dst", "192.0.2.50:443", "--entry", "outside"]),
        ("demo.trace-nft-dns.txt", &["--mode", "nftables", "--src", "10.244.1.99", "--dst", "10.96.0.10:53", "--proto", "udp"]),
        ("demo.trace-nft-lb-outside-ranges.txt", &["--mode", "nftables", "--src", "192.0.2.200", "--dst", "192.0.2.50:443", "--entry", "outside"]),
        ("demo.trace-socket-lb-affinity.txt", &["--socket-lb", "--src", "10.244.1.99", "--dst", "10.100.50.5:80"]),
    ];
    for (golden, extra) in cases {
        let mut args = vec!["trace", "--from", "fixtures/demo.yaml"];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let path = repo().join("golden").join(golden);
        support::check_golden(&path, &stdout(&o)).unwrap_or_else(|e| panic!("{golden}: {e}"));
    }
    let o = run(&["trace", "--from", "fixtures/demo.yaml", "--src", "10.244.1.99", "--dst", "10.96.0.10:53", "--proto", "udp", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let total: f64 = v["outcomes"].as_array().unwrap().iter().map(|o| o["probability"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-9, "branch probabilities add up to 1: {total}");
}

/// `--socket-lb`: a socket from a pod or the node to a ClusterIP is shown translated by
/// the programs (the plan of the same state: backends, shares, affinity) before the
/// rules; from outside, or to an address the programs leave to the rules, it is not.
#[test]
fn trace_socket_lb_shows_the_socket_path_first() {
    let json = |extra: &[&str]| -> serde_json::Value {
        let o = run(&[&["trace", "--socket-lb", "--from", "fixtures/demo.yaml", "--output", "json"][..], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for mode in ["iptables", "nftables", "ipvs"] {
        let t = json(&["--mode", mode, "--src", "10.244.1.99", "--dst", "10.100.50.5:80"]);
        let s = &t["socket_lb"];
        assert_eq!((s["source"].as_str(), s["service"].as_str(), s["protocol"].as_str()), (Some("plan"), Some("10.100.50.5:80"), Some("tcp")), "{mode}: {t}");
        assert_eq!(s["affinity_seconds"].as_u64(), Some(3600), "shop/cart's timeout");
        let branches: Vec<(&str, f64)> = s["branches"].as_array().unwrap().iter().map(|b| (b["verdict"].as_str().unwrap(), b["probability"].as_f64().unwrap())).collect();
        assert_eq!(branches, [("10.244.1.30:9000", 0.5), ("10.244.2.31:9000", 0.5)], "{mode}");
        assert!(!t["outcomes"].as_array().unwrap().is_empty(), "{mode}: the rules' trace follows");
    }
    let dns = json(&["--entry", "node", "--dst", "10.96.0.10:53", "--proto", "udp"]);
    assert!(dns["socket_lb"]["affinity_seconds"].is_null(), "no affinity: {dns}");
    let outside = json(&["--entry", "outside", "--src", "192.0.2.200", "--dst", "10.100.50.5:80"]);
    assert!(outside.get("socket_lb").is_none(), "from outside no local socket: {outside}");
    let lb = json(&["--src", "10.244.1.99", "--dst", "192.0.2.50:443"]);
    assert!(lb.get("socket_lb").is_none(), "a load-balancer IP with source ranges stays with the rules: {lb}");
    let off = run(&["trace", "--from", "fixtures/demo.yaml", "--src", "10.244.1.99", "--dst", "10.100.50.5:80"]);
    assert!(!stdout(&off).contains("socket:"), "without --socket-lb no socket path");
}

/// `--socket-lb` and a local socket to an external or load-balancer IP: translated to the
/// backends the rules short-circuit such traffic to (the same shares), or left to the
/// rules where the programs could not answer as they do (no local-traffic detector with
/// `externalTrafficPolicy: Local`, source ranges); in IPVS mode, the virtual server's real
/// servers. An `ipMode: Proxy` ingress is no Service address at all. One case is pinned
/// in golden/.
#[test]
fn trace_socket_lb_external_addresses_answer_as_the_rules_do() {
    let json = |fixture: &str, extra: &[&str]| -> serde_json::Value {
        let f = format!("fixtures/{fixture}.yaml");
        let o = run(&[&["trace", "--socket-lb", "--from", f.as_str(), "--output", "json"][..], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let pairs = |v: &serde_json::Value| -> Vec<(String, f64)> {
        v.as_array().unwrap().iter().map(|b| (b["verdict"].as_str().unwrap().to_string(), b["probability"].as_f64().unwrap())).collect()
    };
    let translated = [
        ("external-ips-etp-local", vec!["--src", "10.244.1.99", "--dst", "198.51.100.27:80"], 2),
        ("external-ips-etp-local", vec!["--entry", "node", "--dst", "198.51.100.26:80"], 2),
        ("external-ips", vec!["--entry", "node", "--dst", "192.168.10.11:8080"], 2),
        ("loadbalancer", vec!["--entry", "node", "--dst", "192.0.2.20:80"], 2),
        ("loadbalancer-ipmode-proxy", vec!["--src", "10.244.1.99", "--dst", "192.0.2.50:80"], 1),
    ];
    for (fixture, args, n) in translated {
        for mode in ["iptables", "nftables"] {
            let t = json(fixture, &[&args[..], &["--mode", mode]].concat());
            let socket = pairs(&t["socket_lb"]["branches"]);
            assert_eq!(socket.len(), n, "{fixture} {args:?} {mode}: {t}");
            assert!(!socket.is_empty(), "{fixture} {args:?} {mode}: {t}");
            assert_eq!(socket, pairs(&t["outcomes"]), "{fixture} {args:?} {mode}: the rules' answer");
        }
        // IPVS mode: the virtual server's real servers (for `Local`, the local ones).
        let t = json(fixture, &[&args[..], &["--mode", "ipvs"]].concat());
        assert_eq!(pairs(&t["socket_lb"]["branches"]), pairs(&t["outcomes"]), "{fixture} {args:?} ipvs: {t}");
    }
    let t = json("external-ips-etp-local", &["--mode", "ipvs", "--entry", "node", "--dst", "198.51.100.26:80"]);
    assert_eq!(pairs(&t["socket_lb"]["branches"]), [("10.244.1.122:8080".to_string(), 1.0)], "ipvs: the local endpoint: {t}");
    let left = [
        ("external-ips-etp-local", vec!["--src", "10.244.1.99", "--dst", "198.51.100.27:80", "--detect-local-mode", "None"]),
        ("loadbalancer-source-ranges", vec!["--src", "10.244.1.99", "--dst", "192.0.2.30:80"]),
        ("loadbalancer-ipmode-proxy", vec!["--src", "10.244.1.99", "--dst", "192.0.2.51:80"]),
        ("loadbalancer", vec!["--entry", "node", "--dst", "192.168.10.11:31000"]),
    ];
    for (fixture, args) in left {
        let t = json(fixture, &args);
        assert!(t.get("socket_lb").is_none(), "{fixture} {args:?}: left to the rules: {t}");
    }
    let o = run(&["trace", "--socket-lb", "--from", "fixtures/external-ips-etp-local.yaml", "--src", "10.244.1.99", "--dst", "198.51.100.27:80"]);
    let path = repo().join("golden").join("external-ips-etp-local.trace-socket-lb.txt");
    support::check_golden(&path, &stdout(&o)).unwrap_or_else(|e| panic!("{e}"));
}

/// `--mode ipvs` traces kube-proxy's IPVS mode, not the iptables-mode rules:
/// the same question gets the virtual server, its real servers and shares, and a path
/// through IPVS-mode rules (ipsets, no KUBE-SVC/KUBE-SEP chains, no DNAT).
#[test]
fn trace_mode_ipvs_answers_with_the_virtual_server() {
    let dns = ["trace", "--from", "fixtures/demo.yaml", "--src", "10.244.1.99", "--dst", "10.96.0.10:53", "--proto", "udp", "--output", "json"];
    let json = |extra: &[&str]| -> serde_json::Value {
        let o = run(&[&dns[..], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let iptables = json(&[]);
    let ipvs = json(&["--mode", "ipvs"]);
    assert_ne!(iptables, ipvs);
    assert!(iptables.get("virtual_servers").is_none());
    assert_eq!(ipvs["mode"], "ipvs");
    let vs = &ipvs["virtual_servers"][0];
    assert_eq!((vs["protocol"].as_str(), vs["address"].as_str(), vs["port"].as_u64()), (Some("udp"), Some("10.96.0.10"), Some(53)));
    assert_eq!((vs["scheduler"].as_str(), vs["service"].as_str()), (Some("rr"), Some("kube-system/kube-dns:dns")));
    assert!(vs["persistence"].is_null());
    let reals: Vec<(String, u64, f64)> = vs["real_servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["address"].as_str().unwrap().to_string(), r["weight"].as_u64().unwrap(), r["share"].as_f64().unwrap()))
        .collect();
    assert_eq!(reals, vec![("10.244.1.5".to_string(), 1, 0.5), ("10.244.2.7".to_string(), 1, 0.5)]);
    let outcomes = ipvs["outcomes"].as_array().unwrap();
    let verdicts: Vec<&str> = outcomes.iter().map(|o| o["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["10.244.1.5:53", "10.244.2.7:53"]);
    let total: f64 = outcomes.iter().map(|o| o["probability"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    for o in outcomes {
        assert_eq!(o["virtual_server"], "UDP 10.96.0.10:53");
        let path: Vec<&str> = o["path"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        assert!(path.contains(&"ipvs -A -u 10.96.0.10:53 -s rr"), "{path:?}");
        assert!(path.iter().any(|s| s.contains("--match-set KUBE-CLUSTER-IP dst,dst")), "{path:?}");
        assert!(!path.iter().any(|s| s.contains("KUBE-SVC-") || s.contains("KUBE-SEP-") || s.contains("DNAT")), "{path:?}");
    }
    // ClientIP affinity is IPVS persistence there: --affinity (KUBE-SEP chains) is refused.
    let o = run(&["trace", "--mode", "ipvs", "--from", "fixtures/demo.yaml", "--src", "10.244.1.99", "--dst", "10.100.50.5:80", "--affinity", "KUBE-SEP-X"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("persistence"), "{}", stderr(&o));
    // From the node, an address on kube-ipvs0 is its own source: the LB VIP's source
    // ranges keep the node out (KUBE-IPVS-OUT-FILTER).
    let o = run(&["trace", "--mode", "ipvs", "--from", "fixtures/demo.yaml", "--dst", "192.0.2.50:443", "--entry", "node"]);
    let text = stdout(&o);
    assert!(text.starts_with("packet: tcp 192.0.2.50 -> 192.0.2.50:443 from Node"), "{text}");
    assert!(text.contains("100.00%  DROPPED in filter OUTPUT, after IPVS chose the real server"), "{text}");
}

/// `--mode nftables` walks the kube-proxy table (base chains, verdict maps, numgen
/// arms), not iptables rules; what it cannot do yet or is asked wrongly is refused with
/// exit 2 and a reason.
#[test]
fn trace_mode_nftables_walks_the_kube_proxy_table() {
    let base = ["trace", "--mode", "nftables", "--from", "fixtures/demo.yaml"];
    let json = |extra: &[&str]| -> serde_json::Value {
        let o = run(&[&base[..], extra, &["--output", "json"]].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let t = json(&["--src", "10.244.1.99", "--dst", "10.100.50.5:80"]);
    assert_eq!(t["mode"], "nftables");
    let outcomes = t["outcomes"].as_array().unwrap();
    let verdicts: Vec<(&str, f64)> = outcomes.iter().map(|o| (o["verdict"].as_str().unwrap(), o["probability"].as_f64().unwrap())).collect();
    assert_eq!(verdicts, [("10.244.1.30:9000", 0.5), ("10.244.2.31:9000", 0.5)]);
    for o in outcomes {
        let path: Vec<&str> = o["path"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        assert!(path.contains(&"ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips"), "{path:?}");
        assert!(path.iter().all(|s| s.starts_with("ip kube-proxy ") && !s.contains("KUBE-")), "{path:?}");
    }
    // ClientIP affinity the source already holds: its endpoint only.
    let (chain, set) = ("endpoint-RGNJLQ2D-shop/cart/tcp/http__10.244.2.31/9000", "affinity-RGNJLQ2D-shop/cart/tcp/http__10.244.2.31/9000");
    for pinned in [chain, set] {
        let t = json(&["--src", "10.244.1.99", "--dst", "10.100.50.5:80", "--affinity", pinned]);
        assert_eq!(t["outcomes"].as_array().unwrap().len(), 1, "{t}");
        assert_eq!((t["outcomes"][0]["verdict"].as_str(), t["outcomes"][0]["probability"].as_f64()), (Some("10.244.2.31:9000"), Some(1.0)));
    }
    // An unknown port of a ClusterIP is rejected in nftables mode (cluster-ips-check).
    let t = json(&["--src", "10.244.1.99", "--dst", "10.96.0.10:54"]);
    assert_eq!((t["outcomes"][0]["verdict"].as_str(), t["outcomes"][0]["reason"].as_str()), (Some("REJECT"), Some("Reject traffic to invalid ports of ClusterIPs")));
    // From the node: the output hook's chains.
    let o = run(&[&base[..], &["--dst", "192.168.10.11:30080", "--entry", "node"]].concat());
    let text = stdout(&o);
    assert!(text.starts_with("packet: tcp 192.168.10.11 -> 192.168.10.11:30080 from Node (nftables mode, hook output)"), "{text}");
    assert!(text.contains("ip kube-proxy nat-output jump services") && text.contains("DNAT to 10.244.1.10:8080, masqueraded"), "{text}");
    for (extra, needle) in [
        (&["--src", "10.244.1.99", "--dst", "10.100.50.5:80", "--affinity", "KUBE-SEP-X"][..], "endpoint chain (endpoint-…) or its affinity set"),
        (&["--src", "10.244.1.99", "--dst", "10.100.50.5"][..], "--dst needs a port"),
        (&["--dst", "10.100.50.5:80"][..], "--src is needed unless --entry node"),
    ] {
        let o = run(&[&base[..], extra].concat());
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stdout(&o));
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
    }
    let o = run(&["trace", "--mode", "nftables", "--from", "fixtures/clusterip-basic.yaml", "--src", "fd00::1", "--dst", "[fd00::2]:80"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no ipv6 table"), "{}", stderr(&o));
}

/// A leaf of `expected` that `got` lacks or holds differently, as "path: expected X, got Y".
fn mismatches(path: &str, expected: &serde_json::Value, got: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            for (k, v) in e {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                mismatches(&p, v, g.get(k).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Number(e), Value::Number(g)) if e.as_f64() == g.as_f64() => {}
        (e, g) if e == g => {}
        (e, g) => out.push(format!("{path}: expected {e}, got {g}")),
    }
}

/// kube-proxy v1.37's validation refusals the `kube-proxy` command repeats, also with
/// `--write-config-to` (kube-proxy validates before it writes).
#[test]
fn the_kube_proxy_command_refuses_what_kube_proxy_v1_37_validation_refuses() {
    let dir = std::env::temp_dir().join(format!("svcproxy-validation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kube_proxy = dir.join("kube-proxy");
    let _ = std::fs::remove_file(&kube_proxy);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_svcproxy"), &kube_proxy).unwrap();
    let out = dir.join("out.yaml");
    let run = |args: &[&str]| Command::new(&kube_proxy).args(args).arg("--write-config-to").arg(&out).output().unwrap();
    for (args, needle) in [
        (&["--log-flush-frequency=0s"][..], "logging.flushFrequency: Invalid value: \"0s\": Must be greater than zero"),
        (&["--log-flush-frequency=-1s"][..], "Must be greater than zero"),
        (&["--detect-local-mode=None"][..], "KubeProxyConfiguration.DetectLocalMode: Unsupported value: \"None\": supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["--log-flush-frequency=5s", "--detect-local-mode=ClusterCIDR"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A repeated nodePortAddresses keyword is refused by every command.
    let o = run_svcproxy(&["render", "--from", "fixtures/demo.yaml", "--nodeport-addresses", "primary,primary"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("KubeProxyConfiguration.NodePortAddresses[1]: Duplicate value: \"primary\""), "{}", stderr(&o));
    // svcproxy's own commands keep detectLocalMode None (upstream's NoOp detector scenarios).
    let o = run_svcproxy(&["render", "--from", "fixtures/detect-local-none.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_svcproxy(args: &[&str]) -> Output {
    run(args)
}

/// The kube-proxy command lines and config files of real installers (fixtures/installers:
/// each folder's SOURCE.md names what it was written from), run as `kube-proxy ARGS
/// --write-config-to OUT` from the fixture's folder: every one starts, and its effective
/// configuration holds what its arguments mean (`expect.yaml`, a subset); an invocation the
/// targeted kube-proxy refuses is refused naming the flag (`expect-error`).
#[test]
fn installer_invocations_start_as_kube_proxy_with_the_configuration_they_mean() {
    let dir = std::env::temp_dir().join(format!("svcproxy-installers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kube_proxy = dir.join("kube-proxy");
    let _ = std::fs::remove_file(&kube_proxy);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_svcproxy"), &kube_proxy).unwrap();
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures/installers")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("args").exists()).collect();
    fixtures.sort();
    for fixture in &fixtures {
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        let args: Vec<String> = std::fs::read_to_string(fixture.join("args"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.replace("$(NODE_NAME)", "node-1"))
            .collect();
        let out = dir.join(format!("{name}.yaml"));
        let o = Command::new(&kube_proxy).args(&args).arg("--write-config-to").arg(&out).current_dir(fixture).output().unwrap();
        if let Ok(needle) = std::fs::read_to_string(fixture.join("expect-error")) {
            if o.status.code() != Some(2) || !stderr(&o).contains(needle.trim()) {
                failures.push(format!("{name}: expected exit 2 naming {}, got {:?}: {}", needle.trim(), o.status.code(), stderr(&o)));
            }
            checked.push(name);
            continue;
        }
        if o.status.code() != Some(0) {
            failures.push(format!("{name}: exit {:?}: {}", o.status.code(), stderr(&o)));
            continue;
        }
        let got: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let expected: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(fixture.join("expect.yaml")).unwrap()).unwrap();
        let mut wrong = Vec::new();
        mismatches("", &expected, &got, &mut wrong);
        if !wrong.is_empty() {
            failures.push(format!("{name}:\n  {}", wrong.join("\n  ")));
        }
        // What was written reads back as a KubeProxyConfiguration with nothing unknown.
        let back = svcproxy::settings::file::read(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(back.unknown.is_empty(), "{name}: {:?}", back.unknown);
        checked.push(name);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked.len() >= 8, "at least eight installers: {checked:?}");
}

#[test]
fn the_settings_reference_is_generated_from_the_table_and_up_to_date() {
    let o = run(&["settings"]);
    assert_eq!(o.status.code(), Some(0));
    let committed = std::fs::read(repo().join("docs/settings.md")).unwrap_or_default();
    assert!(o.stdout == committed, "docs/settings.md is stale: regenerate it with `cargo run -q -- settings > docs/settings.md`");
    let text = stdout(&o);
    for field in ["clientConnection.kubeconfig", "conntrack.maxPerCore", "winkernel.enableDSR", "logging.verbosity"] {
        assert!(text.contains(&format!("`{field}`")), "{field} is in the reference");
    }
}

#[test]
fn feature_gates_are_checked_as_kube_proxy_checks_them() {
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=PreferSameTrafficDistribution=false"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot set feature gate PreferSameTrafficDistribution to false, feature is locked to true"), "{}", stderr(&o));
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=Bogus=true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unrecognized feature gate: Bogus"), "{}", stderr(&o));
    // v1.35+: an enabled gate needs its dependencies (AllAlpha alone turns on alpha gates whose beta dependency stays off).
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=TopologyAwareWorkloadScheduling=true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload]"), "{}", stderr(&o));
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=AllAlpha=true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]"), "{}", stderr(&o));
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=AllAlpha=true,AllBeta=true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--feature-gates=AllAlpha=false,PreferSameTrafficDistribution=true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // v1.37: KubeProxyIPVS=false turns ipvs mode off (the other modes render).
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--mode", "ipvs", "--feature-gates=KubeProxyIPVS=false"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("must be iptables, nftables or blank"), "{}", stderr(&o));
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--mode", "nftables", "--feature-gates=KubeProxyIPVS=false,NFTablesNetlink=false"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // AllowServiceExternalIPs=false (KEP-5707): no rules for spec.externalIPs, in every mode.
    for mode in ["iptables", "ipvs", "nftables"] {
        let on = run(&["render", "--mode", mode, "--from", "fixtures/external-ips.yaml"]);
        let off = run(&["render", "--mode", mode, "--from", "fixtures/external-ips.yaml", "--feature-gates=AllowServiceExternalIPs=false"]);
        assert_eq!((on.status.code(), off.status.code()), (Some(0), Some(0)), "{mode}: {}", stderr(&off));
        let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(text(&on).contains("198.51.100.25") && !text(&off).contains("198.51.100.25"), "{mode}: the external IP's rules go with the gate off");
        assert!(text(&off).contains("10.96.115.47"), "{mode}: the ClusterIP stays");
    }
    let o = run(&["trace", "--from", "fixtures/external-ips.yaml", "--feature-gates=AllowServiceExternalIPs=false", "--src", "10.244.1.9", "--dst", "198.51.100.25:80"]);
    assert!(stderr(&o).contains("apps/legacy-api: 198.51.100.25") && stderr(&o).contains("get no rules: the feature gate AllowServiceExternalIPs is off"), "trace says why: {}", stderr(&o));
    // KubeProxyNFTablesLocalhostNodePorts (KEP-6032): nftables mode rejects and counts
    // localhost NodePorts; the other modes do not read it.
    let o = run(&["render", "--from", "fixtures/demo.yaml", "--mode", "nftables", "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("vmap @localhost-nodeport-reject-ports"));
    for mode in ["iptables", "ipvs"] {
        let on = run(&["render", "--from", "fixtures/demo.yaml", "--mode", mode, "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"]);
        let off = run(&["render", "--from", "fixtures/demo.yaml", "--mode", mode]);
        assert_eq!((on.status.code(), on.stdout), (Some(0), off.stdout), "{mode}");
    }
}

#[test]
fn a_bad_full_sync_period_exits_2_naming_the_flag_before_anything_is_synced() {
    let o = run(&["sync", "--watch", "--from", "fixtures/demo.yaml", "--nfacct=false", "--full-sync-period", "nope",
        "--metrics-bind-address", "127.0.0.1:0", "--healthz-bind-address", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--full-sync-period: \"nope\" is not a duration"), "{}", stderr(&o));
}

#[test]
fn an_os_error_is_said_once() {
    let o = run(&["render", "--from", "/nonexistent/cluster.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).matches("No such file or directory").count(), 1, "{}", stderr(&o));
}

/// Every input form of fixtures/inputs renders its pinned ruleset (golden/inputs; bless
/// with SVCPROXY_BLESS=1 outside CI): typed lists whose items omit apiVersion and kind, a
/// stream of JSON objects, JSON documents between `---` lines, a `kubectl cluster-info
/// dump --output-directory` tree (lists in nested folders, endpoints derived from its
/// Pods), and the JSON stream again on stdin.
#[test]
fn every_input_form_renders_its_golden() {
    let dump_flags = ["--hostname-override", "node-a", "--ip-family", "ipv4", "--cluster-cidr", "10.244.0.0/16"];
    let cases: [(&str, &str, &[&str]); 4] = [
        ("typed-lists.yaml", "typed-lists.iptables", &[]),
        ("json-stream.json", "json-stream.iptables", &[]),
        ("json-documents.yaml", "json-documents.iptables", &[]),
        ("cluster-info-dump", "cluster-info-dump.iptables", &dump_flags),
    ];
    for (input, golden, extra) in cases {
        let from = format!("fixtures/inputs/{input}");
        let o = run(&[&["render", "--from", &from][..], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{input}: {}", stderr(&o));
        let path = repo().join("golden/inputs").join(golden);
        support::check_golden(&path, &stdout(&o)).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert!(stdout(&o).contains(" -> 10.244."), "{input}: the services have endpoints");
    }
    let mut child = bin()
        .args(["render", "--from", "-"])
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read(repo().join("fixtures/inputs/json-stream.json")).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), std::fs::read_to_string(repo().join("golden/inputs/json-stream.iptables")).unwrap());
}

#[test]
fn a_directory_is_read_recursively_and_says_what_it_read_and_skipped() {
    let o = run(&["render", "--from", "fixtures/inputs/cluster-info-dump", "--hostname-override", "node-a", "--ip-family", "ipv4"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("note: fixtures/inputs/cluster-info-dump: read 4 file(s) (*.yaml, *.yml, *.json in this directory and every subdirectory, in path order); skipped 2: shop/pods/inventory-0/logs.txt (not .yaml, .yml or .json), shop/pods/inventory-1/logs.txt (not .yaml, .yml or .json)"),
        "{e}"
    );
    assert!(e.contains("cluster-info-dump/shop/events.json:1: skipped v1/EventList with 0 item(s): not a kind svcproxy reads"), "{e}");
}

#[test]
fn a_bad_list_item_is_named_by_its_index_object_and_line() {
    let p = temp_file(
        "items.yaml",
        "apiVersion: v1\nkind: ServiceList\nitems:\n- metadata: {name: ok, namespace: ns}\n  spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n- metadata: {name: web, namespace: shop}\n  spec: {clusterIP: 10.0.0.300, ports: [{port: 80}]}\n",
    );
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("items.yaml:6: Service shop/web (items[1]): field spec.clusterIP: invalid IP address \"10.0.0.300\""), "{e}");
    // In JSON too: the item's line (here the list's, all on one line), the index and the object.
    let p = temp_file("items.json", r#"{"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"name": "web", "namespace": "shop"}}]}"#);
    let e = stderr(&run(&["render", "--from", p.to_str().unwrap()]));
    assert!(e.contains("items.json:1: document 1: items[0] (shop/web): missing apiVersion or kind"), "{e}");
}

#[test]
fn a_bad_object_in_a_json_stream_is_found_at_its_line() {
    let good = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}}"#;
    let p = temp_file("stream.json", &format!("{good}\n{}\n", good.replace("\"a\"", "\"b\"").replace("10.0.0.1", "10.0.0.256")));
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("stream.json:2: Service ns/b: field spec.clusterIP: invalid IP address"), "{}", stderr(&o));
    let p = temp_file("stream-broken.json", &format!("{good}\n{{\"kind\": \n"));
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("stream-broken.json: line 3: malformed JSON"), "{}", stderr(&o));
}

#[test]
fn a_utf16_file_is_named_as_utf16_once() {
    let text = "apiVersion: v1\nkind: Service\n";
    let bytes: Vec<u8> = [0xFF, 0xFE].into_iter().chain(text.encode_utf16().flat_map(u16::to_le_bytes)).collect();
    let p = temp_file("powershell.yaml", "");
    std::fs::write(&p, bytes).unwrap();
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("powershell.yaml: the file is UTF-16; save it as UTF-8"), "{e}");
    assert!(!e.contains("valid UTF-8"), "{e}");
}

/// The same object twice in one input: render says so (both places) and uses the later
/// copy (its port is the one rendered, golden/inputs/duplicate-object.iptables); lint
/// reports it once, about the object.
#[test]
fn an_object_read_twice_is_a_warning_in_render_and_a_lint_finding() {
    let o = run(&["render", "--from", "fixtures/inputs/duplicate-object.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let path = repo().join("golden/inputs/duplicate-object.iptables");
    support::check_golden(&path, &stdout(&o)).unwrap_or_else(|e| panic!("{e}"));
    assert!(stdout(&o).contains("\"pay/billing:http cluster IP\" -m tcp -p tcp -d 10.96.44.7 --dport 80 "), "the later copy's port");
    let e = stderr(&o);
    let warning = "note: fixtures/inputs/duplicate-object.yaml:44: warning: Service pay/billing is read twice: first at fixtures/inputs/duplicate-object.yaml:12, again at fixtures/inputs/duplicate-object.yaml:44; the later copy is used, the first is ignored";
    assert!(e.contains(warning), "{e}");
    let o = run(&["lint", "--from", "fixtures/inputs/duplicate-object.yaml", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stdout(&o)));
    let text = v.to_string();
    assert_eq!(text.matches("is read twice").count(), 1, "said once: {text}");
    assert!(text.contains("\"code\":\"SP090\""), "{text}");
    assert!(text.contains("\"name\":\"billing\""), "the finding is about the object: {text}");
}

/// `kubectl cluster-info dump` written to stdout: JSON lists one after another, with each
/// container's log between `==== START logs …` and `==== END logs …` lines (one of them
/// holding a `---` line and a JSON object): the lists are read, the logs skipped with a
/// note, and the endpoints derived from the Pods render (golden/inputs).
#[test]
fn cluster_info_dump_to_stdout_is_read_and_its_logs_skipped() {
    let o = run(&["render", "--from", "fixtures/inputs/cluster-info-dump-stdout.json", "--hostname-override", "node-a", "--ip-family", "ipv4", "--cluster-cidr", "10.244.0.0/16"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let path = repo().join("golden/inputs/cluster-info-dump-stdout.iptables");
    support::check_golden(&path, &stdout(&o)).unwrap_or_else(|e| panic!("{e}"));
    assert!(stdout(&o).contains("\"quotes/ticker:ws -> 10.244.1.80:8443\""), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("cluster-info-dump-stdout.json:47: skipped 1 container log(s)"), "{e}");
}

/// `kubectl get … -o json` prints a `kind: List` JSON object: a bad item is found at its
/// own line, not the list's line 1.
#[test]
fn a_bad_item_of_a_json_list_is_found_at_its_line() {
    let p = temp_file(
        "get.json",
        "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"apiVersion\": \"v1\",\n            \"kind\": \"Service\",\n            \"metadata\": {\"name\": \"ok\", \"namespace\": \"ns\"},\n            \"spec\": {\"clusterIP\": \"10.0.0.1\", \"ports\": [{\"port\": 80}]}\n        },\n        {\n            \"apiVersion\": \"v1\",\n            \"kind\": \"Service\",\n            \"metadata\": {\"name\": \"web\", \"namespace\": \"shop\"},\n            \"spec\": {\"clusterIP\": \"10.0.0.1\", \"externalIPs\": [\"203.0.113.300\"], \"ports\": [{\"port\": 80}]}\n        }\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\"resourceVersion\": \"\"}\n}\n",
    );
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("get.json:10: Service shop/web (items[1]): field spec.externalIPs[0]: invalid IP address \"203.0.113.300\""), "{e}");
}

#[test]
fn a_service_without_a_cluster_ip_is_noted_and_a_headless_one_is_not() {
    let p = temp_file(
        "no-cluster-ip.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: a}\nspec:\n  ports: [{port: 80}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: hl, namespace: a}\nspec:\n  clusterIP: None\n  ports: [{port: 80}]\n",
    );
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("Service a/web: no spec.clusterIP") && err.contains("not proxied"), "{err}");
    assert!(!err.contains("a/hl"), "a headless Service is not proxied by design: {err}");
}

#[test]
fn families_chosen_automatically_say_which_cluster_ips_they_leave_out() {
    let p = temp_file("ds.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: a}\nspec:\n  clusterIPs: [10.96.0.5, \"fd00::5\"]\n  clusterIP: 10.96.0.5\n  ports: [{port: 80}]\n");
    let o = run(&["render", "--from", p.to_str().unwrap()]);
    assert!(stderr(&o).contains("have ipv6 cluster IPs, but the families chosen for this node are ipv4"), "{}", stderr(&o));
    let o = run(&["render", "--from", p.to_str().unwrap(), "--ip-family", "ipv4"]);
    assert!(!stderr(&o).contains("cluster IPs, but"), "a family chosen on purpose is not second-guessed: {}", stderr(&o));
}

/// `CI` means the same to scripts/test (tests/support/ci.sh) as to every test tier
/// (tests/support/ci.rs): anything but unset, empty, `0` or `false` means CI.
#[test]
fn ci_means_the_same_to_scripts_test_and_to_the_test_tiers() {
    let cases = [
        (None, false),
        (Some(""), false),
        (Some(" "), false),
        (Some("0"), false),
        (Some("false"), false),
        (Some("FALSE"), false),
        (Some("true"), true),
        (Some("1"), true),
        (Some("yes"), true),
        (Some("no"), true),
    ];
    for (value, expected) in cases {
        assert_eq!(support::ci::means_ci(value), expected, "CI={value:?} in tests/support/ci.rs");
        let mut sh = Command::new("bash");
        sh.args(["-c", ". tests/support/ci.sh && under_ci"]).current_dir(repo()).env_remove("CI");
        if let Some(v) = value {
            sh.env("CI", v);
        }
        assert_eq!(sh.status().expect("bash runs").success(), expected, "CI={value:?} in tests/support/ci.sh");
    }
}

//! `svcproxy lint` and endpoints derived from Pods and v1/Endpoints.
//!
//! - `fixtures/lint/*.yaml` → `golden/lint/NAME.txt` and `NAME.json` (the binary's output,
//!   byte for byte) and the exit code; the seeded fixture reports each problem once.
//! - `fixtures/derive/CASE/pods.yaml` (no slices: derived) gives the same endpoints and
//!   iptables rules as `slices.yaml` (written by hand); the derived slices are pinned in
//!   `golden/derive/CASE.json`.
//! - Bad inputs behave as the controllers do.
//!
//! Re-bless with `SVCPROXY_BLESS=1 cargo test --test lint`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use svcproxy::config::Settings;
use svcproxy::derive;
use svcproxy::model::NamespacedName;
use svcproxy::pipeline;
use svcproxy::source::{self, ClusterState};
use support::{check_golden, repo, Failures};

const RANGE: &str = "10.96.0.0/12";

/// Each lint fixture: its name and the exit code it must give.
const LINT_FIXTURES: &[(&str, i32)] = &[("clean", 0), ("kubernetes-missing", 1), ("kubernetes-wrong", 3), ("seeded", 3), ("service-cidrs", 1)];

fn lint(fixture: &str, output: &str) -> (String, i32) {
    let path = format!("fixtures/lint/{fixture}.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_svcproxy"))
        .current_dir(repo())
        .args(["lint", "--from", &path, "--service-cluster-ip-range", RANGE, "--output", output])
        .output()
        .expect("run svcproxy");
    assert!(out.stderr.is_empty(), "{fixture}: stderr: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).expect("utf-8"), out.status.code().unwrap_or(-1))
}

#[test]
fn lint_goldens_and_exit_codes() {
    let mut f = Failures::default();
    for (name, code) in LINT_FIXTURES {
        for (output, ext) in [("text", "txt"), ("json", "json")] {
            let (text, got) = lint(name, output);
            f.add(check_golden(&repo().join(format!("golden/lint/{name}.{ext}")), &text));
            if got != *code {
                f.push(format!("{name} ({output}): exit code {got}, want {code}"));
            }
        }
    }
    f.finish("lint goldens", LINT_FIXTURES.len() * 2);
}

#[test]
fn seeded_fixture_reports_each_problem_exactly_once() {
    let (json, _) = lint("seeded", "json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in v["findings"].as_array().expect("findings") {
        if f["severity"] != "info" || f["code"] != "SP060" {
            *counts.entry(f["code"].as_str().unwrap_or("").to_string()).or_default() += 1;
        }
    }
    // The seeded problems (the fixture names each in a comment). SP060 (derived
    // endpoints) is a report, not a problem: it appears once per derived Service.
    let seeded = [
        "SP001", "SP002", "SP010", "SP011", "SP021", "SP025", "SP030", "SP031", "SP040", "SP041", "SP042", "SP043",
        "SP044", "SP045", "SP046", "SP050", "SP051", "SP061", "SP090", "SP091", "SP092",
    ];
    let want: BTreeMap<String, usize> = seeded.iter().map(|c| (c.to_string(), 1)).collect();
    assert_eq!(counts, want);
    let text = std::fs::read_to_string(repo().join("fixtures/lint/seeded.yaml")).expect("fixture");
    for code in seeded {
        assert!(text.contains(&format!("# {code}")), "{code} is not named in the seeded fixture");
    }
}

#[test]
fn kubernetes_service_fixtures_cover_the_other_codes() {
    let codes = |name: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&lint(name, "json").0).expect("json");
        v["findings"].as_array().expect("findings").iter().map(|f| f["code"].as_str().unwrap_or("").to_string()).collect()
    };
    assert_eq!(codes("clean"), Vec::<String>::new());
    assert_eq!(codes("kubernetes-missing"), ["SP020"]);
    assert_eq!(codes("kubernetes-wrong"), ["SP022", "SP023", "SP024"]);
}

fn derive_cases() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures/derive"))
        .expect("fixtures/derive")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// Reads, derives (as the CLI does without --derive-endpoints) and loads.
fn load(path: &Path) -> (pipeline::Loaded, derive::Report) {
    let mut state = source::read_path(path).unwrap_or_else(|e| panic!("{e}"));
    let report = derive::complete(&mut state, false);
    let loaded = pipeline::load(state, Settings::default(), Settings::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (loaded, report)
}

#[test]
fn derived_slices_equal_hand_written_ones() {
    let cases = derive_cases();
    assert!(cases.len() >= 7, "{cases:?}");
    let mut f = Failures::default();
    for case in &cases {
        let name = support::stem(case);
        let (derived, report) = load(&case.join("pods.yaml"));
        let (written, none) = load(&case.join("slices.yaml"));
        assert!(!report.derived.is_empty(), "{name}: nothing derived");
        assert!(none.derived.is_empty(), "{name}: slices.yaml must not derive");
        for (d, w) in derived.trackers.families.iter().zip(&written.trackers.families) {
            if d.view().1 != w.view().1 {
                f.push(format!("{name} {}: endpoints differ:\n{:#?}\nvs\n{:#?}", d.family, d.view().1, w.view().1));
            }
        }
        let text = |l: &pipeline::Loaded| pipeline::iptables_text(&pipeline::render_iptables(l));
        f.add(support::check_golden(&repo().join(format!("golden/derive/{name}.iptables")), &text(&derived)));
        if text(&derived) != text(&written) {
            f.push(format!("{name}: rules differ:\n{}", support::diff(&text(&written), &text(&derived))));
        }
        let json = serde_json::to_string_pretty(&report).expect("json") + "\n";
        f.add(check_golden(&repo().join(format!("golden/derive/{name}.json")), &json));
    }
    f.finish("derived endpoints", cases.len());
}

fn read(text: &str) -> Result<ClusterState, String> {
    let mut st = ClusterState::default();
    source::file::read_str(Path::new("t.yaml"), text, &mut st).map(|_| st).map_err(|e| e.to_string())
}

const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec:\n  clusterIP: 10.96.0.5\n  selector: {app: a}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

fn pod(name: &str, status: &str, ports: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, labels: {{app: a}}}}\nspec:\n  hostname: {name}\n  subdomain: s\n  containers: [{{name: c, image: x, ports: [{ports}]}}]\nstatus: {status}\n")
}

#[test]
fn named_port_missing_or_pod_without_ip_leaves_the_pod_out() {
    let ready = "{podIP: 10.244.0.1, conditions: [{type: Ready, status: \"True\"}]}";
    let text = format!(
        "{SVC}{}{}{}",
        pod("has-port", ready, "{name: http, containerPort: 8080}"),
        pod("no-port", &ready.replace(".1,", ".2,"), ""),
        pod("no-ip", "{phase: Pending}", "{name: http, containerPort: 8080}"),
    );
    let mut state = read(&text).expect("read");
    let report = derive::complete(&mut state, false);
    let slices = &report.derived[0].slices;
    // Two port sets: with http (has-port) and without (no-port); no-ip is in neither.
    assert_eq!(slices.len(), 2, "{slices:#?}");
    let with: Vec<_> = slices.iter().filter(|s| !s.slice.ports.is_empty()).collect();
    assert_eq!(with.len(), 1);
    assert_eq!(with[0].slice.ports[0].port, 8080);
    assert_eq!(with[0].slice.endpoints.len(), 1);
    assert_eq!(with[0].info[0].hostname.as_deref(), Some("has-port"), "hostname: subdomain is the service");
    let all: usize = slices.iter().map(|s| s.slice.endpoints.len()).sum();
    assert_eq!(all, 2);
}

#[test]
fn selector_without_matches_gives_one_empty_placeholder_per_family() {
    let text = format!("{SVC}{}", pod("other", "{podIP: 10.244.0.1}", "").replace("app: a}", "app: b}"));
    let mut state = read(&text).expect("read");
    let report = derive::complete(&mut state, false);
    let slices = &report.derived[0].slices;
    assert_eq!(slices.len(), 1);
    assert!(slices[0].slice.endpoints.is_empty() && slices[0].slice.ports.is_empty());
}

#[test]
fn derive_endpoints_flag_replaces_the_input_slices() {
    let slice = "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s-1, namespace: ns, labels: {kubernetes.io/service-name: s}}\naddressType: IPv4\nports: [{name: http, port: 1234}]\nendpoints: [{addresses: [10.1.1.1]}]\n";
    let text = format!("{SVC}{slice}{}", pod("p", "{podIP: 10.244.0.1, conditions: [{type: Ready, status: \"True\"}]}", "{name: http, containerPort: 8080}"));
    let mut kept = read(&text).expect("read");
    assert!(derive::complete(&mut kept, false).derived.is_empty(), "the input has a slice: nothing derived");
    assert_eq!(kept.slices.len(), 1);
    let mut forced = read(&text).expect("read");
    let report = derive::complete(&mut forced, true);
    assert_eq!(report.derived[0].replaced, 1);
    assert_eq!(forced.slices.len(), 1);
    assert_eq!(forced.slices[0].ports[0].port, 8080);
    assert_eq!(forced.slices[0].service, NamespacedName::new("ns", "s"));
}

#[test]
fn render_cli_derives_and_notes_it() {
    let run = |file: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_svcproxy"))
            .current_dir(repo())
            .args(["render", "--from", file])
            .args(extra)
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (pods, notes) = run("fixtures/derive/conditions/pods.yaml", &[]);
    let (slices, _) = run("fixtures/derive/conditions/slices.yaml", &[]);
    assert_eq!(pods, slices);
    assert!(notes.contains("Service apps/web: 1 EndpointSlice(s) with 3 endpoint(s) (1 ready) derived from Pods"), "{notes}");
    // --derive-endpoints on hand-written slices and no Pods: the selector selects nothing.
    let (forced, _) = run("fixtures/derive/conditions/slices.yaml", &["--derive-endpoints"]);
    assert!(forced.contains("apps/web:http has no endpoints"), "{forced}");
}

#[test]
fn bad_pod_and_endpoints_fields_name_file_line_object_and_field() {
    let bad_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: []}\nstatus: {podIP: 10.0.0.300}\n";
    let err = read(bad_pod).expect_err("bad IP");
    assert_eq!(err, "t.yaml:1: Pod ns/p: field status.podIP: invalid IP address \"10.0.0.300\"");
    let bad_ep = "apiVersion: v1\nkind: Endpoints\nmetadata: {name: e, namespace: ns}\nsubsets: [{addresses: [{ip: 10.0.0.1}], ports: [{port: 0}]}]\n";
    let err = read(bad_ep).expect_err("bad port");
    assert_eq!(err, "t.yaml:1: Endpoints ns/e: field subsets[0].ports[0].port: port 0 out of range 1-65535");
}

#[test]
fn endpoints_of_a_service_with_a_selector_are_not_mirrored() {
    let ep = "---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: s, namespace: ns}\nsubsets: [{addresses: [{ip: 10.0.0.1}], ports: [{name: http, port: 80}]}]\n";
    let mut state = read(&format!("{SVC}{ep}")).expect("read");
    let report = derive::complete(&mut state, false);
    assert!(report.derived.is_empty());
    assert_eq!(report.not_mirrored, [(NamespacedName::new("ns", "s"), derive::NotMirrored::HasSelector)]);
}

#[test]
fn lint_exit_code_2_when_it_cannot_run() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_svcproxy")).current_dir(repo()).arg("lint").args(args).output().expect("run");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), out.stdout.is_empty())
    };
    let (code, err, quiet) = run(&["--from", "fixtures/lint/seeded.yaml", "--service-cluster-ip-range", "10.96.0.0/33"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--service-cluster-ip-range: \"10.96.0.0/33\" is not a CIDR"), "{err}");
    assert!(quiet);
    let (code, err, _) = run(&["--from", "fixtures/lint/seeded.yaml", "--service-node-port-range", "32767-30000"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--service-node-port-range"), "{err}");
    let (code, err, _) = run(&["--from", "fixtures/lint/no-such-file.yaml"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no-such-file.yaml: cannot read"), "{err}");
}

#[test]
fn pod_and_endpoints_lists_are_read_with_their_origins() {
    let text = "apiVersion: v1\nkind: PodList\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: ns}\n  spec: {containers: []}\n  status: {podIPs: [{ip: 10.0.0.1}, {ip: \"fd00::1\"}]}\n---\napiVersion: v1\nkind: EndpointsList\nitems:\n- apiVersion: v1\n  kind: Endpoints\n  metadata: {name: e, namespace: ns}\n";
    let st = read(text).expect("read");
    assert_eq!(st.extra.pods.len(), 1);
    assert_eq!(st.extra.pods[0].ips.len(), 2);
    assert_eq!(st.extra.endpoints.len(), 1);
    assert!(st.notes.is_empty(), "{:?}", st.notes);
    // Each item is found at its own line, not at its list's start (lines 1 and 10).
    assert_eq!(st.extra.origin("Pod", &NamespacedName::new("ns", "p")).as_deref(), Some("t.yaml:4"));
    assert_eq!(st.extra.origin("Endpoints", &NamespacedName::new("ns", "e")).as_deref(), Some("t.yaml:13"));
}

#[test]
fn a_named_port_no_pod_declares_is_reported_once_even_with_slices() {
    // What the EndpointSlice controller writes when no Pod declares the named port: slices
    // without it. SP043 (the cause) is reported; SP091 (the symptom) is not.
    let dir = std::env::temp_dir().join(format!("svcproxy-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let slice = "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s-1, namespace: ns, labels: {kubernetes.io/service-name: s}}\naddressType: IPv4\nports: []\nendpoints: [{addresses: [10.244.0.1], targetRef: {kind: Pod, name: p, namespace: ns}}]\n";
    let pod = pod("p", "{podIP: 10.244.0.1, conditions: [{type: Ready, status: \"True\"}]}", "");
    let file = dir.join("dump.yaml");
    std::fs::write(&file, format!("{SVC}{slice}{pod}")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_svcproxy"))
        .args(["lint", "--output", "json", "--from"])
        .arg(&file)
        .output()
        .expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let codes: Vec<&str> = v["findings"].as_array().expect("findings").iter().filter_map(|f| f["code"].as_str()).collect();
    assert_eq!(codes, ["SP020", "SP043"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endpoints_of_a_selector_service_without_slices_or_pods_are_explained() {
    let dir = std::env::temp_dir().join(format!("svcproxy-lint-ep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let ep = "---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: s, namespace: ns}\nsubsets: [{addresses: [{ip: 10.0.0.1}], ports: [{name: http, port: 80}]}]\n";
    let file = dir.join("dump.yaml");
    std::fs::write(&file, format!("{SVC}{ep}")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_svcproxy")).args(["lint", "--from"]).arg(&file).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("info[SP061] Endpoints ns/s: not mirrored: its Service has a selector"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_object_inside_a_list_is_located_at_its_item_not_the_lists_start() {
    let dir = std::env::temp_dir().join(format!("svcproxy-lint-list-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let svc = |name: &str, port: u16| format!("- apiVersion: v1\n  kind: Service\n  metadata: {{name: {name}, namespace: ns}}\n  spec: {{clusterIP: 10.96.0.5, ports: [{{port: {port}}}]}}\n");
    let yaml = dir.join("list.yaml");
    std::fs::write(&yaml, format!("apiVersion: v1\nkind: List\nitems:\n{}{}", svc("a", 80), svc("b", 81))).expect("write");
    let json = dir.join("list.json");
    let item = |name: &str| format!("    {{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {{\"name\": \"{name}\", \"namespace\": \"ns\"}},\n     \"spec\": {{\"clusterIP\": \"10.96.0.5\", \"ports\": [{{\"port\": 80}}]}}}}");
    std::fs::write(&json, format!("{{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [\n{},\n{}\n  ]\n}}\n", item("a"), item("b"))).expect("write");
    for (file, lines) in [(&yaml, [4, 8]), (&json, [5, 7])] {
        let out = Command::new(env!("CARGO_BIN_EXE_svcproxy")).args(["lint", "--output", "json", "--from"]).arg(file).output().expect("run");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let sp001 = report["findings"].as_array().expect("findings").iter().find(|f| f["code"] == "SP001").expect("SP001");
        let want: Vec<String> = lines.iter().map(|l| format!("{}:{l}", file.display())).collect();
        assert_eq!(sp001["locations"], serde_json::json!(want), "{}", file.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With kube-proxy's `AllowServiceExternalIPs` gate off, each Service with `spec.externalIPs`
/// is reported once (SP052, a warning: its external IPs are not served); with the gate at its
/// default, none is; a gate kube-proxy does not know stops lint as it stops kube-proxy.
#[test]
fn external_ips_are_reported_unserved_only_with_the_gate_off() {
    let run = |gates: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_svcproxy"));
        cmd.current_dir(repo()).args(["lint", "--from", "fixtures/lint/seeded.yaml", "--output", "json"]);
        if let Some(g) = gates {
            cmd.args(["--feature-gates", g]);
        }
        let out = cmd.output().expect("run svcproxy");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let sp052 = |json: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        v["findings"].as_array().expect("findings").iter().filter(|f| f["code"] == "SP052").map(|f| format!("{} {}", f["objects"][0]["name"], f["message"])).collect()
    };
    let (_, json, _) = run(None);
    assert!(sp052(&json).is_empty(), "the gate is on by default: {:?}", sp052(&json));
    let (_, json, _) = run(Some("AllowServiceExternalIPs=true"));
    assert!(sp052(&json).is_empty());
    let (code, json, _) = run(Some("AllowServiceExternalIPs=false"));
    let found = sp052(&json);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("external IPs 10.96.0.40 get no rules") && found[0].contains("AllowServiceExternalIPs is off"), "{found:?}");
    assert_eq!(code, Some(3), "seeded still has its errors");
    let (code, _, err) = run(Some("NoSuchGate=true"));
    assert_eq!(code, Some(2));
    assert!(err.contains("--feature-gates: unrecognized feature gate: NoSuchGate"), "{err}");
}

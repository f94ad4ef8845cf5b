//! The manifests in deploy/ parse as typed Kubernetes objects, and the ClusterRole grants
//! exactly the API calls the binary makes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;
use svcproxy::source::apiserver::API_CALLS;

fn docs(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|v| !v.is_null()).collect()
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{}: {e}", v["kind"]))
}

#[test]
fn the_cluster_role_grants_exactly_what_svcproxy_calls() {
    let docs = docs("rbac.yaml");
    let _sa: ServiceAccount = typed(&docs[0]);
    let role: ClusterRole = typed(&docs[1]);
    let binding: ClusterRoleBinding = typed(&docs[2]);
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap_or_default() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let used: BTreeSet<(String, String, String)> =
        API_CALLS.iter().map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string())).collect();
    assert_eq!(granted, used, "the ClusterRole must grant every call and nothing more");
    assert_eq!(binding.role_ref.name, "svcproxy");
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!((subject.name.as_str(), subject.namespace.as_deref()), ("svcproxy", Some("kube-system")));
}

#[test]
fn the_daemonset_runs_watch_mode_on_every_node_with_probes_and_mounts() {
    let ds: DaemonSet = typed(&docs("daemonset.yaml")[0]);
    let pod = ds.spec.template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.service_account_name.as_deref(), Some("svcproxy"));
    assert!(pod.tolerations.unwrap().iter().any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()), "tolerates every taint");
    let c = &pod.containers[0];
    let cmd = c.command.clone().unwrap().join(" ");
    assert!(cmd.starts_with("/usr/local/bin/kube-proxy ") && cmd.contains("--hostname-override=$(NODE_NAME)"), "kube-proxy's command line: {cmd}");
    let containerfile = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/Containerfile")).unwrap();
    assert!(containerfile.contains("ln -s svcproxy /usr/local/bin/kube-proxy"), "the image has the kube-proxy name");
    let env = c.env.clone().unwrap();
    let node = env.iter().find(|e| e.name == "NODE_NAME").unwrap();
    assert_eq!(node.value_from.as_ref().unwrap().field_ref.as_ref().unwrap().field_path, "spec.nodeName");
    let live = c.liveness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    let ready = c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!((live.path.as_deref(), ready.path.as_deref()), (Some("/livez"), Some("/healthz")));
    let mounts: BTreeSet<String> = c.volume_mounts.clone().unwrap().into_iter().map(|m| m.mount_path).collect();
    assert!(mounts.contains("/run/xtables.lock") && mounts.contains("/lib/modules"));
    // --socket-lb: the host's bpffs for the pins, and the host's cgroup v2 root where the
    // flag points (the container's own /sys/fs/cgroup is its cgroup namespace's, not the node's).
    let volumes = pod.volumes.clone().unwrap();
    let host = |name: &str| volumes.iter().find(|v| v.name == name).and_then(|v| v.host_path.clone()).map(|h| h.path);
    assert!(mounts.contains("/sys/fs/bpf") && host("bpffs").as_deref() == Some("/sys/fs/bpf"), "pins in the host's bpffs");
    let cgroup = c.volume_mounts.clone().unwrap().into_iter().find(|m| m.name == "host-cgroup").expect("the host's cgroup mounted");
    assert_eq!(host("host-cgroup").as_deref(), Some("/sys/fs/cgroup"));
    assert!(cmd.contains(&format!("--socket-lb-cgroup={}", cgroup.mount_path)), "the flag names the host's cgroup root: {cmd}");
    assert_eq!(c.security_context.as_ref().unwrap().privileged, Some(true), "privileged like kube-proxy's: /proc/sys must be writable");
}

#[test]
fn the_config_map_holds_a_kube_proxy_configuration_svcproxy_reads() {
    let cm: ConfigMap = typed(&docs("configmap.yaml")[0]);
    let text = cm.data.unwrap().remove("config.conf").unwrap();
    let path = std::env::temp_dir().join(format!("svcproxy-deploy-{}.conf", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let settings = svcproxy::settings::file::read(&path).unwrap().settings;
    let _ = std::fs::remove_file(&path);
    assert_eq!(settings.masquerade_bit, Some(14));
    assert_eq!(settings.iptables_sync_period, Some(std::time::Duration::from_secs(30)));
}

/// Like kubeadm's kube-proxy ConfigMap: `clientConnection.kubeconfig` names the ConfigMap's
/// own `kubeconfig.conf` where the DaemonSet mounts it, and that kubeconfig holds the control
/// plane's address (not the `kubernetes` ClusterIP) with the service account's token and CA.
#[test]
fn the_kubeconfig_comes_from_the_config_map_not_the_in_cluster_environment() {
    let cm: ConfigMap = typed(&docs("configmap.yaml")[0]);
    let data = cm.data.unwrap();
    let dir = std::env::temp_dir().join(format!("svcproxy-deploy-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.conf");
    std::fs::write(&path, &data["config.conf"]).unwrap();
    let settings = svcproxy::settings::file::read(&path).unwrap().settings;
    let _ = std::fs::remove_dir_all(&dir);
    let named = PathBuf::from(settings.kubeconfig.expect("clientConnection.kubeconfig is set"));

    let ds: DaemonSet = typed(&docs("daemonset.yaml")[0]);
    let pod = ds.spec.template.spec.unwrap();
    let c = &pod.containers[0];
    let mount = c.volume_mounts.clone().unwrap().into_iter().find(|m| named.starts_with(&m.mount_path)).expect("the kubeconfig's folder is mounted");
    let volume = pod.volumes.unwrap().into_iter().find(|v| v.name == mount.name).unwrap();
    assert_eq!(volume.config_map.unwrap().name, cm.metadata.name.unwrap(), "mounted from this ConfigMap");
    let key = named.strip_prefix(&mount.mount_path).unwrap().to_str().unwrap().to_string();
    let kc = kube::config::Kubeconfig::from_yaml(data.get(&key).unwrap_or_else(|| panic!("the ConfigMap has {key}"))).unwrap();
    let cluster = kc.clusters[0].cluster.clone().unwrap();
    let server = cluster.server.unwrap();
    assert!(server.starts_with("https://") && !server.contains("kubernetes.default") && !server.contains("10.96.0.1"), "{server}");
    assert_eq!(cluster.certificate_authority.as_deref(), Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"));
    let user = kc.auth_infos[0].auth_info.clone().unwrap();
    assert_eq!(user.token_file.as_deref(), Some("/var/run/secrets/kubernetes.io/serviceaccount/token"));
    let cmd = c.command.clone().unwrap();
    assert!(!cmd.iter().any(|a| a.starts_with("--kubeconfig") || a.starts_with("--master")), "the config file alone names it: {cmd:?}");
}

/// The PodMonitor selects the DaemonSet's pods and scrapes its named metrics port, which the
/// ConfigMap binds where Prometheus can reach it; the dashboard's `job="kube-proxy"` is kept.
#[test]
fn the_pod_monitor_scrapes_the_daemonsets_metrics_port() {
    let pm = &docs("podmonitor.yaml")[0];
    assert_eq!(pm["kind"], "PodMonitor");
    let ds: DaemonSet = typed(&docs("daemonset.yaml")[0]);
    let pod_labels = ds.spec.template.metadata.unwrap().labels.unwrap();
    for (k, v) in pm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(pod_labels.get(k).map(String::as_str), v.as_str(), "selects the DaemonSet's pods");
    }
    let endpoint = &pm["spec"]["podMetricsEndpoints"][0];
    let container = &ds.spec.template.spec.unwrap().containers[0];
    let port = container.ports.clone().unwrap().into_iter().find(|p| p.name.as_deref() == endpoint["port"].as_str()).expect("the named port exists");
    assert_eq!((port.container_port, endpoint["path"].as_str()), (10249, Some("/metrics")));
    assert_eq!(endpoint["relabelings"][0]["replacement"], "kube-proxy");
    let cm: ConfigMap = typed(&docs("configmap.yaml")[0]);
    let text = cm.data.unwrap().remove("config.conf").unwrap();
    let settings = svcproxy::settings::file::parse(&text).unwrap().settings;
    assert_eq!(settings.metrics_bind_address.as_deref(), Some("0.0.0.0:10249"), "reachable from Prometheus");
}

//! nftables mode and the cluster's ServiceCIDR objects, on the real kernel: with a
//! ServiceCIDR (198.19.255.0/24) in the dump, a connection from the node to an address of
//! it that no Service has (198.19.255.99, which the external namespace does answer on) is
//! dropped on the node by `cluster-ips-check`; the same cluster without the ServiceCIDR
//! routes it out as before, and it is answered; an allocated ClusterIP is served either way.

use crate::dataplane::{self, cluster_yaml, ep4, svc, tcp, N, NODE};
use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::{self, Backend, Proto, Where};
use crate::svcproxy::{path_str, run, temp_yaml};

pub fn cases() -> Vec<Case> {
    vec![Case::new("nftables_service_cidr_objects_drop_unallocated_clusterips", unallocated_dropped)]
}

const SERVICE_CIDR: &str = "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: kubernetes}\nspec: {cidrs: [198.19.255.0/24]}\n";
const UNALLOCATED: &str = "198.19.255.99";

fn unallocated_dropped(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "conntrack", "nft", "unshare", "socat"])?;
    let mut lab = dataplane::lab(ctx, Backend::Nft, &[1], false)?;
    // The unallocated address answers outside the node: routed out, it is answered.
    lab.external().ip(&["addr", "add", &format!("{UNALLOCATED}/32"), "dev", "lo"])?;
    let listen = lab.external().spawn(&["socat", "TCP-LISTEN:80,fork,reuseaddr", "SYSTEM:echo outside"])?;
    drop(listen);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let web = svc("web", "198.19.255.10", vec![tcp("http", 80)], vec![ep4(1)]);
    for with_cidr in [false, true] {
        let yaml = if with_cidr { format!("{}---\n{SERVICE_CIDR}", cluster_yaml(std::slice::from_ref(&web))) } else { cluster_yaml(std::slice::from_ref(&web)) };
        let path = temp_yaml(&yaml)?;
        let p = path_str(&path).to_string();
        let argv = ["sync", "--mode", "nftables", "--from", &p, "--hostname-override", NODE, "--node-ip", netns::NODE_IP4, "--cluster-cidr", "198.18.0.0/16", "--ip-family", "ipv4"];
        let out = run(lab.node(), Backend::Nft, &argv)?;
        crate::ensure!(out.status.success(), "sync (ServiceCIDR {with_cidr}): {}", String::from_utf8_lossy(&out.stderr));
        let table = lab.node().run(&["nft", "list", "chain", "ip", "kube-proxy", "cluster-ips-check"])?;
        ctx.log(&table);
        crate::ensure!(table.contains("198.19.255.0/24") == with_cidr, "the drop rule is there exactly with the ServiceCIDR object ({with_cidr}): {table}");
        let served = dataplane::connect(ctx, &lab, Where::Node, "198.19.255.10", 80, Proto::Tcp, N)?;
        dataplane::spread(&served, &["pod1"], &format!("the allocated ClusterIP (ServiceCIDR {with_cidr})"))?;
        lab.conntrack_flush()?;
        if with_cidr {
            let t = dataplane::connect_quiet(ctx, &mut lab, Where::Node, UNALLOCATED, 80, Proto::Tcp, 3)?;
            dataplane::dropped(&t, "an unallocated address of the ServiceCIDR, from the node")?;
        } else {
            let t = dataplane::connect(ctx, &lab, Where::Node, UNALLOCATED, 80, Proto::Tcp, 3)?;
            crate::ensure!(t.answered() == 3, "without a ServiceCIDR the address is routed out and answered there: {t}");
        }
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

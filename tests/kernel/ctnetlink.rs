//! ctnetlink (`netfilter::ctnetlink`) against the real kernel, in a fresh network
//! namespace: flows created over netlink are what `conntrack -L` shows; a UDP dump
//! (the kernel filtering by protocol) returns the UDP flows alone, parsed as created, and
//! one filtered by destination address and port (or port alone) only those; a
//! delete by tuple, zone and id removes exactly the flows named, and a second delete of
//! the same flows finds them gone, not an error; a delete naming another id misses the flow.

use std::net::IpAddr;

use svcproxy::netfilter::ctnetlink::{wire, Ctnetlink, Flow, Tuple};

use crate::harness::{Case, CaseResult, Ctx};
use crate::netns::Lab;
use crate::watch_e2e::in_netns;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("ctnetlink_creates_dumps_and_deletes_real_flows", real_flows),
        Case::new("conntrack_trace_live_and_dry_run_show_stale_flows", trace_live_and_dry_run_show_stale_flows),
    ]
}

fn flow(client: &str, svc: &str, dport: u16, reply_src: &str, sport: u16, proto: u8, zone: u16) -> Flow {
    let (c, s, r): (IpAddr, IpAddr, IpAddr) = (client.parse().unwrap(), svc.parse().unwrap(), reply_src.parse().unwrap());
    Flow {
        orig: Tuple { src: c, dst: s, proto, sport, dport },
        reply: Tuple { src: r, dst: c, proto, sport: 5353, dport: sport },
        zone,
        id: 0,
        status: wire::IPS_SEEN_REPLY,
        timeout: 120,
    }
}

/// Runs `f` on a thread in network namespace `ns`.
fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    in_netns(ns, f).join().map_err(|_| "the netns thread panicked".to_string())??
}

fn same(a: &Flow, b: &Flow) -> bool {
    (a.orig, a.reply, a.zone) == (b.orig, b.reply, b.zone)
}

fn real_flows(ctx: &mut Ctx) -> CaseResult {
    ctx.require(&["ip", "conntrack"])?;
    let lab = Lab::new("ctnl")?;
    let node = lab.node().name.clone();
    let udp = wire::IPPROTO_UDP;
    let made = vec![
        flow("198.18.0.5", "198.19.0.10", 53, "198.18.1.2", 40000, udp, 0),
        flow("198.18.0.6", "198.19.0.10", 53, "198.19.0.10", 40001, udp, 0),
        flow("198.18.0.7", "198.19.0.11", 30053, "198.18.2.2", 40002, udp, 3),
        flow("198.18.0.8", "198.19.0.12", 80, "198.18.1.2", 40003, wire::IPPROTO_TCP, 0),
        flow("fd00:18::5", "fd00:19::10", 53, "fd00:18:1::2", 40000, udp, 0),
    ];
    let m = made.clone();
    let created = within(&node, move || Ctnetlink::open().and_then(|mut c| c.create(&m)).map_err(|e| e.to_string()))?;
    crate::ensure!(created == made.len(), "created {created} of {}", made.len());
    let listed = lab.node().run(&["conntrack", "-L"])?;
    ctx.log(&listed);
    for f in &made {
        let needle = format!("src={} dst={} sport={} dport={}", f.orig.src, f.orig.dst, f.orig.sport, f.orig.dport);
        crate::ensure!(listed.contains(&needle), "conntrack -L shows {needle}: {listed}");
    }

    let dump = |family: u8| -> Result<(Vec<Flow>, bool), String> {
        within(&node, move || {
            let mut out = Vec::new();
            let stats = Ctnetlink::open().and_then(|mut c| c.dump(family, Some(wire::IPPROTO_UDP), |f| out.push(*f))).map_err(|e| e.to_string())?;
            let filtered = stats.kernel_filtered && stats.flows == out.len();
            Ok((out, filtered))
        })
    };
    let (v4, filtered) = dump(wire::AF_INET)?;
    crate::ensure!(filtered, "the kernel filtered by protocol (6.18 has CTA_FILTER)");
    crate::ensure!(v4.len() == 3 && made[..3].iter().all(|m| v4.iter().any(|f| same(f, m))), "the IPv4 UDP flows as created: {v4:?}");
    crate::ensure!(v4.iter().all(|f| f.id != 0), "every flow has the kernel's id");
    // Dumps the kernel filters to one address and port, and to a port on any address.
    let to = |dst: Option<&str>, dport: u16| -> Result<Vec<Flow>, String> {
        let filter = wire::DumpFilter { proto: udp, dst: dst.map(|d| d.parse().unwrap()), dport: Some(dport) };
        within(&node, move || {
            let mut out = Vec::new();
            let stats = Ctnetlink::open().and_then(|mut c| c.dump_to(wire::AF_INET, Some(filter), |f| out.push(*f))).map_err(|e| e.to_string())?;
            if !stats.kernel_filtered || stats.flows != out.len() {
                return Err(format!("not filtered by the kernel: {stats:?}"));
            }
            Ok(out)
        })
    };
    let one = to(Some("198.19.0.10"), 53)?;
    crate::ensure!(one.len() == 2 && one.iter().all(|f| f.orig.dst.to_string() == "198.19.0.10" && f.orig.dport == 53), "{one:?}");
    let nodeport = to(None, 30053)?;
    crate::ensure!(nodeport.len() == 1 && same(&nodeport[0], &made[2]), "{nodeport:?}");
    crate::ensure!(to(Some("198.19.0.10"), 54)?.is_empty(), "another port of the address");
    let (v6, _) = dump(wire::AF_INET6)?;
    crate::ensure!(v6.len() == 1 && same(&v6[0], &made[4]), "{v6:?}");

    // Delete the un-NATed flow and the zoned one; twice.
    let doomed: Vec<Flow> = v4.iter().filter(|f| f.reply.src == f.orig.dst || f.zone == 3).copied().collect();
    crate::ensure!(doomed.len() == 2, "{doomed:?}");
    let d = doomed.clone();
    let (first, second) = within(&node, move || {
        let mut c = Ctnetlink::open().map_err(|e| e.to_string())?;
        Ok((c.delete(&d).map_err(|e| e.to_string())?, c.delete(&d).map_err(|e| e.to_string())?))
    })?;
    crate::ensure!((first.deleted, first.gone, second.deleted, second.gone) == (2, 0, 0, 2), "{first:?} then {second:?}");
    let (left, _) = dump(wire::AF_INET)?;
    crate::ensure!(left.len() == 1 && same(&left[0], &made[0]), "only the healthy flow is left: {left:?}");
    let tcp = lab.node().run(&["conntrack", "-L", "-p", "tcp"])?;
    crate::ensure!(tcp.contains("dport=80"), "the TCP flow is untouched: {tcp}");

    // Many answers at once (every delete of a flow that is gone is answered; 1,024 in one
    // batch once overflowed the receive buffer): 600 gone flows are counted gone.
    let ghosts: Vec<Flow> = (0..600u16).map(|i| flow("198.18.0.99", "198.19.0.77", 53, "198.18.1.2", 1000 + i, udp, 0)).collect();
    let counted = within(&node, move || Ctnetlink::open().and_then(|mut c| c.delete(&ghosts)).map_err(|e| e.to_string()))?;
    crate::ensure!((counted.deleted, counted.gone) == (0, 600), "{counted:?}");
    // And 600 creates, each acknowledged, all created.
    let many: Vec<Flow> = (0..600u16).map(|i| flow("198.18.0.98", "198.19.0.78", 53, "198.18.1.2", 1000 + i, udp, 0)).collect();
    let created = within(&node, move || Ctnetlink::open().and_then(|mut c| c.create(&many)).map_err(|e| e.to_string()))?;
    crate::ensure!(created == 600, "{created}");

    // A delete whose id is not the flow's (as for a newer flow on the same tuple; the
    // kernel's id hashes the flow's address, which a recreated flow may reuse) misses it.
    let left: Vec<Flow> = left.into_iter().filter(|f| f.orig.src.to_string() != "198.18.0.98").collect();
    let mut other = left[0];
    other.id ^= 1;
    let missed = within(&node, move || Ctnetlink::open().and_then(|mut c| c.delete(&[other])).map_err(|e| e.to_string()))?;
    crate::ensure!((missed.deleted, missed.gone) == (0, 1), "{missed:?}");
    let (still, _) = dump(wire::AF_INET)?;
    crate::ensure!(still.iter().any(|f| f.id == left[0].id), "the flow survives: {still:?}");
    Ok(())
}

/// A UDP Service with one endpoint, `198.18.2.2`.
const DNS: &str = "apiVersion: v1
kind: Service
metadata: {name: dns, namespace: app}
spec:
  type: ClusterIP
  clusterIP: \"198.19.0.10\"
  clusterIPs: [\"198.19.0.10\"]
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 5353}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-v4
  namespace: app
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
endpoints:
- addresses: [\"198.18.2.2\"]
  conditions: {ready: true}
  nodeName: node-1
ports:
- {name: dns, port: 5353, protocol: UDP}
";

/// `trace --live` names the cached flows a packet follows instead of the rules, and which
/// of them the rules no longer send that way; `sync --dry-run` lists the stale ones and
/// a sync deletes them (a process's first sync runs the reconciler), keeping the healthy.
fn trace_live_and_dry_run_show_stale_flows(ctx: &mut Ctx) -> CaseResult {
    use crate::netns::Backend;
    ctx.require(&["ip", "conntrack", "iptables-nft-restore"])?;
    let lab = Lab::new("cttrace")?;
    let node = lab.node().name.clone();
    let file = crate::svcproxy::temp_yaml(DNS)?;
    let from = crate::svcproxy::path_str(&file).to_string();
    let sync = ["sync", "--from", from.as_str(), "--hostname-override", "node-1"];
    crate::svcproxy::run_expect(lab.node(), Backend::Nft, &sync, 0)?;
    let udp = wire::IPPROTO_UDP;
    let healthy = flow("198.18.0.5", "198.19.0.10", 53, "198.18.2.2", 40000, udp, 0);
    let departed = flow("198.18.0.5", "198.19.0.10", 53, "198.18.1.2", 40001, udp, 0);
    let mut unnated = flow("198.18.0.5", "198.19.0.10", 53, "198.19.0.10", 40002, udp, 0);
    unnated.reply.sport = 53;
    let made = vec![healthy, departed, unnated];
    within(&node, move || Ctnetlink::open().and_then(|mut c| c.create(&made)).map_err(|e| e.to_string()))?;

    let trace = |sport: u16| crate::svcproxy::run_expect(lab.node(), Backend::Nft, &["trace", "--from", &from, "--live", "--iptables-backend", "nft", "--src", &format!("198.18.0.5:{sport}"), "--dst", "198.19.0.10:53", "--proto", "udp"], 0);
    let t = trace(40000)?;
    ctx.log(&t);
    crate::ensure!(t.contains("conntrack: 1 cached flow(s) match") && t.contains("to 198.18.2.2:5353, where the rules send it too"), "{t}");
    let t = trace(40001)?;
    crate::ensure!(t.contains("to 198.18.1.2:5353, where the rules no longer send it: a stale flow"), "{t}");
    let t = trace(40002)?;
    crate::ensure!(t.contains("to 198.19.0.10:53 as addressed: cached before any rule"), "{t}");

    let dry = crate::svcproxy::run(lab.node(), Backend::Nft, &[&sync[..], &["--dry-run"]].concat())?;
    let out = String::from_utf8_lossy(&dry.stdout);
    ctx.log(&out);
    crate::ensure!(dry.status.code() == Some(1), "a dry run with stale flows reports changes pending: {:?}", dry.status);
    crate::ensure!(out.contains("# conntrack IPv4: 2 stale UDP flow(s) would be deleted") && out.contains("sport=40001") && out.contains("sport=40002") && !out.contains("sport=40000"), "{out}");

    let done = crate::svcproxy::run(lab.node(), Backend::Nft, &sync)?;
    let err = String::from_utf8_lossy(&done.stderr);
    crate::ensure!(done.status.success() && err.contains("IPv4: 2 stale UDP conntrack flow(s) deleted"), "{err}");
    let left = lab.node().run(&["conntrack", "-L", "-p", "udp"])?;
    crate::ensure!(left.contains("sport=40000") && !left.contains("sport=40001") && !left.contains("sport=40002"), "only the healthy flow is left: {left}");
    Ok(())
}

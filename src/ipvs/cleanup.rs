//! `svcproxy cleanup`, IPVS part: svcproxy's (kube-proxy's) virtual servers, the
//! IPVS-mode iptables chains, the ipsets and `kube-ipvs0`. The iptables-mode chains the
//! two modes share are left to the iptables cleanup, which runs after the chain part
//! here and before the ipsets go (rules must stop naming a set before it can go).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::ipset;
use super::link::{LinkError, Links};
use super::netlink::{self, Ipvs};
use super::values::Op;
use super::plan::rules::{self, OWN_CHAINS};
use super::plan::DUMMY_LINK;
use super::reconcile::DEFAULT_NODE_PORT_RANGE;
use crate::xtables::{quote, Dump};

/// A chain IPVS mode declares in `table` and iptables mode does not (the shared ones are
/// the iptables cleanup's).
fn ipvs_only(table: &str, chain: &str) -> bool {
    rules::declared(table).contains(&chain) && OWN_CHAINS.contains(&chain)
}

/// Restore input that removes the IPVS-mode chains (and flushes chains jumping to them),
/// and one line per removed item.
pub fn iptables_plan(live: &Dump) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut removed = Vec::new();
    for (table, t) in &live.tables {
        let chains: Vec<&str> = t.chains.iter().map(|c| c.name.as_str()).filter(|c| ipvs_only(table, c)).collect();
        if chains.is_empty() {
            continue;
        }
        let mut flush: BTreeSet<String> = chains.iter().map(|c| c.to_string()).collect();
        let mut body = String::new();
        for r in &t.rules {
            let target = r.target.chain();
            if !target.is_some_and(|j| chains.contains(&j)) || flush.contains(r.chain.as_str()) {
                continue;
            }
            if r.chain.starts_with("KUBE-") {
                flush.insert(r.chain.to_string());
            } else {
                let args: Vec<String> = r.args.iter().chain(r.target.words()).map(quote).collect();
                body.push_str(&format!("-D {} {}\n", r.chain, args.join(" ")));
                removed.push(format!("{table} {}: {}", r.chain, args.join(" ")));
            }
        }
        let declare: String = flush.iter().map(|c| format!(":{c} - [0:0]\n")).collect();
        for c in &chains {
            body.push_str(&format!("-X {c}\n"));
            removed.push(format!("{table} chain {c}"));
        }
        text.push_str(&format!("*{table}\n{declare}{body}COMMIT\n"));
    }
    (text, removed)
}

/// Why the virtual servers could not be cleaned up.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error("cannot read the node's addresses: {0}")]
    Links(#[from] LinkError),
    #[error(transparent)]
    Ipvs(#[from] netlink::Error),
}

/// Deletes the virtual servers on kube-ipvs0's addresses and on node addresses in the
/// NodePort range; returns what was (or would be) deleted.
pub fn virtual_servers(ipvs: &mut dyn Ipvs, links: &mut dyn Links, dry_run: bool) -> Result<Vec<String>, CleanupError> {
    // Without the addresses nothing can be told ours: an error, not an empty cleanup.
    let (bound, local) = addresses(links)?;
    let ops: Vec<Op> = ipvs
        .services()?
        .into_iter()
        .filter(|o| bound.contains(&o.vs.addr) || (local.contains(&o.vs.addr) && DEFAULT_NODE_PORT_RANGE.contains(&o.vs.port)))
        .map(|o| Op::DelService(o.vs))
        .collect();
    if !dry_run {
        ipvs.apply(&ops)?;
    }
    Ok(ops.iter().map(|o| format!("virtual server {}", o)).collect())
}

/// kube-ipvs0's addresses and every other local address.
fn addresses(links: &mut dyn Links) -> Result<(BTreeSet<IpAddr>, BTreeSet<IpAddr>), LinkError> {
    let index = links.link_index(DUMMY_LINK)?;
    let all = links.addresses()?;
    let bound = all.iter().filter(|a| Some(a.index) == index).map(|a| a.ip).collect();
    let local = all.iter().filter(|a| Some(a.index) != index).map(|a| a.ip).collect();
    Ok((bound, local))
}

/// Destroys kube-proxy's ipsets that exist.
pub fn ipsets(runner: &mut dyn ipset::IpsetRunner, dry_run: bool) -> Result<Vec<String>, ipset::IpsetError> {
    let live = ipset::parse_save(&runner.save()?);
    let ours: Vec<String> = ipset::all_names().into_iter().filter(|n| live.contains_key(n)).collect();
    if !dry_run && !ours.is_empty() {
        let text: String = ours.iter().map(|n| format!("flush {n}\ndestroy {n}\n")).collect();
        runner.restore(&text)?;
    }
    Ok(ours.into_iter().map(|n| format!("ipset {n}")).collect())
}

/// Deletes kube-ipvs0.
pub fn link(links: &mut dyn Links, dry_run: bool) -> Result<Vec<String>, LinkError> {
    let Some(index) = links.link_index(DUMMY_LINK)? else { return Ok(Vec::new()) };
    if !dry_run {
        links.delete_link(index)?;
    }
    Ok(vec![format!("link {DUMMY_LINK}")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::dump::parse;

    #[test]
    fn ipvs_chains_and_their_jumps_go() {
        let live = parse(
            "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-IPVS-FILTER - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-SOURCE-RANGES-FIREWALL - [0:0]\n\
             -A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER\n\
             -A KUBE-PROXY-FIREWALL -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL\n\
             -A KUBE-SOURCE-RANGES-FIREWALL -j DROP\nCOMMIT\n",
        )
        .unwrap();
        let (text, removed) = iptables_plan(&live);
        assert_eq!(
            text,
            "*filter\n:KUBE-IPVS-FILTER - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-SOURCE-RANGES-FIREWALL - [0:0]\n\
             -D INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER\n\
             -X KUBE-IPVS-FILTER\n-X KUBE-SOURCE-RANGES-FIREWALL\nCOMMIT\n"
        );
        assert_eq!(removed.len(), 3);
    }

    #[test]
    fn the_chains_cleanup_removes_are_the_declared_ones_iptables_mode_lacks() {
        let only = |table| rules::declared(table).iter().copied().filter(|c| ipvs_only(table, c)).collect::<Vec<_>>();
        assert_eq!(only("nat"), ["KUBE-NODE-PORT", "KUBE-LOAD-BALANCER"]);
        assert_eq!(only("filter"), ["KUBE-NODE-PORT", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"]);
        assert!(only("mangle").is_empty() && !ipvs_only("nat", "KUBE-SERVICES"));
        for own in OWN_CHAINS {
            assert!(["nat", "filter"].iter().any(|t| rules::declared(t).contains(&own)), "{own} is declared nowhere: cleanup would leave it");
        }
    }
}

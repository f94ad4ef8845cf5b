//! `svcproxy cleanup` (kube-proxy's `CleanupLeftovers`), as a pure plan over what the kernel
//! holds: remove the jumps from built-in chains into kube-proxy's chains, then flush and
//! delete kube-proxy's chains. KUBE-FIREWALL (shared with kubelet) is left alone, as
//! kube-proxy leaves it.

use super::render::fixed::{FILTER_CHAINS, NAT_CHAINS};
use crate::xtables::names::*;
use crate::xtables::{quote, Dump};

const BUILTIN: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// Chains kube-proxy's cleanup removes from a table: the top-level chains the renderer
/// declares (KUBE-FIREWALL, kubelet's too, is not one of them), the canaries and the
/// per-service chains.
fn removable(table: &str, chain: &str) -> bool {
    match table {
        "nat" => NAT_CHAINS.contains(&chain) || chain == KUBE_PROXY_CANARY || is_service_chain(chain),
        "filter" => FILTER_CHAINS.contains(&chain) || chain == KUBE_PROXY_CANARY,
        "mangle" => chain == KUBE_PROXY_CANARY,
        _ => false,
    }
}

/// The restore input that removes everything, and one line per removed item.
pub fn plan(live: &Dump) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut removed = Vec::new();
    for (table, t) in &live.tables {
        let chains: Vec<&str> = t.chains.iter().map(|c| c.name.as_str()).filter(|c| removable(table, c)).collect();
        if chains.is_empty() {
            continue;
        }
        let mut body = String::new();
        // Jumps into the removed chains, from built-in chains (deleted by spec, bottom up
        // is not needed: each spec names one rule).
        for r in &t.rules {
            let target = r.target.chain();
            if BUILTIN.contains(&r.chain.as_str()) && target.is_some_and(|j| chains.contains(&j)) {
                let args: Vec<String> = r.args.iter().chain(r.target.words()).map(quote).collect();
                body.push_str(&format!("-D {} {}\n", r.chain, args.join(" ")));
                removed.push(format!("{table} {}: {}", r.chain, args.join(" ")));
            }
        }
        for c in &chains {
            body.insert_str(0, &format!(":{c} - [0:0]\n"));
        }
        for c in &chains {
            body.push_str(&format!("-X {c}\n"));
            removed.push(format!("{table} chain {c}"));
        }
        text.push_str(&format!("*{table}\n{body}COMMIT\n"));
    }
    (text, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::dump::parse;

    #[test]
    fn removes_jumps_and_our_chains_but_not_kube_firewall_or_others() {
        let live = parse("*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-SERVICES - [0:0]\n:OTHER - [0:0]\n-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n-A INPUT -j KUBE-FIREWALL\n-A INPUT -j OTHER\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SVC-AAAA - [0:0]\n:CNI-X - [0:0]\nCOMMIT\n").unwrap();
        let (text, removed) = plan(&live);
        assert!(text.contains("-D INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n"));
        assert!(text.contains("-X KUBE-SERVICES") && text.contains("-X KUBE-SVC-AAAA"));
        assert!(!text.contains("KUBE-FIREWALL") && !text.contains("OTHER") && !text.contains("CNI-X"), "{text}");
        assert_eq!(removed.len(), 3);
    }
}

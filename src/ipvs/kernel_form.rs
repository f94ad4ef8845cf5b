//! IPVS mode's iptables rules in the form the kernel holds them: the `ipvs` match as
//! `iptables-save` prints it, so what IPVS mode wants compares equal with what a synced
//! node reads back. Pure.

use super::values::Protocol;
use crate::xtables::{Dump, Rule, Table};

/// The rules as the kernel holds them: the `ipvs` match as `iptables-save` prints it
/// (libxt_ipvs: `--vproto` as a number, then `--vaddr`, then `--vport`), so a synced node
/// compares equal.
pub fn kernel_form(tables: &[Table]) -> Dump {
    let mut dump = Dump::default();
    for t in tables {
        let kernel = Table { rules: t.rules.iter().map(|r| ipvs_match(r).unwrap_or_else(|| r.clone())).collect(), ..t.clone() };
        kernel.add_to(&mut dump);
    }
    dump
}

fn ipvs_match(rule: &Rule) -> Option<Rule> {
    let words = rule.args.words();
    let at = |flag: &str| words.iter().position(|w| *w == flag);
    let (a, p, v) = (at("--vaddr")?, at("--vproto")?, at("--vport")?);
    if !(a + 2 == p && p + 2 == v) {
        return None;
    }
    let named = *words.get(p + 1)?;
    let number = Protocol::from_name(named).map(|p| p.number().to_string());
    let proto = number.as_deref().unwrap_or(named);
    let mut fixed: Vec<&str> = words[..a].to_vec();
    fixed.extend(["--vproto", proto, "--vaddr", words.get(a + 1)?, "--vport", words.get(v + 1)?]);
    fixed.extend(words.get(v + 2..)?.iter().copied());
    Some(Rule::new(&rule.chain, fixed, rule.target.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::Target;

    #[test]
    fn ipvs_match_in_kernel_form() {
        let mut filter = Table::new("filter");
        filter.chains.push("KUBE-IPVS-OUT-FILTER".into());
        filter.rules.push(Rule::new("KUBE-IPVS-OUT-FILTER", "-s 1.2.3.4 -m ipvs --vaddr 1.2.3.4 --vproto tcp --vport 80".split(' '), Target::Drop));
        filter.rules.push(Rule::new("X", [""; 0], Target::jump("Y")));
        assert_eq!(
            kernel_form(&[filter]).to_text(),
            "*filter\n:KUBE-IPVS-OUT-FILTER - [0:0]\n-A KUBE-IPVS-OUT-FILTER -s 1.2.3.4 -m ipvs --vproto 6 --vaddr 1.2.3.4 --vport 80 -j DROP\n-A X -j Y\nCOMMIT\n"
        );
    }
}

//! A jump from a built-in chain (`INPUT`, `PREROUTING`, …) into one of a mode's own chains.
//! The jumps are not part of the rules a mode writes: a full sync ensures them, inserting
//! the missing ones at position 1 in the order of the mode's own list, as kube-proxy's
//! `EnsureRule(Prepend)` does.

use super::rule::Rule;
use super::target::Target;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub table: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    /// The rule's match words (exec arguments, unquoted); its target is `-j TO`.
    pub matches: Vec<String>,
}

impl Jump {
    /// `-A FROM [-m conntrack --ctstate NEW] [-m comment --comment COMMENT] -j TO` in `table`.
    pub fn new(table: &'static str, from: &'static str, to: &'static str, ct_new: bool, comment: &str) -> Jump {
        let mut matches: Vec<String> = Vec::new();
        if ct_new {
            matches.extend(["-m", "conntrack", "--ctstate", "NEW"].map(String::from));
        }
        if !comment.is_empty() {
            matches.extend(["-m".into(), "comment".into(), "--comment".into(), comment.into()]);
        }
        Jump { table, from, to, matches }
    }

    /// The jump as a rule value.
    pub fn rule(&self) -> Rule {
        Rule::new(self.from, &self.matches, Target::jump(self.to))
    }

    /// The rule's words after `FROM` (matches, then `-j TO`), as `iptables -I FROM` takes them.
    pub fn words(&self) -> Vec<String> {
        let rule = self.rule();
        rule.args.iter().chain(rule.target.words()).map(str::to_string).collect()
    }
}

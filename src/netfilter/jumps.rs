//! A jump from a built-in chain (`INPUT`, `PREROUTING`, …) into one of a mode's own chains.
//! The jumps are not part of the rules a mode writes: a full sync ensures them, inserting
//! the missing ones at position 1 in the order of the mode's own list, as kube-proxy's
//! `EnsureRule(Prepend)` does.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub table: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    /// The rule's arguments after `-A FROM` (exec arguments, unquoted).
    pub args: Vec<String>,
}

impl Jump {
    /// `-A FROM [-m conntrack --ctstate NEW] [-m comment --comment COMMENT] -j TO` in `table`.
    pub fn new(table: &'static str, from: &'static str, to: &'static str, ct_new: bool, comment: &str) -> Jump {
        let mut args: Vec<String> = Vec::new();
        if ct_new {
            args.extend(["-m", "conntrack", "--ctstate", "NEW"].map(String::from));
        }
        if !comment.is_empty() {
            args.extend(["-m".into(), "comment".into(), "--comment".into(), comment.into()]);
        }
        args.extend(["-j".into(), to.into()]);
        Jump { table, from, to, args }
    }
}

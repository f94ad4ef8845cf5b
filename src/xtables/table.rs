//! One table's part of a restore input as values: the chains it declares (flushes) and
//! the rules it appends, framed as `*table … COMMIT` by the one writer here.

use super::dump::Dump;
use super::rule::{Chain, Rule};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: &'static str,
    pub chains: Vec<Chain>,
    pub rules: Vec<Rule>,
}

impl Table {
    pub fn new(name: &'static str) -> Table {
        Table { name, chains: Vec::new(), rules: Vec::new() }
    }

    /// Writes `*name`, the chain declarations, the rules and `COMMIT`.
    pub fn write(&self, out: &mut String) {
        out.push('*');
        out.push_str(self.name);
        out.push('\n');
        for c in &self.chains {
            out.push(':');
            out.push_str(c);
            out.push_str(" - [0:0]\n");
        }
        self.rules.iter().for_each(|r| r.write(out));
        out.push_str("COMMIT\n");
    }

    /// Adds this table's chains and rules to `dump`.
    pub fn add_to(&self, dump: &mut Dump) {
        let t = dump.table(self.name);
        self.chains.iter().for_each(|c| t.declare(c));
        self.rules.iter().for_each(|r| t.append(r));
    }
}

/// Several tables as one restore input, in order.
pub fn write_all(tables: &[Table]) -> String {
    let mut out = String::new();
    tables.iter().for_each(|t| t.write(&mut out));
    out
}

/// Several tables as one dump, in order.
pub fn dump_all(tables: &[Table]) -> Dump {
    let mut dump = Dump::default();
    tables.iter().for_each(|t| t.add_to(&mut dump));
    dump
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_framed_once_and_reads_back_the_same() {
        let mut nat = Table::new("nat");
        nat.chains.push("KUBE-SERVICES".into());
        nat.rules.push(Rule::new("KUBE-SERVICES", ["-m", "comment", "--comment", "a b"], crate::xtables::Target::Return));
        let filter = Table::new("filter");
        let text = write_all(&[nat.clone(), filter.clone()]);
        assert_eq!(text, "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment \"a b\" -j RETURN\nCOMMIT\n*filter\nCOMMIT\n");
        let parsed = super::super::dump::parse(&text).unwrap();
        let values = dump_all(&[nat, filter]);
        assert_eq!(values.to_text(), parsed.to_text());
        assert_eq!(values.order, vec!["nat", "filter"]);
    }
}

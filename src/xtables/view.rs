//! Rules by table and chain, read-only: what the delta ([`super::delta::compute_with`])
//! compares. Two kinds stand behind it: a [`Dump`] (read from the kernel, or parsed from
//! text) and a [`View`], which borrows a ruleset's rule values, so a full sync holds no
//! second copy of the desired rules beside the kernel's.

use std::collections::HashMap;

use super::dump::{Dump, TableDump};
use super::rule::{Args, Chain, Rule};
use super::target::Target;

/// One rule as a comparison reads it: its match words and its target.
#[derive(Debug, Clone, Copy)]
pub struct RuleRef<'a> {
    pub args: &'a Args,
    pub target: &'a Target,
}

/// A table's declared chains and each chain's rules, in order.
pub trait Chains {
    /// The declared chains, in order (as often as they are declared).
    fn declared(&self) -> impl Iterator<Item = &Chain>;
    /// The rules of `chain`, in order (none for a chain without rules).
    fn rules_of<'s>(&'s self, chain: &str) -> impl Iterator<Item = RuleRef<'s>>;
}

/// Tables by name.
pub trait Tables {
    type Table: Chains;
    fn table(&self, name: &str) -> Option<&Self::Table>;
}

impl Chains for TableDump {
    fn declared(&self) -> impl Iterator<Item = &Chain> {
        self.chains.iter().map(|c| &c.name)
    }
    fn rules_of<'s>(&'s self, chain: &str) -> impl Iterator<Item = RuleRef<'s>> {
        TableDump::rules_of(self, chain).map(|r| RuleRef { args: &r.args, target: &r.target })
    }
}

impl Tables for Dump {
    type Table = TableDump;
    fn table(&self, name: &str) -> Option<&TableDump> {
        self.tables.get(name)
    }
}

/// A rule of a [`ViewTable`]: the ruleset's own value, or one of the few the walk made on
/// the spot (the fixed chains' rules), kept by the view.
#[derive(Debug, Clone, Copy)]
enum Item<'a> {
    Borrowed(&'a Rule),
    Owned(u32),
}

/// One table of a [`View`].
#[derive(Debug, Default)]
pub struct ViewTable<'a> {
    decls: Vec<Chain>,
    /// Each chain's slot: declared chains first, then any chain only rules name.
    slots: HashMap<Chain, u32>,
    /// The rules grouped by slot, in order inside each slot (once [`ViewTable::group`]ed).
    items: Vec<(u32, Item<'a>)>,
    /// Where each slot's rules start in `items` (one more entry than slots).
    starts: Vec<u32>,
    owned: Vec<Rule>,
}

impl<'a> ViewTable<'a> {
    fn slot(&mut self, chain: &Chain) -> u32 {
        let next = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        *self.slots.entry(chain.clone()).or_insert(next)
    }

    /// Declares `chain` (`:NAME - [0:0]`).
    pub fn declare(&mut self, chain: &Chain) {
        self.slot(chain);
        self.decls.push(chain.clone());
    }

    /// Appends rules the view borrows.
    pub fn held(&mut self, rules: &'a [Rule]) {
        self.items.reserve(rules.len());
        for r in rules {
            let s = self.slot(&r.chain);
            self.items.push((s, Item::Borrowed(r)));
        }
    }

    /// Appends rules the view keeps.
    pub fn copied(&mut self, rules: &[Rule]) {
        for r in rules {
            let s = self.slot(&r.chain);
            let at = u32::try_from(self.owned.len()).unwrap_or(u32::MAX);
            self.owned.push(r.clone());
            self.items.push((s, Item::Owned(at)));
        }
    }

    /// Groups the rules by chain (stable: each chain's rules keep their order).
    fn group(&mut self) {
        self.items.sort_by_key(|(s, _)| *s);
        self.items.shrink_to_fit();
        let slots = self.slots.len();
        let mut starts = Vec::with_capacity(slots + 1);
        let mut at = 0usize;
        for s in 0..slots {
            starts.push(u32::try_from(at).unwrap_or(u32::MAX));
            while at < self.items.len() && self.items[at].0 as usize == s {
                at += 1;
            }
        }
        starts.push(u32::try_from(at).unwrap_or(u32::MAX));
        self.starts = starts;
    }

    fn rule(&self, item: Item<'a>) -> &Rule {
        match item {
            Item::Borrowed(r) => r,
            Item::Owned(i) => &self.owned[i as usize],
        }
    }

    /// Lines of restore text the table stands for (`*table`, declarations, rules, `COMMIT`).
    fn lines(&self) -> usize {
        2 + self.decls.len() + self.items.len()
    }
}

impl Chains for ViewTable<'_> {
    fn declared(&self) -> impl Iterator<Item = &Chain> {
        self.decls.iter()
    }
    fn rules_of<'s>(&'s self, chain: &str) -> impl Iterator<Item = RuleRef<'s>> {
        let range = self.slots.get(chain).map_or(0..0, |&s| self.starts[s as usize] as usize..self.starts[s as usize + 1] as usize);
        self.items[range].iter().map(|(_, item)| {
            let r = self.rule(*item);
            RuleRef { args: &r.args, target: &r.target }
        })
    }
}

/// Tables of rules borrowed from their owner (a ruleset), built table by table
/// ([`View::table_mut`], then the table's `declare`/`held`/`copied`), then [`View::finish`]ed.
#[derive(Debug, Default)]
pub struct View<'a> {
    tables: Vec<(String, ViewTable<'a>)>,
}

impl<'a> View<'a> {
    /// Starts table `name` (or goes back to it): what follows goes into it.
    pub fn table_mut(&mut self, name: &str) -> &mut ViewTable<'a> {
        let at = match self.tables.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.tables.push((name.to_string(), ViewTable::default()));
                self.tables.len() - 1
            }
        };
        &mut self.tables[at].1
    }

    /// Groups every table's rules by chain; the view is read only after this.
    pub fn finish(mut self) -> Self {
        self.tables.iter_mut().for_each(|(_, t)| t.group());
        self
    }

    /// Lines of the restore input the view stands for, as [`Dump::lines`] counts them.
    pub fn lines(&self) -> usize {
        self.tables.iter().map(|(_, t)| t.lines()).sum()
    }
}

impl<'a> Tables for View<'a> {
    type Table = ViewTable<'a>;
    fn table(&self, name: &str) -> Option<&ViewTable<'a>> {
        self.tables.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::dump::parse;

    fn words<C: Chains>(t: &C, chain: &str) -> Vec<String> {
        t.rules_of(chain).map(|r| format!("{} {:?}", r.args.words().join(" "), r.target)).collect()
    }

    #[test]
    fn a_view_reads_as_the_dump_of_the_same_rules() {
        let text = "*nat\n:A - [0:0]\n:B - [0:0]\n:A - [0:0]\n-A A -p tcp -j B\n-A B -j RETURN\n-A A -p udp -j B\n-A C -j ACCEPT\nCOMMIT\n";
        let dump = parse(text).unwrap();
        let nat = dump.tables.get("nat").unwrap();
        let rules: Vec<Rule> = nat.rules.iter().map(|r| Rule { chain: r.chain.clone(), args: r.args.clone(), target: r.target.clone() }).collect();
        let mut view = View::default();
        {
            let t = view.table_mut("nat");
            nat.chains.iter().for_each(|c| t.declare(&c.name));
            t.held(&rules[..1]);
            t.copied(&rules[1..2]);
            t.held(&rules[2..]);
        }
        let view = view.finish();
        let vt = view.table("nat").unwrap();
        let names = |c: &dyn Fn() -> Vec<String>| c();
        assert_eq!(names(&|| vt.declared().map(|c| c.to_string()).collect()), ["A", "B", "A"]);
        assert_eq!(vt.declared().count(), nat.declared().count());
        for chain in ["A", "B", "C", "D"] {
            assert_eq!(words(vt, chain), words(nat, chain), "{chain}");
        }
        assert_eq!(words(vt, "A").len(), 2);
        assert_eq!(view.lines(), dump.lines());
        assert!(view.table("filter").is_none());
    }
}

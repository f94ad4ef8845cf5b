//! The anonymous sets a full sync itself creates, recorded for the cache
//! ([`super::anonfile`]) without dumping their elements: their contents are known from
//! the batches sent, their handles from one dump of the table's set list after the last
//! batch. Exact, never a guess: a set is recorded under the name svcproxy gave it only
//! when no other commit can have come between the batch that created it and that dump —
//! the ruleset's generation (one more per commit) before the first batch creating
//! anonymous sets, plus the batches acknowledged since (each of which surely committed:
//! it added a rule), equals the generation around the dump. Otherwise nothing is
//! recorded, and the next read dumps those sets.

use std::collections::HashMap;

use super::anonfile::AnonCache;
use super::wire::canon::{self, Canon};

use super::wire::nfta::msg::{NEWRULE, NEWSET, NEWSETELEM};

/// What one batch creates that the cache wants, read from its messages.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Created {
    /// Anonymous sets by the name svcproxy gave them: their canonical content.
    pub anonymous: HashMap<String, Canon>,
    /// Whether the batch adds a rule (then the kernel's commit of it surely counts one
    /// generation).
    pub adds_rule: bool,
}

/// The anonymous sets (named by svcproxy, not nft's `%d` templates) and rules of a batch
/// (`bytes`: begin and messages, as [`super::wire::Batch::bytes`] gives them).
pub fn created(bytes: &[u8]) -> Created {
    let mut headers: HashMap<String, Canon> = HashMap::new();
    let mut members: HashMap<String, canon::Elements> = HashMap::new();
    let mut out = Created::default();
    let mut sets = canon::BatchSets::default();
    // Only the set messages are parsed (a full sync's batches are mostly rules and
    // named sets' elements); an element message's set name is looked up in place first.
    for (kind, payload) in canon::objects(bytes) {
        match kind {
            NEWRULE => out.adds_rule = true,
            NEWSET => {
                let attrs = canon::parse(payload);
                if !canon::is_anonymous(&attrs) {
                    continue;
                }
                let name = sets.created(attrs.iter().map(|(t, v)| (*t, v.as_slice())));
                if let (Some(name), Some(header)) = (name, canon::set_header(&attrs)) {
                    if !name.contains('%') {
                        headers.insert(name, header);
                    }
                }
            }
            NEWSETELEM => {
                let Some(name) = sets.of_elements(canon::Attrs(payload)) else { continue };
                if !headers.contains_key(&name) {
                    continue;
                }
                match canon::elements(&canon::parse(payload)) {
                    Some(e) => members.entry(name).or_default().extend(e),
                    // An element the canonical form does not know: the set is not recorded.
                    None => {
                        headers.remove(&name);
                    }
                }
            }
            _ => {}
        }
    }
    for (name, header) in headers {
        let mut elems = members.remove(&name).unwrap_or_default();
        out.anonymous.insert(name, canon::set_content(&header, &mut elems));
    }
    out
}

/// One family's full sync being recorded.
#[derive(Debug, Default)]
pub struct Recording {
    /// The generation before the first batch that created anonymous sets (`None`: none yet).
    pub start: Option<u32>,
    /// Batches acknowledged since `start`.
    pub batches: u32,
    /// A batch since `start` that may not have committed (it added no rule): nothing is recorded.
    pub unsure: bool,
    pub anonymous: HashMap<String, Canon>,
}

impl Recording {
    /// Whether the generation must be read before sending a batch that creates `c`.
    pub fn needs_start(&self, c: &Created) -> bool {
        self.start.is_none() && !c.anonymous.is_empty()
    }

    /// A batch acknowledged by the kernel.
    pub fn acknowledged(&mut self, c: Created) {
        if self.start.is_none() {
            return;
        }
        self.batches += 1;
        self.unsure |= !c.adds_rule;
        self.anonymous.extend(c.anonymous);
    }

    /// Into `cache`: the recorded sets the dump (`generation` before and after it, the
    /// table's handle, its anonymous sets' names and handles) shows, when no other commit
    /// came between; and, with the dump whole, the family's entries of sets that are no
    /// longer there dropped. Returns how many were recorded (`None`: the dump cannot be
    /// trusted for that).
    pub fn record(self, cache: &mut AnonCache, family: u8, dump: &SetDump) -> Option<usize> {
        let start = self.start?;
        let (before, after) = (dump.generation_before?, dump.generation_after?);
        if self.unsure || before != after || before.wrapping_sub(start) != self.batches {
            return None;
        }
        let mut n = 0;
        let live: HashMap<u64, &str> = dump.anonymous.iter().map(|(name, h)| (*h, name.as_str())).collect();
        cache.retain(|k, _| k.0 != family || (k.1 == dump.table && live.contains_key(&k.2)));
        for (name, handle) in &dump.anonymous {
            if let Some(content) = self.anonymous.get(name) {
                cache.insert((family, dump.table, *handle), content.clone());
                n += 1;
            }
        }
        Some(n)
    }
}

/// One dump of a table's set list, between two reads of the generation.
#[derive(Debug, Clone, Default)]
pub struct SetDump {
    pub generation_before: Option<u32>,
    pub generation_after: Option<u32>,
    pub table: u64,
    /// Anonymous sets: name and handle.
    pub anonymous: Vec<(String, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::wire::encode_named;

    const VMAP: &str = "add rule ip kube-proxy s numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }\n";

    fn batch(text: &str, next: u32) -> Created {
        created(encode_named(text, Some(next)).unwrap().bytes())
    }

    #[test]
    fn a_batch_names_its_anonymous_sets_with_the_content_a_rule_binds() {
        let c = batch(VMAP, 7);
        assert!(c.adds_rule);
        assert_eq!(c.anonymous.keys().collect::<Vec<_>>(), ["__map7"]);
        // The content is what the rule's canonical form holds for it (a dump's, too).
        let rule = canon::rules_of_text(VMAP).unwrap().concat();
        let content = &c.anonymous["__map7"];
        assert!(rule.windows(content.len()).any(|w| w == content.as_slice()), "the rule's canonical form embeds the recorded content");
        let other = batch(&VMAP.replace("endpoint-b", "endpoint-c"), 7);
        assert_ne!(other.anonymous["__map7"], *content);
        // nft's template: the kernel names the set, svcproxy does not know the name.
        assert!(created(encode_named(VMAP, None).unwrap().bytes()).anonymous.is_empty());
        let declare = batch("add table ip kube-proxy\nadd chain ip kube-proxy s\n", 1);
        assert_eq!(declare, Created::default());
    }

    fn dump(before: u32, after: u32, sets: &[(&str, u64)]) -> SetDump {
        SetDump { generation_before: Some(before), generation_after: Some(after), table: 3, anonymous: sets.iter().map(|(n, h)| (n.to_string(), *h)).collect() }
    }

    #[test]
    fn sets_are_recorded_only_when_no_other_commit_came_between() {
        let run = |batches: &[Created], d: &SetDump, start: u32| {
            let mut r = Recording::default();
            for b in batches {
                if r.needs_start(b) {
                    r.start = Some(start);
                }
                r.acknowledged(Created { anonymous: b.anonymous.clone(), adds_rule: b.adds_rule });
            }
            let mut cache: AnonCache = [((2, 3, 99), b"gone".to_vec()), ((10, 3, 99), b"v6".to_vec())].into();
            let n = r.record(&mut cache, 2, d);
            (n, cache)
        };
        let declare = batch("add table ip kube-proxy\nadd chain ip kube-proxy s\n", 1);
        let fill = batch(VMAP, 7);
        let last = batch("add rule ip kube-proxy t jump s\n", 8);
        // Two batches after the start: the generation two further on around the dump.
        let (n, cache) = run(&[declare, batch(VMAP, 7), batch("add rule ip kube-proxy t jump s\n", 8)], &dump(12, 12, &[("__map7", 40), ("__map1", 20)]), 10);
        assert_eq!(n, Some(1));
        assert_eq!(cache.get(&(2, 3, 40)), Some(&fill.anonymous["__map7"]));
        assert!(!cache.contains_key(&(2, 3, 99)), "the family's sets no longer there are dropped");
        assert!(cache.contains_key(&(10, 3, 99)), "the other family's stay");
        // Another commit came between (one generation more), or during the dump: nothing.
        for d in [dump(13, 13, &[("__map7", 40)]), dump(12, 13, &[("__map7", 40)])] {
            let (n, cache) = run(&[batch(VMAP, 7), batch("add rule ip kube-proxy t jump s\n", 8)], &d, 10);
            assert_eq!(n, None);
            assert!(!cache.contains_key(&(2, 3, 40)) && cache.contains_key(&(2, 3, 99)), "left as it was");
        }
        // A batch since the start that may not have committed: nothing.
        let (n, _) = run(&[batch(VMAP, 7), batch("add chain ip kube-proxy u\n", 8)], &dump(12, 12, &[("__map7", 40)]), 10);
        assert_eq!(n, None);
        // No anonymous set created: nothing to record.
        let (n, _) = run(&[last], &dump(11, 11, &[]), 10);
        assert_eq!(n, None);
    }
}

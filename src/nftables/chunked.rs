//! A full sync's transactions, pure, for both writers: the declarations, then (over
//! netlink) bounded batches filling the new service chains, then one transaction that
//! switches. Through `nft -f`, whose every run reads the whole table first, there are no
//! chunks: two transactions, declare and switch. A [`Writer`] writes each batch as it
//! is sent, one at a time.
//!
//! Why: the kernel (6.18 measured) walks the transaction's whole list of changes every time
//! a rule binds an anonymous set (`__nft_set_trans_bind`; every service chain's `numgen
//! random mod N vmap { … }`), so one kube-proxy-shaped transaction costs (anonymous sets) ×
//! (its length): quadratic in the cluster (BENCHMARKS.md, nftables mode). Declaring first
//! takes the chain creations out of the switching transaction's list; batches of bounded
//! length make the rest linear. (What they cannot remove: each anonymous set's creation
//! and lookups also walk the *table's* whole set list, O(sets²) per table whatever the
//! batches.) Only batches that cost no whole-table read may be split this way: over
//! netlink each batch is just its own commit.
//!
//! The batches, in order:
//! 1. **declare** ([`Writer::declare`]): the table, every chain, set and map (`add`
//!    changes nothing of what is already there: it only creates what is new, empty and
//!    unreferenced);
//! 2. **chunks** ([`Writer::chunk`], [`Writer::chunks`] of them, netlink only): the
//!    service ports' chains that are *new* (not in the live table before this sync), each
//!    flushed and filled whole inside one chunk, chunks cut at a line bound. Nothing
//!    reaches a new chain yet: only the map elements, the fixed chains and the existing
//!    chains lead to service chains, and all of those change in the last batch; so a
//!    packet never meets a half-filled chain;
//! 3. **last** ([`Writer::last`]): the fixed chains and every chain that *already existed*
//!    (every chain, without chunks), flushed and refilled, the ones binding anonymous sets
//!    first (so each bind walks a short list), then the sets' and maps' flushes and
//!    elements (which bind no anonymous set). This one transaction switches what serves
//!    packets, atomically, as kube-proxy's full sync does.
//!
//! Chains that exist and change content are refilled in the last batch, not in a chunk
//! under their own name or a new one: kube-proxy's chain names are part of the table
//! svcproxy must leave (byte-identical listing, migration from kube-proxy), and refilling
//! them early would switch those services before the maps and leave them switched if a
//! later batch failed. The price: on a live table whose chains all exist (a restart, a
//! periodic full sync), every chain that differs is in the last batch; without a live
//! read ([`super::delta`]) that is every chain.
//!
//! Over a live table read first ([`super::delta`]: a [`Plan`]), the batches hold only what
//! differs: the declaring batch leaves out the regular chains that exist (their `add` is a
//! no-op, but the kernel still queues an update for each), the last batch refills only the
//! existing chains whose rules the kernel does not hold exactly, and updates a named set
//! or map by its element difference (deletes, then adds) instead of a flush and a refill.
//!
//! A refused batch leaves what serves packets unchanged (chunks only fill unreachable new
//! chains; the last batch is atomic); the caller deletes the new chains and sets again.
//!
//! A sync writes each batch when it sends it and drops it before writing the next: at
//! 10,000 services the batches' text and rule lists, all at once, were a large part of a
//! cold sync's peak memory. A cold start's interim rules ([`super::cold`]) are made the
//! same way, for the batch that holds them.

use std::collections::{HashMap, HashSet};

use super::delta::Plan;
use super::model::{self, Rule, Script, Table};

/// The default bound of a chunk, in lines (commands) of `nft -f` text: long enough that
/// the per-commit cost is paid rarely, short enough that the bind walk stays small
/// (BENCHMARKS.md: measured at 10,000 services × 10 endpoints).
pub const CHUNK_LINES: usize = 20_000;

/// Whether `chain` is one of a service port's (`service-`, `local-`, `external-`,
/// `firewall-`, `endpoint-`, then the 8-character base32 hash and `-`): the chains a chunk
/// may fill. Fixed names with those prefixes (`firewall-check`, `service-ips`) are not.
fn per_service(chain: &str) -> bool {
    ["service-", "local-", "external-", "firewall-", "endpoint-"].iter().any(|p| {
        chain.strip_prefix(p).is_some_and(|rest| {
            let b = rest.as_bytes();
            b.len() > 9 && b[8] == b'-' && b[..8].iter().all(|c| c.is_ascii_uppercase() || (b'2'..=b'7').contains(c))
        })
    })
}

/// A full sync's batches written one at a time, each when it is sent: a large table's
/// batches never exist all at once. With `interim` (a cold start, [`super::cold`]), each
/// rule binding a numgen map the interim rewrites is written as its replacements, made
/// for the batch that holds them (counted in its lines, so the batches are cut as the
/// interim table's would be).
pub struct Writer<'t, 'p> {
    table: &'t Table,
    plan: Option<&'p Plan>,
    interim: bool,
    /// The declaring batch (a sync takes it, sends it and drops it first).
    pub declare: String,
    /// Its length, which sizes the last batch without chunks (kept: `declare` is taken).
    declared: usize,
    head: String,
    /// Each declared chain's rules.
    by_chain: Vec<Vec<&'t Rule>>,
    /// Rules of chains the table does not declare.
    orphans: Vec<&'t Rule>,
    /// The chunks' chains, in order, and where each chunk starts among them.
    fresh: Vec<usize>,
    starts: Vec<usize>,
    /// The chains the last batch refills, in its order.
    old: Vec<usize>,
}

impl<'t, 'p> Writer<'t, 'p> {
    /// `table`'s full sync as batches. `existing`: the chains the live table holds (empty
    /// when there is none); `max_lines`: a chunk's bound (a chain longer than that still
    /// goes whole, in a chunk of its own; `None`: no chunks, for `nft -f`). With a `plan`
    /// (the live table compared), only what differs (module documentation); with
    /// `interim`, the interim table's batches.
    pub fn new(table: &'t Table, existing: &HashSet<&str>, max_lines: Option<usize>, plan: Option<&'p Plan>, interim: bool) -> Self {
        let mut declare = String::new();
        // Over a live table compared, without the `add chain` lines of regular chains that exist.
        let head = model::declare_but(&mut declare, table, |name| plan.is_some() && existing.contains(name));
        let o = &table.objects;
        let index: HashMap<&str, usize> = o.chains.iter().enumerate().map(|(i, c)| (c.name.as_str(), i)).collect();
        let mut by_chain: Vec<Vec<&Rule>> = vec![Vec::new(); o.chains.len()];
        let mut orphans = Vec::new();
        for r in &o.rules {
            match index.get(r.chain.as_str()) {
                Some(&i) => by_chain[i].push(r),
                None => orphans.push(r),
            }
        }
        let is_fresh = |i: usize| max_lines.is_some() && per_service(&o.chains[i].name) && !existing.contains(o.chains[i].name.as_str());
        let max_lines = max_lines.unwrap_or(usize::MAX);
        let lines = |r: &Rule| if interim { super::cold::arms(r).unwrap_or(1) } else { 1 };
        let (mut fresh, mut starts, mut at) = (Vec::new(), Vec::new(), 0);
        for i in (0..o.chains.len()).filter(|&i| is_fresh(i)) {
            let n = by_chain[i].iter().map(|&r| lines(r)).sum::<usize>() + 1;
            if starts.is_empty() || (at > 0 && at + n > max_lines) {
                starts.push(fresh.len());
                at = 0;
            }
            fresh.push(i);
            at += n;
        }
        // A rule the interim rewrites binds no set any more.
        let binds = |r: &Rule| r.stmts().binds_anonymous_set() && !(interim && super::cold::arms(r).is_some());
        let anonymous = |i: usize| by_chain[i].iter().any(|&r| binds(r));
        let kept = |i: usize| plan.is_some_and(|p| p.same.contains(&o.chains[i].name));
        let old: Vec<usize> = (0..o.chains.len()).filter(|&i| !is_fresh(i) && !kept(i)).collect();
        let old = old.iter().copied().filter(|&i| anonymous(i)).chain(old.iter().copied().filter(|&i| !anonymous(i))).collect();
        Writer { table, plan, interim, declared: declare.len(), declare, head, by_chain, orphans, fresh, starts, old }
    }

    /// How many chunks there are.
    pub fn chunks(&self) -> usize {
        self.starts.len()
    }

    /// Chunk `k`: its chains, each flushed and filled. `arms` holds the interim's rules
    /// the chunk writes (emptied first).
    pub fn chunk<'a>(&self, k: usize, arms: &'a mut Vec<Rule>) -> Script<'a>
    where
        't: 'a,
    {
        self.make_arms(arms, self.chunk_chains(k), &[]);
        self.chunk_with(k, arms)
    }

    /// The last batch: the chains that existed (or every chain, without chunks) flushed
    /// and refilled, then the sets' and maps' changes. `arms` as for [`Writer::chunk`].
    pub fn last<'a>(&self, arms: &'a mut Vec<Rule>) -> Script<'a>
    where
        't: 'a,
    {
        self.make_arms(arms, &self.old, &self.orphans);
        self.last_with(arms)
    }

    /// The chains of chunk `k`.
    fn chunk_chains(&self, k: usize) -> &[usize] {
        let end = self.starts.get(k + 1).copied().unwrap_or(self.fresh.len());
        &self.fresh[self.starts[k]..end]
    }

    /// [`Writer::chunk`], its interim rules made: `arms` (empty without the interim).
    fn chunk_with<'a>(&self, k: usize, arms: &'a [Rule]) -> Script<'a>
    where
        't: 'a,
    {
        let mut out = self.script();
        self.fill(&mut out, self.chunk_chains(k), &[], arms);
        out
    }

    /// [`Writer::last`], its interim rules made: `arms` as for [`Writer::chunk_with`].
    fn last_with<'a>(&self, arms: &'a [Rule]) -> Script<'a>
    where
        't: 'a,
    {
        let mut last = self.script();
        last.text_mut().reserve(if self.starts.is_empty() { self.declared * 3 } else { 0 });
        // A rule for a chain the table does not declare: the kernel refuses it, as in one
        // transaction.
        self.fill(&mut last, &self.old, &self.orphans, arms);
        let o = &self.table.objects;
        match self.plan {
            None => {
                model::flush_sets(&mut last, &self.head, &o.sets);
                for e in &o.elements {
                    last.element(e);
                }
            }
            Some(p) => set_changes(&mut last, self.table, &self.head, p),
        }
        last
    }

    /// Into `arms` (emptied first), the interim's replacements of the rules of `chains`
    /// and `orphans`, in their order; nothing without the interim.
    fn make_arms(&self, arms: &mut Vec<Rule>, chains: &[usize], orphans: &[&'t Rule]) {
        arms.clear();
        if self.interim {
            let rules = chains.iter().flat_map(|&i| self.by_chain[i].iter().copied()).chain(orphans.iter().copied());
            rules.filter_map(super::cold::replacements).for_each(|r| arms.extend(r));
        }
    }

    fn script<'a>(&self) -> Script<'a> {
        Script::new(self.table.family, self.table.name)
    }

    /// Each of `chains` flushed and filled, then the `orphans`; with the interim, each rule
    /// it rewrites as its replacements, taken in order from `arms` ([`Writer::make_arms`]).
    fn fill<'a>(&self, out: &mut Script<'a>, chains: &[usize], orphans: &[&'t Rule], arms: &'a [Rule])
    where
        't: 'a,
    {
        let mut made = arms.iter();
        let mut write = |out: &mut Script<'a>, r: &'t Rule| match self.interim.then(|| super::cold::arms(r)).flatten() {
            Some(n) => made.by_ref().take(n).for_each(|a| out.rule(a)),
            None => out.rule(r),
        };
        for &i in chains {
            out.push_str(&format!("flush chain {} {}\n", self.head, self.table.objects.chains[i].name));
            for &r in &self.by_chain[i] {
                write(out, r);
            }
        }
        for &r in orphans {
            write(out, r);
        }
    }
}

/// The sets' and maps' changes in the last batch: element deletes of the diffed sets and
/// flushes of the others first, then the others' elements and the diffed sets' adds.
fn set_changes<'t>(last: &mut Script<'t>, table: &'t Table, head: &str, plan: &Plan) {
    let o = &table.objects;
    let (diffed, whole): (Vec<&model::Set>, Vec<&model::Set>) = o.sets.iter().partition(|s| plan.sets.contains_key(&s.name));
    for s in &diffed {
        for k in &plan.sets[&s.name].deletes {
            last.delete_element(&s.name, k.clone());
        }
    }
    model::flush_sets(last, head, whole);
    for e in o.elements.iter().filter(|e| !plan.sets.contains_key(&e.set)) {
        last.element(e);
    }
    for s in &diffed {
        for &i in &plan.sets[&s.name].adds {
            last.element(&o.elements[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::fake::FakeNft;
    use crate::nftables::model::{Chain, Element, Form, Objects, Set};
    use crate::net::IpFamily;
    use crate::nftables::names;

    /// The tests' reference: a full sync's batches (see the module documentation), all of
    /// them at once, without the interim.
    #[derive(Debug)]
    struct Chunked<'t> {
        declare: String,
        chunks: Vec<Script<'t>>,
        last: Script<'t>,
    }

    /// [`Writer::new`]'s batches, all written.
    fn write<'t>(table: &'t Table, existing: &HashSet<&str>, max_lines: Option<usize>, plan: Option<&Plan>) -> Chunked<'t> {
        let w = Writer::new(table, existing, max_lines, plan, false);
        let chunks = (0..w.chunks()).map(|k| w.chunk_with(k, &[])).collect();
        let last = w.last_with(&[]);
        Chunked { declare: w.declare, chunks, last }
    }

    /// An 8-character base32-like hash: `tag` and `k` in four letters.
    fn hash(tag: &str, k: usize) -> String {
        let code: String = (0..4).map(|d| (b'A' + ((k / 26usize.pow(d)) % 26) as u8) as char).collect();
        format!("{tag}{code}")
    }

    fn svc_chain(s: usize) -> String {
        format!("service-{}-ns/s{s}/tcp/p", hash("SVCS", s))
    }

    fn ep_chain(s: usize, e: usize) -> String {
        format!("endpoint-{}-ns/s{s}/tcp/p__10.1.0.{e}/80", hash("ENDP", s * 3 + e))
    }

    /// Fixed chains, then `n` services of two endpoints each.
    fn table(n: usize) -> Table {
        let mut o = Objects::default();
        o.chain(Chain::regular("services"));
        o.chain(Chain::regular("mark-for-masquerade"));
        o.sets.push(Set::map("service-ips", "ipv4_addr . inet_proto . inet_service : verdict", None));
        o.rule(Rule::new("services", "ip daddr . meta l4proto . th dport vmap @service-ips"));
        o.rule(Rule::new("mark-for-masquerade", "mark set mark or 0x00004000"));
        for s in 0..n {
            let svc = svc_chain(s);
            o.chain(Chain::regular(svc.clone()));
            for e in 1..=2 {
                let ep = ep_chain(s, e);
                o.chain(Chain::regular(ep.clone()));
                o.rule(Rule::new(ep, format!("dnat to 10.1.0.{e}:80")));
            }
            o.rule(Rule::new(svc.clone(), "ip saddr != 10.0.0.0/8 jump mark-for-masquerade"));
            o.rule(Rule::new(svc.clone(), format!("numgen random mod 2 vmap {{ 0 : goto {} , 1 : goto {} }}", ep_chain(s, 1), ep_chain(s, 2))));
            o.elements.push(Element::parsed("service-ips", &format!("10.0.{s}.1 . tcp . 80 : goto {svc}")));
        }
        Table { family: IpFamily::V4, name: "kube-proxy", comment: "c", objects: o }
    }

    fn apply(nft: &mut FakeNft, c: &Chunked) {
        nft.run(&c.declare).unwrap();
        for chunk in &c.chunks {
            nft.run(chunk).unwrap();
        }
        nft.run(&c.last).unwrap();
    }

    #[test]
    fn new_service_chains_go_in_bounded_chunks_and_the_last_batch_switches() {
        let t = table(10);
        let c = write(&t, &HashSet::new(), Some(12), None);
        // Each service is 3 chains, 7 lines; 12 lines hold one service's chains and a part
        // of the next's, chains whole.
        assert!(c.chunks.len() >= 6, "{}", c.chunks.len());
        for chunk in &c.chunks {
            assert!(chunk.lines().count() <= 12, "{chunk}");
            assert!(chunk.lines().all(|l| l.contains(" service-SVCS") || l.contains(" endpoint-ENDP")), "only service ports' chains: {chunk}");
            assert!(!chunk.contains("add element") && !chunk.contains("add chain"));
        }
        assert!(c.last.starts_with("flush chain ip kube-proxy services\n"), "{}", c.last);
        assert!(c.last.contains("flush map ip kube-proxy service-ips\n") && c.last.contains("add element"));
        assert!(c.last.lines().all(|l| !l.starts_with("flush chain ip kube-proxy service-SVCS")), "{}", c.last);
    }

    #[test]
    fn the_interims_batches_are_the_interim_tables_written_batch_by_batch() {
        let t = table(10);
        let i = crate::nftables::cold::interim(&t, 1).unwrap();
        for bound in [Some(1), Some(5), Some(12), Some(1000), None] {
            let want = write(&i.table, &HashSet::new(), bound, None);
            let w = Writer::new(&t, &HashSet::new(), bound, None, true);
            assert_eq!((w.declare.as_str(), w.chunks()), (want.declare.as_str(), want.chunks.len()), "bound {bound:?}");
            for (k, chunk) in want.chunks.iter().enumerate() {
                assert_eq!(&w.chunk(k, &mut Vec::new()), chunk, "bound {bound:?}, chunk {k}");
            }
            assert_eq!(w.last(&mut Vec::new()), want.last, "bound {bound:?}");
        }
        // Without the interim: the table's own batches.
        let w = Writer::new(&t, &HashSet::new(), Some(12), None, false);
        let want = write(&t, &HashSet::new(), Some(12), None);
        assert!((0..w.chunks()).all(|k| w.chunk(k, &mut Vec::new()) == want.chunks[k]) && w.last(&mut Vec::new()) == want.last);
    }

    #[test]
    fn chains_that_exist_are_refilled_in_the_last_batch() {
        let t = table(3);
        let (svc1, ep11, ep12) = (svc_chain(1), ep_chain(1, 1), ep_chain(1, 2));
        let existing: HashSet<&str> = ["services", "mark-for-masquerade", svc1.as_str(), ep11.as_str()].into_iter().collect();
        let c = write(&t, &existing, Some(1000), None);
        assert_eq!(c.chunks.len(), 1);
        assert!(!c.chunks[0].contains(&svc1) && !c.chunks[0].contains(&ep11), "{}", c.chunks[0]);
        assert!(c.chunks[0].contains(&format!("flush chain ip kube-proxy {ep12}\n")), "a new endpoint of an existing service: {}", c.chunks[0]);
        // The existing service chain (binding an anonymous map) first, then the others.
        assert!(c.last.starts_with(&format!("flush chain ip kube-proxy {svc1}\n")), "{}", c.last);
        assert!(c.last.contains(&format!("flush chain ip kube-proxy {ep11}\n")));
    }

    #[test]
    fn the_batches_leave_the_table_one_transaction_leaves() {
        let t = table(10);
        let mut one = FakeNft::new();
        one.run(&model::write(&t, Form::Transaction)).unwrap();
        for bound in [1, 5, 12, 1000] {
            let mut chunked = FakeNft::new();
            apply(&mut chunked, &write(&t, &HashSet::new(), Some(bound), None));
            assert_eq!(chunked.listing(IpFamily::V4), one.listing(IpFamily::V4), "bound {bound}");
            // Again over the live table (every chain exists now).
            let names: Vec<String> = t.objects.chains.iter().map(|c| c.name.clone()).collect();
            let existing: HashSet<&str> = names.iter().map(String::as_str).collect();
            let again = write(&t, &existing, Some(bound), None);
            assert!(again.chunks.is_empty());
            apply(&mut chunked, &again);
            assert_eq!(chunked.listing(IpFamily::V4), one.listing(IpFamily::V4), "bound {bound}, again");
        }
    }

    #[test]
    fn every_command_of_the_one_transaction_is_in_the_batches() {
        let t = table(4);
        let whole = model::write(&t, Form::Transaction);
        let mut one: Vec<&str> = whole.lines().collect();
        one.sort_unstable();
        for bound in [Some(5), None] {
            let c = write(&t, &HashSet::new(), bound, None);
            let mut all: Vec<&str> = c.declare.lines().chain(c.chunks.iter().flat_map(|s| s.lines())).chain(c.last.lines()).collect();
            all.sort_unstable();
            assert_eq!(one, all, "bound {bound:?}");
        }
    }

    #[test]
    fn without_a_bound_two_transactions_declare_then_switch_anonymous_binds_first() {
        let mut t = table(3);
        t.objects.sets.push(Set { flags: vec!["dynamic", "timeout"], timeout: Some(10800), ..Set::plain("affinity-a", "ipv4_addr", None) });
        let c = write(&t, &HashSet::new(), None, None);
        assert!(c.chunks.is_empty());
        assert!(c.declare.lines().all(|l| ["add table", "add chain", "add set", "add map"].iter().any(|p| l.starts_with(p))), "{}", c.declare);
        // The chains binding an anonymous map come first, each flush right before its rules.
        assert!(c.last.starts_with(&format!("flush chain ip kube-proxy {}\nadd rule ip kube-proxy {} ip saddr", svc_chain(0), svc_chain(0))), "{}", c.last);
        let first_other = c.last.find("flush chain ip kube-proxy services\n").unwrap();
        assert!((0..3).all(|s| c.last.find(&format!("flush chain ip kube-proxy {}\n", svc_chain(s))).unwrap() < first_other), "{}", c.last);
        assert!(c.last.find("flush map ip kube-proxy service-ips").unwrap() < c.last.find("add element").unwrap());
        assert!(!c.last.contains("flush set ip kube-proxy affinity-a"), "a dynamic set keeps its elements: {}", c.last);
        let mut one = FakeNft::new();
        one.run(&model::write(&t, Form::Transaction)).unwrap();
        let mut two = FakeNft::new();
        for _ in 0..2 {
            apply(&mut two, &c);
            assert_eq!(two.listing(IpFamily::V4), one.listing(IpFamily::V4), "into an empty kernel, then over the live table");
        }
    }

    #[test]
    fn fixed_chains_and_service_named_maps_are_never_chunked() {
        assert!(per_service("service-ULMVA6XW-ns1/svc1/tcp/p80") && per_service("endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"));
        let fixed = [names::SERVICES, names::SERVICE_IPS, names::SERVICE_NODEPORTS, names::SERVICE_ENDPOINTS_CHECK, names::FIREWALL_CHECK, names::FIREWALL_IPS, names::MARK_MASQ, names::NAT_PREROUTING];
        assert!(fixed.iter().all(|c| !per_service(c)), "{fixed:?}");
    }
}

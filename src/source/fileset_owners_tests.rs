//! The invariant of the owners: after any sequence of file changes, what
//! [`FileSet::apply`] gives (the events, the merge's rest, the errors) is what a full
//! merge of the same reads gives, compared with the last one as the watch compared them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::*;
use crate::derive::Completion;
use crate::gen::Rng;
use crate::model::Service;
use crate::source::file::input_files;

const DERIVE: Completion = Completion { force: false };

/// One document, its names drawn from a few so that files hold the same objects.
fn document(rng: &mut Rng, pods: bool) -> String {
    let (n, ip) = (rng.below(5), 1 + rng.below(3));
    let svc = |n: usize, ip: usize| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: s{n}, namespace: ns}}\nspec: {{clusterIP: 10.0.{n}.{ip}, selector: {{app: s{n}}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n");
    match rng.below(if pods { 12 } else { 10 }) {
        0..=2 => svc(n, ip),
        3..=5 => format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{n}-x, namespace: ns, labels: {{kubernetes.io/service-name: s{n}}}}}\naddressType: IPv4\nendpoints:\n- addresses: [10.1.{n}.{ip}]\nports: [{{name: http, port: 8080, protocol: TCP}}]\n"),
        6 => format!("apiVersion: v1\nkind: Node\nmetadata: {{name: node-{n}, labels: {{zone: z{ip}}}}}\n"),
        7 => format!("apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: c{n}}}\nspec: {{cidrs: [10.{ip}.0.0/16]}}\n"),
        8 => match rng.below(4) {
            0 => "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: ns}\nspec: {clusterIP: 10.0.0.300, ports: [{port: 80}]}\n".to_string(),
            1 => format!("apiVersion: svcproxy.dev/v1alpha1\nkind: SvcproxyFixture\nnode:\n  interfaceAddresses:\n    eth0:\n    - 192.168.0.{ip}/24\n"),
            _ => "# a comment\n".to_string(),
        },
        9 => svc(n, ip).replace("kind: Service", "kind: Unknown"),
        _ => format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, namespace: ns, labels: {{app: s{n}}}}}\nspec: {{containers: [{{name: c, image: x}}]}}\nstatus: {{phase: Running, podIP: 10.244.{n}.{ip}, conditions: [{{type: Ready, status: \"True\"}}]}}\n"),
    }
}

/// A file's text: a few documents, now and then one that does not parse.
fn text(rng: &mut Rng, pods: bool) -> String {
    let mut docs: Vec<String> = (0..rng.below(7)).map(|_| document(rng, pods)).collect();
    if rng.below(12) == 0 {
        docs.push("apiVersion: v1\nkind: Service\nmetadata: [\n".to_string());
    }
    if docs.is_empty() {
        return "# nothing\n".to_string();
    }
    docs.join("---\n")
}

/// Every event as text (the objects' values, not their allocations).
fn described(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| format!("{e:?}")).collect()
}

fn errors(errors: &[SourceError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// What the trackers hold: the last object applied of each identity.
#[derive(Default, PartialEq, Debug)]
struct Held {
    services: BTreeMap<NamespacedName, Service>,
    slices: BTreeMap<NamespacedName, crate::model::EndpointSlice>,
}

impl Held {
    fn of(objects: &Objects) -> Held {
        let mut held = Held::default();
        held.apply(&objects.applied().collect::<Vec<_>>());
        held
    }

    fn apply(&mut self, events: &[Event]) {
        for e in events {
            match e {
                Event::ServiceApplied(s) => drop(self.services.insert(s.id.clone(), (**s).clone())),
                Event::ServiceDeleted(id) => drop(self.services.remove(id)),
                Event::SliceApplied(s) => drop(self.slices.insert(s.id.clone(), (**s).clone())),
                Event::SliceDeleted(s) => drop(self.slices.remove(&s.id)),
                other => panic!("{other:?}"),
            }
        }
    }
}

fn rest_of(state: &ClusterState) -> String {
    format!(
        "fixture {:?}\nnodes {:?}\ncidrs {:?}\npods {:?}\nendpoints {:?}\nnotes {:#?}\nduplicates {:#?}",
        state.fixture, state.nodes, state.service_cidrs, state.extra.pods, state.extra.endpoints, state.notes, state.duplicates
    )
}

#[test]
fn the_incremental_merge_is_the_full_merge_across_random_file_changes() {
    let dir = Dir::new("random");
    let d = dir.0.as_path();
    let mut rng = Rng::new(0x5eed_0037);
    let (mut exact, mut compared, mut events_seen, mut finished, mut across) = (0, 0, 0, 0, 0);
    for sequence in 0..8 {
        // Some sequences have Pods now and then: the merge is finished, and not again.
        let pods = sequence % 2 == 1;
        for f in std::fs::read_dir(d).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        for i in 0..1 + rng.below(4) {
            std::fs::write(d.join(format!("f{i}.yaml")), text(&mut rng, pods)).unwrap();
        }
        let (mut inc, _) = FileSet::read(d);
        let (start, _) = inc.merge(&DERIVE);
        let mut held = Held::of(&start.objects);
        let (mut full, _) = FileSet::read(d);
        let (mut last, _) = full.merge(&DERIVE);
        for step in 0..30 {
            let was_finished = full.finished.is_some();
            let mut changed = Vec::new();
            for _ in 0..1 + rng.below(2) {
                let path = d.join(format!("f{}.yaml", rng.below(5)));
                match rng.below(6) {
                    0 if path.exists() => std::fs::remove_file(&path).unwrap(),
                    _ => {
                        let with_pods = pods && rng.below(3) == 0;
                        std::fs::write(&path, text(&mut rng, with_pods)).unwrap();
                        changed.push(path);
                    }
                }
            }
            changed.sort();
            changed.dedup();
            let (files, listing) = input_files(d).unwrap();
            let at = format!("sequence {sequence} step {step}");

            let reads = full.read_files(&changed);
            let read_errors = errors(&reads.errors);
            full.update(listing.clone(), &files, reads, &last.objects);
            let (mut merged, full_errors) = full.merge(&DERIVE);
            let want = merged.objects.events_since(&last.objects);

            let reads = inc.read_files(&changed);
            assert_eq!(errors(&reads.errors), read_errors, "{at}: the reads");
            let change = inc.apply(Some((listing, &files)), reads, &DERIVE);
            assert_eq!(errors(&change.errors), errors(&full_errors), "{at}: errors");
            assert_eq!(rest_of(&change.rest), rest_of(&merged.state), "{at}: the merge's rest");
            held.apply(&change.events);
            assert_eq!(held, Held::of(&merged.objects), "{at}: what the trackers hold");
            if !was_finished && full.finished.is_none() {
                assert_eq!(described(&change.events), described(&want), "{at}: the events");
                exact += 1;
            }
            compared += 1;
            events_seen += want.len();
            finished += usize::from(full.finished.is_some());
            across += merged.state.duplicates.iter().filter(|d| d.first.0 != d.again.0).count();
            last = merged;
        }
    }
    // The comparison is about something: events, finished merges, duplicates across files.
    let seen = format!("{exact} of {compared} steps compared event by event, {events_seen} events, {finished} finished, {across} duplicates across files");
    assert!(exact > compared / 2 && events_seen > compared && finished > 10 && across > compared, "{seen}");
    eprintln!("{seen}");
}

#[test]
fn a_change_of_one_file_touches_its_objects_only() {
    let dir = Dir::new("one");
    let d = dir.0.as_path();
    let svc = |n: usize, ip: usize| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: s{n}, namespace: ns}}\nspec: {{clusterIP: 10.0.{}.{}, ports: [{{port: 80}}]}}\n---\n", n / 200, ip);
    for f in 0..10 {
        let text: String = (0..100).map(|i| svc(f * 100 + i, 1 + i % 200)).collect();
        std::fs::write(d.join(format!("f{f}.yaml")), text).unwrap();
    }
    let (mut set, _) = FileSet::read(d);
    let start = set.merge(&DERIVE).0.objects;
    assert!(set.finished.is_none());
    // f3's s305 changes; f7 takes a copy of s100 (f1's), which it then uses.
    let path = |f: usize| d.join(format!("f{f}.yaml"));
    let f3 = std::fs::read_to_string(path(3)).unwrap().replace("10.0.1.6,", "10.0.1.99,");
    std::fs::write(path(3), f3).unwrap();
    let f7 = std::fs::read_to_string(path(7)).unwrap() + &svc(100, 77);
    std::fs::write(path(7), f7).unwrap();
    let (files, listing) = input_files(d).unwrap();
    let reads = set.read_files(&[path(3), path(7)]);
    let mut changes = Changes::default();
    let fresh = set.prepare(reads, |o| set.share_used(o));
    set.replace(listing, &files, fresh, &mut changes);
    assert_eq!(changes.keys.len(), 201, "f3's and f7's objects: {}", changes.keys.len());
    let events = set.events(changes);
    let applied: Vec<String> = described(&events).iter().map(|e| e.split("cluster_ips").next().unwrap().to_string()).collect();
    assert_eq!(events.len(), 2, "{applied:?}");
    assert!(matches!(&events[0], Event::ServiceApplied(s) if s.id.name == "s305"), "{:?}", events[0]);
    assert!(matches!(&events[1], Event::ServiceApplied(s) if s.id.name == "s100"), "{:?}", events[1]);
    // Every other object is still the allocation the trackers hold.
    let (merged, _) = set.merge(&DERIVE);
    let same = merged.objects.services.iter().filter(|s| start.services.iter().any(|o| Arc::ptr_eq(o, s))).count();
    assert_eq!(same, 998);
    assert_eq!(merged.state.duplicates.len(), 1);
    assert!(set.rest().notes.iter().any(|n| n.text.contains("Service ns/s100 is read twice")), "{:?}", set.rest().notes);
}

#[test]
fn an_object_held_by_one_file_costs_its_index_one_entry_of_40_bytes() {
    // The hash map's entry: the key's two words and the holders inline, no allocation.
    assert_eq!(size_of::<(super::Key, super::Holders)>(), 40);
}

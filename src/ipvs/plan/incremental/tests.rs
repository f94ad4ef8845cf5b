//! The incremental planner against the full walk: after every commit of a random change
//! sequence its plan is the full plan, and its update names exactly what moved.

use std::collections::BTreeSet;

use super::*;
use crate::config::Settings;
use crate::ipvs::walk::Walk;
use crate::pipeline::{self, Loaded};

fn load(walk: &Walk) -> Loaded {
    let flags = Settings { mode: Some(crate::settings::kinds::ProxyMode::Ipvs), ..Settings::default() };
    pipeline::load(walk.state.clone(), flags, Settings::default()).unwrap()
}

fn full(loaded: &Loaded, ctx: &Context) -> FamilyState {
    let (s, e) = loaded.trackers.families[0].view();
    super::super::plan(ctx, s, e)
}

fn entries(p: &FamilyState) -> BTreeSet<(SetId, String)> {
    p.sets.iter().flat_map(|(id, es)| es.iter().map(|e| (*id, e.clone()))).collect()
}

#[test]
fn random_changes_keep_the_plan_equal_to_a_full_plan_and_the_update_exact() {
    for seed in [3, 11, 29] {
        let mut walk = Walk::new(80, 4, seed);
        let mut loaded = load(&walk);
        let ctx = Context::new(&loaded.config, loaded.trackers.families[0].family);
        let (s, e) = loaded.trackers.families[0].view();
        let mut planner = FamilyPlanner::new(ctx.clone(), s, e);
        assert_eq!(planner.plan(), &full(&loaded, &ctx));
        // (virtual servers, addresses, set entries, rule changes) over the walk.
        let mut moved = (0, 0, 0, 0);
        for step in 0..60 {
            let before = planner.plan().clone();
            for ev in walk.step(1 + step % 4) {
                loaded.trackers.apply(&ev);
            }
            let changed = loaded.trackers.commit().remove(0).services;
            let (s, e) = loaded.trackers.families[0].view();
            let update = planner.update(s, e, &changed);
            let after = full(&loaded, &ctx);
            assert_eq!(planner.plan(), &after, "seed {seed} step {step}");

            let differs: BTreeSet<_> = before.services.keys().chain(after.services.keys())
                .filter(|k| before.services.get(k) != after.services.get(k)).copied().collect();
            assert!(differs.is_subset(&update.services), "seed {seed} step {step}: {differs:?} not all in {:?}", update.services);
            assert_eq!(update.bind, after.bound.difference(&before.bound).copied().collect(), "seed {seed} step {step}");
            assert_eq!(update.unbind, before.bound.difference(&after.bound).copied().collect(), "seed {seed} step {step}");
            let (old, new) = (entries(&before), entries(&after));
            assert_eq!(update.add.iter().cloned().collect::<BTreeSet<_>>(), new.difference(&old).cloned().collect(), "seed {seed} step {step}");
            assert_eq!(update.del.iter().cloned().collect::<BTreeSet<_>>(), old.difference(&new).cloned().collect(), "seed {seed} step {step}");
            assert_eq!(update.iptables.as_ref(), (before.iptables != after.iptables).then_some(&before.iptables), "seed {seed} step {step}");
            moved.0 += update.services.len();
            moved.1 += update.bind.len() + update.unbind.len();
            moved.2 += update.add.len() + update.del.len();
            moved.3 += usize::from(update.iptables.is_some());
        }
        assert!(moved.0 > 60 && moved.1 > 0 && moved.2 > 60 && moved.3 > 0, "seed {seed}: the walk changed too little: {moved:?}");
    }
}

#[test]
fn two_ports_sharing_a_virtual_server_leave_it_to_the_last_in_order() {
    let mut walk = Walk::new(6, 2, 5);
    let shared: std::net::IpAddr = "192.0.2.60".parse().unwrap();
    for s in walk.state.services.iter_mut().take(2) {
        s.external_ips = vec![shared];
        s.ports.truncate(1);
        s.ports[0].port = 80;
        s.ports[0].protocol = crate::model::Protocol::Tcp;
    }
    let key = crate::ipvs::values::ServiceKey { addr: shared, port: 80, protocol: crate::ipvs::values::Protocol::Tcp };
    let mut loaded = load(&walk);
    let ctx = Context::new(&loaded.config, loaded.trackers.families[0].family);
    let (s, e) = loaded.trackers.families[0].view();
    let mut planner = FamilyPlanner::new(ctx.clone(), s, e);
    assert_eq!(planner.plan(), &full(&loaded, &ctx));
    let later_owner = planner.plan().services[&key].owner.service.clone();
    assert_eq!(later_owner, walk.state.services[1].id, "the later service wins the shared virtual server");
    // The later owner goes: the earlier one's virtual server takes its place.
    let later = walk.state.services[1].id.clone();
    loaded.trackers.apply(&crate::track::Event::ServiceDeleted(later.clone()));
    let changed = loaded.trackers.commit().remove(0).services;
    let (s, e) = loaded.trackers.families[0].view();
    planner.update(s, e, &changed);
    assert_eq!(planner.plan(), &full(&loaded, &ctx));
    assert!(planner.plan().bound.contains(&shared), "the other service still binds it");
    assert_eq!(planner.plan().services[&key].owner.service, walk.state.services[0].id);
    // It comes back, and wins again.
    loaded.trackers.apply(&crate::track::Event::ServiceApplied(std::sync::Arc::new(walk.state.services[1].clone())));
    let changed = loaded.trackers.commit().remove(0).services;
    let (s, e) = loaded.trackers.families[0].view();
    planner.update(s, e, &changed);
    assert_eq!(planner.plan(), &full(&loaded, &ctx));
    assert_eq!(planner.plan().services[&key].owner.service, walk.state.services[1].id);
}

//! The objects the trackers are fed (Services and EndpointSlices), each behind one `Arc`,
//! so that a source that must remember the last read (the file watch, to send only what
//! changed) and the trackers hold the same allocation instead of one copy each.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::file::ClusterState;
use crate::model::{EndpointSlice, NamespacedName, Service};
use crate::track::Event;

/// A read's Services and EndpointSlices, in input order (a later object with the same
/// identity replaces an earlier one when fed to the trackers).
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
}

impl Objects {
    /// Moves `state`'s Services and EndpointSlices out (leaving them empty).
    pub fn take(state: &mut ClusterState) -> Objects {
        Objects {
            services: std::mem::take(&mut state.services).into_iter().map(Arc::new).collect(),
            slices: std::mem::take(&mut state.slices).into_iter().map(Arc::new).collect(),
        }
    }

    /// Every object as an applied event, Services first: what loads fresh trackers.
    pub fn applied(&self) -> impl Iterator<Item = Event> + '_ {
        let services = self.services.iter().map(|s| Event::ServiceApplied(s.clone()));
        services.chain(self.slices.iter().map(|s| Event::SliceApplied(s.clone())))
    }

    /// Makes every object of `self` equal to `old`'s of the same identity `old`'s very
    /// allocation (see [`Objects::events_since`]).
    pub fn share(&mut self, old: &Objects) {
        share_unchanged(&mut self.services, &old.services, |s| &s.id);
        share_unchanged(&mut self.slices, &old.slices, |s| &s.id);
    }

    /// The events that take `old` to `self` (as [`events_between`]), after making every
    /// object of `self` equal to `old`'s of the same identity `old`'s very allocation: the
    /// unchanged objects, which the trackers already hold, are then held once.
    pub fn events_since(&mut self, old: &Objects) -> Vec<Event> {
        self.share(old);
        diff((&old.services, &old.slices), (&self.services, &self.slices), Arc::clone, Arc::clone)
    }
}

/// Replaces each of `new` that equals `old`'s object of its identity (the last one, as the
/// trackers take it) by `old`'s `Arc`.
fn share_unchanged<T: PartialEq>(new: &mut [Arc<T>], old: &[Arc<T>], id: impl Fn(&T) -> &NamespacedName) {
    let old: BTreeMap<&NamespacedName, &Arc<T>> = old.iter().map(|o| (id(o), o)).collect();
    for n in new.iter_mut() {
        if let Some(o) = old.get(id(n)).filter(|o| !Arc::ptr_eq(o, n) && o.as_ref() == n.as_ref()) {
            *n = Arc::clone(o);
        }
    }
}

/// The events that take one read (`old`) to the next (`new`): objects gone are deleted
/// (in `old`'s order), objects new or changed are applied (in `new`'s order), unchanged
/// ones give no event. `service` and `slice` make an event's `Arc` from an object.
pub(crate) fn diff<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
    old: (&[S], &[E]),
    new: (&[S], &[E]),
    service: impl Fn(&S) -> Arc<Service>,
    slice: impl Fn(&E) -> Arc<EndpointSlice>,
) -> Vec<Event> {
    let ((old_services, old_slices), (new_services, new_slices)) = (old, new);
    fn sv<S: Borrow<Service>>(s: &S) -> &Service {
        s.borrow()
    }
    fn sl<E: Borrow<EndpointSlice>>(s: &E) -> &EndpointSlice {
        s.borrow()
    }
    let old_s: BTreeMap<&NamespacedName, &Service> = old_services.iter().map(|s| (&sv(s).id, sv(s))).collect();
    let new_s: BTreeMap<&NamespacedName, &Service> = new_services.iter().map(|s| (&sv(s).id, sv(s))).collect();
    let old_e: BTreeMap<&NamespacedName, &EndpointSlice> = old_slices.iter().map(|s| (&sl(s).id, sl(s))).collect();
    let new_e: BTreeMap<&NamespacedName, &EndpointSlice> = new_slices.iter().map(|s| (&sl(s).id, sl(s))).collect();
    // The same allocation is the same object: no need to compare (most of a re-read is).
    fn same<T: PartialEq>(old: Option<&&T>, new: &T) -> bool {
        old.is_some_and(|o| std::ptr::eq(*o, new) || *o == new)
    }
    let mut events = Vec::new();
    events.extend(old_services.iter().filter(|s| !new_s.contains_key(&sv(*s).id)).map(|s| Event::ServiceDeleted(sv(s).id.clone())));
    events.extend(old_slices.iter().filter(|s| !new_e.contains_key(&sl(*s).id)).map(|s| Event::SliceDeleted(slice(s))));
    events.extend(new_services.iter().filter(|s| !same(old_s.get(&sv(*s).id), sv(*s))).map(|s| Event::ServiceApplied(service(s))));
    events.extend(new_slices.iter().filter(|s| !same(old_e.get(&sl(*s).id), sl(*s))).map(|s| Event::SliceApplied(slice(s))));
    events
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;
    use crate::source::file::read_str;

    fn objects(text: &str) -> Objects {
        let mut st = ClusterState::default();
        read_str(Path::new("t.yaml"), text, &mut st).unwrap();
        Objects::take(&mut st)
    }

    /// `apply ns/name` and `delete ns/name` for the Services' events.
    pub(crate) fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::ServiceApplied(s) => format!("apply {}", s.id),
                Event::ServiceDeleted(id) => format!("delete {id}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    fn svc(n: u8, ip: &str) -> String {
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: s{n}\n  namespace: ns\nspec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n---\n")
    }

    #[test]
    fn unchanged_objects_are_held_once_and_changes_are_the_events() {
        let old = objects(&format!("{}{}{}", svc(1, "10.0.0.1"), svc(2, "10.0.0.2"), svc(3, "10.0.0.3")));
        let mut new = objects(&format!("{}{}{}", svc(1, "10.0.0.1"), svc(2, "10.0.0.9"), svc(4, "10.0.0.4")));
        assert_eq!(names(&new.events_since(&old)), ["delete ns/s3", "apply ns/s2", "apply ns/s4"]);
        assert!(Arc::ptr_eq(&new.services[0], &old.services[0]), "unchanged: the old allocation is kept");
        assert!(!Arc::ptr_eq(&new.services[1], &old.services[1]), "changed: the new one");
        let again = new.clone();
        assert!(new.events_since(&again).is_empty(), "nothing changed: no event");
    }
}

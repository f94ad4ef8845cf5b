//! iptables mode, standing on [`crate::netfilter`] (chain names, rule values, restore
//! text, canonical form, delta, apply): the renderer, restore text in kube-proxy's order
//! and the sync planners are pure. The kernel is reached behind traits with recording fakes for
//! tests: `iptables-save`/`iptables-restore` through [`crate::xtables::apply`], `nfacct`
//! over netlink through [`crate::netfilter::nfacct`] (stale flows are [`crate::conntrack`]'s, every mode's).

pub mod cleanup;
pub mod jumps;
// kube-proxy's partial-restore text: what upstream's tests assert on and the benchmarks'
// baseline; svcproxy's watch mode sends `partial`'s instead.
#[cfg(any(test, feature = "testing"))]
pub mod kube_proxy_restore;
pub mod partial;
pub mod proxier;
pub mod render;
pub mod restore;
pub mod sync;

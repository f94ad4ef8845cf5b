//! After [`super::apply`] removed backends: the (Service, backend) pairs that went
//! ([`gone`], pure), and the sockets the programs connected through them closed by the
//! kernel's socket iterators ([`Closer`], through `netfilter::bpf::destroy`), so a client
//! on a removed backend moves on at once instead of when it reconnects by itself.
//!
//! A kernel without `bpf_sock_destroy` (before 6.5) is said once, at warning level, and
//! each pair left open is counted (`svcproxy_socket_lb_destroy_skipped_total`): there a
//! connected UDP client keeps sending to the old backend until it reconnects, and a TCP
//! connection lasts until it ends, as with the rules.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use crate::model::Protocol;
use crate::netfilter::bpf::destroy::{self, Destroyed, Destroyer, Target};

use super::diff::{Diff, Held};

/// The (Service, backend) pairs `diff` removes from `held`: each backend of a changed
/// or deleted UDP Service entry that its new set does not hold. A Service whose held slots
/// are incomplete (unknown backends) gives none. TCP is left to drain, as kube-proxy
/// leaves it (it clears only UDP flows): a terminating pod finishes its connections.
pub fn gone(held: &Held, diff: &Diff) -> Vec<Target> {
    let mut out = Vec::new();
    for c in diff.changes.iter().filter(|c| c.key.proto == Protocol::Udp) {
        let Some((_, Some(old))) = held.services.get(&c.key) else { continue };
        let new: BTreeSet<SocketAddr> = c.put_backends.iter().map(|(_, a)| *a).collect();
        out.extend(old.iter().filter(|a| !new.contains(a)).map(|a| Target { service: c.key, backend: *a }));
    }
    out.sort();
    out.dedup();
    out
}

/// What closing did after one sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No backend went.
    Nothing,
    Closed { pairs: usize, done: Destroyed },
    /// The pairs' sockets were left open: the kernel cannot, or loading failed (why).
    Skipped { pairs: usize, why: String },
}

enum State {
    Untried,
    Ready(Box<Destroyer>),
    /// Said once; not tried again in this process.
    Unavailable(String),
}

/// The iterators, loaded at the first backend that goes and kept (watch mode keeps one
/// per process; a one-shot sync loads them only when a backend went).
pub struct Closer {
    state: State,
    load: fn(&Path) -> Result<Destroyer, crate::netfilter::bpf::BpfError>,
}

impl Default for Closer {
    fn default() -> Self {
        Closer::new()
    }
}

impl Closer {
    pub fn new() -> Closer {
        Closer { state: State::Untried, load: Destroyer::load }
    }

    /// Closes the sockets of `targets` in the namespaces of the processes under `cgroup`
    /// (where the hooks translate); `pins` holds the socket-LB maps.
    pub fn close(&mut self, pins: &Path, cgroup: &Path, targets: &[Target]) -> Outcome {
        if targets.is_empty() {
            return Outcome::Nothing;
        }
        let pairs = targets.len();
        if let State::Untried = self.state {
            self.state = match (self.load)(pins) {
                Ok(d) => State::Ready(Box::new(d)),
                Err(e) => {
                    let why = e.to_string();
                    let level = if destroy::unsupported(&e) { "unsupported" } else { "failed to load" };
                    tracing::warn!(target: "socketlb", error = %why, "closing sockets of removed backends {level}: they are left open (a connected UDP client keeps sending to a removed backend until it reconnects; a TCP connection lasts until it ends)");
                    State::Unavailable(why)
                }
            };
        }
        let destroyer = match &mut self.state {
            State::Ready(d) => d,
            State::Unavailable(why) => return skipped(pairs, why.clone()),
            State::Untried => unreachable!("set above"),
        };
        let namespaces = match destroy::namespaces_in(cgroup) {
            Ok(n) => n,
            Err(e) => return skipped(pairs, format!("finding the namespaces under {}: {}", cgroup.display(), e)),
        };
        let done = destroyer.destroy(targets, &namespaces);
        for f in &done.failures {
            tracing::warn!(target: "socketlb", "closing sockets of removed backends: {f}");
        }
        tracing::info!(target: "socketlb", pairs, namespaces = done.namespaces, closed = done.sockets, refused = done.refused, "sockets of removed backends closed");
        Outcome::Closed { pairs, done }
    }
}

fn skipped(pairs: usize, why: String) -> Outcome {
    destroy::note_skipped(pairs);
    tracing::debug!(target: "socketlb", pairs, why, "sockets of removed backends left open");
    Outcome::Skipped { pairs, why }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::bpf::maps::{encode_backend, BackendKey, ServiceKey, ServiceValue};
    use crate::socketlb::diff::diff;
    use crate::socketlb::plan::Wanted;

    fn key(ip: &str, proto: Protocol) -> ServiceKey {
        ServiceKey { addr: ip.parse().unwrap(), port: 80, proto }
    }

    fn held(entries: &[(ServiceKey, u32, &[&str])]) -> Held {
        let mut services = Vec::new();
        let mut backends = Vec::new();
        for (k, id, list) in entries {
            services.push((*k, ServiceValue { backend_id: *id, count: list.len() as u16, no_backends: list.is_empty(), affinity: None }));
            for (slot, a) in list.iter().enumerate() {
                backends.push((BackendKey { backend_id: *id, slot: slot as u32 }, encode_backend(a.parse().unwrap())));
            }
        }
        Held::from_entries(services, backends)
    }

    #[test]
    fn the_udp_backends_a_change_drops_go_per_service_and_tcp_drains() {
        let (udp, tcp, other) = (key("10.0.0.1", Protocol::Udp), key("10.0.0.1", Protocol::Tcp), key("10.0.0.2", Protocol::Udp));
        let before = held(&[(udp, 1, &["10.1.0.1:53", "10.1.0.2:53"]), (tcp, 2, &["10.1.0.1:80"]), (other, 3, &["10.1.0.1:53"])]);
        let mut wanted = Wanted::new();
        wanted.insert(udp, vec!["10.1.0.2:53".parse().unwrap(), "10.1.0.3:53".parse().unwrap()].into());
        wanted.insert(other, vec!["10.1.0.1:53".parse::<SocketAddr>().unwrap()].into());
        // tcp is gone from the wanted set: its Service entry is deleted.
        let d = diff(&before, &wanted, &mut before.next_id());
        let got = gone(&before, &d);
        assert_eq!(
            got,
            vec![Target { service: udp, backend: "10.1.0.1:53".parse().unwrap() }],
            "the backend still serving `other` is not closed for it; the deleted TCP Service's connections drain"
        );
        assert!(d.changes.iter().any(|c| c.key == tcp), "the TCP Service did change");
    }

    #[test]
    fn new_services_and_unchanged_ones_close_nothing() {
        let udp = key("10.0.0.1", Protocol::Udp);
        let before = held(&[(udp, 1, &["10.1.0.1:53"])]);
        let mut wanted = Wanted::new();
        wanted.insert(udp, vec!["10.1.0.1:53".parse::<SocketAddr>().unwrap()].into());
        wanted.insert(key("10.0.0.9", Protocol::Udp), vec!["10.1.0.9:53".parse::<SocketAddr>().unwrap()].into());
        let d = diff(&before, &wanted, &mut before.next_id());
        assert_eq!(d.changes.len(), 1);
        assert!(gone(&before, &d).is_empty());
    }

    #[test]
    fn a_kernel_without_the_kfunc_is_tried_once_and_every_pair_left_open_is_counted() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static LOADS: AtomicUsize = AtomicUsize::new(0);
        let mut c = Closer {
            state: State::Untried,
            load: |_| {
                LOADS.fetch_add(1, Ordering::SeqCst);
                Err(crate::netfilter::bpf::BpfError::Unsupported("this kernel has no bpf_sock_destroy (Linux 6.5 or later)".into()))
            },
        };
        let t = Target { service: key("10.0.0.1", Protocol::Udp), backend: "10.1.0.1:53".parse().unwrap() };
        let before = destroy::skipped();
        for _ in 0..2 {
            match c.close(Path::new("/nonexistent"), Path::new("/nonexistent"), &[t, t]) {
                Outcome::Skipped { pairs: 2, why } => assert!(why.contains("no bpf_sock_destroy"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(LOADS.load(Ordering::SeqCst), 1, "not loaded again after the kernel said no");
        // Other tests may count too; these four pairs are among the counted.
        assert!(destroy::skipped() >= before + 4);
    }

    #[test]
    fn nothing_to_close_loads_nothing() {
        let mut c = Closer::new();
        assert_eq!(c.close(Path::new("/nonexistent"), Path::new("/nonexistent"), &[]), Outcome::Nothing);
        assert!(matches!(c.state, State::Untried));
    }
}

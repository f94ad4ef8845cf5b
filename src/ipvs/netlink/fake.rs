//! [`FakeIpvs`]: an in-memory IPVS for tests without root. It answers like the
//! kernel (EEXIST, ESRCH, ENOENT, EINVAL, ERANGE in the kernel's order of checks),
//! so dumps stay consistent with what was added, and it records every call.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::client::Ipvs;
use super::error::{Errno, Error};
use crate::ipvs::values::{
    Call, Forward, Info, ObservedRealServer, ObservedVirtualServer, Op, RealServer, ServiceKey,
    Stats, Timeouts, Version, VirtualServer,
};

/// Scheduler modules a Debian kernel ships, and "none"; others fail with ENOENT as in the kernel.
const SCHEDULERS: [&str; 14] =
    ["none", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh"];
/// The kernel refuses timeouts above `INT_MAX / HZ` (Debian: HZ = 250).
const MAX_TIMEOUT: u32 = i32::MAX as u32 / 250;

#[derive(Debug, Clone)]
struct Entry {
    vs: VirtualServer,
    dests: Vec<RealServer>,
}

/// An in-memory kernel IPVS table plus a log of every [`Call`].
#[derive(Debug, Clone)]
pub struct FakeIpvs {
    services: BTreeMap<ServiceKey, Entry>,
    timeouts: Timeouts,
    schedulers: BTreeSet<String>,
    log: Vec<Call>,
    failures: VecDeque<Errno>,
    /// Active and inactive connection counts reported per real server.
    conns: BTreeMap<(ServiceKey, std::net::IpAddr, u16), (u32, u32)>,
}

impl Default for FakeIpvs {
    fn default() -> Self {
        FakeIpvs::new()
    }
}

impl FakeIpvs {
    /// Empty, with the kernel's default timeouts (900 s, 120 s, 300 s).
    pub fn new() -> Self {
        FakeIpvs {
            services: BTreeMap::new(),
            timeouts: Timeouts { tcp: 900, tcp_fin: 120, udp: 300 },
            schedulers: SCHEDULERS.iter().map(std::string::ToString::to_string).collect(),
            log: Vec::new(),
            failures: VecDeque::new(),
            conns: BTreeMap::new(),
        }
    }

    /// Starts from existing state, without logging it.
    pub fn with_state(state: impl IntoIterator<Item = (VirtualServer, Vec<RealServer>)>) -> Self {
        let mut fake = FakeIpvs::new();
        for (vs, dests) in state {
            fake.services.insert(vs.key(), Entry { vs, dests });
        }
        fake
    }

    /// Makes dumps report `active` and `inactive` connections for one real server
    /// (until changed again), as traffic would.
    pub fn set_conns(&mut self, vs: ServiceKey, addr: std::net::IpAddr, port: u16, active: u32, inactive: u32) {
        self.conns.insert((vs, addr, port), (active, inactive));
    }

    /// Every call so far, in order.
    pub fn log(&self) -> &[Call] {
        &self.log
    }

    /// The ops so far (the log without reads).
    pub fn ops(&self) -> Vec<Op> {
        self.log
            .iter()
            .filter_map(|call| match call {
                Call::Op(op) => Some(op.clone()),
                _ => None,
            })
            .collect()
    }

    /// Returns the log and starts a new one.
    pub fn take_log(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.log)
    }

    /// Makes the next call fail with `errno` (after it is logged), whatever it is.
    pub fn fail_next(&mut self, errno: Errno) {
        self.failures.push_back(errno);
    }

    /// Records `call` and returns the injected failure, if any.
    fn enter(&mut self, call: Call) -> Result<(), Error> {
        self.log.push(call);
        match (self.failures.pop_front(), self.log.last()) {
            (Some(errno), Some(call)) => Err(Error::kernel(call, errno.raw())),
            _ => Ok(()),
        }
    }

    /// The kernel's checks, in its order; `Ok` means `commit` cannot fail.
    fn check(&self, op: &Op) -> Result<(), Errno> {
        match op {
            Op::AddService(vs) if self.services.contains_key(&vs.key()) => Err(Errno::Exists),
            Op::AddService(vs) => self.check_service(vs),
            Op::UpdateService(vs) => self.entry(vs).and_then(|_| self.check_service(vs)),
            Op::DelService(vs) => self.entry(vs).map(drop),
            Op::AddDest(vs, rs) => {
                let entry = self.entry(vs)?;
                check_dest(vs, rs)?;
                if entry.dests.iter().any(|d| d.same_dest(rs)) {
                    Err(Errno::Exists)
                } else {
                    Ok(())
                }
            }
            Op::UpdateDest(vs, rs) => {
                let entry = self.entry(vs)?;
                check_dest(vs, rs)?;
                dest_exists(entry, rs)
            }
            Op::DelDest(vs, rs) => dest_exists(self.entry(vs)?, rs),
            Op::Flush => Ok(()),
            Op::SetTimeouts(t) => {
                if [t.tcp, t.tcp_fin, t.udp].iter().any(|s| *s > MAX_TIMEOUT) {
                    Err(Errno::Invalid)
                } else {
                    Ok(())
                }
            }
        }
    }

    fn entry(&self, vs: &VirtualServer) -> Result<&Entry, Errno> {
        self.services.get(&vs.key()).ok_or(Errno::NoService)
    }

    fn check_service(&self, vs: &VirtualServer) -> Result<(), Errno> {
        if !self.schedulers.contains(&vs.scheduler) {
            return Err(Errno::NotFound);
        }
        if vs.addr.is_ipv6() && !(1..=128).contains(&vs.netmask) {
            Err(Errno::Invalid)
        } else {
            Ok(())
        }
    }

    /// Applies an op that passed `check`.
    fn commit(&mut self, op: Op) {
        match op {
            Op::AddService(vs) => {
                self.services.insert(vs.key(), Entry { vs, dests: Vec::new() });
            }
            Op::UpdateService(vs) => {
                if let Some(entry) = self.services.get_mut(&vs.key()) {
                    entry.vs = vs;
                }
            }
            Op::DelService(vs) => {
                self.services.remove(&vs.key());
            }
            Op::AddDest(vs, rs) => self.with_dests(&vs, |dests| dests.push(rs)),
            Op::UpdateDest(vs, rs) => self.with_dests(&vs, |dests| {
                dests.iter_mut().filter(|d| d.same_dest(&rs)).for_each(|d| *d = rs)
            }),
            Op::DelDest(vs, rs) => {
                self.with_dests(&vs, |dests| dests.retain(|d| !d.same_dest(&rs)))
            }
            Op::Flush => self.services.clear(),
            Op::SetTimeouts(t) => self.set_nonzero_timeouts(t),
        }
    }

    fn with_dests(&mut self, vs: &VirtualServer, f: impl FnOnce(&mut Vec<RealServer>)) {
        if let Some(entry) = self.services.get_mut(&vs.key()) {
            f(&mut entry.dests)
        }
    }

    fn set_nonzero_timeouts(&mut self, t: Timeouts) {
        let current = &mut self.timeouts;
        for (new, old) in [
            (t.tcp, &mut current.tcp),
            (t.tcp_fin, &mut current.tcp_fin),
            (t.udp, &mut current.udp),
        ] {
            if new != 0 {
                *old = new;
            }
        }
    }
}

/// `ip_vs_add_dest`/`ip_vs_edit_dest` checks before the lookup.
fn check_dest(vs: &VirtualServer, rs: &RealServer) -> Result<(), Errno> {
    if vs.addr.is_ipv4() != rs.addr.is_ipv4() && rs.fwd != Forward::Tunnel {
        return Err(Errno::Invalid);
    }
    if rs.weight > i32::MAX as u32 || rs.lower_threshold > rs.upper_threshold {
        return Err(Errno::Range);
    }
    Ok(())
}

fn dest_exists(entry: &Entry, rs: &RealServer) -> Result<(), Errno> {
    if entry.dests.iter().any(|d| d.same_dest(rs)) {
        Ok(())
    } else {
        Err(Errno::NotFound)
    }
}

impl Ipvs for FakeIpvs {
    fn info(&mut self) -> Result<Info, Error> {
        self.enter(Call::Info)?;
        Ok(Info { version: Version { major: 1, minor: 2, patch: 1 }, conn_tab_size: 4096 })
    }

    fn services(&mut self) -> Result<Vec<ObservedVirtualServer>, Error> {
        self.enter(Call::Services)?;
        let observed =
            |e: &Entry| ObservedVirtualServer { vs: e.vs.clone(), stats: Some(Stats::default()) };
        Ok(self.services.values().map(observed).collect())
    }

    fn dests(&mut self, vs: &VirtualServer) -> Result<Vec<ObservedRealServer>, Error> {
        self.enter(Call::Dests(vs.key()))?;
        let dests = self.services.get(&vs.key()).map(|e| e.dests.as_slice()).unwrap_or_default();
        let observed = |rs: &RealServer| {
            let (active, inactive) = self.conns.get(&(vs.key(), rs.addr, rs.port)).copied().unwrap_or((0, 0));
            ObservedRealServer { active_conns: active, inactive_conns: inactive, ..ObservedRealServer::idle(*rs) }
        };
        Ok(dests.iter().map(observed).collect())
    }

    fn timeouts(&mut self) -> Result<Timeouts, Error> {
        self.enter(Call::Timeouts)?;
        Ok(self.timeouts)
    }

    fn run(&mut self, op: &Op) -> Result<(), Error> {
        self.enter(Call::Op(op.clone()))?;
        self.check(op).map_err(|errno| Error::kernel(&Call::Op(op.clone()), errno.raw()))?;
        self.commit(op.clone());
        Ok(())
    }
}

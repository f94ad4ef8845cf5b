//! The kernel's flow table as the reconciler sees it: one family's flows streamed (all
//! UDP ones, or those to one address and port, the kernel filtering), and flows deleted. [`NetlinkFlows`] is ctnetlink on the node; [`fake::FakeFlows`] an
//! in-memory table for tests (feature `testing`).

use crate::net::IpFamily;
use crate::netfilter::ctnetlink::{wire, wire::DumpFilter, CtError, Ctnetlink, Deleted, Flow};

pub trait FlowTable: Send {
    /// Streams one family's flows that `filter` keeps to `each`; returns how many were read.
    fn flows(&mut self, family: IpFamily, filter: &DumpFilter, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError>;
    fn delete(&mut self, flows: &[Flow]) -> Result<Deleted, CtError>;
}

/// ctnetlink over one socket, opened at the first use and again after a failure (a run's
/// dumps and deletes share it; idle, it is one file descriptor).
#[derive(Default)]
pub struct NetlinkFlows {
    socket: Option<Ctnetlink>,
}

impl NetlinkFlows {
    /// `f` over the socket; a failure drops it, so the next call starts on a fresh one.
    fn with<T>(&mut self, f: impl FnOnce(&mut Ctnetlink) -> Result<T, CtError>) -> Result<T, CtError> {
        let socket = match &mut self.socket {
            Some(s) => s,
            None => self.socket.insert(Ctnetlink::open()?),
        };
        let result = f(socket);
        if result.is_err() {
            self.socket = None;
        }
        result
    }
}

impl FlowTable for NetlinkFlows {
    fn flows(&mut self, family: IpFamily, filter: &DumpFilter, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError> {
        let af = if family.is_v6() { wire::AF_INET6 } else { wire::AF_INET };
        self.with(|c| Ok(c.dump_to(af, Some(*filter), each)?.flows))
    }

    fn delete(&mut self, flows: &[Flow]) -> Result<Deleted, CtError> {
        self.with(|c| c.delete(flows))
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod fake {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// An in-memory flow table, shared so a test can fill and look at it after handing
    /// it over; `fail` makes the next listing fail (as a kernel without ctnetlink would).
    #[derive(Debug, Clone, Default)]
    pub struct FakeFlows {
        pub flows: Arc<Mutex<Vec<Flow>>>,
        pub deleted: Arc<Mutex<Vec<Flow>>>,
        pub fail: Arc<Mutex<Option<i32>>>,
        /// Every dump asked for, in order.
        pub dumps: Arc<Mutex<Vec<DumpFilter>>>,
    }

    impl FakeFlows {
        pub fn add(&self, flow: Flow) {
            self.flows.lock().unwrap_or_else(|e| e.into_inner()).push(flow);
        }
    }

    impl FlowTable for FakeFlows {
        fn flows(&mut self, family: IpFamily, filter: &DumpFilter, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError> {
            if let Some(errno) = self.fail.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(CtError::Kernel { op: "dump", errno });
            }
            self.dumps.lock().unwrap_or_else(|e| e.into_inner()).push(*filter);
            let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
            let mine = flows.iter().filter(|f| filter.matches(f) && IpFamily::of(&f.orig.src) == family);
            let mut n = 0;
            for f in mine {
                each(f);
                n += 1;
            }
            Ok(n)
        }

        fn delete(&mut self, gone: &[Flow]) -> Result<Deleted, CtError> {
            let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
            let before = flows.len();
            flows.retain(|f| !gone.contains(f));
            let deleted = before - flows.len();
            self.deleted.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(gone);
            Ok(Deleted { deleted, gone: gone.len() - deleted })
        }
    }
}

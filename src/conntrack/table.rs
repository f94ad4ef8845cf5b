//! The kernel's flow table as the reconciler sees it: one family's UDP flows streamed,
//! and flows deleted. [`NetlinkFlows`] is ctnetlink on the node; [`fake::FakeFlows`] an
//! in-memory table for tests (feature `testing`).

use crate::net::IpFamily;
use crate::netfilter::ctnetlink::{wire, CtError, Ctnetlink, Deleted, Flow};

pub trait FlowTable: Send {
    /// Streams one family's UDP flows to `each`; returns how many were read.
    fn udp_flows(&mut self, family: IpFamily, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError>;
    fn delete(&mut self, flows: &[Flow]) -> Result<Deleted, CtError>;
}

/// ctnetlink, a socket opened for each run (the reconciler runs after a sync that changed
/// a UDP service's endpoints; holding no socket between runs costs nothing idle).
#[derive(Debug, Default)]
pub struct NetlinkFlows;

impl FlowTable for NetlinkFlows {
    fn udp_flows(&mut self, family: IpFamily, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError> {
        let af = if family.is_v6() { wire::AF_INET6 } else { wire::AF_INET };
        Ok(Ctnetlink::open()?.dump(af, Some(wire::IPPROTO_UDP), each)?.flows)
    }

    fn delete(&mut self, flows: &[Flow]) -> Result<Deleted, CtError> {
        Ctnetlink::open()?.delete(flows)
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
    }

    impl FakeFlows {
        pub fn add(&self, flow: Flow) {
            self.flows.lock().unwrap_or_else(|e| e.into_inner()).push(flow);
        }
    }

    impl FlowTable for FakeFlows {
        fn udp_flows(&mut self, family: IpFamily, each: &mut dyn FnMut(&Flow)) -> Result<usize, CtError> {
            if let Some(errno) = self.fail.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(CtError::Kernel { op: "dump", errno });
            }
            let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
            let mine = flows.iter().filter(|f| f.orig.proto == wire::IPPROTO_UDP && IpFamily::of(&f.orig.src) == family);
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

//! The IPVS client interface. [`super::NetlinkIpvs`] talks to the kernel,
//! [`super::FakeIpvs`] keeps an in-memory kernel and records every call.

use super::error::Error;
use crate::ipvs::values::{
    Info, ObservedRealServer, ObservedVirtualServer, Op, RealServer, Timeouts, VirtualServer,
};

/// Synchronous access to the kernel's IPVS tables (one network namespace).
///
/// Virtual servers are identified by address, port and protocol, real servers by
/// address and port within their virtual server: the other fields only matter to
/// add and update. Errors carry the call and the errno ([`Error::is_exists`],
/// [`Error::is_not_found`]).
pub trait Ipvs {
    /// IPVS version and connection table size (`ipvsadm --version`).
    fn info(&mut self) -> Result<Info, Error>;
    /// Every virtual server svcproxy can express (fwmark services are left out).
    fn services(&mut self) -> Result<Vec<ObservedVirtualServer>, Error>;
    /// Runs one op; the calls below are each one op.
    fn run(&mut self, op: &Op) -> Result<(), Error>;
    /// The real servers of `vs`; empty when `vs` does not exist (as the kernel answers).
    fn dests(&mut self, vs: &VirtualServer) -> Result<Vec<ObservedRealServer>, Error>;
    /// `ipvsadm -L --timeout`.
    fn timeouts(&mut self) -> Result<Timeouts, Error>;

    fn add_service(&mut self, vs: &VirtualServer) -> Result<(), Error> {
        self.run(&Op::AddService(vs.clone()))
    }
    fn update_service(&mut self, vs: &VirtualServer) -> Result<(), Error> {
        self.run(&Op::UpdateService(vs.clone()))
    }
    fn del_service(&mut self, vs: &VirtualServer) -> Result<(), Error> {
        self.run(&Op::DelService(vs.clone()))
    }
    fn add_dest(&mut self, vs: &VirtualServer, rs: &RealServer) -> Result<(), Error> {
        self.run(&Op::AddDest(vs.clone(), *rs))
    }
    fn update_dest(&mut self, vs: &VirtualServer, rs: &RealServer) -> Result<(), Error> {
        self.run(&Op::UpdateDest(vs.clone(), *rs))
    }
    fn del_dest(&mut self, vs: &VirtualServer, rs: &RealServer) -> Result<(), Error> {
        self.run(&Op::DelDest(vs.clone(), *rs))
    }
    /// Deletes every virtual server (`ipvsadm -C`).
    fn flush(&mut self) -> Result<(), Error> {
        self.run(&Op::Flush)
    }
    /// `ipvsadm --set`; a 0 field leaves that timeout alone.
    fn set_timeouts(&mut self, timeouts: &Timeouts) -> Result<(), Error> {
        self.run(&Op::SetTimeouts(*timeouts))
    }

    /// Runs `ops` in order. An op the kernel refuses does not stop the ones after
    /// it; it is reported in [`BatchReport::failed`]. `Err` means the transport
    /// broke: which ops after the last report took effect is unknown, so dump the
    /// state again (with a new client) before planning more.
    ///
    /// The default runs the ops one by one; [`super::NetlinkIpvs`] pipelines them.
    fn apply(&mut self, ops: &[Op]) -> Result<BatchReport, Error> {
        let mut report = BatchReport { ops: ops.len(), failed: Vec::new() };
        for (index, op) in ops.iter().enumerate() {
            match self.run(op) {
                Ok(()) => {}
                Err(error @ Error::Kernel { .. }) => report.failed.push(Failure { index, error }),
                Err(other) => return Err(other),
            }
        }
        Ok(report)
    }
}

/// What [`Ipvs::apply`] did.
#[derive(Debug)]
pub struct BatchReport {
    /// How many ops were run.
    pub ops: usize,
    /// The ops the kernel refused, in order.
    pub failed: Vec<Failure>,
}

impl BatchReport {
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }
}

/// One refused op of a batch.
#[derive(Debug)]
pub struct Failure {
    /// Index into the ops given to [`Ipvs::apply`].
    pub index: usize,
    pub error: Error,
}

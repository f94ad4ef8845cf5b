//! Reads the kernel's IPVS state through an [`Ipvs`] client.

use super::netlink::{Error, Ipvs};
use super::values::{ObservedRealServer, ObservedVirtualServer};

/// Every virtual server with its real servers, in the client's order.
pub fn services(ipvs: &mut dyn Ipvs) -> Result<Vec<(ObservedVirtualServer, Vec<ObservedRealServer>)>, Error> {
    let mut out = Vec::new();
    for vs in ipvs.services()? {
        let dests = ipvs.dests(&vs.vs)?;
        out.push((vs, dests));
    }
    Ok(out)
}

//! IPVS mode. `netlink` is svcproxy's own IPVS generic-netlink client (messages as pure
//! types, a synchronous client behind a trait, an in-memory fake).

pub mod netlink;

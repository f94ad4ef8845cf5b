//! The `kube-ipvs0` dummy link and its addresses, over rtnetlink: message types from
//! `netlink-packet-route`, sent on a synchronous `netlink-sys` socket (the rest of
//! svcproxy is synchronous; `rtnetlink` would bring an async runtime for four calls).

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("rtnetlink socket: {0}")]
    Socket(io::Error),
    #[error("rtnetlink {what}: {error}")]
    Kernel {
        what: String,
        error: io::Error,
    },
    #[error("rtnetlink {what}: cannot decode a reply: {reason}")]
    Decode { what: String, reason: String },
}

/// One address on one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkAddress {
    pub index: u32,
    pub ip: IpAddr,
    pub prefix: u8,
}

/// Links and addresses, as IPVS mode needs them.
pub trait Links {
    /// The index of the link called `name`, if there is one.
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, LinkError>;
    /// Creates a dummy link (left down, as kube-proxy leaves kube-ipvs0).
    fn add_dummy(&mut self, name: &str) -> Result<(), LinkError>;
    fn delete_link(&mut self, index: u32) -> Result<(), LinkError>;
    /// Every address of every link.
    fn addresses(&mut self) -> Result<Vec<LinkAddress>, LinkError>;
    fn add_address(&mut self, a: LinkAddress) -> Result<(), LinkError>;
    fn del_address(&mut self, a: LinkAddress) -> Result<(), LinkError>;
}

/// [`Links`] on the kernel.
pub struct RtNetlink {
    socket: Socket,
    seq: u32,
}

const EEXIST: i32 = 17;

impl RtNetlink {
    pub fn connect() -> Result<Self, LinkError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(LinkError::Socket)?;
        socket.bind_auto().map_err(LinkError::Socket)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(LinkError::Socket)?;
        Ok(RtNetlink { socket, seq: 0 })
    }

    /// Sends one request; returns the replies up to the ACK or `NLMSG_DONE`.
    fn request(&mut self, what: &str, msg: RouteNetlinkMessage, flags: u16) -> Result<Vec<RouteNetlinkMessage>, LinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0).map_err(LinkError::Socket)?;
        let mut replies = Vec::new();
        loop {
            let (data, _) = self.socket.recv_from_full().map_err(LinkError::Socket)?;
            let mut offset = 0;
            while offset < data.len() {
                let bytes = data.get(offset..).unwrap_or_default();
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes)
                    .map_err(|e| LinkError::Decode { what: what.into(), reason: e.to_string() })?;
                let len = reply.header.length as usize;
                offset += len.max(16).div_ceil(4) * 4;
                if reply.header.sequence_number != self.seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    NetlinkPayload::Error(e) if e.code.is_none() => return Ok(replies),
                    NetlinkPayload::Error(e) => {
                        return Err(LinkError::Kernel { what: what.into(), error: e.to_io() });
                    }
                    NetlinkPayload::Done(_) => return Ok(replies),
                    _ => {}
                }
            }
        }
    }
}

fn address_message(a: &LinkAddress) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = if a.ip.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
    m.header.prefix_len = a.prefix;
    m.header.index = a.index;
    m.attributes.push(AddressAttribute::Local(a.ip));
    m.attributes.push(AddressAttribute::Address(a.ip));
    m
}

fn is_errno(e: &LinkError, errno: i32) -> bool {
    matches!(e, LinkError::Kernel { error, .. } if error.raw_os_error() == Some(errno))
}

impl Links for RtNetlink {
    fn link_index(&mut self, name: &str) -> Result<Option<u32>, LinkError> {
        let replies = self.request("dump links", RouteNetlinkMessage::GetLink(LinkMessage::default()), NLM_F_DUMP)?;
        for r in replies {
            if let RouteNetlinkMessage::NewLink(l) = r {
                if l.attributes.iter().any(|a| matches!(a, LinkAttribute::IfName(n) if n == name)) {
                    return Ok(Some(l.header.index));
                }
            }
        }
        Ok(None)
    }

    fn add_dummy(&mut self, name: &str) -> Result<(), LinkError> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Dummy)]));
        match self.request(&format!("add dummy link {name}"), RouteNetlinkMessage::NewLink(m), NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if is_errno(&e, EEXIST) => Ok(()),
            other => other.map(drop),
        }
    }

    fn delete_link(&mut self, index: u32) -> Result<(), LinkError> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        self.request(&format!("delete link {index}"), RouteNetlinkMessage::DelLink(m), NLM_F_ACK).map(drop)
    }

    fn addresses(&mut self) -> Result<Vec<LinkAddress>, LinkError> {
        let replies = self.request("dump addresses", RouteNetlinkMessage::GetAddress(AddressMessage::default()), NLM_F_DUMP)?;
        let mut out = Vec::new();
        for r in replies {
            let RouteNetlinkMessage::NewAddress(m) = r else { continue };
            let local = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let addr = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            if let Some(ip) = local.or(addr) {
                out.push(LinkAddress { index: m.header.index, ip, prefix: m.header.prefix_len });
            }
        }
        out.sort();
        Ok(out)
    }

    fn add_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        let what = format!("add address {}/{}", a.ip, a.prefix);
        match self.request(&what, RouteNetlinkMessage::NewAddress(address_message(&a)), NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if is_errno(&e, EEXIST) => Ok(()),
            other => other.map(drop),
        }
    }

    fn del_address(&mut self, a: LinkAddress) -> Result<(), LinkError> {
        let what = format!("delete address {}/{}", a.ip, a.prefix);
        self.request(&what, RouteNetlinkMessage::DelAddress(address_message(&a)), NLM_F_ACK).map(drop)
    }
}

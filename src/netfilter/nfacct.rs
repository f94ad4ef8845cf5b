//! kube-proxy's nfacct counters (`localhost_nps_accepted_pkts`,
//! `ct_state_invalid_dropped_pkts`): the rules that match them only load when the
//! counters exist, so a full sync creates them first over netfilter netlink, as
//! kube-proxy does, and renders the matches only if that worked. Its metrics read the
//! counters' packet counts at each scrape ([`packets`]). Messages are built and replies
//! parsed by pure functions; [`ensure`], [`exists`] and [`packets`] do the I/O.

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::netfilter::nlattr::{self, Message, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL};

const NFNL_SUBSYS_ACCT: u16 = 7;
const NFNL_MSG_ACCT_NEW: u16 = 0;
const NFNL_MSG_ACCT_GET: u16 = 1;
const NFACCT_NAME: u16 = 1;
const NFACCT_PKTS: u16 = 2;
const EEXIST: i32 = 17;
const ENOENT: i32 = 2;

/// nfacct counters kube-proxy creates and iptables mode's rules match.
pub const NFACCT_LOCALHOST_NODEPORTS: &str = "localhost_nps_accepted_pkts";
pub const NFACCT_INVALID_DROPPED: &str = "ct_state_invalid_dropped_pkts";

pub const COUNTERS: [&str; 2] = [NFACCT_LOCALHOST_NODEPORTS, NFACCT_INVALID_DROPPED];

/// `nlmsghdr` + `nfgenmsg` + `NFACCT_NAME`.
pub fn request(cmd: u16, flags: u16, seq: u32, name: &str) -> Vec<u8> {
    let mut attrs = nlattr::Attrs::default();
    attrs.str(NFACCT_NAME, name);
    let mut msg = Vec::with_capacity(20 + attrs.0.len());
    // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, res_id 0.
    nlattr::nfnl_message(&mut msg, NFNL_SUBSYS_ACCT, cmd, flags, seq, 0, &attrs.0);
    msg
}

/// The errno of the first NLMSG_ERROR in a reply (0 = ACK), or `None` if there is none.
pub fn reply_errno(buf: &[u8]) -> Option<i32> {
    nlattr::Messages(buf).find_map(|m| match m {
        Message::Error { errno, .. } => Some(errno),
        _ => None,
    })
}

fn roundtrip(msg: &[u8]) -> std::io::Result<i32> {
    let mut sock = Socket::new(NETLINK_NETFILTER)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    sock.send(msg, 0)?;
    for _ in 0..8 {
        let (buf, _) = sock.recv_from_full()?;
        if let Some(errno) = reply_errno(&buf) {
            return Ok(errno);
        }
    }
    Ok(0)
}

/// Creates the counters that do not exist. `Ok(false)` when the kernel has no nfacct.
pub fn ensure() -> std::io::Result<bool> {
    for (i, name) in COUNTERS.iter().enumerate() {
        match roundtrip(&request(NFNL_MSG_ACCT_NEW, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, i as u32 + 1, name))? {
            0 | EEXIST => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// Whether both counters exist now (for dry runs, which create nothing): `Ok(false)` when
/// one does not or the kernel has no nfacct; `Err` when netlink cannot be asked.
pub fn exists() -> std::io::Result<bool> {
    for (i, name) in COUNTERS.iter().enumerate() {
        let e = roundtrip(&request(NFNL_MSG_ACCT_GET, NLM_F_ACK, i as u32 + 1, name))?;
        if e == ENOENT || e < 0 || e == 95 || e == 93 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The packet count in a reply to a GET of one counter: `Ok(Some(n))` from its
/// `NFACCT_PKTS` attribute (a big-endian u64), `Ok(None)` when the kernel says it does not
/// exist, `Err(errno)` for another error; `Err(0)` when the reply holds neither.
pub fn reply_packets(buf: &[u8]) -> Result<Option<u64>, i32> {
    for m in nlattr::Messages(buf) {
        match m {
            Message::Error { errno: ENOENT, .. } => return Ok(None),
            Message::Error { errno, .. } => return Err(errno),
            Message::Data { kind, body, .. } if kind >> 8 == NFNL_SUBSYS_ACCT => {
                let pkts = nlattr::AttrIter(body.get(4..).unwrap_or_default()).find(|(t, v)| *t == NFACCT_PKTS && v.len() == 8);
                return pkts.map(|(_, v)| u64::from_be_bytes(v.try_into().unwrap_or_default())).map(Some).ok_or(0);
            }
            _ => {}
        }
    }
    Err(0)
}

/// The packets counted so far by the nfacct counter `name`: `Ok(None)` when it does not
/// exist (no full sync has created it, or the kernel has no nfacct).
pub fn packets(name: &str) -> std::io::Result<Option<u64>> {
    let mut sock = Socket::new(NETLINK_NETFILTER)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    sock.send(&request(NFNL_MSG_ACCT_GET, 0, 1, name), 0)?;
    let (buf, _) = sock.recv_from_full()?;
    match reply_packets(&buf) {
        Ok(n) => Ok(n),
        Err(0) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("no packet count in the kernel's reply for nfacct counter {name}"))),
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nlattr::NLMSG_ERROR;

    #[test]
    fn new_counter_request_bytes() {
        let m = request(NFNL_MSG_ACCT_NEW, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, 1, "abc");
        // 16 header + 4 nfgenmsg + 4 nla header + "abc\0" = 28
        assert_eq!(m.len(), 28);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 28);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0700);
        assert_eq!(u16::from_ne_bytes(m[6..8].try_into().unwrap()), 0x605);
        assert_eq!(&m[24..28], b"abc\0");
        let mut ack = vec![0u8; 36];
        ack[0..4].copy_from_slice(&36u32.to_ne_bytes());
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack[16..20].copy_from_slice(&(-17i32).to_ne_bytes());
        assert_eq!(reply_errno(&ack), Some(EEXIST));
    }

    /// A kernel reply to GET: header (type ACCT_NEW), nfgenmsg, NFACCT_NAME, NFACCT_PKTS
    /// and NFACCT_BYTES (both big-endian).
    fn counter_reply(packets: u64) -> Vec<u8> {
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&NFACCT_NAME.to_ne_bytes());
        attrs.extend_from_slice(b"abc\0");
        for (kind, value) in [(NFACCT_PKTS, packets), (3, packets * 100)] {
            attrs.extend_from_slice(&12u16.to_ne_bytes());
            attrs.extend_from_slice(&kind.to_ne_bytes());
            attrs.extend_from_slice(&value.to_be_bytes());
        }
        let len = 20 + attrs.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&(NFNL_SUBSYS_ACCT << 8).to_ne_bytes());
        m.extend_from_slice(&[0; 14]); // flags, seq, pid, nfgenmsg
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn a_counters_packets_are_read_from_its_reply() {
        assert_eq!(reply_packets(&counter_reply(42)), Ok(Some(42)));
        assert_eq!(reply_packets(&counter_reply(1 << 40)), Ok(Some(1 << 40)));
        let mut missing = vec![0u8; 36];
        missing[0..4].copy_from_slice(&36u32.to_ne_bytes());
        missing[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        missing[16..20].copy_from_slice(&(-ENOENT).to_ne_bytes());
        assert_eq!(reply_packets(&missing), Ok(None));
        missing[16..20].copy_from_slice(&(-95i32).to_ne_bytes());
        assert_eq!(reply_packets(&missing), Err(95));
        assert_eq!(reply_packets(&counter_reply(7)[..30]), Err(0), "a truncated reply is no count");
    }
}

//! kube-proxy's nfacct counters (`localhost_nps_accepted_pkts`,
//! `ct_state_invalid_dropped_pkts`): the rules that match them only load when the
//! counters exist, so a full sync creates them first over netfilter netlink, as
//! kube-proxy does, and renders the matches only if that worked. Messages are built by
//! pure functions; [`ensure`] and [`exists`] do the I/O.

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

const NFNL_SUBSYS_ACCT: u16 = 7;
const NFNL_MSG_ACCT_NEW: u16 = 0;
const NFNL_MSG_ACCT_GET: u16 = 1;
const NFACCT_NAME: u16 = 1;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const EEXIST: i32 = 17;
const ENOENT: i32 = 2;

pub const COUNTERS: [&str; 2] =
    [crate::iptables::render::context::NFACCT_LOCALHOST_NODEPORTS, crate::iptables::render::context::NFACCT_INVALID_DROPPED];

/// `nlmsghdr` + `nfgenmsg` + `NFACCT_NAME`.
pub fn request(cmd: u16, flags: u16, seq: u32, name: &str) -> Vec<u8> {
    let mut nla = Vec::new();
    let value_len = name.len() + 1;
    nla.extend_from_slice(&((4 + value_len) as u16).to_ne_bytes());
    nla.extend_from_slice(&NFACCT_NAME.to_ne_bytes());
    nla.extend_from_slice(name.as_bytes());
    nla.push(0);
    while nla.len() % 4 != 0 {
        nla.push(0);
    }
    let len = 16 + 4 + nla.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&((NFNL_SUBSYS_ACCT << 8) | cmd).to_ne_bytes());
    msg.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[0, 0, 0, 0]); // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, res_id 0
    msg.extend_from_slice(&nla);
    msg
}

/// The errno of the first NLMSG_ERROR in a reply (0 = ACK), or `None` if there is none.
pub fn reply_errno(buf: &[u8]) -> Option<i32> {
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().ok()?);
        if kind == NLMSG_ERROR && off + 20 <= buf.len() {
            return Some(-i32::from_ne_bytes(buf[off + 16..off + 20].try_into().ok()?));
        }
        if len < 16 {
            return None;
        }
        off += (len + 3) & !3;
    }
    None
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

/// Whether both counters exist now (for dry runs, which create nothing).
pub fn exists() -> bool {
    COUNTERS.iter().enumerate().all(|(i, name)| {
        matches!(roundtrip(&request(NFNL_MSG_ACCT_GET, NLM_F_ACK, i as u32 + 1, name)), Ok(e) if e != ENOENT && e >= 0 && e != 95 && e != 93)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

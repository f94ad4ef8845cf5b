//! nf_tables batches on netlink's framing ([`crate::netfilter::nlattr`]): messages of
//! the nf_tables subsystem, the batch begin/end markers around them, and nftnl's user
//! data. Pure bytes, no I/O.

pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

use crate::netfilter::nlattr;
pub use crate::netfilter::nlattr::Attrs;

/// One nf_tables message of a batch.
pub fn message(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, family: u8, attrs: &Attrs) {
    nlattr::nfnl_message(out, NFNL_SUBSYS_NFTABLES, kind, flags, seq, family, &attrs.0);
}

/// The batch begin marker (`seq`), for the nf_tables subsystem.
pub fn begin(out: &mut Vec<u8>, seq: u32) {
    nlattr::nfnl_header(out, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, 0);
}

pub fn end(out: &mut Vec<u8>, seq: u32) {
    nlattr::nfnl_header(out, NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, 0);
}

/// nftnl's user data: type-length-value with one-byte type and length.
#[derive(Debug, Default, Clone)]
pub struct Udata(pub Vec<u8>);

impl Udata {
    pub fn put(&mut self, kind: u8, data: &[u8]) -> &mut Self {
        self.0.push(kind);
        self.0.push(data.len() as u8);
        self.0.extend_from_slice(data);
        self
    }

    /// A NUL-terminated string (a comment: at most 128 bytes before its NUL, as nft allows).
    pub fn str(&mut self, kind: u8, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(kind, &v)
    }

    pub fn u32(&mut self, kind: u8, v: u32) -> &mut Self {
        self.put(kind, &v.to_ne_bytes())
    }
}

//! Netlink's framing, once for every netfilter interface svcproxy speaks (nf_tables,
//! ctnetlink, nfacct): attributes written ([`Attrs`]: type, length, payload padded to
//! four bytes, nests flagged) and walked ([`AttrIter`]), and the messages of one `recv`
//! ([`Messages`]). Pure bytes, no I/O.

pub const NLA_F_NESTED: u16 = 0x8000;
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// Attributes appended to a buffer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Attrs(pub Vec<u8>);

impl Attrs {
    pub fn bytes(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        let len = 4 + data.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(data);
        self.pad();
        self
    }

    /// A NUL-terminated string (as [`Attrs::bytes`] of its bytes and a NUL, written in place).
    pub fn str(&mut self, kind: u16, s: &str) -> &mut Self {
        let len = 4 + s.len() + 1;
        self.0.reserve(len + 3);
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        self.pad();
        self
    }

    pub fn u8(&mut self, kind: u16, v: u8) -> &mut Self {
        self.bytes(kind, &[v])
    }

    pub fn be16(&mut self, kind: u16, v: u16) -> &mut Self {
        self.bytes(kind, &v.to_be_bytes())
    }

    pub fn be32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.bytes(kind, &v.to_be_bytes())
    }

    pub fn be64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.bytes(kind, &v.to_be_bytes())
    }

    /// A nested attribute holding what `f` writes.
    pub fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let start = self.0.len();
        self.0.extend_from_slice(&[0, 0]);
        self.0.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        f(self);
        let len = (self.0.len() - start) as u16;
        self.0[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn pad(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }
}

/// One netfilter message: `nlmsghdr` (type `subsys << 8 | kind`), `nfgenmsg` (family,
/// version 0, `res_id`) and the attributes.
pub fn nfnl_message(out: &mut Vec<u8>, subsys: u16, kind: u16, flags: u16, seq: u32, family: u8, attrs: &[u8]) {
    nfnl_header(out, (subsys << 8) | kind, flags | NLM_F_REQUEST, seq, family, 0, attrs.len());
    out.extend_from_slice(attrs);
}

/// The two headers of a netfilter message whose attributes (`body` bytes) follow.
pub fn nfnl_header(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, body: usize) {
    let len = 16 + 4 + body;
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[family, 0]);
    out.extend_from_slice(&res_id.to_be_bytes());
}

/// The attributes of a payload, borrowed: (type without the nested/byte-order flags,
/// payload); a malformed tail ends the walk.
#[derive(Debug, Clone)]
pub struct AttrIter<'a>(pub &'a [u8]);

impl<'a> Iterator for AttrIter<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let (Some(len), Some(kind)) = (half(b, 0), half(b, 2)) else { return None };
        let len = len as usize;
        if len < 4 || len > b.len() {
            self.0 = &[];
            return None;
        }
        self.0 = &b[((len + 3) & !3).min(b.len())..];
        Some((kind & 0x3fff, &b[4..len]))
    }
}

/// One message of a `recv`'s bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// `nlmsghdr`'s type and sequence number, and what follows the header (for a netfilter
    /// message, `nfgenmsg` and the attributes).
    Data { kind: u16, seq: u32, body: &'a [u8] },
    /// `NLMSG_ERROR`: the errno (positive; 0 is an acknowledgement) and the sequence
    /// number of the request it answers.
    Error { errno: i32, seq: u32 },
    Done { seq: u32 },
}

/// The messages of one `recv`'s bytes, in order (a truncated tail ends the walk).
#[derive(Debug, Clone)]
pub struct Messages<'a>(pub &'a [u8]);

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let (Some(len), Some(kind), Some(seq)) = (word(b, 0), half(b, 4), word(b, 8)) else { return None };
        let len = len as usize;
        if len < 16 || len > b.len() {
            self.0 = &[];
            return None;
        }
        self.0 = &b[((len + 3) & !3).min(b.len())..];
        let msg = &b[..len];
        Some(match kind {
            NLMSG_ERROR => {
                // The error's own header echoes the request's; its sequence number is the request's.
                let errno = word(msg, 16).map_or(0, |e| -(e as i32));
                Message::Error { errno, seq: word(msg, 28).unwrap_or(seq) }
            }
            NLMSG_DONE => Message::Done { seq },
            _ => Message::Data { kind, seq, body: &msg[16..] },
        })
    }
}

pub fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub fn half(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_nests_measured() {
        let mut a = Attrs::default();
        a.str(1, "x").nest(4, |n| {
            n.be32(1, 3);
        });
        assert_eq!(a.0, [6, 0, 1, 0, b'x', 0, 0, 0, 12, 0, 4, 0x80, 8, 0, 1, 0, 0, 0, 0, 3]);
        let walked: Vec<_> = AttrIter(&a.0).collect();
        assert_eq!(walked, [(1, &b"x\0"[..]), (4, &[8, 0, 1, 0, 0, 0, 0, 3][..])]);
    }

    #[test]
    fn messages_are_split_and_errors_carry_the_requests_sequence() {
        let mut buf = Vec::new();
        nfnl_message(&mut buf, 1, 2, 0, 7, 2, &[]);
        // NLMSG_ERROR, errno -2, echoing a header with sequence 9.
        let mut err = Vec::new();
        err.extend_from_slice(&36u32.to_ne_bytes());
        err.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err.extend_from_slice(&[0; 6]);
        err.extend_from_slice(&[0; 4]);
        err.extend_from_slice(&(-2i32).to_ne_bytes());
        err.extend_from_slice(&[0; 8]);
        err.extend_from_slice(&9u32.to_ne_bytes());
        err.extend_from_slice(&[0; 4]);
        buf.extend_from_slice(&err);
        buf.extend_from_slice(&[1, 2, 3]);
        let got: Vec<_> = Messages(&buf).collect();
        assert_eq!(got.len(), 2);
        assert!(matches!(got[0], Message::Data { kind: 0x102, seq: 7, body } if body == [2, 0, 0, 0]));
        assert_eq!(got[1], Message::Error { errno: 2, seq: 9 });
    }
}

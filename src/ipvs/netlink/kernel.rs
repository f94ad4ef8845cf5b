//! [`NetlinkIpvs`]: the [`Ipvs`] client over a generic-netlink socket.
//!
//! One socket, family id resolved once through nlctrl. Requests ask for an ACK;
//! dumps read multipart replies up to `NLMSG_DONE`. [`Ipvs::apply`] pipelines:
//! it writes a window of requests into one datagram, only the last asking for an
//! ACK, and reads back the errors of the refused ones plus that final ACK. The
//! kernel handles the requests of a datagram in order and always reports errors,
//! so the final ACK proves the whole window was processed.

use std::fmt::Debug;
use std::io;

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkBuffer, NetlinkMessage, NlasIterator, ParseableParametrized,
    NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

use super::client::{BatchReport, Failure, Ipvs};
use super::convert::{self, op_request};
use super::error::Error;
use super::msg::{IpvsMessage, AF_INET, AF_INET6, IPVS_GENL_NAME};
use crate::ipvs::values::{
    Call, Info, ObservedRealServer, ObservedVirtualServer, Op, Timeouts, VirtualServer,
};

/// Requests per datagram in [`Ipvs::apply`].
pub const DEFAULT_WINDOW: usize = 128;
const MAX_WINDOW: usize = 1024;
/// What one queued error message costs in the receive buffer, rounded up (the
/// rig's 6.1 kernel fits 512 errors in 416 KiB, not 1024). A window never holds
/// more requests than the buffer holds errors: were they all refused, none is lost.
const ERROR_TRUESIZE: usize = 1024;
/// Large enough for any datagram the kernel sends (dumps are at most 32 KiB).
const RECV_BUF: usize = 64 * 1024;
/// Asked for, the kernel caps it at `net.core.rmem_max`.
const SOCKET_RCVBUF: usize = 1 << 20;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_ATTR_FAMILY_ID: u16 = 1;

/// Which way a traced datagram went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Sent,
    Received,
}

type Trace = Box<dyn FnMut(Direction, &[u8]) + Send>;

/// IPVS over generic netlink, synchronous, for the caller's network namespace.
pub struct NetlinkIpvs {
    socket: Socket,
    family: u16,
    seq: u32,
    buf: Vec<u8>,
    window: usize,
    max_window: usize,
    trace: Option<Trace>,
}

impl NetlinkIpvs {
    /// Opens a socket and resolves the IPVS family ([`Error::FamilyNotFound`]
    /// when `ip_vs` is not loaded).
    pub fn connect() -> Result<Self, Error> {
        let mut socket = Socket::new(NETLINK_GENERIC).map_err(Error::Socket)?;
        socket.bind_auto().map_err(Error::Socket)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(Error::Socket)?;
        // Best effort, both: errors then echo only the request's header (kernel
        // 4.3+), and a larger buffer allows a larger window (see ERROR_TRUESIZE).
        let _ = socket.set_cap_ack(true);
        let _ = socket.set_rx_buf_sz(SOCKET_RCVBUF);
        let rcvbuf = socket.get_rx_buf_sz().map_err(Error::Socket)?;
        let max_window = (rcvbuf / ERROR_TRUESIZE).clamp(1, MAX_WINDOW);
        let mut ipvs = NetlinkIpvs {
            socket,
            family: 0,
            seq: 0,
            buf: Vec::new(),
            window: DEFAULT_WINDOW.min(max_window),
            max_window,
            trace: None,
        };
        ipvs.family = ipvs.resolve_family()?;
        Ok(ipvs)
    }

    /// Requests per datagram in [`Ipvs::apply`], at least 1 and at most what the
    /// socket's receive buffer can answer (≤ 1024; 416 with Debian's default
    /// `net.core.rmem_max`).
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window.clamp(1, self.max_window);
        self
    }

    /// The window [`Ipvs::apply`] uses.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Calls `f` with every datagram sent and received (for debugging and captures).
    pub fn with_trace(mut self, f: impl FnMut(Direction, &[u8]) + Send + 'static) -> Self {
        self.trace = Some(Box::new(f));
        self
    }

    /// The generic-netlink id the kernel gave the IPVS family.
    pub fn family_id(&self) -> u16 {
        self.family
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        if let Some(trace) = self.trace.as_mut() {
            trace(Direction::Sent, datagram);
        }
        let sent = self.socket.send(datagram, 0)?;
        if sent != datagram.len() {
            return Err(io::Error::other(format!("sent {sent} of {} bytes", datagram.len())));
        }
        Ok(())
    }

    /// Reads one datagram into `self.buf`.
    fn recv(&mut self) -> io::Result<()> {
        self.buf.clear();
        self.buf.reserve(RECV_BUF);
        let len = self.socket.recv(&mut self.buf, libc::MSG_TRUNC)?;
        if len > self.buf.len() {
            return Err(io::Error::other(format!("netlink datagram of {len} bytes truncated")));
        }
        if let Some(trace) = self.trace.as_mut() {
            trace(Direction::Received, &self.buf);
        }
        Ok(())
    }

    fn resolve_family(&mut self) -> Result<u16, Error> {
        let ctrl = GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(IPVS_GENL_NAME.to_string())],
        };
        let seq = self.next_seq();
        let mut out = Vec::new();
        encode(
            GenlMessage::from_payload(ctrl),
            GENL_ID_CTRL,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            &mut out,
        );
        self.send(&out).map_err(Error::Socket)?;
        let mut id = None;
        loop {
            self.recv().map_err(Error::Socket)?;
            for frame in Frames::new(&self.buf) {
                let (frame_seq, frame) = frame.map_err(|e| Error::Socket(io::Error::other(e)))?;
                match frame {
                    _ if frame_seq != seq => {}
                    Frame::Data { kind: GENL_ID_CTRL, payload } => id = id.or(family_id(payload)),
                    Frame::Error(code) if code == -libc::ENOENT => return Err(Error::FamilyNotFound),
                    Frame::Error(code) => {
                        return Err(Error::Socket(io::Error::from_raw_os_error(-code)))
                    }
                    Frame::Ack | Frame::Done(_) => return id.ok_or(Error::FamilyNotFound),
                    Frame::Data { .. } | Frame::Skip => {}
                }
            }
        }
    }

    /// Sends one request and collects its replies: up to the ACK, or up to
    /// `NLMSG_DONE` for a dump. A reply that does not parse is reported after the
    /// rest is drained, so the socket stays usable.
    fn transact(
        &mut self,
        call: &Call,
        msg: IpvsMessage,
        dump: bool,
    ) -> Result<Vec<IpvsMessage>, Error> {
        let seq = self.next_seq();
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        let mut out = Vec::new();
        encode(GenlMessage::from_payload(msg), self.family, flags, seq, &mut out);
        self.send(&out).map_err(|e| Error::io(call, e))?;
        let mut replies = Vec::new();
        let mut bad_reply = None;
        loop {
            self.recv().map_err(|e| Error::io(call, e))?;
            for frame in Frames::new(&self.buf) {
                let (frame_seq, frame) = frame.map_err(|e| Error::decode(call, e))?;
                match frame {
                    _ if frame_seq != seq => {}
                    Frame::Data { kind, payload } if kind == self.family => {
                        match parse_ipvs(payload) {
                            Ok(reply) => replies.push(reply),
                            Err(e) => bad_reply = bad_reply.or(Some(Error::decode(call, e))),
                        }
                    }
                    Frame::Error(code) | Frame::Done(code) if code < 0 => {
                        return Err(Error::kernel(call, code))
                    }
                    Frame::Ack | Frame::Done(_) => return bad_reply.map_or(Ok(replies), Err),
                    Frame::Error(_) | Frame::Data { .. } | Frame::Skip => {}
                }
            }
        }
    }

    /// One window of [`Ipvs::apply`]: `ops` start at index `first` of the batch.
    fn apply_window(
        &mut self,
        ops: &[Op],
        first: usize,
        report: &mut BatchReport,
    ) -> Result<(), Error> {
        let call = Call::Batch(ops.len());
        let mut out = Vec::with_capacity(ops.len() * 160);
        let base = self.seq.wrapping_add(1);
        for (i, op) in ops.iter().enumerate() {
            let ack = if i + 1 == ops.len() { NLM_F_ACK } else { 0 };
            let seq = self.next_seq();
            encode(
                GenlMessage::from_payload(op_request(op)),
                self.family,
                NLM_F_REQUEST | ack,
                seq,
                &mut out,
            );
        }
        let last = self.seq;
        self.send(&out).map_err(|e| Error::io(&call, e))?;
        loop {
            self.recv().map_err(|e| Error::io(&call, e))?;
            let mut done = false;
            for frame in Frames::new(&self.buf) {
                let (seq, frame) = frame.map_err(|e| Error::decode(&call, e))?;
                let offset = seq.wrapping_sub(base) as usize;
                let Some(op) = ops.get(offset) else { continue };
                if let Frame::Error(code) = frame {
                    let error = Error::kernel(&Call::Op(op.clone()), code);
                    report.failed.push(Failure { index: first + offset, error });
                }
                done |= seq == last && matches!(frame, Frame::Ack | Frame::Error(_));
            }
            if done {
                return Ok(());
            }
        }
    }
}

impl Ipvs for NetlinkIpvs {
    fn info(&mut self) -> Result<Info, Error> {
        let call = Call::Info;
        let replies = self.transact(&call, convert::info_request(), false)?;
        let msg = replies.first().ok_or_else(|| Error::reply(&call, "no GET_INFO reply"))?;
        convert::info_reply(msg).map_err(|detail| Error::reply(&call, detail))
    }

    fn services(&mut self) -> Result<Vec<ObservedVirtualServer>, Error> {
        let call = Call::Services;
        let replies = self.transact(&call, convert::services_request(), true)?;
        let mut services = Vec::with_capacity(replies.len());
        for msg in &replies {
            let attrs = convert::service_of(msg).map_err(|d| Error::reply(&call, d))?;
            if let Some(vs) =
                convert::observed_service(attrs).map_err(|d| Error::reply(&call, d))?
            {
                services.push(vs);
            }
        }
        Ok(services)
    }

    fn dests(&mut self, vs: &VirtualServer) -> Result<Vec<ObservedRealServer>, Error> {
        let call = Call::Dests(vs.key());
        let replies = self.transact(&call, convert::dests_request(&vs.key()), true)?;
        let af = if vs.addr.is_ipv4() { AF_INET } else { AF_INET6 };
        replies
            .iter()
            .map(|msg| {
                let attrs = convert::dest_of(msg)?;
                convert::observed_dest(attrs, af)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|detail| Error::reply(&call, detail))
    }

    fn timeouts(&mut self) -> Result<Timeouts, Error> {
        let call = Call::Timeouts;
        let replies = self.transact(&call, convert::timeouts_request(), false)?;
        let msg = replies.first().ok_or_else(|| Error::reply(&call, "no GET_CONFIG reply"))?;
        Ok(convert::timeouts_reply(msg))
    }

    fn run(&mut self, op: &Op) -> Result<(), Error> {
        self.transact(&Call::Op(op.clone()), op_request(op), false).map(drop)
    }

    fn apply(&mut self, ops: &[Op]) -> Result<BatchReport, Error> {
        let mut report = BatchReport { ops: ops.len(), failed: Vec::new() };
        let window = self.window;
        for (n, chunk) in ops.chunks(window).enumerate() {
            self.apply_window(chunk, n * window, &mut report)?;
        }
        Ok(report)
    }
}

/// Appends one finished netlink message to `out`.
fn encode<F: GenlFamily + Emitable + Debug>(
    mut genl: GenlMessage<F>,
    family: u16,
    flags: u16,
    seq: u32,
    out: &mut Vec<u8>,
) {
    genl.set_resolved_family_id(family);
    let mut msg = NetlinkMessage::from(genl);
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.finalize();
    let start = out.len();
    out.resize(start + msg.buffer_len(), 0);
    msg.serialize(&mut out[start..]);
}

fn parse_ipvs(payload: &[u8]) -> Result<IpvsMessage, DecodeError> {
    let header = GenlHeader::parse(payload)?;
    let attrs = payload.get(4..).unwrap_or_default();
    IpvsMessage::parse_with_param(attrs, header)
}

/// `CTRL_ATTR_FAMILY_ID` of an nlctrl reply (genl header, then attributes).
fn family_id(payload: &[u8]) -> Option<u16> {
    NlasIterator::new(payload.get(4..)?)
        .filter_map(Result::ok)
        .find(|nla| nla.kind() == CTRL_ATTR_FAMILY_ID)
        .and_then(|nla| nla.value().try_into().ok().map(u16::from_ne_bytes))
}

/// One netlink message of a received datagram, as far as this client cares.
enum Frame<'a> {
    Ack,
    /// `NLMSG_ERROR` with a (negative) errno.
    Error(i32),
    /// `NLMSG_DONE` with its status (negative errno if the dump failed).
    Done(i32),
    Data {
        kind: u16,
        payload: &'a [u8],
    },
    Skip,
}

/// The messages of one datagram, with their sequence numbers.
struct Frames<'a> {
    buf: &'a [u8],
    offset: usize,
}

impl<'a> Frames<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Frames { buf, offset: 0 }
    }

    fn frame(&mut self) -> Result<(u32, Frame<'a>), DecodeError> {
        let rest = self.buf.get(self.offset..).unwrap_or_default();
        let msg = NetlinkBuffer::new_checked(rest)?;
        let len = msg.length() as usize;
        self.offset += (len + 3) & !3;
        let payload = rest.get(16..len).unwrap_or_default();
        let status = || -> Result<i32, DecodeError> {
            let code = payload.get(..4).ok_or("netlink status shorter than 4 bytes")?;
            Ok(i32::from_ne_bytes(code.try_into().map_err(|_| "bad status")?))
        };
        let frame = match msg.message_type() {
            NLMSG_ERROR => match status()? {
                0 => Frame::Ack,
                code => Frame::Error(code),
            },
            NLMSG_DONE => Frame::Done(if payload.is_empty() { 0 } else { status()? }),
            NLMSG_NOOP | NLMSG_OVERRUN => Frame::Skip,
            kind => Frame::Data { kind, payload },
        };
        Ok((msg.sequence_number(), frame))
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<(u32, Frame<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.offset >= self.buf.len() {
            return None;
        }
        let frame = self.frame();
        if frame.is_err() {
            self.offset = self.buf.len();
        }
        Some(frame)
    }
}

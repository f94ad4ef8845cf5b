//! ctnetlink over a `NETLINK_NETFILTER` socket: a dump streamed flow by flow (the kernel
//! filtering by family and protocol), deletes and creates sent in batches of messages,
//! each batch one `send` the kernel handles before it returns. Typed errors.

use std::os::fd::AsRawFd;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::wire::{self, Flow, WireError};
use crate::netfilter::nlattr::{Message, Messages};

/// Messages per `send`. The kernel queues every answer of a batch (a delete's error, a
/// create's ack) before the first `recv`, each an skb of about 1 KiB against the socket's
/// receive buffer (208 KiB by default): 128 answers fit it with room to spare, where 1,024
/// overflowed it (ENOBUFS, found by the benchmark). The buffer is also raised where allowed.
pub const BATCH: usize = 128;

/// A dump's `recv` buffer: the kernel fills at most 32 KiB per dump message batch.
const RECV_BUF: usize = 1 << 16;

/// What went wrong talking ctnetlink.
#[derive(Debug, thiserror::Error)]
pub enum CtError {
    #[error("ctnetlink {op}: {source}")]
    Io { op: &'static str, source: std::io::Error },
    #[error("ctnetlink {op}: the kernel answered {}", std::io::Error::from_raw_os_error(*errno))]
    Kernel { op: &'static str, errno: i32 },
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl CtError {
    fn io(op: &'static str) -> impl Fn(std::io::Error) -> CtError {
        move |source| CtError::Io { op, source }
    }
}

/// What a dump read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Flow messages received (after the kernel's filter).
    pub flows: usize,
    /// Bytes received.
    pub bytes: usize,
    /// Whether the kernel filtered by protocol (false: a kernel before 5.8 refused the
    /// filter, and the dump was filtered here).
    pub kernel_filtered: bool,
}

/// What a batch of deletes did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    pub deleted: usize,
    /// Flows already gone (expired, or replaced by a newer flow with the same tuple).
    pub gone: usize,
}

/// One ctnetlink socket.
pub struct Ctnetlink {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Ctnetlink {
    pub fn open() -> Result<Self, CtError> {
        let sock = Socket::new(NETLINK_NETFILTER).map_err(CtError::io("socket"))?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(CtError::io("connect"))?;
        // Errors echo only the header, not the request: a batch's answers stay small.
        sock.set_cap_ack(true).map_err(CtError::io("setsockopt"))?;
        grow_receive_buffer(&sock);
        set_read_timeout(&sock);
        let seq = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_secs() as u32);
        Ok(Ctnetlink { sock, seq, buf: vec![0; RECV_BUF] })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Streams one family's flows (`AF_INET`/`AF_INET6`) to `each`; with `proto`, only that
    /// protocol's (filtered by the kernel where it can, else here).
    pub fn dump(&mut self, family: u8, proto: Option<u8>, each: impl FnMut(&Flow)) -> Result<DumpStats, CtError> {
        self.dump_to(family, proto.map(wire::DumpFilter::proto), each)
    }

    /// [`Ctnetlink::dump`] of the flows `filter` keeps (protocol, destination port and
    /// address), filtered by the kernel where it can, else here.
    pub fn dump_to(&mut self, family: u8, filter: Option<wire::DumpFilter>, mut each: impl FnMut(&Flow)) -> Result<DumpStats, CtError> {
        match self.dump_once(family, filter, true, &mut each) {
            // Before Linux 5.8 the kernel knows no CTA_FILTER; nothing was streamed yet.
            Err(CtError::Kernel { errno, .. }) if filter.is_some() && (errno == libc::EINVAL || errno == libc::EOPNOTSUPP) => {
                self.dump_once(family, filter, false, &mut each)
            }
            other => other,
        }
    }

    fn dump_once(&mut self, family: u8, filter: Option<wire::DumpFilter>, kernel_filter: bool, each: &mut dyn FnMut(&Flow)) -> Result<DumpStats, CtError> {
        let seq = self.next_seq();
        let request = wire::dump_request_to(seq, family, filter.as_ref().filter(|_| kernel_filter));
        self.sock.send(&request, 0).map_err(CtError::io("dump request"))?;
        let mut stats = DumpStats { kernel_filtered: kernel_filter && filter.is_some(), ..DumpStats::default() };
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], 0).map_err(CtError::io("dump"))?;
            if n == 0 {
                return Err(CtError::Io { op: "dump", source: std::io::ErrorKind::UnexpectedEof.into() });
            }
            stats.bytes += n;
            for m in Messages(&self.buf[..n]) {
                match m {
                    Message::Data { kind, seq: s, body } if s == seq && kind == (wire::NFNL_SUBSYS_CTNETLINK << 8 | wire::MSG_NEW) => {
                        let flow = wire::parse_flow(body)?;
                        stats.flows += 1;
                        if filter.is_none_or(|f| f.matches(&flow)) {
                            each(&flow);
                        }
                    }
                    Message::Done { seq: s } if s == seq => return Ok(stats),
                    Message::Error { errno, seq: s } if s == seq => {
                        return if errno == 0 { Ok(stats) } else { Err(CtError::Kernel { op: "dump", errno }) };
                    }
                    _ => {}
                }
            }
        }
    }

    /// Deletes flows, [`BATCH`] to a `send`. A flow already gone is counted, not an error;
    /// any other refusal is returned after the batch it was in.
    pub fn delete(&mut self, flows: &[Flow]) -> Result<Deleted, CtError> {
        let mut out = Deleted::default();
        for chunk in flows.chunks(BATCH) {
            let mut batch = Vec::with_capacity(chunk.len() * 100);
            let first = self.seq.wrapping_add(1);
            for f in chunk {
                let seq = self.next_seq();
                wire::delete_request(&mut batch, seq, f, false);
            }
            let errors = self.send_batch(&batch, first, chunk.len(), "delete")?;
            let gone = errors.iter().filter(|e| **e == libc::ENOENT).count();
            if let Some(errno) = errors.iter().find(|e| **e != libc::ENOENT) {
                return Err(CtError::Kernel { op: "delete", errno: *errno });
            }
            out.gone += gone;
            out.deleted += chunk.len() - gone;
        }
        Ok(out)
    }

    /// Creates flows (benchmarks and tests), [`BATCH`] to a `send`; returns how many the
    /// kernel created. A flow that exists already is refused (`EEXIST`).
    pub fn create(&mut self, flows: &[Flow]) -> Result<usize, CtError> {
        let mut created = 0;
        for chunk in flows.chunks(BATCH) {
            let mut batch = Vec::with_capacity(chunk.len() * 200);
            let first = self.seq.wrapping_add(1);
            for f in chunk {
                let seq = self.next_seq();
                wire::create_request(&mut batch, seq, f);
            }
            let errors = self.send_batch(&batch, first, chunk.len(), "create")?;
            if let Some(errno) = errors.first() {
                return Err(CtError::Kernel { op: "create", errno: *errno });
            }
            created += chunk.len();
        }
        Ok(created)
    }

    /// Sends `batch` (messages `first..first + count`) and collects the non-zero errnos of
    /// the kernel's answers. The kernel handles every message within the `send`, so its
    /// answers are all queued when it returns.
    fn send_batch(&mut self, batch: &[u8], first: u32, count: usize, op: &'static str) -> Result<Vec<i32>, CtError> {
        grow_send_buffer(&self.sock, batch.len());
        let n = self.sock.send(batch, 0).map_err(CtError::io(op))?;
        if n != batch.len() {
            return Err(CtError::Io { op, source: std::io::Error::other(format!("sent {n} of {} bytes", batch.len())) });
        }
        let mut errors = Vec::new();
        loop {
            match self.sock.recv(&mut &mut self.buf[..], libc::MSG_DONTWAIT) {
                Ok(0) => break,
                Ok(n) => {
                    for m in Messages(&self.buf[..n]) {
                        if let Message::Error { errno, seq } = m {
                            if errno != 0 && seq.wrapping_sub(first) < count as u32 {
                                errors.push(errno);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(CtError::Io { op, source: e }),
            }
        }
        Ok(errors)
    }
}

/// Bounds every `recv` (a kernel that never answers is an error, not a hang).
fn set_read_timeout(sock: &Socket) {
    let tv = libc::timeval { tv_sec: 10, tv_usec: 0 };
    // SAFETY: setsockopt on a socket we own, with a pointer to a timeval that outlives the call.
    unsafe {
        libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&tv as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as libc::socklen_t);
    }
}

/// Room for a whole batch's answers and a dump's skbs: 1 MiB where the process may force
/// it (CAP_NET_ADMIN, as on a node), else whatever `rmem_max` allows.
fn grow_receive_buffer(sock: &Socket) {
    let want: libc::c_int = 1 << 20;
    let set = |opt| {
        // SAFETY: setsockopt on a socket we own, with a pointer to an int that outlives the call.
        unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, opt, (&want as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) }
    };
    if set(libc::SO_RCVBUFFORCE) != 0 {
        set(libc::SO_RCVBUF);
    }
}

/// The send buffer must hold a whole batch (one message to the kernel).
fn grow_send_buffer(sock: &Socket, len: usize) {
    let want = (len * 2) as libc::c_int;
    // SAFETY: setsockopt on a socket we own, with a pointer to an int that outlives the call.
    unsafe {
        libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, (&want as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t);
    }
}

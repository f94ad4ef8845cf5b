//! Errors of the IPVS client. Every error from a request names the [`Call`]
//! (operation and object) it belongs to.

use std::fmt;
use std::io;

use netlink_packet_core::DecodeError;

use crate::ipvs::values::Call;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening, binding or configuring the generic-netlink socket, or asking nlctrl.
    #[error("generic netlink socket")]
    Socket(#[source] io::Error),
    /// nlctrl does not know "IPVS": the `ip_vs` module is not loaded.
    #[error("the kernel has no IPVS generic netlink family (is the ip_vs module loaded?)")]
    FamilyNotFound,
    /// The kernel refused the request.
    #[error("{call}: {errno}")]
    Kernel { call: Box<Call>, errno: Errno },
    /// Sending or receiving failed.
    #[error("{call}: netlink I/O")]
    Io {
        call: Box<Call>,
        #[source]
        source: io::Error,
    },
    /// The kernel's reply did not parse.
    #[error("{call}: malformed reply")]
    Decode {
        call: Box<Call>,
        #[source]
        source: DecodeError,
    },
    /// The reply parsed but does not say what it must (a missing attribute, an
    /// address family that is neither IPv4 nor IPv6, a non-contiguous netmask …).
    #[error("{call}: unexpected reply: {detail}")]
    Reply { call: Box<Call>, detail: String },
}

impl Error {
    pub(crate) fn kernel(call: &Call, code: i32) -> Error {
        Error::Kernel { call: Box::new(call.clone()), errno: Errno::from_raw(code.abs()) }
    }

    pub(crate) fn io(call: &Call, source: io::Error) -> Error {
        Error::Io { call: Box::new(call.clone()), source }
    }

    pub(crate) fn decode(call: &Call, source: DecodeError) -> Error {
        Error::Decode { call: Box::new(call.clone()), source }
    }

    pub(crate) fn reply(call: &Call, detail: impl Into<String>) -> Error {
        Error::Reply { call: Box::new(call.clone()), detail: detail.into() }
    }

    /// The errno, when the kernel refused the request.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The call this error belongs to, when there is one.
    pub fn call(&self) -> Option<&Call> {
        match self {
            Error::Kernel { call, .. }
            | Error::Io { call, .. }
            | Error::Decode { call, .. }
            | Error::Reply { call, .. } => Some(call),
            Error::Socket(_) | Error::FamilyNotFound => None,
        }
    }

    /// `EEXIST`: the virtual or real server is already there.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(Errno::Exists)
    }

    /// `ESRCH` (no such virtual server) or `ENOENT` (no such real server or scheduler).
    pub fn is_not_found(&self) -> bool {
        matches!(self.errno(), Some(Errno::NoService | Errno::NotFound))
    }
}

/// The errnos IPVS answers with, by what they mean there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// `EPERM`: not CAP_NET_ADMIN.
    NotPermitted,
    /// `ENOENT`: no such real server, or no such scheduler module.
    NotFound,
    /// `ESRCH`: no such virtual server.
    NoService,
    /// `ENOMEM`.
    NoMemory,
    /// `EBUSY`.
    Busy,
    /// `EEXIST`: the virtual or real server already exists.
    Exists,
    /// `EINVAL`: a missing or invalid attribute.
    Invalid,
    /// `ERANGE`: a negative weight, or a lower threshold above the upper one.
    Range,
    /// `EAFNOSUPPORT`: IPv6 without IPv6 support, or a bad address family.
    AfNotSupported,
    Other(i32),
}

const TABLE: [(Errno, i32, &str); 9] = [
    (Errno::NotPermitted, 1, "EPERM"),
    (Errno::NotFound, 2, "ENOENT"),
    (Errno::NoService, 3, "ESRCH"),
    (Errno::NoMemory, 12, "ENOMEM"),
    (Errno::Busy, 16, "EBUSY"),
    (Errno::Exists, 17, "EEXIST"),
    (Errno::Invalid, 22, "EINVAL"),
    (Errno::Range, 34, "ERANGE"),
    (Errno::AfNotSupported, 97, "EAFNOSUPPORT"),
];

impl Errno {
    /// From a positive errno.
    pub fn from_raw(code: i32) -> Errno {
        TABLE.iter().find(|(_, n, _)| *n == code).map_or(Errno::Other(code), |(e, _, _)| *e)
    }

    /// The positive errno.
    pub fn raw(self) -> i32 {
        match self {
            Errno::Other(code) => code,
            known => TABLE.iter().find(|(e, _, _)| *e == known).map_or(0, |(_, n, _)| *n),
        }
    }

    fn name(self) -> Option<&'static str> {
        TABLE.iter().find(|(e, _, _)| *e == self).map(|(_, _, name)| *name)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = io::Error::from_raw_os_error(self.raw()).to_string();
        // io::Error renders "File exists (os error 17)"; keep the text, name the errno.
        let text = text.split(" (os error").next().unwrap_or_default();
        match self.name() {
            Some(name) => write!(f, "{text} ({name})"),
            None => write!(f, "{text} (errno {})", self.raw()),
        }
    }
}

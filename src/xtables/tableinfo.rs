//! The legacy (x_tables) kernel's summary of one table: `getsockopt(IPT_SO_GET_INFO)`
//! (`IP6T_SO_GET_INFO` for IPv6) on a raw socket of the current network namespace. It
//! returns `struct ipt_getinfo` — the hooks, their entry and underflow offsets, the number
//! of entries and the blob's size — and copies no rule, so it costs a few syscalls however
//! large the table is, where any `iptables-legacy` query copies the whole table out
//! (BENCHMARKS.md has the cost at 10,000 services).
//!
//! Watch mode uses it to skip the canary check of a table nothing changed
//! ([`super::canary::Gate`]). It answers only for iptables-legacy: nf_tables tables are not
//! x_tables tables, and asking for one would load `ip_tables` and answer for an empty table.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::net::IpFamily;

/// `IPT_BASE_CTL` (64) + 0: `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO` alike
/// (`linux/netfilter_ipv4/ip_tables.h`, `linux/netfilter_ipv6/ip6_tables.h`).
const SO_GET_INFO: libc::c_int = 64;
/// `XT_TABLE_MAXNAMELEN`.
const NAME_LEN: usize = 32;
/// `NF_INET_NUMHOOKS`.
const HOOKS: usize = 5;

/// `struct ipt_getinfo` / `struct ip6t_getinfo` (the same layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct GetInfo {
    name: [u8; NAME_LEN],
    valid_hooks: u32,
    hook_entry: [u32; HOOKS],
    underflow: [u32; HOOKS],
    num_entries: u32,
    size: u32,
}

/// What the kernel says of a table without copying its rules. Any change to the table's
/// rules that adds or removes one changes `num_entries`; one that changes a rule's length
/// changes `size`; the offsets move with any change before a hook's first rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub valid_hooks: u32,
    pub hook_entry: [u32; HOOKS],
    pub underflow: [u32; HOOKS],
    pub num_entries: u32,
    pub size: u32,
}

/// Why the kernel could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// This restorer has no such summary (iptables-nft, a fake).
    #[error("no table summary for this backend")]
    Unsupported,
    #[error("table name {0:?} is too long for x_tables")]
    Name(String),
    #[error("cannot open a raw {family} socket to ask x_tables: {source}")]
    Socket { family: IpFamily, source: io::Error },
    /// ENOENT: no such table (or no `ip_tables` module); EPERM: no CAP_NET_ADMIN.
    #[error("x_tables would not describe {family} table {table}: {source}")]
    Query { family: IpFamily, table: String, source: io::Error },
}

/// The x_tables summary of `table` of `family` in the current network namespace.
pub fn probe(family: IpFamily, table: &str) -> Result<TableInfo, ProbeError> {
    let mut info = GetInfo { name: name(table)?, valid_hooks: 0, hook_entry: [0; HOOKS], underflow: [0; HOOKS], num_entries: 0, size: 0 };
    let (domain, level) = match family {
        IpFamily::V4 => (libc::AF_INET, libc::SOL_IP),
        IpFamily::V6 => (libc::AF_INET6, libc::SOL_IPV6),
    };
    let socket = raw_socket(domain).map_err(|source| ProbeError::Socket { family, source })?;
    let mut len = std::mem::size_of::<GetInfo>() as libc::socklen_t;
    // SAFETY: `info` is a live, writable `GetInfo` and `len` its exact size, so the kernel
    // writes at most `len` bytes into memory we own; the socket is open for the call.
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), level, SO_GET_INFO, (&mut info as *mut GetInfo).cast(), &mut len) };
    if rc != 0 {
        return Err(ProbeError::Query { family, table: table.to_string(), source: io::Error::last_os_error() });
    }
    if len as usize != std::mem::size_of::<GetInfo>() {
        let source = io::Error::other(format!("the kernel answered {len} bytes, not {}", std::mem::size_of::<GetInfo>()));
        return Err(ProbeError::Query { family, table: table.to_string(), source });
    }
    Ok(TableInfo { valid_hooks: info.valid_hooks, hook_entry: info.hook_entry, underflow: info.underflow, num_entries: info.num_entries, size: info.size })
}

/// `table` as the kernel's NUL-terminated name field.
fn name(table: &str) -> Result<[u8; NAME_LEN], ProbeError> {
    let bytes = table.as_bytes();
    if bytes.len() >= NAME_LEN || bytes.contains(&0) {
        return Err(ProbeError::Name(table.to_string()));
    }
    let mut name = [0u8; NAME_LEN];
    name[..bytes.len()].copy_from_slice(bytes);
    Ok(name)
}

/// A raw socket (what iptables-legacy itself opens to talk to x_tables), closed on drop.
fn raw_socket(domain: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; no memory is handed over.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2), is valid and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_struct_is_the_kernels_84_bytes() {
        assert_eq!(std::mem::size_of::<GetInfo>(), 84);
    }

    #[test]
    fn a_name_is_nul_terminated_and_bounded() {
        assert_eq!(&name("nat").unwrap()[..4], b"nat\0");
        assert!(matches!(name(&"x".repeat(32)), Err(ProbeError::Name(_))));
        assert!(matches!(name("a\0b"), Err(ProbeError::Name(_))));
        assert!(name(&"x".repeat(31)).is_ok());
    }
}

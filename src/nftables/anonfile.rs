//! The anonymous sets' contents a full sync's live read found ([`AnonCache`]), kept in a
//! file across processes, so that a restart (and every one-shot `svcproxy sync`) dumps
//! only the anonymous sets it has never seen ([`super::netlink::read_live_cached`]).
//!
//! Identity is exact, never a guess: a bound anonymous set cannot change and a set handle
//! is never reused within a table; a table handle is never reused within one network
//! namespace's life (the kernel counts them per namespace, from 1: a new namespace's
//! tables repeat another's handles, so the cookie is what tells them apart); a network
//! namespace is named uniquely for the boot by its cookie (`SO_NETNS_COOKIE`, Linux ≥
//! 5.14) and the boot by `/proc/sys/kernel/random/boot_id`. The kernel tier checks each
//! way the kernel can change under a file (`tests/kernel/nft_anonfile.rs`). Not detected:
//! a reload of a modular nf_tables (only possible once no namespace holds a NAT chain),
//! which restarts the handle count in a living namespace.
//! So the file is for one (boot id, netns cookie) and its entries are keyed by (family,
//! table handle, set handle). A file for another boot or namespace, of another version,
//! truncated or damaged is ignored (logged at debug) and rewritten: never an error that
//! stops a sync. When the kernel does not give the cookie, nothing is persisted (said
//! once, at info); the process keeps its own cache as before.
//!
//! The format (little-endian; [`VERSION`]): magic, version, boot id (16 bytes), netns
//! cookie, entry count, entries (family, table handle, set handle, length, the
//! canonical content), then the SHA-256 of everything before it. [`VERSION`] also stands
//! for the canonical form of [`super::wire::canon`]: a file written by a build whose
//! canonical form differs must not be read (the test `the_canonical_form_is_pinned`
//! fails when it changes).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::wire::canon::Canon;

/// Anonymous sets' contents by (family's `NFPROTO_*`, table handle, set handle).
pub type AnonCache = HashMap<(u8, u64, u64), Canon>;

/// Where the file is on the node (its folder is created), like the IPVS mode's
/// graceful-termination file.
pub const ANON_FILE: &str = "/run/svcproxy/nft-anonymous-sets";

/// The environment variable that names another file (tests, benchmarks).
pub const ANON_FILE_ENV: &str = "SVCPROXY_NFT_ANON_FILE";

/// The file's format, and the canonical form its contents are in.
pub const VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"svcpNFTA";
const HEADER: usize = 8 + 4 + 16 + 8 + 4;
const ENTRY: usize = 1 + 8 + 8 + 4;
const SUM: usize = 32;

/// `getsockopt(SOL_SOCKET, SO_NETNS_COOKIE)` (asm-generic; not every libc names it).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The node's file: [`ANON_FILE`], or the one `SVCPROXY_NFT_ANON_FILE` names.
pub fn path_on_node() -> PathBuf {
    std::env::var_os(ANON_FILE_ENV).filter(|p| !p.is_empty()).map_or_else(|| PathBuf::from(ANON_FILE), PathBuf::from)
}

/// The boot and the network namespace a cache belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub boot_id: [u8; 16],
    pub netns_cookie: u64,
}

/// Why this process's [`Identity`] is not known.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read /proc/sys/kernel/random/boot_id: {0}")]
    BootId(std::io::Error),
    #[error("/proc/sys/kernel/random/boot_id is not a UUID: {0:?}")]
    BootIdFormat(String),
    #[error("the kernel does not give the network namespace's cookie (SO_NETNS_COOKIE, Linux >= 5.14): {0}")]
    Cookie(std::io::Error),
}

impl Identity {
    /// This boot's, and the network namespace of this thread's sockets.
    pub fn here() -> Result<Identity, IdentityError> {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(IdentityError::BootId)?;
        let boot_id = parse_boot_id(&text).ok_or_else(|| IdentityError::BootIdFormat(text.trim().to_owned()))?;
        Ok(Identity { boot_id, netns_cookie: netns_cookie().map_err(IdentityError::Cookie)? })
    }
}

/// A boot id (`8-4-4-4-12` hex digits, a line) as its 16 bytes.
pub fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let t = text.trim();
    let groups: Vec<&str> = t.split('-').collect();
    if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [8, 4, 4, 4, 12] {
        return None;
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The cookie of the network namespace a new socket of this thread is in.
fn netns_cookie() -> std::io::Result<u64> {
    // SAFETY: a socket we own, closed below; getsockopt writes at most `len` bytes into `cookie`.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        let rc = libc::getsockopt(fd, libc::SOL_SOCKET, SO_NETNS_COOKIE, (&mut cookie as *mut u64).cast(), &mut len);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
        if len as usize != std::mem::size_of::<u64>() {
            return Err(std::io::Error::other(format!("a cookie of {len} bytes")));
        }
        Ok(cookie)
    }
}

/// Why a file's contents were not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("not a svcproxy anonymous-set file")]
    Magic,
    #[error("version {0}, this build reads {VERSION}")]
    Version(u32),
    #[error("truncated or damaged (checksum)")]
    Checksum,
    #[error("written in another boot or network namespace")]
    OtherNamespace,
    #[error("malformed entries")]
    Malformed,
}

/// The file's bytes for `cache`, as seen in `id`.
pub fn encode(id: &Identity, cache: &AnonCache) -> Vec<u8> {
    let size = HEADER + cache.values().map(|c| ENTRY + c.len()).sum::<usize>() + SUM;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&id.boot_id);
    out.extend_from_slice(&id.netns_cookie.to_le_bytes());
    out.extend_from_slice(&(cache.len() as u32).to_le_bytes());
    for (&(family, table, set), content) in cache {
        out.push(family);
        out.extend_from_slice(&table.to_le_bytes());
        out.extend_from_slice(&set.to_le_bytes());
        out.extend_from_slice(&(content.len() as u32).to_le_bytes());
        out.extend_from_slice(content);
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// A little-endian reader over a byte slice that says `None` past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| Some(u32::from_le_bytes(b.try_into().ok()?)))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| Some(u64::from_le_bytes(b.try_into().ok()?)))
    }
}

/// The cache a file holds, if it is this build's, whole, and for `id`.
pub fn decode(bytes: &[u8], id: &Identity) -> Result<AnonCache, Ignored> {
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(Ignored::Magic);
    }
    let version = Cursor(&bytes[8..]).u32().ok_or(Ignored::Checksum)?;
    if version != VERSION {
        return Err(Ignored::Version(version));
    }
    if bytes.len() < HEADER + SUM {
        return Err(Ignored::Checksum);
    }
    let (body, sum) = bytes.split_at(bytes.len() - SUM);
    if Sha256::digest(body).as_slice() != sum {
        return Err(Ignored::Checksum);
    }
    let mut c = Cursor(&body[12..]);
    let bad = || Ignored::Malformed;
    let boot_id: [u8; 16] = c.take(16).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    let netns_cookie = c.u64().ok_or_else(bad)?;
    if (Identity { boot_id, netns_cookie }) != *id {
        return Err(Ignored::OtherNamespace);
    }
    let count = c.u32().ok_or_else(bad)? as usize;
    // Each entry takes at least ENTRY bytes: a count beyond that is a lie, not an allocation.
    let mut cache = AnonCache::with_capacity(count.min(c.0.len() / ENTRY));
    for _ in 0..count {
        let key = (c.u8().ok_or_else(bad)?, c.u64().ok_or_else(bad)?, c.u64().ok_or_else(bad)?);
        let len = c.u32().ok_or_else(bad)? as usize;
        cache.insert(key, c.take(len).ok_or_else(bad)?.to_vec());
    }
    if !c.0.is_empty() || cache.len() != count {
        return Err(Ignored::Malformed);
    }
    Ok(cache)
}

/// The cache `path` holds for `id`; empty when there is none or it cannot be used (why: at debug).
pub fn load(path: &Path, id: &Identity) -> AnonCache {
    read(path, id).unwrap_or_default()
}

/// [`load`], `None` when the file was missing or not used.
fn read(path: &Path, id: &Identity) -> Option<AnonCache> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "no nftables anonymous-set file read; every anonymous set is dumped");
            return None;
        }
    };
    decode(&bytes, id)
        .map_err(|why| tracing::debug!(path = %path.display(), reason = %why, "nftables anonymous-set file ignored; it is rewritten after the read"))
        .ok()
}

/// Writes `cache` for `id` to `path` atomically (a temporary file beside it, renamed over
/// it), creating its folder.
pub fn store(path: &Path, id: &Identity, cache: &AnonCache) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode(id, cache))?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A process's cache and the file it persists to: before each live read, the entries of
/// the namespace the read is in (the file's, when the process has none of it yet); after
/// a read that changed them, the file rewritten.
pub struct Persisted {
    pub cache: AnonCache,
    /// `None`: kept in memory only.
    path: Option<PathBuf>,
    identity: fn() -> Result<Identity, IdentityError>,
    /// The namespace `cache` belongs to (`None`: not known, or not yet read).
    holds: Option<Identity>,
    /// The file was missing or not used: written after the next read, changed or not.
    rewrite: bool,
    warned: bool,
}

impl Persisted {
    /// Persisted to `path` (`None`: in memory only).
    pub fn new(path: Option<PathBuf>) -> Self {
        Persisted::with_identity(path, Identity::here)
    }

    /// [`Persisted::new`] with another source of the identity (tests).
    pub fn with_identity(path: Option<PathBuf>, identity: fn() -> Result<Identity, IdentityError>) -> Self {
        Persisted { cache: AnonCache::new(), path, identity, holds: None, rewrite: false, warned: false }
    }

    /// Before a read: makes `cache` this namespace's (loading the file when the process
    /// holds none of it). Without an identity the in-memory cache stays as it is.
    pub fn before_read(&mut self) {
        let Some(path) = &self.path else { return };
        let id = match (self.identity)() {
            Ok(id) => id,
            Err(e) => {
                if !self.warned {
                    tracing::info!(error = %e, "the nftables anonymous-set cache is not persisted across restarts");
                    self.warned = true;
                }
                self.holds = None;
                return;
            }
        };
        if self.holds != Some(id) {
            let t = std::time::Instant::now();
            let found = read(path, &id);
            if let Some(c) = &found {
                tracing::debug!(path = %path.display(), entries = c.len(), micros = t.elapsed().as_micros() as u64, "nftables anonymous-set file loaded");
            }
            self.rewrite = found.is_none();
            self.cache = found.unwrap_or_default();
            self.holds = Some(id);
        }
    }

    /// After a read that left `cache` as it found it (`changed` false) in a file that was
    /// used, nothing; else the file rewritten (a failure is logged: the next process's
    /// dumps are the only cost).
    pub fn after_read(&mut self, changed: bool) {
        let (Some(path), Some(id)) = (&self.path, &self.holds) else { return };
        if !changed && !self.rewrite {
            return;
        }
        let t = std::time::Instant::now();
        match store(path, id, &self.cache) {
            Ok(()) => {
                self.rewrite = false;
                tracing::debug!(path = %path.display(), entries = self.cache.len(), micros = t.elapsed().as_micros() as u64, "nftables anonymous-set file written");
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "nftables anonymous-set file not written; the next process dumps every anonymous set"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: Identity = Identity { boot_id: [7; 16], netns_cookie: 4099 };

    fn cache() -> AnonCache {
        [((2, 5, 17), b"content of __map3".to_vec()), ((10, 6, 17), Vec::new()), ((2, 5, 18), vec![0xff; 300])].into()
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("svcproxy-anonfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn boot_ids_parse_as_uuids_only() {
        let id = parse_boot_id("822f4a72-6469-4617-93d5-e4a9b2c97399\n").unwrap();
        assert_eq!(id[0], 0x82);
        assert_eq!(id[15], 0x99);
        for bad in ["", "822f4a72646946179 3d5e4a9b2c97399", "822f4a72-6469-4617-93d5-e4a9b2c9739", "822f4a72-6469-4617-93d5-e4a9b2c9739g", "822f4a7-26469-4617-93d5-e4a9b2c97399"] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_file_is_read_back_only_in_its_own_boot_and_namespace() {
        let bytes = encode(&HERE, &cache());
        assert_eq!(decode(&bytes, &HERE), Ok(cache()));
        let other_netns = Identity { netns_cookie: 4100, ..HERE };
        let other_boot = Identity { boot_id: [8; 16], ..HERE };
        assert_eq!(decode(&bytes, &other_netns), Err(Ignored::OtherNamespace));
        assert_eq!(decode(&bytes, &other_boot), Err(Ignored::OtherNamespace));
        assert_eq!(decode(&encode(&HERE, &AnonCache::new()), &HERE), Ok(AnonCache::new()));
    }

    #[test]
    fn damaged_truncated_foreign_and_other_version_files_are_ignored() {
        let bytes = encode(&HERE, &cache());
        for cut in [0, 3, 8, 12, HEADER, HEADER + 5, bytes.len() - SUM, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], &HERE).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[HEADER + 30] ^= 1;
        assert_eq!(decode(&flipped, &HERE), Err(Ignored::Checksum));
        let mut other = bytes.clone();
        other[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        assert_eq!(decode(&other, &HERE), Err(Ignored::Version(VERSION + 1)));
        assert_eq!(decode(b"10.0.0.1 80 6\n", &HERE), Err(Ignored::Magic));
        // A count that does not match the entries, with a valid checksum: malformed.
        let mut lying = bytes[..bytes.len() - SUM].to_vec();
        lying[HEADER - 4..HEADER].copy_from_slice(&4u32.to_le_bytes());
        let sum = Sha256::digest(&lying);
        lying.extend_from_slice(&sum);
        assert_eq!(decode(&lying, &HERE), Err(Ignored::Malformed));
    }

    #[test]
    fn store_replaces_the_file_and_load_ignores_what_it_cannot_use() {
        let d = dir("store");
        let path = d.join("run").join("anon");
        assert_eq!(load(&path, &HERE), AnonCache::new(), "no file: empty");
        store(&path, &HERE, &cache()).unwrap();
        assert_eq!(load(&path, &HERE), cache());
        let one: AnonCache = [((2, 5, 17), b"x".to_vec())].into();
        store(&path, &HERE, &one).unwrap();
        assert_eq!(load(&path, &HERE), one, "replaced, not merged");
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1, "no temporary file left");
        std::fs::write(&path, b"svcpNFTA\x01\0\0\0garbage").unwrap();
        assert_eq!(load(&path, &HERE), AnonCache::new());
        let _ = std::fs::remove_dir_all(d);
    }

    fn here() -> Result<Identity, IdentityError> {
        Ok(HERE)
    }

    fn elsewhere() -> Result<Identity, IdentityError> {
        Ok(Identity { netns_cookie: 1, ..HERE })
    }

    fn refused() -> Result<Identity, IdentityError> {
        Err(IdentityError::Cookie(std::io::Error::from_raw_os_error(libc::ENOPROTOOPT)))
    }

    #[test]
    fn a_process_loads_its_namespaces_file_once_and_writes_only_changes() {
        let d = dir("persisted");
        let path = d.join("anon");
        store(&path, &HERE, &cache()).unwrap();
        let mut p = Persisted::with_identity(Some(path.clone()), here);
        p.before_read();
        assert_eq!(p.cache, cache(), "the file's entries");
        p.cache.clear();
        p.before_read();
        assert!(p.cache.is_empty(), "loaded once: the process's own cache stands after");
        p.after_read(false);
        assert_eq!(load(&path, &HERE), cache(), "unchanged: not rewritten");
        p.after_read(true);
        assert_eq!(load(&path, &HERE), AnonCache::new(), "changed: rewritten");

        // Another namespace's file is ignored, and rewritten for this one.
        store(&path, &Identity { netns_cookie: 1, ..HERE }, &cache()).unwrap();
        let mut p = Persisted::with_identity(Some(path.clone()), here);
        p.before_read();
        assert!(p.cache.is_empty());
        p.after_read(false);
        assert_eq!(decode(&std::fs::read(&path).unwrap(), &HERE), Ok(AnonCache::new()), "an ignored file is rewritten even when the read changed nothing");
        p.cache.insert((2, 1, 1), b"y".to_vec());
        p.after_read(true);
        assert_eq!(load(&path, &HERE).len(), 1);
        // The process in another namespace since: that namespace's file, not these entries.
        p.identity = elsewhere;
        p.before_read();
        assert!(p.cache.is_empty(), "entries of another namespace are never used");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn without_an_identity_nothing_is_read_or_written() {
        let d = dir("refused");
        let path = d.join("anon");
        let mut p = Persisted::with_identity(Some(path.clone()), refused);
        p.cache.insert((2, 1, 1), b"y".to_vec());
        p.before_read();
        assert_eq!(p.cache.len(), 1, "the in-memory cache stays");
        p.after_read(true);
        assert!(!path.exists(), "nothing persisted");
        let mut p = Persisted::new(None);
        p.before_read();
        p.after_read(true);
        assert!(p.cache.is_empty());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn this_kernel_gives_an_identity() {
        // Linux >= 5.14 gives the cookie; an older kernel would make this an error, said once at info.
        match Identity::here() {
            Ok(a) => assert_eq!(Identity::here().unwrap(), a, "the same namespace and boot, the same identity"),
            Err(IdentityError::Cookie(e)) => eprintln!("SO_NETNS_COOKIE refused here: {e}"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_canonical_form_is_pinned() {
        // The cache holds canonical forms (`wire::canon`): if this changes, files written by
        // an older build hold another form. Bump VERSION, then update the pin.
        // A rule binding an anonymous map: its canonical form holds the map's content
        // (`set_header`, `element`, `set_content`), which is what the cache stores.
        let text = "add rule ip kube-proxy c numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }\n";
        let content = super::super::wire::canon::rules_of_text(text).expect("encodable").concat();
        let pin = data_encoding::HEXLOWER.encode(&Sha256::digest(&content)[..8]);
        assert_eq!((VERSION, pin.as_str()), (1, "ef907cda150e2308"), "the canonical form changed: bump anonfile::VERSION and update the pin");
    }
}

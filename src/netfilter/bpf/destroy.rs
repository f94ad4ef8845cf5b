//! Closing the sockets of removed backends (`bpf/sock_destroy.c`, docs/socket-lb.md,
//! "Closing sockets of a backend that went"): the UDP and TCP socket iterators loaded
//! once per process, and run once per network namespace with the (Service, backend)
//! pairs to close written to `lb_destroy` first and deleted after.
//!
//! Two things aya 0.14 does not do are done here (DEPENDENCIES.md): the kfunc call
//! (`bpf_sock_destroy`) is patched into the object before aya parses it, and the
//! iterators' links are created with raw `BPF_LINK_CREATE`, so that one link gives an
//! iterator per namespace (`BPF_ITER_CREATE`; aya's `IterLink::into_file` gives one).
//! A socket iterator walks the namespace its creator was in, so a scoped thread enters
//! each namespace (`setns`) before creating its iterators.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, HashMap, MapData};
use aya::programs::Iter;
use aya::{Btf, Ebpf, EbpfLoader};
use aya_obj::btf::BtfKind;

use super::kernel::{map_err, prog_err};
use super::maps::{encode_backend, ServiceKey};
use super::object::destroy_object;
use super::BpfError;

/// The pairs to close (not pinned: only this process writes and reads it).
pub const TARGETS: &str = "lb_destroy";
/// Sockets closed and failed closes, per family (pinned beside `lb_counters`).
pub const DESTROYED: &str = "lb_destroyed";
/// What this object pins, for `kernel::cleanup`.
pub const PINNED: [&str; 1] = [DESTROYED];
/// The iterator programs and the kernel iterator each walks.
const PROGRAMS: [(&str, &str); 2] = [("sock_destroy_udp", "udp"), ("sock_destroy_tcp", "tcp")];
/// `SOCK_DESTROY_PLACEHOLDER` in `bpf/sock_destroy.c`: the helper id the loader rewrites.
const PLACEHOLDER: u32 = 0x7fff_f5d1;
const KFUNC: &str = "bpf_sock_destroy";
/// From `linux/bpf.h`: `enum bpf_cmd` and `enum bpf_attach_type`.
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;
/// `BPF_PSEUDO_KFUNC_CALL`: a call's source register when it names a kernel function.
const PSEUDO_KFUNC_CALL: u8 = 2;
/// More directories than a node's cgroup tree has: the walk stops there.
const MAX_CGROUPS: usize = 100_000;

/// (Service, backend) pairs whose sockets could not be closed (a kernel without
/// `bpf_sock_destroy`, or a failed run), for `/metrics`.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

pub fn note_skipped(pairs: usize) {
    SKIPPED.fetch_add(pairs as u64, Ordering::Relaxed);
}

pub fn skipped() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// One (Service, backend) pair: the sockets the programs sent from `service` to
/// `backend` are closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub service: ServiceKey,
    pub backend: SocketAddr,
}

impl Target {
    /// `struct destroy_key`: Service address, backend address, their ports (network
    /// order), protocol, family, padding.
    pub fn encode(&self) -> [u8; 40] {
        let svc = self.service.encode();
        let be = encode_backend(self.backend);
        let mut out = [0u8; 40];
        out[..16].copy_from_slice(&svc[..16]);
        out[16..32].copy_from_slice(&be[..16]);
        out[32..34].copy_from_slice(&svc[16..18]);
        out[34..36].copy_from_slice(&be[16..18]);
        out[36] = svc[18];
        out[37] = svc[19];
        out
    }
}

/// The object's bytes with every `call PLACEHOLDER` in its `iter/` sections made a call
/// of the kernel function `btf_id`, 8-byte aligned as aya's parser reads it. An `iter/`
/// section without such a call is an error (the source and this loader disagree).
pub fn patch_kfunc_calls(elf: &[u8], btf_id: u32) -> Result<AlignedElf, String> {
    let mut out = elf.to_vec();
    let sections = iter_sections(elf)?;
    if sections.is_empty() {
        return Err("no iter/ section in the object".into());
    }
    for (name, start, end) in sections {
        let mut patched = 0;
        for insn in out[start..end].chunks_exact_mut(8) {
            let imm = u32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            // BPF_JMP | BPF_CALL with source register 0 (a helper call).
            if insn[0] == 0x85 && insn[1] >> 4 == 0 && imm == PLACEHOLDER {
                insn[1] = (PSEUDO_KFUNC_CALL << 4) | (insn[1] & 0x0f);
                insn[4..8].copy_from_slice(&btf_id.to_le_bytes());
                patched += 1;
            }
        }
        if patched == 0 {
            return Err(format!("section {name}: no call of the {KFUNC} placeholder"));
        }
    }
    Ok(AlignedElf::new(&out))
}

/// An object's bytes in 8-byte-aligned memory.
pub struct AlignedElf {
    words: Vec<u64>,
    len: usize,
}

impl AlignedElf {
    fn new(bytes: &[u8]) -> AlignedElf {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_ne_bytes(b);
        }
        AlignedElf { words, len: bytes.len() }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes; u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// The `iter/` sections of a little-endian ELF64 object: (name, start, end) in the file.
fn iter_sections(elf: &[u8]) -> Result<Vec<(String, usize, usize)>, String> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| elf.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize);
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err("not a little-endian ELF64 object".into());
    }
    let bad = || "truncated ELF section table".to_string();
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28).ok_or_else(bad)?, u16_at(0x3a).ok_or_else(bad)?, u16_at(0x3c).ok_or_else(bad)?, u16_at(0x3e).ok_or_else(bad)?);
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 24).ok_or_else(bad)?;
    let mut out = Vec::new();
    for i in 0..shnum {
        let h = header(i);
        let name_off = strtab + u32_at(h).ok_or_else(bad)?;
        let name_end = elf.get(name_off..).and_then(|s| s.iter().position(|b| *b == 0)).ok_or_else(bad)?;
        let name = String::from_utf8_lossy(&elf[name_off..name_off + name_end]).into_owned();
        if !name.starts_with("iter/") {
            continue;
        }
        let (offset, size) = (u64_at(h + 24).ok_or_else(bad)?, u64_at(h + 32).ok_or_else(bad)?);
        if offset.checked_add(size).is_none_or(|end| end > elf.len()) || size % 8 != 0 {
            return Err(format!("section {name}: outside the file or not whole instructions"));
        }
        out.push((name, offset, offset + size));
    }
    Ok(out)
}

/// A network namespace to walk, held open.
#[derive(Debug)]
pub struct Netns {
    /// `/proc/<pid>/ns/net` of the first process found in it.
    pub path: PathBuf,
    fd: OwnedFd,
}

/// The network namespaces of the processes in `cgroup` and every cgroup below it: the
/// processes whose sockets the socket-LB hooks there translate. One per namespace
/// (by its `net:[inode]` name); a process gone meanwhile is skipped.
pub fn namespaces_in(cgroup: &Path) -> Result<Vec<Netns>, BpfError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut dirs = vec![cgroup.to_path_buf()];
    let mut walked = 0;
    while let Some(dir) = dirs.pop() {
        walked += 1;
        if walked > MAX_CGROUPS {
            tracing::warn!(target: "socketlb", cgroup = %cgroup.display(), "more than {MAX_CGROUPS} cgroups; the rest are not walked for sockets to close");
            break;
        }
        let procs = dir.join("cgroup.procs");
        let text = match std::fs::read_to_string(&procs) {
            Ok(t) => t,
            // A cgroup removed while walked.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != cgroup => continue,
            Err(source) => return Err(BpfError::Io { what: "reading", path: procs, source }),
        };
        for pid in text.split_whitespace() {
            let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
            let Ok(name) = std::fs::read_link(&path) else { continue };
            if !seen.insert(name) {
                continue;
            }
            if let Ok(f) = File::open(&path) {
                out.push(Netns { path, fd: f.into() });
            }
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            dirs.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    Ok(out)
}

/// What one [`Destroyer::destroy`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Destroyed {
    pub namespaces: usize,
    /// Sockets closed, and closes the kernel refused, by this run (both families).
    pub sockets: u64,
    pub refused: u64,
    /// Each failed step, naming the namespace or pair.
    pub failures: Vec<String>,
}

/// The iterators, loaded and linked; dropping it unloads them (nothing is attached).
pub struct Destroyer {
    _ebpf: Ebpf,
    links: Vec<(&'static str, OwnedFd)>,
    targets: HashMap<MapData, [u8; 40], u32>,
    counts: Array<MapData, u64>,
}

fn sys_bpf(cmd: libc::c_long, attr: &mut [u64; 8]) -> std::io::Result<OwnedFd> {
    // SAFETY: attr is a zeroed, 64-byte `union bpf_attr` prefix the kernel reads; the
    // call returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a non-negative result of these commands is a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `BPF_LINK_CREATE` of an iterator program with no parameters.
fn link_create(prog: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let mut attr = [0u64; 8];
    // prog_fd, target_fd (none), attach_type, flags.
    attr[0] = prog.as_raw_fd() as u32 as u64;
    attr[1] = BPF_TRACE_ITER as u64;
    sys_bpf(BPF_LINK_CREATE, &mut attr)
}

/// `BPF_ITER_CREATE`: an iterator over the caller's network namespace.
fn iter_create(link: BorrowedFd<'_>) -> std::io::Result<File> {
    let mut attr = [0u64; 8];
    attr[0] = link.as_raw_fd() as u32 as u64;
    sys_bpf(BPF_ITER_CREATE, &mut attr).map(File::from)
}

/// Whether an error is this kernel lacking `bpf_sock_destroy` (the programs cannot work
/// here, as opposed to a failure worth retrying).
pub fn unsupported(e: &BpfError) -> bool {
    matches!(e, BpfError::Unsupported(_))
}

impl Destroyer {
    /// Loads and links the iterators; `lb_revnat` and `lb_destroyed` are the pins under
    /// `pins` (the socket-LB programs are attached first, so `lb_revnat` is theirs).
    pub fn load(pins: &Path) -> Result<Destroyer, BpfError> {
        let elf = destroy_object()?;
        let btf = Btf::from_sys_fs().map_err(|e| BpfError::Unsupported(format!("reading the kernel's BTF: {e}")))?;
        let id = btf
            .id_by_type_name_kind(KFUNC, BtfKind::Func)
            .map_err(|_| BpfError::Unsupported(format!("this kernel has no {KFUNC} (Linux 6.5 or later)")))?;
        let patched = patch_kfunc_calls(elf, id)
            .map_err(|e| BpfError::Program { program: "sock_destroy", what: "patching the kfunc call", source: e.into() })?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .default_map_pin_directory(pins)
            .load(patched.bytes())
            .map_err(|e| BpfError::Load { pins: pins.to_path_buf(), source: Box::new(e) })?;
        let mut links = Vec::new();
        for (program, kind) in PROGRAMS {
            let prog: &mut Iter = ebpf
                .program_mut(program)
                .ok_or_else(|| prog_err(program, "not in the object")(aya::programs::ProgramError::NotLoaded))?
                .try_into()
                .map_err(prog_err(program, "not an iterator program"))?;
            prog.load(kind, &btf).map_err(prog_err(program, "loading (verifier)"))?;
            let fd = prog.fd().map_err(prog_err(program, "its fd"))?;
            let link = link_create(fd.as_fd())
                .map_err(|e| BpfError::Program { program, what: "creating the iterator link", source: Box::new(e) })?;
            links.push((program, link));
        }
        let targets = ebpf.take_map(TARGETS).ok_or_else(|| map_err(TARGETS, "in the object")(aya::maps::MapError::InvalidName { name: TARGETS.into() }))?;
        let counts = ebpf.take_map(DESTROYED).ok_or_else(|| map_err(DESTROYED, "in the object")(aya::maps::MapError::InvalidName { name: DESTROYED.into() }))?;
        Ok(Destroyer {
            targets: targets.try_into().map_err(map_err(TARGETS, "type"))?,
            counts: counts.try_into().map_err(map_err(DESTROYED, "type"))?,
            _ebpf: ebpf,
            links,
        })
    }

    fn totals(&self) -> (u64, u64) {
        let get = |i: u32| self.counts.get(&i, 0).unwrap_or(0);
        (get(0) + get(2), get(1) + get(3))
    }

    /// Closes the sockets of `targets` in each namespace of `namespaces`: the pairs are
    /// written, each namespace's UDP and TCP sockets walked, the pairs deleted.
    pub fn destroy(&mut self, targets: &[Target], namespaces: &[Netns]) -> Destroyed {
        let mut out = Destroyed { namespaces: namespaces.len(), ..Destroyed::default() };
        if targets.is_empty() || namespaces.is_empty() {
            return out;
        }
        let (before, refused_before) = self.totals();
        let mut written = Vec::new();
        for t in targets {
            match self.targets.insert(t.encode(), 1, 0) {
                Ok(()) => written.push(t.encode()),
                Err(e) => out.failures.push(format!("{TARGETS}: writing {} -> {}: {e}", t.service.addr, t.backend)),
            }
        }
        if !written.is_empty() {
            let links: Vec<(&str, BorrowedFd<'_>)> = self.links.iter().map(|(n, fd)| (*n, fd.as_fd())).collect();
            // setns changes the calling thread alone: a thread of its own, gone after.
            let walked = std::thread::scope(|s| s.spawn(|| walk(&links, namespaces)).join());
            match walked {
                Ok(failures) => out.failures.extend(failures),
                Err(_) => out.failures.push("the namespace walk panicked".into()),
            }
        }
        for key in &written {
            if let Err(e) = self.targets.remove(key) {
                out.failures.push(format!("{TARGETS}: deleting a pair: {e}"));
            }
        }
        let (after, refused_after) = self.totals();
        out.sockets = after.saturating_sub(before);
        out.refused = refused_after.saturating_sub(refused_before);
        out
    }
}

/// In this thread: each namespace entered, its iterators created and read to the end
/// (the programs print nothing; reading runs them). Failures, one per namespace step.
fn walk(links: &[(&str, BorrowedFd<'_>)], namespaces: &[Netns]) -> Vec<String> {
    let mut failures = Vec::new();
    for ns in namespaces {
        // SAFETY: setns on an fd we hold open; it moves this thread alone.
        if unsafe { libc::setns(ns.fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            failures.push(format!("entering {}: {}", ns.path.display(), std::io::Error::last_os_error()));
            continue;
        }
        for (program, link) in links {
            let mut buf = [0u8; 64];
            let read = iter_create(*link).and_then(|mut f| loop {
                if f.read(&mut buf)? == 0 {
                    break Ok(());
                }
            });
            if let Err(e) = read {
                failures.push(format!("{program} in {}: {e}", ns.path.display()));
            }
        }
    }
    failures
}

/// The pinned counts for `/metrics`: (IPv6?, destroyed, refused); `None` when the
/// iterators were never loaded under `pins`.
pub fn pinned_counts(pins: &Path) -> Option<Vec<(bool, u64, u64)>> {
    let data = MapData::from_pin(pins.join(DESTROYED)).ok()?;
    let map: Array<MapData, u64> = aya::maps::Map::from_map_data(data).ok()?.try_into().ok()?;
    let get = |i: u32| map.get(&i, 0).unwrap_or(0);
    Some(vec![(false, get(0), get(1)), (true, get(2), get(3))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;

    #[test]
    #[cfg(target_endian = "little")]
    fn target_bytes_are_destroy_key() {
        let t = Target {
            service: ServiceKey { addr: "198.19.0.10".parse().unwrap(), port: 80, proto: Protocol::Udp },
            backend: "198.18.1.2:8080".parse().unwrap(),
        };
        #[rustfmt::skip]
        let want = [
            198, 19, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            198, 18, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 80, 0x1f, 0x90, 17, 4, 0, 0,
        ];
        assert_eq!(t.encode(), want);
        let t6 = Target {
            service: ServiceKey { addr: "fd00::a".parse().unwrap(), port: 53, proto: Protocol::Tcp },
            backend: "[fd00:1::2]:5353".parse().unwrap(),
        };
        let e = t6.encode();
        assert_eq!((&e[..2], e[15], &e[16..20], &e[32..38]), (&[0xfd, 0][..], 0x0a, &[0xfd, 0, 0, 1][..], &[0, 53, 0x14, 0xe9, 6, 6][..]));
    }

    /// The two programs share `struct revnat` and the `lb_revnat` map through one header,
    /// and neither declares its own copy.
    #[test]
    fn the_iterators_read_revnat_as_socket_lb_writes_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
        let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
        assert!(read("socket_lb_shared.h").contains("struct revnat {"));
        for source in ["socket_lb.c", "sock_destroy.c"] {
            let text = read(source);
            assert!(text.contains("#include \"socket_lb_shared.h\""), "{source} includes the shared header");
            assert!(!text.contains("struct revnat {") && !text.contains("} lb_revnat SEC"), "{source} declares its own revnat");
        }
    }

    #[test]
    fn the_placeholder_call_becomes_a_kfunc_call_in_iter_sections_only() {
        let Ok(elf) = destroy_object() else {
            eprintln!("SKIPPED: svcproxy built without clang");
            return;
        };
        let sections = iter_sections(elf).unwrap();
        assert_eq!(sections.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), ["iter/udp", "iter/tcp"]);
        let patched = patch_kfunc_calls(elf, 0x1234).unwrap();
        let p = patched.bytes();
        assert_eq!(p.len(), elf.len());
        assert_eq!(p.as_ptr() as usize % 8, 0);
        let mut calls = 0;
        for (_, start, end) in &sections {
            for insn in p[*start..*end].chunks_exact(8) {
                if insn[0] == 0x85 && insn[1] >> 4 == PSEUDO_KFUNC_CALL {
                    assert_eq!(u32::from_le_bytes(insn[4..8].try_into().unwrap()), 0x1234);
                    calls += 1;
                }
                assert!(!(insn[0] == 0x85 && u32::from_le_bytes(insn[4..8].try_into().unwrap()) == PLACEHOLDER), "a placeholder left");
            }
        }
        assert!(calls >= 2, "one kfunc call per iterator at least: {calls}");
        let differing = elf.iter().zip(p).filter(|(a, b)| a != b).count();
        assert!(differing <= calls * 5, "only the calls changed: {differing} bytes");
        assert!(patch_kfunc_calls(b"not an elf", 1).is_err());
    }
}

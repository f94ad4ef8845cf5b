//! The socket-LB programs in the kernel, through aya. Everything svcproxy makes lives
//! under one bpffs directory it is given (`pins`): the maps, pinned by name so a restart
//! finds them with their entries, and one link per hook, pinned so the programs stay
//! attached after a one-shot `sync` exits. [`cleanup`] removes exactly those names.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use aya::maps::{HashMap, Map, MapData, PerCpuArray};
use aya::programs::links::{FdLink, LinkError};
use aya::programs::{CgroupAttachMode, CgroupSockAddr};
use aya::EbpfLoader;

use super::maps::{self, AffinityKey, AffinityValue, BackendKey, Counter, ServiceKey, ServiceValue};
use super::object::object;
use super::BpfError;

/// The programs (their function names in `bpf/socket_lb.c`), one per hook and family.
pub const PROGRAMS: [&str; 8] = [
    "sock_connect4",
    "sock_connect6",
    "sock_sendmsg4",
    "sock_sendmsg6",
    "sock_recvmsg4",
    "sock_recvmsg6",
    "sock_getpeername4",
    "sock_getpeername6",
];

/// The pin file of a program's link.
fn link_pin(pins: &Path, program: &str) -> PathBuf {
    pins.join(format!("link_{program}"))
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BpfError + 'a {
    move |source| BpfError::Io { what, path: path.to_path_buf(), source }
}

pub(super) fn prog_err(program: &'static str, what: &'static str) -> impl FnOnce(aya::programs::ProgramError) -> BpfError {
    move |e| BpfError::Program { program, what, source: Box::new(e) }
}

pub(super) fn map_err(map: &'static str, what: &'static str) -> impl FnOnce(aya::maps::MapError) -> BpfError {
    move |e| BpfError::Map { map, what, source: Box::new(e) }
}

/// What [`attach`] did: hooks attached, and of those how many replaced an earlier run's.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Attached {
    pub attached: usize,
    pub replaced: usize,
}

/// Loads the object (its maps pinned under `pins`, reused when already there) and
/// attaches every hook to the cgroup v2 directory `cgroup` through a `bpf_link`, beside
/// any other program there. An earlier run's link is replaced, not kept: this binary's
/// programs and this cgroup are what the node gets. The new link is attached before the
/// old one goes (its pin renamed over the old pin), so no socket finds the hook empty;
/// meanwhile both run, and the second sees an address the first already translated.
pub fn attach(pins: &Path, cgroup: &Path) -> Result<Attached, BpfError> {
    let elf = object()?;
    fs::create_dir_all(pins).map_err(io("creating the pin directory", pins))?;
    drop_misshapen_pins(pins)?;
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(pins)
        .load(elf)
        .map_err(|e| BpfError::Load { pins: pins.to_path_buf(), source: Box::new(e) })?;
    let dir = File::open(cgroup).map_err(io("opening the cgroup", cgroup))?;
    let mut done = Attached::default();
    for program in PROGRAMS {
        let pin = link_pin(pins, program);
        // bpffs refuses names with a dot.
        let fresh = pins.join(format!("new_link_{program}"));
        // A leftover of a run that stopped between pinning and renaming: its link goes.
        let _ = fs::remove_file(&fresh);
        let prog: &mut CgroupSockAddr = ebpf
            .program_mut(program)
            .ok_or_else(|| prog_err(program, "not in the object")(aya::programs::ProgramError::NotLoaded))?
            .try_into()
            .map_err(prog_err(program, "not a cgroup sock_addr program"))?;
        prog.load().map_err(prog_err(program, "loading (verifier)"))?;
        // A bpf_link always shares the hook with other programs (the kernel attaches it
        // multi); its create call refuses the prog-attach flags, so no mode flag is passed.
        let id = prog.attach(&dir, CgroupAttachMode::Single).map_err(prog_err(program, "attaching"))?;
        let link: FdLink = prog
            .take_link(id)
            .map_err(prog_err(program, "taking the link"))?
            .try_into()
            .map_err(|e: LinkError| BpfError::Program { program, what: "link without an fd", source: Box::new(e) })?;
        link.pin(&fresh).map_err(|e| BpfError::Program { program, what: "pinning the link", source: Box::new(e) })?;
        let replaced = pin.exists();
        fs::rename(&fresh, &pin).map_err(io("renaming the new link's pin over the old", &pin))?;
        done.attached += 1;
        done.replaced += usize::from(replaced);
    }
    Ok(done)
}

/// Unpins a map whose shape differs from this build's (an older build's layout): the
/// programs could not use it, and the loader would reuse it by name. The sync after the
/// attach writes every entry again into the new map.
fn drop_misshapen_pins(pins: &Path) -> Result<(), BpfError> {
    for (name, key, value, entries) in maps::SHAPES {
        let path = pins.join(name);
        if !path.exists() {
            continue;
        }
        let info = MapData::from_pin(&path).and_then(|m| m.info()).map_err(map_err(name, "reading the pinned map's shape"))?;
        let found = (info.key_size(), info.value_size(), info.max_entries());
        if found != (key, value, entries) {
            tracing::warn!(target: "socketlb", "map {name}: pinned with (key, value, entries) {found:?}, this build's are {:?}: replacing it", (key, value, entries));
            fs::remove_file(&path).map_err(io("removing a misshapen map's pin", &path))?;
        }
    }
    Ok(())
}

/// What [`cleanup`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub links: usize,
    pub maps: usize,
    pub dir_removed: bool,
    /// Each pin removed, by path.
    pub removed: Vec<String>,
}

/// svcproxy's pin names under `pins`, each with whether it is a link.
fn own_names(pins: &Path) -> impl Iterator<Item = (PathBuf, bool)> + '_ {
    PROGRAMS
        .iter()
        .map(move |p| (link_pin(pins, p), true))
        .chain(PROGRAMS.iter().map(move |p| (pins.join(format!("new_link_{p}")), true)))
        .chain(maps::ALL.iter().chain(&super::destroy::PINNED).map(move |m| (pins.join(m), false)))
}

/// The pins [`cleanup`] would remove (for `cleanup --dry-run`).
pub fn pinned(pins: &Path) -> Vec<String> {
    own_names(pins).filter(|(p, _)| p.exists()).map(|(p, _)| p.display().to_string()).collect()
}

/// Detaches the programs and drops the maps by removing svcproxy's pins (a link or map
/// held by nothing else goes with its pin), then the directory when nothing else is in
/// it. Files svcproxy did not name are left, and so is their directory.
pub fn cleanup(pins: &Path) -> Result<Cleaned, BpfError> {
    let mut done = Cleaned::default();
    for (path, is_link) in own_names(pins) {
        match fs::remove_file(&path) {
            Ok(()) => {
                if is_link {
                    done.links += 1;
                } else {
                    done.maps += 1;
                }
                done.removed.push(path.display().to_string());
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io("removing the pin", &path)(e)),
        }
    }
    match fs::remove_dir(pins) {
        Ok(()) => done.dir_removed = true,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::DirectoryNotEmpty) => {}
        Err(e) => return Err(io("removing the pin directory", pins)(e)),
    }
    Ok(done)
}

/// The pinned maps, opened by path (a loaded object is not needed to read or write them).
pub struct Maps {
    services: HashMap<MapData, [u8; 20], [u8; 12]>,
    backends: HashMap<MapData, [u8; 8], [u8; 20]>,
    counters: PerCpuArray<MapData, u64>,
    affinity: HashMap<MapData, [u8; 32], [u8; 40]>,
}

fn gone_is_ok(r: Result<(), aya::maps::MapError>) -> Result<(), aya::maps::MapError> {
    match r {
        Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        other => other,
    }
}

fn open(pins: &Path, name: &'static str) -> Result<Map, BpfError> {
    let data = MapData::from_pin(pins.join(name)).map_err(map_err(name, "opening the pin"))?;
    Map::from_map_data(data).map_err(map_err(name, "reading its type"))
}

impl Maps {
    pub fn open(pins: &Path) -> Result<Maps, BpfError> {
        Ok(Maps {
            services: open(pins, maps::SERVICES)?.try_into().map_err(map_err(maps::SERVICES, "type"))?,
            backends: open(pins, maps::BACKENDS)?.try_into().map_err(map_err(maps::BACKENDS, "type"))?,
            counters: open(pins, maps::COUNTERS)?.try_into().map_err(map_err(maps::COUNTERS, "type"))?,
            affinity: open(pins, maps::AFFINITY)?.try_into().map_err(map_err(maps::AFFINITY, "type"))?,
        })
    }

    /// Every client's affinity entry (the programs write them; svcproxy only reads).
    pub fn affinity(&self) -> Result<Vec<(AffinityKey, AffinityValue)>, BpfError> {
        let mut out = Vec::new();
        for kv in self.affinity.iter() {
            let (k, v) = kv.map_err(map_err(maps::AFFINITY, "iterating"))?;
            if let Some(key) = AffinityKey::decode(&k) {
                out.push((key, AffinityValue::decode(&v, key.service.addr.is_ipv6())));
            }
        }
        Ok(out)
    }

    /// Every Service entry; entries svcproxy cannot read (never written by it) are skipped.
    pub fn services(&self) -> Result<Vec<(ServiceKey, ServiceValue)>, BpfError> {
        let mut out = Vec::new();
        for kv in self.services.iter() {
            let (k, v) = kv.map_err(map_err(maps::SERVICES, "iterating"))?;
            if let Some(key) = ServiceKey::decode(&k) {
                out.push((key, ServiceValue::decode(&v)));
            }
        }
        Ok(out)
    }

    /// Every backend slot, its value still encoded (the family is its Service's).
    pub fn backends(&self) -> Result<Vec<(BackendKey, [u8; 20])>, BpfError> {
        let mut out = Vec::new();
        for kv in self.backends.iter() {
            let (k, v) = kv.map_err(map_err(maps::BACKENDS, "iterating"))?;
            out.push((BackendKey::decode(&k), v));
        }
        Ok(out)
    }

    pub fn put_service(&mut self, key: &ServiceKey, value: &ServiceValue) -> Result<(), BpfError> {
        self.services.insert(key.encode(), value.encode(), 0).map_err(map_err(maps::SERVICES, "update"))
    }

    /// Deleting an entry that is not there is no error (an earlier, interrupted sync).
    pub fn delete_service(&mut self, key: &ServiceKey) -> Result<(), BpfError> {
        gone_is_ok(self.services.remove(&key.encode())).map_err(map_err(maps::SERVICES, "delete"))
    }

    pub fn put_backend(&mut self, key: &BackendKey, addr: SocketAddr) -> Result<(), BpfError> {
        self.backends.insert(key.encode(), maps::encode_backend(addr), 0).map_err(map_err(maps::BACKENDS, "update"))
    }

    pub fn delete_backend(&mut self, key: &BackendKey) -> Result<(), BpfError> {
        gone_is_ok(self.backends.remove(&key.encode())).map_err(map_err(maps::BACKENDS, "delete"))
    }

    /// A counter summed over the CPUs.
    pub fn counter(&self, ipv6: bool, kind: Counter) -> Result<u64, BpfError> {
        let per_cpu = self.counters.get(&maps::counter_index(ipv6, kind), 0).map_err(map_err(maps::COUNTERS, "lookup"))?;
        Ok(per_cpu.iter().sum())
    }
}

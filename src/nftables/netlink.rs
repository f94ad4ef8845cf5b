//! The netlink writer behind [`NftWrite`]: every transaction ([`NftWrite::run`]), a full
//! sync's or a partial one's, is encoded by [`super::wire`] and sent as one nf_tables
//! batch (atomic, like `nft -f`: the kernel commits all of it or none), skipping nft's
//! parse and the whole-table read every `nft` run starts with. A transaction outside the
//! encoder's vocabulary goes to `nft -f` instead (logged once, counted). The full sync's
//! read ([`NftRead::read_for_sync`], [`read_live_cached`]) is netlink too; the other
//! reads (`list`, `canonical`: a dry run, `trace --live`) are `nft`'s.

use std::os::fd::AsRawFd;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};

use std::collections::HashMap;

use super::apply::{ExecNft, Names, Nft, NftError, NftRead, NftWrite, Part, Via};
use super::delta::LiveTable;
use super::model::{NftFamily, Script};
use crate::net::IpFamily;
use super::names::TABLE;
use std::sync::{Arc, Mutex};

use super::anonfile::{self, AnonCache, Persisted};
use super::anonrecord::{self, Recording, SetDump};
use super::wire::{self, canon, dump, Batch, WireFamily};
use crate::xtables::apply::around;

use crate::netfilter::nlattr::{Message, Messages};

/// The environment variable that overrides a full sync's batch bound ([`NetlinkNft::on_node`]).
pub const BATCH_LINES_ENV: &str = "SVCPROXY_NFT_BATCH_LINES";

/// Sends one encoded batch (the real one: [`send`]; tests record instead).
pub type Sender = Box<dyn FnMut(&mut Batch, &str) -> Result<(), NftError> + Send>;

/// Reads one family's table names (the real one: [`read_table`]).
pub type Reader = Box<dyn FnMut(IpFamily) -> Result<Option<TableRead>, NftError> + Send>;

/// Reads one family's table for a full sync: its names and its live contents (the real
/// one: [`read_live_cached`] with the persisted cache, [`super::anonfile`]).
pub type LiveReader = Box<dyn FnMut(IpFamily) -> Result<Option<LiveRead>, NftError> + Send>;

/// What the full sync's read finds in a table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableRead {
    pub names: Names,
    /// One more than the highest number of the table's anonymous sets (`__setN`,
    /// `__mapN`); 0 when it has none.
    pub anon_next: u32,
}

/// One read of a table for a full sync ([`read_live_cached`]): what [`read_table`] finds,
/// from the same dumps, and the live contents compared.
#[derive(Debug, Clone, Default)]
pub struct LiveRead {
    pub table: TableRead,
    /// `None`: the ruleset changed while it was read (nothing of it is trusted: every
    /// chain is refilled).
    pub live: Option<LiveTable>,
    /// Anonymous sets whose contents came from the cache, and those dumped.
    pub reused: usize,
    pub dumped: usize,
    /// Whether the cache's entries changed (some dumped or dropped).
    pub changed: bool,
}

/// Transactions over netlink; the names too on the node; the other reads, and what it
/// cannot encode, through `nft`.
pub struct NetlinkNft {
    nft: Box<dyn Nft>,
    /// Sends each batch (the kernel tier wraps it to commit between a full sync's batches).
    pub sender: Sender,
    /// The name read; `None`: `nft`'s.
    reader: Option<Reader>,
    /// The full sync's read ([`NftRead::read_for_sync`]); `None`: the names
    /// alone (every chain is refilled).
    pub live_reader: Option<LiveReader>,
    /// Anonymous sets the live reads took from the cache, those they dumped, and those
    /// full syncs created and recorded without a dump ([`anonrecord`]).
    pub anon_reused: u64,
    pub anon_dumped: u64,
    pub anon_recorded: u64,
    /// The cache the live reader uses (on the node), for the sets full syncs create.
    anon: Option<Arc<Mutex<Persisted>>>,
    /// The full write under way since its first transaction ([`Part`]), recording its
    /// anonymous sets.
    recording: Option<Recording>,
    /// Transactions sent over netlink.
    pub sent: u64,
    /// Transactions that went to `nft -f` instead (not encodable).
    pub fallbacks: u64,
    /// A full sync's batch bound ([`NftWrite::batch_lines`]; [`super::chunked::CHUNK_LINES`]).
    pub batch_lines: usize,
    /// The number the next anonymous set is named with, above every one the tables held
    /// when last read ([`NftRead::names`]; one counter for both families' tables): naming them
    /// spares the kernel its scan of every set of the table for a free `__set%d` number.
    /// `None` (no read yet, or `nft -f` ran since: it lets the kernel name its sets):
    /// nft's template.
    anon_next: Option<u32>,
    warned: bool,
}

impl NetlinkNft {
    /// Over this node's kernel: netlink batches and the `nft` binary, the anonymous sets'
    /// contents persisted in [`anonfile::ANON_FILE`] (or the file `SVCPROXY_NFT_ANON_FILE`
    /// names). A full sync's batch bound is [`super::chunked::CHUNK_LINES`] unless
    /// `SVCPROXY_NFT_BATCH_LINES` names another (a tuning and test knob, not a setting).
    pub fn on_node() -> Self {
        NetlinkNft::on_node_with(Some(anonfile::path_on_node()))
    }

    /// [`NetlinkNft::on_node`], the anonymous sets' contents persisted in `anon_file`
    /// (`None`: in this process's memory only).
    pub fn on_node_with(anon_file: Option<std::path::PathBuf>) -> Self {
        let mut nl = NetlinkNft::new(Box::new(ExecNft::default()), Box::new(send));
        nl.reader = Some(Box::new(read_table));
        let anon = Arc::new(Mutex::new(Persisted::new(anon_file)));
        let shared = anon.clone();
        nl.live_reader = Some(Box::new(move |f| {
            let mut persisted = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            persisted.before_read();
            let read = read_live_cached(f, &mut persisted.cache)?;
            persisted.after_read(read.as_ref().is_some_and(|r| r.changed));
            Ok(read)
        }));
        nl.anon = Some(anon);
        if let Some(n) = std::env::var(BATCH_LINES_ENV).ok().and_then(|v| v.parse().ok()).filter(|n: &usize| *n > 0) {
            nl.batch_lines = n;
        }
        nl
    }

    pub fn new(nft: Box<dyn Nft>, sender: Sender) -> Self {
        NetlinkNft { nft, sender, reader: None, live_reader: None, anon_reused: 0, anon_dumped: 0, anon_recorded: 0, anon: None, recording: None, anon_next: None, sent: 0, fallbacks: 0, batch_lines: super::chunked::CHUNK_LINES, warned: false }
    }

    /// One transaction: a netlink batch, or `nft -f` when not encodable. A full write's
    /// batch is recorded (on the node: [`anonrecord`]); any other ends the recording.
    fn write(&mut self, text: &str, script: Option<&Script<'_>>, part: Part) -> Result<Via, NftError> {
        if part != Part::Next {
            self.recording = None;
        }
        if part != Part::Alone && self.recording.is_none() {
            self.recording = self.anon.as_ref().map(|_| Recording::default());
        }
        let encoded = match script {
            Some(s) => wire::encode_script(s, self.anon_next),
            None => wire::encode_named(text, self.anon_next),
        };
        match encoded {
            Ok(mut batch) => {
                // Refused or not, the numbers used stay used: the counter only grows.
                self.anon_next = batch.anon_next;
                let created = self.recording.as_ref().map(|_| anonrecord::created(batch.bytes()));
                if let (Some(rec), Some(c)) = (&mut self.recording, &created) {
                    if rec.needs_start(c) {
                        match read_socket().and_then(|mut sock| generation(&mut sock, 1)) {
                            Ok(Some(g)) => rec.start = Some(g),
                            _ => self.recording = None,
                        }
                    }
                }
                (self.sender)(&mut batch, text)?;
                if let (Some(rec), Some(c)) = (&mut self.recording, created) {
                    rec.acknowledged(c);
                }
                self.sent += 1;
                Ok(Via::Netlink)
            }
            Err(why) => {
                if !self.warned {
                    tracing::warn!(reason = %why, "nftables transaction not encodable as netlink; running nft -f (logged once, counted)");
                    self.warned = true;
                }
                self.fallbacks += 1;
                self.anon_next = None;
                self.recording = None;
                self.nft.run(text, part)
            }
        }
    }
}

impl NftWrite for NetlinkNft {
    fn run(&mut self, text: &str, part: Part) -> Result<Via, NftError> {
        self.write(text, None, part)
    }

    fn run_script(&mut self, script: &Script<'_>, part: Part) -> Result<Via, NftError> {
        self.write(script.text(), Some(script), part)
    }

    fn batch_lines(&self) -> Option<usize> {
        Some(self.batch_lines)
    }

    /// The anonymous sets the full write created, recorded in the cache (and its file)
    /// from one dump of the table's set list, when exact ([`anonrecord`]); else nothing
    /// (the next read dumps them).
    fn full_sync_done(&mut self, family: IpFamily) {
        let (Some(rec), Some(anon)) = (self.recording.take(), &self.anon) else { return };
        if rec.start.is_none() {
            return;
        }
        let dump = match set_dump(family) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(family = family.nft_word(), error = %e, "the anonymous sets a full sync created are not recorded");
                return;
            }
        };
        let mut persisted = anon.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match rec.record(&mut persisted.cache, family.nfproto(), &dump) {
            Some(n) => {
                self.anon_recorded += n as u64;
                persisted.after_read(true);
                tracing::debug!(family = family.nft_word(), recorded = n, "nftables anonymous sets a full sync created, recorded");
            }
            None => tracing::debug!(family = family.nft_word(), "another commit came between: the anonymous sets a full sync created are not recorded"),
        }
    }
}

impl NftRead for NetlinkNft {
    fn list(&mut self, family: IpFamily) -> Result<Option<String>, NftError> {
        self.nft.list(family)
    }

    fn names(&mut self, family: IpFamily) -> Result<Option<Names>, NftError> {
        let Some(read) = &mut self.reader else { return self.nft.names(family) };
        let found = read(family)?;
        self.note_anon_next(found.as_ref());
        Ok(found.map(|t| t.names))
    }

    fn canonical(&mut self, family: IpFamily, text: &str) -> Result<String, NftError> {
        self.nft.canonical(family, text)
    }

    /// One read for both: the names and anonymous set numbers come from the live read's
    /// own chain and set dumps (no second dump of the chain list), its cache use counted.
    /// A live read that fails falls back to the name read (logged): every chain is then
    /// refilled.
    fn read_for_sync(&mut self, family: IpFamily) -> Result<Option<(Names, Option<LiveTable>)>, NftError> {
        let Some(live_read) = &mut self.live_reader else { return Ok(self.names(family)?.map(|n| (n, None))) };
        match live_read(family) {
            Ok(read) => {
                if let Some(r) = &read {
                    self.anon_reused += r.reused as u64;
                    self.anon_dumped += r.dumped as u64;
                    tracing::debug!(family = family.nft_word(), reused = r.reused, dumped = r.dumped, "nftables anonymous sets read");
                }
                self.note_anon_next(read.as_ref().map(|r| &r.table));
                Ok(read.map(|r| (r.table.names, r.live)))
            }
            Err(e) => {
                tracing::warn!(family = family.nft_word(), error = %e, "the live nftables table was not read; every chain is refilled");
                Ok(self.names(family)?.map(|n| (n, None)))
            }
        }
    }
}

impl NetlinkNft {
    /// After a read of a table: anonymous sets are named above its highest number.
    fn note_anon_next(&mut self, found: Option<&TableRead>) {
        let next = found.map_or(0, |t| t.anon_next);
        self.anon_next = Some(self.anon_next.unwrap_or(0).max(next));
    }
}

/// How long a name read waits for the kernel's next answer.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The `kube-proxy` table's chains and named sets (not maps), read over netlink — what
/// [`ExecNft::names`] reads with `nft list chains` and `nft -t list sets`, without `nft`'s
/// fill of its whole-table cache: a table lookup (`None`: no table), then a dump of the
/// family's chains and one of the table's sets.
pub fn read_names(family: IpFamily) -> Result<Option<Names>, NftError> {
    read_table(family).map(|t| t.map(|t| t.names))
}

/// [`read_names`], and the table's anonymous set numbers in use ([`TableRead`]).
pub fn read_table(family: IpFamily) -> Result<Option<TableRead>, NftError> {
    let mut sock = read_socket()?;
    let table = exchange(&mut sock, &dump::request(dump::GETTABLE, family, TABLE, 1))?;
    match errno(&table) {
        None => {}
        Some(libc::ENOENT) => return Ok(None),
        Some(e) => return Err(os_error(e)),
    }
    let chains = exchange(&mut sock, &dump::request(dump::GETCHAIN, family, TABLE, 2))?;
    let sets = exchange(&mut sock, &dump::request(dump::GETSET, family, TABLE, 3))?;
    match errno(&chains).or(errno(&sets)) {
        None => Ok(Some(table_read(&chains, &sets))),
        Some(e) => Err(os_error(e)),
    }
}

/// The `kube-proxy` table's named counters and their packets (`None`: no table), read
/// over netlink (a dump of the table's stateful objects), for `/metrics`.
pub fn read_counters(family: IpFamily) -> Result<Option<Vec<(String, u64)>>, NftError> {
    let replies = exchange(&mut read_socket()?, &dump::request(dump::GETOBJ, family, TABLE, 1))?;
    match errno(&replies) {
        None => Ok(Some(replies.iter().filter_map(|r| dump::counter_of(r, TABLE)).collect())),
        Some(libc::ENOENT) => Ok(None),
        Some(e) => Err(os_error(e)),
    }
}

/// What a table's chain and set dumps name.
fn table_read(chains: &[dump::Reply], sets: &[dump::Reply]) -> TableRead {
    table_read_of(chains.iter().filter_map(|r| dump::chain_of(r, TABLE)).collect(), sets)
}

/// [`table_read`], the chains' names already picked.
fn table_read_of(chains: Vec<String>, sets: &[dump::Reply]) -> TableRead {
    let names = Names { chains, sets: sets.iter().filter_map(|r| dump::set_of(r, TABLE)).collect() };
    let anon_next = sets.iter().filter_map(|r| dump::anonymous_number(r, TABLE)).max().map_or(0, |n| n.saturating_add(1));
    TableRead { names, anon_next }
}

/// The `kube-proxy` table as a full sync compares it ([`LiveTable`]): every chain's rules
/// (one rule dump per chain: a dump of the whole table restarts from its first rule for
/// every reply), every set's definition, and the elements of every anonymous set and of
/// every named set and map but the dynamic ones (one element dump each). `None`: no
/// table, or the ruleset changed while it was read (its generation differs before and
/// after: nothing read is trusted, every chain is refilled).
pub fn read_live(family: IpFamily) -> Result<Option<LiveTable>, NftError> {
    Ok(read_live_cached(family, &mut AnonCache::new())?.and_then(|r| r.live))
}

/// [`read_live`] and [`read_table`] from the same dumps, reusing (and then replacing)
/// `cache`, anonymous sets' contents read before by (family, table handle, set handle). A
/// bound anonymous set cannot change (the kernel refuses element changes to it) and a
/// handle is never reused within a table, so a set seen again under the same handles
/// holds what it held: its elements need not be dumped again (each dump walks the table's
/// whole set list twice, by name: most of a read's kernel time at 10,000 services). A
/// watch-mode process's periodic full syncs read only the anonymous sets made since the
/// last one; with the cache persisted ([`anonfile`]), a restart too. `None`: no table.
pub fn read_live_cached(family: IpFamily, cache: &mut AnonCache) -> Result<Option<LiveRead>, NftError> {
    let f = family;
    let mut sock = read_socket()?;
    let mut seq = 0u32;
    let mut next = || {
        seq += 1;
        seq
    };
    let before = generation(&mut sock, next())?;
    let table = exchange(&mut sock, &dump::request(dump::GETTABLE, f, TABLE, next()))?;
    match errno(&table) {
        None => {}
        Some(libc::ENOENT) => return Ok(None),
        Some(e) => return Err(os_error(e)),
    }
    // One buffer for every reply of this read, parsed in place (133,000 chains at
    // 10,000 services: the chain list, then one rule dump each).
    let mut buf = vec![0u8; RECV_BUF];
    let sets = exchange(&mut sock, &dump::request(dump::GETSET, f, TABLE, next()))?;
    let mut chains: Vec<String> = Vec::new();
    let chains_failed = exchange_each(&mut sock, &dump::request(dump::GETCHAIN, f, TABLE, next()), &mut buf, |kind, payload| {
        if let Some(name) = (kind == dump::NEWCHAIN).then(|| dump::chain_name(payload, TABLE)).flatten() {
            chains.push(name.to_owned());
        }
    })?;
    if let Some(e) = errno(&sets).or(chains_failed) {
        return Err(os_error(e));
    }
    let elements = |sock: &mut Socket, buf: &mut [u8], name: &str, seq: u32| -> Result<Option<canon::Elements>, NftError> {
        let mut out = Vec::new();
        let mut readable = true;
        let failed = exchange_each(sock, &dump::request_of(dump::GETSETELEM, f, TABLE, name, seq), buf, |kind, payload| {
            if readable && kind == dump::NEWSETELEM {
                readable = canon::elements_into(&mut out, canon::Attrs(payload)).is_some();
            }
        })?;
        Ok((failed.is_none() && readable).then_some(out))
    };
    let table_handle = table.iter().find_map(|r| dump::handle(r, dump::NEWTABLE, 4));
    let mut read = LiveRead { table: table_read_of(chains.clone(), &sets), ..LiveRead::default() };
    let mut anonymous: HashMap<String, canon::Canon> = HashMap::new();
    let mut live = LiveTable::default();
    for r in &sets {
        let dump::Reply::Object { kind: dump::NEWSET, attrs } = r else { continue };
        let Some(name) = canon::set_name(attrs) else { continue };
        if canon::is_anonymous(attrs) {
            let key = table_handle.zip(dump::handle(r, dump::NEWSET, 0x10)).map(|(t, s)| (f.nfproto(), t, s));
            if let Some(content) = key.and_then(|k| cache.get(&k)) {
                anonymous.insert(name, content.clone());
                read.reused += 1;
                continue;
            }
            read.dumped += 1;
            if let (Some(header), Some(mut elems)) = (canon::set_header(attrs), elements(&mut sock, &mut buf, &name, next())?) {
                anonymous.insert(name, canon::set_content(&header, &mut elems));
            }
        } else if !dump::is_dynamic(attrs) {
            let elems = elements(&mut sock, &mut buf, &name, next())?;
            live.sets.insert(name, elems);
        }
    }
    let resolve = canon::resolve_in(&anonymous);
    let mut request = Vec::new();
    live.chains.reserve(chains.len());
    for name in chains {
        request.clear();
        dump::request_of_into(&mut request, dump::GETRULE, f, TABLE, &name, next());
        let mut chain = canon::Chain::new();
        let failed = exchange_each(&mut sock, &request, &mut buf, |kind, payload| {
            if kind == dump::NEWRULE {
                chain.push(payload, &resolve);
            }
        })?;
        live.chains.insert(name, if failed.is_some() { None } else { chain.finish() });
    }
    let after = generation(&mut sock, next())?;
    if before.is_none() || before != after {
        tracing::info!(family = family.nft_word(), "the ruleset changed while it was read; every chain is refilled");
        return Ok(Some(read));
    }
    read.live = Some(live);
    // What this read found (reused or dumped) replaces the family's old entries.
    let had = cache.len();
    cache.retain(|k, _| k.0 != f.nfproto());
    let others = cache.len();
    let mut seen = AnonCache::new();
    for r in &sets {
        let (Some(t), Some(s)) = (table_handle, dump::handle(r, dump::NEWSET, 0x10)) else { continue };
        let name = if let dump::Reply::Object { attrs, .. } = r { canon::set_name(attrs) } else { None };
        if let Some(content) = name.and_then(|n| anonymous.get(&n)) {
            seen.entry((f.nfproto(), t, s)).or_insert_with(|| content.clone());
        }
    }
    // Unchanged: nothing dumped (every entry kept was there) and as many as before.
    read.changed = read.dumped > 0 || had - others != seen.len();
    cache.extend(seen);
    Ok(Some(read))
}

/// A socket for reads, its `recv`s bounded.
fn read_socket() -> Result<Socket, NftError> {
    let mut sock = Socket::new(NETLINK_NETFILTER).map_err(read_failed)?;
    sock.bind_auto().map_err(read_failed)?;
    set_read_timeout(&sock);
    Ok(sock)
}

fn read_failed(e: std::io::Error) -> NftError {
    NftError::Failed { command: "nf_tables netlink read".into(), message: e.to_string() }
}

fn os_error(errno: i32) -> NftError {
    read_failed(std::io::Error::from_raw_os_error(errno))
}

/// The first error the kernel answered with (`None`: none, or only acknowledgements).
fn errno(replies: &[dump::Reply]) -> Option<i32> {
    replies.iter().find_map(|r| if let dump::Reply::Error(e) = r { (*e != 0).then_some(*e) } else { None })
}

/// The ruleset's generation (one more per commit), asked with sequence number `seq`.
fn generation(sock: &mut Socket, seq: u32) -> Result<Option<u32>, NftError> {
    Ok(exchange(sock, &dump::generation_request(seq))?.iter().find_map(dump::generation_of))
}

/// The table's anonymous sets (names and handles), between two reads of the generation
/// ([`anonrecord`]); `None`: no table.
fn set_dump(family: IpFamily) -> Result<Option<SetDump>, NftError> {
    let f = family;
    let mut sock = read_socket()?;
    let generation_before = generation(&mut sock, 1)?;
    let table = exchange(&mut sock, &dump::request(dump::GETTABLE, f, TABLE, 2))?;
    let Some(handle) = table.iter().find_map(|r| dump::handle(r, dump::NEWTABLE, 4)) else { return Ok(None) };
    let sets = exchange(&mut sock, &dump::request(dump::GETSET, f, TABLE, 3))?;
    let generation_after = generation(&mut sock, 4)?;
    if errno(&sets).is_some() {
        return Ok(None);
    }
    let anonymous = sets
        .iter()
        .filter_map(|r| {
            let dump::Reply::Object { kind: dump::NEWSET, attrs } = r else { return None };
            if !canon::is_anonymous(attrs) {
                return None;
            }
            Some((canon::set_name(attrs)?, dump::handle(r, dump::NEWSET, 0x10)?))
        })
        .collect();
    Ok(Some(SetDump { generation_before, generation_after, table: handle, anonymous }))
}

/// Sends one request and reads its replies up to the end of the dump, or the
/// acknowledgement or error of a lookup: the objects, then the first error (if any).
fn exchange(sock: &mut Socket, request: &[u8]) -> Result<Vec<dump::Reply>, NftError> {
    let mut out = Vec::new();
    let failed = exchange_each(sock, request, &mut vec![0u8; RECV_BUF], |kind, payload| {
        out.push(dump::Reply::Object { kind, attrs: dump::attrs(payload) });
    })?;
    out.extend(failed.map(dump::Reply::Error));
    Ok(out)
}

/// A read's receive buffer: a dump reply is at most 32 KiB (the kernel's bound), a
/// lookup's answer smaller.
const RECV_BUF: usize = 1 << 16;

/// [`exchange`] without collecting: `each` gets every nf_tables object of the replies
/// (kind, attributes after `nfgenmsg`), borrowed from `buf`, as it is received. Returns
/// the first error the kernel answered with (`None`: none).
fn exchange_each(sock: &mut Socket, request: &[u8], buf: &mut [u8], mut each: impl FnMut(u16, &[u8])) -> Result<Option<i32>, NftError> {
    let io = read_failed;
    sock.send(request, 0).map_err(io)?;
    let mut error = None;
    loop {
        let n = sock.recv(&mut &mut buf[..], 0).map_err(io)?;
        if n == 0 {
            return Err(io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the kernel closed the read")));
        }
        let mut end = false;
        for r in dump::borrowed(&buf[..n]) {
            match r {
                dump::Borrowed::Object { kind, payload } => each(kind, payload),
                dump::Borrowed::Error(e) => {
                    end = true;
                    if e != 0 && error.is_none() {
                        error = Some(e);
                    }
                }
                dump::Borrowed::Done => end = true,
            }
        }
        if end {
            return Ok(error);
        }
    }
}

/// Bounds every `recv` of a read (a kernel that never answers is an error, not a hang).
fn set_read_timeout(sock: &Socket) {
    let tv = libc::timeval { tv_sec: READ_TIMEOUT.as_secs() as libc::time_t, tv_usec: 0 };
    // SAFETY: setsockopt on a socket we own, with a pointer to a timeval that outlives the call.
    unsafe {
        libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&tv as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as libc::socklen_t);
    }
}

fn failed(message: String) -> NftError {
    NftError::Failed { command: "nf_tables netlink batch".into(), message }
}

/// Sends one encoded batch and reads the kernel's answer: the acknowledgement of its last
/// message, or the errors of the messages it refused (then nothing of it was applied).
pub fn send(batch: &mut Batch, text: &str) -> Result<(), NftError> {
    let Some((bytes, last)) = batch.finish() else { return Ok(()) };
    let io = |e: std::io::Error| failed(e.to_string());
    let mut sock = Socket::new(NETLINK_NETFILTER).map_err(io)?;
    sock.bind_auto().map_err(io)?;
    let _ = sock.set_cap_ack(true);
    let _ = sock.set_ext_ack(true);
    grow_send_buffer(&sock, bytes.len());
    let n = sock.send(&bytes, 0).map_err(io)?;
    if n != bytes.len() {
        return Err(failed(format!("sent {n} of {} bytes", bytes.len())));
    }
    // The kernel handles the batch inside the send: every reply is queued by now.
    sock.set_non_blocking(true).map_err(io)?;
    let mut errors: Vec<(u32, i32)> = Vec::new();
    let mut acked = false;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match sock.recv(&mut &mut buf[..], 0) {
            Ok(0) => break,
            Ok(n) => {
                for (seq, errno) in replies(&buf[..n]) {
                    if errno != 0 {
                        errors.push((seq, errno));
                    } else if seq == last {
                        acked = true;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(failed(format!("reading the kernel's answer: {e}"))),
        }
    }
    if let Some((seq, errno)) = errors.first() {
        let why = std::io::Error::from_raw_os_error(*errno).to_string();
        let lines: Vec<&str> = text.lines().collect();
        return Err(match batch.line_of(*seq) {
            Some(line) => NftError::Refused { line, text: lines.get(line - 1).copied().unwrap_or("").to_owned(), message: format!("Error: {why}\n{}", around(&lines, line)) },
            None => failed(format!("the kernel refused the batch: {why}")),
        });
    }
    if !acked {
        return Err(failed("the kernel did not acknowledge the batch".into()));
    }
    Ok(())
}

/// The (sequence number, errno) of every `NLMSG_ERROR` in `buf` (errno 0: an ACK).
fn replies(buf: &[u8]) -> impl Iterator<Item = (u32, i32)> + '_ {
    Messages(buf).filter_map(|m| if let Message::Error { errno, seq } = m { Some((seq, errno)) } else { None })
}

/// A batch is one message to the kernel: the socket's send buffer must hold it (nft
/// raises it the same way; as root, past the system limit).
fn grow_send_buffer(sock: &Socket, len: usize) {
    let want = (len + 4096).min(i32::MAX as usize / 2) as libc::c_int;
    if len < 200_000 {
        return;
    }
    // SAFETY: setsockopt on a socket we own, with a pointer to a c_int that outlives the call.
    unsafe {
        libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, (&want as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::netfilter::nlattr::NLMSG_ERROR;
    use crate::nftables::fake::{Call, FakeNft};

    #[test]
    fn transactions_go_over_netlink_unless_not_encodable() {
        let fake = FakeNft::shared();
        let sent: Arc<Mutex<Vec<usize>>> = Arc::default();
        let record = sent.clone();
        let mut nl = NetlinkNft::new(Box::new(fake.clone()), Box::new(move |b: &mut Batch, _: &str| {
            record.lock().unwrap().push(b.messages);
            Ok(())
        }));
        assert_eq!(nl.run("add chain ip kube-proxy c\nflush chain ip kube-proxy c\n", Part::Alone).unwrap(), Via::Netlink);
        nl.run("add table ip kube-proxy\n", Part::First).unwrap();
        assert_eq!(*sent.lock().unwrap(), [2, 1], "a partial and a full sync's transaction, both as batches");
        // Not kube-proxy's vocabulary: nft -f runs it (the fake needs its table first).
        fake.lock().unwrap().run("add table ip kube-proxy\nadd chain ip kube-proxy c\n").unwrap();
        let odd = "add rule ip kube-proxy c counter\n";
        assert_eq!(nl.run(odd, Part::Alone).unwrap(), Via::Nft);
        nl.run(odd, Part::Next).unwrap();
        assert_eq!((nl.sent, nl.fallbacks), (2, 2));
        assert_eq!(sent.lock().unwrap().len(), 2, "the sender saw only the encodable ones");
        let calls = fake.lock().unwrap().calls.clone();
        assert_eq!(calls.iter().filter(|c| **c == Call::Run(odd.to_string())).count(), 2, "{calls:?}");
        assert!(nl.list(IpFamily::V4).unwrap().is_some(), "reads are nft's");
    }

    /// A transaction svcproxy wrote goes as the values of its rules: the words of a rule
    /// line are not read again (here they are not even kube-proxy's), and the batch is the
    /// one the rule's own words encode into.
    #[test]
    fn a_scripts_rules_are_encoded_from_their_values() {
        use crate::nftables::model::{Chain, Objects, Rule, Table};
        let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let record = sent.clone();
        let mut nl = NetlinkNft::new(Box::new(FakeNft::shared()), Box::new(move |b: &mut Batch, _: &str| {
            record.lock().unwrap().push(b.bytes().to_vec());
            Ok(())
        }));
        let mut o = Objects::default();
        o.chain(Chain::regular("a"));
        o.chain(Chain::regular("c"));
        o.rule(Rule::commented("c", "ip saddr 10.0.0.0/8 numgen random mod 1 vmap { 0 : goto a }", "why"));
        let table = Table { family: IpFamily::V4, name: TABLE, comment: "t", objects: o };
        let whole = crate::nftables::model::write(&table, crate::nftables::model::Form::Transaction);
        let mut odd = table.clone();
        odd.objects.rules[0] = odd.objects.rules[0].clone().with_text("counter");
        let script = crate::nftables::model::script(&odd, crate::nftables::model::Form::Transaction);
        assert!(script.text().contains("add rule ip kube-proxy c counter comment"), "{script}");
        assert_eq!(nl.run_script(&script, Part::Alone).unwrap(), Via::Netlink);
        nl.run_script(&script, Part::Next).unwrap();
        assert_eq!((nl.sent, nl.fallbacks), (2, 0));
        let want = wire::encode(&whole).unwrap().bytes().to_vec();
        assert_eq!(*sent.lock().unwrap(), [want.clone(), want]);
    }

    #[test]
    fn after_a_name_read_anonymous_sets_are_numbered_above_the_tables_own() {
        let fake = FakeNft::shared();
        let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let record = sent.clone();
        let mut nl = NetlinkNft::new(Box::new(fake.clone()), Box::new(move |b: &mut Batch, _: &str| {
            record.lock().unwrap().push(b.finish().map(|(bytes, _)| bytes).unwrap_or_default());
            Ok(())
        }));
        let vmap = "add table ip kube-proxy\nadd chain ip kube-proxy a\nadd chain ip kube-proxy b\nadd rule ip kube-proxy b numgen random mod 1 vmap { 0 : goto a }\n";
        let holds = |i: usize, name: &[u8]| sent.lock().unwrap()[i].windows(name.len()).any(|w| w == name);
        nl.run(vmap, Part::Next).unwrap();
        assert!(holds(0, b"__map%d\0"), "no read yet: nft's template");
        nl.reader = Some(Box::new(|_| Ok(Some(TableRead { names: Names::default(), anon_next: 7 }))));
        nl.names(IpFamily::V4).unwrap();
        nl.run(vmap, Part::Next).unwrap();
        nl.run(vmap, Part::Alone).unwrap();
        assert!(holds(1, b"__map7\0") && holds(2, b"__map8\0"), "numbered from the read on, across batches");
        // A table with fewer anonymous sets (the other family) does not lower the counter.
        nl.reader = Some(Box::new(|_| Ok(Some(TableRead { names: Names::default(), anon_next: 2 }))));
        nl.names(IpFamily::V6).unwrap();
        nl.run(vmap, Part::Next).unwrap();
        assert!(holds(3, b"__map9\0"));
        // nft -f names its sets through the kernel: the template again until the next read.
        fake.lock().unwrap().run("add table ip kube-proxy\nadd chain ip kube-proxy c\n").unwrap();
        nl.run("add rule ip kube-proxy c counter\n", Part::Next).unwrap();
        nl.run(vmap, Part::Next).unwrap();
        assert!(holds(4, b"__map%d\0"));
    }

    /// On the node (a cache to record into), a full sync's first transaction begins a
    /// recording, a conversion batch goes on with one or begins it, one alone ends it.
    #[test]
    fn a_full_write_is_recorded_from_its_first_transaction_to_one_alone() {
        let mut nl = NetlinkNft::new(Box::new(FakeNft::shared()), Box::new(|_: &mut Batch, _: &str| Ok(())));
        nl.anon = Some(Arc::new(Mutex::new(Persisted::new(None))));
        let start = |nl: &NetlinkNft| nl.recording.as_ref().map(|r| r.start);
        let text = "add table ip kube-proxy\n";
        nl.run(text, Part::Next).unwrap();
        assert_eq!(start(&nl), Some(None), "a conversion batch begins one");
        nl.recording.as_mut().unwrap().start = Some(4);
        nl.run(text, Part::Next).unwrap();
        assert_eq!(start(&nl), Some(Some(4)), "and the next goes on with it");
        nl.run(text, Part::First).unwrap();
        assert_eq!(start(&nl), Some(None), "a full sync begins anew");
        nl.run(text, Part::Alone).unwrap();
        assert_eq!(start(&nl), None);
    }

    #[test]
    fn a_full_syncs_read_takes_the_names_from_the_live_read_alone() {
        let names_read: Arc<Mutex<usize>> = Arc::default();
        let count = names_read.clone();
        let mut nl = NetlinkNft::new(Box::new(FakeNft::shared()), Box::new(|_: &mut Batch, _: &str| Ok(())));
        nl.reader = Some(Box::new(move |_| {
            *count.lock().unwrap() += 1;
            Ok(Some(TableRead::default()))
        }));
        let names = Names { chains: vec!["services".into()], sets: vec!["cluster-ips".into()] };
        let table = TableRead { names: names.clone(), anon_next: 9 };
        nl.live_reader = Some(Box::new(move |_| Ok(Some(LiveRead { table: table.clone(), live: Some(LiveTable::default()), reused: 3, dumped: 1, changed: true }))));
        let (got, live) = nl.read_for_sync(IpFamily::V4).unwrap().unwrap();
        assert_eq!((got, live.is_some()), (names, true));
        assert_eq!(*names_read.lock().unwrap(), 0, "no second dump of the chain list");
        assert_eq!((nl.anon_reused, nl.anon_dumped, nl.anon_next), (3, 1, Some(9)));
        // No table: none.
        nl.live_reader = Some(Box::new(|_| Ok(None)));
        assert!(nl.read_for_sync(IpFamily::V6).unwrap().is_none());
        // A live read that fails: the name read, and every chain refilled.
        nl.live_reader = Some(Box::new(|_| Err(NftError::Failed { command: "read".into(), message: "EINTR".into() })));
        let (_, live) = nl.read_for_sync(IpFamily::V4).unwrap().unwrap();
        assert!(live.is_none());
        assert_eq!(*names_read.lock().unwrap(), 1);
    }

    #[test]
    fn replies_name_the_refused_message() {
        let mut buf = Vec::new();
        for (seq, errno) in [(3u32, -16i32), (7, 0)] {
            buf.extend_from_slice(&36u32.to_ne_bytes());
            buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            buf.extend_from_slice(&[0; 10]);
            buf.extend_from_slice(&errno.to_ne_bytes());
            buf.extend_from_slice(&20u32.to_ne_bytes());
            buf.extend_from_slice(&[0; 4]);
            buf.extend_from_slice(&seq.to_ne_bytes());
            buf.extend_from_slice(&[0; 4]);
        }
        assert_eq!(replies(&buf).collect::<Vec<_>>(), vec![(3, 16), (7, 0)]);
    }
}

//! What svcproxy asks of the C allocator (glibc): its arenas (one for a daemon, two for a
//! one-shot command), and freed memory handed back to the kernel after a full sync. A full
//! sync's peak (the kernel's dump, the delta, the restore input) is freed when it ends, but
//! glibc keeps freed pages that are not at the top of a heap; without a trim a watch mode
//! stayed resident near its peak, far above its live heap (BENCHMARKS.md).
//! Other libcs: nothing to do.

/// How long the process lives, which decides how many malloc arenas it wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// One command and exit (`render`, a one-shot `sync`, `trace`).
    OneShot,
    /// A watch mode, syncing for days.
    Daemon,
}

/// glibc gives threads their own arenas and never reuses memory freed in one by another.
/// A daemon gets one arena: its syncs re-render changed ports on the thread that syncs,
/// and each port the render threads built in another arena would move, leaving its old
/// blocks resident. A one-shot command keeps two, so the render threads do not share one
/// heap lock (BENCHMARKS.md), while the parse's garbage still gets reused. A
/// `MALLOC_ARENA_MAX` in the environment still wins. Call it before any thread exists.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_arenas(lifetime: Lifetime) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let arenas = match lifetime {
            Lifetime::OneShot => 2,
            Lifetime::Daemon => 1,
        };
        // SAFETY: mallopt only sets an allocator parameter; the caller runs it before any
        // other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas(_: Lifetime) {}

/// Hands the free pages of every arena back to the kernel (`malloc_trim(0)`, which also
/// releases whole free pages inside a heap, not only at its top). Costs a walk of the
/// free lists: call it after a full sync, not on every partial one. Returns whether any
/// memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free() -> bool {
    // SAFETY: malloc_trim only returns free memory to the kernel; it is thread-safe (it
    // takes each arena's lock) and touches no live allocation.
    unsafe { libc::malloc_trim(0) != 0 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::release_free;

    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf only reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        pages * page
    }

    /// Freed memory held between live blocks (what a full sync leaves) goes back to the
    /// kernel: 192 MiB in 16 KiB blocks, every 32nd kept alive so no heap can shrink
    /// from its top, the rest freed; the trim must return most of it.
    #[test]
    fn freed_pages_between_live_blocks_go_back_to_the_kernel() {
        const BLOCK: usize = 16 << 10;
        const COUNT: usize = (192 << 20) / BLOCK;
        let mut blocks: Vec<Vec<u8>> = (0..COUNT).map(|i| vec![(i % 251) as u8; BLOCK]).collect();
        let mut kept = Vec::new();
        for (i, b) in blocks.drain(..).enumerate() {
            if i % 32 == 0 {
                kept.push(b);
            }
        }
        let before = resident_bytes();
        release_free();
        let after = resident_bytes();
        let released = before.saturating_sub(after);
        assert!(released > 96 << 20, "released {released} bytes of ~186 MiB freed ({before} -> {after} resident)");
        assert_eq!(kept.len(), COUNT / 32);
        assert!(kept.iter().enumerate().all(|(j, b)| b[BLOCK - 1] == ((j * 32) % 251) as u8), "live blocks untouched");
    }
}

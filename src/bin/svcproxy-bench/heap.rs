//! The heap a measured stretch adds, for `svcproxy-bench conntrack`: the system allocator
//! with a count of the bytes allocated less those freed while switched on (off, the
//! default, it costs one relaxed load per call), and the highest that count reached. RSS
//! says little about a short run in a process whose allocator reuses freed pages.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

use svcproxy::bench::conntrack::HeapProbe;

pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static NET: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let now = NET.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is the system allocator's; the counts are bookkeeping only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && ON.load(Relaxed) {
            grew(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && ON.load(Relaxed) {
            grew(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if ON.load(Relaxed) {
            grew(-(layout.size() as isize));
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && ON.load(Relaxed) {
            grew(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Switches the count on and off for [`svcproxy::bench::conntrack::measure`].
pub struct Probe;

impl HeapProbe for Probe {
    fn start(&self) {
        NET.store(0, Relaxed);
        PEAK.store(0, Relaxed);
        ON.store(true, Relaxed);
    }

    fn stop(&self) -> (i64, i64) {
        ON.store(false, Relaxed);
        (PEAK.load(Relaxed) as i64, NET.load(Relaxed) as i64)
    }
}

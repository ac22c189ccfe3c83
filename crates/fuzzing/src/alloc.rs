//! An allocator that refuses allocations above a cap: installed by the fuzzing harnesses as
//! the global allocator, with the cap set per input ([`with_cap`]), it turns an allocation
//! sized from a corrupt length field into an abort the fuzzer records, rather than an
//! out-of-memory kill minutes later or a run that merely grows.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest allocation allowed now (`usize::MAX`: no cap).
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The system allocator, refusing (returning null, so that Rust aborts) any allocation
/// larger than the cap [`with_cap`] sets.
pub struct CappedAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged, or refused with null,
// which `GlobalAlloc` allows.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by the system allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > CAP.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The cap for an input of `len` bytes: 64 MiB, plus 4 KiB per input byte (every decoder
/// may expand what it reads, but by a bounded factor, never by what a length field claims).
pub fn cap_for(len: usize) -> usize {
    (64usize << 20).saturating_add(len.saturating_mul(4096))
}

/// Runs `f` with allocations capped at `bytes` (the cap is process-wide: the harnesses run
/// one input at a time).
pub fn with_cap<T>(bytes: usize, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CAP.store(usize::MAX, Ordering::Relaxed);
        }
    }
    CAP.store(bytes, Ordering::Relaxed);
    let _reset = Reset;
    f()
}

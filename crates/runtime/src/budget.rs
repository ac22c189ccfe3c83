//! The RAM budget of one iterator: bytes that asynchronous operators hold in their buffers.
//!
//! Every buffer that runs ahead of its consumer (prefetch, parallel map results, interleave
//! inputs) reserves the bytes of what it holds here and releases them when the element is
//! handed on. A producer whose own buffer is empty may always reserve one chunk, so the
//! pipeline makes progress under any budget; beyond that, a producer waits until the total
//! held fits the budget. This is what bounds a pipeline of large elements, whatever the
//! buffer sizes its author (or the autotuner) chose.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes held by an iterator's buffers, against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
    peak: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        MemoryBudget { limit, used: AtomicU64::new(0), peak: AtomicU64::new(0) }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more would fit.
    pub fn fits(&self, bytes: u64) -> bool {
        self.used().saturating_add(bytes) <= self.limit
    }

    /// Records `bytes` more held (whether they fit or not: callers check [`MemoryBudget::fits`]
    /// first unless their buffer is empty).
    pub fn reserve(&self, bytes: u64) {
        let now = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Records `bytes` handed on.
    pub fn release(&self, bytes: u64) {
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(bytes)));
    }
}

/// Half the memory this machine has available, tf.data's default RAM budget for autotuning
/// (`MemAvailable` on Linux; 4 GiB where it cannot be read).
pub fn default_ram_budget() -> u64 {
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    available.unwrap_or(8 << 30) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_use_and_peak() {
        let b = MemoryBudget::new(100);
        assert!(b.fits(100));
        b.reserve(60);
        assert!(!b.fits(50));
        b.reserve(30);
        b.release(60);
        assert_eq!((b.used(), b.peak()), (30, 90));
        b.release(1000);
        assert_eq!(b.used(), 0);
    }
}

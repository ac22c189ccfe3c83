//! The RAM budget of one iterator: bytes that asynchronous operators hold in their buffers
//! and in the work they have started.
//!
//! Every buffer that runs ahead of its consumer (prefetch, parallel map results, interleave
//! inputs) reserves the bytes of what it holds here and releases them when the element is
//! handed on. Work in flight counts too, as an estimate reserved when it starts and swapped
//! for the real bytes when it ends: a parallel map task's input rows and the output it is
//! building, a prefetch producer's pull. So does the chunk a prefetch handed out last, which
//! its consumer holds until it pulls again. Counting only finished results let a pipeline of
//! large elements hold its whole budget in buffers plus every running task's elements
//! besides. A producer with nothing of its own buffered or under way may always start one
//! piece of work, so the pipeline makes progress under any budget; beyond that, a producer
//! waits until the total held fits the budget. This is what bounds a pipeline of large
//! elements, whatever the buffer sizes its author (or the autotuner) chose.
//!
//! Buffers may fill only [`MemoryBudget::buffer_limit`]: the budget less what is kept for
//! what the pipeline holds but cannot count: the element a source or a user function is
//! building, the one piece of work the progress rule lets start, and the allocator's own
//! overhead. That is an eighth of the budget and [`ALLOCATOR_SLACK`] times the largest piece
//! of work finished so far. The second term is for large elements: glibc's malloc serves
//! blocks of up to 32 MiB from per-thread arenas once one has been freed, and an arena keeps
//! freed blocks of the sizes its thread last made, so each thread that makes elements can
//! hold a few freed ones beyond what is live. With an eighth alone, a pipeline of 16 MiB
//! elements under 256 MiB counted 224 MiB and its resident set rose up to 293 MiB above idle
//! (229 MiB with `MALLOC_ARENA_MAX=1`); with both terms, at most 229 MiB over six runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayData, AsArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;

/// Bytes held by an iterator's buffers, against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
    peak: AtomicU64,
    /// The most bytes one piece of work turned out to hold.
    largest: AtomicU64,
}

/// How many of the largest piece of work the budget keeps out of buffers, for the freed
/// blocks the allocator keeps (see the module overview).
pub const ALLOCATOR_SLACK: u64 = 4;

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        MemoryBudget { limit, used: AtomicU64::new(0), peak: AtomicU64::new(0), largest: AtomicU64::new(0) }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What buffers and work in flight may hold: the limit less what is kept for what
    /// cannot be counted, an eighth and [`ALLOCATOR_SLACK`] times the largest piece of work
    /// (see the module overview).
    pub fn buffer_limit(&self) -> u64 {
        let slack = self.largest.load(Ordering::Relaxed).saturating_mul(ALLOCATOR_SLACK);
        buffer_share(self.limit).saturating_sub(slack)
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
        self.used().saturating_add(bytes) <= self.buffer_limit()
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

    /// Replaces `held` bytes reserved earlier (an estimate) by `now` (what a piece of work
    /// turned out to hold).
    pub fn swap(&self, held: u64, now: u64) {
        self.largest.fetch_max(now, Ordering::Relaxed);
        // One change, not a reserve then a release: for a moment both would count, which
        // would show in the peak and could make another producer wait for nothing.
        if now >= held {
            self.reserve(now - held);
        } else {
            self.release(held - now);
        }
    }
}

/// The Arrow allocations a set of chunks keeps alive, each counted once at its capacity and
/// held in a budget until dropped: for an operator that keeps chunks it cannot wait for
/// room to hold (a shuffle buffer, a batch's rows gathered across chunks).
///
/// Chunks are often slices of larger ones (a reader's block cut into elements), and many
/// slices share one allocation: counted per chunk, a shuffle of one-row slices charged each
/// row for its whole block.
#[derive(Debug)]
pub struct HeldBuffers {
    budget: Arc<MemoryBudget>,
    /// Per allocation (its start address): the chunks holding it and its capacity.
    holders: HashMap<usize, (usize, u64)>,
    bytes: u64,
}

impl HeldBuffers {
    /// Nothing held yet, in `budget`.
    pub fn new(budget: &Arc<MemoryBudget>) -> Self {
        HeldBuffers { budget: budget.clone(), holders: HashMap::new(), bytes: 0 }
    }

    /// Holds `chunk`'s allocations (those not held already); the holder cannot wait, so
    /// whether they fit or not.
    pub fn add(&mut self, chunk: &RecordBatch) {
        let before = self.bytes;
        for_each_buffer(chunk, &mut |address, capacity| {
            let (holders, _) = self.holders.entry(address).or_insert((0, capacity));
            *holders += 1;
            if *holders == 1 {
                self.bytes += capacity;
            }
        });
        self.budget.swap(before, self.bytes);
    }

    /// Lets go of `chunk` (added before): its allocations no other held chunk shares leave
    /// the budget.
    pub fn remove(&mut self, chunk: &RecordBatch) {
        let before = self.bytes;
        for_each_buffer(chunk, &mut |address, _| {
            if let Some((holders, capacity)) = self.holders.get_mut(&address) {
                *holders -= 1;
                if *holders == 0 {
                    self.bytes -= *capacity;
                    self.holders.remove(&address);
                }
            }
        });
        self.budget.swap(before, self.bytes);
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for HeldBuffers {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// Calls `f` with the start address and capacity of every allocation `chunk`'s columns
/// point into (validity, offsets, values, children), once per place it appears.
fn for_each_buffer(chunk: &RecordBatch, f: &mut dyn FnMut(usize, u64)) {
    fn walk(data: &ArrayData, f: &mut dyn FnMut(usize, u64)) {
        let nulls = data.nulls().map(|n| n.buffer());
        for buffer in data.buffers().iter().chain(nulls) {
            f(buffer.data_ptr().as_ptr() as usize, buffer.capacity() as u64);
        }
        for child in data.child_data() {
            walk(child, f);
        }
    }
    for column in chunk.columns() {
        walk(&column.to_data(), f);
    }
}

/// The share of a RAM budget of `limit` bytes that buffers may fill: seven eighths.
pub fn buffer_share(limit: u64) -> u64 {
    limit - limit / 8
}

/// The bytes of `chunk`'s rows alone.
///
/// `get_array_memory_size` reports the whole buffers a chunk points into, and a task's rows
/// are often a slice of a larger chunk: counted that way, every slice of a chunk would be
/// charged for all of it. Variable-size lists still count their whole child array (Arrow
/// does not slice it), so a slice of them is over-estimated, never under. A view column
/// (a TFRecord reader's records) counts its views and the values longer than a view holds:
/// Arrow's slice size counts the views alone, so a parallel map over records charged its
/// tasks 16 bytes a record whatever the records' size.
pub fn slice_bytes(chunk: &RecordBatch) -> u64 {
    let bytes = chunk.columns().iter().map(|c| match c.data_type() {
        DataType::BinaryView => view_bytes(c.as_binary_view().views(), c.nulls()),
        DataType::Utf8View => view_bytes(c.as_string_view().views(), c.nulls()),
        _ => c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size()),
    });
    bytes.sum::<usize>().min(chunk.get_array_memory_size()) as u64
}

/// The bytes of a view column: its views, its validity, and the values longer than a view
/// holds (the low 32 bits of a view are its value's length).
fn view_bytes(views: &[u128], nulls: Option<&NullBuffer>) -> usize {
    let viewed: usize = views.iter().map(|&v| v as u32 as usize).filter(|&len| len > 12).sum();
    views.len() * 16 + nulls.map_or(0, |n| n.buffer().len()) + viewed
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
    fn view_columns_count_what_they_view_not_the_buffers_behind_it() {
        use std::sync::Arc;

        use arrow::array::{make_view, BinaryViewArray};
        use arrow::buffer::{Buffer, ScalarBuffer};
        use arrow::datatypes::{Field, Schema};

        // Ten records of 100 bytes and one of 5 (held in its view) in a 1 MiB window.
        let window = Buffer::from_vec(vec![7u8; 1 << 20]);
        let mut views: Vec<u128> =
            (0..10).map(|i| make_view(&window[i * 100..i * 100 + 100], 0, i as u32 * 100)).collect();
        views.push(make_view(&window[..5], 0, 0));
        let records = BinaryViewArray::try_new(ScalarBuffer::from(views), vec![window], None).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("record", DataType::BinaryView, false)]));
        let chunk = RecordBatch::try_new(schema, vec![Arc::new(records)]).unwrap();
        assert_eq!(slice_bytes(&chunk), 11 * 16 + 1000);
        // A slice counts its own rows.
        assert_eq!(slice_bytes(&chunk.slice(8, 3)), 3 * 16 + 200);
    }

    #[test]
    fn tracks_use_and_peak() {
        let b = MemoryBudget::new(160);
        assert_eq!(b.buffer_limit(), 140);
        assert!(b.fits(140) && !b.fits(141));
        b.reserve(60);
        assert!(!b.fits(81));
        b.reserve(30);
        b.release(60);
        assert_eq!((b.used(), b.peak()), (30, 90));
        b.release(1000);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn large_pieces_of_work_keep_more_out_of_buffers() {
        let b = MemoryBudget::new(1000);
        assert_eq!(b.buffer_limit(), 875);
        b.reserve(10);
        b.swap(10, 50);
        assert_eq!(b.buffer_limit(), 875 - ALLOCATOR_SLACK * 50);
        // Smaller pieces later do not give the room back: the allocator may still hold the
        // large blocks.
        b.swap(50, 5);
        assert_eq!(b.buffer_limit(), 875 - ALLOCATOR_SLACK * 50);
        b.swap(5, 1000);
        assert_eq!(b.buffer_limit(), 0);
    }

    #[test]
    fn held_buffers_count_each_allocation_once() {
        use arrow::array::{Int64Array, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};

        let schema =
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true), Field::new("s", DataType::Utf8, false)]));
        let x = Int64Array::from_iter((0..1000).map(|i| (i % 3 != 0).then_some(i)));
        let s = StringArray::from_iter_values((0..1000).map(|i| format!("row {i}")));
        let chunk = RecordBatch::try_new(schema, vec![Arc::new(x), Arc::new(s)]).unwrap();
        let mut whole = 0;
        for_each_buffer(&chunk, &mut |_, capacity| whole += capacity);
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        let mut held = HeldBuffers::new(&budget);
        let (a, b) = (chunk.slice(0, 10), chunk.slice(500, 10));
        held.add(&a);
        held.add(&b);
        // Values, validity, offsets and string data: each allocation once, for both slices.
        assert_eq!((held.bytes(), budget.used()), (whole, whole));
        held.remove(&a);
        assert_eq!(budget.used(), whole);
        held.remove(&b);
        assert_eq!(budget.used(), 0);
        held.add(&a);
        drop(held);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn swap_moves_use_without_a_peak_of_both() {
        let b = MemoryBudget::new(100);
        b.reserve(40);
        b.swap(40, 30);
        assert_eq!((b.used(), b.peak()), (30, 40));
        b.swap(30, 50);
        assert_eq!((b.used(), b.peak()), (50, 50));
    }

    #[test]
    fn slice_bytes_counts_the_rows_of_a_slice() {
        use std::sync::Arc;

        use arrow::array::Int64Array;
        use arrow::datatypes::{DataType, Field, Schema};

        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let chunk = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..1000))]).unwrap();
        assert_eq!(slice_bytes(&chunk), 8000);
        assert_eq!(slice_bytes(&chunk.slice(100, 10)), 80);
        assert!(chunk.slice(100, 10).get_array_memory_size() >= 8000);
    }
}

//! `prefetch(n)`: a producer thread pulls the input ahead of the consumer into a buffer
//! bounded by elements (`n` rows, live-tunable) and by the iterator's RAM budget.
//!
//! The budget holds the buffer, the pull in progress and the chunk last handed out: before a
//! pull the producer reserves the last chunk's bytes as the estimate of the next, and swaps
//! the estimate for the real bytes once the chunk is in the buffer. A pull with chunks
//! already buffered starts only if the estimate fits. A chunk handed out stays reserved until
//! the consumer pulls again, as a consumer holds what it was given until it asks for more
//! (the user's iterator its current chunk, an interleave the rest of its input's chunk); when
//! the consumer is itself an operator that reserves its input (a parallel map), that chunk
//! counts twice meanwhile, which errs on the safe side.
//!
//! The same operator runs each input of a parallel `interleave`, where a shared set of
//! [`Permits`] caps how many of the inputs are being read at once (`num_parallel_calls`).
//!
//! The producer starts on the first pull, so a restore happens before any read; it is
//! stopped and joined when the operator is dropped. Once the iterator is cancelled it starts
//! no more pulls, and a consumer waiting for a chunk gets [`Error::Cancelled`]. Errors
//! travel through the buffer in order, and the producer keeps pulling after one, as a
//! synchronous consumer would.
//!
//! Checkpoints: a save waits for the pull in progress, then stores the buffered results and
//! the input's state (full mode). In symbolic mode, once recording, the producer saves the
//! input's symbolic state before each pull, and a checkpoint holds only the state before the
//! oldest buffered chunk: a restore rewinds the input there and the buffer refills by itself.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::budget::MemoryBudget;
use crate::cancel::{Cancel, Wake};
use crate::checkpoint::{OpState, SaveMode};
use crate::metrics::{Knob, OpStats};
use crate::operator::{BoxOperator, Operator};

/// A limit on concurrent reads shared by several producers, resized live through its knob.
#[derive(Debug)]
pub struct Permits {
    knob: Arc<Knob>,
    in_use: Mutex<usize>,
    freed: Condvar,
    /// Results the producers sharing the permits have buffered (or ends they reached) so
    /// far, for a consumer that takes from whichever is ready to wait for the next; the
    /// producers wake it only while it waits (`waiting`), not on every chunk.
    deliveries: AtomicU64,
    waiting: AtomicUsize,
    wait_lock: Mutex<()>,
    delivered: Condvar,
    cancel: Arc<Cancel>,
}

impl Permits {
    /// At most `knob` reads at once, until `cancel`.
    pub fn new(knob: Arc<Knob>, cancel: Arc<Cancel>) -> Arc<Self> {
        let permits = Arc::new(Permits {
            knob,
            in_use: Mutex::new(0),
            freed: Condvar::new(),
            deliveries: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            wait_lock: Mutex::new(()),
            delivered: Condvar::new(),
            cancel: cancel.clone(),
        });
        cancel.register(Arc::downgrade(&permits) as std::sync::Weak<dyn Wake>);
        permits
    }

    /// How many results (or ends) the producers have buffered so far.
    pub fn deliveries(&self) -> u64 {
        self.deliveries.load(Ordering::SeqCst)
    }

    /// Waits until a producer buffers a result or ends after [`Permits::deliveries`] said
    /// `seen`; [`Error::Cancelled`] once the iterator is cancelled.
    pub fn wait_for_delivery(&self, seen: u64) -> Result<()> {
        let mut guard = self.wait_lock.lock().expect("deliveries");
        // Counted as waiting before looking: a producer that delivers after the look sees
        // the count, and its wake-up waits for the lock, which the wait below releases.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while self.deliveries.load(Ordering::SeqCst) == seen && !self.cancel.is_cancelled() {
            guard = self.delivered.wait(guard).expect("deliveries");
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.cancel.check()
    }

    fn deliver(&self) {
        self.deliveries.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _guard = self.wait_lock.lock().expect("deliveries");
            self.delivered.notify_all();
        }
    }

    /// Waits for a permit; `None` once `stop` is set (and [`Permits::wake`] called) or the
    /// iterator is cancelled.
    fn acquire(&self, stop: &AtomicBool) -> Option<PermitGuard<'_>> {
        let mut in_use = self.in_use.lock().expect("permits");
        loop {
            if stop.load(Ordering::Acquire) || self.cancel.is_cancelled() {
                return None;
            }
            if *in_use < self.knob.get().max(1) {
                *in_use += 1;
                return Some(PermitGuard(self));
            }
            in_use = self.freed.wait(in_use).expect("permits");
        }
    }

    /// Wakes every waiting producer (one of them is stopping).
    fn wake(&self) {
        let _guard = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        self.freed.notify_all();
    }
}

impl Wake for Permits {
    fn wake(&self) {
        Permits::wake(self);
        // Called by whoever cancels: a lock poisoned by a panic elsewhere must not panic here.
        let _guard = self.wait_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.delivered.notify_all();
    }
}

struct PermitGuard<'a>(&'a Permits);

impl Drop for PermitGuard<'_> {
    fn drop(&mut self) {
        *self.0.in_use.lock().expect("permits") -= 1;
        self.0.freed.notify_all();
    }
}

struct Item {
    result: Result<RecordBatch>,
    /// The input's symbolic state before the pull that gave this item (when recording).
    before: Option<OpState>,
    rows: usize,
    bytes: u64,
}

#[derive(Default)]
struct Buffer {
    items: VecDeque<Item>,
    rows: usize,
    bytes: u64,
    /// The input ended (nothing more will be pushed).
    done: bool,
    /// Bytes of the last chunk: the estimate of the next one's.
    last_bytes: u64,
    /// The consumer, or the producer, waits for the other: only then does the other wake it.
    consumer_waits: bool,
    producer_waits: bool,
}

struct Shared {
    buffer: Mutex<Buffer>,
    changed: Condvar,
    stop: AtomicBool,
    /// The producer has been started.
    started: AtomicBool,
    tracking: AtomicBool,
    knob: Arc<Knob>,
    budget: Arc<MemoryBudget>,
    stats: Arc<OpStats>,
    permits: Option<Arc<Permits>>,
    cancel: Arc<Cancel>,
}

impl Wake for Shared {
    fn wake(&self) {
        let _b = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }
}

impl Shared {
    /// Whether the producer is to start no more pulls.
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.cancel.is_cancelled()
    }

    /// Whether the producer may pull another chunk now.
    fn has_room(&self, b: &Buffer) -> bool {
        b.items.is_empty() || (b.rows < self.knob.get() && self.budget.fits(b.last_bytes))
    }
}

/// Tells whether a [`PrefetchOp`] has a result buffered (or has ended).
pub struct Probe(Arc<Shared>);

impl Probe {
    /// Whether a pull would return without waiting.
    pub fn is_ready(&self) -> bool {
        let b = self.0.buffer.lock().expect("prefetch buffer");
        !b.items.is_empty() || b.done
    }

    /// Whether the producer has been started (it is not until the first pull after a
    /// restore): one that has not will deliver nothing until pulled.
    pub fn is_started(&self) -> bool {
        self.0.started.load(Ordering::Acquire)
    }
}

/// A prefetching operator (see the module documentation).
pub struct PrefetchOp {
    shared: Arc<Shared>,
    input: Arc<Mutex<BoxOperator>>,
    producer: Option<JoinHandle<()>>,
    /// The bytes of the chunk last handed out, reserved until the consumer pulls again.
    handed: u64,
}

impl PrefetchOp {
    /// Prefetches `input` into a buffer of `knob` rows, holding its bytes in `budget`, until
    /// `cancel`; `permits`, when given, limits concurrent reads across the producers sharing
    /// them.
    pub fn new(
        input: BoxOperator,
        knob: Arc<Knob>,
        budget: Arc<MemoryBudget>,
        cancel: Arc<Cancel>,
        stats: Arc<OpStats>,
        permits: Option<Arc<Permits>>,
    ) -> Self {
        stats.asynchronous.store(true, Ordering::Relaxed);
        let shared = Shared {
            buffer: Mutex::default(),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            started: AtomicBool::new(false),
            tracking: AtomicBool::new(false),
            knob,
            budget,
            stats,
            permits,
            cancel: cancel.clone(),
        };
        let shared = Arc::new(shared);
        cancel.register(Arc::downgrade(&shared) as std::sync::Weak<dyn Wake>);
        PrefetchOp { shared, input: Arc::new(Mutex::new(input)), producer: None, handed: 0 }
    }

    /// A handle that tells whether a pull would return without waiting.
    pub fn probe(&self) -> Probe {
        Probe(self.shared.clone())
    }

    /// Starts the producer now rather than on the first pull (a parallel interleave opening
    /// its cycle ahead); a no-op once started.
    pub fn start(&mut self) -> Result<()> {
        if self.producer.is_some() {
            return Ok(());
        }
        let (shared, input) = (self.shared.clone(), self.input.clone());
        let handle = std::thread::Builder::new()
            .name("flumen-prefetch".into())
            .spawn(move || produce(&shared, &input))
            .map_err(|e| Error::execution("prefetch", format!("cannot start its thread: {e}")))?;
        self.producer = Some(handle);
        self.shared.started.store(true, Ordering::Release);
        Ok(())
    }
}

fn produce(shared: &Shared, input: &Mutex<BoxOperator>) {
    loop {
        let estimate = {
            let mut b = shared.buffer.lock().expect("prefetch buffer");
            while !shared.stopping() && !shared.has_room(&b) {
                b.producer_waits = true;
                b = shared.changed.wait(b).expect("prefetch buffer");
                b.producer_waits = false;
            }
            b.last_bytes
        };
        let permit = match &shared.permits {
            Some(p) => match p.acquire(&shared.stop) {
                Some(permit) => Some(permit),
                None => return,
            },
            None => None,
        };
        if shared.stopping() {
            return;
        }
        // Reserved after the permit, not with the room check: a producer waiting for its turn
        // to read holds nothing yet, and must not keep the others' pulls out of the budget.
        shared.budget.reserve(estimate);
        // The input stays locked until the item is buffered, so a save sees either both the
        // input before the pull and no item, or both after.
        let mut input = input.lock().expect("prefetch input");
        let before = shared.tracking.load(Ordering::Relaxed).then(|| input.save(SaveMode::Symbolic).ok()).flatten();
        let start = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| input.next_chunk()))
            .unwrap_or_else(|panic| Err(Error::execution("prefetch", format!("its input panicked: {panic:?}"))));
        shared.stats.add_work(start.elapsed());
        drop(permit);
        let mut b = shared.buffer.lock().expect("prefetch buffer");
        let (result, rows, bytes) = match result {
            Ok(None) => {
                b.done = true;
                (None, 0, 0)
            }
            Ok(Some(c)) => {
                let (rows, bytes) = (c.num_rows(), c.get_array_memory_size() as u64);
                (Some(Ok(c)), rows, bytes)
            }
            Err(e) => (Some(Err(e)), 0, 0),
        };
        shared.budget.swap(estimate, bytes);
        if let Some(result) = result {
            b.rows += rows;
            b.bytes += bytes;
            b.last_bytes = bytes;
            b.items.push_back(Item { result, before, rows, bytes });
        }
        shared.stats.set_buffered(b.rows, b.bytes as usize);
        let (done, wake) = (b.done, b.consumer_waits);
        drop(b);
        drop(input);
        if wake {
            shared.changed.notify_all();
        }
        if let Some(permits) = &shared.permits {
            permits.deliver();
        }
        if done {
            return;
        }
    }
}

impl Operator for PrefetchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.start()?;
        let shared = &self.shared;
        let mut b = shared.buffer.lock().expect("prefetch buffer");
        // Released under the lock, so that a producer waiting for room sees it once woken.
        shared.budget.release(std::mem::take(&mut self.handed));
        loop {
            if let Some(item) = b.items.pop_front() {
                shared.stats.sample_occupancy(b.rows as u64);
                b.rows -= item.rows;
                b.bytes -= item.bytes;
                self.handed = item.bytes;
                shared.stats.set_buffered(b.rows, b.bytes as usize);
                let wake = b.producer_waits;
                drop(b);
                if wake {
                    shared.changed.notify_all();
                }
                return item.result.map(Some);
            }
            if b.done {
                return Ok(None);
            }
            shared.cancel.check()?;
            b.consumer_waits = true;
            b = shared.changed.wait(b).expect("prefetch buffer");
            b.consumer_waits = false;
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let input = self.input.lock().expect("prefetch input");
        let b = self.shared.buffer.lock().expect("prefetch buffer");
        let state = OpState::new("prefetch").with("done", b.done)?;
        if mode == SaveMode::Symbolic {
            self.shared.tracking.store(true, Ordering::Relaxed);
            match b.items.front() {
                None => return Ok(state.child(input.save(mode)?)),
                // Rewinding the input before the oldest buffered chunk re-produces them all.
                Some(Item { before: Some(before), .. }) => return Ok(state.with("done", false)?.child(before.clone())),
                Some(_) => {}
            }
        }
        let results: Vec<&Result<RecordBatch>> = b.items.iter().map(|i| &i.result).collect();
        Ok(state.with_results("buffered", results)?.child(input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("prefetch")?;
        let buffered: Vec<Result<RecordBatch>> =
            if state.fields.contains_key("buffered") { state.take_results("buffered")? } else { Vec::new() };
        let done: bool = state.get("done")?;
        self.input.lock().expect("prefetch input").restore(state.take_child()?)?;
        let mut b = self.shared.buffer.lock().expect("prefetch buffer");
        for result in buffered {
            let (rows, bytes) = match &result {
                Ok(c) => (c.num_rows(), c.get_array_memory_size() as u64),
                Err(_) => (0, 0),
            };
            self.shared.budget.reserve(bytes);
            b.rows += rows;
            b.bytes += bytes;
            b.items.push_back(Item { result, before: None, rows, bytes });
        }
        b.done = done;
        Ok(())
    }
}

impl Drop for PrefetchOp {
    fn drop(&mut self) {
        // Set under the lock, so a producer about to wait cannot miss the wake-up.
        {
            let _b = self.shared.buffer.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.stop.store(true, Ordering::Release);
        }
        self.shared.changed.notify_all();
        if let Some(p) = &self.shared.permits {
            p.wake();
        }
        if let Some(handle) = self.producer.take() {
            let _ = handle.join();
        }
        // The producer is gone: what it buffered leaves the budget with the buffer, and the
        // chunk last handed out is no longer this operator's to count.
        let b = self.shared.buffer.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.budget.release(b.bytes + self.handed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Receiver, Sender};

    use super::*;
    use crate::kernels::list_kernels::testing::{int_chunks, VecOp};
    use crate::metrics::Param;

    /// An input that says on `entered` that a pull started, then waits for a word on `go`
    /// (or for `go`'s sender to be dropped), so that a test sees the pull in progress.
    struct Gated {
        input: VecOp,
        entered: Sender<()>,
        go: Receiver<()>,
    }

    impl Operator for Gated {
        fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
            let _ = self.entered.send(());
            let _ = self.go.recv();
            self.input.next_chunk()
        }

        fn save(&self, mode: SaveMode) -> Result<OpState> {
            self.input.save(mode)
        }

        fn restore(&mut self, state: OpState) -> Result<()> {
            self.input.restore(state)
        }
    }

    /// A prefetch of 10 rows over `chunks` chunks of 1,000 int64 rows (8,000 bytes each).
    fn prefetch(chunks: usize, limit: u64) -> (PrefetchOp, Arc<MemoryBudget>, Receiver<()>, Sender<()>) {
        let values: Vec<i64> = (0..chunks as i64 * 1000).collect();
        let input = VecOp(int_chunks("x", &values, &vec![1000; chunks]).into_iter().map(Ok).collect());
        let (entered_tx, entered_rx) = channel();
        let (go_tx, go_rx) = channel();
        let input = Box::new(Gated { input, entered: entered_tx, go: go_rx });
        let budget = Arc::new(MemoryBudget::new(limit));
        let knob = Knob::new(Param::Buffer, 10_000, false, 1, 10_000);
        let op = PrefetchOp::new(input, knob, budget.clone(), Cancel::new(), Arc::default(), None);
        (op, budget, entered_rx, go_tx)
    }

    #[test]
    fn a_pull_in_progress_and_the_chunk_handed_out_are_held() {
        let (mut op, budget, entered, go) = prefetch(4, u64::MAX);
        // Moved after the prefetch, so that a failed assertion drops it first: the prefetch's
        // drop would otherwise wait for ever on a pull waiting for `go`.
        let go = go;
        go.send(()).unwrap();
        let chunk = op.next_chunk().unwrap().unwrap();
        let bytes = chunk.get_array_memory_size() as u64;
        // The first pull, then the second, which waits for `go` with its estimate (the
        // first chunk's bytes) reserved, besides the first chunk, which the consumer holds.
        entered.recv().unwrap();
        entered.recv().unwrap();
        assert_eq!(budget.used(), 2 * bytes);
        go.send(()).unwrap();
        // Pulling again gives the first chunk back and hands out the second; the third pull
        // waits for `go`.
        assert_eq!(op.next_chunk().unwrap().unwrap().num_rows(), 1000);
        entered.recv().unwrap();
        assert_eq!(budget.used(), 2 * bytes);
        drop(go);
        assert!(op.next_chunk().unwrap().is_some() && op.next_chunk().unwrap().is_some());
        assert!(op.next_chunk().unwrap().is_none());
        assert_eq!(budget.used(), 0);
        drop(op);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn dropping_the_prefetch_mid_stream_gives_its_bytes_back() {
        let (mut op, budget, _entered, go) = prefetch(16, 20_000);
        drop(go);
        budget.reserve(123);
        for _ in 0..3 {
            op.next_chunk().unwrap().unwrap();
        }
        drop(op);
        assert_eq!(budget.used(), 123);
    }
}

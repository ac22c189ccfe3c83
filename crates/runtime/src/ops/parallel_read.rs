//! A source whose reader describes its chunks (`ChunkReader::next_deferred`: Avro's runs
//! of blocks) decoded on the pipeline's pool: the consumer's thread only walks block
//! headers, and up to the parallelism knob's number of workers inflate and decode at once.
//!
//! Below a `batch`, runs are cut to whole batches (the read-and-batch fusion), so that the
//! batch wraps each run's columns without copying them.
//!
//! In order (the default, and whenever `deterministic` holds), chunks come out exactly as
//! the reader's own `next_chunk` calls would give them, errors in their places; otherwise
//! each described run comes out whole as soon as it is made. A checkpoint holds, for every
//! run not yet handed out, the reader's position before it was described and how many of
//! its outcomes went out, plus the reader's position after the last one: restoring
//! describes those runs again from their positions and makes them anew.
//!
//! The RAM budget counts what the runs hold: a run being made reserves the bytes of the
//! largest run made so far, swapped for its outcomes' bytes when it is made, and released
//! chunk by chunk as they are handed out. A run starts only while that fits, except when
//! nothing of this reader's is made or being made, so the read always progresses.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};
use flumen_sources::reader::{BoxReader, Deferred, ReaderPosition};

use crate::budget::{slice_bytes, MemoryBudget};
use crate::cancel::Cancel;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::metrics::{Knob, OpStats};
use crate::operator::Operator;
use crate::pool::ThreadPool;

/// A made run's outcomes, by the run's sequence number.
type Made = (u64, Vec<Result<RecordBatch>>);

/// A described run not yet handed out whole.
struct Run {
    seq: u64,
    /// The reader's position before it described the run.
    position: ReaderPosition,
    /// The rows asked of the reader for it, when runs are cut to batches.
    asked: Option<usize>,
    /// Outcomes of the run handed out already.
    handed: usize,
    /// The run's description (none for an error of the reader's).
    rows: Option<Arc<dyn Deferred>>,
    /// A worker has it (and holds a clone of `rows` until it is done).
    spawned: bool,
    /// The outcomes not yet handed out, once made.
    made: Option<VecDeque<Result<RecordBatch>>>,
    /// The bytes reserved in the budget for it: an estimate while it is made, then its
    /// outcomes' not yet handed out.
    reserved: u64,
}

impl Run {
    /// A worker is making the run.
    fn in_flight(&self) -> bool {
        self.spawned && self.made.is_none()
    }
}

/// The source operator of a reader that describes its chunks (see the module documentation).
pub struct ParallelReadOp {
    reader: BoxReader,
    schema: SchemaRef,
    pool: Arc<ThreadPool>,
    knob: Arc<Knob>,
    stats: Arc<OpStats>,
    ordered: bool,
    cancel: Arc<Cancel>,
    runs: VecDeque<Run>,
    next_seq: u64,
    sender: Sender<Made>,
    receiver: Receiver<Made>,
    /// The reader has no more runs.
    described_all: bool,
    /// The batch size runs are cut to whole batches of, if any, and the rows a run aims at.
    align: Option<usize>,
    run_rows: usize,
    /// The rows of the runs described so far.
    described_rows: usize,
    budget: Arc<MemoryBudget>,
    /// The bytes of the largest run made so far: what a run being made reserves.
    largest: u64,
}

/// The rows a run cut to batches aims at: a thousand or so (w3's records: 1 MB), so that a
/// run is a pool task worth handing over yet a pass of a few files is many of them.
const RUN_ROWS: usize = 1024;

impl ParallelReadOp {
    /// Reads `reader` (which [defers](flumen_sources::reader::ChunkReader::defers)) with up
    /// to `knob` runs made at once on `pool`, in reading order when `ordered`, holding what
    /// `budget` allows; chunks come out with `schema`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        reader: BoxReader,
        schema: SchemaRef,
        pool: Arc<ThreadPool>,
        knob: Arc<Knob>,
        stats: Arc<OpStats>,
        ordered: bool,
        cancel: Arc<Cancel>,
        budget: Arc<MemoryBudget>,
    ) -> Self {
        stats.asynchronous.store(true, std::sync::atomic::Ordering::Relaxed);
        let (sender, receiver) = channel();
        ParallelReadOp {
            reader,
            schema,
            pool,
            knob,
            stats,
            ordered,
            cancel,
            runs: VecDeque::new(),
            next_seq: 0,
            sender,
            receiver,
            described_all: false,
            align: None,
            run_rows: RUN_ROWS,
            described_rows: 0,
            budget,
            largest: 0,
        }
    }

    /// Cuts runs to whole batches of `batch_size` rows (the read-and-batch fusion), each
    /// run the fewest batches that reach 1,024 rows or `chunk_rows` rows, whichever is
    /// smaller: a batch above wraps each run without copying. Only a batch that straddles
    /// two files (or an error) is copied.
    pub fn in_batches_of(mut self, batch_size: usize, chunk_rows: usize) -> Self {
        self.align = Some(batch_size.max(1));
        self.run_rows = RUN_ROWS.min(chunk_rows).max(1);
        self
    }

    /// The rows to ask for the next run, when runs are cut to batches: enough to end on a
    /// batch boundary, and at least the run's aim or one batch.
    fn next_ask(&self) -> Option<usize> {
        let batch = self.align?;
        let per_run = batch * self.run_rows.div_ceil(batch);
        Some(per_run - self.described_rows % batch)
    }

    /// The reader's next run: `asked` rows of it when runs are cut to batches.
    fn describe(&mut self, asked: Option<usize>) -> Result<Option<Arc<dyn Deferred>>> {
        match asked {
            Some(rows) => self.reader.next_deferred_rows(rows),
            None => self.reader.next_deferred(),
        }
    }

    /// Describes runs while fewer than twice the knob's are held, and hands waiting runs to
    /// workers while fewer than the knob's are being made.
    fn top_up(&mut self) -> Result<()> {
        let parallelism = self.knob.get().max(1);
        while !self.described_all && self.runs.len() < 2 * parallelism && !self.cancel.is_cancelled() {
            let position = self.reader.position()?;
            let seq = self.next_seq;
            let asked = self.next_ask();
            let (rows, made) = match self.describe(asked) {
                Ok(None) => {
                    self.described_all = true;
                    break;
                }
                Ok(Some(run)) => {
                    self.described_rows += run.num_rows();
                    (Some(run), None)
                }
                Err(e) => (None, Some(VecDeque::from([Err(e)]))),
            };
            self.next_seq += 1;
            self.runs.push_back(Run { seq, position, asked, handed: 0, rows, spawned: false, made, reserved: 0 });
        }
        let mut in_flight = self.runs.iter().filter(|r| r.in_flight()).count();
        let mut holding = self.runs.iter().any(|r| r.reserved > 0 || r.in_flight());
        for run in self.runs.iter_mut() {
            if in_flight >= parallelism || (holding && !self.budget.fits(self.largest)) {
                break;
            }
            if let (false, None, Some(rows)) = (run.spawned, &run.made, &run.rows) {
                run.spawned = true;
                in_flight += 1;
                holding = true;
                run.reserved = self.largest;
                self.budget.reserve(run.reserved);
                spawn(&self.pool, run.seq, rows.clone(), self.sender.clone(), self.stats.clone());
            }
        }
        Ok(())
    }

    /// Files a made run's outcomes with its run, less those handed out before a restore.
    /// Outcomes of a run no longer held (before a restore), or made twice, are dropped.
    fn store(&mut self, (seq, made): Made) {
        if let Some(run) = self.runs.iter_mut().find(|r| r.seq == seq && r.made.is_none()) {
            let all_bytes: u64 = made.iter().map(outcome_bytes).sum();
            self.largest = self.largest.max(all_bytes);
            let outcomes = made.into_iter().filter(|o| !matches!(o, Ok(c) if c.num_rows() == 0));
            let kept: VecDeque<_> = outcomes.skip(run.handed).collect();
            let bytes = kept.iter().map(outcome_bytes).sum();
            self.budget.swap(run.reserved, bytes);
            run.reserved = bytes;
            run.made = Some(kept);
        }
    }

    /// The next outcome of a made run (the first run only, in order), dropping runs handed
    /// out whole; `None` while the run it must come from is being made.
    fn take(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            let limit = if self.ordered { 1 } else { self.runs.len() };
            let i = self.runs.iter().take(limit).position(|r| r.made.is_some())?;
            let run = &mut self.runs[i];
            match run.made.as_mut().and_then(VecDeque::pop_front) {
                Some(outcome) => {
                    run.handed += 1;
                    let bytes = outcome_bytes(&outcome).min(run.reserved);
                    run.reserved -= bytes;
                    self.budget.release(bytes);
                    return Some(outcome);
                }
                None => {
                    if let Some(run) = self.runs.remove(i) {
                        self.budget.release(run.reserved);
                    }
                }
            }
        }
    }
}

/// The bytes a made outcome holds (an error, none).
fn outcome_bytes(outcome: &Result<RecordBatch>) -> u64 {
    outcome.as_ref().map_or(0, slice_bytes)
}

impl Drop for ParallelReadOp {
    /// Gives back what the runs still hold.
    fn drop(&mut self) {
        self.budget.release(self.runs.iter().map(|r| r.reserved).sum());
    }
}

/// Makes `rows` on `pool` and sends its outcomes, a panic turned into an error.
fn spawn(pool: &ThreadPool, seq: u64, rows: Arc<dyn Deferred>, sender: Sender<Made>, stats: Arc<OpStats>) {
    pool.spawn(move || {
        let start = Instant::now();
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rows.make_each()))
            .unwrap_or_else(|panic| vec![Err(Error::execution("read", format!("a worker panicked: {panic:?}")))]);
        stats.add_work(start.elapsed());
        // The operator may be gone (its iterator dropped): then nobody wants the rows.
        let _ = sender.send((seq, made));
    });
}

impl Operator for ParallelReadOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            self.top_up()?;
            while let Ok(made) = self.receiver.try_recv() {
                self.store(made);
            }
            if let Some(outcome) = self.take() {
                self.top_up()?;
                return relabel(outcome?, &self.schema).map(Some);
            }
            if self.runs.is_empty() {
                self.cancel.check()?;
                // Runs handed out whole (or of no rows) may have emptied the window before
                // the reader's end: describe more.
                match self.described_all {
                    true => return Ok(None),
                    false => continue,
                }
            }
            self.cancel.check()?;
            // Runs are held, none is ready, and a worker is making the one wanted (top_up
            // hands the first runs out first): its outcome will come. A worker that is done
            // has dropped its clone of the run: a run whose job ended without an outcome
            // (dropped unrun) is handed out again rather than waited for forever.
            match self.receiver.recv_timeout(Duration::from_millis(50)) {
                Ok(made) => self.store(made),
                Err(_) => {
                    while let Ok(made) = self.receiver.try_recv() {
                        self.store(made);
                    }
                    for run in self.runs.iter_mut().filter(|r| r.in_flight()) {
                        if run.rows.as_ref().is_some_and(|rows| Arc::strong_count(rows) == 1) {
                            run.spawned = false;
                        }
                    }
                }
            }
        }
    }

    fn save(&self, _mode: SaveMode) -> Result<OpState> {
        let runs: Vec<_> = self.runs.iter().map(|r| (&r.position, r.asked, r.handed)).collect();
        OpState::new("parallel_read")
            .with("runs", runs)?
            .with("next", self.reader.position()?)?
            .with("described_all", self.described_all)?
            .with("described_rows", self.described_rows)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let state = state.expect("parallel_read")?;
        let runs: Vec<(ReaderPosition, Option<usize>, usize)> = state.get("runs")?;
        self.budget.release(self.runs.iter().map(|r| r.reserved).sum());
        self.runs.clear();
        for (position, asked, handed) in runs {
            self.reader.seek(&position)?;
            let seq = self.next_seq;
            self.next_seq += 1;
            let (rows, made) = match self.describe(asked) {
                Ok(Some(rows)) => (Some(rows), None),
                Ok(None) => (None, Some(VecDeque::new())),
                Err(e) => (None, Some(VecDeque::from([Err(e)]))),
            };
            let made = made.map(|m| m.into_iter().skip(handed).collect());
            self.runs.push_back(Run { seq, position, asked, handed, rows, spawned: false, made, reserved: 0 });
        }
        self.reader.seek(&state.get::<ReaderPosition>("next")?)?;
        self.described_all = state.get("described_all")?;
        self.described_rows = state.get("described_rows")?;
        Ok(())
    }
}

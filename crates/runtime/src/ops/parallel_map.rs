//! Parallel `map` and `filter` (`num_parallel_calls`), and the map half of a parallel
//! `map_and_batch` or `batch`: the input is cut into tasks that run on the pipeline's
//! thread pool while the consumer takes finished results.
//!
//! - **Tasks.** A function called per element gets tasks of about `rows / parallelism`
//!   rows, so even one chunk keeps every worker busy; a columnar function gets whole chunks,
//!   as many as fit in about [`TASK_WORK`] of work at the recent rate of finished tasks
//!   (`Recent`; at most [`TASK_CHUNKS`], and only while the grown task fits the budget):
//!   a task is handed between threads twice, which on a cheap function over busy cores
//!   (w4's stage: 35 µs a chunk) is a noticeable part of its work. Each chunk of such a
//!   task is a call of its own, with no copy, and a panic loses only the rest of its
//!   chunk. A chunk whose output would exceed [`TASK_BYTES`] (at the mean output per row
//!   of the tasks finished so far, or its own bytes per row before any) is cut into equal
//!   parts instead, a task each, but none under a task's work at the rate seen so far:
//!   a parse that turns 300-byte records into 800 bytes of int64 tokens a row would
//!   otherwise hand on 6.5 MB chunks, which every operator above then holds, copies and
//!   frees whole.
//!   With a fixed task size (a batch size), a task gathers exactly that many rows across
//!   chunk boundaries, so each worker produces one whole batch's rows in one allocation and
//!   the batch above wraps them without a copy (tf.data's `map_and_batch`).
//! - **Input made on the workers.** Where the input describes its chunks rather than making
//!   them ([`Operator::defers`]: a `range`), tasks carry the descriptions and each worker
//!   makes its rows where it computes on them.
//! - **Calls in flight.** At most `parallelism` tasks run at once, as `num_parallel_calls`
//!   promises. Tasks dispatched while every call is busy are staged, and the worker that
//!   finishes a task runs the next staged one itself, so a call does not sit idle until the
//!   consumer thread wakes up to dispatch (two thread wake-ups per task, which on cheap
//!   functions and busy cores cost as much as the work: on w4, 2 calls on 2 cores ran at
//!   0.89 of 4 calls without staging, 0.98–1.00 with it). A finished task also wakes the
//!   consumer, even while it waits for an earlier result, to stage more input. Only short
//!   tasks are staged ([`STAGE_TASKS_UNDER`] of work on average): a long task's wake-up is
//!   a small part of it, and staged tasks hold their input early (with large elements under
//!   glibc's malloc that cost 100 MiB of peak RSS over a 228 MiB budget).
//! - **Order.** Deterministic mode numbers tasks and hands results out in input order;
//!   at most `2 × parallelism` tasks are outstanding (running or finished but not handed
//!   out), so one slow element holds back a bounded window, never unbounded memory.
//!   Unordered mode hands results out as they finish, under the same bound, except that
//!   with batch-sized tasks only a whole clean batch may overtake (see `Reorder`): the
//!   batch above groups the rows it gets, and a short or failed task handed out early
//!   would shift every later batch's rows across two tasks.
//! - **Errors.** A worker resumes after a failed element as the sequential map does
//!   (`resume`), so the results, the errors and their order are the sequential ones; a
//!   panic in a worker becomes an error of its task.
//! - **Backpressure.** Tasks are dispatched when the consumer pulls (no thread of its own):
//!   nothing is read ahead beyond the window. The RAM budget holds finished results and
//!   running tasks: a task reserves, when dispatched, its input rows' bytes plus the output
//!   expected of them (the largest output per input row a task has given so far, or as much
//!   as the input before any task finished), and its worker swaps that estimate for the
//!   output's bytes when it ends. A task is dispatched only if its estimate fits, except
//!   when nothing is outstanding, so that the map makes progress under any budget.
//! - **Checkpoints.** A save waits for running tasks, then stores the unread results and
//!   the undispatched input rows with the input's state. In deterministic symbolic mode,
//!   once recording, it stores instead the input's state before the oldest input chunk not
//!   fully handed out and the rows of it handed out; a restore rewinds and replays.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::budget::{slice_bytes, MemoryBudget};
use crate::cancel::{Cancel, Wake};
use crate::checkpoint::replay::skip_rows;
use crate::checkpoint::saved_error::SavedError;
use crate::checkpoint::{OpState, SaveMode};
use crate::kernels::function::ChunkFn;
use crate::metrics::{Knob, OpStats};
use crate::operator::{BoxOperator, Deferred, Operator};
use crate::pool::ThreadPool;
use crate::rows::concat;
use crate::thread_cpu::thread_cpu_time;

/// How a parallel map cuts its input into tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSize {
    /// About `rows / parallelism` rows of one chunk (a function called per element).
    Split,
    /// One input chunk per task (a columnar function).
    Chunk,
    /// Exactly this many rows, gathered across chunks (the last task may be shorter).
    Rows(usize),
}

/// What a map knows of its output rows' size before any task has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputSize {
    /// Nothing said (a map built outside `build`): tasks are cut by their input.
    Unstated,
    /// Every row has these bytes (fixed-size fields).
    Fixed(u64),
    /// The size varies: learnt from the first task, which runs alone.
    Variable,
}

/// One result of a task: an output chunk (none when a filter kept nothing) or an error,
/// and how many of the task's input rows it accounts for.
struct Segment {
    result: Result<Option<RecordBatch>>,
    end: usize,
    bytes: u64,
}

impl Segment {
    fn new(result: Result<Option<RecordBatch>>, end: usize) -> Self {
        let bytes = match &result {
            Ok(Some(c)) => c.get_array_memory_size() as u64,
            _ => 0,
        };
        Segment { result, end, bytes }
    }
}

/// Input rows of a task: a chunk, or a chunk its input only described, which the worker
/// makes ([`Operator::next_deferred`]: a `range`, whose values are cheaper to compute on the
/// worker than to write on the consumer's thread and read on another core).
#[derive(Clone)]
enum Input {
    Chunk(RecordBatch),
    Deferred(Arc<dyn Deferred>),
}

impl Input {
    fn num_rows(&self) -> usize {
        match self {
            Input::Chunk(c) => c.num_rows(),
            Input::Deferred(d) => d.num_rows(),
        }
    }

    fn slice(&self, offset: usize, len: usize) -> Input {
        match self {
            Input::Chunk(c) => Input::Chunk(c.slice(offset, len)),
            Input::Deferred(d) => Input::Deferred(d.slice(offset, len)),
        }
    }

    /// The rows' own bytes ([`slice_bytes`]), made or to be made.
    fn bytes(&self) -> u64 {
        match self {
            Input::Chunk(c) => slice_bytes(c),
            Input::Deferred(d) => d.bytes(),
        }
    }

    fn make(self) -> Result<RecordBatch> {
        match self {
            Input::Chunk(c) => Ok(c),
            Input::Deferred(d) => d.make(),
        }
    }
}

/// A pulled input item: a chunk's rows (0 for an input error), and, when recording, the
/// input's state before the pull plus the rows of the pulled chunk that precede this item
/// (non-zero when the item is the rest of a replayed chunk).
struct InputItem {
    rows: usize,
    before: Option<(OpState, usize)>,
}

/// Where in the input a task starts: an index into the items pulled so far and a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    item: u64,
    row: usize,
}

struct Task {
    start: Pos,
    segments: VecDeque<Segment>,
    /// Input rows of the task accounted for by the segments handed out.
    delivered: usize,
}

#[derive(Default)]
struct Finished {
    tasks: BTreeMap<u64, Vec<Segment>>,
    running: usize,
    /// Tasks dispatched while every call was busy: the next worker to finish runs one
    /// instead of returning to the pool, so no call waits for the consumer to wake up.
    staged: VecDeque<Job>,
    /// The most output bytes per input row a task has given (none before the first ends):
    /// what the budget reserves for a task, so it errs high.
    out_per_row: Option<u64>,
    /// The output bytes and input rows of the tasks that finished without an error: their
    /// mean output per row is what tasks are cut by (one task of long rows would make
    /// every later task small if its rows counted as the rule).
    out_bytes: u64,
    out_rows: u64,
    /// Tasks finished so far.
    completed: u64,
    /// What the recent tasks took.
    recent: Recent,
}

/// What a map's recent tasks took: each finished task adds its input rows and its work
/// after the sums so far lose a quarter, so that the rate follows what tasks take now. A
/// process's first tasks also compile their function's kernel (w4's stage: about 1.3 ms on
/// each worker, against 40 µs a task after); summed with the same weight as the rest, that
/// kept a fresh w4 pass's tasks at one to three chunks to its end.
#[derive(Debug, Default, Clone, Copy)]
struct Recent {
    /// Tasks, in [`ONE_TASK`]ths.
    tasks: u64,
    rows: u64,
    work: Duration,
}

/// One task in [`Recent::tasks`], which decays in fractions of one.
const ONE_TASK: u64 = 1 << 10;

impl Recent {
    fn add(&mut self, rows: usize, work: Duration) {
        self.tasks = self.tasks - self.tasks / 4 + ONE_TASK;
        self.rows = self.rows - self.rows / 4 + rows as u64;
        self.work = self.work - self.work / 4 + work;
    }

    /// Input rows a columnar task aims at (0, so one chunk, before any task finished).
    fn rows_for(&self, target: Duration) -> usize {
        rows_for(self.work, self.rows, target)
    }

    /// Whether tasks are staged: only once some have finished, and only while they
    /// average under `under`.
    fn stages(&self, under: Duration) -> bool {
        self.tasks > 0 && self.work.as_nanos() * u128::from(ONE_TASK) < under.as_nanos() * u128::from(self.tasks)
    }
}

#[derive(Default)]
struct Completions {
    finished: Mutex<Finished>,
    changed: Condvar,
}

impl Wake for Completions {
    fn wake(&self) {
        let _finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }
}

/// A dispatched task: its sequence number, input rows, and the bytes reserved for it.
struct Job {
    seq: u64,
    rows: Vec<Input>,
    estimate: u64,
}

/// What a worker needs to run a map's tasks.
struct Runner {
    func: ChunkFn,
    /// A task's rows are one output (a batch-sized task's batch), not one output a chunk.
    whole: bool,
    completions: Arc<Completions>,
    stats: Arc<OpStats>,
    budget: Arc<MemoryBudget>,
    /// Once set, staged tasks are left for the operator's drop to discard.
    cancel: Arc<Cancel>,
}

impl Runner {
    /// Runs `job`, then the staged tasks one after another while there are any.
    fn run(&self, mut job: Job) {
        loop {
            let Job { seq, rows, estimate } = job;
            let n: usize = rows.iter().map(Input::num_rows).sum();
            let begin = Instant::now();
            let cpu = thread_cpu_time();
            // The input goes (inside) with the estimate that covered it; the output stays
            // reserved until it is handed out.
            let segments = run_task(&self.func, rows, self.whole);
            let took = begin.elapsed();
            self.stats.add_work(took);
            // Where the platform cannot tell, a task counts as computing throughout.
            self.stats.add_cpu(match (cpu, thread_cpu_time()) {
                (Some(before), Some(after)) => after.saturating_sub(before),
                _ => took,
            });
            let out: u64 = segments.iter().map(|s| s.bytes).sum();
            self.budget.swap(estimate, out);
            let mut finished = self.completions.finished.lock().expect("map results");
            // A task with an error gave less than its rows' output: it says nothing of the next.
            if n > 0 && segments.iter().all(|s| s.result.is_ok()) {
                // The rows' own bytes: an output that shares its input's buffers (a filter
                // keeping every row) would otherwise charge the whole chunk to few rows.
                let own: u64 = segments.iter().filter_map(|s| s.result.as_ref().ok()?.as_ref()).map(slice_bytes).sum();
                let per_row = own.div_ceil(n as u64);
                finished.out_per_row = Some(finished.out_per_row.map_or(per_row, |p| p.max(per_row)));
                finished.out_bytes += own;
                finished.out_rows += n as u64;
            }
            finished.tasks.insert(seq, segments);
            finished.completed += 1;
            finished.recent.add(n, took);
            let next = if self.cancel.is_cancelled() { None } else { finished.staged.pop_front() };
            if next.is_none() {
                finished.running -= 1;
            }
            drop(finished);
            self.completions.changed.notify_all();
            match next {
                Some(next) => job = next,
                None => return,
            }
        }
    }
}

/// The mean work per task under which tasks are staged: a few thread wake-ups (tens of
/// microseconds each on busy cores) are then a large part of a task.
pub const STAGE_TASKS_UNDER: Duration = Duration::from_micros(250);

/// The work a columnar task is given: enough chunks of a cheap function that its two
/// hand-offs between threads are a small part of it.
pub const TASK_WORK: Duration = Duration::from_micros(200);

/// The most output a columnar task is expected to give: a chunk whose output would be
/// larger is cut into equal parts, each a task of its own.
///
/// Why 1 MiB: chunks that size stay in a core's cache between the map and the operator
/// above, and the allocator reuses their freed buffers, where multi-megabyte ones come from
/// fresh memory the kernel must fault in and zero. On w6 (`parse_example` of token lists,
/// 800 output bytes a row, then bucketing) a fresh process ran 122 → 88 ms with 24,900 →
/// 5,700 page faults (medians of 11 alternating passes); 256 KiB parts ran at 120 ms (a task
/// per 330 records) and 2 MiB ones between the two. w2, w4 and w1 did not change.
pub const TASK_BYTES: u64 = 1 << 20;

/// The most chunks a columnar task gathers: enough that w4's stage (8,192-row chunks)
/// reaches [`TASK_WORK`], few enough that a function the rate underestimates, or a slow
/// input read before the task starts, delays little.
pub const TASK_CHUNKS: usize = 8;

/// Input rows a columnar task aims at, given `rows` rows finished in `work` (0, so one
/// chunk, before any).
fn rows_for(work: Duration, rows: u64, target: Duration) -> usize {
    if rows == 0 {
        return 0;
    }
    // At least a nanosecond a row.
    let work = work.as_nanos().max(u128::from(rows));
    usize::try_from(target.as_nanos() * u128::from(rows) / work).unwrap_or(usize::MAX)
}

/// A parallel map (see the module documentation).
pub struct ParallelMapOp {
    input: BoxOperator,
    runner: Arc<Runner>,
    pool: Arc<ThreadPool>,
    knob: Arc<Knob>,
    size: TaskSize,
    ordered: bool,
    stats: Arc<OpStats>,
    budget: Arc<MemoryBudget>,
    completions: Arc<Completions>,
    /// Input rows pulled but not dispatched, each with its position.
    undispatched: VecDeque<(Pos, Result<Input>)>,
    /// The input describes its chunks, and workers make them ([`Input::Deferred`]).
    deferred: bool,
    /// Tasks finished when `top_up` last looked.
    completed_seen: u64,
    /// The mean work per task under which tasks are staged ([`STAGE_TASKS_UNDER`]).
    stage_under: Duration,
    /// The work a columnar task is given ([`TASK_WORK`]).
    task_work: Duration,
    /// The output a columnar task is given at most ([`TASK_BYTES`]).
    task_bytes: u64,
    input_done: bool,
    /// Items pulled and not yet fully handed out, from index `first_item`.
    items: VecDeque<InputItem>,
    first_item: u64,
    next_item: u64,
    /// Start positions of dispatched tasks not yet handed out, by sequence number.
    starts: BTreeMap<u64, Pos>,
    next_seq: u64,
    next_out: u64,
    /// The task being handed out.
    current: Option<Task>,
    /// Batch-sized tasks: the rows handed out since the last error, modulo the batch size
    /// (where the batch above is within its current batch).
    batch_offset: usize,
    /// Results restored from a checkpoint, handed out before anything else.
    restored: VecDeque<Result<RecordBatch>>,
    tracking: std::cell::Cell<bool>,
    /// The estimate of the last task dispatched: the next one's, until its rows are pulled.
    last_estimate: u64,
    /// What is known of the output rows' size from their spec.
    output: OutputSize,
}

impl ParallelMapOp {
    /// `func` over `input` on `pool`, with `knob` calls at once, cutting tasks by `size`;
    /// results in input order when `ordered`. It starts no task once `cancel` is set.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input: BoxOperator,
        func: ChunkFn,
        pool: Arc<ThreadPool>,
        knob: Arc<Knob>,
        size: TaskSize,
        ordered: bool,
        stats: Arc<OpStats>,
        budget: Arc<MemoryBudget>,
        cancel: Arc<Cancel>,
    ) -> Self {
        stats.asynchronous.store(true, std::sync::atomic::Ordering::Relaxed);
        let completions = Arc::<Completions>::default();
        cancel.register(Arc::downgrade(&completions) as std::sync::Weak<dyn Wake>);
        let whole = matches!(size, TaskSize::Rows(_));
        let runner = Arc::new(Runner {
            func,
            whole,
            completions: completions.clone(),
            stats: stats.clone(),
            budget: budget.clone(),
            cancel,
        });
        let deferred = input.defers();
        ParallelMapOp {
            input,
            runner,
            pool,
            knob,
            size,
            ordered,
            stats,
            budget,
            completions,
            deferred,
            undispatched: VecDeque::new(),
            completed_seen: 0,
            stage_under: STAGE_TASKS_UNDER,
            task_work: TASK_WORK,
            task_bytes: TASK_BYTES,
            input_done: false,
            items: VecDeque::new(),
            first_item: 0,
            next_item: 0,
            starts: BTreeMap::new(),
            next_seq: 0,
            next_out: 0,
            current: None,
            batch_offset: 0,
            restored: VecDeque::new(),
            tracking: std::cell::Cell::new(false),
            last_estimate: 0,
            output: OutputSize::Unstated,
        }
    }

    fn parallelism(&self) -> usize {
        self.knob.get().max(1)
    }

    fn outstanding(&self) -> usize {
        self.starts.len()
    }

    /// Whether the first task runs alone: the output's size is not known from its spec, and
    /// no task has finished yet to tell it (restored results and input errors say nothing
    /// of what a task makes).
    fn learning(&self) -> bool {
        self.output == OutputSize::Variable && self.completions.finished.lock().expect("map results").completed == 0
    }

    /// The same map told what its output rows are from their spec: `Some` bytes a row
    /// when every field has a fixed size, `None` when their size varies. Tasks are then
    /// cut and reserved by output from the first, and where the size varies, the first task
    /// runs alone and one row long.
    pub fn with_output_row_bytes(mut self, bytes: Option<u64>) -> Self {
        self.output = bytes.map_or(OutputSize::Variable, OutputSize::Fixed);
        self
    }

    /// Pulls the input once: its chunk or error becomes an undispatched item.
    fn pull(&mut self) -> Result<()> {
        let before = if self.tracking.get() { self.input.save(SaveMode::Symbolic).ok().map(|s| (s, 0)) } else { None };
        let pos = Pos { item: self.next_item, row: 0 };
        let pulled = match self.deferred {
            true => self.input.next_deferred().map(|d| d.map(Input::Deferred)),
            false => self.input.next_chunk().map(|c| c.map(Input::Chunk)),
        };
        let item = match pulled {
            Ok(None) => {
                self.input_done = true;
                return Ok(());
            }
            Ok(Some(input)) => (input.num_rows(), Ok(input)),
            Err(e) => (0, Err(e)),
        };
        self.items.push_back(InputItem { rows: item.0, before });
        self.next_item += 1;
        self.undispatched.push_back((pos, item.1));
        Ok(())
    }

    /// The next undispatched input item, pulling the input when none is left; `None` at
    /// the end of the input.
    fn next_undispatched(&mut self) -> Result<Option<(Pos, Result<Input>)>> {
        if self.undispatched.is_empty() && !self.input_done {
            self.pull()?;
        }
        Ok(self.undispatched.pop_front())
    }

    /// The most tasks not yet handed out: the reorder window behind a slow element.
    fn window(&self) -> usize {
        2 * self.parallelism()
    }

    /// Whether another task may be dispatched: the window has room, and a call is free or
    /// the tasks are short enough to stage. At most `parallelism` of the tasks run at once
    /// (the calls in flight, as `num_parallel_calls` promises); the others wait staged, so
    /// that a worker finishing one goes straight on to the next.
    fn has_room(&self) -> bool {
        if self.outstanding() >= self.window() {
            return false;
        }
        let finished = self.completions.finished.lock().expect("map results");
        finished.recent.stages(self.stage_under) || finished.running < self.parallelism()
    }

    /// Dispatches tasks while the calls in flight, the window and the budget allow.
    fn top_up(&mut self) -> Result<()> {
        // A task finishing from here on frees a call this pass may not see: `wait_next`
        // comes back for it.
        self.completed_seen = self.completions.finished.lock().expect("map results").completed;
        while self.has_room()
            && (self.outstanding() == 0 || (!self.learning() && self.budget.fits(self.next_estimate())))
        {
            let Some((start, first)) = self.next_undispatched()? else {
                return Ok(());
            };
            let rows = match first {
                Err(e) => {
                    self.finish_now(start, vec![Segment::new(Err(e), 0)]);
                    continue;
                }
                Ok(chunk) => self.gather(start, chunk)?,
            };
            self.dispatch(start, rows);
        }
        // Every call busy: read the next input chunk now, on this thread, while they run, so
        // that reading overlaps them and a freed call finds its rows waiting. One chunk only,
        // within the window and the budget.
        let window = self.window();
        if self.undispatched.is_empty()
            && !self.input_done
            && self.outstanding() < window
            && self.budget.fits(self.last_estimate)
        {
            self.pull()?;
        }
        Ok(())
    }

    /// The input rows of a task starting at `start` with `chunk` (more than its rows when
    /// a fixed-size task reaches into the next chunks; a columnar task's first chunk, or
    /// the part of it whose output fits [`TASK_BYTES`], which [`gather`](Self::gather) may
    /// grow).
    fn task_rows(&self, start: Pos, chunk: &Input) -> usize {
        let n = chunk.num_rows();
        // Equal parts of the chunk as pulled, not of what is left of it: cutting the rest
        // again each time would leave ever smaller tasks.
        let pulled = || {
            let index = start.item.checked_sub(self.first_item).and_then(|i| usize::try_from(i).ok());
            index.and_then(|i| self.items.get(i)).map_or(n, |item| item.rows)
        };
        match self.size {
            TaskSize::Chunk => {
                let pulled = pulled();
                let (work_rows, per_row) = self.seen(chunk);
                let bytes = per_row.saturating_mul(pulled as u64);
                let parts = usize::try_from(bytes.div_ceil(self.task_bytes)).unwrap_or(usize::MAX).max(1);
                // Never parts so small that their hand-offs outweigh their work: rows whose
                // output is large but cheap to make stay at least a task's work together.
                pulled.div_ceil(parts).max(work_rows).clamp(1, n.max(1))
            }
            TaskSize::Split => {
                let even = pulled().div_ceil(self.parallelism()).max(1);
                // Cut by output too, at most about [`TASK_BYTES`] a task at the mean output
                // per row so far or the spec's; one row while a variable size is unknown: the
                // input's bytes say nothing of what a function makes of them (8-byte `range`
                // values became 4 MiB elements, and tasks of 100 rows each held 400 MB
                // before the first could be counted).
                let finished = self.completions.finished.lock().expect("map results");
                let per_row = match (finished.out_rows, self.output) {
                    (0, OutputSize::Fixed(bytes)) => bytes,
                    (0, OutputSize::Variable) => return 1,
                    (0, OutputSize::Unstated) => return even,
                    (rows, _) => finished.out_bytes.div_ceil(rows),
                };
                even.min(usize::try_from(self.task_bytes / per_row.max(1)).unwrap_or(usize::MAX).max(1))
            }
            TaskSize::Rows(r) => r.max(1),
        }
    }

    /// What the finished tasks say of a task starting with `chunk`: the input rows that
    /// make a task's work ([`rows_for`]), and the output a row is expected to give, to cut
    /// tasks by (the mean per row so far, or the chunk's own bytes per row before any).
    fn seen(&self, chunk: &Input) -> (usize, u64) {
        let finished = self.completions.finished.lock().expect("map results");
        let per_row = match (finished.out_rows, self.output) {
            // Before a task finished, the spec's output size where it is fixed: a chunk of
            // file names that become decoded images is small in and large out, and one
            // task over all of it would run on one thread.
            (0, OutputSize::Fixed(bytes)) => chunk.bytes().div_ceil(chunk.num_rows().max(1) as u64).max(bytes),
            (0, _) => chunk.bytes().div_ceil(chunk.num_rows().max(1) as u64),
            (rows, _) => finished.out_bytes.div_ceil(rows),
        };
        (finished.recent.rows_for(self.task_work), per_row)
    }

    /// What a task over `rows` input rows of `input` bytes holds while it runs: its input
    /// and the output expected of it.
    fn estimate(&self, input: u64, rows: usize) -> u64 {
        let per_row = self.completions.finished.lock().expect("map results").out_per_row;
        let per_row = per_row.or(match self.output {
            OutputSize::Fixed(bytes) => Some(bytes),
            _ => None,
        });
        input + per_row.map_or(input, |p| p.saturating_mul(rows as u64))
    }

    /// The estimate of the next task, before its rows are cut from the input: from the
    /// chunk at the front of the undispatched input, or the last task's when it must be
    /// pulled first (so that nothing is pulled that the budget would not let run).
    fn next_estimate(&self) -> u64 {
        match self.undispatched.front() {
            Some((start, Ok(chunk))) => {
                let n = chunk.num_rows();
                let rows = self.task_rows(*start, chunk);
                let take = rows.min(n);
                // A fixed-size task reaching into later chunks is taken to have rows like these.
                let input = chunk.slice(0, take).bytes() as u128 * rows as u128 / take.max(1) as u128;
                self.estimate(u64::try_from(input).unwrap_or(u64::MAX), rows)
            }
            Some((_, Err(_))) => 0,
            None => self.last_estimate,
        }
    }

    /// The rows of the task starting with `chunk`: part of it, or more chunks (fixed size,
    /// or whole chunks for a columnar function).
    fn gather(&mut self, start: Pos, chunk: Input) -> Result<Vec<Input>> {
        let n = chunk.num_rows();
        let take = self.task_rows(start, &chunk);
        if take < n {
            let rest = Pos { item: start.item, row: start.row + take };
            self.undispatched.push_front((rest, Ok(chunk.slice(take, n - take))));
            return Ok(vec![chunk.slice(0, take)]);
        }
        let mut rows = vec![chunk];
        let mut have = n;
        if let TaskSize::Chunk = self.size {
            // Whole chunks while they fit the task's work, its output, its chunk count and
            // the budget, up to an input error or the end.
            let (want, per_row) = self.seen(&rows[0]);
            let mut bytes = rows[0].bytes();
            while have < want && rows.len() < TASK_CHUNKS {
                match self.next_undispatched()? {
                    Some((_, Ok(next)))
                        if have + next.num_rows() <= want
                            && per_row.saturating_mul((have + next.num_rows()) as u64) <= self.task_bytes
                            && self.budget.fits(self.estimate(bytes + next.bytes(), have + next.num_rows())) =>
                    {
                        have += next.num_rows();
                        bytes += next.bytes();
                        rows.push(next);
                    }
                    Some(other) => {
                        self.undispatched.push_front(other);
                        break;
                    }
                    None => break,
                }
            }
        }
        if let TaskSize::Rows(want) = self.size {
            // A batch-sized task continues into the next chunks, up to an input error.
            while have < want {
                match self.next_undispatched()? {
                    Some((pos, Ok(next))) => {
                        let m = next.num_rows();
                        if have + m > want {
                            let k = want - have;
                            let rest = Pos { item: pos.item, row: pos.row + k };
                            self.undispatched.push_front((rest, Ok(next.slice(k, m - k))));
                            rows.push(next.slice(0, k));
                            have = want;
                        } else {
                            rows.push(next);
                            have += m;
                        }
                    }
                    Some(error) => {
                        self.undispatched.push_front(error);
                        break;
                    }
                    None => break,
                }
            }
        }
        Ok(rows)
    }

    fn finish_now(&mut self, start: Pos, segments: Vec<Segment>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.starts.insert(seq, start);
        self.completions.finished.lock().expect("map results").tasks.insert(seq, segments);
    }

    /// Starts a task over `rows` on the pool, or stages it for the next worker to finish
    /// when every call is busy.
    fn dispatch(&mut self, start: Pos, rows: Vec<Input>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.starts.insert(seq, start);
        let n: usize = rows.iter().map(|r| r.num_rows()).sum();
        let estimate = self.estimate(rows.iter().map(Input::bytes).sum(), n);
        self.last_estimate = estimate;
        self.budget.reserve(estimate);
        let job = Job { seq, rows, estimate };
        let mut finished = self.completions.finished.lock().expect("map results");
        if finished.running >= self.parallelism() {
            finished.staged.push_back(job);
            return;
        }
        finished.running += 1;
        drop(finished);
        let runner = self.runner.clone();
        self.pool.spawn(move || runner.run(job));
    }

    /// Waits for the next task to hand out: the next in order, or any finished one.
    /// Returns `None` as soon as a finished task frees a call while there is input left to
    /// dispatch, so that the caller can start another instead of leaving a worker idle.
    fn wait_next(&mut self) -> Option<(u64, Vec<Segment>)> {
        let more_input = !(self.undispatched.is_empty() && self.input_done);
        let window = self.window();
        let mut finished = self.completions.finished.lock().expect("map results");
        loop {
            let next = if self.ordered {
                Some(self.next_out)
            } else {
                next_unordered(&finished.tasks, self.starts.keys().next().copied(), self.reorder())
            };
            if let Some(found) = next.and_then(|seq| finished.tasks.remove(&seq).map(|s| (seq, s))) {
                return Some(found);
            }
            if finished.running == 0 {
                return None;
            }
            // A task finished since `top_up` last dispatched: refill while input is left.
            // (Counted from `top_up`, not from here: a task finishing in between would
            // otherwise leave its call idle while this waits for an earlier one.)
            let freed = finished.completed > self.completed_seen;
            if (freed && more_input && self.starts.len() < window) || self.runner.cancel.is_cancelled() {
                return None;
            }
            finished = self.completions.changed.wait(finished).expect("map results");
        }
    }

    /// Hands out the next result of the current task, if it has one left.
    fn hand_out(&mut self) -> Option<Result<Option<RecordBatch>>> {
        let task = self.current.as_mut()?;
        let Some(segment) = task.segments.pop_front() else {
            self.current = None;
            self.forget_items();
            return None;
        };
        task.delivered = segment.end;
        self.budget.release(segment.bytes);
        if let TaskSize::Rows(batch) = self.size {
            self.batch_offset = match &segment.result {
                Ok(chunk) => (self.batch_offset + chunk.as_ref().map_or(0, |c| c.num_rows())) % batch.max(1),
                // The batch above discards the rows it gathered before an error.
                Err(_) => 0,
            };
        }
        Some(segment.result)
    }

    /// How far the finished tasks may be handed out of order (unordered mode).
    fn reorder(&self) -> Reorder {
        match self.size {
            TaskSize::Rows(batch) if self.batch_offset == 0 => Reorder::WholeBatches(batch.max(1)),
            TaskSize::Rows(_) => Reorder::InOrder,
            TaskSize::Chunk | TaskSize::Split => Reorder::Any,
        }
    }

    /// Waits until no task is running (before a save).
    fn quiesce(&self) {
        let mut finished = self.completions.finished.lock().expect("map results");
        while finished.running > 0 {
            finished = self.completions.changed.wait(finished).expect("map results");
        }
    }

    /// A segment of the current task was handed out: forget input items now behind.
    fn forget_items(&mut self) {
        let oldest = match (&self.current, self.starts.first_key_value()) {
            (Some(task), _) => task.start.item,
            (None, Some((_, pos))) => pos.item,
            (None, None) => self.undispatched.front().map_or(self.next_item, |(p, _)| p.item),
        };
        while self.first_item < oldest {
            self.items.pop_front();
            self.first_item += 1;
        }
    }

    /// In symbolic mode, deterministic and recording: where the unread input starts, as
    /// "the input's state before item i, then skip r rows".
    fn replay_point(&self) -> Option<(OpState, usize)> {
        if !self.ordered || !self.restored.is_empty() {
            return None;
        }
        let pos = match &self.current {
            Some(task) => advance(&self.items, self.first_item, task.start, task.delivered)?,
            None => match self.starts.first_key_value() {
                Some((_, pos)) => *pos,
                None => *self.undispatched.front().map(|(p, _)| p)?,
            },
        };
        let item = self.items.get(usize::try_from(pos.item.checked_sub(self.first_item)?).ok()?)?;
        // An input error is replayed as data: the replay checks that rows come back.
        let (before, skip) = item.before.as_ref().filter(|_| item.rows > 0)?;
        Some((before.clone(), skip + pos.row))
    }
}

/// How far an unordered map may hand finished tasks out of input order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reorder {
    /// Any finished task: nothing above groups rows by task.
    Any,
    /// The oldest outstanding task, or a task of exactly this many input rows whose function
    /// gave one clean result: a whole batch for the batch above, which is between batches.
    WholeBatches(usize),
    /// Only the oldest outstanding task: the batch above holds part of a batch, which the
    /// rows that follow in input order must complete.
    InOrder,
}

/// The finished task an unordered map hands out next under `reorder`, given the oldest
/// outstanding task; `None` when none may go yet.
fn next_unordered(tasks: &BTreeMap<u64, Vec<Segment>>, oldest: Option<u64>, reorder: Reorder) -> Option<u64> {
    let whole = |segments: &[Segment], batch: usize| match segments {
        [one] => one.end == batch && one.result.is_ok(),
        _ => false,
    };
    match reorder {
        Reorder::Any => tasks.keys().next().copied(),
        Reorder::InOrder => oldest.filter(|seq| tasks.contains_key(seq)),
        Reorder::WholeBatches(batch) => {
            tasks.iter().find(|(seq, segments)| Some(**seq) == oldest || whole(segments, batch)).map(|(seq, _)| *seq)
        }
    }
}

/// `pos` moved forward by `rows` rows over the items (which hold no error between).
fn advance(items: &VecDeque<InputItem>, first: u64, mut pos: Pos, mut rows: usize) -> Option<Pos> {
    loop {
        let item = items.get(usize::try_from(pos.item.checked_sub(first)?).ok()?)?;
        let left = item.rows - pos.row;
        if rows < left {
            return Some(Pos { item: pos.item, row: pos.row + rows });
        }
        rows -= left;
        pos = Pos { item: pos.item + 1, row: 0 };
        if rows == 0 {
            return Some(pos);
        }
    }
}

/// Runs `func` over a task's rows, resuming after each failed element: over the rows
/// joined into one chunk when `whole`, else chunk by chunk. Described rows are made here, on
/// the worker. A panic is an error for the rest of its chunk, as when a task was one chunk:
/// the chunks before it keep their results.
fn run_task(func: &ChunkFn, rows: Vec<Input>, whole: bool) -> Vec<Segment> {
    let mut segments = Vec::new();
    if whole {
        let n = rows.iter().map(Input::num_rows).sum();
        let made: Result<Vec<RecordBatch>> = rows.into_iter().map(Input::make).collect();
        match made.and_then(|made| concat(&made)) {
            Ok(Some(chunk)) => guarded(func, &chunk, 0, &mut segments),
            Ok(None) => {}
            Err(e) => segments.push(Segment::new(Err(e), n)),
        }
        return segments;
    }
    let mut base = 0;
    for input in rows {
        let n = input.num_rows();
        match input.make() {
            Ok(chunk) => guarded(func, &chunk, base, &mut segments),
            Err(e) => segments.push(Segment::new(Err(e), base + n)),
        }
        base += n;
    }
    segments
}

/// [`run_chunk`], with a panic in `func` turned into an error ending at the chunk's end.
fn guarded(func: &ChunkFn, chunk: &RecordBatch, base: usize, segments: &mut Vec<Segment>) {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_chunk(func, chunk, base, segments)));
    if let Err(panic) = run {
        let error = Error::execution("map", format!("a worker panicked: {panic:?}"));
        segments.push(Segment::new(Err(error), base + chunk.num_rows()));
    }
}

/// Runs `func` over `chunk`, which starts `base` rows into its task, resuming after each
/// failed element; appends the results.
fn run_chunk(func: &ChunkFn, chunk: &RecordBatch, base: usize, segments: &mut Vec<Segment>) {
    let mut from = 0;
    let n = chunk.num_rows();
    while from < n {
        let rest = chunk.slice(from, n - from);
        match func(&rest) {
            Ok(out) => {
                segments.push(Segment::new(Ok(Some(out)), base + n));
                return;
            }
            Err(failure) => match failure.locate(&rest, &**func) {
                Ok((done, row, error)) => {
                    segments.push(Segment::new(concat(&done), base + from + row));
                    segments.push(Segment::new(Err(error), base + from + row + 1));
                    from += row + 1;
                }
                Err(error) => {
                    segments.push(Segment::new(Err(error), base + n));
                    return;
                }
            },
        }
    }
}

impl Operator for ParallelMapOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(result) = self.restored.pop_front() {
            return result.map(Some);
        }
        loop {
            while let Some(result) = self.hand_out() {
                match result {
                    Ok(Some(chunk)) if chunk.num_rows() > 0 => return Ok(Some(chunk)),
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
            self.runner.cancel.check()?;
            self.top_up()?;
            match self.wait_next() {
                Some((seq, segments)) => {
                    let start = self.starts.remove(&seq).ok_or_else(|| Error::execution("map", "a task was lost"))?;
                    if self.ordered {
                        self.next_out += 1;
                    }
                    self.stats.sample_occupancy(self.outstanding() as u64);
                    self.current = Some(Task { start, segments: segments.into(), delivered: 0 });
                }
                None if self.outstanding() == 0 && self.undispatched.is_empty() && self.input_done => return Ok(None),
                None => {}
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        self.quiesce();
        let state = OpState::new("parallel_map");
        if mode == SaveMode::Symbolic {
            self.tracking.set(true);
            if let Some((before, skip)) = self.replay_point() {
                return Ok(state.with("skip", skip)?.child(before));
            }
        }
        let finished = self.completions.finished.lock().expect("map results");
        let current = self.current.iter().flat_map(|t| t.segments.iter());
        let waiting = finished.tasks.values().flatten();
        // Errors are not `Clone`: a saved error is rebuilt from its saved form.
        let copy = |r: &Result<RecordBatch>| match r {
            Ok(c) => Ok(c.clone()),
            Err(e) => Err(SavedError::from(e).into_error()),
        };
        let computed = current.chain(waiting).filter_map(|s| match &s.result {
            Ok(Some(c)) if c.num_rows() > 0 => Some(Ok(c.clone())),
            Ok(_) => None,
            Err(e) => Some(Err(SavedError::from(e).into_error())),
        });
        let results: Vec<Result<RecordBatch>> = self.restored.iter().map(copy).chain(computed).collect();
        // Described rows are saved made, as any other input rows.
        let undispatched: Vec<Result<RecordBatch>> = (self.undispatched.iter())
            .map(|(_, r)| match r {
                Ok(input) => input.clone().make(),
                Err(e) => Err(SavedError::from(e).into_error()),
            })
            .collect();
        let pending = OpState::new("pending").with_results("items", &undispatched)?;
        Ok(state.with_results("results", &results)?.child(self.input.save(mode)?).child(pending))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("parallel_map")?;
        if state.fields.contains_key("skip") {
            let skip: usize = state.get("skip")?;
            let before = state.take_child()?;
            self.input.restore(before.clone())?;
            self.tracking.set(true);
            if let Some(rest) = skip_rows(|| self.input.next_chunk(), skip)? {
                self.items.push_back(InputItem { rows: rest.num_rows(), before: Some((before, skip)) });
                self.undispatched.push_back((Pos { item: self.next_item, row: 0 }, Ok(Input::Chunk(rest))));
                self.next_item += 1;
            }
            return Ok(());
        }
        self.restored = state.take_results("results")?;
        self.input.restore(state.take_child()?)?;
        let mut pending = state.take_child()?.expect("pending")?;
        for item in pending.take_results::<Vec<_>>("items")? {
            let rows = item.as_ref().map_or(0, |c| c.num_rows());
            self.items.push_back(InputItem { rows, before: None });
            self.undispatched.push_back((Pos { item: self.next_item, row: 0 }, item.map(Input::Chunk)));
            self.next_item += 1;
        }
        Ok(())
    }
}

impl Drop for ParallelMapOp {
    fn drop(&mut self) {
        // Staged tasks never start; running ones swap their estimates for their results, so
        // wait for them; finished results leave the budget.
        let staged = std::mem::take(&mut self.completions.finished.lock().unwrap_or_else(|e| e.into_inner()).staged);
        self.budget.release(staged.iter().map(|job| job.estimate).sum());
        self.quiesce();
        let finished = self.completions.finished.lock().unwrap_or_else(|e| e.into_inner());
        let held: u64 = finished
            .tasks
            .values()
            .flatten()
            .chain(self.current.iter().flat_map(|t| t.segments.iter()))
            .map(|s| s.bytes)
            .sum();
        self.budget.release(held);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Receiver, Sender};

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;

    use super::*;
    use crate::kernels::list_kernels::testing::{int_chunks, int_spec, source};
    use crate::metrics::Param;

    /// A function adding one to `x` in a fresh array, which first says it started on
    /// `entered` and then waits for a word on `go` (or for `go`'s sender to be dropped), so
    /// that a test sees a task while it runs.
    fn gated_add_one() -> (ChunkFn, Receiver<()>, Sender<()>) {
        let (entered_tx, entered_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let (entered_tx, go_rx) = (Mutex::new(entered_tx), Mutex::new(go_rx));
        let f: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = go_rx.lock().unwrap().recv();
            let x = chunk.column(0).as_primitive::<Int64Type>();
            let y = Int64Array::from_iter_values(x.values().iter().map(|v| v + 1));
            Ok(RecordBatch::try_new(chunk.schema(), vec![Arc::new(y)]).unwrap())
        });
        (f, entered_rx, go_tx)
    }

    /// A parallel map of `func` over `chunks` chunks of 1,000 int64 rows (8,000 bytes each),
    /// one chunk a task, `calls` at once, under a budget of `limit` bytes.
    fn map_op(func: ChunkFn, chunks: usize, calls: usize, limit: u64) -> (ParallelMapOp, Arc<MemoryBudget>) {
        let values: Vec<i64> = (0..chunks as i64 * 1000).collect();
        let input = source(int_chunks("x", &values, &vec![1000; chunks]));
        let budget = Arc::new(MemoryBudget::new(limit));
        let mut op = columnar(input, func, calls, budget.clone());
        // However fast the function ran, a task stays one chunk.
        op.task_work = Duration::ZERO;
        (op, budget)
    }

    /// An ordered parallel map of the columnar `func` over `input`, `calls` at once.
    fn columnar(input: BoxOperator, func: ChunkFn, calls: usize, budget: Arc<MemoryBudget>) -> ParallelMapOp {
        let knob = Knob::new(Param::Parallelism, calls, false, 1, calls);
        let pool = Arc::new(ThreadPool::new(calls));
        ParallelMapOp::new(input, func, pool, knob, TaskSize::Chunk, true, Arc::default(), budget, Cancel::new())
    }

    #[test]
    fn columnar_tasks_gather_chunks_for_their_work() {
        let us = Duration::from_micros;
        assert_eq!(rows_for(Duration::ZERO, 0, TASK_WORK), 0, "one chunk before a task finishes");
        // 35 us for 8,192 rows: 200 us is 46,811 rows.
        assert_eq!(rows_for(us(35), 8192, us(200)), 46_811);
        assert_eq!(rows_for(us(35), 8192, Duration::ZERO), 0);
        assert_eq!(rows_for(Duration::ZERO, 8192, us(200)), 200_000, "under a nanosecond a row counts as one");
        assert_eq!(rows_for(Duration::MAX, 1, us(200)), 0, "no overflow");
    }

    /// A parallel map of `func` over `input`, one call at a time (so each task is cut after
    /// the one before finished), each task a chunk or part of one with at most `task_bytes`
    /// of expected output.
    fn one_call(input: BoxOperator, func: ChunkFn, task_bytes: u64) -> ParallelMapOp {
        let mut op = columnar(input, func, 1, Arc::new(MemoryBudget::new(u64::MAX)));
        op.task_work = Duration::ZERO;
        op.task_bytes = task_bytes;
        op
    }

    /// The rows of each chunk `op` hands out, and all their values in order.
    fn drain(op: &mut ParallelMapOp) -> (Vec<usize>, Vec<i64>) {
        let (mut sizes, mut values) = (vec![], vec![]);
        while let Some(chunk) = op.next_chunk().unwrap() {
            sizes.push(chunk.num_rows());
            values.extend_from_slice(chunk.column(0).as_primitive::<Int64Type>().values());
        }
        (sizes, values)
    }

    #[test]
    fn a_chunk_whose_output_exceeds_the_task_bytes_is_cut_into_equal_parts() {
        // Chunks of 1,000 rows of 8 bytes, in and out (8,000 bytes a chunk whether its input
        // or an output is the measure): at most 3,000 bytes a task is three parts of 334,
        // 334 and 332 rows, the rest not cut again.
        let (func, _entered, go) = gated_add_one();
        drop(go);
        let (mut op, _) = map_op(func, 10, 2, u64::MAX);
        op.task_bytes = 3000;
        let (sizes, values) = drain(&mut op);
        assert_eq!(sizes, [334, 334, 332].repeat(10));
        assert_eq!(values, (1..=10_000).collect::<Vec<i64>>());
        assert_eq!(op.completions.finished.lock().unwrap().completed, 30);
    }

    #[test]
    fn a_chunk_of_small_rows_declared_to_make_large_ones_is_cut_before_a_task_finished() {
        // 1,000 rows of 8 bytes declared to make 4,096 each (file names becoming images):
        // by the declared output the first task is a quarter of the 1 MiB task bytes' worth;
        // the measured 8 bytes a row then leave the rest of the chunk one task.
        let input = source(int_chunks("x", &(0..1000).collect::<Vec<i64>>(), &[1000]));
        let add_one: ChunkFn = Arc::new(|chunk: &RecordBatch| {
            let x = chunk.column(0).as_primitive::<Int64Type>();
            let y = Int64Array::from_iter_values(x.values().iter().map(|v| v + 1));
            Ok(RecordBatch::try_new(chunk.schema(), vec![Arc::new(y)]).unwrap())
        });
        let mut op = one_call(input, add_one, TASK_BYTES).with_output_row_bytes(Some(4096));
        let (sizes, values) = drain(&mut op);
        assert_eq!(sizes, [250, 750]);
        assert_eq!(values, (1..=1000).collect::<Vec<i64>>());
    }

    #[test]
    fn tasks_are_cut_by_the_output_seen_once_a_task_has_finished() {
        // One call, so the second task is cut after the first finished. The function makes
        // two int64 columns of one (8 bytes a row in, 16 out): under 4,000 bytes a task, the
        // first chunk's first part is cut by its input (half of it), everything after by
        // the output (quarters, the first chunk's other half in two).
        let values: Vec<i64> = (0..3000).collect();
        let input = source(int_chunks("x", &values, &[1000; 3]));
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("x", arrow::datatypes::DataType::Int64, false),
            arrow::datatypes::Field::new("y", arrow::datatypes::DataType::Int64, false),
        ]));
        let wide: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            let x = chunk.column(0).as_primitive::<Int64Type>();
            let y = Int64Array::from_iter_values(x.values().iter().map(|v| 2 * v));
            Ok(RecordBatch::try_new(schema.clone(), vec![chunk.column(0).clone(), Arc::new(y)]).unwrap())
        });
        let mut op = one_call(input, wide, 4000);
        let (sizes, values) = drain(&mut op);
        let mut expected = vec![500, 250, 250];
        expected.extend([250; 8]);
        assert_eq!(sizes, expected);
        assert_eq!(values, (0..3000).collect::<Vec<i64>>());
    }

    #[test]
    fn a_task_of_long_rows_does_not_cut_every_later_task_small() {
        // Ten rows of 1,000 output bytes each, then ten chunks of 1,000 rows of 12 bytes
        // (8 of value and 4 of offset): under 20,000 bytes a task, the long rows' task alone
        // would cut every later chunk in 51 parts of 20 rows. Measured by the mean output
        // per row, the parts grow as short rows finish, and the last chunks go whole.
        let mut splits = vec![10];
        splits.extend([1000; 10]);
        let values: Vec<i64> = (0..10_010).collect();
        let input = source(int_chunks("x", &values, &splits));
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "b",
            arrow::datatypes::DataType::Binary,
            false,
        )]));
        let bytes: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            let x = chunk.column(0).as_primitive::<Int64Type>();
            let b = arrow::array::BinaryArray::from_iter_values(x.values().iter().map(|v| {
                if *v < 10 {
                    vec![1u8; 1000]
                } else {
                    v.to_le_bytes().to_vec()
                }
            }));
            Ok(RecordBatch::try_new(schema.clone(), vec![Arc::new(b)]).unwrap())
        });
        let mut op = one_call(input, bytes, 20_000);
        let mut sizes = vec![];
        while let Some(chunk) = op.next_chunk().unwrap() {
            sizes.push(chunk.num_rows());
        }
        assert_eq!(sizes.iter().sum::<usize>(), 10_010);
        assert_eq!(sizes[0], 10);
        assert_eq!(sizes[1], 20, "the first short chunk is cut by the long rows' output");
        assert!(sizes.ends_with(&[1000, 1000, 1000]), "{sizes:?}");
    }

    #[test]
    fn parts_are_never_smaller_than_a_tasks_work() {
        // 8 bytes a row under 800 bytes a task would be parts of 100 rows; a function this
        // cheap (any, with a task's work set this high) keeps each chunk whole.
        let (func, _entered, go) = gated_add_one();
        drop(go);
        let (mut op, _) = map_op(func, 10, 2, u64::MAX);
        op.task_bytes = 800;
        op.task_work = Duration::MAX;
        let (sizes, _) = drain(&mut op);
        // Before a task finished the rate is unknown and the first chunks are cut.
        assert!(sizes.iter().rev().take(5).all(|&s| s == 1000), "{sizes:?}");
    }

    #[test]
    fn cheap_chunks_are_gathered_only_while_their_output_fits_the_task_bytes() {
        // However cheap the function, a task takes two 8,000-byte chunks at most under
        // 16,000 bytes; each is still a call and an output of its own.
        let (func, _entered, go) = gated_add_one();
        drop(go);
        let (mut op, _) = map_op(func, 40, 2, u64::MAX);
        op.task_work = Duration::MAX;
        op.task_bytes = 16_000;
        let (sizes, values) = drain(&mut op);
        assert_eq!(sizes, vec![1000; 40]);
        assert_eq!(values, (1..=40_000).collect::<Vec<i64>>());
        // Two single-chunk tasks before any finished, then pairs: 21 tasks; without the
        // bound, tasks of eight chunks, 7.
        let tasks = op.completions.finished.lock().unwrap().completed;
        assert!((20..=21).contains(&tasks), "{tasks} tasks");
    }

    #[test]
    fn a_range_made_on_the_workers_gives_its_rows_in_order_and_resumes_from_checkpoints() {
        // range(5, 30005, 3) in chunks of 1,000, described by its reader and made by the
        // workers; each value plus one, in order, whole and resumed from a checkpoint taken
        // after three chunks, in both modes.
        let range = || -> BoxOperator {
            let reader = flumen_sources::range::RangeReader::new(5, 30_005, 3, 1000).unwrap();
            Box::new(crate::ops::source::ReaderOp::new(Box::new(reader), int_spec("x").arrow_schema()))
        };
        let map = |input: BoxOperator| {
            let (func, _entered, go) = gated_add_one();
            drop(go);
            columnar(input, func, 2, Arc::new(MemoryBudget::new(u64::MAX)))
        };
        let expected: Vec<i64> = (5..30_005).step_by(3).map(|v| v + 1).collect();
        let mut whole = map(range());
        assert!(whole.deferred, "a range's reader describes its chunks");
        assert_eq!(drain(&mut whole).1, expected);
        for mode in [SaveMode::Full, SaveMode::Symbolic] {
            let mut cut = map(range());
            let mut got = vec![];
            for _ in 0..3 {
                let chunk = cut.next_chunk().unwrap().unwrap();
                got.extend_from_slice(chunk.column(0).as_primitive::<Int64Type>().values());
            }
            let state = cut.save(mode).unwrap();
            let mut resumed = map(range());
            resumed.restore(state).unwrap();
            got.extend(drain(&mut resumed).1);
            assert_eq!(got, expected, "{mode:?}");
        }
    }

    #[test]
    fn gathered_chunks_stay_within_the_budget() {
        // A task of k chunks holds about 16,000·k bytes (8,000 in, 8,000 out): the budget
        // allows six at most, where the function's speed alone would gather eight.
        let (func, _entered, go) = gated_add_one();
        drop(go);
        let (mut op, budget) = map_op(func, 40, 2, 100_000);
        op.task_work = Duration::MAX;
        let mut rows = 0;
        while let Some(chunk) = op.next_chunk().unwrap() {
            rows += chunk.num_rows();
        }
        assert_eq!(rows, 40_000);
        assert!(budget.peak() <= 100_000, "peak {}", budget.peak());
        assert!(op.completions.finished.lock().unwrap().completed < 40, "some tasks gathered chunks");
    }

    #[test]
    fn a_cheap_function_runs_chunk_by_chunk_in_fewer_tasks_with_its_errors_in_place() {
        // 400 chunks of 10 rows; the function fails on multiples of 97 and adds one otherwise.
        let values: Vec<i64> = (0..4000).collect();
        let input = source(int_chunks("x", &values, &[10; 400]));
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let add_one = |chunk: &RecordBatch| {
            let x = chunk.column(0).as_primitive::<Int64Type>();
            let y = Int64Array::from_iter_values(x.values().iter().map(|v| v + 1));
            RecordBatch::try_new(chunk.schema(), vec![Arc::new(y)]).unwrap()
        };
        let func: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let x = chunk.column(0).as_primitive::<Int64Type>();
            if let Some(row) = x.values().iter().position(|v| v % 97 == 0) {
                let done = if row == 0 { vec![] } else { vec![add_one(&chunk.slice(0, row))] };
                let error = Error::execution("map", format!("{} is a multiple of 97", x.value(row)));
                return Err(crate::kernels::function::Failure::AtRow { done, row, error });
            }
            Ok(add_one(chunk))
        });
        let knob = Knob::new(Param::Parallelism, 2, false, 1, 2);
        let pool = Arc::new(ThreadPool::new(2));
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        let mut op =
            ParallelMapOp::new(input, func, pool, knob, TaskSize::Chunk, true, Arc::default(), budget, Cancel::new());
        // Any function counts as cheap: every task past the first gathers the most chunks.
        op.task_work = Duration::MAX;
        let (mut got, mut errors) = (Vec::new(), Vec::new());
        loop {
            match op.next_chunk() {
                Ok(Some(chunk)) => {
                    assert!(chunk.num_rows() <= 10, "each chunk is a call of its own");
                    got.extend_from_slice(chunk.column(0).as_primitive::<Int64Type>().values());
                }
                Ok(None) => break,
                Err(e) => errors.push((got.len(), e.to_string())),
            }
        }
        let kept: Vec<i64> = values.iter().filter(|v| *v % 97 != 0).map(|v| v + 1).collect();
        assert_eq!(got, kept);
        let expected: Vec<(usize, String)> = (0..4000)
            .filter(|v| v % 97 == 0)
            .map(|v| ((v - v / 97) as usize, format!("{v} is a multiple of 97")))
            .collect();
        assert_eq!(errors.len(), expected.len());
        for ((at, text), (want_at, want)) in errors.iter().zip(&expected) {
            assert_eq!(at, want_at);
            assert!(text.contains(want.as_str()), "{text}");
        }
        // Two one-chunk tasks before any finished, then tasks of 8 chunks: about 52, where
        // a task a chunk would be 400.
        let tasks = op.completions.finished.lock().unwrap().completed;
        assert!(tasks < 100, "{tasks} tasks for 400 chunks");
        // Every chunk was called once, and again for its rest after an error before its end.
        let rests = (0..4000).filter(|v| v % 97 == 0 && v % 10 != 9).count();
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 400 + rests);
    }

    #[test]
    fn a_running_task_holds_its_input_and_expected_output() {
        // A second task's estimate (16,000 bytes or more) fits neither beside a running task
        // nor beside a finished one (8,000 bytes or more), so one runs at a time, whatever
        // the window and however the threads interleave.
        let (func, entered, go) = gated_add_one();
        let (mut op, budget) = map_op(func, 3, 4, 20_000);
        // Moved after the map, so that a failed assertion drops it first: the map's drop
        // would otherwise wait for ever on a task waiting for `go`.
        let go = go;
        // Pulls the next chunk on another thread; also says what the budget held while the
        // chunk's task ran.
        let mut pull = || {
            std::thread::scope(|s| {
                let pull = s.spawn(|| op.next_chunk());
                entered.recv().unwrap();
                let held = budget.used();
                go.send(()).unwrap();
                (pull.join().unwrap().unwrap().unwrap(), held)
            })
        };
        let (chunk, held) = pull();
        // Before any task ended, the output is expected to be as large as the input.
        assert_eq!(held, 16_000);
        assert_eq!(chunk.column(0).as_primitive::<Int64Type>().value(0), 1);
        // Handed out: nothing is held, and nothing more was dispatched.
        assert_eq!(budget.used(), 0);
        let output = crate::budget::slice_bytes(&chunk);
        let (chunk, held) = pull();
        // Then the output is expected at the first task's own bytes per row.
        assert_eq!(held, 8_000 + output.div_ceil(1000) * 1000);
        assert_eq!(chunk.column(0).as_primitive::<Int64Type>().value(0), 1001);
        assert!(budget.peak() <= 20_000, "peak {}", budget.peak());
        drop(go);
        assert_eq!(op.next_chunk().unwrap().unwrap().num_rows(), 1000);
        assert!(op.next_chunk().unwrap().is_none());
        assert_eq!(budget.used(), 0);
    }

    /// `Recent` after tasks of `rows` rows that each took `work`.
    fn recent(tasks: &[(usize, Duration)]) -> Recent {
        let mut recent = Recent::default();
        for &(rows, work) in tasks {
            recent.add(rows, work);
        }
        recent
    }

    #[test]
    fn only_short_tasks_are_staged() {
        let (us, under) = (Duration::from_micros, STAGE_TASKS_UNDER);
        assert!(!recent(&[]).stages(under), "nothing is known before a task finishes");
        assert!(recent(&[(1, us(100)); 10]).stages(under), "100 us a task");
        assert!(!recent(&[(1, us(2000))]).stages(under), "2 ms a task");
        assert!(!recent(&[(1, under); 4]).stages(under), "at the line");
        assert!(recent(&[(1, under - Duration::from_nanos(4)); 4]).stages(under));
        let huge = Recent { tasks: u64::MAX, rows: u64::MAX, work: Duration::MAX };
        assert!(!huge.stages(under), "no overflow");
    }

    /// A first task that also compiled the kernel (1.3 ms, then 40 us a chunk) stops
    /// shrinking tasks within a few more: all summed alike, the 21 tasks would still aim at
    /// two chunks.
    #[test]
    fn the_rate_follows_the_recent_tasks() {
        let us = Duration::from_micros;
        let tasks: Vec<(usize, Duration)> = std::iter::once((8192, us(1300))).chain([(8192, us(40)); 20]).collect();
        let r = recent(&tasks[..1]);
        assert_eq!(r.rows_for(us(200)), 1260, "the first task's rate");
        assert!(recent(&tasks[..11]).rows_for(us(200)) > 3 * 8192);
        assert_eq!(rows_for(us(1300 + 20 * 40), 21 * 8192, us(200)), 2 * 8192, "summed alike");
        // Within 5% of the 40,960 rows that 200 us make at 40 us a chunk.
        let aim = recent(&tasks).rows_for(us(200));
        assert!((38_912..=40_960).contains(&aim), "{aim}");
        assert!(!recent(&tasks[..1]).stages(STAGE_TASKS_UNDER));
        assert!(recent(&tasks[..6]).stages(STAGE_TASKS_UNDER), "staged from the sixth task on");
    }

    #[test]
    fn staged_tasks_never_run_more_calls_than_asked() {
        // 2 calls on a pool of 4 workers: every task blocks until the test releases its
        // chunk, in input order, and the test releases the next only once another task has
        // started, so two tasks always wait while later ones queue behind them, staged; a
        // third running task would raise the count. Releasing by chunk, not by
        // whichever task takes a shared gate first, keeps the head of the window moving
        // however the threads are scheduled.
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let tasks = 8;
        let (active, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (entered_tx, entered) = channel::<i64>();
        let (gates, waits): (Vec<Sender<()>>, Vec<Mutex<Receiver<()>>>) =
            (0..tasks).map(|_| channel::<()>()).map(|(tx, rx)| (tx, Mutex::new(rx))).unzip();
        let entered_tx = Mutex::new(entered_tx);
        let (a, m) = (active.clone(), most.clone());
        let func: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            m.fetch_max(a.fetch_add(1, SeqCst) + 1, SeqCst);
            let k = chunk.column(0).as_primitive::<Int64Type>().value(0) / 1000;
            let _ = entered_tx.lock().unwrap().send(k);
            let _ = waits[k as usize].lock().unwrap().recv();
            a.fetch_sub(1, SeqCst);
            Ok(chunk.clone())
        });
        let values: Vec<i64> = (0..tasks as i64 * 1000).collect();
        let input = source(int_chunks("x", &values, &vec![1000; tasks]));
        let knob = Knob::new(Param::Parallelism, 2, false, 1, 2);
        let pool = Arc::new(ThreadPool::new(4));
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        let mut op =
            ParallelMapOp::new(input, func, pool, knob, TaskSize::Chunk, true, Arc::default(), budget, Cancel::new());
        // Every task counts as short, whatever its wait: staged from the first that ends;
        // and each is one chunk, so that a task waits on one gate.
        op.stage_under = Duration::MAX;
        op.task_work = Duration::ZERO;
        let (firsts, mut started) = std::thread::scope(|s| {
            let consumer = s.spawn(|| {
                let mut firsts = Vec::new();
                while let Some(chunk) = op.next_chunk().unwrap() {
                    firsts.push(chunk.column(0).as_primitive::<Int64Type>().value(0));
                }
                firsts
            });
            let mut started = vec![entered.recv().unwrap(), entered.recv().unwrap()];
            for (k, gate) in gates.iter().enumerate() {
                gate.send(()).unwrap();
                if k + 2 < tasks {
                    started.push(entered.recv().unwrap());
                }
            }
            (consumer.join().unwrap(), started)
        });
        assert_eq!(most.load(SeqCst), 2);
        started.sort_unstable();
        assert_eq!(started, (0..tasks as i64).collect::<Vec<_>>(), "every task ran once");
        assert_eq!(firsts, (0..tasks as i64).map(|t| t * 1000).collect::<Vec<_>>());
    }

    #[test]
    fn unordered_batch_tasks_overtake_only_as_whole_clean_batches() {
        // Tasks of batches of 3 rows: 0 and 1 are whole; 2 failed after one row; 3 is the
        // short last batch; 4 is an input error.
        let ok = |n: usize| Segment::new(Ok(Some(int_chunks("x", &vec![0; n], &[n]).remove(0))), n);
        let error = |end: usize| Segment::new(Err(Error::execution("map", "bad row")), end);
        let task = |seq: u64| match seq {
            0 | 1 => vec![ok(3)],
            2 => vec![ok(1), error(2), ok(3)],
            3 => vec![ok(1)],
            _ => vec![error(0)],
        };
        let tasks = |seqs: &[u64]| seqs.iter().map(|&s| (s, task(s))).collect::<BTreeMap<_, _>>();
        let whole = Reorder::WholeBatches(3);
        // A whole batch overtakes the oldest task while it runs; a short or failed one waits.
        assert_eq!(next_unordered(&tasks(&[1, 2, 3, 4]), Some(0), whole), Some(1));
        assert_eq!(next_unordered(&tasks(&[2, 3, 4]), Some(0), whole), None);
        // Its turn come, the oldest goes first, whole or not.
        assert_eq!(next_unordered(&tasks(&[2, 3, 4]), Some(2), whole), Some(2));
        assert_eq!(next_unordered(&tasks(&[3, 4]), Some(3), whole), Some(3));
        // With part of a batch above, only the oldest may go.
        assert_eq!(next_unordered(&tasks(&[1, 4]), Some(0), Reorder::InOrder), None);
        assert_eq!(next_unordered(&tasks(&[0, 1]), Some(0), Reorder::InOrder), Some(0));
        // Without batches, the first finished.
        assert_eq!(next_unordered(&tasks(&[3, 4]), Some(0), Reorder::Any), Some(3));
    }

    #[test]
    fn unordered_batches_keep_consecutive_rows_in_each_batch() {
        // Whether the consumer looks at the finished tasks before the next one finishes is up
        // to the threads: repeated, a wrong hand-out is caught.
        for _ in 0..20 {
            unordered_batches_of_gated_tasks();
        }
    }

    /// 10 rows in tasks of 3, each waiting for its own gate. Once all four run, the gates
    /// open last task first, each after the task before has finished, so that the short
    /// last task ([9]) is the first to finish while the consumer waits: handed out then,
    /// the batch above would fill its batch with the next task's rows.
    fn unordered_batches_of_gated_tasks() {
        let tasks = 4;
        let (entered_tx, entered) = channel::<()>();
        let entered_tx = Mutex::new(entered_tx);
        let (gates, waits): (Vec<Sender<()>>, Vec<Mutex<Receiver<()>>>) =
            (0..tasks).map(|_| channel::<()>()).map(|(tx, rx)| (tx, Mutex::new(rx))).unzip();
        let func: ChunkFn = Arc::new(move |chunk: &RecordBatch| {
            let _ = entered_tx.lock().unwrap().send(());
            let k = chunk.column(0).as_primitive::<Int64Type>().value(0) / 3;
            let _ = waits[k as usize].lock().unwrap().recv();
            Ok(chunk.clone())
        });
        let values: Vec<i64> = (0..10).collect();
        let input = source(int_chunks("x", &values, &[5, 5]));
        let knob = Knob::new(Param::Parallelism, tasks, false, 1, tasks);
        let pool = Arc::new(ThreadPool::new(tasks));
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        let map = ParallelMapOp::new(
            input,
            func,
            pool,
            knob,
            TaskSize::Rows(3),
            false,
            Arc::default(),
            budget,
            Cancel::new(),
        );
        let completions = map.completions.clone();
        let op = flumen_ir::Op::Batch {
            batch_size: 3,
            drop_remainder: false,
            num_parallel_calls: Default::default(),
            deterministic: None,
        };
        let schema = op.output_spec(&[&int_spec("x")]).unwrap().arrow_schema();
        let mut batches = crate::ops::batch::BatchOp::new(Box::new(map), 3, false, schema);
        let mut got = std::thread::scope(|s| {
            let consumer = s.spawn(|| {
                let mut got = Vec::new();
                while let Some(chunk) = batches.next_chunk().unwrap() {
                    let lists = chunk.column(0).as_list::<i32>();
                    got.extend(lists.iter().map(|l| l.unwrap().as_primitive::<Int64Type>().values().to_vec()));
                }
                got
            });
            for _ in 0..tasks {
                entered.recv().unwrap();
            }
            for (done, gate) in gates.iter().rev().enumerate() {
                gate.send(()).unwrap();
                let mut finished = completions.finished.lock().unwrap();
                while finished.completed <= done as u64 {
                    finished = completions.changed.wait(finished).unwrap();
                }
            }
            consumer.join().unwrap()
        });
        got.sort();
        assert_eq!(got, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8], vec![9]]);
    }

    #[test]
    fn an_empty_map_dispatches_a_task_larger_than_the_budget() {
        let (func, _entered, go) = gated_add_one();
        drop(go);
        let (mut op, budget) = map_op(func, 3, 2, 100);
        let mut rows = 0;
        while let Some(chunk) = op.next_chunk().unwrap() {
            rows += chunk.num_rows();
        }
        assert_eq!(rows, 3000);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn dropping_the_map_mid_stream_gives_its_bytes_back() {
        for calls in [1, 2, 4] {
            let (func, _entered, go) = gated_add_one();
            drop(go);
            let (mut op, budget) = map_op(func, 16, calls, u64::MAX);
            // Other operators' bytes stay: the map gives back exactly its own.
            budget.reserve(123);
            for _ in 0..3 {
                op.next_chunk().unwrap().unwrap();
            }
            drop(op);
            assert_eq!(budget.used(), 123, "{calls} calls");
        }
    }
}

//! `flat_map` and `interleave`: each input element becomes a dataset of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{DatasetFn, Error, Result};
use flumen_sources::split::Split;
use flumen_udf::closure::{guarded, DatasetFactory};

use crate::build::build;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::context::{mix, ExecContext, SharedState};
use crate::operator::{BoxOperator, Operator};
use crate::ops::prefetch::{Permits, PrefetchOp, Probe};
use crate::ops::source::ReaderOp;
use crate::ops::unbatch::UnbatchOp;
use crate::rows::RowReader;

/// Opens the dataset of one element.
pub struct ElementDatasets {
    func: Opener,
    ctx: ExecContext,
    schema: SchemaRef,
    /// Where the opened datasets' deliveries are counted.
    stats: Option<Arc<crate::metrics::OpStats>>,
}

enum Opener {
    ReadFile { field: String, format: flumen_ir::FileFormat },
    ReadSplit { format: flumen_ir::FileFormat },
    FromTensorSlices,
    Closure { name: String, factory: DatasetFactory, output: flumen_ir::ElementSpec },
}

/// One chunk holding one element, as an operator.
struct SingleChunk(Option<RecordBatch>);

impl Operator for SingleChunk {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        Ok(self.0.take())
    }

    fn save(&self, _mode: SaveMode) -> Result<OpState> {
        OpState::new("element").with("taken", self.0.is_none())
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        if state.expect("element")?.get::<bool>("taken")? {
            self.0 = None;
        }
        Ok(())
    }
}

/// The dataset of one element, opened on its first use: a parallel interleave's inputs are
/// opened by their producer threads, so that an input slow to open delays only what must
/// come from it.
struct LazyOpen {
    datasets: Arc<ElementDatasets>,
    element: RecordBatch,
    index: u64,
    dataset: Option<BoxOperator>,
    /// Set when opening failed, for the interleave to tell an open's error from a read's.
    failed: Arc<AtomicBool>,
}

impl LazyOpen {
    fn dataset(&mut self) -> Result<&mut BoxOperator> {
        if self.dataset.is_none() {
            match self.datasets.open(&self.element, self.index) {
                Ok(dataset) => self.dataset = Some(dataset),
                Err(e) => {
                    self.failed.store(true, Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
        Ok(self.dataset.as_mut().expect("opened"))
    }
}

impl Operator for LazyOpen {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        // A dataset that failed to open has ended with that error.
        if self.failed.load(Ordering::SeqCst) {
            return Ok(None);
        }
        self.dataset()?.next_chunk()
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match &self.dataset {
            Some(dataset) => dataset.save(mode),
            None => OpState::new("unopened").with("failed", self.failed.load(Ordering::SeqCst)),
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        if state.kind == "unopened" {
            self.dataset = None;
            self.failed.store(state.get("failed")?, Ordering::SeqCst);
            return Ok(());
        }
        self.dataset()?.restore(state)
    }
}

impl ElementDatasets {
    /// The opener of `func`, producing datasets whose chunks have `schema`.
    pub fn new(func: &DatasetFn, ctx: &ExecContext, schema: SchemaRef) -> Result<Self> {
        let func = match func {
            DatasetFn::ReadFile { field, format } => Opener::ReadFile { field: field.clone(), format: format.clone() },
            DatasetFn::ReadSplit { format } => Opener::ReadSplit { format: format.clone() },
            DatasetFn::FromTensorSlices => Opener::FromTensorSlices,
            DatasetFn::Closure { closure, output } => Opener::Closure {
                name: closure.name.clone(),
                factory: ctx.registry.dataset_fn(&closure.name)?,
                output: output.clone(),
            },
        };
        Ok(ElementDatasets { func, ctx: ctx.clone(), schema, stats: None })
    }

    /// The same opener counting what the opened datasets deliver in `stats`.
    pub fn counted(mut self, stats: Arc<crate::metrics::OpStats>) -> Self {
        self.stats = Some(stats);
        self
    }

    /// `open_uncounted`, counted. A file's dataset hands its reader's
    /// chunks on unconformed (bytes may be views of the reader's buffers): `flat_map` and
    /// `interleave` conform them where they slice or copy them anyway.
    pub fn open(&self, element: &RecordBatch, index: u64) -> Result<BoxOperator> {
        let dataset = self.open_uncounted(element, index)?;
        Ok(match &self.stats {
            Some(stats) => Box::new(crate::metrics::Metered::new(dataset, stats.clone())),
            None => dataset,
        })
    }

    /// The dataset of `element` (a one-row chunk), the `index`-th this operator opens (what
    /// a closure's dataset derives its unseeded seeds from, so a restore rebuilds it alike).
    fn open_uncounted(&self, element: &RecordBatch, index: u64) -> Result<BoxOperator> {
        match &self.func {
            Opener::ReadFile { field, format } => {
                let column = element.column_by_name(field).expect("type-checked field");
                let names = column.as_any().downcast_ref::<StringArray>().expect("type-checked string field");
                if names.is_null(0) {
                    return Err(Error::execution("interleave", format!("file name field '{field}' is null")));
                }
                let reader = flumen_sources::split::open_file(names.value(0), format, self.ctx.options.read())?;
                Ok(Box::new(ReaderOp::unconformed(reader)))
            }
            Opener::ReadSplit { format } => {
                let file = element.column_by_name("file").expect("type-checked field");
                let file = file.as_any().downcast_ref::<StringArray>().expect("type-checked string field");
                let group = element.column_by_name("row_group").expect("type-checked field");
                let group = group.as_any().downcast_ref::<Int64Array>().expect("type-checked int64 field");
                if file.is_null(0) || group.is_null(0) {
                    return Err(Error::execution("interleave", "a split element has a null file or row group"));
                }
                let split = Split { file: file.value(0).to_string(), row_group: usize::try_from(group.value(0)).ok() };
                let reader = flumen_sources::split::open_split(&split, format, self.ctx.options.read())?;
                Ok(Box::new(ReaderOp::unconformed(reader)))
            }
            Opener::FromTensorSlices => {
                let one = Box::new(SingleChunk(Some(element.clone())));
                Ok(Box::new(UnbatchOp::new(one, self.schema.clone())))
            }
            Opener::Closure { name, factory, output } => {
                let operator = format!("closure '{name}'");
                let (plan, registry) = guarded(&operator, || factory(element))?;
                if plan.spec().most_specific_common(output).as_ref() != Some(output) {
                    return Err(Error::Udf {
                        operator,
                        message: format!("returned a dataset of {} where {} was declared", plan.spec(), output),
                    });
                }
                // Each call makes a new dataset, with its own caches and unseeded seeds, as
                // each call of a tf.data function builds new dataset ops.
                let mut ctx = ExecContext {
                    shared: Arc::new(SharedState::default()),
                    unseeded: mix(self.ctx.unseeded, index),
                    ..self.ctx.clone()
                };
                ctx.registry.merge(&registry)?;
                build(&plan, &ctx)
            }
        }
    }
}

/// `flat_map`: the datasets of the input's elements, one after another.
pub struct FlatMapOp {
    input: RowReader,
    datasets: Arc<ElementDatasets>,
    /// The open dataset and the element it was opened from (kept for checkpoints).
    current: Option<(BoxOperator, RecordBatch)>,
    opened: u64,
}

impl FlatMapOp {
    /// Flat-maps `input` through `datasets`.
    pub fn new(input: BoxOperator, datasets: ElementDatasets) -> Self {
        FlatMapOp { input: RowReader::new(input), datasets: Arc::new(datasets), current: None, opened: 0 }
    }
}

impl Operator for FlatMapOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some((inner, _)) = &mut self.current {
                match inner.next_chunk()? {
                    Some(chunk) => return relabel(chunk, &self.datasets.schema).map(Some),
                    None => self.current = None,
                }
            }
            let Some(element) = self.input.next_slice(1)? else {
                return Ok(None);
            };
            self.opened += 1;
            self.current = Some((self.datasets.open(&element, self.opened - 1)?, element));
        }
    }

    /// The open dataset's state with the element it was opened from, and the input's.
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let state = OpState::new("flat_map").with("opened", self.opened)?.child(self.input.save(mode)?);
        Ok(match &self.current {
            Some((inner, element)) => state.with_chunks([element.clone()]).child(inner.save(mode)?),
            None => state.maybe_child(None),
        })
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("flat_map")?;
        self.opened = state.get("opened")?;
        self.input.restore(state.take_child()?)?;
        self.current = match (state.chunks.pop(), state.next_child()?) {
            (Some(element), Some(inner_state)) => {
                let index = self.opened.checked_sub(1).ok_or_else(|| crate::checkpoint::state::mismatch("flat_map"))?;
                let mut inner = self.datasets.open(&element, index)?;
                inner.restore(inner_state)?;
                Some((inner, element))
            }
            _ => None,
        };
        Ok(())
    }
}

/// How a parallel interleave reads its open datasets: each through a prefetching producer
/// of its own, with at most `permits` reading at once.
pub struct ParallelReads {
    /// Concurrent reads (`num_parallel_calls`, live-tunable).
    pub permits: Arc<Permits>,
    /// Elements each open dataset buffers ahead.
    pub buffer: Arc<crate::metrics::Knob>,
    /// The interleave's counters (worker time, buffer occupancy).
    pub stats: Arc<crate::metrics::OpStats>,
    /// tf.data's order when set; otherwise a slot with nothing ready is passed over.
    pub deterministic: bool,
}

/// An open dataset of an interleave: its reader, the element it was opened from (kept for
/// checkpoints), its index, and when parallel its producer's probe.
type Slot = (RowReader, RecordBatch, u64, Option<(Probe, Arc<AtomicBool>)>);

/// `interleave(cycle_length, block_length)` in tf.data's deterministic order: up to
/// `cycle_length` element datasets are open; `block_length` elements are taken from one
/// before moving to the next slot; an exhausted slot is refilled from the input when the
/// cycle comes back to it. With [`ParallelReads`], the open datasets are read ahead by
/// producer threads; without determinism, a slot whose producer has nothing ready yet is
/// skipped for one that has (tf.data's `deterministic=False`).
pub struct InterleaveOp {
    input: RowReader,
    input_done: bool,
    datasets: Arc<ElementDatasets>,
    slots: Vec<Option<Slot>>,
    parallel: Option<ParallelReads>,
    opened: u64,
    cycle_index: usize,
    block_index: u64,
    block_length: u64,
    chunk_rows: usize,
    error: Option<Error>,
    /// Parallel: an input error met while opening slots ahead, with the slot it belongs to;
    /// returned when the cycle reaches that slot, where a lazy open would have met it.
    deferred: Option<(usize, Error)>,
    /// Whether bytes that the datasets hand over as views are handed on as views (see
    /// [`InterleaveOp::handing_on_views`]).
    views: bool,
}

impl InterleaveOp {
    /// Interleaves the datasets of `input`'s elements.
    pub fn new(
        input: BoxOperator,
        datasets: ElementDatasets,
        cycle_length: usize,
        block_length: u64,
        chunk_rows: usize,
    ) -> Self {
        InterleaveOp {
            input: RowReader::new(input),
            input_done: false,
            datasets: Arc::new(datasets),
            slots: (0..cycle_length.max(1)).map(|_| None).collect(),
            parallel: None,
            opened: 0,
            cycle_index: 0,
            block_index: 0,
            block_length,
            chunk_rows,
            error: None,
            deferred: None,
            views: false,
        }
    }

    /// The same interleave handing bytes on as the datasets' views where they come so (a
    /// TFRecord reader's records, viewed in its read windows), rather than copying them into
    /// the declared `Binary`: for a consumer that reads them in place (`parse_example`), so
    /// that no record byte is copied between the file read and the parse. Such chunks keep
    /// their readers' windows alive until consumed.
    pub fn handing_on_views(mut self) -> Self {
        self.views = true;
        self
    }

    /// The same interleave reading its open datasets in parallel.
    pub fn with_parallel_reads(mut self, reads: ParallelReads) -> Self {
        self.parallel = Some(reads);
        self
    }

    /// Opens the dataset of `element`, the `index`-th, behind a producer when parallel, whose
    /// reads begin now when `start` (otherwise on the first pull, after any restore).
    fn open(&self, element: &RecordBatch, index: u64, start: bool) -> Result<Slot> {
        let Some(p) = &self.parallel else {
            let dataset = self.datasets.open(element, index)?;
            return Ok((RowReader::new(dataset), element.clone(), index, None));
        };
        // Opened by the producer, on its first pull.
        let failed = Arc::new(AtomicBool::new(false));
        let dataset = Box::new(LazyOpen {
            datasets: self.datasets.clone(),
            element: element.clone(),
            index,
            dataset: None,
            failed: failed.clone(),
        });
        let ctx = &self.datasets.ctx;
        let mut prefetch = PrefetchOp::new(
            dataset,
            p.buffer.clone(),
            ctx.budget.clone(),
            ctx.cancel.clone(),
            p.stats.clone(),
            Some(p.permits.clone()),
        );
        if start {
            prefetch.start()?;
        }
        let probe = prefetch.probe();
        Ok((RowReader::new(Box::new(prefetch)), element.clone(), index, Some((probe, failed))))
    }

    /// Parallel: opens every empty slot now, in the order the cycle will reach them, and starts
    /// its reads, as tf.data's parallel interleave opens its whole cycle up front. Each slot gets
    /// the input element a lazy open would give it, since every other slot is kept full.
    fn fill_slots(&mut self) {
        if self.parallel.is_none() || self.deferred.is_some() {
            return;
        }
        let n = self.slots.len();
        for k in 0..n {
            let i = (self.cycle_index + k) % n;
            if self.slots[i].is_some() {
                continue;
            }
            if self.input_done {
                return;
            }
            let opened = match self.input.next_slice(1) {
                Ok(Some(element)) => {
                    self.opened += 1;
                    self.open(&element, self.opened - 1, true)
                }
                Ok(None) => {
                    self.input_done = true;
                    return;
                }
                Err(e) => Err(e),
            };
            match opened {
                Ok(slot) => self.slots[i] = Some(slot),
                Err(e) => {
                    self.deferred = Some((i, e));
                    return;
                }
            }
        }
    }

    /// Without determinism: moves to the first slot from the current one that can deliver
    /// without waiting, if the current one cannot.
    /// When every open slot is waiting, waits until one can deliver (rather than on the one
    /// in turn, which may be the slowest: an input still opening).
    /// Waits only when `may_wait`; [`Error::Cancelled`] if the iterator is cancelled while
    /// it waits.
    fn skip_waiting_slots(&mut self, may_wait: bool) -> Result<()> {
        let Some(permits) = self.parallel.as_ref().filter(|p| !p.deterministic).map(|p| p.permits.clone()) else {
            return Ok(());
        };
        let ready = |slot: &Option<Slot>| match slot {
            Some((reader, _, _, Some((probe, _)))) => reader.has_rows() || probe.is_ready(),
            _ => false,
        };
        let n = self.slots.len();
        loop {
            let seen = permits.deliveries();
            if ready(&self.slots[self.cycle_index]) {
                return Ok(());
            }
            if let Some(k) = (1..n).map(|k| (self.cycle_index + k) % n).find(|&i| ready(&self.slots[i])) {
                self.cycle_index = k;
                self.block_index = 0;
                return Ok(());
            }
            // Wait for any slot only while every open one has its producer running (after a
            // restore, a producer starts at its first pull).
            let started = |slot: &Option<Slot>| match slot {
                Some((_, _, _, Some((probe, _)))) => probe.is_started(),
                _ => true,
            };
            if !may_wait || self.slots[self.cycle_index].is_none() || !self.slots.iter().all(started) {
                return Ok(());
            }
            permits.wait_for_delivery(seen)?;
        }
    }

    /// Whether the slot in turn can deliver without waiting (always, when not parallel).
    fn current_ready(&self) -> bool {
        match &self.slots[self.cycle_index] {
            Some((reader, _, _, Some((probe, _)))) => reader.has_rows() || probe.is_ready(),
            _ => true,
        }
    }

    fn advance_cycle(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.slots.len();
    }

    /// Whole rounds of the cycle at once, when every slot is open and holds whole blocks in
    /// its current chunk and the cycle is at the start of a block: the rounds that all slots
    /// can serve without pulling, as many as fit in `room` rows, are added to `gather` slot
    /// by slot, with one read per slot. The order is the one round after round of
    /// [`InterleaveOp::next_run`] gives (no slot waits, so none is skipped). Returns whether
    /// any rows were taken.
    fn take_rounds(&mut self, gather: &mut Gather, room: usize) -> Result<bool> {
        let (n, b) = (self.slots.len(), usize::try_from(self.block_length).unwrap_or(usize::MAX));
        if self.block_index != 0 || b == 0 {
            return Ok(false);
        }
        let mut rounds = room / n.saturating_mul(b).max(1);
        for slot in &self.slots {
            let Some((reader, ..)) = slot else { return Ok(false) };
            rounds = rounds.min(reader.buffered_rows() / b);
        }
        if rounds == 0 {
            return Ok(false);
        }
        let mut starts = Vec::with_capacity(n);
        for k in 0..n {
            let (reader, _, opened, _) = self.slots[(self.cycle_index + k) % n].as_mut().expect("every slot is open");
            let chunk = reader.current().expect("buffered rows are in the current chunk");
            let source = gather.source((*opened, reader.generation()), chunk);
            starts.push((source, reader.next_range(rounds * b)?.expect("the rows are buffered").0));
        }
        for round in 0..rounds {
            for &(source, offset) in &starts {
                let first = offset + round * b;
                gather.indices.extend((first..first + b).map(|row| (source, row)));
            }
        }
        Ok(true)
    }

    /// The next run of elements from the current block, as the slot it comes from and the
    /// range `(offset, rows)` of that slot's current chunk; [`Next::End`] at the end. Unless
    /// `may_wait` (the caller holds rows it can hand out), [`Next::Wait`] rather than wait
    /// for an input that is not ready: a fast input that ends here moves the cycle on, maybe
    /// to a slow one, after the caller last looked.
    fn next_run(&mut self, may_wait: bool) -> Result<Next> {
        loop {
            self.fill_slots();
            let open = self.slots.iter().filter(|s| s.is_some()).count();
            if self.input_done && open == 0 {
                return Ok(Next::End);
            }
            if self.input_done || open == self.slots.len() {
                self.skip_waiting_slots(may_wait)?;
            }
            if !may_wait && !self.current_ready() {
                return Ok(Next::Wait);
            }
            if let Some((slot, _, _, lazy)) = &mut self.slots[self.cycle_index] {
                let want = (self.block_length - self.block_index) as usize;
                let next = slot.next_range(want);
                if next.is_err() && lazy.as_ref().is_some_and(|(_, failed)| failed.load(Ordering::SeqCst)) {
                    // An input that failed to open is its slot's error at its turn; the slot
                    // is refilled from the next input element, at the same place in the cycle.
                    self.slots[self.cycle_index] = None;
                }
                match next? {
                    Some((offset, rows)) => {
                        let from = self.cycle_index;
                        self.block_index += rows as u64;
                        if self.block_index == self.block_length {
                            self.advance_cycle();
                        }
                        return Ok(Next::Run(from, offset, rows));
                    }
                    None => {
                        self.slots[self.cycle_index] = None;
                        self.advance_cycle();
                    }
                }
            } else if self.deferred.as_ref().is_some_and(|(slot, _)| *slot == self.cycle_index) {
                let (_, e) = self.deferred.take().expect("checked");
                return Err(e);
            } else if !self.input_done {
                match self.input.next_slice(1)? {
                    Some(element) => {
                        self.opened += 1;
                        self.slots[self.cycle_index] = Some(self.open(&element, self.opened - 1, false)?);
                    }
                    None => self.input_done = true,
                }
            } else {
                self.advance_cycle();
            }
        }
    }
}

/// What [`InterleaveOp::next_run`] found.
enum Next {
    /// A run: the slot it comes from and the range `(offset, rows)` of its current chunk.
    Run(usize, usize, usize),
    /// The input in turn is not ready, and the caller may not wait for it.
    Wait,
    /// Every input has ended.
    End,
}

/// Rows taken from several chunks, to be copied into one in their order.
#[derive(Default)]
struct Gather {
    /// The distinct source chunks, each with its key (the opened dataset and its chunk), as
    /// their datasets made them (bytes may be views of a reader's buffers).
    sources: Vec<((u64, u64), RecordBatch)>,
    /// (source, row) per output row.
    indices: Vec<(usize, usize)>,
}

impl Gather {
    fn rows(&self) -> usize {
        self.indices.len()
    }

    /// Adds rows `offset..offset + rows` of `chunk`, known by `key`.
    fn add(&mut self, key: (u64, u64), chunk: &RecordBatch, offset: usize, rows: usize) {
        let source = self.source(key, chunk);
        self.indices.extend((offset..offset + rows).map(|row| (source, row)));
    }

    /// The index of the source `chunk`, known by `key`, added unless it is there.
    fn source(&mut self, key: (u64, u64), chunk: &RecordBatch) -> usize {
        // A source is usually the last one added, or one a cycle ago.
        match self.sources.iter().rposition(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.sources.push((key, chunk.clone()));
                self.sources.len() - 1
            }
        }
    }

    /// The gathered rows as one chunk with `schema`, bytes columns left as views where they
    /// came so when `views`: a zero-copy slice when they are one range of one source (cast
    /// where its types differ); `None` when there are none.
    fn finish(self, schema: &SchemaRef, views: bool) -> Result<Option<RecordBatch>> {
        let Some(&(first, start)) = self.indices.first() else { return Ok(None) };
        let contiguous = self.indices.iter().enumerate().all(|(i, &(s, r))| s == first && r == start + i);
        let out = |chunk: RecordBatch| {
            let schema = if views { keeping_views(schema, &chunk) } else { schema.clone() };
            relabel(chunk, &schema)
        };
        if contiguous {
            return out(self.sources[first].1.slice(start, self.indices.len())).map(Some);
        }
        let first_columns = self.sources[0].1.columns();
        let same_types =
            |b: &RecordBatch| b.columns().iter().zip(first_columns).all(|(c, f)| c.data_type() == f.data_type());
        let gathered = if self.sources.iter().all(|(_, b)| same_types(b)) {
            // Gathered in the sources' own types, then made the declared ones: bytes that
            // came as views are gathered as 16-byte views, then copied once, in output
            // order, by the cast (unless `views` keeps them).
            let batches: Vec<&RecordBatch> = self.sources.iter().map(|(_, b)| b).collect();
            arrow::compute::interleave_record_batch(&batches, &self.indices)?
        } else {
            let batches = self.sources.into_iter().map(|(_, b)| relabel(b, schema)).collect::<Result<Vec<_>>>()?;
            arrow::compute::interleave_record_batch(&batches.iter().collect::<Vec<_>>(), &self.indices)?
        };
        out(gathered).map(Some)
    }
}

/// `schema` with `BinaryView` for each declared `Binary` column that `chunk` has as views.
fn keeping_views(schema: &SchemaRef, chunk: &RecordBatch) -> SchemaRef {
    let viewed =
        |(f, c): (&FieldRef, &ArrayRef)| *f.data_type() == DataType::Binary && *c.data_type() == DataType::BinaryView;
    if !schema.fields().iter().zip(chunk.columns()).any(viewed) {
        return schema.clone();
    }
    let fields = schema.fields().iter().zip(chunk.columns()).map(|(f, c)| match viewed((f, c)) {
        true => Arc::new(f.as_ref().clone().with_data_type(DataType::BinaryView)),
        false => f.clone(),
    });
    Arc::new(Schema::new(fields.collect::<Vec<_>>()))
}

impl Operator for InterleaveOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // Runs are gathered as (source chunk, row) pairs and copied once at the end: with a
        // small block length a chunk is thousands of one-row runs, which concatenating as
        // slices would pay for per run and per column.
        let mut gather = Gather::default();
        while gather.rows() < self.chunk_rows {
            // Parallel: hand out what is here rather than wait for a slow input to fill the chunk.
            if gather.rows() > 0 && !self.current_ready() {
                break;
            }
            let room = self.chunk_rows - gather.rows();
            match self.take_rounds(&mut gather, room) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) if gather.rows() == 0 => return Err(e),
                Err(e) => {
                    self.error = Some(e);
                    break;
                }
            }
            match self.next_run(gather.rows() == 0) {
                Ok(Next::Run(slot, offset, rows)) => {
                    let (reader, _, opened, _) = self.slots[slot].as_ref().expect("a run comes from an open slot");
                    let chunk = reader.current().expect("a run is read from the current chunk");
                    gather.add((*opened, reader.generation()), chunk, offset, rows);
                }
                Ok(Next::End | Next::Wait) => break,
                Err(e) if gather.rows() == 0 => return Err(e),
                Err(e) => {
                    self.error = Some(e);
                    break;
                }
            }
        }
        gather.finish(&self.datasets.schema, self.views)
    }

    /// The cycle position, each open slot's dataset state with the element it was opened
    /// from, a pending error, and the input's state.
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let open: Vec<Option<u64>> = self.slots.iter().map(|s| s.as_ref().map(|(_, _, i, _)| *i)).collect();
        let mut state = OpState::new("interleave")
            .with("input_done", self.input_done)?
            .with("opened", self.opened)?
            .with("cycle_index", self.cycle_index)?
            .with("block_index", self.block_index)?
            .with("open", &open)?
            .child(self.input.save(mode)?);
        for (reader, element, _, _) in self.slots.iter().flatten() {
            state = state.with_chunks([element.clone()]).child(reader.save(mode)?);
        }
        // Errors in order: the pending one, then the deferred one.
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        let deferred_slot = self.deferred.as_ref().map(|(slot, _)| *slot);
        if let Some((_, e)) = &self.deferred {
            state = state.with_error(e);
        }
        state.with("has_error", self.error.is_some())?.with("deferred_slot", deferred_slot)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("interleave")?;
        let open: Vec<Option<u64>> = state.get("open")?;
        if open.len() != self.slots.len() {
            return Err(crate::checkpoint::state::mismatch(format!(
                "the checkpoint's interleave has {} slots, this one {} (cycle_length differs)",
                open.len(),
                self.slots.len()
            )));
        }
        self.input_done = state.get("input_done")?;
        self.opened = state.get("opened")?;
        self.cycle_index = state.get("cycle_index")?;
        self.block_index = state.get("block_index")?;
        if self.cycle_index >= self.slots.len() || self.block_index >= self.block_length.max(1) {
            return Err(crate::checkpoint::state::mismatch("interleave: the saved cycle position is out of range"));
        }
        let mut errors = state.take_errors().into_iter();
        // Checkpoints from before deferred errors had at most the pending one.
        let has_error = state.fields.contains_key("has_error").then(|| state.get::<bool>("has_error")).transpose()?;
        self.error = if has_error.unwrap_or(true) { errors.next() } else { None };
        let deferred_slot: Option<usize> =
            if state.fields.contains_key("deferred_slot") { state.get("deferred_slot")? } else { None };
        self.deferred = match deferred_slot {
            Some(slot) if slot < self.slots.len() => {
                Some((slot, errors.next().ok_or_else(|| crate::checkpoint::state::mismatch("interleave error"))?))
            }
            Some(_) => return Err(crate::checkpoint::state::mismatch("interleave: the deferred error's slot")),
            None => None,
        };
        self.input.restore(state.take_child()?)?;
        let mut elements = std::mem::take(&mut state.chunks).into_iter();
        for (i, is_open) in open.into_iter().enumerate() {
            self.slots[i] = None;
            if let Some(index) = is_open {
                let element = elements.next().ok_or_else(|| crate::checkpoint::state::mismatch("interleave slot"))?;
                let mut opened = self.open(&element, index, false)?;
                opened.0.restore(state.take_child()?)?;
                self.slots[i] = Some(opened);
            }
        }
        Ok(())
    }
}

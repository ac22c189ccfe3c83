//! `Dataset`: an immutable, cheaply cloned description of a pipeline, and its builders.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_expr::Expr as DfExpr;
use flumen_ir::{
    DatasetFn, ElementSpec, Error, InlineData, MapFn, NamedExpr, Op, Plan, Predicate, RecordCompression, Result,
    Scalar, SourceDesc, Tunable,
};
use flumen_optimizer::{optimize, Report};
use flumen_runtime::autotune::AutotuneOptions;
use flumen_runtime::conform::conform_chunk;
use flumen_runtime::{build_root, ChunkIterator, ElementIterator, ExecContext, ExecOptions, SharedState};
use flumen_udf::closure::GeneratorFn;
use flumen_udf::lower::lower;
use flumen_udf::registry::{Callable, Registry};

use crate::checkpoint::Cursor;
use crate::explain::ExplainFormat;
use crate::format::{resolve, AvroOptions, CsvOptions};
use crate::function::{DatasetFunction, FileRead, MapFunction, PredicateFunction};
use crate::options::Options;

/// A pipeline: a typed plan plus the closures it calls. Cloning is cheap; every builder
/// returns a new dataset and type-checks the new node, so an ill-typed pipeline fails
/// where it is written.
#[derive(Clone, Debug)]
pub struct Dataset {
    plan: Plan,
    registry: Registry,
    shared: Arc<SharedState>,
    options: Options,
    /// The optimizer's result for this plan and these options, computed on first use and
    /// shared by clones, so every iterator of one dataset runs the same optimized nodes
    /// (caches and reshuffle counters are keyed by them).
    optimized: Arc<OnceLock<Optimized>>,
    /// The written plan's fingerprint and the optimized plan's, computed on first use (for
    /// in-memory data they hash every value, which checkpoints must not redo on every save).
    print: Arc<OnceLock<String>>,
    optimized_print: Arc<OnceLock<String>>,
}

/// The optimizer's report and the interned plan that runs, or why optimizing failed.
type Optimized = std::result::Result<(Arc<Report>, Plan), String>;

/// Options of `padded_batch`.
#[derive(Debug, Clone, Default)]
pub struct PaddedBatchOptions {
    /// Target shape per field (`-1`: the batch's longest). Unlisted fields pad to the longest.
    pub padded_shapes: BTreeMap<String, Vec<i64>>,
    /// Padding value per field (default zero, empty string, false).
    pub padding_values: BTreeMap<String, DfExpr>,
    /// Drop a last, smaller batch.
    pub drop_remainder: bool,
}

/// Options of `bucket_by_sequence_length`.
#[derive(Debug, Clone, Default)]
pub struct BucketOptions {
    /// Padding value per field.
    pub padding_values: BTreeMap<String, DfExpr>,
    /// Pad to the bucket's boundary - 1 instead of the batch's longest.
    pub pad_to_bucket_boundary: bool,
    /// Drop each bucket's last, smaller batch.
    pub drop_remainder: bool,
}

/// Parallelism arguments of `map`, `interleave` and `batch` (tf.data's `num_parallel_calls`
/// and `deterministic`). Two or more calls, or `AUTOTUNE`, run the operator on the iterator's
/// thread pool (see `ARCHITECTURE.md`, "Parallel runtime").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parallel {
    /// Parallel calls: `Tunable::Fixed(n)` or `Tunable::Autotune`.
    pub num_parallel_calls: Tunable,
    /// Keep input order (`None`: the pipeline's `Options::deterministic`).
    pub deterministic: Option<bool>,
}

fn literal(e: &DfExpr, what: &str) -> Result<Scalar> {
    match lower(e)? {
        flumen_ir::Expr::Literal(s) => Ok(s),
        other => Err(Error::plan(what, format!("{other} is not a literal"))),
    }
}

fn literals(values: &BTreeMap<String, DfExpr>, what: &str) -> Result<BTreeMap<String, Scalar>> {
    values.iter().map(|(k, v)| Ok((k.clone(), literal(v, what)?))).collect()
}

fn named(exprs: &[(String, DfExpr)]) -> Result<Vec<NamedExpr>> {
    exprs.iter().map(|(n, e)| Ok(NamedExpr { name: n.clone(), expr: lower(e)? })).collect()
}

/// The first file of a `list_files` or splits source under `plan`, looking through
/// single-input nodes.
fn first_listed_file(plan: &Plan) -> Option<String> {
    match plan.op() {
        Op::Source(SourceDesc::ListFiles { files, .. } | SourceDesc::Splits { files, .. }) => files.first().cloned(),
        Op::Source(_) => None,
        _ if plan.inputs().len() == 1 => first_listed_file(plan.input()),
        _ => None,
    }
}

impl Dataset {
    fn from_source(desc: SourceDesc, registry: Registry) -> Result<Dataset> {
        Ok(Dataset {
            plan: Plan::new(Op::Source(desc), vec![])?,
            registry,
            shared: Arc::new(SharedState::default()),
            options: Options::default(),
            optimized: Arc::default(),
            print: Arc::default(),
            optimized_print: Arc::default(),
        })
    }

    /// A dataset running `plan`, whose closures and generators are found in `registry`.
    pub fn from_plan(plan: Plan, registry: Registry) -> Dataset {
        Dataset {
            plan: crate::cache_counts::recorded(&plan),
            registry,
            shared: Arc::new(SharedState::default()),
            options: Options::default(),
            optimized: Arc::default(),
            print: Arc::default(),
            optimized_print: Arc::default(),
        }
    }

    /// The same dataset calling the closures of `registry`.
    pub(crate) fn with_registry(self, registry: Registry) -> Dataset {
        Dataset { registry, ..self }
    }

    pub(crate) fn then(&self, op: Op) -> Result<Dataset> {
        Ok(self.over(Plan::new(op, vec![self.plan.clone()])?, self.registry.clone()))
    }

    /// This dataset's options and iteration state over `plan`, calling `registry`'s
    /// closures, with nothing cached of the old plan's optimization.
    fn over(&self, plan: Plan, registry: Registry) -> Dataset {
        Dataset {
            plan,
            registry,
            optimized: Arc::default(),
            print: Arc::default(),
            optimized_print: Arc::default(),
            ..self.clone()
        }
    }

    fn combine(datasets: &[&Dataset], op: Op) -> Result<Dataset> {
        let first = datasets.first().ok_or_else(|| Error::plan(op.name(), "needs at least one dataset"))?;
        let mut registry = first.registry.clone();
        for d in &datasets[1..] {
            registry.merge(&d.registry)?;
        }
        let plan = Plan::new(op, datasets.iter().map(|d| d.plan.clone()).collect())?;
        Ok(first.over(plan, registry))
    }

    // ----- sources -----

    /// `range(start, stop)`: int64 field `value`.
    pub fn range(start: i64, stop: i64) -> Result<Dataset> {
        Dataset::range_step(start, stop, 1)
    }

    /// `range(start, stop, step)`; `step` may be negative, not zero.
    pub fn range_step(start: i64, stop: i64, step: i64) -> Result<Dataset> {
        Dataset::from_source(SourceDesc::Range { start, stop, step }, Registry::default())
    }

    /// In-memory Arrow data: each row is an element; list columns are tensor fields.
    pub fn from_batches(batches: Vec<RecordBatch>) -> Result<Dataset> {
        let first = batches.first().ok_or_else(|| Error::plan("in_memory", "needs at least one batch"))?;
        let spec = ElementSpec::from_arrow_schema(&first.schema())?;
        Dataset::from_batches_with_spec(batches, spec)
    }

    /// In-memory Arrow data of the element spec `spec`: for the dtypes an Arrow schema cannot
    /// say (`bfloat16`, whose values are `UInt16` bits).
    pub fn from_batches_with_spec(batches: Vec<RecordBatch>, spec: ElementSpec) -> Result<Dataset> {
        if batches.is_empty() {
            return Err(Error::plan("in_memory", "needs at least one batch"));
        }
        let schema = spec.arrow_schema();
        let batches = batches
            .into_iter()
            .map(|b| conform_chunk(b, &schema).map_err(|e| Error::plan("in_memory", e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        Dataset::from_source(
            SourceDesc::InMemory { spec, data: InlineData { batches: Arc::new(batches) } },
            Registry::default(),
        )
    }

    /// In-memory named columns of equal length (tf.data's `from_tensor_slices` of a dict).
    pub fn from_arrays<S: Into<String>>(columns: impl IntoIterator<Item = (S, ArrayRef)>) -> Result<Dataset> {
        let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) =
            columns.into_iter().map(|(n, a)| (Field::new(n.into(), a.data_type().clone(), true), a)).unzip();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        Dataset::from_batches(vec![batch])
    }

    /// A Rust generator: `factory` makes a fresh iterator of chunks (rows = elements) of spec
    /// `spec` for every iteration (and every epoch of a `repeat`). A named generator is
    /// serializable by name. Its iterators may be read ahead of what the pipeline's consumer
    /// takes, so what each yields must not depend on the iterators made or read before; a
    /// generator whose output does is [`Dataset::from_stateful_generator`].
    pub fn from_generator(
        name: Option<&str>,
        spec: ElementSpec,
        factory: impl Fn() -> flumen_udf::closure::ChunkIter + Send + Sync + 'static,
    ) -> Result<Dataset> {
        Dataset::generator(name, spec, false, factory)
    }

    /// A generator whose iterators' output depends on the iterators made and read before it
    /// (a queue, a stream that can be read once, a count of passes): as for a closure
    /// declared stateful, nothing flumen or its optimizer adds reads it further ahead than
    /// the pipeline asks (read-ahead you write above it does), and iterators of pipelines
    /// reading it save checkpoints only under `ExternalState::Ignore`.
    pub fn from_stateful_generator(
        name: Option<&str>,
        spec: ElementSpec,
        factory: impl Fn() -> flumen_udf::closure::ChunkIter + Send + Sync + 'static,
    ) -> Result<Dataset> {
        Dataset::generator(name, spec, true, factory)
    }

    fn generator(
        name: Option<&str>,
        spec: ElementSpec,
        stateful: bool,
        factory: impl Fn() -> flumen_udf::closure::ChunkIter + Send + Sync + 'static,
    ) -> Result<Dataset> {
        let mut registry = Registry::default();
        let (name, anonymous) = match name {
            Some(n) => (n.to_string(), false),
            None => (registry.fresh_anonymous_name("generator"), true),
        };
        let factory: GeneratorFn = Arc::new(factory);
        registry.register(name.clone(), Callable::Generator(factory));
        Dataset::from_source(SourceDesc::Generator { name, spec, anonymous, stateful }, registry)
    }

    /// The files matching `pattern` (sorted) as string field `filename`; with `shuffle`,
    /// in a seeded random order that changes every iteration (tf.data's `list_files`).
    pub fn list_files(pattern: &str, shuffle: bool, seed: Option<u64>) -> Result<Dataset> {
        let files = flumen_sources::files::list_files(pattern)?;
        Dataset::from_source(
            SourceDesc::ListFiles { pattern: pattern.into(), files, shuffle, seed },
            Registry::default(),
        )
    }

    fn files(paths: &[&str], read: FileRead) -> Result<Dataset> {
        let files: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let format = resolve(&read, files.first().map(String::as_str))?;
        Dataset::from_source(SourceDesc::Files { files, format }, Registry::default())
    }

    /// The splits of `paths` (each Parquet row group, or each whole file of other formats)
    /// as elements `{file, row_group}`: shard them, then `interleave` with
    /// `DatasetFunction::ReadSplit` to read the shard's splits in parallel-ready units.
    pub fn splits(paths: &[&str], read: FileRead) -> Result<Dataset> {
        let files: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let format = resolve(&read, files.first().map(String::as_str))?;
        Dataset::from_source(SourceDesc::Splits { files, format }, Registry::default())
    }

    /// The rows of CSV files, one file after another.
    pub fn csv(paths: &[&str], options: CsvOptions) -> Result<Dataset> {
        Dataset::files(paths, FileRead::Csv(options))
    }

    /// The rows of Parquet files, reading only `columns` (all when `None`).
    pub fn parquet(paths: &[&str], columns: Option<Vec<String>>) -> Result<Dataset> {
        Dataset::files(paths, FileRead::Parquet { columns })
    }

    /// The records of Avro container files, one element per record, the writer schema read
    /// from the first file (or the fields as `options.features` describes them).
    pub fn avro(paths: &[&str], options: AvroOptions) -> Result<Dataset> {
        Dataset::files(paths, FileRead::Avro(options))
    }

    /// The rows of Arrow IPC files.
    pub fn ipc_file(paths: &[&str]) -> Result<Dataset> {
        Dataset::files(paths, FileRead::IpcFile)
    }

    /// The rows of Arrow IPC streams.
    pub fn ipc_stream(paths: &[&str]) -> Result<Dataset> {
        Dataset::files(paths, FileRead::IpcStream)
    }

    /// The lines of text files as string field `line`.
    pub fn text_lines(paths: &[&str]) -> Result<Dataset> {
        Dataset::files(paths, FileRead::TextLines)
    }

    /// The records of TFRecord files as bytes field `record` (tf.data's `TFRecordDataset`),
    /// each record's checksums verified.
    pub fn tfrecord(paths: &[&str], compression: RecordCompression) -> Result<Dataset> {
        Dataset::files(paths, FileRead::TfRecord(compression))
    }

    // ----- element-wise transformations -----

    /// Applies `f` to each element.
    pub fn map(&self, f: MapFunction) -> Result<Dataset> {
        self.map_with(f, Parallel::default())
    }

    /// Applies `f` to each element with tf.data's parallelism arguments.
    pub fn map_with(&self, f: MapFunction, parallel: Parallel) -> Result<Dataset> {
        let mut registry = self.registry.clone();
        let func = match f {
            MapFunction::Exprs { outputs, keep_input } => MapFn::Exprs { outputs: named(&outputs)?, keep_input },
            MapFunction::Closure(c, output) => MapFn::Closure { closure: c.register(&mut registry, "map")?, output },
            MapFunction::ParseExample { field, features } => MapFn::ParseExample { field, features },
        };
        let input = crate::positions::positioned(&self.plan, &func)?;
        let op = Op::Map {
            func,
            num_parallel_calls: parallel.num_parallel_calls,
            deterministic: parallel.deterministic,
            vectorized: false,
        };
        Ok(self.over(Plan::new(op, vec![input])?, registry))
    }

    fn predicate(&self, p: PredicateFunction, what: &str) -> Result<(Predicate, Registry)> {
        let mut registry = self.registry.clone();
        let predicate = match p {
            PredicateFunction::Expr(e) => Predicate::Expr { expr: lower(&e)? },
            PredicateFunction::Closure(c) => Predicate::Closure { closure: c.register(&mut registry, what)? },
        };
        Ok((predicate, registry))
    }

    /// Keeps the elements for which `predicate` holds.
    pub fn filter(&self, predicate: impl Into<PredicateFunction>) -> Result<Dataset> {
        self.filter_with(predicate, Parallel::default())
    }

    /// Keeps the elements for which `predicate` holds, evaluating it with tf.data's
    /// parallelism arguments (its parallel filter).
    pub fn filter_with(&self, predicate: impl Into<PredicateFunction>, parallel: Parallel) -> Result<Dataset> {
        let (predicate, registry) = self.predicate(predicate.into(), "filter")?;
        let op = Op::Filter {
            predicate,
            vectorized: false,
            num_parallel_calls: parallel.num_parallel_calls,
            deterministic: parallel.deterministic,
        };
        Ok(Dataset { registry, ..self.then(op)? })
    }

    /// Elements until the first for which `predicate` fails.
    pub fn take_while(&self, predicate: impl Into<PredicateFunction>) -> Result<Dataset> {
        let (predicate, registry) = self.predicate(predicate.into(), "take_while")?;
        Ok(Dataset { registry, ..self.then(Op::TakeWhile { predicate })? })
    }

    fn dataset_fn(&self, f: DatasetFunction, what: &str) -> Result<(DatasetFn, Registry)> {
        let mut registry = self.registry.clone();
        let func = match f {
            DatasetFunction::ReadFile { field, format } => {
                let sample = first_listed_file(&self.plan);
                DatasetFn::ReadFile { field, format: resolve(&format, sample.as_deref())? }
            }
            DatasetFunction::ReadSplit(format) => {
                DatasetFn::ReadSplit { format: resolve(&format, first_listed_file(&self.plan).as_deref())? }
            }
            DatasetFunction::FromTensorSlices => DatasetFn::FromTensorSlices,
            DatasetFunction::Closure(c, output) => {
                DatasetFn::Closure { closure: c.register(&mut registry, what)?, output }
            }
        };
        Ok((func, registry))
    }

    /// Maps each element to a dataset and concatenates them.
    pub fn flat_map(&self, f: DatasetFunction) -> Result<Dataset> {
        let (func, registry) = self.dataset_fn(f, "flat_map")?;
        Ok(Dataset { registry, ..self.then(Op::FlatMap { func })? })
    }

    /// Maps each element to a dataset and interleaves `cycle_length` of them, `block_length`
    /// elements at a time, in tf.data's order.
    pub fn interleave(&self, f: DatasetFunction, cycle_length: Tunable, block_length: u64) -> Result<Dataset> {
        self.interleave_with(f, cycle_length, block_length, Parallel::default())
    }

    /// `interleave` with tf.data's parallelism arguments.
    pub fn interleave_with(
        &self,
        f: DatasetFunction,
        cycle_length: Tunable,
        block_length: u64,
        parallel: Parallel,
    ) -> Result<Dataset> {
        let (func, registry) = self.dataset_fn(f, "interleave")?;
        let op = Op::Interleave {
            func,
            cycle_length,
            block_length,
            num_parallel_calls: parallel.num_parallel_calls,
            deterministic: parallel.deterministic,
        };
        Ok(Dataset { registry, ..self.then(op)? })
    }

    // ----- batching -----

    /// Groups `batch_size` consecutive elements; the last batch may be smaller. The elements
    /// of a batch must share their shapes (a dense field's unknown dimensions included), as
    /// in tf.data: a batch of others is an error in its place ("Cannot batch tensors with
    /// different shapes"); [`Dataset::ragged_batch`] and [`Dataset::padded_batch`] batch them.
    pub fn batch(&self, batch_size: u64) -> Result<Dataset> {
        self.batch_with(batch_size, false)
    }

    /// Groups `batch_size` consecutive elements whose dense fields may differ in their
    /// unknown dimensions: those fields become ragged (tf.data's `ragged_batch`), where
    /// [`Dataset::batch`] requires the elements of a batch to share their shapes.
    pub fn ragged_batch(&self, batch_size: u64, drop_remainder: bool) -> Result<Dataset> {
        self.then(Op::RaggedBatch { batch_size, drop_remainder })
    }

    /// Groups `batch_size` consecutive elements, dropping a smaller last batch if asked.
    pub fn batch_with(&self, batch_size: u64, drop_remainder: bool) -> Result<Dataset> {
        self.batch_parallel(batch_size, drop_remainder, Parallel::default())
    }

    /// `batch` with tf.data's parallelism arguments.
    pub fn batch_parallel(&self, batch_size: u64, drop_remainder: bool, parallel: Parallel) -> Result<Dataset> {
        self.then(Op::Batch {
            batch_size,
            drop_remainder,
            num_parallel_calls: parallel.num_parallel_calls,
            deterministic: parallel.deterministic,
        })
    }

    /// Batches, padding unknown dimensions.
    pub fn padded_batch(&self, batch_size: u64, options: PaddedBatchOptions) -> Result<Dataset> {
        self.then(Op::PaddedBatch {
            batch_size,
            padded_shapes: options.padded_shapes,
            padding_values: literals(&options.padding_values, "padded_batch")?,
            drop_remainder: options.drop_remainder,
        })
    }

    /// Splits each element along its leading dimension.
    pub fn unbatch(&self) -> Result<Dataset> {
        self.then(Op::Unbatch)
    }

    /// Re-groups batched elements into batches of `batch_size`.
    pub fn rebatch(&self, batch_size: u64, drop_remainder: bool) -> Result<Dataset> {
        self.then(Op::Rebatch { batch_size, drop_remainder, batch_sizes: Vec::new() })
    }

    /// tf.data's `rebatch` with a list of sizes: the batches take `batch_sizes` in turn,
    /// cycling; a size of 0 is an empty batch.
    pub fn rebatch_sizes(&self, batch_sizes: Vec<u64>, drop_remainder: bool) -> Result<Dataset> {
        let batch_size = batch_sizes.first().copied().unwrap_or(0);
        self.then(Op::Rebatch { batch_size, drop_remainder, batch_sizes })
    }

    /// Sliding windows, each emitted batched.
    pub fn window(&self, size: u64, shift: u64, stride: u64, drop_remainder: bool) -> Result<Dataset> {
        self.then(Op::Window { size, shift, stride, drop_remainder })
    }

    /// Groups by an int64 `key`, emitting each group batched every `window_size` elements.
    pub fn group_by_window(&self, key: DfExpr, window_size: u64) -> Result<Dataset> {
        self.then(Op::GroupByWindow { key: lower(&key)?, window_size })
    }

    /// Buckets elements by `length` and pads each bucket's batches.
    pub fn bucket_by_sequence_length(
        &self,
        length: DfExpr,
        bucket_boundaries: Vec<i64>,
        bucket_batch_sizes: Vec<u64>,
        options: BucketOptions,
    ) -> Result<Dataset> {
        self.then(Op::BucketBySequenceLength {
            length: lower(&length)?,
            bucket_boundaries,
            bucket_batch_sizes,
            padding_values: literals(&options.padding_values, "bucket_by_sequence_length")?,
            pad_to_bucket_boundary: options.pad_to_bucket_boundary,
            drop_remainder: options.drop_remainder,
        })
    }

    // ----- ordering, counting, combining -----

    /// Shuffles with a buffer of `buffer_size` elements, reshuffling each iteration.
    pub fn shuffle(&self, buffer_size: u64, seed: Option<u64>) -> Result<Dataset> {
        self.shuffle_with(buffer_size, seed, true)
    }

    /// Shuffles, choosing whether each iteration gets a new order.
    pub fn shuffle_with(&self, buffer_size: u64, seed: Option<u64>, reshuffle_each_iteration: bool) -> Result<Dataset> {
        self.then(Op::Shuffle { buffer_size, seed, reshuffle_each_iteration })
    }

    /// Repeats `count` times, or forever with `None`.
    pub fn repeat(&self, count: Option<u64>) -> Result<Dataset> {
        self.then(Op::Repeat { count: count.map_or(-1, |c| c as i64) })
    }

    /// The first `count` elements (a negative count, as tf.data's -1: all).
    pub fn take(&self, count: i64) -> Result<Dataset> {
        self.then(Op::Take { count: count.max(-1) })
    }

    /// All but the first `count` elements (a negative count, as tf.data's -1: none).
    pub fn skip(&self, count: i64) -> Result<Dataset> {
        self.then(Op::Skip { count: count.max(-1) })
    }

    /// Every `num_shards`-th element from `index`.
    pub fn shard(&self, num_shards: u64, index: u64) -> Result<Dataset> {
        self.then(Op::Shard { num_shards, index })
    }

    /// Adds an int64 counter field `index` from `start` before the element's fields.
    pub fn enumerate(&self, start: i64) -> Result<Dataset> {
        self.then(Op::Enumerate { start, field: "index".into() })
    }

    /// Zips with `others` (distinct field names); ends with the shortest.
    pub fn zip(datasets: &[&Dataset]) -> Result<Dataset> {
        Dataset::combine(datasets, Op::Zip)
    }

    /// This dataset's elements, then `other`'s.
    pub fn concatenate(&self, other: &Dataset) -> Result<Dataset> {
        Dataset::combine(&[self, other], Op::Concatenate)
    }

    /// Draws each element from one of `datasets` at random by `weights`.
    pub fn sample_from_datasets(
        datasets: &[&Dataset],
        weights: Vec<f64>,
        seed: Option<u64>,
        stop_on_empty_dataset: bool,
    ) -> Result<Dataset> {
        Dataset::combine(datasets, Op::SampleFromDatasets { weights, seed, stop_on_empty_dataset })
    }

    /// tf.data's `choose_from_datasets`: for each element `i` of `choices` (one int64 scalar
    /// field), the next element of `datasets[i]`. With `stop_on_empty_dataset` the result
    /// ends when a chosen dataset has ended; otherwise that choice is skipped. A choice
    /// outside `datasets` is an error in its place.
    pub fn choose_from_datasets(
        datasets: &[&Dataset],
        choices: &Dataset,
        stop_on_empty_dataset: bool,
    ) -> Result<Dataset> {
        let inputs: Vec<&Dataset> = std::iter::once(choices).chain(datasets.iter().copied()).collect();
        Dataset::combine(&inputs, Op::ChooseFromDatasets { stop_on_empty_dataset })
    }

    /// tf.data's `unique`: the elements not seen before, in order, for elements of scalar
    /// integer, string or bool fields. It remembers every distinct element (and its
    /// checkpoints hold them), as tf.data's does.
    pub fn unique(&self) -> Result<Dataset> {
        self.then(Op::Unique)
    }

    /// Produces ahead of the consumer (`buffer_size` elements or autotuned).
    pub fn prefetch(&self, buffer_size: Tunable) -> Result<Dataset> {
        self.then(Op::Prefetch { buffer_size })
    }

    /// Caches the elements of the first complete pass in memory.
    pub fn cache(&self) -> Result<Dataset> {
        self.then(Op::Cache { path: None, count: crate::cache_counts::written_count(&self.plan) })
    }

    /// Skips elements whose computation failed.
    pub fn ignore_errors(&self) -> Result<Dataset> {
        self.then(Op::IgnoreErrors)
    }

    /// A running state: each element updates the state (`update` over state and element
    /// fields) and emits `output` computed from the new state and the element.
    pub fn scan(
        &self,
        initial: &[(String, DfExpr)],
        update: &[(String, DfExpr)],
        output: &[(String, DfExpr)],
    ) -> Result<Dataset> {
        let initial = initial.iter().map(|(n, e)| Ok((n.clone(), literal(e, "scan")?))).collect::<Result<_>>()?;
        self.then(Op::Scan { initial, update: named(update)?, output: named(output)?, function: None })
    }

    /// tf.data's `scan` with a function: `f` is called once per element, in order, with one
    /// row holding the state's fields (from `initial`, literals) then the element's, and
    /// returns one row of the new state's fields (the same names and types) then the output
    /// element's, whose spec `f` declares ([`MapFunction::element`]). A failing call is an
    /// error in that element's place and leaves the state as it was. The state is saved in
    /// checkpoints, so `f` itself keeps none.
    pub fn scan_with(&self, initial: &[(String, DfExpr)], f: MapFunction) -> Result<Dataset> {
        let initial = initial.iter().map(|(n, e)| Ok((n.clone(), literal(e, "scan")?))).collect::<Result<_>>()?;
        let MapFunction::Closure(c, output) = f else {
            return Err(Error::plan("scan", "scan_with takes a closure (MapFunction::element)"));
        };
        let mut registry = self.registry.clone();
        let closure = c.register(&mut registry, "scan")?;
        if closure.kind != flumen_ir::ClosureKind::PerElement {
            return Err(Error::plan("scan", "a scan function is called per element (MapFunction::element)"));
        }
        let function = Some(MapFn::Closure { closure, output });
        let op = Op::Scan { initial, update: Vec::new(), output: Vec::new(), function };
        Ok(self.over(Plan::new(op, vec![self.plan.clone()])?, registry))
    }

    /// Folds every element into a state and returns the final state (one row).
    pub fn reduce(&self, initial: &[(String, DfExpr)], update: &[(String, DfExpr)]) -> Result<RecordBatch> {
        let initial = initial.iter().map(|(n, e)| Ok((n.clone(), literal(e, "reduce")?))).collect::<Result<_>>()?;
        let reduced = self.then(Op::Reduce { initial, update: named(update)? })?;
        let mut chunks = reduced.iter_chunks();
        chunks.next().unwrap_or_else(|| Err(Error::execution("reduce", "produced no state")))
    }

    // ----- inspection -----

    /// The typed plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The closures and generators the plan calls.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The static type of the elements (tf.data's `element_spec`).
    pub fn element_spec(&self) -> &ElementSpec {
        self.plan.spec()
    }

    /// The number of elements if known without running (`Some(u64::MAX)`: infinite).
    pub fn cardinality(&self) -> Option<u64> {
        self.plan.cardinality()
    }

    /// The plan as JSON (see `flumen_ir::json`); fails if it uses an unnamed closure.
    pub fn serialize(&self) -> Result<String> {
        flumen_ir::json::serialize(&self.plan)
    }

    /// The dataset described by `json`; its closures and generators are looked up in
    /// `registry` when it runs.
    pub fn deserialize(json: &str, registry: Registry) -> Result<Dataset> {
        Ok(Dataset::from_plan(flumen_ir::json::deserialize(json)?, registry))
    }

    /// A stable hash of the plan (seeds included).
    pub fn fingerprint(&self) -> String {
        self.print.get_or_init(|| flumen_ir::fingerprint::fingerprint(&self.plan)).clone()
    }

    /// The fingerprint of the optimized plan (what checkpoints check options by).
    pub(crate) fn optimized_fingerprint(&self) -> Result<String> {
        let plan = self.optimized_plan()?;
        // The operator tree a checkpoint mirrors also depends on stage fusion.
        let unfused = if self.options.stage_fusion { "" } else { "-unfused" };
        Ok(self
            .optimized_print
            .get_or_init(|| format!("{}{unfused}", flumen_ir::fingerprint::fingerprint(&plan)))
            .clone())
    }

    /// A stable hash of the plan that ignores seeds.
    pub fn fingerprint_without_seeds(&self) -> String {
        flumen_ir::fingerprint::fingerprint_without_seeds(&self.plan)
    }

    /// What the optimizer made of this dataset's plan under its options (computed once).
    pub fn optimization_report(&self) -> Result<Arc<Report>> {
        Ok(self.optimized()?.0)
    }

    /// The plan that runs: the optimized plan (the written one when optimization is off).
    pub fn optimized_plan(&self) -> Result<Plan> {
        Ok(self.optimized()?.1)
    }

    fn optimized(&self) -> Result<(Arc<Report>, Plan)> {
        self.optimized
            .get_or_init(|| {
                let config = &self.options.optimization;
                let report = match &self.options.optimizer {
                    Some(custom) => custom.0.optimize_with(&self.plan, config),
                    None => optimize(&self.plan, config),
                }
                .map_err(|e| e.to_string())?;
                let plan = self.shared.intern(&report.output).map_err(|e| e.to_string())?;
                Ok((Arc::new(report), plan))
            })
            .clone()
            .map_err(|e| Error::plan("optimizer", e))
    }

    /// The logical plan, what each optimizer stage did, the optimized plan and the physical
    /// operators, as text (see [`Dataset::explain_with`]).
    pub fn explain(&self) -> String {
        self.explain_with(ExplainFormat::Text, false).unwrap_or_else(|e| format!("explain failed: {e}"))
    }

    /// The explanation in `format`; `verbose` adds the plan after each stage.
    pub fn explain_with(&self, format: ExplainFormat, verbose: bool) -> Result<String> {
        let report = self.optimization_report()?;
        Ok(crate::explain::render(&report, format, verbose, self.options.stage_fusion))
    }

    /// The options this dataset runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The same dataset with other options.
    pub fn with_options(&self, options: Options) -> Dataset {
        Dataset { options, optimized: Arc::default(), optimized_print: Arc::default(), ..self.clone() }
    }

    // ----- iteration -----

    /// The execution context of iteration `iteration`, with unseeded random operators drawing
    /// from `unseeded` (the dataset's own base, or the one a checkpoint recorded).
    pub(crate) fn context(&self, iteration: u64, unseeded: Option<u64>) -> ExecContext {
        let o = &self.options;
        let options = ExecOptions {
            chunk_rows: o.chunk_rows,
            deterministic: o.deterministic,
            threads: o.threads,
            autotune: AutotuneOptions { enabled: o.optimization.autotune, ..o.autotune },
            stage_fusion: o.stage_fusion,
            map_files: o.map_files,
            // Not `..ExecOptions::default()`, whose autotune options would read the
            // machine's free memory again only to be replaced.
            cores: flumen_runtime::context::cores(),
        };
        let mut ctx = ExecContext::new(self.registry.clone(), Arc::new(options), self.shared.clone(), iteration);
        if let Some(unseeded) = unseeded {
            ctx.unseeded = unseeded;
        }
        ctx
    }

    fn root(&self) -> Result<(flumen_runtime::BoxOperator, ExecContext)> {
        self.root_at(self.shared.next_iteration())
    }

    fn root_at(&self, iteration: u64) -> Result<(flumen_runtime::BoxOperator, ExecContext)> {
        let ctx = self.context(iteration, None);
        Ok((build_root(&self.optimized_plan()?, &ctx)?, ctx))
    }

    /// An iterator of iteration number `iteration` of this dataset (from 0), as the
    /// `iteration`-th call of [`Dataset::iter`] would make it: the same reshuffles and random
    /// draws. Processes that rebuild one dataset (workers of a cluster, each epoch's fresh
    /// process) agree on an epoch's order through it.
    pub fn iter_at(&self, iteration: u64) -> DatasetIterator {
        Iter::start(self.clone(), self.root_at(iteration))
    }

    /// A new iterator over the elements: one `RecordBatch` per element (one row, or the
    /// `b` rows of a batch). An error building the pipeline is its first item.
    ///
    /// The iterator can be checkpointed ([`Iter::save`]) and a new iterator of the same
    /// dataset restored from the checkpoint ([`Iter::restore`], [`Dataset::iter_from`]).
    pub fn iter(&self) -> DatasetIterator {
        Iter::start(self.clone(), self.root())
    }

    /// Runs one full pass and returns its `explain analyze` (see [`Iter::analyze`]); errors
    /// in the stream are counted, not returned.
    pub fn explain_analyze(&self) -> Result<String> {
        let mut it = self.iter_chunks();
        for item in it.by_ref() {
            drop(item);
        }
        it.analyze()
    }

    /// A new iterator over chunks of elements (each row one element): the fast path for
    /// consumers that process many elements at once. It checkpoints like [`Dataset::iter`]'s.
    pub fn iter_chunks(&self) -> ChunkIter {
        Iter::start(self.clone(), self.root())
    }

    /// A chunk iterator of iteration number `iteration`, as [`Dataset::iter_at`].
    pub fn iter_chunks_at(&self, iteration: u64) -> ChunkIter {
        Iter::start(self.clone(), self.root_at(iteration))
    }
}

/// An iterator over a dataset: of elements ([`DatasetIterator`], from [`Dataset::iter`]) or of
/// chunks ([`ChunkIter`], from [`Dataset::iter_chunks`]). Both can be saved and restored
/// (`crate::checkpoint`).
///
/// Dropping an iterator stops its producers and joins every thread it started, so no thread
/// outlives it; it therefore waits for the calls already running to return: a user function
/// in a parallel map, a read or open in a producer. Dropping it while a 3 s closure runs
/// takes 3 s.
///
/// To stop a running pipeline from another thread (a training loop's watchdog, a shutdown
/// signal), take its [`CancelHandle`] ([`Iter::cancel_handle`]) and call
/// [`CancelHandle::cancel`]: no new work starts, and the iterator's next item, or the one it
/// is waiting for, is [`Error::Cancelled`], then it ends.
pub struct Iter<C> {
    pub(crate) inner: std::result::Result<C, Option<Error>>,
    pub(crate) dataset: Dataset,
    /// The context the operators were built in (its iteration index and unseeded base go
    /// into checkpoints).
    pub(crate) ctx: Option<ExecContext>,
    /// Items delivered, errors included.
    pub(crate) delivered: u64,
    /// The cancellation has been reported; the iterator has ended.
    pub(crate) cancelled: bool,
}

/// Asks a running iterator to stop, from any thread (see [`Iter::cancel_handle`]).
#[derive(Debug, Clone)]
pub struct CancelHandle(Arc<flumen_runtime::cancel::Cancel>);

impl CancelHandle {
    /// Asks the iterator to stop: its producers start no more pulls, tasks or reads, and its
    /// next item (or the one a `next` waiting now was waiting for) is [`Error::Cancelled`],
    /// after which it ends. Calls already running (a user function, a read) finish first;
    /// their results are dropped. Cancelling twice does nothing more.
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether [`CancelHandle::cancel`] has been called.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// The element iterator of a dataset (see [`Dataset::iter`]).
pub type DatasetIterator = Iter<ElementIterator>;

/// The chunk iterator of a dataset (see [`Dataset::iter_chunks`]).
pub type ChunkIter = Iter<ChunkIterator>;

impl<C> Iter<C> {
    /// A handle that stops this iterator from another thread. An iterator that failed to
    /// start gets a handle that affects nothing.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(self.ctx.as_ref().map_or_else(flumen_runtime::cancel::Cancel::new, |ctx| ctx.cancel.clone()))
    }

    /// `explain analyze` of this iterator so far: each physical operator with the elements,
    /// chunks, errors and bytes it delivered, the time spent in it, its buffer occupancy,
    /// the parallelism and buffer sizes it ran with (and, when autotuned, every value the
    /// tuner gave them and when), and which operator is the bottleneck.
    pub fn analyze(&self) -> Result<String> {
        let ctx = self.ctx.as_ref().ok_or_else(|| Error::execution("analyze", "the iterator failed to start"))?;
        Ok(flumen_runtime::analyze::analyze(
            &self.dataset.optimized_plan()?,
            &ctx.metrics,
            &ctx.budget,
            ctx.options.stage_fusion,
        ))
    }
}

impl<C: Cursor> Iter<C> {
    fn start(dataset: Dataset, root: Result<(flumen_runtime::BoxOperator, ExecContext)>) -> Self {
        let cursor = root.and_then(|(root, ctx)| {
            let mut cursor = C::over(root, &dataset)?;
            if dataset.options.symbolic_checkpoint {
                cursor.record_positions()?;
            }
            Ok((cursor, ctx))
        });
        let (inner, ctx) = match cursor {
            Ok((it, ctx)) => (Ok(it), Some(ctx)),
            Err(e) => (Err(Some(e)), None),
        };
        Iter { inner, dataset, ctx, delivered: 0, cancelled: false }
    }
}

impl<C: Iterator<Item = Result<RecordBatch>>> Iterator for Iter<C> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let cancelled = self.ctx.as_ref().is_some_and(|ctx| ctx.cancel.is_cancelled());
        let next = match &mut self.inner {
            // Once cancelled, whatever the operators would give (an element produced before
            // the request, an error of the input ending early) is replaced by one report.
            _ if cancelled || self.cancelled => {
                (!std::mem::replace(&mut self.cancelled, true)).then_some(Err(Error::Cancelled))
            }
            Ok(it) => match it.next() {
                Some(Err(Error::Cancelled)) => {
                    self.cancelled = true;
                    Some(Err(Error::Cancelled))
                }
                next => next,
            },
            Err(e) => e.take().map(Err),
        };
        self.delivered += next.is_some() as u64;
        next
    }
}

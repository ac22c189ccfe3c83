//! Plan operators and their typing rules.
//!
//! Each operator computes its output spec from its inputs' specs and rejects ill-typed plans
//! when the plan is built, so a plan that exists is a plan that type-checks.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{Expr, Scalar};
use crate::function::{DatasetFn, MapFn, NamedExpr, Predicate};
use crate::source::SourceDesc;
use crate::spec::{ElementSpec, FieldKind, FieldSpec, UNKNOWN};

/// The compression of snapshot and file-cache shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Stored as is.
    None,
    /// LZ4 frames: fast, the default.
    #[default]
    Lz4,
    /// Zstandard: smaller, slower to write.
    Zstd,
}

/// How a `snapshot` writes and reads its files (the tf.data snapshot RFC's options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotSpec {
    /// Shard compression.
    #[serde(default)]
    pub compression: Compression,
    /// Shard files written in parallel by a write, and read interleaved by a read.
    #[serde(default = "SnapshotSpec::default_shards")]
    pub shards: u64,
    /// Read the shards and their chunks in a seeded random order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_on_read: Option<u64>,
    /// A pending (unfinished) snapshot older than this many seconds is taken over.
    #[serde(default = "SnapshotSpec::default_expiry")]
    pub pending_expiry_secs: u64,
    /// The snapshot's key: the seedless fingerprint of the upstream plan as written (set by
    /// `Dataset::snapshot`), or a name the user pinned; when absent, the runtime uses the
    /// fingerprint of the upstream plan it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The shard of each element (an int64 expression, taken modulo `shards`) when writing;
    /// chunks go to shards in turn when absent (the RFC's `writer_fn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_by: Option<Expr>,
    /// A registered dataset closure that reads the shards (the RFC's `reader_fn`): called
    /// with one element `{shards: list<string>}` (the shard files in written order), it
    /// returns the dataset of elements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<crate::function::ClosureRef>,
}

impl SnapshotSpec {
    fn default_shards() -> u64 {
        2
    }

    fn default_expiry() -> u64 {
        24 * 60 * 60
    }
}

impl Default for SnapshotSpec {
    fn default() -> Self {
        SnapshotSpec {
            compression: Compression::default(),
            shards: SnapshotSpec::default_shards(),
            shuffle_on_read: None,
            pending_expiry_secs: SnapshotSpec::default_expiry(),
            fingerprint: None,
            shard_by: None,
            reader: None,
        }
    }
}

/// A degree of parallelism or a buffer size that may be left to the autotuner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Tunable {
    /// Not set: the operator's sequential default.
    #[default]
    Default,
    /// A fixed value.
    Fixed(u32),
    /// tf.data's `AUTOTUNE`: chosen while running.
    Autotune,
}

impl Tunable {
    fn is_default(&self) -> bool {
        *self == Tunable::Default
    }
}

/// One plan operator. Sources have no inputs; `zip`, `concatenate` and
/// `sample_from_datasets` have several; every other operator has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Op {
    /// A source of elements.
    Source(SourceDesc),
    /// Apply a function to each element.
    Map {
        /// The function.
        func: MapFn,
        /// Parallel calls (honoured semantically; the parallel runtime uses it).
        #[serde(default, skip_serializing_if = "Tunable::is_default")]
        num_parallel_calls: Tunable,
        /// Keep input order when parallel (`None`: the pipeline's option).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deterministic: Option<bool>,
        /// Run the function over whole chunks of elements at once (pfor). Set by the
        /// optimizer's vectorize rules; otherwise the function is called once per element.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        vectorized: bool,
    },
    /// Keep the elements for which the predicate holds.
    Filter {
        /// The predicate.
        predicate: Predicate,
        /// Evaluate the predicate over whole chunks at once (pfor); per element otherwise.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        vectorized: bool,
        /// Parallel calls of the predicate (tf.data's parallel filter; set by the optimizer's
        /// filter_parallelization or by the user).
        #[serde(default, skip_serializing_if = "Tunable::is_default")]
        num_parallel_calls: Tunable,
        /// Keep input order when parallel (`None`: the pipeline's option).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deterministic: Option<bool>,
    },
    /// `map` followed by `batch`, fused (tf.data's map_and_batch): the function's results are
    /// written straight into output batches.
    MapAndBatch {
        /// The function, applied to each element before batching.
        func: MapFn,
        /// Elements per batch (> 0).
        batch_size: u64,
        /// Drop a last, smaller batch.
        drop_remainder: bool,
        /// Parallel calls.
        #[serde(default, skip_serializing_if = "Tunable::is_default")]
        num_parallel_calls: Tunable,
        /// Keep input order when parallel (`None`: the pipeline's option).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deterministic: Option<bool>,
        /// Run the function over whole chunks at once (pfor); per element otherwise.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        vectorized: bool,
    },
    /// Map each element to a dataset and concatenate them.
    FlatMap {
        /// The function.
        func: DatasetFn,
    },
    /// Map each element to a dataset and interleave `cycle_length` of them, `block_length`
    /// elements at a time.
    Interleave {
        /// The function.
        func: DatasetFn,
        /// How many inputs are open at once (`Default`/`Autotune`: the number of cores, as tf.data).
        cycle_length: Tunable,
        /// Elements taken from one input before moving to the next.
        block_length: u64,
        /// Parallel calls.
        #[serde(default, skip_serializing_if = "Tunable::is_default")]
        num_parallel_calls: Tunable,
        /// Keep tf.data's deterministic order when parallel.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deterministic: Option<bool>,
    },
    /// Group `batch_size` consecutive elements into one.
    Batch {
        /// Elements per batch (> 0).
        batch_size: u64,
        /// Drop a last, smaller batch.
        drop_remainder: bool,
        /// Parallel copy.
        #[serde(default, skip_serializing_if = "Tunable::is_default")]
        num_parallel_calls: Tunable,
        /// Keep input order when parallel (`None`: the pipeline's option).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deterministic: Option<bool>,
    },
    /// Group `batch_size` consecutive elements into one whose dense fields of unknown
    /// dimensions become ragged (`tf.data`'s `ragged_batch`): elements of other shapes batch,
    /// where `batch` requires one shape per batch.
    RaggedBatch {
        /// Elements per batch (> 0).
        batch_size: u64,
        /// Drop a last, smaller batch.
        drop_remainder: bool,
    },
    /// Batch, padding unknown dims to the largest in the batch (or to `padded_shapes`).
    PaddedBatch {
        /// Elements per batch (> 0).
        batch_size: u64,
        /// Per-field target shapes (`-1`: pad to the batch's longest); absent fields pad to longest.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        padded_shapes: BTreeMap<String, Vec<i64>>,
        /// Per-field padding values (default zero / empty string / false).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        padding_values: BTreeMap<String, Scalar>,
        /// Drop a last, smaller batch.
        drop_remainder: bool,
    },
    /// Split each element along its leading dimension.
    Unbatch,
    /// Re-group elements into batches of `batch_size` (= `unbatch().batch(batch_size)`).
    Rebatch {
        /// Elements per new batch (> 0).
        batch_size: u64,
        /// Drop a last, smaller batch.
        drop_remainder: bool,
        /// tf.data's list form: the batches take these sizes in turn, cycling (a 0 is an empty
        /// batch, which reads nothing), and `batch_size` is ignored. Empty: `batch_size`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        batch_sizes: Vec<u64>,
    },
    /// Randomly shuffle with a buffer of `buffer_size` elements.
    Shuffle {
        /// Buffer size (> 0).
        buffer_size: u64,
        /// Seed (random when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        /// Use a different order in every epoch and iteration.
        reshuffle_each_iteration: bool,
    },
    /// `shuffle` followed by `repeat`, fused: the same elements in the same order, with one
    /// shuffle buffer reused across epochs.
    ShuffleAndRepeat {
        /// Buffer size (> 0).
        buffer_size: u64,
        /// Seed (random when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        /// Use a different order in every epoch and iteration.
        reshuffle_each_iteration: bool,
        /// Repetitions, or -1.
        count: i64,
    },
    /// Repeat the input `count` times (`-1`: forever).
    Repeat {
        /// Repetitions, or -1.
        count: i64,
    },
    /// The first `count` elements (`-1`: all).
    Take {
        /// Count, or -1.
        count: i64,
    },
    /// All but the first `count` elements (`-1`: skip all).
    Skip {
        /// Count, or -1.
        count: i64,
    },
    /// Every `num_shards`-th element starting at `index`.
    Shard {
        /// Number of shards (> 0).
        num_shards: u64,
        /// This shard (< num_shards).
        index: u64,
    },
    /// Add a counter field (int64) before the element's fields.
    Enumerate {
        /// The first value.
        start: i64,
        /// The counter's field name.
        field: String,
    },
    /// Combine the inputs' elements side by side (fields must have distinct names);
    /// ends with the shortest input.
    Zip,
    /// The first input's elements, then the second's (specs must be compatible).
    Concatenate,
    /// Produce ahead of the consumer (semantically the identity).
    Prefetch {
        /// Buffer size in elements.
        buffer_size: Tunable,
    },
    /// Keep the elements of the first complete pass and replay them afterwards.
    Cache {
        /// A file path for an on-disk cache; in memory when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// For an in-memory cache, its input's element count as the plan was written, when
        /// known and finite: a pass that has handed out this many elements is complete. It
        /// is recorded when the plan is written (`Dataset::cache`, `Dataset::from_plan`), so
        /// that a rewrite below that makes the count known (or unknown) does not change when
        /// the cache completes, which a later pass could tell (a closure that keeps state
        /// is called again, a reshuffle draws again).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
    },
    /// Persist the input's elements under `path` and, in later runs of the same upstream
    /// plan, read them instead of recomputing (tf.data's `snapshot`).
    Snapshot {
        /// The snapshot directory.
        path: String,
        /// How it is written and read.
        #[serde(default)]
        options: SnapshotSpec,
    },
    /// Fold all elements into one: `state = update(state, element)`; one element out.
    Reduce {
        /// The initial state's fields.
        initial: Vec<(String, Scalar)>,
        /// The new value of each state field, over state and element fields.
        update: Vec<NamedExpr>,
    },
    /// Like reduce, but emit an element after each input element.
    Scan {
        /// The initial state's fields.
        initial: Vec<(String, Scalar)>,
        /// The new value of each state field, over state and element fields.
        update: Vec<NamedExpr>,
        /// The output element's fields, over the *new* state and the element's fields.
        output: Vec<NamedExpr>,
        /// A closure computing each step instead of `update` and `output` (which are then
        /// empty), as tf.data's `scan_func`: called once per element with the state's
        /// fields then the element's, it returns the new state's fields then the output
        /// element's (`MapFn::Closure`, whose `output` is the output element's spec).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        function: Option<MapFn>,
    },
    /// Sliding windows of `size` elements every `shift` elements, taking every `stride`-th;
    /// each window is emitted batched (tf.data's `window` followed by `batch` on each window).
    Window {
        /// Elements per window (> 0).
        size: u64,
        /// Elements between window starts (> 0).
        shift: u64,
        /// Step between elements within a window (> 0).
        stride: u64,
        /// Drop windows smaller than `size`.
        drop_remainder: bool,
    },
    /// Elements while the predicate holds; stops at the first that fails.
    TakeWhile {
        /// The predicate.
        predicate: Predicate,
    },
    /// Skip elements whose computation failed.
    IgnoreErrors,
    /// The elements not seen before (tf.data's `unique`): elements of scalar integer, string
    /// or bool fields, the first of each distinct value kept, in order. It remembers every
    /// distinct element, as tf.data's does.
    Unique,
    /// The identity on elements, which says where they came from for the map above it that
    /// draws random numbers: its input's element `p` is element `offset + stride * p` of the
    /// dataset below the `shard`s and `skip`s under it, as written. That map keys its draws
    /// by that position, so an element gets the same draws sharded or not. `Dataset::map`
    /// adds it; the optimizer moves nothing across it.
    ElementPositions {
        /// The position of the input's first element.
        offset: u64,
        /// The distance between the positions of consecutive input elements.
        stride: u64,
    },
    /// Draw each element from one of the inputs, chosen at random by `weights`.
    SampleFromDatasets {
        /// One weight per input (normalized).
        weights: Vec<f64>,
        /// Seed (random when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        /// End when any input ends (otherwise continue with the others).
        stop_on_empty_dataset: bool,
    },
    /// tf.data's `choose_from_datasets`: the first input is the choice dataset (one int64
    /// scalar field), and each of its elements `i` is followed by the next element of input
    /// `i + 1` (the datasets chosen from). A choice outside the datasets is an error in its
    /// place.
    ChooseFromDatasets {
        /// End when a chosen input has ended (otherwise skip that choice and go on).
        stop_on_empty_dataset: bool,
    },
    /// Group elements by an int64 key; emit a group batched when it has `window_size`
    /// elements, and every remaining group at the end in key order.
    GroupByWindow {
        /// The key (int64).
        key: Expr,
        /// Elements per group batch (> 0).
        window_size: u64,
    },
    /// Batch elements of similar length: bucket `i` holds lengths in
    /// `[boundaries[i-1], boundaries[i])`, batched by `bucket_batch_sizes[i]` with padding.
    BucketBySequenceLength {
        /// The length of an element (int64 expression, e.g. `length(tokens)`).
        length: Expr,
        /// Bucket upper bounds, increasing.
        bucket_boundaries: Vec<i64>,
        /// One batch size per bucket (`boundaries.len() + 1`).
        bucket_batch_sizes: Vec<u64>,
        /// Per-field padding values.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        padding_values: BTreeMap<String, Scalar>,
        /// Pad to the bucket's upper boundary - 1 instead of the batch's longest.
        pad_to_bucket_boundary: bool,
        /// Drop each bucket's last, smaller batch.
        drop_remainder: bool,
    },
}

/// The closure field of an operator, borrowed as `$op` is (`as_ref` or `as_mut` for the
/// optional snapshot reader): one list of the operators that call closures, for
/// [`Op::closure`] and [`Op::closure_mut`].
macro_rules! closure_of {
    ($op:expr, $borrow:ident) => {
        match $op {
            Op::Map { func: MapFn::Closure { closure, .. }, .. }
            | Op::MapAndBatch { func: MapFn::Closure { closure, .. }, .. } => Some(closure),
            Op::Filter { predicate: Predicate::Closure { closure }, .. }
            | Op::TakeWhile { predicate: Predicate::Closure { closure } } => Some(closure),
            Op::FlatMap { func: DatasetFn::Closure { closure, .. } }
            | Op::Interleave { func: DatasetFn::Closure { closure, .. }, .. } => Some(closure),
            Op::Snapshot { options, .. } => options.reader.$borrow(),
            Op::Scan { function: Some(MapFn::Closure { closure, .. }), .. } => Some(closure),
            _ => None,
        }
    };
}

impl Op {
    /// The operator's name, as in tf.data (`map`, `padded_batch`, ...).
    pub fn name(&self) -> String {
        let s = match self {
            Op::Source(s) => return s.name(),
            Op::Map { .. } => "map",
            Op::Filter { .. } => "filter",
            Op::MapAndBatch { .. } => "map_and_batch",
            Op::ShuffleAndRepeat { .. } => "shuffle_and_repeat",
            Op::FlatMap { .. } => "flat_map",
            Op::Interleave { .. } => "interleave",
            Op::Batch { .. } => "batch",
            Op::PaddedBatch { .. } => "padded_batch",
            Op::RaggedBatch { .. } => "ragged_batch",
            Op::Unbatch => "unbatch",
            Op::Rebatch { .. } => "rebatch",
            Op::Shuffle { .. } => "shuffle",
            Op::Repeat { .. } => "repeat",
            Op::Take { .. } => "take",
            Op::Skip { .. } => "skip",
            Op::Shard { .. } => "shard",
            Op::Enumerate { .. } => "enumerate",
            Op::Zip => "zip",
            Op::Concatenate => "concatenate",
            Op::Prefetch { .. } => "prefetch",
            Op::Cache { .. } => "cache",
            Op::Snapshot { .. } => "snapshot",
            Op::Reduce { .. } => "reduce",
            Op::Scan { .. } => "scan",
            Op::Window { .. } => "window",
            Op::TakeWhile { .. } => "take_while",
            Op::IgnoreErrors => "ignore_errors",
            Op::Unique => "unique",
            Op::ElementPositions { .. } => "element_positions",
            Op::SampleFromDatasets { .. } => "sample_from_datasets",
            Op::ChooseFromDatasets { .. } => "choose_from_datasets",
            Op::GroupByWindow { .. } => "group_by_window",
            Op::BucketBySequenceLength { .. } => "bucket_by_sequence_length",
        };
        s.to_string()
    }

    /// The closure the operator calls, if any (its function's, a dataset function's, a
    /// snapshot's reader).
    pub fn closure(&self) -> Option<&crate::function::ClosureRef> {
        closure_of!(self, as_ref)
    }

    /// [`Op::closure`], to change.
    pub fn closure_mut(&mut self) -> Option<&mut crate::function::ClosureRef> {
        closure_of!(self, as_mut)
    }

    /// How many inputs the operator takes (`None`: one or more).
    pub fn arity(&self) -> Option<usize> {
        match self {
            Op::Source(_) => Some(0),
            Op::Zip | Op::SampleFromDatasets { .. } | Op::ChooseFromDatasets { .. } => None,
            Op::Concatenate => Some(2),
            _ => Some(1),
        }
    }

    /// The output spec given the inputs' specs, or why the operator is ill-typed there.
    pub fn output_spec(&self, inputs: &[&ElementSpec]) -> Result<ElementSpec> {
        let name = self.name();
        match self.arity() {
            Some(n) if inputs.len() != n => {
                return Err(Error::plan(&name, format!("takes {n} input(s), got {}", inputs.len())))
            }
            None if inputs.is_empty() => return Err(Error::plan(&name, "needs at least one input")),
            _ => {}
        }
        let input = || inputs[0];
        let positive = |what: &str, v: u64| -> Result<()> {
            if v == 0 {
                Err(Error::plan(&name, format!("{what} must be > 0")))
            } else {
                Ok(())
            }
        };
        match self {
            Op::Source(s) => s.output_spec(),
            Op::Map { func, .. } => map_output(func, input()),
            Op::MapAndBatch { func, batch_size, drop_remainder, .. } => {
                positive("batch_size", *batch_size)?;
                let mapped = map_output(func, input())?;
                Ok(mapped.batched(if *drop_remainder { *batch_size as i64 } else { UNKNOWN }))
            }
            Op::ShuffleAndRepeat { buffer_size, count, .. } => {
                positive("buffer_size", *buffer_size)?;
                if *count < -1 {
                    return Err(Error::plan(&name, format!("count must be >= -1, got {count}")));
                }
                Ok(input().clone())
            }
            Op::Filter { predicate, .. } | Op::TakeWhile { predicate } => {
                check_predicate(predicate, input(), &name)?;
                Ok(input().clone())
            }
            Op::FlatMap { func } | Op::Interleave { func, .. } => {
                if let Op::Interleave { block_length, cycle_length, .. } = self {
                    positive("block_length", *block_length)?;
                    if *cycle_length == Tunable::Fixed(0) {
                        return Err(Error::plan(&name, "cycle_length must be > 0"));
                    }
                }
                dataset_fn_output(func, input(), &name)
            }
            Op::Batch { batch_size, drop_remainder, .. } => {
                positive("batch_size", *batch_size)?;
                Ok(input().batched(if *drop_remainder { *batch_size as i64 } else { UNKNOWN }))
            }
            Op::RaggedBatch { batch_size, drop_remainder } => {
                positive("batch_size", *batch_size)?;
                let mut ragged = input().clone();
                for f in &mut ragged.fields {
                    if f.kind == FieldKind::Dense && f.shape.contains(&UNKNOWN) {
                        f.kind = FieldKind::Ragged;
                    }
                }
                Ok(ragged.batched(if *drop_remainder { *batch_size as i64 } else { UNKNOWN }))
            }
            Op::PaddedBatch { batch_size, padded_shapes, padding_values, drop_remainder } => {
                positive("batch_size", *batch_size)?;
                let padded = padded_spec(input(), padded_shapes, padding_values, &name)?;
                Ok(padded.batched(if *drop_remainder { *batch_size as i64 } else { UNKNOWN }))
            }
            Op::Unbatch => unbatched_elements(input(), &name),
            Op::Rebatch { batch_size, drop_remainder, batch_sizes } => {
                let inner = unbatched_elements(input(), &name)?;
                if !batch_sizes.is_empty() {
                    if batch_sizes.iter().all(|&b| b == 0) {
                        return Err(Error::plan(&name, "batch_sizes must not all be 0"));
                    }
                    let first = batch_sizes[0];
                    let same = batch_sizes.iter().all(|&b| b == first);
                    return Ok(inner.batched(if same && *drop_remainder { first as i64 } else { UNKNOWN }));
                }
                positive("batch_size", *batch_size)?;
                // Input batches of a known size that the new size divides are all cut into
                // whole batches, as tf.data infers.
                let leading: Option<i64> = input().fields.first().and_then(|f| f.shape.first().copied());
                let divides = leading.is_some_and(|n| n > 0 && n % *batch_size as i64 == 0)
                    && input().fields.iter().all(|f| f.shape.first().copied() == leading);
                Ok(inner.batched(if *drop_remainder || divides { *batch_size as i64 } else { UNKNOWN }))
            }
            Op::Shuffle { buffer_size, .. } => {
                positive("buffer_size", *buffer_size)?;
                Ok(input().clone())
            }
            Op::Repeat { count } | Op::Take { count } | Op::Skip { count } => {
                if *count < -1 {
                    return Err(Error::plan(&name, format!("count must be >= -1, got {count}")));
                }
                Ok(input().clone())
            }
            Op::Shard { num_shards, index } => {
                positive("num_shards", *num_shards)?;
                if index >= num_shards {
                    return Err(Error::plan(&name, format!("index {index} must be < num_shards {num_shards}")));
                }
                Ok(input().clone())
            }
            Op::Enumerate { field, .. } => {
                let mut fields = vec![FieldSpec::scalar(field.clone(), DType::Int64)];
                fields.extend(input().fields.iter().cloned());
                let spec = ElementSpec { fields, batch_dims: 0 };
                spec.check_unique(&name)?;
                Ok(spec)
            }
            Op::Zip => {
                let fields: Vec<FieldSpec> = inputs.iter().flat_map(|s| s.fields.iter().cloned()).collect();
                // The zipped element is delivered as a batch only when every field provably has
                // the same leading size; zipping batches of other sizes is valid (tf.data gives
                // tuples of them), so the element then stays one row of list columns.
                let leading: Vec<i64> = fields.iter().filter_map(|f| f.shape.first().copied()).collect();
                let same_known = leading.len() == fields.len() && leading.iter().all(|d| *d >= 0 && *d == leading[0]);
                let min_dims = inputs.iter().map(|s| s.batch_dims).min().unwrap_or(0);
                let batch_dims = if same_known { min_dims } else { 0 };
                let spec = ElementSpec { fields, batch_dims };
                spec.check_unique(&name)?;
                Ok(spec)
            }
            Op::Concatenate => inputs[0].most_specific_common(inputs[1]).ok_or_else(|| {
                Error::plan(&name, format!("the inputs' elements differ: {}", inputs[0].difference(inputs[1])))
            }),
            Op::Prefetch { .. } | Op::IgnoreErrors => Ok(input().clone()),
            Op::Unique => {
                let keyable = |f: &FieldSpec| {
                    f.kind == FieldKind::Dense
                        && f.shape.is_empty()
                        && (f.dtype.is_integer() || matches!(f.dtype, DType::Utf8 | DType::Binary | DType::Bool))
                };
                match input().fields.iter().find(|f| !keyable(f)) {
                    _ if input().batch_dims > 0 => {
                        Err(Error::plan(&name, "takes unbatched elements (unique before batch)"))
                    }
                    Some(f) => Err(Error::plan(
                        &name,
                        format!("takes scalar integer, string or bool fields, as tf.data's does; {f} is not one"),
                    )),
                    None => Ok(input().clone()),
                }
            }
            Op::ElementPositions { stride, .. } => {
                positive("stride", *stride)?;
                Ok(input().clone())
            }
            Op::Cache { .. } => Ok(input().clone()),
            Op::Snapshot { options, .. } => {
                positive("shards", options.shards)?;
                if let Some(shard_by) = &options.shard_by {
                    check_int_expr(shard_by, input(), &name)?;
                }
                Ok(input().clone())
            }
            Op::Reduce { initial, update } => {
                let state = state_spec(initial, update, input(), &name)?;
                Ok(state)
            }
            Op::Scan { initial, update, function: Some(function), output } => {
                let state = state_spec(initial, update, input(), &name)?;
                scope_spec(&state, input(), &name)?;
                match function {
                    MapFn::Closure { output: out, .. } if update.is_empty() && output.is_empty() => {
                        out.check_unique(&name)?;
                        if let Some(f) = out.fields.iter().find(|f| state.field(&f.name).is_some()) {
                            return Err(Error::plan(&name, format!("output field '{}' is also a state field", f.name)));
                        }
                        Ok(out.clone())
                    }
                    _ => Err(Error::plan(&name, "a scan function is a closure, without update or output expressions")),
                }
            }
            Op::Scan { initial, update, output, function: None } => {
                let state = state_spec(initial, update, input(), &name)?;
                let scope = scope_spec(&state, input(), &name)?;
                let fields = output
                    .iter()
                    .map(|o| {
                        let t = o.expr.data_type(&scope).map_err(|e| Error::plan(&name, e.to_string()))?;
                        Ok(FieldSpec::scalar(o.name.clone(), t))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let spec = ElementSpec { fields, batch_dims: 0 };
                spec.check_unique(&name)?;
                Ok(spec)
            }
            Op::Window { size, shift, stride, drop_remainder } => {
                positive("size", *size)?;
                positive("shift", *shift)?;
                positive("stride", *stride)?;
                Ok(input().batched(if *drop_remainder { *size as i64 } else { UNKNOWN }))
            }
            Op::SampleFromDatasets { weights, .. } => {
                if weights.len() != inputs.len() {
                    return Err(Error::plan(&name, format!("{} weights for {} inputs", weights.len(), inputs.len())));
                }
                if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().sum::<f64>() <= 0.0 {
                    return Err(Error::plan(&name, "weights must be finite, >= 0 and not all zero"));
                }
                let mut spec = inputs[0].clone();
                for other in &inputs[1..] {
                    spec = spec.most_specific_common(other).ok_or_else(|| {
                        Error::plan(&name, format!("the inputs' elements differ: {}", inputs[0].difference(other)))
                    })?;
                }
                Ok(spec)
            }
            Op::ChooseFromDatasets { .. } => {
                let [choices, datasets @ ..] = inputs else { unreachable!("an operator has inputs") };
                let [choice] = &choices.fields[..] else {
                    return Err(Error::plan(&name, format!("the choice dataset has one int64 field, not {choices}")));
                };
                if choice.dtype != DType::Int64 || !choice.shape.is_empty() || choices.batch_dims > 0 {
                    return Err(Error::plan(
                        &name,
                        format!("the choice dataset's element is an int64 scalar, not {choice}"),
                    ));
                }
                let Some((first, rest)) = datasets.split_first() else {
                    return Err(Error::plan(&name, "needs datasets to choose from"));
                };
                let mut spec = (*first).clone();
                for other in rest {
                    spec = spec.most_specific_common(other).ok_or_else(|| {
                        Error::plan(&name, format!("the inputs' elements differ: {}", first.difference(other)))
                    })?;
                }
                Ok(spec)
            }
            Op::GroupByWindow { key, window_size } => {
                positive("window_size", *window_size)?;
                check_int_expr(key, input(), &name)?;
                Ok(input().batched(UNKNOWN))
            }
            Op::BucketBySequenceLength { length, bucket_boundaries, bucket_batch_sizes, padding_values, .. } => {
                check_int_expr(length, input(), &name)?;
                if bucket_batch_sizes.len() != bucket_boundaries.len() + 1 {
                    return Err(Error::plan(
                        &name,
                        format!(
                            "needs {} batch sizes for {} boundaries, got {}",
                            bucket_boundaries.len() + 1,
                            bucket_boundaries.len(),
                            bucket_batch_sizes.len()
                        ),
                    ));
                }
                if bucket_boundaries.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(Error::plan(&name, "bucket_boundaries must be strictly increasing"));
                }
                if bucket_batch_sizes.contains(&0) {
                    return Err(Error::plan(&name, "bucket batch sizes must be > 0"));
                }
                let padded = padded_spec(input(), &BTreeMap::new(), padding_values, &name)?;
                Ok(padded.batched(UNKNOWN))
            }
        }
    }

    /// The operator with every seed removed (for the seed-insensitive fingerprint).
    pub fn without_seeds(&self) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Shuffle { seed, .. } | Op::ShuffleAndRepeat { seed, .. } | Op::SampleFromDatasets { seed, .. } => {
                *seed = None
            }
            Op::Source(SourceDesc::ListFiles { seed, .. }) => *seed = None,
            _ => {}
        }
        op
    }
}

/// The output of an expression, closure or `parse_example` map.
fn map_output(func: &MapFn, input: &ElementSpec) -> Result<ElementSpec> {
    match func {
        MapFn::ParseExample { field, features } => {
            let error = |message: String| Error::plan("parse_example", message);
            match input.field(field) {
                Some(f) if f.dtype == DType::Binary && f.is_scalar() && input.batch_dims == 0 => {}
                Some(f) => {
                    return Err(error(format!(
                        "field '{field}' is {f}, not the scalar bytes of one serialized Example per element"
                    )))
                }
                None => return Err(error(format!("the element has no field '{field}' (it has {input})"))),
            }
            crate::example::output_spec(features).map_err(error)
        }
        MapFn::Closure { output, .. } => {
            output.check_unique("map")?;
            Ok(output.clone())
        }
        MapFn::Exprs { outputs, keep_input } => {
            let mut fields: Vec<FieldSpec> = if *keep_input { input.fields.clone() } else { Vec::new() };
            let mut seen: Vec<&str> = Vec::new();
            for o in outputs {
                if seen.contains(&o.name.as_str()) {
                    return Err(Error::plan("map", format!("field '{}' is assigned twice", o.name)));
                }
                seen.push(&o.name);
                let field = match &o.expr {
                    // A field passed through is the same field, whatever its shape or kind
                    // (a variable-length, ragged or sparse one too), under its new name.
                    Expr::Column(from) if input.field(from).is_some() => {
                        FieldSpec { name: o.name.clone(), ..input.field(from).expect("checked").clone() }
                    }
                    _ => {
                        let (t, tensor) = o
                            .expr
                            .value_type(input)
                            .map_err(|e| Error::plan("map", format!("field '{}': {e}", o.name)))?;
                        // Elementwise over a ragged field, the result is ragged too.
                        let ragged = !tensor.is_empty()
                            && o.expr.columns_outside_reductions().iter().any(|c| {
                                input.field(c).is_some_and(|f| f.kind == FieldKind::Ragged && !f.shape.is_empty())
                            });
                        let kind = if ragged { FieldKind::Ragged } else { FieldKind::Dense };
                        let shape = if tensor.is_empty() { expr_shape(&o.expr, input) } else { tensor };
                        FieldSpec { name: o.name.clone(), dtype: t, shape, kind }
                    }
                };
                match fields.iter_mut().find(|f| f.name == o.name) {
                    Some(slot) => *slot = field,
                    None => fields.push(field),
                }
            }
            Ok(ElementSpec { fields, batch_dims: input.batch_dims })
        }
    }
}

/// The shape of an expression's value: the batch dims of the columns it reads (a literal-only
/// expression on a batched element still yields one value per batch row).
fn expr_shape(expr: &Expr, input: &ElementSpec) -> Vec<i64> {
    if input.batch_dims == 0 {
        return Vec::new();
    }
    let cols = expr.columns();
    let shapes: Vec<&Vec<i64>> = cols.iter().filter_map(|c| input.field(c).map(|f| &f.shape)).collect();
    let from_fields = shapes.first().map(|s| s[..input.batch_dims].to_vec());
    from_fields
        .unwrap_or_else(|| input.fields.first().map(|f| f.shape[..input.batch_dims].to_vec()).unwrap_or_default())
}

fn check_predicate(predicate: &Predicate, input: &ElementSpec, operator: &str) -> Result<()> {
    match predicate {
        Predicate::Closure { .. } => Ok(()),
        Predicate::Expr { expr } => {
            let t = expr.data_type(input).map_err(|e| Error::plan(operator, e.to_string()))?;
            if t != DType::Bool {
                return Err(Error::plan(operator, format!("predicate must be bool, got {t} for {expr}")));
            }
            if input.batch_dims > 0 && !expr.columns().is_empty() {
                return Err(Error::plan(
                    operator,
                    format!("predicate {expr} is not a scalar: over a batched element it has one value per row"),
                ));
            }
            Ok(())
        }
    }
}

fn check_int_expr(expr: &Expr, input: &ElementSpec, operator: &str) -> Result<()> {
    if input.batch_dims > 0 {
        return Err(Error::plan(operator, "takes unbatched elements"));
    }
    let t = expr.data_type(input).map_err(|e| Error::plan(operator, e.to_string()))?;
    if !t.is_integer() {
        return Err(Error::plan(operator, format!("{expr} must be an integer, got {t}")));
    }
    Ok(())
}

fn dataset_fn_output(func: &DatasetFn, input: &ElementSpec, operator: &str) -> Result<ElementSpec> {
    match func {
        DatasetFn::ReadFile { field, format } => {
            let f = input.require(field, operator)?;
            if f.dtype != DType::Utf8 || !f.is_scalar() {
                return Err(Error::plan(
                    operator,
                    format!("file name field '{field}' must be a scalar string, got {f}"),
                ));
            }
            format.output_spec()
        }
        DatasetFn::ReadSplit { format } => {
            for (field, dtype) in [("file", DType::Utf8), ("row_group", DType::Int64)] {
                let f = input.require(field, operator)?;
                if f.dtype != dtype || !f.is_scalar() {
                    return Err(Error::plan(
                        operator,
                        format!("split field '{field}' must be a scalar {dtype}, got {f}"),
                    ));
                }
            }
            format.output_spec()
        }
        DatasetFn::FromTensorSlices => unbatched_elements(input, operator),
        DatasetFn::Closure { output, .. } => Ok(output.clone()),
    }
}

/// The elements `unbatch` makes of `input`'s. A sparse field's elements are its slices
/// along the leading dimension, so it needs rank 2 or more (a sparse tensor has rank 1 or
/// more, as in TensorFlow).
fn unbatched_elements(input: &ElementSpec, operator: &str) -> Result<ElementSpec> {
    let sparse = |f: &&FieldSpec| f.kind == FieldKind::Sparse;
    if let Some(f) = input.fields.iter().filter(sparse).find(|f| f.shape.len() < 2) {
        return Err(Error::plan(
            operator,
            format!(
                "sparse field '{}' has rank {}: its slices would be sparse tensors of rank 0",
                f.name,
                f.shape.len()
            ),
        ));
    }
    input.unbatched(operator)
}

/// The spec after padding: padded fields get the target shape, `-1` where the batch decides.
fn padded_spec(
    input: &ElementSpec,
    padded_shapes: &BTreeMap<String, Vec<i64>>,
    padding_values: &BTreeMap<String, Scalar>,
    operator: &str,
) -> Result<ElementSpec> {
    for name in padded_shapes.keys().chain(padding_values.keys()) {
        input.require(name, operator)?;
    }
    let mut fields = Vec::with_capacity(input.fields.len());
    for f in &input.fields {
        if f.kind == FieldKind::Sparse {
            return Err(Error::plan(operator, format!("cannot pad sparse field '{}'", f.name)));
        }
        if let Some(v) = padding_values.get(&f.name) {
            if v.dtype() != f.dtype && !(v.dtype().is_numeric() && f.dtype.is_numeric()) {
                return Err(Error::plan(operator, format!("padding value {v} does not fit field {f}")));
            }
        }
        let shape = match padded_shapes.get(&f.name) {
            None => f.shape.clone(),
            Some(target) => {
                if target.len() != f.shape.len() {
                    return Err(Error::plan(operator, format!("padded shape {target:?} has another rank than {f}")));
                }
                for (t, d) in target.iter().zip(&f.shape) {
                    if *t >= 0 && *d >= 0 && t < d {
                        return Err(Error::plan(operator, format!("padded shape {target:?} is smaller than {f}")));
                    }
                }
                target.clone()
            }
        };
        fields.push(FieldSpec { shape, kind: FieldKind::Dense, ..f.clone() });
    }
    // A batched element stays a batch (rows of equal count in every field) unless a padded
    // shape gives some field's leading dimension, the batch one, another size than the others
    // get: `{a, b}.batch(2)` padded with `b: [4]` is one element with two and four values.
    let leading: BTreeSet<Option<i64>> = input
        .fields
        .iter()
        .map(|f| padded_shapes.get(&f.name).and_then(|t| t.first()).filter(|d| **d >= 0).copied())
        .collect();
    let batch_dims = if leading.len() <= 1 { input.batch_dims } else { 0 };
    Ok(ElementSpec { fields, batch_dims })
}

/// The state spec of reduce/scan: the initial values' types, checked against the updates.
fn state_spec(
    initial: &[(String, Scalar)],
    update: &[NamedExpr],
    input: &ElementSpec,
    operator: &str,
) -> Result<ElementSpec> {
    let state = ElementSpec {
        fields: initial.iter().map(|(n, v)| FieldSpec::scalar(n.clone(), v.dtype())).collect(),
        batch_dims: 0,
    };
    state.check_unique(operator)?;
    let scope = scope_spec(&state, input, operator)?;
    for u in update {
        let slot = state.require(&u.name, operator)?;
        let t = u.expr.data_type(&scope).map_err(|e| Error::plan(operator, e.to_string()))?;
        if t != slot.dtype {
            return Err(Error::plan(
                operator,
                format!("state field '{}' is {} but its update {} is {t}", u.name, slot.dtype, u.expr),
            ));
        }
    }
    Ok(state)
}

/// The names visible to reduce/scan expressions: state fields, then element fields.
fn scope_spec(state: &ElementSpec, input: &ElementSpec, operator: &str) -> Result<ElementSpec> {
    if input.batch_dims > 0 {
        return Err(Error::plan(operator, "expression reduce/scan take unbatched elements"));
    }
    let fields: Vec<FieldSpec> = state.fields.iter().chain(&input.fields).cloned().collect();
    let spec = ElementSpec { fields, batch_dims: 0 };
    spec.check_unique(operator)
        .map_err(|_| Error::plan(operator, "state field names must differ from the element's field names"))?;
    Ok(spec)
}

//! The random-pipeline generator shared by the property tests (`optimizer_equivalence`,
//! `checkpoint_equivalence`): plain-data recipes (a [`Case`]: a source and operator recipes
//! drawn from the whole operator set), their proptest strategies ([`case`], and
//! [`full_case`] for the optimizer fuzzer), building a [`Dataset`] from a case ([`build`],
//! after [`prepare`] wrote the files of file sources), and reading a pipeline's items back
//! ([`items`], [`show`]). Recipes are applied to the element spec built so far, so the
//! pipelines are well typed by construction; a case can be rebuilt from scratch (fresh
//! closure state) any number of times. Recipes are `serde` data: a failing case prints as one
//! line of JSON, and regression files replay such lines.
//!
//! Two generators share the recipes. [`case`] is the base one `checkpoint_equivalence` runs
//! (its recipes checkpoint). [`full_case`] adds, in `sources` and `families`, every source
//! and expression family and the recipes only the equivalence fuzzer runs: parallel
//! arguments, stateful per-chunk closures, `parse_example`, `cache_to`, caches cut short,
//! shuffles that reshuffle under a repeat, nested datasets of batched elements.

pub mod families;
pub mod sources;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array, Int64Array, ListArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen::prelude::*;
use flumen::{Error, FieldKind, Options};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde::{Deserialize, Serialize};
pub use sources::{ExampleRecipe, ImageRecipe, TableFormat, TypedRow};

// ----------------------------------------------------------------------------------------
// Recipes: what the strategy generates. Plain data (Debug + Clone + Send), so proptest can
// shrink it and a case can be rebuilt from it any number of times.
// ----------------------------------------------------------------------------------------

/// The data a pipeline starts from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum SourceRecipe {
    /// `Dataset::range(start, start + len)`: one int field `value`.
    Range { start: i64, len: i64 },
    /// In-memory columns: int fields `a` (possibly near the int64 limits, so that `+`, `-`,
    /// `*` and `abs` overflow) and `b` (zeros likely: a divisor), float `x`; `a` and `x` may
    /// be null.
    Arrays { rows: Vec<Row> },
    /// The same columns written to `files` Parquet (row groups of 3 rows, so statistics can
    /// prune) or CSV files, read by `Dataset::parquet`/`csv` (`read` 0), or listed and read by
    /// `flat_map` (1) or `interleave` (2) of `read_file`: projection and predicate pushdown.
    /// CSV files are read with their schema given, and row `bad_row` has a malformed `b` (an
    /// error of that record, whether `b` is read or not).
    Files { rows: Vec<Row>, parquet: bool, files: usize, read: u8, bad_row: Option<usize> },
    /// `Dataset::range_step(start, stop, step)` (`step` may be negative, never zero).
    RangeStep { start: i64, stop: i64, step: i64 },
    /// In-memory columns of every dtype family (`sources::typed_batch`) in `parts` batches.
    Typed { rows: Vec<TypedRow>, parts: u8 },
    /// A named generator of `{value}` (`sources::generator`): chunks of `chunk` rows, an
    /// error at `error_at`, values moved on each pass when `stateful`.
    Generator { values: Vec<i64>, chunk: u8, stateful: bool, error_at: Option<usize> },
    /// The `a`, `b`, `x` columns in files of `format`, read as `read` says
    /// (`sources::read_files`), with a bad record (CSV, text) or a truncated file (binary
    /// formats) at `bad_row`.
    Tables { rows: Vec<Row>, format: TableFormat, files: usize, read: u8, bad_row: Option<usize> },
    /// TFRecord files of `tf.train.Example`s (record `corrupt` fails its checksum), read as
    /// `read` says, then parsed with `parse_example` of `sources::features(parse)` (`0`:
    /// left as the raw `record` bytes).
    Records { examples: Vec<ExampleRecipe>, files: usize, read: u8, corrupt: Option<usize>, gzip: bool, parse: u8 },
    /// Images decoded, cropped or resized to a fixed size, flipped, maybe normalized
    /// (`sources::image_source`): `{i, img}`, a bad image among them, some elements without one.
    Images(ImageRecipe),
}

/// tf.data's parallelism arguments of a `map`, `filter`, `batch` or `interleave`: `calls` 0
/// is `AUTOTUNE`, else `Fixed(calls)`. With `deterministic: false` the operator may hand
/// out its elements out of order; such a run has no single element sequence, so it is
/// compared as a multiset of rows, where nothing after it depends on the order
/// (`fuzz::compare_mode`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ParRecipe {
    /// `num_parallel_calls` (0: `AUTOTUNE`).
    pub calls: u8,
    /// `Some(true)`, `Some(false)` (out of order allowed) or unset.
    pub deterministic: Option<bool>,
}

impl ParRecipe {
    /// The builder argument.
    pub fn parallel(self) -> Parallel {
        let calls = if self.calls == 0 { Tunable::Autotune } else { Tunable::Fixed(u32::from(self.calls)) };
        Parallel { num_parallel_calls: calls, deterministic: self.deterministic }
    }
}

/// One row of the `a`, `b` and `x` columns.
pub type Row = (Option<i64>, i64, Option<f64>);

/// An expression over the element's numeric fields; `i` and `j` pick fields, `k` a constant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExprRecipe {
    /// The kind of expression (see `expression`).
    pub kind: u8,
    /// Picks the first field operand.
    pub i: u8,
    /// Picks the second field operand.
    pub j: u8,
    /// A constant operand.
    pub k: i64,
}

/// A boolean expression over the element's scalar fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PredRecipe {
    /// The kind of predicate (see `predicate`).
    pub kind: u8,
    /// Picks the first field operand.
    pub i: u8,
    /// Picks the second field operand.
    pub j: u8,
    /// A constant operand.
    pub k: i64,
}

/// How a closure behaves, and what it declares.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Flavor {
    /// Deterministic and stateless: `2v + 1`.
    Pure,
    /// Deterministic and stateless, failing for some values.
    PureFailing,
    /// Counts its calls (flagged `.stateful()`); fails on some calls.
    Stateful,
    /// A seeded counter-based random stream: its draws depend on how many calls came before,
    /// so it is flagged `.stateful()` as well as `.nondeterministic()`.
    Random,
}

/// One operator to add to the pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OpRecipe {
    /// `with_fields`: `mode` 0 replaces a field, 1 adds one, 2 replaces and adds.
    MapExpr {
        mode: u8,
        e1: ExprRecipe,
        e2: ExprRecipe,
        #[serde(default)]
        par: Option<ParRecipe>,
    },
    /// `select` of computed fields (plus kept ones from `keep`'s bits).
    MapSelectComputed { keep: u8, e: ExprRecipe },
    /// `select` of existing fields only (a projection), by `keep`'s bits.
    MapSelectOnly { keep: u8 },
    /// A per-element closure map.
    MapClosure {
        flavor: Flavor,
        pick: u8,
        seed: u64,
        #[serde(default)]
        par: Option<ParRecipe>,
    },
    /// `filter` with an expression predicate.
    Filter(PredRecipe),
    /// `filter_with` an expression predicate and parallel arguments.
    FilterWith { p: PredRecipe, par: ParRecipe },
    /// `map(with_fields [new = e])` then `filter(p)` (then `filter(q)`): the shapes the
    /// fusion and hoisting rules match, drawn as a unit so they meet often.
    MapThenFilter { e: ExprRecipe, p: PredRecipe, q: Option<PredRecipe> },
    /// A per-element closure predicate (pure; may fail).
    FilterClosure { pick: u8, modulus: i64, fail: bool },
    /// A per-chunk closure map rewriting a numeric field (never fails: a per-chunk closure's
    /// error takes its whole chunk, wherever chunks end). `state` 0 is pure; 1 counts the
    /// rows it saw and adds the count (stateful), 2 adds a random number of that count
    /// (nondeterministic): one call per element's row either way.
    MapBatchClosure {
        pick: u8,
        #[serde(default)]
        state: u8,
    },
    /// A per-chunk closure predicate (pure, never fails).
    FilterBatchClosure { pick: u8, modulus: i64 },
    /// `bucket_by_sequence_length` keyed by `|v| mod 5`, boundaries `[2, 4]`.
    Bucket { pick: u8, sizes: (u64, u64, u64), to_boundary: bool, drop: bool },
    /// `batch_with(n, drop)`.
    Batch {
        n: u64,
        drop: bool,
        #[serde(default)]
        par: Option<ParRecipe>,
    },
    /// `padded_batch`, padding int fields with `-1` when `pad` (else zeros); with `shapes`,
    /// the first field with a dimension padded to 4 along it (the batch dimension of an
    /// element batched before: fields of one element then differ in length).
    PaddedBatch {
        n: u64,
        drop: bool,
        pad: bool,
        #[serde(default)]
        shapes: bool,
    },
    /// Grouping elements that have no scalar field: a `select` of the fields with
    /// dimensions, then `group_by_window` by a constant key (or, with `bucket`,
    /// `bucket_by_sequence_length` by a constant length) in windows of `window`.
    GroupConstant { window: u64, bucket: bool },
    /// `unbatch` (when every field has a leading dimension).
    Unbatch,
    /// `rebatch(n, drop)` (likewise).
    Rebatch { n: u64, drop: bool },
    /// `shuffle_with(buffer, Some(seed), reshuffle)`.
    Shuffle { buffer: u64, seed: u64, reshuffle: bool },
    /// `repeat(Some(count))`.
    Repeat { count: u64 },
    /// `repeat(None)` is always followed by a `take`, so every pipeline ends.
    RepeatForeverTake { take: i64 },
    /// `take(n)`.
    Take { n: i64 },
    /// `skip(n)` (`-1`: all).
    Skip { n: i64 },
    /// `shard(n, i)`.
    Shard { n: u64, i: u64 },
    /// `enumerate(start)` (unless the element has an `index` field).
    Enumerate { start: i64 },
    /// Zip with `range(start, start + len).map(select z = e)` (`e` may fail), the pipeline
    /// first, or second with `behind` (a zip reads its later inputs as far as its first).
    Zip {
        start: i64,
        len: i64,
        fail: bool,
        #[serde(default)]
        behind: bool,
    },
    /// `concatenate(self.take(n))`, or `concatenate(self.skip(n))` with `skip`.
    Concatenate { n: i64, skip: bool },
    /// `prefetch` of a fixed buffer, or autotuned.
    Prefetch { buffer: Option<u32> },
    /// `cache()`.
    Cache,
    /// `take_while` with an expression predicate.
    TakeWhile(PredRecipe),
    /// `window(size, shift, stride, drop)`.
    Window { size: u64, shift: u64, stride: u64, drop: bool },
    /// `group_by_window` keyed by `v mod modulus`, or by `6 / v` (may fail) with `fail`.
    GroupByWindow { pick: u8, modulus: i64, window: u64, fail: bool },
    /// `scan` keeping a running sum of an int field (which may overflow).
    Scan { pick: u8 },
    /// `ignore_errors()`.
    IgnoreErrors,
    /// `flat_map`: a closure repeating each element `v mod 3` times (`inner` 1: and mapping
    /// the copies with a division that fails in the inner dataset), or `FromTensorSlices`.
    FlatMap {
        pick: u8,
        #[serde(default)]
        inner: u8,
    },
    /// `interleave` of the same functions as `FlatMap`.
    Interleave {
        pick: u8,
        cycle: u32,
        block: u64,
        #[serde(default)]
        inner: u8,
        #[serde(default)]
        par: Option<ParRecipe>,
    },
    /// `sample_from_datasets([self, self.skip(skip)], ...)` with a seed.
    Sample { skip: i64, weight: u8, seed: u64, stop: bool },
    /// `map(parse_example(record, sources::features(parse)))` of a bytes field `record`.
    ParseExample { parse: u8 },
    /// `cache_to(file)` in the case's scratch directory.
    CacheTo,
    /// A cache cut short: `cache()` (or `cache_to` with `file`) then `take(k)`, then
    /// `repeat(repeat)` when `repeat > 0` (each epoch, and each pass, meets the cut cache).
    CacheTake { k: i64, file: bool, repeat: u64 },
    /// A shuffle that reshuffles each epoch under a repeat: `shuffle_with(buffer, seed,
    /// true).repeat(count)`, or `repeat` first with `repeat_first`.
    ShuffleRepeat { buffer: u64, seed: u64, count: u64, repeat_first: bool },
    /// A nested dataset of batched elements: `batch_with(n, drop)` then
    /// `flat_map(FromTensorSlices)`, or `interleave` of it with `cycle`.
    BatchSlices { n: u64, drop: bool, cycle: Option<u32> },
    /// `rebatch_sizes(sizes, drop)` of batched elements (a 0 is an empty batch).
    RebatchSizes { sizes: Vec<u64>, drop: bool },
    /// `unique()`, where the element's fields are scalars it can key.
    Unique,
    /// `choose_from_datasets([self, self.skip(skip)], choices, stop)`, choices in 0..=2 (a 2
    /// is out of range: an error in its place).
    Choose { skip: i64, choices: Vec<i64>, stop: bool },
    /// A map drawing at random from an image field `img` (`kind` 0: `random_flip_left_right`,
    /// 1: `random_flip_up_down`, 2: a 5x4 `random_crop`), replacing it or adding `img{idx}`
    /// with `keep`; `fail_before` first adds `d{idx} = 12 / (i - 2)`, which fails on one
    /// element, in a map the fusion rules meet; `sharded` then puts `shard(2, seed % 2)` and
    /// `skip(seed % 3)` right under the map, which keys its draws through them.
    RandomImage {
        kind: u8,
        seed: u8,
        keep: bool,
        fail_before: bool,
        #[serde(default)]
        sharded: bool,
    },
}

/// A whole case: a source, operator recipes, the chunk size both runs use, and the
/// optimizer's configuration (the guarantee holds for every rule set a user can choose).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    /// The data the pipeline starts from.
    pub source: SourceRecipe,
    /// The operators to add, in order (those that do not apply are skipped).
    pub ops: Vec<OpRecipe>,
    /// `Options::chunk_rows` of every run of the case.
    pub chunk_rows: usize,
    /// Bit `i` switches off the `i`-th rule of `rule_names()` in the optimized run.
    pub rules_off: u64,
    /// Autotuning (map parallelization, prefetch injection) in the optimized run.
    pub autotune: bool,
    /// Picks the configurations a short run compares (never shrunk: the shrunk case must
    /// still run the configuration that failed).
    #[serde(default)]
    pub seed: u64,
}

/// A random expression recipe of the base generator.
pub fn expr_recipe() -> impl Strategy<Value = ExprRecipe> {
    expr_recipe_with(false)
}

/// A random expression recipe; `full` draws the expression families half the time.
pub fn expr_recipe_with(full: bool) -> BoxedStrategy<ExprRecipe> {
    let base = (0u8..18, any::<u8>(), any::<u8>(), -3i64..=4).prop_map(|(kind, i, j, k)| ExprRecipe { kind, i, j, k });
    if !full {
        return base.boxed();
    }
    let families = (families::FIRST_EXPR_FAMILY..families::END_EXPR_FAMILY, any::<u8>(), any::<u8>(), -3i64..=4)
        .prop_map(|(kind, i, j, k)| ExprRecipe { kind, i, j, k });
    prop_oneof![base, families].boxed()
}

/// A random predicate recipe of the base generator.
pub fn pred_recipe() -> impl Strategy<Value = PredRecipe> {
    pred_recipe_with(false)
}

/// A random predicate recipe; `full` draws the predicate families half the time.
pub fn pred_recipe_with(full: bool) -> BoxedStrategy<PredRecipe> {
    let base = (0u8..9, any::<u8>(), any::<u8>(), -2i64..=4).prop_map(|(kind, i, j, k)| PredRecipe { kind, i, j, k });
    if !full {
        return base.boxed();
    }
    let families = (families::FIRST_PRED_FAMILY..families::END_PRED_FAMILY, any::<u8>(), any::<u8>(), -2i64..=4)
        .prop_map(|(kind, i, j, k)| PredRecipe { kind, i, j, k });
    prop_oneof![base, families].boxed()
}

/// A random closure flavor (each flavor equally likely).
pub fn flavor() -> impl Strategy<Value = Flavor> {
    prop_oneof![Just(Flavor::Pure), Just(Flavor::PureFailing), Just(Flavor::Stateful), Just(Flavor::Random)]
}

/// Parallel arguments: `Fixed(1..=4)` or `AUTOTUNE`, in order or (one time in five) not.
pub fn par_recipe() -> impl Strategy<Value = ParRecipe> {
    (0u8..=4, prop_oneof![2 => Just(None), 2 => Just(Some(true)), 1 => Just(Some(false))])
        .prop_map(|(calls, deterministic)| ParRecipe { calls, deterministic })
}

/// A random operator recipe of the base generator, drawn from the whole operator set.
pub fn op_recipe() -> impl Strategy<Value = OpRecipe> {
    op_recipe_with(false)
}

/// A random operator recipe; `full` adds parallel arguments, the expression families and
/// the recipes only the equivalence fuzzer runs.
pub fn op_recipe_with(full: bool) -> BoxedStrategy<OpRecipe> {
    let par = move || if full { proptest::option::weighted(0.25, par_recipe()).boxed() } else { Just(None).boxed() };
    let (expr, pred) = (move || expr_recipe_with(full), move || pred_recipe_with(full));
    let chunk_state =
        if full { prop_oneof![2 => Just(0u8), 1 => Just(1), 1 => Just(2)].boxed() } else { Just(0).boxed() };
    let inner = if full { (0u8..2).boxed() } else { Just(0).boxed() };
    let base = prop_oneof![
        // Element-wise functions (the optimizer's main material) are drawn more often.
        4 => (0u8..3, expr(), expr(), par()).prop_map(|(mode, e1, e2, par)| OpRecipe::MapExpr { mode, e1, e2, par }),
        1 => (any::<u8>(), expr()).prop_map(|(keep, e)| OpRecipe::MapSelectComputed { keep, e }),
        1 => any::<u8>().prop_map(|keep| OpRecipe::MapSelectOnly { keep }),
        3 => (flavor(), any::<u8>(), any::<u64>(), par()).prop_map(|(flavor, pick, seed, par)| OpRecipe::MapClosure {
            flavor,
            pick,
            seed,
            par
        }),
        4 => pred().prop_map(OpRecipe::Filter),
        2 => (expr(), pred(), proptest::option::of(pred()))
            .prop_map(|(e, p, q)| OpRecipe::MapThenFilter { e, p, q }),
        1 => (any::<u8>(), 2i64..=4, any::<bool>()).prop_map(|(pick, modulus, fail)| OpRecipe::FilterClosure {
            pick,
            modulus,
            fail
        }),
        3 => (1u64..=4, any::<bool>(), par()).prop_map(|(n, drop, par)| OpRecipe::Batch { n, drop, par }),
        1 => (1u64..=3, any::<bool>(), any::<bool>()).prop_map(|(n, drop, pad)| OpRecipe::PaddedBatch {
            n,
            drop,
            pad,
            shapes: false
        }),
        1 => (any::<u8>(), chunk_state).prop_map(|(pick, state)| OpRecipe::MapBatchClosure { pick, state }),
        1 => (any::<u8>(), 2i64..=4).prop_map(|(pick, modulus)| OpRecipe::FilterBatchClosure { pick, modulus }),
        1 => (any::<u8>(), (1u64..=3, 1u64..=3, 1u64..=3), any::<bool>(), any::<bool>()).prop_map(
            |(pick, sizes, to_boundary, drop)| OpRecipe::Bucket { pick, sizes, to_boundary, drop }
        ),
        2 => Just(OpRecipe::Unbatch),
        1 => (1u64..=4, any::<bool>()).prop_map(|(n, drop)| OpRecipe::Rebatch { n, drop }),
        2 => (1u64..=6, 0u64..4, any::<bool>()).prop_map(|(buffer, seed, reshuffle)| OpRecipe::Shuffle {
            buffer,
            seed,
            reshuffle
        }),
        1 => prop_oneof![1 => Just(0u64), 4 => 1u64..=3].prop_map(|count| OpRecipe::Repeat { count }),
        1 => (0i64..=14).prop_map(|take| OpRecipe::RepeatForeverTake { take }),
        2 => prop_oneof![-1i64..=3, 4i64..=16].prop_map(|n| OpRecipe::Take { n }),
        1 => prop_oneof![1 => Just(-1i64), 6 => 0i64..=4].prop_map(|n| OpRecipe::Skip { n }),
        1 => (1u64..=3, 0u64..3).prop_map(|(n, i)| OpRecipe::Shard { n, i: i % n }),
        1 => (-3i64..=3).prop_map(|start| OpRecipe::Enumerate { start }),
        1 => (-2i64..=2, 1i64..=20, any::<bool>(), any::<bool>())
            .prop_map(|(start, len, fail, behind)| OpRecipe::Zip { start, len, fail, behind }),
        1 => (-1i64..=4, any::<bool>()).prop_map(|(n, skip)| OpRecipe::Concatenate { n, skip }),
        1 => prop_oneof![Just(None), (0u32..=2).prop_map(Some)].prop_map(|buffer| OpRecipe::Prefetch { buffer }),
        1 => Just(OpRecipe::Cache),
        1 => pred().prop_map(OpRecipe::TakeWhile),
        1 => (1u64..=3, 1u64..=3, 1u64..=2, any::<bool>()).prop_map(|(size, shift, stride, drop)| OpRecipe::Window {
            size,
            shift,
            stride,
            drop
        }),
        1 => (any::<u8>(), 2i64..=3, 1u64..=3, any::<bool>()).prop_map(|(pick, modulus, window, fail)| {
            OpRecipe::GroupByWindow { pick, modulus, window, fail }
        }),
        1 => any::<u8>().prop_map(|pick| OpRecipe::Scan { pick }),
        2 => Just(OpRecipe::IgnoreErrors),
        1 => (any::<u8>(), inner.clone()).prop_map(|(pick, inner)| OpRecipe::FlatMap { pick, inner }),
        1 => (any::<u8>(), 1u32..=3, 1u64..=2, inner, par()).prop_map(|(pick, cycle, block, inner, par)| {
            OpRecipe::Interleave { pick, cycle, block, inner, par }
        }),
        1 => (0i64..=3, 1u8..=3, 0u64..4, any::<bool>()).prop_map(|(skip, weight, seed, stop)| OpRecipe::Sample {
            skip,
            weight,
            seed,
            stop
        }),
    ];
    if !full {
        return base.boxed();
    }
    let added = prop_oneof![
        2 => (pred(), par_recipe()).prop_map(|(p, par)| OpRecipe::FilterWith { p, par }),
        2 => (1u64..=3, any::<bool>(), any::<bool>()).prop_map(|(n, drop, pad)| OpRecipe::PaddedBatch {
            n,
            drop,
            pad,
            shapes: true
        }),
        1 => (1u64..=3, any::<bool>()).prop_map(|(window, bucket)| OpRecipe::GroupConstant { window, bucket }),
        1 => (1u8..4).prop_map(|parse| OpRecipe::ParseExample { parse }),
        1 => Just(OpRecipe::CacheTo),
        2 => (0i64..=5, any::<bool>(), 0u64..=2).prop_map(|(k, file, repeat)| OpRecipe::CacheTake { k, file, repeat }),
        2 => (1u64..=6, 0u64..4, 1u64..=3, any::<bool>()).prop_map(|(buffer, seed, count, repeat_first)| {
            OpRecipe::ShuffleRepeat { buffer, seed, count, repeat_first }
        }),
        2 => (1u64..=4, any::<bool>(), proptest::option::of(1u32..=3))
            .prop_map(|(n, drop, cycle)| OpRecipe::BatchSlices { n, drop, cycle }),
        1 => (proptest::collection::vec(0u64..=3, 1..=3), any::<bool>())
            .prop_filter("a positive size", |(sizes, _)| sizes.iter().any(|&s| s > 0))
            .prop_map(|(sizes, drop)| OpRecipe::RebatchSizes { sizes, drop }),
        1 => Just(OpRecipe::Unique),
        1 => (0i64..=3, proptest::collection::vec(prop_oneof![8 => 0i64..=1, 1 => Just(2i64)], 0..=12), any::<bool>())
            .prop_map(|(skip, choices, stop)| OpRecipe::Choose { skip, choices, stop }),
        3 => (0u8..3, any::<u8>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(kind, seed, keep, fail_before, sharded)| OpRecipe::RandomImage { kind, seed, keep, fail_before, sharded }
        ),
    ];
    prop_oneof![6 => base, 1 => added].boxed()
}

/// Int column values of the base sources: small values, nulls, and values near the limits
/// that make `+`, `-`, `*` and `abs` overflow, which is an error (see
/// `integer_overflow_errors_are_dropped_by_dead_field_elimination`).
fn int_value() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        12 => (-3i64..=6).prop_map(Some),
        1 => Just(None),
        2 => Just(Some(i64::MAX / 2)),
        2 => Just(Some(i64::MIN + 1)),
    ]
}

/// Rows of the `a`, `b`, `x` columns.
fn rows() -> impl Strategy<Value = Vec<Row>> {
    let divisor = prop_oneof![3 => Just(0i64), 5 => -2i64..=3];
    let float = prop_oneof![
        10 => prop_oneof![Just(-1.5f64), Just(0.0), Just(0.25), Just(2.0), Just(3.5)].prop_map(Some),
        1 => Just(None),
    ];
    proptest::collection::vec((int_value(), divisor, float), 1..=24)
}

/// A random source: a range, in-memory columns, or files.
pub fn source_recipe() -> impl Strategy<Value = SourceRecipe> {
    prop_oneof![
        1 => (-2i64..=3, 0i64..=30).prop_map(|(start, len)| SourceRecipe::Range { start, len }),
        2 => rows().prop_map(|rows| SourceRecipe::Arrays { rows }),
        2 => (rows(), any::<bool>(), 1usize..=3, 0u8..3, proptest::option::weighted(0.3, 0usize..24)).prop_map(
            |(rows, parquet, files, read, bad_row)| SourceRecipe::Files { rows, parquet, files, read, bad_row }
        ),
    ]
}

/// A random source of the full generator: the base sources and every other source.
pub fn full_source_recipe() -> impl Strategy<Value = SourceRecipe> {
    // Codes mostly of ordinary values, sometimes of NaN, infinities, -0 and huge values.
    let float = prop_oneof![6 => 0u8..5, 1 => 5u8..12];
    let typed_row = (int_value(), 0u8..8, float.clone(), float.clone(), 0u8..8, [float.clone(), float.clone(), float])
        .prop_map(|(i, n, h, x, s, t)| TypedRow { i, n, h, x, s, t });
    let example = (
        proptest::option::weighted(0.9, -2i64..=9),
        [0u8..12, 0u8..12],
        proptest::bool::weighted(0.1),
        proptest::collection::vec(-3i64..=3, 0..=3),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(label, x, short, v, garbage)| ExampleRecipe { label, x, short, v, garbage });
    let format = prop_oneof![
        Just(TableFormat::Csv),
        Just(TableFormat::Parquet),
        Just(TableFormat::IpcFile),
        Just(TableFormat::IpcStream),
        Just(TableFormat::Text)
    ];
    prop_oneof![
        3 => source_recipe(),
        1 => (-6i64..=6, -6i64..=12, prop_oneof![-3i64..=-1, 1i64..=3])
            .prop_map(|(start, stop, step)| SourceRecipe::RangeStep { start, stop, step }),
        3 => (proptest::collection::vec(typed_row, 1..=16), 1u8..=3).prop_map(|(rows, parts)| SourceRecipe::Typed { rows, parts }),
        1 => (
            proptest::collection::vec(-3i64..=9, 0..=16),
            1u8..=4,
            any::<bool>(),
            proptest::option::weighted(0.3, 0usize..16)
        )
            .prop_map(|(values, chunk, stateful, error_at)| SourceRecipe::Generator { values, chunk, stateful, error_at }),
        2 => (rows(), format, 1usize..=3, 0u8..5, proptest::option::weighted(0.3, 0usize..24)).prop_map(
            |(rows, format, files, read, bad_row)| SourceRecipe::Tables { rows, format, files, read, bad_row }
        ),
        2 => (
            proptest::collection::vec(example, 1..=12),
            1usize..=3,
            0u8..4,
            proptest::option::weighted(0.25, 0usize..12),
            proptest::bool::weighted(0.2),
            prop_oneof![1 => Just(0u8), 4 => 1u8..4]
        )
            .prop_map(|(examples, files, read, corrupt, gzip, parse)| SourceRecipe::Records {
                examples,
                files,
                read,
                corrupt,
                gzip,
                parse
            }),
        1 => (
            proptest::collection::vec(prop_oneof![6 => 0u8..5, 1 => Just(5u8)], 1..=8),
            any::<bool>(),
            0u8..4,
            0u8..8,
            0u8..8,
            0u8..4,
            prop_oneof![2 => Just(0u8), 1 => any::<u8>()]
        )
            .prop_map(|(files, read_file, first, seed, flips, float, nulls)| SourceRecipe::Images(ImageRecipe {
                files,
                read_file,
                first,
                seed,
                flips,
                float,
                nulls
            })),
    ]
}

/// A random case of the base generator: a source, 3–12 operator recipes, a chunk size and an
/// optimizer configuration.
pub fn case() -> impl Strategy<Value = Case> {
    let chunk_rows = prop_oneof![Just(1usize), Just(2), Just(3), Just(5), Just(1024)];
    // Half the cases run the default rule set; the others switch off about a quarter of them.
    let rules_off = prop_oneof![Just(0u64), (any::<u64>(), any::<u64>()).prop_map(|(x, y)| x & y)];
    (source_recipe(), proptest::collection::vec(op_recipe(), 3..=12), chunk_rows, rules_off, any::<bool>()).prop_map(
        |(source, ops, chunk_rows, rules_off, autotune)| Case { source, ops, chunk_rows, rules_off, autotune, seed: 0 },
    )
}

/// A random case of the full generator: any source, 1–12 operator recipes of the full set,
/// and a seed (not shrunk) that picks the configurations a short run compares. The chunk
/// size and rule fields are unused (the fuzzer runs every configuration).
pub fn full_case() -> impl Strategy<Value = Case> {
    (full_source_recipe(), proptest::collection::vec(op_recipe_with(true), 1..=12), any::<u64>().no_shrink())
        .prop_map(|(source, ops, seed)| Case { source, ops, chunk_rows: 1024, rules_off: 0, autotune: true, seed })
}

// ----------------------------------------------------------------------------------------
// Building a pipeline from a case.
// ----------------------------------------------------------------------------------------

/// A pipeline built from a case: the dataset, the builder calls that made it (for failure
/// messages), and how many recipes applied.
pub struct Built {
    /// The pipeline, under the options it was built with.
    pub ds: Dataset,
    /// The builder calls that made it, as text.
    pub calls: Vec<String>,
    /// The operators of the recipes that applied, in order.
    pub applied: Vec<&'static str>,
    /// The recipes that applied, in order.
    pub recipes: Vec<OpRecipe>,
    /// The marks of the source and of each applied recipe, in order (source first).
    pub marks: Vec<Marks>,
    /// How many recipes did not apply to the element they met.
    pub skipped: usize,
    /// How many recipes a builder rejected.
    pub rejected: usize,
}

/// The dense fields of `spec` whose dtype is `dtype` and whose shape is the batch shape (so
/// expressions apply to them element-wise).
pub fn numeric(spec: &ElementSpec, dtype: DType) -> Vec<String> {
    families::fields_of(spec, &[dtype])
}

/// The scalar fields of an unbatched element of dtype `dtype` (what predicates may read).
pub fn scalars(spec: &ElementSpec, dtype: DType) -> Vec<String> {
    if spec.batch_dims > 0 {
        return Vec::new();
    }
    spec.fields.iter().filter(|f| f.dtype == dtype && f.is_scalar()).map(|f| f.name.clone()).collect()
}

/// Every field has exactly the batch dimensions (no inner dims): expressions, closures and
/// `select` keep shapes.
pub fn uniform(spec: &ElementSpec) -> bool {
    !spec.fields.is_empty()
        && spec.fields.iter().all(|f| f.shape.len() == spec.batch_dims && f.kind == FieldKind::Dense)
}

/// Every field is dense (no ragged or sparse field): a closure can copy the element.
pub fn dense(spec: &ElementSpec) -> bool {
    !spec.fields.is_empty() && spec.fields.iter().all(|f| f.kind == FieldKind::Dense)
}

/// Every field has a leading dimension (`unbatch`, `rebatch`, `from_tensor_slices` apply).
pub fn all_batched(spec: &ElementSpec) -> bool {
    !spec.fields.is_empty() && spec.fields.iter().all(|f| !f.shape.is_empty() && f.kind != FieldKind::Sparse)
}

/// The name `i` picks among `names` (cyclically), if there are any.
pub fn pick(names: &[String], i: u8) -> Option<String> {
    (!names.is_empty()).then(|| names[i as usize % names.len()].clone())
}

/// The expression `r` over the element's numeric fields, if it has the fields it needs.
pub fn expression(spec: &ElementSpec, r: &ExprRecipe) -> Option<Expr> {
    if r.kind >= families::FIRST_EXPR_FAMILY {
        return families::expression(spec, r);
    }
    let (ints, floats) = (numeric(spec, DType::Int64), numeric(spec, DType::Float64));
    let int = |i| pick(&ints, i).map(col);
    let float = |i| pick(&floats, i).map(col);
    let k = r.k;
    let e = match r.kind {
        0 => int(r.i)? + int(r.j)?,
        1 => int(r.i)? * lit(k),
        // Integer division by a field that may be zero: fails for some elements.
        2 => int(r.i)? / int(r.j)?,
        3 => lit(k) / int(r.i)?,
        4 => int(r.i)? % lit(if k == 0 { 3 } else { k }),
        5 => int(r.i)? - lit(k),
        6 => float(r.i)? * lit(0.5) + lit(k as f64),
        7 => float(r.i)? / float(r.j)?,
        8 => when(int(r.i)?.gt(lit(k)), int(r.j)?).otherwise(int(r.i)? * lit(2i64)).ok()?,
        9 => abs(int(r.i)?),
        10 => float(r.i)? + int(r.j)?,
        // Casts fail on values the target cannot hold (NaN, infinities).
        11 => cast(float(r.i)? / float(r.j)?, DataType::Int64),
        12 | 14 => cast(int(r.i)?, DataType::Float64) * lit(0.5),
        // Infallible functions (float arithmetic, int-to-float casts, copies) are what the
        // fusion and pushdown rules may move freely: drawn more often.
        15 => float(r.i)? - lit(k as f64) * lit(0.25),
        16 => cast(int(r.i)?, DataType::Float64) + float(r.j)?,
        _ => col(pick(&spec.field_names(), r.i)?),
    };
    Some(e)
}

/// The predicate `r` over the element's scalar fields, if it has the fields it needs.
pub fn predicate(spec: &ElementSpec, r: &PredRecipe) -> Option<Expr> {
    if r.kind >= families::FIRST_PRED_FAMILY {
        return families::predicate(spec, r);
    }
    let (ints, floats) = (scalars(spec, DType::Int64), scalars(spec, DType::Float64));
    let int = |i| pick(&ints, i).map(col);
    let float = |i| pick(&floats, i).map(col);
    let k = r.k;
    let e = match r.kind {
        0 => (int(r.i)? % lit(2 + k.rem_euclid(3))).eq(lit(k.rem_euclid(2))),
        1 => int(r.i)?.gt(lit(k)),
        2 => float(r.i)?.lt(lit(k as f64 * 0.75)),
        // May fail: division by a field that may be zero.
        3 => (lit(6i64) / int(r.i)?).gt(lit(k)),
        4 => int(r.i)?.not_eq(lit(0i64)).and((lit(6i64) / int(r.i)?).gt(lit(k))),
        5 => lit(true),
        6 => int(r.i)?.lt(lit(k)).or(float(r.j)?.gt(lit(1.0))),
        7 => abs(int(r.i)?).lt_eq(lit(k + 1)),
        // A comparison (which statistics may decide) and a division that may fail.
        _ => int(r.i)?.gt(lit(k)).and((lit(6i64) / int(r.j)?).gt(lit(0i64))),
    };
    Some(e)
}

/// SplitMix64: the counter-based generator of the "random" closures.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The state of one closure of a built pipeline (fresh for every build).
struct ClosureState {
    name: String,
    flavor: Flavor,
    seed: u64,
    calls: AtomicU64,
}

impl ClosureState {
    /// One call: the call number, or the error this call reports.
    fn call(&self, values: &[i64]) -> flumen::Result<u64> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let fails = match self.flavor {
            Flavor::PureFailing => values.iter().any(|v| v.rem_euclid(4) == 3),
            Flavor::Stateful => n % 5 == 4,
            Flavor::Pure | Flavor::Random => false,
        };
        if fails {
            // A pure closure's error depends on its input only (a restored iterator must
            // report it in the same words); a stateful one's names its call.
            let message = match self.flavor {
                Flavor::Stateful => format!("refuses call {n} on {values:?}"),
                _ => format!("refuses {values:?}"),
            };
            return Err(Error::execution(self.name.clone(), message));
        }
        Ok(n)
    }

    fn int(&self, v: i64, n: u64) -> i64 {
        match self.flavor {
            Flavor::Pure => v.wrapping_mul(2).wrapping_add(1),
            Flavor::PureFailing => v.wrapping_sub(1),
            Flavor::Stateful => v.wrapping_add(n as i64),
            Flavor::Random => v.wrapping_add((splitmix(self.seed ^ n) % 100) as i64),
        }
    }

    fn float(&self, v: f64, n: u64) -> f64 {
        self.int(v as i64, n) as f64 + v.fract()
    }
}

/// The int values of an int column (any list nesting), nulls skipped.
pub fn int_values(array: &dyn Array) -> Vec<i64> {
    match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().iter().flatten().collect(),
        DataType::Float64 => array.as_primitive::<Float64Type>().iter().flatten().map(|v| v as i64).collect(),
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            (0..l.len()).flat_map(|i| int_values(l.value(i).as_ref())).collect()
        }
        DataType::FixedSizeList(_, _) => {
            let l = array.as_fixed_size_list();
            (0..l.len()).flat_map(|i| int_values(l.value(i).as_ref())).collect()
        }
        _ => Vec::new(),
    }
}

/// `array` with every numeric value `v` replaced by `f(v)` (list nesting kept).
pub fn map_values(array: &ArrayRef, f: &dyn Fn(i64) -> i64, g: &dyn Fn(f64) -> f64) -> ArrayRef {
    match array.data_type() {
        DataType::Int64 => Arc::new(array.as_primitive::<Int64Type>().unary::<_, Int64Type>(f)),
        DataType::Float64 => Arc::new(array.as_primitive::<Float64Type>().unary::<_, Float64Type>(g)),
        DataType::List(field) => {
            let l = array.as_list::<i32>();
            let values = map_values(l.values(), f, g);
            Arc::new(ListArray::new(field.clone(), l.offsets().clone(), values, l.nulls().cloned()))
        }
        DataType::FixedSizeList(field, size) => {
            let l = array.as_fixed_size_list();
            let values = map_values(l.values(), f, g);
            Arc::new(FixedSizeListArray::new(field.clone(), *size, values, l.nulls().cloned()))
        }
        _ => array.clone(),
    }
}

/// A per-element closure map: over an unbatched element it adds an int field computed from
/// an int field; over a batched one it rewrites a numeric field in place.
pub fn closure_map(
    spec: &ElementSpec,
    idx: usize,
    flavor: Flavor,
    which: u8,
    seed: u64,
) -> Option<(MapFunction, String)> {
    let name = format!("{flavor:?}_{idx}").to_lowercase();
    let state = Arc::new(ClosureState { name: name.clone(), flavor, seed, calls: AtomicU64::new(0) });
    let (f, describe) = if spec.batch_dims == 0 {
        let source = pick(&scalars(spec, DType::Int64), which);
        let added = format!("c{idx}");
        let mut fields = spec.fields.clone();
        fields.push(FieldSpec::scalar(added.clone(), DType::Int64));
        let out = ElementSpec { fields, batch_dims: 0 };
        let schema = out.arrow_schema();
        let describe = format!("adds {added} from {}", source.as_deref().unwrap_or("0"));
        let f = MapFunction::element(Some(&name), out, move |row| {
            let v = match &source {
                Some(s) => int_values(row.column_by_name(s).expect("source field").as_ref()),
                None => vec![0],
            };
            let n = state.call(&v)?;
            let mut columns = row.columns().to_vec();
            columns.push(Arc::new(Int64Array::from(vec![state.int(v.first().copied().unwrap_or(0), n)])));
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        });
        (f, describe)
    } else {
        let mut targets = numeric(spec, DType::Int64);
        targets.extend(numeric(spec, DType::Float64));
        let target = pick(&targets, which)?;
        let describe = format!("rewrites {target}");
        let f = MapFunction::element(Some(&name), spec.clone(), move |row| {
            let i = row.schema().index_of(&target)?;
            let n = state.call(&int_values(row.column(i).as_ref()))?;
            let mut columns = row.columns().to_vec();
            columns[i] = map_values(&columns[i], &|v| state.int(v, n), &|v| state.float(v, n));
            Ok(RecordBatch::try_new(row.schema(), columns)?)
        });
        (f, describe)
    };
    let f = match flavor {
        Flavor::Stateful => f.stateful(),
        Flavor::Random => f.nondeterministic().stateful(),
        Flavor::Pure | Flavor::PureFailing => f,
    };
    Some((f, format!("{name}: {describe}")))
}

/// The dataset function of `flat_map` / `interleave`: over an unbatched element of scalars,
/// a closure repeating it `v mod 3` times (failing when `v mod 7 = 6`; with `inner` 1 the
/// copies are mapped `v := 12 / (v - 2)`, which fails inside the inner dataset); over a
/// batched one, `FromTensorSlices`.
pub fn dataset_function(spec: &ElementSpec, idx: usize, which: u8, inner: u8) -> Option<(DatasetFunction, String)> {
    if spec.batch_dims == 0 && dense(spec) {
        let field = pick(&scalars(spec, DType::Int64), which)?;
        let name = format!("copies_{idx}");
        let divide = inner % 2 == 1;
        let describe = if divide {
            format!("{name}: {field} mod 3 copies mapped {field} := 12 / ({field} - 2)")
        } else {
            format!("{name}: {field} mod 3 copies")
        };
        let f = DatasetFunction::closure(Some(&name), spec.clone(), move |row| {
            let v = int_values(row.column_by_name(&field).expect("field").as_ref()).first().copied().unwrap_or(0);
            if v.rem_euclid(7) == 6 {
                return Err(Error::execution("copies", format!("no copies of {v}")));
            }
            let copies = Dataset::from_batches(vec![row.clone()])?.repeat(Some(v.rem_euclid(3) as u64))?;
            if divide {
                return copies.map(MapFunction::with_fields([(field.clone(), lit(12i64) / (col(&field) - lit(2i64)))]));
            }
            Ok(copies)
        });
        Some((f, describe))
    } else if all_batched(spec) {
        Some((DatasetFunction::FromTensorSlices, "FromTensorSlices".into()))
    } else {
        None
    }
}

/// Applies one recipe; `Ok(None)` when it does not apply to this element.
/// `scratch` is the directory of the build's cache files.
pub fn apply(ds: &Dataset, r: &OpRecipe, idx: usize, scratch: &Path) -> flumen::Result<Option<(Dataset, String)>> {
    let spec = ds.element_spec().clone();
    let new = format!("f{idx}");
    let mut numerics = numeric(&spec, DType::Int64);
    numerics.extend(numeric(&spec, DType::Float64));
    let out = match r {
        OpRecipe::MapExpr { mode, e1, e2, par } => {
            let Some(x) = expression(&spec, e1) else { return Ok(None) };
            let fields = match mode {
                0 => {
                    let Some(target) = pick(&numerics, e1.j.wrapping_add(e2.i)) else { return Ok(None) };
                    vec![(target, x)]
                }
                1 => vec![(new, x)],
                _ => {
                    let Some(y) = expression(&spec, e2) else { return Ok(None) };
                    let Some(target) = pick(&numerics, e2.j) else { return Ok(None) };
                    vec![(target, x), (new, y)]
                }
            };
            let text = format!("map(with_fields {})", show_fields(&fields));
            let f = MapFunction::with_fields(fields);
            match par {
                Some(p) => (ds.map_with(f, p.parallel())?, format!("{text} with {:?}", p.parallel())),
                None => (ds.map(f)?, text),
            }
        }
        OpRecipe::MapSelectComputed { keep, e } => {
            let Some(x) = expression(&spec, e) else { return Ok(None) };
            let mut fields: Vec<(String, Expr)> =
                kept(&spec, *keep).into_iter().filter(|n| *n != new).map(|n| (n.clone(), col(n))).collect();
            fields.push((new, x));
            let text = format!("map(select {})", show_fields(&fields));
            (ds.map(MapFunction::select(fields))?, text)
        }
        OpRecipe::MapSelectOnly { keep } => {
            let mut names = kept(&spec, *keep);
            if names.is_empty() {
                let Some(first) = spec.fields.iter().find(|f| f.shape.len() == spec.batch_dims) else {
                    return Ok(None);
                };
                names.push(first.name.clone());
            }
            let fields: Vec<(String, Expr)> = names.iter().map(|n| (n.clone(), col(n))).collect();
            let text = format!("map(select {})", show_fields(&fields));
            (ds.map(MapFunction::select(fields))?, text)
        }
        OpRecipe::MapClosure { flavor, pick, seed, par } => {
            let Some((f, text)) = closure_map(&spec, idx, *flavor, *pick, *seed) else { return Ok(None) };
            match par {
                Some(p) => (ds.map_with(f, p.parallel())?, format!("map_with(closure {text}, {:?})", p.parallel())),
                None => (ds.map(f)?, format!("map(closure {text})")),
            }
        }
        OpRecipe::Filter(p) => {
            let Some(e) = predicate(&spec, p) else { return Ok(None) };
            let text = format!("filter({e})");
            (ds.filter(e)?, text)
        }
        OpRecipe::FilterWith { p, par } => {
            let Some(e) = predicate(&spec, p) else { return Ok(None) };
            let text = format!("filter_with({e}, {:?})", par.parallel());
            (ds.filter_with(e, par.parallel())?, text)
        }
        OpRecipe::MapThenFilter { e, p, q } => {
            let Some(x) = expression(&spec, e) else { return Ok(None) };
            let mapped = ds.map(MapFunction::with_fields([(new.clone(), x.clone())]))?;
            let Some(p) = predicate(mapped.element_spec(), p) else { return Ok(None) };
            let mut text = format!("map(with_fields [{new} = {x}]).filter({p})");
            let mut out = mapped.filter(p)?;
            if let Some(q) = q.as_ref().and_then(|q| predicate(out.element_spec(), q)) {
                let _ = write!(text, ".filter({q})");
                out = out.filter(q)?;
            }
            (out, text)
        }
        OpRecipe::FilterClosure { pick: i, modulus, fail } => {
            let Some(field) = pick(&scalars(&spec, DType::Int64), *i) else { return Ok(None) };
            let (m, fail) = (*modulus, *fail);
            let name = format!("keep_{idx}");
            let text = format!("filter(closure {name}: {field} mod {m} != 0, fails: {fail})");
            let p = PredicateFunction::element(Some(&name), move |row| {
                let v = int_values(row.column_by_name(&field).expect("field").as_ref()).first().copied().unwrap_or(0);
                if fail && v.rem_euclid(5) == 4 {
                    return Err(Error::execution("keep", format!("cannot decide {v}")));
                }
                Ok(v.rem_euclid(m) != 0)
            });
            (ds.filter(p)?, text)
        }
        OpRecipe::Batch { n, drop, par: None } => (ds.batch_with(*n, *drop)?, format!("batch_with({n}, {drop})")),
        OpRecipe::Batch { n, drop, par: Some(p) } => {
            (ds.batch_parallel(*n, *drop, p.parallel())?, format!("batch_parallel({n}, {drop}, {:?})", p.parallel()))
        }
        OpRecipe::PaddedBatch { n, drop, pad, shapes } => {
            let padding_values = if *pad {
                spec.fields.iter().filter(|f| f.dtype == DType::Int64).map(|f| (f.name.clone(), lit(-1i64))).collect()
            } else {
                Default::default()
            };
            // The first field with a dimension, padded to 4 (at least its known size) along
            // it, as long as the rest of the batch.
            let padded_shapes: std::collections::BTreeMap<String, Vec<i64>> = match shapes {
                true => spec
                    .fields
                    .iter()
                    .find(|f| !f.shape.is_empty() && f.kind != FieldKind::Sparse)
                    .map(|f| {
                        let mut target = vec![-1; f.shape.len()];
                        target[0] = f.shape[0].max(4);
                        (f.name.clone(), target)
                    })
                    .into_iter()
                    .collect(),
                false => Default::default(),
            };
            let text = format!("padded_batch({n}, drop_remainder: {drop}, pad -1: {pad}, shapes: {padded_shapes:?})");
            let options = PaddedBatchOptions { drop_remainder: *drop, padding_values, padded_shapes };
            (ds.padded_batch(*n, options)?, text)
        }
        OpRecipe::GroupConstant { window, bucket } => {
            let tensors: Vec<(String, Expr)> = spec
                .fields
                .iter()
                .filter(|f| !f.shape.is_empty() && f.kind != FieldKind::Sparse)
                .map(|f| (f.name.clone(), col(&f.name)))
                .collect();
            if tensors.is_empty() || spec.batch_dims > 0 {
                return Ok(None);
            }
            let selected = ds.map(MapFunction::select(tensors.clone()))?;
            match bucket {
                false => (
                    selected.group_by_window(lit(0i64), *window)?,
                    format!("map(select {}).group_by_window(0, {window})", show_fields(&tensors)),
                ),
                true => (
                    selected.bucket_by_sequence_length(
                        lit(1i64),
                        vec![2],
                        vec![*window, *window],
                        BucketOptions::default(),
                    )?,
                    format!(
                        "map(select {}).bucket_by_sequence_length(1, [2], [{window}, {window}])",
                        show_fields(&tensors)
                    ),
                ),
            }
        }
        OpRecipe::MapBatchClosure { pick: i, state: 0 } => {
            let mut targets = numeric(&spec, DType::Int64);
            targets.extend(numeric(&spec, DType::Float64));
            let Some(target) = pick(&targets, *i) else { return Ok(None) };
            let name = format!("chunk_map_{idx}");
            let text = format!("map(per-chunk closure {name}: {target} -> 3v - 1)");
            let f = MapFunction::batch(Some(&name), spec.clone(), move |chunk| {
                let i = chunk.schema().index_of(&target)?;
                let mut columns = chunk.columns().to_vec();
                columns[i] = map_values(&columns[i], &|v| v.wrapping_mul(3).wrapping_sub(1), &|v| 3.0 * v - 1.0);
                Ok(RecordBatch::try_new(chunk.schema(), columns)?)
            });
            (ds.map(f)?, text)
        }
        OpRecipe::MapBatchClosure { pick: i, state } => {
            let mut targets = numeric(&spec, DType::Int64);
            targets.extend(numeric(&spec, DType::Float64));
            let Some(target) = pick(&targets, *i) else { return Ok(None) };
            let random = *state % 2 == 0;
            let name = format!("chunk_{}_{idx}", if random { "random" } else { "counter" });
            let text = format!("map(per-chunk closure {name}: {target} += a number of the rows seen before)");
            let seen = Arc::new(AtomicU64::new(0));
            let f = MapFunction::batch(Some(&name), spec.clone(), move |chunk| {
                let i = chunk.schema().index_of(&target)?;
                let first = seen.fetch_add(chunk.num_rows() as u64, Ordering::SeqCst);
                let rows: Vec<ArrayRef> = (0..chunk.num_rows())
                    .map(|r| {
                        let n = first + r as u64;
                        let add = if random { (splitmix(n) % 100) as i64 } else { n as i64 };
                        map_values(&chunk.column(i).slice(r, 1), &|v| v.wrapping_add(add), &|v| v + add as f64)
                    })
                    .collect();
                let mut columns = chunk.columns().to_vec();
                if !rows.is_empty() {
                    let refs: Vec<&dyn Array> = rows.iter().map(|a| a.as_ref()).collect();
                    columns[i] = arrow::compute::concat(&refs)?;
                }
                Ok(RecordBatch::try_new(chunk.schema(), columns)?)
            });
            // A random stream drawn per call depends on the calls before: stateful as well.
            let f = if random { f.nondeterministic().stateful() } else { f.stateful() };
            (ds.map(f)?, text)
        }
        OpRecipe::FilterBatchClosure { pick: i, modulus } => {
            let Some(field) = pick(&scalars(&spec, DType::Int64), *i) else { return Ok(None) };
            let m = *modulus;
            let name = format!("chunk_keep_{idx}");
            let text = format!("filter(per-chunk closure {name}: {field} mod {m} != 1)");
            let p = PredicateFunction::batch(Some(&name), move |chunk| {
                let column = chunk.column_by_name(&field).expect("field").as_primitive::<Int64Type>().clone();
                Ok(column.iter().map(|v| Some(v.unwrap_or(0).rem_euclid(m) != 1)).collect())
            });
            (ds.filter(p)?, text)
        }
        OpRecipe::Bucket { pick: i, sizes, to_boundary, drop } => {
            let Some(field) = pick(&scalars(&spec, DType::Int64), *i) else { return Ok(None) };
            let length = abs(col(&field)) % lit(5i64);
            let options = BucketOptions {
                pad_to_bucket_boundary: *to_boundary,
                drop_remainder: *drop,
                ..BucketOptions::default()
            };
            let text = format!(
                "bucket_by_sequence_length({length}, [2, 4], {sizes:?}, to boundary: {to_boundary}, drop: {drop})"
            );
            (ds.bucket_by_sequence_length(length, vec![2, 4], vec![sizes.0, sizes.1, sizes.2], options)?, text)
        }
        OpRecipe::Unbatch => {
            if !all_batched(&spec) {
                return Ok(None);
            }
            (ds.unbatch()?, "unbatch()".into())
        }
        OpRecipe::Rebatch { n, drop } => {
            if !all_batched(&spec) {
                return Ok(None);
            }
            (ds.rebatch(*n, *drop)?, format!("rebatch({n}, {drop})"))
        }
        OpRecipe::Shuffle { buffer, seed, reshuffle } => (
            ds.shuffle_with(*buffer, Some(*seed), *reshuffle)?,
            format!("shuffle_with({buffer}, Some({seed}), {reshuffle})"),
        ),
        OpRecipe::Repeat { count } => (ds.repeat(Some(*count))?, format!("repeat(Some({count}))")),
        OpRecipe::RepeatForeverTake { take } => (ds.repeat(None)?.take(*take)?, format!("repeat(None).take({take})")),
        OpRecipe::Take { n } => (ds.take(*n)?, format!("take({n})")),
        OpRecipe::Skip { n } => (ds.skip(*n)?, format!("skip({n})")),
        OpRecipe::Shard { n, i } => (ds.shard(*n, *i)?, format!("shard({n}, {i})")),
        OpRecipe::Enumerate { start } => {
            if spec.field("index").is_some() {
                return Ok(None);
            }
            (ds.enumerate(*start)?, format!("enumerate({start})"))
        }
        OpRecipe::Zip { start, len, fail, behind } => {
            let z = format!("z{idx}");
            let e = if *fail { lit(12i64) / col("value") } else { col("value") * lit(2i64) };
            let range = format!("range({start}, {}).map(select [{z} = {e}])", start + len);
            let other = Dataset::range(*start, start + len)?.map(MapFunction::select([(z, e)]))?;
            if *behind {
                (Dataset::zip(&[&other, ds])?, format!("zip({range}, self)"))
            } else {
                (Dataset::zip(&[ds, &other])?, format!("zip(self, {range})"))
            }
        }
        OpRecipe::Concatenate { n, skip } => {
            let (other, text) = if *skip { (ds.skip(*n)?, "skip") } else { (ds.take(*n)?, "take") };
            (ds.concatenate(&other)?, format!("concatenate(self.{text}({n}))"))
        }
        OpRecipe::Prefetch { buffer } => {
            let b = buffer.map_or(Tunable::Autotune, Tunable::Fixed);
            (ds.prefetch(b)?, format!("prefetch({b:?})"))
        }
        OpRecipe::Cache => (ds.cache()?, "cache()".into()),
        OpRecipe::TakeWhile(p) => {
            let Some(e) = predicate(&spec, p) else { return Ok(None) };
            let text = format!("take_while({e})");
            (ds.take_while(e)?, text)
        }
        OpRecipe::Window { size, shift, stride, drop } => {
            (ds.window(*size, *shift, *stride, *drop)?, format!("window({size}, {shift}, {stride}, {drop})"))
        }
        OpRecipe::GroupByWindow { pick: i, modulus, window, fail } => {
            let Some(field) = pick(&scalars(&spec, DType::Int64), *i) else { return Ok(None) };
            let key = if *fail { lit(6i64) / col(&field) } else { col(&field) % lit(*modulus) };
            let text = format!("group_by_window({key}, {window})");
            (ds.group_by_window(key, *window)?, text)
        }
        OpRecipe::Scan { pick: i } => {
            if spec.batch_dims > 0 || !uniform(&spec) {
                return Ok(None);
            }
            let Some(field) = pick(&scalars(&spec, DType::Int64), *i) else { return Ok(None) };
            let s = format!("s{idx}");
            let mut output: Vec<(String, Expr)> = spec.field_names().into_iter().map(|n| (n.clone(), col(n))).collect();
            output.push((s.clone(), col(&s)));
            let text = format!("scan({s} = 0; {s} += {field}; emit fields and {s})");
            (ds.scan(&[(s.clone(), lit(0i64))], &[(s.clone(), col(&s) + col(&field))], &output)?, text)
        }
        OpRecipe::IgnoreErrors => (ds.ignore_errors()?, "ignore_errors()".into()),
        OpRecipe::RandomImage { kind, seed, keep, fail_before, sharded } => {
            let image = spec.field("img").filter(|f| f.shape.len() == 3 && f.shape.iter().all(|d| *d > 0));
            let indexed = spec.field("i").is_some_and(|f| f.dtype == DType::Int64 && f.is_scalar());
            let Some(image) = image.filter(|_| spec.batch_dims == 0 && indexed) else { return Ok(None) };
            let mut text = String::new();
            let mut ds = ds.clone();
            if *fail_before {
                let d = format!("d{idx}");
                ds = ds.map(MapFunction::with_fields([(d.clone(), lit(12i64) / (col("i") - lit(2i64)))]))?;
                text += &format!("map(with_fields [{d} = 12 / (i - 2)]).");
            }
            if *sharded {
                let (index, skip) = (u64::from(*seed % 2), i64::from(*seed % 3));
                ds = ds.shard(2, index)?.skip(skip)?;
                text += &format!("shard(2, {index}).skip({skip}).");
            }
            let seed = i64::from(*seed);
            let drawn = match kind {
                2 if image.dtype == DType::UInt8 => random_crop(col("img"), 5, 4, seed),
                1 => random_flip_up_down(col("img"), seed),
                _ => random_flip_left_right(col("img"), seed),
            };
            let name = if *keep { format!("img{idx}") } else { "img".to_string() };
            text += &format!("map(with_fields [{name} = {drawn}])");
            (ds.map(MapFunction::with_fields([(name, drawn)]))?, text)
        }
        OpRecipe::FlatMap { pick, inner } => {
            let Some((f, text)) = dataset_function(&spec, idx, *pick, *inner) else { return Ok(None) };
            (ds.flat_map(f)?, format!("flat_map({text})"))
        }
        OpRecipe::Interleave { pick, cycle, block, inner, par } => {
            let Some((f, text)) = dataset_function(&spec, idx, *pick, *inner) else { return Ok(None) };
            let text = format!("interleave({text}, cycle {cycle}, block {block})");
            match par {
                Some(p) => (
                    ds.interleave_with(f, Tunable::Fixed(*cycle), *block, p.parallel())?,
                    format!("{text} with {:?}", p.parallel()),
                ),
                None => (ds.interleave(f, Tunable::Fixed(*cycle), *block)?, text),
            }
        }
        OpRecipe::Sample { skip, weight, seed, stop } => {
            let w = f64::from(*weight) / 4.0;
            let other = ds.skip(*skip)?;
            (
                Dataset::sample_from_datasets(&[ds, &other], vec![w, 1.0 - w], Some(*seed), *stop)?,
                format!("sample_from_datasets([self, self.skip({skip})], [{w}, {}], Some({seed}), {stop})", 1.0 - w),
            )
        }
        OpRecipe::RebatchSizes { sizes, drop } => {
            if !all_batched(&spec) {
                return Ok(None);
            }
            (ds.rebatch_sizes(sizes.clone(), *drop)?, format!("rebatch_sizes({sizes:?}, {drop})"))
        }
        OpRecipe::Unique => match ds.unique() {
            Ok(unique) => (unique, "unique()".into()),
            Err(_) => return Ok(None),
        },
        OpRecipe::Choose { skip, choices, stop } => {
            let other = ds.skip(*skip)?;
            let picks = Dataset::from_batches(vec![super::int_batch("c", choices.clone())])?;
            (
                Dataset::choose_from_datasets(&[ds, &other], &picks, *stop)?,
                format!("choose_from_datasets([self, self.skip({skip})], {choices:?}, {stop})"),
            )
        }
        OpRecipe::ParseExample { parse } => {
            let record = spec.field("record").is_some_and(|f| f.dtype == DType::Binary && f.is_scalar());
            if !record || spec.batch_dims > 0 {
                return Ok(None);
            }
            let features = sources::features(*parse);
            let names: Vec<&str> = features.iter().map(|f| f.name.as_str()).collect();
            let text = format!("map(parse_example(record, {names:?}, parse code {parse}))");
            (ds.map(MapFunction::parse_example("record", features)?)?, text)
        }
        OpRecipe::CacheTo => {
            let path = scratch.join(format!("cache-{idx}")).to_string_lossy().into_owned();
            (ds.cache_to(&path)?, format!("cache_to({path:?})"))
        }
        OpRecipe::CacheTake { k, file, repeat } => {
            let (cached, text) = if *file {
                let path = scratch.join(format!("cache-{idx}")).to_string_lossy().into_owned();
                (ds.cache_to(&path)?, format!("cache_to({path:?})"))
            } else {
                (ds.cache()?, "cache()".to_string())
            };
            let cut = cached.take(*k)?;
            if *repeat > 0 {
                (cut.repeat(Some(*repeat))?, format!("{text}.take({k}).repeat(Some({repeat}))"))
            } else {
                (cut, format!("{text}.take({k})"))
            }
        }
        OpRecipe::ShuffleRepeat { buffer, seed, count, repeat_first } => {
            if *repeat_first {
                (
                    ds.repeat(Some(*count))?.shuffle_with(*buffer, Some(*seed), true)?,
                    format!("repeat(Some({count})).shuffle_with({buffer}, Some({seed}), true)"),
                )
            } else {
                (
                    ds.shuffle_with(*buffer, Some(*seed), true)?.repeat(Some(*count))?,
                    format!("shuffle_with({buffer}, Some({seed}), true).repeat(Some({count}))"),
                )
            }
        }
        OpRecipe::BatchSlices { n, drop, cycle } => {
            if !dense(&spec) {
                return Ok(None);
            }
            let batched = ds.batch_with(*n, *drop)?;
            match cycle {
                Some(c) => (
                    batched.interleave(DatasetFunction::FromTensorSlices, Tunable::Fixed(*c), 1)?,
                    format!("batch_with({n}, {drop}).interleave(FromTensorSlices, cycle {c}, block 1)"),
                ),
                None => (
                    batched.flat_map(DatasetFunction::FromTensorSlices)?,
                    format!("batch_with({n}, {drop}).flat_map(FromTensorSlices)"),
                ),
            }
        }
    };
    Ok(Some(out))
}

/// The fields `keep`'s bits select among those `select` can copy (shape = batch shape).
pub fn kept(spec: &ElementSpec, keep: u8) -> Vec<String> {
    spec.fields
        .iter()
        .enumerate()
        .filter(|(i, f)| keep & (1 << (i % 8)) != 0 && f.shape.len() == spec.batch_dims)
        .map(|(_, f)| f.name.clone())
        .collect()
}

/// `fields` as text, for the builder calls shown in failure messages.
pub fn show_fields(fields: &[(String, Expr)]) -> String {
    let parts: Vec<String> = fields.iter().map(|(n, e)| format!("{n} = {e}")).collect();
    format!("[{}]", parts.join(", "))
}

/// The name of a recipe's operator (coverage statistics).
pub fn op_name(r: &OpRecipe) -> &'static str {
    match r {
        OpRecipe::MapExpr { par: Some(_), .. } => "map_with(with_fields, parallel)",
        OpRecipe::MapExpr { .. } => "map(with_fields)",
        OpRecipe::MapClosure { par: Some(_), .. } => "map_with(closure, parallel)",
        OpRecipe::MapSelectComputed { .. } => "map(select computed)",
        OpRecipe::MapSelectOnly { .. } => "map(select only)",
        OpRecipe::MapClosure { flavor: Flavor::Pure, .. } => "map(closure pure)",
        OpRecipe::MapClosure { flavor: Flavor::PureFailing, .. } => "map(closure failing)",
        OpRecipe::MapClosure { flavor: Flavor::Stateful, .. } => "map(closure stateful)",
        OpRecipe::MapClosure { flavor: Flavor::Random, .. } => "map(closure nondeterministic)",
        OpRecipe::Filter(_) => "filter(expr)",
        OpRecipe::MapThenFilter { .. } => "map then filter",
        OpRecipe::FilterClosure { .. } => "filter(closure)",
        OpRecipe::MapBatchClosure { state: 0, .. } => "map(per-chunk closure)",
        OpRecipe::MapBatchClosure { state: 1, .. } => "map(per-chunk closure stateful)",
        OpRecipe::MapBatchClosure { .. } => "map(per-chunk closure nondeterministic)",
        OpRecipe::FilterBatchClosure { .. } => "filter(per-chunk closure)",
        OpRecipe::Bucket { .. } => "bucket_by_sequence_length",
        OpRecipe::Batch { par: Some(_), .. } => "batch_parallel",
        OpRecipe::Batch { drop: false, .. } => "batch",
        OpRecipe::Batch { drop: true, .. } => "batch(drop_remainder)",
        OpRecipe::PaddedBatch { shapes: false, .. } => "padded_batch",
        OpRecipe::PaddedBatch { shapes: true, .. } => "padded_batch(padded_shapes)",
        OpRecipe::GroupConstant { bucket: false, .. } => "group_by_window(constant key, no scalar field)",
        OpRecipe::GroupConstant { bucket: true, .. } => "bucket_by_sequence_length(constant, no scalar field)",
        OpRecipe::Unbatch => "unbatch",
        OpRecipe::Rebatch { .. } => "rebatch",
        OpRecipe::Shuffle { reshuffle: false, .. } => "shuffle",
        OpRecipe::Shuffle { reshuffle: true, .. } => "shuffle(reshuffle_each_iteration)",
        OpRecipe::Repeat { .. } => "repeat(n)",
        OpRecipe::RepeatForeverTake { .. } => "repeat(None).take",
        OpRecipe::Take { .. } => "take",
        OpRecipe::Skip { .. } => "skip",
        OpRecipe::Shard { .. } => "shard",
        OpRecipe::Enumerate { .. } => "enumerate",
        OpRecipe::Zip { .. } => "zip",
        OpRecipe::Concatenate { .. } => "concatenate",
        OpRecipe::Prefetch { .. } => "prefetch",
        OpRecipe::Cache => "cache",
        OpRecipe::TakeWhile(_) => "take_while",
        OpRecipe::Window { .. } => "window",
        OpRecipe::GroupByWindow { .. } => "group_by_window",
        OpRecipe::Scan { .. } => "scan",
        OpRecipe::IgnoreErrors => "ignore_errors",
        OpRecipe::RandomImage { sharded: true, .. } => "random image map over shard and skip",
        OpRecipe::RandomImage { fail_before: true, .. } => "random image map after a failing map",
        OpRecipe::RandomImage { .. } => "random image map",
        OpRecipe::FlatMap { inner: 1, .. } => "flat_map(failing inner dataset)",
        OpRecipe::FlatMap { .. } => "flat_map",
        OpRecipe::Interleave { par: Some(_), .. } => "interleave_with(parallel)",
        OpRecipe::Interleave { inner: 1, .. } => "interleave(failing inner dataset)",
        OpRecipe::Interleave { .. } => "interleave",
        OpRecipe::Sample { .. } => "sample_from_datasets",
        OpRecipe::FilterWith { .. } => "filter_with(parallel)",
        OpRecipe::ParseExample { .. } => "map(parse_example)",
        OpRecipe::CacheTo => "cache_to(file)",
        OpRecipe::CacheTake { file: false, .. } => "cache().take (cut short)",
        OpRecipe::CacheTake { file: true, .. } => "cache_to(file).take (cut short)",
        OpRecipe::ShuffleRepeat { .. } => "shuffle(reshuffle).repeat",
        OpRecipe::BatchSlices { cycle: None, .. } => "batch.flat_map(FromTensorSlices)",
        OpRecipe::BatchSlices { cycle: Some(_), .. } => "batch.interleave(FromTensorSlices)",
        OpRecipe::RebatchSizes { .. } => "rebatch(sizes)",
        OpRecipe::Unique => "unique",
        OpRecipe::Choose { .. } => "choose_from_datasets",
    }
}

/// The columns of `rows` as a batch `{a, b, x}`.
pub fn rows_batch(rows: &[Row]) -> RecordBatch {
    let a: Vec<Option<i64>> = rows.iter().map(|r| r.0).collect();
    let b: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let x: Vec<Option<f64>> = rows.iter().map(|r| r.2).collect();
    RecordBatch::try_from_iter([
        ("a", Arc::new(Int64Array::from(a)) as ArrayRef),
        ("b", Arc::new(Int64Array::from(b)) as ArrayRef),
        ("x", Arc::new(Float64Array::from(x)) as ArrayRef),
    ])
    .expect("batch")
}

/// Writes the files of a `Files` source into `dir`; their paths, in order.
pub fn write_files(dir: &Path, rows: &[Row], parquet: bool, files: usize, bad_row: Option<usize>) -> Vec<String> {
    let files = files.clamp(1, rows.len().max(1));
    let per_file = rows.len().div_ceil(files).max(1);
    rows.chunks(per_file)
        .enumerate()
        .map(|(i, part)| {
            let first = i * per_file;
            let path = dir.join(format!("part-{i}.{}", if parquet { "parquet" } else { "csv" }));
            if parquet {
                let batch = rows_batch(part);
                let props =
                    parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(3)).build();
                let file = std::fs::File::create(&path).expect("create");
                let mut writer =
                    parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
                writer.write(&batch).expect("write");
                writer.close().expect("close");
            } else {
                let cell = |v: Option<String>| v.unwrap_or_default();
                let text: String = part
                    .iter()
                    .enumerate()
                    .map(|(j, (a, b, x))| {
                        let b = if bad_row == Some(first + j) { format!("{b}?") } else { b.to_string() };
                        format!("{},{b},{}\n", cell(a.map(|a| a.to_string())), cell(x.map(|x| format!("{x:?}"))))
                    })
                    .collect();
                std::fs::write(&path, format!("a,b,x\n{text}")).expect("write");
            }
            path.to_string_lossy().into_owned()
        })
        .collect()
}

/// The source dataset of `r` (files already written into `dir`), and its builder call as text.
pub fn source(r: &SourceRecipe, dir: &Path) -> flumen::Result<(Dataset, String)> {
    match r {
        SourceRecipe::Range { start, len } => {
            Ok((Dataset::range(*start, start + len)?, format!("Dataset::range({start}, {})", start + len)))
        }
        SourceRecipe::Arrays { rows } => {
            let text = format!("Dataset::from_batches(rows (a, b, x) = {rows:?})");
            Ok((Dataset::from_batches(vec![rows_batch(rows)])?, text))
        }
        SourceRecipe::Files { rows, parquet, read, .. } => {
            let (ext, format) = if *parquet {
                ("parquet", FileRead::Parquet { columns: None })
            } else {
                let schema = ElementSpec::new(vec![
                    FieldSpec::scalar("a", DType::Int64),
                    FieldSpec::scalar("b", DType::Int64),
                    FieldSpec::scalar("x", DType::Float64),
                ])?;
                ("csv", FileRead::Csv(CsvOptions::default().with_schema(schema)))
            };
            let mut paths: Vec<String> = std::fs::read_dir(dir)
                .expect("the case's directory")
                .map(|e| e.expect("entry").path().to_string_lossy().into_owned())
                .filter(|p| p.ends_with(ext))
                .collect();
            paths.sort();
            let text = format!("{} {ext} files of {rows:?}", paths.len());
            let pattern = format!("{}/*.{ext}", dir.display());
            let read_file = DatasetFunction::read_file("filename", format.clone());
            let ds = match (read, format) {
                (1, _) => (
                    Dataset::list_files(&pattern, false, None)?.flat_map(read_file)?,
                    format!("flat_map(read) of {text}"),
                ),
                (2, _) => (
                    Dataset::list_files(&pattern, false, None)?.interleave(read_file, Tunable::Fixed(2), 1)?,
                    format!("interleave(read, cycle 2, block 1) of {text}"),
                ),
                (_, FileRead::Csv(o)) => {
                    (Dataset::csv(&paths.iter().map(String::as_str).collect::<Vec<_>>(), o)?, format!("csv({text})"))
                }
                (_, _) => (
                    Dataset::parquet(&paths.iter().map(String::as_str).collect::<Vec<_>>(), None)?,
                    format!("parquet({text})"),
                ),
            };
            Ok(ds)
        }
        SourceRecipe::RangeStep { start, stop, step } => Ok((
            Dataset::range_step(*start, *stop, *step)?,
            format!("Dataset::range_step({start}, {stop}, {step})"),
        )),
        SourceRecipe::Typed { rows, parts } => Ok((
            sources::typed_source(rows, *parts)?,
            format!("Dataset::from_batches({parts} batches of typed rows {rows:?})"),
        )),
        SourceRecipe::Generator { values, chunk, stateful, error_at } => Ok((
            sources::generator(values, *chunk, *stateful, *error_at)?,
            format!(
                "Dataset::from_generator(values {values:?}, chunks of {chunk}, stateful: {stateful}, error at {error_at:?})"
            ),
        )),
        SourceRecipe::Tables { rows, format, read, .. } => {
            let ext = format.extension();
            let paths = listed(dir, ext);
            let (ds, text) = sources::read_files(dir, &paths, ext, format.read(), *read)?;
            Ok((ds, format!("{text} of {rows:?}")))
        }
        SourceRecipe::Records { examples, read, gzip, parse, .. } => {
            let ext = if *gzip { "tfrecord.gz" } else { "tfrecord" };
            let compression = if *gzip { RecordCompression::Gzip } else { RecordCompression::None };
            let paths = listed(dir, ext);
            let (ds, text) = sources::read_files(dir, &paths, ext, FileRead::TfRecord(compression), *read)?;
            let text = format!("{text} of examples {examples:?}");
            if *parse == 0 {
                return Ok((ds, text));
            }
            let features = sources::features(*parse);
            Ok((ds.map(MapFunction::parse_example("record", features)?)?, format!("{text}.map(parse_example code {parse})")))
        }
        SourceRecipe::Images(r) => sources::image_source(r, dir),
    }
}

/// The files in `dir` named `*.{ext}`, sorted (as `list_files` lists them).
fn listed(dir: &Path, ext: &str) -> Vec<String> {
    let suffix = format!(".{ext}");
    let mut paths: Vec<String> = std::fs::read_dir(dir)
        .expect("the case's directory")
        .map(|e| e.expect("entry").path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(&suffix))
        .collect();
    paths.sort();
    paths
}

/// Writes the files the source of `case` reads into `dir` (nothing for in-memory sources).
pub fn prepare(case: &Case, dir: &Path) {
    match &case.source {
        SourceRecipe::Files { rows, parquet, files, bad_row, .. } => {
            write_files(dir, rows, *parquet, *files, *bad_row);
        }
        SourceRecipe::Tables { rows, format, files, bad_row, .. } => {
            sources::write_tables(dir, rows, *format, *files, *bad_row);
        }
        SourceRecipe::Records { examples, files, corrupt, gzip, .. } => {
            sources::write_records(dir, examples, *files, *corrupt, *gzip);
        }
        SourceRecipe::Images(_) => sources::write_images(dir),
        _ => {}
    }
}

/// What an applied recipe means for comparing runs of operators whose results depend on
/// how far they are read (closures that keep state, caches): flumen reads no further than
/// what is asked for above them, except where the user wrote read-ahead above one, which,
/// as in tf.data, reads on past what is consumed by a timing-dependent amount (see the
/// fuzzer's exemption rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// Its results depend on how far it is read: it calls a closure that keeps state, holds
    /// a cache, or is a source whose passes differ.
    pub stateful: bool,
    /// Reads ahead of its consumer because the user wrote so: a prefetch, or parallel
    /// arguments on an operator that honours them (a closure that keeps state runs one
    /// element at a time whatever its own arguments say).
    pub read_ahead: bool,
    /// May stop pulling its input before the input ends (take, take_while, zip, ...).
    pub stops: bool,
    /// Runs what is below it again (repeat, a second branch over the same input).
    pub again: bool,
    /// May hand out its elements out of input order (parallel arguments with
    /// `deterministic: false`).
    pub unordered: bool,
    /// Its results depend on the order of its input beyond their own order: it counts,
    /// pairs or stops by position, keeps state across elements, draws by position, or pads
    /// or drops groups whose members the order decides.
    pub order_sensitive: bool,
    /// Groups consecutive elements into one (a batch), whose gathered rows an error among
    /// them discards: with errors in the stream, the order decides which rows are lost.
    pub groups: bool,
    /// Adds a batch level: after an out-of-order stream, a second such level gives lists
    /// whose members the order decides.
    pub nests: bool,
    /// Drops errors (`ignore_errors`), hiding those that decide what `groups` discards.
    pub drops_errors: bool,
}

/// The marks of the source of `case`.
pub fn source_marks(r: &SourceRecipe) -> Marks {
    Marks { stateful: matches!(r, SourceRecipe::Generator { stateful: true, .. }), ..Marks::default() }
}

/// The marks of recipe `r` (applied).
pub fn marks(r: &OpRecipe) -> Marks {
    let mut m = Marks::default();
    let unordered = |par: &Option<ParRecipe>| par.is_some_and(|p| p.deterministic == Some(false));
    match r {
        OpRecipe::MapClosure { flavor, par, .. } => {
            m.stateful = matches!(flavor, Flavor::Stateful | Flavor::Random);
            m.read_ahead = par.is_some() && !m.stateful;
            (m.unordered, m.order_sensitive) = (unordered(par), m.stateful);
        }
        OpRecipe::MapBatchClosure { state, .. } => (m.stateful, m.order_sensitive) = (*state != 0, *state != 0),
        OpRecipe::MapExpr { par, .. } | OpRecipe::Interleave { par, .. } => {
            (m.read_ahead, m.unordered) = (par.is_some(), unordered(par));
        }
        OpRecipe::Batch { par, drop, .. } => {
            (m.read_ahead, m.unordered) = (par.is_some(), unordered(par));
            (m.groups, m.nests, m.order_sensitive) = (true, true, *drop);
        }
        OpRecipe::FilterWith { par, .. } => (m.read_ahead, m.unordered) = (true, unordered(&Some(*par))),
        OpRecipe::Prefetch { .. } => m.read_ahead = true,
        OpRecipe::Cache | OpRecipe::CacheTo => m.stateful = true,
        OpRecipe::Take { .. } | OpRecipe::TakeWhile(_) | OpRecipe::Zip { .. } => m.stops = true,
        OpRecipe::RepeatForeverTake { .. } => (m.stops, m.again) = (true, true),
        OpRecipe::CacheTake { repeat, .. } => (m.stateful, m.stops, m.again) = (true, true, *repeat > 1),
        OpRecipe::Concatenate { .. } | OpRecipe::Sample { .. } | OpRecipe::Choose { .. } => {
            (m.stops, m.again) = (true, true)
        }
        OpRecipe::Repeat { count } | OpRecipe::ShuffleRepeat { count, .. } => m.again = *count > 1,
        OpRecipe::Rebatch { drop, .. } | OpRecipe::BatchSlices { drop, .. } => {
            (m.groups, m.order_sensitive) = (true, *drop);
        }
        // Batch boundaries cycle through the sizes; the first of equal elements is kept.
        OpRecipe::RebatchSizes { .. } => (m.groups, m.order_sensitive) = (true, true),
        OpRecipe::Unique => m.order_sensitive = true,
        OpRecipe::Skip { .. }
        | OpRecipe::Shard { .. }
        | OpRecipe::Enumerate { .. }
        | OpRecipe::Window { .. }
        | OpRecipe::GroupByWindow { .. }
        | OpRecipe::Scan { .. }
        | OpRecipe::PaddedBatch { .. }
        | OpRecipe::GroupConstant { .. }
        | OpRecipe::Bucket { .. }
        | OpRecipe::RandomImage { .. } => m.order_sensitive = true,
        OpRecipe::IgnoreErrors => m.drops_errors = true,
        _ => {}
    }
    // Whatever stops early reads a prefix, which the order decides.
    m.order_sensitive |= m.stops;
    m
}

/// Builds `case` from scratch (fresh closures, fresh shared state) to run under `options`;
/// its cache files go to a fresh directory under `dir`.
pub fn build(case: &Case, options: Options, dir: &Path) -> flumen::Result<Built> {
    static BUILDS: AtomicU64 = AtomicU64::new(0);
    let scratch = dir.join(format!("scratch-{}", BUILDS.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&scratch).map_err(|e| Error::io(scratch.display().to_string(), e))?;
    let (mut ds, text) = source(&case.source, dir)?;
    let mut built = Built {
        ds: ds.clone(),
        calls: vec![text],
        applied: Vec::new(),
        recipes: Vec::new(),
        marks: vec![source_marks(&case.source)],
        skipped: 0,
        rejected: 0,
    };
    for (idx, r) in case.ops.iter().enumerate() {
        match apply(&ds, r, idx, &scratch) {
            Ok(Some((next, text))) => {
                ds = next;
                built.calls.push(text);
                built.applied.push(op_name(r));
                built.recipes.push(r.clone());
                built.marks.push(marks(r));
            }
            Ok(None) => built.skipped += 1,
            Err(e) => {
                built.rejected += 1;
                built.calls.push(format!("// rejected {}: {e}", op_name(r)));
            }
        }
    }
    built.ds = ds.with_options(options);
    Ok(built)
}

// ----------------------------------------------------------------------------------------
// Running and comparing.
// ----------------------------------------------------------------------------------------

/// One item of an iteration: an element, or an error (its message, for the report only).
#[derive(Debug, Clone)]
pub enum Item {
    Ok(RecordBatch),
    Err(String),
}

/// At most this many items are compared per pass (pipelines are finite; this bounds the
/// work of the ones that repeat and concatenate a lot).
pub const MAX_ITEMS: usize = 3000;

/// The items of one pass over `ds` (at most [`MAX_ITEMS`]).
pub fn items(ds: &Dataset) -> Vec<Item> {
    items_up_to(ds, MAX_ITEMS)
}

/// The first `n` items of one pass over `ds`.
pub fn items_up_to(ds: &Dataset, n: usize) -> Vec<Item> {
    ds.iter()
        .take(n)
        .map(|item| match item {
            Ok(batch) => Item::Ok(batch),
            Err(e) => Item::Err(e.to_string()),
        })
        .collect()
}

/// An item (or the end of the sequence) as text, for failure messages.
pub fn show(item: Option<&Item>) -> String {
    match item {
        None => "end of sequence".into(),
        Some(Item::Err(e)) => format!("Err({e})"),
        Some(Item::Ok(b)) => match arrow::util::pretty::pretty_format_batches(std::slice::from_ref(b)) {
            Ok(table) => format!("{}\n{table}", b.schema()),
            Err(_) => format!("{b:?}"),
        },
    }
}

/// The message of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// The value of environment variable `name`, or `default` when it is unset or malformed.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The deterministic configuration of a property test over random pipelines: `cases` cases
/// from `seed` (no persistence, portable ChaCha), each overridable by an environment variable
/// for longer bug hunts.
pub fn fixed_config(cases_var: &str, cases: u32, seed_var: &str, seed: u64) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: env_or(cases_var, cases),
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: proptest::test_runner::RngSeed::Fixed(env_or(seed_var, seed)),
        max_shrink_iters: 4096,
        ..proptest::test_runner::Config::default()
    }
}

/// Runs `run(case)` on its own thread (named `name`), failing the case when it panics or does
/// not finish within `limit`: a hang is a bug too, and must not stall the test suite.
pub fn run_with_timeout<C: Clone + Send + std::panic::RefUnwindSafe + 'static>(
    name: &str,
    limit: Duration,
    case: &C,
    run: fn(&C) -> Result<(), String>,
) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let owned = case.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let outcome = std::panic::catch_unwind(|| run(&owned))
                .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(p.as_ref()))));
            let _ = tx.send(outcome);
        })
        .expect("spawn a case thread");
    match rx.recv_timeout(limit) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(diff)) => Err(TestCaseError::fail(diff)),
        Err(_) => Err(TestCaseError::fail(format!("the case did not finish within {} s", limit.as_secs()))),
    }
}

//! Resolving a plan's function descriptors into callables over chunks.
//!
//! Every map and filter becomes one [`ChunkFn`]: a chunk of elements in, the chunk of
//! results out. Per-element closures are called once per row, as tf.data calls them, and
//! when one fails they say at which element ([`Failure::AtRow`]), so no closure is ever
//! called twice for the same element.

use std::sync::Arc;

use arrow::array::{Array, BooleanArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::example::FeatureSpec;
use flumen_ir::{ClosureKind, Error, Expr, Location, MapFn, NamedExpr, Predicate, Result};
use flumen_udf::closure::guarded;
use flumen_udf::example::parse_examples;
use flumen_udf::kernel::{FusedMap, FusedPredicate};
use flumen_udf::registry::Registry;

use crate::conform::conform_chunk;
use crate::kernels::filter_rows::filter_rows;
use crate::rows::concat;

/// How a chunk function failed.
#[derive(Debug)]
pub enum Failure<T> {
    /// A pure function failed somewhere in the chunk: re-running it element by element
    /// finds the element (expressions).
    Pure(Error),
    /// The elements before `row` gave `done`; element `row` failed with `error`.
    AtRow {
        /// The results of the elements before `row`.
        done: Vec<T>,
        /// The failing element.
        row: usize,
        /// Its error.
        error: Error,
    },
    /// The chunk failed as a whole and cannot be split (a per-batch closure).
    Whole(Error),
}

/// The outcome of a chunk function.
pub type Outcome<T> = std::result::Result<T, Failure<T>>;

impl<T> Failure<T> {
    /// The failure's error.
    pub fn into_error(self) -> Error {
        match self {
            Failure::Pure(e) | Failure::Whole(e) | Failure::AtRow { error: e, .. } => e,
        }
    }

    /// The results before the failing element, its index and its error; `Err` when the
    /// chunk failed as a whole. A pure function is re-run element by element to find it.
    pub fn locate(self, chunk: &RecordBatch, f: &dyn Fn(&RecordBatch) -> Outcome<T>) -> Result<(Vec<T>, usize, Error)> {
        match self {
            Failure::Whole(e) => Err(e),
            Failure::AtRow { done, row, error } => Ok((done, row, error)),
            // One element: it is the one that failed, and running it again would call a
            // row-wise closure twice for it (one that keeps state gets one-row chunks).
            Failure::Pure(chunk_error) if chunk.num_rows() == 1 => Ok((Vec::new(), 0, chunk_error)),
            Failure::Pure(chunk_error) => {
                let mut done = Vec::new();
                for row in 0..chunk.num_rows() {
                    match f(&chunk.slice(row, 1)) {
                        Ok(out) => done.push(out),
                        Err(failure) => return Ok((done, row, failure.into_error())),
                    }
                }
                // Every element succeeds alone: the failure belongs to the chunk as a whole.
                Err(chunk_error)
            }
        }
    }
}

/// A function over a chunk of elements with one result for the chunk.
pub type ChunkCall<T> = Arc<dyn Fn(&RecordBatch) -> Outcome<T> + Send + Sync>;

/// A function from a chunk of elements to a chunk of results (maybe empty for filters).
pub type ChunkFn = ChunkCall<RecordBatch>;

/// Calls `f` once per element of each chunk, as tf.data calls a function the optimizer did
/// not vectorize; a failing element is reported at its row.
fn per_element<T: 'static>(
    f: ChunkCall<T>,
    join: impl Fn(Vec<T>) -> Result<T> + Send + Sync + 'static,
) -> ChunkCall<T> {
    Arc::new(move |chunk| {
        let mut done = Vec::with_capacity(chunk.num_rows());
        for row in 0..chunk.num_rows() {
            match f(&chunk.slice(row, 1)) {
                Ok(out) => done.push(out),
                Err(failure) => return Err(Failure::AtRow { done, row, error: failure.into_error() }),
            }
        }
        join(done).map_err(Failure::Whole)
    })
}

/// `f` over whole chunks when `vectorized` (pfor), else once per element, the results
/// joined into one chunk of `schema`.
fn chunked_if(vectorized: bool, f: ChunkFn, schema: SchemaRef) -> ChunkFn {
    if vectorized {
        return f;
    }
    let join =
        move |rows: Vec<RecordBatch>| Ok(concat(&rows)?.unwrap_or_else(|| RecordBatch::new_empty(schema.clone())));
    per_element(f, join)
}

/// The callable of a `map` with output `schema`. An expression map runs over whole chunks
/// when `vectorized` (pfor), and once per element otherwise.
pub fn map_fn(func: &MapFn, schema: SchemaRef, registry: &Registry, vectorized: bool) -> Result<ChunkFn> {
    match func {
        MapFn::Exprs { outputs, keep_input } => {
            let map = FusedMap::new(outputs.clone(), *keep_input, schema.clone());
            let f: ChunkFn = Arc::new(move |chunk| map.evaluate(chunk).map_err(|e| Failure::Pure(e.in_data_of("map"))));
            Ok(chunked_if(vectorized, f, schema))
        }
        MapFn::ParseExample { field, features } => {
            let f = parse_example_fn(field.clone(), features.clone(), schema.clone());
            Ok(chunked_if(vectorized, f, schema))
        }
        MapFn::Closure { closure, .. } => {
            let operator = format!("map(closure '{}')", closure.name);
            match closure.kind {
                ClosureKind::PerElement => {
                    let f = registry.element_fn(&closure.name)?;
                    Ok(Arc::new(move |chunk| {
                        let mut done = Vec::with_capacity(chunk.num_rows());
                        for row in 0..chunk.num_rows() {
                            let out = guarded(&operator, || f(&chunk.slice(row, 1))).and_then(|out| {
                                check_rows(&operator, &out, 1)?;
                                conform_chunk(out, &schema).map_err(|e| mismatch(&operator, e))
                            });
                            match out {
                                Ok(out) => done.push(out),
                                Err(error) => return Err(Failure::AtRow { done, row, error }),
                            }
                        }
                        Ok(concat(&done)
                            .map_err(Failure::Whole)?
                            .unwrap_or_else(|| RecordBatch::new_empty(schema.clone())))
                    }))
                }
                ClosureKind::PerBatch | ClosureKind::PerBatchRowwise => {
                    let f = registry.batch_fn(&closure.name)?;
                    // A row-wise function's failure is located row by row (`Failure::Pure`).
                    let failure = if closure.kind == ClosureKind::PerBatch { Failure::Whole } else { Failure::Pure };
                    Ok(Arc::new(move |chunk| {
                        let out = guarded(&operator, || f(chunk)).map_err(failure)?;
                        check_rows(&operator, &out, chunk.num_rows()).map_err(Failure::Whole)?;
                        conform_chunk(out, &schema).map_err(|e| Failure::Whole(mismatch(&operator, e)))
                    }))
                }
            }
        }
    }
}

/// `parse_example` over a chunk's records, in one call. A bad record fails at its row, after
/// the records before it (parsed again on their own: only on that error path).
fn parse_example_fn(field: String, features: Vec<FeatureSpec>, schema: SchemaRef) -> ChunkFn {
    let parse = move |chunk: &RecordBatch| -> std::result::Result<RecordBatch, (usize, Error)> {
        // Bytes, or views of a reader's windows where an interleave hands them on so.
        let records =
            chunk.column_by_name(&field).filter(|c| matches!(c.data_type(), DataType::Binary | DataType::BinaryView));
        let Some(records) = records else {
            let message = format!("the element has no bytes field '{field}'");
            return Err((0, Error::execution("parse_example", message)));
        };
        // The error belongs to the element at row `e.row`; its place in the chunk is not a
        // position the user knows (chunks are cut differently optimized or not), and the
        // error comes out of the iterator in that element's place.
        let columns = parse_examples(records.as_ref(), &features)
            .map_err(|e| (e.row, Error::data(Location::source(format!("parse_example of '{field}'")), e.message)))?;
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| (0, e.into()))
    };
    Arc::new(move |chunk| {
        parse(chunk).map_err(|(row, error)| match parse(&chunk.slice(0, row)) {
            Ok(before) => Failure::AtRow { done: vec![before], row, error },
            Err(_) => Failure::Whole(error),
        })
    })
}

/// The mask function of a predicate: one bool per element of a chunk.
pub type MaskFn = ChunkCall<BooleanArray>;

/// The mask of a `filter` or `take_while` predicate. An expression predicate is evaluated
/// over whole chunks when `vectorized` (pfor), and once per element otherwise.
pub fn mask_fn(predicate: &Predicate, operator: &str, registry: &Registry, vectorized: bool) -> Result<MaskFn> {
    match predicate {
        Predicate::Expr { expr } => {
            let predicate = FusedPredicate::new(expr.clone());
            let operator = operator.to_string();
            let f: MaskFn =
                Arc::new(move |chunk| predicate.evaluate(chunk).map_err(|e| Failure::Pure(e.in_data_of(&operator))));
            if vectorized {
                return Ok(f);
            }
            Ok(per_element(f, |masks| Ok(concat_masks(&masks))))
        }
        Predicate::Closure { closure } => {
            let operator = format!("{operator}(closure '{}')", closure.name);
            match closure.kind {
                ClosureKind::PerElement => {
                    let f = registry.predicate_fn(&closure.name)?;
                    Ok(Arc::new(move |chunk| {
                        let mut values = Vec::with_capacity(chunk.num_rows());
                        for row in 0..chunk.num_rows() {
                            match guarded(&operator, || f(&chunk.slice(row, 1))) {
                                Ok(v) => values.push(v),
                                Err(error) => {
                                    return Err(Failure::AtRow { done: vec![BooleanArray::from(values)], row, error })
                                }
                            }
                        }
                        Ok(BooleanArray::from(values))
                    }))
                }
                ClosureKind::PerBatch | ClosureKind::PerBatchRowwise => {
                    let f = registry.batch_predicate_fn(&closure.name)?;
                    let failure = if closure.kind == ClosureKind::PerBatch { Failure::Whole } else { Failure::Pure };
                    Ok(Arc::new(move |chunk| {
                        let mask = guarded(&operator, || f(chunk)).map_err(failure)?;
                        if mask.len() != chunk.num_rows() || mask.null_count() > 0 {
                            return Err(Failure::Whole(Error::Udf {
                                operator: operator.clone(),
                                message: format!(
                                    "returned {} values ({} null) for {} elements",
                                    mask.len(),
                                    mask.null_count(),
                                    chunk.num_rows()
                                ),
                            }));
                        }
                        Ok(mask)
                    }))
                }
            }
        }
    }
}

/// The masks of a prefix of a chunk, as one mask.
pub fn concat_masks(parts: &[BooleanArray]) -> BooleanArray {
    parts.iter().flat_map(|m| m.iter()).collect()
}

/// A vectorized expression filter and the expression map right above it as one function:
/// the map's tensor kernels read the rows the predicate keeps in place
/// ([`FusedMap::evaluate_selected`]) rather than from a filtered copy. Both fail as one
/// pure function, like the stage they are in.
pub fn filter_map_fn(predicate: &Expr, outputs: &[NamedExpr], keep_input: bool, schema: SchemaRef) -> ChunkFn {
    let predicate = FusedPredicate::new(predicate.clone());
    let map = FusedMap::new(outputs.to_vec(), keep_input, schema);
    Arc::new(move |chunk| {
        let mask = predicate.evaluate(chunk).map_err(|e| Failure::Pure(e.in_data_of("filter")))?;
        map.evaluate_selected(chunk, &mask).map_err(|e| Failure::Pure(e.in_data_of("map")))
    })
}

/// The callable of a `filter`: the chunk's rows for which the predicate holds.
pub fn filter_fn(predicate: &Predicate, registry: &Registry, vectorized: bool) -> Result<ChunkFn> {
    let mask = mask_fn(predicate, "filter", registry, vectorized)?;
    Ok(Arc::new(move |chunk| {
        let apply = |rows: &RecordBatch, m: &BooleanArray| filter_rows(rows, m);
        match mask(chunk) {
            Ok(m) => apply(chunk, &m).map_err(Failure::Whole),
            Err(Failure::AtRow { done, row, error }) => {
                let kept = apply(&chunk.slice(0, row), &concat_masks(&done)).map_err(Failure::Whole)?;
                Err(Failure::AtRow { done: vec![kept], row, error })
            }
            Err(Failure::Pure(e)) => Err(Failure::Pure(e)),
            Err(Failure::Whole(e)) => Err(Failure::Whole(e)),
        }
    }))
}

pub(crate) fn check_rows(operator: &str, out: &RecordBatch, expected: usize) -> Result<()> {
    if out.num_rows() != expected {
        return Err(Error::Udf {
            operator: operator.to_string(),
            message: format!("returned {} elements for {expected}", out.num_rows()),
        });
    }
    Ok(())
}

pub(crate) fn mismatch(operator: &str, e: Error) -> Error {
    Error::Udf { operator: operator.to_string(), message: format!("result does not match the declared spec: {e}") }
}

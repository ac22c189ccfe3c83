//! Sources as physical operators: readers from `flumen-sources`, generators from the
//! registry, and shuffled file lists.

use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{AvroFormat, Error, FileFormat, Op, Plan, Result, SourceDesc, Tunable};
use flumen_sources::avro::shuffle::ShuffledBlocksReader;
use flumen_sources::reader::BoxReader;
use flumen_udf::closure::{guarded, ChunkIter};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::autotune::model::Param;
use crate::build::knob;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::{conform_chunk, relabel};
use crate::context::ExecContext;
use crate::metrics::StatsKey;
use crate::operator::{BoxOperator, Deferred, Operator};
use crate::ops::parallel_read::ParallelReadOp;

/// A `flumen-sources` reader. Readers continue after bad input where their format allows
/// (a CSV reader skips to the next record) and end otherwise, so errors pass straight through.
pub struct ReaderOp {
    reader: BoxReader,
    /// The schema chunks are conformed to; `None` passes the reader's own types on (bytes as
    /// views), for a consumer that copies the rows anyway.
    schema: Option<SchemaRef>,
}

impl ReaderOp {
    /// Wraps `reader`, whose chunks come out with `schema`.
    pub fn new(reader: BoxReader, schema: SchemaRef) -> Self {
        ReaderOp { reader, schema: Some(schema) }
    }

    /// Wraps `reader`, whose chunks come out as it makes them: the declared columns in
    /// possibly another physical type (see [`ChunkReader`](flumen_sources::reader::ChunkReader)),
    /// for a consumer that conforms them with [`relabel`].
    pub fn unconformed(reader: BoxReader) -> Self {
        ReaderOp { reader, schema: None }
    }
}

impl Operator for ReaderOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let chunk = self.reader.next_chunk()?;
        match (&self.schema, chunk) {
            (Some(schema), Some(chunk)) => relabel(chunk, schema).map(Some),
            (_, chunk) => Ok(chunk),
        }
    }

    fn save(&self, _mode: SaveMode) -> Result<OpState> {
        OpState::new("reader").with("position", self.reader.position()?)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let state = state.expect("reader")?;
        self.reader.seek(&state.get::<serde_json::Value>("position")?)
    }

    fn defers(&self) -> bool {
        self.reader.defers()
    }

    fn next_deferred(&mut self) -> Result<Option<Arc<dyn Deferred>>> {
        let rows = self.reader.next_deferred()?;
        Ok(match (&self.schema, rows) {
            (Some(schema), Some(rows)) => Some(Arc::new(Relabeled { rows, schema: schema.clone() })),
            (_, rows) => rows,
        })
    }
}

/// A reader's described chunk, made with the plan's field names and types ([`relabel`]).
struct Relabeled {
    rows: Arc<dyn Deferred>,
    schema: SchemaRef,
}

impl Deferred for Relabeled {
    fn num_rows(&self) -> usize {
        self.rows.num_rows()
    }

    fn slice(&self, offset: usize, len: usize) -> Arc<dyn Deferred> {
        Arc::new(Relabeled { rows: self.rows.slice(offset, len), schema: self.schema.clone() })
    }

    fn bytes(&self) -> u64 {
        self.rows.bytes()
    }

    fn make(&self) -> Result<RecordBatch> {
        relabel(self.rows.make()?, &self.schema)
    }
}

/// A registered generator: its chunks are checked against the declared spec.
///
/// A Rust iterator cannot be moved to a position, so a checkpoint records how many items
/// were pulled and a restore pulls (and drops) as many from a fresh one: exact for
/// generators that yield the same sequence each time they are created.
pub struct GeneratorOp {
    name: String,
    iter: ChunkIter,
    schema: SchemaRef,
    failed: bool,
    /// Items pulled from the iterator (chunks, empty chunks and errors alike).
    pulled: u64,
}

impl Operator for GeneratorOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let operator = format!("generator '{}'", self.name);
        while !self.failed {
            // A panicked iterator cannot be trusted to continue: end after reporting it.
            let Some(next) = guarded(&operator, || Ok(self.iter.next())).inspect_err(|_| self.failed = true)? else {
                return Ok(None);
            };
            self.pulled += 1;
            let chunk = next.inspect_err(|_| self.failed = true)?;
            if chunk.num_rows() == 0 {
                continue;
            }
            return conform_chunk(chunk, &self.schema).map(Some).map_err(|e| Error::Udf {
                operator: operator.clone(),
                message: format!("produced a chunk that does not match its declared spec: {e}"),
            });
        }
        Ok(None)
    }

    fn save(&self, _mode: SaveMode) -> Result<OpState> {
        OpState::new("generator").with("pulled", self.pulled)?.with("failed", self.failed)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let state = state.expect("generator")?;
        let pulled: u64 = state.get("pulled")?;
        let operator = format!("generator '{}'", self.name);
        while self.pulled < pulled {
            let item = guarded(&operator, || Ok(self.iter.next()))?;
            if item.is_none() {
                return Err(crate::checkpoint::state::mismatch(format!(
                    "{operator} ended after {} items, but the checkpoint was taken after {pulled}",
                    self.pulled
                )));
            }
            self.pulled += 1;
        }
        self.failed = state.get("failed")?;
        Ok(())
    }
}

/// The physical operator of a source node.
pub fn build_source(plan: &Plan, desc: &SourceDesc, schema: SchemaRef, ctx: &ExecContext) -> Result<BoxOperator> {
    match desc {
        SourceDesc::Files { format: FileFormat::Avro(_), .. } => Ok(Box::new(avro_source(plan, desc, schema, ctx)?)),
        SourceDesc::Generator { name, .. } => {
            let factory = ctx.registry.generator_fn(name)?;
            let operator = format!("generator '{name}'");
            let iter = guarded(&operator, || Ok(factory()))?;
            Ok(Box::new(GeneratorOp { name: name.clone(), iter, schema, failed: false, pulled: 0 }))
        }
        SourceDesc::ListFiles { files, shuffle: true, seed, .. } => {
            let mut files = files.clone();
            let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed(plan, *seed, true));
            files.shuffle(&mut rng);
            let column = Arc::new(StringArray::from(files));
            let chunk = RecordBatch::try_new(schema.clone(), vec![column])?;
            let reader = flumen_sources::memory::MemoryReader::new(Arc::new(vec![chunk]), schema.clone());
            Ok(Box::new(ReaderOp::new(Box::new(reader), schema)))
        }
        other => Ok(Box::new(ReaderOp::new(flumen_sources::open_source(other, ctx.options.read())?, schema))),
    }
}

/// Whether `plan` reads Avro files (decoded on the pool: [`avro_source`]); not a list of
/// their splits, which is read by an `interleave`.
pub fn is_avro_source(plan: &Plan) -> bool {
    matches!(plan.op(), Op::Source(SourceDesc::Files { format: FileFormat::Avro(_), .. }))
}

/// An Avro source: decoding is most of an Avro read, so the pool decodes runs of blocks while
/// the consumer's thread walks block headers. Its parallelism starts, as tf.data starts a
/// tuned one, at the cores. Shuffled blocks are drawn with the seed `shuffle` would use, so
/// that each iteration reads them in another order.
pub fn avro_source(plan: &Plan, desc: &SourceDesc, schema: SchemaRef, ctx: &ExecContext) -> Result<ParallelReadOp> {
    let reader: BoxReader = match desc {
        SourceDesc::Files {
            files,
            format: format @ FileFormat::Avro(avro @ AvroFormat { shuffle_blocks: Some(order), .. }),
        } => {
            let seed = ctx.seed(plan, order.seed, true);
            let (spec, chunk_rows) = (format.output_spec()?, ctx.options.read().chunk_rows);
            Box::new(ShuffledBlocksReader::open(files, &spec, avro.reader_schema.as_deref(), seed, chunk_rows)?)
        }
        _ => flumen_sources::open_source(desc, ctx.options.read())?,
    };
    let max = ctx.options.autotune.cpu_budget.max(ctx.options.threads);
    let knob = knob(plan, ctx, Param::Parallelism, Tunable::Autotune, ctx.options.threads, max);
    let stats = ctx.metrics.stats(StatsKey::Node(plan.node_id()));
    let ordered = ctx.options.deterministic;
    Ok(ParallelReadOp::new(
        reader,
        schema,
        ctx.pool.clone(),
        knob,
        stats,
        ordered,
        ctx.cancel.clone(),
        ctx.budget.clone(),
    ))
}

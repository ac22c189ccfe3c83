//! `snapshot(path, options)`: the tf.data snapshot RFC. At the start of each pass the
//! operator asks `flumen_store::snapshot::begin` what to do with the snapshot of its input's
//! fingerprint (the upstream plan without seeds, or a name the user pinned):
//!
//! - READ: a finalized snapshot exists; its shards are read (interleaved, in written order,
//!   or shuffled with `shuffle_on_read`, or by the user's reader closure) and the input is
//!   never built.
//! - WRITE: none exists, or the pending one expired; the input is computed and every chunk
//!   is also written to shards (round-robin, or by `shard_by`), finalized at the end of the
//!   pass if this run still owns the snapshot. A pass that ends early, fails to write, or
//!   meets an input error abandons the snapshot (a snapshot that skipped a failed element
//!   would later replay without it); the pass itself goes on.
//! - PASSTHROUGH: another run is writing; the input is computed, nothing is written.
//!
//! Checkpoints: a reading pass saves its shard positions (an in-order read) or its reader
//! dataset's state (a custom reader). A computing pass saves its input's state, and the pass
//! it is restored into computes the rest without writing, so the restored sequence is the
//! saved one even if the snapshot was finalized in between.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arrow::array::{Array, AsArray, ListArray, StringArray, UInt32Array};
use arrow::buffer::OffsetBuffer;
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Expr, Op, Plan, Result, SnapshotSpec};
use flumen_store::snapshot::{begin, Decision, SnapshotOptions, SnapshotPosition, SnapshotReader, SnapshotWriter};

use crate::build::build;
use crate::checkpoint::state::mismatch;
use crate::checkpoint::{OpState, SaveMode};
use crate::context::{ExecContext, SharedState};
use crate::operator::{BoxOperator, Operator};
use crate::ops::file_cache::codec;

/// The snapshot operator of one pass.
pub struct SnapshotOp {
    node: Plan,
    ctx: ExecContext,
    mode: Mode,
}

enum Mode {
    Read(SnapshotReader),
    /// The user's reader closure's dataset over the shard files.
    Custom(BoxOperator),
    /// Computing the input; `writer` records the pass (WRITE), or is absent (PASSTHROUGH, a
    /// restored pass, an abandoned write).
    Compute {
        input: BoxOperator,
        writer: Option<SnapshotWriter>,
        error: Option<Error>,
    },
}

/// The key of the snapshot of `node`: the pinned name, or the input plan's fingerprint
/// without seeds (so a reshuffled pipeline still finds its snapshot).
pub fn snapshot_fingerprint(node: &Plan, spec: &SnapshotSpec) -> String {
    spec.fingerprint.clone().unwrap_or_else(|| flumen_ir::fingerprint::fingerprint_without_seeds(node.input()))
}

impl SnapshotOp {
    /// The pass of snapshot node `node` (directory `path`), decided now.
    pub fn new(node: &Plan, path: &str, spec: &SnapshotSpec, ctx: &ExecContext) -> Result<Self> {
        let options = SnapshotOptions {
            compression: codec(spec.compression),
            num_shards: spec.shards as usize,
            pending_expiry: Duration::from_secs(spec.pending_expiry_secs),
            shuffle_on_read: spec.shuffle_on_read,
            ..SnapshotOptions::default()
        };
        let schema = node.spec().arrow_schema();
        let decision = begin(path, &snapshot_fingerprint(node, spec), schema, &options, SystemTime::now())?;
        let mode = match decision {
            Decision::Read(reader) => match &spec.reader {
                None => Mode::Read(reader),
                Some(closure) => Mode::Custom(custom_reader(&closure.name, reader.shard_paths(), ctx, node)?),
            },
            Decision::Write(writer) => {
                let writer = match &spec.shard_by {
                    Some(expr) => writer.with_shard_fn(shard_fn(expr.clone(), spec.shards)),
                    None => writer,
                };
                Mode::Compute { input: build(node.input(), ctx)?, writer: Some(writer), error: None }
            }
            Decision::Passthrough => Mode::Compute { input: build(node.input(), ctx)?, writer: None, error: None },
        };
        Ok(SnapshotOp { node: node.clone(), ctx: ctx.clone(), mode })
    }

    /// What explain analyze and tests call the pass: `read`, `write` or `passthrough`.
    pub fn decision(&self) -> &'static str {
        match &self.mode {
            Mode::Read(_) | Mode::Custom(_) => "read",
            Mode::Compute { writer: Some(_), .. } => "write",
            Mode::Compute { writer: None, .. } => "passthrough",
        }
    }
}

/// The shard of a chunk whose elements all have one shard: `shard_by` of its first element,
/// modulo `shards` (null: shard 0).
fn shard_fn(expr: Expr, shards: u64) -> impl Fn(u64, &RecordBatch) -> usize + Send + 'static {
    move |_, chunk| {
        let keys = flumen_udf::eval::evaluate_with_batch_dims(&expr, &chunk.slice(0, 1), 0).ok();
        let key = keys.and_then(|k| arrow::compute::cast(&k, &DataType::Int64).ok());
        let key = key.filter(|k| k.is_valid(0)).map_or(0, |k| k.as_primitive::<Int64Type>().value(0));
        key.rem_euclid(shards as i64) as usize
    }
}

/// `chunk` split into one chunk per shard of `shard_by`, in shard order.
fn split_by_shard(expr: &Expr, shards: u64, chunk: &RecordBatch) -> Result<Vec<RecordBatch>> {
    let keys = flumen_udf::eval::evaluate_with_batch_dims(expr, chunk, 0).map_err(|e| e.in_data_of("snapshot"))?;
    let keys = arrow::compute::cast(&keys, &DataType::Int64)?;
    let keys = keys.as_primitive::<Int64Type>();
    let mut rows: Vec<Vec<u32>> = vec![Vec::new(); shards as usize];
    for i in 0..chunk.num_rows() {
        let key = if keys.is_valid(i) { keys.value(i) } else { 0 };
        rows[key.rem_euclid(shards as i64) as usize].push(i as u32);
    }
    rows.into_iter().filter(|r| !r.is_empty()).map(|r| Ok(take_record_batch(chunk, &UInt32Array::from(r))?)).collect()
}

/// The dataset the user's reader closure `name` makes of the shard files.
fn custom_reader(name: &str, shards: &[PathBuf], ctx: &ExecContext, node: &Plan) -> Result<BoxOperator> {
    let factory = ctx.registry.dataset_fn(name)?;
    let paths = StringArray::from_iter_values(shards.iter().map(|p| p.display().to_string()));
    let item = Arc::new(Field::new("item", DataType::Utf8, true));
    let list = ListArray::new(item.clone(), OffsetBuffer::from_lengths([paths.len()]), Arc::new(paths), None);
    let schema = Arc::new(Schema::new(vec![Field::new("shards", DataType::List(item), true)]));
    let element = RecordBatch::try_new(schema, vec![Arc::new(list)])?;
    let operator = format!("snapshot reader '{name}'");
    let (plan, registry) = flumen_udf::closure::guarded(&operator, || factory(&element))?;
    if plan.spec().most_specific_common(node.spec()).as_ref() != Some(node.spec()) {
        return Err(Error::Udf {
            operator,
            message: format!("returned a dataset of {} where the snapshot holds {}", plan.spec(), node.spec()),
        });
    }
    let mut ctx = ExecContext { shared: Arc::new(SharedState::default()), ..ctx.clone() };
    ctx.registry.merge(&registry)?;
    build(&plan, &ctx)
}

impl Operator for SnapshotOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let schema = self.node.spec().arrow_schema();
        match &mut self.mode {
            Mode::Read(reader) => reader.next().transpose()?.map(|c| crate::conform::relabel(c, &schema)).transpose(),
            Mode::Custom(op) => op.next_chunk()?.map(|c| crate::conform::relabel(c, &schema)).transpose(),
            Mode::Compute { input, writer, error } => {
                if let Some(e) = error.take() {
                    return Err(e);
                }
                let chunk = match input.next_chunk() {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        if let Some(w) = writer.take() {
                            w.finish()?;
                        }
                        return Ok(None);
                    }
                    Err(e) => {
                        *writer = None;
                        return Err(e);
                    }
                };
                if let Some(w) = writer {
                    let Op::Snapshot { options, .. } = self.node.op() else { unreachable!("a snapshot node") };
                    let written = match &options.shard_by {
                        Some(expr) => split_by_shard(expr, options.shards, &chunk)
                            .and_then(|parts| parts.into_iter().try_for_each(|p| w.write(p))),
                        None => w.write(chunk.clone()),
                    };
                    if let Err(e) = written {
                        // The elements are good: deliver them, report why the snapshot was
                        // abandoned on the next pull.
                        *writer = None;
                        *error = Some(Error::execution("snapshot", format!("the snapshot write was abandoned: {e}")));
                    }
                }
                Ok(Some(chunk))
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match &self.mode {
            Mode::Read(reader) => {
                let position = reader.position().ok_or_else(|| {
                    Error::execution("snapshot", "a snapshot read with shuffle_on_read has no position to save")
                })?;
                OpState::new("snapshot").with("mode", "read")?.with("position", position)
            }
            Mode::Custom(op) => Ok(OpState::new("snapshot").with("mode", "custom")?.child(op.save(mode)?)),
            Mode::Compute { input, error, .. } => {
                let mut state = OpState::new("snapshot").with("mode", "compute")?.child(input.save(mode)?);
                if let Some(e) = error {
                    state = state.with_error(e);
                }
                Ok(state)
            }
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("snapshot")?;
        match (state.get::<String>("mode")?.as_str(), &mut self.mode) {
            ("read", Mode::Read(reader)) => reader.seek(state.get::<SnapshotPosition>("position")?),
            ("custom", Mode::Custom(op)) => op.restore(state.take_child()?),
            ("compute", _) => {
                let mut input = build(self.node.input(), &self.ctx)?;
                input.restore(state.take_child()?)?;
                // Dropping a writer this pass may have started abandons its snapshot.
                self.mode = Mode::Compute { input, writer: None, error: state.take_error() };
                Ok(())
            }
            (saved, _) => Err(mismatch(format!(
                "the checkpoint was reading snapshot {} ({saved}), which this pass would {}",
                self.node.op().name(),
                self.decision()
            ))),
        }
    }
}

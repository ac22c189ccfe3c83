//! `cache()` in memory: the first complete pass over the input is recorded (keyed by plan
//! node in the dataset's shared state) and later iterators replay it. A pass that is
//! abandoned or fails is never recorded, so a partial cache is never read as complete.
//!
//! As in tf.data, a pass is complete at the end of the input, or as soon as it has handed
//! out as many elements as the input is known to have: known from the plan as written (the
//! count the cache node records), so the optimizer cannot change when a cache completes.
//! The element that completes it is handed out alone: in a chunk with rows before it, a
//! consumer that stops early (a `take` of fewer) would otherwise complete a cache whose
//! last element it never took, and whether the cache completed would depend on where chunks
//! end.
//!
//! Checkpoints: a pass being recorded saves what it recorded (full mode) or only its row
//! count, and a restore then rebuilds the recording by replaying the input under the same
//! seeds (symbolic mode). A replaying pass saves its row position and the salt of the pass
//! that filled the cache; a restore in a process that lacks the cache refills it the same way.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Plan, Result};

use crate::build::build;
use crate::checkpoint::state::mismatch;
use crate::checkpoint::{OpState, SaveMode};
use crate::context::{CachedChunks, ExecContext};
use crate::operator::Operator;
use crate::rows::RowReader;

/// The in-memory cache operator: records its input's first complete pass, or replays it.
pub struct CacheOp {
    node: Plan,
    ctx: ExecContext,
    mode: Mode,
}

enum Mode {
    Write {
        input: Box<RowReader>,
        recorded: Vec<RecordBatch>,
        rows: u64,
        /// The input's element count when it is known statically.
        expected: Option<u64>,
    },
    Read {
        pass: CachedChunks,
        /// The next chunk, and the first row of it not yet returned.
        chunk: usize,
        offset: usize,
    },
}

impl CacheOp {
    /// The cache node `node`: a replay if a pass completed in `ctx`'s shared state, else a
    /// recording pass over a new instance of its input.
    pub fn new(node: &Plan, ctx: &ExecContext) -> Result<Self> {
        let mode = match ctx.shared.cached(node) {
            Some(pass) => Mode::Read { pass, chunk: 0, offset: 0 },
            None => CacheOp::writer(node, ctx)?,
        };
        Ok(CacheOp { node: node.clone(), ctx: ctx.clone(), mode })
    }

    fn writer(node: &Plan, ctx: &ExecContext) -> Result<Mode> {
        // The count the plan was written with (not this plan's, which rewrites may have made
        // known or unknown).
        let expected = match node.op() {
            flumen_ir::Op::Cache { count, .. } => *count,
            _ => None,
        };
        let input = Box::new(RowReader::new(build(node.input(), ctx)?));
        Ok(Mode::Write { input, recorded: Vec::new(), rows: 0, expected })
    }

    /// The first `rows` rows of a new instance of the input under seed salt `salt`, errors
    /// skipped (they were reported when first met and are never recorded).
    fn replay(&self, salt: u64, rows: Option<u64>) -> Result<Vec<RecordBatch>> {
        let ctx = ExecContext { salt, ..self.ctx.clone() };
        let mut input = build(self.node.input(), &ctx)?;
        let mut out = Vec::new();
        let mut have = 0u64;
        while rows.is_none_or(|r| have < r) {
            match input.next_chunk() {
                Ok(Some(chunk)) => {
                    let keep = rows.map_or(chunk.num_rows(), |r| ((r - have) as usize).min(chunk.num_rows()));
                    have += keep as u64;
                    out.push(chunk.slice(0, keep));
                }
                Ok(None) => break,
                Err(_) => continue,
            }
        }
        match rows {
            Some(r) if have < r => {
                Err(mismatch(format!("cache: the input replayed {have} rows, the checkpoint recorded {r}")))
            }
            _ => Ok(out),
        }
    }
}

/// How many rows to hand out next: the rows up to the known count's last element, which
/// then comes alone (see the module docs); all of them when the count is unknown.
fn before_last(expected: Option<u64>, rows: u64) -> usize {
    match expected.map(|e| e.saturating_sub(rows)) {
        Some(left) if left > 1 => usize::try_from(left - 1).unwrap_or(usize::MAX),
        Some(_) => 1,
        None => usize::MAX,
    }
}

impl Operator for CacheOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match &mut self.mode {
            Mode::Write { input, recorded, rows, expected } => match input.next_slice(before_last(*expected, *rows))? {
                Some(chunk) => {
                    *rows += chunk.num_rows() as u64;
                    recorded.push(chunk.clone());
                    if *expected == Some(*rows) {
                        self.ctx.shared.complete_cache(&self.node, std::mem::take(recorded), self.ctx.salt);
                    }
                    Ok(Some(chunk))
                }
                None => {
                    // A no-op if the known count already completed it: the first record wins.
                    self.ctx.shared.complete_cache(&self.node, std::mem::take(recorded), self.ctx.salt);
                    Ok(None)
                }
            },
            Mode::Read { pass, chunk, offset } => {
                let Some(c) = pass.chunks.get(*chunk) else { return Ok(None) };
                let out = c.slice(*offset, c.num_rows() - *offset);
                *chunk += 1;
                *offset = 0;
                Ok(Some(out))
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match &self.mode {
            Mode::Write { input, recorded, rows, .. } => {
                let state = OpState::new("cache").with("writing", true)?.with("rows", rows)?;
                let state = match mode {
                    // Completed by its known count, the pass handed its chunks to the shared
                    // state (if another pass had not completed first, whose salt differs);
                    // without them the restore would replay the input.
                    SaveMode::Full if recorded.is_empty() && *rows > 0 => match self.ctx.shared.cached(&self.node) {
                        Some(pass) if pass.salt == self.ctx.salt => state.with_chunks(pass.chunks.iter().cloned()),
                        _ => state,
                    },
                    SaveMode::Full => state.with_chunks(recorded.iter().cloned()),
                    SaveMode::Symbolic => state,
                };
                Ok(state.child(input.save(mode)?))
            }
            Mode::Read { pass, chunk, offset } => {
                let position = pass.chunks[..*chunk].iter().map(|c| c.num_rows() as u64).sum::<u64>() + *offset as u64;
                let state = OpState::new("cache").with("writing", false)?.with("rows", position)?;
                let state = state.with("salt", pass.salt)?;
                Ok(match mode {
                    SaveMode::Full => state.with("stored", true)?.with_chunks(pass.chunks.iter().cloned()),
                    SaveMode::Symbolic => state.with("stored", false)?,
                })
            }
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("cache")?;
        let rows: u64 = state.get("rows")?;
        if state.get::<bool>("writing")? {
            let recorded = match state.chunks.is_empty() && rows > 0 {
                true => self.replay(self.ctx.salt, Some(rows))?,
                false => std::mem::take(&mut state.chunks),
            };
            if !matches!(self.mode, Mode::Write { .. }) {
                self.mode = CacheOp::writer(&self.node, &self.ctx)?;
            }
            let Mode::Write { input, recorded: r, rows: n, .. } = &mut self.mode else { unreachable!("made a writer") };
            input.restore(state.take_child()?)?;
            *r = recorded;
            *n = rows;
            return Ok(());
        }
        let pass = match self.ctx.shared.cached(&self.node) {
            Some(pass) => pass,
            None => {
                let salt: u64 = state.get("salt")?;
                let chunks = match state.get::<bool>("stored")? {
                    true => std::mem::take(&mut state.chunks),
                    false => self.replay(salt, None)?,
                };
                self.ctx.shared.complete_cache(&self.node, chunks, salt)
            }
        };
        let (mut chunk, mut left) = (0, rows);
        while chunk < pass.chunks.len() && left >= pass.chunks[chunk].num_rows() as u64 {
            left -= pass.chunks[chunk].num_rows() as u64;
            chunk += 1;
        }
        self.mode = Mode::Read { pass, chunk, offset: left as usize };
        Ok(())
    }
}

//! `cache(path)`: tf.data's file cache. The first complete pass is written to a temporary
//! file beside `path` and published there atomically when the pass ends; later passes (in
//! this process or another) read the file instead of their input. A pass that is abandoned,
//! or killed, publishes nothing, so a partial cache is never read as complete; two passes
//! writing the same path at once each write their own file and the first to finish wins
//! (`flumen_store::file_cache`). As with the in-memory cache, failed elements are reported
//! and not recorded.
//!
//! Checkpoints: a reading pass saves its chunk-file position. A writing pass saves its
//! input's state; the pass it restores into computes the rest without writing (the partly
//! written file belonged to the saved iterator), so that pass leaves the cache unfilled for a
//! later complete pass to fill.

use std::path::PathBuf;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Compression, Error, Plan, Result};
use flumen_store::chunk_file::{ChunkFileReader, ChunkPosition};
use flumen_store::file_cache::{FileCache, FileCacheWriter};

use crate::build::build;
use crate::checkpoint::state::mismatch;
use crate::checkpoint::{OpState, SaveMode};
use crate::context::ExecContext;
use crate::operator::{BoxOperator, Operator};

/// The file cache operator: reads a complete cache file, or computes and records a pass.
pub struct FileCacheOp {
    node: Plan,
    ctx: ExecContext,
    path: PathBuf,
    mode: Mode,
    /// Why recording stopped, reported on the pull after the chunk it happened on.
    error: Option<Error>,
    /// The file reader failed: it reports a corrupt file once, then ends.
    ended: bool,
}

enum Mode {
    Read(ChunkFileReader),
    /// Computing the input; `writer` records the pass (none for a restored pass, or after a
    /// write failed).
    Write {
        input: BoxOperator,
        writer: Option<Box<FileCacheWriter>>,
    },
}

/// The store's codec for the plan's compression setting.
pub(crate) fn codec(c: Compression) -> flumen_store::Compression {
    match c {
        Compression::None => flumen_store::Compression::None,
        Compression::Lz4 => flumen_store::Compression::Lz4,
        Compression::Zstd => flumen_store::Compression::Zstd,
    }
}

impl FileCacheOp {
    /// The cache node `node` with file `path`.
    pub fn new(node: &Plan, path: &str, ctx: &ExecContext) -> Result<Self> {
        let path = PathBuf::from(path);
        let mode = match FileCache::open(&path)? {
            FileCache::Complete(reader) => Mode::Read(reader.with_schema(node.spec().arrow_schema())?),
            FileCache::Missing => {
                let writer = FileCacheWriter::create(&path, node.spec().arrow_schema(), codec(Compression::Lz4))?;
                Mode::Write { input: build(node.input(), ctx)?, writer: Some(Box::new(writer)) }
            }
        };
        Ok(FileCacheOp { node: node.clone(), ctx: ctx.clone(), path, mode, error: None, ended: false })
    }
}

impl Operator for FileCacheOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        match &mut self.mode {
            Mode::Read(_) if self.ended => Ok(None),
            Mode::Read(reader) => reader.next().transpose().inspect_err(|_| self.ended = true),
            Mode::Write { input, writer } => match input.next_chunk()? {
                Some(chunk) => {
                    if let Some(w) = writer {
                        if let Err(e) = w.write(&chunk) {
                            // The elements are still good: deliver them, stop recording, and
                            // say why on the next pull.
                            *writer = None;
                            self.error = Some(Error::execution(
                                "cache",
                                format!("writing {} failed, the pass goes on uncached: {e}", self.path.display()),
                            ));
                        }
                    }
                    Ok(Some(chunk))
                }
                None => {
                    if let Some(w) = writer.take() {
                        w.finish()?;
                    }
                    Ok(None)
                }
            },
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = match &self.mode {
            Mode::Read(reader) => OpState::new("file_cache")
                .with("reading", true)?
                .with("ended", self.ended)?
                .with("position", ChunkFileReader::position(reader))?,
            Mode::Write { input, .. } => OpState::new("file_cache").with("reading", false)?.child(input.save(mode)?),
        };
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        Ok(state)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("file_cache")?;
        self.error = state.take_error();
        if state.get::<bool>("reading")? {
            // A reader that failed has ended: the error is not reported twice.
            self.ended = state.get("ended")?;
            if self.ended {
                return match self.mode {
                    Mode::Read(_) => Ok(()),
                    Mode::Write { .. } => Err(mismatch("the checkpoint had read the whole cache file, which is gone")),
                };
            }
            let position: ChunkPosition = state.get("position")?;
            let reader = ChunkFileReader::open_at(&self.path, position)
                .map_err(|e| mismatch(format!("the cache file the checkpoint was reading: {e}")))?;
            self.mode = Mode::Read(reader.with_schema(self.node.spec().arrow_schema())?);
            return Ok(());
        }
        let mut input = build(self.node.input(), &self.ctx)?;
        input.restore(state.take_child()?)?;
        // Dropping a writer this op may have started removes its temporary file.
        self.mode = Mode::Write { input, writer: None };
        Ok(())
    }
}

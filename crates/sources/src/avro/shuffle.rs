//! Reading Avro files block by block in a seeded random order (AvroTensorDataset's shuffle
//! of blocks, made reproducible): every file's blocks are found when the reader opens (block
//! headers walked, nothing inflated), then all (file, block) pairs are permuted by a
//! generator seeded with the caller's seed.
//!
//! A block whose framing is broken keeps its place in the order as its error. Positions are
//! (the order's length, its seed, the index in it, records of that block already given):
//! a reader opened with the same files and seed resumes exactly there.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, Location, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::reader::AvroReader;
use super::run::{BlockAt, Decoded, Run, Source};
use crate::position::{decode, encode};
use crate::reader::{ChunkReader, Deferred, ReaderPosition};

/// One unit of the order: a block of a file, or a block whose framing is broken.
enum Unit {
    Block(usize, BlockAt),
    Broken(Location, String),
}

/// Where a [`ShuffledBlocksReader`] is.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShuffledPosition {
    units: usize,
    seed: u64,
    unit: usize,
    row: usize,
}

/// Reads the blocks of Avro files in an order drawn from a seed.
pub struct ShuffledBlocksReader {
    sources: Vec<Arc<Source>>,
    units: Vec<Unit>,
    seed: u64,
    chunk_rows: usize,
    /// The next unit, and the records of it already given.
    next: usize,
    skip: usize,
    /// The outcomes of the block being given out (`next_chunk`): unit `next - 1`'s.
    decoded: Decoded,
}

impl ShuffledBlocksReader {
    /// Opens `files` to read the fields of `spec` (resolved against `reader_schema` when
    /// given), their blocks in the order `seed` draws, in chunks of at most `chunk_rows`
    /// rows. A file that cannot be opened (or whose schema does not resolve) is one unit of
    /// the order, its error, as a file-order read gives its error in the file's place.
    pub fn open(
        files: &[String],
        spec: &ElementSpec,
        reader_schema: Option<&str>,
        seed: u64,
        chunk_rows: usize,
    ) -> Result<Self> {
        let (mut sources, mut units) = (Vec::with_capacity(files.len()), Vec::new());
        for path in files {
            let mut reader = match AvroReader::open(path, spec, reader_schema, None, usize::MAX) {
                Ok(reader) => reader,
                Err(Error::Data { location, message }) => {
                    units.push(Unit::Broken(location, message));
                    continue;
                }
                Err(other) => {
                    units.push(Unit::Broken(Location::source(path.as_str()), other.to_string()));
                    continue;
                }
            };
            let i = sources.len();
            loop {
                match reader.describe(1, usize::MAX, false) {
                    Ok(Some(run)) => units.extend(run.blocks.iter().map(|b| Unit::Block(i, b.clone()))),
                    Ok(None) => break,
                    Err(Error::Data { location, message }) => units.push(Unit::Broken(location, message)),
                    Err(other) => units.push(Unit::Broken(Location::source(path.as_str()), other.to_string())),
                }
            }
            sources.push(reader.source());
        }
        units.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let chunk_rows = chunk_rows.max(1);
        Ok(ShuffledBlocksReader { sources, units, seed, chunk_rows, next: 0, skip: 0, decoded: Decoded::default() })
    }

    /// The next run: at most `max_blocks` consecutive units of one file, ending once it has
    /// `max_rows` records (exactly that many with `exact`, cutting a block; the next run
    /// starts with its rest). A broken block is an error of its own.
    fn describe(&mut self, max_blocks: usize, max_rows: usize, exact: bool) -> Result<Option<Run>> {
        if let Some(row) = self.decoded.record() {
            // Outcomes decoded and not all given are described again.
            (self.next, self.skip) = (self.next - 1, row);
            self.decoded.clear();
        }
        let skip = self.skip;
        let (mut file, mut blocks, mut records) = (None, Vec::new(), 0usize);
        while let Some(unit) = self.units.get(self.next) {
            match unit {
                Unit::Broken(location, message) if blocks.is_empty() => {
                    self.next += 1;
                    self.skip = 0;
                    return Err(Error::data(location.clone(), message.clone()));
                }
                Unit::Block(f, block)
                    if file.is_none_or(|g| g == *f)
                        && blocks.len() < max_blocks
                        && records.saturating_sub(skip) < max_rows =>
                {
                    file = Some(*f);
                    records += block.count;
                    blocks.push(block.clone());
                    self.next += 1;
                    self.skip = 0;
                }
                _ => break,
            }
        }
        let Some(file) = file else { return Ok(None) };
        let mut rows = records.saturating_sub(skip);
        if exact && rows > max_rows {
            let excess = rows - max_rows;
            let last = blocks.last().expect("a block");
            (self.next, self.skip) = (self.next - 1, last.count - excess);
            rows = max_rows;
        }
        Ok(Some(Run { source: self.sources[file].clone(), blocks: blocks.into(), skip, rows }))
    }
}

impl ChunkReader for ShuffledBlocksReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(item) = self.decoded.next(self.chunk_rows) {
                return item.map(Some);
            }
            // One block at a time, so that a position is a block and a record.
            let Some(run) = self.describe(1, usize::MAX, false)? else { return Ok(None) };
            self.decoded.fill(&run);
        }
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (unit, row) = match self.decoded.record() {
            Some(row) => (self.next - 1, row),
            None => (self.next, self.skip),
        };
        encode("avro_shuffled", &ShuffledPosition { units: self.units.len(), seed: self.seed, unit, row })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: ShuffledPosition = decode("avro_shuffled", position)?;
        if at.units != self.units.len() || at.seed != self.seed || at.unit > at.units {
            return Err(Error::execution(
                "seek",
                format!(
                    "{position} is not a position in these {} blocks shuffled by seed {}",
                    self.units.len(),
                    self.seed
                ),
            ));
        }
        (self.next, self.skip) = (at.unit, at.row);
        self.decoded.clear();
        Ok(())
    }

    fn defers(&self) -> bool {
        true
    }

    fn next_deferred(&mut self) -> Result<Option<Arc<dyn Deferred>>> {
        Ok(self.describe(usize::MAX, self.chunk_rows, false)?.map(|run| Arc::new(run) as Arc<dyn Deferred>))
    }

    fn next_deferred_rows(&mut self, rows: usize) -> Result<Option<Arc<dyn Deferred>>> {
        Ok(self.describe(usize::MAX, rows.max(1), true)?.map(|run| Arc::new(run) as Arc<dyn Deferred>))
    }
}

//! Reading an Avro container file, or some of its blocks, as chunks of elements.
//!
//! A chunk is rows of one block, cut at `chunk_rows` (or, described for the pool, of a run of
//! blocks). A record that does not fit the spec is an error naming the file, the block, the
//! record and its byte, given after the rows before it; reading goes on at the next record.
//! A block that fails as a whole (a wrong sync marker, corrupt compressed data, a record
//! whose bytes end early) is an error naming the file, the block and the byte; reading goes
//! on at the next block, found by its sync marker where the framing was lost. So
//! `ignore_errors` keeps every good record of a block it can read.

use std::ops::Range;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, Location, Result};
use serde::{Deserialize, Serialize};

use super::container::{block, header};
use super::decode::Decoder;
use super::run::{BlockAt, Decoded, Run, Source};
use super::schema::{element_spec, parse};
use crate::position::{check_len, decode, encode};
use crate::reader::{ChunkReader, Deferred, ReaderPosition};

/// The bytes of the file `path`: mapped, so that a reader of one block (a split) costs no
/// read of the whole file; read into memory where mapping fails (an empty file, a file
/// system without maps).
pub(crate) fn contents(path: &str) -> Result<Contents> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the map is only read, and Avro files are written once and then read. A file
    // another program changes in place while mapped breaks that (bytes change under a block
    // being decoded; bytes cut off fault where they are read), as for TFRecord's maps.
    match unsafe { memmap2::Mmap::map(&file) } {
        Ok(map) => Ok(Contents::Mapped(map)),
        Err(_) => std::fs::read(path).map(Contents::Read).map_err(|e| Error::io(path, e)),
    }
}

/// A file's bytes, mapped or read.
pub(crate) enum Contents {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Contents {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Contents::Mapped(m) => m,
            Contents::Read(v) => v,
        }
    }
}

/// The element spec of the Avro file `path` (read when a dataset is built, so that plans
/// type-check without decoding data): `features` where given (ATDS's feature specs: fixed
/// shapes from arrays, sparse tensors from records of `indices0..` and `values`), otherwise
/// what the reader schema gives, or else the file's writer schema; checked to resolve
/// against the file's writer schema.
pub fn avro_spec(path: &str, features: Option<&ElementSpec>, reader_schema: Option<&str>) -> Result<ElementSpec> {
    let file = contents(path)?;
    let h = header(&file).map_err(|b| Error::data(Location::new(path, format!("byte {}", b.at)), b.what))?;
    let bad = |e: String| Error::data(Location::new(path, "header"), e);
    let writer = parse(&h.schema).map_err(bad)?;
    let reader = reader_schema
        .map(super::schema::reader_schema)
        .transpose()
        .map_err(|e| Error::plan("avro", format!("the reader schema: {e}")))?;
    let spec = match (features, &reader) {
        (Some(spec), _) => spec.clone(),
        (None, Some(record)) => {
            element_spec(record).map_err(|e| Error::plan("avro", format!("the reader schema: {e}")))?
        }
        (None, None) => element_spec(&writer).map_err(bad)?,
    };
    Decoder::resolve(&writer, reader.as_ref(), &spec).map_err(bad)?;
    Ok(spec)
}

/// The number of blocks of the Avro file `path` (its units of parallel reading), found by
/// walking the block headers without decompressing them.
pub fn block_count(path: &str) -> Result<usize> {
    let file = contents(path)?;
    let h = header(&file).map_err(|b| Error::data(Location::new(path, format!("byte {}", b.at)), b.what))?;
    let (mut at, mut n) = (h.data_start, 0);
    // A framing error ends the count: the reader reports it when it gets there.
    while let Ok(Some((_, next))) = block(&file, at, &h.sync) {
        at = next;
        n += 1;
    }
    Ok(n.max(1))
}

/// Where an Avro reader is: the block the next row comes from (its index and byte offset)
/// and the records of it already given; no block when done.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AvroPosition {
    len: u64,
    at: Option<BlockRow>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct BlockRow {
    block: usize,
    offset: usize,
    row: usize,
}

/// The compressed bytes a described run of blocks ends after (it ends sooner at the chunk
/// size in records): enough work that handing it to a pool thread costs little beside it,
/// little enough that a pass of a few files is many runs. w3's deflate blocks are 62 KB of
/// about 62 records, so a run is some 17 blocks and 1,000 records.
const RUN_BYTES: usize = 1 << 20;

/// Reads elements from an Avro container file.
///
/// Read with [`ChunkReader::next_chunk`], it decodes one block at a time; described with
/// [`ChunkReader::next_deferred`], it walks block headers only and hands out runs of blocks
/// that any thread decodes, with the same rows and errors.
pub struct AvroReader {
    source: Arc<Source>,
    sync: [u8; 16],
    /// The blocks to read, by index (all of them when the range is open-ended).
    blocks: Range<usize>,
    chunk_rows: usize,
    /// The next block to describe: its index and byte offset.
    next: Option<(usize, usize)>,
    /// Records of the next block already given (after a seek into it).
    skip: usize,
    /// The outcomes of the block being given out (`next_chunk`), and its index and offset.
    decoded: Decoded,
    block: (usize, usize),
}

impl AvroReader {
    /// Opens `path` to read the fields of `spec` (some of the file's, any order) in chunks
    /// of at most `chunk_rows` rows, resolved against `reader_schema` (JSON) when given;
    /// `block` reads that block only.
    pub fn open(
        path: &str,
        spec: &ElementSpec,
        reader_schema: Option<&str>,
        block: Option<usize>,
        chunk_rows: usize,
    ) -> Result<Self> {
        let file = contents(path)?;
        let h = header(&file).map_err(|b| Error::data(Location::new(path, format!("byte {}", b.at)), b.what))?;
        let bad = |e: String| Error::data(Location::new(path, "header"), e);
        let schema = parse(&h.schema).map_err(bad)?;
        let reader = reader_schema.map(super::schema::reader_schema).transpose().map_err(bad)?;
        let decoder = Decoder::resolve(&schema, reader.as_ref(), spec).map_err(bad)?;
        let blocks = match block {
            Some(b) => b..b + 1,
            None => 0..usize::MAX,
        };
        let source = Source { path: path.to_string(), file, codec: h.codec, decoder };
        let mut reader = AvroReader {
            source: Arc::new(source),
            sync: h.sync,
            next: Some((0, h.data_start)),
            blocks,
            chunk_rows: chunk_rows.max(1),
            skip: 0,
            decoded: Decoded::default(),
            block: (0, 0),
        };
        reader.skip_to(reader.blocks.start)?;
        Ok(reader)
    }

    /// What makes this file's runs.
    pub(super) fn source(&self) -> Arc<Source> {
        self.source.clone()
    }

    fn location(&self, block: usize, at: impl std::fmt::Display) -> Location {
        Location::new(self.source.path.as_str(), format!("block {block}, {at}"))
    }

    /// Walks the block headers up to block `index`.
    fn skip_to(&mut self, index: usize) -> Result<()> {
        while let Some((i, offset)) = self.next {
            if i >= index {
                break;
            }
            match block(&self.source.file, offset, &self.sync) {
                Ok(Some((_, next))) => self.next = Some((i + 1, next)),
                Ok(None) => self.next = None,
                Err(bad) => {
                    return Err(Error::data(self.location(i, format!("byte {}", bad.at)), bad.what));
                }
            }
        }
        Ok(())
    }

    /// The next run of at most `max_blocks` blocks, ending sooner once it has `max_rows`
    /// records or [`RUN_BYTES`]; `Ok(None)` at the end. With `exact`, the run ends at
    /// exactly `max_rows` records (fewer at the end of the file), in the middle of a block
    /// if need be: the next run starts with the rest of that block. A block whose framing
    /// is broken is an error of its own (the run before it ends there), after which
    /// describing goes on at the next block.
    pub(super) fn describe(&mut self, max_blocks: usize, max_rows: usize, exact: bool) -> Result<Option<Run>> {
        // Outcomes decoded and not all given (`next_chunk` before) are described again.
        if let Some(row) = self.decoded.record() {
            (self.next, self.skip) = (Some(self.block), row);
            self.decoded.clear();
        }
        let (mut blocks, mut records, mut bytes) = (Vec::new(), 0usize, 0usize);
        let skip = self.skip;
        while let Some((index, offset)) = self.next {
            if index >= self.blocks.end {
                self.next = None;
                break;
            }
            let rows = records.saturating_sub(skip);
            let full = rows >= max_rows || (!exact && bytes >= RUN_BYTES);
            if blocks.len() >= max_blocks || (!blocks.is_empty() && full) {
                break;
            }
            match block(&self.source.file, offset, &self.sync) {
                Ok(None) => self.next = None,
                Ok(Some((b, next))) => {
                    let end = next - 16;
                    blocks.push(BlockAt { index, offset, data: end - b.data.len()..end, count: b.count });
                    (records, bytes) = (records + b.count, bytes + b.data.len());
                    self.next = Some((index + 1, next));
                    self.skip = 0;
                }
                // The error comes with the next run, which starts at this block.
                Err(_) if !blocks.is_empty() => break,
                Err(bad) => {
                    self.resync(index, offset, bad.at);
                    return Err(Error::data(self.location(index, format!("byte {}", bad.at)), bad.what));
                }
            }
        }
        if blocks.is_empty() {
            return Ok(None);
        }
        let mut rows = records.saturating_sub(skip);
        if exact && rows > max_rows {
            // The last block's records past the cut start the next run.
            let last: &BlockAt = blocks.last().expect("a block");
            let excess = rows - max_rows;
            (self.next, self.skip) = (Some((last.index, last.offset)), last.count - excess);
            rows = max_rows;
        }
        Ok(Some(Run { source: self.source.clone(), blocks: blocks.into(), skip, rows }))
    }

    /// Moves past the block `index` at `offset`, whose framing broke at byte `at`: the next
    /// block starts where its marker should have ended, if a block parses there (only the
    /// marker was bad); else after the next sync marker.
    fn resync(&mut self, index: usize, offset: usize, at: usize) {
        let file = &self.source.file;
        let after_marker = at + 16;
        let resumes = matches!(block(file, after_marker, &self.sync), Ok(Some(_)));
        let from = (offset + 1).min(file.len());
        self.skip = 0;
        self.next = match resumes {
            true => Some((index + 1, after_marker)),
            false => file[from..].windows(16).position(|w| w == self.sync).map(|p| (index + 1, from + p + 16)),
        };
    }
}

impl ChunkReader for AvroReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(item) = self.decoded.next(self.chunk_rows) {
                return item.map(Some);
            }
            let Some(run) = self.describe(1, usize::MAX, false)? else { return Ok(None) };
            self.block = (run.blocks[0].index, run.blocks[0].offset);
            self.decoded.fill(&run);
        }
    }

    fn position(&self) -> Result<ReaderPosition> {
        let at = match (self.decoded.record(), self.next) {
            (Some(row), _) => Some(BlockRow { block: self.block.0, offset: self.block.1, row }),
            (None, Some((block, offset))) if block < self.blocks.end => {
                Some(BlockRow { block, offset, row: self.skip })
            }
            _ => None,
        };
        encode("avro", &AvroPosition { len: self.source.file.len() as u64, at })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: AvroPosition = decode("avro", position)?;
        check_len(&self.source.path, at.len, self.source.file.len() as u64)?;
        self.decoded.clear();
        let Some(BlockRow { block: index, offset, row }) = at.at else {
            self.next = None;
            return Ok(());
        };
        (self.next, self.skip) = (Some((index, offset)), row);
        if row == 0 {
            return Ok(());
        }
        // A row past the block's records is not a position of this file. (A block whose
        // framing is broken is reported when it is read.)
        let count = match block(&self.source.file, offset, &self.sync) {
            Ok(Some((b, _))) => b.count,
            _ => 0,
        };
        if row > count {
            return Err(Error::data(
                Location::new(self.source.path.as_str(), format!("block {index}")),
                format!("cannot seek to row {row} of the block: it has {count} rows"),
            ));
        }
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

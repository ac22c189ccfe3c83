//! Reading an Avro container file, or some of its blocks, as chunks of elements.
//!
//! A chunk is the rows of one block, cut at `chunk_rows`. A block that fails (a wrong sync
//! marker, corrupt compressed data, a record that does not decode) is an error naming the
//! file, the block and the byte, given after the rows before it; reading then goes on at the
//! next block, found by its sync marker where the framing was lost, so `ignore_errors`
//! keeps every good block.

use std::ops::Range;

use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, Location, Result};
use serde::{Deserialize, Serialize};

use super::container::{block, decompress, header, Header};
use super::decode::Decoder;
use super::schema::{element_spec, parse};
use crate::position::{check_len, decode, encode};
use crate::reader::{ChunkReader, ReaderPosition};

/// The bytes of the file `path`: mapped, so that a reader of one block (a split) costs no
/// read of the whole file; read into memory where mapping fails (an empty file, a file
/// system without maps).
fn contents(path: &str) -> Result<Contents> {
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
enum Contents {
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
/// shapes from arrays, sparse tensors from records of `indices0..` and `values`), checked
/// against the writer schema; otherwise what the writer schema gives.
pub fn avro_spec(path: &str, features: Option<&ElementSpec>) -> Result<ElementSpec> {
    let file = contents(path)?;
    let h = header(&file).map_err(|b| Error::data(Location::new(path, format!("byte {}", b.at)), b.what))?;
    let schema = parse(&h.schema).map_err(|e| Error::data(Location::new(path, "header"), e))?;
    let bad = |e: String| Error::data(Location::new(path, "header"), e);
    match features {
        Some(spec) => Decoder::new(&schema, spec).map(|_| spec.clone()).map_err(bad),
        None => element_spec(&schema).map_err(bad),
    }
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
/// and the rows of it already given; no block when done.
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

/// Reads elements from an Avro container file.
pub struct AvroReader {
    path: String,
    file: Contents,
    header: Header,
    decoder: Decoder,
    /// The blocks to read, by index (all of them when the range is open-ended).
    blocks: Range<usize>,
    chunk_rows: usize,
    /// The next block to decode: its index and byte offset.
    next: Option<(usize, usize)>,
    /// The decoded block rows are being given from: its index, offset, rows, rows given.
    current: Option<(usize, usize, RecordBatch, usize)>,
    scratch: Vec<u8>,
}

impl AvroReader {
    /// Opens `path` to read the fields of `spec` (some of the file's, any order) in chunks
    /// of at most `chunk_rows` rows; `block` reads that block only.
    pub fn open(path: &str, spec: &ElementSpec, block: Option<usize>, chunk_rows: usize) -> Result<Self> {
        let file = contents(path)?;
        let h = header(&file).map_err(|b| Error::data(Location::new(path, format!("byte {}", b.at)), b.what))?;
        let schema = parse(&h.schema).map_err(|e| Error::data(Location::new(path, "header"), e))?;
        let decoder = Decoder::new(&schema, spec).map_err(|e| Error::data(Location::new(path, "header"), e))?;
        let blocks = match block {
            Some(b) => b..b + 1,
            None => 0..usize::MAX,
        };
        let mut reader = AvroReader {
            path: path.to_string(),
            next: Some((0, h.data_start)),
            file,
            header: h,
            decoder,
            blocks,
            chunk_rows: chunk_rows.max(1),
            current: None,
            scratch: Vec::new(),
        };
        reader.skip_to(reader.blocks.start)?;
        Ok(reader)
    }

    fn location(&self, block: usize, at: impl std::fmt::Display) -> Location {
        Location::new(self.path.as_str(), format!("block {block}, {at}"))
    }

    /// Walks the block headers up to block `index`.
    fn skip_to(&mut self, index: usize) -> Result<()> {
        while let Some((i, offset)) = self.next {
            if i >= index {
                break;
            }
            match block(&self.file, offset, &self.header.sync) {
                Ok(Some((_, next))) => self.next = Some((i + 1, next)),
                Ok(None) => self.next = None,
                Err(bad) => {
                    return Err(Error::data(self.location(i, format!("byte {}", bad.at)), bad.what));
                }
            }
        }
        Ok(())
    }

    /// Decodes the next block into `current`; `Ok(false)` at the end.
    fn next_block(&mut self) -> Result<bool> {
        let Some((index, offset)) = self.next else { return Ok(false) };
        if index >= self.blocks.end {
            self.next = None;
            return Ok(false);
        }
        match block(&self.file, offset, &self.header.sync) {
            Ok(None) => {
                self.next = None;
                Ok(false)
            }
            Ok(Some((b, next))) => {
                self.next = Some((index + 1, next));
                decompress(self.header.codec, b.data, &mut self.scratch)
                    .map_err(|e| Error::data(self.location(index, format!("byte {offset}")), e))?;
                let rows = self.decoder.decode(&self.scratch, b.count).map_err(|bad| {
                    Error::data(self.location(index, format!("byte {} of its decompressed data", bad.at)), bad.what)
                })?;
                self.current = Some((index, offset, rows, 0));
                Ok(true)
            }
            Err(bad) => {
                // The next block starts where this one's marker should have ended, if a block
                // parses there (only the marker was bad); else after the next sync marker.
                let after_marker = bad.at + 16;
                let resumes = matches!(block(&self.file, after_marker, &self.header.sync), Ok(Some(_)));
                let from = (offset + 1).min(self.file.len());
                self.next = match resumes {
                    true => Some((index + 1, after_marker)),
                    false => self.file[from..]
                        .windows(16)
                        .position(|w| w == self.header.sync)
                        .map(|p| (index + 1, from + p + 16)),
                };
                Err(Error::data(self.location(index, format!("byte {}", bad.at)), bad.what))
            }
        }
    }
}

impl ChunkReader for AvroReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some((_, _, rows, given)) = &mut self.current {
                if *given < rows.num_rows() {
                    let n = self.chunk_rows.min(rows.num_rows() - *given);
                    let chunk = rows.slice(*given, n);
                    *given += n;
                    return Ok(Some(chunk));
                }
                self.current = None;
            }
            if !self.next_block()? {
                return Ok(None);
            }
        }
    }

    fn position(&self) -> Result<ReaderPosition> {
        let at = match (&self.current, self.next) {
            (Some((block, offset, rows, given)), _) if *given < rows.num_rows() => {
                Some(BlockRow { block: *block, offset: *offset, row: *given })
            }
            (_, Some((block, offset))) if block < self.blocks.end => Some(BlockRow { block, offset, row: 0 }),
            _ => None,
        };
        encode("avro", &AvroPosition { len: self.file.len() as u64, at })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: AvroPosition = decode("avro", position)?;
        check_len(&self.path, at.len, self.file.len() as u64)?;
        self.current = None;
        let Some(BlockRow { block, offset, row }) = at.at else {
            self.next = None;
            return Ok(());
        };
        self.next = Some((block, offset));
        if row == 0 {
            return Ok(());
        }
        let path = self.path.clone();
        let past = |rows: usize| {
            Error::data(
                Location::new(path.as_str(), format!("block {block}")),
                format!("cannot seek to row {row} of the block: it has {rows} rows"),
            )
        };
        if !self.next_block()? {
            return Err(past(0));
        }
        let Some((_, _, rows, given)) = &mut self.current else { return Err(past(0)) };
        if row >= rows.num_rows() {
            return Err(past(rows.num_rows()));
        }
        *given = row;
        Ok(())
    }
}

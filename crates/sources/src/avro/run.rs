//! A run of blocks of one file (consecutive ones, or the next ones of a shuffled order)
//! described by where they are, decoded into one chunk by whichever thread makes it: the
//! unit Avro files are decoded in on the pipeline's pool.
//!
//! Describing a run only walks block headers; making it inflates and decodes every block.
//! A run gives exactly what the reader's own `next_chunk` calls would give over the same
//! records: the rows before a bad record, the record's error, then the rows after it (or
//! after the block, when the bad record's bytes cannot be walked over).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};

use super::container::{decompress, Codec};
use super::decode::{Columns, Decoder};
use super::reader::Contents;
use crate::reader::Deferred;

/// What makes a run of one file: its bytes, codec, decoder and path.
pub(crate) struct Source {
    pub path: String,
    pub file: Contents,
    pub codec: Codec,
    pub decoder: Decoder,
}

/// One block of a run: its index in the file, its byte offset, its compressed objects and
/// their count.
#[derive(Debug, Clone)]
pub(crate) struct BlockAt {
    pub index: usize,
    pub offset: usize,
    pub data: Range<usize>,
    pub count: usize,
}

/// A rows' outcome: the index (in the run's records) of its first record (of the bad record
/// for an error), and the rows or the error.
pub(crate) struct Outcome {
    pub first: usize,
    pub result: Result<RecordBatch>,
}

/// The outcomes of one decoded run given out a chunk at a time (the readers' `next_chunk`),
/// and which of the run's records the next row or error is.
#[derive(Default)]
pub(crate) struct Decoded {
    outcomes: VecDeque<Outcome>,
    /// Rows of the first outcome given.
    given: usize,
}

impl Decoded {
    /// Holds `run`'s outcomes instead of what was held.
    pub fn fill(&mut self, run: &Run) {
        self.outcomes = run.outcomes().into();
        self.given = 0;
    }

    /// The next chunk of at most `chunk_rows` rows, or the next error; `None` once all is
    /// given.
    pub fn next(&mut self, chunk_rows: usize) -> Option<Result<RecordBatch>> {
        loop {
            match &self.outcomes.front()?.result {
                Ok(rows) if self.given < rows.num_rows() => {
                    let n = chunk_rows.min(rows.num_rows() - self.given);
                    let chunk = rows.slice(self.given, n);
                    self.given += n;
                    return Some(Ok(chunk));
                }
                Ok(_) => {}
                Err(_) => return self.outcomes.pop_front().map(|o| o.result),
            }
            self.outcomes.pop_front();
            self.given = 0;
        }
    }

    /// The record of the run the next row or error is; `None` once all is given.
    pub fn record(&self) -> Option<usize> {
        let outcome = self.outcomes.front()?;
        Some(outcome.first + if outcome.result.is_ok() { self.given } else { 0 })
    }

    /// Drops what is held.
    pub fn clear(&mut self) {
        self.outcomes.clear();
        self.given = 0;
    }
}

/// Records `skip..skip + rows` of the concatenated records of `blocks`.
pub(crate) struct Run {
    pub source: Arc<Source>,
    pub blocks: Arc<[BlockAt]>,
    pub skip: usize,
    pub rows: usize,
}

impl Run {
    /// The run's rows and errors in order, each error in the place of its record.
    pub fn outcomes(&self) -> Vec<Outcome> {
        let source = &*self.source;
        let file: &[u8] = &source.file;
        let (lo, hi) = (self.skip, self.skip + self.rows);
        let mut out = Vec::new();
        let mut columns = source.decoder.columns();
        // The run's index of the first record in `columns`.
        let mut first = 0;
        let mut scratch = Vec::new();
        let mut base = 0;
        for b in self.blocks.iter() {
            let (start, end) = (base, base + b.count);
            base = end;
            // A block of no records in the window, and a run of no rows at a block's end
            // (after a seek there), still walk the block: bytes after its last record are
            // an error.
            let overlaps = start < hi && end > lo;
            let empty_inside = b.count == 0 && (lo..=hi).contains(&start);
            let at_its_end = lo == hi && end == lo;
            if !(overlaps || empty_inside || at_its_end) {
                continue;
            }
            let (mut from, to) = (lo.saturating_sub(start), (hi - start).min(b.count));
            let location = |at: String| Location::new(source.path.as_str(), format!("block {}, {at}", b.index));
            if let Err(e) = decompress(source.codec, &file[b.data.clone()], &mut scratch) {
                flush(&source.decoder, &mut columns, first, &mut out);
                out.push(Outcome {
                    first: start + from,
                    result: Err(Error::data(location(format!("byte {}", b.offset)), e)),
                });
                continue;
            }
            loop {
                if columns.rows() == 0 {
                    first = start + from;
                }
                match source.decoder.append(&mut columns, &scratch, b.count, from, to) {
                    Ok(()) => break,
                    Err(failure) => {
                        flush(&source.decoder, &mut columns, first, &mut out);
                        let at = location(format!("byte {} of its decompressed data", failure.bad.at));
                        out.push(Outcome {
                            first: start + failure.record,
                            result: Err(Error::data(at, failure.bad.what)),
                        });
                        from = failure.record + 1;
                        if !failure.walkable || from >= to {
                            break;
                        }
                    }
                }
            }
        }
        flush(&source.decoder, &mut columns, first, &mut out);
        out
    }
}

/// Moves the rows in `columns` (the first of them record `first`) to `out` as one chunk.
fn flush(decoder: &Decoder, columns: &mut Columns, first: usize, out: &mut Vec<Outcome>) {
    if columns.rows() > 0 {
        let rows = std::mem::replace(columns, decoder.columns());
        out.push(Outcome { first, result: Ok(decoder.finish(rows)) });
    }
}

impl Deferred for Run {
    fn num_rows(&self) -> usize {
        self.rows
    }

    fn slice(&self, offset: usize, len: usize) -> Arc<dyn Deferred> {
        Arc::new(Run {
            source: self.source.clone(),
            blocks: self.blocks.clone(),
            skip: self.skip + offset,
            rows: len.min(self.rows.saturating_sub(offset)),
        })
    }

    fn bytes(&self) -> u64 {
        // Decoded rows are about as large as the inflated records; deflate inflates typical
        // feature data about fourfold.
        let compressed: usize = self.blocks.iter().map(|b| b.data.len()).sum();
        (compressed as u64).saturating_mul(4)
    }

    /// The rows, or the first error, losing the rows around it: for a consumer that cannot
    /// take several outcomes, [`Deferred::make_each`] gives them all.
    fn make(&self) -> Result<RecordBatch> {
        let mut rows = Vec::new();
        for outcome in self.outcomes() {
            rows.push(outcome.result?);
        }
        match rows.len() {
            1 => Ok(rows.pop().expect("one chunk")),
            _ => Ok(arrow::compute::concat_batches(&self.source.decoder.schema(), &rows)?),
        }
    }

    fn make_each(&self) -> Vec<Result<RecordBatch>> {
        self.outcomes().into_iter().map(|o| o.result).collect()
    }
}

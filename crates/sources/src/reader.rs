//! The reader interface every source implements.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

/// The number of rows per chunk when the caller does not choose.
pub const DEFAULT_CHUNK_ROWS: usize = 8192;

/// How readers read: the chunks they aim for and how they get at file bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Rows per chunk.
    pub chunk_rows: usize,
    /// Map uncompressed TFRecord files into memory rather than read them (default on). A
    /// read copies the file into buffers the process writes for the first time, which costs
    /// more than the checks and the parse of w2's records; a map hands the page cache's
    /// bytes out as they are. A file cut shorter while it is mapped would stop the process
    /// (the system's `SIGBUS`) where a read would return an error, so a reader checks the
    /// file's length before each map; a file rewritten in place would change bytes after
    /// their checksum was checked. Pipelines over files that other programs write while
    /// they run should turn this off. Only regular files are mapped; a file whose map fails
    /// (some FUSE, network and special file systems cannot map) is read from there on.
    pub map_files: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { chunk_rows: DEFAULT_CHUNK_ROWS, map_files: true }
    }
}

impl ReadOptions {
    /// The default options with chunks of `chunk_rows` rows (at least 1).
    pub fn chunks_of(chunk_rows: usize) -> Self {
        ReadOptions { chunk_rows: chunk_rows.max(1), ..Self::default() }
    }
}

/// A pull-based reader of chunks: each call returns the next chunk of elements.
///
/// A chunk is never empty and its schema is the Arrow schema of the source's output spec,
/// except that a bytes column may come as `BinaryView` (a reader that frames values where it
/// read them hands out views of its read buffers instead of copying them); whoever needs the
/// declared types casts once, where it copies anyway. After `Ok(None)` (the end), every call
/// returns `Ok(None)`.
///
/// A reader may be pulled again after an `Err`: it continues after the bad input where the
/// format allows it (CSV: the next record; text lines: the next line; in-memory data: the
/// next batch; a list of files: the rest of the file, then the next file), and otherwise
/// returns `Ok(None)`. It never returns the same error forever, so pulling until `Ok(None)`
/// (what `ignore_errors` does) terminates. Input before a bad record comes before its error.
pub trait ChunkReader: Send {
    /// The next chunk, or `Ok(None)` at the end.
    fn next_chunk(&mut self) -> flumen_ir::Result<Option<RecordBatch>>;

    /// Where the reader is now, between two `next_chunk` calls: enough for a freshly opened
    /// reader of the same source, moved there by [`ChunkReader::seek`], to produce exactly
    /// the rows and errors this one would produce next (chunk boundaries may differ).
    fn position(&self) -> flumen_ir::Result<ReaderPosition>;

    /// Moves a freshly opened reader of the same source to `position`, a value returned by
    /// [`ChunkReader::position`] (possibly in another process). A position that does not fit
    /// the source (another file list, a file that changed length) is an error, never a
    /// silently different sequence.
    fn seek(&mut self, position: &ReaderPosition) -> flumen_ir::Result<()>;

    /// The next chunk described, of exactly `rows` rows where the input has them (fewer at
    /// its end, or before an error), cutting its units (blocks) if need be: for a consumer
    /// that batches, so that each chunk is whole batches. By default, what
    /// [`ChunkReader::next_deferred`] gives.
    fn next_deferred_rows(&mut self, rows: usize) -> flumen_ir::Result<Option<Arc<dyn Deferred>>> {
        let _ = rows;
        self.next_deferred()
    }

    /// Whether the reader can describe its next chunks rather than make them
    /// ([`ChunkReader::next_deferred`]); by default it cannot.
    fn defers(&self) -> bool {
        false
    }

    /// The next chunk as a description any thread can make ([`Deferred::make`]), moving the
    /// reader on exactly as [`ChunkReader::next_chunk`] does; `Ok(None)` at the end. Only
    /// for readers that [`defer`](ChunkReader::defers).
    fn next_deferred(&mut self) -> flumen_ir::Result<Option<Arc<dyn Deferred>>> {
        Err(flumen_ir::Error::execution("read", "this reader makes its chunks and describes none"))
    }
}

/// A chunk described rather than made: a parallel map hands it to a worker, which makes it
/// on its own thread, so that the thread that pulls the reader does not write every value
/// into memory the workers then read (a `range`'s values cost more to move between cores
/// than to compute).
pub trait Deferred: Send + Sync {
    /// The chunk's rows.
    fn num_rows(&self) -> usize;

    /// Rows `offset..offset + len` of the chunk, described.
    fn slice(&self, offset: usize, len: usize) -> Arc<dyn Deferred>;

    /// The bytes the made chunk holds.
    fn bytes(&self) -> u64;

    /// Makes the chunk: what [`ChunkReader::next_chunk`] would have returned.
    fn make(&self) -> flumen_ir::Result<RecordBatch>;

    /// Makes the chunk with its errors in their places, as the reader's `next_chunk` calls
    /// would give them (rows, a bad record's error, the rows after it), where
    /// [`Deferred::make`] can only give the rows or an error. By default, `make` alone.
    fn make_each(&self) -> Vec<flumen_ir::Result<RecordBatch>> {
        vec![self.make()]
    }
}

/// A reader's position: a small JSON value whose shape is the reader's own (file index, byte
/// offset, row group, row, ...). It is stored in iterator checkpoints.
pub type ReaderPosition = serde_json::Value;

/// A boxed reader.
pub type BoxReader = Box<dyn ChunkReader>;

/// Test support shared by the readers' tests.
#[cfg(test)]
pub(crate) mod testing {
    use arrow::compute::concat_batches;
    use arrow::record_batch::RecordBatch;

    use super::{BoxReader, ChunkReader};

    /// What a reader gives, with chunk boundaries erased: the rows between two errors as one
    /// batch, and each error as its message.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) enum Outcome {
        /// Rows delivered one after another.
        Rows(RecordBatch),
        /// An error's message (its `Display`, which names the file and the position).
        Error(String),
    }

    /// Pulls `reader` until `Ok(None)` (at most 1000 times): each chunk, or each error's message.
    fn pull_all(reader: &mut dyn ChunkReader) -> Vec<Result<RecordBatch, String>> {
        let mut out = vec![];
        for _ in 0..1000 {
            match reader.next_chunk() {
                Ok(None) => return out,
                Ok(Some(chunk)) => out.push(Ok(chunk)),
                Err(e) => out.push(Err(e.to_string())),
            }
        }
        panic!("the reader did not end after 1000 pulls");
    }

    /// `pulled` with chunk boundaries erased.
    fn outcomes(pulled: &[Result<RecordBatch, String>]) -> Vec<Outcome> {
        let mut out = vec![];
        let mut rows: Vec<RecordBatch> = vec![];
        let flush = |rows: &mut Vec<RecordBatch>, out: &mut Vec<Outcome>| {
            if let Some(first) = rows.first() {
                out.push(Outcome::Rows(concat_batches(&first.schema(), rows.iter()).unwrap()));
            }
            rows.clear();
        };
        for item in pulled {
            match item {
                Ok(chunk) => rows.push(chunk.clone()),
                Err(message) => {
                    flush(&mut rows, &mut out);
                    out.push(Outcome::Error(message.clone()));
                }
            }
        }
        flush(&mut rows, &mut out);
        out
    }

    /// Checks that positions resume exactly: for every cut point (after 0, 1, ... pulls of a
    /// reader `open(chunk_rows)`, up to and including the pull that returns `Ok(None)`), a
    /// fresh reader sought to the position taken there (sent through JSON text, as a
    /// checkpoint would) gives the same rows and errors as the first reader from there on;
    /// also with chunks of another size. Returns what the uninterrupted reader gives, for the
    /// test to check that its data has the errors it means to test.
    pub(crate) fn check_resume(chunk_rows: usize, open: impl Fn(usize) -> BoxReader) -> Vec<Outcome> {
        let whole = pull_all(&mut *open(chunk_rows));
        for cut in 0..=whole.len() + 1 {
            let mut reader = open(chunk_rows);
            for pull in 0..cut {
                match (reader.next_chunk(), whole.get(pull)) {
                    (Ok(Some(chunk)), Some(Ok(want))) => assert_eq!(&chunk, want, "pull {pull}"),
                    (Err(e), Some(Err(want))) => assert_eq!(&e.to_string(), want, "pull {pull}"),
                    (Ok(None), None) => {}
                    (got, want) => panic!("pull {pull} gave {got:?}, not {want:?}"),
                }
            }
            let position = reader.position().unwrap();
            let text = serde_json::to_string(&position).unwrap();
            assert!(text.len() < 400, "positions hold offsets, not data: {text}");
            let expected = outcomes(&whole[cut.min(whole.len())..]);
            for resumed_rows in [chunk_rows, chunk_rows + 1] {
                let mut resumed = open(resumed_rows);
                resumed.seek(&serde_json::from_str(&text).unwrap()).unwrap();
                let rest = outcomes(&pull_all(&mut *resumed));
                assert_eq!(rest, expected, "resuming after {cut} pulls at {text} in chunks of {resumed_rows}");
            }
        }
        outcomes(&whole)
    }

    /// Checks that a reader that describes its chunks ([`ChunkReader::next_deferred`]) gives,
    /// made with [`Deferred::make_each`](super::Deferred::make_each), exactly the rows and
    /// errors its `next_chunk` calls give, and that the position taken before each
    /// description resumes there: a fresh reader sought to it, read either way, gives the
    /// rest. Returns what the reader gives.
    pub(crate) fn check_described(chunk_rows: usize, open: impl Fn(usize) -> BoxReader) -> Vec<Outcome> {
        let whole = outcomes(&pull_all(&mut *open(chunk_rows)));
        let mut reader = open(chunk_rows);
        assert!(reader.defers());
        let mut described: Vec<(serde_json::Value, Vec<Result<RecordBatch, String>>)> = vec![];
        for _ in 0..1000 {
            let position = reader.position().unwrap();
            let made = match reader.next_deferred() {
                Ok(None) => break,
                Ok(Some(rows)) => rows.make_each().into_iter().map(|r| r.map_err(|e| e.to_string())).collect(),
                Err(e) => vec![Err(e.to_string())],
            };
            described.push((position, made));
        }
        let all: Vec<_> = described.iter().flat_map(|(_, made)| made.iter().cloned()).collect();
        assert_eq!(outcomes(&all), whole, "described and made, the reader gives what it reads");
        for (k, (position, _)) in described.iter().enumerate() {
            let rest: Vec<_> = described[k..].iter().flat_map(|(_, made)| made.iter().cloned()).collect();
            let mut resumed = open(chunk_rows + 1);
            resumed.seek(position).unwrap();
            assert_eq!(outcomes(&pull_all(&mut *resumed)), outcomes(&rest), "resuming at {position}");
        }
        whole
    }

    /// The message of the error of seeking a fresh reader from `open` to `position`; panics
    /// when the seek succeeds.
    pub(crate) fn seek_error(open: impl Fn() -> BoxReader, position: serde_json::Value) -> String {
        match open().seek(&position) {
            Ok(()) => panic!("seeking to {position} succeeded"),
            Err(e) => e.to_string(),
        }
    }

    /// Pulls `reader` until `Ok(None)`, at most `max` times: whether it ended, and how many
    /// errors it returned on the way (so a reader that repeats an error fails the test).
    pub(crate) fn pull_to_end(reader: &mut dyn ChunkReader, max: usize) -> (bool, usize) {
        let mut errors = 0;
        let ended = (0..max).any(|_| match reader.next_chunk() {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(_) => {
                errors += 1;
                false
            }
        });
        (ended, errors)
    }
}

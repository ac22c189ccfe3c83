//! TFRecord files, read as one element per record (field `record`, bytes) and written by
//! [`TfRecordWriter`].
//!
//! A record is framed as tf.data frames it: its length (`u64`, little-endian), the masked
//! CRC32C of those 8 bytes (`u32`), the data, and the masked CRC32C of the data (`u32`).
//! Both checksums are verified on read. A record whose data checksum fails is an error at
//! its byte offset, and reading goes on with the next record, since the framing still holds.
//! A bad length checksum or a file cut inside a record is an error too, and ends the file:
//! nothing after it can be framed. Whole-file GZIP or ZLIB compression is read and written
//! as tf.data's `compression_type`; offsets are then offsets in the decompressed stream.
//!
//! The reader hands records out where they lie: the `record` column is a `BinaryView`
//! whose data buffers are the reader's windows (mapped or read), framing and all. Whoever needs them
//! contiguous (the runtime, where a chunk leaves the reader) copies them once, in the order
//! it needs them in, rather than once here and again there.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use arrow::array::{make_view, BinaryViewArray};
use arrow::buffer::{Buffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use flate2::read::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use flumen_ir::{Error, FileFormat, Location, RecordCompression, Result};
use serde::{Deserialize, Serialize};

use crate::position::{check_len, decode, encode};
use crate::reader::{ChunkReader, ReadOptions, ReaderPosition};

/// The constant TFRecord adds to a rotated CRC32C (the "mask"), so that a checksum of data
/// that itself holds checksums does not look like one.
const MASK_DELTA: u32 = 0xa282_ead8;

/// A record's header: length and its checksum.
const HEADER: usize = 12;

/// TFRecord's masked CRC32C of `bytes`.
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = crate::checksum::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The file's bytes, decompressed as `compression` says, with the file's length. The reader
/// reads large windows of its own, so nothing more is buffered (the decompressors buffer
/// their input themselves).
fn open_input(path: &str, compression: RecordCompression, read: ReadOptions) -> Result<(Input, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    let input = match compression {
        // Only a regular file maps (a pipe or a device reports no length).
        RecordCompression::None if read.map_files && meta.is_file() => Input::Mapped(file),
        RecordCompression::None => Input::Read(Box::new(file)),
        RecordCompression::Gzip => Input::Read(Box::new(MultiGzDecoder::new(file))),
        RecordCompression::Zlib => Input::Read(Box::new(ZlibDecoder::new(file))),
    };
    Ok((input, meta.len()))
}

/// Bytes read from the stream at a time: large enough that a read system call serves
/// hundreds of records. A record longer than this gets a window of its own length.
const WINDOW: usize = 256 << 10;

/// Bytes of an uncompressed file mapped at a time: fewer system calls than smaller windows,
/// fewer mapped pages held than larger ones (w2 ran faster at 2 MiB than at 512 KiB or
/// 8 MiB).
const MAP_WINDOW: usize = 2 << 20;

/// The record bytes at which a chunk ends before its `chunk_rows`: chunks of large records
/// (images, long texts) stay small enough that readers buffering a few each, one per input
/// of an interleave, hold megabytes rather than hundreds of them.
const CHUNK_BYTES: usize = 1 << 20;

/// Reads a TFRecord file as one element per record.
///
/// An uncompressed file is mapped in windows of `MAP_WINDOW` bytes (unless
/// [`ReadOptions::map_files`] is off); otherwise the stream is read in windows of `WINDOW`
/// bytes. Each record's data is checked where it lies and handed out as a view of the
/// window (the `record` column is a `BinaryView`), so the reader copies nothing: a window is
/// never written again once made, and one that needs more bytes is followed by a new
/// window, starting with the unframed rest of the old one. A window lives as long as a
/// chunk views it.
pub struct TfRecordReader {
    input: Input,
    /// The file offset of the window's first byte (mapped windows only).
    window_at: u64,
    path: String,
    compression: RecordCompression,
    schema: SchemaRef,
    chunk_rows: usize,
    /// The file's length when it was opened (compressed bytes when compressed).
    len: u64,
    /// The offset of the next record in the (decompressed) stream.
    offset: u64,
    /// Records read so far.
    records: u64,
    /// The last window mapped or read: `window[lo..hi]` are not yet framed.
    window: Buffer,
    /// Counts the windows read, so that a chunk knows whether it has the current one.
    windows: u64,
    /// The size of a new window (tests use tiny ones, so that records straddle them).
    window_size: usize,
    lo: usize,
    hi: usize,
    /// Whether the stream has ended (everything in the window is all there is).
    eof: bool,
    /// Why the stream ended early, when it failed (a cut or corrupt compressed stream):
    /// the records before the failure are all in the window, and the failure is the error of
    /// the record it cuts.
    failed: Option<String>,
    /// A bad record's error, returned after the records before it, with whether the file
    /// ends there (its framing is lost) and the record's own position, where a position
    /// taken before the error was returned resumes (so that the error comes again).
    pending: Option<(Error, bool, TfRecordPosition)>,
    done: bool,
}

/// Where a [`TfRecordReader`] is: the offset of the next record in the decompressed stream
/// and its number (1-based), in a file of `len` bytes.
#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TfRecordPosition {
    len: u64,
    offset: u64,
    record: u64,
}

/// Maps `len` bytes of `file` from `at`, to be read only.
fn map_window(file: &File, at: u64, len: usize) -> std::io::Result<memmap2::Mmap> {
    #[cfg(test)]
    match tests::MAPS_BEFORE_FAILING.get() {
        Some(0) => return Err(std::io::ErrorKind::Unsupported.into()),
        Some(left) => tests::MAPS_BEFORE_FAILING.set(Some(left - 1)),
        None => {}
    }
    // SAFETY: the map is only read, and TFRecord files are written once and then read.
    // A file another program changes in place while mapped breaks that: bytes change
    // under a buffer after their checksum was checked, and bytes cut off after the check
    // in `map` fault where they are read (see `ReadOptions::map_files`). The pages are not
    // populated up front: they come in as the checksum first reads them, which ran fresh
    // w2 and w6 about 3% faster than `MAP_POPULATE` (docs/performance-notes.md, "Maps rather than reads").
    unsafe { memmap2::MmapOptions::new().offset(at).len(len).map(file) }
}

/// Where a reader's bytes come from.
enum Input {
    /// An uncompressed file, mapped a window at a time.
    Mapped(File),
    /// A stream read a window at a time: a decompressor, or a file when maps are off.
    Read(Box<dyn Read + Send>),
}

/// What reading one record gave.
enum Record {
    /// A good record: its data is `window[start..end]` of the current window.
    Data {
        start: usize,
        end: usize,
    },
    End,
    /// A bad record; `true` when nothing after it can be framed.
    Bad(Error, bool),
}

impl TfRecordReader {
    /// Opens `path` to read its records in chunks of at most `read.chunk_rows` rows; an
    /// uncompressed file is mapped when `read.map_files` says so.
    pub fn open(path: &str, compression: RecordCompression, read: ReadOptions) -> Result<Self> {
        Self::open_with_window(path, compression, read, None)
    }

    /// [`open`](Self::open) reading or mapping `window` bytes at a time, by default
    /// [`MAP_WINDOW`] mapped and [`WINDOW`] read (tests use tiny windows so that records
    /// straddle them).
    fn open_with_window(
        path: &str,
        compression: RecordCompression,
        read: ReadOptions,
        window: Option<usize>,
    ) -> Result<Self> {
        let (input, len) = open_input(path, compression, read)?;
        let window = window.unwrap_or(match input {
            Input::Mapped(_) => MAP_WINDOW,
            Input::Read(_) => WINDOW,
        });
        Ok(TfRecordReader {
            input,
            window_at: 0,
            path: path.to_string(),
            compression,
            schema: view_schema(&FileFormat::TfRecord { compression }.output_spec()?.arrow_schema()),
            chunk_rows: read.chunk_rows.max(1),
            len,
            offset: 0,
            records: 0,
            window: Buffer::from_vec(Vec::<u8>::new()),
            windows: 0,
            window_size: window.max(HEADER),
            lo: 0,
            hi: 0,
            eof: false,
            failed: None,
            pending: None,
            done: false,
        })
    }

    fn error(&self, start: u64, what: String) -> Error {
        // `records` counts the record being read: its index (from 0) is one less.
        let at = format!("record index {} at byte {start}", self.records - 1);
        Error::data(Location::new(self.path.as_str(), at), what)
    }

    /// Makes sure the window holds at least `need` unframed bytes, unless the stream ends
    /// first; the unframed bytes it then holds. When it does not, a new window is made: the
    /// unframed rest of the old one, then as much of the stream as fills it (mapped, from
    /// the unframed rest's offset in the file; read, after a copy of it).
    fn fill(&mut self, need: usize) -> Result<usize> {
        if self.hi - self.lo >= need || self.eof {
            return Ok(self.hi - self.lo);
        }
        match self.input {
            Input::Mapped(_) => self.map(need),
            Input::Read(_) => self.read(need),
        }
    }

    /// Reads the next window from the stream: the unframed rest of the old one, then up to
    /// a window's size (at least `need` bytes) in all. Memory grows as bytes arrive: `need`
    /// comes from a record's length field, which a corrupt file can make anything. A stream
    /// that fails (a cut or corrupt compressed file) ends the window with what it gave.
    fn read(&mut self, need: usize) -> Result<usize> {
        let size = self.window_size.max(need);
        let rest = self.hi - self.lo;
        let Input::Read(stream) = &mut self.input else { unreachable!("only a stream's windows are read") };
        let mut next = Vec::with_capacity(self.window_size.max(rest));
        next.extend_from_slice(&self.window[self.lo..self.hi]);
        // `read_to_end` reads into the spare capacity without zeroing it first. It reads in
        // pieces growing from 8 KiB, six system calls to a window, and was still faster than
        // zeroing the window for one call (w2: 0.53 against 0.50 of the limit).
        let want = (size - next.len()) as u64;
        match stream.take(want).read_to_end(&mut next) {
            Ok(got) => self.eof = (got as u64) < want,
            // The bytes read before the failure are in `next`.
            Err(e) => {
                self.eof = true;
                self.failed = Some(e.to_string());
            }
        }
        (self.lo, self.hi) = (0, next.len());
        self.window = Buffer::from_vec(next);
        self.windows += 1;
        Ok(self.hi)
    }

    /// Maps the next window: from the first unframed byte, a window's size (at least
    /// `need` bytes) or up to the end the file had when opened. Where the file cannot be
    /// mapped (some FUSE, network and special file systems refuse), the reader reads it
    /// from there on instead.
    fn map(&mut self, need: usize) -> Result<usize> {
        let Input::Mapped(file) = &self.input else { unreachable!("only a mapped file's windows are mapped") };
        let size = self.window_size.max(need);
        let at = self.window_at + self.lo as u64;
        let end = (at + size as u64).min(self.len);
        self.eof = end == self.len;
        if end <= at {
            (self.window_at, self.lo, self.hi) = (at, 0, 0);
            self.window = Buffer::from_vec(Vec::<u8>::new());
            return Ok(0);
        }
        // A map reaching past the file's end would fault where it is read.
        let now = file.metadata().map_err(|e| Error::io(self.path.as_str(), e))?.len();
        if now < end {
            let why = format!("the file was cut to {now} bytes while being read (it had {})", self.len);
            return Err(self.error(at, why));
        }
        let Ok(map) = map_window(file, at, (end - at) as usize) else {
            // The stream continues where the window's bytes end, after its unframed rest.
            let mut file = file.try_clone().map_err(|e| Error::io(self.path.as_str(), e))?;
            let next = self.window_at + self.hi as u64;
            file.seek(SeekFrom::Start(next)).map_err(|e| Error::io(self.path.as_str(), e))?;
            self.input = Input::Read(Box::new(file));
            // Windows of a reader that never mapped from here on.
            if self.window_size == MAP_WINDOW {
                self.window_size = WINDOW;
            }
            return self.read(need);
        };
        let ptr = std::ptr::NonNull::new(map.as_ptr() as *mut u8).expect("a map is never null");
        let len = map.len();
        // SAFETY: the map's `len` bytes stay mapped, unmoved, until the buffer drops it.
        self.window = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) };
        self.window_at = at;
        (self.lo, self.hi) = (0, len);
        self.windows += 1;
        Ok(self.hi - self.lo)
    }

    /// Frames and checks the next record in the window.
    fn read_record(&mut self) -> Result<Record> {
        let start = self.offset;
        // Counted before its bytes are asked for, so that an error getting them names it.
        self.records += 1;
        let got = self.fill(HEADER)?;
        if got == 0 && self.failed.is_none() {
            self.records -= 1;
            return Ok(Record::End);
        }
        if got < HEADER {
            let why = format!("the file ends inside a record header ({got} of {HEADER} bytes)");
            return Ok(Record::Bad(self.error(start, self.failure_or(why)), true));
        }
        let header = &self.window[self.lo..self.lo + HEADER];
        let length_bytes: [u8; 8] = header[..8].try_into().expect("8 bytes");
        let stored = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if masked_crc32c(&length_bytes) != stored {
            return Ok(Record::Bad(self.error(start, "the length's checksum does not match".into()), true));
        }
        let length = u64::from_le_bytes(length_bytes);
        // A length beyond what the file can hold is a corrupt length, not a record: an
        // uncompressed file holds its length, a deflate stream at most 1,032 times it.
        let limit = if self.compression == RecordCompression::None { self.len } else { self.len.saturating_mul(1032) };
        let size = usize::try_from(length).ok().filter(|_| start + HEADER as u64 + length <= limit);
        let Some(size) = size.filter(|s| s.checked_add(HEADER + 4).is_some()) else {
            let why = format!("a record of {length} bytes does not fit in the file");
            return Ok(Record::Bad(self.error(start, why), true));
        };
        let framed = HEADER + size + 4;
        if self.fill(framed)? < framed {
            let why = format!("the file ends inside a record of {length} bytes");
            return Ok(Record::Bad(self.error(start, self.failure_or(why)), true));
        }
        let data = self.lo + HEADER;
        let stored = u32::from_le_bytes(self.window[data + size..data + size + 4].try_into().expect("4 bytes"));
        let ok = masked_crc32c(&self.window[data..data + size]) == stored;
        self.lo += framed;
        self.offset = start + framed as u64;
        if !ok {
            return Ok(Record::Bad(self.error(start, "the data's checksum does not match".into()), false));
        }
        Ok(Record::Data { start: data, end: data + size })
    }

    /// Why the data ends where it does: the stream's failure when it failed, else `why`.
    fn failure_or(&self, why: String) -> String {
        let Some(e) = &self.failed else { return why };
        let what = match self.compression {
            RecordCompression::Gzip => "the GZIP stream fails",
            RecordCompression::Zlib => "the ZLIB stream fails",
            RecordCompression::None => "reading the file fails",
        };
        format!("{what} after byte {}: {e}", self.offset + (self.hi - self.lo) as u64)
    }

    /// Forgets what the window holds, to read `input` next (a mapped file from the
    /// `window_at` the caller sets, a stream from where it is).
    fn reset_input(&mut self, input: Input) {
        self.input = input;
        (self.lo, self.hi, self.eof, self.failed) = (0, 0, false, None);
    }
}

/// `schema` with its bytes columns as `BinaryView`.
fn view_schema(schema: &Schema) -> SchemaRef {
    let fields = schema.fields().iter().map(|f| match f.data_type() {
        DataType::Binary => Arc::new(Field::new(f.name(), DataType::BinaryView, f.is_nullable())),
        _ => f.clone(),
    });
    Arc::new(Schema::new(fields.collect::<Vec<_>>()))
}

impl ChunkReader for TfRecordReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some((e, ends, _)) = self.pending.take() {
            self.done = ends;
            return Err(e);
        }
        let mut views: Vec<u128> = Vec::with_capacity(self.chunk_rows.min(1 << 16));
        // The windows the views point into, with the number of the last one.
        let mut buffers: Vec<Buffer> = vec![];
        let mut last_window = None;
        // The chunk's record bytes, kept within what Arrow's `Binary` offsets (i32) address,
        // so that the chunk can be made contiguous.
        let mut bytes = 0usize;
        while !self.done && views.len() < self.chunk_rows && bytes < CHUNK_BYTES {
            let here = TfRecordPosition { len: self.len, offset: self.offset, record: self.records + 1 };
            let record = match self.read_record() {
                Ok(record) => record,
                // The records before it come first (a file cut while mapped, a failed read).
                Err(error) if !views.is_empty() => {
                    self.pending = Some((error, true, here));
                    break;
                }
                Err(error) => {
                    self.done = true;
                    return Err(error);
                }
            };
            match record {
                Record::Data { start, end } => {
                    let size = end - start;
                    if i32::try_from(bytes + size).is_err() {
                        let framed = HEADER + size + 4;
                        if !views.is_empty() {
                            // The record starts the next chunk.
                            (self.lo, self.offset, self.records) =
                                (self.lo - framed, self.offset - framed as u64, self.records - 1);
                            break;
                        }
                        let why = format!("a record of {size} bytes is larger than a chunk can hold");
                        return Err(self.error(self.offset - framed as u64, why));
                    }
                    bytes += size;
                    if last_window != Some(self.windows) {
                        buffers.push(self.window.clone());
                        last_window = Some(self.windows);
                    }
                    // Both fit in u32: the record is under i32::MAX bytes, and a window longer
                    // than `window_size` holds one record, at `HEADER`.
                    let index = (buffers.len() - 1) as u32;
                    views.push(make_view(&self.window[start..end], index, start as u32));
                }
                Record::End => self.done = true,
                Record::Bad(error, ends) => {
                    if views.is_empty() {
                        self.done = ends;
                        return Err(error);
                    }
                    self.pending = Some((error, ends, here));
                    break;
                }
            }
        }
        if views.is_empty() {
            return Ok(None);
        }
        // SAFETY: each view was made by `make_view` from bytes `start..end` of the window
        // pushed as its buffer, so it lies within that buffer (what `try_new` would check,
        // view by view, at a cost of 5% of the reader's time); `Binary` values need no UTF-8.
        let records = unsafe { BinaryViewArray::new_unchecked(ScalarBuffer::from(views), buffers, None) };
        Ok(Some(RecordBatch::try_new(self.schema.clone(), vec![Arc::new(records)])?))
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (offset, record) = match &self.pending {
            // A bad record whose error is still to come: read again from there, it comes
            // again, and what follows it (the records after it, or the file's end).
            Some((_, _, bad)) => return encode("tfrecord", bad),
            None if self.done => (u64::MAX, self.records + 1),
            None => (self.offset, self.records + 1),
        };
        encode("tfrecord", &TfRecordPosition { len: self.len, offset, record })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: TfRecordPosition = decode("tfrecord", position)?;
        check_len(&self.path, at.len, self.len)?;
        if at.record == 0 {
            return Err(Error::execution("seek", format!("{position} is not a position in {}", self.path)));
        }
        self.pending = None;
        self.records = at.record - 1;
        if at.offset == u64::MAX {
            self.done = true;
            return Ok(());
        }
        let read = ReadOptions { chunk_rows: self.chunk_rows, map_files: matches!(self.input, Input::Mapped(_)) };
        let (mut input, _) = open_input(&self.path, self.compression, read)?;
        let io = |e| Error::io(self.path.as_str(), e);
        let skipped = match &mut input {
            // The next map starts at the offset.
            Input::Mapped(_) => at.offset.min(self.len),
            // The stream is the file: seek it rather than read up to the offset.
            Input::Read(_) if self.compression == RecordCompression::None => {
                let mut file = File::open(&self.path).map_err(io)?;
                file.seek(SeekFrom::Start(at.offset)).map_err(io)?;
                input = Input::Read(Box::new(file));
                at.offset.min(self.len)
            }
            Input::Read(stream) => std::io::copy(&mut stream.take(at.offset), &mut std::io::sink()).map_err(io)?,
        };
        if skipped != at.offset {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in {}, whose records end at byte {skipped}", self.path),
            ));
        }
        self.reset_input(input);
        self.window_at = at.offset;
        self.offset = at.offset;
        self.done = false;
        Ok(())
    }
}

/// The file a [`TfRecordWriter`] writes, through its compressor.
enum Sink {
    Plain(BufWriter<File>),
    Gzip(GzEncoder<BufWriter<File>>),
    Zlib(ZlibEncoder<BufWriter<File>>),
}

/// Writes TFRecord files that tf.data (and [`TfRecordReader`]) read.
pub struct TfRecordWriter {
    sink: Sink,
    path: String,
}

impl TfRecordWriter {
    /// Creates (or truncates) `path`, compressed as `compression` says.
    pub fn create(path: &str, compression: RecordCompression) -> Result<Self> {
        let file = BufWriter::with_capacity(1 << 16, File::create(path).map_err(|e| Error::io(path, e))?);
        let level = flate2::Compression::default();
        let sink = match compression {
            RecordCompression::None => Sink::Plain(file),
            RecordCompression::Gzip => Sink::Gzip(GzEncoder::new(file, level)),
            RecordCompression::Zlib => Sink::Zlib(ZlibEncoder::new(file, level)),
        };
        Ok(TfRecordWriter { sink, path: path.to_string() })
    }

    /// Appends one record.
    pub fn write(&mut self, record: &[u8]) -> Result<()> {
        let length = (record.len() as u64).to_le_bytes();
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&length);
        header[8..].copy_from_slice(&masked_crc32c(&length).to_le_bytes());
        let out: &mut dyn Write = match &mut self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w,
            Sink::Zlib(w) => w,
        };
        let io = |e| Error::io(self.path.as_str(), e);
        out.write_all(&header).map_err(io)?;
        out.write_all(record).map_err(io)?;
        out.write_all(&masked_crc32c(record).to_le_bytes()).map_err(io)
    }

    /// Ends the compressed stream and writes out what is buffered.
    pub fn finish(self) -> Result<()> {
        let io = |e| Error::io(self.path.as_str(), e);
        let mut file = match self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w.finish().map_err(io)?,
            Sink::Zlib(w) => w.finish().map_err(io)?,
        };
        file.flush().map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    thread_local! {
        /// How many maps succeed before every later one fails, as on a file system that
        /// cannot map files; `None`: maps do not fail.
        pub(super) static MAPS_BEFORE_FAILING: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }

    /// The file of records `hello` and `` (empty), framed by an independent implementation
    /// of TFRecord's format (a bitwise CRC32C in Python, checked against CRC-32C's check
    /// value for "123456789").
    const HELLO_AND_EMPTY: &str = "0500000000000000eab2043e68656c6c6fbb1f1c19000000000000000029039807d8ea82a2";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Read options of chunks of `chunk_rows` rows, mapping files when `map`.
    fn opts(chunk_rows: usize, map: bool) -> ReadOptions {
        ReadOptions { map_files: map, ..ReadOptions::chunks_of(chunk_rows) }
    }

    /// The records of `path`, which mapped and read windows agree on.
    fn records(path: &str, compression: RecordCompression, chunk_rows: usize) -> Result<Vec<Vec<u8>>> {
        let mapped = records_in_windows(path, compression, opts(chunk_rows, true), MAP_WINDOW, false)?;
        let read = records_in_windows(path, compression, opts(chunk_rows, false), WINDOW, false)?;
        assert!(mapped == read, "mapped and read records differ");
        Ok(read)
    }

    /// The records of `path` read or mapped `window` bytes at a time, each chunk's copied out
    /// as it comes, or when `hold`, only after the whole file was read (so a window written
    /// again or unmapped while a chunk views it would show).
    fn records_in_windows(
        path: &str,
        compression: RecordCompression,
        read: ReadOptions,
        window: usize,
        hold: bool,
    ) -> Result<Vec<Vec<u8>>> {
        let chunk_rows = read.chunk_rows;
        let mut reader = TfRecordReader::open_with_window(path, compression, read, Some(window))?;
        let (mut held, mut out) = (vec![], vec![]);
        let copy = |chunk: &RecordBatch, out: &mut Vec<Vec<u8>>| {
            out.extend(chunk.column(0).as_binary_view().iter().map(|r| r.unwrap().to_vec()))
        };
        while let Some(chunk) = reader.next_chunk()? {
            assert!(chunk.num_rows() <= chunk_rows);
            assert_eq!(chunk.schema(), reader.schema);
            match hold {
                true => held.push(chunk),
                false => copy(&chunk, &mut out),
            }
        }
        held.iter().for_each(|chunk| copy(chunk, &mut out));
        Ok(out)
    }

    fn write(path: &str, compression: RecordCompression, records: &[Vec<u8>]) {
        let mut writer = TfRecordWriter::create(path, compression).unwrap();
        for r in records {
            writer.write(r).unwrap();
        }
        writer.finish().unwrap();
    }

    /// Records of 0 to 300 bytes, their contents depending on their index.
    fn sample() -> Vec<Vec<u8>> {
        (0..40u32).map(|i| (0..(i * 37 % 301)).map(|j| (i * 7 + j * 13) as u8).collect()).collect()
    }

    #[test]
    fn the_checksum_and_framing_are_tensorflows() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283, "CRC-32C's check value");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tfrecord");
        let path = path.to_str().unwrap();
        write(path, RecordCompression::None, &[b"hello".to_vec(), vec![]]);
        assert_eq!(std::fs::read(path).unwrap(), unhex(HELLO_AND_EMPTY));
        assert_eq!(records(path, RecordCompression::None, 10).unwrap(), vec![b"hello".to_vec(), vec![]]);
    }

    #[test]
    fn records_round_trip_in_every_compression_and_chunk_size() {
        let dir = tempfile::tempdir().unwrap();
        for compression in [RecordCompression::None, RecordCompression::Gzip, RecordCompression::Zlib] {
            let path = dir.path().join(format!("{compression:?}.tfrecord"));
            let path = path.to_str().unwrap();
            write(path, compression, &sample());
            for chunk_rows in [1, 7, 1000] {
                assert_eq!(records(path, compression, chunk_rows).unwrap(), sample(), "{compression:?}");
            }
            write(path, compression, &[]);
            assert!(records(path, compression, 3).unwrap().is_empty());
        }
        // Compressed files really are compressed: a GZIP file starts with its magic bytes.
        let gz = dir.path().join("Gzip.tfrecord");
        write(gz.to_str().unwrap(), RecordCompression::Gzip, &sample());
        assert_eq!(&std::fs::read(&gz).unwrap()[..2], &[0x1f, 0x8b]);
    }

    #[test]
    fn records_straddling_windows_or_longer_than_one_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut sample = sample();
        sample.insert(5, (0..5000u32).map(|j| (j * 31 % 251) as u8).collect());
        for compression in [RecordCompression::None, RecordCompression::Gzip] {
            let path = dir.path().join(format!("{compression:?}.tfrecord"));
            let path = path.to_str().unwrap();
            write(path, compression, &sample);
            // A window of one header, of a header and a byte, of a few records, of more than
            // the file: every record boundary falls somewhere else in the window.
            // Chunks held to the end keep their records while the reader reads on.
            for (window, map) in [12, 13, 40, 301, 1 << 20].into_iter().flat_map(|w| [(w, false), (w, true)]) {
                for (chunk_rows, hold) in [1, 7, 1000].into_iter().flat_map(|n| [(n, false), (n, true)]) {
                    let got = records_in_windows(path, compression, opts(chunk_rows, map), window, hold).unwrap();
                    let case = format!("window {window}, mapped {map}, chunks of {chunk_rows}, held {hold}");
                    assert!(got == sample, "{compression:?}, {case}");
                }
            }
        }
    }

    #[test]
    fn a_file_that_cannot_be_mapped_is_read_from_where_its_maps_failed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tfrecord");
        let path = path.to_str().unwrap();
        write(path, RecordCompression::None, &sample());
        // The first map fails, or a later one, with records straddling the last window mapped.
        for maps in [0, 1, 3] {
            for (window, chunk_rows) in [(12, 1), (40, 7), (301, 1000), (1 << 20, 7)] {
                let case = format!("{maps} maps, window {window}, chunks of {chunk_rows}");
                MAPS_BEFORE_FAILING.set(Some(maps));
                let mut reader = TfRecordReader::open_with_window(
                    path,
                    RecordCompression::None,
                    opts(chunk_rows, true),
                    Some(window),
                )
                .unwrap();
                let mut got = vec![];
                while let Some(chunk) = reader.next_chunk().unwrap() {
                    got.extend(chunk.column(0).as_binary_view().iter().map(|r| r.unwrap().to_vec()));
                }
                MAPS_BEFORE_FAILING.set(None);
                assert!(got == sample(), "{case}");
                let mapped_all = maps > 0 && window == 1 << 20;
                assert_eq!(matches!(reader.input, Input::Read(_)), !mapped_all, "{case}");
            }
        }
        // A reader of the default windows reads the read windows from then on.
        MAPS_BEFORE_FAILING.set(Some(0));
        let mut reader = TfRecordReader::open(path, RecordCompression::None, opts(7, true)).unwrap();
        let mut rows = 0;
        while let Some(chunk) = reader.next_chunk().unwrap() {
            rows += chunk.num_rows();
        }
        MAPS_BEFORE_FAILING.set(None);
        assert_eq!((rows, reader.window_size), (sample().len(), WINDOW));
        // Positions taken after the switch resume a reader whose maps fail as well.
        let open = |chunk_rows| -> BoxReader {
            MAPS_BEFORE_FAILING.set(Some(1));
            Box::new(
                TfRecordReader::open_with_window(path, RecordCompression::None, opts(chunk_rows, true), Some(40))
                    .unwrap(),
            )
        };
        let outcomes = check_resume(3, open);
        MAPS_BEFORE_FAILING.set(None);
        let rows = outcomes.iter().map(|o| match o {
            Outcome::Rows(chunk) => chunk.num_rows(),
            Outcome::Error(e) => panic!("{e}"),
        });
        assert_eq!(rows.sum::<usize>(), sample().len());
    }

    #[test]
    fn a_bad_data_checksum_names_file_and_offset_and_reading_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let mut bytes = unhex(HELLO_AND_EMPTY);
        bytes[14] ^= 0x20; // "hello" -> "heLlo"
        let mut file = bytes.clone();
        file.extend_from_slice(&unhex(HELLO_AND_EMPTY));
        std::fs::write(path, &file).unwrap();
        for map in [false, true] {
            let mut reader = TfRecordReader::open(path, RecordCompression::None, opts(10, map)).unwrap();
            let err = reader.next_chunk().unwrap_err();
            assert!(
                matches!(&err, Error::Data { location, .. } if location.source == path
                    && location.position.as_deref() == Some("record index 0 at byte 0")),
                "{err}"
            );
            assert!(err.to_string().contains("data's checksum"), "{err}");
            let rest = reader.next_chunk().unwrap().unwrap();
            assert_eq!(rest.num_rows(), 3, "the empty record, then hello and the empty record again");
            assert!(reader.next_chunk().unwrap().is_none());
        }
    }

    #[test]
    fn bad_data_checksums_anywhere_in_a_window_are_errors_in_their_place_and_resume_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let sample = sample();
        write(path, RecordCompression::None, &sample);
        // Where each record starts, by the framing's definition: a 12-byte header, the data,
        // a 4-byte checksum.
        let starts: Vec<usize> =
            sample.iter().scan(0, |at, r| Some(std::mem::replace(at, *at + 16 + r.len()))).collect();
        // The first record (empty), a run of three, one alone, the last two.
        let bad = [0, 5, 6, 7, 13, 38, 39];
        let mut bytes = std::fs::read(path).unwrap();
        for &i in &bad {
            bytes[starts[i] + 12 + sample[i].len()] ^= 1;
        }
        std::fs::write(path, &bytes).unwrap();
        let expected: Vec<std::result::Result<Vec<u8>, String>> = (0..sample.len())
            .map(|i| match bad.contains(&i) {
                true => Err(format!("record index {i} at byte {}", starts[i])),
                false => Ok(sample[i].clone()),
            })
            .collect();
        for (window, map) in [12, 13, 40, 301, 1 << 20].into_iter().flat_map(|w| [(w, false), (w, true)]) {
            for chunk_rows in [1, 3, 4, 7, 1000] {
                let read = opts(chunk_rows, map);
                let mut reader =
                    TfRecordReader::open_with_window(path, RecordCompression::None, read, Some(window)).unwrap();
                let mut got = vec![];
                loop {
                    match reader.next_chunk() {
                        Ok(Some(c)) => got.extend(c.column(0).as_binary_view().iter().map(|r| Ok(r.unwrap().to_vec()))),
                        Ok(None) => break,
                        Err(Error::Data { location, message }) if message.contains("data's checksum") => {
                            got.push(Err(location.position.unwrap_or_default()))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                assert!(got == expected, "window {window}, mapped {map}, chunks of {chunk_rows}: {got:?}");
            }
        }
        for (rows, map) in [(3, false), (4, true)] {
            let open = |rows| {
                Box::new(TfRecordReader::open(path, RecordCompression::None, opts(rows, map)).unwrap()) as BoxReader
            };
            let outcomes = check_resume(rows, open);
            assert_eq!(outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count(), bad.len(), "{outcomes:?}");
        }
    }

    /// Every record a reader of `path` gives before its first error, and that error.
    fn records_then_error(
        path: &str,
        compression: RecordCompression,
        chunk_rows: usize,
    ) -> (Vec<Vec<u8>>, Option<Error>) {
        let mut reader = TfRecordReader::open(path, compression, opts(chunk_rows, true)).unwrap();
        let mut got = vec![];
        loop {
            match reader.next_chunk() {
                Ok(Some(c)) => got.extend(c.column(0).as_binary_view().iter().map(|r| r.unwrap().to_vec())),
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    /// `records` framed as TFRecord, uncompressed.
    fn framed(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![];
        for r in records {
            let len = (r.len() as u64).to_le_bytes();
            out.extend_from_slice(&len);
            out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
            out.extend_from_slice(r);
            out.extend_from_slice(&masked_crc32c(r).to_le_bytes());
        }
        out
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_huge_length_in_a_compressed_file_is_an_error_after_the_records_before() {
        // A length of 2^60 with a valid checksum: the reader had allocated a window of that
        // size and aborted the process.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.tfrecord.gz");
        let path = path.to_str().unwrap();
        let good = vec![b"first".to_vec(), b"second".to_vec()];
        let mut bytes = framed(&good);
        let huge = (1u64 << 60).to_le_bytes();
        bytes.extend_from_slice(&huge);
        bytes.extend_from_slice(&masked_crc32c(&huge).to_le_bytes());
        bytes.extend_from_slice(&[7; 100]);
        std::fs::write(path, gzip(&bytes)).unwrap();
        for chunk_rows in [1, 1000] {
            let (got, error) = records_then_error(path, RecordCompression::Gzip, chunk_rows);
            assert_eq!(got, good);
            let error = error.expect("an error").to_string();
            assert!(error.contains(path) && error.contains("does not fit"), "{error}");
        }
    }

    #[test]
    fn a_cut_compressed_file_gives_every_complete_record_before_the_cut() {
        // The stream's failure had lost the window it was filling: 755 of 999 records came
        // out, and the error named neither record nor offset.
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<Vec<u8>> =
            (0..999u32).map(|i| format!("record {i} {}", "x".repeat((i % 300) as usize)).into_bytes()).collect();
        let whole = gzip(&framed(&records));
        for cut in [whole.len() / 3, whole.len() * 2 / 3, whole.len() - 9] {
            let path = dir.path().join(format!("cut-{cut}.tfrecord.gz"));
            let path = path.to_str().unwrap();
            std::fs::write(path, &whole[..cut]).unwrap();
            // What the cut stream still holds: the records wholly inside it.
            let mut prefix = vec![];
            let _ = MultiGzDecoder::new(&whole[..cut]).read_to_end(&mut prefix);
            let complete = (0..=records.len()).rev().find(|n| framed(&records[..*n]).len() <= prefix.len()).unwrap();
            for chunk_rows in [1, 7, 1000] {
                let (got, error) = records_then_error(path, RecordCompression::Gzip, chunk_rows);
                assert_eq!(got.len(), complete, "cut at {cut}, chunks of {chunk_rows}");
                assert_eq!(got, records[..complete]);
                let error = error.expect("the cut is an error").to_string();
                let at = format!("record index {complete} at byte {}", framed(&records[..complete]).len());
                assert!(error.contains(path) && error.contains(&at) && error.contains("GZIP stream fails"), "{error}");
            }
        }
    }

    #[test]
    fn a_bad_length_or_a_cut_file_ends_the_file_after_the_records_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let good = unhex(HELLO_AND_EMPTY);
        let second = 21; // where the empty record starts
        let mut bad_length = good.clone();
        bad_length[second] = 1;
        for (bytes, offset, why) in [
            (bad_length, second, "length's checksum"),
            (good[..second + 5].to_vec(), second, "inside a record header"),
            (good[..second - 2].to_vec(), 0, "inside a record of 5 bytes"),
        ] {
            std::fs::write(path, &bytes).unwrap();
            for (window, map) in [12, 20, WINDOW].into_iter().flat_map(|w| [(w, false), (w, true)]) {
                let read = opts(10, map);
                let mut reader =
                    TfRecordReader::open_with_window(path, RecordCompression::None, read, Some(window)).unwrap();
                let mut rows = 0;
                let err = loop {
                    match reader.next_chunk() {
                        Ok(Some(c)) => rows += c.num_rows(),
                        Ok(None) => panic!("{why}: no error"),
                        Err(e) => break e,
                    }
                };
                assert!(err.to_string().contains(why), "{err}");
                assert!(err.to_string().contains(&format!("at byte {offset}")), "{err}");
                assert_eq!(rows, usize::from(offset > 0), "{why}");
                assert!(reader.next_chunk().unwrap().is_none(), "{why}: the file ends");
            }
        }
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for compression in [RecordCompression::None, RecordCompression::Gzip] {
            let path = dir.path().join("a.tfrecord");
            let path = path.to_str().unwrap();
            write(path, compression, &sample()[..9]);
            for map in [false, true] {
                check_resume(2, |rows| Box::new(TfRecordReader::open(path, compression, opts(rows, map)).unwrap()));
            }
        }
        // With a bad record inside: resumes on both sides of it.
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let mut bytes = unhex(HELLO_AND_EMPTY);
        bytes[14] ^= 0x20;
        bytes.extend_from_slice(&unhex(HELLO_AND_EMPTY));
        std::fs::write(path, &bytes).unwrap();
        for map in [false, true] {
            let open = |rows| {
                Box::new(TfRecordReader::open(path, RecordCompression::None, opts(rows, map)).unwrap()) as BoxReader
            };
            let outcomes = check_resume(1, open);
            assert_eq!(outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count(), 1, "{outcomes:?}");
        }
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tfrecord");
        let path = path.to_str().unwrap();
        for map in [false, true] {
            std::fs::write(path, unhex(HELLO_AND_EMPTY)).unwrap();
            let open =
                || Box::new(TfRecordReader::open(path, RecordCompression::None, opts(1, map)).unwrap()) as BoxReader;
            let mut reader = open();
            reader.next_chunk().unwrap();
            let position = reader.position().unwrap();
            assert_eq!(position, serde_json::json!({"reader": "tfrecord", "len": 37, "offset": 21, "record": 2}));
            let text = serde_json::json!({"reader": "text", "len": 37, "offset": 21, "line": 2});
            assert!(seek_error(open, text).contains("not a position of a tfrecord reader"));
            std::fs::write(path, [unhex(HELLO_AND_EMPTY), unhex(HELLO_AND_EMPTY)].concat()).unwrap();
            assert!(seek_error(open, position).contains("it now has 74"));
        }
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.tfrecord").to_str().unwrap().to_string();
        for map in [false, true] {
            assert!(matches!(
                TfRecordReader::open(&path, RecordCompression::None, opts(1, map)),
                Err(Error::Io { .. })
            ));
        }
    }

    #[test]
    fn a_file_cut_while_mapped_is_an_error_after_the_records_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.tfrecord");
        let path = path.to_str().unwrap();
        // The sample cut to half, its windows ending inside records; and records of 100
        // framed bytes in windows of 200 cut to 350, so that the window that cannot be
        // mapped is the one a record's header starts (the third record, at byte 200).
        let even: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 84]).collect();
        let sample_len = 16 * 40 + sample().iter().map(Vec::len).sum::<usize>() as u64;
        for (records, window, cut) in [(sample(), 400, sample_len / 2), (even, 200, 350)] {
            write(path, RecordCompression::None, &records);
            let len = std::fs::metadata(path).unwrap().len();
            // Opened, then cut before anything is mapped: windows are mapped until one would
            // reach past the new end.
            let read = opts(1000, true);
            let mut reader =
                TfRecordReader::open_with_window(path, RecordCompression::None, read, Some(window)).unwrap();
            std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(cut).unwrap();
            let chunk = reader.next_chunk().unwrap().unwrap();
            let got: Vec<&[u8]> = chunk.column(0).as_binary_view().iter().map(|r| r.unwrap()).collect();
            let delivered = got.len();
            assert!(delivered > 0 && got == records[..delivered].iter().map(|r| r.as_slice()).collect::<Vec<_>>());
            let err = reader.next_chunk().unwrap_err();
            // The first record not delivered is where its window could not be mapped.
            let at: usize = records[..delivered].iter().map(|r| r.len() + 16).sum();
            let position = format!("record index {delivered} at byte {at}");
            assert!(
                matches!(&err, Error::Data { location, .. } if location.source == path
                    && location.position.as_deref() == Some(position.as_str())),
                "{err}"
            );
            let why = format!("cut to {cut} bytes while being read (it had {len})");
            assert!(err.to_string().contains(&why), "{err}");
            assert!(reader.next_chunk().unwrap().is_none(), "the file ends at the cut");
        }
    }
}

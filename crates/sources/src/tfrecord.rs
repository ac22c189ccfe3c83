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

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use arrow::array::BinaryBuilder;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flate2::read::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use flumen_ir::{Error, FileFormat, Location, RecordCompression, Result};
use serde::{Deserialize, Serialize};

use crate::position::{check_len, decode, encode, file_len};
use crate::reader::{ChunkReader, ReaderPosition};

/// The constant TFRecord adds to a rotated CRC32C (the "mask"), so that a checksum of data
/// that itself holds checksums does not look like one.
const MASK_DELTA: u32 = 0xa282_ead8;

/// A record's header: length and its checksum.
const HEADER: usize = 12;

/// TFRecord's masked CRC32C of `bytes`.
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The file's bytes, decompressed as `compression` says.
fn open_stream(path: &str, compression: RecordCompression) -> Result<(Box<dyn Read + Send>, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file_len(&file, path)?;
    let buffered = BufReader::with_capacity(1 << 16, file);
    let stream: Box<dyn Read + Send> = match compression {
        RecordCompression::None => Box::new(buffered),
        RecordCompression::Gzip => Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(buffered))),
        RecordCompression::Zlib => Box::new(BufReader::with_capacity(1 << 16, ZlibDecoder::new(buffered))),
    };
    Ok((stream, len))
}

/// Reads as many bytes as `buf` holds, or fewer at the end of the stream; the count read.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut read = 0;
    while read < buf.len() {
        match input.read(&mut buf[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(read)
}

/// Reads a TFRecord file as one element per record.
pub struct TfRecordReader {
    input: Box<dyn Read + Send>,
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
    data: Vec<u8>,
    /// A bad record's error, returned after the records before it, with whether the file
    /// ends there (its framing is lost) and the offset of the record after it.
    pending: Option<(Error, bool, u64)>,
    done: bool,
}

/// Where a [`TfRecordReader`] is: the offset of the next record in the decompressed stream
/// and its number (1-based), in a file of `len` bytes.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TfRecordPosition {
    len: u64,
    offset: u64,
    record: u64,
}

/// What reading one record gave.
enum Record {
    Data,
    End,
    /// A bad record; `true` when nothing after it can be framed.
    Bad(Error, bool),
}

impl TfRecordReader {
    /// Opens `path` to read its records in chunks of at most `chunk_rows` rows.
    pub fn open(path: &str, compression: RecordCompression, chunk_rows: usize) -> Result<Self> {
        let (input, len) = open_stream(path, compression)?;
        Ok(TfRecordReader {
            input,
            path: path.to_string(),
            compression,
            schema: FileFormat::TfRecord { compression }.output_spec()?.arrow_schema(),
            chunk_rows: chunk_rows.max(1),
            len,
            offset: 0,
            records: 0,
            data: Vec::new(),
            pending: None,
            done: false,
        })
    }

    fn error(&self, start: u64, what: String) -> Error {
        Error::data(Location::new(self.path.as_str(), format!("record {} at byte {start}", self.records)), what)
    }

    /// Reads the next record into `self.data`.
    fn read_record(&mut self) -> Result<Record> {
        let start = self.offset;
        let mut header = [0u8; HEADER];
        let got = read_full(&mut self.input, &mut header).map_err(|e| Error::io(self.path.as_str(), e))?;
        if got == 0 {
            return Ok(Record::End);
        }
        self.records += 1;
        if got < HEADER {
            let why = format!("the file ends inside a record header ({got} of {HEADER} bytes)");
            return Ok(Record::Bad(self.error(start, why), true));
        }
        let length_bytes: [u8; 8] = header[..8].try_into().expect("8 bytes");
        let stored = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if masked_crc32c(&length_bytes) != stored {
            return Ok(Record::Bad(self.error(start, "the length's checksum does not match".into()), true));
        }
        let length = u64::from_le_bytes(length_bytes);
        // A length beyond what an uncompressed file holds is a corrupt length, not a record.
        let limit = if self.compression == RecordCompression::None { self.len } else { u64::MAX };
        let size = usize::try_from(length).ok().filter(|_| start + HEADER as u64 + length <= limit);
        let Some(size) = size else {
            let why = format!("a record of {length} bytes does not fit in the file");
            return Ok(Record::Bad(self.error(start, why), true));
        };
        self.data.resize(size + 4, 0);
        let got = read_full(&mut self.input, &mut self.data).map_err(|e| Error::io(self.path.as_str(), e))?;
        if got < size + 4 {
            let why = format!("the file ends inside a record of {length} bytes");
            return Ok(Record::Bad(self.error(start, why), true));
        }
        self.offset = start + (HEADER + size + 4) as u64;
        let stored = u32::from_le_bytes(self.data[size..].try_into().expect("4 bytes"));
        self.data.truncate(size);
        if masked_crc32c(&self.data) != stored {
            return Ok(Record::Bad(self.error(start, "the data's checksum does not match".into()), false));
        }
        Ok(Record::Data)
    }
}

impl ChunkReader for TfRecordReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some((e, ends, _)) = self.pending.take() {
            self.done = ends;
            return Err(e);
        }
        let mut builder = BinaryBuilder::with_capacity(self.chunk_rows.min(1024), 0);
        let mut rows = 0;
        while !self.done && rows < self.chunk_rows {
            let record = self.read_record().inspect_err(|_| self.done = true)?;
            match record {
                Record::Data => {
                    builder.append_value(&self.data);
                    rows += 1;
                }
                Record::End => self.done = true,
                Record::Bad(error, ends) => {
                    if rows == 0 {
                        self.done = ends;
                        return Err(error);
                    }
                    self.pending = Some((error, ends, self.offset));
                    break;
                }
            }
        }
        if rows == 0 {
            return Ok(None);
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), vec![Arc::new(builder.finish())])?))
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (offset, record) = match &self.pending {
            // The record after a bad one whose framing held; nothing after one whose did not.
            Some((_, false, next)) => (*next, self.records + 1),
            Some((_, true, _)) => (u64::MAX, self.records + 1),
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
        let (mut input, _) = open_stream(&self.path, self.compression)?;
        let skipped = match self.compression {
            RecordCompression::None => {
                // The stream is the file: seek it rather than read up to the offset.
                let mut file = File::open(&self.path).map_err(|e| Error::io(self.path.as_str(), e))?;
                file.seek(SeekFrom::Start(at.offset)).map_err(|e| Error::io(self.path.as_str(), e))?;
                input = Box::new(BufReader::with_capacity(1 << 16, file));
                at.offset.min(self.len)
            }
            _ => std::io::copy(&mut (&mut input).take(at.offset), &mut std::io::sink())
                .map_err(|e| Error::io(self.path.as_str(), e))?,
        };
        if skipped != at.offset {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in {}, whose records end at byte {skipped}", self.path),
            ));
        }
        self.input = input;
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

    /// The file of records `hello` and `` (empty), framed by an independent implementation
    /// of TFRecord's format (a bitwise CRC32C in Python, checked against CRC-32C's check
    /// value for "123456789").
    const HELLO_AND_EMPTY: &str = "0500000000000000eab2043e68656c6c6fbb1f1c19000000000000000029039807d8ea82a2";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn records(path: &str, compression: RecordCompression, chunk_rows: usize) -> Result<Vec<Vec<u8>>> {
        let mut reader = TfRecordReader::open(path, compression, chunk_rows)?;
        let mut out = vec![];
        while let Some(chunk) = reader.next_chunk()? {
            assert!(chunk.num_rows() <= chunk_rows);
            assert_eq!(chunk.schema(), reader.schema);
            out.extend(chunk.column(0).as_binary::<i32>().iter().map(|r| r.unwrap().to_vec()));
        }
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
    fn a_bad_data_checksum_names_file_and_offset_and_reading_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let mut bytes = unhex(HELLO_AND_EMPTY);
        bytes[14] ^= 0x20; // "hello" -> "heLlo"
        let mut file = bytes.clone();
        file.extend_from_slice(&unhex(HELLO_AND_EMPTY));
        std::fs::write(path, &file).unwrap();
        let mut reader = TfRecordReader::open(path, RecordCompression::None, 10).unwrap();
        let err = reader.next_chunk().unwrap_err();
        assert!(
            matches!(&err, Error::Data { location, .. } if location.source == path
                && location.position.as_deref() == Some("record 1 at byte 0")),
            "{err}"
        );
        assert!(err.to_string().contains("data's checksum"), "{err}");
        let rest = reader.next_chunk().unwrap().unwrap();
        assert_eq!(rest.num_rows(), 3, "the empty record, then hello and the empty record again");
        assert!(reader.next_chunk().unwrap().is_none());
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
            let mut reader = TfRecordReader::open(path, RecordCompression::None, 10).unwrap();
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

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for compression in [RecordCompression::None, RecordCompression::Gzip] {
            let path = dir.path().join("a.tfrecord");
            let path = path.to_str().unwrap();
            write(path, compression, &sample()[..9]);
            check_resume(2, |rows| Box::new(TfRecordReader::open(path, compression, rows).unwrap()));
        }
        // With a bad record inside: resumes on both sides of it.
        let path = dir.path().join("bad.tfrecord");
        let path = path.to_str().unwrap();
        let mut bytes = unhex(HELLO_AND_EMPTY);
        bytes[14] ^= 0x20;
        bytes.extend_from_slice(&unhex(HELLO_AND_EMPTY));
        std::fs::write(path, &bytes).unwrap();
        let outcomes =
            check_resume(1, |rows| Box::new(TfRecordReader::open(path, RecordCompression::None, rows).unwrap()));
        assert_eq!(outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count(), 1, "{outcomes:?}");
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tfrecord");
        let path = path.to_str().unwrap();
        std::fs::write(path, unhex(HELLO_AND_EMPTY)).unwrap();
        let open = || Box::new(TfRecordReader::open(path, RecordCompression::None, 1).unwrap()) as BoxReader;
        let mut reader = open();
        reader.next_chunk().unwrap();
        let position = reader.position().unwrap();
        assert_eq!(position, serde_json::json!({"reader": "tfrecord", "len": 37, "offset": 21, "record": 2}));
        let text = serde_json::json!({"reader": "text", "len": 37, "offset": 21, "line": 2});
        assert!(seek_error(open, text).contains("not a position of a tfrecord reader"));
        std::fs::write(path, [unhex(HELLO_AND_EMPTY), unhex(HELLO_AND_EMPTY)].concat()).unwrap();
        assert!(seek_error(open, position).contains("it now has 74"));
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.tfrecord").to_str().unwrap().to_string();
        assert!(matches!(TfRecordReader::open(&path, RecordCompression::None, 1), Err(Error::Io { .. })));
    }
}

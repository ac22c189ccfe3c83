//! CSV files: schema inference when a dataset is built, and a projecting reader.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::{cast, concat_batches};
use arrow::csv::reader::{Decoder, Format};
use arrow::csv::ReaderBuilder;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use flumen_ir::{CsvFormat, DType, ElementSpec, Error, FieldSpec, FileFormat, Location, Result};
use serde::{Deserialize, Serialize};

use crate::conform::with_schema;
use crate::position::{check_len, cut_error, decode, encode, file_len, HeldError};
use crate::reader::{ChunkReader, ReaderPosition};

/// How many records schema inference looks at.
pub const INFER_RECORDS: usize = 1000;

/// The format of the CSV file `path`: its columns, named by the header (or `column_1`,
/// `column_2`, ... without one), typed from the first [`INFER_RECORDS`] records as bool,
/// int64, float64 or string (dates, timestamps and columns of empty values are strings).
pub fn infer_csv(path: &str, header: bool, delimiter: char) -> Result<CsvFormat> {
    let byte = delimiter_byte(delimiter)?;
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let format = Format::default().with_header(header).with_delimiter(byte);
    let (schema, _) = format.infer_schema(BufReader::new(file), Some(INFER_RECORDS)).map_err(|e| match e {
        ArrowError::IoError(_, e) => Error::io(path, e),
        other => {
            let message = other.to_string();
            let location = match find_line(&message, "at line ", true) {
                Some((line, _)) => Location::new(path, format!("line {line}")),
                None => Location::source(path),
            };
            Error::data(location, message)
        }
    })?;
    if schema.fields().is_empty() {
        return Err(Error::data(Location::source(path), "the file is empty: no columns to infer"));
    }
    let fields = schema
        .fields()
        .iter()
        .map(|f| {
            let dtype = match f.data_type() {
                DataType::Boolean => DType::Bool,
                DataType::Int64 => DType::Int64,
                DataType::Float64 => DType::Float64,
                _ => DType::Utf8,
            };
            FieldSpec::scalar(f.name().as_str(), dtype)
        })
        .collect();
    let schema = ElementSpec::new(fields).map_err(|e| {
        let location = if header { Location::new(path, "line 1") } else { Location::source(path) };
        Error::data(location, format!("cannot use the header: {}", plan_message(e)))
    })?;
    Ok(CsvFormat { schema, header, delimiter, columns: None })
}

/// Reads the projected columns of a CSV file in chunks.
///
/// Chunks are decoded by arrow-csv's [`Decoder`], `chunk_rows` records at a time. When a chunk
/// fails (a bad record somewhere in it), its records are read again one at a time: the good
/// ones are delivered, each bad one is an error at its line, and reading goes on after them.
/// (arrow-csv's own `Reader` cannot go on after an error: it repeats an invalid UTF-8 error
/// forever, re-reads the bytes of a record with the wrong number of fields, and drops the
/// whole batch of a value that does not parse.)
///
/// Between two calls the reader stands at a record boundary (a bad record found after good
/// rows is left unread until the next call), so its position is a byte offset with the line
/// there, and a seek does not read what comes before.
pub struct CsvReader {
    reader: BufReader<File>,
    /// The decoder of the fast path, reading from byte `pos`.
    decoder: Decoder,
    path: String,
    delimiter: u8,
    /// The schema of the columns as read (binary columns as strings), and the projection.
    read_schema: SchemaRef,
    projection: Vec<usize>,
    chunk_rows: usize,
    /// The output schema.
    schema: SchemaRef,
    /// The output columns that are read as strings and cast to binary.
    binary: Vec<bool>,
    /// The length of the file when it was opened.
    len: u64,
    /// The bytes of the file consumed so far.
    pos: u64,
    /// Where the chunk being decoded starts, and the line there.
    chunk_start: u64,
    chunk_line: usize,
    /// Whether the header is still to be read.
    header: bool,
    /// The scan of records and lines. Its line is the line at `pos`, kept by counting newlines
    /// on the fast path, where the rest of its state is that of a record boundary.
    scan: RecordScan,
    /// The records of a failed chunk being read again one at a time.
    retry: Option<Retry>,
    /// Why the file cannot be read past `pos` (a read error, or the file is shorter than when
    /// it was opened): returned after the complete records before it, and then the end.
    ended: Option<Error>,
    done: bool,
}

/// Where a [`CsvReader`] is, in a file of `len` bytes: at the record boundary `offset`, on
/// line `line`, before the header when `header`, and, inside a failed chunk read one record at
/// a time, that chunk's rest.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CsvPosition {
    len: u64,
    offset: u64,
    line: usize,
    header: bool,
    retry: Option<RetryPosition>,
}

/// The rest of a failed chunk: its data records left, and the chunk's error when no record
/// has failed on its own yet.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryPosition {
    left: usize,
    error: Option<HeldError>,
}

/// The records of a failed chunk still to be read one at a time.
struct Retry {
    /// Whether the header is among them.
    header: bool,
    /// How many data records are left.
    left: usize,
    /// The chunk's error, reported if no record fails on its own.
    error: Option<Error>,
}

/// Why the fast path failed.
enum ReadError {
    /// The file cannot be read further.
    Ended(Error),
    Decode(ArrowError),
}

impl CsvReader {
    /// Opens `path` to read the columns `format.columns` (all when absent, in the given order)
    /// in chunks of at most `chunk_rows` rows.
    ///
    /// A row with the wrong number of fields, a value that does not parse as its column's
    /// type and invalid UTF-8 are [`Error::Data`] at `line N` of the file (1-based, counting
    /// the header). Values of columns that are not projected are not parsed. After such an
    /// error, [`next_chunk`](ChunkReader::next_chunk) goes on with the next record: every good
    /// record is read once, in order, and each bad one is one error in its place.
    pub fn open(path: &str, format: &CsvFormat, chunk_rows: usize) -> Result<Self> {
        let spec = FileFormat::Csv(format.clone()).output_spec()?;
        let delimiter = delimiter_byte(format.delimiter)?;
        // arrow-csv does not parse binary: such columns are read as strings.
        let read_fields: Vec<_> = format
            .schema
            .fields
            .iter()
            .map(|f| if f.dtype == DType::Binary { FieldSpec { dtype: DType::Utf8, ..f.clone() } } else { f.clone() })
            .map(|f| f.arrow_field())
            .collect();
        let projection = spec
            .fields
            .iter()
            .map(|f| {
                format
                    .schema
                    .index_of(&f.name)
                    .ok_or_else(|| Error::plan("csv", format!("unknown column '{}'", f.name)))
            })
            .collect::<Result<Vec<_>>>()?;
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file_len(&file, path)?;
        // tf.data's CsvDataset refuses it too ("can't read header"): a file that was to start
        // with a header and has nothing is not an empty table.
        if format.header && len == 0 {
            return Err(Error::data(Location::new(path, "line 1"), "the file is empty: it has no header line"));
        }
        let read_schema = Arc::new(Schema::new(read_fields));
        let chunk_rows = chunk_rows.max(1);
        let decoder = decoder(&read_schema, delimiter, &projection, format.header, chunk_rows);
        Ok(CsvReader {
            reader: BufReader::new(file),
            decoder,
            path: path.to_string(),
            delimiter,
            read_schema,
            projection,
            chunk_rows,
            binary: spec.fields.iter().map(|f| f.dtype == DType::Binary).collect(),
            schema: spec.arrow_schema(),
            len,
            pos: 0,
            chunk_start: 0,
            chunk_line: 1,
            header: format.header,
            scan: RecordScan::new(delimiter, 1),
            retry: None,
            ended: None,
            done: false,
        })
    }

    /// The error for `e`, about the record that starts on line `line` of the file (the
    /// location of the file when unknown).
    fn error(&self, e: ArrowError, line: Option<usize>) -> Error {
        let path = self.path.as_str();
        let message = e.to_string();
        // arrow-csv counts records from the start of what it decodes: a value that does not
        // parse names its record 0-based, a record-level error 1-based.
        let (description, mention) = match e {
            ArrowError::IoError(_, e) => return Error::io(path, e),
            ArrowError::ParseError(m) => {
                let mention = find_line(m.split(". Row data: '").next().unwrap_or(&m), "at line ", true);
                (m, mention)
            }
            ArrowError::CsvError(m) => {
                let mention = find_line(&m, "for line ", false);
                (m, mention)
            }
            _ => (String::new(), None),
        };
        let Some(line) = line else {
            return Error::data(Location::source(path), message);
        };
        let location = Location::new(path, format!("line {line}"));
        let Some((_, digits)) = mention else {
            return Error::data(location, message);
        };
        // The message with arrow-csv's record number replaced by the line number.
        let prefix = &message[..message.len() - description.len()];
        let message = format!("{prefix}{}{line}{}", &description[..digits.start], &description[digits.end..]);
        Error::data(location, message)
    }

    /// The next batch of the fast path: up to `chunk_rows` records from byte `pos`. This is
    /// arrow-csv's `Reader`, keeping count of the bytes consumed.
    fn read_batch(&mut self) -> std::result::Result<Option<RecordBatch>, ReadError> {
        loop {
            let buf = self.reader.fill_buf().map_err(|e| ReadError::Ended(Error::io(self.path.as_str(), e)))?;
            if buf.is_empty() && self.pos < self.len {
                // Decoding on would end the cut record as if it were complete.
                return Err(ReadError::Ended(cut_error(&self.path, self.pos, self.len)));
            }
            let decoded = self.decoder.decode(buf).map_err(ReadError::Decode)?;
            self.scan.line += buf[..decoded].iter().filter(|&&b| b == b'\n').count();
            self.reader.consume(decoded);
            self.pos += decoded as u64;
            if decoded == 0 || self.decoder.capacity() == 0 {
                break;
            }
        }
        self.decoder.flush().map_err(ReadError::Decode)
    }

    /// Goes back to the start of the chunk that failed with `e`, to read its records again
    /// one at a time.
    fn start_retry(&mut self, e: ArrowError) -> Result<()> {
        let error = self.error(e, None);
        self.move_to(self.chunk_start, self.chunk_line)?;
        self.retry = Some(Retry { header: self.header, left: self.chunk_rows, error: Some(error) });
        self.header = false;
        Ok(())
    }

    /// Moves to the record boundary `offset`, on line `line`.
    fn move_to(&mut self, offset: u64, line: usize) -> Result<()> {
        self.reader.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(self.path.as_str(), e))?;
        self.pos = offset;
        self.scan = RecordScan::new(self.delimiter, line);
        Ok(())
    }

    /// The bytes of the next record (its terminator included) and the line it starts on;
    /// `None` at the end of the file, or where it cannot be read further (`ended` says why).
    fn next_record(&mut self) -> Result<Option<(Vec<u8>, usize)>> {
        let mut record = Vec::new();
        let mut line = 0;
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) => {
                    self.ended = Some(Error::io(self.path.as_str(), e));
                    return Ok(None);
                }
            };
            if buf.is_empty() {
                if self.pos < self.len {
                    // The file was cut: what was read of this record is not a record.
                    self.ended = Some(cut_error(&self.path, self.pos, self.len));
                    return Ok(None);
                }
                break;
            }
            let mut used = 0;
            let mut end = false;
            for &b in buf {
                used += 1;
                match self.scan.step(b) {
                    Step::Blank => {}
                    Step::Start(at) => {
                        line = at;
                        record.push(b);
                    }
                    Step::Inside => record.push(b),
                    Step::End => {
                        record.push(b);
                        end = true;
                        break;
                    }
                }
            }
            self.reader.consume(used);
            self.pos += used as u64;
            if end {
                break;
            }
        }
        Ok((!record.is_empty()).then_some((record, line)))
    }

    /// `record` (the header when `header`) decoded on its own: its row, or `None` for the
    /// header.
    fn decode_record(&self, record: &[u8], header: bool) -> std::result::Result<Option<RecordBatch>, ArrowError> {
        // Room for two records, so that a record with a few extra fields is reported with
        // their count, as in a chunk.
        let mut decoder = decoder(&self.read_schema, self.delimiter, &self.projection, header, 2);
        let mut rest = record;
        loop {
            // The last call, with no bytes, marks the end of the input.
            let n = decoder.decode(rest)?;
            rest = &rest[n..];
            if n == 0 {
                break;
            }
        }
        decoder.flush()
    }

    /// Reads records of the failed chunk one at a time: the good rows up to the next bad
    /// record (left unread, to fail on the next call) or the end of the chunk; or the bad
    /// record's error when it comes first. `Ok(None)` when there are no such rows and no error
    /// (the chunk is done).
    fn retry_rows(&mut self) -> Result<Option<RecordBatch>> {
        let Some(mut retry) = self.retry.take() else { return Ok(None) };
        let mut rows = Vec::new();
        let mut bad = None;
        while retry.header || retry.left > 0 {
            let (offset, line) = (self.pos, self.scan.line);
            let Some((record, at)) = self.next_record()? else {
                retry.header = false;
                retry.left = 0;
                break;
            };
            let decoded = self.decode_record(&record, retry.header);
            if decoded.is_err() && !rows.is_empty() {
                // The rows come first. Leaving the bad record unread (it fails again on the
                // next call) keeps the reader at a record boundary between calls.
                self.move_to(offset, line)?;
                break;
            }
            if !std::mem::take(&mut retry.header) {
                retry.left -= 1;
            }
            match decoded {
                Ok(Some(row)) if row.num_rows() > 0 => rows.push(row),
                Ok(_) => {}
                Err(e) => {
                    retry.error = None;
                    bad = Some(self.error(e, Some(at)));
                    break;
                }
            }
        }
        let chunk_done = !retry.header && retry.left == 0;
        if chunk_done && rows.is_empty() {
            // The chunk's error when no record failed on its own; after rows, it waits in
            // `retry` for the next call.
            bad = bad.or(retry.error.take());
        }
        if chunk_done && retry.error.is_none() {
            // The fast path goes on after the chunk.
            self.decoder = decoder(&self.read_schema, self.delimiter, &self.projection, false, self.chunk_rows);
        } else {
            self.retry = Some(retry);
        }
        if let Some(e) = bad {
            return Err(e);
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let schema = rows[0].schema();
        let batch = concat_batches(&schema, &rows).map_err(|e| self.error(e, None))?;
        self.output(batch).map(Some)
    }

    /// `batch`, as decoded, in the output schema.
    fn output(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let columns = batch
            .columns()
            .iter()
            .zip(&self.binary)
            .map(|(c, &binary)| if binary { cast(c, &DataType::Binary) } else { Ok(c.clone()) })
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()
            .map_err(|e| Error::data(Location::source(self.path.as_str()), e.to_string()))?;
        with_schema(self.schema.clone(), columns, batch.num_rows())
    }

    fn step(&mut self) -> Result<Option<RecordBatch>> {
        while !self.done {
            if self.retry.is_some() {
                match self.retry_rows()? {
                    Some(chunk) => return Ok(Some(chunk)),
                    None => continue,
                }
            }
            if let Some(e) = self.ended.take() {
                self.done = true;
                return Err(e);
            }
            (self.chunk_start, self.chunk_line) = (self.pos, self.scan.line);
            match self.read_batch() {
                Ok(None) => break,
                Ok(Some(batch)) => {
                    self.header = false;
                    if batch.num_rows() > 0 {
                        return self.output(batch).map(Some);
                    }
                }
                Err(ReadError::Ended(e)) if self.pos == self.chunk_start => {
                    self.done = true;
                    return Err(e);
                }
                Err(ReadError::Ended(e)) => {
                    // The chunk's complete records come out one at a time, then `e`.
                    self.move_to(self.chunk_start, self.chunk_line)?;
                    self.retry = Some(Retry { header: self.header, left: self.chunk_rows, error: None });
                    self.header = false;
                    self.ended = Some(e);
                }
                Err(ReadError::Decode(e)) => self.start_retry(e)?,
            }
        }
        self.done = true;
        Ok(None)
    }
}

impl ChunkReader for CsvReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.step();
        // A file that cannot be read (rather than a bad record) ends the reader.
        if matches!(next, Err(Error::Io { .. })) {
            self.done = true;
            self.retry = None;
        }
        next
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (len, offset, line) = (self.len, self.pos, self.scan.line);
        let position = match &self.retry {
            // A reader that has ended (also on a read error) reads nothing more.
            _ if self.done => CsvPosition { len, offset: len, line, header: false, retry: None },
            Some(retry) => {
                let error = retry.error.as_ref().map(HeldError::save).transpose()?;
                let rest = RetryPosition { left: retry.left, error };
                CsvPosition { len, offset, line, header: retry.header, retry: Some(rest) }
            }
            None => CsvPosition { len, offset, line, header: self.header, retry: None },
        };
        encode("csv", &position)
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: CsvPosition = decode("csv", position)?;
        check_len(&self.path, at.len, self.len)?;
        // The header is the first record: a position before it is at the start.
        if at.offset > self.len || at.line == 0 || (at.header && at.offset != 0) {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in {}, a file of {} bytes", self.path, self.len),
            ));
        }
        self.move_to(at.offset, at.line)?;
        self.done = false;
        self.ended = None;
        self.retry = at.retry.map(|rest| Retry {
            header: at.header,
            left: rest.left,
            error: rest.error.map(|e| e.restore(&self.path)),
        });
        self.header = at.header && self.retry.is_none();
        self.decoder = decoder(&self.read_schema, self.delimiter, &self.projection, self.header, self.chunk_rows);
        Ok(())
    }
}

/// A decoder of the records of `schema` (delimited by `delimiter`, the first one a header
/// when `header`) that reads the `projection` columns in batches of `batch_rows` rows.
fn decoder(schema: &SchemaRef, delimiter: u8, projection: &[usize], header: bool, batch_rows: usize) -> Decoder {
    ReaderBuilder::new(schema.clone())
        .with_header(header)
        .with_delimiter(delimiter)
        .with_batch_size(batch_rows)
        .with_projection(projection.to_vec())
        .build_decoder()
}

/// The delimiter as a byte; it must be ASCII.
fn delimiter_byte(delimiter: char) -> Result<u8> {
    u8::try_from(delimiter)
        .ok()
        .filter(u8::is_ascii)
        .ok_or_else(|| Error::plan("csv", format!("the delimiter must be an ASCII character, not {delimiter:?}")))
}

/// The message of an invalid-plan error, without its prefix.
fn plan_message(e: Error) -> String {
    match e {
        Error::Plan { message, .. } => message,
        other => other.to_string(),
    }
}

/// The number after the first (or, with `last`, the last) `marker` in `text` that is followed
/// by digits, and the byte range of those digits.
fn find_line(text: &str, marker: &str, last: bool) -> Option<(usize, std::ops::Range<usize>)> {
    let mut starts: Vec<usize> = text.match_indices(marker).map(|(i, _)| i + marker.len()).collect();
    if last {
        starts.reverse();
    }
    starts.into_iter().find_map(|start| {
        let digits = text[start..].bytes().take_while(u8::is_ascii_digit).count();
        let range = start..start + digits;
        text[range.clone()].parse().ok().map(|n| (n, range))
    })
}

/// What a byte is to [`RecordScan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Part of an empty line between records.
    Blank,
    /// The first byte of a record, which starts on this line (1-based).
    Start(usize),
    /// A byte of a record.
    Inside,
    /// The terminator of a record (`\n` or `\r` outside quotes).
    End,
}

/// A scan of a CSV file for its records and the lines they start on, following the CSV rules
/// of arrow-csv's parser: empty lines are skipped, quoted fields may span lines (a quote
/// starts a quoted field only at the start of a field) and `""` in a quoted field is a quote.
struct RecordScan {
    delimiter: u8,
    line: usize,
    at_record_start: bool,
    at_field_start: bool,
    quoted: bool,
    /// A quote inside a quoted field: an escaped quote if another follows, else the end.
    quote_pending: bool,
}

impl RecordScan {
    /// A scan from a record boundary on line `line` (1 at the start of the file).
    fn new(delimiter: u8, line: usize) -> Self {
        RecordScan { delimiter, line, at_record_start: true, at_field_start: true, quoted: false, quote_pending: false }
    }

    /// Consumes the next byte of the file, `b`.
    fn step(&mut self, b: u8) -> Step {
        if self.quoted {
            if !self.quote_pending {
                match b {
                    b'"' => self.quote_pending = true,
                    b'\n' => self.line += 1,
                    _ => {}
                }
                return Step::Inside;
            }
            self.quote_pending = false;
            if b == b'"' {
                return Step::Inside;
            }
            self.quoted = false;
        }
        let mut step = Step::Inside;
        if self.at_record_start {
            match b {
                b'\n' => {
                    self.line += 1;
                    return Step::Blank;
                }
                b'\r' => return Step::Blank,
                _ => {
                    self.at_record_start = false;
                    self.at_field_start = true;
                    step = Step::Start(self.line);
                }
            }
        }
        match b {
            b'\n' | b'\r' => {
                self.line += usize::from(b == b'\n');
                self.at_record_start = true;
                return Step::End;
            }
            _ if b == self.delimiter => self.at_field_start = true,
            b'"' if self.at_field_start => {
                self.quoted = true;
                self.at_field_start = false;
            }
            _ => self.at_field_start = false,
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int64Type};

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let path = dir.path().join(name);
        fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }

    fn read_all(path: &str, format: &CsvFormat, chunk_rows: usize) -> Result<Vec<RecordBatch>> {
        let mut reader = CsvReader::open(path, format, chunk_rows)?;
        let mut chunks = vec![];
        while let Some(chunk) = reader.next_chunk()? {
            assert!(chunk.num_rows() > 0 && chunk.num_rows() <= chunk_rows);
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    fn ints(chunks: &[RecordBatch], column: usize) -> Vec<i64> {
        chunks.iter().flat_map(|c| c.column(column).as_primitive::<Int64Type>().values().to_vec()).collect()
    }

    #[test]
    fn a_file_cut_while_read_is_an_error_after_its_complete_records() {
        // The cut record's first bytes came out as a record (`1500,7` of `1500,750.5`).
        let dir = tempfile::tempdir().unwrap();
        let body: String = std::iter::once("id,half\n".to_string())
            .chain((0..3000).map(|i| format!("{i:04},{:06.1}\n", i as f64 / 2.0)))
            .collect();
        let path = write(&dir, "cut.csv", &body);
        let format = infer_csv(&path, true, ',').unwrap();
        for chunk_rows in [1, 100, 1000] {
            fs::write(&path, &body).unwrap();
            let mut reader = CsvReader::open(&path, &format, chunk_rows).unwrap();
            let mut chunks = vec![reader.next_chunk().unwrap().unwrap()];
            // The header and 1,500 records of 12 bytes, then 6 bytes of the next.
            fs::File::options().write(true).open(&path).unwrap().set_len(8 + 1500 * 12 + 6).unwrap();
            let err = loop {
                match reader.next_chunk() {
                    Ok(Some(chunk)) => chunks.push(chunk),
                    Ok(None) => panic!("no error after {} rows", chunks.iter().map(|c| c.num_rows()).sum::<usize>()),
                    Err(e) => break e,
                }
            };
            assert_eq!(ints(&chunks, 0), (0..1500).collect::<Vec<i64>>(), "chunks of {chunk_rows}");
            assert!(err.to_string().contains(&format!("{path} at byte {}", 8 + 1500 * 12 + 6)), "{err}");
            assert!(reader.next_chunk().unwrap().is_none());
        }
    }

    fn strings(chunks: &[RecordBatch], column: usize) -> Vec<Option<String>> {
        chunks
            .iter()
            .flat_map(|c| c.column(column).as_string::<i32>().iter().map(|s| s.map(str::to_string)).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn infers_and_reads_with_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "a.csv",
            "id,score,name,ok,when\n1,0.5,ann,true,2024-01-02\n2,1,bob,false,2024-01-03\n3,-2.25,,TRUE,\n",
        );
        let format = infer_csv(&path, true, ',').unwrap();
        let expected = ElementSpec::new(vec![
            FieldSpec::scalar("id", DType::Int64),
            FieldSpec::scalar("score", DType::Float64),
            FieldSpec::scalar("name", DType::Utf8),
            FieldSpec::scalar("ok", DType::Bool),
            FieldSpec::scalar("when", DType::Utf8),
        ])
        .unwrap();
        assert_eq!(format, CsvFormat { schema: expected.clone(), header: true, delimiter: ',', columns: None });
        let chunks = read_all(&path, &format, 2).unwrap();
        assert_eq!(chunks.iter().map(|c| c.num_rows()).collect::<Vec<_>>(), vec![2, 1]);
        for c in &chunks {
            assert_eq!(c.schema(), expected.arrow_schema());
        }
        assert_eq!(ints(&chunks, 0), vec![1, 2, 3]);
        let scores: Vec<f64> =
            chunks.iter().flat_map(|c| c.column(1).as_primitive::<Float64Type>().values().to_vec()).collect();
        assert_eq!(scores, vec![0.5, 1.0, -2.25]);
        assert_eq!(strings(&chunks, 2), vec![Some("ann".into()), Some("bob".into()), None]);
        let oks: Vec<Option<bool>> =
            chunks.iter().flat_map(|c| c.column(3).as_boolean().iter().collect::<Vec<_>>()).collect();
        assert_eq!(oks, vec![Some(true), Some(false), Some(true)]);
        assert_eq!(strings(&chunks, 4), vec![Some("2024-01-02".into()), Some("2024-01-03".into()), None]);
    }

    #[test]
    fn infers_and_reads_without_header_and_with_a_custom_delimiter() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.tsv", "10|x\n20|y\n30|z");
        let format = infer_csv(&path, false, '|').unwrap();
        assert_eq!(format.schema.field_names(), vec!["column_1", "column_2"]);
        assert_eq!(format.schema.fields[0].dtype, DType::Int64);
        assert_eq!(format.schema.fields[1].dtype, DType::Utf8);
        let chunks = read_all(&path, &format, 8192).unwrap();
        assert_eq!(ints(&chunks, 0), vec![10, 20, 30]);
        assert_eq!(strings(&chunks, 1), vec![Some("x".into()), Some("y".into()), Some("z".into())]);
    }

    #[test]
    fn reads_a_given_schema_with_narrow_and_binary_types() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "1;ab;1.5\n2;cd;2.5\n");
        let schema = ElementSpec::new(vec![
            FieldSpec::scalar("a", DType::Int32),
            FieldSpec::scalar("b", DType::Binary),
            FieldSpec::scalar("c", DType::Float32),
        ])
        .unwrap();
        let format = CsvFormat { schema: schema.clone(), header: false, delimiter: ';', columns: None };
        let chunks = read_all(&path, &format, 10).unwrap();
        assert_eq!(chunks[0].schema(), schema.arrow_schema());
        assert_eq!(chunks[0].column(1).as_binary::<i32>().value(1), b"cd");
    }

    #[test]
    fn projection_reads_only_the_requested_columns_in_order() {
        let dir = tempfile::tempdir().unwrap();
        // Column b does not parse as int64 in row 2, but it is not read.
        let path = write(&dir, "a.csv", "a,b,c\n1,2,x\n3,oops,y\n");
        let mut format = infer_csv(&path, true, ',').unwrap();
        format.schema.fields[1].dtype = DType::Int64;
        format.columns = Some(vec!["c".into(), "a".into()]);
        let chunks = read_all(&path, &format, 8192).unwrap();
        assert_eq!(chunks[0].schema(), FileFormat::Csv(format.clone()).output_spec().unwrap().arrow_schema());
        assert_eq!(chunks[0].schema().field(0).name(), "c");
        assert_eq!(strings(&chunks, 0), vec![Some("x".into()), Some("y".into())]);
        assert_eq!(ints(&chunks, 1), vec![1, 3]);
        format.columns = Some(vec!["b".into()]);
        let err = read_all(&path, &format, 8192).unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    fn expect_data_error(err: Error, path: &str, line: usize) {
        let text = err.to_string();
        match &err {
            Error::Data { location, .. } => {
                assert_eq!(location.source, path);
                assert_eq!(location.position.as_deref(), Some(format!("line {line}").as_str()), "{text}");
            }
            other => panic!("expected a data error, got {other}"),
        }
        assert!(text.contains(path) && text.contains(&format!("line {line}")), "{text}");
    }

    #[test]
    fn wrong_field_count_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        // Line 1 is the header; line 6 has two fields.
        let path = write(&dir, "a.csv", "a,b,c\n1,2,3\n4,5,6\n7,8,9\n10,11,12\n13,14\n");
        let format = infer_csv(&write(&dir, "good.csv", "a,b,c\n1,2,3\n"), true, ',').unwrap();
        let mut reader = CsvReader::open(&path, &format, 2).unwrap();
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 2);
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 2);
        expect_data_error(reader.next_chunk().unwrap_err(), &path, 6);
        // Without a header, a longer row on line 3.
        let path = write(&dir, "b.csv", "1,2,3\n4,5,6\n7,8,9,10\n");
        let format = CsvFormat { header: false, ..format };
        expect_data_error(read_all(&path, &format, 2).unwrap_err(), &path, 3);
    }

    #[test]
    fn unparsable_value_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let format = infer_csv(&write(&dir, "good.csv", "a,b\n1,x\n"), true, ',').unwrap();
        // Line 1 header, lines 2-6 good, line 7 bad; chunks of 2 put it in the third chunk.
        let path = write(&dir, "a.csv", "a,b\n1,x\n2,x\n3,x\n4,x\n5,x\nsix,x\n7,x\n");
        let err = read_all(&path, &format, 2).unwrap_err();
        assert!(err.to_string().contains("'six'"), "{err}");
        expect_data_error(err, &path, 7);
        // Without a header the bad value is on line 2.
        let path = write(&dir, "b.csv", "1,x\nnope,y\n");
        let format = CsvFormat { header: false, ..format };
        expect_data_error(read_all(&path, &format, 8192).unwrap_err(), &path, 2);
    }

    #[test]
    fn line_numbers_count_blank_lines_and_quoted_newlines() {
        let dir = tempfile::tempdir().unwrap();
        let format = CsvFormat {
            schema: ElementSpec::new(vec![FieldSpec::scalar("a", DType::Int64), FieldSpec::scalar("b", DType::Utf8)])
                .unwrap(),
            header: true,
            delimiter: ',',
            columns: None,
        };
        // 1 header, 2 blank, 3-4 one record with a quoted newline, 5 record, 6 blank (CRLF), 7 bad.
        let path = write(&dir, "a.csv", "a,b\n\n1,\"two\nlines\"\r\n2,\"a \"\"q\"\"\"\n\r\nbad,x\n");
        expect_data_error(read_all(&path, &format, 8192).unwrap_err(), &path, 7);
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        fs::write(&path, b"a,b\n1,ok\n2,\xff\xfe\n").unwrap();
        let path = path.to_str().unwrap().to_string();
        let format = infer_csv(&write(&dir, "good.csv", "a,b\n1,x\n"), true, ',').unwrap();
        expect_data_error(read_all(&path, &format, 8192).unwrap_err(), &path, 3);
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.csv").to_str().unwrap().to_string();
        assert!(matches!(infer_csv(&path, true, ','), Err(Error::Io { path: p, .. }) if p == path));
        let format = CsvFormat { schema: ElementSpec::default(), header: true, delimiter: ',', columns: None };
        assert!(matches!(CsvReader::open(&path, &format, 10), Err(Error::Io { path: p, .. }) if p == path));
    }

    #[test]
    fn a_header_only_file_has_no_chunks_and_an_empty_one_no_header() {
        let dir = tempfile::tempdir().unwrap();
        let format = infer_csv(&write(&dir, "good.csv", "a\n1\n"), true, ',').unwrap();
        assert!(read_all(&write(&dir, "header_only.csv", "a\n"), &format, 10).unwrap().is_empty());
        assert!(matches!(infer_csv(&write(&dir, "empty.csv", ""), false, ','), Err(Error::Data { .. })));
        // An empty file read as having a header: an error naming it, as tf.data's "can't read
        // header" (it read as a table of no rows).
        let empty = write(&dir, "no_header.csv", "");
        expect_data_error(CsvReader::open(&empty, &format, 10).err().expect("no header"), &empty, 1);
        let headless = CsvFormat { header: false, ..format };
        assert!(read_all(&empty, &headless, 10).unwrap().is_empty());
    }

    #[test]
    fn inference_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "a,b\n1,2\n3\n");
        expect_data_error(infer_csv(&path, true, ',').unwrap_err(), &path, 3);
        assert!(matches!(infer_csv(&path, true, 'é'), Err(Error::Plan { .. })));
    }

    /// What pulling `reader` until `Ok(None)` gives: the int64 values of column 0 and, in their
    /// place, the line of each error (checked to be a data error naming `path` and the line).
    /// Panics when the reader does not end within a bounded number of pulls.
    fn pull_all(reader: &mut CsvReader, path: &str, chunk_rows: usize) -> Vec<std::result::Result<i64, usize>> {
        let mut out = vec![];
        for _ in 0..1000 {
            match reader.next_chunk() {
                Ok(None) => {
                    assert!(matches!(reader.next_chunk(), Ok(None)));
                    return out;
                }
                Ok(Some(chunk)) => {
                    assert!(chunk.num_rows() > 0 && chunk.num_rows() <= chunk_rows);
                    assert_eq!(chunk.schema(), reader.schema);
                    out.extend(ints(&[chunk], 0).into_iter().map(Ok));
                }
                Err(err) => {
                    let line = match &err {
                        Error::Data { location, .. } => location
                            .position
                            .as_deref()
                            .and_then(|p| p.strip_prefix("line "))
                            .and_then(|n| n.parse().ok())
                            .unwrap_or_else(|| panic!("no line in {err}")),
                        other => panic!("expected a data error, got {other}"),
                    };
                    expect_data_error(err, path, line);
                    out.push(Err(line));
                }
            }
        }
        panic!("the reader did not end after 1000 pulls");
    }

    fn int_and_string() -> CsvFormat {
        CsvFormat {
            schema: ElementSpec::new(vec![FieldSpec::scalar("a", DType::Int64), FieldSpec::scalar("b", DType::Utf8)])
                .unwrap(),
            header: true,
            delimiter: ',',
            columns: None,
        }
    }

    #[test]
    fn bad_records_are_skipped_one_error_each() {
        let dir = tempfile::tempdir().unwrap();
        // 1 header, 2-3 good, 4 one field, 5 good, 6 a value that is not int64, 7-8 good.
        let path = write(&dir, "a.csv", "a,b\n1,x\n2,x\n3\n4,x\nfive,x\n6,x\n7,x\n");
        let expected = vec![Ok(1), Ok(2), Err(4), Ok(4), Err(6), Ok(6), Ok(7)];
        for chunk_rows in [1, 2, 3, 1000] {
            let mut reader = CsvReader::open(&path, &int_and_string(), chunk_rows).unwrap();
            assert_eq!(pull_all(&mut reader, &path, chunk_rows), expected, "chunk_rows {chunk_rows}");
        }
        // The messages are arrow-csv's, with the line of the file.
        let mut reader = CsvReader::open(&path, &int_and_string(), 1000).unwrap();
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 2);
        let err = reader.next_chunk().unwrap_err().to_string();
        assert!(err.contains("incorrect number of fields for line 4, expected 2 got 1"), "{err}");
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 1);
        let err = reader.next_chunk().unwrap_err().to_string();
        assert!(err.contains("'five'") && err.contains("at line 6."), "{err}");
        assert_eq!(ints(&[reader.next_chunk().unwrap().unwrap()], 0), vec![6, 7]);
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn bad_first_last_and_adjacent_records() {
        let dir = tempfile::tempdir().unwrap();
        // 1 header, 2 bad, 3 good, 4-5 bad, 6 good, 7 blank, 8 bad (no final newline).
        let path = write(&dir, "a.csv", "a,b\nx,1\n1,x\n2,x,9\n3\n4,x\n\nlast,x");
        for chunk_rows in [1, 2, 1000] {
            let mut reader = CsvReader::open(&path, &int_and_string(), chunk_rows).unwrap();
            let expected = vec![Err(2), Ok(1), Err(4), Err(5), Ok(4), Err(8)];
            assert_eq!(pull_all(&mut reader, &path, chunk_rows), expected, "chunk_rows {chunk_rows}");
        }
        // Without a header, only bad records.
        let path = write(&dir, "b.csv", "x,1\ny,2\n");
        let format = CsvFormat { header: false, ..int_and_string() };
        let mut reader = CsvReader::open(&path, &format, 2).unwrap();
        assert_eq!(pull_all(&mut reader, &path, 2), vec![Err(1), Err(2)]);
    }

    #[test]
    fn line_numbers_after_a_quoted_newline_and_crlf() {
        let dir = tempfile::tempdir().unwrap();
        // 1 header, 2-4 one record with two quoted newlines, 5 bad, 6 good (CRLF), 7 blank,
        // 8-9 a record with a quoted newline and an escaped quote, 10 bad, 11 good.
        let text = "a,b\n1,\"two\nnew\nlines\"\nbad,x\n2,x\r\n\r\n3,\"q\"\"\nq\"\r\n4,x,x\n5,\"\"\n";
        let path = write(&dir, "a.csv", text);
        for chunk_rows in [1, 2, 1000] {
            let mut reader = CsvReader::open(&path, &int_and_string(), chunk_rows).unwrap();
            let expected = vec![Ok(1), Err(5), Ok(2), Ok(3), Err(10), Ok(5)];
            assert_eq!(pull_all(&mut reader, &path, chunk_rows), expected, "chunk_rows {chunk_rows}");
        }
        let mut reader = CsvReader::open(&path, &int_and_string(), 1000).unwrap();
        let first = reader.next_chunk().unwrap().unwrap();
        assert_eq!(strings(&[first], 1), vec![Some("two\nnew\nlines".into())]);
        reader.next_chunk().unwrap_err();
        let rows = reader.next_chunk().unwrap().unwrap();
        assert_eq!(strings(&[rows], 1), vec![Some("x".into()), Some("q\"\nq".into())]);
    }

    #[test]
    fn invalid_utf8_and_a_bad_header_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        // 1 header, 2 good, 3 invalid UTF-8, 4 good.
        fs::write(&path, b"a,b\n1,ok\n2,\xff\xfe\n3,ok\n").unwrap();
        let path = path.to_str().unwrap().to_string();
        for chunk_rows in [1, 2, 1000] {
            let mut reader = CsvReader::open(&path, &int_and_string(), chunk_rows).unwrap();
            assert_eq!(pull_all(&mut reader, &path, chunk_rows), vec![Ok(1), Err(3), Ok(3)]);
        }
        // A header with the wrong number of fields is an error at line 1; the records follow.
        let path = write(&dir, "b.csv", "a\n1,x\n2,x\n");
        for chunk_rows in [1, 1000] {
            let mut reader = CsvReader::open(&path, &int_and_string(), chunk_rows).unwrap();
            assert_eq!(pull_all(&mut reader, &path, chunk_rows), vec![Err(1), Ok(1), Ok(2)]);
        }
    }

    #[test]
    fn retried_chunks_keep_the_output_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "1;ab;x\nbad;cd;y\n3;ef;z\n");
        let schema = ElementSpec::new(vec![
            FieldSpec::scalar("a", DType::Int32),
            FieldSpec::scalar("b", DType::Binary),
            FieldSpec::scalar("c", DType::Utf8),
        ])
        .unwrap();
        let format = CsvFormat { schema, header: false, delimiter: ';', columns: Some(vec!["b".into(), "c".into()]) };
        let mut reader = CsvReader::open(&path, &format, 10).unwrap();
        let first = reader.next_chunk().unwrap().unwrap();
        assert_eq!(first.schema(), reader.schema);
        assert_eq!(first.column(0).as_binary::<i32>().value(0), b"ab");
        // Column a is not projected: its bad value is not parsed.
        assert_eq!(first.num_rows(), 3);
        assert!(reader.next_chunk().unwrap().is_none());
        let format = CsvFormat { columns: None, ..format };
        let mut reader = CsvReader::open(&path, &format, 10).unwrap();
        let rows = reader.next_chunk().unwrap().unwrap();
        assert_eq!(rows.schema(), reader.schema);
        expect_data_error(reader.next_chunk().unwrap_err(), &path, 2);
        let rows = reader.next_chunk().unwrap().unwrap();
        assert_eq!(rows.schema(), reader.schema);
        assert_eq!(rows.column(1).as_binary::<i32>().value(0), b"ef");
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        // The file, whether it has a header, and the number of errors reading it gives.
        let cases: [(&[u8], bool, usize); 9] = [
            // Bad records between good ones, adjacent, and last.
            (b"a,b\n1,x\n2,x\n3\n4,x\nfive,x\n6,x\n7,x\n", true, 2),
            (b"a,b\nx,1\n1,x\n2,x,9\n3\n4,x\n\nlast,x", true, 4),
            // Quoted newlines, CRLF and blank lines move the line numbers.
            (b"a,b\n1,\"two\nnew\nlines\"\nbad,x\n2,x\r\n\r\n3,\"q\"\"\nq\"\r\n4,x,x\n5,\"\"\n", true, 2),
            // Invalid UTF-8, a bad header, no header.
            (b"a,b\n1,ok\n2,\xff\xfe\n3,ok\n", true, 1),
            (b"a\n1,x\n2,x\n", true, 1),
            (b"x,1\n1,y\n2,2\nz,3\n", false, 2),
            (b"1,ok\nbad,ok\n3,ok\n", false, 1),
            (b"", false, 0),
            (b"a,b\n", true, 0),
        ];
        for (i, (bytes, header, errors)) in cases.into_iter().enumerate() {
            let path = dir.path().join(format!("{i}.csv"));
            fs::write(&path, bytes).unwrap();
            let path = path.to_str().unwrap();
            let mut format = CsvFormat { header, ..int_and_string() };
            for chunk_rows in [1, 2, 3, 1000] {
                let outcomes = check_resume(chunk_rows, |rows| Box::new(CsvReader::open(path, &format, rows).unwrap()));
                let found = outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count();
                assert_eq!(found, errors, "{path}: {outcomes:?}");
            }
            // A projection that does not read column a reads past its bad values.
            format.columns = Some(vec!["b".into()]);
            check_resume(2, |rows| Box::new(CsvReader::open(path, &format, rows).unwrap()));
        }
    }

    #[test]
    fn a_position_keeps_the_chunk_error_that_no_record_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "a,b\n1,x\n2,x\n3,x\n");
        let mut reader = CsvReader::open(&path, &int_and_string(), 10).unwrap();
        // As if a chunk of the last two records had failed though each reads well on its own.
        reader.next_chunk().unwrap();
        reader.retry =
            Some(Retry { header: false, left: 0, error: Some(Error::data(Location::source(&path), "chunk")) });
        let position = reader.position().unwrap();
        let mut resumed = CsvReader::open(&path, &int_and_string(), 10).unwrap();
        resumed.seek(&position).unwrap();
        for reader in [&mut reader, &mut resumed] {
            assert_eq!(reader.next_chunk().unwrap_err().to_string(), format!("bad input in {path}: chunk"));
            assert!(reader.next_chunk().unwrap().is_none());
        }
    }

    #[test]
    fn seeking_does_not_read_what_comes_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "a,b\n1,x\n2,x\n3,x\nbad,x\n5,x\n");
        let mut reader = CsvReader::open(&path, &int_and_string(), 2).unwrap();
        reader.next_chunk().unwrap();
        let position = reader.position().unwrap();
        assert_eq!(
            position,
            serde_json::json!({"reader": "csv", "len": 26, "offset": 12, "line": 4, "header": false, "retry": null})
        );
        // The records before the position, garbled to the same length, are not read again.
        fs::write(&path, "###########\n3,x\nbad,x\n5,x\n").unwrap();
        let mut resumed = CsvReader::open(&path, &int_and_string(), 2).unwrap();
        resumed.seek(&position).unwrap();
        assert_eq!(pull_all(&mut resumed, &path, 2), vec![Ok(3), Err(5), Ok(5)]);
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.csv", "a,b\n1,x\n");
        let open = || Box::new(CsvReader::open(&path, &int_and_string(), 2).unwrap()) as BoxReader;
        let at = |offset: u64, header: bool| {
            let position = CsvPosition { len: 8, offset, line: 2, header, retry: None };
            encode("csv", &position).unwrap()
        };
        open().seek(&at(8, false)).unwrap();
        assert!(seek_error(open, at(9, false)).contains("is not a position in"));
        assert!(seek_error(open, at(4, true)).contains("is not a position in"));
        let retry = serde_json::json!({"reader": "csv", "len": 8, "offset": 4, "line": 2, "header": false, "retry": 3});
        assert!(seek_error(open, retry).contains("not a position of a csv reader"));
        let text = serde_json::json!({"reader": "text", "len": 8, "offset": 4, "line": 2});
        assert!(seek_error(open, text).contains("not a position of a csv reader"));
        fs::write(&path, "a,b\n1,x\n2,x\n").unwrap();
        assert!(seek_error(open, at(4, false)).contains("the position was taken when the file had 8 bytes"));
    }

    #[test]
    fn find_line_takes_the_mention_followed_by_digits() {
        assert_eq!(find_line("x for line 12, expected", "for line ", false), Some((12, 11..13)));
        assert_eq!(find_line("value 'at line x' at line 4", "at line ", true), Some((4, 26..27)));
        assert_eq!(find_line("no number", "line ", false), None);
    }
}

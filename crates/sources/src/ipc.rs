//! Arrow IPC files (with footer) and streams: their schema, and readers.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};

use arrow::error::ArrowError;
use arrow::ipc::reader::{FileReader, StreamReader};
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use flumen_ir::ipc_lengths::first_long_message;
use flumen_ir::{ElementSpec, Error, Location, Result};
use serde::{Deserialize, Serialize};

use crate::conform::{file_spec, Conformer};
use crate::guard::{guarded, next_batch};
use crate::position::{check_len, decode, encode, file_len};
use crate::reader::{ChunkReader, ReaderPosition};

/// Opens `path` with `make` (an IPC file or stream reader, `kind` names which), which reads
/// the schema; and the file's length.
fn open_ipc<R>(
    path: &str,
    kind: &str,
    make: impl FnOnce(BufReader<File>) -> Result<R, ArrowError>,
) -> Result<(R, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file_len(&file, path)?;
    let reader = guarded(
        || Location::source(path),
        || {
            make(BufReader::new(file))
                .map_err(|e| Error::data(Location::source(path), format!("not a readable Arrow IPC {kind}: {e}")))
        },
    )?;
    Ok((reader, len))
}

/// Opens the IPC file `path` (reads its footer and schema).
fn open_file(path: &str) -> Result<(FileReader<BufReader<File>>, u64)> {
    check_footer(path)?;
    open_ipc(path, "file", |r| FileReader::try_new(r, None))
}

/// An opened IPC stream: its reader and length, and its first message whose lengths reach
/// past the file (see `first_bad_message`), which ends the reader there.
type OpenedStream = ((StreamReader<BufReader<File>>, u64), Option<(usize, Error)>);

/// Opens the IPC stream `path` (reads its schema message).
fn open_stream(path: &str) -> Result<OpenedStream> {
    let bad = first_bad_message(path)?;
    if let Some((0, error)) = bad {
        return Err(error);
    }
    Ok((open_ipc(path, "stream", |r| StreamReader::try_new(r, None))?, bad))
}

// Arrow's IPC readers allocate what a length field of the file says before reading it (the
// footer's length, a block's or a message's body): a corrupt length asked for gigabytes and
// aborted the process. So the lengths are checked against the file first, reading only
// the small metadata.

/// An error of the IPC file or stream `path` at `at`.
fn bad(path: &str, at: impl Into<String>, why: impl Into<String>) -> Error {
    Error::data(Location::new(path, at), why.into())
}

/// Checks that the IPC file `path`'s footer, and every block it lists, lie within the file.
fn check_footer(path: &str) -> Result<()> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file_len(&file, path)?;
    let io = |e| Error::io(path, e);
    if len < 10 {
        return Err(bad(path, "footer", format!("not a readable Arrow IPC file: it has only {len} bytes")));
    }
    let mut tail = [0u8; 10];
    file.seek(SeekFrom::Start(len - 10)).map_err(io)?;
    file.read_exact(&mut tail).map_err(io)?;
    let footer_len = i32::from_le_bytes(tail[..4].try_into().expect("4 bytes"));
    let footer_len = u64::try_from(footer_len).ok().filter(|n| *n <= len - 10).ok_or_else(|| {
        bad(path, "footer", format!("not a readable Arrow IPC file: a footer of {footer_len} bytes in a file of {len}"))
    })?;
    let mut footer = vec![0u8; footer_len as usize];
    file.seek(SeekFrom::Start(len - 10 - footer_len)).map_err(io)?;
    file.read_exact(&mut footer).map_err(io)?;
    // A footer that does not parse is the reader's to report, as before.
    let Ok(footer) = arrow::ipc::root_as_footer(&footer) else { return Ok(()) };
    let blocks = footer.recordBatches().into_iter().flatten().map(|b| ("batch", b));
    let dictionaries = footer.dictionaries().into_iter().flatten().map(|b| ("dictionary", b));
    for (i, (what, block)) in blocks.chain(dictionaries).enumerate() {
        let (offset, meta, body) = (block.offset(), i64::from(block.metaDataLength()), block.bodyLength());
        let end =
            (offset >= 0 && meta >= 0 && body >= 0).then(|| offset.checked_add(meta)?.checked_add(body)).flatten();
        if end.is_none_or(|end| end as u64 > len) {
            let why =
                format!("the footer puts {what} {i} at bytes {offset}+{meta}+{body}, past the file's {len} bytes");
            return Err(bad(path, "footer", why));
        }
    }
    Ok(())
}

/// The first message of the IPC stream `path` whose length fields reach past the file, as
/// the number of record batches before it and its error; `None` when every message fits.
fn first_bad_message(path: &str) -> Result<Option<(usize, Error)>> {
    let mut file = BufReader::new(File::open(path).map_err(|e| Error::io(path, e))?);
    let len = file_len(file.get_ref(), path)?;
    let long = first_long_message(&mut file, len).map_err(|e| Error::io(path, e))?;
    Ok(long.map(|m| {
        let why = format!("a message {} of {} bytes, past the file's {len} bytes", m.part, m.len);
        (m.batches, bad(path, format!("batch {} (the message at byte {})", m.batches, m.at), why))
    }))
}

/// The element spec of the Arrow IPC file `path` (from its schema).
pub fn ipc_file_schema(path: &str) -> Result<ElementSpec> {
    file_spec(path, &open_file(path)?.0.schema())
}

/// The element spec of the Arrow IPC stream `path` (from its schema message).
pub fn ipc_stream_schema(path: &str) -> Result<ElementSpec> {
    file_spec(path, &open_stream(path)?.0 .0.schema())
}

/// The batches of an IPC reader, fitted to a spec and cut to at most `chunk_rows` rows.
struct Batches<R> {
    reader: R,
    conformer: Conformer,
    path: String,
    /// The length of the file when it was opened.
    len: u64,
    chunk_rows: usize,
    /// The index of the next batch of the file.
    index: usize,
    /// The rest of a batch longer than `chunk_rows` (batch `index - 1`), and the row of that
    /// batch it starts at.
    pending: Option<(RecordBatch, usize)>,
    /// A stream's first message whose lengths reach past the file: the batch index it would
    /// have, and its error, which ends the reader there rather than be read.
    bad: Option<(usize, Error)>,
    done: bool,
}

/// Where an IPC reader is, in a file of `len` bytes: the next row to read, as a batch index
/// and a row in that batch; `None` once the reader has ended (also after an error, which ends
/// it: reading the batch again would fail again).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IpcPosition {
    len: u64,
    at: Option<BatchRow>,
}

/// A row of an IPC file or stream.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRow {
    batch: usize,
    row: usize,
}

impl<R: RecordBatchReader> Batches<R> {
    fn new((reader, len): (R, u64), path: &str, spec: &ElementSpec, chunk_rows: usize) -> Result<Self> {
        let conformer = Conformer::new(&reader.schema(), spec.arrow_schema(), path)?;
        Ok(Batches {
            reader,
            conformer,
            path: path.to_string(),
            len,
            chunk_rows: chunk_rows.max(1),
            index: 0,
            pending: None,
            bad: None,
            done: false,
        })
    }

    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some((rest, row)) = self.pending.take() {
            return Ok(Some(self.cut(rest, row)));
        }
        while !self.done {
            let location = self.location();
            let Some(batch) = self.next_batch()? else {
                break;
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = self.conformer.apply(&batch, || location.clone())?;
            return Ok(Some(self.cut(batch, 0)));
        }
        Ok(None)
    }

    /// The location of the next batch of the file.
    fn location(&self) -> Location {
        Location::new(self.path.as_str(), format!("batch {}", self.index))
    }

    /// The next batch of the file, as decoded; `None` after the end or an error.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.done {
            return Ok(None);
        }
        if let Some((_, error)) = self.bad.take_if(|(at, _)| *at == self.index) {
            self.done = true;
            return Err(error);
        }
        let location = self.location();
        let batch = next_batch(&mut self.reader, &location, &mut self.done)?;
        self.index += usize::from(batch.is_some());
        Ok(batch)
    }

    /// The first `chunk_rows` rows of `batch`, whose first row is row `row` of the file's
    /// batch; keeps the rest for the next call.
    fn cut(&mut self, batch: RecordBatch, row: usize) -> RecordBatch {
        if batch.num_rows() <= self.chunk_rows {
            return batch;
        }
        let rest = batch.slice(self.chunk_rows, batch.num_rows() - self.chunk_rows);
        self.pending = Some((rest, row + self.chunk_rows));
        batch.slice(0, self.chunk_rows)
    }

    fn position(&self, kind: &str) -> Result<ReaderPosition> {
        let at = match &self.pending {
            Some((_, row)) => Some(BatchRow { batch: self.index - 1, row: *row }),
            None => (!self.done).then_some(BatchRow { batch: self.index, row: 0 }),
        };
        encode(kind, &IpcPosition { len: self.len, at })
    }

    /// Moves a fresh reader to `position`, a position of a `kind` reader; `skip` moves the
    /// decoder to a batch index (without decoding the batches before it where it can).
    fn seek(
        &mut self,
        kind: &str,
        position: &ReaderPosition,
        skip: impl FnOnce(&mut Self, usize) -> Result<()>,
    ) -> Result<()> {
        let at: IpcPosition = decode(kind, position)?;
        check_len(&self.path, at.len, self.len)?;
        self.pending = None;
        let Some(BatchRow { batch, row }) = at.at else {
            self.done = true;
            return Ok(());
        };
        skip(self, batch)?;
        if row == 0 {
            return Ok(());
        }
        let location = self.location();
        let past = |rows: usize| {
            Error::data(location.clone(), format!("cannot seek to row {row} of the batch: it has {rows} rows"))
        };
        let batch = self.next_batch()?.ok_or_else(|| past(0))?;
        if row >= batch.num_rows() {
            return Err(past(batch.num_rows()));
        }
        let batch = self.conformer.apply(&batch, || location.clone())?;
        self.pending = Some((batch.slice(row, batch.num_rows() - row), row));
        Ok(())
    }
}

/// Reads an Arrow IPC file (the random-access format, with a footer) batch by batch.
pub struct IpcFileReader(Batches<FileReader<BufReader<File>>>);

impl IpcFileReader {
    /// Opens `path` to read elements of `spec` in chunks of at most `chunk_rows` rows.
    ///
    /// A file that is not IPC (truncated, corrupt footer) or whose schema does not match
    /// `spec` is an [`Error::Data`] naming the file; a corrupt batch names its index.
    pub fn open(path: &str, spec: &ElementSpec, chunk_rows: usize) -> Result<Self> {
        Ok(IpcFileReader(Batches::new(open_file(path)?, path, spec, chunk_rows)?))
    }
}

impl ChunkReader for IpcFileReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.0.next_chunk()
    }

    fn position(&self) -> Result<ReaderPosition> {
        self.0.position("ipc_file")
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        // The footer locates every batch: the decoder jumps to it.
        self.0.seek("ipc_file", position, |batches, index| {
            let count = batches.reader.num_batches();
            batches.done = index == count;
            if !batches.done {
                batches.reader.set_index(index).map_err(|_| {
                    Error::data(
                        Location::source(batches.path.as_str()),
                        format!("cannot seek to batch {index}: the file has {count} batches"),
                    )
                })?;
            }
            batches.index = index;
            Ok(())
        })
    }
}

/// Reads an Arrow IPC stream batch by batch.
pub struct IpcStreamReader(Batches<StreamReader<BufReader<File>>>);

impl IpcStreamReader {
    /// Opens `path` to read elements of `spec` in chunks of at most `chunk_rows` rows.
    ///
    /// A stream that does not start with a schema or whose schema does not match `spec` is
    /// an [`Error::Data`] naming the file; a truncated or corrupt batch names its index. (A
    /// stream cut exactly between two messages cannot be told from a shorter stream.)
    pub fn open(path: &str, spec: &ElementSpec, chunk_rows: usize) -> Result<Self> {
        let (opened, bad) = open_stream(path)?;
        let mut batches = Batches::new(opened, path, spec, chunk_rows)?;
        batches.bad = bad;
        Ok(IpcStreamReader(batches))
    }
}

impl ChunkReader for IpcStreamReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.0.next_chunk()
    }

    fn position(&self) -> Result<ReaderPosition> {
        self.0.position("ipc_stream")
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        // A stream has no index of its batches: the ones before are decoded and dropped.
        self.0.seek("ipc_stream", position, |batches, index| {
            if batches.index > index || batches.done {
                return Err(Error::execution(
                    "seek",
                    format!("a stream reader at batch {} cannot go back to batch {index}", batches.index),
                ));
            }
            while batches.index < index {
                if batches.next_batch()?.is_none() {
                    return Err(Error::data(
                        Location::source(batches.path.as_str()),
                        format!("cannot seek to batch {index}: the stream has {} batches", batches.index),
                    ));
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, AsArray, Int32Array, ListArray, StringArray};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use arrow::ipc::writer::{FileWriter, StreamWriter};
    use flumen_ir::{DType, FieldSpec};

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    /// Batches of 3, 0 and 5 rows: x: int32 = 0..8, s: string "s{x}", l: ragged int32 [x].
    fn batches() -> Vec<RecordBatch> {
        let item = Arc::new(Field::new("element", DataType::Int32, false));
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int32, false),
            Field::new("s", DataType::Utf8, false),
            Field::new("l", DataType::List(item.clone()), false),
        ]));
        [0..3, 3..3, 3..8]
            .into_iter()
            .map(|r| {
                let xs: Vec<i32> = r.collect();
                let offsets = arrow::buffer::OffsetBuffer::from_lengths(xs.iter().map(|_| 1));
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(Int32Array::from(xs.clone())),
                    Arc::new(StringArray::from(xs.iter().map(|x| format!("s{x}")).collect::<Vec<_>>())),
                    Arc::new(ListArray::new(item.clone(), offsets, Arc::new(Int32Array::from(xs.clone())), None)),
                ];
                RecordBatch::try_new(schema.clone(), columns).unwrap()
            })
            .collect()
    }

    fn write_file(dir: &tempfile::TempDir, name: &str) -> String {
        let path = dir.path().join(name);
        let batches = batches();
        let mut writer = FileWriter::try_new(File::create(&path).unwrap(), &batches[0].schema()).unwrap();
        batches.iter().for_each(|b| writer.write(b).unwrap());
        writer.finish().unwrap();
        path.to_str().unwrap().to_string()
    }

    fn write_stream(dir: &tempfile::TempDir, name: &str) -> String {
        let path = dir.path().join(name);
        let batches = batches();
        let mut writer = StreamWriter::try_new(File::create(&path).unwrap(), &batches[0].schema()).unwrap();
        batches.iter().for_each(|b| writer.write(b).unwrap());
        writer.finish().unwrap();
        path.to_str().unwrap().to_string()
    }

    fn expected_spec() -> ElementSpec {
        ElementSpec::new(vec![
            FieldSpec::scalar("x", DType::Int32),
            FieldSpec::scalar("s", DType::Utf8),
            FieldSpec::ragged("l", DType::Int32, vec![-1]),
        ])
        .unwrap()
    }

    fn drain(mut reader: impl ChunkReader, spec: &ElementSpec, chunk_rows: usize) -> Result<Vec<RecordBatch>> {
        let mut chunks = vec![];
        while let Some(chunk) = reader.next_chunk()? {
            assert!(chunk.num_rows() > 0 && chunk.num_rows() <= chunk_rows);
            assert_eq!(chunk.schema(), spec.arrow_schema());
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    fn check_values(chunks: &[RecordBatch]) {
        let xs: Vec<i32> =
            chunks.iter().flat_map(|c| c.column(0).as_primitive::<Int32Type>().values().to_vec()).collect();
        assert_eq!(xs, (0..8).collect::<Vec<_>>());
        let ss: Vec<String> = chunks
            .iter()
            .flat_map(|c| c.column(1).as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>())
            .collect();
        assert_eq!(ss, (0..8).map(|x| format!("s{x}")).collect::<Vec<_>>());
        let ls: Vec<Vec<i32>> = chunks
            .iter()
            .flat_map(|c| {
                c.column(2)
                    .as_list::<i32>()
                    .iter()
                    .map(|l| l.unwrap().as_primitive::<Int32Type>().values().to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(ls, (0..8).map(|x| vec![x]).collect::<Vec<_>>());
    }

    #[test]
    fn reads_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(&dir, "a.arrow");
        let spec = ipc_file_schema(&path).unwrap();
        assert_eq!(spec, expected_spec());
        let chunks = drain(IpcFileReader::open(&path, &spec, 2).unwrap(), &spec, 2).unwrap();
        assert_eq!(chunks.iter().map(|c| c.num_rows()).collect::<Vec<_>>(), vec![2, 1, 2, 2, 1]);
        check_values(&chunks);
        check_values(&drain(IpcFileReader::open(&path, &spec, 8192).unwrap(), &spec, 8192).unwrap());
    }

    #[test]
    fn reads_streams() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_stream(&dir, "a.arrows");
        let spec = ipc_stream_schema(&path).unwrap();
        assert_eq!(spec, expected_spec());
        check_values(&drain(IpcStreamReader::open(&path, &spec, 3).unwrap(), &spec, 3).unwrap());
    }

    #[test]
    fn a_file_with_another_schema_is_a_data_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(&dir, "a.arrow");
        let mut spec = expected_spec();
        spec.fields[0].dtype = DType::Int64;
        let err = IpcFileReader::open(&path, &spec, 10).err().unwrap();
        assert!(matches!(err, Error::Data { .. }) && err.to_string().contains(&path), "{err}");
    }

    #[test]
    fn truncated_files_and_streams_are_data_errors() {
        let dir = tempfile::tempdir().unwrap();
        let spec = expected_spec();
        let file = write_file(&dir, "a.arrow");
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
        for err in [ipc_file_schema(&file).unwrap_err(), IpcFileReader::open(&file, &spec, 10).err().unwrap()] {
            assert!(matches!(err, Error::Data { .. }) && err.to_string().contains(&file), "{err}");
        }
        let stream = write_stream(&dir, "a.arrows");
        let bytes = std::fs::read(&stream).unwrap();
        std::fs::write(&stream, &bytes[..bytes.len() / 2]).unwrap();
        let err = drain(IpcStreamReader::open(&stream, &spec, 10).unwrap(), &spec, 10).unwrap_err();
        assert!(matches!(&err, Error::Data { location, .. } if location.source == stream), "{err}");
        assert!(err.to_string().contains("batch "), "{err}");
    }

    #[test]
    fn a_corrupt_batch_names_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(&dir, "a.arrow");
        let spec = expected_spec();
        let mut bytes = std::fs::read(&path).unwrap();
        // Make the strings of the last batch invalid UTF-8.
        let at = bytes.windows(10).position(|w| w == b"s3s4s5s6s7").unwrap();
        bytes[at..at + 10].fill(0xff);
        std::fs::write(&path, &bytes).unwrap();
        let err = drain(IpcFileReader::open(&path, &spec, 100).unwrap(), &spec, 100).unwrap_err();
        assert!(
            matches!(&err, Error::Data { location, .. } if location.position.as_deref() == Some("batch 2")),
            "{err}"
        );
    }

    #[test]
    fn pulling_after_an_error_ends() {
        let dir = tempfile::tempdir().unwrap();
        let spec = expected_spec();
        let path = write_file(&dir, "a.arrow");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.windows(10).position(|w| w == b"s3s4s5s6s7").unwrap();
        bytes[at..at + 10].fill(0xff);
        std::fs::write(&path, &bytes).unwrap();
        let mut reader = IpcFileReader::open(&path, &spec, 100).unwrap();
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 3);
        assert!(reader.next_chunk().is_err());
        assert!(reader.next_chunk().unwrap().is_none());
        assert!(reader.next_chunk().unwrap().is_none());
        let stream = write_stream(&dir, "a.arrows");
        let bytes = std::fs::read(&stream).unwrap();
        std::fs::write(&stream, &bytes[..bytes.len() / 2]).unwrap();
        let mut reader = IpcStreamReader::open(&stream, &spec, 10).unwrap();
        let (ended, errors) = crate::reader::testing::pull_to_end(&mut reader, 100);
        assert!(ended && errors == 1, "ended: {ended}, errors: {errors}");
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let spec = expected_spec();
        let file = write_file(&dir, "a.arrow");
        let stream = write_stream(&dir, "a.arrows");
        for chunk_rows in [1, 2, 4, 100] {
            check_resume(chunk_rows, |rows| Box::new(IpcFileReader::open(&file, &spec, rows).unwrap()));
            check_resume(chunk_rows, |rows| Box::new(IpcStreamReader::open(&stream, &spec, rows).unwrap()));
        }
        // A corrupt last batch ends the file; a truncated stream ends at its cut.
        let mut bytes = std::fs::read(&file).unwrap();
        let at = bytes.windows(10).position(|w| w == b"s3s4s5s6s7").unwrap();
        bytes[at..at + 10].fill(0xff);
        std::fs::write(&file, &bytes).unwrap();
        let bytes = std::fs::read(&stream).unwrap();
        std::fs::write(&stream, &bytes[..bytes.len() * 3 / 4]).unwrap();
        for chunk_rows in [2, 100] {
            let outcomes = check_resume(chunk_rows, |rows| Box::new(IpcFileReader::open(&file, &spec, rows).unwrap()));
            assert!(matches!(outcomes.as_slice(), [Outcome::Rows(_), Outcome::Error(_)]), "{outcomes:?}");
            let outcomes =
                check_resume(chunk_rows, |rows| Box::new(IpcStreamReader::open(&stream, &spec, rows).unwrap()));
            assert!(matches!(outcomes.last(), Some(Outcome::Error(_))), "{outcomes:?}");
        }
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let spec = expected_spec();
        let file = write_file(&dir, "a.arrow");
        let stream = write_stream(&dir, "a.arrows");
        let mut reader = IpcFileReader::open(&file, &spec, 2).unwrap();
        reader.next_chunk().unwrap();
        let position = reader.position().unwrap();
        let len = std::fs::metadata(&file).unwrap().len();
        assert_eq!(position, serde_json::json!({"reader": "ipc_file", "len": len, "at": {"batch": 0, "row": 2}}));
        let open_file = || Box::new(IpcFileReader::open(&file, &spec, 2).unwrap()) as BoxReader;
        let at = |batch, row| encode("ipc_file", &IpcPosition { len, at: Some(BatchRow { batch, row }) }).unwrap();
        assert!(seek_error(open_file, at(4, 0)).contains("cannot seek to batch 4: the file has 3 batches"));
        assert!(seek_error(open_file, at(0, 3)).contains("cannot seek to row 3 of the batch: it has 3 rows"));
        assert!(seek_error(open_file, at(3, 1)).contains("cannot seek to row 1 of the batch: it has 0 rows"));
        let len = std::fs::metadata(&stream).unwrap().len();
        let open_stream = || Box::new(IpcStreamReader::open(&stream, &spec, 2).unwrap()) as BoxReader;
        let past = serde_json::json!({"reader": "ipc_stream", "len": len, "at": {"batch": 4, "row": 0}});
        assert!(seek_error(open_stream, past).contains("cannot seek to batch 4: the stream has 3 batches"));
        assert!(seek_error(open_stream, position.clone()).contains("not a position of a ipc_stream reader"));
        let mut used = open_stream();
        (0..2).for_each(|_| drop(used.next_chunk().unwrap()));
        let start = encode("ipc_stream", &IpcPosition { len, at: Some(BatchRow { batch: 0, row: 0 }) }).unwrap();
        assert!(used.seek(&start).unwrap_err().to_string().contains("cannot go back to batch 0"));
        // A file with fewer batches.
        let batches = batches();
        let mut writer = FileWriter::try_new(File::create(&file).unwrap(), &batches[0].schema()).unwrap();
        writer.write(&batches[0]).unwrap();
        writer.finish().unwrap();
        let err = seek_error(open_file, position);
        assert!(err.contains("the position was taken when the file had"), "{err}");
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.arrow").to_str().unwrap().to_string();
        assert!(matches!(ipc_file_schema(&path), Err(Error::Io { path: p, .. }) if p == path));
        assert!(
            matches!(IpcStreamReader::open(&path, &expected_spec(), 1), Err(Error::Io { path: p, .. }) if p == path)
        );
    }
}

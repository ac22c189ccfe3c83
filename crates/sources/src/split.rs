//! Splits: the units a file source is read in (a file, or one row group of a Parquet file),
//! and the reader of a list of files.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, FileFormat, Result};
use serde::{Deserialize, Serialize};

use crate::avro::reader::AvroReader;
use crate::csv::CsvReader;
use crate::ipc::{IpcFileReader, IpcStreamReader};
use crate::parquet::{row_group_count, ParquetReader};
use crate::position::{decode, encode};
use crate::reader::{BoxReader, ChunkReader, ReadOptions, ReaderPosition};
use crate::text::TextLineReader;

/// A unit of reading: a whole file, or one row group of a Parquet file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The file.
    pub file: String,
    /// The Parquet row group or Avro block; `None` for the whole file.
    pub row_group: Option<usize>,
}

/// The splits of `files` read in `format`, in reading order: one per file, for Parquet one
/// per row group (a Parquet file without row groups has none), for Avro one per block.
/// Parquet footers are read; Avro block headers are walked.
pub fn splits(files: &[String], format: &FileFormat) -> Result<Vec<Split>> {
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        if let FileFormat::Parquet(_) = format {
            let count = row_group_count(file)?;
            out.extend((0..count).map(|i| Split { file: file.clone(), row_group: Some(i) }));
        } else if let FileFormat::Avro(_) = format {
            let count = crate::avro::reader::block_count(file)?;
            out.extend((0..count).map(|i| Split { file: file.clone(), row_group: Some(i) }));
        } else {
            out.push(Split { file: file.clone(), row_group: None });
        }
    }
    Ok(out)
}

/// A reader of `split` in `format`, read as `read` says.
pub fn open_split(split: &Split, format: &FileFormat, read: ReadOptions) -> Result<BoxReader> {
    match (split.row_group, format) {
        (None, _) => open_file(&split.file, format, read),
        (Some(group), FileFormat::Parquet(p)) => {
            Ok(Box::new(ParquetReader::open(&split.file, p, Some(vec![group]), read.chunk_rows)?))
        }
        (Some(block), FileFormat::Avro(a)) => {
            let spec = format.output_spec()?;
            Ok(Box::new(AvroReader::open(
                &split.file,
                &spec,
                a.reader_schema.as_deref(),
                Some(block),
                read.chunk_rows,
            )?))
        }
        (Some(_), other) => Err(Error::execution(
            "open_split",
            format!("the split of {} names a row group, but {} files have none", split.file, other.name()),
        )),
    }
}

/// A reader of the whole file `path` in `format`, read as `read` says.
pub fn open_file(path: &str, format: &FileFormat, read: ReadOptions) -> Result<BoxReader> {
    let chunk_rows = read.chunk_rows;
    Ok(match format {
        FileFormat::Csv(c) => Box::new(CsvReader::open(path, c, chunk_rows)?),
        FileFormat::Parquet(p) => Box::new(ParquetReader::open(path, p, None, chunk_rows)?),
        FileFormat::IpcFile { schema } => Box::new(IpcFileReader::open(path, schema, chunk_rows)?),
        FileFormat::IpcStream { schema } => Box::new(IpcStreamReader::open(path, schema, chunk_rows)?),
        FileFormat::TextLines => Box::new(TextLineReader::open(path, chunk_rows)?),
        FileFormat::TfRecord { compression } => {
            Box::new(crate::tfrecord::TfRecordReader::open(path, *compression, read)?)
        }
        FileFormat::Avro(a) => {
            Box::new(AvroReader::open(path, &format.output_spec()?, a.reader_schema.as_deref(), None, chunk_rows)?)
        }
        FileFormat::Chunks { schema } => Box::new(crate::chunks::ChunksReader::open(path, schema)?),
    })
}

/// Reads files one after another in one format, opening each when the previous one ends.
///
/// After an error, pulling again goes on where the error leaves off: a file that cannot be
/// opened is skipped (the next pull opens the next file), and an error inside a file is
/// followed by what that file's reader gives next (the next record of a CSV file, the end of a
/// Parquet or IPC file whose decoder cannot resume), then by the next file.
pub struct FilesReader {
    files: Vec<String>,
    format: FileFormat,
    read: ReadOptions,
    /// The index of the next file to open.
    next: usize,
    current: Option<BoxReader>,
}

/// Where a [`FilesReader`] is: in the file at index `file` of a list of `files`, at the
/// position `inner` of its reader, or at its start (`None`: not opened yet). The file's path
/// is kept to refuse a position in another list of files.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesPosition {
    files: usize,
    file: usize,
    path: Option<String>,
    inner: Option<ReaderPosition>,
}

impl FilesReader {
    /// A reader of `files`, in order, in `format`, read as `read` says.
    pub fn new(files: Vec<String>, format: FileFormat, read: ReadOptions) -> Self {
        FilesReader { files, format, read, next: 0, current: None }
    }

    /// What `next` gives from the current file, opening the next file when one ends.
    fn pull<T>(&mut self, mut next: impl FnMut(&mut BoxReader) -> Result<Option<T>>) -> Result<Option<T>> {
        loop {
            let reader = match &mut self.current {
                Some(reader) => reader,
                None => {
                    let Some(file) = self.files.get(self.next) else { return Ok(None) };
                    self.next += 1;
                    self.current.insert(open_file(file, &self.format, self.read)?)
                }
            };
            match next(reader)? {
                Some(item) => return Ok(Some(item)),
                None => self.current = None,
            }
        }
    }
}

impl ChunkReader for FilesReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.pull(|reader| reader.next_chunk())
    }

    /// Avro files are described for the pool ([`AvroReader`]'s runs of blocks), one file
    /// after another.
    fn defers(&self) -> bool {
        matches!(self.format, FileFormat::Avro(_))
    }

    fn next_deferred(&mut self) -> Result<Option<std::sync::Arc<dyn crate::reader::Deferred>>> {
        self.pull(|reader| reader.next_deferred())
    }

    /// A run of the current file: one that ends with its file has fewer rows.
    fn next_deferred_rows(&mut self, rows: usize) -> Result<Option<std::sync::Arc<dyn crate::reader::Deferred>>> {
        self.pull(|reader| reader.next_deferred_rows(rows))
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (file, inner) = match &self.current {
            Some(reader) => (self.next - 1, Some(reader.position()?)),
            None => (self.next, None),
        };
        let path = self.files.get(file).cloned();
        encode("files", &FilesPosition { files: self.files.len(), file, path, inner })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: FilesPosition = decode("files", position)?;
        if at.files != self.files.len() || at.file > at.files || at.path.as_ref() != self.files.get(at.file) {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in this list of {} files", self.files.len()),
            ));
        }
        self.current = None;
        self.next = at.file;
        if let Some(inner) = &at.inner {
            let Some(file) = &at.path else {
                return Err(Error::execution("seek", format!("{position} has a reader position past the last file")));
            };
            let mut reader = open_file(file, &self.format, self.read)?;
            reader.seek(inner)?;
            self.current = Some(reader);
            self.next += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::sync::Arc;

    use ::parquet::arrow::ArrowWriter;
    use ::parquet::file::properties::WriterProperties;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use flumen_ir::{DType, ElementSpec, FieldSpec};

    use super::*;
    use crate::parquet::parquet_format;
    use crate::reader::testing::{check_resume, seek_error, Outcome};

    /// A Parquet file of `values` (column `v`) in row groups of `group_rows`.
    fn parquet_file(dir: &tempfile::TempDir, name: &str, values: Vec<i64>, group_rows: usize) -> String {
        let path = dir.path().join(name);
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))]).unwrap();
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(group_rows)).build();
        let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        path.to_str().unwrap().to_string()
    }

    fn values(mut reader: BoxReader) -> Vec<i64> {
        let mut out = vec![];
        while let Some(chunk) = reader.next_chunk().unwrap() {
            out.extend(chunk.column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
        out
    }

    #[test]
    fn parquet_splits_are_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let a = parquet_file(&dir, "a.parquet", (0..7).collect(), 3);
        let b = parquet_file(&dir, "b.parquet", (100..102).collect(), 3);
        let format = FileFormat::Parquet(parquet_format(&a).unwrap());
        let files = vec![a.clone(), b.clone()];
        let found = splits(&files, &format).unwrap();
        let expected: Vec<Split> = [(&a, 0), (&a, 1), (&a, 2), (&b, 0)]
            .into_iter()
            .map(|(f, g)| Split { file: f.clone(), row_group: Some(g) })
            .collect();
        assert_eq!(found, expected);
        let read: Vec<Vec<i64>> =
            found.iter().map(|s| values(open_split(s, &format, ReadOptions::chunks_of(2)).unwrap())).collect();
        assert_eq!(read, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6], vec![100, 101]]);
        let whole = Split { file: a, row_group: None };
        assert_eq!(values(open_split(&whole, &format, ReadOptions::chunks_of(2)).unwrap()), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn other_formats_split_by_file() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<String> =
            ["a.txt", "b.txt"].iter().map(|n| dir.path().join(n).to_str().unwrap().to_string()).collect();
        let found = splits(&files, &FileFormat::TextLines).unwrap();
        assert_eq!(found, files.iter().map(|f| Split { file: f.clone(), row_group: None }).collect::<Vec<_>>());
        let bad = Split { file: files[0].clone(), row_group: Some(0) };
        assert!(matches!(
            open_split(&bad, &FileFormat::TextLines, ReadOptions::chunks_of(1)),
            Err(Error::Execution { .. })
        ));
    }

    #[test]
    fn files_reader_reads_files_in_order_and_opens_them_lazily() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        fs::write(path("a.csv"), "v\n1\n2\n3\n").unwrap();
        fs::write(path("b.csv"), "v\n").unwrap();
        fs::write(path("c.csv"), "v\n4\n").unwrap();
        let schema = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Int64)]).unwrap();
        let format = FileFormat::Csv(flumen_ir::CsvFormat { schema, header: true, delimiter: ',', columns: None });
        let files = vec![path("a.csv"), path("b.csv"), path("c.csv")];
        assert_eq!(
            values(Box::new(FilesReader::new(files, format.clone(), ReadOptions::chunks_of(2)))),
            vec![1, 2, 3, 4]
        );
        // The missing file is only opened after the first one is read.
        let mut reader = FilesReader::new(vec![path("c.csv"), path("missing.csv")], format, ReadOptions::chunks_of(2));
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 1);
        assert!(matches!(reader.next_chunk(), Err(Error::Io { path: p, .. }) if p == path("missing.csv")));
    }

    #[test]
    fn files_reader_goes_on_after_a_bad_record_and_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        // Line 3 of a.csv is bad; the rest of a.csv is read, then c.csv after the missing file.
        fs::write(path("a.csv"), "v\n1\nx\n2\n").unwrap();
        fs::write(path("c.csv"), "v\n4\n").unwrap();
        let schema = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Int64)]).unwrap();
        let format = FileFormat::Csv(flumen_ir::CsvFormat { schema, header: true, delimiter: ',', columns: None });
        let files = vec![path("a.csv"), path("missing.csv"), path("c.csv")];
        let mut reader = FilesReader::new(files, format, ReadOptions::chunks_of(10));
        let mut out = vec![];
        for _ in 0..100 {
            match reader.next_chunk() {
                Ok(None) => break,
                Ok(Some(chunk)) => {
                    out.extend(chunk.column(0).as_primitive::<Int64Type>().values().iter().map(|&v| Ok(v)))
                }
                Err(Error::Data { location, .. }) => out.push(Err(format!("{location}"))),
                Err(Error::Io { path, .. }) => out.push(Err(path)),
                Err(other) => panic!("{other}"),
            }
        }
        let bad = format!("{}", flumen_ir::Location::new(path("a.csv"), "line 3"));
        assert_eq!(out, vec![Ok(1), Err(bad), Ok(2), Err(path("missing.csv")), Ok(4)]);
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        // A bad record in the middle of a.csv, an empty b.csv, a missing file, then c.csv.
        fs::write(path("a.csv"), "v\n1\n2\nx\n3\n4\n").unwrap();
        fs::write(path("b.csv"), "v\n").unwrap();
        fs::write(path("c.csv"), "v\n5\n6\n7\n").unwrap();
        let schema = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Int64)]).unwrap();
        let csv = FileFormat::Csv(flumen_ir::CsvFormat { schema, header: true, delimiter: ',', columns: None });
        let files = vec![path("a.csv"), path("b.csv"), path("missing.csv"), path("c.csv")];
        for chunk_rows in [1, 2, 100] {
            let outcomes = check_resume(chunk_rows, |rows| {
                Box::new(FilesReader::new(files.clone(), csv.clone(), ReadOptions::chunks_of(rows)))
            });
            assert_eq!(outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count(), 2);
        }
        // Three Parquet files of several row groups, in chunks smaller than a row group.
        let parquet: Vec<String> =
            (0..3).map(|i| parquet_file(&dir, &format!("{i}.parquet"), (i * 10..i * 10 + 7).collect(), 3)).collect();
        let format = FileFormat::Parquet(parquet_format(&parquet[0]).unwrap());
        for chunk_rows in [2, 100] {
            check_resume(chunk_rows, |rows| {
                Box::new(FilesReader::new(parquet.clone(), format.clone(), ReadOptions::chunks_of(rows)))
            });
        }
        // Three text files, one with a bad line.
        fs::write(path("a.txt"), b"a\n\xff\nb\n").unwrap();
        fs::write(path("b.txt"), "").unwrap();
        fs::write(path("c.txt"), "c\nd").unwrap();
        let texts = vec![path("a.txt"), path("b.txt"), path("c.txt")];
        check_resume(1, |rows| {
            Box::new(FilesReader::new(texts.clone(), FileFormat::TextLines, ReadOptions::chunks_of(rows)))
        });
    }

    #[test]
    fn a_position_in_another_list_of_files_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        for name in ["a.txt", "b.txt", "c.txt"] {
            fs::write(path(name), "x\ny\n").unwrap();
        }
        let files = vec![path("a.txt"), path("b.txt")];
        let mut reader = FilesReader::new(files.clone(), FileFormat::TextLines, ReadOptions::chunks_of(1));
        (0..3).for_each(|_| drop(reader.next_chunk().unwrap()));
        let position = reader.position().unwrap();
        let inner = serde_json::json!({"reader": "text", "len": 4, "offset": 2, "line": 2});
        assert_eq!(
            position,
            serde_json::json!({"reader": "files", "files": 2, "file": 1, "path": path("b.txt"), "inner": inner})
        );
        let open = |files: Vec<String>| {
            move || {
                Box::new(FilesReader::new(files.clone(), FileFormat::TextLines, ReadOptions::chunks_of(1))) as BoxReader
            }
        };
        let other = open(vec![path("a.txt"), path("c.txt")]);
        assert!(seek_error(other, position.clone()).contains("is not a position in this list of 2 files"));
        let longer = open(vec![path("a.txt"), path("b.txt"), path("c.txt")]);
        assert!(seek_error(longer, position.clone()).contains("is not a position in this list of 3 files"));
        let past = serde_json::json!({"reader": "files", "files": 2, "file": 3, "path": null, "inner": null});
        assert!(seek_error(open(files.clone()), past).contains("is not a position in this list of 2 files"));
        let inner_past = serde_json::json!({"reader": "files", "files": 2, "file": 2, "path": null, "inner": inner});
        assert!(seek_error(open(files.clone()), inner_past).contains("past the last file"));
        let csv_inner = serde_json::json!({"reader": "files", "files": 2, "file": 1, "path": path("b.txt"),
            "inner": {"reader": "csv", "len": 4, "offset": 2, "line": 2, "header": false, "retry": null}});
        assert!(seek_error(open(files.clone()), csv_inner).contains("not a position of a text reader"));
        fs::write(path("b.txt"), "x\ny\nz\n").unwrap();
        assert!(seek_error(open(files), position).contains("the position was taken when the file had 4 bytes"));
    }
}

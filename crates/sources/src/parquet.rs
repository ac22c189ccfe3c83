//! Apache Parquet files: the schema from the footer, and a reader of projected columns and
//! chosen row groups, with an optional pushed-down predicate.
//!
//! With a predicate ([`ParquetFormat::predicate`]) the reader first skips the row groups whose
//! column statistics prove that no row passes ([`crate::prune`]), then decodes the projected
//! columns plus the columns the predicate reads, keeps the rows where the predicate is true
//! (null counts as false) and hands out the projected columns only.

use std::collections::VecDeque;
use std::fs::File;

use ::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use ::parquet::arrow::ProjectionMask;
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use flumen_ir::{DType, ElementSpec, Error, Expr, FileFormat, Location, ParquetFormat, Result};
use flumen_udf::eval::evaluate_predicate;
use serde::{Deserialize, Serialize};

use crate::conform::{file_spec, with_schema, Conformer};
use crate::guard::{guarded, next_batch};
use crate::position::{check_len, decode, encode, file_len, HeldError};
use crate::prune::row_group_may_match;
use crate::reader::{ChunkReader, ReaderPosition};

/// Opens `path` and reads its footer.
fn open_footer(path: &str) -> Result<(File, ArrowReaderMetadata)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let footer = guarded(
        || Location::new(path, "footer"),
        || {
            ArrowReaderMetadata::load(&file, Default::default())
                .map_err(|e| Error::data(Location::new(path, "footer"), format!("not a readable Parquet file: {e}")))
        },
    )?;
    Ok((file, footer))
}

/// The format of the Parquet file `path`: its schema as read from the footer, all columns.
pub fn parquet_format(path: &str) -> Result<ParquetFormat> {
    let (_, footer) = open_footer(path)?;
    Ok(ParquetFormat { schema: file_spec(path, footer.schema())?, columns: None, predicate: None })
}

/// The number of row groups of the Parquet file `path`.
pub fn row_group_count(path: &str) -> Result<usize> {
    Ok(open_footer(path)?.1.metadata().num_row_groups())
}

/// Reads the projected columns of chosen row groups of a Parquet file in chunks, keeping
/// only the rows that pass the format's predicate when it has one.
pub struct ParquetReader {
    /// The decoder of the row group being read (`row_groups[group]`), made when it is first
    /// read: a row group at a time, so that a decoding error is that row group's, and the
    /// reader goes on with the next one.
    reader: Option<ParquetRecordBatchReader>,
    /// The row group being read, among `row_groups`.
    group: usize,
    /// Rows of it to skip when its decoder is made (a seek into it).
    skip: u64,
    /// How to build another decoder of the file, to seek.
    decoding: Decoding,
    /// The length of the file when it was opened.
    len: u64,
    /// Fits the decoded batches to the output columns followed by the columns only the
    /// predicate reads.
    conformer: Conformer,
    /// The pushed-down predicate and the output schema (a prefix of the conformed columns).
    filter: Option<(Expr, SchemaRef)>,
    path: String,
    /// The row groups read (those left after pruning), in order, with their number of rows.
    row_groups: Vec<(usize, u64)>,
    /// Rows decoded so far.
    rows_read: u64,
    done: bool,
    /// What the predicate's failure on a chunk left to hand out before decoding more: the
    /// rows before the failing one, its error, the rows after it.
    pending: VecDeque<Pending>,
}

/// Work left over from a chunk whose predicate failed. The rows are contiguous: each item
/// starts where the one before it ends.
enum Pending {
    /// Conformed rows still to filter; `first` is the index of the first among the rows read.
    Rows { batch: RecordBatch, first: u64 },
    /// The predicate's error on row `row` of the rows read: filtering that row again fails
    /// again.
    RowError { error: Error, row: u64 },
    /// The predicate's error on a whole batch in which no row fails on its own, followed by
    /// row `after` of the rows read.
    BatchError { error: Error, after: u64 },
}

/// What building a decoder of a Parquet file takes: one is built per row group.
struct Decoding {
    /// The file as opened: decoders read it through clones of this handle, never by path
    /// again, so a file deleted or replaced while being read is still the file that was opened.
    file: File,
    footer: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// The decoded columns: their indices among the file's root columns, and names.
    columns: Vec<(usize, String)>,
    chunk_rows: usize,
}

impl Decoding {
    /// A decoder of the row groups `row_groups` of `file`, opened from `path`, that skips the
    /// first `skip` of their `rows` rows.
    fn build(
        &self,
        path: &str,
        file: File,
        row_groups: Vec<usize>,
        skip: u64,
        rows: u64,
        batch_rows: usize,
    ) -> Result<ParquetRecordBatchReader> {
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.footer.clone())
            .with_projection(self.mask.clone())
            .with_row_groups(row_groups)
            .with_batch_size(batch_rows);
        if skip > 0 {
            let selectors = vec![RowSelector::skip(skip as usize), RowSelector::select((rows - skip) as usize)];
            builder = builder.with_row_selection(RowSelection::from(selectors));
        }
        guarded(
            || Location::source(path),
            || builder.build().map_err(|e| Error::data(Location::source(path), e.to_string())),
        )
    }

    /// The rows of row group `row_group` (of `rows` rows) of `path` from row `from` on that
    /// decode before its first failing row, decoded one at a time: what a chunk that failed
    /// as a whole held that was good, so that no good row is lost to the chunk size.
    fn rows_before_error(&self, path: &str, row_group: usize, from: u64, rows: u64) -> Vec<RecordBatch> {
        let mut good = Vec::new();
        let Ok(file) = self.file.try_clone() else { return good };
        let Ok(mut reader) = self.build(path, file, vec![row_group], from, rows, 1) else { return good };
        let location = Location::new(path, format!("row group {row_group}"));
        while let Ok(Some(batch)) = next_batch(&mut reader, &location, &mut false) {
            good.push(batch);
        }
        good
    }

    /// The first decoded column that fails to decode alone in row group `row_group` of
    /// `path` (the column a decoding error of the whole row group came from), if one does.
    fn failing_column(&self, path: &str, row_group: usize) -> Option<&str> {
        self.columns.iter().find_map(|(index, name)| {
            let file = self.file.try_clone().ok()?;
            let mask = ProjectionMask::roots(self.footer.parquet_schema(), [*index]);
            let decoded = guarded(
                || Location::source(path),
                || {
                    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.footer.clone())
                        .with_projection(mask)
                        .with_row_groups(vec![row_group])
                        .with_batch_size(self.chunk_rows);
                    let reader = builder.build().map_err(|e| Error::data(Location::source(path), e.to_string()))?;
                    for batch in reader {
                        batch.map_err(|e| Error::data(Location::source(path), e.to_string()))?;
                    }
                    Ok(())
                },
            );
            decoded.is_err().then_some(name.as_str())
        })
    }
}

/// Where a [`ParquetReader`] is, in a file of `len` bytes: the next row to decode (`None` once
/// the reader has ended), and an error to report before it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParquetPosition {
    len: u64,
    at: Option<GroupRow>,
    error: Option<HeldError>,
}

/// A row of a Parquet file read by a [`ParquetReader`]: row `row` of row group `row_group`,
/// the `group`-th (0-based) of the row groups the reader reads.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupRow {
    group: usize,
    row_group: usize,
    row: u64,
}

impl ParquetReader {
    /// Opens `path` to read the columns `format.columns` (all when absent, in the given
    /// order) of the row groups `row_groups` (all when absent) in chunks of at most
    /// `chunk_rows` rows. Only the projected columns are decoded, and the columns
    /// `format.predicate` reads.
    ///
    /// With a predicate, the row groups whose statistics prove it false for every row are
    /// skipped ([`row_group_may_match`]) and the rows of the others are filtered; chunks may
    /// then hold fewer than `chunk_rows` rows. A predicate that fails on a row (an integer
    /// division by zero, an impossible cast) is an [`Error::Data`] naming the file, the row
    /// group and the row within it; the rows before it come first and reading continues after
    /// it.
    ///
    /// A file that is not Parquet (truncated, corrupt footer), a row group it does not have,
    /// or a schema that does not match `format.schema` is an [`Error::Data`] naming the file.
    /// A predicate that is not a boolean expression over `format.schema` is an
    /// [`Error::Plan`].
    pub fn open(path: &str, format: &ParquetFormat, row_groups: Option<Vec<usize>>, chunk_rows: usize) -> Result<Self> {
        let output = FileFormat::Parquet(format.clone()).output_spec()?;
        let target = output.arrow_schema();
        let read = match &format.predicate {
            Some(predicate) => read_spec(&output, predicate, &format.schema)?,
            None => output,
        };
        let read_schema = read.arrow_schema();
        let (file, footer) = open_footer(path)?;
        let len = file_len(&file, path)?;
        let metadata = footer.metadata().clone();
        let count = metadata.num_row_groups();
        let row_groups = row_groups.unwrap_or_else(|| (0..count).collect());
        if let Some(&bad) = row_groups.iter().find(|&&i| i >= count) {
            return Err(Error::data(
                Location::new(path, format!("row group {bad}")),
                format!("the file has {count} row groups"),
            ));
        }
        let row_groups: Vec<usize> = match &format.predicate {
            Some(predicate) => {
                row_groups.into_iter().filter(|&i| row_group_may_match(predicate, metadata.row_group(i))).collect()
            }
            None => row_groups,
        };
        let roots = footer.parquet_schema().root_schema().get_fields();
        let indices = read_schema
            .fields()
            .iter()
            .map(|f| {
                roots.iter().position(|r| r.name() == f.name()).ok_or_else(|| {
                    Error::data(
                        Location::source(path),
                        format!(
                            "the file has no column '{}'; it does not match the schema the dataset was built with",
                            f.name()
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mask = ProjectionMask::roots(footer.parquet_schema(), indices.iter().copied());
        let columns = indices.iter().map(|&i| (i, roots[i].name().to_string())).collect();
        let sizes = row_groups.iter().map(|&i| (i, metadata.row_group(i).num_rows().max(0) as u64)).collect();
        let decoding = Decoding { file, footer, mask, columns, chunk_rows: chunk_rows.max(1) };
        // A decoder of no row group, for the decoded schema.
        let handle = decoding.file.try_clone().map_err(|e| Error::io(path, e))?;
        let schema = decoding.build(path, handle, vec![], 0, 0, 1)?.schema();
        let conformer = Conformer::new(&schema, read_schema, path)?;
        Ok(ParquetReader {
            reader: None,
            group: 0,
            skip: 0,
            decoding,
            len,
            conformer,
            filter: format.predicate.clone().map(|p| (p, target)),
            path: path.to_string(),
            row_groups: sizes,
            rows_read: 0,
            done: false,
            pending: VecDeque::new(),
        })
    }

    /// The row groups this reader reads, in order: the chosen ones less those the predicate's
    /// statistics check skipped.
    pub fn row_groups(&self) -> Vec<usize> {
        self.row_groups.iter().map(|&(index, _)| index).collect()
    }

    /// The number of rows decoded from the file so far, before the predicate filters them.
    pub fn rows_decoded(&self) -> u64 {
        self.rows_read
    }

    /// The rows of the conformed `batch` (whose first row is row `first` of the rows read)
    /// that pass the predicate, in the output schema; `None` when none passes or when the
    /// predicate failed (its error and the rest of the batch are then pending).
    fn filter_rows(&mut self, batch: RecordBatch, first: u64) -> Result<Option<RecordBatch>> {
        let Some((predicate, output)) = &self.filter else {
            return Ok(Some(batch));
        };
        let mask = match evaluate_predicate(predicate, &batch) {
            Ok(mask) => mask,
            Err(chunk_error) => {
                // Find the failing row: the rows before it are delivered, then its error, then
                // the rows after it. When every row passes alone, the batch fails as a whole.
                let n = batch.num_rows();
                let failing =
                    (0..n).find_map(|i| evaluate_predicate(predicate, &batch.slice(i, 1)).err().map(|e| (i, e)));
                let (row, error) = match failing {
                    Some((i, e)) => (Some(i), e),
                    None => (None, chunk_error),
                };
                let at = match row {
                    Some(i) => self.row_location(first + i as u64),
                    None => locate(&self.path, &self.row_groups, first),
                };
                let message = match error {
                    Error::Expr(message) => message,
                    other => other.to_string(),
                };
                let error = Error::data(at, format!("the pushed-down predicate {predicate} failed: {message}"));
                if let Some(i) = row {
                    if i + 1 < n {
                        self.pending.push_front(Pending::Rows {
                            batch: batch.slice(i + 1, n - i - 1),
                            first: first + i as u64 + 1,
                        });
                    }
                    self.pending.push_front(Pending::RowError { error, row: first + i as u64 });
                    if i > 0 {
                        self.pending.push_front(Pending::Rows { batch: batch.slice(0, i), first });
                    }
                } else {
                    self.pending.push_front(Pending::BatchError { error, after: first + n as u64 });
                }
                return Ok(None);
            }
        };
        let kept = filter_record_batch(&batch, &mask)
            .map_err(|e| Error::data(locate(&self.path, &self.row_groups, first), e.to_string()))?;
        if kept.num_rows() == 0 {
            return Ok(None);
        }
        let columns = kept.columns()[..output.fields().len()].to_vec();
        with_schema(output.clone(), columns, kept.num_rows()).map(Some)
    }

    /// The decoder of row group `row_group` (of `rows` rows), the one being read; made now
    /// when it has not been yet.
    fn decoder(&mut self, row_group: usize, rows: u64) -> Result<&mut ParquetRecordBatchReader> {
        if self.reader.is_none() {
            let file = self.decoding.file.try_clone().map_err(|e| Error::io(self.path.as_str(), e))?;
            let location = || Location::new(&self.path, format!("row group {row_group}"));
            let reader = self
                .decoding
                .build(&self.path, file, vec![row_group], self.skip, rows, self.decoding.chunk_rows)
                .map_err(|e| match e {
                    Error::Data { message, .. } => Error::data(location(), message),
                    other => other,
                })?;
            self.reader = Some(reader);
            self.skip = 0;
        }
        Ok(self.reader.as_mut().expect("made"))
    }

    /// Moves on to the next row group, its first row next.
    fn next_group(&mut self) {
        self.reader = None;
        self.skip = 0;
        self.group += 1;
        self.rows_read = self.row_groups[..self.group.min(self.row_groups.len())].iter().map(|&(_, rows)| rows).sum();
    }

    /// Where row `row` of the rows read is: its row group and its row within the group.
    fn row_location(&self, row: u64) -> Location {
        match self.group_row(row) {
            Some(at) => Location::new(&self.path, format!("row group {}, row {}", at.row_group, at.row)),
            None => Location::source(&self.path),
        }
    }

    /// Row `row` of the rows read, in the file's terms; `None` past the last one.
    fn group_row(&self, row: u64) -> Option<GroupRow> {
        let mut first = 0;
        for (group, &(row_group, rows)) in self.row_groups.iter().enumerate() {
            if row < first + rows {
                return Some(GroupRow { group, row_group, row: row - first });
            }
            first += rows;
        }
        None
    }
}

/// The spec of the columns decoded for `predicate`: the output columns `output`, then the
/// other columns of `schema` (the file's) that the predicate reads, in name order. Fails when
/// the predicate is not a boolean expression over `schema`.
fn read_spec(output: &ElementSpec, predicate: &Expr, schema: &ElementSpec) -> Result<ElementSpec> {
    let dtype = predicate
        .data_type(schema)
        .map_err(|e| Error::plan("parquet", format!("the pushed-down predicate {predicate} is invalid: {e}")))?;
    if dtype != DType::Bool {
        return Err(Error::plan("parquet", format!("the pushed-down predicate {predicate} is {dtype}, not bool")));
    }
    let mut fields = output.fields.clone();
    for name in predicate.columns() {
        if output.field(&name).is_none() {
            fields.push(schema.require(&name, "parquet")?.clone());
        }
    }
    Ok(ElementSpec { fields, batch_dims: 0 })
}

/// Where row `row` of the rows read from `row_groups` (index, rows) of file `path` is.
fn locate(path: &str, row_groups: &[(usize, u64)], row: u64) -> Location {
    let mut first = 0;
    for &(index, rows) in row_groups {
        if row < first + rows {
            return Location::new(path, format!("row group {index}"));
        }
        first += rows;
    }
    Location::source(path)
}

impl ChunkReader for ParquetReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            match self.pending.pop_front() {
                Some(Pending::RowError { error, .. } | Pending::BatchError { error, .. }) => return Err(error),
                Some(Pending::Rows { batch, first }) => match self.filter_rows(batch, first)? {
                    Some(chunk) => return Ok(Some(chunk)),
                    None => continue,
                },
                None => {}
            }
            if self.done {
                return Ok(None);
            }
            let Some(&(row_group, rows)) = self.row_groups.get(self.group) else {
                self.done = true;
                return Ok(None);
            };
            let location = Location::new(&self.path, format!("row group {row_group}"));
            let batch = match self.decoder(row_group, rows).and_then(|reader| next_batch(reader, &location, &mut false))
            {
                Ok(Some(batch)) => batch,
                Ok(None) => {
                    self.next_group();
                    continue;
                }
                // What is left of the row group cannot be decoded: its error, naming the
                // column that fails, and the next row group after it.
                // The rows before the failing one come out first, whatever the chunk size.
                Err(error) => {
                    let group_start: u64 = self.row_groups[..self.group].iter().map(|&(_, rows)| rows).sum();
                    let from = self.rows_read - group_start;
                    let good = self.decoding.rows_before_error(&self.path, row_group, from, rows);
                    let first = self.rows_read;
                    let error = match self.decoding.failing_column(&self.path, row_group) {
                        Some(column) => match error {
                            Error::Data { message, .. } => Error::data(
                                Location::new(&self.path, format!("row group {row_group}, column '{column}'")),
                                message,
                            ),
                            other => other,
                        },
                        None => error,
                    };
                    self.next_group();
                    if !good.is_empty() {
                        let batch = concat_batches(&good[0].schema(), &good)
                            .map_err(|e| Error::data(location.clone(), e.to_string()))?;
                        let batch = self.conformer.apply(&batch, || location.clone())?;
                        self.pending.push_back(Pending::Rows { batch, first });
                    }
                    self.pending.push_back(Pending::BatchError { error, after: self.rows_read });
                    continue;
                }
            };
            let first = self.rows_read;
            self.rows_read += batch.num_rows() as u64;
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = self.conformer.apply(&batch, || location.clone())?;
            if let Some(chunk) = self.filter_rows(batch, first)? {
                return Ok(Some(chunk));
            }
        }
    }

    fn position(&self) -> Result<ReaderPosition> {
        // The first row not handed out yet; pending rows and a row's error are decoded (and
        // the error found) again after a seek, an error about a whole batch is kept.
        let (next, error) = match self.pending.front() {
            Some(Pending::Rows { first, .. }) => (*first, None),
            Some(Pending::RowError { row, .. }) => (*row, None),
            Some(Pending::BatchError { error, after }) => (*after, Some(HeldError::save(error)?)),
            // After a decoding error the reader has ended: decoding again would fail again.
            None if self.done => (u64::MAX, None),
            None => (self.rows_read, None),
        };
        encode("parquet", &ParquetPosition { len: self.len, at: self.group_row(next), error })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: ParquetPosition = decode("parquet", position)?;
        check_len(&self.path, at.len, self.len)?;
        let after = match at.at {
            None => {
                self.done = true;
                u64::MAX
            }
            Some(GroupRow { group, row_group, row }) => {
                let fits = self.row_groups.get(group).is_some_and(|&(index, rows)| index == row_group && row < rows);
                if !fits {
                    return Err(Error::execution(
                        "seek",
                        format!(
                            "{position} is not a position in the row groups {:?} of {}",
                            self.row_groups(),
                            self.path
                        ),
                    ));
                }
                (self.reader, self.group, self.skip) = (None, group, row);
                self.rows_read = self.row_groups[..group].iter().map(|&(_, rows)| rows).sum::<u64>() + row;
                self.done = false;
                self.rows_read
            }
        };
        self.pending.clear();
        if let Some(error) = at.error {
            self.pending.push_back(Pending::BatchError { error: error.restore(&self.path), after });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::parquet::arrow::ArrowWriter;
    use ::parquet::file::properties::WriterProperties;
    use arrow::array::{
        Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array, Int64Array, LargeStringArray, ListArray,
        StringArray,
    };
    use arrow::datatypes::{DataType, Field, Float32Type, Int64Type, Schema};
    use flumen_ir::{BinaryOp, FieldSpec};

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    const ROWS: i64 = 25;

    /// Writes `batch` to `name` in row groups of 10 rows.
    fn write(dir: &tempfile::TempDir, name: &str, batch: &RecordBatch) -> String {
        let path = dir.path().join(name);
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(10)).build();
        let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        path.to_str().unwrap().to_string()
    }

    /// id: int64, name: string, vec: float32[2], tags: ragged int64[?]: row i has id i,
    /// name "n{i}", vec [i, -i], tags [0, 1, .., i % 3).
    fn sample() -> RecordBatch {
        let ids: Vec<i64> = (0..ROWS).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
        let vec = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
            ids.iter().map(|&i| Some(vec![Some(i as f32), Some(-i as f32)])),
            2,
        );
        let tags = ListArray::from_iter_primitive::<Int64Type, _, _>(
            ids.iter().map(|&i| Some((0..i % 3).map(Some).collect::<Vec<_>>())),
        );
        let columns: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(names)), Arc::new(vec), Arc::new(tags)];
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("vec", columns[2].data_type().clone(), true),
            Field::new("tags", columns[3].data_type().clone(), true),
        ]);
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    fn read_all(
        path: &str,
        format: &ParquetFormat,
        row_groups: Option<Vec<usize>>,
        chunk_rows: usize,
    ) -> Result<Vec<RecordBatch>> {
        let schema = FileFormat::Parquet(format.clone()).output_spec()?.arrow_schema();
        let mut reader = ParquetReader::open(path, format, row_groups, chunk_rows)?;
        let mut chunks = vec![];
        while let Some(chunk) = reader.next_chunk()? {
            assert!(chunk.num_rows() > 0 && chunk.num_rows() <= chunk_rows);
            assert_eq!(chunk.schema(), schema);
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    fn column_ints(chunks: &[RecordBatch], name: &str) -> Vec<i64> {
        chunks
            .iter()
            .flat_map(|c| c.column_by_name(name).unwrap().as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn reads_the_schema_from_the_footer() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        let expected = ElementSpec::new(vec![
            FieldSpec::scalar("id", DType::Int64),
            FieldSpec::scalar("name", DType::Utf8),
            FieldSpec::tensor("vec", DType::Float32, vec![2]),
            FieldSpec::ragged("tags", DType::Int64, vec![-1]),
        ])
        .unwrap();
        assert_eq!(format, ParquetFormat { schema: expected, columns: None, predicate: None });
        assert_eq!(row_group_count(&path).unwrap(), 3);
    }

    #[test]
    fn reads_all_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let chunks = read_all(&path, &parquet_format(&path).unwrap(), None, 4).unwrap();
        assert_eq!(column_ints(&chunks, "id"), (0..ROWS).collect::<Vec<_>>());
        let names: Vec<String> = chunks
            .iter()
            .flat_map(|c| c.column(1).as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>())
            .collect();
        assert_eq!(names, (0..ROWS).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let vecs: Vec<f32> = chunks
            .iter()
            .flat_map(|c| c.column(2).as_fixed_size_list().values().as_primitive::<Float32Type>().values().to_vec())
            .collect();
        assert_eq!(vecs, (0..ROWS).flat_map(|i| [i as f32, -i as f32]).collect::<Vec<_>>());
        let tags: Vec<Vec<i64>> = chunks
            .iter()
            .flat_map(|c| {
                c.column(3)
                    .as_list::<i32>()
                    .iter()
                    .map(|l| l.unwrap().as_primitive::<Int64Type>().values().to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(tags, (0..ROWS).map(|i| (0..i % 3).collect::<Vec<_>>()).collect::<Vec<_>>());
    }

    #[test]
    fn projection_reads_the_requested_columns_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format =
            ParquetFormat { columns: Some(vec!["tags".into(), "id".into()]), ..parquet_format(&path).unwrap() };
        let chunks = read_all(&path, &format, None, 100).unwrap();
        let names: Vec<String> = chunks[0].schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, vec!["tags", "id"]);
        assert_eq!(column_ints(&chunks, "id"), (0..ROWS).collect::<Vec<_>>());
    }

    #[test]
    fn reads_chosen_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        let chunks = read_all(&path, &format, Some(vec![2, 1]), 8192).unwrap();
        assert_eq!(column_ints(&chunks, "id"), (20..25).chain(10..20).collect::<Vec<_>>());
        assert!(read_all(&path, &format, Some(vec![]), 8192).unwrap().is_empty());
        let err = ParquetReader::open(&path, &format, Some(vec![3]), 10).err().unwrap();
        assert!(
            matches!(&err, Error::Data { location, .. } if location.position.as_deref() == Some("row group 3")),
            "{err}"
        );
    }

    #[test]
    fn equivalent_file_types_are_fitted_to_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let item = Arc::new(Field::new("element", DataType::Int64, false));
        let tags = ListArray::new(
            item.clone(),
            arrow::buffer::OffsetBuffer::from_lengths([1, 0]),
            Arc::new(Int64Array::from(vec![5])),
            None,
        );
        let schema = Schema::new(vec![
            Field::new("s", DataType::LargeUtf8, false),
            Field::new("tags", DataType::List(item), false),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(LargeStringArray::from(vec!["a", "b"])), Arc::new(tags)],
        )
        .unwrap();
        let path = write(&dir, "a.parquet", &batch);
        let format = parquet_format(&path).unwrap();
        assert_eq!(format.schema.fields[0], FieldSpec::scalar("s", DType::Utf8));
        let chunks = read_all(&path, &format, None, 10).unwrap();
        assert_eq!(chunks[0].column(0).as_string::<i32>().value(1), "b");
    }

    #[test]
    fn a_file_with_another_schema_is_a_data_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let mut format = parquet_format(&path).unwrap();
        format.schema.fields[0].dtype = DType::Utf8;
        let err = ParquetReader::open(&path, &format, None, 10).err().unwrap();
        assert!(matches!(err, Error::Data { .. }) && err.to_string().contains(&path), "{err}");
        format.schema.fields[0] = FieldSpec::scalar("other", DType::Int64);
        let err = ParquetReader::open(&path, &format, None, 10).err().unwrap();
        assert!(err.to_string().contains("no column 'other'"), "{err}");
    }

    #[test]
    fn truncated_file_is_a_data_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        for err in [
            parquet_format(&path).unwrap_err(),
            ParquetReader::open(&path, &format, None, 10).err().unwrap(),
            row_group_count(&path).unwrap_err(),
        ] {
            assert!(matches!(err, Error::Data { .. }) && err.to_string().contains(&path), "{err}");
        }
    }

    /// Keeps the magic and the footer of the file at `path` and scrambles its pages.
    fn scramble_pages(path: &str) {
        let mut bytes = std::fs::read(path).unwrap();
        let end = bytes.len() / 3;
        for (i, b) in bytes[4..end].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0x5a;
        }
        std::fs::write(path, &bytes).unwrap();
    }

    /// A file of `rows` rows (`a`: the row index, `b`: half of it) written with `props`.
    fn write_ids(dir: &tempfile::TempDir, name: &str, rows: i64, props: WriterProperties) -> String {
        let ids: Vec<i64> = (0..rows).collect();
        let batch = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
            ("b", Arc::new(Float64Array::from_iter_values(ids.iter().map(|&i| i as f64 * 0.5))) as ArrayRef),
        ])
        .unwrap();
        let path = dir.path().join(name);
        let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        path.to_str().unwrap().to_string()
    }

    /// Every value of `a` a reader gives, and its errors with the count of values before each.
    fn ids_and_errors(mut reader: ParquetReader) -> (Vec<i64>, Vec<(usize, String)>) {
        let (mut ids, mut errors) = (vec![], vec![]);
        loop {
            match reader.next_chunk() {
                Ok(Some(chunk)) => ids.extend(column_ints(&[chunk], "a")),
                Ok(None) => return (ids, errors),
                Err(e) => errors.push((ids.len(), e.to_string())),
            }
        }
    }

    #[test]
    fn a_corrupt_page_is_its_row_group_s_error_and_reading_goes_on() {
        // 9 row groups of 1,000 rows; the page header of row group 3's column `b` is broken.
        // The error named row group 2 (the start of a chunk spanning both), and reading
        // stopped there: 2,048 of the 8,000 good rows came out.
        let dir = tempfile::tempdir().unwrap();
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(1000)).build();
        let path = write_ids(&dir, "groups.parquet", 9000, props);
        let (_, footer) = open_footer(&path).unwrap();
        let (start, _) = footer.metadata().row_group(3).column(1).byte_range();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[start as usize..start as usize + 16].fill(0xff);
        std::fs::write(&path, &bytes).unwrap();
        let format = parquet_format(&path).unwrap();
        for chunk_rows in [100, 1024, 4096] {
            let (ids, errors) = ids_and_errors(ParquetReader::open(&path, &format, None, chunk_rows).unwrap());
            let expected: Vec<i64> = (0..9000).filter(|i| !(3000..4000).contains(i)).collect();
            assert_eq!(ids, expected, "chunks of {chunk_rows}");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].1.contains("row group 3, column 'b'"), "{}", errors[0].1);
        }
    }

    #[test]
    fn the_rows_before_a_corrupt_page_come_out_whatever_the_chunk_size() {
        // 3 row groups of 1,000 rows in pages of 100; the header of row group 1's fifth page
        // of column `b` is broken. A chunk spanning that page failed as a whole, so the rows
        // before the page came out or not depending on the chunk size.
        let dir = tempfile::tempdir().unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(1000))
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(100)
            .build();
        let path = write_ids(&dir, "pages.parquet", 3000, props);
        let options = parquet::arrow::arrow_reader::ArrowReaderOptions::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required);
        let footer = ArrowReaderMetadata::load(&File::open(&path).unwrap(), options).unwrap();
        let pages = footer.metadata().offset_index().expect("an offset index")[1][1].page_locations().clone();
        assert_eq!(pages.len(), 10, "pages of 100 rows");
        let start = pages[4].offset as usize;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[start..start + 16].fill(0xff);
        std::fs::write(&path, &bytes).unwrap();
        let format = parquet_format(&path).unwrap();
        let expected: Vec<i64> = (0..1400).chain(2000..3000).collect();
        for chunk_rows in [1, 100, 350, 4096] {
            let (ids, errors) = ids_and_errors(ParquetReader::open(&path, &format, None, chunk_rows).unwrap());
            assert_eq!(ids, expected, "chunks of {chunk_rows}");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].0, 1400, "the error comes after the rows before the page");
            assert!(errors[0].1.contains("row group 1, column 'b'"), "{}", errors[0].1);
        }
    }

    #[test]
    fn corrupt_pages_do_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        scramble_pages(&path);
        match read_all(&path, &format, None, 10) {
            Ok(_) => {}
            Err(err) => assert!(matches!(err, Error::Data { .. }) && err.to_string().contains(&path), "{err}"),
        }
    }

    #[test]
    fn pulling_after_errors_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        scramble_pages(&path);
        let mut reader = ParquetReader::open(&path, &format, None, 4).unwrap();
        // At most one error per row group: the rest of a group that fails is skipped.
        let (ended, errors) = crate::reader::testing::pull_to_end(&mut reader, 100);
        assert!(ended && errors <= 3, "ended: {ended}, errors: {errors}");
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn empty_file_has_no_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "empty.parquet", &sample().slice(0, 0));
        let format = parquet_format(&path).unwrap();
        assert_eq!(row_group_count(&path).unwrap(), 0);
        assert!(read_all(&path, &format, None, 10).unwrap().is_empty());
    }

    fn lit(v: i64) -> Expr {
        Expr::Literal(flumen_ir::Scalar::Int(v, DType::Int64))
    }

    fn bin(op: BinaryOp, left: Expr, right: Expr) -> Expr {
        Expr::binary(op, left, right)
    }

    fn id_cmp(op: BinaryOp, v: i64) -> Expr {
        bin(op, Expr::col("id"), lit(v))
    }

    /// The format of `path` reading `columns` (all when absent) where `predicate` holds.
    fn filtered(path: &str, columns: Option<&[&str]>, predicate: Expr) -> ParquetFormat {
        ParquetFormat {
            columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
            predicate: Some(predicate),
            ..parquet_format(path).unwrap()
        }
    }

    /// Reads `format` of `path` with its predicate: the row groups read, the rows decoded and
    /// the chunks.
    fn read_filtered(path: &str, format: &ParquetFormat, chunk_rows: usize) -> (Vec<usize>, u64, Vec<RecordBatch>) {
        let schema = FileFormat::Parquet(format.clone()).output_spec().unwrap().arrow_schema();
        let mut reader = ParquetReader::open(path, format, None, chunk_rows).unwrap();
        let mut chunks = vec![];
        while let Some(chunk) = reader.next_chunk().unwrap() {
            assert!(chunk.num_rows() > 0 && chunk.num_rows() <= chunk_rows);
            assert_eq!(chunk.schema(), schema);
            chunks.push(chunk);
        }
        (reader.row_groups(), reader.rows_decoded(), chunks)
    }

    /// What reading everything, then filtering by the predicate and projecting, gives.
    fn filtered_afterwards(path: &str, format: &ParquetFormat) -> RecordBatch {
        let all = read_all(path, &parquet_format(path).unwrap(), None, 8192).unwrap();
        let schema = FileFormat::Parquet(format.clone()).output_spec().unwrap().arrow_schema();
        let all = arrow::compute::concat_batches(&all[0].schema(), &all).unwrap();
        let mask = evaluate_predicate(format.predicate.as_ref().unwrap(), &all).unwrap();
        let kept = filter_record_batch(&all, &mask).unwrap();
        let columns = schema.fields().iter().map(|f| kept.column_by_name(f.name()).unwrap().clone()).collect();
        RecordBatch::try_new(schema, columns).unwrap()
    }

    /// x: int64, entirely null in rows 0-9 and null where i % 3 == 0 after; s: "s{i:02}";
    /// f: i / 2 (float64); rows 0..30 in row groups of 10.
    fn with_nulls() -> RecordBatch {
        let x: Vec<Option<i64>> = (0..30).map(|i| (i >= 10 && i % 3 != 0).then_some(i)).collect();
        let s: Vec<String> = (0..30).map(|i| format!("s{i:02}")).collect();
        let f: Vec<f64> = (0..30).map(|i| i as f64 / 2.0).collect();
        let columns: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from(x)), Arc::new(StringArray::from(s)), Arc::new(Float64Array::from(f))];
        let schema = Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
        ]);
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    #[test]
    fn predicate_skips_row_groups_and_filters_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let predicate = bin(BinaryOp::And, id_cmp(BinaryOp::GtEq, 12), id_cmp(BinaryOp::Lt, 18));
        let format = filtered(&path, None, predicate);
        let (groups, decoded, chunks) = read_filtered(&path, &format, 4);
        assert_eq!(groups, vec![1]);
        assert_eq!(decoded, 10, "only row group 1 is decoded");
        assert_eq!(column_ints(&chunks, "id"), (12..18).collect::<Vec<_>>());
        // Without statistics to exclude them, the chosen row groups are all read.
        let format = filtered(&path, None, id_cmp(BinaryOp::Gt, 100));
        let mut reader = ParquetReader::open(&path, &format, Some(vec![2, 0]), 4).unwrap();
        assert!(reader.row_groups().is_empty());
        assert!(reader.next_chunk().unwrap().is_none());
        assert_eq!(reader.rows_decoded(), 0);
        let format = filtered(&path, None, id_cmp(BinaryOp::Lt, 5));
        let reader = ParquetReader::open(&path, &format, Some(vec![2, 0]), 4).unwrap();
        assert_eq!(reader.row_groups(), vec![0]);
    }

    #[test]
    fn predicate_results_equal_filtering_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let nulls = write(&dir, "nulls.parquet", &with_nulls());
        let name = |v: &str| Expr::Literal(flumen_ir::Scalar::Utf8(v.into()));
        let length = Expr::Call { func: flumen_ir::Func::Length, args: vec![Expr::col("tags")] };
        let x = |op, v| bin(op, Expr::col("x"), lit(v));
        let cases: Vec<(&str, Option<&[&str]>, Expr)> = vec![
            (&path, None, id_cmp(BinaryOp::Gt, 7)),
            (&path, Some(&["tags", "name"]), id_cmp(BinaryOp::LtEq, 10)),
            (&path, None, bin(BinaryOp::Or, id_cmp(BinaryOp::Lt, 3), id_cmp(BinaryOp::GtEq, 21))),
            (&path, Some(&["vec"]), bin(BinaryOp::Eq, Expr::col("name"), name("n17"))),
            (&path, None, bin(BinaryOp::Gt, length, lit(1))),
            (
                &path,
                Some(&["id"]),
                Expr::Unary { op: flumen_ir::UnaryOp::Not, arg: Box::new(id_cmp(BinaryOp::NotEq, 4)) },
            ),
            (&nulls, None, x(BinaryOp::Gt, 5)),
            (&nulls, Some(&["s"]), x(BinaryOp::NotEq, 20)),
            (
                &nulls,
                Some(&["f", "s"]),
                bin(BinaryOp::Or, x(BinaryOp::Lt, 12), bin(BinaryOp::GtEq, Expr::col("s"), name("s25"))),
            ),
            (&nulls, None, Expr::Unary { op: flumen_ir::UnaryOp::IsNull, arg: Box::new(Expr::col("x")) }),
            (
                &nulls,
                None,
                bin(BinaryOp::Eq, Expr::col("f"), Expr::Literal(flumen_ir::Scalar::Float(7.5, DType::Float64))),
            ),
        ];
        for (file, columns, predicate) in cases {
            let format = filtered(file, columns, predicate.clone());
            let expected = filtered_afterwards(file, &format);
            for chunk_rows in [3, 10, 8192] {
                let (_, _, chunks) = read_filtered(file, &format, chunk_rows);
                let got = arrow::compute::concat_batches(&expected.schema(), &chunks).unwrap();
                assert_eq!(got, expected, "{predicate} with chunks of {chunk_rows}");
            }
        }
    }

    #[test]
    fn null_values_never_pass_a_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &with_nulls());
        let format = filtered(&path, Some(&["x"]), bin(BinaryOp::Gt, Expr::col("x"), lit(5)));
        let (groups, decoded, chunks) = read_filtered(&path, &format, 100);
        assert_eq!(groups, vec![1, 2], "row group 0 is entirely null");
        assert_eq!(decoded, 20);
        let expected: Vec<i64> = (10..30).filter(|i| i % 3 != 0).collect();
        assert_eq!(column_ints(&chunks, "x"), expected);
        assert!(chunks.iter().all(|c| c.column(0).null_count() == 0));
    }

    #[test]
    fn or_of_ranges_reads_the_groups_of_either() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = filtered(&path, None, bin(BinaryOp::Or, id_cmp(BinaryOp::Lt, 3), id_cmp(BinaryOp::Gt, 22)));
        let (groups, decoded, chunks) = read_filtered(&path, &format, 8192);
        assert_eq!(groups, vec![0, 2]);
        assert_eq!(decoded, 15);
        assert_eq!(column_ints(&chunks, "id"), vec![0, 1, 2, 23, 24]);
    }

    #[test]
    fn string_predicates_use_byte_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let n15 = Expr::Literal(flumen_ir::Scalar::Utf8("n15".into()));
        let format = filtered(&path, None, bin(BinaryOp::Eq, Expr::col("name"), n15));
        let (groups, _, chunks) = read_filtered(&path, &format, 8192);
        // Group 0 holds "n0".."n9": "n15" sorts between them, so only group 2 ("n20".."n24")
        // is excluded.
        assert_eq!(groups, vec![0, 1]);
        assert_eq!(column_ints(&chunks, "id"), vec![15]);
    }

    #[test]
    fn predicate_on_a_column_that_is_not_projected() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let even = bin(BinaryOp::Eq, bin(BinaryOp::Mod, Expr::col("id"), lit(2)), lit(0));
        let format = filtered(&path, Some(&["name"]), bin(BinaryOp::And, even, id_cmp(BinaryOp::GtEq, 20)));
        let (groups, decoded, chunks) = read_filtered(&path, &format, 2);
        assert_eq!(groups, vec![2]);
        assert_eq!(decoded, 5);
        let names: Vec<&str> = chunks.iter().flat_map(|c| c.column(0).as_string::<i32>().iter().flatten()).collect();
        assert_eq!(names, vec!["n20", "n22", "n24"]);
        assert_eq!(chunks[0].num_columns(), 1);
    }

    #[test]
    fn missing_statistics_or_unsupported_predicates_keep_every_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nostats.parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(10))
            .set_statistics_enabled(::parquet::file::properties::EnabledStatistics::None)
            .build();
        let batch = sample();
        let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let path = path.to_str().unwrap();
        let format = filtered(path, None, id_cmp(BinaryOp::Gt, 22));
        let (groups, decoded, chunks) = read_filtered(path, &format, 8192);
        assert_eq!((groups, decoded), (vec![0, 1, 2], 25));
        assert_eq!(column_ints(&chunks, "id"), vec![23, 24]);

        let with_stats = write(&dir, "a.parquet", &sample());
        let plus_one = bin(BinaryOp::Gt, bin(BinaryOp::Add, Expr::col("id"), lit(1)), lit(23));
        let format = filtered(&with_stats, None, plus_one);
        let (groups, decoded, chunks) = read_filtered(&with_stats, &format, 8192);
        assert_eq!((groups, decoded), (vec![0, 1, 2], 25));
        assert_eq!(column_ints(&chunks, "id"), vec![23, 24]);
    }

    #[test]
    fn a_failing_predicate_names_the_row_and_reading_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        // 100 / (id - 13) divides by zero at id 13 (row 3 of row group 1), and is non-zero
        // elsewhere.
        let quotient = bin(BinaryOp::Div, lit(100), bin(BinaryOp::Sub, Expr::col("id"), lit(13)));
        let format = filtered(&path, Some(&["id"]), bin(BinaryOp::NotEq, quotient, lit(0)));
        let mut reader = ParquetReader::open(&path, &format, None, 4).unwrap();
        let (mut before, mut after, mut errors) = (vec![], vec![], vec![]);
        for _ in 0..100 {
            match reader.next_chunk() {
                Ok(None) => break,
                Ok(Some(chunk)) => {
                    let ids = column_ints(&[chunk], "id");
                    if errors.is_empty() {
                        before.extend(ids)
                    } else {
                        after.extend(ids)
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        assert_eq!(before, (0..13).collect::<Vec<_>>());
        assert_eq!(after, (14..25).collect::<Vec<_>>());
        assert_eq!(errors.len(), 1);
        let err = &errors[0];
        assert!(
            matches!(err, Error::Data { location, .. }
                if location.source == path && location.position.as_deref() == Some("row group 1, row 3")),
            "{err}"
        );
        assert!(err.to_string().contains("predicate"), "{err}");
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn positions_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let all = parquet_format(&path).unwrap();
        // Rows 0-12 pass, row 13 (row 3 of row group 1) divides by zero, then rows 14-24.
        let quotient = bin(BinaryOp::Div, lit(100), bin(BinaryOp::Sub, Expr::col("id"), lit(13)));
        let failing = filtered(&path, Some(&["id"]), bin(BinaryOp::NotEq, quotient, lit(0)));
        let even = bin(BinaryOp::Eq, bin(BinaryOp::Mod, Expr::col("id"), lit(2)), lit(0));
        // The format, the row groups read, and the number of errors reading them gives.
        let cases = [
            (all.clone(), None, 0),
            (all.clone(), Some(vec![2, 0]), 0),
            (ParquetFormat { columns: Some(vec!["tags".into(), "name".into()]), ..all.clone() }, None, 0),
            (failing.clone(), None, 1),
            (failing, Some(vec![1]), 1),
            (filtered(&path, Some(&["name"]), bin(BinaryOp::And, even, id_cmp(BinaryOp::Gt, 12))), None, 0),
        ];
        for (format, row_groups, errors) in &cases {
            for chunk_rows in [1, 3, 4, 100] {
                let outcomes = check_resume(chunk_rows, |rows| {
                    Box::new(ParquetReader::open(&path, format, row_groups.clone(), rows).unwrap())
                });
                let found = outcomes.iter().filter(|o| matches!(o, Outcome::Error(_))).count();
                assert_eq!(found, *errors, "{outcomes:?}");
            }
        }
    }

    #[test]
    fn a_position_keeps_an_error_about_a_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        let mut reader = ParquetReader::open(&path, &format, None, 4).unwrap();
        reader.next_chunk().unwrap();
        // As if the predicate had failed on rows 4-7 though on none of them alone.
        reader.rows_read += reader.reader.as_mut().unwrap().next().unwrap().unwrap().num_rows() as u64;
        let error = Error::data(Location::new(&path, "row group 0"), "the batch failed");
        reader.pending.push_back(Pending::BatchError { error, after: 8 });
        let position = reader.position().unwrap();
        let mut resumed = ParquetReader::open(&path, &format, None, 4).unwrap();
        resumed.seek(&position).unwrap();
        for reader in [&mut reader, &mut resumed] {
            assert_eq!(
                reader.next_chunk().unwrap_err().to_string(),
                format!("bad input in {path} at row group 0: the batch failed")
            );
            // The rest of row group 0 (chunks end at row groups).
            assert_eq!(column_ints(&[reader.next_chunk().unwrap().unwrap()], "id"), vec![8, 9]);
        }
    }

    #[test]
    fn a_position_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        let mut reader = ParquetReader::open(&path, &format, None, 4).unwrap();
        (0..4).for_each(|_| drop(reader.next_chunk().unwrap()));
        let position = reader.position().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let at = |group, row_group, row| {
            encode("parquet", &ParquetPosition { len, at: Some(GroupRow { group, row_group, row }), error: None })
                .unwrap()
        };
        // Chunks end at row groups: 4, 4 and 2 rows of group 0, then 4 of group 1.
        assert_eq!(position, at(1, 1, 4));
        let open = |groups: Option<Vec<usize>>| {
            let format = format.clone();
            let path = path.clone();
            move || Box::new(ParquetReader::open(&path, &format, groups.clone(), 4).unwrap()) as BoxReader
        };
        // Row group 1 is the first one a split of it reads.
        assert!(seek_error(open(Some(vec![1])), position.clone()).contains("is not a position in the row groups [1]"));
        assert!(seek_error(open(None), at(1, 1, 10)).contains("is not a position in the row groups [0, 1, 2]"));
        assert!(seek_error(open(None), at(3, 1, 0)).contains("is not a position in the row groups"));
        let mut split = open(Some(vec![1]))();
        split.seek(&at(0, 1, 6)).unwrap();
        assert_eq!(column_ints(&[split.next_chunk().unwrap().unwrap()], "id"), vec![16, 17, 18, 19]);
        write(&dir, "a.parquet", &sample().slice(0, 20));
        assert!(seek_error(open(None), position).contains("the position was taken when the file had"));
    }

    #[test]
    fn an_ill_typed_predicate_is_a_plan_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        for predicate in [bin(BinaryOp::Add, Expr::col("id"), lit(1)), bin(BinaryOp::Gt, Expr::col("nope"), lit(1))] {
            let format = filtered(&path, None, predicate);
            let err = ParquetReader::open(&path, &format, None, 10).err().unwrap();
            assert!(matches!(err, Error::Plan { .. }), "{err}");
        }
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.parquet").to_str().unwrap().to_string();
        assert!(matches!(parquet_format(&path), Err(Error::Io { path: p, .. }) if p == path));
    }
}

//! Apache Parquet files: the schema from the footer, and a reader of projected columns and
//! chosen row groups.

use std::fs::File;

use ::parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use ::parquet::arrow::ProjectionMask;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use flumen_ir::{Error, FileFormat, Location, ParquetFormat, Result};

use crate::conform::{file_spec, Conformer};
use crate::guard::{guarded, next_batch};
use crate::reader::ChunkReader;

/// Opens `path` and reads its footer.
fn builder(path: &str) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    guarded(
        || Location::new(path, "footer"),
        || {
            ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| Error::data(Location::new(path, "footer"), format!("not a readable Parquet file: {e}")))
        },
    )
}

/// The format of the Parquet file `path`: its schema as read from the footer, all columns.
pub fn parquet_format(path: &str) -> Result<ParquetFormat> {
    let builder = builder(path)?;
    Ok(ParquetFormat { schema: file_spec(path, builder.schema())?, columns: None, predicate: None })
}

/// The number of row groups of the Parquet file `path`.
pub fn row_group_count(path: &str) -> Result<usize> {
    Ok(builder(path)?.metadata().num_row_groups())
}

/// Reads the projected columns of chosen row groups of a Parquet file in chunks.
pub struct ParquetReader {
    reader: ParquetRecordBatchReader,
    conformer: Conformer,
    path: String,
    /// The row groups read, in order, with their number of rows.
    row_groups: Vec<(usize, u64)>,
    /// Rows read so far.
    rows_read: u64,
    done: bool,
}

impl ParquetReader {
    /// Opens `path` to read the columns `format.columns` (all when absent, in the given
    /// order) of the row groups `row_groups` (all when absent) in chunks of at most
    /// `chunk_rows` rows. Only the projected columns are decoded.
    ///
    /// A file that is not Parquet (truncated, corrupt footer), a row group it does not have,
    /// or a schema that does not match `format.schema` is an [`Error::Data`] naming the file.
    pub fn open(path: &str, format: &ParquetFormat, row_groups: Option<Vec<usize>>, chunk_rows: usize) -> Result<Self> {
        let target = FileFormat::Parquet(format.clone()).output_spec()?.arrow_schema();
        let builder = builder(path)?;
        let metadata = builder.metadata().clone();
        let count = metadata.num_row_groups();
        let row_groups = row_groups.unwrap_or_else(|| (0..count).collect());
        if let Some(&bad) = row_groups.iter().find(|&&i| i >= count) {
            return Err(Error::data(
                Location::new(path, format!("row group {bad}")),
                format!("the file has {count} row groups"),
            ));
        }
        let roots = builder.parquet_schema().root_schema().get_fields();
        let indices = target
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
        let mask = ProjectionMask::roots(builder.parquet_schema(), indices);
        let sizes = row_groups.iter().map(|&i| (i, metadata.row_group(i).num_rows().max(0) as u64)).collect();
        let reader = guarded(
            || Location::source(path),
            || {
                builder
                    .with_projection(mask)
                    .with_row_groups(row_groups)
                    .with_batch_size(chunk_rows.max(1))
                    .build()
                    .map_err(|e| Error::data(Location::source(path), e.to_string()))
            },
        )?;
        let conformer = Conformer::new(&reader.schema(), target, path)?;
        Ok(ParquetReader { reader, conformer, path: path.to_string(), row_groups: sizes, rows_read: 0, done: false })
    }
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
        while !self.done {
            let location = locate(&self.path, &self.row_groups, self.rows_read);
            let Some(batch) = next_batch(&mut self.reader, &location, &mut self.done)? else {
                break;
            };
            self.rows_read += batch.num_rows() as u64;
            if batch.num_rows() == 0 {
                continue;
            }
            return self.conformer.apply(&batch, || location.clone()).map(Some);
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::parquet::arrow::ArrowWriter;
    use ::parquet::file::properties::WriterProperties;
    use arrow::array::{ArrayRef, AsArray, FixedSizeListArray, Int64Array, LargeStringArray, ListArray, StringArray};
    use arrow::datatypes::{DataType, Field, Float32Type, Int64Type, Schema};
    use flumen_ir::{DType, ElementSpec, FieldSpec};

    use super::*;

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
    fn pulling_after_an_error_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "a.parquet", &sample());
        let format = parquet_format(&path).unwrap();
        scramble_pages(&path);
        let mut reader = ParquetReader::open(&path, &format, None, 4).unwrap();
        let (ended, errors) = crate::reader::testing::pull_to_end(&mut reader, 100);
        assert!(ended && errors <= 1, "ended: {ended}, errors: {errors}");
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

    #[test]
    fn missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.parquet").to_str().unwrap().to_string();
        assert!(matches!(parquet_format(&path), Err(Error::Io { path: p, .. }) if p == path));
    }
}

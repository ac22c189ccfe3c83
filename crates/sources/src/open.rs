//! Opening the reader of a source descriptor.

use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result, SourceDesc};

use crate::memory::MemoryReader;
use crate::range::RangeReader;
use crate::reader::{BoxReader, ReadOptions};
use crate::split::FilesReader;

/// The reader of `desc`, read as `read` says: in chunks of at most `read.chunk_rows` rows
/// (in-memory data keeps its own chunks).
///
/// `ListFiles` yields its resolved `files` in order as field `filename` (shuffling is the
/// runtime's, with its seeds); `Splits` yields one `(file, row_group)` element per split. A `Generator` is an [`Error::Plan`]: generators are opened
/// by the runtime's registry.
pub fn open_source(desc: &SourceDesc, read: ReadOptions) -> Result<BoxReader> {
    let chunk_rows = read.chunk_rows.max(1);
    Ok(match desc {
        SourceDesc::Range { start, stop, step } => Box::new(RangeReader::new(*start, *stop, *step, chunk_rows)?),
        SourceDesc::InMemory { spec, data } => Box::new(MemoryReader::new(data.batches.clone(), spec.arrow_schema())),
        SourceDesc::ListFiles { files, .. } => {
            let schema = desc.output_spec()?.arrow_schema();
            let names = StringArray::from(files.clone());
            let all = RecordBatch::try_new(schema.clone(), vec![Arc::new(names)])?;
            let chunks =
                (0..files.len()).step_by(chunk_rows).map(|i| all.slice(i, chunk_rows.min(files.len() - i))).collect();
            Box::new(MemoryReader::new(Arc::new(chunks), schema))
        }
        SourceDesc::Splits { files, format } => {
            let splits = crate::split::splits(files, format)?;
            let schema = desc.output_spec()?.arrow_schema();
            let names = StringArray::from_iter_values(splits.iter().map(|s| s.file.as_str()));
            let groups = Int64Array::from_iter_values(splits.iter().map(|s| s.row_group.map_or(-1, |g| g as i64)));
            let all = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(groups)])?;
            let chunks = (0..splits.len())
                .step_by(chunk_rows)
                .map(|i| all.slice(i, chunk_rows.min(splits.len() - i)))
                .filter(|c| c.num_rows() > 0)
                .collect();
            Box::new(MemoryReader::new(Arc::new(chunks), schema))
        }
        SourceDesc::Files { files, format } => {
            format.output_spec()?;
            Box::new(FilesReader::new(files.clone(), format.clone(), ReadOptions { chunk_rows, ..read }))
        }
        SourceDesc::Generator { name, .. } => {
            return Err(Error::plan(
                "generator",
                format!("generator '{name}' cannot be opened here: generators are opened by the runtime's registry"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    use flumen_ir::{DType, ElementSpec, FieldSpec, FileFormat, InlineData};

    use super::*;

    fn drain(desc: &SourceDesc, chunk_rows: usize) -> Vec<RecordBatch> {
        let schema = desc.output_spec().unwrap().arrow_schema();
        let mut reader = open_source(desc, ReadOptions::chunks_of(chunk_rows)).unwrap();
        let mut chunks = vec![];
        while let Some(chunk) = reader.next_chunk().unwrap() {
            assert!(chunk.num_rows() > 0);
            assert_eq!(chunk.schema(), schema);
            chunks.push(chunk);
        }
        chunks
    }

    #[test]
    fn opens_range_and_in_memory_sources() {
        let chunks = drain(&SourceDesc::Range { start: 5, stop: 0, step: -2 }, 2);
        let values: Vec<i64> =
            chunks.iter().flat_map(|c| c.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        assert_eq!(values, vec![5, 3, 1]);
        let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
        let data = InlineData { batches: Arc::new(chunks) };
        let desc = SourceDesc::InMemory { spec, data };
        assert_eq!(drain(&desc, 1).iter().map(|c| c.num_rows()).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn list_files_yields_the_files_in_order() {
        let files: Vec<String> = (0..5).map(|i| format!("/data/f{i}.csv")).collect();
        let desc =
            SourceDesc::ListFiles { pattern: "/data/*.csv".into(), files: files.clone(), shuffle: true, seed: Some(1) };
        let chunks = drain(&desc, 2);
        assert_eq!(chunks.iter().map(|c| c.num_rows()).collect::<Vec<_>>(), vec![2, 2, 1]);
        let names: Vec<String> = chunks
            .iter()
            .flat_map(|c| c.column(0).as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>())
            .collect();
        assert_eq!(names, files);
        let empty = SourceDesc::ListFiles { pattern: "x".into(), files: vec![], shuffle: false, seed: None };
        assert!(drain(&empty, 2).is_empty());
    }

    #[test]
    fn opens_file_sources() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "x\ny\n").unwrap();
        let desc = SourceDesc::Files { files: vec![path.to_str().unwrap().into(); 2], format: FileFormat::TextLines };
        assert_eq!(drain(&desc, 8192).iter().map(|c| c.num_rows()).sum::<usize>(), 4);
    }

    #[test]
    fn the_readers_of_sources_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "x\ny\nz\n").unwrap();
        let path = path.to_str().unwrap().to_string();
        let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
        let data = InlineData { batches: Arc::new(drain(&SourceDesc::Range { start: 0, stop: 5, step: 1 }, 2)) };
        let files: Vec<String> = (0..5).map(|i| format!("/data/f{i}.csv")).collect();
        let descs = [
            SourceDesc::Range { start: 5, stop: 0, step: -2 },
            SourceDesc::InMemory { spec, data },
            SourceDesc::ListFiles { pattern: "/data/*.csv".into(), files, shuffle: false, seed: None },
            SourceDesc::Files { files: vec![path.clone(), path], format: FileFormat::TextLines },
        ];
        for desc in &descs {
            crate::reader::testing::check_resume(2, |rows| open_source(desc, ReadOptions::chunks_of(rows)).unwrap());
        }
    }

    #[test]
    fn generators_are_not_opened_here() {
        let desc =
            SourceDesc::Generator { name: "g".into(), spec: ElementSpec::default(), anonymous: false, stateful: false };
        assert!(matches!(open_source(&desc, ReadOptions::chunks_of(10)), Err(Error::Plan { .. })));
    }
}

//! Avro object container files: `Dataset::avro`, and blocks as splits for parallel reads.
//! Records decode straight into Arrow columns; fields the plan does not read are walked
//! over, not kept.
//!
//! - [`binary`]: Avro's binary encoding, every length checked before use.
//! - [`schema`]: writer schemas as a typed tree, and the element spec they give.
//! - [`container`]: the header, the blocks and their codecs.
//! - [`decode`]: a block's records straight into Arrow columns, unread fields skipped.
//! - [`reader`]: a file (or one of its blocks) as chunks of elements, with positions.
//! - `run`: runs of blocks described on one thread and decoded on any (the parallel read).
//! - [`shuffle`]: the blocks of several files in a seeded random order.
//! - [`writer`]: an Avro writer for tests and generated data.

pub mod binary;
pub mod container;
pub mod decode;
pub mod reader;
mod run;
pub mod schema;
pub mod shuffle;
pub mod writer;

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float32Type, Int32Type, Int64Type};
    use flumen_ir::ElementSpec;

    use super::container::{block, decompress, header, Codec};
    use super::decode::Decoder;
    use super::schema::{element_spec, parse};
    use super::writer::{AvroWriter, Datum};

    const SCHEMA: &str = r#"{"type":"record","name":"row","fields":[
        {"name":"id","type":"long"},
        {"name":"label","type":["null","int"]},
        {"name":"tags","type":{"type":"map","values":"string"}},
        {"name":"f","type":{"type":"array","items":"float"}},
        {"name":"name","type":"string"},
        {"name":"kind","type":{"type":"enum","name":"k","symbols":["a","b","c"]}}]}"#;

    /// Row `i` of the test data, and what each read field should hold.
    fn row(i: i64) -> Datum {
        let label = if i % 3 == 0 {
            Datum::Union(0, Box::new(Datum::Null))
        } else {
            Datum::Union(1, Box::new(Datum::Int(i as i32 * 10)))
        };
        Datum::Record(vec![
            Datum::Long(i),
            label,
            // A map is skipped (it is not supported as a field yet, so never read).
            Datum::Array(vec![]),
            Datum::Array((0..i % 4).map(|k| Datum::Float(k as f32 + 0.5)).collect()),
            Datum::String(format!("n{i}")),
            Datum::Enum((i % 3) as i32),
        ])
    }

    fn write(dir: &std::path::Path, codec: Codec, rows: i64) -> Vec<u8> {
        let path = dir.join(format!("{}.avro", codec.name()));
        let path = path.to_str().unwrap();
        let mut w = AvroWriter::create(path, SCHEMA, codec).unwrap().with_block_bytes(200);
        for i in 0..rows {
            w.append(&row(i)).unwrap();
        }
        w.finish().unwrap();
        std::fs::read(path).unwrap()
    }

    /// Every chunk of `file` decoded into `spec`, concatenated.
    fn read(file: &[u8], spec: &ElementSpec) -> Vec<arrow::array::RecordBatch> {
        let h = header(file).unwrap();
        let decoder = Decoder::new(&parse(&h.schema).unwrap(), spec).unwrap();
        let (mut at, mut out, mut buf) = (h.data_start, Vec::new(), Vec::new());
        while let Some((b, next)) = block(file, at, &h.sync).unwrap() {
            decompress(h.codec, b.data, &mut buf).unwrap();
            out.push(decoder.decode(&buf, b.count).unwrap());
            at = next;
        }
        out
    }

    #[test]
    fn every_codec_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        for codec in [Codec::Null, Codec::Deflate, Codec::Snappy, Codec::Zstandard, Codec::Bzip2] {
            let file = write(dir.path(), codec, 100);
            let h = header(&file).unwrap();
            assert_eq!(h.codec, codec);
            // The map becomes two list fields.
            let full = parse(&h.schema).unwrap();
            let names: Vec<String> = element_spec(&full).unwrap().fields.iter().map(|f| f.name.clone()).collect();
            assert_eq!(names, ["id", "label", "tags.keys", "tags.values", "f", "name", "kind"]);
            let spec = ElementSpec::new(
                vec![
                    ("id", flumen_ir::DType::Int64),
                    ("label", flumen_ir::DType::Int32),
                    ("name", flumen_ir::DType::Utf8),
                    ("kind", flumen_ir::DType::Utf8),
                ]
                .into_iter()
                .map(|(n, d)| flumen_ir::FieldSpec::scalar(n, d))
                .chain([flumen_ir::FieldSpec::ragged("f", flumen_ir::DType::Float32, vec![-1])])
                .collect(),
            )
            .unwrap();
            let chunks = read(&file, &spec);
            assert!(chunks.len() > 3, "{codec:?}: several blocks");
            let mut i = 0i64;
            for c in &chunks {
                let (id, label, name, kind) = (
                    c.column(0).as_primitive::<Int64Type>(),
                    c.column(1).as_primitive::<Int32Type>(),
                    c.column(2).as_string::<i32>(),
                    c.column(3).as_string::<i32>(),
                );
                let f = c.column(4).as_list::<i32>();
                for r in 0..c.num_rows() {
                    assert_eq!(id.value(r), i);
                    assert_eq!(label.is_null(r), i % 3 == 0);
                    if i % 3 != 0 {
                        assert_eq!(label.value(r), i as i32 * 10);
                    }
                    assert_eq!(name.value(r), format!("n{i}"));
                    assert_eq!(kind.value(r), ["a", "b", "c"][(i % 3) as usize]);
                    let values = f.value(r);
                    let expected: Vec<f32> = (0..i % 4).map(|k| k as f32 + 0.5).collect();
                    assert_eq!(values.as_primitive::<Float32Type>().values().to_vec(), expected);
                    i += 1;
                }
            }
            assert_eq!(i, 100, "{codec:?}");
        }
    }

    #[test]
    fn a_projection_skips_the_other_fields() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), Codec::Deflate, 50);
        let spec = ElementSpec::new(vec![flumen_ir::FieldSpec::scalar("name", flumen_ir::DType::Utf8)]).unwrap();
        let names: Vec<String> = read(&file, &spec)
            .iter()
            .flat_map(|c| c.column(0).as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>())
            .collect();
        assert_eq!(names, (0..50).map(|i| format!("n{i}")).collect::<Vec<_>>());
    }

    #[test]
    fn corrupt_files_are_errors_with_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), Codec::Null, 20);
        let h = header(&file).unwrap();
        assert!(header(b"PAR1").unwrap_err().what.contains("not an Avro container"));
        // A wrong sync marker after the first block.
        let (first, next) = block(&file, h.data_start, &h.sync).unwrap().unwrap();
        let mut bad = file.clone();
        bad[next - 1] ^= 0xff;
        let err = block(&bad, h.data_start, &h.sync).unwrap_err();
        assert!(err.what.contains("sync marker") && err.at == next - 16, "{err:?}");
        // Cut inside the first block.
        assert!(block(&file[..h.data_start + 5], h.data_start, &h.sync).is_err());
        // A block whose records end early.
        let spec = ElementSpec::new(vec![flumen_ir::FieldSpec::scalar("id", flumen_ir::DType::Int64)]).unwrap();
        let decoder = Decoder::new(&parse(&h.schema).unwrap(), &spec).unwrap();
        assert!(decoder.decode(&first.data[..first.data.len() - 3], first.count).is_err());
        assert!(decoder.decode(first.data, first.count + 1).is_err());
        // Corrupt compressed data and an unknown codec.
        let mut out = Vec::new();
        assert!(decompress(Codec::Deflate, &[0xff; 10], &mut out).is_err());
        assert!(decompress(Codec::Snappy, &[1, 2, 3, 4, 5], &mut out).is_err());
        assert!(Codec::named("lzo").unwrap_err().contains("unknown Avro codec"));
        assert!(Decoder::new(
            &parse(&h.schema).unwrap(),
            &ElementSpec::new(vec![flumen_ir::FieldSpec::scalar("nope", flumen_ir::DType::Int64)]).unwrap()
        )
        .unwrap_err()
        .contains("no field \"nope\""));
    }

    fn small_spec() -> ElementSpec {
        ElementSpec::new(vec![
            flumen_ir::FieldSpec::scalar("id", flumen_ir::DType::Int64),
            flumen_ir::FieldSpec::scalar("name", flumen_ir::DType::Utf8),
        ])
        .unwrap()
    }

    fn ids(outcomes: &[crate::reader::testing::Outcome]) -> Vec<Result<Vec<i64>, String>> {
        use crate::reader::testing::Outcome;
        outcomes
            .iter()
            .map(|o| match o {
                Outcome::Rows(b) => Ok(b.column(0).as_primitive::<Int64Type>().values().to_vec()),
                Outcome::Error(e) => Err(e.clone()),
            })
            .collect()
    }

    #[test]
    fn the_reader_resumes_exactly_and_reads_single_blocks() {
        use super::reader::{block_count, AvroReader};
        use crate::reader::testing::check_resume;
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), Codec::Deflate, 60);
        let path = dir.path().join("deflate.avro").to_str().unwrap().to_string();
        let whole = check_resume(7, |rows| Box::new(AvroReader::open(&path, &small_spec(), None, None, rows).unwrap()));
        assert_eq!(ids(&whole), vec![Ok((0..60).collect::<Vec<i64>>())]);
        // Block by block, the same rows.
        let blocks = block_count(&path).unwrap();
        assert!(blocks > 2);
        let mut by_block = Vec::new();
        for b in 0..blocks {
            let outcomes =
                check_resume(5, |rows| Box::new(AvroReader::open(&path, &small_spec(), None, Some(b), rows).unwrap()));
            for got in ids(&outcomes) {
                by_block.extend(got.unwrap());
            }
        }
        assert_eq!(by_block, (0..60).collect::<Vec<i64>>());
    }

    #[test]
    fn a_corrupt_block_is_an_error_and_reading_goes_on_at_the_next() {
        use super::reader::AvroReader;
        use crate::reader::testing::check_resume;
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), Codec::Null, 60);
        let h = header(&file).unwrap();
        // Break the second block's sync marker.
        let (_, second) = block(&file, h.data_start, &h.sync).unwrap().unwrap();
        let (second_block, third) = block(&file, second, &h.sync).unwrap().unwrap();
        let mut bad = file.clone();
        bad[third - 1] ^= 0xff;
        let path = dir.path().join("bad.avro").to_str().unwrap().to_string();
        std::fs::write(&path, &bad).unwrap();
        let got =
            ids(&check_resume(4, |rows| Box::new(AvroReader::open(&path, &small_spec(), None, None, rows).unwrap())));
        let first_rows = got[0].clone().unwrap();
        let error = got[1].clone().unwrap_err();
        assert!(error.contains("bad.avro") && error.contains("block 1") && error.contains("sync marker"), "{error}");
        let rest = got[2].clone().unwrap();
        // Every record outside the broken block comes out.
        let lost: Vec<i64> = (0..60).filter(|i| !first_rows.contains(i) && !rest.contains(i)).collect();
        assert_eq!(lost.len(), second_block.count, "{lost:?}");
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn described_runs_give_what_the_reader_reads_and_resume_at_their_positions() {
        use super::reader::AvroReader;
        use crate::reader::testing::check_described;
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), Codec::Deflate, 60);
        let path = dir.path().join("deflate.avro").to_str().unwrap().to_string();
        for rows in [1, 7, 1000] {
            let got = check_described(rows, |rows| {
                Box::new(AvroReader::open(&path, &small_spec(), None, None, rows).unwrap())
            });
            assert_eq!(ids(&got), vec![Ok((0..60).collect::<Vec<i64>>())]);
        }
        // A broken sync marker and corrupt compressed data, each an error of its block.
        let h = header(&file).unwrap();
        let (_, second) = block(&file, h.data_start, &h.sync).unwrap().unwrap();
        let (_, third) = block(&file, second, &h.sync).unwrap().unwrap();
        let mut bad = file.clone();
        bad[third - 1] ^= 0xff;
        let (third_block, _) = block(&file, third, &h.sync).unwrap().unwrap();
        // A first byte of 0xff is a deflate block of the reserved type 3.
        bad[third_block.data.as_ptr() as usize - file.as_ptr() as usize] = 0xff;
        let path = dir.path().join("bad.avro").to_str().unwrap().to_string();
        std::fs::write(&path, &bad).unwrap();
        for rows in [3, 1000] {
            let got = check_described(rows, |rows| {
                Box::new(AvroReader::open(&path, &small_spec(), None, None, rows).unwrap())
            });
            let errors: Vec<String> = ids(&got).into_iter().filter_map(|o| o.err()).collect();
            assert_eq!(errors.len(), 2, "{errors:?}");
            assert!(errors[0].contains("block 1") && errors[0].contains("sync marker"), "{errors:?}");
            assert!(errors[1].contains("block 2"), "{errors:?}");
        }
    }

    #[test]
    fn a_record_that_does_not_fit_the_spec_is_its_own_error() {
        use super::reader::AvroReader;
        use crate::reader::testing::check_described;
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), Codec::Snappy, 60);
        let path = dir.path().join("snappy.avro").to_str().unwrap().to_string();
        // `f` holds i % 4 floats: as a dense [2] field, only rows with i % 4 == 2 fit.
        let spec = ElementSpec::new(vec![
            flumen_ir::FieldSpec::scalar("id", flumen_ir::DType::Int64),
            flumen_ir::FieldSpec::tensor("f", flumen_ir::DType::Float32, vec![2]),
        ])
        .unwrap();
        for rows in [2, 1000] {
            let got = check_described(rows, |rows| Box::new(AvroReader::open(&path, &spec, None, None, rows).unwrap()));
            let outcomes = ids(&got);
            let kept: Vec<i64> = outcomes.iter().filter_map(|o| o.as_ref().ok()).flatten().copied().collect();
            assert_eq!(kept, (0..60).filter(|i| i % 4 == 2).collect::<Vec<i64>>());
            let errors: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
            assert_eq!(errors.len(), 45, "one error per record that does not fit");
            assert!(errors.iter().all(|e| e.contains("snappy.avro") && e.contains("block ") && e.contains("record ")));
        }
    }

    #[test]
    fn shuffled_blocks_give_every_record_once_in_a_seeded_order_and_resume_exactly() {
        use super::shuffle::ShuffledBlocksReader;
        use crate::reader::testing::{check_described, check_resume};
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (i, codec) in [Codec::Deflate, Codec::Null].into_iter().enumerate() {
            let file = write(dir.path(), codec, 60);
            let path = dir.path().join(format!("part-{i}.avro"));
            std::fs::write(&path, file).unwrap();
            paths.push(path.to_str().unwrap().to_string());
        }
        let open = |seed: u64, rows: usize| -> crate::reader::BoxReader {
            Box::new(ShuffledBlocksReader::open(&paths, &small_spec(), None, seed, rows).unwrap())
        };
        let order = |seed: u64| -> Vec<i64> {
            ids(&check_resume(4, |rows| open(seed, rows))).into_iter().flat_map(|o| o.unwrap()).collect()
        };
        let first = order(1);
        let mut sorted = first.clone();
        sorted.sort_unstable();
        // Both files hold ids 0..60: every record of each once.
        let want: Vec<i64> = (0..60).flat_map(|i| [i, i]).collect();
        assert_eq!(sorted, want);
        assert_ne!(first, (0..60).chain(0..60).collect::<Vec<i64>>(), "the blocks are not in file order");
        assert_eq!(order(1), first, "the same seed, the same order");
        assert_ne!(order(2), first, "another seed, another order");
        // Within a block, records keep their order: runs of consecutive ids.
        assert!(first.windows(2).filter(|w| w[1] == w[0] + 1).count() > first.len() / 2);
        for rows in [3, 1000] {
            let got = check_described(rows, |rows| open(5, rows));
            assert_eq!(got.len(), 1, "no errors");
        }
        // A broken sync marker: that block's error takes its place in the order.
        let h = header(&std::fs::read(&paths[1]).unwrap()).unwrap();
        let mut bad = std::fs::read(&paths[1]).unwrap();
        let (_, second) = block(&bad, h.data_start, &h.sync).unwrap().unwrap();
        bad[second - 1] ^= 0xff;
        std::fs::write(&paths[1], &bad).unwrap();
        let got = ids(&check_described(7, |rows| open(5, rows)));
        let errors: Vec<&String> = got.iter().filter_map(|o| o.as_ref().err()).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("part-1.avro") && errors[0].contains("block 0"), "{errors:?}");
    }
}

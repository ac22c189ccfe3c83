//! The chunk-file format: round trips, compression, corruption and truncation, resuming.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, DictionaryArray, Int64Array, ListArray};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use flumen_store::{ChunkFileReader, ChunkFileWriter, ChunkPosition, Compression, FileSummary};

use crate::common::{assert_data_error, batch, chunks, flip_byte, ids, schema, truncate};

const CODECS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd];

fn write(path: &Path, batches: &[RecordBatch], compression: Compression) -> FileSummary {
    let mut writer = ChunkFileWriter::create(path, batches[0].schema(), compression).unwrap();
    for b in batches {
        writer.write(b).unwrap();
    }
    writer.finish().unwrap()
}

fn read_all(path: &Path) -> Vec<RecordBatch> {
    ChunkFileReader::open(path).unwrap().collect::<Result<Vec<_>, _>>().unwrap()
}

/// Reads until the first error and returns it, with the chunks before it.
fn read_to_error(path: &Path) -> (usize, flumen_ir::Error) {
    let mut reader = ChunkFileReader::open(path).unwrap();
    let mut good = 0;
    loop {
        match reader.next() {
            Some(Ok(_)) => good += 1,
            Some(Err(e)) => {
                assert!(reader.next().is_none(), "a reader ends after its first error");
                return (good, e);
            }
            None => panic!("expected an error after {good} chunks"),
        }
    }
}

/// The offsets of a file's chunk frames, then of its end frame.
fn frame_offsets(path: &Path) -> Vec<u64> {
    let mut reader = ChunkFileReader::open(path).unwrap();
    let mut offsets = vec![reader.position().offset];
    while let Some(chunk) = reader.next() {
        chunk.unwrap();
        offsets.push(reader.position().offset);
    }
    offsets
}

#[test]
fn round_trips_with_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let data = chunks(0, 7, 300);
    for codec in CODECS {
        let path = dir.path().join(format!("{codec}.chunks"));
        let summary = write(&path, &data, codec);
        assert_eq!((summary.chunks, summary.rows), (7, 2100));
        assert_eq!(summary.bytes, std::fs::metadata(&path).unwrap().len());
        let reader = ChunkFileReader::open(&path).unwrap();
        assert_eq!(reader.schema().fields(), schema().fields());
        let back: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(back, data, "{codec}");
    }
}

#[test]
fn compression_shrinks_bytes_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let data = chunks(0, 8, 1000);
    let bytes_per_row = |codec: Compression| {
        let summary = write(&dir.path().join(codec.name()), &data, codec);
        summary.bytes as f64 / summary.rows as f64
    };
    let (none, lz4, zstd) =
        (bytes_per_row(Compression::None), bytes_per_row(Compression::Lz4), bytes_per_row(Compression::Zstd));
    assert!(lz4 < none / 2.0, "lz4 {lz4} vs none {none}");
    assert!(zstd < lz4, "zstd {zstd} vs lz4 {lz4}");
}

#[test]
fn a_codec_never_makes_a_chunk_bigger() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("noise", DataType::Binary, false)]));
    // A xorshift stream: nothing for a codec to find, so LZ4 output would be larger.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..16 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values([noise.as_slice()]));
    let data = vec![RecordBatch::try_new(schema, vec![column]).unwrap()];
    let none = write(&dir.path().join("none"), &data, Compression::None);
    let lz4 = write(&dir.path().join("lz4"), &data, Compression::Lz4);
    assert!(lz4.bytes <= none.bytes, "lz4 {} bytes, stored as is {} bytes", lz4.bytes, none.bytes);
    assert_eq!(read_all(&dir.path().join("lz4")), data);
}

#[test]
fn dictionary_and_list_columns_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("tag", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), true),
        Field::new("seq", DataType::List(Arc::new(Field::new("item", DataType::Int64, true))), true),
    ]));
    let data: Vec<RecordBatch> = (0..3)
        .map(|c| {
            // Each chunk has its own dictionary: every frame must carry it.
            let (a, b) = (format!("a{c}"), format!("b{c}"));
            let tags: DictionaryArray<Int32Type> =
                [Some(a.as_str()), None, Some(b.as_str()), Some(a.as_str())].into_iter().collect();
            let seq = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
                Some(vec![Some(c), Some(1)]),
                None,
                Some(vec![]),
                Some(vec![Some(7), None, Some(9)]),
            ]);
            RecordBatch::try_new(schema.clone(), vec![Arc::new(tags), Arc::new(seq)]).unwrap()
        })
        .collect();
    let path = dir.path().join("dict.chunks");
    write(&path, &data, Compression::Lz4);
    assert_eq!(read_all(&path), data);
    // Resuming at the last chunk decodes its dictionary from its own frame.
    let last = *frame_offsets(&path).iter().rev().nth(1).unwrap();
    let resumed = ChunkFileReader::open_at(&path, ChunkPosition { offset: last, chunks: 2, rows: 8 }).unwrap();
    assert_eq!(resumed.collect::<Result<Vec<_>, _>>().unwrap(), data[2..]);
}

#[test]
fn a_file_without_chunks_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.chunks");
    let summary = ChunkFileWriter::create(&path, schema(), Compression::Zstd).unwrap().finish().unwrap();
    assert_eq!((summary.chunks, summary.rows), (0, 0));
    assert!(read_all(&path).is_empty());
}

#[test]
fn a_flipped_payload_byte_is_a_checksum_error_at_its_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 4, 100), Compression::Lz4);
    let offsets = frame_offsets(&path);
    flip_byte(&path, offsets[2] + 40);
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 2);
    assert_data_error(&error, &path, offsets[2], "checksum mismatch");
}

#[test]
fn a_flipped_header_byte_is_a_bad_frame_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 4, 100), Compression::None);
    let offsets = frame_offsets(&path);
    flip_byte(&path, offsets[1] + 9);
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 1);
    assert_data_error(&error, &path, offsets[1], "bad frame header");
}

#[test]
fn a_file_cut_mid_frame_is_truncated_at_that_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 3, 100), Compression::Zstd);
    let offsets = frame_offsets(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    truncate(&path, len - offsets[2] - 40);
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 2);
    assert_data_error(&error, &path, offsets[2], "truncated");
}

#[test]
fn a_file_without_its_end_frame_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 3, 100), Compression::Lz4);
    let end = *frame_offsets(&path).last().unwrap();
    truncate(&path, 48);
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 3);
    assert_data_error(&error, &path, end, "no end frame");
}

#[test]
fn an_unfinished_writer_leaves_a_truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    let mut writer = ChunkFileWriter::create(&path, schema(), Compression::Lz4).unwrap();
    for b in chunks(0, 2, 50) {
        writer.write(&b).unwrap();
    }
    drop(writer);
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 2);
    assert!(error.to_string().contains("no end frame"), "{error}");
}

#[test]
fn end_frame_totals_must_match_the_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 3, 10), Compression::None);
    // Rewrite the end frame to claim 4 chunks, with valid checksums.
    let mut bytes = std::fs::read(&path).unwrap();
    let end = bytes.len() - 48;
    bytes[end + 32..end + 40].copy_from_slice(&4u64.to_le_bytes());
    let payload_crc = crc32fast::hash(&bytes[end + 32..]);
    bytes[end + 24..end + 28].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&bytes[end..end + 28]);
    bytes[end + 28..end + 32].copy_from_slice(&header_crc.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let (good, error) = read_to_error(&path);
    assert_eq!(good, 3);
    assert_data_error(&error, &path, end as u64, "count mismatch");
}

#[test]
fn a_file_of_another_format_is_rejected_at_byte_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.chunks");
    std::fs::write(&path, b"PAR1 this is not a chunk file at all").unwrap();
    let error = ChunkFileReader::open(&path).err().expect("bad magic");
    assert_data_error(&error, &path, 0, "bad magic");
}

#[test]
fn a_reader_resumes_at_every_reported_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    let data = chunks(0, 5, 40);
    write(&path, &data, Compression::Lz4);
    let mut reader = ChunkFileReader::open(&path).unwrap();
    let mut positions = vec![reader.position()];
    while let Some(chunk) = reader.next() {
        chunk.unwrap();
        positions.push(reader.position());
    }
    assert_eq!(positions.last().unwrap().chunks, 5);
    assert_eq!(positions.last().unwrap().rows, 200);
    for (k, position) in positions.iter().enumerate() {
        assert_eq!(position.chunks, k as u64);
        let rest: Vec<RecordBatch> =
            ChunkFileReader::open_at(&path, *position).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(rest, data[k..], "resumed at chunk {k}");
    }
    let from_start = ChunkFileReader::open_at(&path, ChunkPosition::default()).unwrap();
    assert_eq!(ids(&from_start.collect::<Result<Vec<_>, _>>().unwrap()), (0..200).collect::<Vec<_>>());
}

#[test]
fn resuming_off_a_frame_start_is_an_error_naming_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 3, 40), Compression::Lz4);
    let second = frame_offsets(&path)[1];
    let off = ChunkPosition { offset: second + 3, chunks: 1, rows: 40 };
    let error = ChunkFileReader::open_at(&path, off).err().expect("not a frame");
    assert_data_error(&error, &path, second + 3, "not a frame start");
    let past = ChunkPosition { offset: 1 << 40, chunks: 1, rows: 40 };
    let error = ChunkFileReader::open_at(&path, past).err().expect("out of range");
    assert_data_error(&error, &path, 1 << 40, "out of range");
}

#[test]
fn chunks_of_another_schema_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let mut writer = ChunkFileWriter::create(dir.path().join("c.chunks"), other, Compression::Lz4).unwrap();
    let error = writer.write(&batch(0, 5)).expect_err("schema mismatch");
    assert!(error.to_string().contains("does not match"), "{error}");
    let ok = RecordBatch::try_new(writer.schema().clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
    writer.write(&ok).unwrap();
}

#[test]
fn with_schema_hands_out_the_expected_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 2, 10), Compression::None);
    let expected = schema();
    let reader = ChunkFileReader::open(&path).unwrap().with_schema(expected.clone()).unwrap();
    for chunk in reader {
        assert!(Arc::ptr_eq(&chunk.unwrap().schema(), &expected));
    }
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let error = ChunkFileReader::open(&path).unwrap().with_schema(other).err().expect("fields differ");
    assert_data_error(&error, &path, 16, "differ");
}

#[test]
fn codec_names_parse_back() {
    for codec in CODECS {
        assert_eq!(codec.name().parse::<Compression>().unwrap(), codec);
        assert_eq!(codec.to_string().to_uppercase().parse::<Compression>().unwrap(), codec);
    }
    assert_eq!(Compression::default(), Compression::Lz4);
    assert!("gzip".parse::<Compression>().is_err());
}

#[test]
fn corruption_behind_valid_checksums_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chunks");
    write(&path, &chunks(0, 1, 3), Compression::None);
    let frame = frame_offsets(&path)[0] as usize;
    let original = std::fs::read(&path).unwrap();
    let payload_len = original.len() - 48 - frame - 32;
    let mut errors = 0;
    // Every byte of the payload in turn, with checksums made to match, as a buggy or hostile
    // writer would leave it: the reader reports or tolerates it, and never panics.
    for i in 0..payload_len {
        let mut bytes = original.clone();
        let at = frame + 32 + i;
        bytes[at] = bytes[at].wrapping_add(0x41);
        let crc = crc32fast::hash(&bytes[frame + 32..frame + 32 + payload_len]);
        bytes[frame + 24..frame + 28].copy_from_slice(&crc.to_le_bytes());
        let header_crc = crc32fast::hash(&bytes[frame..frame + 28]);
        bytes[frame + 28..frame + 32].copy_from_slice(&header_crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        if ChunkFileReader::open(&path).unwrap().any(|chunk| chunk.is_err()) {
            errors += 1;
        }
    }
    assert!(errors > payload_len / 4, "{errors} of {payload_len} corruptions detected");
}

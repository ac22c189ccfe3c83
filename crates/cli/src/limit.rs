//! The hand-written limit of each reference workload: a single-purpose program that does
//! the workload's work and nothing else, on two threads, with no engine in between (no
//! chunks, no schemas, no operators). It is what this machine can do at most, the yardstick
//! flumen is reported against (`flumen bench W --limit`).
//!
//! Each computes the workload's checksum as WORKLOADS.md defines it, so a run shows the two
//! agree. What a limit program leaves out, because it cannot change the checksum: w1's
//! shuffle and batching (w2's `drop_remainder` does change it, so the limit works out which
//! rows the last partial batch held). w6's limit buckets and pads as the workload does,
//! since its padded batches are most of what the pipeline writes and its consumer reads.
//! Every value the workload computes is computed, even when the checksum reads only some
//! of them.

use std::hint::black_box;

use flumen::crates::sources::tfrecord::masked_crc32c;
use flumen::crates::udf::short_varints;

/// What a limit program delivers: rows, batches and the checksum.
pub struct Outcome {
    /// Elements delivered.
    pub rows: u64,
    /// Batches delivered.
    pub batches: u64,
    /// The workload's checksum.
    pub checksum: f64,
}

pub(crate) const THREADS: usize = 2;

/// `work(i)` for each of `n` items, the items split over [`THREADS`] threads; results in
/// item order.
pub(crate) fn on_threads<T: Send>(
    n: usize,
    work: impl Fn(usize) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let mut slots: Vec<Option<Result<T, String>>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| s.spawn(move || (t..n).step_by(THREADS).map(|i| (i, work(i))).collect::<Vec<_>>()))
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("a limit thread") {
                slots[i] = Some(r);
            }
        }
    });
    slots.into_iter().map(|s| s.expect("every item ran")).collect()
}

/// w4: range(2M) → v = sqrt(3x+1)·0.5 → keep floor(v) mod 3 ≠ 0 → v·v+1, summed; batches
/// of 4096.
pub fn w4() -> Outcome {
    const N: i64 = 2_000_000;
    let halves = on_threads(THREADS, |t| {
        let (lo, hi) = (N * t as i64 / THREADS as i64, N * (t as i64 + 1) / THREADS as i64);
        let (mut sum, mut rows) = (0.0f64, 0u64);
        for x in lo..hi {
            let v = ((3 * x + 1) as f64).sqrt() * 0.5;
            // `floor(v) mod 3` as fmod gives it: exact for a whole number below 2^51 (v stays
            // under 1,225), where f64's `%`, a library call, took four fifths of the loop.
            let f = v.floor();
            if f - 3.0 * (f / 3.0).floor() != 0.0 {
                sum += v * v + 1.0;
                rows += 1;
            }
        }
        Ok((sum, rows))
    })
    .expect("w4 cannot fail");
    let (checksum, rows) = halves.iter().fold((0.0, 0), |(s, r), (hs, hr)| (s + hs, r + hr));
    Outcome { rows, batches: rows.div_ceil(4096), checksum }
}

/// w1: CSV rows f0..f15, label → x_j = (f_j − 0.5j)/(1 + 0.1j), cross = f0·f1 → keep x_0 >
/// −1.5 and label ≠ 9; Σ cross; batches of 1024.
pub fn w1(files: &[String]) -> Result<Outcome, String> {
    let per_file = on_threads(files.len(), |i| {
        let text = std::fs::read(&files[i]).map_err(|e| format!("{}: {e}", files[i]))?;
        let mut lines = text.split(|b| *b == b'\n');
        lines.next();
        let (mut sum, mut rows) = (0.0f64, 0u64);
        let mut x = [0.0f64; 16];
        for line in lines.filter(|l| !l.is_empty()) {
            let mut fields = line.split(|b| *b == b',');
            let mut f = [0.0f64; 16];
            for v in f.iter_mut() {
                *v = number(fields.next(), &files[i])?;
            }
            let label = number::<i64>(fields.next(), &files[i])?;
            for (j, (x, f)) in x.iter_mut().zip(&f).enumerate() {
                *x = (f - 0.5 * j as f64) / (1.0 + 0.1 * j as f64);
            }
            black_box(&x);
            if x[0] > -1.5 && label != 9 {
                sum += f[0] * f[1];
                rows += 1;
            }
        }
        Ok((sum, rows))
    })?;
    let (checksum, rows) = per_file.iter().fold((0.0, 0), |(s, r), (fs, fr)| (s + fs, r + fr));
    Ok(Outcome { rows, batches: rows.div_ceil(1024), checksum })
}

fn number<T: std::str::FromStr>(field: Option<&[u8]>, file: &str) -> Result<T, String> {
    let text = field.and_then(|f| std::str::from_utf8(f).ok()).map(|t| t.trim_matches('"'));
    text.and_then(|t| t.parse().ok()).ok_or_else(|| format!("{file}: a bad number {text:?}"))
}

/// The records of a TFRecord file, both checksums verified. The file is mapped, not read:
/// reading copies it into memory the process touches for the first time. Its pages come in
/// as they are read, as flumen's reader maps them (`MAP_POPULATE` was no faster: w2's limit
/// 35.3 against 35.0 ms, medians of 30 alternating passes).
pub(crate) fn records(path: &str, mut each: impl FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: the map is only read, and the bench's files are not written while it runs.
    let bytes = unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(|e| format!("{path}: {e}"))?;
    let mut at = 0;
    while at < bytes.len() {
        let header = bytes.get(at..at + 12).ok_or_else(|| format!("{path}: cut at byte {at}"))?;
        let length = u64::from_le_bytes(header[..8].try_into().expect("8 bytes")) as usize;
        let crc = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        if masked_crc32c(&header[..8]) != crc(&header[8..12]) {
            return Err(format!("{path}: bad length checksum at byte {at}"));
        }
        let body = bytes.get(at + 12..at + 12 + length + 4).ok_or_else(|| format!("{path}: cut at byte {at}"))?;
        let (data, footer) = body.split_at(length);
        if masked_crc32c(data) != crc(footer) {
            return Err(format!("{path}: bad data checksum at byte {at}"));
        }
        each(data)?;
        at += 16 + length;
    }
    Ok(())
}

/// A protobuf varint at `at`; the value and the next position.
fn varint(b: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(at)?;
        at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some((v, at));
        }
    }
    None
}

/// The length-delimited fields of a message: (field number, bytes).
pub(crate) fn fields(mut b: &[u8]) -> impl Iterator<Item = Option<(u64, &[u8])>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        let parsed = (|| {
            let (key, at) = varint(b, 0)?;
            let (len, at) = varint(b, at)?;
            let end = at.checked_add(len as usize).filter(|e| *e <= b.len())?;
            let field = (key >> 3, &b[at..end]);
            b = &b[end..];
            Some(field)
        })();
        if parsed.is_none() {
            b = &[];
        }
        Some(parsed)
    })
}

/// Calls `each(name, list)` for every feature of a serialized `tf.train.Example`, `list`
/// being the bytes of its FloatList / Int64List / BytesList; `None` when malformed.
pub(crate) fn each_feature<'a>(
    example: &'a [u8],
    mut each: impl FnMut(&'a [u8], &'a [u8]) -> Option<()>,
) -> Option<()> {
    for field in fields(example) {
        let (number, features) = field?;
        if number != 1 {
            continue;
        }
        for entry in fields(features) {
            let (mut key, mut value) = (None, None);
            for f in fields(entry?.1) {
                match f? {
                    (1, k) => key = Some(k),
                    (2, v) => value = Some(v),
                    _ => {}
                }
            }
            let (_, list) = fields(value?).next()??;
            each(key?, list)?;
        }
    }
    Some(())
}

/// Appends the values of a packed (or unpacked) Int64List message to `out`.
fn int64s(list: &[u8], out: &mut Vec<i64>) -> Option<()> {
    let mut at = 0;
    while at < list.len() {
        let (key, next) = varint(list, at)?;
        if key == (1 << 3 | 2) {
            let (len, start) = varint(list, next)?;
            let end = start + len as usize;
            let packed = list.get(start..end)?;
            // Runs of short values four at a time, as parse_example decodes them.
            out.reserve(packed.len());
            let mut p = start;
            while p < end {
                p = start + short_varints::decode(packed, p - start, out);
                if p >= end {
                    break;
                }
                let (v, n) = varint(list, p)?;
                out.push(v as i64);
                p = n;
            }
            at = end;
        } else {
            let (v, n) = varint(list, next)?;
            out.push(v as i64);
            at = n;
        }
    }
    Some(())
}

/// The values of a packed FloatList message (TensorFlow writes them packed).
fn float32s(list: &[u8]) -> Option<impl Iterator<Item = f32> + '_> {
    let (key, at) = varint(list, 0)?;
    let (len, start) = varint(list, at)?;
    let bytes = list.get(start..start + len as usize).filter(|_| key == (1 << 3 | 2))?;
    Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))))
}

/// w2: TFRecord Examples → features `f32[64]` · weight → keep label < 8 → batches of 256 with
/// the remainder dropped; Σ features[:, 0] of the rows in whole batches. Rows reach the
/// batches in the interleave's order (one record from each of 8 files in turn).
pub fn w2(files: &[String]) -> Result<Outcome, String> {
    // Each file's records in order: features[0]·weight, or None for a filtered-out record.
    let per_file = on_threads(files.len(), |i| {
        let mut out: Vec<Option<f32>> = vec![];
        let mut scaled = [0.0f32; 64];
        let mut ints = vec![];
        records(&files[i], |record| {
            let bad = || format!("{}: record {} is not a w2 Example", files[i], out.len());
            let (mut label, mut weight, mut feats) = (None, None, None);
            each_feature(record, |name, list| {
                match name {
                    b"label" => {
                        ints.clear();
                        int64s(list, &mut ints)?;
                        label = ints.last().copied();
                    }
                    b"id" => {
                        ints.clear();
                        int64s(list, &mut ints)?;
                        black_box(&ints);
                    }
                    b"weight" => weight = float32s(list)?.next(),
                    b"features" => feats = Some(list),
                    _ => {}
                }
                Some(())
            })
            .ok_or_else(bad)?;
            let (label, weight, feats) = (label.ok_or_else(bad)?, weight.ok_or_else(bad)?, feats.ok_or_else(bad)?);
            let values = float32s(feats).ok_or_else(bad)?;
            for (s, v) in scaled.iter_mut().zip(values) {
                *s = v * weight;
            }
            black_box(&scaled);
            out.push((label < 8).then_some(scaled[0]));
            Ok(())
        })?;
        Ok(out)
    })?;
    let longest = per_file.iter().map(Vec::len).max().unwrap_or(0);
    let kept: Vec<f32> =
        (0..longest).flat_map(|r| per_file.iter().filter_map(move |f| f.get(r).copied().flatten())).collect();
    let rows = kept.len() / 256 * 256;
    let checksum = kept[..rows].iter().map(|v| f64::from(*v)).sum();
    Ok(Outcome { rows: rows as u64, batches: rows as u64 / 256, checksum })
}

/// w6's `bucket_by_sequence_length`: the bucket boundaries and each bucket's batch size.
const W6_BOUNDARIES: [usize; 3] = [32, 64, 128];
const W6_BATCH_SIZES: [usize; 4] = [128, 64, 32, 16];

/// The rows a bucket holds until its batch is full: their tokens one after another, and
/// their lengths.
#[derive(Default)]
struct Bucket {
    tokens: Vec<i64>,
    lens: Vec<usize>,
}

impl Bucket {
    /// Pads the bucket's rows into one batch in `batch` (each row followed by zeros up to
    /// the longest), counts the batch's non-zero values as the consumer does, and empties
    /// the bucket.
    fn pad(&mut self, batch: &mut Vec<i64>) -> u64 {
        let longest = self.lens.iter().copied().max().unwrap_or(0);
        batch.clear();
        let mut at = 0;
        for &len in &self.lens {
            batch.extend_from_slice(&self.tokens[at..at + len]);
            batch.resize(batch.len() + longest - len, 0);
            at += len;
        }
        self.tokens.clear();
        self.lens.clear();
        batch.iter().filter(|t| **t != 0).count() as u64
    }
}

/// w6: TFRecord Examples → tokens (int64 varlen), label → keep ≥ 8 tokens → bucketed by
/// length, each batch padded to its longest row; the number of non-zero tokens over the
/// padded batches. Each file is bucketed on its own (its last partial batches flushed at
/// its end): rows share batches with other rows than in the pipeline (so the padding and the
/// batch count differ a little: up to 16 partial batches, not 4), and the sum is the same.
pub fn w6(files: &[String]) -> Result<Outcome, String> {
    let per_file = on_threads(files.len(), |i| {
        let (mut rows, mut batches, mut non_zero, mut n) = (0u64, 0u64, 0u64, 0u64);
        let (mut tokens, mut ints): (Vec<i64>, Vec<i64>) = (Vec::with_capacity(256), vec![]);
        let mut buckets: [Bucket; 4] = Default::default();
        let mut batch = Vec::with_capacity(128 * 32);
        records(&files[i], |record| {
            let bad = || format!("{}: record {n} is not a w6 Example", files[i]);
            tokens.clear();
            let mut label = None;
            each_feature(record, |name, list| {
                match name {
                    b"tokens" => int64s(list, &mut tokens)?,
                    b"label" => {
                        ints.clear();
                        int64s(list, &mut ints)?;
                        label = ints.last().copied();
                    }
                    _ => {}
                }
                Some(())
            })
            .ok_or_else(bad)?;
            black_box(label.ok_or_else(bad)?);
            n += 1;
            if tokens.len() >= 8 {
                rows += 1;
                let b = W6_BOUNDARIES.partition_point(|&bound| bound <= tokens.len());
                let bucket = &mut buckets[b];
                bucket.tokens.extend_from_slice(&tokens);
                bucket.lens.push(tokens.len());
                if bucket.lens.len() == W6_BATCH_SIZES[b] {
                    non_zero += bucket.pad(&mut batch);
                    batches += 1;
                }
            }
            Ok(())
        })?;
        for bucket in buckets.iter_mut().filter(|b| !b.lens.is_empty()) {
            non_zero += bucket.pad(&mut batch);
            batches += 1;
        }
        Ok((rows, batches, non_zero))
    })?;
    let (rows, batches, non_zero) = per_file.iter().fold((0, 0, 0), |(r, b, z), (fr, fb, fz)| (r + fr, b + fb, z + fz));
    Ok(Outcome { rows, batches, checksum: non_zero as f64 })
}

/// w3: Avro files of `gen_data.py`'s schema (deflate) → every field decoded into column
/// buffers (scalars, `dense_f` f32[128], `emb2d` f32[4, 16], `sparse_f` as COO, `tokens` as
/// a list); Σ dense_f[:, 0]; batches of 1024. The blocks of all files are found first (the
/// headers walked with flumen's framing, which reads lengths only) and split over the
/// threads, each inflating and decoding its blocks.
pub fn w3(files: &[String]) -> Result<Outcome, String> {
    use flumen::crates::sources::avro::container::{block, header, Codec};
    let maps = files
        .iter()
        .map(|path| {
            let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
            // SAFETY: the map is only read, and the bench's files are not written while it runs.
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("{path}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut blocks = Vec::new();
    for (map, path) in maps.iter().zip(files) {
        let h = header(map).map_err(|b| format!("{path}: {}", b.what))?;
        if h.codec != Codec::Deflate {
            return Err(format!("{path}: w3's files are deflate, not {}", h.codec.name()));
        }
        let mut at = h.data_start;
        while let Some((b, next)) = block(map, at, &h.sync).map_err(|b| format!("{path}: {}", b.what))? {
            blocks.push((b.count, b.data));
            at = next;
        }
    }
    let per_block = on_threads(blocks.len(), |i| {
        let (count, data) = blocks[i];
        let mut inflated = Vec::with_capacity(data.len() * 4);
        std::io::Read::read_to_end(&mut flate2::read::DeflateDecoder::new(data), &mut inflated)
            .map_err(|e| format!("block {i}: {e}"))?;
        let columns = W3Columns::decode(&inflated, count).ok_or_else(|| format!("block {i}: a bad record"))?;
        let sum: f64 = columns.dense_f.chunks_exact(128).map(|row| f64::from(row[0])).sum();
        black_box(&columns);
        Ok((sum, count as u64))
    })?;
    let (checksum, rows) = per_block.iter().fold((0.0, 0), |(s, r), (bs, br)| (s + bs, r + br));
    Ok(Outcome { rows, batches: rows.div_ceil(1024), checksum })
}

/// w3's fields as column buffers.
#[derive(Default)]
struct W3Columns {
    label: Vec<i64>,
    weight: Vec<f32>,
    age: Vec<i32>,
    score: Vec<f64>,
    flag: Vec<bool>,
    dense_f: Vec<f32>,
    emb2d: Vec<f32>,
    sparse_offsets: Vec<i32>,
    sparse_indices: Vec<i64>,
    sparse_values: Vec<f32>,
    token_offsets: Vec<i32>,
    tokens: Vec<i64>,
}

impl W3Columns {
    /// The `count` records of an inflated block; `None` where a record does not fit.
    fn decode(mut b: &[u8], count: usize) -> Option<W3Columns> {
        let mut c = W3Columns { sparse_offsets: vec![0], token_offsets: vec![0], ..Default::default() };
        c.dense_f.reserve(count * 128);
        c.emb2d.reserve(count * 64);
        for _ in 0..count {
            c.label.push(zigzag(&mut b)?);
            c.weight.push(f32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?));
            c.age.push(i32::try_from(zigzag(&mut b)?).ok()?);
            c.score.push(f64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?));
            c.flag.push(take(&mut b, 1)?[0] != 0);
            (floats(&mut b, &mut c.dense_f)? == 128).then_some(())?;
            let mut rows = 0;
            each_block(&mut b, |b| {
                rows += 1;
                (floats(b, &mut c.emb2d)? == 16).then_some(())
            })?;
            (rows == 4).then_some(())?;
            let indices = each_block(&mut b, |b| {
                c.sparse_indices.push(zigzag(b)?);
                Some(())
            })?;
            (floats(&mut b, &mut c.sparse_values)? == indices).then_some(())?;
            c.sparse_offsets.push(i32::try_from(c.sparse_values.len()).ok()?);
            each_block(&mut b, |b| {
                c.tokens.push(zigzag(b)?);
                Some(())
            })?;
            c.token_offsets.push(i32::try_from(c.tokens.len()).ok()?);
        }
        b.is_empty().then_some(c)
    }
}

/// The next `n` bytes of `b`.
fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (b.get(..n)?, b.get(n..)?);
    *b = rest;
    Some(head)
}

/// An Avro `int` or `long`: a zigzag varint.
fn zigzag(b: &mut &[u8]) -> Option<i64> {
    let (value, used) = varint(b, 0)?;
    *b = &b[used..];
    Some((value >> 1) as i64 ^ -((value & 1) as i64))
}

/// Calls `item` for each item of an Avro array; the item count.
fn each_block(b: &mut &[u8], mut item: impl FnMut(&mut &[u8]) -> Option<()>) -> Option<usize> {
    let mut n = 0;
    loop {
        let mut count = zigzag(b)?;
        if count == 0 {
            return Some(n);
        }
        if count < 0 {
            zigzag(b)?;
            count = -count;
        }
        for _ in 0..count {
            item(b)?;
        }
        n += count as usize;
    }
}

/// An Avro array of floats appended to `out`; its length.
fn floats(b: &mut &[u8], out: &mut Vec<f32>) -> Option<usize> {
    each_block(b, |b| {
        out.push(f32::from_le_bytes(take(b, 4)?.try_into().ok()?));
        Some(())
    })
}

/// The limit program of `workload`; `find(dir, extension)` lists its files (w4 reads
/// none).
pub fn run(workload: &str, find: impl Fn(&str, &str) -> Result<Vec<String>, String>) -> Result<Outcome, String> {
    match workload {
        "w1" => w1(&find("csv_tabular", "csv")?),
        "w2" => w2(&find("tfrecord_example", "tfrecord")?),
        "w3" => w3(&find("avro_atds", "avro")?),
        "w4" => Ok(w4()),
        "w5" => crate::image_limit::w5(&find("tfrecord_jpeg", "tfrecord")?),
        "w6" => w6(&find("tfrecord_text", "tfrecord")?),
        "w7" => {
            let mut files = vec![];
            for class in 0..10 {
                files.extend(find(&format!("jpeg_files/class_{class}"), "jpg")?);
            }
            crate::image_limit::w7(&files)
        }
        other => Err(format!("no limit program for {other}")),
    }
}

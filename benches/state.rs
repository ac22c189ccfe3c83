//! What state costs and what it saves: iterator checkpoints of a large shuffle, and the
//! second epoch of a pipeline read back from `cache`, `cache_to` and `snapshot` instead of
//! recomputed. A plain bench binary (`cargo bench --bench state`): every figure is the median
//! of several rounds, the variants of a round alternating, and ratios are taken within the
//! run, because this machine is shared and noisy.
//!
//! `FLUMEN_STATE_ROUNDS` (default 5) and `FLUMEN_STATE_ROWS` (CSV rows, default 400000) scale it.

#[path = "common/w1_csv.rs"]
mod w1_csv;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{FixedSizeListArray, Float32Array, Int64Array};
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;
use flumen::prelude::*;
use flumen::Options;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

// ---------------------------------------------------------------------------------------
// Checkpoints of shuffle(100000)
// ---------------------------------------------------------------------------------------

/// 1M elements `{id: int64, features: f32[64]}` (264 bytes each) in memory.
fn features(n: usize) -> Dataset {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let chunks = (0..n)
        .step_by(8192)
        .map(|start| {
            let rows = 8192.min(n - start);
            let ids = Int64Array::from_iter_values((start..start + rows).map(|i| i as i64));
            let values = Float32Array::from_iter_values((0..rows * 64).map(|i| (start * 64 + i) as f32 * 1e-3));
            let features = FixedSizeListArray::new(item.clone(), 64, Arc::new(values), None);
            RecordBatch::try_from_iter([("id", Arc::new(ids) as _), ("features", Arc::new(features) as _)]).unwrap()
        })
        .collect();
    Dataset::from_batches(chunks).unwrap()
}

fn checkpoint_bench(rounds: usize) {
    let base = features(1_000_000).shuffle(100_000, Some(1)).unwrap().batch(256).unwrap();
    let recording = base.with_options(Options::default().with_symbolic_checkpoint(true));
    let cut = 1000; // batches: 256k elements consumed, the buffer long full
    println!("## Checkpoint of in-memory(1M x {{id, f32[64]}}) -> shuffle(100000) -> batch(256), after {cut} batches");
    println!("| mode | bytes | save (ms) | restore (ms) | rest identical |");
    println!("|---|---|---|---|---|");
    let variants: [(&str, &Dataset, SaveMode); 3] = [
        ("full", &base, SaveMode::Full),
        ("symbolic (first of an iterator)", &base, SaveMode::Symbolic),
        ("symbolic (symbolic_checkpoint on)", &recording, SaveMode::Symbolic),
    ];
    let mut results: Vec<(usize, Vec<f64>, Vec<f64>, bool)> =
        variants.iter().map(|_| (0, vec![], vec![], true)).collect();
    let mut iterate = vec![vec![]; variants.len()];
    for _ in 0..rounds {
        for (i, (_, ds, mode)) in variants.iter().enumerate() {
            let t = Instant::now();
            let mut it = ds.iter();
            for _ in 0..cut {
                it.next().unwrap().unwrap();
            }
            iterate[i].push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let bytes = it.save(*mode).unwrap().to_bytes().unwrap();
            let save = t.elapsed().as_secs_f64() * 1e3;
            let expected = it.next().unwrap().unwrap();
            let t = Instant::now();
            let mut restored = ds.iter_from(&Checkpoint::from_bytes(&bytes).unwrap()).unwrap();
            let first = restored.next().unwrap().unwrap();
            let restore = t.elapsed().as_secs_f64() * 1e3;
            results[i].0 = bytes.len();
            results[i].1.push(save);
            results[i].2.push(restore);
            results[i].3 &= first == expected;
        }
    }
    for ((name, ..), (bytes, save, restore, same)) in variants.iter().zip(results) {
        println!("| {name} | {bytes} | {:.1} | {:.1} | {same} |", median(save), median(restore));
    }
    println!(
        "Iterating to the cut: {:.0} ms without recording, {:.0} ms with symbolic_checkpoint on.",
        median(iterate[0].clone()),
        median(iterate[2].clone())
    );
    println!();
}

// ---------------------------------------------------------------------------------------
// Second epoch from cache / snapshot vs recomputing
// ---------------------------------------------------------------------------------------

/// w1 up to its filter: interleave(CSV files, cycle 4) → map (x_j, cross, label) → filter.
fn w1_prefix(dir: &Path) -> Dataset {
    let files = Dataset::list_files(&format!("{}/*.csv", dir.display()), false, None).unwrap();
    let read = DatasetFunction::read_file("filename", FileRead::Csv(CsvOptions::default()));
    let fields = w1_csv::w1_fields();
    files
        .interleave(read, Tunable::Fixed(4), 16)
        .unwrap()
        .map(MapFunction::select(fields))
        .unwrap()
        .filter(col("x0").gt(lit(-1.5)).and(col("label").not_eq(lit(9i64))))
        .unwrap()
}

/// Rows delivered (batches are counted by their rows) and seconds of one pass.
fn drain(ds: &Dataset) -> (usize, f64) {
    let t = Instant::now();
    let rows = ds.iter().map(|b| b.unwrap().num_rows()).sum();
    (rows, t.elapsed().as_secs_f64())
}

fn dir_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return path.metadata().unwrap().len();
    }
    std::fs::read_dir(path).map_or(0, |d| d.flatten().map(|e| dir_bytes(&e.path())).sum())
}

fn epoch_bench(rounds: usize) {
    let rows = env("FLUMEN_STATE_ROWS", 400_000);
    let data = tempfile::tempdir().unwrap();
    w1_csv::write_csv(data.path(), rows);
    let prefix = w1_prefix(data.path());
    println!("## Second epoch of w1 (CSV {rows} rows -> map -> filter -> X -> batch(1024)), read path vs recomputing");
    println!("| X | epoch 1 (rows/s) | epoch 2 (rows/s) | epoch 2 vs recompute | bytes on disk / row |");
    println!("|---|---|---|---|---|");
    type Make<'a> = Box<dyn Fn(&Path) -> Dataset + 'a>;
    let variants: Vec<(&str, Make)> = vec![
        ("none (recompute)", Box::new(|_| prefix.batch(1024).unwrap())),
        ("cache() in memory", Box::new(|_| prefix.cache().unwrap().batch(1024).unwrap())),
        (
            "cache_to(file), lz4",
            Box::new(|d| prefix.cache_to(d.join("c").to_str().unwrap()).unwrap().batch(1024).unwrap()),
        ),
        (
            "snapshot, none",
            Box::new(|d| {
                let o = SnapshotOptions::default().with_compression(Compression::None);
                prefix.snapshot(d.to_str().unwrap(), o).unwrap().batch(1024).unwrap()
            }),
        ),
        (
            "snapshot, lz4",
            Box::new(|d| {
                prefix.snapshot(d.to_str().unwrap(), SnapshotOptions::default()).unwrap().batch(1024).unwrap()
            }),
        ),
        (
            "snapshot, zstd",
            Box::new(|d| {
                let o = SnapshotOptions::default().with_compression(Compression::Zstd);
                prefix.snapshot(d.to_str().unwrap(), o).unwrap().batch(1024).unwrap()
            }),
        ),
    ];
    let mut first = vec![vec![]; variants.len()];
    let mut second = vec![vec![]; variants.len()];
    let mut bytes = vec![0u64; variants.len()];
    let mut delivered = 0;
    for _ in 0..rounds {
        for (i, (_, make)) in variants.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            // A new dataset each round: its in-memory cache starts empty.
            let ds = make(dir.path());
            let (n1, t1) = drain(&ds);
            let (n2, t2) = drain(&ds);
            assert_eq!(n1, n2);
            delivered = n2;
            first[i].push(n1 as f64 / t1);
            second[i].push(n2 as f64 / t2);
            bytes[i] = dir_bytes(dir.path());
        }
    }
    let recompute = median(second[0].clone());
    for (i, (name, _)) in variants.iter().enumerate() {
        let per_row = if bytes[i] > 0 { format!("{:.1}", bytes[i] as f64 / delivered as f64) } else { "-".into() };
        let (e1, e2) = (median(first[i].clone()), median(second[i].clone()));
        println!("| {name} | {:.0} | {:.0} | {:.2}x | {per_row} |", e1, e2, e2 / recompute);
    }
    println!("({delivered} rows delivered per epoch; medians of {rounds} rounds)");
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let rounds = env("FLUMEN_STATE_ROUNDS", 5);
    checkpoint_bench(rounds);
    epoch_bench(rounds);
}

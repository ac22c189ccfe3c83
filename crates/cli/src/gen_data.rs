//! `flumen gen-data DIR`: the reference workloads' files for w1, w2 and w6, in the layout
//! and with the distributions `../shared/bench/gen_data.py` uses, without TensorFlow or
//! pyarrow (the peers' generator needs both).
//!
//! - `csv_tabular/part-0000{0..3}.csv`: f0..f15 ~ N(0.5j, 1 + 0.1j) as float32, label in 0..10.
//! - `tfrecord_example/part-0000{0..7}.tfrecord`: Examples with features f32[64] ~ N(0, 1),
//!   label in 0..10, a running id, weight ~ U(0.5, 1.5).
//! - `tfrecord_text/part-0000{0..3}.tfrecord`: Examples with 5..=200 tokens in 1..30000 and a
//!   label in 0..2.
//!
//! The values come from a fixed-seed generator of this file's own, so the files differ from
//! the peers' draws (the checksums do too) but have the same shape and statistics.

use std::io::Write;
use std::path::Path;

use flumen::prelude::RecordCompression;
use flumen::{serialize_example, FeatureValues, TfRecordWriter};

/// How much data: `gen_data.py`'s two scales.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Scale {
    /// 2,000 CSV rows, 1,000 Examples and 1,000 text records per file.
    Small,
    /// 250,000 CSV rows, 50,000 Examples and 50,000 text records per file (about 0.4 GB).
    Full,
}

/// SplitMix64, with the draws the generator needs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in `lo..hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    /// A normal draw (Box-Muller).
    fn normal(&mut self, mean: f64, std: f64) -> f64 {
        let u = 1.0 - self.uniform();
        mean + std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn tabular(out: &Path, rows: usize, rng: &mut Rng) -> Result<(), String> {
    let dir = out.join("csv_tabular");
    create_dir(&dir)?;
    for i in 0..4 {
        let path = dir.join(format!("part-{i:05}.csv"));
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        let header: Vec<String> = (0..16).map(|j| format!("f{j}")).collect();
        let mut text = format!("{},label\n", header.join(","));
        for _ in 0..rows {
            for j in 0..16 {
                let v = rng.normal(j as f64 * 0.5, 1.0 + j as f64 * 0.1) as f32;
                text.push_str(&format!("{v},"));
            }
            text.push_str(&format!("{}\n", rng.int(0, 10)));
            if text.len() > 1 << 20 {
                w.write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
                text.clear();
            }
        }
        w.write_all(text.as_bytes()).and_then(|_| w.flush()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn writer(path: &Path) -> Result<TfRecordWriter, String> {
    let name = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
    TfRecordWriter::create(name, RecordCompression::None).map_err(|e| e.to_string())
}

fn examples(out: &Path, rows: usize, rng: &mut Rng) -> Result<(), String> {
    let dir = out.join("tfrecord_example");
    create_dir(&dir)?;
    let mut id = 0i64;
    for i in 0..8 {
        let path = dir.join(format!("part-{i:05}.tfrecord"));
        let mut w = writer(&path)?;
        for _ in 0..rows {
            let features: Vec<f32> = (0..64).map(|_| rng.normal(0.0, 1.0) as f32).collect();
            let label = rng.int(0, 10);
            let weight = (0.5 + rng.uniform()) as f32;
            let record = serialize_example(&[
                ("features", FeatureValues::Float32(&features)),
                ("label", FeatureValues::Int64(&[label])),
                ("id", FeatureValues::Int64(&[id])),
                ("weight", FeatureValues::Float32(&[weight])),
            ]);
            w.write(&record).map_err(|e| e.to_string())?;
            id += 1;
        }
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn text(out: &Path, rows: usize, rng: &mut Rng) -> Result<(), String> {
    let dir = out.join("tfrecord_text");
    create_dir(&dir)?;
    for i in 0..4 {
        let path = dir.join(format!("part-{i:05}.tfrecord"));
        let mut w = writer(&path)?;
        for _ in 0..rows {
            let len = rng.int(5, 201) as usize;
            let tokens: Vec<i64> = (0..len).map(|_| rng.int(1, 30_000)).collect();
            let label = rng.int(0, 2);
            let record = serialize_example(&[
                ("tokens", FeatureValues::Int64(&tokens)),
                ("label", FeatureValues::Int64(&[label])),
            ]);
            w.write(&record).map_err(|e| e.to_string())?;
        }
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes the w1, w2 and w6 files under `out` at `scale`.
pub fn generate(out: &Path, scale: Scale) -> Result<(), String> {
    let (csv_rows, example_rows, text_rows) = match scale {
        Scale::Small => (2_000, 1_000, 1_000),
        Scale::Full => (250_000, 50_000, 50_000),
    };
    let mut rng = Rng(42);
    tabular(out, csv_rows, &mut rng)?;
    examples(out, example_rows, &mut rng)?;
    text(out, text_rows, &mut rng)
}

//! The generators' random draws, the TFRecord files of `tf.train.Example`s of the reference
//! workloads w2 and w6 (`../shared/bench/gen_data.py`'s layouts and distributions, other
//! draws), and the features those workloads parse and w2's scaling map. `flumen gen-data` and `flumen bench` use them, and so do the benches, which
//! include this file (it depends on nothing but `flumen`).

use std::path::Path;

use flumen::prelude::{col, DType, FeatureSpec, MapFunction, RecordCompression};
use flumen::{serialize_example, FeatureValues, TfRecordWriter};

/// The features w2 parses: `features` (`f32[64]`), `label`, `id`, `weight`.
pub fn w2_features() -> Vec<FeatureSpec> {
    vec![
        FeatureSpec::fixed("features", DType::Float32, vec![64]),
        FeatureSpec::fixed("label", DType::Int64, vec![]),
        FeatureSpec::fixed("id", DType::Int64, vec![]),
        FeatureSpec::fixed("weight", DType::Float32, vec![]),
    ]
}

/// w2's `features *= weight`: a tensor times a per-element scalar, elementwise.
pub fn w2_scale() -> MapFunction {
    MapFunction::select([("features", col("features") * col("weight")), ("label", col("label")), ("id", col("id"))])
}

/// The features w6 parses: `tokens` int64 of variable length, `label`.
pub fn w6_features() -> Vec<FeatureSpec> {
    vec![FeatureSpec::var_len("tokens", DType::Int64), FeatureSpec::fixed("label", DType::Int64, vec![])]
}

/// SplitMix64, with the draws the generators need.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in `lo..hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    /// A normal draw (Box-Muller).
    pub fn normal(&mut self, mean: f64, std: f64) -> f64 {
        let u = 1.0 - self.uniform();
        mean + std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

/// Creates `dir` and its parents.
pub fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// A TFRecord writer of `path`, and the path as text.
fn writer(path: &Path) -> Result<(TfRecordWriter, String), String> {
    let name = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
    Ok((TfRecordWriter::create(name, RecordCompression::None).map_err(|e| e.to_string())?, name.to_string()))
}

/// w2's files: `tfrecord_example/part-0000{0..7}.tfrecord` under `out`, `rows` Examples each
/// (features `f32[64]` ~ N(0, 1), label in 0..10, a running id, weight ~ U(0.5, 1.5)); their paths.
pub fn examples(out: &Path, rows: usize, rng: &mut Rng) -> Result<Vec<String>, String> {
    let dir = out.join("tfrecord_example");
    create_dir(&dir)?;
    let mut id = 0i64;
    let mut paths = Vec::new();
    for i in 0..8 {
        let path = dir.join(format!("part-{i:05}.tfrecord"));
        let (mut w, name) = writer(&path)?;
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
        paths.push(name);
    }
    Ok(paths)
}

/// w6's files: `tfrecord_text/part-0000{0..3}.tfrecord` under `out`, `rows` Examples each
/// (5..=200 tokens in 1..30000, a label in 0..2); their paths.
pub fn text(out: &Path, rows: usize, rng: &mut Rng) -> Result<Vec<String>, String> {
    let dir = out.join("tfrecord_text");
    create_dir(&dir)?;
    let mut paths = Vec::new();
    for i in 0..4 {
        let path = dir.join(format!("part-{i:05}.tfrecord"));
        let (mut w, name) = writer(&path)?;
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
        paths.push(name);
    }
    Ok(paths)
}

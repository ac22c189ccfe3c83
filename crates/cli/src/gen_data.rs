//! `flumen gen-data DIR`: the reference workloads' files for w1, w2, w3 and w6, in the layout
//! and with the distributions `../shared/bench/gen_data.py` uses, without TensorFlow or
//! pyarrow (the peers' generator needs both).
//!
//! - `csv_tabular/part-0000{0..3}.csv`: f0..f15 ~ N(0.5j, 1 + 0.1j) as float32, label in 0..10.
//! - `tfrecord_example/part-0000{0..7}.tfrecord`: Examples with features `f32[64]` ~ N(0, 1),
//!   label in 0..10, a running id, weight ~ U(0.5, 1.5).
//! - `avro_atds/part-0000{0..3}.avro`: deflate Avro files of w3's schema (`gen_data.py`'s
//!   `AVRO_SCHEMA`), 64 KiB blocks.
//! - `tfrecord_text/part-0000{0..3}.tfrecord`: Examples with 5..=200 tokens in 1..30000 and a
//!   label in 0..2.
//!
//! The values come from a fixed-seed generator of this file's own, so the files differ from
//! the peers' draws (the checksums do too) but have the same shape and statistics.

use std::io::Write;
use std::path::Path;

use crate::workload_data::{create_dir, examples, text, Rng};

/// How much data: `gen_data.py`'s two scales.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Scale {
    /// 2,000 CSV rows, 1,000 Examples, 2,000 Avro records and 1,000 text records per file.
    Small,
    /// 250,000 CSV rows, 50,000 Examples, 100,000 Avro records and 50,000 text records per
    /// file (about 0.8 GB).
    Full,
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

/// Writes the w1, w2, w3 and w6 files under `out` at `scale`.
pub fn generate(out: &Path, scale: Scale) -> Result<(), String> {
    let (csv_rows, example_rows, avro_rows, text_rows) = match scale {
        Scale::Small => (2_000, 1_000, 2_000, 1_000),
        Scale::Full => (250_000, 50_000, 100_000, 50_000),
    };
    let mut rng = Rng(42);
    tabular(out, csv_rows, &mut rng)?;
    examples(out, example_rows, &mut rng)?;
    text(out, text_rows, &mut rng)?;
    crate::w3_data::files(out, avro_rows, &mut Rng(5))?;
    Ok(())
}

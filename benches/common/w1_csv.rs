//! The w1-like CSV files the benches generate (deterministic, no network, no peer tools).

use std::path::Path;

/// w1's files: 4 CSV files of `rows / 4` rows, `f0..f15` floats and an int `label`.
pub fn write_csv(dir: &Path, rows: usize) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    for file in 0..4 {
        let mut text = String::with_capacity(rows / 4 * 180);
        text.push_str(&(0..16).map(|j| format!("f{j}")).collect::<Vec<_>>().join(","));
        text.push_str(",label\n");
        for _ in 0..rows / 4 {
            for j in 0..16 {
                text.push_str(&format!("{:.6},", next() * (1.0 + j as f64 * 0.1)));
            }
            text.push_str(&format!("{}\n", (next() * 10.0) as i64));
        }
        std::fs::write(dir.join(format!("part-{file}.csv")), text).unwrap();
    }
}

//! The w1-like CSV files the benches generate (deterministic, no network, no peer tools),
//! and w1's map.

use std::path::Path;

use flumen::prelude::{col, lit, Expr};

/// w1's map: `x_j = (f_j - 0.5 j) / (1 + 0.1 j)` for j < 16, `cross = f0 * f1`, `label`.
pub fn w1_fields() -> Vec<(String, Expr)> {
    let mut fields: Vec<(String, Expr)> = (0..16)
        .map(|j| (format!("x{j}"), (col(format!("f{j}")) - lit(0.5 * j as f64)) / lit(1.0 + 0.1 * j as f64)))
        .collect();
    fields.push(("cross".into(), col("f0") * col("f1")));
    fields.push(("label".into(), col("label")));
    fields
}

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

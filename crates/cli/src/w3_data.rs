//! w3's Avro files (`../shared/bench/gen_data.py`'s `AVRO_SCHEMA` and distributions, other
//! draws) and the feature specs w3 reads them with. `flumen gen-data` and `flumen bench` use
//! them, and so does `benches/avro.rs`, which includes this file.

use std::path::Path;

use flumen::prelude::{DType, ElementSpec, FieldSpec};

use crate::workload_data::{create_dir, Rng};

/// w3's fields as AvroTensorDataset's `features=` spec gives them: label, weight, age,
/// score, flag, `dense_f` f32[128], `emb2d` f32[4, 16], `sparse_f` sparse f32[50001] and
/// `tokens` varlen int64.
pub fn features() -> ElementSpec {
    ElementSpec::new(vec![
        FieldSpec::scalar("label", DType::Int64),
        FieldSpec::scalar("weight", DType::Float32),
        FieldSpec::scalar("age", DType::Int32),
        FieldSpec::scalar("score", DType::Float64),
        FieldSpec::scalar("flag", DType::Bool),
        FieldSpec::tensor("dense_f", DType::Float32, vec![128]),
        FieldSpec::tensor("emb2d", DType::Float32, vec![4, 16]),
        FieldSpec::sparse("sparse_f", DType::Float32, vec![50_001]),
        FieldSpec::ragged("tokens", DType::Int64, vec![-1]),
    ])
    .expect("w3's field names are distinct")
}

/// w3's writer schema, as `gen_data.py`'s `AVRO_SCHEMA`.
pub const SCHEMA: &str = r#"{"type":"record","name":"Row","fields":[
    {"name":"label","type":"long"},
    {"name":"weight","type":"float"},
    {"name":"age","type":"int"},
    {"name":"score","type":"double"},
    {"name":"flag","type":"boolean"},
    {"name":"dense_f","type":{"type":"array","items":"float"}},
    {"name":"emb2d","type":{"type":"array","items":{"type":"array","items":"float"}}},
    {"name":"sparse_f","type":{"type":"record","name":"sparse_f","fields":[
        {"name":"indices0","type":{"type":"array","items":"long"}},
        {"name":"values","type":{"type":"array","items":"float"}}]}},
    {"name":"tokens","type":{"type":"array","items":"long"}}]}"#;

/// w3's files: `avro_atds/part-0000{0..3}.avro` under `out`, `rows` records each, deflate
/// in blocks of about 64 KiB (label in 0..10, weight ~ U(0.5, 1.5), age in 18..90, score ~
/// N(0, 1), a coin flag, `dense_f` and `emb2d` ~ N(0, 1), 0..=50 sorted distinct sparse
/// indices below 50,001 with N(0, 1) values, 0..=64 tokens below 100,000); their paths.
pub fn files(out: &Path, rows: usize, rng: &mut Rng) -> Result<Vec<String>, String> {
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = out.join("avro_atds");
    create_dir(&dir)?;
    let floats =
        |rng: &mut Rng, n: usize| Datum::Array((0..n).map(|_| Datum::Float(rng.normal(0.0, 1.0) as f32)).collect());
    let mut paths = Vec::new();
    for i in 0..4 {
        let path = dir.join(format!("part-{i:05}.avro"));
        let name = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?.to_string();
        let mut w =
            AvroWriter::create(&name, SCHEMA, Codec::Deflate).map_err(|e| e.to_string())?.with_block_bytes(64 << 10);
        for _ in 0..rows {
            let nnz = rng.int(0, 51) as usize;
            let mut indices: Vec<i64> = Vec::with_capacity(nnz);
            while indices.len() < nnz {
                let index = rng.int(0, 50_001);
                if !indices.contains(&index) {
                    indices.push(index);
                }
            }
            indices.sort_unstable();
            let tokens = (0..rng.int(0, 65)).map(|_| Datum::Long(rng.int(0, 100_000))).collect();
            let record = Datum::Record(vec![
                Datum::Long(rng.int(0, 10)),
                Datum::Float((0.5 + rng.uniform()) as f32),
                Datum::Int(rng.int(18, 90) as i32),
                Datum::Double(rng.normal(0.0, 1.0)),
                Datum::Boolean(rng.int(0, 2) == 1),
                floats(rng, 128),
                Datum::Array((0..4).map(|_| floats(rng, 16)).collect()),
                Datum::Record(vec![Datum::Array(indices.into_iter().map(Datum::Long).collect()), floats(rng, nnz)]),
                Datum::Array(tokens),
            ]);
            w.append(&record).map_err(|e| e.to_string())?;
        }
        w.finish().map_err(|e| e.to_string())?;
        paths.push(name);
    }
    Ok(paths)
}

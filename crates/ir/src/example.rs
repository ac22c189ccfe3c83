//! The features of tf.data's `parse_example`: which keys of a `tf.train.Example` become
//! which fields (`FixedLenFeature`, `VarLenFeature`, `SparseFeature`), as data, so that a map
//! parsing Examples is part of the plan ([`crate::MapFn::ParseExample`]) rather than an opaque
//! closure: it serializes, fingerprints and type-checks like any other function. The parser
//! itself is `flumen_udf::example`.

use serde::{Deserialize, Serialize};

use crate::{DType, ElementSpec, FieldSpec};

/// A default value of a fixed-length feature, one per element of its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Defaults {
    /// For an `int64` feature.
    Int64(Vec<i64>),
    /// For a `float32` feature.
    Float32(Vec<f32>),
    /// For a `bytes` feature.
    Bytes(Vec<Vec<u8>>),
}

/// How one feature is parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureKind {
    /// tf.data's `FixedLenFeature(shape, dtype, default_value)`.
    FixedLen {
        /// The feature's shape (`[]` for a scalar).
        shape: Vec<usize>,
        /// The values used when the feature is missing (required when `None`).
        default: Option<Defaults>,
    },
    /// tf.data's `VarLenFeature(dtype)`.
    VarLen,
    /// tf.data's `SparseFeature(index_key, value_key, dtype, size, already_sorted)`: the
    /// values of feature `value_key` at the coordinates given by the features `index_keys`
    /// (one per dimension, int64), in a sparse tensor of dense shape `size`.
    Sparse {
        /// One int64 feature per dimension holding each value's coordinate in it.
        index_keys: Vec<String>,
        /// The feature holding the values.
        value_key: String,
        /// The dense shape.
        size: Vec<usize>,
        /// Whether the records list their values in index order already; otherwise each
        /// record's entries are sorted by their coordinates, as tf.data does.
        already_sorted: bool,
    },
}

/// A feature to parse: its key, type (`Int64`, `Float32` or `Binary`) and kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSpec {
    /// The output field's name, and for a fixed- or variable-length feature its key in the
    /// `Features` map (a sparse feature reads `value_key` and `index_keys` instead).
    pub name: String,
    /// `Int64`, `Float32` or `Binary`.
    pub dtype: DType,
    /// Fixed or variable length.
    pub kind: FeatureKind,
}

impl FeatureSpec {
    /// A required fixed-length feature of `shape` (`[]`: a scalar).
    pub fn fixed(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> Self {
        FeatureSpec { name: name.into(), dtype, kind: FeatureKind::FixedLen { shape, default: None } }
    }

    /// A variable-length feature (a list field, empty where missing).
    pub fn var_len(name: impl Into<String>, dtype: DType) -> Self {
        FeatureSpec { name: name.into(), dtype, kind: FeatureKind::VarLen }
    }

    /// A sparse feature named `name`: the `dtype` values of feature `value_key` at the
    /// coordinates in the int64 features `index_keys` (one per dimension of `size`).
    pub fn sparse(
        name: impl Into<String>,
        dtype: DType,
        index_keys: Vec<String>,
        value_key: impl Into<String>,
        size: Vec<usize>,
    ) -> Self {
        let kind = FeatureKind::Sparse { index_keys, value_key: value_key.into(), size, already_sorted: false };
        FeatureSpec { name: name.into(), dtype, kind }
    }

    /// The same sparse feature, its records known to list their values in index order (no
    /// sorting; tf.data's `already_sorted=True`).
    pub fn already_sorted(mut self) -> Self {
        if let FeatureKind::Sparse { already_sorted, .. } = &mut self.kind {
            *already_sorted = true;
        }
        self
    }

    /// The same fixed-length feature, taking `default` where it is missing.
    pub fn with_default(mut self, default: Defaults) -> Self {
        if let FeatureKind::FixedLen { default: d, .. } = &mut self.kind {
            *d = Some(default);
        }
        self
    }

    /// The output field of this feature.
    pub fn field(&self) -> FieldSpec {
        match &self.kind {
            FeatureKind::FixedLen { shape, .. } => {
                FieldSpec::tensor(&self.name, self.dtype, shape.iter().map(|&d| d as i64).collect())
            }
            // One dimension of unknown length: a list per element, as `padded_batch` and
            // `bucket_by_sequence_length` take it; ragged, so that `batch` batches records of
            // other lengths (tf.data's VarLen and Ragged features batch as sparse or ragged
            // tensors).
            FeatureKind::VarLen => FieldSpec::ragged(&self.name, self.dtype, vec![-1]),
            FeatureKind::Sparse { size, .. } => {
                FieldSpec::sparse(&self.name, self.dtype, size.iter().map(|&d| d as i64).collect())
            }
        }
    }

    /// The values a fixed-length feature holds per record (0 for the others).
    pub fn values_per_record(&self) -> usize {
        match &self.kind {
            FeatureKind::FixedLen { shape, .. } => shape.iter().product(),
            FeatureKind::VarLen | FeatureKind::Sparse { .. } => 0,
        }
    }
}

/// The element spec `parse_example` produces for `features`, checking that each is
/// parseable: a supported type, and defaults of the right type and length.
pub fn output_spec(features: &[FeatureSpec]) -> Result<ElementSpec, String> {
    for f in features {
        if !matches!(f.dtype, DType::Int64 | DType::Float32 | DType::Binary) {
            return Err(format!(
                "feature '{}': tf.train.Example holds int64, float and bytes, not {}",
                f.name, f.dtype
            ));
        }
        if let FeatureKind::Sparse { index_keys, size, .. } = &f.kind {
            if index_keys.is_empty() || index_keys.len() != size.len() {
                return Err(format!(
                    "sparse feature '{}': {} index keys for a dense shape of {} dimensions",
                    f.name,
                    index_keys.len(),
                    size.len()
                ));
            }
        }
        if let FeatureKind::FixedLen { default: Some(d), .. } = &f.kind {
            let (dtype, n) = match d {
                Defaults::Int64(v) => (DType::Int64, v.len()),
                Defaults::Float32(v) => (DType::Float32, v.len()),
                Defaults::Bytes(v) => (DType::Binary, v.len()),
            };
            if dtype != f.dtype || n != f.values_per_record() {
                return Err(format!(
                    "feature '{}': its default has {n} {dtype} values, the feature {} {}",
                    f.name,
                    f.values_per_record(),
                    f.dtype
                ));
            }
        }
    }
    ElementSpec::new(features.iter().map(FeatureSpec::field).collect()).map_err(|e| e.to_string())
}

//! Element specs: the static type of a dataset's elements (tf.data's `element_spec`).
//!
//! An element is a struct of named fields; each field is a tensor with a dtype and a shape.
//! Shapes are full tf.data shapes: `batch(4)` over a scalar field gives shape `[4]`.
//! A dimension is a known size or `-1` (unknown). Physically a field becomes one Arrow column
//! whose rows are the elements: a scalar is a primitive column, each dimension wraps it in a
//! `FixedSizeList` (known size) or a `List` (unknown size), outermost dimension first.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};

/// The unknown size of a dimension.
pub const UNKNOWN: i64 = -1;

/// The Arrow field metadata key that names a field's dtype where its Arrow type cannot: a
/// `bfloat16` field's values are `UInt16` bits, and its field says `"bfloat16"` here, so
/// the dtype survives batches, IPC files and pyarrow.
pub const DTYPE_METADATA: &str = "flumen:dtype";

/// How a field's tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    /// A dense tensor (unknown dims are uniform within one element).
    #[default]
    Dense,
    /// A ragged tensor (tf.RaggedTensor): unknown dims vary between rows.
    Ragged,
    /// A sparse tensor: `indices` and `values` with a dense shape.
    Sparse,
}

/// One named field of an element.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FieldSpec {
    /// The field's name, unique within the element.
    pub name: String,
    /// The type of the field's values.
    pub dtype: DType,
    /// The tensor shape; `[]` is a scalar, `-1` an unknown dimension.
    #[serde(default)]
    pub shape: Vec<i64>,
    /// Dense, ragged or sparse.
    #[serde(default, skip_serializing_if = "is_dense")]
    pub kind: FieldKind,
}

fn is_dense(kind: &FieldKind) -> bool {
    *kind == FieldKind::Dense
}

impl FieldSpec {
    /// Whether this is a dense tensor beyond the `batch_dims` leading dims, every dim of it
    /// known: its values are stored as fixed-size lists.
    pub fn is_fixed_tensor(&self, batch_dims: usize) -> bool {
        self.kind == FieldKind::Dense
            && self.shape.len() > batch_dims
            && self.shape[batch_dims..].iter().all(|d| *d >= 0)
    }

    /// A scalar field.
    pub fn scalar(name: impl Into<String>, dtype: DType) -> Self {
        FieldSpec { name: name.into(), dtype, shape: vec![], kind: FieldKind::Dense }
    }

    /// A dense tensor field of `shape`.
    pub fn tensor(name: impl Into<String>, dtype: DType, shape: Vec<i64>) -> Self {
        FieldSpec { name: name.into(), dtype, shape, kind: FieldKind::Dense }
    }

    /// A ragged tensor field of `shape` (its unknown dims vary between rows).
    pub fn ragged(name: impl Into<String>, dtype: DType, shape: Vec<i64>) -> Self {
        FieldSpec { name: name.into(), dtype, shape, kind: FieldKind::Ragged }
    }

    /// A sparse tensor field with dense shape `shape`. Its column holds, per element, the parts
    /// of a `tf.SparseTensor`: `indices` (a list of rank-long coordinates), `values` (a list)
    /// and `dense_shape` (rank sizes, where `shape` leaves a dimension unknown the element's own).
    pub fn sparse(name: impl Into<String>, dtype: DType, shape: Vec<i64>) -> Self {
        FieldSpec { name: name.into(), dtype, shape, kind: FieldKind::Sparse }
    }

    /// The same field under another name.
    pub fn renamed(&self, name: impl Into<String>) -> Self {
        FieldSpec { name: name.into(), ..self.clone() }
    }

    /// True when the field is a scalar (rank 0).
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty() && self.kind != FieldKind::Sparse
    }

    /// True when every dimension is known.
    pub fn is_static(&self) -> bool {
        self.shape.iter().all(|d| *d >= 0)
    }

    /// The Arrow type of this field's column (one row per element).
    pub fn arrow_type(&self) -> DataType {
        if self.kind == FieldKind::Sparse {
            let rank = self.shape.len() as i32;
            let index = Field::new("item", DataType::Int64, false);
            let coords = DataType::FixedSizeList(Arc::new(index.clone()), rank);
            return DataType::Struct(
                vec![
                    Field::new("indices", DataType::List(Arc::new(Field::new("item", coords, false))), false),
                    Field::new(
                        "values",
                        DataType::List(Arc::new(Field::new("item", self.dtype.to_arrow(), true))),
                        false,
                    ),
                    Field::new("dense_shape", DataType::FixedSizeList(Arc::new(index), rank), false),
                ]
                .into(),
            );
        }
        wrap_dims(self.dtype.to_arrow(), &self.shape)
    }

    /// The Arrow field of this field's column.
    pub fn arrow_field(&self) -> Field {
        let field = Field::new(&self.name, self.arrow_type(), true);
        match self.dtype {
            DType::BFloat16 => {
                field.with_metadata([(DTYPE_METADATA.to_string(), self.dtype.name().to_string())].into())
            }
            _ => field,
        }
    }

    /// The field with one more leading dimension of size `dim` (what `batch` does).
    pub fn batched(&self, dim: i64) -> FieldSpec {
        let mut shape = Vec::with_capacity(self.shape.len() + 1);
        shape.push(dim);
        shape.extend_from_slice(&self.shape);
        FieldSpec { shape, ..self.clone() }
    }

    /// The field without its leading dimension (what `unbatch` does), or `None` for a scalar.
    pub fn unbatched(&self) -> Option<FieldSpec> {
        if self.shape.is_empty() {
            return None;
        }
        Some(FieldSpec { shape: self.shape[1..].to_vec(), ..self.clone() })
    }

    /// The most specific spec compatible with both, where they agree on name, dtype and rank
    /// (and neither or both are sparse): dims that differ become unknown, and dense meets
    /// ragged as ragged (both are lists physically), as `concatenate` reports.
    pub fn most_specific_common(&self, other: &FieldSpec) -> Option<FieldSpec> {
        let sparse = |f: &FieldSpec| f.kind == FieldKind::Sparse;
        if self.name != other.name
            || self.dtype != other.dtype
            || sparse(self) != sparse(other)
            || self.shape.len() != other.shape.len()
        {
            return None;
        }
        let kind = if self.kind == other.kind { self.kind } else { FieldKind::Ragged };
        let shape = self.shape.iter().zip(&other.shape).map(|(a, b)| if a == b { *a } else { UNKNOWN }).collect();
        Some(FieldSpec { shape, kind, ..self.clone() })
    }
}

/// Wrap `inner` in one list level per dimension, outermost dimension first.
fn wrap_dims(inner: DataType, dims: &[i64]) -> DataType {
    dims.iter().rev().fold(inner, |acc, &d| {
        let item = Arc::new(Field::new("item", acc, true));
        if d >= 0 {
            DataType::FixedSizeList(item, d as i32)
        } else {
            DataType::List(item)
        }
    })
}

impl fmt::Display for FieldSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> =
            self.shape.iter().map(|d| if *d < 0 { "?".to_string() } else { d.to_string() }).collect();
        let kind = match self.kind {
            FieldKind::Dense => "",
            FieldKind::Ragged => "ragged ",
            FieldKind::Sparse => "sparse ",
        };
        write!(f, "{}: {}{}[{}]", self.name, kind, self.dtype, dims.join(", "))
    }
}

/// The static type of a dataset's elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct ElementSpec {
    /// The fields, in order.
    pub fields: Vec<FieldSpec>,
    /// How many leading dimensions of every field were added by `batch`-like operators.
    #[serde(default)]
    pub batch_dims: usize,
}

impl ElementSpec {
    /// An unbatched spec of `fields`; fails on duplicate names.
    pub fn new(fields: Vec<FieldSpec>) -> Result<Self> {
        let spec = ElementSpec { fields, batch_dims: 0 };
        spec.check_unique("element spec")?;
        Ok(spec)
    }

    /// Fails when two fields share a name.
    pub fn check_unique(&self, operator: &str) -> Result<()> {
        for (i, f) in self.fields.iter().enumerate() {
            if self.fields[..i].iter().any(|g| g.name == f.name) {
                return Err(Error::plan(operator, format!("duplicate field name '{}'", f.name)));
            }
        }
        Ok(())
    }

    /// This spec with each fixed-shape tensor field (beyond the batch dims) seen as one of
    /// its values: how an expression applied to every value of a tensor is typed.
    pub fn values_of_tensors(&self) -> ElementSpec {
        let mut out = self.clone();
        for f in &mut out.fields {
            if f.is_fixed_tensor(self.batch_dims) {
                f.shape.truncate(self.batch_dims);
            }
        }
        out
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The position of the field called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The field called `name`, or an error for `operator` listing the known fields.
    pub fn require(&self, name: &str, operator: &str) -> Result<&FieldSpec> {
        self.field(name).ok_or_else(|| {
            Error::plan(
                operator,
                format!("unknown field '{name}' (the element has: {})", self.field_names().join(", ")),
            )
        })
    }

    /// The bytes of one element's values when every field is a dense tensor of a fixed
    /// shape and a fixed-width dtype; `None` when any field's size varies (bytes, strings,
    /// ragged or sparse fields, unknown dimensions).
    pub fn fixed_row_bytes(&self) -> Option<u64> {
        self.fields.iter().try_fold(0u64, |sum, f| {
            // Booleans are bits in Arrow; a byte each bounds them.
            let width = if f.dtype == DType::Bool { 1 } else { f.dtype.to_arrow().primitive_width()? as u64 };
            let dims = f.shape.iter().try_fold(1u64, |n, &d| u64::try_from(d).ok().map(|d| n * d))?;
            (f.kind == FieldKind::Dense).then_some(sum + width * dims)
        })
    }

    /// The field names in order.
    pub fn field_names(&self) -> Vec<String> {
        self.fields.iter().map(|f| f.name.clone()).collect()
    }

    /// The Arrow schema of a chunk of these elements (one row per element).
    pub fn arrow_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(self.fields.iter().map(FieldSpec::arrow_field).collect::<Vec<_>>()))
    }

    /// The spec of an element made by `batch`: one more leading dim of size `dim` (`-1` unknown).
    pub fn batched(&self, dim: i64) -> ElementSpec {
        ElementSpec { fields: self.fields.iter().map(|f| f.batched(dim)).collect(), batch_dims: self.batch_dims + 1 }
    }

    /// The spec of an element after `unbatch`; fails for `operator` when a field is a scalar.
    pub fn unbatched(&self, operator: &str) -> Result<ElementSpec> {
        let fields = self
            .fields
            .iter()
            .map(|f| {
                f.unbatched().ok_or_else(|| {
                    Error::plan(operator, format!("field '{}' is a scalar and has no dimension to unbatch", f.name))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ElementSpec { fields, batch_dims: self.batch_dims.saturating_sub(1) })
    }

    /// The most specific spec compatible with both (the same field names, matched by name as
    /// tf.data matches a dict's keys, with the same dtypes and ranks), in this spec's field
    /// order, if any.
    pub fn most_specific_common(&self, other: &ElementSpec) -> Option<ElementSpec> {
        if self.fields.len() != other.fields.len() {
            return None;
        }
        let fields =
            self.fields.iter().map(|a| a.most_specific_common(other.field(&a.name)?)).collect::<Option<Vec<_>>>()?;
        Some(ElementSpec { fields, batch_dims: self.batch_dims.min(other.batch_dims) })
    }

    /// Why there is no [`ElementSpec::most_specific_common`] of the two: the first field one
    /// lacks or the two hold differently.
    pub fn difference(&self, other: &ElementSpec) -> String {
        let names = |s: &ElementSpec| s.field_names().join(", ");
        for a in &self.fields {
            let Some(b) = other.field(&a.name) else {
                return format!("the first has field '{}', the second has not (it has {})", a.name, names(other));
            };
            if a.most_specific_common(b).is_none() {
                let rank = if a.shape.len() != b.shape.len() {
                    "; tf.data would give a field of unknown rank, which flumen's typed elements do not have: \
                     batch or unbatch one side so that the ranks agree"
                } else {
                    ""
                };
                return format!("field '{}' is {a} in the first and {b} in the second{rank}", a.name);
            }
        }
        match other.fields.iter().find(|b| self.field(&b.name).is_none()) {
            Some(b) => format!("the second has field '{}', the first has not (it has {})", b.name, names(self)),
            None => format!("{self} vs {other}"),
        }
    }

    /// The spec whose column types match `schema`: each column's list nesting becomes dims.
    pub fn from_arrow_schema(schema: &Schema) -> Result<ElementSpec> {
        let fields = schema.fields().iter().map(|f| field_from_arrow_field(f)).collect::<Result<Vec<_>>>()?;
        ElementSpec::new(fields)
    }
}

/// The field spec of an Arrow field: its type's (see [`field_from_arrow`]), with the dtype
/// its metadata names ([`DTYPE_METADATA`]) where that is `bfloat16` over `UInt16` values.
pub fn field_from_arrow_field(field: &Field) -> Result<FieldSpec> {
    let mut spec = field_from_arrow(field.name(), field.data_type())?;
    spec.dtype = tagged_dtype(spec.dtype, field);
    Ok(spec)
}

/// `dtype`, the dtype of `field`'s values by their Arrow type, or the one its metadata
/// names ([`DTYPE_METADATA`]) where that type stands for it: `bfloat16` over `uint16`.
pub fn tagged_dtype(dtype: DType, field: &Field) -> DType {
    let tag = field.metadata().get(DTYPE_METADATA).map(String::as_str);
    match (dtype, tag) {
        (DType::UInt16, Some(name)) if name == DType::BFloat16.name() => DType::BFloat16,
        _ => dtype,
    }
}

/// The field spec of an Arrow column type: list levels become dims.
pub fn field_from_arrow(name: &str, dt: &DataType) -> Result<FieldSpec> {
    let mut shape = Vec::new();
    let mut cur = dt;
    let mut ragged = false;
    loop {
        match cur {
            DataType::FixedSizeList(item, n) => {
                shape.push(*n as i64);
                cur = item.data_type();
            }
            DataType::List(item) | DataType::LargeList(item) => {
                shape.push(UNKNOWN);
                ragged = true;
                cur = item.data_type();
            }
            other => {
                let dtype =
                    DType::from_arrow(other).map_err(|e| Error::plan("schema", format!("column '{name}': {e}")))?;
                let kind = if ragged { FieldKind::Ragged } else { FieldKind::Dense };
                return Ok(FieldSpec { name: name.to_string(), dtype, shape, kind });
            }
        }
    }
}

impl fmt::Display for ElementSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{field}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_row_bytes_only_when_every_field_has_a_fixed_size() {
        let spec = |fields| ElementSpec::new(fields).unwrap();
        let fixed = spec(vec![
            FieldSpec::scalar("id", DType::Int64),
            FieldSpec::tensor("x", DType::Float32, vec![3, 4]),
            FieldSpec::scalar("ok", DType::Bool),
        ]);
        assert_eq!(fixed.fixed_row_bytes(), Some(8 + 48 + 1));
        for varying in [
            FieldSpec::scalar("s", DType::Utf8),
            FieldSpec::tensor("x", DType::Float32, vec![UNKNOWN]),
            FieldSpec::ragged("r", DType::Int64, vec![UNKNOWN]),
        ] {
            assert_eq!(spec(vec![FieldSpec::scalar("id", DType::Int64), varying]).fixed_row_bytes(), None);
        }
    }
}

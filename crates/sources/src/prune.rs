//! Row-group pruning: deciding from a Parquet row group's column-chunk statistics that no row
//! of the group can pass a pushed-down predicate, so that the reader skips the group without
//! decoding it.
//!
//! The question answered is one-sided: [`row_group_may_match`] returns `false` only when the
//! statistics *prove* that the predicate is not true for any row of the group (it is false
//! or null everywhere; a filter drops null like false). Anything it cannot decide keeps the
//! group, which is always correct because the kept rows are filtered row by row afterwards.
//!
//! What is understood:
//!
//! - `and`, `or` and `not` (negations are pushed down to the comparisons, which is exact
//!   under Kleene logic), and the literals `true`, `false` and `null`;
//! - `is_null(col)` and `is_not_null(col)`, from the null count;
//! - comparisons `col <op> literal` and `literal <op> col` (`==`, `!=`, `<`, `<=`, `>`, `>=`)
//!   over a top-level, non-repeated column of integer (signed or unsigned), float, string or
//!   binary values, from the minimum, the maximum and the null count. A comparison with a
//!   null is null, so a group whose column is entirely null (or a comparison with a null
//!   literal) never passes.
//!
//! Everything else keeps the group: other expressions (arithmetic, casts, functions,
//! column-to-column comparisons), missing statistics, a literal whose type does not meet the
//! column's without a numeric promotion, logical types other than plain integers, floats and
//! strings (dates, decimals, timestamps, `float16`), and legacy statistics whose sort order
//! is not signed.
//!
//! Floats are compared as flumen's expressions compare them, by IEEE 754: `NaN` is
//! unordered (only `!=` holds for it) and `-0.0 == 0.0`. Parquet statistics leave `NaN`s out
//! and do not count them, so a float group may hold values outside its `[min, max]`, for
//! which a negated ordering (`not(x < 1.5)`) holds: only equality with a non-`NaN` literal
//! (`x == 1.5`, or `not(x != 1.5)`, the same under IEEE 754) and an entirely null column
//! prune a float group. The minimum and maximum are widened to
//! `-0.0` and `+0.0` when they are zero, since writers do not agree on the sign they store.
//! String minimums and maximums may be truncated: they are still bounds, and `!=` uses them
//! only when both are exact.

use std::cmp::Ordering;

use ::parquet::basic::{ConvertedType, LogicalType, SortOrder};
use ::parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
use ::parquet::file::statistics::{Statistics, ValueStatistics};
use flumen_ir::{BinaryOp, DType, Expr, Scalar, UnaryOp};

/// False only when the statistics of `row_group` prove that `predicate` holds for none of
/// its rows (it is false or null for every row); true when some row may satisfy it.
///
/// `predicate` is a boolean expression over the file's top-level columns, named as in the
/// Parquet schema. See the [module documentation](self) for what is understood; anything
/// else is answered `true`.
pub fn row_group_may_match(predicate: &Expr, row_group: &RowGroupMetaData) -> bool {
    may_be(predicate, true, row_group)
}

/// False only when it is proven that `expr` evaluates to `value` for no row of the group
/// (a null result is neither true nor false).
fn may_be(expr: &Expr, value: bool, rg: &RowGroupMetaData) -> bool {
    match expr {
        Expr::Literal(Scalar::Bool(b)) => *b == value,
        Expr::Literal(Scalar::Null(_)) => false,
        Expr::Unary { op: UnaryOp::Not, arg } => may_be(arg, !value, rg),
        Expr::Unary { op: op @ (UnaryOp::IsNull | UnaryOp::IsNotNull), arg } => match arg.as_ref() {
            Expr::Column(name) => {
                // `is_null(c)` is true for some row when the column has a null, and false when
                // it has a non-null value.
                let wants_null = (*op == UnaryOp::IsNull) == value;
                null_test_may_match(name, wants_null, rg)
            }
            _ => true,
        },
        Expr::Binary { op: BinaryOp::And, left, right } => {
            if value {
                may_be(left, true, rg) && may_be(right, true, rg)
            } else {
                may_be(left, false, rg) || may_be(right, false, rg)
            }
        }
        Expr::Binary { op: BinaryOp::Or, left, right } => {
            if value {
                may_be(left, true, rg) || may_be(right, true, rg)
            } else {
                may_be(left, false, rg) && may_be(right, false, rg)
            }
        }
        Expr::Binary { op, left, right } if op.is_comparison() => {
            let (name, op, literal) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(s)) => (c, *op, s),
                (Expr::Literal(s), Expr::Column(c)) => (c, flip(*op), s),
                _ => return true,
            };
            // `not(c < v)` is `c >= v` for a non-null `c`, and null where `c` is null.
            let op = if value { op } else { negate(op) };
            comparison_may_match(name, op, literal, rg)
        }
        _ => true,
    }
}

/// `literal <op> col` as `col <op'> literal`.
fn flip(op: BinaryOp) -> BinaryOp {
    match op {
        BinaryOp::Lt => BinaryOp::Gt,
        BinaryOp::LtEq => BinaryOp::GtEq,
        BinaryOp::Gt => BinaryOp::Lt,
        BinaryOp::GtEq => BinaryOp::LtEq,
        other => other,
    }
}

/// The comparison true exactly where `op` is false (on non-null operands).
fn negate(op: BinaryOp) -> BinaryOp {
    match op {
        BinaryOp::Eq => BinaryOp::NotEq,
        BinaryOp::NotEq => BinaryOp::Eq,
        BinaryOp::Lt => BinaryOp::GtEq,
        BinaryOp::LtEq => BinaryOp::Gt,
        BinaryOp::Gt => BinaryOp::LtEq,
        BinaryOp::GtEq => BinaryOp::Lt,
        other => other,
    }
}

/// The chunk of the top-level, non-repeated column `name`.
fn column<'a>(rg: &'a RowGroupMetaData, name: &str) -> Option<&'a ColumnChunkMetaData> {
    rg.columns().iter().find(|c| {
        let descr = c.column_descr();
        let parts = descr.path().parts();
        parts.len() == 1 && parts[0] == name && descr.max_rep_level() == 0
    })
}

/// Whether some row may have a null (`wants_null`) or a non-null value in column `name`.
fn null_test_may_match(name: &str, wants_null: bool, rg: &RowGroupMetaData) -> bool {
    let Some(nulls) = column(rg, name).and_then(|c| c.statistics()).and_then(|s| s.null_count_opt()) else {
        return true;
    };
    let rows = rg.num_rows().max(0) as u64;
    if wants_null {
        nulls > 0
    } else {
        nulls < rows
    }
}

/// Whether some row may satisfy `col <op> literal`.
fn comparison_may_match(name: &str, op: BinaryOp, literal: &Scalar, rg: &RowGroupMetaData) -> bool {
    if literal.is_null() {
        return false;
    }
    let Some(chunk) = column(rg, name) else {
        return true;
    };
    let Some(stats) = chunk.statistics() else {
        return true;
    };
    let rows = rg.num_rows().max(0) as u64;
    if stats.null_count_opt() == Some(rows) {
        // Every value is null (or the group is empty): every comparison is null.
        return false;
    }
    let descr = chunk.column_descr();
    let order = descr.sort_order();
    // Legacy min/max were written in signed order whatever the type: unusable otherwise.
    if stats.is_min_max_deprecated() && order != SortOrder::SIGNED {
        return true;
    }
    let logical = descr.logical_type_ref();
    let converted = descr.converted_type();
    match stats {
        Statistics::Int32(s) if is_integer(logical, converted) => {
            let Some(v) = int_literal(literal) else { return true };
            match order {
                SortOrder::SIGNED => range_may_match(op, &v, &map(s, |x| i128::from(*x)), i128::cmp),
                SortOrder::UNSIGNED => range_may_match(op, &v, &map(s, |x| i128::from(*x as u32)), i128::cmp),
                SortOrder::UNDEFINED => true,
            }
        }
        Statistics::Int64(s) if is_integer(logical, converted) => {
            let Some(v) = int_literal(literal) else { return true };
            match order {
                SortOrder::SIGNED => range_may_match(op, &v, &map(s, |x| i128::from(*x)), i128::cmp),
                SortOrder::UNSIGNED => range_may_match(op, &v, &map(s, |x| i128::from(*x as u64)), i128::cmp),
                SortOrder::UNDEFINED => true,
            }
        }
        Statistics::Float(s) if logical.is_none() && converted == ConvertedType::NONE => {
            let Some(v) = float32_literal(literal) else { return true };
            float_may_match(op, v, s, |x| x.is_nan(), |x| x == 0.0, -0.0, 0.0, f32::total_cmp)
        }
        Statistics::Double(s) if logical.is_none() && converted == ConvertedType::NONE => {
            let Some(v) = float64_literal(literal) else { return true };
            float_may_match(op, v, s, |x| x.is_nan(), |x| x == 0.0, -0.0, 0.0, f64::total_cmp)
        }
        Statistics::ByteArray(s) if order == SortOrder::UNSIGNED => {
            let is_string =
                matches!(logical, Some(LogicalType::String)) || (logical.is_none() && converted == ConvertedType::UTF8);
            let is_binary = logical.is_none() && converted == ConvertedType::NONE;
            let v: &[u8] = match literal {
                Scalar::Utf8(text) if is_string => text.as_bytes(),
                Scalar::Binary(bytes) if is_binary => bytes,
                _ => return true,
            };
            let bounds =
                Bounds { min: s.min_bytes_opt(), max: s.max_bytes_opt(), exact: s.min_is_exact() && s.max_is_exact() };
            range_may_match(op, &v, &bounds, |a: &&[u8], b: &&[u8]| a.cmp(b))
        }
        _ => true,
    }
}

/// A plain integer column: no logical type, or an integer one (not a date, a decimal, ...).
fn is_integer(logical: Option<&LogicalType>, converted: ConvertedType) -> bool {
    match logical {
        Some(LogicalType::Integer(_)) => true,
        Some(_) => false,
        None => matches!(
            converted,
            ConvertedType::NONE
                | ConvertedType::INT_8
                | ConvertedType::INT_16
                | ConvertedType::INT_32
                | ConvertedType::INT_64
                | ConvertedType::UINT_8
                | ConvertedType::UINT_16
                | ConvertedType::UINT_32
                | ConvertedType::UINT_64
        ),
    }
}

/// An integer literal's value (it adopts an integer column's type; a float literal would
/// turn the comparison into a float one, which is not pruned).
fn int_literal(literal: &Scalar) -> Option<i128> {
    match literal {
        Scalar::Int(v, t) if t.is_integer() => Some(i128::from(*v)),
        Scalar::UInt64(v) => Some(i128::from(*v)),
        _ => None,
    }
}

/// A numeric literal as a `float32` column sees it: converted to `float32` as Arrow's cast
/// converts it.
fn float32_literal(literal: &Scalar) -> Option<f32> {
    match literal {
        Scalar::Float(v, DType::Float32 | DType::Float64) => Some(*v as f32),
        Scalar::Int(v, t) if t.is_integer() => Some(*v as f32),
        Scalar::UInt64(v) => Some(*v as f32),
        _ => None,
    }
}

/// A numeric literal as a `float64` column sees it (a `float32` literal is first a `float32`).
fn float64_literal(literal: &Scalar) -> Option<f64> {
    match literal {
        Scalar::Float(v, DType::Float32) => Some(f64::from(*v as f32)),
        Scalar::Float(v, DType::Float64) => Some(*v),
        Scalar::Int(v, t) if t.is_integer() => Some(*v as f64),
        Scalar::UInt64(v) => Some(*v as f64),
        _ => None,
    }
}

/// Bounds on the non-null values of a column chunk.
struct Bounds<T> {
    /// A lower bound (the minimum when exact).
    min: Option<T>,
    /// An upper bound (the maximum when exact).
    max: Option<T>,
    /// Both are the actual minimum and maximum.
    exact: bool,
}

/// The bounds of integer statistics, with each value converted by `f`.
fn map<T, U>(s: &ValueStatistics<T>, f: impl Fn(&T) -> U) -> Bounds<U> {
    Bounds { min: s.min_opt().map(&f), max: s.max_opt().map(&f), exact: s.min_is_exact() && s.max_is_exact() }
}

/// Whether a non-null value within `bounds` may satisfy `value <op> v` in the total order
/// `cmp`.
fn range_may_match<T>(op: BinaryOp, v: &T, bounds: &Bounds<T>, cmp: impl Fn(&T, &T) -> Ordering) -> bool {
    let min = bounds.min.as_ref().map(|m| cmp(m, v));
    let max = bounds.max.as_ref().map(|m| cmp(m, v));
    match op {
        // Some value equals v only if min <= v <= max.
        BinaryOp::Eq => min != Some(Ordering::Greater) && max != Some(Ordering::Less),
        // Every value equals v only if min == max == v, exactly.
        BinaryOp::NotEq => !(bounds.exact && min == Some(Ordering::Equal) && max == Some(Ordering::Equal)),
        BinaryOp::Lt => min.is_none_or(|o| o == Ordering::Less),
        BinaryOp::LtEq => min.is_none_or(|o| o != Ordering::Greater),
        BinaryOp::Gt => max.is_none_or(|o| o == Ordering::Greater),
        BinaryOp::GtEq => max.is_none_or(|o| o != Ordering::Less),
        _ => true,
    }
}

/// Whether a row of a float column chunk with statistics `s` may satisfy `value <op> v`.
/// Only equality with a non-`NaN` literal can be decided: the statistics leave `NaN`s out.
#[allow(clippy::too_many_arguments)]
fn float_may_match<T: Copy>(
    op: BinaryOp,
    v: T,
    s: &ValueStatistics<T>,
    is_nan: impl Fn(T) -> bool,
    is_zero: impl Fn(T) -> bool,
    negative_zero: T,
    positive_zero: T,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> bool {
    if op != BinaryOp::Eq || is_nan(v) {
        return true;
    }
    let (Some(&min), Some(&max)) = (s.min_opt(), s.max_opt()) else {
        return true;
    };
    if is_nan(min) || is_nan(max) {
        return true;
    }
    let min = if is_zero(min) { negative_zero } else { min };
    let max = if is_zero(max) { positive_zero } else { max };
    range_may_match(op, &v, &Bounds { min: Some(min), max: Some(max), exact: false }, cmp)
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::sync::Arc;

    use ::parquet::arrow::ArrowWriter;
    use ::parquet::file::metadata::ParquetMetaData;
    use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
    use ::parquet::file::reader::{FileReader, SerializedFileReader};
    use arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, StringArray, UInt64Array};
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;

    use super::*;
    use flumen_ir::build::c;
    use flumen_ir::build::{float as f, int as i, text as s};

    /// The footer of a file holding `columns` in row groups of `group` rows.
    fn metadata(columns: Vec<(&str, ArrayRef)>, group: usize, stats: EnabledStatistics) -> ParquetMetaData {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.parquet");
        let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
        let batch =
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns.into_iter().map(|(_, a)| a).collect()).unwrap();
        let props =
            WriterProperties::builder().set_max_row_group_row_count(Some(group)).set_statistics_enabled(stats).build();
        let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        SerializedFileReader::new(File::open(&path).unwrap()).unwrap().metadata().clone()
    }

    fn b(op: BinaryOp, l: Expr, r: Expr) -> Expr {
        Expr::binary(op, l, r)
    }

    fn not(e: Expr) -> Expr {
        Expr::Unary { op: UnaryOp::Not, arg: Box::new(e) }
    }

    /// Which row groups of `meta` may match `e`.
    fn kept(meta: &ParquetMetaData, e: &Expr) -> Vec<usize> {
        (0..meta.num_row_groups()).filter(|&g| row_group_may_match(e, meta.row_group(g))).collect()
    }

    /// x: int64 0..30 in groups of 10 (0-9, 10-19, 20-29).
    fn ints() -> ParquetMetaData {
        metadata(vec![("x", Arc::new(Int64Array::from((0..30).collect::<Vec<i64>>())))], 10, EnabledStatistics::Chunk)
    }

    #[test]
    fn integer_comparisons_in_both_orders() {
        let m = ints();
        use BinaryOp::*;
        assert_eq!(kept(&m, &b(Gt, c("x"), i(15))), vec![1, 2]);
        assert_eq!(kept(&m, &b(Gt, c("x"), i(19))), vec![2]);
        assert_eq!(kept(&m, &b(GtEq, c("x"), i(19))), vec![1, 2]);
        assert_eq!(kept(&m, &b(Lt, c("x"), i(10))), vec![0]);
        assert_eq!(kept(&m, &b(LtEq, c("x"), i(10))), vec![0, 1]);
        assert_eq!(kept(&m, &b(Eq, c("x"), i(25))), vec![2]);
        assert_eq!(kept(&m, &b(Eq, c("x"), i(30))), Vec::<usize>::new());
        assert_eq!(kept(&m, &b(NotEq, c("x"), i(25))), vec![0, 1, 2]);
        // literal <op> column
        assert_eq!(kept(&m, &b(Lt, i(15), c("x"))), vec![1, 2]);
        assert_eq!(kept(&m, &b(GtEq, i(9), c("x"))), vec![0]);
        assert_eq!(kept(&m, &b(Eq, i(5), c("x"))), vec![0]);
    }

    #[test]
    fn and_or_not() {
        let m = ints();
        use BinaryOp::*;
        let between = b(And, b(GtEq, c("x"), i(12)), b(Lt, c("x"), i(18)));
        assert_eq!(kept(&m, &between), vec![1]);
        let outside = b(Or, b(Lt, c("x"), i(3)), b(Gt, c("x"), i(27)));
        assert_eq!(kept(&m, &outside), vec![0, 2]);
        assert_eq!(kept(&m, &not(b(Lt, c("x"), i(20)))), vec![2]);
        assert_eq!(kept(&m, &not(outside)), vec![0, 1, 2]);
        assert_eq!(kept(&m, &not(between)), vec![0, 1, 2]);
        // An unknown side of an `and` keeps nothing extra; of an `or`, keeps everything.
        let unknown = b(Gt, b(Add, c("x"), i(1)), i(100));
        assert_eq!(kept(&m, &b(And, unknown.clone(), b(Lt, c("x"), i(5)))), vec![0]);
        assert_eq!(kept(&m, &b(Or, unknown, b(Lt, c("x"), i(5)))), vec![0, 1, 2]);
        assert_eq!(kept(&m, &Expr::Literal(Scalar::Bool(false))), Vec::<usize>::new());
        assert_eq!(kept(&m, &Expr::Literal(Scalar::Bool(true))), vec![0, 1, 2]);
    }

    #[test]
    fn nulls() {
        // group 0: all null; group 1: 10..20 with nulls; group 2: 20..30, no nulls.
        let values: Vec<Option<i64>> =
            (0..30).map(|v| if v < 10 || (v < 20 && v % 2 == 0) { None } else { Some(v) }).collect();
        let m = metadata(vec![("x", Arc::new(Int64Array::from(values)))], 10, EnabledStatistics::Chunk);
        use BinaryOp::*;
        assert_eq!(kept(&m, &b(Gt, c("x"), i(5))), vec![1, 2]);
        assert_eq!(kept(&m, &b(NotEq, c("x"), i(5))), vec![1, 2]);
        assert_eq!(kept(&m, &not(b(Gt, c("x"), i(5)))), Vec::<usize>::new());
        let is_null = |op| Expr::Unary { op, arg: Box::new(c("x")) };
        assert_eq!(kept(&m, &is_null(UnaryOp::IsNull)), vec![0, 1]);
        assert_eq!(kept(&m, &is_null(UnaryOp::IsNotNull)), vec![1, 2]);
        assert_eq!(kept(&m, &not(is_null(UnaryOp::IsNull))), vec![1, 2]);
        // A comparison with a null literal is null everywhere.
        assert_eq!(kept(&m, &b(Gt, c("x"), Expr::Literal(Scalar::Null(DType::Int64)))), Vec::<usize>::new());
    }

    #[test]
    fn strings() {
        let names: Vec<String> = (0..30).map(|v| format!("k{v:02}")).collect();
        let m = metadata(vec![("name", Arc::new(StringArray::from(names)))], 10, EnabledStatistics::Chunk);
        use BinaryOp::*;
        assert_eq!(kept(&m, &b(Eq, c("name"), s("k15"))), vec![1]);
        assert_eq!(kept(&m, &b(GtEq, c("name"), s("k2"))), vec![2]);
        assert_eq!(kept(&m, &b(Lt, c("name"), s("k1"))), vec![0]);
        assert_eq!(kept(&m, &b(Gt, s("k05"), c("name"))), vec![0]);
        assert_eq!(kept(&m, &b(Eq, c("name"), s("z"))), Vec::<usize>::new());
        // A type mismatch decides nothing.
        assert_eq!(kept(&m, &b(Eq, c("name"), i(3))), vec![0, 1, 2]);
    }

    #[test]
    fn same_value_and_not_equal() {
        let m = metadata(vec![("x", Arc::new(Int64Array::from(vec![7; 20])))], 10, EnabledStatistics::Chunk);
        assert_eq!(kept(&m, &b(BinaryOp::NotEq, c("x"), i(7))), Vec::<usize>::new());
        assert_eq!(kept(&m, &b(BinaryOp::NotEq, c("x"), i(8))), vec![0, 1]);
    }

    #[test]
    fn narrow_and_unsigned_integers() {
        let m = metadata(
            vec![
                ("i", Arc::new(Int32Array::from((0..20).map(|v| v - 10).collect::<Vec<i32>>()))),
                // Above i64::MAX: compared unsigned, not as the negative i64 stored.
                ("u", Arc::new(UInt64Array::from((0..20).map(|v| u64::MAX - v).collect::<Vec<u64>>()))),
            ],
            10,
            EnabledStatistics::Chunk,
        );
        use BinaryOp::*;
        let i32_lit = |v| Expr::Literal(Scalar::Int(v, DType::Int32));
        assert_eq!(kept(&m, &b(Lt, c("i"), i32_lit(-5))), vec![0]);
        assert_eq!(kept(&m, &b(GtEq, c("i"), i(0))), vec![1]);
        let big = Expr::Literal(Scalar::UInt64(u64::MAX - 5));
        assert_eq!(kept(&m, &b(Gt, c("u"), big.clone())), vec![0]);
        assert_eq!(kept(&m, &b(LtEq, c("u"), big)), vec![0, 1]);
        assert_eq!(kept(&m, &b(Gt, c("u"), i(5))), vec![0, 1]);
    }

    #[test]
    fn floats_prune_only_equality() {
        let values: Vec<f64> = (0..20).map(|v| v as f64).collect();
        let m = metadata(vec![("x", Arc::new(Float64Array::from(values)))], 10, EnabledStatistics::Chunk);
        use BinaryOp::*;
        assert_eq!(kept(&m, &b(Eq, c("x"), f(15.0))), vec![1]);
        assert_eq!(kept(&m, &b(Eq, c("x"), i(15))), vec![1]);
        assert_eq!(kept(&m, &not(b(NotEq, c("x"), f(3.0)))), vec![0]);
        // A NaN the statistics leave out is above every number in Arrow's order.
        assert_eq!(kept(&m, &b(Gt, c("x"), f(100.0))), vec![0, 1]);
        assert_eq!(kept(&m, &b(Eq, c("x"), f(f64::NAN))), vec![0, 1]);
        // Zero's sign: -0.0 may be stored as a +0.0 minimum.
        assert_eq!(kept(&m, &b(Eq, c("x"), f(-0.0))), vec![0]);
    }

    #[test]
    fn floats_with_nan_are_kept() {
        let m = metadata(
            vec![("x", Arc::new(Float64Array::from(vec![1.0, f64::NAN, 2.0, -f64::NAN])))],
            10,
            EnabledStatistics::Chunk,
        );
        use BinaryOp::*;
        for op in [Gt, GtEq, Lt, LtEq, NotEq] {
            assert_eq!(kept(&m, &b(op, c("x"), f(50.0))), vec![0], "{op:?}");
        }
        assert_eq!(kept(&m, &b(Eq, c("x"), f(50.0))), Vec::<usize>::new());
    }

    #[test]
    fn missing_statistics_and_unsupported_expressions_keep_the_group() {
        let m = metadata(
            vec![("x", Arc::new(Int64Array::from((0..30).collect::<Vec<i64>>())))],
            10,
            EnabledStatistics::None,
        );
        use BinaryOp::*;
        assert!(m.row_group(0).column(0).statistics().is_none());
        assert_eq!(kept(&m, &b(Gt, c("x"), i(100))), vec![0, 1, 2]);
        let m = ints();
        for e in [
            b(Gt, b(Add, c("x"), i(0)), i(100)),
            b(Gt, c("x"), c("x")),
            Expr::Cast { arg: Box::new(b(Gt, c("x"), i(100))), to: DType::Bool },
            Expr::Call { func: flumen_ir::Func::Abs, args: vec![c("x")] },
            b(Gt, c("missing"), i(100)),
            b(Gt, c("x"), f(100.5)),
        ] {
            assert_eq!(kept(&m, &e), vec![0, 1, 2], "{e}");
        }
    }
}

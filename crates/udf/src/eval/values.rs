//! Scalar evaluation over flat columns: the environment of columns, values that are
//! arrays or one-element scalars, and the kernels of each operator and function.

use super::*;

/// Makes `array` have exactly type `target` when the two differ only in nested field names or
/// nullability (a kernel names list items its own way); other differences are errors.
pub(super) fn conform(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == target {
        return Ok(array.clone());
    }
    match (array.data_type(), target) {
        (DataType::List(_), DataType::List(item)) => {
            let list = array.as_list::<i32>();
            let values = conform(list.values(), item.data_type())?;
            Ok(Arc::new(ListArray::try_new(item.clone(), list.offsets().clone(), values, list.nulls().cloned())?))
        }
        (DataType::FixedSizeList(_, n), DataType::FixedSizeList(item, m)) if n == m => {
            let list = array.as_fixed_size_list();
            let values = conform(list.values(), item.data_type())?;
            Ok(Arc::new(FixedSizeListArray::try_new_with_length(
                item.clone(),
                *n,
                values,
                list.nulls().cloned(),
                list.len(),
            )?))
        }
        (have, want) => Err(ArrowError::SchemaError(format!("computed as {have} but the output schema says {want}"))),
    }
}

/// A one-row array holding `value`, in the value's own type.
pub fn scalar_array(value: &Scalar) -> Result<ArrayRef, ArrowError> {
    let array: ArrayRef = match value {
        Scalar::Null(t) => return Ok(new_null_array(&t.to_arrow(), 1)),
        Scalar::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Scalar::Int(v, t) => return cast_with_options(&Int64Array::from(vec![*v]), &t.to_arrow(), &strict()),
        Scalar::UInt64(v) => Arc::new(UInt64Array::from(vec![*v])),
        Scalar::Float(v, t) => return cast_with_options(&Float64Array::from(vec![*v]), &t.to_arrow(), &strict()),
        Scalar::Utf8(s) => Arc::new(StringArray::from(vec![s.as_str()])),
        Scalar::Binary(b) => Arc::new(BinaryArray::from_vec(vec![b.as_slice()])),
    };
    Ok(array)
}

/// An evaluated sub-expression. `lit` marks a value computed from literals alone: it is one
/// element that stands for every row (a scalar [`Datum`] to Arrow's kernels), and it adopts
/// the type of the column it meets ([`common_type`]).
#[derive(Debug, Clone)]
pub(super) struct Value {
    pub(super) array: ArrayRef,
    pub(super) lit: bool,
}

impl Datum for Value {
    fn get(&self) -> (&dyn Array, bool) {
        (self.array.as_ref(), self.lit)
    }
}

impl Value {
    pub(super) fn column(array: ArrayRef) -> Value {
        Value { array, lit: false }
    }

    pub(super) fn dtype(&self, expr: &Expr) -> Result<DType> {
        DType::from_arrow(self.array.data_type()).map_err(|e| at(e, expr))
    }

    pub(super) fn cast(self, to: DType, expr: &Expr) -> Result<Value> {
        let to = to.to_arrow();
        if self.array.data_type() == &to {
            return Ok(self);
        }
        let array = cast_with_options(&self.array, &to, &strict()).map_err(|e| at(e, expr))?;
        Ok(Value { array, lit: self.lit })
    }

    /// The value as a column of `len` rows.
    pub(super) fn into_array(self, len: usize) -> Result<ArrayRef> {
        if self.lit && self.array.len() != len {
            let zeros = UInt32Array::from(vec![0u32; len]);
            return Ok(take(self.array.as_ref(), &zeros, None)?);
        }
        Ok(self.array)
    }
}

/// The columns an expression is evaluated over: leaf values of the referenced fields (and
/// the per-row list lengths of fields read through `length`), all `len` long.
#[derive(Clone)]
pub(super) struct Env {
    pub(super) columns: HashMap<String, ArrayRef>,
    pub(super) lengths: HashMap<String, ArrayRef>,
    pub(super) len: usize,
    /// The scalar spec of the leaf columns, to type sub-expressions exactly as the plan did.
    pub(super) spec: Arc<ElementSpec>,
    /// True when evaluating literal-only sub-expressions, on one row.
    pub(super) literal: bool,
}

impl Env {
    pub(super) fn eval(&self, expr: &Expr) -> Result<Value> {
        if !self.literal && !has_columns(expr) {
            let one_row = Env {
                columns: HashMap::new(),
                lengths: HashMap::new(),
                len: 1,
                spec: self.spec.clone(),
                literal: true,
            };
            return Ok(Value { array: one_row.eval(expr)?.array, lit: true });
        }
        match expr {
            Expr::Column(name) => self
                .columns
                .get(name)
                .cloned()
                .map(Value::column)
                .ok_or_else(|| Error::Expr(format!("field '{name}' is not a scalar column here in {expr}"))),
            Expr::Literal(s) => Ok(Value { array: scalar_array(s).map_err(|e| at(e, expr))?, lit: true }),
            Expr::Unary { op, arg } => {
                let v = self.eval(arg)?;
                let array: ArrayRef = match op {
                    UnaryOp::Not => Arc::new(boolean::not(as_bool(&v.array, expr)?).map_err(|e| at(e, expr))?),
                    UnaryOp::Neg => numeric::neg(&v.array).map_err(|e| at(e, expr))?,
                    UnaryOp::IsNull => Arc::new(boolean::is_null(&v.array).map_err(|e| at(e, expr))?),
                    UnaryOp::IsNotNull => Arc::new(boolean::is_not_null(&v.array).map_err(|e| at(e, expr))?),
                };
                Ok(Value { array, lit: v.lit })
            }
            Expr::Binary { op, left, right } => self.eval_binary(expr, *op, left, right),
            Expr::Cast { arg, to } => {
                // bfloat16 travels as uint16 bits: only the plan's types tell them apart, and
                // only a uint16 value needs asking.
                let value = self.eval(arg)?;
                let bfloat16 =
                    value.array.data_type() == &DataType::UInt16 && arg.data_type(&self.spec)? == DType::BFloat16;
                match (bfloat16, *to) {
                    (true, DType::BFloat16) => Ok(value),
                    (true, to) => {
                        let array = crate::bfloat16::widen(&value.array, &to.to_arrow()).map_err(|e| at(e, expr))?;
                        Ok(Value { array, lit: value.lit })
                    }
                    (false, DType::BFloat16) => {
                        let array = crate::bfloat16::narrow(&value.array).map_err(|e| at(e, expr))?;
                        Ok(Value { array, lit: value.lit })
                    }
                    _ => value.cast(*to, expr),
                }
            }
            Expr::Case { branches, otherwise } => self.eval_case(expr, branches, otherwise.as_deref()),
            Expr::Call { func, args } => self.eval_call(expr, *func, args),
        }
    }

    pub(super) fn eval_binary(&self, expr: &Expr, op: BinaryOp, left: &Expr, right: &Expr) -> Result<Value> {
        let (l, r) = (self.eval(left)?, self.eval(right)?);
        let lit = l.lit && r.lit;
        let array: ArrayRef = match binary_kernel(op) {
            Kernel::Logic(f) => {
                let (l, r) = (l.into_array(self.len)?, r.into_array(self.len)?);
                Arc::new(f(as_bool(&l, expr)?, as_bool(&r, expr)?).map_err(|e| at(e, expr))?)
            }
            Kernel::Numeric(f) => {
                let (l, r) = promote(l, r, op, expr)?;
                f(&l, &r).map_err(|e| at(e, expr))?
            }
            Kernel::Compare => {
                let (l, r) = promote(l, r, op, expr)?;
                Arc::new(crate::ieee::compare(op, &l, &r).map_err(|e| at(e, expr))?)
            }
        };
        Ok(Value { array, lit })
    }

    /// `CASE` evaluates each branch's value only on the rows that take it, so that a guard
    /// such as `CASE WHEN d != 0 THEN n / d END` protects the division as it reads.
    pub(super) fn eval_case(&self, expr: &Expr, branches: &[(Expr, Expr)], otherwise: Option<&Expr>) -> Result<Value> {
        let out_type = expr.data_type(&self.spec)?;
        let mut rest = self.clone();
        let mut rows: ArrayRef = Arc::new(UInt32Array::from_iter_values(0..self.len as u32));
        let mut pieces: Vec<ArrayRef> = Vec::new();
        let mut picks = vec![(0usize, 0usize); self.len];
        let mut place = |piece: ArrayRef, rows: &ArrayRef| {
            for (i, row) in rows.as_primitive::<UInt32Type>().values().iter().enumerate() {
                picks[*row as usize] = (pieces.len(), i);
            }
            pieces.push(piece);
        };
        for (cond, value) in branches {
            if rest.len == 0 {
                break;
            }
            let taken = rest.eval(cond)?.into_array(rest.len)?;
            let taken = null_as_false(as_bool(&taken, cond)?);
            if taken.true_count() > 0 {
                let env = rest.filter(&taken, expr)?;
                let v = env.eval(value)?.cast(out_type, expr)?.into_array(env.len)?;
                place(v, &filter(&rows, &taken).map_err(|e| at(e, expr))?);
            }
            let others = boolean::not(&taken).map_err(|e| at(e, expr))?;
            rest = rest.filter(&others, expr)?;
            rows = filter(&rows, &others).map_err(|e| at(e, expr))?;
        }
        // An empty remainder is not evaluated: literal sub-expressions assume at least one row.
        let tail = match otherwise {
            Some(o) if rest.len > 0 => rest.eval(o)?.cast(out_type, expr)?.into_array(rest.len)?,
            _ => new_null_array(&out_type.to_arrow(), rest.len),
        };
        place(tail, &rows);
        let pieces: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
        Ok(Value { array: interleave(&pieces, &picks).map_err(|e| at(e, expr))?, lit: self.literal })
    }

    pub(super) fn filter(&self, mask: &BooleanArray, expr: &Expr) -> Result<Env> {
        let apply = |m: &HashMap<String, ArrayRef>| -> Result<HashMap<String, ArrayRef>> {
            m.iter().map(|(k, v)| Ok((k.clone(), filter(v, mask).map_err(|e| at(e, expr))?))).collect::<Result<_>>()
        };
        Ok(Env {
            columns: apply(&self.columns)?,
            lengths: apply(&self.lengths)?,
            len: mask.true_count(),
            spec: self.spec.clone(),
            literal: self.literal,
        })
    }

    pub(super) fn eval_call(&self, expr: &Expr, func: Func, args: &[Expr]) -> Result<Value> {
        match (func, args) {
            (Func::Length, [arg]) => self.eval_length(expr, arg),
            (Func::Least | Func::Greatest | Func::Coalesce, [first, rest @ ..]) => {
                self.eval_variadic(expr, func, first, rest)
            }
            (Func::Clip, [x, lo, hi]) => self.eval_clip(expr, x, lo, hi),
            (Func::HashBucket, [strings, n]) => {
                let n = flumen_ir::expr::int_literal(n)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| at("hash_bucket's bucket count must be a positive integer literal", expr))?;
                let v = self.eval(strings)?;
                let array = crate::tensor_ops::hash_buckets(&v.array, n).map_err(|e| at(e, expr))?;
                Ok(Value { array, lit: v.lit })
            }
            (Func::Bucketize, [x, boundaries @ ..]) if !boundaries.is_empty() => {
                self.eval_bucketize(expr, x, boundaries)
            }
            (Func::Power | Func::Atan2, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let (at_, bt) = (a.dtype(expr)?, b.dtype(expr)?);
                let common = common_type(at_, a.lit, bt, b.lit)
                    .filter(|t| t.is_numeric())
                    .ok_or_else(|| at(format!("{} cannot combine {at_} and {bt}", func.name()), expr))?;
                let t = float_of(common);
                let lit = a.lit && b.lit;
                let (a, b) = (a.cast(t, expr)?.into_array(self.len)?, b.cast(t, expr)?.into_array(self.len)?);
                let f: fn(f64, f64) -> f64 = if func == Func::Power { f64::powf } else { f64::atan2 };
                Ok(Value { array: float_binary(&a, &b, f).map_err(|e| at(e, expr))?, lit })
            }
            (Func::TrueDiv | Func::FloorDiv | Func::FloorMod, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let lit = a.lit && b.lit;
                let (l, r) = (a.dtype(expr)?, b.dtype(expr)?);
                let common = common_type(l, a.lit, r, b.lit)
                    .filter(|t| t.is_numeric())
                    .ok_or_else(|| at(format!("{} cannot combine {l} and {r}", func.name()), expr))?;
                // Python's `/` divides integers as float64 (and NumPy's, and TensorFlow's).
                let t = match func {
                    Func::TrueDiv if !common.is_float() => DType::Float64,
                    _ => common,
                };
                let (a, b) = (a.cast(t, expr)?.into_array(self.len)?, b.cast(t, expr)?.into_array(self.len)?);
                let out = match func {
                    Func::TrueDiv => numeric::div(&a, &b),
                    _ => crate::floor_division::evaluate(&a, &b, func == Func::FloorMod),
                };
                Ok(Value { array: out.map_err(|e| at(e, expr))?, lit })
            }
            (_, [arg]) => {
                let Some(f) = float_fn(func) else {
                    return Err(at(format!("{} cannot take 1 argument", func.name()), expr));
                };
                let v = self.eval(arg)?;
                let t = v.dtype(expr)?;
                if !t.is_numeric() {
                    return Err(at(format!("{} takes a number, got {t}", func.name()), expr));
                }
                let lit = v.lit;
                let array = if func.is_unary_math() || t.is_float() {
                    let v = v.cast(float_of(t), expr)?;
                    map_float(&v.array, f)
                } else {
                    match func {
                        Func::Abs => int_abs(&v.array),
                        Func::Signum => int_signum(&v.array),
                        // Integers are already whole: floor, ceil, round and trunc keep them.
                        _ => Ok(v.array),
                    }
                };
                Ok(Value { array: array.map_err(|e| at(e, expr))?, lit })
            }
            _ => Err(at(format!("{} cannot take {} argument(s)", func.name(), args.len()), expr)),
        }
    }

    pub(super) fn eval_length(&self, expr: &Expr, arg: &Expr) -> Result<Value> {
        if let Expr::Column(name) = arg {
            if let Some(counts) = self.lengths.get(name) {
                return Ok(Value::column(counts.clone()));
            }
        }
        let v = self.eval(arg)?;
        let strings = v
            .array
            .as_string_opt::<i32>()
            .ok_or_else(|| at(format!("length takes a string or a rank-1 field, got {}", v.array.data_type()), expr))?;
        let counts: Int64Array = strings.iter().map(|s| s.map(|s| s.chars().count() as i64)).collect();
        Ok(Value { array: Arc::new(counts), lit: v.lit })
    }

    pub(super) fn eval_clip(&self, expr: &Expr, x: &Expr, lo: &Expr, hi: &Expr) -> Result<Value> {
        let values = [self.eval(x)?, self.eval(lo)?, self.eval(hi)?];
        let (mut t, mut lit) = (values[0].dtype(expr)?, values[0].lit);
        for v in &values[1..] {
            let vt = v.dtype(expr)?;
            t = common_type(t, lit, vt, v.lit)
                .filter(|c| c.is_numeric())
                .ok_or_else(|| at(format!("clip cannot combine {t} and {vt}"), expr))?;
            lit &= v.lit;
        }
        // Computed in float64 or int64 (uint64 for uint64), which hold every value of `t`
        // exactly, and cast back: the result is always one of the three inputs.
        let wide = if t.is_float() {
            DType::Float64
        } else if t == DType::UInt64 {
            DType::UInt64
        } else {
            DType::Int64
        };
        let [x, lo, hi] = values.map(|v| v.cast(wide, expr)?.into_array(self.len));
        let (x, lo, hi) = (x?, lo?, hi?);
        let nulls = NullBuffer::union(NullBuffer::union(x.nulls(), lo.nulls()).as_ref(), hi.nulls());
        let out: ArrayRef = match wide {
            DType::Float64 => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<Float64Type>().values());
                Arc::new(Float64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
            DType::UInt64 => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<UInt64Type>().values());
                Arc::new(UInt64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
            _ => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<Int64Type>().values());
                Arc::new(Int64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
        };
        Value { array: out, lit }.cast(t, expr)
    }

    pub(super) fn eval_bucketize(&self, expr: &Expr, x: &Expr, boundaries: &[Expr]) -> Result<Value> {
        let bounds = boundaries
            .iter()
            .map(|b| match b {
                Expr::Literal(Scalar::Float(v, _)) => Ok(*v),
                Expr::Literal(Scalar::Int(v, _)) => Ok(*v as f64),
                other => Err(at(format!("bucketize boundaries must be number literals, got {other}"), expr)),
            })
            .collect::<Result<Vec<f64>>>()?;
        let v = self.eval(x)?;
        let lit = v.lit;
        let x = v.cast(DType::Float64, expr)?.into_array(self.len)?;
        let x = x.as_primitive::<Float64Type>();
        // tf's upper_bound: the first boundary `b` with `x < b` (none for NaN).
        let below = |v: f64, b: f64| v.partial_cmp(&b) == Some(std::cmp::Ordering::Less);
        let buckets: Vec<i32> = x.values().iter().map(|v| bounds.partition_point(|b| !below(*v, *b)) as i32).collect();
        Ok(Value { array: Arc::new(arrow::array::Int32Array::new(buckets.into(), x.nulls().cloned())), lit })
    }

    pub(super) fn eval_variadic(&self, expr: &Expr, func: Func, first: &Expr, rest: &[Expr]) -> Result<Value> {
        let first = self.eval(first)?;
        let rest = rest.iter().map(|a| self.eval(a)).collect::<Result<Vec<_>>>()?;
        // Folded left to right with literal adoption, exactly as the type checker does.
        let (mut t, mut lit) = (first.dtype(expr)?, first.lit);
        for v in &rest {
            let vt = v.dtype(expr)?;
            t = common_type(t, lit, vt, v.lit)
                .ok_or_else(|| at(format!("{} cannot combine {t} and {vt}", func.name()), expr))?;
            lit &= v.lit;
        }
        let first = first.cast(t, expr)?.into_array(self.len)?;
        let rest = rest.into_iter().map(|v| v.cast(t, expr)?.into_array(self.len)).collect::<Result<Vec<_>>>()?;
        let out = if func == Func::Coalesce {
            // The first non-null wins: fill from the last argument backwards.
            match rest.split_last() {
                None => Ok(first),
                Some((last, init)) => std::iter::once(&first)
                    .chain(init)
                    .rev()
                    .try_fold(last.clone(), |acc, a| zip(&boolean::is_not_null(a)?, a, &acc)),
            }
        } else {
            rest.iter().try_fold(first, |acc, a| {
                let better = crate::ieee::prefer(a, &acc, func == Func::Least)?;
                // Nulls are skipped: a value replaces a null, a null never replaces a value.
                let take_a = null_as_false(&boolean::or_kleene(&better, &boolean::is_null(&acc)?)?);
                zip(&take_a, a, &acc)
            })
        };
        Ok(Value { array: out.map_err(|e| at(e, expr))?, lit })
    }
}

/// `x` clipped to `[lo, hi]` row by row, as `tf.clip_by_value` (`minimum(maximum(x, lo),
/// hi)`): `lo` where `x < lo`, `hi` where `x > hi`, else `x`, and `NaN` where any of the
/// three is (IEEE comparisons with it are false, so it is picked out first).
pub(super) fn clip_values<T: Copy + PartialOrd>(x: &[T], lo: &[T], hi: &[T]) -> Vec<T> {
    #[allow(clippy::eq_op)] // `v != v` is the NaN test, and never true for integers.
    let nan = |v: &T| v != v;
    x.iter()
        .zip(lo)
        .zip(hi)
        .map(|((x, lo), hi)| {
            if nan(lo) {
                *lo
            } else if nan(hi) {
                *hi
            } else if x < lo {
                *lo
            } else if x > hi {
                *hi
            } else {
                *x
            }
        })
        .collect()
}

/// The kernel family of a binary operator.
pub(super) enum Kernel {
    Numeric(fn(&dyn Datum, &dyn Datum) -> Result<ArrayRef, ArrowError>),
    /// IEEE 754's comparisons for floats ([`crate::ieee`]), Arrow's for the rest.
    Compare,
    Logic(fn(&BooleanArray, &BooleanArray) -> Result<BooleanArray, ArrowError>),
}

pub(super) fn binary_kernel(op: BinaryOp) -> Kernel {
    match op {
        BinaryOp::Add => Kernel::Numeric(numeric::add),
        BinaryOp::Sub => Kernel::Numeric(numeric::sub),
        BinaryOp::Mul => Kernel::Numeric(numeric::mul),
        BinaryOp::Div => Kernel::Numeric(numeric::div),
        BinaryOp::Mod => Kernel::Numeric(numeric::rem),
        BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq => {
            Kernel::Compare
        }
        // Kleene logic: `false and null` is false, `true or null` is true, as in SQL.
        BinaryOp::And => Kernel::Logic(boolean::and_kleene),
        BinaryOp::Or => Kernel::Logic(boolean::or_kleene),
    }
}

/// Both operands cast to their [`common_type`], as the type checker typed them.
pub(super) fn promote(l: Value, r: Value, op: BinaryOp, expr: &Expr) -> Result<(Value, Value)> {
    let (lt, rt) = (l.dtype(expr)?, r.dtype(expr)?);
    let common = common_type(lt, l.lit, rt, r.lit)
        .ok_or_else(|| at(format!("'{}' cannot combine {lt} and {rt}", op.symbol()), expr))?;
    Ok((l.cast(common, expr)?, r.cast(common, expr)?))
}

/// A mask with null read as false, as filters and `CASE` conditions read it.
pub(super) fn null_as_false(mask: &BooleanArray) -> BooleanArray {
    if mask.null_count() == 0 {
        mask.clone()
    } else {
        prep_null_mask_filter(mask)
    }
}

pub(super) fn as_bool<'a>(array: &'a ArrayRef, expr: &Expr) -> Result<&'a BooleanArray> {
    array.as_boolean_opt().ok_or_else(|| at(format!("expected bool, got {}", array.data_type()), expr))
}

/// The float type math on `t` computes in: float32 stays float32, everything else is float64.
pub(super) fn float_of(t: DType) -> DType {
    if t == DType::Float32 {
        DType::Float32
    } else {
        DType::Float64
    }
}

/// The float kernel of a one-argument function (all of them but `length`).
pub(crate) fn float_fn(func: Func) -> Option<fn(f64) -> f64> {
    Some(match func {
        Func::Abs => f64::abs,
        Func::Signum => |v: f64| if v == 0.0 { v } else { v.signum() },
        Func::Floor => f64::floor,
        Func::Ceil => f64::ceil,
        Func::Round => f64::round_ties_even,
        Func::Trunc => f64::trunc,
        Func::Sqrt => f64::sqrt,
        Func::Exp => f64::exp,
        Func::Ln => f64::ln,
        Func::Log2 => f64::log2,
        Func::Log10 => f64::log10,
        Func::Sin => f64::sin,
        Func::Cos => f64::cos,
        Func::Tan => f64::tan,
        Func::Tanh => f64::tanh,
        _ => return None,
    })
}

/// Applies `f` to a float column; float32 is computed in f64 and rounded back.
pub(super) fn map_float(array: &ArrayRef, f: fn(f64) -> f64) -> Result<ArrayRef, ArrowError> {
    match array.data_type() {
        DataType::Float32 => {
            Ok(Arc::new(unary::<_, _, Float32Type>(array.as_primitive::<Float32Type>(), |v| f(f64::from(v)) as f32)))
        }
        DataType::Float64 => Ok(Arc::new(unary::<_, _, Float64Type>(array.as_primitive::<Float64Type>(), f))),
        other => Err(ArrowError::InvalidArgumentError(format!("expected a float column, got {other}"))),
    }
}

pub(super) fn float_binary(a: &ArrayRef, b: &ArrayRef, f: fn(f64, f64) -> f64) -> Result<ArrayRef, ArrowError> {
    match (a.data_type(), b.data_type()) {
        (DataType::Float32, DataType::Float32) => Ok(Arc::new(binary::<_, _, _, Float32Type>(
            a.as_primitive::<Float32Type>(),
            b.as_primitive::<Float32Type>(),
            |x, y| f(f64::from(x), f64::from(y)) as f32,
        )?)),
        (DataType::Float64, DataType::Float64) => Ok(Arc::new(binary::<_, _, _, Float64Type>(
            a.as_primitive::<Float64Type>(),
            b.as_primitive::<Float64Type>(),
            f,
        )?)),
        (x, y) => Err(ArrowError::InvalidArgumentError(format!("expected float columns, got {x} and {y}"))),
    }
}

macro_rules! int_kernel {
    ($t:ty, $f:ident, $a:ident) => {
        $f::<$t>($a)
    };
}

pub(super) fn int_abs(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    fn abs<T: ArrowPrimitiveType>(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        let zero = T::Native::ZERO;
        // Checked: the most negative integer has no absolute value in its type.
        let out = try_unary::<T, _, T>(a.as_primitive::<T>(), |v| if v.is_lt(zero) { v.neg_checked() } else { Ok(v) })?;
        Ok(Arc::new(out))
    }
    downcast_integer! {
        array.data_type() => (int_kernel, abs, array),
        other => Err(ArrowError::InvalidArgumentError(format!("expected an integer column, got {other}")))
    }
}

pub(super) fn int_signum(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    fn signum<T: ArrowPrimitiveType>(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        let (zero, one) = (T::Native::ZERO, T::Native::ONE);
        let minus_one = zero.sub_wrapping(one);
        let out = unary::<T, _, T>(a.as_primitive::<T>(), |v| {
            if v.is_lt(zero) {
                minus_one
            } else if v.is_zero() {
                zero
            } else {
                one
            }
        });
        Ok(Arc::new(out))
    }
    downcast_integer! {
        array.data_type() => (int_kernel, signum, array),
        other => Err(ArrowError::InvalidArgumentError(format!("expected an integer column, got {other}")))
    }
}

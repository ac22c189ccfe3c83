//! Expressions built in Python (`flumen.col("x") * 2 + 1`), held as the same DataFusion
//! expressions the Rust builders make, so that Python pipelines get every optimizer rewrite
//! and compiled kernel.

use datafusion_expr::Expr as DfExpr;
use flumen::prelude::{cast, col as df_col, floordiv, floormod, lit as df_lit, round, truediv};
use flumen::DType;
use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// An expression over an element's fields.
#[pyclass(module = "flumen", frozen, from_py_object)]
#[derive(Clone)]
pub struct Expr(pub DfExpr);

/// A field of the element.
#[pyfunction]
pub fn col(name: &str) -> Expr {
    Expr(df_col(name))
}

/// A literal: a bool, an int (int64), a float (float64) or a str.
#[pyfunction]
pub fn lit(value: &Bound<'_, PyAny>) -> PyResult<Expr> {
    literal(value).map(Expr)
}

fn literal(value: &Bound<'_, PyAny>) -> PyResult<DfExpr> {
    if let Ok(b) = value.extract::<bool>() {
        return Ok(df_lit(b));
    }
    if let Ok(i) = value.extract::<i64>() {
        return Ok(df_lit(i));
    }
    if let Ok(f) = value.extract::<f64>() {
        return Ok(df_lit(f));
    }
    if let Ok(s) = value.extract::<String>() {
        return Ok(df_lit(s));
    }
    Err(PyTypeError::new_err(format!("cannot make a flumen literal of {}", value.get_type().name()?)))
}

/// `value` as an expression: an `Expr` as it is, anything else as a literal.
pub fn expr_of(value: &Bound<'_, PyAny>) -> PyResult<DfExpr> {
    match value.cast::<Expr>() {
        Ok(e) => Ok(e.get().0.clone()),
        Err(_) => literal(value),
    }
}

#[pymethods]
impl Expr {
    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(self.0.clone() + expr_of(other)?))
    }
    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(expr_of(other)? + self.0.clone()))
    }
    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(self.0.clone() - expr_of(other)?))
    }
    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(expr_of(other)? - self.0.clone()))
    }
    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(self.0.clone() * expr_of(other)?))
    }
    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(expr_of(other)? * self.0.clone()))
    }
    // Python's meanings, as TensorFlow's operators have them: `/` gives a float (integers
    // divide as float64), `//` and `%` round toward negative infinity (the Rust `Expr`
    // operators truncate, as SQL does).
    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(truediv(self.0.clone(), expr_of(other)?)))
    }
    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(truediv(expr_of(other)?, self.0.clone())))
    }
    fn __floordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(floordiv(self.0.clone(), expr_of(other)?)))
    }
    fn __rfloordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(floordiv(expr_of(other)?, self.0.clone())))
    }
    fn __mod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(floormod(self.0.clone(), expr_of(other)?)))
    }
    fn __rmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(floormod(expr_of(other)?, self.0.clone())))
    }
    /// `round(e)`: half to even, as Python's `round` and `tf.round`.
    #[pyo3(signature = (ndigits = None))]
    fn __round__(&self, ndigits: Option<i64>) -> PyResult<Expr> {
        match ndigits {
            None | Some(0) => Ok(Expr(round(self.0.clone()))),
            Some(n) => Err(PyValueError::new_err(format!("round to {n} digits is not supported: round(e) only"))),
        }
    }
    fn __neg__(&self) -> Expr {
        Expr(-self.0.clone())
    }
    fn __and__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(self.0.clone().and(expr_of(other)?)))
    }
    fn __or__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expr> {
        Ok(Expr(self.0.clone().or(expr_of(other)?)))
    }
    fn __invert__(&self) -> Expr {
        Expr(!self.0.clone())
    }
    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Expr> {
        let (a, b) = (self.0.clone(), expr_of(other)?);
        Ok(Expr(match op {
            CompareOp::Lt => a.lt(b),
            CompareOp::Le => a.lt_eq(b),
            CompareOp::Eq => a.eq(b),
            CompareOp::Ne => a.not_eq(b),
            CompareOp::Gt => a.gt(b),
            CompareOp::Ge => a.gt_eq(b),
        }))
    }
    fn __bool__(&self) -> PyResult<bool> {
        Err(PyTypeError::new_err("a flumen expression has no truth value: combine them with & | ~, not and/or/not"))
    }

    /// The expression converted to `dtype` (`"float32"`, `"int64"`, `"string"`,
    /// `"bfloat16"`, ...).
    pub fn cast(&self, dtype: &str) -> PyResult<Expr> {
        let dtype = DType::from_name(dtype).ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
        if dtype == DType::BFloat16 {
            // Arrow has no bfloat16 type for a cast to name.
            return Ok(Expr(flumen::prelude::cast_bfloat16(self.0.clone())));
        }
        Ok(Expr(cast(self.0.clone(), dtype.to_arrow())))
    }

    fn __repr__(&self) -> String {
        format!("Expr({})", self.0)
    }
}

/// A conditional: `when(c1, v1).when(c2, v2).otherwise(v)` is `v1` where `c1` holds,
/// else `v2` where `c2` holds, else `v` (SQL's `CASE WHEN`).
#[pyfunction]
pub fn when(condition: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<When> {
    Ok(When { cases: vec![(expr_of(condition)?, expr_of(value)?)] })
}

/// A conditional being built (`flumen.when`): more cases with `when`, then `otherwise`.
#[pyclass(module = "flumen", frozen)]
pub struct When {
    cases: Vec<(DfExpr, DfExpr)>,
}

#[pymethods]
impl When {
    /// Adds a case, tried after the ones before it.
    fn when(&self, condition: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<When> {
        let mut cases = self.cases.clone();
        cases.push((expr_of(condition)?, expr_of(value)?));
        Ok(When { cases })
    }

    /// The expression, `value` where no case holds.
    fn otherwise(&self, value: &Bound<'_, PyAny>) -> PyResult<Expr> {
        let mut cases = self.cases.iter();
        let (c, v) = cases.next().expect("a first case");
        let mut builder = flumen::prelude::when(c.clone(), v.clone());
        for (c, v) in cases {
            builder = builder.when(c.clone(), v.clone());
        }
        builder.otherwise(expr_of(value)?).map(Expr).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

/// A flumen function of `args` by name (`sqrt`, `clip`, `length`, ...). The tensor
/// functions take their parameters as Python values after the expression:
/// `bucketize(e, boundaries)`, `one_hot(e, depth)`, `hash_bucket(e, num_buckets)`,
/// `normalize(e, mean, std)`, `reduce_sum(e, axes)` (and `_mean`, `_max`, `_min`), and the
/// image functions with their sizes, seeds and ranges (`random_crop(e, h, w, seed)`, ...).
#[pyfunction]
pub fn func(name: &str, args: Vec<Bound<'_, PyAny>>) -> PyResult<Expr> {
    use flumen::prelude as f;
    if let Some(e) = parameterized(name, &args)? {
        return Ok(Expr(e));
    }
    let args: Vec<DfExpr> = args.iter().map(expr_of).collect::<PyResult<_>>()?;
    let one = |g: fn(DfExpr) -> DfExpr| -> PyResult<DfExpr> {
        match <[DfExpr; 1]>::try_from(args.clone()) {
            Ok([a]) => Ok(g(a)),
            Err(_) => Err(PyValueError::new_err(format!("{name} takes one argument"))),
        }
    };
    let two = |g: fn(DfExpr, DfExpr) -> DfExpr| -> PyResult<DfExpr> {
        match <[DfExpr; 2]>::try_from(args.clone()) {
            Ok([a, b]) => Ok(g(a, b)),
            Err(_) => Err(PyValueError::new_err(format!("{name} takes two arguments"))),
        }
    };
    Ok(Expr(match name {
        "abs" => one(f::abs)?,
        "sqrt" => one(f::sqrt)?,
        "exp" => one(f::exp)?,
        "ln" | "log" => one(f::ln)?,
        "log2" => one(f::log2)?,
        "log10" => one(f::log10)?,
        "floor" => one(f::floor)?,
        "ceil" => one(f::ceil)?,
        "round" => one(f::round)?,
        "trunc" => one(f::trunc)?,
        "sin" => one(f::sin)?,
        "cos" => one(f::cos)?,
        "tan" => one(f::tan)?,
        "tanh" => one(f::tanh)?,
        "sign" | "signum" => one(f::signum)?,
        "length" => one(f::length)?,
        "reduce_sum" => one(f::reduce_sum)?,
        "reduce_mean" => one(f::reduce_mean)?,
        "reduce_max" => one(f::reduce_max)?,
        "reduce_min" => one(f::reduce_min)?,
        "power" => two(f::power)?,
        "atan2" => two(f::atan2)?,
        "truediv" => two(f::truediv)?,
        "floordiv" => two(f::floordiv)?,
        "floormod" => two(f::floormod)?,
        "clip" => match <[DfExpr; 3]>::try_from(args) {
            Ok([e, lo, hi]) => f::clip(e, lo, hi),
            Err(_) => return Err(PyValueError::new_err("clip takes three arguments")),
        },
        "least" => f::least(args),
        "greatest" => f::greatest(args),
        "coalesce" => f::coalesce(args),
        other => return Err(PyValueError::new_err(format!("flumen has no function {other:?}"))),
    }))
}

/// The functions whose parameters are not expressions, `None` for the others.
fn parameterized(name: &str, args: &[Bound<'_, PyAny>]) -> PyResult<Option<DfExpr>> {
    use flumen::prelude as f;
    let arity = |n: usize| match args.len() == n {
        true => Ok(()),
        false => Err(PyValueError::new_err(format!("{name} takes {n} arguments"))),
    };
    let reduce = |g: fn(DfExpr, &[i64]) -> DfExpr| -> PyResult<DfExpr> {
        arity(2)?;
        Ok(g(expr_of(&args[0])?, &args[1].extract::<Vec<i64>>()?))
    };
    Ok(Some(match name {
        "bucketize" => {
            arity(2)?;
            f::bucketize(expr_of(&args[0])?, &args[1].extract::<Vec<f64>>()?)
        }
        "one_hot" => {
            arity(2)?;
            f::one_hot(expr_of(&args[0])?, args[1].extract()?)
        }
        "hash_bucket" => {
            arity(2)?;
            f::hash_bucket(expr_of(&args[0])?, args[1].extract()?)
        }
        "normalize" => {
            arity(3)?;
            f::normalize(expr_of(&args[0])?, &args[1].extract::<Vec<f64>>()?, &args[2].extract::<Vec<f64>>()?)
        }
        "decode_jpeg" | "decode_png" | "decode_image" => {
            arity(2)?;
            let g = match name {
                "decode_jpeg" => f::decode_jpeg,
                "decode_png" => f::decode_png,
                _ => f::decode_image,
            };
            g(expr_of(&args[0])?, args[1].extract()?)
        }
        "read_file" => {
            arity(1)?;
            f::read_file(expr_of(&args[0])?)
        }
        "resize" => {
            arity(4)?;
            f::resize(expr_of(&args[0])?, args[1].extract()?, args[2].extract()?, &args[3].extract::<String>()?)
        }
        "crop" => {
            arity(5)?;
            let [t, l, h, w] = [1, 2, 3, 4].map(|i| args[i].extract::<i64>());
            f::crop(expr_of(&args[0])?, t?, l?, h?, w?)
        }
        "central_crop" => {
            arity(2)?;
            f::central_crop(expr_of(&args[0])?, args[1].extract()?)
        }
        "random_crop" => {
            arity(4)?;
            f::random_crop(expr_of(&args[0])?, args[1].extract()?, args[2].extract()?, args[3].extract()?)
        }
        "random_resized_crop" => {
            arity(6)?;
            let (h, w, seed) = (args[1].extract()?, args[2].extract()?, args[3].extract()?);
            f::random_resized_crop(expr_of(&args[0])?, h, w, seed, args[4].extract()?, args[5].extract()?)
        }
        "flip_left_right" | "flip_up_down" | "hwc_to_chw" => {
            arity(1)?;
            let g = match name {
                "flip_left_right" => f::flip_left_right,
                "flip_up_down" => f::flip_up_down,
                _ => f::hwc_to_chw,
            };
            g(expr_of(&args[0])?)
        }
        "random_flip_left_right" | "random_flip_up_down" => {
            arity(2)?;
            let g = if name == "random_flip_left_right" { f::random_flip_left_right } else { f::random_flip_up_down };
            g(expr_of(&args[0])?, args[1].extract()?)
        }
        "convert_image_dtype" => {
            arity(2)?;
            let dtype: String = args[1].extract()?;
            f::convert_image_dtype_to(expr_of(&args[0])?, &dtype)
        }
        "random_brightness" => {
            arity(3)?;
            f::random_brightness(expr_of(&args[0])?, args[1].extract()?, args[2].extract()?)
        }
        "random_contrast" | "random_saturation" => {
            arity(4)?;
            let g = if name == "random_contrast" { f::random_contrast } else { f::random_saturation };
            g(expr_of(&args[0])?, args[1].extract()?, args[2].extract()?, args[3].extract()?)
        }
        "reduce_sum" | "reduce_mean" | "reduce_max" | "reduce_min" if args.len() == 2 => match name {
            "reduce_sum" => reduce(f::reduce_sum_axes)?,
            "reduce_mean" => reduce(f::reduce_mean_axes)?,
            "reduce_max" => reduce(f::reduce_max_axes)?,
            _ => reduce(f::reduce_min_axes)?,
        },
        _ => return Ok(None),
    }))
}

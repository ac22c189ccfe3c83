//! Running a program's instructions over one tile of rows.
//!
//! Each instruction is one pass over the tile with its operands' types known, so the match
//! on the operation happens once per tile and instruction, never per row. An operation that
//! can fail (integer overflow, division by zero, a float out of an integer's range) reports
//! it by returning `false`: the kernel then gives the chunk back to the Arrow evaluation,
//! which names the row and the expression.

use std::ops::Neg;

use flumen_ir::{BinaryOp, Func};

use super::lanes::{checked2, overflowing2, rem_by, scalar2, simd1, simd2, FloatLanes, Src};
use super::program::{Arg, Instr, Konst, Op, Ty};
use crate::eval::float_fn;

/// A register: one tile of values of one type.
#[derive(Debug)]
pub enum Buf {
    /// float64 values.
    F64(Vec<f64>),
    /// float32 values.
    F32(Vec<f32>),
    /// int64 values.
    I64(Vec<i64>),
    /// int32 values.
    I32(Vec<i32>),
    /// bools, one byte each.
    Bool(Vec<u8>),
}

impl Buf {
    /// A register of `len` values of type `ty`.
    pub fn new(ty: Ty, len: usize) -> Buf {
        let mut buf = Buf::with_capacity(ty, len);
        buf.grow_to(len);
        buf
    }

    /// An empty register of type `ty` with room for `len` values, grown with
    /// [`grow_to`](Self::grow_to).
    pub fn with_capacity(ty: Ty, len: usize) -> Buf {
        match ty {
            Ty::F64 => Buf::F64(Vec::with_capacity(len)),
            Ty::F32 => Buf::F32(Vec::with_capacity(len)),
            Ty::I64 => Buf::I64(Vec::with_capacity(len)),
            Ty::I32 => Buf::I32(Vec::with_capacity(len)),
            Ty::Bool => Buf::Bool(Vec::with_capacity(len)),
        }
    }

    /// A pointer to value `at` of the register's allocation, which must have room for `len`
    /// values from there, for native code to write them before [`set_len`](Self::set_len)
    /// covers them.
    pub fn spare_ptr(&mut self, at: usize, len: usize) -> *mut u8 {
        fn ptr<T>(v: &mut Vec<T>, at: usize, len: usize) -> *mut u8 {
            assert!(at + len <= v.capacity(), "values {at}..{} are past the register's allocation", at + len);
            v.as_mut_ptr().wrapping_add(at).cast()
        }
        match self {
            Buf::F64(v) => ptr(v, at, len),
            Buf::F32(v) => ptr(v, at, len),
            Buf::I64(v) => ptr(v, at, len),
            Buf::I32(v) => ptr(v, at, len),
            Buf::Bool(v) => ptr(v, at, len),
        }
    }

    /// Declares the first `len` values written.
    ///
    /// # Safety
    /// `len` is within the allocation, and every value up to it has been written.
    pub unsafe fn set_len(&mut self, len: usize) {
        // SAFETY: the caller's contract is `Vec::set_len`'s.
        unsafe {
            match self {
                Buf::F64(v) => v.set_len(len),
                Buf::F32(v) => v.set_len(len),
                Buf::I64(v) => v.set_len(len),
                Buf::I32(v) => v.set_len(len),
                Buf::Bool(v) => v.set_len(len),
            }
        }
    }

    /// Empties the register, keeping its allocation.
    pub fn clear(&mut self) {
        match self {
            Buf::F64(v) => v.clear(),
            Buf::F32(v) => v.clear(),
            Buf::I64(v) => v.clear(),
            Buf::I32(v) => v.clear(),
            Buf::Bool(v) => v.clear(),
        }
    }

    /// Extends the register to `len` values (zeros until written).
    pub fn grow_to(&mut self, len: usize) {
        match self {
            Buf::F64(v) => v.resize(len, 0.0),
            Buf::F32(v) => v.resize(len, 0.0),
            Buf::I64(v) => v.resize(len, 0),
            Buf::I32(v) => v.resize(len, 0),
            Buf::Bool(v) => v.resize(len, 0),
        }
    }
}

/// An input column's values for the whole chunk (bools unpacked to bytes).
#[derive(Debug)]
pub enum Input<'a> {
    /// float64 values.
    F64(&'a [f64]),
    /// float32 values.
    F32(&'a [f32]),
    /// int64 values.
    I64(&'a [i64]),
    /// int32 values.
    I32(&'a [i32]),
    /// bools, one byte each.
    Bool(Vec<u8>),
}

impl Input<'_> {
    /// A pointer to the values `start..start + len` (which must exist), for native code.
    pub fn ptr(&self, start: usize, len: usize) -> *const u8 {
        match self {
            Input::F64(s) => s[start..start + len].as_ptr().cast(),
            Input::F32(s) => s[start..start + len].as_ptr().cast(),
            Input::I64(s) => s[start..start + len].as_ptr().cast(),
            Input::I32(s) => s[start..start + len].as_ptr().cast(),
            Input::Bool(s) => s[start..start + len].as_ptr(),
        }
    }
}

/// A value type of registers, inputs and constants.
pub trait Elem: Copy + Default + 'static {
    /// The input's values, when it has this type.
    fn input<'a>(input: &'a Input<'_>) -> &'a [Self];
    /// The register's values, when it has this type.
    fn buf(buf: &Buf) -> &[Self];
    /// The register's values, mutably.
    fn buf_mut(buf: &mut Buf) -> &mut [Self];
    /// The constant, when it has this type.
    fn konst(k: Konst) -> Self;
}

macro_rules! elem {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            fn input<'a>(input: &'a Input<'_>) -> &'a [Self] {
                match input {
                    Input::$v(s) => s,
                    other => unreachable!("a {} input read as {other:?}", stringify!($t)),
                }
            }
            fn buf(buf: &Buf) -> &[Self] {
                match buf {
                    Buf::$v(s) => s,
                    other => unreachable!("a {} register read as {other:?}", stringify!($t)),
                }
            }
            fn buf_mut(buf: &mut Buf) -> &mut [Self] {
                match buf {
                    Buf::$v(s) => s,
                    other => unreachable!("a {} register written as {other:?}", stringify!($t)),
                }
            }
            fn konst(k: Konst) -> Self {
                match k {
                    Konst::$v(v) => v,
                    other => unreachable!("a {} constant read as {other:?}", stringify!($t)),
                }
            }
        }
    };
}

elem!(f64, F64);
elem!(f32, F32);
elem!(i64, I64);
elem!(i32, I32);
elem!(u8, Bool);

/// Where one tile's operands are: the chunk's inputs from row `start`, the registers.
pub struct Tile<'a> {
    /// The kernel's input columns.
    pub inputs: &'a [Input<'a>],
    /// Per input, its values for this tile when they are made per tile (a repeated scalar).
    pub expanded: &'a [Option<Buf>],
    /// The registers.
    pub regs: &'a [Buf],
    /// The register of each value number.
    pub reg_of: &'a [usize],
    /// The tile's first row in the chunk.
    pub start: usize,
    /// Its rows.
    pub len: usize,
}

impl<'a> Tile<'a> {
    fn src<T: Elem>(&self, arg: Arg) -> Src<'a, T> {
        match arg {
            Arg::Val(v) => Src::Slice(&T::buf(&self.regs[self.reg_of[v]])[..self.len]),
            Arg::Col(c) => match &self.expanded[c] {
                Some(tile) => Src::Slice(&T::buf(tile)[..self.len]),
                None => Src::Slice(&T::input(&self.inputs[c])[self.start..self.start + self.len]),
            },
            Arg::Const(k) => Src::Splat(T::konst(k)),
        }
    }

    /// The slice of a one-argument operation's operand (never a constant: see
    /// `Builder::operand`).
    fn slice<T: Elem>(&self, arg: Arg) -> &'a [T] {
        match self.src(arg) {
            Src::Slice(s) => s,
            Src::Splat(_) => unreachable!("one-argument operations read registers or columns"),
        }
    }
}

/// The `len` values of `out` from `at`.
fn window<T: Elem>(out: &mut Buf, at: usize, len: usize) -> &mut [T] {
    &mut T::buf_mut(out)[at..at + len]
}

/// Runs `instr` over the tile into `out` from value `at` (its register from 0, or the
/// output column from the values earlier tiles wrote, which over a selection is not the
/// tile's first row); `false` when a row cannot be computed here.
pub fn exec(instr: &Instr, tile: &Tile, out: &mut Buf, at: usize) -> bool {
    let len = tile.len;
    let a = instr.args[0];
    let b = instr.args.get(1).copied();
    match (instr.op, instr.ty) {
        (Op::Splat, _) => splat(a, out, at, len),
        (Op::Arith(op), Ty::F64) => {
            float_arith::<f64>(op, tile.src(a), tile.src(b.expect("two")), window::<f64>(out, at, len))
        }
        (Op::Arith(op), Ty::F32) => {
            float_arith::<f32>(op, tile.src(a), tile.src(b.expect("two")), window::<f32>(out, at, len))
        }
        (Op::Arith(op), Ty::I64) => int_arith!(i64, op, tile, a, b, out, at),
        (Op::Arith(op), Ty::I32) => int_arith!(i32, op, tile, a, b, out, at),
        (Op::Cmp(op, ty), _) => {
            let (b, out) = (b.expect("two"), window::<u8>(out, at, len));
            match ty {
                Ty::F64 => compare(op, tile.src::<f64>(a), tile.src(b), out),
                Ty::F32 => compare(op, tile.src::<f32>(a), tile.src(b), out),
                Ty::I64 => compare(op, tile.src::<i64>(a), tile.src(b), out),
                Ty::I32 => compare(op, tile.src::<i32>(a), tile.src(b), out),
                Ty::Bool => compare(op, tile.src::<u8>(a), tile.src(b), out),
            }
            true
        }
        (Op::And, _) => {
            scalar2(tile.src::<u8>(a), tile.src::<u8>(b.expect("two")), window::<u8>(out, at, len), |x, y| x & y);
            true
        }
        (Op::Or, _) => {
            scalar2(tile.src::<u8>(a), tile.src::<u8>(b.expect("two")), window::<u8>(out, at, len), |x, y| x | y);
            true
        }
        (Op::Not, _) => {
            for (o, x) in window::<u8>(out, at, len).iter_mut().zip(tile.slice::<u8>(a)) {
                *o = x ^ 1;
            }
            true
        }
        (Op::Neg, Ty::F64) => float1::<f64>(tile.slice(a), window::<f64>(out, at, len), Neg::neg, Neg::neg),
        (Op::Neg, Ty::F32) => float1::<f32>(tile.slice(a), window::<f32>(out, at, len), Neg::neg, Neg::neg),
        (Op::Neg, Ty::I64) => checked1::<i64, i64>(tile.slice(a), window::<i64>(out, at, len), i64::checked_neg),
        (Op::Neg, Ty::I32) => checked1::<i32, i32>(tile.slice(a), window::<i32>(out, at, len), i32::checked_neg),
        (Op::IntAbs, Ty::I64) => checked1::<i64, i64>(tile.slice(a), window::<i64>(out, at, len), i64::checked_abs),
        (Op::IntAbs, Ty::I32) => checked1::<i32, i32>(tile.slice(a), window::<i32>(out, at, len), i32::checked_abs),
        (Op::IntSignum, Ty::I64) => {
            checked1::<i64, i64>(tile.slice(a), window::<i64>(out, at, len), |v| Some(v.signum()))
        }
        (Op::IntSignum, Ty::I32) => {
            checked1::<i32, i32>(tile.slice(a), window::<i32>(out, at, len), |v| Some(v.signum()))
        }
        (Op::Math(func), Ty::F64) => math::<f64>(func, tile.slice(a), window::<f64>(out, at, len), |f, v| f(v)),
        (Op::Math(func), Ty::F32) => {
            // As the Arrow evaluation does: float32 math is computed in float64.
            math::<f32>(func, tile.slice(a), window::<f32>(out, at, len), |f, v| f(f64::from(v)) as f32)
        }
        (Op::Cast(from), to) => cast(from, to, tile, a, out, at),
        (op, ty) => unreachable!("the compiler emits no {op:?} of {ty:?}"),
    }
}

fn splat(a: Arg, out: &mut Buf, at: usize, len: usize) -> bool {
    let Arg::Const(k) = a else { unreachable!("splat takes a constant") };
    match k {
        Konst::F64(v) => window::<f64>(out, at, len).fill(v),
        Konst::F32(v) => window::<f32>(out, at, len).fill(v),
        Konst::I64(v) => window::<i64>(out, at, len).fill(v),
        Konst::I32(v) => window::<i32>(out, at, len).fill(v),
        Konst::Bool(v) => window::<u8>(out, at, len).fill(v),
    }
    true
}

fn float_arith<T: FloatLanes>(op: BinaryOp, a: Src<T>, b: Src<T>, out: &mut [T]) -> bool {
    match op {
        BinaryOp::Add => simd2(a, b, out, |x, y| x + y, |x, y| x + y),
        BinaryOp::Sub => simd2(a, b, out, |x, y| x - y, |x, y| x - y),
        BinaryOp::Mul => simd2(a, b, out, |x, y| x * y, |x, y| x * y),
        BinaryOp::Div => simd2(a, b, out, |x, y| x / y, |x, y| x / y),
        BinaryOp::Mod => match (a, b) {
            (Src::Slice(a), Src::Splat(b)) => rem_by(a, b, out),
            // fmod has no exact SIMD form in general; Arrow's kernel is this same `%`.
            _ => scalar2(a, b, out, |x, y| x % y),
        },
        other => unreachable!("{other:?} is not arithmetic"),
    }
    true
}

macro_rules! int_arith {
    ($t:ty, $op:expr, $tile:expr, $a:expr, $b:expr, $out:expr, $at:expr) => {{
        let (x, y) = ($tile.src::<$t>($a), $tile.src::<$t>($b.expect("two")));
        let out = window::<$t>($out, $at, $tile.len);
        match $op {
            // Overflow read from the signs (the result's differs from both operands', or for
            // `-` from the first's where the operands' differ), which vectorizes where the
            // CPU's overflow flag does not.
            BinaryOp::Add => overflowing2(x, y, out, |a: $t, b: $t| {
                let r = a.wrapping_add(b);
                (r, (a ^ r) & (b ^ r) < 0)
            }),
            BinaryOp::Sub => overflowing2(x, y, out, |a: $t, b: $t| {
                let r = a.wrapping_sub(b);
                (r, (a ^ b) & (a ^ r) < 0)
            }),
            BinaryOp::Mul => overflowing2(x, y, out, <$t>::overflowing_mul),
            BinaryOp::Div => checked2(x, y, out, <$t>::checked_div),
            BinaryOp::Mod => checked2(x, y, out, <$t>::checked_rem),
            other => unreachable!("{other:?} is not arithmetic"),
        }
    }};
}
use int_arith;

/// `a op b` row by row. Floats compare as IEEE 754 says (Rust's `PartialOrd`, as NumPy and
/// TensorFlow): `NaN` is unordered, so only `!=` holds for it, and `-0.0 == 0.0`.
fn compare<T: Copy + PartialOrd>(op: BinaryOp, a: Src<T>, b: Src<T>, out: &mut [u8]) {
    match op {
        BinaryOp::Eq => scalar2(a, b, out, |x, y| u8::from(x == y)),
        BinaryOp::NotEq => scalar2(a, b, out, |x, y| u8::from(x != y)),
        BinaryOp::Lt => scalar2(a, b, out, |x, y| u8::from(x < y)),
        BinaryOp::LtEq => scalar2(a, b, out, |x, y| u8::from(x <= y)),
        BinaryOp::Gt => scalar2(a, b, out, |x, y| u8::from(x > y)),
        BinaryOp::GtEq => scalar2(a, b, out, |x, y| u8::from(x >= y)),
        other => unreachable!("{other:?} is not a comparison"),
    }
}

fn float1<T: FloatLanes>(a: &[T], out: &mut [T], f: impl Fn(T::V) -> T::V, s: impl Fn(T) -> T) -> bool {
    simd1(a, &mut out[..a.len()], f, s);
    true
}

fn math<T: FloatLanes>(func: Func, a: &[T], out: &mut [T], scalar: impl Fn(fn(f64) -> f64, T) -> T) -> bool {
    let out = &mut out[..a.len()];
    match func {
        Func::Sqrt => simd1(a, out, T::sqrt, |v| scalar(f64::sqrt, v)),
        Func::Floor => simd1(a, out, T::floor, |v| scalar(f64::floor, v)),
        Func::Ceil => simd1(a, out, T::ceil, |v| scalar(f64::ceil, v)),
        Func::Trunc => simd1(a, out, T::trunc, |v| scalar(f64::trunc, v)),
        Func::Abs => simd1(a, out, T::abs, |v| scalar(f64::abs, v)),
        // The rest have no exact SIMD form: the same function the Arrow evaluation calls.
        other => {
            let f = float_fn(other).expect("the compiler emits only one-argument float functions");
            for (o, x) in out.iter_mut().zip(a) {
                *o = scalar(f, *x);
            }
        }
    }
    true
}

/// Float to integer as Arrow's strict cast: truncated, failing outside the type's range or
/// on NaN.
fn float_to_int<I: TryFrom<i64>>(v: f64, lo: f64, hi: f64) -> Option<I> {
    (v >= lo && v < hi).then(|| I::try_from(v as i64).ok()).flatten()
}

fn cast(from: Ty, to: Ty, tile: &Tile, a: Arg, out: &mut Buf, at: usize) -> bool {
    fn each<A: Elem, O: Elem>(tile: &Tile, a: Arg, out: (&mut Buf, usize), f: impl Fn(A) -> Option<O>) -> bool {
        checked1(tile.slice::<A>(a), window::<O>(out.0, out.1, tile.len), f)
    }
    const I64_LO: f64 = -9_223_372_036_854_775_808.0;
    const I64_HI: f64 = 9_223_372_036_854_775_808.0;
    const I32_LO: f64 = -2_147_483_649.0;
    const I32_HI: f64 = 2_147_483_648.0;
    match (from, to) {
        (Ty::I64, Ty::F64) => each(tile, a, (out, at), |v: i64| Some(v as f64)),
        (Ty::I32, Ty::F64) => each(tile, a, (out, at), |v: i32| Some(f64::from(v))),
        (Ty::I64, Ty::F32) => each(tile, a, (out, at), |v: i64| Some(v as f32)),
        (Ty::I32, Ty::F32) => each(tile, a, (out, at), |v: i32| Some(v as f32)),
        (Ty::F32, Ty::F64) => each(tile, a, (out, at), |v: f32| Some(f64::from(v))),
        (Ty::F64, Ty::F32) => each(tile, a, (out, at), |v: f64| Some(v as f32)),
        (Ty::I32, Ty::I64) => each(tile, a, (out, at), |v: i32| Some(i64::from(v))),
        (Ty::I64, Ty::I32) => each(tile, a, (out, at), |v: i64| i32::try_from(v).ok()),
        (Ty::F64, Ty::I64) => each(tile, a, (out, at), |v: f64| float_to_int::<i64>(v, I64_LO, I64_HI)),
        (Ty::F32, Ty::I64) => each(tile, a, (out, at), |v: f32| float_to_int::<i64>(f64::from(v), I64_LO, I64_HI)),
        (Ty::F64, Ty::I32) => each(tile, a, (out, at), |v: f64| float_to_int::<i32>(v, I32_LO, I32_HI)),
        (Ty::F32, Ty::I32) => each(tile, a, (out, at), |v: f32| float_to_int::<i32>(f64::from(v), I32_LO, I32_HI)),
        (Ty::Bool, Ty::F64) => each(tile, a, (out, at), |v: u8| Some(f64::from(v))),
        (Ty::Bool, Ty::F32) => each(tile, a, (out, at), |v: u8| Some(f32::from(v))),
        (Ty::Bool, Ty::I64) => each(tile, a, (out, at), |v: u8| Some(i64::from(v))),
        (Ty::Bool, Ty::I32) => each(tile, a, (out, at), |v: u8| Some(i32::from(v))),
        (Ty::F64, Ty::Bool) => each(tile, a, (out, at), |v: f64| Some(u8::from(v != 0.0))),
        (Ty::F32, Ty::Bool) => each(tile, a, (out, at), |v: f32| Some(u8::from(v != 0.0))),
        (Ty::I64, Ty::Bool) => each(tile, a, (out, at), |v: i64| Some(u8::from(v != 0))),
        (Ty::I32, Ty::Bool) => each(tile, a, (out, at), |v: i32| Some(u8::from(v != 0))),
        (from, to) => unreachable!("the compiler emits no cast from {from:?} to {to:?}"),
    }
}

/// `out[i] = f(a[i])`; `false` when any row's `f` is `None`.
fn checked1<A: Copy, O: Copy + Default>(a: &[A], out: &mut [O], f: impl Fn(A) -> Option<O>) -> bool {
    let mut failed = false;
    for (o, x) in out.iter_mut().zip(a) {
        *o = f(*x).unwrap_or_else(|| {
            failed = true;
            O::default()
        });
    }
    !failed
}

//! The hot loops of fused kernels: one operation over one tile of values, in `wide` SIMD
//! types with a scalar tail.
//!
//! An operand is either a slice (an input column's values or a register) or one value
//! splat over the tile, so a literal never becomes an array. Only operations whose SIMD
//! result is bit-for-bit the scalar one run in SIMD (IEEE add, sub, mul, div, sqrt, floor,
//! ceil, trunc, abs, neg); the others run as scalar loops calling the same functions the
//! Arrow evaluation calls, which is what keeps a kernel's values equal to it.

use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

use wide::{f32x8, f64x4};

/// An operand of a tile operation.
#[derive(Clone, Copy)]
pub enum Src<'a, T> {
    /// One value per row of the tile.
    Slice(&'a [T]),
    /// The same value for every row.
    Splat(T),
}

impl<T: Copy> Src<'_, T> {
    /// The operand's value at row `i`.
    #[inline(always)]
    pub fn at(&self, i: usize) -> T {
        match self {
            Src::Slice(s) => s[i],
            Src::Splat(v) => *v,
        }
    }
}

/// A float type with its SIMD vector.
pub trait FloatLanes:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Rem<Output = Self>
    + Neg<Output = Self>
{
    /// The vector of this type's lanes.
    type V: Copy
        + Add<Output = Self::V>
        + Sub<Output = Self::V>
        + Mul<Output = Self::V>
        + Div<Output = Self::V>
        + Neg<Output = Self::V>;
    /// How many lanes a vector has.
    const N: usize;
    /// Loads `s` (exactly `N` values).
    fn load(s: &[Self]) -> Self::V;
    /// `v` in every lane.
    fn splat(v: Self) -> Self::V;
    /// Stores `v` into `out` (exactly `N` values).
    fn store(v: Self::V, out: &mut [Self]);
    /// Lane-wise square root.
    fn sqrt(v: Self::V) -> Self::V;
    /// Lane-wise floor.
    fn floor(v: Self::V) -> Self::V;
    /// Lane-wise ceiling.
    fn ceil(v: Self::V) -> Self::V;
    /// Lane-wise truncation toward zero.
    fn trunc(v: Self::V) -> Self::V;
    /// Lane-wise absolute value.
    fn abs(v: Self::V) -> Self::V;
    /// `x % b` (fmod) for a whole divisor `1 <= |b| <` [`FloatLanes::WHOLE`]; `None` unless
    /// every lane of `x` is whole and under that bound, where it is exact.
    fn rem_whole(x: Self::V, b: Self) -> Option<Self::V>;
    /// The bound under which whole numbers keep the remainder exact: the truncated
    /// quotient is the exact one, and quotient times divisor an exactly representable
    /// integer.
    const WHOLE: Self;
    /// One.
    const ONE: Self;
    /// The value truncated toward zero.
    fn trunc_scalar(self) -> Self;
    /// The absolute value.
    fn abs_scalar(self) -> Self;
}

macro_rules! float_lanes {
    ($t:ty, $v:ty, $n:expr, $whole:expr) => {
        impl FloatLanes for $t {
            type V = $v;
            const N: usize = $n;
            const WHOLE: $t = $whole;
            const ONE: $t = 1.0;
            #[inline(always)]
            fn trunc_scalar(self) -> $t {
                self.trunc()
            }
            #[inline(always)]
            fn abs_scalar(self) -> $t {
                self.abs()
            }
            #[inline(always)]
            fn load(s: &[Self]) -> $v {
                <$v>::new(s.try_into().expect("a full vector"))
            }
            #[inline(always)]
            fn splat(v: Self) -> $v {
                <$v>::splat(v)
            }
            #[inline(always)]
            fn store(v: $v, out: &mut [Self]) {
                out.copy_from_slice(&v.to_array());
            }
            #[inline(always)]
            fn sqrt(v: $v) -> $v {
                v.sqrt()
            }
            #[inline(always)]
            fn floor(v: $v) -> $v {
                v.floor()
            }
            #[inline(always)]
            fn ceil(v: $v) -> $v {
                v.ceil()
            }
            #[inline(always)]
            fn trunc(v: $v) -> $v {
                v.trunc()
            }
            #[inline(always)]
            fn abs(v: $v) -> $v {
                v.abs()
            }
            #[inline(always)]
            fn rem_whole(x: $v, b: $t) -> Option<$v> {
                let ax = x.abs();
                if !(ax.simd_lt(<$v>::splat($whole)) & ax.simd_eq(ax.trunc())).all() {
                    return None;
                }
                // |x| mod |b| from the truncated quotient, then the sign of x, as fmod has
                // it (zero included). The true quotient is at least 1/|b| below the next
                // whole number, and the division's rounding error is below 1/|b| (2^-53
                // of the quotient, and |x| < 2^53; 2^-24 and 2^24 for float32), so the
                // rounded quotient truncates to the exact one, q, and |x| - q·|b| is exact.
                let ab = <$v>::splat(b.abs());
                let r = ax - (ax / ab).trunc() * ab;
                Some(r.copysign(x))
            }
        }
    };
}

// Whole numbers below 2^51 (2^22): well inside 2^53 (2^24), below which every integer is
// exact and the truncated quotient is too (`rem_whole`).
float_lanes!(f64, f64x4, 4, 2_251_799_813_685_248.0);
float_lanes!(f32, f32x8, 8, 4_194_304.0);

/// Whether `b` is a divisor [`FloatLanes::rem_whole`] takes: a whole number with
/// `1 <= |b| <` [`FloatLanes::WHOLE`].
pub fn whole_divisor<T: FloatLanes>(b: T) -> bool {
    b == b.trunc_scalar() && b.abs_scalar() >= T::ONE && b.abs_scalar() < T::WHOLE
}

/// `out[i] = a[i] % b` (fmod, exactly as Rust's `%`): in vectors when `b` is a whole number
/// and the lanes are whole (the common `floor(v) % 3`), per value otherwise.
pub fn rem_by<T: FloatLanes>(a: &[T], b: T, out: &mut [T]) {
    let n = T::N;
    let whole_divisor = whole_divisor(b);
    let a = &a[..out.len()];
    let split = out.len() / n * n;
    for (o, x) in out[..split].chunks_exact_mut(n).zip(a.chunks_exact(n)) {
        match whole_divisor.then(|| T::rem_whole(T::load(x), b)).flatten() {
            Some(r) => T::store(r, o),
            None => {
                for (o, x) in o.iter_mut().zip(x) {
                    *o = *x % b;
                }
            }
        }
    }
    for (o, x) in out[split..].iter_mut().zip(&a[split..]) {
        *o = *x % b;
    }
}

/// `out[i] = f(a[i], b[i])` in vectors of `T::N`, the tail with `s`.
#[inline(always)]
pub fn simd2<T: FloatLanes>(
    a: Src<T>,
    b: Src<T>,
    out: &mut [T],
    f: impl Fn(T::V, T::V) -> T::V,
    s: impl Fn(T, T) -> T,
) {
    let n = T::N;
    let whole = out.len() / n * n;
    match (a, b) {
        (Src::Slice(a), Src::Slice(b)) => {
            let (a, b) = (&a[..out.len()], &b[..out.len()]);
            for ((o, x), y) in out[..whole].chunks_exact_mut(n).zip(a.chunks_exact(n)).zip(b.chunks_exact(n)) {
                T::store(f(T::load(x), T::load(y)), o);
            }
        }
        (Src::Slice(a), Src::Splat(y)) => {
            let (a, y) = (&a[..out.len()], T::splat(y));
            for (o, x) in out[..whole].chunks_exact_mut(n).zip(a.chunks_exact(n)) {
                T::store(f(T::load(x), y), o);
            }
        }
        (Src::Splat(x), Src::Slice(b)) => {
            let (b, x) = (&b[..out.len()], T::splat(x));
            for (o, y) in out[..whole].chunks_exact_mut(n).zip(b.chunks_exact(n)) {
                T::store(f(x, T::load(y)), o);
            }
        }
        (Src::Splat(x), Src::Splat(y)) => {
            out.fill(s(x, y));
            return;
        }
    }
    for (i, o) in out.iter_mut().enumerate().skip(whole) {
        *o = s(a.at(i), b.at(i));
    }
}

/// `out[i] = f(a[i])` in vectors of `T::N`, the tail with `s`.
#[inline(always)]
pub fn simd1<T: FloatLanes>(a: &[T], out: &mut [T], f: impl Fn(T::V) -> T::V, s: impl Fn(T) -> T) {
    let n = T::N;
    let whole = out.len() / n * n;
    let a = &a[..out.len()];
    for (o, x) in out[..whole].chunks_exact_mut(n).zip(a.chunks_exact(n)) {
        T::store(f(T::load(x)), o);
    }
    for (o, x) in out[whole..].iter_mut().zip(&a[whole..]) {
        *o = s(*x);
    }
}

/// `out[i] = f(a[i], b[i])` as a scalar loop (simple enough for the compiler to vectorize
/// where the operation allows).
#[inline(always)]
pub fn scalar2<A: Copy, B: Copy, O>(a: Src<A>, b: Src<B>, out: &mut [O], mut f: impl FnMut(A, B) -> O) {
    match (a, b) {
        (Src::Slice(a), Src::Slice(b)) => {
            for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
                *o = f(*x, *y);
            }
        }
        (Src::Slice(a), Src::Splat(y)) => {
            for (o, x) in out.iter_mut().zip(a) {
                *o = f(*x, y);
            }
        }
        (Src::Splat(x), Src::Slice(b)) => {
            for (o, y) in out.iter_mut().zip(b) {
                *o = f(x, *y);
            }
        }
        (Src::Splat(x), Src::Splat(y)) => {
            for o in out.iter_mut() {
                *o = f(x, y);
            }
        }
    }
}

/// `out[i] = f(a[i], b[i])` for an operation that may overflow (`f` gives the wrapped value
/// and whether it did): `false` when any row overflowed. Where `checked2` makes an `Option`
/// per row, this loop is plain arithmetic and one flag, which vectorizes where `f` reads the
/// overflow from the operands' signs (w4's `f64(x*3 + 1)` over 65,536 rows: 190 µs with
/// `checked2`, 151 µs with `overflowing_*`, 113 µs with the signs for `+`; `cargo bench
/// --bench kernels -- "w4 integer map"`).
#[inline(always)]
pub fn overflowing2<T: Copy>(a: Src<T>, b: Src<T>, out: &mut [T], f: impl Fn(T, T) -> (T, bool)) -> bool {
    let mut overflowed = false;
    scalar2(a, b, out, |x, y| {
        let (v, o) = f(x, y);
        overflowed |= o;
        v
    });
    !overflowed
}

/// `out[i] = f(a[i], b[i])` for a checked operation: `false` when any row's `f` is `None`.
#[inline(always)]
pub fn checked2<T: Copy + Default>(a: Src<T>, b: Src<T>, out: &mut [T], f: impl Fn(T, T) -> Option<T>) -> bool {
    // Failures are counted, not branched on, so the loop stays straight.
    let mut failed = false;
    scalar2(a, b, out, |x, y| match f(x, y) {
        Some(v) => v,
        None => {
            failed = true;
            T::default()
        }
    });
    !failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_loops_cover_the_tail_and_every_operand_shape() {
        let a: Vec<f64> = (0..11).map(f64::from).collect();
        let b: Vec<f64> = (0..11).map(|v| f64::from(v) * 0.5).collect();
        let mut out = vec![0.0; 11];
        simd2(Src::Slice(&a), Src::Slice(&b), &mut out, |x, y| x + y, |x, y| x + y);
        assert_eq!(out, (0..11).map(|v| f64::from(v) * 1.5).collect::<Vec<_>>());
        simd2(Src::Splat(1.0), Src::Slice(&a), &mut out, |x, y| x - y, |x, y| x - y);
        assert_eq!(out, (0..11).map(|v| 1.0 - f64::from(v)).collect::<Vec<_>>());
        simd2(Src::Slice(&a), Src::Splat(2.0), &mut out, |x, y| x / y, |x, y| x / y);
        assert_eq!(out[10], 5.0);
        simd1(&a, &mut out, <f64 as FloatLanes>::sqrt, f64::sqrt);
        assert_eq!(out, a.iter().map(|v| v.sqrt()).collect::<Vec<_>>());
        let f: Vec<f32> = (0..19).map(|v| v as f32 - 9.5).collect();
        let mut g = vec![0.0f32; 19];
        simd1(&f, &mut g, <f32 as FloatLanes>::floor, f32::floor);
        assert_eq!(g, f.iter().map(|v| v.floor()).collect::<Vec<_>>());
    }

    #[test]
    fn remainders_by_a_whole_divisor_are_fmod_exactly() {
        let mut a: Vec<f64> = (-40..40).map(f64::from).collect();
        a.extend([-0.0, 0.0, 2.5, -7.25, 1e15, -1e15 - 1.0, 2f64.powi(51) - 1.0, 2f64.powi(51), 1e300]);
        a.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 9007199254740991.0]);
        for b in [3.0, -3.0, 1.0, 7.0, 1e9, 0.0, 0.5, -2.5, f64::NAN, f64::INFINITY] {
            let mut out = vec![0.0; a.len()];
            rem_by(&a, b, &mut out);
            for (x, r) in a.iter().zip(&out) {
                let want = x % b;
                assert!(r.to_bits() == want.to_bits() || r.is_nan() && want.is_nan(), "{x} % {b}: {r} vs {want}");
            }
            let a32: Vec<f32> = a.iter().map(|v| *v as f32).collect();
            let mut out = vec![0.0f32; a.len()];
            rem_by(&a32, b as f32, &mut out);
            for (x, r) in a32.iter().zip(&out) {
                let want = x % b as f32;
                assert!(r.to_bits() == want.to_bits() || r.is_nan() && want.is_nan(), "{x} % {b}: {r} vs {want}");
            }
        }
    }
}

//! Int64 arithmetic by constants, checked on its input rather than operation by operation.
//!
//! x86 has no int64 vector multiply or overflow flag before AVX-512, so native code computes
//! int64 `+ − ×` a lane at a time and collects each operation's overflow flag: two
//! instructions per operation per lane, a third of `cast(x * 3 + 1)`'s time (`cargo bench
//! --bench kernels -- "w4 integer map"`: 43.5 µs against 30.7 without the flags).
//!
//! Where an operation's operands are an input column's value `x` (or a value computed from
//! it this way) and a constant, its result is exactly `a·x + b` for integers `a` and `b`
//! known when compiling, and it fits in an int64 exactly when `x` lies in an interval that
//! follows from `a` and `b`. Every such operation on a column narrows one interval for that
//! column; a step then checks each column's values against its interval, two lanes to a
//! vector comparison, and computes those operations wrapping, without their flags. Where
//! the values lie outside the interval, some operation overflows, and the step hands the
//! chunk back as a flag would have: the interpreter then fails at the row where Arrow fails.
//! Native code checks this way only in programs that neither divide nor take square roots
//! (`divides` in `native.rs` says why).

use flumen_ir::BinaryOp;

use super::program::{Arg, Instr, Konst, Op, Program, Ty};

/// The operations checked on their input, and the intervals that check them.
pub(super) struct Affine {
    /// Per instruction: whether an interval on its input column covers its overflow.
    pub covered: Vec<bool>,
    /// Per input column: the least and greatest value for which every covered operation on
    /// it fits, where some operation is covered.
    pub ranges: Vec<Option<(i64, i64)>>,
}

impl Affine {
    /// The int64 operations of `p` that are `a·x + b` of one input column `x` (not one of
    /// the `repeated` inputs, which hold one value per row), and their columns' intervals.
    /// An operation whose interval would leave its column none keeps its flag, and so do
    /// the operations computed from its value.
    pub(super) fn of(p: &Program, repeated: u64) -> Affine {
        let values = p.instrs.iter().map(|i| i.out + 1).max().unwrap_or(0);
        // Per value number: (column, a, b) where the value is exactly a·x + b.
        let mut forms: Vec<Option<(usize, i128, i128)>> = vec![None; values];
        let mut covered = vec![false; p.instrs.len()];
        let mut ranges: Vec<Option<(i128, i128)>> = vec![None; p.inputs.len()];
        for (n, instr) in p.instrs.iter().enumerate() {
            let form = |arg: Arg| match arg {
                Arg::Col(c) if p.inputs[c].1 == Ty::I64 && repeated & (1 << c) == 0 => Some((c, 1, 0)),
                Arg::Val(v) => forms[v],
                _ => None,
            };
            let Some((c, a, b)) = affine(instr, form) else { continue };
            let Some((lo, hi)) = fits(a, b) else { continue };
            let (lo, hi) = match ranges[c] {
                Some((l, h)) => (lo.max(l), hi.min(h)),
                None => (lo, hi),
            };
            if lo > hi {
                continue;
            }
            ranges[c] = Some((lo, hi));
            covered[n] = true;
            forms[instr.out] = Some((c, a, b));
        }
        // Within i64: an interval is clamped to the column's values.
        let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        Affine { covered, ranges: ranges.into_iter().map(|r| r.map(|(lo, hi)| (clamp(lo), clamp(hi)))).collect() }
    }

    /// No operation checked on its input: every int64 operation keeps its flag.
    pub(super) fn none(p: &Program) -> Affine {
        Affine { covered: vec![false; p.instrs.len()], ranges: vec![None; p.inputs.len()] }
    }

    /// The constants a step's checks compare with.
    pub(super) fn constants(&self) -> Vec<Konst> {
        self.ranges.iter().flatten().flat_map(|&(lo, hi)| [Konst::I64(lo), Konst::I64(hi)]).collect()
    }
}

/// `instr`'s result as `(column, a, b)`, exactly `a·x + b`, where it is an int64 `+ − ×`
/// of such a value (`form` of an operand) and a constant, and `a` and `b` fit in an i128.
fn affine(instr: &Instr, form: impl Fn(Arg) -> Option<(usize, i128, i128)>) -> Option<(usize, i128, i128)> {
    let Op::Arith(op) = instr.op else { return None };
    if instr.ty != Ty::I64 {
        return None;
    }
    let konst = |arg: Arg| match arg {
        Arg::Const(Konst::I64(k)) => Some(i128::from(k)),
        _ => None,
    };
    let (x, y) = (instr.args[0], instr.args[1]);
    match (op, form(x), konst(y), konst(x), form(y)) {
        (BinaryOp::Add, Some((c, a, b)), Some(k), ..) | (BinaryOp::Add, _, _, Some(k), Some((c, a, b))) => {
            Some((c, a, b.checked_add(k)?))
        }
        (BinaryOp::Sub, Some((c, a, b)), Some(k), ..) => Some((c, a, b.checked_sub(k)?)),
        (BinaryOp::Sub, _, _, Some(k), Some((c, a, b))) => Some((c, a.checked_neg()?, k.checked_sub(b)?)),
        (BinaryOp::Mul, Some((c, a, b)), Some(k), ..) | (BinaryOp::Mul, _, _, Some(k), Some((c, a, b))) => {
            Some((c, a.checked_mul(k)?, b.checked_mul(k)?))
        }
        _ => None,
    }
}

/// The interval of `x` for which `a·x + b` is an int64, where it has one.
fn fits(a: i128, b: i128) -> Option<(i128, i128)> {
    let (min, max) = (i128::from(i64::MIN), i128::from(i64::MAX));
    if a == 0 {
        return (min..=max).contains(&b).then_some((i128::MIN, i128::MAX));
    }
    // min ≤ a·x + b ≤ max, divided through by a (flipping the bounds when a < 0).
    let (low, high) = (min.checked_sub(b)?, max.checked_sub(b)?);
    let (lo, hi) = if a > 0 { (div_ceil(low, a), div_floor(high, a)) } else { (div_ceil(high, a), div_floor(low, a)) };
    (lo <= hi).then_some((lo, hi))
}

/// `n / d` rounded down (`d ≠ 0`).
fn div_floor(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d != 0 && ((n < 0) != (d < 0)) {
        q - 1
    } else {
        q
    }
}

/// `n / d` rounded up (`d ≠ 0`).
fn div_ceil(n: i128, d: i128) -> i128 {
    -div_floor(-n, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_holds_exactly_the_values_that_fit() {
        let fit = |a: i128, b: i128, x: i128| (i128::from(i64::MIN)..=i128::from(i64::MAX)).contains(&(a * x + b));
        let max = i128::from(i64::MAX);
        for a in [1, -1, 2, -2, 3, -3, 7, max, -max - 1, 1 << 40] {
            for b in [0, 1, -1, 5, -5, max, -max - 1] {
                let Some((lo, hi)) = fits(a, b) else { panic!("{a}·x + {b} fits for x = 0 or ±1") };
                assert!(fit(a, b, lo) && fit(a, b, hi), "{a}·x + {b} in [{lo}, {hi}]");
                assert!(!fit(a, b, lo - 1) && !fit(a, b, hi + 1), "{a}·x + {b} just outside [{lo}, {hi}]");
            }
        }
        assert_eq!(fits(0, 5), Some((i128::MIN, i128::MAX)));
        assert_eq!(fits(0, max + 1), None);
        assert_eq!(div_floor(-7, 2), -4);
        assert_eq!(div_ceil(-7, 2), -3);
        assert_eq!(div_floor(7, -2), -4);
        assert_eq!(div_ceil(7, -2), -3);
    }
}

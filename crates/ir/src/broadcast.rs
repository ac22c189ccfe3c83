//! Broadcasting of tensor shapes, as NumPy and TensorFlow do it: shapes are aligned at
//! their last dim, and each pair of dims must be equal or one of them 1 (which stretches to
//! the other); a missing leading dim counts as 1. `[33] * [1]` is `[33]`, `[4, 1] * [3]` is
//! `[4, 3]`.

/// The shape `a` and `b` broadcast to, or `None` when some dim pair is neither equal nor
/// has a 1.
pub fn broadcast_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[i64], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::broadcast_shape;

    /// Two shapes and their joint shape, if they broadcast.
    type Case<'a> = (&'a [i64], &'a [i64], Option<&'a [i64]>);

    #[test]
    fn dims_of_one_and_missing_dims_stretch() {
        let cases: &[Case] = &[
            (&[33], &[1], Some(&[33])),
            (&[1], &[33], Some(&[33])),
            (&[4, 1], &[3], Some(&[4, 3])),
            (&[4, 1], &[1, 3], Some(&[4, 3])),
            (&[2, 3], &[2, 3], Some(&[2, 3])),
            (&[], &[2, 3], Some(&[2, 3])),
            (&[1, 1], &[5], Some(&[1, 5])),
            (&[4, 3], &[12], None),
            (&[2, 3], &[3, 2], None),
            (&[0], &[1], Some(&[0])),
            (&[0], &[2], None),
        ];
        for (a, b, want) in cases {
            assert_eq!(broadcast_shape(a, b).as_deref(), *want, "{a:?} with {b:?}");
        }
    }
}

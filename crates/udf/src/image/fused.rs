//! One pass for the last steps of an image pipeline: `normalize(convert_image_dtype(
//! [random_]flip_left_right(image)))` over a fixed-size uint8 image (what DALI calls
//! crop-mirror-normalize; the crop is the image's own function, which decodes into it).
//!
//! The unfused steps each write a copy: the flip's, the float conversion's and the
//! normalization's. Here each output value is read once from the uint8 image, mirrored by
//! index, and mapped through a 256-entry table per channel holding exactly what the
//! unfused steps compute (`(v * (1 / 255) - mean) / std` in float32), so the result is
//! bit-identical.

use std::mem::MaybeUninit;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, UInt8Type};
use flumen_ir::expr::{int_literal, number_literal};
use flumen_ir::{Expr, Func, Result, Scalar};

use super::column::{self, Images};
use super::random::{self, Draws};
use super::window::{Cropper, Window};
use super::{is_fixed, key_of, value};

/// How the image is mirrored.
enum Mirror {
    No,
    Always,
    Random(i64),
}

/// Whether `expr` holds a `normalize` of a `convert_image_dtype` (what the one pass fuses), for
/// `explain`.
pub fn has_one_pass(expr: &Expr) -> bool {
    let mut found = false;
    expr.visit(&mut |e| found |= applies(e));
    found
}

/// Whether `expr` is a `normalize` of a `convert_image_dtype`, which [`evaluate`] may fuse.
pub(crate) fn applies(expr: &Expr) -> bool {
    matches!(expr, Expr::Call { func: Func::Normalize, args }
        if matches!(args.first(), Some(Expr::Call { func: Func::ConvertImageDtype, .. })))
}

/// The value of `expr`, a `normalize` call, in one pass, when it has the fused form and its
/// image is a fixed-size uint8 one; `None` otherwise (the caller evaluates it step by step).
pub(crate) fn evaluate(expr: &Expr, batch: &RecordBatch) -> Result<Option<ArrayRef>> {
    let Expr::Call { func: Func::Normalize, args } = expr else { return Ok(None) };
    let Some((Expr::Call { func: Func::ConvertImageDtype, args: convert }, params)) = args.split_first() else {
        return Ok(None);
    };
    let Some(n) = params.first().and_then(int_literal).map(|n| n as usize) else { return Ok(None) };
    let values: Option<Vec<f64>> = params[1..].iter().map(number_literal).collect();
    let Some(values) = values.filter(|v| v.len() == 2 * n) else { return Ok(None) };
    if !matches!(convert.get(1), Some(Expr::Literal(Scalar::Utf8(d))) if d == "float32") {
        return Ok(None);
    }
    let (image, mirror) = match &convert[0] {
        Expr::Call { func: Func::FlipLeftRight, args } => (&args[0], Mirror::Always),
        Expr::Call { func: Func::RandomFlipLeftRight, args } => match args.get(1).and_then(int_literal) {
            Some(seed) => (&args[0], Mirror::Random(seed)),
            None => return Ok(None),
        },
        other => (other, Mirror::No),
    };
    let (mean, std) = values.split_at(n);
    let keys = match mirror {
        Mirror::Random(_) => Some(random::keys(batch, Func::RandomFlipLeftRight)?),
        _ => None,
    };
    let flips = |r: usize| match mirror {
        Mirror::No => false,
        Mirror::Always => true,
        Mirror::Random(seed) => {
            Draws::new(key_of(keys, r).unwrap_or(0), seed, Func::RandomFlipLeftRight).uniform() < 0.5
        }
    };
    // A fixed-size crop of JPEGs still encoded: each window is normalized straight from the
    // decoder's rows, with no cropped copy in between.
    if let Some((bytes, channels, cropper, [h, w])) = encoded_crop(image, n) {
        let files = super::files(bytes, batch)?;
        let bytes = super::binary(&value(bytes, batch, 0)?)?;
        let crop_keys = if cropper.is_random() { Some(random::keys(batch, Func::RandomCrop)?) } else { None };
        let mut pass = Pass::new(mean, std, w, channels, bytes.len() * h * w * channels);
        let mut done = 0;
        super::decoded_windows(&bytes, channels, cropper, None, crop_keys, &files, |row, pixels, width, window| {
            pass.zeros((row - done) * h * w * channels);
            pass.window(pixels, width, window, flips(row));
            done = row + 1;
            Ok(())
        })?;
        pass.zeros((bytes.len() - done) * h * w * channels);
        return Ok(Some(column::fixed::<Float32Type>(pass.out, [h, w, channels], bytes.nulls().cloned())));
    }
    let column = value(image, batch, 3)?;
    let is_u8 = matches!(super::column_type(&column), Ok(DataType::UInt8));
    if !is_fixed(&column) || !is_u8 {
        return Ok(None);
    }
    let images = Images::<UInt8Type>::read(&column, "normalize")?;
    let Some(first) = images.rows.iter().flatten().next().copied() else { return Ok(None) };
    if first.channels != n {
        return Ok(None);
    }
    let (h, w, c) = (first.height, first.width, first.channels);
    let mut pass = Pass::new(mean, std, w, c, images.rows.len() * h * w * c);
    for (r, image) in images.rows.iter().enumerate() {
        match image {
            Some(d) => pass.window(images.pixels(d), w, Window { top: 0, left: 0, height: h, width: w }, flips(r)),
            None => pass.zeros(h * w * c),
        }
    }
    Ok(Some(column::fixed::<Float32Type>(pass.out, [h, w, c], column.logical_nulls())))
}

/// `crop(decode_jpeg_rows(bytes, c), ...)` or `random_crop(...)` of a fixed size, with `c`
/// = `channels`: the bytes, the channels, the cropper and the size.
fn encoded_crop(image: &Expr, channels: usize) -> Option<(&Expr, usize, Cropper, [usize; 2])> {
    let Expr::Call { func: func @ (Func::Crop | Func::RandomCrop), args } = image else { return None };
    let (bytes, c) = super::encoded(args.first()?)?;
    let cropper = Cropper::of(*func, &args[1..])?;
    let size = match cropper {
        Cropper::Fixed(w) => [w.height, w.width],
        Cropper::Random { height, width, .. } => [height, width],
        _ => return None,
    };
    (c == channels).then_some((bytes, c, cropper, size))
}

/// The normalized output of a chunk's images, written window after window.
struct Pass {
    /// Each channel's mean and standard deviation repeated along an output row, so that the
    /// loop over a row's values has no modulo and vectorizes.
    mean_row: Vec<f32>,
    std_row: Vec<f32>,
    channels: usize,
    mirrored: Vec<u8>,
    out: Vec<f32>,
}

impl Pass {
    fn new(mean: &[f64], std: &[f64], width: usize, channels: usize, values: usize) -> Pass {
        let row = width * channels;
        Pass {
            mean_row: (0..row).map(|i| mean[i % channels] as f32).collect(),
            std_row: (0..row).map(|i| std[i % channels] as f32).collect(),
            channels,
            mirrored: vec![0; row],
            out: Vec::with_capacity(values),
        }
    }

    /// `n` zeros (the values of null images).
    fn zeros(&mut self, n: usize) {
        self.out.resize(self.out.len() + n, 0.0);
    }

    /// `window` of `pixels` (rows of `width` pixels), mirrored when `flip`.
    fn window(&mut self, pixels: &[u8], width: usize, window: Window, flip: bool) {
        let c = self.channels;
        let row_values = window.width * c;
        for y in window.top..window.bottom() {
            let start = (y * width + window.left) * c;
            let mut row = &pixels[start..start + row_values];
            if flip {
                mirror_row(row, c, &mut self.mirrored);
                row = &self.mirrored;
            }
            self.out.reserve(row_values);
            let out = &mut self.out.spare_capacity_mut()[..row_values];
            normalize_row(row, &self.mean_row[..row_values], &self.std_row[..row_values], out);
            // SAFETY: `normalize_row` wrote all `row_values` values after the initialized ones.
            unsafe { self.out.set_len(self.out.len() + row_values) };
        }
    }
}

/// `(v * (1 / 255) - mean) / std` of each value of `row` into `out` (all four of one
/// length): exactly the unfused steps' float32 operations, with AVX2 where the CPU has it
/// (each lane computes the same IEEE operations, so the values are the same).
fn normalize_row(row: &[u8], mean: &[f32], std: &[f32], out: &mut [MaybeUninit<f32>]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { normalize_row_avx2(row, mean, std, out) };
    }
    normalize_row_portable(row, mean, std, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn normalize_row_avx2(row: &[u8], mean: &[f32], std: &[f32], out: &mut [MaybeUninit<f32>]) {
    normalize_row_portable(row, mean, std, out);
}

#[inline(always)]
fn normalize_row_portable(row: &[u8], mean: &[f32], std: &[f32], out: &mut [MaybeUninit<f32>]) {
    let n = out.len();
    let (row, mean, std) = (&row[..n], &mean[..n], &std[..n]);
    for i in 0..n {
        out[i].write((f32::from(row[i]) * (1.0 / 255.0) - mean[i]) / std[i]);
    }
}

/// `row`'s pixels (`c` values each) in reverse order, into `out`. Pixels are a few bytes:
/// copied value by value, not by `copy_from_slice` (a `memcpy` call per pixel).
pub(crate) fn mirror_row<T: Copy>(row: &[T], c: usize, out: &mut [T]) {
    let w = row.len() / c;
    if c == 3 {
        for x in 0..w {
            let (s, t) = (3 * (w - 1 - x), 3 * x);
            out[t] = row[s];
            out[t + 1] = row[s + 1];
            out[t + 2] = row[s + 2];
        }
        return;
    }
    for x in 0..w {
        for k in 0..c {
            out[x * c + k] = row[(w - 1 - x) * c + k];
        }
    }
}

//! One pass for the last steps of an image pipeline: `normalize(jitter(convert_image_dtype(
//! [random_]flip_left_right(image))))` over a fixed-size uint8 image, where `jitter` is any
//! chain of `random_brightness`, `random_contrast` and `random_saturation` (what DALI calls
//! crop-mirror-normalize, with its color twist; the crop is the image's own function, which
//! decodes into it).
//!
//! An `hwc_to_chw` of the result joins the pass too: each normalized row is written into
//! the image's channel planes instead of after the row before it.
//!
//! The unfused steps each write a column: the flip's, the float conversion's, each
//! jitter's and the normalization's (and the transposition's). Here each output value is read once from the uint8
//! image, mirrored by index and computed with exactly the unfused steps' float32 operations
//! (`(v * (1 / 255) - mean) / std`), so the result is bit-identical. With a jitter, each
//! image is converted into one scratch buffer that stays in cache, jittered there in
//! place (contrast needs the image's mean, so an image is the unit, not a row), and
//! normalized from it.

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

/// Whether `expr` is a `normalize` of (jitters of) a `convert_image_dtype`, which
/// [`evaluate`] may fuse.
pub(crate) fn applies(expr: &Expr) -> bool {
    let Expr::Call { func: Func::Normalize, args } = expr else { return false };
    args.first().is_some_and(|arg| matches!(under_jitters(arg).0, Expr::Call { func: Func::ConvertImageDtype, .. }))
}

/// A color jitter of the fused chain: the function and its arguments after the image.
struct Jitter<'a> {
    func: Func,
    rest: &'a [Expr],
}

/// `expr` with its chain of color jitters peeled off: what they apply to, and the jitters
/// in the order they apply (innermost first).
fn under_jitters(mut expr: &Expr) -> (&Expr, Vec<Jitter<'_>>) {
    let mut jitters = Vec::new();
    while let Expr::Call {
        func: func @ (Func::RandomBrightness | Func::RandomContrast | Func::RandomSaturation),
        args,
    } = expr
    {
        let Some((image, rest)) = args.split_first() else { break };
        jitters.push(Jitter { func: *func, rest });
        expr = image;
    }
    jitters.reverse();
    (expr, jitters)
}

/// The value of `expr`, a `normalize` call, in one pass, when it has the fused form and its
/// image is a fixed-size uint8 one; `None` otherwise (the caller evaluates it step by step).
pub(crate) fn evaluate(expr: &Expr, batch: &RecordBatch) -> Result<Option<ArrayRef>> {
    evaluate_in(expr, batch, false)
}

/// The value of `hwc_to_chw(expr)` in one pass, as [`evaluate`] gives `expr`'s, or `None`.
pub(crate) fn evaluate_chw(expr: &Expr, batch: &RecordBatch) -> Result<Option<ArrayRef>> {
    evaluate_in(expr, batch, true)
}

/// [`evaluate`], with channel planes (`[c, h, w]`) when `chw`.
fn evaluate_in(expr: &Expr, batch: &RecordBatch, chw: bool) -> Result<Option<ArrayRef>> {
    let Expr::Call { func: Func::Normalize, args } = expr else { return Ok(None) };
    let Some((converted, params)) = args.split_first() else { return Ok(None) };
    let (Expr::Call { func: Func::ConvertImageDtype, args: convert }, jitters) = under_jitters(converted) else {
        return Ok(None);
    };
    if jitters.iter().any(|j| !j.valid()) {
        return Ok(None);
    }
    let Some(n) = params.first().and_then(int_literal).map(|n| n as usize) else { return Ok(None) };
    // Saturation blends RGB pixels; typing admits it on 3 channels only.
    if jitters.iter().any(|j| j.func == Func::RandomSaturation) && n != 3 {
        return Ok(None);
    }
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
    let jitter_keys = match jitters.first() {
        Some(j) => Some(random::keys(batch, j.func)?),
        None => None,
    };
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
        let mut pass = Pass::new(mean, std, [h, w], channels, bytes.len() * h * w * channels, jitters, chw);
        let mut done = 0;
        super::decoded_windows(&bytes, channels, cropper, None, crop_keys, &files, |row, pixels, width, window| {
            pass.zeros((row - done) * h * w * channels);
            pass.window(pixels, width, window, flips(row), key_of(jitter_keys, row).unwrap_or(0));
            done = row + 1;
            Ok(())
        })?;
        pass.zeros((bytes.len() - done) * h * w * channels);
        return Ok(Some(column::fixed::<Float32Type>(pass.out, layout([h, w, channels], chw), bytes.nulls().cloned())));
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
    let mut pass = Pass::new(mean, std, [h, w], c, images.rows.len() * h * w * c, jitters, chw);
    for (r, image) in images.rows.iter().enumerate() {
        let whole = Window { top: 0, left: 0, height: h, width: w };
        match image {
            Some(d) => pass.window(images.pixels(d), w, whole, flips(r), key_of(jitter_keys, r).unwrap_or(0)),
            None => pass.zeros(h * w * c),
        }
    }
    Ok(Some(column::fixed::<Float32Type>(pass.out, layout([h, w, c], chw), column.logical_nulls())))
}

/// The dims of an `[h, w, c]` image's output, transposed to `[c, h, w]` when `chw`.
fn layout([h, w, c]: [usize; 3], chw: bool) -> [usize; 3] {
    if chw {
        [c, h, w]
    } else {
        [h, w, c]
    }
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

impl Jitter<'_> {
    /// Whether the arguments are what typing admits (else the steps report the error).
    fn valid(&self) -> bool {
        let numbers = if self.func == Func::RandomBrightness { 1 } else { 2 };
        self.rest.len() == numbers + 1
            && self.rest[..numbers].iter().all(|e| number_literal(e).is_some())
            && int_literal(&self.rest[numbers]).is_some()
    }

    /// Applies this jitter to `image` (`c` channels a pixel) in place, drawing as the unfused
    /// function does for the element of `key`, with the same float32 operations in the same
    /// order.
    fn apply(&self, image: &mut [f32], c: usize, key: u64) {
        let n = |i: usize| self.rest.get(i).and_then(number_literal).unwrap_or(0.0);
        let seed = self.rest.last().and_then(int_literal).unwrap_or(0);
        let mut draws = Draws::new(key, seed, self.func);
        match self.func {
            Func::RandomBrightness => {
                let delta = draws.between(-n(0), n(0)) as f32;
                image.iter_mut().for_each(|v| *v += delta);
            }
            Func::RandomContrast => {
                let factor = draws.between(n(0), n(1)) as f32;
                let means = super::channel_means(image, c);
                for pixel in image.chunks_exact_mut(c) {
                    for (v, m) in pixel.iter_mut().zip(&means) {
                        *v = (*v - m) * factor + m;
                    }
                }
            }
            _ => {
                let factor = draws.between(n(0), n(1)) as f32;
                for p in image.chunks_exact_mut(3) {
                    let gray = super::gray(p);
                    p.iter_mut().for_each(|v| *v = (gray + factor * (*v - gray)).clamp(0.0, 1.0));
                }
            }
        }
    }
}

/// The normalized output of a chunk's images, written window after window.
struct Pass<'a> {
    /// Each channel's mean and standard deviation repeated along an output row, so that the
    /// loop over a row's values has no modulo and vectorizes.
    mean_row: Vec<f32>,
    std_row: Vec<f32>,
    /// `1 / std` along a row, when dividing by multiplying with it is exact for these means
    /// and standard deviations ([`reciprocals`]).
    recip_row: Option<Vec<f32>>,
    channels: usize,
    mirrored: Vec<u8>,
    out: Vec<f32>,
    /// The color jitters between the conversion and the normalization, and the image they
    /// work on (empty when there are none).
    jitters: Vec<Jitter<'a>>,
    scratch: Vec<f32>,
    /// For `[c, h, w]` output, the image's width and plane size (`h * w`), and one
    /// normalized row on its way into the planes.
    planes: Option<(usize, usize)>,
    row: Vec<f32>,
}

impl<'a> Pass<'a> {
    fn new(
        mean: &[f64],
        std: &[f64],
        [height, width]: [usize; 2],
        channels: usize,
        values: usize,
        jitters: Vec<Jitter<'a>>,
        chw: bool,
    ) -> Self {
        let row = width * channels;
        let (mean, std): (Vec<f32>, Vec<f32>) =
            (mean.iter().map(|m| *m as f32).collect(), std.iter().map(|s| *s as f32).collect());
        Pass {
            mean_row: (0..row).map(|i| mean[i % channels]).collect(),
            std_row: (0..row).map(|i| std[i % channels]).collect(),
            recip_row: reciprocals(&mean, &std).map(|r| (0..row).map(|i| r[i % channels]).collect()),
            channels,
            mirrored: vec![0; row],
            out: Vec::with_capacity(values),
            jitters,
            scratch: Vec::new(),
            planes: chw.then_some((width, height * width)),
            row: vec![0.0; if chw { row } else { 0 }],
        }
    }

    /// `n` zeros (the values of null images).
    fn zeros(&mut self, n: usize) {
        self.out.resize(self.out.len() + n, 0.0);
    }

    /// `window` of `pixels` (rows of `width` pixels), mirrored when `flip`, jittered with
    /// the draws of the element of `key`.
    fn window(&mut self, pixels: &[u8], width: usize, window: Window, flip: bool, key: u64) {
        if !self.jitters.is_empty() {
            return self.jittered(pixels, width, window, flip, key);
        }
        let c = self.channels;
        let row_values = window.width * c;
        let (out, mean, std) = (&mut self.out, &self.mean_row[..row_values], &self.std_row[..row_values]);
        let recip = self.recip_row.as_ref().map(|r| &r[..row_values]);
        if let Some((w, plane)) = self.planes {
            let (base, buffer) = (out.len(), &mut self.row[..row_values]);
            out.resize(base + window.height * row_values, 0.0);
            let mut y = 0;
            window_rows(pixels, width, window, c, flip, &mut self.mirrored, |row| {
                normalize_row(row, mean, std, recip, slots(buffer));
                into_planes(buffer, c, &mut out[base + y * w..], plane);
                y += 1;
            });
            return;
        }
        window_rows(pixels, width, window, c, flip, &mut self.mirrored, |row| {
            out.reserve(row_values);
            let spare = &mut out.spare_capacity_mut()[..row_values];
            normalize_row(row, mean, std, recip, spare);
            // SAFETY: `normalize_row` wrote all `row_values` values after the initialized ones.
            unsafe { out.set_len(out.len() + row_values) };
        });
    }

    /// [`Pass::window`] with color jitters: the window converted into the scratch image,
    /// jittered there, then normalized into the output.
    fn jittered(&mut self, pixels: &[u8], width: usize, window: Window, flip: bool, key: u64) {
        let c = self.channels;
        let row_values = window.width * c;
        self.scratch.clear();
        let scratch = &mut self.scratch;
        window_rows(pixels, width, window, c, flip, &mut self.mirrored, |row| {
            scratch.extend(row.iter().map(|&v| f32::from(v) * (1.0 / 255.0)));
        });
        for jitter in &self.jitters {
            jitter.apply(&mut self.scratch, c, key);
        }
        let (mean, std) = (&self.mean_row[..row_values], &self.std_row[..row_values]);
        let Some((w, plane)) = self.planes else {
            for row in self.scratch.chunks_exact(row_values) {
                self.out.extend(row.iter().zip(mean).zip(std).map(|((v, m), s)| (v - m) / s));
            }
            return;
        };
        let base = self.out.len();
        self.out.resize(base + window.height * row_values, 0.0);
        for (y, row) in self.scratch.chunks_exact(row_values).enumerate() {
            for (slot, ((v, m), s)) in self.row.iter_mut().zip(row.iter().zip(mean).zip(std)) {
                *slot = (v - m) / s;
            }
            into_planes(&self.row[..row_values], c, &mut self.out[base + y * w..], plane);
        }
    }
}

/// Row `row` of an image (pixels of `c` values) into its channel planes: `out` starts at the
/// row's place in the first plane, and the planes are `plane` values apart.
fn into_planes(row: &[f32], c: usize, out: &mut [f32], plane: usize) {
    let w = row.len() / c;
    if c == 3 {
        // RGB, the common case: one sequential walk over the row.
        let (red, rest) = out.split_at_mut(plane);
        let (green, blue) = rest.split_at_mut(plane);
        let planes = red[..w].iter_mut().zip(&mut green[..w]).zip(&mut blue[..w]);
        for (((r, g), b), pixel) in planes.zip(row.chunks_exact(3)) {
            (*r, *g, *b) = (pixel[0], pixel[1], pixel[2]);
        }
        return;
    }
    for (ch, plane_row) in out.chunks_mut(plane).take(c).enumerate() {
        for (slot, v) in plane_row.iter_mut().zip(row.iter().skip(ch).step_by(c)) {
            *slot = *v;
        }
    }
}

/// `values` as slots [`normalize_row`] writes: an `f32` stays valid whatever is written.
fn slots(values: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has the layout of `f32`, and only `f32`s are written through
    // the slots, so every value stays initialized.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), values.len()) }
}

/// Calls `each` with the rows of `window` of `pixels` (rows of `width` pixels of `c`
/// values), each mirrored into `mirrored` first when `flip`.
fn window_rows(
    pixels: &[u8],
    width: usize,
    window: Window,
    c: usize,
    flip: bool,
    mirrored: &mut [u8],
    mut each: impl FnMut(&[u8]),
) {
    let row_values = window.width * c;
    for y in window.top..window.bottom() {
        let start = (y * width + window.left) * c;
        let row = &pixels[start..start + row_values];
        if flip {
            mirror_pixel_row(row, c, mirrored);
            each(&mirrored[..row_values]);
        } else {
            each(row);
        }
    }
}

/// The value `normalize(convert_image_dtype(v))` gives a uint8 `v` of a channel of `mean`
/// and `std`: `(v * (1 / 255) - mean) / std`, in float32 as the unfused steps compute it.
#[inline(always)]
fn normalized(v: u8, mean: f32, std: f32) -> f32 {
    (f32::from(v) * (1.0 / 255.0) - mean) / std
}

/// The same by a multiplication with `recip = 1 / std` and one correcting fused
/// multiply-add (Markstein's step), which is the correctly rounded quotient in all but rare
/// cases.
#[inline(always)]
fn normalized_by_reciprocal(v: u8, mean: f32, std: f32, recip: f32) -> f32 {
    let a = f32::from(v) * (1.0 / 255.0) - mean;
    let q = a * recip;
    (-q).mul_add(std, a).mul_add(recip, q)
}

/// Each channel's `1 / std` when [`normalized_by_reciprocal`] equals [`normalized`] bit for
/// bit for every uint8 value of every channel, which is checked here: the one pass then
/// needs no division, which bounds its loop, and stays bit-identical to the steps.
fn reciprocals(mean: &[f32], std: &[f32]) -> Option<Vec<f32>> {
    let recip: Vec<f32> = std.iter().map(|s| 1.0 / s).collect();
    let exact = mean.iter().zip(std).zip(&recip).all(|((m, s), r)| {
        (0..=255u8).all(|v| normalized_by_reciprocal(v, *m, *s, *r).to_bits() == normalized(v, *m, *s).to_bits())
    });
    exact.then_some(recip)
}

/// [`normalized`] of each value of `row` into `out` (all of one length), by the
/// reciprocals `recip` when given ([`reciprocals`] checked they are exact) and the CPU
/// fuses multiply-adds, else by division; vectorized with AVX2 where the CPU has it (each
/// lane computes the same IEEE operations, so the values are the same).
fn normalize_row(row: &[u8], mean: &[f32], std: &[f32], recip: Option<&[f32]>, out: &mut [MaybeUninit<f32>]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        if let Some(recip) = recip.filter(|_| std::arch::is_x86_feature_detected!("fma")) {
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            return unsafe { normalize_row_fma(row, mean, std, recip, out) };
        }
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { normalize_row_avx2(row, mean, std, out) };
    }
    let _ = recip;
    normalize_row_portable(row, mean, std, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn normalize_row_fma(row: &[u8], mean: &[f32], std: &[f32], recip: &[f32], out: &mut [MaybeUninit<f32>]) {
    let n = out.len();
    let (row, mean, std, recip) = (&row[..n], &mean[..n], &std[..n], &recip[..n]);
    for i in 0..n {
        out[i].write(normalized_by_reciprocal(row[i], mean[i], std[i], recip[i]));
    }
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
        out[i].write(normalized(row[i], mean[i], std[i]));
    }
}

/// `row`'s pixels (`c` values each) in reverse order, into `out`. Pixels of 1, 3 or 4
/// values are moved as fixed-size arrays: a per-pixel `copy_from_slice` of a length known
/// only at run time would be a `memcpy` call per pixel.
pub(crate) fn mirror_row<T: Copy>(row: &[T], c: usize, out: &mut [T]) {
    let out = &mut out[..row.len()];
    match c {
        1 => out.iter_mut().zip(row.iter().rev()).for_each(|(o, v)| *o = *v),
        3 => mirror_pixels::<T, 3>(row, out),
        4 => mirror_pixels::<T, 4>(row, out),
        _ => {
            for (o, p) in out.chunks_exact_mut(c).zip(row.chunks_exact(c).rev()) {
                o.copy_from_slice(p);
            }
        }
    }
}

/// [`mirror_row`] of uint8 pixels, five RGB pixels per shuffle where the CPU has SSSE3.
fn mirror_pixel_row(row: &[u8], c: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if c == 3 && std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3, checked just above.
        return unsafe { mirror_rgb_ssse3(row, out) };
    }
    mirror_row(row, c, out)
}

/// RGB pixels of `row` in reverse order into `out`: each step loads the 16 bytes that end
/// with five source pixels, reverses the pixels with one shuffle and stores 16 bytes, the
/// last of which the next step overwrites; the pixels that do not fill a step are moved
/// one by one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn mirror_rgb_ssse3(row: &[u8], out: &mut [u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_setr_epi8, _mm_shuffle_epi8, _mm_storeu_si128};
    let w = row.len() / 3;
    let out = &mut out[..w * 3];
    // Source pixels s..s + 5 start at byte 1 of a load from byte 3s - 1; -1 (0x80) zeroes.
    let reverse = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, -1);
    let mut x = 0;
    // Output pixels x..x + 5 are source pixels s = w - x - 5 onwards. The load reads bytes
    // 3s - 1 .. 3s + 15 and the store writes 3x .. 3x + 16: both within the row while
    // x + 6 <= w (then s >= 1 and 3x + 16 <= 3w).
    while x + 6 <= w {
        let s = w - x - 5;
        // SAFETY: 3s - 1 + 16 = 3(w - x) = 3w - 3x <= 3w, and 3s - 1 >= 2: in `row`.
        let v = unsafe { _mm_loadu_si128(row.as_ptr().add(3 * s - 1).cast::<__m128i>()) };
        // SAFETY: 3x + 16 <= 3(w - 6) + 16 < 3w = out.len().
        unsafe { _mm_storeu_si128(out.as_mut_ptr().add(3 * x).cast::<__m128i>(), _mm_shuffle_epi8(v, reverse)) };
        x += 5;
    }
    let (pixels, _) = row.as_chunks::<3>();
    let (mirrored, _) = out.as_chunks_mut::<3>();
    for (t, o) in mirrored.iter_mut().enumerate().skip(x) {
        *o = pixels[w - 1 - t];
    }
}

fn mirror_pixels<T: Copy, const C: usize>(row: &[T], out: &mut [T]) {
    let (pixels, _) = row.as_chunks::<C>();
    let (mirrored, _) = out.as_chunks_mut::<C>();
    mirrored.iter_mut().zip(pixels.iter().rev()).for_each(|(o, p)| *o = *p);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reciprocals_are_used_only_where_they_give_the_quotient_exactly() {
        // ImageNet's statistics, which w5 and w7 normalize by.
        let (mean, std) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
        let recip = reciprocals(&mean, &std).expect("exact for ImageNet's statistics");
        // A check of every value, independent of the one `reciprocals` made.
        for c in 0..3 {
            for v in 0..=255u8 {
                let by_recip = normalized_by_reciprocal(v, mean[c], std[c], recip[c]);
                assert_eq!(
                    by_recip.to_bits(),
                    ((f32::from(v) * (1.0 / 255.0) - mean[c]) / std[c]).to_bits(),
                    "{v} in {c}"
                );
            }
        }
        // A zero deviation divides to infinities, which the reciprocal path turns into NaN.
        assert!(reciprocals(&[0.5], &[0.0]).is_none());
        let row: Vec<u8> = (0..=255).collect();
        let (m, s) = (vec![0.5f32; 256], vec![0.0f32; 256]);
        let mut out = vec![MaybeUninit::new(0.0f32); 256];
        normalize_row(&row, &m, &s, None, &mut out);
        // SAFETY: every value was written.
        let out: Vec<f32> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
        assert_eq!(out[255], f32::INFINITY);
        assert_eq!(out[0], f32::NEG_INFINITY);
    }

    #[test]
    fn a_transposed_pass_writes_the_channel_planes_of_the_pass() {
        use std::sync::Arc;

        use arrow::array::AsArray;
        use arrow::datatypes::{Field, Schema};

        let leaf = |a: &ArrayRef| {
            let mut a = a.clone();
            while let Some(l) = a.as_fixed_size_list_opt() {
                a = l.values().clone();
            }
            a.as_primitive::<Float32Type>().values().to_vec()
        };
        // Gray, RGB (its own loop) and RGBA.
        for c in [1, 3, 4] {
            let (h, w) = (3, 4);
            let pixels: Vec<u8> = (0..2 * h * w * c).map(|v| (v * 37 % 256) as u8).collect();
            let image = column::fixed::<UInt8Type>(pixels, [h, w, c], None);
            let schema = Schema::new(vec![Field::new("img", image.data_type().clone(), true)]);
            let batch = RecordBatch::try_new(Arc::new(schema), vec![image]).unwrap();
            let (mean, std) = (&[0.485, 0.456, 0.406, 0.5][..c], &[0.229, 0.224, 0.225, 0.25][..c]);
            let flipped = crate::functions::flip_left_right(datafusion_expr::col("img"));
            let normalized = crate::functions::normalize(crate::functions::convert_image_dtype(flipped), mean, std);
            let expr = crate::lower::lower(&normalized).unwrap();
            let hwc = evaluate(&expr, &batch).unwrap().expect("the one pass");
            let chw = evaluate_chw(&expr, &batch).unwrap().expect("the one pass, transposed");
            assert_eq!(chw.as_fixed_size_list().value_length() as usize, c);
            let (hwc, chw) = (leaf(&hwc), leaf(&chw));
            assert_eq!(chw.len(), 2 * h * w * c);
            for (image, planes) in hwc.chunks(h * w * c).zip(chw.chunks(h * w * c)) {
                let expected: Vec<f32> = (0..c).flat_map(|ch| image.iter().skip(ch).step_by(c).copied()).collect();
                assert_eq!(planes, expected.as_slice(), "{c} channels");
            }
        }
    }

    #[test]
    fn a_mirrored_row_reverses_its_pixels() {
        for c in [1, 2, 3, 4] {
            let row: Vec<u16> = (0..5 * c as u16).collect();
            let mut out = vec![0; 5 * c + 3];
            mirror_row(&row, c, &mut out);
            let want: Vec<u16> = row.chunks(c).rev().flatten().copied().collect();
            assert_eq!(out[..5 * c], want[..], "{c} channels");
        }
        // The shuffled path, at every width around its steps of five pixels.
        for w in 0..40usize {
            let row: Vec<u8> = (0..3 * w).map(|v| (v * 7 % 251) as u8).collect();
            let mut out = vec![0; 3 * w];
            mirror_pixel_row(&row, 3, &mut out);
            let want: Vec<u8> = row.chunks(3).rev().flatten().copied().collect();
            assert_eq!(out, want, "width {w}");
        }
    }
}

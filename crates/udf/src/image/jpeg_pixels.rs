//! From a JPEG's decoded component planes to pixels, as libjpeg-turbo makes them (and so
//! Pillow and `tf.io.decode_jpeg`): its "fancy" chroma upsampling and its colour
//! conversions, in the same fixed-point arithmetic.
//!
//! zune-jpeg decodes the entropy-coded data and runs the inverse DCT into one plane per
//! component, each at its own (subsampled) size. What libjpeg does next decides most of the
//! pixel values users compare: zune's own upsampling filters chroma across the MCU padding at
//! the right and bottom edges, where libjpeg repeats the last real sample, and it smooths
//! images two chroma samples wide or less, which libjpeg only replicates; that is why this
//! step is the project's. What remains different from libjpeg-turbo is zune's inverse DCT,
//! which is not libjpeg's `islow`: a sample off by one here and there, at most a few levels
//! after colour conversion (`crates/python/tests/test_images_pillow.py` measures it).
//!
//! - Upsampling (libjpeg's `jdsample.c` with `do_fancy_upsampling`): a component at half the
//!   width is filtered by `(3·near + far)` with libjpeg's alternating rounding, at half the
//!   height too by `3·near_row + far_row` first, the last real sample repeated past the
//!   edges; only where the subsampled width exceeds two samples (narrower ones are
//!   replicated), and any other ratio is replicated.
//! - Colour (`jdcolor.c`): YCbCr to RGB with libjpeg's 16-bit fixed-point coefficients, RGB to
//!   gray with its luma weights, YCCK to CMYK, and CMYK to RGB as TensorFlow's decoder does
//!   (`c·k / 255` on the inverted values Adobe files hold, `(255 - c)(255 - k) / 255`
//!   otherwise); a fourth channel is an opaque alpha.

use flumen_ir::{Error, Result};

/// One component's samples: `width` × `height` (its own size, not padded), and its sampling
/// factors.
pub struct Plane {
    /// The samples, row after row.
    pub samples: Vec<u8>,
    /// Samples per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Horizontal sampling factor.
    pub h_factor: usize,
    /// Vertical sampling factor.
    pub v_factor: usize,
}

impl Plane {
    fn row(&self, y: usize) -> &[u8] {
        &self.samples[y * self.width..(y + 1) * self.width]
    }
}

/// How a JPEG's components encode colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// One luma component.
    Gray,
    /// Luma and two chroma components.
    YCbCr,
    /// Red, green and blue (Adobe transform 0).
    Rgb,
    /// Cyan, magenta, yellow and black; `inverted` as Adobe applications store them.
    Cmyk {
        /// The values are 255 minus the ink (an Adobe marker says so).
        inverted: bool,
    },
    /// YCbCr for cyan, magenta and yellow, and black (Adobe transform 2; always inverted).
    Ycck,
}

/// Writes the `width` × `height` image of `planes` to `out` as `channels` (1: gray, 3: RGB,
/// 4: RGBA) values per pixel, row after row.
pub fn pixels(
    planes: &[Plane],
    encoding: Encoding,
    width: usize,
    height: usize,
    channels: usize,
    out: &mut [u8],
) -> Result<()> {
    let wanted = match encoding {
        Encoding::Gray => 1,
        Encoding::YCbCr | Encoding::Rgb => 3,
        Encoding::Cmyk { .. } | Encoding::Ycck => 4,
    };
    if planes.len() != wanted || planes.iter().any(|p| p.h_factor == 0 || p.v_factor == 0) {
        return Err(Error::Expr(format!("decode_jpeg: {} components for {encoding:?}", planes.len())));
    }
    if out.len() != width * height * channels {
        return Err(Error::Expr(format!("decode_jpeg: {} bytes for a {width}x{height}x{channels} image", out.len())));
    }
    let h_max = planes.iter().map(|p| p.h_factor).max().unwrap_or(1);
    let v_max = planes.iter().map(|p| p.v_factor).max().unwrap_or(1);
    let mut upsamplers: Vec<Upsampler> = planes.iter().map(|p| Upsampler::new(p, h_max, v_max, width)).collect();
    let mut ycc = YccToRgb::default();
    // RGB of the encodings converted through it (RGB, CMYK, YCCK) for gray or RGBA.
    let mut rgb = vec![0u8; width * 3];
    for (y, o) in out.chunks_exact_mut(width * channels).enumerate() {
        let mut rows: [&[u8]; 4] = [&[]; 4];
        for (row, (u, p)) in rows.iter_mut().zip(upsamplers.iter_mut().zip(planes)) {
            *row = u.row(p, y);
        }
        match (encoding, channels) {
            // Gray out of luma alone, as libjpeg reads gray out of YCbCr.
            (Encoding::Gray | Encoding::YCbCr, 1) => o.copy_from_slice(rows[0]),
            (Encoding::Gray, _) => {
                for (px, &v) in o.chunks_exact_mut(channels).zip(rows[0]) {
                    px[..3].fill(v);
                }
            }
            (Encoding::YCbCr, 3) => ycc.row::<3>(rows[0], rows[1], rows[2], o),
            (Encoding::YCbCr, _) => ycc.row::<4>(rows[0], rows[1], rows[2], o),
            (_, 3) => rgb_row(encoding, &rows, &mut ycc, o),
            (_, 1) => {
                rgb_row(encoding, &rows, &mut ycc, &mut rgb);
                for (g, px) in o.iter_mut().zip(rgb.chunks_exact(3)) {
                    *g = gray(px[0], px[1], px[2]);
                }
            }
            _ => {
                rgb_row(encoding, &rows, &mut ycc, &mut rgb);
                for (px, c) in o.chunks_exact_mut(4).zip(rgb.chunks_exact(3)) {
                    px[..3].copy_from_slice(c);
                }
            }
        }
        if channels == 4 {
            o.chunks_exact_mut(4).for_each(|px| px[3] = 255);
        }
    }
    Ok(())
}

/// A row of the RGB, CMYK or YCCK components as interleaved RGB.
fn rgb_row(encoding: Encoding, rows: &[&[u8]], ycc: &mut YccToRgb, out: &mut [u8]) {
    match encoding {
        Encoding::Cmyk { inverted } => cmyk_rgb_row(rows, inverted, out),
        Encoding::Ycck => ycck_rgb_row(rows, ycc, out),
        _ => interleave(rows, out),
    }
}

/// One component brought to the image's size, a row at a time.
struct Upsampler {
    /// Horizontal and vertical ratios to the largest sampling factors.
    h: usize,
    v: usize,
    /// Whether rows are filtered (libjpeg's fancy upsampling) or samples replicated.
    fancy: bool,
    /// The image's width; the row buffer (a whole number of doubled samples, cut on use).
    width: usize,
    buffer: Vec<u8>,
    /// Column sums of the vertical filter.
    sums: Vec<u16>,
}

impl Upsampler {
    fn new(p: &Plane, h_max: usize, v_max: usize, width: usize) -> Upsampler {
        let (h, v) = (h_max / p.h_factor, v_max / p.v_factor);
        // libjpeg filters 2:1 horizontally only over more than two samples; 1:2 vertically
        // always; anything else it replicates.
        let fancy = match (h, v) {
            (2, 1) | (2, 2) => p.width > 2,
            (1, 2) => true,
            _ => false,
        };
        Upsampler { h, v, fancy, width, buffer: vec![0; (p.width * h).max(width)], sums: Vec::new() }
    }

    /// Row `y` of the image-sized component.
    fn row<'a>(&'a mut self, p: &'a Plane, y: usize) -> &'a [u8] {
        let iy = (y / self.v).min(p.height - 1);
        if (self.h, self.v) == (1, 1) {
            return &p.row(iy)[..self.width];
        }
        // The other row a vertical filter reads: above for the upper output row of a pair,
        // below for the lower, the edge rows repeated.
        let (near, far, below) = match y % 2 == 1 {
            true => (p.row(iy), p.row((iy + 1).min(p.height - 1)), true),
            false => (p.row(iy), p.row(iy.saturating_sub(1)), false),
        };
        let out = &mut self.buffer[..p.width * self.h];
        match (self.fancy, self.h, self.v) {
            (true, 2, 1) => fancy_h2v1(near, out),
            (true, 2, 2) => fancy_h2v2(near, far, &mut self.sums, out),
            (true, 1, 2) => {
                // libjpeg's h1v2: (3·near + far + 1) >> 2 above, + 2 below.
                let bias = if below { 2 } else { 1 };
                for ((o, &n), &f) in out.iter_mut().zip(near).zip(far) {
                    *o = ((3 * u32::from(n) + u32::from(f) + bias) >> 2) as u8;
                }
            }
            _ => {
                for (o, &s) in out.chunks_exact_mut(self.h).zip(near) {
                    o.fill(s);
                }
            }
        }
        &self.buffer[..self.width]
    }
}

/// libjpeg's h2v1 fancy upsampling of one row of more than two samples: each output sample
/// is `3·nearest + next nearest`, rounded alternately (+1 on the left, +2 on the right), the
/// first and last samples repeated at the edges.
fn fancy_h2v1(row: &[u8], out: &mut [u8]) {
    let n = row.len();
    out[0] = row[0];
    out[2 * n - 1] = row[n - 1];
    // Between samples a and b: a's right output, then b's left one.
    for (w, pair) in row.windows(2).zip(out[1..2 * n - 1].chunks_exact_mut(2)) {
        let (a, b) = (u16::from(w[0]), u16::from(w[1]));
        pair[0] = ((3 * a + b + 2) >> 2) as u8;
        pair[1] = ((3 * b + a + 1) >> 2) as u8;
    }
}

/// libjpeg's h2v2 fancy upsampling of one output row: the column sums `3·near + far` of the
/// nearer row and the next nearer (into `sums`), then `3·this + neighbour` across, in
/// sixteenths (+8 on the left, +7 on the right), the edge columns repeated.
fn fancy_h2v2(near: &[u8], far: &[u8], sums: &mut Vec<u16>, out: &mut [u8]) {
    let n = near.len();
    sums.clear();
    sums.extend(near.iter().zip(far).map(|(&a, &b)| 3 * u16::from(a) + u16::from(b)));
    out[0] = ((4 * sums[0] + 8) >> 4) as u8;
    out[2 * n - 1] = ((4 * sums[n - 1] + 7) >> 4) as u8;
    for (w, pair) in sums.windows(2).zip(out[1..2 * n - 1].chunks_exact_mut(2)) {
        let (a, b) = (w[0], w[1]);
        pair[0] = ((3 * a + b + 7) >> 4) as u8;
        pair[1] = ((3 * b + a + 8) >> 4) as u8;
    }
}

/// libjpeg's fixed point: 16 fraction bits.
const BITS: i32 = 16;
const HALF: i32 = 1 << (BITS - 1);

/// `x` in libjpeg's fixed point, rounded.
const fn fixed(x: f64) -> i32 {
    (x * (1 << BITS) as f64 + 0.5) as i32
}

/// libjpeg's YCbCr → RGB (`jdcolor.c`) in its fixed point, a row at a time: computed into one
/// row per colour (straight loops the compiler vectorizes), then interleaved. Exactly its
/// tables' values: `R = Y + round(1.402·Cr')`, `G = Y + floor((-0.34414·Cb' - 0.71414·Cr') +
/// ½)`, `B = Y + round(1.772·Cb')` in 16-bit fixed point, with `Cb' = Cb - 128`.
#[derive(Default)]
struct YccToRgb {
    planes: [Vec<u8>; 3],
}

impl YccToRgb {
    /// One row of luma and (upsampled) chroma as interleaved RGB, `C` bytes a pixel (the
    /// fourth, if any, left as it is).
    fn row<const C: usize>(&mut self, y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
        const CR_R: i32 = fixed(1.40200);
        const CB_B: i32 = fixed(1.77200);
        const CR_G: i32 = fixed(0.71414);
        const CB_G: i32 = fixed(0.34414);
        let n = y.len();
        let [r, g, b] = &mut self.planes;
        for plane in [&mut *r, &mut *g, &mut *b] {
            plane.resize(n, 0);
        }
        let (cb, cr) = (&cb[..n], &cr[..n]);
        for i in 0..n {
            let (luma, cb, cr) = (i32::from(y[i]), i32::from(cb[i]) - 128, i32::from(cr[i]) - 128);
            r[i] = (luma + ((CR_R * cr + HALF) >> BITS)).clamp(0, 255) as u8;
            g[i] = (luma + ((HALF - CB_G * cb - CR_G * cr) >> BITS)).clamp(0, 255) as u8;
            b[i] = (luma + ((CB_B * cb + HALF) >> BITS)).clamp(0, 255) as u8;
        }
        for (((px, &r), &g), &b) in out.chunks_exact_mut(C).zip(r.iter()).zip(g.iter()).zip(b.iter()) {
            px[0] = r;
            px[1] = g;
            px[2] = b;
        }
    }
}

/// libjpeg's RGB → gray (`rgb_gray_convert`): its luma weights in fixed point, rounded.
fn gray(r: u8, g: u8, b: u8) -> u8 {
    let weighted = fixed(0.29900) * i32::from(r) + fixed(0.58700) * i32::from(g) + fixed(0.11400) * i32::from(b);
    ((weighted + HALF) >> BITS) as u8
}

/// Three component rows as interleaved RGB.
fn interleave(rows: &[&[u8]], out: &mut [u8]) {
    for (i, px) in out.chunks_exact_mut(3).enumerate() {
        px.copy_from_slice(&[rows[0][i], rows[1][i], rows[2][i]]);
    }
}

/// CMYK rows as RGB, as TensorFlow's decoder computes it.
fn cmyk_rgb_row(rows: &[&[u8]], inverted: bool, out: &mut [u8]) {
    for (i, px) in out.chunks_exact_mut(3).enumerate() {
        let k = u32::from(rows[3][i]);
        for (o, c) in px.iter_mut().zip([rows[0][i], rows[1][i], rows[2][i]]) {
            let c = u32::from(c);
            *o = match inverted {
                true => c * k / 255,
                false => (255 - c) * (255 - k) / 255,
            } as u8;
        }
    }
}

/// YCCK rows (YCbCr of the inverted CMY, and K) as RGB: libjpeg's YCCK → CMYK (the YCbCr
/// conversion, complemented), then Adobe CMYK's conversion.
fn ycck_rgb_row(rows: &[&[u8]], ycc: &mut YccToRgb, out: &mut [u8]) {
    ycc.row::<3>(rows[0], rows[1], rows[2], out);
    for (px, &k) in out.chunks_exact_mut(3).zip(rows[3]) {
        // The YCbCr conversion gives 255 - (the stored, inverted CMY): c·k/255 of those.
        px.iter_mut().for_each(|v| *v = (u32::from(255 - *v) * u32::from(k) / 255) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plane(samples: Vec<u8>, width: usize, h_factor: usize, v_factor: usize) -> Plane {
        let height = samples.len() / width;
        Plane { samples, width, height, h_factor, v_factor }
    }

    #[test]
    fn fancy_upsampling_repeats_the_last_real_sample_at_the_edges() {
        // libjpeg's h2v1 over [10, 20, 40]: 10, (30+20+2)/4, (60+10+1)/4, (60+40+2)/4,
        // (120+20+1)/4, 40.
        let mut out = [0u8; 6];
        fancy_h2v1(&[10, 20, 40], &mut out);
        assert_eq!(out, [10, 13, 17, 25, 35, 40]);
        // h2v2 of the row over itself: column sums 40, 80, 160; (4·40 + 8)/16, (120 + 80 + 7)/16,
        // (240 + 40 + 8)/16, (240 + 160 + 7)/16, (480 + 80 + 8)/16, (4·160 + 7)/16.
        let mut out = [0u8; 6];
        fancy_h2v2(&[10, 20, 40], &[10, 20, 40], &mut Vec::new(), &mut out);
        assert_eq!(out, [10, 12, 18, 25, 35, 40]);
    }

    #[test]
    fn narrow_subsampled_components_are_replicated_not_filtered() {
        // A 3-pixel-wide 4:2:2 image: two chroma samples, which libjpeg replicates.
        let planes =
            [plane(vec![100, 100, 100], 3, 2, 1), plane(vec![128, 200], 2, 1, 1), plane(vec![128, 128], 2, 1, 1)];
        let mut out = vec![0u8; 9];
        pixels(&planes, Encoding::YCbCr, 3, 1, 3, &mut out).unwrap();
        // Pixels 0 and 1 share Cb 128 (gray); pixel 2 has Cb 200: green 100 + floor((-22554·72 +
        // 32768) / 65536) = 75, blue 100 + floor((116130·72 + 32768) / 65536) = 228.
        assert_eq!(out[..6], [100, 100, 100, 100, 100, 100]);
        assert_eq!(out[6..], [100, 75, 228]);
    }

    #[test]
    fn colour_conversions_are_libjpegs() {
        let mut ycc = YccToRgb::default();
        let mut px = [0u8; 3];
        ycc.row::<3>(&[128], &[128], &[128], &mut px);
        assert_eq!(px, [128, 128, 128]);
        ycc.row::<3>(&[76], &[85], &[255], &mut px);
        assert_eq!(px, [254, 0, 0], "pure red's YCbCr");
        assert_eq!(gray(255, 0, 0), 76);
        assert_eq!(gray(255, 255, 255), 255);
        // Adobe CMYK holds 255 - ink: no ink is white.
        let mut rgb = [0u8; 3];
        cmyk_rgb_row(&[&[255], &[255], &[255], &[255]], true, &mut rgb);
        assert_eq!(rgb, [255, 255, 255]);
        cmyk_rgb_row(&[&[0], &[0], &[0], &[0]], false, &mut rgb);
        assert_eq!(rgb, [255, 255, 255]);
    }

    #[test]
    fn alpha_is_opaque_and_gray_comes_from_luma() {
        let planes = [plane(vec![7, 9], 2, 1, 1)];
        let mut out = vec![0u8; 8];
        pixels(&planes, Encoding::Gray, 2, 1, 4, &mut out).unwrap();
        assert_eq!(out, [7, 7, 7, 255, 9, 9, 9, 255]);
        let planes = [plane(vec![50], 1, 1, 1), plane(vec![0], 1, 1, 1), plane(vec![255], 1, 1, 1)];
        let mut out = vec![0u8; 1];
        pixels(&planes, Encoding::YCbCr, 1, 1, 1, &mut out).unwrap();
        assert_eq!(out, [50]);
    }
}

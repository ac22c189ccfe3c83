//! The hand-written limits of the image workloads (w5, w7): two threads, each decoding its
//! files' JPEGs with flumen's decoder (whole images; zune-jpeg's planes, libjpeg's
//! upsampling and colour: the pixels the pipeline makes), cropping, mirroring and normalizing straight
//! into its own reused batch buffer, with no engine in between. The random draws are
//! SplitMix64's, which the checksum (rows) does not see.

use std::hint::black_box;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use flumen::crates::udf::image::decode::{self as jpeg, Format};

use crate::limit::{each_feature, fields, on_threads, records, Outcome, THREADS};
use crate::workload_data::Rng;

const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Decodes `jpeg` to RGB into `out` (resized to fit); its (height, width).
fn decode(bytes: &[u8], out: &mut Vec<u8>, what: &str) -> Result<(usize, usize), String> {
    let header = jpeg::header(Format::Jpeg, bytes).map_err(|e| format!("{what}: {e}"))?;
    out.clear();
    jpeg::decode(&header, bytes, 3, None, out).map_err(|e| format!("{what}: {e}"))
}

/// Writes `pixels` (`h` x `w` RGB, rows of `stride` pixels from `(top, left)`) mirrored or
/// not, as normalized float32 values, into `out`.
#[allow(clippy::too_many_arguments)]
fn normalize_into(
    pixels: &[u8],
    stride: usize,
    (top, left): (usize, usize),
    h: usize,
    w: usize,
    mirror: bool,
    out: &mut [f32],
) {
    let scale: [f32; 3] = std::array::from_fn(|c| 1.0 / (255.0 * STD[c]));
    let shift: [f32; 3] = std::array::from_fn(|c| -MEAN[c] / STD[c]);
    for y in 0..h {
        let row = &pixels[((top + y) * stride + left) * 3..][..w * 3];
        let dst = &mut out[y * w * 3..][..w * 3];
        for x in 0..w {
            let s = if mirror { (w - 1 - x) * 3 } else { x * 3 };
            for c in 0..3 {
                dst[x * 3 + c] = f32::from(row[s + c]) * scale[c] + shift[c];
            }
        }
    }
}

/// w5: per file, each Example's JPEG decoded, a random 112x112 window mirrored at random and
/// normalized into a batch of 128.
pub fn w5(files: &[String]) -> Result<Outcome, String> {
    const SIDE: usize = 112;
    const BATCH: usize = 128;
    let per_file = on_threads(files.len(), |i| {
        let (mut rows, mut decoded, mut rng) = (0u64, Vec::new(), Rng(i as u64));
        let mut batch = vec![0f32; BATCH * SIDE * SIDE * 3];
        records(&files[i], |record| {
            let mut image = None;
            each_feature(record, |name, list| {
                if name == b"image" {
                    image = Some(fields(list).next()??.1);
                }
                Some(())
            })
            .ok_or_else(|| format!("{}: malformed Example", files[i]))?;
            let jpeg = image.ok_or_else(|| format!("{}: no image", files[i]))?;
            let (h, w) = decode(jpeg, &mut decoded, &files[i])?;
            let top = rng.int(0, (h - SIDE + 1) as i64) as usize;
            let left = rng.int(0, (w - SIDE + 1) as i64) as usize;
            let slot = &mut batch[(rows as usize % BATCH) * SIDE * SIDE * 3..][..SIDE * SIDE * 3];
            normalize_into(&decoded, w, (top, left), SIDE, SIDE, rng.int(0, 2) == 1, slot);
            rows += 1;
            if (rows as usize).is_multiple_of(BATCH) {
                black_box(&batch);
            }
            Ok(())
        })?;
        Ok(rows)
    })?;
    let rows: u64 = per_file.iter().sum();
    Ok(Outcome { rows, batches: rows.div_ceil(128), checksum: rows as f64 })
}

/// w7: each file read, decoded whole, a torchvision random-resized-crop window resized to
/// 224x224 (bilinear, fast_image_resize), mirrored at random and normalized into a batch
/// of 32.
pub fn w7(files: &[String]) -> Result<Outcome, String> {
    const SIDE: usize = 224;
    const BATCH: usize = 32;
    let per_thread = on_threads(THREADS, |t| {
        let (mut rows, mut decoded, mut rng) = (0u64, Vec::new(), Rng(t as u64));
        let mut resized = vec![0u8; SIDE * SIDE * 3];
        let mut batch = vec![0f32; BATCH * SIDE * SIDE * 3];
        let mut resizer = Resizer::new();
        for path in files.iter().skip(t).step_by(THREADS) {
            let jpeg = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
            let (h, w) = decode(&jpeg, &mut decoded, path)?;
            let (top, left, ch, cw) = window(h, w, &mut rng);
            let src = ImageRef::new(w as u32, h as u32, &decoded, PixelType::U8x3).map_err(|e| e.to_string())?;
            let mut dst = Image::from_slice_u8(SIDE as u32, SIDE as u32, &mut resized, PixelType::U8x3)
                .map_err(|e| e.to_string())?;
            let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(
                left as f64,
                top as f64,
                cw as f64,
                ch as f64,
            );
            resizer.resize(&src, &mut dst, &options).map_err(|e| e.to_string())?;
            let slot = &mut batch[(rows as usize % BATCH) * SIDE * SIDE * 3..][..SIDE * SIDE * 3];
            normalize_into(&resized, SIDE, (0, 0), SIDE, SIDE, rng.int(0, 2) == 1, slot);
            rows += 1;
            if (rows as usize).is_multiple_of(BATCH) {
                black_box(&batch);
            }
        }
        Ok(rows)
    })?;
    let rows: u64 = per_thread.iter().sum();
    Ok(Outcome { rows, batches: rows.div_ceil(32), checksum: rows as f64 })
}

/// torchvision's random-resized-crop window (area 0.08..1, aspect 3/4..4/3, ten tries, then
/// the whole image): (top, left, height, width).
fn window(h: usize, w: usize, rng: &mut Rng) -> (usize, usize, usize, usize) {
    let area = (h * w) as f64;
    for _ in 0..10 {
        let target = area * (0.08 + 0.92 * rng.uniform());
        let aspect = ((3.0f64 / 4.0).ln() + ((4.0f64 / 3.0).ln() - (3.0f64 / 4.0).ln()) * rng.uniform()).exp();
        let cw = (target * aspect).sqrt().round() as usize;
        let ch = (target / aspect).sqrt().round() as usize;
        if cw > 0 && cw <= w && ch > 0 && ch <= h {
            let top = rng.int(0, (h - ch + 1) as i64) as usize;
            let left = rng.int(0, (w - cw + 1) as i64) as usize;
            return (top, left, ch, cw);
        }
    }
    (0, 0, h, w)
}

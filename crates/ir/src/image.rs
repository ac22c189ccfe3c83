//! Typing of the image functions ([`Func::is_image_function`]).
//!
//! An image is a dense `[height, width, channels]` tensor field. A decoder's height and
//! width vary per element (`[-1, -1, c]`, tf.io.decode_jpeg's shape); a crop or resize to a
//! literal size fixes them, after which elementwise expressions, `normalize` and `batch`
//! apply as to any fixed tensor. Every size, seed and range is a literal, so a plan's
//! shapes are known when it is built.
//!
//! The functions that draw random numbers ([`Func::draws_random`]) take a seed literal;
//! their draws are keyed by (seed, epoch, the element's position in the input of the map
//! that calls them), which the runtime supplies, so an element gets the same crop whatever
//! the parallelism and after a checkpoint restore.

use crate::dtype::DType;
use crate::expr::{int_literal, number_literal, Expr, Func, Scalar};

/// The resize methods `resize` accepts.
pub const RESIZE_METHODS: [&str; 5] = ["nearest", "bilinear", "bicubic", "area", "lanczos3"];

/// The dtypes `convert_image_dtype` converts uint8 images to, scaled to `[0, 1]`: the
/// float32 value `v * (1 / 255)`, rounded to nearest even for the 16-bit ones.
pub const CONVERTED_DTYPES: [&str; 3] = ["float32", "float16", "bfloat16"];

/// Images larger than this many pixels are refused before anything is allocated for them.
pub const MAX_PIXELS: u64 = 1 << 28;

type Typed = std::result::Result<(DType, Vec<i64>), String>;

/// The type and per-element shape of image function `func` over an argument of type `arg`
/// and literal arguments `rest`, or why the call is ill-typed.
pub(crate) fn call_type(func: Func, arg: (DType, Vec<i64>), rest: &[Expr]) -> Typed {
    let name = func.name();
    let (t, shape) = arg;
    if matches!(func, Func::DecodeJpeg | Func::DecodePng | Func::DecodeImage | Func::DecodeJpegRows) {
        if t != DType::Binary || !shape.is_empty() {
            return Err(format!("{name} takes a scalar bytes field, got {t}{shape:?}"));
        }
        let [channels] = rest else {
            return Err(format!("{name} takes bytes and a channel count, got {} argument(s)", rest.len() + 1));
        };
        return match int_literal(channels) {
            Some(c @ (1 | 3 | 4)) => Ok((DType::UInt8, vec![-1, -1, c])),
            _ => Err(format!("{name}'s channel count must be 1, 3 or 4, got {channels}")),
        };
    }
    let [h, w, c] = shape[..] else {
        return Err(format!("{name} takes an image, a [height, width, channels] tensor, got shape {shape:?}"));
    };
    let seed = |e: Option<&Expr>| match e.and_then(int_literal) {
        Some(_) => Ok(()),
        None => Err(format!("{name}'s seed must be an integer literal")),
    };
    let size = |e: &Expr, what: &str| match int_literal(e) {
        Some(v) if v > 0 && v <= i64::from(u16::MAX) => Ok(v),
        _ => Err(format!("{name}'s {what} must be a positive integer literal up to 65535, got {e}")),
    };
    let fits = |oh: i64, ow: i64, top: i64, left: i64| {
        if (h >= 0 && top + oh > h) || (w >= 0 && left + ow > w) {
            return Err(format!("{name}: a {oh}x{ow} window at ({top}, {left}) does not fit a {h}x{w} image"));
        }
        Ok(())
    };
    let arity = |n: usize| {
        if rest.len() == n {
            Ok(())
        } else {
            Err(format!("{name} takes an image and {n} more argument(s), got {}", rest.len()))
        }
    };
    // These move values without computing with them, for every dtype the kernels store.
    let moves = matches!(
        func,
        Func::Crop
            | Func::CentralCrop
            | Func::RandomCrop
            | Func::FlipLeftRight
            | Func::FlipUpDown
            | Func::RandomFlipLeftRight
            | Func::RandomFlipUpDown
            | Func::HwcToChw
    );
    if moves && !matches!(t, DType::UInt8 | DType::Float32 | DType::Float16 | DType::BFloat16) {
        return Err(format!("{name} takes a uint8, float32, float16 or bfloat16 image, got {t}"));
    }
    match func {
        Func::Resize => {
            arity(3)?;
            uint8(name, t)?;
            let (oh, ow) = (size(&rest[0], "height")?, size(&rest[1], "width")?);
            match &rest[2] {
                Expr::Literal(Scalar::Utf8(m)) if RESIZE_METHODS.contains(&m.as_str()) => Ok((t, vec![oh, ow, c])),
                other => Err(format!("{name}'s method must be one of {RESIZE_METHODS:?}, got {other}")),
            }
        }
        Func::Crop => {
            arity(4)?;
            let offset = |e: &Expr| int_literal(e).filter(|v| (0..=i64::from(u16::MAX)).contains(v));
            let (Some(top), Some(left)) = (offset(&rest[0]), offset(&rest[1])) else {
                return Err(format!("{name}'s offsets must be non-negative integer literals"));
            };
            let (oh, ow) = (size(&rest[2], "height")?, size(&rest[3], "width")?);
            fits(oh, ow, top, left)?;
            Ok((t, vec![oh, ow, c]))
        }
        Func::CentralCrop => {
            arity(1)?;
            let fraction = number_literal(&rest[0]).filter(|f| *f > 0.0 && *f <= 1.0);
            let Some(fraction) = fraction else {
                return Err(format!("{name}'s fraction must be a number literal in (0, 1], got {}", rest[0]));
            };
            let keep = |d: i64| if d < 0 { -1 } else { central_window(d as usize, fraction).1 as i64 };
            Ok((t, vec![keep(h), keep(w), c]))
        }
        Func::RandomCrop => {
            arity(3)?;
            let (oh, ow) = (size(&rest[0], "height")?, size(&rest[1], "width")?);
            seed(rest.get(2))?;
            fits(oh, ow, 0, 0)?;
            Ok((t, vec![oh, ow, c]))
        }
        Func::RandomResizedCrop => {
            arity(7)?;
            uint8(name, t)?;
            let (oh, ow) = (size(&rest[0], "height")?, size(&rest[1], "width")?);
            seed(rest.get(2))?;
            let range = |i: usize| match (number_literal(&rest[i]), number_literal(&rest[i + 1])) {
                (Some(lo), Some(hi)) if lo > 0.0 && lo <= hi => Ok((lo, hi)),
                _ => Err(format!(
                    "{name}'s ranges must be number literals 0 < lo <= hi, got {} and {}",
                    rest[i],
                    rest[i + 1]
                )),
            };
            let (_, scale_hi) = range(3)?;
            range(5)?;
            if scale_hi > 1.0 {
                return Err(format!("{name}'s scale is a fraction of the area, at most 1, got {scale_hi}"));
            }
            Ok((t, vec![oh, ow, c]))
        }
        Func::FlipLeftRight | Func::FlipUpDown => {
            arity(0)?;
            Ok((t, shape))
        }
        Func::RandomFlipLeftRight | Func::RandomFlipUpDown => {
            arity(1)?;
            seed(rest.first())?;
            Ok((t, shape))
        }
        Func::HwcToChw => {
            arity(0)?;
            if h < 0 || w < 0 {
                return Err(format!("{name} takes an image of a fixed size (crop or resize it first), got {shape:?}"));
            }
            Ok((t, vec![c, h, w]))
        }
        Func::ConvertImageDtype => {
            arity(1)?;
            uint8(name, t)?;
            match &rest[0] {
                Expr::Literal(Scalar::Utf8(d)) if CONVERTED_DTYPES.contains(&d.as_str()) => {
                    Ok((DType::from_name(d).unwrap_or(DType::Float32), shape))
                }
                other => Err(format!("{name} converts uint8 to one of {CONVERTED_DTYPES:?}, got {other}")),
            }
        }
        Func::RandomBrightness | Func::RandomContrast | Func::RandomSaturation => {
            if t != DType::Float32 {
                return Err(format!("{name} takes a float32 image (convert_image_dtype first), got {t}"));
            }
            let numbers = if func == Func::RandomBrightness { 1 } else { 2 };
            arity(numbers + 1)?;
            let values: Vec<f64> = rest[..numbers].iter().filter_map(number_literal).collect();
            if values.len() != numbers || values.iter().any(|v| *v < 0.0) || (numbers == 2 && values[0] > values[1]) {
                return Err(format!("{name}'s factors must be number literals, non-negative, lower <= upper"));
            }
            seed(rest.get(numbers))?;
            if func == Func::RandomSaturation && c != 3 {
                return Err(format!("{name} takes an RGB image (3 channels), got {c}"));
            }
            Ok((t, shape))
        }
        other => unreachable!("{} is not an image function", other.name()),
    }
}

fn uint8(name: &str, t: DType) -> std::result::Result<(), String> {
    if t == DType::UInt8 {
        Ok(())
    } else {
        Err(format!("{name} takes a uint8 image, got {t}"))
    }
}

/// The start and size of `central_crop`'s window along a dim of `size`, as
/// tf.image.central_crop computes them.
pub fn central_window(size: usize, fraction: f64) -> (usize, usize) {
    let start = ((size as f64 - size as f64 * fraction) / 2.0) as usize;
    (start, size - 2 * start)
}

/// The hidden column the runtime adds under a map whose functions draw random numbers:
/// one `u64` key per element, mixed from the iteration's and epoch's seed salt and the
/// element's position in the map's input. It is never part of an element spec.
pub const ELEMENT_KEY: &str = "\u{1}element key";

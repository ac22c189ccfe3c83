//! The window a crop keeps, chosen from the image's dims (and, for the random crops, the
//! element's draws) alone, so that it is known before the image is decoded.

use flumen_ir::expr::{int_literal, number_literal};
use flumen_ir::image::central_window;
use flumen_ir::{Error, Expr, Func, Result};

use super::random::Draws;

/// A rectangle of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl Window {
    /// The row below the window.
    pub fn bottom(&self) -> usize {
        self.top + self.height
    }
}

/// A crop function with its literal arguments.
#[derive(Debug, Clone, Copy)]
pub enum Cropper {
    /// `crop(image, top, left, height, width)`.
    Fixed(Window),
    /// `central_crop(image, fraction)`.
    Central(f64),
    /// `random_crop(image, height, width, seed)`.
    Random {
        /// Rows kept.
        height: usize,
        /// Columns kept.
        width: usize,
        /// The call's seed.
        seed: i64,
    },
    /// `random_resized_crop(...)`'s window (the resize comes after).
    RandomResized {
        /// The call's seed.
        seed: i64,
        /// The range of the window's area, as a fraction of the image's.
        scale: (f64, f64),
        /// The range of the window's aspect ratio (width / height).
        ratio: (f64, f64),
    },
}

fn int(e: &Expr) -> usize {
    int_literal(e).unwrap_or(0).max(0) as usize
}

fn num(e: &Expr) -> f64 {
    number_literal(e).unwrap_or(0.0)
}

impl Cropper {
    /// The cropper of call `func(image, rest...)`, if `func` crops (arguments typed already).
    pub fn of(func: Func, rest: &[Expr]) -> Option<Cropper> {
        Some(match (func, rest) {
            (Func::Crop, [t, l, h, w]) => {
                Cropper::Fixed(Window { top: int(t), left: int(l), height: int(h), width: int(w) })
            }
            (Func::CentralCrop, [f]) => Cropper::Central(num(f)),
            (Func::RandomCrop, [h, w, s]) => Cropper::Random { height: int(h), width: int(w), seed: int_literal(s)? },
            (Func::RandomResizedCrop, [_, _, s, a, b, c, d]) => {
                Cropper::RandomResized { seed: int_literal(s)?, scale: (num(a), num(b)), ratio: (num(c), num(d)) }
            }
            _ => return None,
        })
    }

    /// The window kept of a `height` x `width` image, for the element of `key`.
    pub fn window(&self, height: usize, width: usize, key: Option<u64>) -> Result<Window> {
        let too_small =
            |h: usize, w: usize| Error::Expr(format!("a {h}x{w} crop does not fit a {height}x{width} image"));
        Ok(match *self {
            Cropper::Fixed(window) => {
                if window.bottom() > height || window.left + window.width > width {
                    return Err(too_small(window.height, window.width));
                }
                window
            }
            Cropper::Central(fraction) => {
                let ((top, h), (left, w)) = (central_window(height, fraction), central_window(width, fraction));
                Window { top, left, height: h, width: w }
            }
            Cropper::Random { height: h, width: w, seed } => {
                if h > height || w > width {
                    return Err(too_small(h, w));
                }
                let mut draws = Draws::new(key.unwrap_or(0), seed, Func::RandomCrop);
                let top = draws.below(height - h + 1);
                Window { top, left: draws.below(width - w + 1), height: h, width: w }
            }
            Cropper::RandomResized { seed, scale, ratio } => random_resized_window(
                height,
                width,
                Draws::new(key.unwrap_or(0), seed, Func::RandomResizedCrop),
                scale,
                ratio,
            ),
        })
    }

    /// Whether the window depends on the element's key.
    pub fn is_random(&self) -> bool {
        matches!(self, Cropper::Random { .. } | Cropper::RandomResized { .. })
    }
}

/// torchvision's `RandomResizedCrop.get_params`: ten tries at a window of area fraction
/// drawn from `scale` and aspect ratio drawn log-uniformly from `ratio`, then the largest
/// central window within the ratio range.
fn random_resized_window(
    height: usize,
    width: usize,
    mut draws: Draws,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Window {
    let area = (height * width) as f64;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * draws.between(scale.0, scale.1);
        let aspect = draws.between(log_lo, log_hi).exp();
        let w = (target * aspect).sqrt().round() as usize;
        let h = (target / aspect).sqrt().round() as usize;
        if 0 < w && w <= width && 0 < h && h <= height {
            let top = draws.below(height - h + 1);
            let left = draws.below(width - w + 1);
            return Window { top, left, height: h, width: w };
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (h, w) = if in_ratio < ratio.0 {
        (((width as f64 / ratio.0).round() as usize).clamp(1, height), width)
    } else if in_ratio > ratio.1 {
        (height, ((height as f64 * ratio.1).round() as usize).clamp(1, width))
    } else {
        (height, width)
    };
    Window { top: (height - h) / 2, left: (width - w) / 2, height: h, width: w }
}

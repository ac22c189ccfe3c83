//! Resizing uint8 images (fast_image_resize: separable convolution with SIMD).
//!
//! The convolution filters scale with the downscale factor, so shrinking antialiases as
//! PIL and torchvision (`antialias=True`) do; tf.image.resize without `antialias` samples
//! instead, so results differ from TensorFlow's by interpolation, not by geometry.

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use flumen_ir::{Error, Result};

use super::window::Window;

/// How `resize` interpolates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The nearest pixel.
    Nearest,
    /// Bilinear (triangle filter).
    Bilinear,
    /// Bicubic (Catmull-Rom).
    Bicubic,
    /// The mean of the covered pixels (box filter).
    Area,
    /// Lanczos with 3 lobes.
    Lanczos3,
}

impl Method {
    /// The method named `name` (one of `flumen_ir::image::RESIZE_METHODS`).
    pub fn from_name(name: &str) -> Option<Method> {
        Some(match name {
            "nearest" => Method::Nearest,
            "bilinear" => Method::Bilinear,
            "bicubic" => Method::Bicubic,
            "area" => Method::Area,
            "lanczos3" => Method::Lanczos3,
            _ => return None,
        })
    }

    /// How many source rows below a window the filter reads when it shrinks the window's
    /// `rows` to `out_rows` (its support, scaled by the shrink factor).
    pub fn rows_below(self, rows: usize, out_rows: usize) -> usize {
        let support = match self {
            Method::Nearest => 0.0,
            Method::Area => 0.5,
            Method::Bilinear => 1.0,
            Method::Bicubic => 2.0,
            Method::Lanczos3 => 3.0,
        };
        (support * (rows as f64 / out_rows.max(1) as f64).max(1.0)).ceil() as usize + 1
    }

    fn algorithm(self) -> ResizeAlg {
        match self {
            Method::Nearest => ResizeAlg::Nearest,
            Method::Bilinear => ResizeAlg::Convolution(FilterType::Bilinear),
            Method::Bicubic => ResizeAlg::Convolution(FilterType::CatmullRom),
            Method::Area => ResizeAlg::Convolution(FilterType::Box),
            Method::Lanczos3 => ResizeAlg::Convolution(FilterType::Lanczos3),
        }
    }
}

thread_local! {
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resizes `window` of the `height` x `width` x `channels` image `src` into `out`, an
/// `out_height` x `out_width` image of the same channels.
#[allow(clippy::too_many_arguments)]
pub fn resize(
    src: &[u8],
    [height, width, channels]: [usize; 3],
    window: Window,
    [out_height, out_width]: [usize; 2],
    method: Method,
    out: &mut [u8],
) -> Result<()> {
    let pixel = match channels {
        1 => PixelType::U8,
        2 => PixelType::U8x2,
        3 => PixelType::U8x3,
        4 => PixelType::U8x4,
        c => return Err(Error::Expr(format!("resize takes 1 to 4 channels, got {c}"))),
    };
    let fail = |e: &dyn std::fmt::Display| Error::Expr(format!("resize: {e}"));
    let src = ImageRef::new(width as u32, height as u32, src, pixel).map_err(|e| fail(&e))?;
    let mut dst = Image::from_slice_u8(out_width as u32, out_height as u32, out, pixel).map_err(|e| fail(&e))?;
    let options = ResizeOptions::new().resize_alg(method.algorithm()).use_alpha(false).crop(
        window.left as f64,
        window.top as f64,
        window.width as f64,
        window.height as f64,
    );
    RESIZER.with_borrow_mut(|r| r.resize(&src, &mut dst, &options)).map_err(|e| fail(&e))
}

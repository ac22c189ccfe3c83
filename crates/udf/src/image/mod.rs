//! The image functions: decoders, crops, resizes, flips and pixel operations over image
//! fields (see `flumen_ir::image` for their types).
//!
//! Each is a tensor function ([`Func::is_tensor_function`]): computed over the whole chunk
//! before the expression around it, one image after another. A crop whose image is
//! `decode_jpeg_rows(bytes)` (what the optimizer writes for `crop(decode_jpeg(bytes))`)
//! chooses its window from the JPEG's header and decodes only the rows down to the
//! window's bottom ([`decode`]'s row-limited decode); the pixels it keeps are the same.
//! `normalize` over a flipped crop is one pass ([`fused`]).

pub mod column;
pub mod decode;
pub mod fused;
pub mod jpeg_pixels;
pub mod random;
pub mod resample;
pub mod slice_reader;
pub mod window;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{ArrowPrimitiveType, DataType, Float16Type, Float32Type, UInt16Type, UInt8Type};
use flumen_ir::expr::{int_literal, number_literal};
use flumen_ir::{Error, Expr, Func, Result, Scalar};
use half::f16;

use crate::eval::at;
use column::{Dims, Images};
use decode::Format;
use resample::Method;
use window::{Cropper, Window};

/// The value of image function `func` (call `expr`) over `batch`.
pub(crate) fn evaluate(func: Func, args: &[Expr], batch: &RecordBatch, expr: &Expr) -> Result<ArrayRef> {
    let Some((arg, rest)) = args.split_first() else {
        return Err(at(format!("{} needs arguments", func.name()), expr));
    };
    // The transposition of a one-pass normalization writes the channel planes in that pass.
    if func == Func::HwcToChw && fused::applies(arg) {
        if let Some(value) = fused::evaluate_chw(arg, batch)? {
            return Ok(value);
        }
    }
    let keys = if func.draws_random() { Some(random::keys(batch, func)?) } else { None };
    let result = match func {
        Func::DecodeJpeg | Func::DecodePng | Func::DecodeImage | Func::DecodeJpegRows => {
            let channels = int_literal(&rest[0]).unwrap_or(3) as usize;
            decode_column(func, &value(arg, batch, 0)?, channels, &files(arg, batch)?)
        }
        Func::Crop | Func::CentralCrop | Func::RandomCrop => {
            let cropper = Cropper::of(func, rest).ok_or_else(|| at("bad crop arguments", expr))?;
            match encoded(arg) {
                Some((bytes, channels)) => {
                    let files = files(bytes, batch)?;
                    crop_encoded(&value(bytes, batch, 0)?, channels, cropper, None, keys, &files)
                }
                None => crop(&value(arg, batch, 3)?, cropper, keys),
            }
        }
        Func::Resize | Func::RandomResizedCrop => {
            let (cropper, method) = match func {
                Func::Resize => {
                    let Some(Expr::Literal(Scalar::Utf8(m))) = rest.get(2) else {
                        return Err(at("resize needs a method", expr));
                    };
                    (None, Method::from_name(m).ok_or_else(|| at(format!("unknown resize method {m}"), expr))?)
                }
                _ => (Cropper::of(func, rest), Method::Bilinear),
            };
            let size = [int_literal(&rest[0]).unwrap_or(1) as usize, int_literal(&rest[1]).unwrap_or(1) as usize];
            let resize = Resize { cropper, size, method };
            match encoded(arg) {
                Some((bytes, channels)) => {
                    let (whole, files) = (resize.cropper_or_whole(), files(bytes, batch)?);
                    crop_encoded(&value(bytes, batch, 0)?, channels, whole, Some(resize), keys, &files)
                }
                None => resized(&value(arg, batch, 3)?, resize, keys),
            }
        }
        _ => pixel_op(func, rest, &value(arg, batch, 3)?, keys),
    };
    result.map_err(|e| match e {
        Error::Expr(message) => at(message, expr),
        located => located,
    })
}

/// Where `bytes` comes from: the paths of the files it was read from when it is
/// `read_file(path)`, else the field or expression it is. A decode error names it.
pub(crate) fn files<'a>(bytes: &'a Expr, batch: &RecordBatch) -> Result<Files<'a>> {
    let paths = match bytes {
        Expr::Call { func: Func::ReadFile, args } if args.len() == 1 => {
            Some(cast(&value(&args[0], batch, 0)?, &DataType::Utf8).map_err(|e| Error::Expr(e.to_string()))?)
        }
        _ => None,
    };
    Ok(Files { paths, bytes })
}

/// Where each element's image bytes came from ([`files`]).
pub(crate) struct Files<'a> {
    /// Each element's file, when the bytes were read by `read_file`.
    paths: Option<ArrayRef>,
    /// The expression that gives the bytes.
    bytes: &'a Expr,
}

impl Files<'_> {
    /// `error`, a decode's, for the image of `row`: bad input in its file when the file is
    /// known, else in the field (or expression) the bytes came from. A bad image is the
    /// input's fault, not the plan's.
    fn name(&self, error: Error, row: usize) -> Error {
        let path = self.paths.as_ref().map(|p| p.as_string::<i32>()).filter(|p| p.is_valid(row));
        let source = match (path, self.bytes) {
            (Some(paths), _) => paths.value(row).to_string(),
            (None, Expr::Column(name)) => format!("field '{name}'"),
            (None, other) => other.to_string(),
        };
        match error {
            Error::Expr(message) => Error::data(flumen_ir::Location::source(source), message),
            error => error,
        }
    }
}

/// The value of `arg` over `batch`, `depth` list levels deep.
pub(crate) fn value(arg: &Expr, batch: &RecordBatch, depth: usize) -> Result<ArrayRef> {
    if let Expr::Column(name) = arg {
        return batch.column_by_name(name).cloned().ok_or_else(|| Error::Expr(format!("no field '{name}'")));
    }
    crate::eval::evaluate_output(arg, batch, depth, |e, flat| {
        crate::eval::evaluate_with_batch_dims(e, flat.batch(e)?, 0)
    })
}

/// The bytes and channels of `decode_jpeg_rows(bytes, channels)`, a decode the crop over it
/// may limit to the rows it needs.
pub(crate) fn encoded(arg: &Expr) -> Option<(&Expr, usize)> {
    match arg {
        Expr::Call { func: Func::DecodeJpegRows, args } => Some((&args[0], int_literal(args.get(1)?)? as usize)),
        _ => None,
    }
}

pub(crate) fn binary(column: &ArrayRef) -> Result<BinaryArray> {
    let column = if column.data_type() == &DataType::Binary {
        column.clone()
    } else {
        cast(column, &DataType::Binary).map_err(|e| Error::Expr(format!("image bytes: {e}")))?
    };
    Ok(column.as_binary::<i32>().clone())
}

fn format_for(func: Func, bytes: &[u8]) -> Result<Format> {
    let found = Format::sniff(bytes);
    match (func, found) {
        (Func::DecodePng, Some(Format::Png)) => Ok(Format::Png),
        (Func::DecodePng, _) => Err(Error::Expr("decode_png: not a PNG (bad signature)".into())),
        (Func::DecodeImage, Some(f)) => Ok(f),
        (Func::DecodeImage, None) => Err(Error::Expr("decode_image: neither a JPEG nor a PNG".into())),
        (_, Some(Format::Jpeg)) => Ok(Format::Jpeg),
        _ => Err(Error::Expr(format!("{}: not a JPEG (no SOI marker)", func.name()))),
    }
}

fn decode_column(func: Func, column: &ArrayRef, channels: usize, files: &Files<'_>) -> Result<ArrayRef> {
    let bytes = binary(column)?;
    let mut values = Vec::new();
    let mut dims = Vec::with_capacity(bytes.len());
    for r in 0..bytes.len() {
        if bytes.is_null(r) {
            dims.push((0, 0));
            continue;
        }
        let b = bytes.value(r);
        let decoded = format_for(func, b)
            .and_then(|format| decode::header(format, b))
            .and_then(|header| decode::decode(&header, b, channels, None, &mut values));
        dims.push(decoded.map_err(|e| files.name(e, r))?);
    }
    column::varying::<UInt8Type>(values, &dims, channels, bytes.nulls().cloned())
}

/// A resize, possibly of a crop's window first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resize {
    cropper: Option<Cropper>,
    size: [usize; 2],
    method: Method,
}

impl Resize {
    fn cropper_or_whole(&self) -> Cropper {
        self.cropper.unwrap_or(Cropper::Central(1.0))
    }
}

/// Whether an image column has fixed dims (fixed-size lists at its first two levels).
/// The `[h, w, c]` of a fixed-size image column, read from its type: a chunk whose images
/// are all null has no image to read them from.
fn fixed_dims(column: &ArrayRef) -> Option<[usize; 3]> {
    let DataType::FixedSizeList(rows, h) = column.data_type() else { return None };
    let DataType::FixedSizeList(pixels, w) = rows.data_type() else { return None };
    let DataType::FixedSizeList(_, c) = pixels.data_type() else { return None };
    Some([*h as usize, *w as usize, *c as usize])
}

fn is_fixed(column: &ArrayRef) -> bool {
    match column.data_type() {
        DataType::FixedSizeList(item, _) => matches!(item.data_type(), DataType::FixedSizeList(..)),
        _ => false,
    }
}

fn key_of(keys: Option<&[u64]>, row: usize) -> Option<u64> {
    keys.map(|k| k[row])
}

/// Copies `window` of `pixels` (`width` x `channels` per row) to `out`.
fn copy_window<T: Copy>(pixels: &[T], width: usize, channels: usize, w: Window, out: &mut Vec<T>) {
    for y in w.top..w.bottom() {
        let row = (y * width + w.left) * channels;
        out.extend_from_slice(&pixels[row..row + w.width * channels]);
    }
}

/// Output columns: fixed `[h, w, c]` when `fixed` holds those dims, else varying.
fn build<T: ArrowPrimitiveType>(
    values: Vec<T::Native>,
    dims: &[(usize, usize)],
    channels: usize,
    fixed: Option<[usize; 2]>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    match fixed {
        Some([h, w]) => Ok(column::fixed::<T>(values, [h, w, channels], nulls)),
        None => column::varying::<T>(values, dims, channels, nulls),
    }
}

fn crop(column: &ArrayRef, cropper: Cropper, keys: Option<&[u64]>) -> Result<ArrayRef> {
    match column_type(column)? {
        DataType::UInt8 => crop_typed::<UInt8Type>(column, cropper, keys),
        DataType::UInt16 => crop_typed::<UInt16Type>(column, cropper, keys),
        DataType::Float16 => crop_typed::<Float16Type>(column, cropper, keys),
        _ => crop_typed::<Float32Type>(column, cropper, keys),
    }
}

/// The leaf type of an image column: uint8, float32, or a 16-bit float's storage (float16,
/// or uint16 bits for bfloat16), which crops, flips and transposes move as they are.
fn column_type(column: &ArrayRef) -> Result<DataType> {
    let mut t = column.data_type().clone();
    while let DataType::FixedSizeList(item, _) | DataType::List(item) = t {
        t = item.data_type().clone();
    }
    match t {
        DataType::UInt8 | DataType::Float32 | DataType::UInt16 | DataType::Float16 => Ok(t),
        other => {
            Err(Error::Expr(format!("image functions take uint8, float32, float16 or bfloat16 images, got {other}")))
        }
    }
}

fn crop_typed<T: ArrowPrimitiveType>(column: &ArrayRef, cropper: Cropper, keys: Option<&[u64]>) -> Result<ArrayRef> {
    let images = Images::<T>::read(column, "crop")?;
    let mut values = Vec::new();
    let mut dims = Vec::with_capacity(images.rows.len());
    let mut channels = 0;
    for (r, image) in images.rows.iter().enumerate() {
        let Some(d) = image else {
            dims.push(None);
            continue;
        };
        channels = d.channels;
        let w = cropper.window(d.height, d.width, key_of(keys, r))?;
        copy_window(images.pixels(d), d.width, d.channels, w, &mut values);
        dims.push(Some((w.height, w.width)));
    }
    finish::<T>(values, dims, channels, column, &cropper)
}

/// Builds a crop's output: fixed when the crop's size is literal or its input was fixed.
fn finish<T: ArrowPrimitiveType>(
    mut values: Vec<T::Native>,
    dims: Vec<Option<(usize, usize)>>,
    channels: usize,
    column: &ArrayRef,
    cropper: &Cropper,
) -> Result<ArrayRef> {
    let nulls = column.logical_nulls();
    let fixed = match *cropper {
        Cropper::Fixed(w) => Some([w.height, w.width]),
        Cropper::Random { height, width, .. } => Some([height, width]),
        _ if is_fixed(column) => match dims.iter().flatten().next() {
            Some(&(h, w)) => Some([h, w]),
            // Every image null: the window the input's size gives.
            None => fixed_dims(column)
                .and_then(|[h, w, _]| cropper.window(h, w, None).ok())
                .map(|window| [window.height, window.width]),
        },
        _ => None,
    };
    let channels = if channels == 0 { image_channels(column) } else { channels };
    if let (Some([h, w]), true) = (fixed, dims.iter().any(Option::is_none)) {
        // Null rows hold zeros in a fixed-size column.
        let mut out = Vec::with_capacity(dims.len() * h * w * channels);
        let mut at = 0;
        for d in &dims {
            match d {
                Some(_) => {
                    out.extend_from_slice(&values[at..at + h * w * channels]);
                    at += h * w * channels;
                }
                None => out.resize(out.len() + h * w * channels, T::Native::default()),
            }
        }
        values = out;
    }
    let dims: Vec<(usize, usize)> = dims.iter().map(|d| d.unwrap_or((0, 0))).collect();
    build::<T>(values, &dims, channels, fixed, nulls)
}

/// The channel count of an image column's type (its innermost fixed-size list).
fn image_channels(column: &ArrayRef) -> usize {
    let mut t = column.data_type().clone();
    let mut last = 1;
    while let DataType::FixedSizeList(item, _) | DataType::List(item) = &t {
        if let DataType::FixedSizeList(_, n) = &t {
            last = *n as usize;
        }
        t = item.data_type().clone();
    }
    last
}

fn resized(column: &ArrayRef, resize: Resize, keys: Option<&[u64]>) -> Result<ArrayRef> {
    let images = Images::<UInt8Type>::read(column, "resize")?;
    let [oh, ow] = resize.size;
    let channels = image_channels(column);
    let mut values = vec![0u8; images.rows.len() * oh * ow * channels];
    for (r, image) in images.rows.iter().enumerate() {
        let Some(d) = image else { continue };
        let window = resize.cropper_or_whole().window(d.height, d.width, key_of(keys, r))?;
        let out = &mut values[r * oh * ow * channels..(r + 1) * oh * ow * channels];
        resample::resize(images.pixels(d), [d.height, d.width, d.channels], window, resize.size, resize.method, out)?;
    }
    Ok(column::fixed::<UInt8Type>(values, [oh, ow, channels], column.logical_nulls()))
}

/// Calls `each(row, pixels, width, window)` for each JPEG of `bytes` that is not null:
/// `window` chosen by `cropper` from the header, `pixels` the image decoded (`width` pixels
/// a row) down to the window's bottom, and the rows `resize`'s filter reads below it.
pub(crate) fn decoded_windows(
    bytes: &BinaryArray,
    channels: usize,
    cropper: Cropper,
    resize: Option<&Resize>,
    keys: Option<&[u64]>,
    files: &Files<'_>,
    mut each: impl FnMut(usize, &[u8], usize, Window) -> Result<()>,
) -> Result<()> {
    // The decoded image is read once, by `each`, then overwritten by the next: one buffer
    // per worker thread, its pages already mapped.
    SCRATCH.with_borrow_mut(|scratch| {
        for row in 0..bytes.len() {
            if bytes.is_null(row) {
                continue;
            }
            let b = bytes.value(row);
            let decoded =
                format_for(Func::DecodeJpegRows, b).and_then(|format| decode::header(format, b)).and_then(|header| {
                    let window = cropper.window(header.height, header.width, key_of(keys, row))?;
                    let below = resize.map_or(0, |r| r.method.rows_below(window.height, r.size[0]));
                    scratch.clear();
                    let (_, w) = decode::decode(&header, b, channels, Some(window.bottom() + below), scratch)?;
                    Ok((w, window))
                });
            let (w, window) = decoded.map_err(|e| files.name(e, row))?;
            each(row, scratch, w, window)?;
        }
        Ok(())
    })
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A crop (and resize) over JPEGs still encoded: each window is chosen from the header and
/// only the rows down to its bottom are decoded ([`decoded_windows`]).
fn crop_encoded(
    column: &ArrayRef,
    channels: usize,
    cropper: Cropper,
    resize: Option<Resize>,
    keys: Option<&[u64]>,
    files: &Files<'_>,
) -> Result<ArrayRef> {
    let bytes = binary(column)?;
    let mut values = Vec::new();
    let mut dims = vec![None; bytes.len()];
    if let Some(r) = &resize {
        values.resize(bytes.len() * r.size[0] * r.size[1] * channels, 0);
    }
    decoded_windows(&bytes, channels, cropper, resize.as_ref(), keys, files, |row, pixels, w, window| {
        match &resize {
            Some(r) => {
                let size = r.size[0] * r.size[1] * channels;
                let out = &mut values[row * size..(row + 1) * size];
                let h = pixels.len() / (w * channels);
                resample::resize(pixels, [h, w, channels], window, r.size, r.method, out)?;
                dims[row] = Some((r.size[0], r.size[1]));
            }
            None => {
                copy_window(pixels, w, channels, window, &mut values);
                dims[row] = Some((window.height, window.width));
            }
        }
        Ok(())
    })?;
    let nulls = bytes.nulls().cloned();
    if let Some(r) = resize {
        return Ok(column::fixed::<UInt8Type>(values, [r.size[0], r.size[1], channels], nulls));
    }
    let as_column: ArrayRef = std::sync::Arc::new(bytes);
    finish::<UInt8Type>(values, dims, channels, &as_column, &cropper)
}

fn pixel_op(func: Func, rest: &[Expr], column: &ArrayRef, keys: Option<&[u64]>) -> Result<ArrayRef> {
    if func == Func::ConvertImageDtype {
        let images = Images::<UInt8Type>::read(column, func.name())?;
        let pixels = images.rows.iter().flatten().flat_map(|d| images.pixels(d));
        let scaled = pixels.map(|&v| f32::from(v) * (1.0 / 255.0));
        // The 16-bit types round the float32 value: the same as casting the float32 image.
        return match rest.first() {
            Some(Expr::Literal(Scalar::Utf8(d))) if d == "float16" => {
                relayout::<UInt8Type, Float16Type>(column, &images, scaled.map(f16::from_f32).collect())
            }
            Some(Expr::Literal(Scalar::Utf8(d))) if d == "bfloat16" => {
                relayout::<UInt8Type, UInt16Type>(column, &images, scaled.map(crate::bfloat16::from_f32).collect())
            }
            _ => relayout::<UInt8Type, Float32Type>(column, &images, scaled.collect()),
        };
    }
    if matches!(func, Func::RandomBrightness | Func::RandomContrast | Func::RandomSaturation) {
        let images = Images::<Float32Type>::read(column, func.name())?;
        let seed = rest.last().and_then(int_literal).unwrap_or(0);
        let mut values = Vec::with_capacity(images.values.len());
        for (r, image) in images.rows.iter().enumerate() {
            if let Some(d) = image {
                let mut draws = random::Draws::new(key_of(keys, r).unwrap_or(0), seed, func);
                values.extend(jitter(func, rest, images.pixels(d), d.channels, &mut draws));
            }
        }
        return relayout::<Float32Type, Float32Type>(column, &images, values);
    }
    match column_type(column)? {
        DataType::UInt8 => pixel_typed::<UInt8Type>(func, rest, column, keys),
        DataType::UInt16 => pixel_typed::<UInt16Type>(func, rest, column, keys),
        DataType::Float16 => pixel_typed::<Float16Type>(func, rest, column, keys),
        _ => pixel_typed::<Float32Type>(func, rest, column, keys),
    }
}

/// A column laid out as `like` (fixed or varying, the same dims and nulls) over `values`:
/// the non-null images of `images`, transformed one value for one.
fn relayout<S: ArrowPrimitiveType, T: ArrowPrimitiveType>(
    like: &ArrayRef,
    images: &Images<S>,
    values: Vec<T::Native>,
) -> Result<ArrayRef> {
    let dims: Vec<(usize, usize)> = images.rows.iter().map(|d| d.map_or((0, 0), |d| (d.height, d.width))).collect();
    let fixed = if is_fixed(like) { fixed_dims(like) } else { None };
    let values = match fixed {
        Some([h, w, c]) => pad_nulls::<T>(values, &images.rows, h * w * c),
        None => values,
    };
    let fixed = fixed.map(|[h, w, _]| [h, w]);
    build::<T>(values, &dims, image_channels(like), fixed, like.logical_nulls())
}

fn pixel_typed<T: ArrowPrimitiveType>(
    func: Func,
    rest: &[Expr],
    column: &ArrayRef,
    keys: Option<&[u64]>,
) -> Result<ArrayRef> {
    let images = Images::<T>::read(column, func.name())?;
    let seed = rest.last().and_then(int_literal).unwrap_or(0);
    let mut values: Vec<T::Native> = Vec::with_capacity(images.values.len());
    for (r, image) in images.rows.iter().enumerate() {
        let Some(d) = image else { continue };
        let px = images.pixels(d);
        let (h, w, c) = (d.height, d.width, d.channels);
        let coin = || random::Draws::new(key_of(keys, r).unwrap_or(0), seed, func).uniform() < 0.5;
        match func {
            Func::FlipLeftRight | Func::RandomFlipLeftRight if func == Func::FlipLeftRight || coin() => {
                for row in px.chunks_exact(w * c) {
                    let at = values.len();
                    values.resize(at + w * c, T::Native::default());
                    fused::mirror_row(row, c, &mut values[at..]);
                }
            }
            Func::FlipUpDown | Func::RandomFlipUpDown if func == Func::FlipUpDown || coin() => {
                for y in (0..h).rev() {
                    values.extend_from_slice(&px[y * w * c..(y + 1) * w * c]);
                }
            }
            Func::HwcToChw => {
                for ch in 0..c {
                    values.extend(px.iter().skip(ch).step_by(c).copied());
                }
            }
            _ => values.extend_from_slice(px),
        }
    }
    if func == Func::HwcToChw {
        // [c, h, w] is three fixed levels (typing allows hwc_to_chw on fixed images only).
        let Some([h, w, c]) = fixed_dims(column) else {
            return Err(Error::Expr(format!("hwc_to_chw takes a fixed-size image, got {}", column.data_type())));
        };
        let chw = pad_nulls::<T>(values, &images.rows, h * w * c);
        return Ok(column::fixed::<T>(chw, [c, h, w], column.logical_nulls()));
    }
    relayout::<T, T>(column, &images, values)
}

/// `values` (of the images that are not null, `size` values each) with zeros for the null
/// ones, for a fixed-size column.
fn pad_nulls<T: ArrowPrimitiveType>(values: Vec<T::Native>, rows: &[Option<Dims>], size: usize) -> Vec<T::Native> {
    if rows.iter().all(Option::is_some) {
        return values;
    }
    let mut out = Vec::with_capacity(rows.len() * size);
    let mut at = 0;
    for r in rows {
        if r.is_some() {
            out.extend_from_slice(&values[at..at + size]);
            at += size;
        } else {
            out.resize(out.len() + size, T::Native::default());
        }
    }
    out
}

/// Brightness, contrast or saturation of one float image of `c` channels.
fn jitter(func: Func, rest: &[Expr], px: &[f32], c: usize, draws: &mut random::Draws) -> Vec<f32> {
    let n = |i: usize| rest.get(i).and_then(number_literal).unwrap_or(0.0);
    match func {
        Func::RandomBrightness => {
            let delta = draws.between(-n(0), n(0)) as f32;
            px.iter().map(|v| v + delta).collect()
        }
        Func::RandomContrast => {
            let factor = draws.between(n(0), n(1)) as f32;
            let means = channel_means(px, c);
            px.iter().enumerate().map(|(i, v)| (v - means[i % c]) * factor + means[i % c]).collect()
        }
        _ => {
            let factor = draws.between(n(0), n(1)) as f32;
            let mut out = Vec::with_capacity(px.len());
            for p in px.chunks_exact(3) {
                let gray = gray(p);
                out.extend(p.iter().map(|v| (gray + factor * (v - gray)).clamp(0.0, 1.0)));
            }
            out
        }
    }
}

/// Each channel's mean over the pixels of `image` (`c` values a pixel), summed in pixel
/// order: the fused pass ([`fused`]) must compute the same float32 sums as the steps.
fn channel_means(image: &[f32], c: usize) -> Vec<f32> {
    let pixels = (image.len() / c).max(1) as f32;
    (0..c).map(|ch| image.iter().skip(ch).step_by(c).sum::<f32>() / pixels).collect()
}

/// The luma of an RGB pixel (ITU-R 601, as torchvision's `rgb_to_grayscale`).
fn gray(p: &[f32]) -> f32 {
    0.2989 * p[0] + 0.587 * p[1] + 0.114 * p[2]
}

//! JPEG and PNG decoding (zune-jpeg, zune-png: pure Rust, SIMD), into `[h, w, c]` uint8.
//! A JPEG's component planes come from zune-jpeg and become pixels as libjpeg-turbo makes
//! them ([`super::jpeg_pixels`]).
//!
//! Dimensions are read from the header and checked against [`MAX_PIXELS`] before anything
//! is allocated for the pixels. A corrupt or truncated image is an error, never a panic.
//!
//! **Row-limited decode.** A baseline JPEG is decoded top to bottom, one MCU row after
//! another. When a crop needs only the rows above some `bottom`, MCU rows are pulled one by
//! one until `bottom + 1` rows, rounded up to whole MCU rows, are decoded, and the image ends
//! there: every row above the last is bit-identical to the whole image's (the last differs
//! only through chroma upsampling, which reads the row below). Progressive and other JPEGs are decoded
//! whole, and so is a file without its end marker (cut short: the whole decode reports
//! it). Corrupt data below the window is not read, so it is not reported either, as with
//! tf.image.decode_and_crop_jpeg; switch the rule `jpeg-row-decode` off to check whole
//! images.

use super::jpeg_pixels::{pixels, Encoding, Plane};
use super::slice_reader::SliceReader;

use flumen_ir::image::MAX_PIXELS;
use flumen_ir::{Error, Result};
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::{JpegDecoder, RawImcuRowStatus};
use zune_png::PngDecoder;

/// The formats the decoders read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG (JFIF, Exif, Adobe; baseline or progressive).
    Jpeg,
    /// PNG.
    Png,
}

impl Format {
    /// The format `bytes` begin like, if either.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else {
            None
        }
    }
}

/// Strict: data that ends before the image does is an error, as tf.io.decode_jpeg reports
/// it, not an image completed with gray.
fn options() -> DecoderOptions {
    DecoderOptions::default()
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
        .png_set_strip_to_8bit(true)
        .set_strict_mode(true)
}

/// Pixels (four bytes each, the most a decoder keeps per pixel) may take at most this many
/// bytes per byte of the encoded image, beyond [`SMALL_IMAGE`]: deflate cannot expand more
/// than 1032 times and a baseline JPEG about as much, so only crafted files (progressive
/// JPEGs of one long end-of-block run) come near, and are refused before anything is
/// allocated for them.
const MAX_EXPANSION: u64 = 1024;

/// Images up to this many bytes of pixels are decoded whatever their file's size.
const SMALL_IMAGE: u64 = 16 << 20;

fn check_size(what: &str, width: usize, height: usize, encoded: usize) -> Result<()> {
    let pixels = (width as u64) * (height as u64);
    if width == 0 || height == 0 || pixels > MAX_PIXELS {
        return Err(Error::Expr(format!(
            "{what}: a {width}x{height} image is refused (empty, or over {MAX_PIXELS} pixels)"
        )));
    }
    if 4 * pixels > SMALL_IMAGE.max(MAX_EXPANSION * encoded as u64) {
        return Err(Error::Expr(format!(
            "{what}: a {width}x{height} image from {encoded} bytes is refused: more than {MAX_EXPANSION} \
             bytes of pixels per byte of data is not a real image"
        )));
    }
    Ok(())
}

/// What a decoder needs to know of an image before decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format.
    pub format: Format,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// A sequential JPEG: decoded top to bottom in one scan order, so a row-limited decode
    /// can stop early.
    sequential: bool,
}

/// An image's header: its dims from the JPEG frame header or the PNG `IHDR` chunk, checked
/// against [`MAX_PIXELS`]. A header this scan cannot read is left to the decoder, whose
/// error names what is wrong.
pub fn header(format: Format, bytes: &[u8]) -> Result<Header> {
    let (what, scanned) = match format {
        Format::Jpeg => ("decode_jpeg", scan_jpeg(bytes)),
        Format::Png => ("decode_png", scan_png(bytes)),
    };
    let (width, height, sequential) = match scanned {
        Some(found) => found,
        None => {
            let dims = match format {
                Format::Jpeg => {
                    let mut d = JpegDecoder::new_with_options(SliceReader::new(bytes), options());
                    d.decode_headers().map(|_| d.dimensions()).map_err(|e| format!("{e:?}"))
                }
                Format::Png => {
                    let mut d = PngDecoder::new_with_options(SliceReader::new(bytes), options());
                    d.decode_headers().map(|_| d.dimensions()).map_err(|e| format!("{e:?}"))
                }
            };
            let (w, h) = dims
                .map_err(|e| Error::Expr(format!("{what}: {e}")))?
                .ok_or_else(|| Error::Expr(format!("{what}: no header")))?;
            (w, h, false)
        }
    };
    check_size(what, width, height, bytes.len())?;
    Ok(Header { format, width, height, sequential })
}

/// The dims of a JPEG from its frame header, and whether it is sequential.
fn scan_jpeg(bytes: &[u8]) -> Option<(usize, usize, bool)> {
    let mut at = 2;
    while at + 9 <= bytes.len() {
        if bytes[at] != 0xFF {
            return None;
        }
        let marker = bytes[at + 1];
        match marker {
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                let height = usize::from(u16::from_be_bytes([bytes[at + 5], bytes[at + 6]]));
                let width = usize::from(u16::from_be_bytes([bytes[at + 7], bytes[at + 8]]));
                // Only baseline and extended Huffman frames decode top to bottom in one scan
                // order the row limit can cut; the others are decoded whole.
                let sequential = matches!(marker, 0xC0 | 0xC1);
                return (height > 0 && width > 0).then_some((width, height, sequential));
            }
            0xD8 | 0x01 | 0xD0..=0xD7 => at += 2,
            0xFF => at += 1,
            _ => at += 2 + usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]])),
        }
    }
    None
}

/// The dims of a PNG from its `IHDR` chunk.
fn scan_png(bytes: &[u8]) -> Option<(usize, usize, bool)> {
    if bytes.len() < 24 || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(bytes[16..20].try_into().ok()?) as usize;
    let height = u32::from_be_bytes(bytes[20..24].try_into().ok()?) as usize;
    Some((width, height, false))
}

/// Decodes `bytes`, whose header is `header`, to `channels` channels, appending the pixels
/// to `out`; returns (height, width) of what was appended. With `rows`, a sequential JPEG is
/// decoded only down to row `rows` (exclusive; see the module docs): the returned height is
/// then at least `rows`, and the rows above `rows` are those of the whole image.
pub fn decode(
    header: &Header,
    bytes: &[u8],
    channels: usize,
    rows: Option<usize>,
    out: &mut Vec<u8>,
) -> Result<(usize, usize)> {
    let (width, height) = (header.width, header.height);
    match header.format {
        Format::Jpeg => {
            // A file cut short has no end marker: it is decoded whole, so that it fails as
            // the whole decode does, wherever the window is.
            // Whole MCU rows (16 pixels at most): the decoder works in them anyway.
            let limit = rows
                .map(|r| (r + 1).next_multiple_of(16))
                .filter(|r| *r < height && header.sequential && ends_with_eoi(bytes));
            decode_jpeg(bytes, channels, width, height, limit, out)
        }
        Format::Png => decode_png(bytes, channels, out),
    }
}

/// Decodes a JPEG of `width` × `height` pixels, or its first `limit` rows only (the image
/// then ends there, its last chroma row repeated below as at an image's bottom).
fn decode_jpeg(
    bytes: &[u8],
    channels: usize,
    width: usize,
    height: usize,
    limit: Option<usize>,
    out: &mut Vec<u8>,
) -> Result<(usize, usize)> {
    let fail = |e: zune_jpeg::errors::DecodeErrors| Error::Expr(format!("decode_jpeg: {e:?}"));
    let mut d = JpegDecoder::new_with_options(SliceReader::new(bytes), options());
    d.decode_headers().map_err(fail)?;
    if d.dimensions() != Some((width, height)) {
        return Err(Error::Expr(format!("decode_jpeg: a frame of {:?}, not {width}x{height}", d.dimensions())));
    }
    let encoding = match d.input_colorspace() {
        Some(ColorSpace::Luma) => Encoding::Gray,
        Some(ColorSpace::YCbCr) => Encoding::YCbCr,
        Some(ColorSpace::RGB) => Encoding::Rgb,
        Some(ColorSpace::CMYK) => Encoding::Cmyk { inverted: has_adobe_marker(bytes) },
        Some(ColorSpace::YCCK) => Encoding::Ycck,
        other => return Err(Error::Expr(format!("decode_jpeg: cannot convert {other:?} to {channels} channel(s)"))),
    };
    // The components' planes, at their own sizes; the upsampling and colour conversion are
    // libjpeg's (`jpeg_pixels`).
    let mut raw = d.raw_output();
    let layout = raw.layout().ok_or_else(|| Error::Expr("decode_jpeg: no frame layout".into()))?;
    let layout = &layout[..raw.num_components().unwrap_or(0).min(layout.len())];
    let rows = limit.unwrap_or(height);
    let v_max = layout.iter().map(|l| l.vertical_sampling_factor).max().unwrap_or(1).max(1);
    let mut planes: Vec<Plane> = layout
        .iter()
        .map(|l| {
            let v = l.vertical_sampling_factor;
            // Room for whole iMCU rows (8·v of the component's rows), which a pull writes.
            let wanted = (rows * v).div_ceil(v_max);
            let (height, room) = (wanted.min(l.height), wanted.next_multiple_of(8 * v.max(1)));
            Plane {
                samples: vec![0; l.width * room.max(height)],
                width: l.width,
                height,
                h_factor: l.horizontal_sampling_factor,
                v_factor: v,
            }
        })
        .collect();
    let strides: Vec<usize> = planes.iter().map(|p| p.width).collect();
    match limit {
        None => {
            let mut samples: Vec<&mut [u8]> = planes.iter_mut().map(|p| p.samples.as_mut_slice()).collect();
            raw.decode_into_planes_strided(&mut samples, &strides).map_err(fail)?;
        }
        Some(_) => {
            // iMCU row after iMCU row, each into its place, until every plane has its rows.
            let mut done = vec![0usize; planes.len()];
            while planes.iter().zip(&done).any(|(p, d)| *d < p.height) {
                let mut samples: Vec<&mut [u8]> =
                    planes.iter_mut().zip(&done).map(|(p, d)| &mut p.samples[d * p.width..]).collect();
                match raw.decode_next_imcu_row(&mut samples, &strides).map_err(fail)? {
                    RawImcuRowStatus::RowReady { rows_written } => {
                        done.iter_mut().zip(rows_written).for_each(|(d, n)| *d += n);
                    }
                    _ => return Err(Error::Expr(format!("decode_jpeg: the data ends before row {rows}"))),
                }
            }
        }
    }
    let start = out.len();
    out.resize(start + width * rows * channels, 0);
    pixels(&planes, encoding, width, rows, channels, &mut out[start..])?;
    Ok((rows, width))
}

/// Whether a JPEG has an Adobe `APP14` marker (before its first scan): Adobe applications
/// store CMYK inverted, and say so with it.
fn has_adobe_marker(bytes: &[u8]) -> bool {
    let mut at = 2;
    while at + 4 <= bytes.len() && bytes[at] == 0xFF {
        let marker = bytes[at + 1];
        if marker == 0xDA {
            return false;
        }
        let length = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        if marker == 0xEE && bytes.get(at + 4..at + 9) == Some(b"Adobe".as_slice()) {
            return true;
        }
        at += 2 + length;
    }
    false
}

/// Whether a JPEG's last marker is its end (EOI), allowing for padding after it.
fn ends_with_eoi(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(64)..];
    tail.windows(2).any(|w| w == [0xFF, 0xD9])
}

fn decode_png(bytes: &[u8], channels: usize, out: &mut Vec<u8>) -> Result<(usize, usize)> {
    let fail = |e: zune_png::error::PngDecodeErrors| Error::Expr(format!("decode_png: {e:?}"));
    let mut d = PngDecoder::new_with_options(SliceReader::new(bytes), options());
    d.decode_headers().map_err(fail)?;
    let (width, height) = d.dimensions().ok_or_else(|| Error::Expr("decode_png: no header".into()))?;
    check_size("decode_png", width, height, bytes.len())?;
    let have = d.colorspace().map(|c| c.num_components()).unwrap_or(0);
    let pixels = match d.decode().map_err(fail)? {
        zune_core::result::DecodingResult::U8(v) => v,
        _ => return Err(Error::Expr("decode_png: not an 8- or 16-bit image".into())),
    };
    if !(1..=4).contains(&have) || pixels.len() != width * height * have {
        return Err(Error::Expr(format!("decode_png: {} values for a {width}x{height}x{have} image", pixels.len())));
    }
    convert_channels(&pixels, have, channels, out);
    Ok((height, width))
}

/// Appends `pixels` (`from` channels: gray, gray+alpha, RGB or RGBA) to `out` as `to`
/// channels: gray is repeated, RGB becomes gray by ITU-R BT.601 luma (as
/// tf.image.rgb_to_grayscale), alpha is dropped or added opaque.
fn convert_channels(pixels: &[u8], from: usize, to: usize, out: &mut Vec<u8>) {
    if from == to {
        out.extend_from_slice(pixels);
        return;
    }
    out.reserve(pixels.len() / from * to);
    for p in pixels.chunks_exact(from) {
        let (rgb, alpha) = match from {
            1 => ([p[0]; 3], 255),
            2 => ([p[0]; 3], p[1]),
            3 => ([p[0], p[1], p[2]], 255),
            _ => ([p[0], p[1], p[2]], p[3]),
        };
        match to {
            1 => out.push(luma(rgb)),
            3 => out.extend_from_slice(&rgb),
            _ => out.extend_from_slice(&[rgb[0], rgb[1], rgb[2], alpha]),
        }
    }
}

fn luma([r, g, b]: [u8; 3]) -> u8 {
    (0.2989 * f32::from(r) + 0.587 * f32::from(g) + 0.114 * f32::from(b)).round().min(255.0) as u8
}

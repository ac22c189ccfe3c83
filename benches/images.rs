//! Image functions over chunks of 32 JPEGs (photo-like: gradients and noise, quality 90,
//! 4:2:0, encoded by jpeg-encoder): `cargo bench --bench images`.
//!
//! - **decode**: `decode_jpeg` per image size, and a 3/4-height crop of each through
//!   `decode_jpeg_rows` (the `jpeg-row-decode` rewrite), which decodes only the rows above
//!   the window's bottom; and, side by side, zune-jpeg's whole decode with its own chroma
//!   upsampling and colour conversion (`decode_into`, the pixels flumen gave before it did
//!   those steps as libjpeg does), called directly on the same bytes, and flumen's decoder
//!   called directly (`image::decode`, no dataset around it).
//! - **resize**: 512x384 to 224x224 per method through flumen's `resize`, against
//!   fast_image_resize called directly on the same pixels (its own cost, the floor).
//! - **crop-mirror-normalize**: `normalize(convert_image_dtype(flip_left_right(crop(x))))`
//!   over decoded 128x128 images, in one pass, against the same steps one by one (the
//!   `+ 0.0` keeps the expression out of the fused form and changes no value); and the same
//!   with a color jitter (brightness, contrast, saturation) between the conversion and the
//!   normalization; and with `hwc_to_chw` of the result (channels first, as PyTorch takes
//!   them), which the pass writes as channel planes.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, RecordBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use datafusion_expr::Expr as DfExpr;
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use flumen::crates::udf::image::decode as image_decode;
use flumen::prelude::*;
use flumen::Options;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

const IMAGES: usize = 32;

/// Row-major RGB of a `h` x `w` photo-like image (fixed seed).
fn photo(h: usize, w: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut noise = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) % 25) as f32 - 12.0
    };
    let mut out = Vec::with_capacity(h * w * 3);
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32, y as f32);
            for v in [(fx / 40.0).sin(), (fy / 30.0).cos(), ((fx + fy) / 50.0).sin()] {
                out.push(((v * 0.5 + 0.5) * 255.0 + noise()).clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

fn jpeg(h: usize, w: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, 90);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder.encode(&photo(h, w, seed), w as u16, h as u16, jpeg_encoder::ColorType::Rgb).expect("encode");
    out
}

/// A one-chunk dataset of `IMAGES` JPEGs of `h` x `w`.
fn jpegs(h: usize, w: usize) -> Dataset {
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values((0..IMAGES as u64).map(|s| jpeg(h, w, s))));
    Dataset::from_arrays([("image", column)]).expect("a dataset").with_options(Options::default().with_threads(1))
}

/// The `IMAGES` JPEGs of `h` x `w` decoded, as one chunk of field `x`.
fn decoded(h: usize, w: usize) -> Dataset {
    let decode = jpegs(h, w).map(MapFunction::select([("x", decode_jpeg(col("image"), 3))])).expect("a map");
    let chunks: Vec<RecordBatch> = decode.iter_chunks().map(|c| c.expect("decoded")).collect();
    let chunk = arrow::compute::concat_batches(&chunks[0].schema(), &chunks).expect("one chunk");
    assert_eq!(chunk.num_rows(), IMAGES);
    Dataset::from_batches(vec![chunk]).expect("a dataset").with_options(Options::default().with_threads(1))
}

fn run(ds: &Dataset) {
    for batch in ds.iter_chunks() {
        black_box(batch.expect("a chunk"));
    }
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(IMAGES as u64));
    for (h, w) in [(128, 128), (256, 256), (384, 512), (768, 1024)] {
        let ds = jpegs(h, w);
        let whole = ds.map(MapFunction::select([("x", decode_jpeg(col("image"), 3))])).expect("a map");
        group.bench_function(format!("whole {w}x{h}"), |b| b.iter(|| run(&whole)));
        let top = crop(decode_jpeg(col("image"), 3), 0, 0, (h * 3 / 4) as i64, w as i64);
        let rows = ds.map(MapFunction::select([("x", top)])).expect("a map");
        group.bench_function(format!("top 3/4 rows {w}x{h}"), |b| b.iter(|| run(&rows)));
        let files: Vec<Vec<u8>> = (0..IMAGES as u64).map(|s| jpeg(h, w, s)).collect();
        group.bench_function(format!("zune decode_into {w}x{h}"), |b| {
            let mut out = vec![0u8; h * w * 3];
            b.iter(|| {
                for f in &files {
                    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
                    let mut d = JpegDecoder::new_with_options(ZCursor::new(f.as_slice()), options);
                    d.decode_into(&mut out).expect("decodes");
                    black_box(&out);
                }
            })
        });
        group.bench_function(format!("flumen decode {w}x{h}"), |b| {
            let mut out = Vec::with_capacity(h * w * 3);
            b.iter(|| {
                for f in &files {
                    let header = image_decode::header(image_decode::Format::Jpeg, f).expect("a header");
                    out.clear();
                    image_decode::decode(&header, f, 3, None, &mut out).expect("decodes");
                    black_box(&out);
                }
            })
        });
    }
    group.finish();
}

fn resizes(c: &mut Criterion) {
    let mut group = c.benchmark_group("resize 512x384 to 224x224");
    group.throughput(Throughput::Elements(IMAGES as u64));
    let pixels: Vec<Vec<u8>> = (0..IMAGES as u64).map(|s| photo(384, 512, s)).collect();
    let images = decoded(384, 512);
    for (method, filter) in [
        ("nearest", ResizeAlg::Nearest),
        ("bilinear", ResizeAlg::Convolution(FilterType::Bilinear)),
        ("bicubic", ResizeAlg::Convolution(FilterType::CatmullRom)),
        ("area", ResizeAlg::Convolution(FilterType::Box)),
        ("lanczos3", ResizeAlg::Convolution(FilterType::Lanczos3)),
    ] {
        let ds = images.map(MapFunction::select([("y", resize(col("x"), 224, 224, method))])).expect("a map");
        group.bench_function(format!("flumen {method}"), |b| b.iter(|| run(&ds)));
        let mut resizer = Resizer::new();
        let mut out = vec![0u8; 224 * 224 * 3];
        let options = ResizeOptions::new().resize_alg(filter);
        group.bench_function(format!("fast_image_resize {method}"), |b| {
            b.iter(|| {
                for p in &pixels {
                    let src = ImageRef::new(512, 384, p, PixelType::U8x3).expect("an image");
                    let mut dst = Image::from_slice_u8(224, 224, &mut out, PixelType::U8x3).expect("an image");
                    resizer.resize(&src, &mut dst, &options).expect("a resize");
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

fn crop_mirror_normalize(c: &mut Criterion) {
    let mut group = c.benchmark_group("crop-mirror-normalize 112x112 of 128x128");
    group.throughput(Throughput::Elements(IMAGES as u64));
    let images = decoded(128, 128);
    let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
    let steps_to = |tail: fn(DfExpr) -> DfExpr, out: fn(DfExpr) -> DfExpr| {
        let image = tail(convert_image_dtype(flip_left_right(crop(col("x"), 8, 8, 112, 112))));
        images.map(MapFunction::select([("y", out(normalize(image, &mean, &std)))])).expect("a map")
    };
    let steps = |tail: fn(DfExpr) -> DfExpr| steps_to(tail, |e| e);
    let fused = steps(|e| e);
    let one_by_one = steps(|e| e + lit(0.0f32));
    group.bench_function("one pass", |b| b.iter(|| run(&fused)));
    group.bench_function("step by step", |b| b.iter(|| run(&one_by_one)));
    let fused = steps(jitter);
    let one_by_one = steps(|e| jitter(e + lit(0.0f32)));
    group.bench_function("one pass with color jitter", |b| b.iter(|| run(&fused)));
    group.bench_function("step by step with color jitter", |b| b.iter(|| run(&one_by_one)));
    let fused = steps_to(|e| e, hwc_to_chw);
    let one_by_one = steps_to(|e| e + lit(0.0f32), hwc_to_chw);
    group.bench_function("one pass to channels first", |b| b.iter(|| run(&fused)));
    group.bench_function("step by step to channels first", |b| b.iter(|| run(&one_by_one)));
    group.finish();
}

/// A color jitter of brightness, contrast and saturation, as torchvision's ColorJitter.
fn jitter(image: DfExpr) -> DfExpr {
    random_saturation(random_contrast(random_brightness(image, 0.2, 1), 0.6, 1.4, 2), 0.6, 1.4, 3)
}

criterion_group!(benches, decode, resizes, crop_mirror_normalize);
criterion_main!(benches);

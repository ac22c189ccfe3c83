//! Image functions on real images written by other encoders (`tests/data/images`, made by
//! `make_images.py` with Pillow and TensorFlow), compared with those encoders' own decoders;
//! crops, flips and resizes checked against the decoded pixels; the random functions'
//! reproducibility across parallelism, chunking and restore; and the `jpeg-row-decode`
//! rewrite giving the same pixels as a whole decode.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, StringArray};
use arrow::datatypes::{DataType, Float16Type, Float32Type, UInt16Type, UInt8Type};
use datafusion_expr::Expr as DfExpr;
use flumen::prelude::*;
use flumen::{Checkpoint, Options, Parallel, SaveMode};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/images");

fn file(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}/{name}")).unwrap()
}

fn images(names: &[&str]) -> Dataset {
    let bytes: Vec<Vec<u8>> = names.iter().map(|n| file(n)).collect();
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values(bytes));
    Dataset::from_arrays([("image", column)]).unwrap()
}

/// Every element's `field` as (leaf values, row count of the element's first dim).
fn pixels_u8(ds: &Dataset, field: &str) -> Vec<Vec<u8>> {
    ds.iter()
        .map(|b| {
            let b = b.unwrap();
            let column = b.column_by_name(field).unwrap();
            leaf(column).as_primitive::<UInt8Type>().values().to_vec()
        })
        .collect()
}

fn leaf(column: &ArrayRef) -> ArrayRef {
    let mut a = column.clone();
    loop {
        a = if let Some(l) = a.as_list_opt::<i32>() {
            l.values()
                .slice(l.value_offsets()[0] as usize, (l.value_offsets()[l.len()] - l.value_offsets()[0]) as usize)
        } else if let Some(f) = a.as_fixed_size_list_opt() {
            f.values().slice(f.value_offset(0) as usize, f.len() * f.value_length() as usize)
        } else {
            return a;
        };
    }
}

fn decode(names: &[&str], func: fn(DfExpr, i64) -> DfExpr, channels: i64) -> Vec<Vec<u8>> {
    let ds = images(names).map(MapFunction::select([("pixels", func(col("image"), channels))])).unwrap();
    pixels_u8(&ds, "pixels")
}

/// Mean and largest absolute difference.
fn diff(a: &[u8], b: &[u8]) -> (f64, u8) {
    assert_eq!(a.len(), b.len(), "sizes differ");
    let d: Vec<u8> = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).collect();
    (d.iter().map(|v| f64::from(*v)).sum::<f64>() / d.len() as f64, d.iter().copied().max().unwrap_or(0))
}

#[test]
fn pngs_decode_exactly_as_pillow_does() {
    for (name, reference, channels) in [
        ("rgb_19x13.png", "rgb_19x13.png.rgb", 3),
        ("rgba_19x13.png", "rgba_19x13.png.rgb", 3),
        ("palette_19x13.png", "palette_19x13.png.rgb", 3),
        ("gray_19x13.png", "gray_19x13.png.gray", 1),
        ("gray16_19x13.png", "gray16_19x13.png.gray", 1),
    ] {
        let got = decode(&[name], decode_png, channels);
        assert_eq!(got[0], file(reference), "{name}");
        // decode_image tells the format from the bytes.
        assert_eq!(decode(&[name], decode_image, channels), got, "{name} via decode_image");
    }
    // Gray to RGB repeats the gray value; RGBA keeps its alpha with 4 channels.
    let gray = decode(&["gray_19x13.png"], decode_png, 1).remove(0);
    let rgb = decode(&["gray_19x13.png"], decode_png, 3).remove(0);
    assert_eq!(rgb, gray.iter().flat_map(|g| [*g; 3]).collect::<Vec<_>>());
    let rgba = decode(&["rgba_19x13.png"], decode_png, 4).remove(0);
    let no_alpha: Vec<u8> = rgba.chunks(4).flat_map(|p| &p[..3]).copied().collect();
    assert_eq!(no_alpha, file("rgba_19x13.png.rgb"));
}

#[test]
fn jpegs_decode_within_a_level_or_two_of_libjpeg() {
    // Upsampling and colour conversion are libjpeg's; only zune-jpeg's inverse DCT differs
    // from libjpeg's accurate one, by a level here and there, at most three after colour
    // conversion. TensorFlow's default (fast) inverse DCT is a few levels further.
    for (name, reference, channels, (mean_at_most, most)) in [
        ("baseline_420_37x29.jpg", "baseline_420_37x29.jpg.rgb", 3, (0.5, 3)),
        ("baseline_444_37x29.jpg", "baseline_444_37x29.jpg.rgb", 3, (0.5, 3)),
        ("progressive_37x29.jpg", "progressive_37x29.jpg.rgb", 3, (0.5, 3)),
        ("restart_markers_64x48.jpg", "restart_markers_64x48.jpg.rgb", 3, (0.5, 3)),
        ("gray_33x21.jpg", "gray_33x21.jpg.gray", 1, (0.5, 1)),
        ("tf_baseline_52x40.jpg", "tf_baseline_52x40.jpg.rgb", 3, (0.5, 3)),
        ("tf_baseline_52x40.jpg", "tf_baseline_52x40.jpg.tf.rgb", 3, (1.5, 6)),
        ("keep_rgb_23x11.jpg", "keep_rgb_23x11.jpg.rgb", 3, (0.5, 3)),
    ] {
        let got = decode(&[name], decode_jpeg, channels).remove(0);
        let (mean, max) = diff(&got, &file(reference));
        assert!(
            mean <= mean_at_most && max <= most,
            "{name} against {reference}: mean difference {mean}, largest {max}"
        );
    }
}

#[test]
fn cmyk_and_ycck_jpegs_decode_as_tensorflow_converts_them() {
    // tf.io.decode_jpeg's CMYK to RGB: the inverted values Adobe files hold, c·k / 255.
    for (name, pixels) in [("cmyk_24x16.jpg", 24 * 16), ("ycck_420_13x7.jpg", 13 * 7), ("ycck_420_30x22.jpg", 30 * 22)]
    {
        let rgb = decode(&[name], decode_jpeg, 3).remove(0);
        let (mean, max) = diff(&rgb, &file(&format!("{name}.tf.rgb")));
        assert!(mean < 0.5 && max <= 3, "{name}: mean difference {mean}, largest {max}");
        // Four channels: the same colours and an opaque alpha (zune-jpeg's own CMYK → RGBA
        // scrambled the pixels: alpha was not 255 and the colours shifted).
        let rgba = decode(&[name], decode_jpeg, 4).remove(0);
        assert_eq!(rgba.len(), pixels * 4);
        assert!(rgba.chunks_exact(4).all(|p| p[3] == 255), "{name}: alpha");
        let colours: Vec<u8> = rgba.chunks_exact(4).flat_map(|p| p[..3].to_vec()).collect();
        assert_eq!(colours, rgb, "{name}");
    }
}

#[test]
fn jpegs_stored_as_rgb_decode_to_every_channel_count() {
    // Adobe transform 0 (Pillow's keep_rgb): zune-jpeg refused gray and RGBA for it.
    let rgb = decode(&["keep_rgb_23x11.jpg"], decode_jpeg, 3).remove(0);
    let rgba = decode(&["keep_rgb_23x11.jpg"], decode_jpeg, 4).remove(0);
    assert!(rgba.chunks_exact(4).zip(rgb.chunks_exact(3)).all(|(a, c)| a[..3] == *c && a[3] == 255));
    let gray = decode(&["keep_rgb_23x11.jpg"], decode_jpeg, 1).remove(0);
    // libjpeg's luma of each pixel: (19595 r + 38470 g + 7471 b + 32768) >> 16.
    let want: Vec<u8> = rgb
        .chunks_exact(3)
        .map(|p| ((19595 * u32::from(p[0]) + 38470 * u32::from(p[1]) + 7471 * u32::from(p[2]) + 32768) >> 16) as u8)
        .collect();
    assert_eq!(gray, want);
}

fn decode_error(bytes: Vec<u8>, func: fn(DfExpr, i64) -> DfExpr) -> String {
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values([bytes]));
    let ds = Dataset::from_arrays([("image", column)])
        .unwrap()
        .map(MapFunction::select([("pixels", func(col("image"), 3))]))
        .unwrap();
    let mut it = ds.iter();
    let err = it.next().expect("an element").expect_err("a corrupt image is an error");
    err.to_string()
}

#[test]
fn corrupt_truncated_and_huge_images_are_errors() {
    let jpeg = file("baseline_420_37x29.jpg");
    let message = decode_error(jpeg[..jpeg.len() / 2].to_vec(), decode_jpeg);
    // Bad input, named by the field the bytes came from (a file when `read_file` read them).
    assert!(message.starts_with("bad input in field 'image': decode_jpeg:"), "{message}");
    let message = decode_error(b"not an image at all".to_vec(), decode_image);
    assert!(message.contains("neither a JPEG nor a PNG"), "{message}");
    let png = file("rgb_19x13.png");
    let message = decode_error(png[..png.len() - 20].to_vec(), decode_png);
    assert!(message.contains("decode_png"), "{message}");
    // A frame header claiming 65535 x 65535 pixels is refused before pixels are allocated.
    let mut huge = jpeg.clone();
    let sof = huge.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    huge[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    let message = decode_error(huge, decode_jpeg);
    assert!(message.contains("refused"), "{message}");
    // Every byte flipped in turn: errors or images, never a panic.
    for i in 0..jpeg.len() {
        let mut bad = jpeg.clone();
        bad[i] ^= 0x5A;
        let column: ArrayRef = Arc::new(BinaryArray::from_iter_values([bad]));
        let ds = Dataset::from_arrays([("image", column)])
            .unwrap()
            .map(MapFunction::select([("pixels", decode_jpeg(col("image"), 3))]))
            .unwrap();
        let _ = ds.iter().collect::<Vec<_>>();
    }
}

/// The 52x40 test JPEG decoded whole, as rows of RGB.
fn whole() -> Vec<u8> {
    decode(&["tf_baseline_52x40.jpg"], decode_jpeg, 3).remove(0)
}

fn window(image: &[u8], width: usize, top: usize, left: usize, h: usize, w: usize) -> Vec<u8> {
    (top..top + h).flat_map(|y| image[(y * width + left) * 3..(y * width + left + w) * 3].to_vec()).collect()
}

#[test]
fn crops_and_flips_move_the_decoded_pixels() {
    let full = whole();
    let one = |e: DfExpr| {
        let ds = images(&["tf_baseline_52x40.jpg"]).map(MapFunction::select([("out", e)])).unwrap();
        pixels_u8(&ds, "out").remove(0)
    };
    let img = || decode_jpeg(col("image"), 3);
    assert_eq!(one(crop(img(), 5, 7, 20, 30)), window(&full, 52, 5, 7, 20, 30));
    // tf.image.central_crop(0.5) of 40x52: start (10, 13), size 20x26.
    assert_eq!(one(central_crop(img(), 0.5)), window(&full, 52, 10, 13, 20, 26));
    let mirrored: Vec<u8> = full.chunks(52 * 3).flat_map(|row| row.chunks(3).rev().flatten().copied()).collect();
    assert_eq!(one(flip_left_right(img())), mirrored);
    let upside: Vec<u8> = full.chunks(52 * 3).rev().flatten().copied().collect();
    assert_eq!(one(flip_up_down(img())), upside);
    let cropped = window(&full, 52, 0, 0, 4, 4);
    let chw: Vec<u8> = (0..3).flat_map(|c| cropped.iter().skip(c).step_by(3).copied().collect::<Vec<_>>()).collect();
    assert_eq!(one(hwc_to_chw(crop(img(), 0, 0, 4, 4))), chw);
    // A crop larger than the image is an error naming the sizes.
    let ds =
        images(&["tf_baseline_52x40.jpg"]).map(MapFunction::select([("out", random_crop(img(), 41, 8, 1))])).unwrap();
    let err = ds.iter().next().unwrap().unwrap_err().to_string();
    assert!(err.contains("41x8") && err.contains("40x52"), "{err}");
}

/// The `[h, w, 3]` images of a random pipeline over `copies` copies of the test JPEG.
fn augmented(copies: usize, options: Options, parallel: u64, epochs: u64) -> Dataset {
    let names = vec!["tf_baseline_52x40.jpg"; copies];
    let ds = images(&names).with_options(options);
    let f = MapFunction::select([(
        "out",
        random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 7), 11),
    )]);
    let ds = ds
        .map_with(f, Parallel { num_parallel_calls: Tunable::Fixed(parallel as u32), deterministic: Some(true) })
        .unwrap();
    ds.repeat(Some(epochs)).unwrap()
}

#[test]
fn random_crops_and_flips_are_windows_of_the_image_and_vary_by_element_and_epoch() {
    let full = whole();
    let mirrored: Vec<u8> = full.chunks(52 * 3).flat_map(|row| row.chunks(3).rev().flatten().copied()).collect();
    let out = pixels_u8(&augmented(40, Options::default(), 1, 2), "out");
    let mut windows = std::collections::BTreeSet::new();
    let mut flipped = 0;
    for crop in &out {
        let found = (0..=24).flat_map(|t| (0..=28).map(move |l| (t, l))).find_map(|(t, l)| {
            if window(&full, 52, t, l, 16, 24) == *crop {
                Some((t, l, false))
            } else if window(&mirrored, 52, t, l, 16, 24) == *crop {
                Some((t, l, true))
            } else {
                None
            }
        });
        let (t, l, f) = found.expect("every crop is a window of the image, mirrored or not");
        windows.insert((t, l));
        flipped += usize::from(f);
    }
    assert!(windows.len() > 30, "80 draws give many windows, got {}", windows.len());
    assert!((20..=60).contains(&flipped), "about half are mirrored, got {flipped} of 80");
    // The second epoch draws again.
    assert_ne!(out[..40], out[40..]);
    // The same dataset iterated again is a new iteration: new draws, as reshuffling.
    let ds = augmented(40, Options::default(), 1, 1);
    let first = pixels_u8(&ds, "out");
    assert_eq!(pixels_u8(&ds, "out").len(), first.len());
}

#[test]
fn random_draws_do_not_depend_on_threads_chunks_or_optimization() {
    let reference = |options: Options, parallel| {
        let ds = augmented(30, options, parallel, 2);
        // One iteration's salt comes from the dataset's iteration counter: compare the
        // first iteration of fresh datasets.
        pixels_u8(&ds, "out")
    };
    let base = reference(Options::default().with_threads(1).with_chunk_rows(1), 1);
    assert_eq!(reference(Options::default().with_threads(4).with_chunk_rows(7), 4), base);
    assert_eq!(reference(Options::default().with_chunk_rows(64), 3), base);
    assert_eq!(reference(Options::default().without_optimizations(), 1), base);
}

#[test]
fn random_draws_resume_after_a_restore() {
    let ds = augmented(12, Options::default().with_chunk_rows(5), 2, 2);
    let all = pixels_u8(&ds, "out");
    for cut in [0, 3, 11, 12, 17] {
        for mode in [SaveMode::Symbolic, SaveMode::Full] {
            let ds = augmented(12, Options::default().with_chunk_rows(5), 2, 2);
            let mut it = ds.iter();
            for _ in 0..cut {
                it.next().unwrap().unwrap();
            }
            let bytes = it.save(mode).unwrap().to_bytes().unwrap();
            let restored = ds.iter_from(&Checkpoint::from_bytes(&bytes).unwrap()).unwrap();
            let rest: Vec<Vec<u8>> = restored
                .map(|b| leaf(b.unwrap().column_by_name("out").unwrap()).as_primitive::<UInt8Type>().values().to_vec())
                .collect();
            assert_eq!(rest, all[cut..], "{mode:?} after {cut}");
        }
    }
}

/// The random crop-and-flip map of `augmented`, over `ds`.
fn crop_and_flip(ds: &Dataset, parallel: u32) -> Dataset {
    let f = MapFunction::select([(
        "out",
        random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 7), 11),
    )]);
    ds.map_with(f, Parallel { num_parallel_calls: Tunable::Fixed(parallel), deterministic: Some(true) }).unwrap()
}

#[test]
fn sharding_before_a_random_map_draws_what_sharding_after_it_does() {
    let source = |options: Options| images(&vec!["tf_baseline_52x40.jpg"; 23]).with_options(options);
    for options in [Options::default(), Options::default().without_optimizations().with_chunk_rows(4)] {
        let after = |n, i| crop_and_flip(&source(options.clone()), 1).shard(n, i).unwrap();
        let all = pixels_u8(&after(1, 0), "out");
        for (n, i) in [(2, 0), (2, 1), (3, 2), (5, 4)] {
            let before = crop_and_flip(&source(options.clone()).shard(n, i).unwrap(), 3);
            let explain = before.explain();
            assert!(explain.contains(&format!("element_positions({i} + {n} * position)")), "{explain}");
            let expected: Vec<_> = all.iter().skip(i as usize).step_by(n as usize).cloned().collect();
            assert!(!expected.is_empty());
            assert_eq!(pixels_u8(&before, "out"), expected, "shard({n}, {i})");
        }
        // Skips, takes and prefetches between compose with the shards: element 2 of
        // skip(3).shard(3, 2).take(4) is element 3 + 2 + 3 * 2 = 11.
        let between = source(options.clone()).skip(3).unwrap().shard(3, 2).unwrap();
        let between = between.take(4).unwrap().prefetch(Tunable::Fixed(2)).unwrap();
        let expected: Vec<_> = [5, 8, 11, 14].iter().map(|p| all[*p].clone()).collect();
        assert_eq!(pixels_u8(&crop_and_flip(&between, 2), "out"), expected);
        // A second random map over the first keys by its own input's positions, fused or not.
        let twice = |options: Options| {
            let cropped =
                source(options).map(MapFunction::select([("img", crop(decode_jpeg(col("image"), 3), 1, 2, 16, 24))]));
            let sharded = cropped.unwrap().shard(2, 1).unwrap();
            let once = sharded.map(MapFunction::select([("img", random_flip_left_right(col("img"), 3))])).unwrap();
            once.map(MapFunction::select([("out", random_flip_up_down(col("img"), 5))])).unwrap()
        };
        let plain = pixels_u8(&twice(Options::default().without_optimizations()), "out");
        assert_eq!(pixels_u8(&twice(options.clone()), "out"), plain);
    }
}

#[test]
fn each_worker_of_a_split_draws_what_the_whole_pipeline_draws() {
    let n_images = 11;
    let bytes: ArrayRef = Arc::new(BinaryArray::from_iter_values(vec![file("tf_baseline_52x40.jpg"); n_images]));
    let index: ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(0..n_images as i64));
    let f = MapFunction::select([
        ("i", col("i")),
        ("out", random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 7), 11)),
    ]);
    let ds = Dataset::from_arrays([("i", index), ("image", bytes)]).unwrap().map(f).unwrap();
    let whole = pixels_u8(&ds, "out");
    for workers in [2, 3] {
        let mut seen = 0;
        for worker in 0..workers {
            let part = ds.split_for_worker(workers, worker, 5).unwrap().dataset;
            let indices: Vec<i64> = part
                .iter()
                .flat_map(|b| {
                    b.unwrap()
                        .column_by_name("i")
                        .unwrap()
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .values()
                        .to_vec()
                })
                .collect();
            // Iterate a copy: a dataset's second iteration draws anew.
            let part = ds.split_for_worker(workers, worker, 5).unwrap().dataset;
            for (i, out) in indices.iter().zip(pixels_u8(&part, "out")) {
                assert_eq!(out, whole[*i as usize], "element {i} in worker {worker} of {workers}");
                seen += 1;
            }
        }
        assert_eq!(seen, n_images);
    }
}

#[test]
fn jpeg_row_decode_shows_in_explain_and_keeps_the_pixels() {
    let names =
        ["tf_baseline_52x40.jpg", "baseline_420_37x29.jpg", "restart_markers_64x48.jpg", "progressive_37x29.jpg"];
    let pipeline = |options: Options| {
        let img = decode_jpeg(col("image"), 3);
        let f = MapFunction::select([
            ("a", random_crop(img.clone(), 12, 20, 3)),
            ("b", crop(img.clone(), 2, 3, 9, 11)),
            ("c", random_resized_crop(img, 8, 8, 5, (0.08, 1.0), (0.75, 4.0 / 3.0))),
        ]);
        images(&names).with_options(options).map(f).unwrap().repeat(Some(3)).unwrap()
    };
    let optimized = pipeline(Options::default());
    let explain = optimized.explain();
    assert!(explain.contains("decode_jpeg_rows"), "{explain}");
    let plain = pipeline(Options::default().without_optimizations());
    assert!(!plain.explain().contains("decode_jpeg_rows"));
    for field in ["a", "b", "c"] {
        assert_eq!(pixels_u8(&optimized, field), pixels_u8(&plain, field), "{field}");
    }
}

#[test]
fn resize_and_random_resized_crop_give_their_size() {
    let ds = images(&["tf_baseline_52x40.jpg", "restart_markers_64x48.jpg"])
        .map(MapFunction::select([
            ("r", resize(decode_jpeg(col("image"), 3), 20, 10, "bilinear")),
            ("n", resize(decode_jpeg(col("image"), 3), 80, 104, "nearest")),
            ("rrc", random_resized_crop(decode_jpeg(col("image"), 3), 24, 24, 1, (0.08, 1.0), (0.75, 4.0 / 3.0))),
        ]))
        .unwrap();
    let spec = ds.element_spec().to_string();
    assert!(spec.contains("r: uint8[20, 10, 3]") && spec.contains("rrc: uint8[24, 24, 3]"), "{spec}");
    let full = whole();
    let nearest = pixels_u8(&ds, "n").remove(0);
    // Doubling with nearest repeats each pixel twice along each axis.
    for y in 0..80 {
        for x in 0..104 {
            assert_eq!(nearest[(y * 104 + x) * 3..][..3], full[((y / 2) * 52 + x / 2) * 3..][..3]);
        }
    }
    // A flat image stays flat whatever the filter.
    assert_eq!(pixels_u8(&ds, "rrc").len(), 2);
}

#[test]
fn float_images_normalize_per_channel() {
    let mean = [0.485, 0.456, 0.406];
    let std = [0.229, 0.224, 0.225];
    let ds = images(&["tf_baseline_52x40.jpg"])
        .map(MapFunction::select([
            ("crop", crop(decode_jpeg(col("image"), 3), 1, 2, 6, 5)),
            ("x", normalize(convert_image_dtype(crop(decode_jpeg(col("image"), 3), 1, 2, 6, 5)), &mean, &std)),
        ]))
        .unwrap();
    let b = ds.iter().next().unwrap().unwrap();
    let crop = leaf(b.column_by_name("crop").unwrap()).as_primitive::<UInt8Type>().values().to_vec();
    let x = leaf(b.column_by_name("x").unwrap()).as_primitive::<Float32Type>().values().to_vec();
    assert_eq!(x.len(), 6 * 5 * 3);
    for (i, (p, v)) in crop.iter().zip(&x).enumerate() {
        let want = (f32::from(*p) / 255.0 - mean[i % 3] as f32) / std[i % 3] as f32;
        assert!((v - want).abs() < 1e-5, "value {i}: {v} vs {want}");
    }
}

#[test]
fn elementwise_operations_need_a_fixed_size_and_random_functions_a_seed() {
    let ds = images(&["tf_baseline_52x40.jpg"]);
    let err = ds.map(MapFunction::select([("x", decode_jpeg(col("image"), 3) * lit(2u8))])).unwrap_err().to_string();
    assert!(err.contains("crop or resize"), "{err}");
    let err = ds.map(MapFunction::select([("x", decode_jpeg(col("image"), 2))])).unwrap_err().to_string();
    assert!(err.contains("1, 3 or 4"), "{err}");
}

#[test]
fn read_file_reads_whole_files_and_names_a_missing_one() {
    let paths: ArrayRef =
        Arc::new(StringArray::from(vec![format!("{DIR}/tf_baseline_52x40.jpg"), format!("{DIR}/no_such_image.jpg")]));
    let ds = Dataset::from_arrays([("path", paths)])
        .unwrap()
        .map(MapFunction::select([("pixels", decode_jpeg(read_file(col("path")), 3))]))
        .unwrap();
    let mut it = ds.iter();
    let first = it.next().unwrap().unwrap();
    assert_eq!(leaf(first.column(0)).len(), 52 * 40 * 3);
    let err = it.next().unwrap().unwrap_err().to_string();
    assert!(err.contains("no_such_image.jpg"), "{err}");
}

/// The bits of every float32 value of field `f` of `b`.
fn f32_bits(b: &arrow::array::RecordBatch, f: &str) -> Vec<u32> {
    leaf(b.column_by_name(f).unwrap()).as_primitive::<Float32Type>().values().iter().map(|v| v.to_bits()).collect()
}

/// `image` (pixels of `c` values) as channel planes.
fn planes<T: Copy>(image: &[T], c: usize) -> Vec<T> {
    (0..c).flat_map(|ch| image.iter().skip(ch).step_by(c).copied()).collect()
}

#[test]
fn image_functions_keep_fixed_sizes_and_rows_around_null_images() {
    let jpeg = file("tf_baseline_52x40.jpg");
    let column: ArrayRef = Arc::new(BinaryArray::from(vec![
        None,
        Some(jpeg.as_slice()),
        None,
        Some(jpeg.as_slice()),
        Some(jpeg.as_slice()),
    ]));
    let mean = [0.485, 0.456, 0.406];
    let std = [0.229, 0.224, 0.225];
    let img = || flip_left_right(crop(decode_jpeg(col("image"), 3), 5, 7, 4, 6));
    // `+ 0.0` changes no value but keeps the expression out of the one pass.
    let jitter = |x: DfExpr| random_contrast(random_brightness(x, 0.2, 1), 0.5, 1.5, 2);
    // Optimized, the crop reads the decoder's rows; as written, it crops a decoded image.
    for options in [Options::default(), Options::default().without_optimizations()] {
        let ds = Dataset::from_arrays([("image", column.clone())])
            .unwrap()
            .with_options(options)
            .map(MapFunction::select([
                ("chw", hwc_to_chw(img())),
                ("hwc", img()),
                // A crop of a fixed image takes its size from the image (none when all are null).
                ("central", central_crop(img(), 0.5)),
                ("chw_f", hwc_to_chw(normalize(convert_image_dtype(img()), &mean, &std))),
                ("hwc_f", normalize(convert_image_dtype(img()) + lit(0.0f32), &mean, &std)),
                ("chw_j", hwc_to_chw(normalize(jitter(convert_image_dtype(img())), &mean, &std))),
                ("hwc_j", normalize(jitter(convert_image_dtype(img()) + lit(0.0f32)), &mean, &std)),
            ]))
            .unwrap();
        let mut nulls = Vec::new();
        for b in ds.iter() {
            let b = b.unwrap();
            let null = b.column_by_name("chw").unwrap().is_null(0);
            nulls.push(null);
            assert_eq!(b.column_by_name("chw_f").unwrap().is_null(0), null);
            assert_eq!(b.column_by_name("central").unwrap().is_null(0), null);
            if !null {
                let u8s = |f: &str| leaf(b.column_by_name(f).unwrap()).as_primitive::<UInt8Type>().values().to_vec();
                assert_eq!(u8s("chw"), planes(&u8s("hwc"), 3));
                assert_eq!(f32_bits(&b, "chw_f"), planes(&f32_bits(&b, "hwc_f"), 3));
                assert_eq!(f32_bits(&b, "chw_j"), planes(&f32_bits(&b, "hwc_j"), 3));
            }
        }
        assert_eq!(nulls, [true, false, true, false, false]);
    }
}

#[test]
fn one_pass_crop_mirror_normalize_equals_the_steps_bit_for_bit() {
    let mean = [0.485, 0.456, 0.406];
    let std = [0.229, 0.224, 0.225];
    let names = vec!["tf_baseline_52x40.jpg"; 9];
    let img = || random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 3), 4);
    // `+ 0.0` changes no value but keeps the expression out of the fused form.
    let ds = images(&names)
        .map(MapFunction::select([
            ("fused", normalize(convert_image_dtype(img()), &mean, &std)),
            ("steps", normalize(convert_image_dtype(img()) + lit(0.0f32), &mean, &std)),
        ]))
        .unwrap();
    let explain = ds.explain();
    assert!(explain.contains("crop-mirror-normalize in one pass"), "{explain}");
    assert!(explain.contains("element keys for random draws"), "{explain}");
    let mut flipped = 0;
    for b in ds.iter() {
        let b = b.unwrap();
        assert_eq!(f32_bits(&b, "fused"), f32_bits(&b, "steps"));
        flipped += 1;
    }
    assert_eq!(flipped, 9);
}

#[test]
fn one_pass_with_color_jitter_equals_the_steps_bit_for_bit() {
    let mean = [0.485, 0.456, 0.406];
    let std = [0.229, 0.224, 0.225];
    let names = vec!["tf_baseline_52x40.jpg"; 7];
    // The crop still encoded (decoded window by window) and an image already fixed.
    let crops: [fn() -> DfExpr; 2] = [
        || random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 3), 4),
        || flip_left_right(random_resized_crop(decode_jpeg(col("image"), 3), 12, 10, 5, (0.3, 1.0), (0.75, 1.33))),
    ];
    let chains: [fn(DfExpr) -> DfExpr; 3] = [
        |x| random_brightness(x, 0.2, 1),
        |x| random_saturation(random_contrast(random_brightness(x, 0.3, 1), 0.5, 1.5, 2), 0.2, 1.8, 3),
        |x| random_brightness(random_contrast(random_contrast(x, 0.6, 1.4, 7), 0.9, 1.1, 8), 0.1, 9),
    ];
    for img in crops {
        for jitter in chains {
            // `+ 0.0` changes no value but keeps the expression out of the fused form.
            let ds = images(&names)
                .map(MapFunction::select([
                    ("fused", normalize(jitter(convert_image_dtype(img())), &mean, &std)),
                    ("steps", normalize(jitter(convert_image_dtype(img()) + lit(0.0f32)), &mean, &std)),
                    ("plain", normalize(convert_image_dtype(img()), &mean, &std)),
                ]))
                .unwrap();
            assert!(ds.explain().contains("crop-mirror-normalize in one pass"));
            let mut elements = 0;
            for b in ds.iter() {
                let b = b.unwrap();
                assert_eq!(f32_bits(&b, "fused"), f32_bits(&b, "steps"));
                // The jitter did something: the fused form did not drop it.
                assert_ne!(f32_bits(&b, "fused"), f32_bits(&b, "plain"));
                elements += b.num_rows();
            }
            assert_eq!(elements, 7);
        }
    }
}

/// The bfloat16 bits nearest `v` (ties to the even one), found by comparing the two
/// candidates around it in float64: a reference written apart from the one under test.
fn nearest_bfloat16(v: f32) -> u16 {
    let below = (v.to_bits() >> 16) as u16;
    let widen = |b: u16| f64::from(f32::from_bits(u32::from(b) << 16));
    let (lo, hi) = (widen(below), widen(below + 1));
    let (dlo, dhi) = ((f64::from(v) - lo).abs(), (hi - f64::from(v)).abs());
    if dlo < dhi || (dlo == dhi && below.is_multiple_of(2)) {
        below
    } else {
        below + 1
    }
}

/// An image function of one image argument, as a test applies it.
type ImageFn = fn(DfExpr) -> DfExpr;

#[test]
fn crops_flips_and_transposes_move_16_bit_float_images_as_they_are() {
    // Each function of a 16-bit image equals the 16-bit image of the function of the
    // float32 image: they only move values. (The equivalence fuzzer found a random flip of
    // a bfloat16 image typed at build time and refused by the kernel when run.)
    let moves: [(&str, ImageFn); 8] = [
        ("flip_left_right", flip_left_right),
        ("flip_up_down", flip_up_down),
        ("random_flip_left_right", |e| random_flip_left_right(e, 3)),
        ("random_flip_up_down", |e| random_flip_up_down(e, 4)),
        ("crop", |e| crop(e, 1, 2, 5, 4)),
        ("central_crop", |e| central_crop(e, 0.5)),
        ("random_crop", |e| random_crop(e, 6, 5, 5)),
        ("hwc_to_chw", hwc_to_chw),
    ];
    let img = || normalize(convert_image_dtype(crop(decode_jpeg(col("image"), 3), 3, 4, 8, 9)), &[0.5; 3], &[0.25; 3]);
    for (name, f) in moves {
        let ds = images(&["tf_baseline_52x40.jpg"; 6])
            .map(MapFunction::select([
                ("bf16", f(cast_bfloat16(img()))),
                ("bf16_after", cast_bfloat16(f(img()))),
                ("f16", f(cast(img(), DataType::Float16))),
                ("f16_after", cast(f(img()), DataType::Float16)),
            ]))
            .unwrap();
        let spec = ds.element_spec().to_string();
        assert!(spec.contains("bf16: bfloat16[") && spec.contains("f16: float16["), "{name}: {spec}");
        let mut flipped = 0;
        for b in ds.iter() {
            let b = b.unwrap();
            let values = |f: &str| leaf(b.column_by_name(f).unwrap()).to_data();
            assert_eq!(values("bf16"), values("bf16_after"), "{name} of bfloat16");
            assert_eq!(values("f16"), values("f16_after"), "{name} of float16");
            flipped += 1;
        }
        assert_eq!(flipped, 6);
    }
    // Other dtypes are refused when the dataset is built, not when it runs.
    let ints = images(&["tf_baseline_52x40.jpg"])
        .map(MapFunction::select([("img", cast(crop(decode_jpeg(col("image"), 3), 0, 0, 4, 4), DataType::Int32))]))
        .unwrap();
    let err = ints.map(MapFunction::select([("out", flip_left_right(col("img")))])).unwrap_err().to_string();
    assert!(err.contains("flip_left_right takes a uint8, float32, float16 or bfloat16 image, got int32"), "{err}");
}

#[test]
fn images_convert_to_16_bit_floats_as_the_float32_values_rounded() {
    let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
    let img = || random_crop(decode_jpeg(col("image"), 3), 8, 8, 1);
    let normalized = || normalize(convert_image_dtype(img()), &mean, &std);
    let ds = images(&["tf_baseline_52x40.jpg"; 3])
        .map(MapFunction::select([
            ("f32", convert_image_dtype(img())),
            ("f16", convert_image_dtype_to(img(), "float16")),
            ("bf16", convert_image_dtype_to(img(), "bfloat16")),
            ("norm", normalized()),
            ("norm_bf16", cast_bfloat16(normalized())),
            ("norm_f16", cast(normalized(), DataType::Float16)),
            ("back", cast(cast_bfloat16(normalized()), DataType::Float32)),
        ]))
        .unwrap()
        .batch(2)
        .unwrap();
    let spec = ds.element_spec().to_string();
    assert!(spec.contains("bf16: bfloat16[?, 8, 8, 3]") && spec.contains("f16: float16[?, 8, 8, 3]"), "{spec}");
    let mut rows = 0;
    for b in ds.iter() {
        let b = b.unwrap();
        rows += b.num_rows();
        let floats = |f: &str| leaf(b.column_by_name(f).unwrap()).as_primitive::<Float32Type>().values().to_vec();
        let bits = |f: &str| leaf(b.column_by_name(f).unwrap()).as_primitive::<UInt16Type>().values().to_vec();
        let halves = |f: &str| {
            let column = leaf(b.column_by_name(f).unwrap());
            column.as_primitive::<Float16Type>().values().iter().map(|v| v.to_f32()).collect::<Vec<f32>>()
        };
        let (converted, norm) = (floats("f32"), floats("norm"));
        assert_eq!(bits("bf16"), converted.iter().map(|v| nearest_bfloat16(*v)).collect::<Vec<_>>());
        assert_eq!(bits("norm_bf16"), norm.iter().map(|v| nearest_bfloat16(*v)).collect::<Vec<_>>());
        let back: Vec<f32> = bits("norm_bf16").iter().map(|b| f32::from_bits(u32::from(*b) << 16)).collect();
        assert_eq!(floats("back"), back);
        // float16 has 10 mantissa bits: within half an ulp (2^-11 relative) of the float32.
        for (name, want) in [("f16", &converted), ("norm_f16", &norm)] {
            for (got, want) in halves(name).iter().zip(want.iter()) {
                assert!((got - want).abs() <= want.abs() / 2048.0 + 1e-7, "{name}: {got} for {want}");
            }
        }
    }
    assert_eq!(rows, 3);
    // Storage types: arithmetic and comparisons ask for a cast first.
    let err = images(&["tf_baseline_52x40.jpg"])
        .map(MapFunction::select([("x", convert_image_dtype_to(img(), "bfloat16") * lit(2.0f32))]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bfloat16") && err.contains("cast it to float32"), "{err}");
}

#[test]
fn a_bfloat16_field_stays_bfloat16_through_later_maps_batches_and_caches() {
    let x: ArrayRef = Arc::new(arrow::array::Float32Array::from(vec![1.0, 1.0078125, -2.5, 0.3]));
    let ds = Dataset::from_arrays([("x", x)])
        .unwrap()
        .map(MapFunction::select([("b", cast_bfloat16(col("x")))]))
        .unwrap()
        .cache()
        .unwrap()
        .batch(3)
        .unwrap()
        .unbatch()
        .unwrap()
        .map(MapFunction::select([("b", col("b")), ("y", cast(col("b"), DataType::Float32))]))
        .unwrap();
    let spec = ds.element_spec().to_string();
    assert!(spec.contains("b: bfloat16") && spec.contains("y: float32"), "{spec}");
    for epoch in 0..2 {
        let mut y = Vec::new();
        for b in ds.iter() {
            y.extend(b.unwrap().column_by_name("y").unwrap().as_primitive::<Float32Type>().values().to_vec());
        }
        // 0.3 is 0x3E99999A in float32; its nearest bfloat16 is 0x3E9A, 0.30078125.
        assert_eq!(y, vec![1.0, 1.0078125, -2.5, 0.30078125], "pass {epoch}");
    }
}

#[test]
fn a_jpeg_cut_short_is_an_error_whether_or_not_the_crop_decodes_only_its_rows() {
    let jpeg = file("tf_baseline_52x40.jpg");
    let cut: ArrayRef = Arc::new(BinaryArray::from_iter_values([jpeg[..jpeg.len() - 100].to_vec()]));
    for options in [Options::default(), Options::default().without_optimizations()] {
        let ds = Dataset::from_arrays([("image", cut.clone())])
            .unwrap()
            .with_options(options)
            .map(MapFunction::select([("top", crop(decode_jpeg(col("image"), 3), 0, 0, 4, 4))]))
            .unwrap();
        let err = ds.iter().next().unwrap().unwrap_err().to_string();
        assert!(err.contains("decode_jpeg"), "{err}");
    }
}

mod equivalence {
    //! Random image pipelines, run as written (`without_optimizations`) and under other
    //! configurations (optimized, one thread, small chunks, rules switched off, stage fusion
    //! off): the same elements and errors at the same positions.

    use super::*;
    use proptest::prelude::*;

    /// One step of the map's image chain, over a uint8 image of unknown or known size.
    #[derive(Debug, Clone)]
    enum Step {
        Crop(u8),
        RandomCrop(u8),
        CentralCrop,
        RandomResizedCrop(u8),
        Resize(u8),
        Flip,
        RandomFlip(u8),
        FlipUpDown,
    }

    #[derive(Debug, Clone)]
    struct Case {
        /// Which test files, by index into `FILES` (the last is corrupt).
        files: Vec<usize>,
        filter_before: Option<i64>,
        steps: Vec<Step>,
        normalize: bool,
        /// Color jitters between the conversion and the normalization: 0 brightness, 1
        /// contrast, 2 saturation.
        jitters: Vec<u8>,
        filter_after: Option<i64>,
        batch: Option<u64>,
        repeat: u64,
    }

    const FILES: [&str; 6] = [
        "tf_baseline_52x40.jpg",
        "baseline_420_37x29.jpg",
        "progressive_37x29.jpg",
        "restart_markers_64x48.jpg",
        "rgb_19x13.png",
        "corrupt",
    ];

    fn bytes(index: usize) -> Vec<u8> {
        match FILES[index] {
            "corrupt" => {
                let mut b = file("tf_baseline_52x40.jpg");
                b.truncate(b.len() - 300);
                b
            }
            name => file(name),
        }
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..4).prop_map(Step::Crop),
            (0u8..4).prop_map(Step::RandomCrop),
            Just(Step::CentralCrop),
            (0u8..4).prop_map(Step::RandomResizedCrop),
            (0u8..4).prop_map(Step::Resize),
            Just(Step::Flip),
            (0u8..4).prop_map(Step::RandomFlip),
            Just(Step::FlipUpDown),
        ]
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            proptest::collection::vec(0usize..FILES.len(), 1..9),
            proptest::option::of(2i64..4),
            proptest::collection::vec(step(), 1..4),
            any::<bool>(),
            proptest::collection::vec(0u8..3, 0..3),
            proptest::option::of(2i64..4),
            proptest::option::of(1u64..4),
            1u64..3,
        )
            .prop_map(|(files, filter_before, steps, normalize, jitters, filter_after, batch, repeat)| Case {
                files,
                filter_before,
                steps,
                normalize,
                jitters,
                filter_after,
                batch,
                repeat,
            })
    }

    /// The image expression of `steps` over `bytes`; the first step sees the decode.
    fn image(steps: &[Step]) -> DfExpr {
        let mut e = decode_image(col("image"), 3);
        // Sizes that fit every test image (the smallest is 19x13).
        for s in steps {
            e = match s {
                Step::Crop(k) => crop(e, i64::from(*k), i64::from(*k), 8, 9),
                Step::RandomCrop(seed) => random_crop(e, 7, 6, i64::from(*seed)),
                Step::CentralCrop => central_crop(e, 0.8),
                Step::RandomResizedCrop(seed) => {
                    random_resized_crop(e, 9, 8, i64::from(*seed), (0.08, 1.0), (0.75, 1.33))
                }
                Step::Resize(m) => resize(e, 10, 7, ["nearest", "bilinear", "bicubic", "area"][*m as usize]),
                Step::Flip => flip_left_right(e),
                Step::RandomFlip(seed) => random_flip_left_right(e, i64::from(*seed)),
                Step::FlipUpDown => flip_up_down(e),
            };
        }
        e
    }

    fn fixed(steps: &[Step]) -> bool {
        steps
            .iter()
            .any(|s| matches!(s, Step::Crop(_) | Step::RandomCrop(_) | Step::RandomResizedCrop(_) | Step::Resize(_)))
    }

    fn build(case: &Case, options: Options) -> Option<Dataset> {
        let column: ArrayRef = Arc::new(BinaryArray::from_iter_values(case.files.iter().map(|i| bytes(*i))));
        let index: ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(0..case.files.len() as i64));
        let mut ds = Dataset::from_arrays([("image", column), ("i", index)]).ok()?.with_options(options);
        if let Some(k) = case.filter_before {
            ds = ds.filter((col("i") % lit(k)).not_eq(lit(0i64))).ok()?;
        }
        let mut img = image(&case.steps);
        if case.normalize && fixed(&case.steps) {
            let mut float = convert_image_dtype(img);
            for (k, jitter) in case.jitters.iter().enumerate() {
                let seed = k as i64;
                float = match jitter {
                    0 => random_brightness(float, 0.2, seed),
                    1 => random_contrast(float, 0.5, 1.5, seed),
                    _ => random_saturation(float, 0.5, 1.5, seed),
                };
            }
            img = normalize(float, &[0.5, 0.4, 0.3], &[0.2, 0.25, 0.3]);
        }
        ds = ds.map(MapFunction::select([("out", img), ("i", col("i"))])).ok()?;
        if let Some(k) = case.filter_after {
            ds = ds.filter((col("i") % lit(k)).not_eq(lit(1i64))).ok()?;
        }
        if let (Some(n), true) = (case.batch, fixed(&case.steps)) {
            ds = ds.batch(n).ok()?;
        }
        ds.repeat(Some(case.repeat)).ok()
    }

    fn items(ds: &Dataset) -> Vec<Result<String, ()>> {
        ds.iter().map(|item| item.map(|b| format!("{:?}", b.columns())).map_err(|_| ())).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn image_pipelines_mean_the_same_under_every_configuration(case in case()) {
            let Some(reference) = build(&case, Options::default().without_optimizations()) else { return Ok(()) };
            let want = items(&reference);
            let configs = [
                Options::default(),
                Options::default().with_threads(1).with_chunk_rows(1),
                Options::default().with_chunk_rows(3),
                Options::default().with_optimization_rule("jpeg-row-decode", false),
                Options::default().with_optimization_rule("filter-hoist", false).with_optimization_rule("map-fusion", false),
                Options::default().with_stage_fusion(false).with_threads(4),
            ];
            for (k, options) in configs.into_iter().enumerate() {
                let ds = build(&case, options).expect("builds as the reference does");
                prop_assert_eq!(&items(&ds), &want, "configuration {}", k);
            }
        }
    }
}

/// A filter below a map that draws random numbers would change the positions its draws are
/// keyed by: the optimizer does not move one there (filter-hoist), even when the map cannot
/// fail.
#[test]
fn a_filter_is_not_hoisted_below_a_random_map() {
    use arrow::array::{FixedSizeListArray, Int64Array, UInt8Array};
    use arrow::datatypes::{DataType, Field};
    let rows = 40;
    let values: ArrayRef = Arc::new(UInt8Array::from_iter_values((0..rows * 4 * 4 * 3).map(|v| (v * 7 % 251) as u8)));
    let wrap = |inner: ArrayRef, n: i32| -> ArrayRef {
        let field = Arc::new(Field::new("item", inner.data_type().clone(), true));
        Arc::new(FixedSizeListArray::new(field, n, inner, None))
    };
    let images = wrap(wrap(wrap(values, 3), 4), 4);
    assert!(matches!(images.data_type(), DataType::FixedSizeList(_, 4)));
    let index: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let pipeline = |options: Options| {
        Dataset::from_arrays([("img", images.clone()), ("i", index.clone())])
            .unwrap()
            .with_options(options)
            .map(MapFunction::select([("img", random_flip_left_right(col("img"), 5)), ("i", col("i"))]))
            .unwrap()
            .filter((col("i") % lit(3i64)).not_eq(lit(1i64)))
            .unwrap()
    };
    let optimized = pipeline(Options::default());
    assert_eq!(pixels_u8(&optimized, "img"), pixels_u8(&pipeline(Options::default().without_optimizations()), "img"));
    let report = optimized.optimization_report().unwrap();
    assert!(!format!("{report:?}").contains("filter-hoist"), "{report:?}");
}

#[test]
fn image_pipelines_serialize_and_read_back() {
    let img = random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 16, 24, 3), 4);
    let ds = images(&["tf_baseline_52x40.jpg"; 4])
        .map(MapFunction::select([("x", normalize(convert_image_dtype(img), &[0.5; 3], &[0.25; 3]))]))
        .unwrap();
    let json = ds.serialize().unwrap();
    assert!(json.contains("random_crop") && json.contains("decode_jpeg"), "{json}");
    let back = Dataset::deserialize(&json, flumen::Registry::default()).unwrap();
    assert_eq!(back.fingerprint(), ds.fingerprint());
    let floats = |d: &Dataset| -> Vec<Vec<u32>> {
        d.iter()
            .map(|b| {
                let b = b.unwrap();
                leaf(b.column(0)).as_primitive::<Float32Type>().values().iter().map(|v| v.to_bits()).collect()
            })
            .collect()
    };
    assert_eq!(floats(&back), floats(&ds));
}

#[test]
fn a_corrupt_file_is_an_error_naming_it_and_the_elements_around_it_come_out() {
    let dir = tempfile::tempdir().unwrap();
    let good = file("tf_baseline_52x40.jpg");
    let paths: Vec<String> =
        ["a.jpg", "cut.jpg", "c.jpg"].iter().map(|n| dir.path().join(n).display().to_string()).collect();
    std::fs::write(&paths[0], &good).unwrap();
    std::fs::write(&paths[1], &good[..good.len() - 300]).unwrap();
    std::fs::write(&paths[2], &good).unwrap();
    let column: ArrayRef = Arc::new(StringArray::from(paths.clone()));
    for options in [Options::default(), Options::default().without_optimizations()] {
        let ds = Dataset::from_arrays([("path", column.clone())])
            .unwrap()
            .with_options(options)
            .map(MapFunction::select([("x", random_crop(decode_jpeg(read_file(col("path")), 3), 8, 8, 1))]))
            .unwrap();
        let items: Vec<Result<usize, String>> =
            ds.iter().map(|b| b.map(|b| b.num_rows()).map_err(|e| e.to_string())).collect();
        assert_eq!(items.len(), 3);
        assert!(items[0].is_ok() && items[2].is_ok(), "{items:?}");
        let err = items[1].as_ref().unwrap_err();
        assert!(err.contains("cut.jpg") && err.contains("decode_jpeg"), "{err}");
    }
}

#[test]
fn a_random_map_that_keeps_its_input_does_not_show_the_element_keys() {
    let img = random_crop(decode_jpeg(col("image"), 3), 8, 8, 2);
    for batched in [false, true] {
        let ds = images(&["tf_baseline_52x40.jpg"; 5]).map(MapFunction::with_fields([("crop", img.clone())])).unwrap();
        let ds = if batched { ds.batch(2).unwrap() } else { ds };
        let names: Vec<String> = ds.element_spec().fields.iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, ["image", "crop"]);
        for b in ds.iter() {
            let b = b.unwrap();
            let got: Vec<String> = b.schema().fields().iter().map(|f| f.name().clone()).collect();
            assert_eq!(got, names, "batched: {batched}");
        }
    }
}

#[test]
fn a_gray_jpeg_decodes_to_three_equal_channels() {
    let gray = decode(&["gray_33x21.jpg"], decode_jpeg, 1).remove(0);
    let rgb = decode(&["gray_33x21.jpg"], decode_jpeg, 3).remove(0);
    assert_eq!(rgb.len(), gray.len() * 3);
    let (mean, max) = diff(&rgb, &gray.iter().flat_map(|g| [*g; 3]).collect::<Vec<_>>());
    assert!(mean < 0.5 && max <= 2, "mean {mean}, largest {max}");
}

#[test]
fn color_jitter_moves_values_as_its_definition_says() {
    let img = || convert_image_dtype(crop(decode_jpeg(col("image"), 3), 0, 0, 16, 16));
    let ds = images(&["tf_baseline_52x40.jpg"; 6])
        .map(MapFunction::select([
            ("x", img()),
            ("bright", random_brightness(img(), 0.2, 1)),
            ("contrast", random_contrast(img(), 0.5, 1.5, 2)),
            ("gray", random_saturation(img(), 0.0, 0.0, 3)),
            ("same", random_saturation(img(), 1.0, 1.0, 3)),
        ]))
        .unwrap();
    let mut deltas = std::collections::BTreeSet::new();
    for b in ds.iter() {
        let b = b.unwrap();
        let f = |n: &str| leaf(b.column_by_name(n).unwrap()).as_primitive::<Float32Type>().values().to_vec();
        let (x, bright, contrast, gray, same) = (f("x"), f("bright"), f("contrast"), f("gray"), f("same"));
        // Brightness: one delta in [-0.2, 0.2) for the whole image.
        let delta = bright[0] - x[0];
        assert!((-0.2..0.2).contains(&delta));
        assert!(x.iter().zip(&bright).all(|(a, b)| (b - a - delta).abs() < 1e-5));
        deltas.insert((delta * 1e6) as i64);
        // Contrast keeps each channel's mean.
        for c in 0..3 {
            let mean = |v: &[f32]| v.iter().skip(c).step_by(3).sum::<f32>() / 256.0;
            assert!((mean(&contrast) - mean(&x)).abs() < 1e-4);
        }
        // Saturation 0 is the grayscale in every channel; 1 changes nothing.
        assert!(gray.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
        assert!(same.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-6));
    }
    assert!(deltas.len() > 3, "each element draws its own delta: {deltas:?}");
}

#[test]
fn batching_bucketing_and_padding_keep_a_null_image_null() {
    let jpeg = file("tf_baseline_52x40.jpg");
    let column: ArrayRef = Arc::new(BinaryArray::from(vec![None, Some(jpeg.as_slice()), None]));
    let index: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![0i64, 1, 2]));
    let img = normalize(convert_image_dtype(crop(decode_jpeg(col("image"), 3), 0, 0, 8, 9)), &[0.5; 3], &[0.2; 3]);
    for options in [Options::default(), Options::default().without_optimizations()] {
        let base = Dataset::from_arrays([("i", index.clone()), ("image", column.clone())])
            .unwrap()
            .with_options(options.clone())
            .map(MapFunction::select([("i", col("i")), ("img", img.clone())]))
            .unwrap();
        // One bucket of batches of 3: the elements' order is kept.
        let bucket = base
            .bucket_by_sequence_length(lit(1i64) + col("i") * lit(0i64), vec![4], vec![3, 3], Default::default())
            .unwrap();
        for (name, ds) in [
            ("batch", base.batch(3).unwrap()),
            ("bucket", bucket),
            ("padded", base.padded_batch(3, Default::default()).unwrap()),
        ] {
            let batches: Vec<_> = ds.iter().map(|b| b.unwrap()).collect();
            let img = batches[0].column_by_name("img").unwrap();
            let nulls: Vec<bool> = (0..img.len()).map(|r| img.is_null(r)).collect();
            assert_eq!(nulls, [true, false, true], "{name}, optimized: {}", options.optimization.enabled);
        }
    }
}

"""Image functions from Python: decode, crop, flip, normalize and batch JPEGs written by
Pillow and TensorFlow (the repository's tests/data/images), and reproducible random crops."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import flumen
from flumen import col

IMAGES = Path(__file__).resolve().parents[3] / "tests" / "data" / "images"


def jpegs(n):
    data = (IMAGES / "tf_baseline_52x40.jpg").read_bytes()
    return flumen.Dataset.from_arrow(pa.table({"image": pa.array([data] * n, pa.binary()), "i": list(range(n))}))


def test_decoded_png_equals_pillows_pixels_and_crops_are_windows():
    data = (IMAGES / "rgb_19x13.png").read_bytes()
    want = np.frombuffer((IMAGES / "rgb_19x13.png.rgb").read_bytes(), np.uint8).reshape(13, 19, 3)
    ds = flumen.Dataset.from_arrow(pa.table({"image": pa.array([data], pa.binary())}))
    ds = ds.map({"crop": flumen.crop(flumen.decode_png(col("image")), 2, 3, 5, 7),
                 "flip": flumen.flip_left_right(flumen.crop(flumen.decode_image(col("image")), 0, 0, 13, 19))},
                keep=False)
    (element,) = list(ds)
    assert np.asarray(element["crop"]).shape == (5, 7, 3)
    np.testing.assert_array_equal(np.asarray(element["crop"]), want[2:7, 3:10])
    np.testing.assert_array_equal(np.asarray(element["flip"]), want[:, ::-1])


def test_w5_style_pipeline_batches_normalized_crops_reproducibly():
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    image = flumen.random_flip_left_right(flumen.random_crop(flumen.decode_jpeg(col("image")), (16, 24), seed=3), seed=4)
    image = flumen.normalize(flumen.convert_image_dtype(image), mean, std)

    def run(parallel):
        ds = jpegs(20).map({"image": image, "i": col("i")}, keep=False, num_parallel_calls=parallel).batch(8)
        return [np.asarray(b["image"]) for b in ds]

    batches = run(1)
    assert [b.shape for b in batches] == [(8, 16, 24, 3), (8, 16, 24, 3), (4, 16, 24, 3)]
    assert batches[0].dtype == np.float32
    for a, b in zip(batches, run(4)):
        np.testing.assert_array_equal(a, b)
    # Different elements get different windows.
    flat = np.concatenate(batches)
    assert len({flat[i].tobytes() for i in range(len(flat))}) > 10


def test_sharding_before_random_crops_draws_what_sharding_after_does():
    crop = {"out": flumen.random_crop(flumen.decode_jpeg(col("image")), (16, 24), seed=3), "i": col("i")}

    def crops(ds):
        return {int(e["i"]): np.asarray(e["out"]).tobytes() for e in ds}

    whole = crops(jpegs(15).map(crop, keep=False))
    assert len(set(whole.values())) > 5
    for n, i in [(2, 1), (4, 3)]:
        assert crops(jpegs(15).shard(n, i).map(crop, keep=False)) == {k: v for k, v in whole.items() if k % n == i}
        assert "element_positions" in jpegs(15).shard(n, i).map(crop, keep=False).explain()


def test_random_resized_crop_resize_and_read_file(tmp_path):
    path = IMAGES / "tf_baseline_52x40.jpg"
    ds = flumen.Dataset.from_arrow(pa.table({"path": [str(path)]}))
    img = flumen.decode_jpeg(flumen.read_file(col("path")))
    ds = ds.map({"rrc": flumen.random_resized_crop(img, (24, 24), seed=1),
                 "small": flumen.resize(img, (20, 26), "area"),
                 "center": flumen.central_crop(img, 0.5),
                 "chw": flumen.hwc_to_chw(flumen.crop(img, 10, 13, 20, 26))}, keep=False)
    (element,) = list(ds)
    assert np.asarray(element["rrc"]).shape == (24, 24, 3)
    assert np.asarray(element["small"]).shape == (20, 26, 3)
    assert np.asarray(element["chw"]).shape == (3, 20, 26)
    np.testing.assert_array_equal(np.asarray(element["chw"]), np.asarray(element["center"]).transpose(2, 0, 1))
    with pytest.raises(flumen.PlanError, match="fixed size"):
        flumen.Dataset.from_arrow(pa.table({"path": [str(path)]})).map({"x": flumen.hwc_to_chw(flumen.central_crop(img, 0.5))})


def test_a_corrupt_image_is_an_error_naming_the_decoder():
    ds = flumen.Dataset.from_arrow(pa.table({"image": pa.array([b"\xff\xd8\xff garbage"], pa.binary())}))
    ds = ds.map({"x": flumen.decode_jpeg(col("image"))}, keep=False)
    with pytest.raises(Exception, match="bad input in field 'image': decode_jpeg"):
        list(ds)


def test_bfloat16_and_float16_images_for_accelerators():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    crop = flumen.random_crop(flumen.decode_jpeg(col("image")), (8, 8), seed=1)
    norm = flumen.normalize(flumen.convert_image_dtype(crop), mean, std)
    ds = jpegs(3).map({"f32": norm, "bf16": norm.cast("bfloat16"), "f16": norm.cast("float16"),
                       "scaled": flumen.convert_image_dtype(crop, "bfloat16"),
                       "scaled32": flumen.convert_image_dtype(crop)}, keep=False).batch(3)
    assert ("bf16", "bfloat16", [None, 8, 8, 3]) in ds.element_spec
    (b,) = list(ds)
    assert b["bf16"].dtype == ml_dtypes.bfloat16 and b["f16"].dtype == np.float16
    # ml_dtypes and NumPy round float32 to nearest even, as flumen does.
    np.testing.assert_array_equal(b["bf16"], b["f32"].astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(b["f16"], b["f32"].astype(np.float16))
    np.testing.assert_array_equal(b["scaled"], b["scaled32"].astype(ml_dtypes.bfloat16))
    # bfloat16 arrays go in too, exactly, and back out as float32 through a cast.
    x = np.array([1.0, 1.0078125, -2.5, 3e38], np.float32).astype(ml_dtypes.bfloat16)
    back = flumen.Dataset.from_numpy({"x": x}).map({"y": col("x").cast("float32")}).batch(4)
    (out,) = list(back)
    assert out["x"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_array_equal(out["y"], x.astype(np.float32))
    with pytest.raises(Exception, match="cast it to float32"):
        jpegs(1).map({"x": norm.cast("bfloat16") * 2.0})


def test_bfloat16_reaches_jax_as_bfloat16():
    jnp = pytest.importorskip("jax.numpy")
    ds = flumen.Dataset.from_numpy({"x": np.array([0.5, -1.25], np.float32)}).map({"y": col("x").cast("bfloat16")})
    y = [e["y"] for e in ds.iter_jax()]
    assert y[0].dtype == jnp.bfloat16
    assert [float(v) for v in y] == [0.5, -1.25]

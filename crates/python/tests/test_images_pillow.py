"""flumen's JPEG pixels against Pillow's (libjpeg-turbo, which tf.io.decode_jpeg with its
accurate inverse DCT matches exactly), over JPEGs Pillow writes here: every subsampling mode
at widths 1 to 17 and 33 (edges that fall inside an MCU, chroma two samples wide or less),
progressive and restart-interval files, gray, RGB stored as RGB, and CMYK.

flumen upsamples chroma and converts colour as libjpeg does; its inverse DCT (zune-jpeg's) is
not libjpeg's accurate one, which leaves a level here and there, at most three after colour
conversion, at the edges as inside.
"""

import io

import numpy as np
import pytest

import flumen
from flumen import col

Image = pytest.importorskip("PIL.Image")
pa = pytest.importorskip("pyarrow")

# The most a pixel may differ, and the most the mean may.
MOST, MEAN = 3, 0.5


def photo(h, w, seed):
    """A smooth colour image with noise, so that chroma varies across the edges."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(xx / 3.0 + seed), np.cos(yy / 4.0), np.sin((xx + yy) / 5.0)], -1)
    return np.clip((base * 0.5 + 0.5) * 255 + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def encode(image, **options):
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def flumen_decode(data, h, w, channels):
    ds = flumen.Dataset.from_arrow(pa.table({"image": pa.array([data], pa.binary())}))
    ds = ds.map({"px": flumen.crop(flumen.decode_jpeg(col("image"), channels), 0, 0, h, w)}, keep=False)
    (element,) = list(ds)
    return np.asarray(element["px"]).reshape(h, w, channels)


def assert_close(got, want, what):
    d = np.abs(got.astype(int) - want.astype(int))
    assert d.max() <= MOST and d.mean() <= MEAN, f"{what}: largest difference {d.max()} at {np.unravel_index(d.argmax(), d.shape)}, mean {d.mean():.3f}"


SIZES = [(h, w) for w in list(range(1, 18)) + [33] for h in (1, 5, 8, 17)]


@pytest.mark.parametrize("subsampling", [0, 1, 2], ids=["4:4:4", "4:2:2", "4:2:0"])
def test_every_subsampling_at_every_small_width(subsampling):
    for h, w in SIZES:
        data = encode(Image.fromarray(photo(h, w, w * 31 + h)), subsampling=subsampling)
        want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert_close(flumen_decode(data, h, w, 3), want, f"{w}x{h} subsampling {subsampling}")


@pytest.mark.parametrize("options", [{"progressive": True}, {"restart_marker_blocks": 1}, {"restart_marker_rows": 1}],
                         ids=["progressive", "restart every block", "restart every row"])
def test_progressive_and_restart_interval_files(options):
    for h, w in [(17, 13), (33, 47), (8, 16), (5, 3)]:
        data = encode(Image.fromarray(photo(h, w, h + w)), subsampling=2, **options)
        want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert_close(flumen_decode(data, h, w, 3), want, f"{w}x{h} {options}")


def test_gray_and_rgb_stored_files_at_every_channel_count():
    for h, w in [(5, 7), (17, 33)]:
        gray = encode(Image.fromarray(photo(h, w, 3)[:, :, 1]))
        want = np.asarray(Image.open(io.BytesIO(gray)).convert("L"))
        assert_close(flumen_decode(gray, h, w, 1)[:, :, 0], want, f"gray {w}x{h}")
        for channels in (3, 4):
            got = flumen_decode(gray, h, w, channels)
            assert_close(got[:, :, :3], np.repeat(want[:, :, None], 3, axis=2), f"gray as {channels}")
            assert channels == 3 or (got[:, :, 3] == 255).all()
        stored_rgb = encode(Image.fromarray(photo(h, w, 4)), keep_rgb=True)
        decoded = Image.open(io.BytesIO(stored_rgb))
        rgb = np.asarray(decoded.convert("RGB"))
        assert_close(flumen_decode(stored_rgb, h, w, 3), rgb, f"RGB-stored {w}x{h}")
        rgba = flumen_decode(stored_rgb, h, w, 4)
        assert_close(rgba[:, :, :3], rgb, "RGB-stored as RGBA")
        assert (rgba[:, :, 3] == 255).all()
        assert_close(flumen_decode(stored_rgb, h, w, 1)[:, :, 0], np.asarray(decoded.convert("L")), "RGB-stored as gray")


def test_cmyk_files_convert_as_tensorflow_does():
    # TensorFlow's decoder turns Adobe CMYK (stored inverted) into RGB as c·k / 255 of the
    # stored values; Pillow hands out the ink values (255 - stored), so the reference is
    # (255 - c)(255 - k) / 255 of Pillow's planes.
    for h, w in [(16, 24), (7, 13)]:
        data = encode(Image.fromarray(photo(h, w, 5)).convert("CMYK"))
        ink = np.asarray(Image.open(io.BytesIO(data))).astype(int)
        want = ((255 - ink[:, :, :3]) * (255 - ink[:, :, 3:]) // 255).astype(np.uint8)
        assert_close(flumen_decode(data, h, w, 3), want, f"CMYK {w}x{h}")
        rgba = flumen_decode(data, h, w, 4)
        assert (rgba[:, :, 3] == 255).all()
        assert_close(rgba[:, :, :3], want, f"CMYK {w}x{h} as RGBA")

"""Writes the test images and, beside each, the pixels another decoder gives for it.

Two YCCK files (`ycck_420_13x7.jpg`, `ycck_420_30x22.jpg`: Adobe transform 2, 4:2:0) were
written by the Rust `jpeg-encoder` crate, since Pillow cannot write YCCK; their
`.tf.rgb`, like `cmyk_24x16.jpg.tf.rgb`, is tf.io.decode_jpeg's (dct_method
INTEGER_ACCURATE) decode, written at the end of this script.

Run with a Python that has Pillow and TensorFlow (the bench's venv plus `pip install pillow`):
    python make_images.py
The images are encoded by Pillow (libjpeg-turbo, zlib) and TensorFlow, never by flumen; the
`.rgb` / `.gray` files are Pillow's decode of each, which the tests compare flumen's with.
"""
import io

import numpy as np
from PIL import Image

rng = np.random.default_rng(35)


def photo(h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(xx / 5.0), np.cos(yy / 7.0), np.sin((xx + yy) / 9.0)], -1)
    return np.clip((base * 0.5 + 0.5) * 255 + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)


def save(name, img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    open(name, "wb").write(buf.getvalue())
    back = Image.open(io.BytesIO(buf.getvalue()))
    back.load()
    mode = "L" if back.mode in ("L", "I;16", "I") else "RGB"
    raw = np.asarray(back.convert(mode), dtype=np.uint8)
    open(name + (".gray" if mode == "L" else ".rgb"), "wb").write(raw.tobytes())
    print(name, back.size, back.mode, len(buf.getvalue()))


rgb = Image.fromarray(photo(29, 37))
save("baseline_420_37x29.jpg", rgb, "JPEG", quality=90)
save("baseline_444_37x29.jpg", rgb, "JPEG", quality=90, subsampling=0)
save("progressive_37x29.jpg", rgb, "JPEG", quality=85, progressive=True)
save("restart_markers_64x48.jpg", Image.fromarray(photo(48, 64)), "JPEG", quality=90, restart_marker_blocks=2)
save("gray_33x21.jpg", Image.fromarray(photo(21, 33)[:, :, 1]), "JPEG", quality=90)
save("cmyk_24x16.jpg", Image.fromarray(photo(16, 24)).convert("CMYK"), "JPEG", quality=95)
save("rgb_19x13.png", Image.fromarray(photo(13, 19)), "PNG")
save("rgba_19x13.png", Image.fromarray(np.dstack([photo(13, 19), rng.integers(0, 256, (13, 19), dtype=np.uint8)])), "PNG")
save("gray_19x13.png", Image.fromarray(photo(13, 19)[:, :, 0]), "PNG")
save("palette_19x13.png", Image.fromarray(photo(13, 19)).convert("P"), "PNG")
gray8 = photo(13, 19)[:, :, 0]
save("gray16_19x13.png", Image.fromarray(gray8.astype(np.uint16) * 257), "PNG")
# Pillow clips 16-bit samples to 8 bits; the high byte of v * 257 is v.
open("gray16_19x13.png.gray", "wb").write(gray8.tobytes())

import tensorflow as tf  # noqa: E402

img = photo(40, 52)
open("tf_baseline_52x40.jpg", "wb").write(tf.io.encode_jpeg(img, quality=90).numpy())
back = np.asarray(Image.open("tf_baseline_52x40.jpg").convert("RGB"))
open("tf_baseline_52x40.jpg.rgb", "wb").write(back.tobytes())
# tf.io.decode_jpeg's own pixels for the same file (libjpeg-turbo, TensorFlow's settings).
tf_px = tf.io.decode_jpeg(open("tf_baseline_52x40.jpg", "rb").read(), channels=3).numpy()
open("tf_baseline_52x40.jpg.tf.rgb", "wb").write(tf_px.tobytes())
# Pixels stored as RGB (Adobe transform 0), which flumen converts to gray and RGBA itself.
save("keep_rgb_23x11.jpg", Image.fromarray(photo(11, 23)), "JPEG", quality=90, keep_rgb=True)
# tf.io.decode_jpeg with libjpeg's accurate inverse DCT, as Pillow decodes (its default,
# the fast one, differs by a few levels): the CMYK and YCCK references.
for name in ["cmyk_24x16.jpg", "ycck_420_13x7.jpg", "ycck_420_30x22.jpg"]:
    px = tf.io.decode_jpeg(open(name, "rb").read(), channels=3, dct_method="INTEGER_ACCURATE").numpy()
    open(name + ".tf.rgb", "wb").write(px.tobytes())

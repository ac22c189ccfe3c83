"""flumen: compiled, parallel input pipelines with tf.data's API.

Build a pipeline from a source and transformations, with expressions for the per-element
work, and iterate it::

    import flumen
    from flumen import col

    ds = (flumen.Dataset.range(1000)
          .map({"y": col("value") * 2 + 1})
          .filter(col("y") % 3 != 0)
          .batch(32)
          .prefetch(flumen.AUTOTUNE))
    for batch in ds:          # a dict of read-only NumPy arrays, views of flumen's buffers
        ...

The pipeline runs in Rust, outside the GIL. ``ds.iter(as_batches=True)`` gives ``Batch``
objects instead, which pyarrow (``pyarrow.record_batch(b)``), polars and others import without
a copy through the Arrow PyCapsule interface.
"""

from typing import NamedTuple

from flumen._flumen import (
    AUTOTUNE,
    ArrowStream,
    Batch,
    CancelledError,
    Column,
    DataError,
    Dataset,
    Error,
    Expr,
    IoError,
    Iterator,
    Options,
    PlanError,
    UdfError,
    col,
    When,
    func,
    lit,
    when,
    serialize_example,
    write_tfrecord,
)

__all__ = [
    "AUTOTUNE",
    "ArrowStream",
    "Batch",
    "CancelledError",
    "Column",
    "DataError",
    "Dataset",
    "Error",
    "Expr",
    "IoError",
    "Iterator",
    "Options",
    "PlanError",
    "UdfError",
    "col",
    "When",
    "func",
    "lit",
    "when",
    "SparseFeature",
    "SparseTensor",
    "serialize_example",
    "write_tfrecord",
    "abs",
    "sqrt",
    "exp",
    "ln",
    "log2",
    "log10",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sign",
    "length",
    "power",
    "atan2",
    "truediv",
    "floordiv",
    "floormod",
    "clip",
    "least",
    "greatest",
    "coalesce",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "bucketize",
    "one_hot",
    "hash_bucket",
    "normalize",
    "read_file",
    "decode_jpeg",
    "decode_png",
    "decode_image",
    "resize",
    "crop",
    "central_crop",
    "random_crop",
    "random_resized_crop",
    "flip_left_right",
    "flip_up_down",
    "random_flip_left_right",
    "random_flip_up_down",
    "hwc_to_chw",
    "convert_image_dtype",
    "random_brightness",
    "random_contrast",
    "random_saturation",
]



# The math functions, elementwise (over every value of a tensor field).


def abs(e):  # noqa: A001 - tf.math's name
    """The absolute value of ``e``."""
    return func("abs", [e])


def sqrt(e):
    """The square root of ``e``."""
    return func("sqrt", [e])


def exp(e):
    """Euler's number to the power ``e``."""
    return func("exp", [e])


def ln(e):
    """The natural logarithm of ``e``."""
    return func("ln", [e])


def log2(e):
    """The base-2 logarithm of ``e``."""
    return func("log2", [e])


def log10(e):
    """The base-10 logarithm of ``e``."""
    return func("log10", [e])


def floor(e):
    """``e`` rounded down."""
    return func("floor", [e])


def ceil(e):
    """``e`` rounded up."""
    return func("ceil", [e])


def round(e):  # noqa: A001 - tf.math's name
    """``e`` rounded to the nearest integer, halves to even (as ``tf.round`` and Python's
    ``round``: 2.5 is 2.0)."""
    return func("round", [e])


def truediv(a, b):
    """``a / b`` as a float (``tf.math.truediv``; what ``/`` on expressions means)."""
    return func("truediv", [a, b])


def floordiv(a, b):
    """``a // b``, rounded toward negative infinity (``tf.math.floordiv``)."""
    return func("floordiv", [a, b])


def floormod(a, b):
    """``a % b`` with the divisor's sign (``tf.math.floormod``)."""
    return func("floormod", [a, b])


def trunc(e):
    """``e`` rounded towards zero."""
    return func("trunc", [e])


def sin(e):
    """The sine of ``e`` (radians)."""
    return func("sin", [e])


def cos(e):
    """The cosine of ``e`` (radians)."""
    return func("cos", [e])


def tan(e):
    """The tangent of ``e`` (radians)."""
    return func("tan", [e])


def tanh(e):
    """The hyperbolic tangent of ``e``."""
    return func("tanh", [e])


def sign(e):
    """-1, 0 or 1 by the sign of ``e``."""
    return func("sign", [e])


def power(e, exponent):
    """``e`` to the power ``exponent``."""
    return func("power", [e, exponent])


def atan2(y, x):
    """The angle of the point ``(x, y)`` (radians)."""
    return func("atan2", [y, x])


def clip(e, lo, hi):
    """``e`` limited to ``[lo, hi]``."""
    return func("clip", [e, lo, hi])


def least(*es):
    """The smallest of ``es``."""
    return func("least", list(es))


def greatest(*es):
    """The largest of ``es``."""
    return func("greatest", list(es))


def coalesce(*es):
    """The first of ``es`` that is not null."""
    return func("coalesce", list(es))


# Per-element tensor functions (tf's names and semantics).


def length(e):
    """The number of values of a list field ``e`` (or characters of a string)."""
    return func("length", [e])


def reduce_sum(e, axis=None):
    """``tf.reduce_sum`` per element: over every value, or over the dims ``axis`` (an int
    or a list of ints; negative ones count from the last)."""
    return func("reduce_sum", [e] if axis is None else [e, _axes(axis)])


def reduce_mean(e, axis=None):
    """``tf.reduce_mean`` per element, as ``reduce_sum``."""
    return func("reduce_mean", [e] if axis is None else [e, _axes(axis)])


def reduce_max(e, axis=None):
    """``tf.reduce_max`` per element, as ``reduce_sum``."""
    return func("reduce_max", [e] if axis is None else [e, _axes(axis)])


def reduce_min(e, axis=None):
    """``tf.reduce_min`` per element, as ``reduce_sum``."""
    return func("reduce_min", [e] if axis is None else [e, _axes(axis)])


def bucketize(e, boundaries):
    """``tf.raw_ops.Bucketize``: the index of the first of the sorted ``boundaries`` greater
    than ``e``, as int32."""
    return func("bucketize", [e, [float(b) for b in boundaries]])


def one_hot(indices, depth):
    """``tf.one_hot(indices, depth)`` as float32; an index outside ``[0, depth)`` gives
    zeros."""
    return func("one_hot", [indices, int(depth)])


def hash_bucket(strings, num_buckets):
    """``tf.strings.to_hash_bucket_fast``: TensorFlow's bucket of each string, as int64."""
    return func("hash_bucket", [strings, int(num_buckets)])


def normalize(e, mean, std):
    """``(e - mean) / std`` per channel (the last dim), ``mean`` and ``std`` one value per
    channel."""
    return func("normalize", [e, [float(m) for m in mean], [float(s) for s in std]])


# Images (tf.io / tf.image names). An image is a uint8 [height, width, channels] field; a
# decoded one varies in size until a crop or resize fixes it. The random functions draw from
# (seed, epoch, the element's position in the map's input): the same element gets the same
# crop whatever the parallelism, and after a checkpoint restore.


def read_file(path):
    """``tf.io.read_file``: the bytes of the file at string ``path``."""
    return func("read_file", [path])


def decode_jpeg(e, channels=3):
    """``tf.io.decode_jpeg``: a JPEG's pixels as uint8 ``[h, w, channels]`` (1, 3 or 4)."""
    return func("decode_jpeg", [e, int(channels)])


def decode_png(e, channels=3):
    """``tf.io.decode_png``: a PNG's pixels (16-bit samples keep their high byte)."""
    return func("decode_png", [e, int(channels)])


def decode_image(e, channels=3):
    """A JPEG or a PNG, told apart by its first bytes."""
    return func("decode_image", [e, int(channels)])


def resize(e, size, method="bilinear"):
    """A uint8 image resized to ``size`` (height, width); ``method`` is ``nearest``,
    ``bilinear``, ``bicubic``, ``area`` or ``lanczos3`` (shrinking antialiases)."""
    return func("resize", [e, int(size[0]), int(size[1]), str(method)])


def crop(e, top, left, height, width):
    """``tf.image.crop_to_bounding_box``."""
    return func("crop", [e, int(top), int(left), int(height), int(width)])


def central_crop(e, fraction):
    """``tf.image.central_crop``: the central ``fraction`` of the height and the width."""
    return func("central_crop", [e, float(fraction)])


def random_crop(e, size, seed=0):
    """``tf.image.random_crop`` to ``size`` (height, width)."""
    return func("random_crop", [e, int(size[0]), int(size[1]), int(seed)])


def random_resized_crop(e, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0):
    """torchvision's ``RandomResizedCrop(size, scale, ratio)`` of a uint8 image, bilinear."""
    scale, ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
    return func("random_resized_crop", [e, int(size[0]), int(size[1]), int(seed), scale, ratio])


def flip_left_right(e):
    """The image mirrored."""
    return func("flip_left_right", [e])


def flip_up_down(e):
    """The image upside down."""
    return func("flip_up_down", [e])


def random_flip_left_right(e, seed=0):
    """Mirrored with probability 1/2."""
    return func("random_flip_left_right", [e, int(seed)])


def random_flip_up_down(e, seed=0):
    """Upside down with probability 1/2."""
    return func("random_flip_up_down", [e, int(seed)])


def hwc_to_chw(e):
    """``[h, w, c]`` to ``[c, h, w]`` (a fixed-size image)."""
    return func("hwc_to_chw", [e])


def convert_image_dtype(e, dtype="float32"):
    """``tf.image.convert_image_dtype``: uint8 to ``dtype`` (``"float32"``, ``"float16"`` or
    ``"bfloat16"``) in ``[0, 1]``; the 16-bit values are the float32 ones rounded to nearest
    even."""
    return func("convert_image_dtype", [e, str(dtype)])


def random_brightness(e, max_delta, seed=0):
    """A float32 image plus one uniform draw in ``[-max_delta, max_delta)``."""
    return func("random_brightness", [e, float(max_delta), int(seed)])


def random_contrast(e, lower, upper, seed=0):
    """``tf.image.random_contrast`` of a float32 image."""
    return func("random_contrast", [e, float(lower), float(upper), int(seed)])


def random_saturation(e, lower, upper, seed=0):
    """A float32 RGB image blended with its grayscale by a draw in ``[lower, upper)``."""
    return func("random_saturation", [e, float(lower), float(upper), int(seed)])


def _axes(axis):
    return [int(axis)] if isinstance(axis, int) else [int(a) for a in axis]


class SparseTensor(NamedTuple):
    """A sparse tensor value, as ``tf.sparse.SparseTensor``: ``values[i]`` at the int64
    coordinates ``indices[i]`` (``[nnz, rank]``) of a tensor of shape ``dense_shape``, zero
    elsewhere. Iteration gives a sparse field as one; a Python function, a generator or
    ``from_tensors`` returns one for a field declared ``(dtype, shape, "sparse")``
    (TensorFlow's ``SparseTensor`` and ``SparseTensorValue`` are taken too). Each value
    keeps its ``dense_shape``; a batch's is the batch's length before the largest of its
    elements', as in tf.data."""

    indices: object
    values: object
    dense_shape: object

    def to_dense(self, default_value=0):
        """The dense NumPy array, ``default_value`` where no entry is given (as
        ``tf.sparse.to_dense``)."""
        import numpy as np

        values = np.asarray(self.values)
        dense = np.full(tuple(np.asarray(self.dense_shape).tolist()), default_value, dtype=values.dtype)
        indices = np.asarray(self.indices, dtype=np.int64).reshape(len(values), -1)
        dense[tuple(indices.T)] = values
        return dense


class SparseFeature(NamedTuple):
    """``tf.io.SparseFeature`` for ``Dataset.parse_example``: the ``dtype`` values of feature
    ``value_key`` at the int64 coordinates of features ``index_key`` (one per dimension of
    ``size``). Iteration gives the field as ``(indices, values, dense_shape)``."""

    index_key: str | list[str]
    value_key: str
    dtype: str
    size: int | list[int]
    already_sorted: bool = False

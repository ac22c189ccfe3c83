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

from flumen._flumen import (
    AUTOTUNE,
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
    func,
    lit,
    serialize_example,
    write_tfrecord,
)

__all__ = [
    "AUTOTUNE",
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
    "func",
    "lit",
    "serialize_example",
    "write_tfrecord",
    "sqrt",
    "floor",
    "abs",
    "length",
    "clip",
]


def sqrt(e):
    """The square root of ``e``."""
    return func("sqrt", [e])


def floor(e):
    """``e`` rounded down."""
    return func("floor", [e])


def abs(e):  # noqa: A001 - tf.math's name
    """The absolute value of ``e``."""
    return func("abs", [e])


def length(e):
    """The number of values of a list field ``e`` (or characters of a string)."""
    return func("length", [e])


def clip(e, lo, hi):
    """``e`` limited to ``[lo, hi]``."""
    return func("clip", [e, lo, hi])

"""Every dtype of flumen's IR through each way out of it, by value: NumPy (the C struct and
dict array interfaces, and `numpy.from_dlpack`), pyarrow (the Arrow C stream) and DLPack."""

import datetime
import decimal

import numpy as np
import pytest

import flumen

pa = pytest.importorskip("pyarrow")

# (flumen dtype, pyarrow type, values without nulls, NumPy dtype the values reach NumPy as).
CASES = [
    ("bool", pa.bool_(), [True, False, True], np.dtype(bool)),
    ("int8", pa.int8(), [-128, 0, 127], np.dtype("int8")),
    ("int16", pa.int16(), [-32768, 1, 32767], np.dtype("int16")),
    ("int32", pa.int32(), [-(2**31), 2, 2**31 - 1], np.dtype("int32")),
    ("int64", pa.int64(), [-(2**63), 3, 2**63 - 1], np.dtype("int64")),
    ("uint8", pa.uint8(), [0, 1, 255], np.dtype("uint8")),
    ("uint16", pa.uint16(), [0, 2, 65535], np.dtype("uint16")),
    ("uint32", pa.uint32(), [0, 3, 2**32 - 1], np.dtype("uint32")),
    ("uint64", pa.uint64(), [0, 4, 2**64 - 1], np.dtype("uint64")),
    ("float16", pa.float16(), [np.float16(-1.5), np.float16(0.0), np.float16(65504.0)], np.dtype("float16")),
    ("float32", pa.float32(), [-1.5, float("inf"), 3.25], np.dtype("float32")),
    ("float64", pa.float64(), [-1e300, -0.0, 2.5], np.dtype("float64")),
    ("date32", pa.date32(), [datetime.date(1970, 1, 1), datetime.date(2024, 2, 29), datetime.date(1900, 1, 1)],
     np.dtype("datetime64[D]")),
    ("time64_us", pa.time64("us"), [datetime.time(0, 0), datetime.time(12, 30, 1, 5), datetime.time(23, 59, 59, 999999)],
     np.dtype("timedelta64[us]")),
    ("timestamp_us", pa.timestamp("us", tz="UTC"),
     [datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc),
      datetime.datetime(2001, 9, 9, 1, 46, 40, 123456, tzinfo=datetime.timezone.utc),
      datetime.datetime(1960, 1, 1, tzinfo=datetime.timezone.utc)],
     np.dtype("datetime64[us]")),
]


def numpy_value(v, dtype):
    """A Python value as NumPy holds it in `dtype`."""
    if dtype.kind == "M" and isinstance(v, datetime.datetime):
        return np.datetime64(v.replace(tzinfo=None), "us")
    if dtype.kind == "m":
        return np.timedelta64(((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond, "us")
    return np.array(v, dtype=dtype)


@pytest.mark.parametrize("name,arrow_type,values,numpy_dtype", CASES, ids=[c[0] for c in CASES])
def test_every_dtype_reaches_numpy_pyarrow_and_dlpack_by_value(name, arrow_type, values, numpy_dtype):
    table = pa.table({"v": pa.array(values, type=arrow_type)})
    ds = flumen.Dataset.from_arrow(table)
    assert ds.element_spec[0][1] == name
    want = np.array([numpy_value(v, numpy_dtype) for v in values], dtype=numpy_dtype)

    # NumPy, element by element (0-d per element) and batched.
    elements = [np.asarray(e["v"]) for e in ds]
    assert [e.dtype for e in elements] == [numpy_dtype] * len(values)
    np.testing.assert_array_equal(np.array([e.reshape(()) for e in elements], dtype=numpy_dtype), want)
    batch = next(iter(ds.batch(3)))["v"]
    assert batch.dtype == numpy_dtype
    np.testing.assert_array_equal(batch, want)

    # Through each array interface of the column itself.
    column = dict(next(iter(ds.batch(3).iter(as_batches=True))).columns())["v"]
    via_struct = np.asarray(column)
    via_dict = np.asarray(column.__array_interface__ and _DictOnly(column))
    for got in (via_struct, via_dict):
        assert got.dtype == numpy_dtype, name
        np.testing.assert_array_equal(got, want)

    # pyarrow: the Arrow type and the values, unchanged.
    back = pa.record_batch(next(iter(ds.batch(3).iter_arrow())))
    assert back.schema.field("v").type == arrow_type
    assert back.column(0).to_pylist() == table.column("v").to_pylist()

    # DLPack: numbers, and bools as DLPack's bools; dates and times have no DLPack type.
    if numpy_dtype.kind in "mM":
        with pytest.raises(BufferError, match="no DLPack type"):
            np.from_dlpack(column)
    else:
        via_dlpack = np.from_dlpack(column)
        assert via_dlpack.dtype == numpy_dtype
        np.testing.assert_array_equal(via_dlpack, want)


class _DictOnly:
    """Exposes only `__array_interface__` (the dict), so NumPy reads that one."""

    def __init__(self, column):
        self.__array_interface__ = column.__array_interface__
        self._keep = column


def test_strings_bytes_and_decimals_come_as_python_values():
    table = pa.table({
        "s": pa.array(["a", "", "字"], type=pa.string()),
        "b": pa.array([b"\x00", b"", b"xyz"], type=pa.binary()),
        "d": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.00"), decimal.Decimal("0.01")],
                      type=pa.decimal128(9, 2)),
    })
    ds = flumen.Dataset.from_arrow(table)
    back = pa.record_batch(next(iter(ds.batch(3).iter_arrow())))
    assert back.to_pylist() == table.to_pylist()
    batch = next(iter(ds.batch(3)))
    assert list(batch["s"]) == ["a", "", "字"]
    assert list(batch["b"]) == [b"\x00", b"", b"xyz"]


def test_bfloat16_reaches_numpy_torch_and_jax_as_bfloat16():
    ds = flumen.Dataset.from_numpy({"x": np.array([1.5, -2.0, 3.0e38], dtype=np.float32)}).map(
        {"y": flumen.col("x").cast("bfloat16")}, keep=False)
    assert ds.element_spec[0][1] == "bfloat16"
    y = next(iter(ds.batch(3)))["y"]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), np.array([1.5, -2.0, 3.0e38], np.float32).astype(
        ml_dtypes.bfloat16).astype(np.float32))

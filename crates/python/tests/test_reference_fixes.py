"""Differences from tf.data and NumPy found by running the same pipelines side by side, one
test each: values are tf.data's / NumPy's, worked out by hand here."""

import numpy as np
import pytest

import flumen
from flumen import col


def test_two_lambdas_in_one_pipeline():
    # Every lambda's __name__ is "<lambda>": two of them were refused as one name bound to
    # two closures.
    first = flumen.Dataset.from_generator(lambda: iter([{"x": [1, 2]}]), output={"x": "int64"})
    second = flumen.Dataset.from_generator(lambda: iter([{"x": [3]}]), output={"x": "int64"})
    both = first.concatenate(second).map(
        lambda c: {"y": c["x"] * 10}, output={"y": "int64"}, keep=False)
    assert [int(e["y"]) for e in both] == [10, 20, 30]
    nested = first.flat_map(lambda e: flumen.Dataset.range(int(e["x"])), output={"value": "int64"})
    assert [int(e["value"]) for e in nested] == [0, 0, 1]


def test_repeat_minus_one_is_forever():
    # tf.data documents repeat(-1) (and None) as repeating forever.
    assert [int(e["value"]) for e in flumen.Dataset.range(2).repeat(-1).take(5)] == [0, 1, 0, 1, 0]
    assert [int(e["value"]) for e in flumen.Dataset.range(2).repeat().take(3)] == [0, 1, 0]


def test_failures_of_the_data_are_data_errors():
    # Division by zero, overflow and a value a cast cannot hold come from the data while the
    # pipeline runs: DataError, not PlanError (which is for pipelines that cannot be built).
    for ds in [
        flumen.Dataset.range(3).map({"y": col("value") + 9223372036854775807}),
        flumen.Dataset.range(250, 260).map({"y": col("value").cast("uint8")}),
        flumen.Dataset.range(3).filter(col("value") * 9223372036854775807 > 1),
        flumen.Dataset.range(3).map({"y": col("value") * 4611686018427387904}).batch(2),
    ]:
        with pytest.raises(flumen.DataError):
            list(ds)
    with pytest.raises(flumen.PlanError):
        flumen.Dataset.range(3).map({"y": col("nope") + 1})


def temporal_table():
    pa = pytest.importorskip("pyarrow")
    return pa.table({
        "ts": pa.array([0, 1_500_000, None], type=pa.timestamp("us", tz="UTC")),
        "day": pa.array([0, 19_000, None], type=pa.date32()),
        "clock": pa.array([0, 3_600_000_001, None], type=pa.time64("us")),
    })


def test_dates_and_times_reach_numpy_with_their_units():
    pa = pytest.importorskip("pyarrow")
    ds = flumen.Dataset.from_arrow(temporal_table()).batch(3)
    batch = next(iter(ds))
    ts, day, clock = batch["ts"], batch["day"], batch["clock"]
    assert ts.dtype == np.dtype("datetime64[us]")
    assert day.dtype == np.dtype("datetime64[D]")
    assert clock.dtype == np.dtype("timedelta64[us]")
    # By value, through conversions that need the unit.
    assert ts[:2].astype("datetime64[ms]").tolist()[1].isoformat() == "1970-01-01T00:00:01.500000"
    assert str(day[1]) == "2022-01-08"
    assert clock[:2].astype("timedelta64[s]").tolist()[1].total_seconds() == 3600
    assert all(np.isnat(a[2]) for a in (ts, day, clock))
    # The C struct interface (what numpy.asarray reads first) and the dict interface agree.
    columns = dict(next(iter(ds.iter(as_batches=True))).columns())
    assert np.asarray(columns["ts"]).dtype == np.dtype("datetime64[us]")
    assert np.dtype(columns["ts"].__array_interface__["typestr"]) == np.dtype("datetime64[us]")
    # pyarrow gets Arrow's own types, units included.
    table = pa.table(next(iter(ds.iter_arrow())))
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert table.column("clock").to_pylist()[1].hour == 1
    # DLPack (PyTorch, JAX) has no dates: a clear refusal, not a silent int64.
    with pytest.raises(BufferError, match="no DLPack type"):
        columns["ts"].__dlpack__()

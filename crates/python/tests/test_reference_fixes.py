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


def values_of(ds, field):
    return [e[field].item() for e in ds]


def test_python_operators_mean_what_python_and_tensorflow_say():
    # 7 / 2 is 3.5 (a float64 from integers); // and % round toward negative infinity;
    # round is half to even. tf.data gives the same for tf.int64 / tf.float32 tensors.
    ints = flumen.Dataset.from_numpy({"a": np.array([7, -7, 7, -7]), "b": np.array([2, 2, -3, 3])})
    got = ints.map({"div": col("a") / col("b"), "floor": col("a") // col("b"), "mod": col("a") % col("b")})
    assert values_of(got, "div") == [3.5, -3.5, 7 / -3, -7 / 3]
    assert next(iter(got))["div"].dtype == np.float64
    assert values_of(got, "floor") == [3, -4, -3, -3]
    assert values_of(got, "mod") == [1, 1, -2, 2]
    floats = flumen.Dataset.from_numpy({"x": np.array([-7.5, 7.5, 2.5, 3.5, -0.5], np.float32)})
    got = floats.map({"mod": col("x") % 2.0, "floor": col("x") // 2.0, "half": col("x") / 2, "r": round(col("x"))})
    assert values_of(got, "mod") == [0.5, 1.5, 0.5, 1.5, 1.5]
    assert values_of(got, "floor") == [-4.0, 3.0, 1.0, 1.0, -1.0]
    assert next(iter(got))["half"].dtype == np.float32  # a float field stays float32
    assert values_of(got, "r") == [-8.0, 8.0, 2.0, 4.0, -0.0]
    # Grouping keys and filters use the same meanings: -7 % 3 is 2.
    keys = flumen.Dataset.range(-7, -4).map({"k": col("value") % 3}, keep=False)
    assert values_of(keys, "k") == [2, 0, 1]
    with pytest.raises(flumen.DataError):
        list(ints.map({"z": col("a") // 0}))


def generated_lists(rows):
    def gen():
        for r in rows:
            yield {"x": np.array(r, np.int64)}

    return flumen.Dataset.from_generator(gen, output={"x": ("int64", [None])})


def test_batch_needs_one_shape_and_padded_batches_are_dense():
    # tf.data: from_generator(..., output_shapes [None]).batch(2) over [1, 2], [3, 4], [5],
    # [6, 7, 8]: one [2, 2] batch, then "Cannot batch tensors with different shapes".
    it = iter(generated_lists([[1, 2], [3, 4], [5], [6, 7, 8]]).batch(2))
    first = next(it)["x"]
    assert isinstance(first, np.ndarray) and first.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(flumen.DataError, match="Cannot batch tensors with different shapes"):
        next(it)
    # ragged_batch keeps them, as (values, row offsets).
    values, offsets = list(generated_lists([[5], [6, 7, 8]]).ragged_batch(2))[0]["x"]
    assert values.tolist() == [5, 6, 7, 8] and offsets.tolist() == [0, 1, 4]
    # padded_batch pads to one shape: a dense [b, L] array.
    padded = list(generated_lists([[5], [6, 7, 8]]).padded_batch(2))[0]["x"]
    assert isinstance(padded, np.ndarray) and padded.tolist() == [[5, 0, 0], [6, 7, 8]]
    # A batch of batches is a dense [b, n] array too.
    nested = next(iter(flumen.Dataset.range(8).batch(2).batch(2)))["value"]
    assert nested.shape == (2, 2) and nested.tolist() == [[0, 1], [2, 3]]


def test_small_tf_data_signatures():
    # from_tensors: one element of the whole values; range(output_type=); padded_shapes with
    # None; a negative take or skip count is tf.data's -1.
    (element,) = list(flumen.Dataset.from_tensors({"m": [[1, 2], [3, 4]], "s": 5}))
    assert element["m"].tolist() == [[1, 2], [3, 4]] and int(element["s"]) == 5
    floats = flumen.Dataset.range(3, output_type="float32")
    assert [e["value"].dtype for e in floats] == [np.dtype("float32")] * 3
    padded = list(generated_lists([[5], [6, 7, 8]]).padded_batch(2, padded_shapes={"x": [None]}))[0]["x"]
    assert padded.tolist() == [[5, 0, 0], [6, 7, 8]]
    assert len(list(flumen.Dataset.range(4).take(-5))) == 4
    assert len(list(flumen.Dataset.range(4).skip(-5))) == 0


def test_grouping_and_bucketing_take_tf_datas_arguments():
    # tf.data: range(10).group_by_window(key_func=lambda x: x % 2,
    #   reduce_func=lambda k, w: w.batch(5), window_size=5) -> [0 2 4 6 8], [1 3 5 7 9]
    grouped = flumen.Dataset.range(10).group_by_window(
        key_func=col("value") % 2, reduce_func=lambda key, window: window.batch(5), window_size=5)
    assert [b["value"].tolist() for b in grouped] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    with pytest.raises(ValueError, match="batches each window whole"):
        flumen.Dataset.range(10).group_by_window(col("value") % 2, lambda k, w: w.batch(2), 5)
    bucketed = generated_lists([[1], [2, 3], [4]]).bucket_by_sequence_length(
        element_length_func=flumen.length(col("x")), bucket_boundaries=[2], bucket_batch_sizes=[2, 2])
    assert sorted(b["x"].tolist() for b in bucketed) == [[[1], [4]], [[2, 3]]]
    with pytest.raises(ValueError, match="padded_shapes and no_padding"):
        generated_lists([[1]]).bucket_by_sequence_length(flumen.length(col("x")), [2], [2, 2], no_padding=True)


def test_a_pipeline_built_again_restores_its_checkpoint():
    # Each build registers its functions anew (lambda#n), but the fingerprint a checkpoint
    # is checked against is the same: tf.data's checkpoint tests rebuild the dataset.
    def build():
        return flumen.Dataset.range(10).map(lambda e: {"y": e["value"] * 2}, output={"y": "int64"}, keep=False)

    it = build().iter()
    first = [int(next(it)["y"]) for _ in range(3)]
    state = it.save()
    rest = [int(e["y"]) for e in build().iter(checkpoint=state)]
    assert first + rest == [2 * v for v in range(10)]
    assert build().fingerprint() == build().fingerprint()

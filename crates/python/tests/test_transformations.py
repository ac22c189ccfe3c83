"""The rest of tf.data's transformations from Python: flat_map and interleave with Python
functions, take_while, group_by_window, scan, reduce, sample_from_datasets, cache to a file,
snapshot, and the conditional and tensor functions."""

import numpy as np
import pytest

import flumen
from flumen import col, when


def column(ds, field="value"):
    return [e[field].item() for e in ds]


def test_flat_map_and_interleave_with_python_functions():
    def repeat_n(element):
        n = int(element["value"])
        return flumen.Dataset.range(n).map({"n": flumen.lit(n)}, keep=True)

    output = {"value": "int64", "n": "int64"}
    ds = flumen.Dataset.range(1, 4).flat_map(repeat_n, output=output)
    assert column(ds, "n") == [1, 2, 2, 3, 3, 3]
    assert column(ds) == [0, 0, 1, 0, 1, 2]
    # interleave with a cycle of 2 takes one from each open dataset in turn.
    ds = flumen.Dataset.range(1, 4).interleave(repeat_n, output=output, cycle_length=2)
    assert column(ds, "n") == [1, 2, 2, 3, 3, 3]
    ds = flumen.Dataset.range(2, 4).interleave(repeat_n, output=output, cycle_length=2)
    assert column(ds, "n") == [2, 3, 2, 3, 3]
    parallel = flumen.Dataset.range(1, 30).interleave(repeat_n, output=output, cycle_length=4, num_parallel_calls=4)
    sequential = flumen.Dataset.range(1, 30).interleave(repeat_n, output=output, cycle_length=4)
    assert column(parallel, "n") == column(sequential, "n")


def test_a_dataset_function_that_fails_or_returns_no_dataset_is_an_error():
    def broken(element):
        raise RuntimeError("no dataset for you")

    with pytest.raises(flumen.UdfError, match="no dataset for you"):
        list(flumen.Dataset.range(3).flat_map(broken, output={"value": "int64"}))
    with pytest.raises(flumen.UdfError, match="returned int, not a flumen.Dataset"):
        list(flumen.Dataset.range(3).flat_map(lambda e: 7, output={"value": "int64"}))


def test_take_while_group_by_window_scan_and_reduce():
    assert column(flumen.Dataset.range(10).take_while(col("value") < 4)) == [0, 1, 2, 3]
    grouped = flumen.Dataset.range(10).group_by_window(col("value") % 2, window_size=2)
    batches = sorted(e["value"].tolist() for e in grouped)
    assert batches == [[0, 2], [1, 3], [4, 6], [5, 7], [8], [9]]
    running = flumen.Dataset.range(1, 6).scan({"total": 0}, {"total": col("total") + col("value")}, {"s": col("total")})
    assert column(running, "s") == [1, 3, 6, 10, 15]
    state = flumen.Dataset.range(1, 6).reduce({"total": 0, "count": 0}, {"total": col("total") + col("value"), "count": col("count") + 1})
    assert state["total"].shape == () and int(state["total"]) == 15 and int(state["count"]) == 5


def test_scan_and_reduce_with_python_functions_as_tf_data_writes_them():
    # tf.data: range(1, 6).scan(0, lambda s, x: (s + x, s * 10))
    ds = flumen.Dataset.range(1, 6).scan(0, lambda s, e: (s + int(e["value"]), s * 10), output={"before": "int64"})
    assert column(ds, "before") == [0, 10, 30, 60, 100]
    # A dict state, a dict output; each iteration starts from the initial state again.
    ds = flumen.Dataset.range(4).scan({"n": 0, "text": ""}, lambda s, e: (
        {"n": s["n"] + 1, "text": s["text"] + str(int(e["value"]))}, {"prefix": s["text"] + "."}),
        output={"prefix": "string"})
    assert [e["prefix"] for e in ds] == [".", "0.", "01.", "012."]
    assert [e["prefix"] for e in ds] == [".", "0.", "01.", "012."]
    # A failing call is an error in its element's place; the state goes on from before it.
    def inverse(s, e):
        return s + 1, 12 // (int(e["value"]) - 2)

    failing = flumen.Dataset.range(4).scan(0, inverse, output={"q": "int64"})
    with pytest.raises(flumen.UdfError, match="ZeroDivisionError"):
        list(failing)
    assert column(failing.ignore_errors(), "q") == [-6, -12, 12]
    # A state of another kind than a scalar is refused when built.
    with pytest.raises(TypeError, match="bool, int, float or str"):
        flumen.Dataset.range(3).scan([0], lambda s, e: (s, s), output={"x": "int64"})
    # reduce: the final state, whatever Python value it is.
    total = flumen.Dataset.range(1, 6).reduce(0, lambda s, e: s + int(e["value"]))
    assert total == 15
    assert flumen.Dataset.range(3).reduce([], lambda s, e: s + [int(e["value"])]) == [0, 1, 2]


def test_counter_counts_forever():
    counts = flumen.Dataset.counter(start=5, step=-3)
    assert counts.cardinality == -1
    assert column(counts.take(4)) == [5, 2, -1, -4]
    assert flumen.Dataset.counter(dtype="int32").element_spec == [("value", "int32", [])]


def test_sample_from_datasets_is_seeded_and_complete():
    evens = flumen.Dataset.range(0, 100, 2)
    odds = flumen.Dataset.range(1, 100, 2)
    drawn = column(flumen.Dataset.sample_from_datasets([evens, odds], [0.5, 0.5], seed=3))
    again = column(flumen.Dataset.sample_from_datasets([evens, odds], [0.5, 0.5], seed=3))
    assert drawn == again and sorted(drawn) == list(range(100)) and drawn != list(range(100))
    # Each source keeps its own order.
    assert [v for v in drawn if v % 2 == 0] == list(range(0, 100, 2))


def test_cache_to_a_file_and_snapshot_are_read_back(tmp_path):
    calls = []

    def double(columns):
        calls.append(len(columns["value"]))
        return {"y": columns["value"] * 2}

    def pipeline():
        return flumen.Dataset.range(50).map(double, output={"y": "int64"}, batched=True)

    cached = pipeline().cache(str(tmp_path / "c.bin"))
    assert column(cached, "y") == [2 * v for v in range(50)]
    computed = sum(calls)
    assert (tmp_path / "c.bin").exists()
    # Another dataset over the same file reads it, without running the function.
    assert column(pipeline().cache(str(tmp_path / "c.bin")), "y") == [2 * v for v in range(50)]
    assert sum(calls) == computed

    snap = flumen.Dataset.range(40).map({"y": col("value") + 1}).snapshot(str(tmp_path / "snap"), compression="zstd")
    assert column(snap, "y") == list(range(1, 41))
    assert any((tmp_path / "snap").iterdir())
    assert column(snap, "y") == list(range(1, 41))
    with pytest.raises(ValueError, match="compression"):
        flumen.Dataset.range(3).snapshot(str(tmp_path / "s2"), compression="brotli")


def test_when_otherwise_and_tensor_functions():
    ds = flumen.Dataset.range(8).map(
        {
            "c": when(col("value") > 5, 1).when(col("value") > 2, 2).otherwise(0),
            "b": flumen.bucketize(col("value").cast("float64"), [2.0, 4.0]),
            "o": flumen.one_hot(col("value") % 3, 3),
            "h": flumen.hash_bucket(col("value").cast("string"), 10),
        }
    ).batch(8)
    b = next(iter(ds))
    assert b["c"].tolist() == [0, 0, 0, 2, 2, 2, 1, 1]
    assert b["b"].tolist() == [0, 0, 1, 1, 2, 2, 2, 2]
    assert b["o"].tolist()[:4] == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]
    assert b["h"].min() >= 0 and b["h"].max() < 10
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    t = flumen.Dataset.from_numpy({"x": x}).map(
        {
            "rows": flumen.reduce_sum(col("x"), axis=-1),
            "all": flumen.reduce_max(col("x")),
            "n": flumen.normalize(col("x"), [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]),
        }
    ).batch(4)
    b = next(iter(t))
    np.testing.assert_allclose(b["rows"], x.sum(axis=-1))
    np.testing.assert_allclose(b["all"], x.reshape(4, -1).max(axis=1))
    np.testing.assert_allclose(b["n"], (x - np.array([1.0, 2.0, 3.0])) / 2.0)
    with pytest.raises(ValueError, match="bucketize takes 2 arguments"):
        flumen.func("bucketize", [col("value")])

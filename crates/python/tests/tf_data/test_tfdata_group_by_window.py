"""tf.data's group_by_window_test.py, ported to flumen: Dataset.group_by_window. flumen's key
is an int64 expression, and its one reducer batches each window whole
(`reduce_func=lambda key, window: window.batch(window_size)`, which flumen accepts and checks);
cases whose reducer does anything else have no flumen equivalent."""

import numpy as np
import pytest

import flumen
from flumen import col, lit
from tf_data_helpers import values

# Out of scope: testName (name= argument). GroupByWindowCheckpointTest is in
# test_tfdata_checkpointing.

REDUCER = "flumen's group_by_window only batches each window whole: no other reduce_func (padded_batch, zip, from_tensors(key))"


def fill_map(e):
    v = int(e["value"])
    return {"x": np.int64(v), "y": np.full([v], v, np.int64), "z": [str(v)] * 3}


SPEC = {"x": "int64", "y": ("int64", [None]), "z": ("string", [3])}


def dynamic_pad(key, window):
    return flumen.Dataset.zip([flumen.Dataset.from_tensors({"bucket": key}),
                               window.padded_batch(32, padded_shapes={"x": [], "y": [None], "z": [3]})])


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_single_bucket():
    ds = flumen.Dataset.range(32).map(fill_map, output=SPEC, keep=False)
    ds = ds.group_by_window(key_func=lit(0), reduce_func=dynamic_pad, window_size=32)
    e = next(ds.iter())
    assert int(e["bucket"]) == 0
    expected_y = np.zeros((32, 31), np.int64)
    for i in range(32):
        expected_y[i, :i] = i
    assert e["x"].tolist() == list(range(32))
    assert e["y"].tolist() == expected_y.tolist()


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_even_odd_buckets():
    ds = flumen.Dataset.range(64).map(fill_map, output=SPEC, keep=False)
    ds = ds.group_by_window(key_func=col("x") % 2, reduce_func=dynamic_pad, window_size=32)
    it = ds.iter()
    even, odd = next(it), next(it)
    assert int(even["bucket"]) == 0 and int(odd["bucket"]) == 1
    assert even["x"].tolist() == list(range(0, 64, 2))
    assert odd["x"].tolist() == list(range(1, 65, 2))


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_even_odd_buckets_filter_out_all_odd():
    ds = flumen.Dataset.range(128).map(fill_map, output=SPEC, keep=False).filter(col("x") % 2 == 0)
    ds = ds.group_by_window(key_func=col("x") % 2, reduce_func=dynamic_pad, window_size=32)
    it = ds.iter()
    first, second = next(it), next(it)
    assert int(first["bucket"]) == 0 and int(second["bucket"]) == 0
    assert first["x"].tolist() == list(range(0, 64, 2))
    assert second["x"].tolist() == list(range(64, 128, 2))


@pytest.mark.xfail(reason="flumen's group_by_window refuses window_size_func: one window_size for every key", strict=True)
def test_dynamic_window_size():
    ds = flumen.Dataset.from_numpy({"value": np.arange(100).astype(np.int64)})
    ds = ds.group_by_window(key_func=col("value") % 2, reduce_func=lambda _, xs: xs.batch(20), window_size=None,
                            window_size_func=lambda key: [5, 10][key])
    batches = values(ds)
    for b in batches:
        is_even = all(x % 2 == 0 for x in b)
        assert is_even or all(x % 2 == 1 for x in b)
        assert len(b) == (5 if is_even else 10)
    assert len(batches) == 15


def test_simple():
    components = np.random.default_rng(0).integers(100, size=(200,)).astype(np.int64)
    ds = flumen.Dataset.from_numpy({"value": components}).map({"value": col("value") * col("value")})
    ds = ds.group_by_window(key_func=col("value") % 2, reduce_func=lambda _, xs: xs.batch(4), window_size=4)
    counts = []
    for b in values(ds):
        assert all(x % 2 == 0 for x in b) or all(x % 2 == 1 for x in b)
        counts.append(len(b))
    assert sum(counts) == len(components)
    num_full_batches = len([c for c in counts if c == 4])
    assert num_full_batches >= 24
    assert all(c == 4 for c in counts[:num_full_batches])


def test_immediate_output():
    components = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 0, 0, 2, 2, 0, 0], dtype=np.int64)
    ds = flumen.Dataset.from_numpy({"value": components}).repeat(-1)
    ds = ds.group_by_window(key_func=col("value") % 3, reduce_func=lambda _, xs: xs.batch(4), window_size=4)
    it = ds.iter()
    # An infinite input: output comes without consuming it all, at each key's rate, in order.
    for _ in range(3):
        assert next(it)["value"].tolist() == [0, 0, 0, 0]
        assert next(it)["value"].tolist() == [1, 1, 1, 1]
        assert next(it)["value"].tolist() == [2, 2, 2, 2]
        assert next(it)["value"].tolist() == [0, 0, 0, 0]


def test_small_groups():
    components = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0], dtype=np.int64)
    ds = flumen.Dataset.from_numpy({"value": components})
    ds = ds.group_by_window(key_func=col("value") % 2, reduce_func=lambda _, xs: xs.batch(4), window_size=4)
    it = ds.iter()
    assert next(it)["value"].tolist() == [0, 0, 0, 0]
    assert next(it)["value"].tolist() == [1, 1, 1, 1]
    # The small groups at the end come in key order.
    assert next(it)["value"].tolist() == [0, 0, 0]
    assert next(it)["value"].tolist() == [1]


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_empty():
    with pytest.raises((flumen.PlanError, flumen.Error), match="[Ww]indow.?size must be"):
        ds = flumen.Dataset.range(4).group_by_window(key_func=lit(0), reduce_func=lambda _, xs: xs, window_size=0)
        next(ds.iter())


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_reduce_func_error():
    components = np.random.default_rng(1).integers(100, size=(200,)).astype(np.int64)
    ds = flumen.Dataset.from_numpy({"x": components}).map(lambda e: {"x": e["x"], "sq": np.array([e["x"] * e["x"]])},
                                                          output={"x": "int64", "sq": ("int64", [1])}, keep=False)
    ds = ds.group_by_window(key_func=col("x") % 2,
                            reduce_func=lambda _, xs: xs.padded_batch(4, padded_shapes={"x": [], "sq": [-5]}),
                            window_size=32)
    with pytest.raises(flumen.Error):
        next(ds.iter())


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_consume_window_dataset_more_than_once():
    components = np.random.default_rng(2).integers(50, size=(200,)).astype(np.int64)

    def reduce_func(key, window):
        return flumen.Dataset.zip([window.padded_batch(4, padded_shapes={"value": [None]}),
                                   window.padded_batch(4, padded_shapes={"value": [(key + 1) * 10]})])

    ds = flumen.Dataset.from_numpy({"value": components}).map(
        lambda e: {"value": np.full([int(e["value"])], int(e["value"]))}, output={"value": ("int64", [None])})
    ds = ds.group_by_window(key_func=flumen.length(col("value")) // 10, reduce_func=reduce_func, window_size=4)
    assert sum(len(b) for b in values(ds)) == len(components)


def test_short_circuit():
    ds = flumen.Dataset.range(10).group_by_window(key_func=col("value"), reduce_func=lambda _, window: window.batch(1),
                                                  window_size=1)
    assert values(ds) == [[i] for i in range(10)]


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_group_by_window_with_autotune():
    ds = flumen.Dataset.range(1000).group_by_window(
        key_func=col("value") // 10, reduce_func=lambda key, window: flumen.Dataset.from_tensors({"value": key}),
        window_size=4)
    ds = ds.map({"value": col("value") + 1}, num_parallel_calls=flumen.AUTOTUNE)
    next(ds.iter())


@pytest.mark.xfail(reason=REDUCER, strict=True)
def test_group_by_window_cardinality():
    ds = flumen.Dataset.range(1).repeat().group_by_window(
        key_func=col("value") % 2, reduce_func=lambda key, window: flumen.Dataset.from_tensors({"value": key}),
        window_size=4)
    assert ds.cardinality == -1

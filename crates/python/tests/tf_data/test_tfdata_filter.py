"""tf.data's filter_test.py (and filter_test_base.py), ported to flumen: Dataset.filter. tf.data
runs each case with filter and filter_with_legacy_function; flumen runs each with its two kinds
of predicate, an expression and a Python function of one element."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import rows, values

# Out of scope: the legacy_filter_fn combinations (TF1 filter_with_legacy_function), testName
# (name= argument), FilterGlobalShuffleTest and its checkpoint test (the private experimental
# _global_shuffle). FilterCheckpointTest is in test_tfdata_checkpointing.

KINDS = ["expression", "python"]


def apply_filter(ds, kind, expression, function):
    return ds.filter(expression if kind == "expression" else function)


@pytest.mark.parametrize("kind", KINDS)
def test_filter_dataset(kind):
    components = {
        "x": np.arange(7, dtype=np.int64),
        "y": np.array([[1, 2, 3]], dtype=np.int64) * np.arange(7, dtype=np.int64)[:, np.newaxis],
        "z": np.array(37.0, dtype=np.float64) * np.arange(7),
    }

    def do_test(count, modulus):
        ds = (flumen.Dataset.from_numpy(components)
              .map({k: col(k) * col(k) for k in components}, keep=False)
              .repeat(count))
        ds = apply_filter(ds, kind, col("x") % modulus == 0, lambda e: e["x"] % modulus == 0)
        assert [shape for _, _, shape in ds.element_spec] == [list(c.shape[1:]) for c in components.values()]
        it = ds.iter()
        for _ in range(count):
            for i in [x for x in range(7) if x ** 2 % modulus == 0]:
                e = next(it)
                for k, c in components.items():
                    assert e[k].tolist() == (c[i] ** 2).tolist()
        with pytest.raises(StopIteration):
            next(it)

    do_test(14, 2)
    do_test(4, 18)
    do_test(0, 1)


@pytest.mark.parametrize("kind", KINDS)
def test_filter_range(kind):
    ds = apply_filter(flumen.Dataset.range(4), kind, col("value") % 3 != 2, lambda e: e["value"] % 3 != 2)
    assert values(ds) == [0, 1, 3]


@pytest.mark.parametrize("kind", KINDS)
def test_filter_dict(kind):
    ds = flumen.Dataset.range(10).map({"foo": col("value") * 2, "bar": col("value") * col("value")}, keep=False)
    ds = apply_filter(ds, kind, col("bar") % 2 == 0, lambda d: d["bar"] % 2 == 0)
    ds = ds.map({"value": col("foo") + col("bar")}, keep=False)
    assert values(ds) == [i * 2 + i ** 2 for i in range(10) if not (i ** 2) % 2]


@pytest.mark.parametrize("kind", KINDS)
def test_use_step_container_in_filter(kind):
    input_data = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    ds = flumen.Dataset.from_numpy({"value": input_data})
    ds = apply_filter(ds, kind, flumen.reduce_sum(col("value") * col("value")) == 1 + 4 + 9,
                      lambda e: np.sum(e["value"] * e["value"]) == 1 + 4 + 9)
    assert values(ds) == [input_data[0].tolist()]


@pytest.mark.parametrize("kind", KINDS)
def test_sparse(kind):
    def sparse_and_index(e):
        i = int(e["value"])
        return {"s": flumen.SparseTensor(np.array([[0, 0]]), i * np.array([1]), np.array([1, 1])), "i": i}

    sparse = {"s": ("int64", [1, 1], "sparse")}
    ds = flumen.Dataset.range(10).map(sparse_and_index, output={**sparse, "i": "int64"})
    ds = apply_filter(ds, kind, col("i") % 2 == 0, lambda e: e["i"] % 2 == 0)
    ds = ds.map(lambda e: {"s": e["s"]}, output=sparse)
    assert values(ds, "s") == [([[0, 0]], [i * 2], [1, 1]) for i in range(5)]


@pytest.mark.parametrize("kind", KINDS)
def test_short_circuit(kind):
    ds = flumen.Dataset.zip([flumen.Dataset.range(10), flumen.Dataset.from_tensors({"y": True}).repeat(None)])
    ds = apply_filter(ds, kind, col("y"), lambda e: e["y"])
    assert rows(ds, "value", "y") == [(i, True) for i in range(10)]


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_filters(kind):
    ds = apply_filter(flumen.Dataset.range(10), kind, col("value") % 2 == 0, lambda e: e["value"] % 2 == 0)
    iterators = [ds.iter() for _ in range(10)]
    assert [int(next(it)["value"]) for it in iterators] == [0] * 10


def test_predicate_fail_with_error_context():
    # x // 0 in the predicate: an error naming the transformation it happened in.
    ds = flumen.Dataset.from_tensors({"value": 42}).filter((col("value") // 0) > 0)
    with pytest.raises(flumen.DataError, match="filter"):
        next(ds.iter())

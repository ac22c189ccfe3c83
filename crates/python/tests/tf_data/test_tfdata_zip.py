"""tf.data's zip_test.py, ported to flumen: Dataset.zip. tf.data zips a (nested) tuple of
datasets into tuples; flumen zips datasets into one element with all their fields, so each
input's field is named after its place in the structure."""

import numpy as np
import pytest

import flumen
from flumen import col

# ZipCheckpointTest is in test_tfdata_checkpointing.

NAMES = ["a", "b", "c"]


def dataset_factory(components):
    return flumen.Dataset.zip([flumen.Dataset.from_numpy({n: np.asarray(c)}) for n, c in zip(NAMES, components)])


def check(ds, components, n):
    it = ds.iter()
    for i in range(n):
        e = next(it)
        for name, c in zip(NAMES, components):
            assert e[name].tolist() == np.asarray(c)[i].tolist()
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(it)


EQUAL = [
    np.tile(np.array([[1], [2], [3], [4]]), 20),
    np.tile(np.array([[12], [13], [14], [15]]), 22),
    np.array([37.0, 38.0, 39.0, 40.0]),
]


def test_zip_equal():
    check(dataset_factory(EQUAL), EQUAL, 4)


def test_zip_unequal():
    components = [[1, 2, 3, 4], [1, 2, 3, 4, 5], [1.0, 2.0]]
    check(dataset_factory(components), components, 2)


def test_nested():
    datasets = [flumen.Dataset.from_numpy({n: c}) for n, c in zip(NAMES, EQUAL)]
    ds = flumen.Dataset.zip([datasets[0], flumen.Dataset.zip([datasets[1], datasets[2]])])
    assert [(name, shape) for name, _, shape in ds.element_spec] == [("a", [20]), ("b", [22]), ("c", [])]
    check(ds, EQUAL, 4)


def test_named_tuple():
    # Foo(x=range(3), y=range(3, 6)): the namedtuple's fields are the element's fields.
    x = flumen.Dataset.range(3).map({"x": col("value")}, keep=False)
    y = flumen.Dataset.range(3, 6).map({"y": col("value")}, keep=False)
    got = [(int(e["x"]), int(e["y"])) for e in flumen.Dataset.zip([x, y])]
    assert got == [(0, 3), (1, 4), (2, 5)]


def test_attrs():
    # An attrs class Foo(x, y) of datasets, as the namedtuple: fields x and y.
    x = flumen.Dataset.range(3).map({"x": col("value")}, keep=False)
    y = flumen.Dataset.range(3, 6).map({"y": col("value")}, keep=False)
    got = [(int(e["x"]), int(e["y"])) for e in flumen.Dataset.zip([x, y])]
    assert got == [(0, 3), (1, 4), (2, 5)]

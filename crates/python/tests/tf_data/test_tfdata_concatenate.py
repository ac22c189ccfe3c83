"""tf.data's concatenate_test.py, ported to flumen: Dataset.concatenate. Tuple components are
fields a, b, c."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import values

# Out of scope: testName (name= argument); ConcatenateRandomAccessTest (tf.data.experimental
# random_access.at), GlobalShuffleTest and ConcatenateGlobalShuffleCheckpointTest (the private
# experimental _global_shuffle). ConcatenateCheckpointTest is in test_tfdata_checkpointing.

# tf.data refuses incompatible inputs with a TypeError when the dataset is built; flumen
# refuses them then too, with a PlanError.
REFUSED = (TypeError, flumen.PlanError)


def fields(*components):
    return dict(zip("abc", components))


def check(concatenated, first, second):
    it = concatenated.iter()
    for i in range(9):
        e = next(it)
        source, j = (first, i) if i < 4 else (second, i - 4)
        for k, c in source.items():
            assert e[k].tolist() == c[j].tolist()
    with pytest.raises(StopIteration):
        next(it)


def test_basic():
    first = fields(np.tile(np.array([[1], [2], [3], [4]]), 20), np.tile(np.array([[12], [13], [14], [15]]), 15),
                   np.array([37.0, 38.0, 39.0, 40.0]))
    second = fields(np.tile(np.array([[1], [2], [3], [4], [5]]), 20),
                    np.tile(np.array([[12], [13], [14], [15], [16]]), 15), np.array([37.0, 38.0, 39.0, 40.0, 41.0]))
    concatenated = flumen.Dataset.from_numpy(first).concatenate(flumen.Dataset.from_numpy(second))
    assert [shape for _, _, shape in concatenated.element_spec] == [[20], [15], []]
    check(concatenated, first, second)


def test_different_shape():
    first = fields(np.tile(np.array([[1], [2], [3], [4]]), 20), np.tile(np.array([[12], [13], [14], [15]]), 4))
    second = fields(np.tile(np.array([[1], [2], [3], [4], [5]]), 20),
                    np.tile(np.array([[12], [13], [14], [15], [16]]), 15))
    concatenated = flumen.Dataset.from_numpy(first).concatenate(flumen.Dataset.from_numpy(second))
    assert [shape for _, _, shape in concatenated.element_spec] == [[20], [None]]
    check(concatenated, first, second)


def test_different_structure():
    first = fields(np.tile(np.array([[1], [2], [3], [4]]), 5), np.tile(np.array([[12], [13], [14], [15]]), 4))
    second = fields(np.tile(np.array([[1], [2], [3], [4], [5]]), 20),
                    np.tile(np.array([[12], [13], [14], [15], [16]]), 15), np.array([37.0, 38.0, 39.0, 40.0, 41.0]))
    with pytest.raises(REFUSED, match="differ"):
        flumen.Dataset.from_numpy(first).concatenate(flumen.Dataset.from_numpy(second))


def test_different_keys():
    first = {"foo": np.array([[1], [2], [3], [4]]), "bar": np.array([[12], [13], [14], [15]])}
    second = {"foo": np.array([[1], [2], [3], [4]]), "baz": np.array([[5], [6], [7], [8]])}
    with pytest.raises(REFUSED, match="differ"):
        flumen.Dataset.from_numpy(first).concatenate(flumen.Dataset.from_numpy(second))


def test_different_type():
    first = fields(np.tile(np.array([[1], [2], [3], [4]]), 5), np.tile(np.array([[12], [13], [14], [15]]), 4))
    second = fields(np.tile(np.array([[1.0], [2.0], [3.0], [4.0]]), 5), np.tile(np.array([[12], [13], [14], [15]]), 15))
    with pytest.raises(REFUSED, match="differ"):
        flumen.Dataset.from_numpy(first).concatenate(flumen.Dataset.from_numpy(second))


def test_windows():
    # Windows of one, concatenated and flattened: flumen's windows are batches, flattened by unbatch.
    a = flumen.Dataset.range(5).window(1)
    b = flumen.Dataset.range(5, 10).window(1)
    assert values(a.concatenate(b).unbatch()) == list(range(10))

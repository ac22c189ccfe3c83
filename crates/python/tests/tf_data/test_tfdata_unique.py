"""tf.data's unique_test.py, ported to flumen: Dataset.unique. tf.data's elements are
single tensors; flumen's have one field, `value`."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import VERIFY_FNS, VERIFY_IDS, values

# Out of scope: testName (name= argument), UniqueRandomAccessTest.

CASES = [
    ([], []),
    ([1], [1]),
    ([1, 1, 1, 1, 1, 1, 1], [1]),
    ([1, 1, 1, 1, 0], [1, 0]),
    ([1, 2, 3, 4], [1, 2, 3, 4]),
    ([1, 2, 4, 3, 2, 1, 2, 3, 4], [1, 2, 4, 3]),
    ([[1], [1, 1], [1, 1, 1]], None),
    ([[1, 1], [1, 1], [2, 2], [3, 3], [1, 1]], None),
]


def from_values(vals, dtype):
    return flumen.Dataset.from_numpy({"value": np.asarray(vals, dtype=dtype)})


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("test_case", [c for c in CASES if c[1] is not None], ids=str)
def test_simple_int(dtype, test_case):
    vals, expected = test_case
    assert values(from_values(vals, dtype).unique()) == expected


@pytest.mark.parametrize("test_case", [
    (["hello", "world"], ["hello", "world"]),
    (["foo", "bar", "baz", "baz", "bar", "foo"], ["foo", "bar", "baz"]),
], ids=str)
def test_simple_string(test_case):
    vals, expected = test_case
    assert values(from_values(vals, object).unique()) == expected


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unsupported_types(dtype):
    # tf.data: "`tf.data.Dataset.unique()` only supports inputs with a single `tf.int32`,
    # `tf.int64`, or `tf.string` component."
    with pytest.raises(flumen.PlanError, match="scalar integer, string or bool fields"):
        from_values([1.0, 2.0], dtype).unique()


def test_tensor_elements_are_refused():
    ds = flumen.Dataset.from_numpy({"value": np.ones((3, 2), np.int64)})
    with pytest.raises(flumen.PlanError, match="scalar integer, string or bool fields"):
        ds.unique()


def test_cardinality_is_unknown():
    assert flumen.Dataset.range(10).unique().cardinality is None


@pytest.mark.parametrize("verify_fn", VERIFY_FNS, ids=VERIFY_IDS)
@pytest.mark.parametrize("mode", ["full", "symbolic"])
def test_checkpoint(verify_fn, mode):
    # tf.data's UniqueCheckpointTest: range(num_elements) % 10 repeated, 10 distinct values.
    def build():
        return flumen.Dataset.range(30).map({"value": flumen.col("value") % 10}).unique()

    verify_fn(build, 10, mode=mode)

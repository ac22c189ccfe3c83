"""tf.data's unbatch_test.py, ported to flumen: Dataset.unbatch. Tuple components become
fields; a nested tuple's components become fields named by their path ("a0", "a1", ...)."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import elements, rows, values

# Out of scope: testName (name= argument), UnbatchRandomAccessTest (tf.data.experimental
# random_access.at). UnbatchCheckpointTest is in test_tfdata_checkpointing.

def dtypes(ds):
    return [dtype for _, dtype, _ in ds.element_spec]


def test_unbatch_with_unknown_rank_input():
    assert values(flumen.Dataset.from_tensors({"value": [0, 1, 2, 3]}).unbatch()) == [0, 1, 2, 3]


def test_unbatch_scalar_dataset():
    data = flumen.Dataset.from_numpy({k: np.arange(10, dtype=np.int32) for k in "abc"})
    data = data.batch(2)
    assert dtypes(data) == ["int32"] * 3
    data = data.unbatch()
    assert dtypes(data) == ["int32"] * 3
    assert rows(data, "a", "b", "c") == [(i,) * 3 for i in range(10)]


@pytest.mark.xfail(reason="flumen elements cannot hold datasets (from_tensors of Datasets)", strict=True)
def test_unbatch_nested_dataset():
    data = flumen.Dataset.from_tensors({"value": [flumen.Dataset.range(10) for _ in range(10)]})
    data = data.unbatch().flat_map(lambda e: e["value"], output={"value": "int64"})
    assert values(data) == list(range(10)) * 10


def test_unbatch_dataset_with_strings():
    data = flumen.Dataset.from_numpy({k: np.arange(10, dtype=np.int32) for k in "xyz"})
    data = data.map({"y": col("y").cast("string")})
    data = data.batch(2)
    assert dtypes(data) == ["int32", "string", "int32"]
    data = data.unbatch()
    assert dtypes(data) == ["int32", "string", "int32"]
    assert rows(data, "x", "y", "z") == [(i, str(i), i) for i in range(10)]


def diagonal_sparse():
    return flumen.SparseTensor(indices=[[i, i] for i in range(10)], values=list(range(10)), dense_shape=[10, 10])


def test_unbatch_dataset_with_sparse_tensor():
    data = flumen.Dataset.from_tensors({"st": diagonal_sparse()}).unbatch().batch(5).unbatch()
    assert values(data, "st") == [([[i]], [i], [10]) for i in range(10)]


def test_unbatch_dataset_with_dense_sparse_and_ragged_tensor():
    # The ragged constant [[[0]], ..., [[9]]] has uniform rows: a dense [10, 1, 1] value.
    data = flumen.Dataset.from_tensors(
        {"d": list(range(10)), "st": diagonal_sparse(), "rt": np.arange(10).reshape(10, 1, 1)})
    data = data.unbatch().batch(5).unbatch()
    assert rows(data, "d", "st", "rt") == [(i, ([[i]], [i], [10]), [[i]]) for i in range(10)]


def test_unbatch_dataset_with_ragged_tensor():
    # The ragged constant [[[0]], ..., [[9]]] has uniform rows: flumen holds it as a dense
    # [10, 1, 1] value.
    data = flumen.Dataset.from_tensors({"rt": np.arange(10).reshape(10, 1, 1)})
    data = data.unbatch().batch(5).batch(2).unbatch()
    assert values(data, "rt") == [[[[0]], [[1]], [[2]], [[3]], [[4]]], [[[5]], [[6]], [[7]], [[8]], [[9]]]]


def test_unbatch_single_element_tuple_dataset():
    data = flumen.Dataset.from_numpy({f"{k}0": np.arange(10, dtype=np.int32) for k in "abc"})
    data = data.batch(2)
    assert dtypes(data) == ["int32"] * 3
    data = data.unbatch()
    assert dtypes(data) == ["int32"] * 3
    assert rows(data, "a0", "b0", "c0") == [(i,) * 3 for i in range(10)]


def test_unbatch_multi_element_tuple_dataset():
    columns = {}
    for i, k in enumerate("abc"):
        columns[f"{k}0"] = np.arange(10 * i, 10 * i + 10, dtype=np.int32)
        columns[f"{k}1"] = np.array(["hi"] * 10)
    data = flumen.Dataset.from_numpy(columns)
    data = data.batch(2)
    assert dtypes(data) == ["int32", "string"] * 3
    data = data.unbatch()
    assert dtypes(data) == ["int32", "string"] * 3
    got = rows(data, "a0", "a1", "b0", "b1", "c0", "c1")
    assert got == [(i, "hi", 10 + i, "hi", 20 + i, "hi") for i in range(10)]


def test_unbatch_empty():
    data = flumen.Dataset.from_tensors(
        {"a": np.zeros([0], np.float32), "b": np.zeros([0, 4], np.float32), "c": np.zeros([0, 4, 0], np.float32)})
    assert elements(data.unbatch()) == []


@pytest.mark.xfail(reason="flumen checks unbatch's leading dimensions only while iterating, not when the dataset is built", strict=True)
def test_unbatch_static_shape_mismatch():
    data = flumen.Dataset.from_tensors({"a": np.arange(7), "b": np.arange(8), "c": np.arange(9)})
    with pytest.raises((ValueError, flumen.PlanError)):
        data.unbatch()


def test_unbatch_dynamic_shape_mismatch():
    # The placeholders' values come from a generator: known only while iterating.
    def mismatched():
        yield {"a": np.arange(7).astype(np.int32), "b": np.arange(8).astype(np.int32)}

    data = flumen.Dataset.from_generator(mismatched, output={"a": ("int32", [None]), "b": ("int32", [None])})
    with pytest.raises(flumen.Error, match="same leading dimension"):
        list(data.unbatch())
    # A scalar component has no 0th dimension: flumen knows the rank when building.
    scalar = flumen.Dataset.from_generator(lambda: iter([{"a": np.arange(7).astype(np.int32), "b": np.int32(7)}]),
                                           output={"a": ("int32", [None]), "b": ("int32", [])})
    with pytest.raises(flumen.PlanError, match="no dimension to unbatch"):
        list(scalar.unbatch())


def test_unbatch_dataset_with_uint_dtypes():
    components = {
        "u8": np.tile(np.array([[0], [1], [2], [3]], dtype=np.uint8), 2),
        "u16": np.tile(np.array([[1], [2], [3], [256]], dtype=np.uint16), 2),
        "u32": np.tile(np.array([[2], [3], [4], [65536]], dtype=np.uint32), 2),
        "u64": np.tile(np.array([[3], [4], [5], [4294967296]], dtype=np.uint64), 2),
    }
    expected = [tuple(c[i].tolist() for c in components.values()) for i in range(4)]
    data = flumen.Dataset.from_numpy(components).batch(2)
    assert dtypes(data) == ["uint8", "uint16", "uint32", "uint64"]
    data = data.unbatch()
    assert dtypes(data) == ["uint8", "uint16", "uint32", "uint64"]
    assert rows(data, *components) == expected


@pytest.mark.xfail(reason="from_tensors makes a None component a null scalar field, which unbatch refuses (no dimension)", strict=True)
def test_none_component():
    data = flumen.Dataset.from_tensors({"x": list(range(10)), "y": None}).unbatch()
    assert values(data.map(lambda e: {"x": e["x"]}, output={"x": "int64"}, keep=False), "x") == list(range(10))

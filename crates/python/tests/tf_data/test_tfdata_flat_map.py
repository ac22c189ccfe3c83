"""tf.data's flat_map_test.py, ported to flumen: Dataset.flat_map. The function gets one
element (a dict) and returns a flumen Dataset whose fields `output=` declares."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import values

# Out of scope: testSharedResourceNestedFlatMapDataset (graph-only: an iterator shared by two
# sessions of a server). FlatMapCheckpointTest is in test_tfdata_checkpointing.


def test_flat_map_dataset():
    repeats = [1, 2, 3, 4, 5, 0, 1]
    ds = flumen.Dataset.from_numpy({"value": np.array(repeats, dtype=np.int64)}).flat_map(
        lambda e: flumen.Dataset.from_tensors({"value": [int(e["value"])]}).repeat(int(e["value"])),
        output={"value": ("int64", [1])})
    expected = []
    for i in repeats:
        expected.extend([[i]] * i)
    assert values(ds) == expected


def test_nested_flat_map_dataset():
    repeats = [[1, 2], [3, 4], [5, 0], [1, 7]]

    def inner(e):
        return flumen.Dataset.from_numpy({"value": e["value"]}).flat_map(
            lambda f: flumen.Dataset.from_tensors({"value": f["value"]}).repeat(int(f["value"])),
            output={"value": "int64"})

    ds = flumen.Dataset.from_numpy({"value": np.array(repeats, dtype=np.int64)}).flat_map(
        inner, output={"value": "int64"})
    expected = []
    for row in repeats:
        for i in row:
            expected.extend([i] * i)
    assert values(ds) == expected


def test_map_dict():
    ds = flumen.Dataset.range(10).map({"foo": col("value") * 2, "bar": col("value") * col("value")}, keep=False)
    ds = ds.flat_map(lambda d: flumen.Dataset.from_tensors({"value": d["foo"]}).repeat(int(d["bar"])),
                     output={"value": "int64"})
    it = ds.iter()
    for i in range(10):
        for _ in range(i ** 2):
            assert int(next(it)["value"]) == i * 2
    with pytest.raises(StopIteration):
        next(it)


def sparse_diagonal(e):
    # indices [[0, 0], [1, 1]], values i * [1, -1], dense_shape [2, 2]
    i = int(e["value"])
    return {"s": flumen.SparseTensor([[0, 0], [1, 1]], [i, -i], [2, 2])}


def test_sparse():
    ds = flumen.Dataset.range(10).map(sparse_diagonal, output={"s": ("int64", [2, 2], "sparse")})
    # from_tensor_slices(sparse_to_dense(...))
    ds = ds.flat_map(lambda e: flumen.Dataset.from_numpy({"value": e["s"].to_dense()}),
                     output={"value": ("int64", [2])})
    expected = [[i, 0] if j % 2 == 0 else [0, -i] for i in range(10) for j in range(2)]
    assert values(ds) == expected


def test_tensor_array():
    # A TensorArray of range(i), stacked: a variable-length field, sliced by the flat_map.
    ds = flumen.Dataset.range(10).map(lambda e: {"value": np.arange(int(e["value"]), dtype=np.int32)},
                                      output={"value": ("int32", [None])})
    ds = ds.flat_map(lambda e: flumen.Dataset.from_numpy({"value": e["value"]}), output={"value": "int32"})
    assert values(ds) == [j for i in range(10) for j in range(i)]


def test_ragged():
    # RaggedTensor.from_tensor(i * [[1], [-1]]) converted to a tensor and sliced.
    ds = flumen.Dataset.range(10).map(lambda e: {"value": int(e["value"]) * np.array([[1], [-1]])},
                                      output={"value": ("int64", [2, 1])})
    ds = ds.flat_map(lambda e: flumen.Dataset.from_numpy({"value": e["value"]}), output={"value": ("int64", [1])})
    expected = []
    for i in range(10):
        expected.append([i])
        expected.append([-i])
    assert values(ds) == expected

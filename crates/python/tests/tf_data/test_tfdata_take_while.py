"""tf.data's take_while_test.py, ported to flumen: Dataset.take_while (an expression or a
Python function of one element)."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import values

# TakeWhileCheckpointTest is in test_tfdata_checkpointing.


LENGTH_OF_BATCH = "flumen.length() refuses the field of a batch (int64 [None]): 'length takes a string or a rank-1 field'"


@pytest.mark.parametrize("kind", [
    "python", pytest.param("expression", marks=pytest.mark.xfail(reason=LENGTH_OF_BATCH, strict=True))])
@pytest.mark.parametrize("num_elements,window_size", [(14, 2), (15, 2), (100, 3)])
def test_take_while_dataset(num_elements, window_size, kind):
    ds = flumen.Dataset.range(num_elements).batch(window_size)
    if kind == "python":
        ds = ds.take_while(lambda e: e["value"].shape[0] > (window_size - 1))
    else:
        ds = ds.take_while(flumen.length(col("value")) > (window_size - 1))
    ds = ds.flat_map(lambda e: flumen.Dataset.from_numpy({"value": e["value"]}), output={"value": "int64"})
    expected_num_elements = int(num_elements / window_size) * window_size
    assert values(ds) == list(range(expected_num_elements))


@pytest.mark.parametrize("num_elements,upper_bound", [(10, 2), (16, 7), (100, 99), (100, 101), (0, 1)])
def test_take_while_dataset_range(num_elements, upper_bound):
    ds = flumen.Dataset.range(num_elements).take_while(lambda e: e["value"] < upper_bound)
    assert values(ds) == list(range(min(num_elements, upper_bound)))


def test_take_while_dataset_string():
    strings = ["this", "is", "the", "test", "for", "strings"]
    ds = flumen.Dataset.from_numpy({"value": np.array(strings)}).take_while(col("value") != "test")
    it = ds.iter()
    assert [str(next(it)["value"]) for _ in range(3)] == ["this", "is", "the"]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("size,index", [(5, 3), (10, 0), (100, 5), (8, 7)])
def test_take_while_dataset_short_circuit(size, index):
    boolean_array = [True] * size
    boolean_array[index] = False
    ds = flumen.Dataset.from_numpy({"value": np.array(boolean_array)}).take_while(col("value"))
    it = ds.iter()
    for _ in range(index):
        assert bool(next(it)["value"])
    with pytest.raises(StopIteration):
        next(it)


def test_take_while_dataset_with_repeat():
    ds = flumen.Dataset.range(10).take_while(col("value") < 2).repeat(5)
    assert values(ds) == [0, 1] * 5

"""tf.data's rebatch_test.py, ported to flumen: Dataset.rebatch, with one batch size or a
list of them taken in turn."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import elements, values

# RebatchDatasetCheckpointTest is in test_tfdata_checkpointing.



def shapes(ds):
    return [shape for _, _, shape in ds.element_spec]


def test_shape_inference_not_all_batch_sizes_equal():
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch([2, 1, 1])
    assert shapes(ds) == [[None]]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_shape_inference_input_batch_dim_divisible(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch(2, drop_remainder=drop_remainder)
    assert shapes(ds) == [[2]]


def test_shape_inference_input_batch_dim_unknown():
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=False).rebatch(2, drop_remainder=False)
    assert shapes(ds) == [[None]]


def test_shape_inference_input_batch_dim_unknown_with_drop_remainder():
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=False).rebatch(2, drop_remainder=True)
    assert shapes(ds) == [[2]]


def test_shape_inference_input_batch_dim_indivisible():
    ds = flumen.Dataset.range(10).batch(5, drop_remainder=True).rebatch(2, drop_remainder=False)
    assert shapes(ds) == [[None]]


def test_shape_inference_input_batch_dim_indivisible_with_drop_remainder():
    ds = flumen.Dataset.range(10).batch(5, drop_remainder=True).rebatch(2, drop_remainder=True)
    assert shapes(ds) == [[2]]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_basic(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch(2, drop_remainder=drop_remainder)
    assert shapes(ds) == [[2]]
    assert values(ds) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_partial_batch():
    ds = flumen.Dataset.range(5).batch(4, drop_remainder=False).rebatch(2, drop_remainder=False)
    assert shapes(ds) == [[None]]
    assert values(ds) == [[0, 1], [2, 3], [4]]


def test_partial_batch_with_drop_remainder():
    ds = flumen.Dataset.range(5).batch(4, drop_remainder=False).rebatch(2, drop_remainder=True)
    assert shapes(ds) == [[2]]
    assert values(ds) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_batch_size_greater_than_original(drop_remainder):
    ds = flumen.Dataset.range(12).batch(4, drop_remainder=False).rebatch(6, drop_remainder=drop_remainder)
    assert values(ds) == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]


@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("batch_size", [2, 3, 4])
def test_batch_size_equal_to_original(batch_size, drop_remainder):
    ds = flumen.Dataset.range(11).batch(batch_size, drop_remainder=drop_remainder)
    expected = values(ds)
    assert values(ds.rebatch(batch_size, drop_remainder=False)) == expected


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_empty_splits(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch([1, 1, 1, 1, 0], drop_remainder=drop_remainder)
    assert shapes(ds) == [[None]]
    assert values(ds) == [[0], [1], [2], [3], [], [4], [5], [6], [7], []]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_empty_first_splits(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch([0, 1], drop_remainder=drop_remainder)
    assert shapes(ds) == [[None]]
    # A zero size reads no input, so an empty batch also comes last.
    assert values(ds) == [x for i in range(8) for x in ([], [i])] + [[]]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_empty_last_splits(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch([1, 0], drop_remainder=drop_remainder)
    assert shapes(ds) == [[None]]
    assert values(ds) == [x for i in range(8) for x in ([i], [])]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_empty_tensors(drop_remainder):
    new_batch_size = 4
    ds = flumen.Dataset.range(8).map(lambda e: {"v": np.zeros((5, 0), np.float32)}, output={"v": ("float32", [5, 0])},
                                     keep=False)
    ds = ds.batch(2).rebatch(new_batch_size, drop_remainder=drop_remainder)
    got = list(ds)
    assert len(got) == 8 // new_batch_size
    assert all(e["v"].shape == (new_batch_size, 5, 0) for e in got)


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_scalar_batch_size_input(drop_remainder):
    ds = flumen.Dataset.range(8).batch(4, drop_remainder=True).rebatch(2, drop_remainder=drop_remainder)
    assert shapes(ds) == [[2]]
    assert values(ds) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_multiple_batches():
    ds = flumen.Dataset.range(16).batch(2, drop_remainder=True).batch(4, drop_remainder=True)
    assert shapes(ds) == [[4, 2]]
    rebatched = ds.rebatch(2)
    assert shapes(rebatched) == [[2, 2]]
    assert values(rebatched) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]], [[12, 13], [14, 15]]]


def test_nested_dictionary_output():
    # {"a": x, "b": {"c": x + 1}}: the nested key as the field "b/c".
    ds = flumen.Dataset.range(8).map({"a": col("value"), "b/c": col("value") + 1}, keep=False)
    rebatched = ds.batch(4, drop_remainder=True).rebatch(2)
    assert shapes(rebatched) == [[2], [2]]
    assert [(e["a"], e["b/c"]) for e in elements(rebatched)] == [
        ([0, 1], [1, 2]), ([2, 3], [3, 4]), ([4, 5], [5, 6]), ([6, 7], [7, 8])]


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_ragged_dataset(drop_remainder):
    # RaggedTensor.from_row_lengths(range(10), [1, 2, 3, 4]) sliced: rows of 1, 2, 3, 4 values,
    # batched as ragged, then rebatched in twos.
    row_lengths = [1, 2, 3, 4]
    starts = np.cumsum([0] + row_lengths)
    ds = flumen.Dataset.from_generator(
        lambda: iter([{"r": np.arange(starts[i], starts[i + 1])} for i in range(4)]),
        output={"r": ("int64", [None])})
    ds = ds.ragged_batch(4, drop_remainder=True).map({"r": col("r")})
    got = values(ds.rebatch(2), "r")
    expected = [[[0], [1, 2]], [[3, 4, 5], [6, 7, 8, 9]]]
    as_rows = [[flat[offsets[k]:offsets[k + 1]] for k in range(len(offsets) - 1)] for flat, offsets in got]
    assert as_rows == expected


def test_none_dataset():
    # (x, None): flumen's from_tensors keeps a None component, zipped beside each element.
    ds = flumen.Dataset.zip([flumen.Dataset.range(4), flumen.Dataset.from_tensors({"y": None}).repeat()])
    ds.batch(4, drop_remainder=True).rebatch(2)

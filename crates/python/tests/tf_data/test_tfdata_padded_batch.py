"""tf.data's padded_batch_test.py, ported to flumen: Dataset.padded_batch."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import fill, slices, values

# Out of scope: testPaddedBatchDatasetShapeSpecifications and testPaddedBatchShapeErrorPlaceholder
# (graph-only placeholders and static shapes of symbolic tensors).
# PaddedBatchCheckpointTest is in test_tfdata_checkpointing.



def filled(seq_lens, dtype="int32"):
    """from_tensor_slices(seq_lens).map(lambda x: tf.fill([x], x))."""
    return slices(seq_lens, dtype=dtype).map(fill(dtype), output={"value": (dtype, [None])})


def check_rows(batch, lens, padded_len, pad):
    assert batch.shape == (len(lens), padded_len)
    for row, n in zip(batch.tolist(), lens):
        assert row[:n] == [n] * n
        assert row[n:] == [pad] * (padded_len - n)


@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("padded_shapes", [[None], [25]])
@pytest.mark.parametrize("count", [32, 34])
def test_padded_batch_dataset(count, padded_shapes, drop_remainder):
    seq_lens = np.random.default_rng(count).integers(20, size=(count,)).astype(np.int32)
    batch_size = 4
    ds = filled(seq_lens).padded_batch(batch_size, padded_shapes={"value": padded_shapes},
                                       drop_remainder=drop_remainder)
    it = ds.iter()
    full = len(seq_lens) // batch_size
    groups = [seq_lens[i * batch_size:(i + 1) * batch_size] for i in range(full)]
    if not drop_remainder and len(seq_lens) % batch_size:
        groups.append(seq_lens[full * batch_size:])
    for lens in groups:
        batch = next(it)["value"]
        padded_len = padded_shapes[0]
        if padded_len is None:
            padded_len = int(np.max(batch)) if batch.size else 0
        check_rows(batch, lens.tolist(), padded_len, 0)
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(it)


def test_padded_batch_short_padding():
    ds = filled([6, 5, 5, 5, 5]).padded_batch(4, padded_shapes={"value": [5]})
    with pytest.raises(flumen.Error, match="padded length"):
        list(ds)


def test_padded_batch_empty_tensors():
    ds = filled([0, 0, 0, 0]).padded_batch(4, padded_shapes={"value": [-1]})
    assert values(ds) == [[[], [], [], []]]


def test_default_padded_shapes():
    ds = filled([1, 2, 3, 4]).padded_batch(2)
    assert values(ds) == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]


def test_nested_default_padded_shapes():
    # (x, tf.fill([x], x)) as fields x and f.
    def fill_tuple(e):
        x = int(e["value"])
        return {"x": np.int32(x), "f": np.full([x], x, np.int32)}

    ds = slices([1, 2, 3, 4], dtype="int32").map(fill_tuple, output={"x": "int32", "f": ("int32", [None])}, keep=False)
    got = [(b["x"].tolist(), b["f"].tolist()) for b in ds.padded_batch(2)]
    assert got == [([1, 2], [[1, 0], [2, 2]]), ([3, 4], [[3, 3, 3, 0], [4, 4, 4, 4]])]


@pytest.mark.parametrize("structure_padding", ["", None])
def test_padded_batch_dataset_non_default_padding(structure_padding):
    def fill_tuple(e):
        x = int(e["value"])
        text = [str(x)] * x
        return {"filled": np.full([x], x, np.int32), "text": text, "structure": text}

    seq_lens = np.random.default_rng(7).integers(20, size=(32,)).astype(np.int32)
    padding = {"filled": -1, "text": "<end>"}
    if structure_padding is not None:
        padding["structure"] = structure_padding
    ds = slices(seq_lens, dtype="int32").map(
        fill_tuple, output={"filled": ("int32", [None]), "text": ("string", [None]), "structure": ("string", [None])},
        keep=False).padded_batch(4, padded_shapes={"filled": [-1], "text": [-1], "structure": [-1]},
                                 padding_values=padding)
    got = list(ds)
    assert len(got) == 8
    for i, b in enumerate(got):
        lens = seq_lens[i * 4:(i + 1) * 4].tolist()
        padded_len = int(np.max(b["filled"]))
        check_rows(b["filled"], lens, padded_len, -1)
        for j, n in enumerate(lens):
            assert list(b["text"][j]) == [str(n)] * n + ["<end>"] * (padded_len - n)
            assert list(b["structure"][j]) == [str(n)] * n + [""] * (padded_len - n)


def test_padded_batch_dataset_unicode():
    def generator():
        data = [["Простой", "тест", "юникода"], ["никогда", "не", "бывает", "простым"]]
        for seq in data:
            yield {"s": seq, "i": np.array([0, 1, 2, 3], np.int32)}

    ds = flumen.Dataset.from_generator(generator, output={"s": ("string", [None]), "i": ("int32", [None])})
    padded = ds.padded_batch(2, padded_shapes={"s": [None], "i": [None]}, padding_values={"s": "", "i": 0})
    next(iter(padded))


def test_padded_batch_sparse_error():
    # tf.data raises TypeError when the dataset is built; flumen's PlanError, at the same point.
    st = flumen.SparseTensor(indices=[[0, 0]], values=[42], dense_shape=[1, 1])
    with pytest.raises(flumen.PlanError, match="cannot pad sparse field 'st'"):
        flumen.Dataset.from_tensors({"st": st}).repeat(10).padded_batch(10)


@pytest.mark.xfail(reason="flumen pads a ragged field in padded_batch where tf.data refuses ragged input", strict=True)
def test_padded_batch_ragged_error():
    # A ragged value [[0, 42]]: one ragged row, from a ragged batch of one variable-length element.
    rt = flumen.Dataset.from_generator(lambda: iter([{"r": np.array([0, 42])}]),
                                       output={"r": ("int64", [None])}).ragged_batch(1)
    with pytest.raises((TypeError, flumen.PlanError)):
        rt.repeat(10).padded_batch(10)


def test_padded_batch_shape_error_wrong_rank():
    with pytest.raises(flumen.PlanError, match="another rank"):
        flumen.Dataset.range(10).padded_batch(5, padded_shapes={"value": [1]})


def test_padded_batch_shape_error_too_small():
    with pytest.raises(flumen.PlanError, match="smaller than"):
        flumen.Dataset.from_tensors({"value": [1, 2, 3]}).padded_batch(5, padded_shapes={"value": [1]})


def test_padded_batch_shape_error_shape_not_rank1():
    with pytest.raises((ValueError, TypeError)):
        flumen.Dataset.from_tensors({"value": [1, 2, 3]}).padded_batch(5, padded_shapes={"value": [[1, 1], [1, 1]]})


def test_padded_batch_shape_error_shape_not_int():
    with pytest.raises(TypeError):
        flumen.Dataset.from_tensors({"value": [1, 2, 3]}).padded_batch(
            5, padded_shapes={"value": np.array([1.5, 2.0, 3.0], np.float32)})


def test_padded_batch_shape_error_wrong_rank_from_tensor():
    with pytest.raises(flumen.PlanError, match="another rank"):
        flumen.Dataset.range(10).padded_batch(5, padded_shapes={"value": np.array([1], np.int64)})


@pytest.mark.xfail(reason="flumen fields always have a known rank: from_generator's output= declares the shape", strict=True)
def test_padded_batch_shape_error_default_shape_with_unknown_rank():
    ds = flumen.Dataset.from_generator(lambda: iter([{"value": v} for v in [1, 2, 3]]), output={"value": "int32"})
    with pytest.raises(ValueError, match="unknown rank"):
        ds.padded_batch(2)


def test_padded_batch_bfloat16():
    ds = flumen.Dataset.range(5).map({"value": col("value").cast("bfloat16")}).padded_batch(10)
    assert values(ds) == [[0.0, 1.0, 2.0, 3.0, 4.0]]


def test_default_padded_value_shapes():
    a = filled([1, 2, 3, 4]).map(lambda e: {"a": e["value"]}, output={"a": ("int32", [None])}, keep=False)
    b = filled([1, 2, 3, 4]).map(lambda e: {"b": e["value"]}, output={"b": ("int32", [None])}, keep=False)
    ds = flumen.Dataset.zip([a, b]).padded_batch(2, padding_values={"a": -1, "b": -1})
    got = [(e["a"].tolist(), e["b"].tolist()) for e in ds]
    assert got == [([[1, -1], [2, 2]], [[1, -1], [2, 2]]),
                   ([[3, 3, 3, -1], [4, 4, 4, 4]], [[3, 3, 3, -1], [4, 4, 4, 4]])]

"""tf.data's bucket_by_sequence_length_test.py, ported to flumen:
Dataset.bucket_by_sequence_length. The element length is an int64 expression
(flumen.length(col("x"))); each record is a variable-length field x."""

import random

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import values

NO_PADDING = "flumen's bucket_by_sequence_length refuses no_padding=True (and has no SparseTensor records)"
INFINITE = "flumen counts repeat() over an input of unknown size (a generator) as unknown, tf.data as infinite"


def records(arrays, dtype=np.int32):
    """from_generator over variable-length records, one field x of shape [None]."""
    spec = {"x": ("int32" if dtype == np.int32 else "int64", [None])}
    return flumen.Dataset.from_generator(lambda: ({"x": np.array(a, dtype=dtype)} for a in arrays()), output=spec)


def length():
    return flumen.length(col("x"))


BOUNDARIES = [10, 20, 30]
BATCH_SIZES = [10, 8, 4, 2]
LENGTHS = [8, 13, 25, 35]


@pytest.mark.parametrize("no_padding", [
    pytest.param(True, marks=pytest.mark.xfail(reason=NO_PADDING, strict=True)), False])
def test_bucket_drop_reminder(no_padding):
    n_bucket_elements = [28, 7, 6, 5]
    n_expected_batches = 5
    expected_lengths, expected_sums, expected_batch_sizes = [], {}, {}
    for n, batch_size, count in zip(LENGTHS, BATCH_SIZES, n_bucket_elements):
        expected_sums[n] = (count - count % batch_size) * n
        expected_batch_sizes[n] = [batch_size] * (count // batch_size)
        expected_lengths.extend([n] * (count // batch_size))

    def generator():
        elements = [[1] * n for count, n in zip(n_bucket_elements, LENGTHS) for _ in range(count)]
        random.shuffle(elements)
        return elements

    ds = records(generator).bucket_by_sequence_length(
        element_length_func=length(), bucket_boundaries=BOUNDARIES, bucket_batch_sizes=BATCH_SIZES,
        no_padding=no_padding, drop_remainder=True)
    batches = values(ds, "x")
    assert len(batches) == n_expected_batches
    generated_lengths, generated_sums, generated_batch_sizes = [], {n: 0 for n in LENGTHS}, {n: [] for n in LENGTHS}
    for batch in batches:
        batch = np.array(batch)
        n = batch.shape[1]
        generated_lengths.append(n)
        generated_batch_sizes[n].append(batch.shape[0])
        generated_sums[n] += batch.sum()
    for n in LENGTHS:
        assert generated_sums[n] == expected_sums[n]
        assert sorted(generated_batch_sizes[n]) == sorted(expected_batch_sizes[n])
    assert sorted(generated_lengths) == sorted(expected_lengths)


@pytest.mark.parametrize("no_padding", [
    pytest.param(True, marks=pytest.mark.xfail(reason=NO_PADDING, strict=True)), False])
def test_bucket(no_padding):
    def generator():
        elements = []
        for batch_size, n in zip(BATCH_SIZES, LENGTHS):
            record_len = n - 1
            for _ in range(batch_size):
                elements.append([1] * record_len)
                record_len = n
        random.shuffle(elements)
        return elements

    ds = records(generator).bucket_by_sequence_length(
        element_length_func=length(), bucket_boundaries=BOUNDARIES, bucket_batch_sizes=BATCH_SIZES,
        no_padding=no_padding)
    batches = [np.array(b) for b in values(ds, "x")]
    assert len(batches) == 4
    sizes = [b.shape[0] for b in batches]
    lengths = [b.shape[1] for b in batches]
    for b in batches:
        assert b.sum() == b.shape[0] * b.shape[1] - 1
    assert sum(sizes) == sum(BATCH_SIZES)
    assert sorted(sizes) == sorted(BATCH_SIZES)
    assert sorted(lengths) == sorted(LENGTHS)


def test_pad_to_boundary():
    lengths = [8, 13, 25]

    def generator():
        elements = [[1] * n for batch_size, n in zip(BATCH_SIZES[:-1], lengths) for _ in range(batch_size)]
        random.shuffle(elements)
        return elements + [[1] * (BOUNDARIES[-1] + 5) for _ in range(BATCH_SIZES[-1])]

    ds = records(generator, np.int64).bucket_by_sequence_length(
        element_length_func=length(), bucket_boundaries=BOUNDARIES, bucket_batch_sizes=BATCH_SIZES,
        pad_to_bucket_boundary=True)
    it = ds.iter()
    batches = [np.asarray(next(it)["x"]) for _ in range(3)]
    # An element longer than the last boundary cannot be padded to a boundary.
    with pytest.raises(flumen.Error, match="bucket_boundaries"):
        next(it)
    sizes = [b.shape[0] for b in batches]
    assert sum(sizes) == sum(BATCH_SIZES[:-1])
    assert sorted(sizes) == sorted(BATCH_SIZES[:-1])
    assert sorted(b.shape[1] for b in batches) == [boundary - 1 for boundary in sorted(BOUNDARIES)]


def test_pad_to_boundary_no_extraneous_padding():
    ds = records(lambda: [[1] * n for n in range(1, 11)], np.int64).bucket_by_sequence_length(
        element_length_func=length(), bucket_boundaries=[3, 7, 11], bucket_batch_sizes=[2, 2, 2, 2],
        pad_to_bucket_boundary=True)
    assert values(ds, "x") == [
        [[1, 0], [1, 1]],
        [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]],
        [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]],
        [[1, 1, 1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]],
        [[1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]],
    ]


@pytest.mark.parametrize("no_padding", [
    pytest.param(True, marks=pytest.mark.xfail(reason=NO_PADDING, strict=True)), False])
def test_tuple_elements(no_padding):
    text = [[1, 2, 3], [3, 4, 5, 6, 7], [1, 2], [8, 9, 0, 2, 3]]
    label = [1, 2, 1, 2]
    ds = flumen.Dataset.from_generator(
        lambda: ({"x": np.array(x, np.int32), "y": np.int32(y)} for x, y in zip(text, label)),
        output={"x": ("int32", [None]), "y": "int32"})
    ds = ds.bucket_by_sequence_length(element_length_func=length(), bucket_batch_sizes=[2, 2, 2],
                                      bucket_boundaries=[0, 8], no_padding=no_padding)
    shapes = {name: shape for name, _, shape in ds.element_spec}
    assert shapes == {"x": [None, None], "y": [None]}


@pytest.mark.xfail(reason=NO_PADDING, strict=True)
@pytest.mark.parametrize("drop_remainder", [True, False])
def test_bucket_sparse(drop_remainder):
    min_len, max_len, batch_size, bucket_size = 0, 100, 7, 10
    ds = records(lambda: [list(range(i + 1)) for i in range(min_len, max_len)], np.int64)
    boundaries = list(range(min_len + bucket_size + 1, max_len, bucket_size))
    ds = ds.bucket_by_sequence_length(element_length_func=length(), bucket_boundaries=boundaries,
                                      bucket_batch_sizes=[batch_size] * (len(boundaries) + 1), no_padding=True,
                                      drop_remainder=drop_remainder)
    list(ds)


@pytest.mark.xfail(reason=INFINITE, strict=True)
def test_cardinality():
    ds = records(lambda: [[1] * n for n in range(1, 11)], np.int64).repeat()
    ds = ds.bucket_by_sequence_length(element_length_func=length(), bucket_boundaries=[3, 7, 11],
                                      bucket_batch_sizes=[2, 2, 2, 2], pad_to_bucket_boundary=True)
    assert ds.cardinality == -1


def test_pad_to_bucket_boundary_fails_where_the_long_element_s_batch_would_be():
    # tf.data pads each bucket's window when it is emitted: an element past the last boundary
    # fails its bucket's batch (here flushed at the end, after bucket 1's), and the batches
    # before it are delivered.
    lengths = [1, 2, 3, 9, 1, 2]
    ds = records(lambda: [list(range(n)) for n in lengths]).bucket_by_sequence_length(
        length(), [3, 5], [2, 2, 2], pad_to_bucket_boundary=True)
    it, got = ds.iter(), []
    while True:
        try:
            got.append(next(it)["x"].shape)
        except StopIteration:
            break
        except flumen.Error as e:
            assert "length < max(bucket_boundaries) = 5" in str(e)
            got.append("error")
    assert got == [(2, 2), (2, 2), (1, 4), "error"]

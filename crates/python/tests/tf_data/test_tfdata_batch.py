"""tf.data's batch_test.py, ported to flumen: Dataset.batch."""

import time

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import check_determinism, elements, values

# Out of scope: testCheckpointLargeBatches (memory/performance of saving 512M batches),
# testName (name= argument), BatchRandomAccessTest (tf.data.experimental random_access.at,
# an indexing API flumen does not mirror). BatchCheckpointTest is in test_tfdata_checkpointing.


def components(n=7, multiplier=37.0):
    # The three tensor-slice components, as three named fields.
    r = np.arange(n)
    return {"x": r, "y": np.array([[1, 2, 3]]) * r[:, np.newaxis], "z": np.array(multiplier) * r}


@pytest.mark.parametrize("num_parallel_calls", [None, 1, 2, 4])
@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("batch_size", [14, 15])
@pytest.mark.parametrize("count", [0, 28])
def test_basic(count, batch_size, drop_remainder, num_parallel_calls):
    comps = components()
    ds = (flumen.Dataset.from_numpy(comps)
          .map({k: col(k) * col(k) for k in comps}, keep=False)
          .repeat(count)
          .batch(batch_size, drop_remainder, num_parallel_calls))
    dim0 = batch_size if drop_remainder else None
    spec = {name: shape for name, _, shape in ds.element_spec}
    assert spec == {k: [dim0] + list(c.shape[1:]) for k, c in comps.items()}
    got = elements(ds)
    total = count * 7
    sizes = [batch_size] * (total // batch_size)
    if not drop_remainder and total % batch_size:
        sizes.append(total % batch_size)
    assert len(got) == len(sizes)
    start = 0
    for batch, size in zip(got, sizes):
        for k, c in comps.items():
            expected = [(c[(start + j) % 7] ** 2).tolist() for j in range(size)]
            assert batch[k] == expected
        start += size


def test_invalid_batch_size():
    with pytest.raises(flumen.PlanError):
        list(flumen.Dataset.range(10).batch(0))


@pytest.mark.xfail(reason="flumen elements cannot hold datasets: no map returning a Dataset, no batch of datasets", strict=True)
def test_dataset():
    ds = flumen.Dataset.range(10).map(lambda e: flumen.Dataset.from_tensors({"value": e["value"]}),
                                      output={"value": "dataset"})
    ds = ds.batch(5).unbatch().flat_map(lambda e: e["value"], output={"value": "int64"})
    assert values(ds) == list(range(10))


def sparse(e):
    i = int(e["value"])
    return {"s": flumen.SparseTensor(indices=[[0]], values=[i], dense_shape=[1])}


def sparse_of_size(e):
    i = int(e["value"])
    return {"s": flumen.SparseTensor(indices=np.arange(i).reshape(i, 1), values=np.full(i, i), dense_shape=[i])}


def test_sparse():
    ds = flumen.Dataset.range(10).map(sparse, output={"s": ("int64", [1], "sparse")}).batch(5)
    expected = [([[0, 0], [1, 0], [2, 0], [3, 0], [4, 0]], [i * 5 + j for j in range(5)], [5, 1]) for i in range(2)]
    assert values(ds, "s") == expected


def test_sparse_with_different_dense_shapes():
    ds = flumen.Dataset.range(10).map(sparse_of_size, output={"s": ("int64", [None], "sparse")}).batch(5)
    expected = []
    for i in range(2):
        indices = [[j, k] for j in range(5) for k in range(i * 5 + j)]
        vals = [i * 5 + j for j in range(5) for _ in range(i * 5 + j)]
        expected.append((indices, vals, [5, (i + 1) * 5 - 1]))
    assert values(ds, "s") == expected


def test_sparse_nested():
    ds = flumen.Dataset.range(10).map(sparse, output={"s": ("int64", [1], "sparse")}).batch(5).batch(2)
    indices = [[a, b, 0] for a in range(2) for b in range(5)]
    assert values(ds, "s") == [(indices, list(range(10)), [2, 5, 1])]


def test_shape_error():
    def generator():
        yield {"x": np.array([1.0, 2.0, 3.0], np.float32)}
        yield {"x": np.array([4.0, 5.0, 6.0], np.float32)}
        yield {"x": np.array([7.0, 8.0, 9.0, 10.0], np.float32)}

    ds = flumen.Dataset.from_generator(generator, output={"x": ("float32", [None])}).batch(3)
    with pytest.raises(flumen.DataError,
                       match=r"Cannot batch tensors with different shapes.*element 0 has shape \[3\] and element 2 has shape \[4\]"):
        list(ds)


def test_ragged():
    # RaggedTensor.from_tensor(i * [[1]]): each element a [1, 1] tensor; batches of five.
    ds = flumen.Dataset.range(10).map(lambda e: {"r": np.array([[int(e["value"])]])},
                                      output={"r": ("int64", [1, 1])}).batch(5)
    assert values(ds, "r") == [[[[0]], [[1]], [[2]], [[3]], [[4]]], [[[5]], [[6]], [[7]], [[8]], [[9]]]]


def ranges():
    # ragged_math_ops.range(i): a variable-length field, batched as ragged by ragged_batch.
    return flumen.Dataset.range(10).map(lambda e: {"r": np.arange(int(e["value"]))},
                                        output={"r": ("int64", [None])})


def test_ragged_with_different_shapes():
    got = values(ranges().ragged_batch(5), "r")
    expected = [[list(range(i)) for i in range(5)], [list(range(i)) for i in range(5, 10)]]
    for (flat, offsets), rows in zip(got, expected):
        assert [flat[offsets[k]:offsets[k + 1]] for k in range(len(rows))] == rows
    assert len(got) == 2


def test_ragged_nested():
    ds = flumen.Dataset.range(10).map(lambda e: {"r": np.array([[int(e["value"])]])},
                                      output={"r": ("int64", [1, 1])}).batch(5).batch(2)
    assert values(ds, "r") == [[[[[0]], [[1]], [[2]], [[3]], [[4]]], [[[5]], [[6]], [[7]], [[8]], [[9]]]]]


def with_none(ds):
    # (x, None): flumen's from_tensors keeps a None component, zipped beside each element.
    return flumen.Dataset.zip([ds, flumen.Dataset.from_tensors({"y": None}).repeat()])


def test_none_component():
    ds = with_none(flumen.Dataset.range(10)).batch(10).map({"value": col("value")}, keep=False)
    assert values(ds) == [list(range(10))]


@pytest.mark.parametrize("global_determinism", [True, False])
@pytest.mark.parametrize("local_determinism", [None, True, False])
def test_determinism_configuration(local_determinism, global_determinism):
    expect_determinism = local_determinism or (local_determinism is None and global_determinism)
    expected = list(range(100))

    def dataset_fn(delay_ms):
        def map_function(e):
            if int(e["value"]) == 0:
                time.sleep(delay_ms / 1000)
            return {"value": e["value"]}

        ds = flumen.Dataset.from_numpy({"value": np.array(expected)})
        ds = ds.map(map_function, output={"value": "int64"}, num_parallel_calls=2, deterministic=local_determinism)
        ds = ds.batch(6, num_parallel_calls=2, deterministic=local_determinism).unbatch()
        return ds.with_options(flumen.Options(deterministic=global_determinism))

    check_determinism(dataset_fn, expect_determinism, expected)

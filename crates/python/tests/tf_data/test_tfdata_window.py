"""tf.data's window_test.py, ported to flumen: Dataset.window. tf.data's window yields
nested datasets that the tests batch (`window(...).flat_map(lambda w: w.batch(size))`);
flumen's window yields those batches directly, so that pipeline is flumen's `window(...)`."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import elements, values

# Out of scope: testName (name= argument). WindowCheckpointTest is in test_tfdata_checkpointing.



def components():
    r = np.arange(7)
    return {"x": r, "y": np.array([[1, 2, 3]]) * r[:, np.newaxis], "z": np.array(37.0) * r}


WINDOW_CASES = [
    (20, size, shift, stride, drop)
    for size in [10, 14, 17] for shift in [7, 14] for stride in [1, 2, 6] for drop in [True, False]
] + [(count, 10, 4, 1, drop) for count in [0, 1] for drop in [True, False]]


@pytest.mark.parametrize("count,size,shift,stride,drop_remainder", WINDOW_CASES)
def test_window_dataset(count, size, shift, stride, drop_remainder):
    comps = components()
    ds = (flumen.Dataset.from_numpy(comps)
          .map({k: col(k) * col(k) for k in comps}, keep=False)
          .repeat(count)
          .window(size, shift=shift, stride=stride, drop_remainder=drop_remainder))
    # tf.data's batched windows have an unknown first dim; flumen knows it is `size` when
    # the remainder is dropped, a compatible (more precise) shape.
    first = {None, size} if drop_remainder else {None}
    spec = {name: shape for name, _, shape in ds.element_spec}
    assert spec.keys() == comps.keys()
    for k, c in comps.items():
        assert spec[k][0] in first and spec[k][1:] == list(c.shape[1:])
    it = ds.iter()
    total = count * 7
    num_full = max(0, (total - ((size - 1) * stride + 1)) // shift + 1)
    for i in range(num_full):
        e = next(it)
        for k, c in comps.items():
            assert e[k].tolist() == [(c[(i * shift + j * stride) % 7] ** 2).tolist() for j in range(size)]
    if not drop_remainder:
        num_partial = total // shift + (total % shift > 0) - num_full
        for i in range(num_partial):
            e = next(it)
            remaining = total - (num_full + i) * shift
            n = remaining // stride + (remaining % stride > 0)
            for k, c in comps.items():
                assert e[k].tolist()[:n] == [
                    (c[((num_full + i) * shift + j * stride) % 7] ** 2).tolist() for j in range(n)]
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(it)


@pytest.mark.parametrize("count,size,shift,stride", [(20, 0, 3, 1), (20, 3, 0, 1), (20, 3, 3, 0)])
def test_window_dataset_invalid(count, size, shift, stride):
    with pytest.raises(flumen.PlanError):
        ds = flumen.Dataset.range(10).map({"value": col("value")}).repeat(count).window(size, shift=shift, stride=stride)
        list(ds)


def test_window_different_nested_structures():
    next(iter(flumen.Dataset.from_numpy({"a": np.array([1, 2]), "b": np.array([3, 4])}).window(2)))
    next(iter(flumen.Dataset.from_numpy({"a": np.array([1, 2])}).window(2)))


def sparse(e):
    # indices [[0]], values i * [1], dense_shape [1]
    return {"s": flumen.SparseTensor([[0]], [int(e["value"])], [1])}


def sparse_of_size(e):
    # indices range(i) as a column, values fill([i], i), dense_shape [i]
    i = int(e["value"])
    return {"s": flumen.SparseTensor(np.arange(i).reshape(i, 1), np.full(i, i), [i])}


def test_window_sparse():
    # window(5, shift=3, drop_remainder=True).flat_map(lambda x: x.batch(5))
    ds = flumen.Dataset.range(10).map(sparse, output={"s": ("int64", [1], "sparse")})
    ds = ds.window(5, shift=3, drop_remainder=True)
    expected = [([[j, 0] for j in range(5)], [i * 3 + j for j in range(5)], [5, 1]) for i in range((10 - 5) // 3 + 1)]
    assert values(ds, "s") == expected


def test_window_sparse_with_different_dense_shapes():
    ds = flumen.Dataset.range(10).map(sparse_of_size, output={"s": ("int64", [None], "sparse")})
    ds = ds.window(5, shift=3, drop_remainder=True)
    expected = []
    for i in range((10 - 5) // 3 + 1):
        indices = [[j, k] for j in range(5) for k in range(i * 3 + j)]
        vals = [i * 3 + j for j in range(5) for _ in range(i * 3 + j)]
        expected.append((indices, vals, [5, i * 3 + 5 - 1]))
    assert values(ds, "s") == expected


def test_nested_window_sparse():
    ds = flumen.Dataset.range(10).map(sparse, output={"s": ("int64", [1], "sparse")})
    ds = ds.window(4, shift=2, drop_remainder=True).window(3, shift=1, drop_remainder=True)
    indices = [[a, b, 0] for a in range(3) for b in range(4)]
    assert values(ds, "s") == [(indices, [0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7], [3, 4, 1]),
                               (indices, [2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9], [3, 4, 1])]


def test_window_shape_error():
    def generator():
        yield {"x": np.array([1.0, 2.0, 3.0], np.float32)}
        yield {"x": np.array([4.0, 5.0, 6.0], np.float32)}
        yield {"x": np.array([7.0, 8.0, 9.0, 10.0], np.float32)}

    ds = flumen.Dataset.from_generator(generator, output={"x": ("float32", [None])}).window(3, shift=1)
    with pytest.raises(flumen.DataError,
                       match=r"Cannot batch tensors with different shapes.*element 0 has shape \[3\] and element 2 has shape \[4\]"):
        list(ds)


def test_window_ignore_errors():
    def check_numerics(e):
        if np.isnan(e["x"]):
            raise ValueError("message")
        return {"x": e["x"]}

    ds = (flumen.Dataset.from_numpy({"x": np.float32([1.0, np.nan, 2.0, np.nan, 3.0])})
          .map(check_numerics, output={"x": "float32"})
          .window(2, shift=2, stride=2, drop_remainder=True))
    assert values(ds, "x") == [[1.0, 2.0], [2.0, 3.0]]


def test_nested_output():
    ds = flumen.Dataset.range(100)
    ds = flumen.Dataset.zip([ds, ds.map({"y": col("value")}, keep=False)]).window(10)
    got = elements(ds)
    assert len(got) == 10
    for i, w in enumerate(got):
        assert w["value"] == list(range(i * 10, (i + 1) * 10))
        assert w["y"] == list(range(i * 10, (i + 1) * 10))


def test_drop_remainder_output():
    ds = flumen.Dataset.range(100).window(30, drop_remainder=True).batch(4)
    assert values(ds) == [[[y + 30 * x for y in range(30)] for x in range(3)]]

"""tf.data's window_test.py, ported to flumen: Dataset.window. tf.data's window yields
nested datasets that the tests batch (`window(...).flat_map(lambda w: w.batch(size))`);
flumen's window yields those batches directly, so that pipeline is flumen's `window(...)`."""

import numpy as np
import pytest

import flumen
from flumen import col
from tf_data_helpers import elements, values

# Out of scope: testName (name= argument). WindowCheckpointTest is in test_tfdata_checkpointing.

SPARSE_REASON = "flumen has no SparseTensor element values from map (only parse_example's SparseFeature)"


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


@pytest.mark.xfail(reason=SPARSE_REASON, strict=True)
def test_window_sparse():
    ds = flumen.Dataset.range(10).map(lambda e: {"s": flumen.SparseFeature("i", "v", "int64", 1)},
                                      output={"s": ("sparse_int64", [1])}).window(5, shift=3, drop_remainder=True)
    assert [v[1] for v in values(ds, "s")] == [[i * 3 + j for j in range(5)] for i in range(2)]


@pytest.mark.xfail(reason=SPARSE_REASON, strict=True)
def test_window_sparse_with_different_dense_shapes():
    ds = flumen.Dataset.range(10).map(lambda e: {"s": flumen.SparseFeature("i", "v", "int64", int(e["value"]))},
                                      output={"s": ("sparse_int64", [None])}).window(5, shift=3, drop_remainder=True)
    assert [v[2] for v in values(ds, "s")] == [[5, i * 3 + 4] for i in range(2)]


@pytest.mark.xfail(reason=SPARSE_REASON, strict=True)
def test_nested_window_sparse():
    ds = flumen.Dataset.range(10).map(lambda e: {"s": flumen.SparseFeature("i", "v", "int64", 1)},
                                      output={"s": ("sparse_int64", [1])})
    ds = ds.window(4, shift=2, drop_remainder=True).window(3, shift=1, drop_remainder=True)
    assert [v[1] for v in values(ds, "s")] == [[0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7], [2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9]]


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

"""Sparse fields from and to Python: ``flumen.SparseTensor`` values through from_tensors,
from_generator and map, their batches, and the errors for values that do not fit."""

import numpy as np
import pytest

import flumen


def test_from_tensors_round_trip_and_to_dense():
    st = flumen.SparseTensor(indices=[[0, 1], [2, 0]], values=np.array([7.5, -1.0], np.float32), dense_shape=[3, 2])
    [element] = list(flumen.Dataset.from_tensors({"st": st}))
    out = element["st"]
    assert isinstance(out, flumen.SparseTensor)
    assert np.asarray(out.indices).tolist() == [[0, 1], [2, 0]]
    assert np.asarray(out.values).tolist() == [7.5, -1.0]
    assert np.asarray(out.values).dtype == np.float32
    assert np.asarray(out.dense_shape).tolist() == [3, 2]
    assert out.to_dense().tolist() == [[0.0, 7.5], [0.0, 0.0], [-1.0, 0.0]]
    assert out.to_dense(default_value=9).tolist() == [[9.0, 7.5], [9.0, 9.0], [-1.0, 9.0]]


def test_generator_elements_batch_with_a_leading_batch_coordinate():
    def gen():
        yield {"st": flumen.SparseTensor([[1]], [10], [4])}
        yield {"st": flumen.SparseTensor([[0], [3]], [20, 30], [4])}
        yield {"st": flumen.SparseTensor(np.zeros((0, 1), np.int64), np.zeros(0, np.int64), [4])}

    ds = flumen.Dataset.from_generator(gen, output={"st": ("int64", [4], "sparse")}).batch(3)
    [batch] = list(ds)
    st = batch["st"]
    assert np.asarray(st.indices).tolist() == [[0, 1], [1, 0], [1, 3]]
    assert np.asarray(st.values).tolist() == [10, 20, 30]
    assert np.asarray(st.dense_shape).tolist() == [3, 4]
    assert st.to_dense().tolist() == [[0, 10, 0, 0], [20, 0, 0, 30], [0, 0, 0, 0]]


def test_each_element_keeps_its_dense_shape_where_the_spec_leaves_it_unknown():
    sizes = [3, 1, 5]
    ds = flumen.Dataset.range(3).map(
        lambda e: {"st": flumen.SparseTensor([[0]], [int(e["value"])], [sizes[int(e["value"])]])},
        output={"st": ("int64", [None], "sparse")},
    )
    assert [np.asarray(element["st"].dense_shape).tolist() for element in ds] == [[3], [1], [5]]
    # A batch is as long as its elements are many, and as wide as the widest of them.
    [batch] = list(ds.batch(4))
    assert np.asarray(batch["st"].dense_shape).tolist() == [3, 5]
    assert batch["st"].to_dense().tolist() == [[0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [2, 0, 0, 0, 0]]
    # Unbatching gives each element the width of the batch it was in.
    widths = [np.asarray(element["st"].dense_shape).tolist() for element in ds.batch(2).unbatch()]
    assert widths == [[3], [3], [5]]


def test_a_batch_of_sparse_fields_alone_unbatches_to_as_many_elements():
    ds = flumen.Dataset.range(5).map(
        lambda e: {"st": flumen.SparseTensor(np.zeros((0, 1), np.int64), np.zeros(0, np.int64), [2])},
        output={"st": ("int64", [2], "sparse")},
    )
    assert len(list(ds.batch(2).unbatch())) == 5


def test_a_plain_tuple_is_not_taken_for_a_sparse_value():
    ds = flumen.Dataset.range(1).map(lambda e: {"st": ([[0]], [1], [4])}, output={"st": ("int64", [4], "sparse")})
    with pytest.raises(flumen.UdfError, match="takes flumen.SparseTensor values"):
        list(ds)


@pytest.mark.parametrize(
    "value, message",
    [
        (flumen.SparseTensor([[4]], [1], [4]), "outside dense_shape"),
        (flumen.SparseTensor([[0]], [1, 2], [4]), "values"),
        (flumen.SparseTensor([[0, 0]], [1], [4, 1]), "rank"),
        (flumen.SparseTensor([[0]], [1], [5]), r"dense_shape \[5\], declared \[4\]"),
    ],
    ids=["index-out-of-range", "count-mismatch", "wrong-rank", "other-dense-shape"],
)
def test_values_that_do_not_fit_the_declared_field_are_errors(value, message):
    ds = flumen.Dataset.range(1).map(lambda e: {"st": value}, output={"st": ("int64", [4], "sparse")})
    # Raised from the function's output: an error of the map, as in tf.data.
    with pytest.raises(flumen.UdfError, match=message):
        list(ds)

"""tf.data's scan_test.py, ported to flumen: Dataset.scan. With a Python function, as
tf.data writes it: `scan(initial_state, scan_func, output=...)`, `scan_func(state, element)`
returning `(new_state, output)`. Each case also runs written with expressions (`initial`
state literals, `update` from the state and the element, and `output` from the new state),
where tf.data's `(new_state, output_of_old_state)` keeps the old state in the output."""

import itertools

import pytest

import flumen
from flumen import col, lit
from tf_data_helpers import take, values

# Out of scope: testTensorArrayWithCondResetByExternalCaptureBreaks (TF1 control flow only),
# testUseDefaultDevice (device placement), testName (name= argument). ScanCheckpointTest is in
# test_tfdata_checkpointing.

TENSOR_STATE = "flumen's scan state is scalar literals: no growing or reshaped tensor (TensorArray) state"


def counting_dataset(start, step, kind):
    zeros = flumen.Dataset.from_tensors({"value": 0}).repeat()
    if kind == "function":
        return zeros.scan(start, lambda state, _: (state + step, state), output={"value": "int64"})
    # state -> (state + step, state): the output is the state before the update.
    return zeros.scan({"s": start}, {"s": col("s") + step}, {"value": col("s") - step})


KINDS = ["function", "expressions"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("start,step,count", [(0, 1, 10), (0, 1, 0), (10, 1, 10), (10, 2, 10), (10, -1, 10),
                                               (10, -2, 10)])
def test_count(start, step, count, kind):
    it = counting_dataset(start, step, kind).take(count).iter()
    for expected, _ in zip(itertools.count(start, step), range(count)):
        assert int(next(it)["value"]) == expected
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("kind", KINDS)
def test_fibonacci(kind):
    ones = flumen.Dataset.from_tensors({"value": 1}).repeat(None)
    if kind == "function":
        ds = ones.scan({"a": 0, "b": 1}, lambda s, _: ({"a": s["b"], "b": s["a"] + s["b"]}, s["b"]),
                       output={"value": "int64"})
    else:
        ds = ones.scan({"a": 0, "b": 1}, {"a": col("b"), "b": col("a") + col("b")}, {"value": col("a")})
    assert [e["value"] for e in take(ds.iter(), 6)] == [1, 1, 2, 3, 5, 8]


@pytest.mark.xfail(reason="flumen has no SparseTensor values (scan state is scalar literals)", strict=True)
@pytest.mark.parametrize("start,step,count", [(0, 1, 10), (0, 1, 0), (10, 1, 10), (10, 2, 10), (10, -1, 10),
                                               (10, -2, 10)])
def test_sparse_count(start, step, count):
    zeros = flumen.Dataset.from_tensors({"value": 0}).repeat()
    ds = zeros.scan({"s": flumen.SparseFeature("i", "v", "int64", [1, 1])}, {"s": col("s")}, {"value": col("s")})
    assert values(ds.take(count))[0][1] == [start]


@pytest.mark.xfail(reason=TENSOR_STATE, strict=True)
def test_tensor_array_simple():
    ds = flumen.Dataset.range(5).scan({"ta": [-1]}, {"ta": flumen.func("concat", [col("ta"), col("value")])},
                                      {"value": col("ta")})
    expected = [[-1], [-1, 0], [-1, 0, 1], [-1, 0, 1, 2], [-1, 0, 1, 2, 3]]
    for _ in range(2):
        assert values(ds) == expected


@pytest.mark.xfail(reason=TENSOR_STATE, strict=True)
def test_tensor_array_with_cond_reset():
    updated = flumen.func("concat", [col("ta"), col("value")])
    ds = flumen.Dataset.range(6).scan({"ta": [-1]}, {"ta": flumen.when(col("value") % 3 == 0, []).otherwise(updated)},
                                      {"value": updated})
    expected = [[-1, 0], [1], [1, 2], [1, 2, 3], [4], [4, 5]]
    for _ in range(2):
        assert values(ds) == expected


@pytest.mark.xfail(reason=TENSOR_STATE, strict=True)
def test_changing_state_shape():
    ds = flumen.Dataset.from_tensors({"value": 0}).repeat(5).scan(
        {"v": [0], "r": 1}, {"v": flumen.func("concat", [col("v"), col("v")]), "r": flumen.func("expand_dims", [col("r")])},
        {"v": col("v"), "r": col("r")})
    got = values(ds, "v")
    assert got == [[0] * (2 ** i) for i in range(5)]


def test_incorrect_state_type():
    # tf.data: an int32 initial state and an int64 new state. flumen's integer state literals
    # are int64, so the mismatch is written the other way round: an int32 update.
    with pytest.raises((TypeError, flumen.PlanError), match="state"):
        flumen.Dataset.range(10).scan({"s": 1}, {"s": lit(1).cast("int32")}, {"value": col("s")})


def test_incorrect_return_type():
    # A scan function that gives no (new state, output) pair: flumen's scan without an output.
    with pytest.raises(TypeError):
        flumen.Dataset.range(10).scan({"s": 1}, {"s": lit(1)}, None)


def test_preserve_cardinality():
    def py_fn(_state, _element):
        raise StopIteration()

    ds = flumen.Dataset.from_tensors({"value": 0}).scan(1, py_fn, output={"value": "int64"})
    with pytest.raises(flumen.Error):
        next(ds.iter())

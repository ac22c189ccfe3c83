"""Expressions over tensor fields of unknown dims (ragged fields, batches after enumerate):
elementwise over each element's values, a per-element scalar standing for every value, as
the same tf operators do. Expected values are computed with NumPy per element."""

import numpy as np
import pytest

import flumen
from flumen import col

LENGTHS = [0, 1, 3, 2]


def ragged():
    return flumen.Dataset.range(len(LENGTHS)).map(
        lambda e: {"t": np.arange(LENGTHS[int(e["value"])]) - 1, "w": float(e["value"]) / 2},
        output={"t": ("int64", [None]), "w": "float64"},
    )


def test_a_ragged_field_times_a_literal():
    out = [e["u"] for e in ragged().map({"u": col("t") * 3})]
    assert [u.tolist() for u in out] == [((np.arange(n) - 1) * 3).tolist() for n in LENGTHS]
    assert all(u.dtype == np.int64 for u in out)


def test_python_operators_keep_their_meaning_over_each_value():
    ds = ragged().map({"q": col("t") / 2, "m": col("t") % 2, "f": col("t") // 2})
    for e, n in zip(ds, LENGTHS):
        t = np.arange(n) - 1
        assert e["q"].tolist() == (t / 2).tolist()
        assert e["m"].tolist() == (t % 2).tolist()
        assert e["f"].tolist() == (t // 2).tolist()


def test_a_per_element_scalar_stands_for_every_value():
    ds = ragged().map({"u": col("t") * col("w") + 1})
    assert ds.element_spec[-1] == ("u", "float64", [None])
    for e, n in zip(ds, LENGTHS):
        w = float(e["w"])
        assert e["u"].tolist() == ((np.arange(n) - 1) * w + 1).tolist()


def test_the_result_of_a_ragged_field_batches_as_ragged():
    [batch] = list(ragged().map({"u": col("t") + 1}).ragged_batch(4))
    values, offsets = batch["u"]
    rows = [values[offsets[i]:offsets[i + 1]].tolist() for i in range(4)]
    assert rows == [np.arange(n).tolist() for n in LENGTHS]


def test_batched_fields_after_enumerate():
    ds = flumen.Dataset.range(6).batch(4).enumerate().map({"x": col("value") * 2 + col("index")})
    assert [e["x"].tolist() for e in ds] == [[0, 2, 4, 6], [9, 11]]


def test_values_of_different_lengths_are_an_error_of_their_element():
    ds = flumen.Dataset.range(3).map(
        lambda e: {"a": np.arange(int(e["value"])), "b": np.arange(2)},
        output={"a": ("int64", [None]), "b": ("int64", [None])},
    ).map({"c": col("a") + col("b")})
    with pytest.raises(flumen.DataError, match="differ in shape"):
        list(ds)
    assert [e["c"].tolist() for e in ds.ignore_errors()] == [[0, 2]]


def test_a_fixed_shape_and_an_unknown_one_are_refused_when_built():
    ds = flumen.Dataset.range(2).map(
        lambda e: {"a": np.arange(int(e["value"])), "f": np.ones(3)},
        output={"a": ("int64", [None]), "f": ("float64", [3])},
    )
    with pytest.raises(flumen.PlanError, match="does not broadcast with one of unknown dims"):
        ds.map({"c": col("a") + col("f")})

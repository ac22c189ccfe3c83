"""tf.data's range_test.py, ported to flumen: Dataset.range (output_type=)."""

import numpy as np
import pytest

import flumen

# RangeCheckpointTest is in test_tfdata_checkpointing.

OUTPUT_TYPES = ["int32", "int64", "float32", "float64"]


def check(ds, expected, output_type):
    got = list(ds)
    assert [e["value"].tolist() for e in got] == expected.tolist()
    assert ds.element_spec == [("value", output_type, [])]
    assert all(e["value"].dtype == np.dtype(output_type) for e in got)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_stop(output_type):
    check(flumen.Dataset.range(5, output_type=output_type), np.arange(5, dtype=output_type), output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_start_stop(output_type):
    check(flumen.Dataset.range(2, 5, output_type=output_type), np.arange(2, 5, dtype=output_type), output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_start_stop_step(output_type):
    check(flumen.Dataset.range(2, 10, 2, output_type=output_type), np.arange(2, 10, 2, dtype=output_type),
          output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_zero_step(output_type):
    with pytest.raises((flumen.PlanError, ValueError)):
        list(flumen.Dataset.range(2, 10, 0, output_type=output_type))


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_negative_step(output_type):
    check(flumen.Dataset.range(2, 10, -1, output_type=output_type), np.arange(2, 10, -1, dtype=output_type),
          output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_stop_less_than_start(output_type):
    check(flumen.Dataset.range(10, 2, output_type=output_type), np.arange(10, 2, dtype=output_type), output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_stop_less_than_start_with_positive_step(output_type):
    check(flumen.Dataset.range(10, 2, 2, output_type=output_type), np.arange(10, 2, 2, dtype=output_type),
          output_type)


@pytest.mark.parametrize("output_type", OUTPUT_TYPES)
def test_stop_less_than_start_with_negative_step(output_type):
    check(flumen.Dataset.range(10, 2, -1, output_type=output_type), np.arange(10, 2, -1, dtype=output_type),
          output_type)

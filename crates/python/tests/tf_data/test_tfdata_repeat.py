"""tf.data's repeat_test.py, ported to flumen: Dataset.repeat."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import elements, take

# Out of scope: testName (name= argument); RepeatRandomAccessTest (tf.data.experimental
# random_access.at), RepeatGlobalShuffleTest and its checkpoint test (the private
# experimental _global_shuffle): indexing APIs flumen does not mirror.
# RepeatDatasetCheckpointTest is in test_tfdata_checkpointing.

COMPONENTS = {"a": np.array(1), "b": np.array([1, 2, 3]), "c": np.array(37.0)}
EXPECTED = {"a": 1, "b": [1, 2, 3], "c": 37.0}


def shapes(ds):
    return [shape for _, _, shape in ds.element_spec]


@pytest.mark.parametrize("count", [0, 3, 7])
def test_finite_repeat(count):
    ds = flumen.Dataset.from_tensors(COMPONENTS).repeat(count)
    assert shapes(ds) == [list(c.shape) for c in COMPONENTS.values()]
    assert elements(ds) == [EXPECTED] * count


def test_infinite_repeat():
    ds = flumen.Dataset.from_tensors(COMPONENTS).repeat(-1)
    assert shapes(ds) == [list(c.shape) for c in COMPONENTS.values()]
    assert take(ds.iter(), 17) == [EXPECTED] * 17


def test_repeat_repeat():
    inner_count, outer_count = 7, 14
    ds = flumen.Dataset.from_tensors(COMPONENTS).repeat(inner_count).repeat(outer_count)
    assert shapes(ds) == [list(c.shape) for c in COMPONENTS.values()]
    assert elements(ds) == [EXPECTED] * (inner_count * outer_count)

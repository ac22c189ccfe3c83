"""tf.data's take_test.py, ported to flumen: Dataset.take."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import values

# Out of scope: testName (name= argument); TakeRandomAccessTest (tf.data.experimental
# random_access.at), TakeGlobalShuffleTest and its checkpoint test (the private experimental
# _global_shuffle). TakeDatasetCheckpointTest is in test_tfdata_checkpointing.


@pytest.mark.parametrize("count", [-1, 0, 4, 10, 25])
def test_basic(count):
    ds = flumen.Dataset.from_numpy({"value": np.arange(10)}).take(count)
    assert [shape for _, _, shape in ds.element_spec] == [[]]
    num_output = min(count, 10) if count != -1 else 10
    assert values(ds) == list(range(num_output))

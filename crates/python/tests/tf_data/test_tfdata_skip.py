"""tf.data's skip_test.py, ported to flumen: Dataset.skip."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import values

# Out of scope: testName (name= argument); SkipRandomAccessTest (tf.data.experimental
# random_access.at), SkipGlobalShuffleTest and its checkpoint test (the private experimental
# _global_shuffle). SkipDatasetCheckpointTest is in test_tfdata_checkpointing.


@pytest.mark.parametrize("count", [-1, 0, 4, 10, 25])
def test_basic(count):
    ds = flumen.Dataset.from_numpy({"value": np.arange(10)}).skip(count)
    assert [shape for _, _, shape in ds.element_spec] == [[]]
    start = min(count, 10) if count != -1 else 10
    assert values(ds) == list(range(start, 10))

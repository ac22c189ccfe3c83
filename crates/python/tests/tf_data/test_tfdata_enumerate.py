"""tf.data's enumerate_test.py, ported to flumen: Dataset.enumerate. tf.data's (index, element)
pair is flumen's element with an `index` field added."""

import numpy as np

import flumen
from tf_data_helpers import elements

# EnumerateCheckpointTest is in test_tfdata_checkpointing.


def test_enumerate():
    components = {"s": np.array(["a", "b"]), "i": np.array([1, 2]), "f": np.array([37.0, 38])}
    ds = flumen.Dataset.from_numpy(components).enumerate(np.int64(20))
    spec = {name: (dtype, shape) for name, dtype, shape in ds.element_spec}
    assert spec["index"] == ("int64", [])
    assert [spec[k][1] for k in components] == [[]] * 3
    assert elements(ds) == [{"index": 20, "s": "a", "i": 1, "f": 37.0}, {"index": 21, "s": "b", "i": 2, "f": 38.0}]

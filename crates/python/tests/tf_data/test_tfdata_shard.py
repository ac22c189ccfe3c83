"""tf.data's shard_test.py, ported to flumen: Dataset.shard."""

import pytest

import flumen
from flumen import col
from tf_data_helpers import rows, values

# Out of scope: testName (name= argument); ShardRandomAccessTest (tf.data.experimental
# random_access.at), ShardGlobalShuffleTest and its checkpoint test (the private experimental
# _global_shuffle). ShardCheckpointTest is in test_tfdata_checkpointing.

# A shard argument out of range is refused when the dataset is built (tf.data: when it runs);
# a negative count cannot even be passed to flumen's unsigned parameter.
REFUSED = (flumen.PlanError, OverflowError, ValueError)


def test_simple_case():
    assert values(flumen.Dataset.range(10).shard(5, 2)) == [2, 7]


def test_nested_data():
    a = flumen.Dataset.range(10)
    b = flumen.Dataset.range(10, 0, -1).map({"b": col("value")}, keep=False)
    assert rows(flumen.Dataset.zip([a, b]).shard(5, 2), "value", "b") == [(2, 8), (7, 3)]


def test_offset_zero():
    assert values(flumen.Dataset.range(10).shard(5, 0)) == [0, 5]


def test_offset_greater_num_shards():
    with pytest.raises(REFUSED):
        list(flumen.Dataset.range(10).shard(5, 7))


def test_negative_offset():
    with pytest.raises(REFUSED):
        list(flumen.Dataset.range(10).shard(5, -3))


def test_negative_num_shards():
    with pytest.raises(REFUSED):
        list(flumen.Dataset.range(10).shard(-3, 1))


def test_zero_num_shards():
    with pytest.raises(REFUSED):
        list(flumen.Dataset.range(10).shard(0, 1))


def test_iterator_ends_before_first_elem():
    assert values(flumen.Dataset.range(1).shard(5, 2)) == []


def test_larger_worker_pool():
    assert values(flumen.Dataset.range(10).shard(7, 5)) == [5]


def test_index_equals_num_shards():
    assert values(flumen.Dataset.range(10).shard(5, 4)) == [4, 9]


def test_index_equals_num_shards2():
    assert values(flumen.Dataset.range(10).shard(4, 3)) == [3, 7]


def test_num_shards_larger_than_dataset():
    assert values(flumen.Dataset.range(10).shard(20, 5)) == [5]

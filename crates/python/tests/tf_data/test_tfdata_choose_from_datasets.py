"""tf.data's choose_from_datasets tests (interleave_ops_test.py and the directed interleave
checkpoint test), ported to flumen: Dataset.choose_from_datasets. tf.data's choice dataset
is a dataset of int64 scalars; flumen's is a dataset with one int64 field."""

import numpy as np
import pytest

import flumen
from tf_data_helpers import VERIFY_FNS, VERIFY_IDS, values

WORDS = ["foo", "bar", "baz"]


def words(counts=(None, None, None)):
    return [flumen.Dataset.from_tensors({"value": w}).repeat(n) for w, n in zip(WORDS, counts)]


def choices(array):
    return flumen.Dataset.from_numpy({"value": np.asarray(array, np.int64)})


def test_choose_from_datasets():
    choice_array = np.random.default_rng(7).integers(3, size=15)
    ds = flumen.Dataset.choose_from_datasets(words(), choices(choice_array))
    assert values(ds) == [WORDS[i] for i in choice_array]


def test_choose_from_datasets_stopping_on_empty_dataset():
    ds = flumen.Dataset.choose_from_datasets(words((2, None, None)), choices([0, 0, 0, 1, 1, 1, 2, 2, 2]))
    assert values(ds) == ["foo", "foo"]


def test_choose_from_datasets_skipping_empty_datasets():
    ds = flumen.Dataset.choose_from_datasets(words((2, None, None)), choices([0, 0, 0, 1, 1, 1, 2, 2, 2]),
                                             stop_on_empty_dataset=False)
    assert values(ds) == ["foo", "foo", "bar", "bar", "bar", "baz", "baz", "baz"]


def test_choose_from_datasets_choice_dataset_is_empty():
    ds = flumen.Dataset.choose_from_datasets(words(), flumen.Dataset.range(0))
    assert values(ds) == []


def test_choose_from_datasets_nested_and_of_rows():
    ds = flumen.Dataset.choose_from_datasets(
        [flumen.Dataset.range(10), flumen.Dataset.range(100, 110)], flumen.Dataset.range(6).map(
            {"value": flumen.col("value") % 2}))
    assert values(ds) == [0, 100, 1, 101, 2, 102]


def test_errors():
    with pytest.raises(flumen.PlanError, match="int64 scalar"):
        flumen.Dataset.choose_from_datasets(words(), flumen.Dataset.from_numpy({"value": np.zeros(3, np.float32)}))
    with pytest.raises(flumen.PlanError, match="elements differ"):
        flumen.Dataset.choose_from_datasets([flumen.Dataset.range(3), words()[0]], choices([0, 1]))
    # A choice out of range is an error in its place (tf.data: "Selector index out of range").
    ds = flumen.Dataset.choose_from_datasets(words(), choices([0, 3, 1]))
    with pytest.raises(flumen.DataError, match="choice 3 is outside"):
        list(ds)
    assert values(ds.ignore_errors()) == ["foo", "bar"]


@pytest.mark.parametrize("verify_fn", VERIFY_FNS, ids=VERIFY_IDS)
@pytest.mark.parametrize("mode", ["full", "symbolic"])
def test_checkpoint(verify_fn, mode):
    # tf.data's ChooseFromDatasetsCheckpointTest: three ranges of 10, each chosen 10 times.
    def build():
        datasets = [flumen.Dataset.range(10 * i, 10 * (i + 1)) for i in range(3)]
        return flumen.Dataset.choose_from_datasets(datasets, choices(np.repeat([0, 1, 2], 10)))

    verify_fn(build, 30, mode=mode)

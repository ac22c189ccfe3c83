"""Shared helpers for the tf.data kernel-test port: turning flumen elements into plain Python
values, checking outputs and errors, tf.data's determinism check and its five checkpoint
verifications, written against flumen's iterator (``it.save()`` / ``ds.iter(checkpoint=)``)."""

import numpy as np
import pytest

import flumen


def py(value):
    """A flumen value (NumPy array, ragged pair, list of strings) as plain Python."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(py(v) for v in value)
    if isinstance(value, list):
        return [py(v) for v in value]
    return value


def element(e):
    return {k: py(v) for k, v in e.items()}


def elements(ds):
    """Every element of ``ds`` as a dict of plain Python values."""
    return [element(e) for e in ds]


def values(ds, field="value"):
    """One field of every element of ``ds``."""
    return [py(e[field]) for e in ds]


def rows(ds, *fields):
    """Several fields of every element, as tuples (tf.data's tuple elements)."""
    return [tuple(py(e[f]) for f in fields) for e in ds]


def take(it, n):
    return [element(next(it)) for _ in range(n)]


def assert_exhausted(it):
    with pytest.raises(StopIteration):
        next(it)


def check_determinism(dataset_fn, expect_determinism, expected):
    """tf.data's checkDeterminism: ``dataset_fn(delay_ms)`` delays its first element; a
    deterministic dataset gives ``expected`` in order, a nondeterministic one gives the same
    elements in another order under some delay."""
    if expect_determinism:
        assert values(dataset_fn(100)) == expected
        return
    for delay_ms in [10, 100, 1000]:
        actual = values(dataset_fn(delay_ms))
        assert sorted(actual) == sorted(expected)
        if actual != expected:
            return
    pytest.fail("Failed to observe nondeterministic ordering")


# tf.data's checkpoint verifications (checkpoint_test_base), one function each.


def _expected(ds_fn, num_outputs, verify_exhausted=True):
    it = ds_fn().iter()
    out = take(it, num_outputs)
    if verify_exhausted:
        assert_exhausted(it)
    return out


def run_with_breaks(ds_fn, break_points, num_outputs, verify_exhausted=True, mode="full"):
    """Iterates ``ds_fn()``, saving at each break point and going on from a fresh dataset
    restored from that state; returns what came out."""
    actual, state, done = [], None, 0
    points = list(break_points)
    for i, point in enumerate(points + [num_outputs]):
        it = ds_fn().iter(checkpoint=state)
        actual += take(it, point - done)
        done = point
        if i < len(points):
            state = it.save(mode)
        elif verify_exhausted:
            assert_exhausted(it)
    return actual


def verify_unused_iterator(ds_fn, num_outputs, sort=False, verify_exhausted=True, mode="full"):
    _verify_breaks(ds_fn, [0], num_outputs, sort, verify_exhausted, mode)


def verify_fully_used_iterator(ds_fn, num_outputs, sort=False, verify_exhausted=True, mode="full"):
    _verify_breaks(ds_fn, [num_outputs], num_outputs, sort, verify_exhausted, mode)


def verify_exhausted_iterator(ds_fn, num_outputs, sort=False, verify_exhausted=True, mode="full"):
    it = ds_fn().iter()
    take(it, num_outputs)
    assert_exhausted(it)
    restored = ds_fn().iter(checkpoint=it.save(mode))
    assert_exhausted(restored)


def verify_multiple_breaks(ds_fn, num_outputs, sort=False, verify_exhausted=True, mode="full"):
    points = np.unique(np.linspace(0, num_outputs, 10, dtype=int)).tolist()
    _verify_breaks(ds_fn, points, num_outputs, sort, verify_exhausted, mode)


def verify_reset_restored_iterator(ds_fn, num_outputs, sort=False, verify_exhausted=True, mode="full"):
    """A restored iterator's dataset, iterated anew, starts from the beginning."""
    expected = _expected(ds_fn, num_outputs, verify_exhausted)
    it = ds_fn().iter()
    take(it, num_outputs // 2)
    ds = ds_fn()
    ds.iter(checkpoint=it.save(mode))
    # Re-initialized: the dataset's first iteration again (its seeds and reshuffles included).
    again = ds.iter(iteration=0)
    actual = take(again, num_outputs)
    if verify_exhausted:
        assert_exhausted(again)
    _match(expected, actual, sort)


def _verify_breaks(ds_fn, points, num_outputs, sort, verify_exhausted, mode):
    expected = _expected(ds_fn, num_outputs, verify_exhausted)
    actual = run_with_breaks(ds_fn, points, num_outputs, verify_exhausted, mode)
    _match(expected, actual, sort)


def _match(expected, actual, sort):
    if sort:
        key = repr
        assert sorted(expected, key=key) == sorted(actual, key=key)
    else:
        assert expected == actual


VERIFY_FNS = [
    verify_unused_iterator,
    verify_fully_used_iterator,
    verify_exhausted_iterator,
    verify_multiple_breaks,
    verify_reset_restored_iterator,
]

# For @pytest.mark.parametrize("verify_fn", VERIFY_FNS, ids=VERIFY_IDS).
VERIFY_IDS = [f.__name__ for f in VERIFY_FNS]


def fill(dtype="int64"):
    """tf.fill([n], n) of a scalar field ``value``, as a Python map's output."""

    def fn(e):
        x = int(e["value"])
        return {"value": np.full([x], x, dtype=dtype)}

    return fn


def slices(values, field="value", dtype=None):
    """Dataset.from_tensor_slices of one component, as a flumen field."""
    return flumen.Dataset.from_numpy({field: np.asarray(values, dtype=dtype)})


class CheckpointStore:
    """tf.data's gen_outputs: runs a fresh `ds_fn()` iterator per segment between break points,
    restoring the latest saved state when one exists, and keeps the latest state (as tf.data's
    checkpoint files overwrite each other)."""

    def __init__(self, mode="full"):
        self.state = None
        self.mode = mode

    def gen_outputs(self, ds_fn, break_points, num_outputs, ckpt_saved=False, verify_exhausted=True,
                    save_checkpoint_at_end=True):
        outputs = []
        for i in range(len(break_points) + 1):
            it = ds_fn().iter(checkpoint=self.state if ckpt_saved else None)
            start = break_points[i - 1] if i > 0 else 0
            end = break_points[i] if i < len(break_points) else num_outputs
            outputs += take(it, end - start)
            if i < len(break_points) and end == num_outputs and verify_exhausted:
                assert_exhausted(it)
            if i == len(break_points) and verify_exhausted:
                assert_exhausted(it)
            if save_checkpoint_at_end or i < len(break_points):
                self.state = it.save(self.mode)
                ckpt_saved = True
        return outputs


def verify_error_on_save(ds_fn, num_outputs, error, break_point=None):
    """Saving an iterator of `ds_fn()` after `break_point` elements raises `error`."""
    break_point = num_outputs // 2 if not break_point else break_point
    it = ds_fn().iter()
    for _ in range(break_point):
        next(it)
    with pytest.raises(error):
        it.save()

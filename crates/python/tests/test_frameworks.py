"""Handing batches to NumPy (DLPack), pyarrow, PyTorch and JAX without copies, and the
PyTorch dataset adapter's sharding and state."""

import importlib.util
import pickle

import numpy as np
import pytest

import flumen
from flumen import col

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_JAX = importlib.util.find_spec("jax") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (too large for CI's venv)")
needs_jax = pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed")


def matrix_dataset():
    x = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    return flumen.Dataset.from_numpy({"x": x, "i": np.arange(64)}).batch(16), x


def first_columns(ds):
    batch = next(iter(ds.iter(as_batches=True)))
    return batch, dict(batch.columns())


def address(array):
    return array.__array_interface__["data"][0]


def test_dlpack_round_trip_through_numpy_is_a_read_only_view():
    ds, x = matrix_dataset()
    batch, columns = first_columns(ds)
    via_dlpack = np.from_dlpack(columns["x"])
    via_interface = np.asarray(columns["x"])
    assert address(via_dlpack) == address(via_interface)
    assert not via_dlpack.flags.writeable
    np.testing.assert_array_equal(via_dlpack, x[:16])
    assert columns["x"].__dlpack_device__() == (1, 0)
    # The capsule keeps the buffer alive after the batch and column are gone.
    del batch, columns, via_interface
    np.testing.assert_array_equal(via_dlpack, x[:16])


def test_dlpack_refuses_what_it_cannot_give():
    _, columns = first_columns(matrix_dataset()[0])
    with pytest.raises(BufferError, match="without a copy"):
        columns["x"].__dlpack__(copy=True)
    with pytest.raises(BufferError, match="CPU"):
        columns["x"].__dlpack__(dl_device=(2, 0))
    # A legacy (unversioned) capsule is still given, for older consumers.
    capsule = columns["x"].__dlpack__()
    assert "dltensor" in repr(capsule)


def test_iter_arrow_and_as_numpy_iterator():
    pa = pytest.importorskip("pyarrow")
    ds = flumen.Dataset.range(10).map({"y": col("value") * 2}).batch(4)
    batches = list(ds.iter_arrow())
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert [b.num_rows for b in batches] == [4, 4, 2]
    assert pa.concat_batches(batches).column("y").to_pylist() == [2 * v for v in range(10)]
    assert np.concatenate([b["y"] for b in ds.as_numpy_iterator()]).tolist() == [2 * v for v in range(10)]


@needs_torch
def test_iter_torch_gives_tensors_over_flumen_buffers():
    import torch

    ds, x = matrix_dataset()
    tensors = list(ds.iter_torch())
    assert [t["x"].shape for t in tensors] == [torch.Size([16, 8])] * 4
    assert torch.equal(torch.cat([t["x"] for t in tensors]), torch.from_numpy(x))
    assert tensors[0]["i"].dtype == torch.int64
    _, columns = first_columns(ds)
    assert torch.from_dlpack(columns["x"]).data_ptr() == address(np.asarray(columns["x"]))
    # Ragged fields come as (values, offsets).
    ragged = flumen.Dataset.from_generator(
        lambda: ({"v": np.arange(n, dtype=np.int32)} for n in range(5)), {"v": ("int32", [None])}
    ).batch(5)
    values, offsets = next(iter(ragged.iter_torch()))["v"]
    assert offsets.tolist() == [0, 0, 1, 3, 6, 10]
    assert values[offsets[3] : offsets[4]].tolist() == [0, 1, 2]


@needs_torch
def test_torch_iterable_dataset_shards_exactly_across_ranks_and_workers():
    import torch.utils.data

    from flumen.torch import IterableDataset

    ds = flumen.Dataset.range(1000).batch(7)
    seen = []
    for rank in range(2):
        wrapped = IterableDataset(ds, rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(wrapped, batch_size=None, num_workers=2)
        for batch in loader:
            seen.extend(batch["value"].tolist())
    assert sorted(seen) == list(range(1000))
    # Without sharding every copy sees everything.
    unsharded = IterableDataset(ds, shard=False, rank=1, world_size=2)
    assert sum(len(b["value"]) for b in unsharded) == 1000


@needs_torch
def test_torch_iterable_dataset_state_dict_resumes_exactly():
    from flumen.torch import IterableDataset

    def make():
        # A new dataset each time: one dataset reshuffles on each iteration, as tf.data's.
        return flumen.Dataset.range(100).shuffle(32, seed=7).batch(10)

    ds = make()
    whole = [b["value"].tolist() for b in IterableDataset(make(), rank=1, world_size=2)]
    wrapped = IterableDataset(ds, rank=1, world_size=2)
    it = iter(wrapped)
    head = [next(it)["value"].tolist() for _ in range(2)]
    state = pickle.loads(pickle.dumps(wrapped.state_dict()))
    fresh = IterableDataset(ds, rank=1, world_size=2)
    fresh.load_state_dict(state)
    tail = [b["value"].tolist() for b in fresh]
    assert head + tail == whole
    wrong_shard = IterableDataset(ds, rank=0, world_size=2)
    wrong_shard.load_state_dict(state)
    with pytest.raises(ValueError, match="shard"):
        iter(wrong_shard)


@needs_torch
def test_torch_stateful_dataloader_resumes_where_torchdata_is_installed():
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    from flumen.torch import IterableDataset

    ds = flumen.Dataset.range(60).batch(6)
    loader = stateful.StatefulDataLoader(IterableDataset(ds), batch_size=None, num_workers=0)
    it = iter(loader)
    head = [next(it)["value"].tolist() for _ in range(3)]
    state = loader.state_dict()
    resumed = stateful.StatefulDataLoader(IterableDataset(ds), batch_size=None, num_workers=0)
    resumed.load_state_dict(state)
    tail = [b["value"].tolist() for b in resumed]
    assert sum(head + tail, []) == list(range(60))


@needs_jax
def test_iter_jax_gives_arrays_over_flumen_buffers():
    import jax.numpy as jnp

    ds, x = matrix_dataset()
    arrays = list(ds.iter_jax())
    assert jnp.array_equal(jnp.concatenate([a["x"] for a in arrays]), jnp.asarray(x))
    _, columns = first_columns(ds)
    assert jnp.from_dlpack(columns["x"]).unsafe_buffer_pointer() == address(np.asarray(columns["x"]))


def test_a_dataset_pickles_through_its_serialized_form():
    ds = flumen.Dataset.range(20).map({"y": col("value") + 1}).filter(col("y") % 2 == 0)
    back = pickle.loads(pickle.dumps(ds))
    assert back.fingerprint() == ds.fingerprint()
    assert [int(e["y"]) for e in back] == [v + 1 for v in range(20) if (v + 1) % 2 == 0]
    with pytest.raises(TypeError, match="filter runs a Python function"):
        pickle.dumps(flumen.Dataset.range(3).filter(lambda b: b["value"] > 0))


def test_sparse_features_come_as_coo_triplets(tmp_path):
    rows = [([2, 0], [2.0, 0.5]), ([], []), ([3], [1.0]), ([1], [3.0])]
    path = str(tmp_path / "s.tfrecord")
    # A record without entries leaves both features out.
    flumen.write_tfrecord(path, [flumen.serialize_example({"idx": i, "val": v} if i else {}) for i, v in rows])
    ds = flumen.Dataset.tfrecord(path).parse_example(
        "record", {"s": flumen.SparseFeature(index_key="idx", value_key="val", dtype="float32", size=4)}
    )
    elements = [e["s"] for e in ds]
    # Each element: its entries in index order (tf.io.parse_example sorts them), dense shape [4].
    indices, values, dense_shape = elements[0]
    assert indices.tolist() == [[0], [2]] and values.tolist() == [0.5, 2.0] and dense_shape.tolist() == [4]
    assert not values.flags.writeable  # a view of flumen's buffer
    assert elements[1][0].shape == (0, 1) and elements[1][1].tolist() == []
    # Batched as tf.data batches SparseTensors: the element's position comes first.
    indices, values, dense_shape = next(iter(ds.batch(3)))["s"]
    assert indices.tolist() == [[0, 0], [0, 2], [2, 3]]
    assert values.tolist() == [0.5, 2.0, 1.0]
    assert dense_shape.tolist() == [3, 4]


def test_a_dataset_is_an_arrow_stream():
    pa = pytest.importorskip("pyarrow")
    ds = flumen.Dataset.range(1000).map({"y": col("value") * 2}).filter(col("value") % 7 != 0)
    table = pa.table(ds)
    assert table.column("y").to_pylist() == [2 * v for v in range(1000) if v % 7 != 0]
    reader = pa.RecordBatchReader.from_stream(ds)
    assert reader.schema.names == ["value", "y"]
    # A Python function in the pipeline needs the GIL that the reading thread holds.
    udf = flumen.Dataset.range(100).map(lambda c: {"z": c["value"] + 1}, output={"z": "int64"}, keep=False)
    assert pa.table(udf).column("z").to_pylist() == list(range(1, 101))
    # A failing element is an error of the stream.
    bad = flumen.Dataset.range(10).map(lambda c: 1 / 0, output={"z": "int64"})
    with pytest.raises(Exception, match="ZeroDivisionError"):
        pa.table(bad)

"""flumen pipelines on Ray: a Ray Data datasource, a ``map_batches`` stage, and ingest for Ray
Train workers.

flumen runs on Ray rather than growing its own cluster manager. Three ways in:

``read(ds)``
    A ``ray.data.Dataset`` whose read tasks each run one part of ``ds`` in a Ray worker
    (``Dataset.split_for_worker``: each task reads only its own files, row groups or Avro
    blocks where the pipeline allows, else shards the output) and yield its chunks as Arrow
    tables through the C stream interface, never as Python objects. The parts together hold
    every element exactly once; each part is deterministic, so a task Ray retries after its
    worker died yields the same blocks again.

``MapBatches(fragment)``
    A callable class for ``ray.data.Dataset.map_batches(..., batch_format="pyarrow")`` that
    runs a flumen plan fragment (parse, decode, augment...) over each batch: one stage of an
    existing Ray Data pipeline swapped for a compiled one.

``train_iterator(ds)``
    Inside a Ray Train worker: this rank's part of ``ds`` by (world rank, world size), every
    element once per epoch across the ranks, resumable from a state each rank saves into
    its ``ray.train.Checkpoint``. Unlike ``streaming_split`` of a Ray Dataset, no
    coordinator hands out blocks: each rank reads its own part, so ingest needs no Ray Data
    executor and restarts exactly where its checkpoint says; ``streaming_split`` balances
    load dynamically between ranks of unequal speed and shares one preprocessing pool
    among them, at the cost of a coordinator, moving every block through the object store,
    and no exact resume.

Needs ``ray[data]`` (and ``ray[train]`` for Ray Train).
"""

import os
import random

import numpy as np
import pyarrow as pa
import ray
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

import flumen

__all__ = ["FlumenDatasource", "MapBatches", "TrainIterator", "read", "train_iterator"]

# Each read task is a whole flumen pipeline (its plan, its threads): Ray's default of at least
# 200 read tasks made w7 2.6x slower than 8 tasks on 2 CPUs, so by default there are at most
# this many per CPU of the cluster, enough to balance load and retry at a fine grain.
TASKS_PER_CPU = 4

# Ray's blocks are cut every this many bytes of rows: large enough that Ray's per-block
# costs vanish, small enough to stream (Ray's own ceiling is 128 MiB).
DEFAULT_BLOCK_BYTES = 32 << 20


def read(dataset, *, parallelism=-1, seed=None, block_bytes=DEFAULT_BLOCK_BYTES, options=None, concurrency=None,
         ray_remote_args=None):
    """``dataset`` as a ``ray.data.Dataset``, read by Ray tasks that each run a part of it.

    Args:
        dataset: the ``flumen.Dataset``; it must serialize (no Python functions in it: build
            those stages with ``MapBatches`` instead).
        parallelism: the number of read tasks. By default Ray's choice, capped at four per
            CPU of the cluster (each task starts a whole pipeline) and so that no task
            repeats another's reading: at most one task per file of a record-file source
            (Parquet and Avro split further), and a single task when the shard has to go to
            the output (every task would run the whole pipeline).
        seed: seeds what the pipeline leaves unseeded (shuffles, file-list shuffles); drawn
            once here when ``None``. Every task and every epoch of the Ray dataset uses it.
        block_bytes: Ray blocks are cut every this many bytes of rows (row boundaries do not
            depend on flumen's chunking, so a retried task yields the same blocks).
        options: ``flumen.Options`` keyword arguments each task runs its part with (a
            plan travels without its options), e.g. ``{"threads": 1}`` for tasks that
            should keep to the one CPU Ray reserves for them.
        concurrency, ray_remote_args: passed to ``ray.data.read_datasource``.
    """
    source = FlumenDatasource(dataset, seed=seed, block_bytes=block_bytes, options=options,
                              parallelism=parallelism if parallelism > 0 else None)
    return ray.data.read_datasource(
        source,
        override_num_blocks=parallelism if parallelism > 0 else None,
        concurrency=concurrency,
        ray_remote_args=ray_remote_args or {},
    )


class FlumenDatasource(Datasource):
    """A ``ray.data.Datasource`` running a flumen pipeline (``read`` builds one).

    Ray's projection pushdown (``select_columns`` right after the read) and predicate
    pushdown (``filter(expr=...)`` with columns, literals, arithmetic, comparisons and
    ``&``/``|``/``~``) become a select and a filter at the end of the flumen pipeline, which
    flumen's optimizer pushes on into its sources (Parquet, CSV and Avro read only the
    columns used).
    """

    def __init__(self, dataset, *, seed=None, block_bytes=DEFAULT_BLOCK_BYTES, options=None, parallelism=None):
        super().__init__()
        self._parallelism = parallelism
        self._options = dict(options or {})
        flumen.Options(**self._options)  # a bad option is an error here, not in every task
        try:
            dataset.serialize()
        except flumen.Error as e:
            raise TypeError(f"flumen.ray.read needs a dataset that serializes: {e}") from None
        self._dataset = dataset
        self._seed = random.getrandbits(63) if seed is None else int(seed)
        self._block_bytes = int(block_bytes)
        self._projection_map = None
        self._predicate_expr = None

    @property
    def dataset(self):
        """The pipeline the read tasks split, with Ray's pushdowns applied."""
        return self._dataset

    def get_name(self):
        return "Flumen"

    def supports_projection_pushdown(self):
        return True

    def supports_predicate_pushdown(self):
        return True

    def apply_projection(self, projection_map):
        clone = super().apply_projection(projection_map)
        names = [name for name, _, _ in clone._dataset.element_spec]
        keep = {c: flumen.col(c) for c in names if c in (clone._projection_map or names)}
        # No column at all (Ray counting rows) still needs rows: flumen's elements have fields.
        if keep and len(keep) < len(names):
            clone._dataset = clone._dataset.map(keep, keep=False)
        return clone

    def apply_predicate(self, predicate_expr):
        expr = _flumen_expr(predicate_expr)
        if expr is None:
            return self  # Ray keeps its Filter above the read
        try:
            filtered = self._dataset.filter(expr)
        except flumen.Error:
            return self
        clone = super().apply_predicate(predicate_expr)
        clone._dataset = filtered
        return clone

    def estimate_inmemory_data_size(self):
        rows, row_bytes = self._dataset.cardinality, _fixed_row_bytes(self._dataset)
        if rows is not None and row_bytes is not None:
            return rows * row_bytes
        files = self._dataset.source_files
        if files:
            return sum(os.path.getsize(f) for f in files if os.path.exists(f)) or None
        return None

    def split_policy(self, parallelism):
        """Where the shard goes for ``parallelism`` tasks: ``"sources"`` or ``"output (...)"``."""
        return self._dataset.split_for_worker(max(1, parallelism), 0, self._seed)[1]

    def num_tasks(self, parallelism):
        """The read tasks for Ray's ``parallelism``: the one ``read`` was given, else Ray's
        capped as ``read`` describes."""
        if self._parallelism is not None:
            return self._parallelism
        if self.split_policy(parallelism) != "sources":
            return 1
        units = self._dataset.split_units
        cpus = int(ray.cluster_resources().get("CPU", 1)) if ray.is_initialized() else 1
        return max(1, min(parallelism, units or parallelism, TASKS_PER_CPU * max(1, cpus)))

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        n = self.num_tasks(max(1, parallelism))
        total = self.estimate_inmemory_data_size()
        tasks = []
        for index in range(n):
            part, _ = self._dataset.split_for_worker(n, index, self._seed)
            meta = BlockMetadata(
                num_rows=part.cardinality,
                size_bytes=None if total is None else int(total // n),
                input_files=None,
                exec_stats=None,
            )
            read = _ReadPart(part.serialize(), self._block_bytes, self._options)
            tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
        return tasks


class _ReadPart:
    """One read task: a part (as JSON) streamed as Arrow tables."""

    def __init__(self, part, block_bytes, options):
        self.part, self.block_bytes, self.options = part, block_bytes, options

    def __call__(self):
        # A plan travels without its options: the part's order must hold (Ray replays a
        # failed task), whatever the other options say.
        options = flumen.Options(**{**self.options, "deterministic": True})
        part = flumen.Dataset.deserialize(self.part).with_options(options)
        reader = pa.RecordBatchReader.from_stream(part.arrow_stream(iteration=0))
        yield from _blocks((_with_tensor_columns(batch) for batch in reader), self.block_bytes)


class MapBatches:
    """A flumen plan fragment as a ``map_batches`` stage of a Ray Data pipeline::

        ds = ray.data.read_binary_files(paths).map_batches(
            flumen.ray.MapBatches(lambda d: d.map({"image": flumen.resize(
                flumen.decode_jpeg(flumen.col("bytes")), (224, 224))}, keep=False)),
            batch_format="pyarrow", batch_size=256)

    ``fragment`` takes a ``flumen.Dataset`` of the batch's rows and returns the dataset to
    run (maps, filters, parses, decodes; an operator that spans batches, like ``shuffle``
    or ``batch``, sees one batch at a time). Each call runs the compiled, parallel fragment
    over the pyarrow batch and returns a pyarrow table.

    Random functions draw from (their seed, the element's position in the batch, and the
    call number of this instance): each batch gets fresh draws; which draws an element gets
    depends on how Ray routes batches to this instance, so it is not reproducible across
    runs. For reproducible augmentation, run the whole pipeline with ``read``.
    """

    def __init__(self, fragment, options=None):
        self._fragment = fragment
        self._options = options
        self._calls = 0

    def __call__(self, batch):
        table = batch if isinstance(batch, pa.Table) else pa.table(batch)
        ds = flumen.Dataset.from_arrow(table)
        if self._options is not None:
            ds = ds.with_options(self._options)
        out = self._fragment(ds)
        if not isinstance(out, flumen.Dataset):
            raise TypeError(f"the fragment returned {type(out).__name__}, expected a flumen.Dataset")
        self._calls += 1
        reader = pa.RecordBatchReader.from_stream(out.arrow_stream(iteration=self._calls))
        return reader.read_all()


def train_iterator(dataset, *, epoch=0, seed=0, checkpoint=None, rank=None, world_size=None):
    """This Ray Train worker's part of ``dataset`` for ``epoch``: a ``TrainIterator``.

    Each rank runs ``dataset.split_for_worker(world_size, rank, seed)``: every element is
    delivered to exactly one rank per epoch; each rank's order is fixed by ``seed`` and
    ``epoch`` (reshuffled each epoch where the pipeline reshuffles). ``seed`` must be the
    same on every rank.

    Args:
        rank, world_size: the position; by default ``ray.train.get_context()``'s.
        checkpoint: resume from a state: a ``ray.train.Checkpoint`` (or a directory) that
            ``TrainIterator.save_to`` wrote into, or a dict from ``TrainIterator.state``.
    """
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is None:
        import ray.train

        context = ray.train.get_context()
        rank, world_size = context.get_world_rank(), context.get_world_size()
    return TrainIterator(dataset, rank=rank, world_size=world_size, epoch=epoch, seed=seed, checkpoint=checkpoint)


class TrainIterator:
    """One rank's iterator (``train_iterator``): dicts of NumPy arrays, as ``Dataset.iter``.

    ``state()`` is the position as a small dict of bytes and numbers; ``save_to(directory)``
    writes it to a file named after the rank, so the ranks' files sit side by side in one
    ``ray.train.Checkpoint``.
    """

    def __init__(self, dataset, *, rank, world_size, epoch=0, seed=0, checkpoint=None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.rank, self.world_size, self.epoch, self.seed = rank, world_size, epoch, seed
        part, self.policy = dataset.split_for_worker(world_size, rank, seed)
        state = _load_state(checkpoint, rank, world_size) if checkpoint is not None else None
        if state is not None:
            if (state["world_size"], state["seed"]) != (world_size, seed):
                raise ValueError(
                    f"the state was saved with world size {state['world_size']} and seed {state['seed']}; "
                    f"this iterator has {world_size} and {seed}"
                )
            self.epoch = state["epoch"]
            self._iterator = part.iter(checkpoint=state["checkpoint"])
        else:
            self._iterator = part.iter(iteration=epoch)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._iterator)

    def state(self):
        """The position: ``{"checkpoint": bytes, "rank", "world_size", "epoch", "seed"}``."""
        return {
            "checkpoint": self._iterator.save(),
            "rank": self.rank,
            "world_size": self.world_size,
            "epoch": self.epoch,
            "seed": self.seed,
        }

    def save_to(self, directory):
        """Writes ``state()`` into ``directory`` as ``flumen-rank-<rank>.state``."""
        _write_state(os.path.join(directory, _state_name(self.rank)), self.state())


def _state_name(rank):
    return f"flumen-rank-{rank}.state"


def _write_state(path, state):
    header = f"{state['rank']} {state['world_size']} {state['epoch']} {state['seed']}\n".encode()
    with open(path, "wb") as f:
        f.write(header + state["checkpoint"])


def _load_state(checkpoint, rank, world_size):
    if isinstance(checkpoint, dict):
        return checkpoint
    if hasattr(checkpoint, "as_directory"):  # a ray.train.Checkpoint
        with checkpoint.as_directory() as d:
            return _load_state(d, rank, world_size)
    path = os.path.join(checkpoint, _state_name(rank))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no flumen state for rank {rank} in this checkpoint")
    with open(path, "rb") as f:
        data = f.read()
    header, _, body = data.partition(b"\n")
    saved_rank, saved_world, epoch, seed = (int(x) for x in header.split())
    return {"checkpoint": body, "rank": saved_rank, "world_size": saved_world, "epoch": epoch, "seed": seed}


def _fixed_row_bytes(dataset):
    """Bytes per element when every field has a fixed size, else ``None``."""
    total = 0
    for _, dtype, shape in dataset.element_spec:
        if any(d is None for d in shape):
            return None
        try:
            width = np.dtype(dtype).itemsize
        except TypeError:
            return None
        total += width * int(np.prod(shape, dtype=np.int64))
    return total


def _blocks(batches, block_bytes):
    """Tables cut from ``batches`` every ``block_bytes`` bytes of rows: where the cuts fall
    depends on the rows alone, not on how they arrive in batches."""
    pending, pending_bytes = [], 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        cum = np.cumsum(_row_bytes(batch))
        start = 0
        while start < batch.num_rows:
            base = int(cum[start - 1]) if start else 0
            end = int(np.searchsorted(cum, base + block_bytes - pending_bytes))
            if end >= batch.num_rows:
                pending.append(batch.slice(start))
                pending_bytes += int(cum[-1]) - base
                break
            pending.append(batch.slice(start, end + 1 - start))
            yield pa.Table.from_batches(pending)
            pending, pending_bytes, start = [], 0, end + 1
    if pending:
        yield pa.Table.from_batches(pending)


def _with_tensor_columns(batch):
    """``batch`` with its tensor fields (nested fixed-size lists of numbers, as flumen exports
    them) as Arrow's fixed-shape tensors, over the same buffers: Ray hands those to NumPy as
    ``[rows, *shape]`` arrays rather than as arrays of objects."""
    columns, changed = [], False
    for column in batch.columns:
        shape, values = [], column
        while pa.types.is_fixed_size_list(values.type) and values.null_count == 0:
            shape.append(values.type.list_size)
            values = values.flatten()
        numbers = pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
        if shape and numbers and values.null_count == 0:
            if values.offset:
                # pyarrow's tensor-to-NumPy conversion ignores the values' offset (a slice's):
                # rebase them on the same memory.
                width = values.type.bit_width // 8
                data = values.buffers()[1].slice(values.offset * width, len(values) * width)
                values = pa.Array.from_buffers(values.type, len(values), [None, data])
            storage = pa.FixedSizeListArray.from_arrays(values, int(np.prod(shape)))
            column = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(values.type, shape), storage)
            changed = True
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names) if changed else batch


def _row_bytes(batch):
    sizes = np.zeros(batch.num_rows, np.int64)
    for column in batch.columns:
        sizes += _value_bytes(column)
    return np.maximum(sizes, 1)


def _fixed_width(t):
    """The bytes of every value of type ``t`` when they are all alike (numbers, booleans,
    fixed-size lists of those), else ``None``."""
    if isinstance(t, pa.BaseExtensionType):
        return _fixed_width(t.storage_type)
    if pa.types.is_fixed_size_list(t):
        child = _fixed_width(t.value_type)
        return None if child is None else child * t.list_size
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
        return max(1, t.bit_width // 8)
    return None


def _value_bytes(array):
    """The bytes of each value of ``array`` (nested lists summed; validity ignored)."""
    t, n = array.type, len(array)
    width = _fixed_width(t)
    if width is not None:
        return np.full(n, width, np.int64)
    if isinstance(t, pa.BaseExtensionType):
        return _value_bytes(array.storage)
    if pa.types.is_fixed_size_list(t):
        flat = array.flatten() if array.null_count == 0 else array.values.slice(array.offset * t.list_size, n * t.list_size)
        return _value_bytes(flat).reshape(n, t.list_size).sum(axis=1) if n else np.zeros(0, np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = np.asarray(array.offsets, np.int64)
        cum = np.concatenate([[0], np.cumsum(_value_bytes(array.values))])
        return cum[offsets[1:]] - cum[offsets[:-1]]
    if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        large = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        offsets = np.frombuffer(array.buffers()[1], np.int64 if large else np.int32)
        return np.diff(offsets[array.offset:array.offset + n + 1].astype(np.int64))
    if pa.types.is_struct(t):
        total = np.zeros(n, np.int64)
        for i in range(t.num_fields):
            total += _value_bytes(array.field(i))
        return total
    return np.full(n, 8, np.int64)


_BINARY = {"add": "__add__", "sub": "__sub__", "mul": "__mul__", "gt": "__gt__", "lt": "__lt__",
           "ge": "__ge__", "le": "__le__", "eq": "__eq__", "ne": "__ne__", "and": "__and__", "or": "__or__"}


def _flumen_expr(expr):
    """A Ray Data expression as a flumen one, or ``None`` where flumen has no equivalent
    (division and modulo, whose integer semantics differ, null tests, membership, UDFs)."""
    from ray.data.expressions import BinaryExpr, ColumnExpr, LiteralExpr, UnaryExpr

    if isinstance(expr, ColumnExpr):
        return flumen.col(expr.name)
    if isinstance(expr, LiteralExpr):
        value = expr.value
        if isinstance(value, np.generic):
            value = value.item()
        return flumen.lit(value) if isinstance(value, (bool, int, float, str)) else None
    if isinstance(expr, BinaryExpr):
        method = _BINARY.get(expr.op.value)
        left, right = _flumen_expr(expr.left), _flumen_expr(expr.right)
        if method is None or left is None or right is None:
            return None
        return getattr(left, method)(right)
    if isinstance(expr, UnaryExpr) and expr.op.value == "not":
        operand = _flumen_expr(expr.operand)
        return None if operand is None else ~operand
    return None

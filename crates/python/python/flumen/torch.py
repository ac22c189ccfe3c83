"""flumen pipelines as PyTorch datasets.

``IterableDataset(ds)`` wraps a ``flumen.Dataset`` for ``torch.utils.data.DataLoader`` (and
torchdata's ``StatefulDataLoader``). Each copy iterates its own shard of ``ds``: with
``world_size`` distributed ranks and ``num_workers`` loader workers there are
``world_size * num_workers`` shards, and copy ``(rank, worker)`` takes shard
``rank * num_workers + worker`` (tf.data's ``shard``: element ``k`` goes to shard
``k % n``), so every element is delivered exactly once per epoch across all of them.

flumen already runs the pipeline on its own threads, outside the GIL, so
``DataLoader(IterableDataset(ds), batch_size=None, num_workers=0)`` is the usual choice:
batch in flumen and let the loader pass batches through. Worker processes add a copy of
every batch (PyTorch pickles what a worker returns through shared memory) and one more
pipeline per process; they pay off only where the pipeline holds Python functions that
the GIL serializes.

``state_dict()`` / ``load_state_dict()`` save and restore the position (a flumen
checkpoint as bytes), as PyTorch's stateful objects do.
"""

import torch
import torch.utils.data

__all__ = ["IterableDataset"]


class IterableDataset(torch.utils.data.IterableDataset):
    """A ``flumen.Dataset`` as a ``torch.utils.data.IterableDataset`` of dicts of tensors.

    Args:
        dataset: the pipeline; batch it in flumen and give the loader ``batch_size=None``.
        device: where tensors go (``Dataset.iter_torch``'s ``device``); ``None`` keeps
            them on the CPU, without a copy.
        shard: split the elements between distributed ranks and loader workers (on by
            default). Off, every copy iterates all of ``dataset``.
        rank, world_size: the distributed position; by default ``torch.distributed``'s
            when it is initialized, else a single process.
    """

    def __init__(self, dataset, *, device=None, shard=True, rank=None, world_size=None):
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self._dataset = dataset
        self._device = device
        self._shard = shard
        self._rank = rank
        self._world_size = world_size
        self._iterator = None
        self._resume = None

    def shard_of_this_copy(self):
        """``(num_shards, index)``: which shard the calling process (and loader worker)
        iterates."""
        rank, world = self._rank, self._world_size
        if rank is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world = dist.get_rank(), dist.get_world_size()
            else:
                rank, world = 0, 1
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        if not self._shard:
            return 1, 0
        return world * workers, rank * workers + worker

    def __iter__(self):
        shards, index = self.shard_of_this_copy()
        resume, self._resume = self._resume, None
        if resume is not None and resume["shard"] != [shards, index]:
            raise ValueError(
                f"the state was saved by shard {resume['shard'][1]} of {resume['shard'][0]}, "
                f"and this copy iterates shard {index} of {shards}"
            )
        ds = self._dataset.shard(shards, index) if shards > 1 else self._dataset
        checkpoint = resume["checkpoint"] if resume is not None else None
        self._iterator = ds.iter_torch(device=self._device, checkpoint=checkpoint)
        self._shard_index = [shards, index]
        return self._iterator

    def state_dict(self):
        """The position of the iteration in progress, to give ``load_state_dict`` later:
        ``{"checkpoint": bytes, "shard": [num_shards, index]}``. Before any iteration it is
        the state last loaded (or an empty dict)."""
        if self._iterator is None:
            return dict(self._resume) if self._resume is not None else {}
        return {"checkpoint": self._iterator.save(), "shard": list(self._shard_index)}

    def load_state_dict(self, state):
        """Makes the next ``iter()`` continue from ``state`` (from ``state_dict``), which
        must come from the same pipeline and shard; an empty dict starts afresh."""
        if not state:
            self._resume = None
            return
        if set(state) != {"checkpoint", "shard"}:
            raise ValueError(f"not a flumen state: keys {sorted(state)}")
        self._resume = {"checkpoint": bytes(state["checkpoint"]), "shard": list(state["shard"])}
        self._iterator = None

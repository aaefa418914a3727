"""What a rank function sees: ``fn(ctx, *args, **kwargs)``."""

from __future__ import annotations

from typing import Any

import torch


class RankContext:
    """The rank a function runs on, and the means to talk to the others.

    Attributes:
        rank, world_size: this process's place in the pool's process group.
        device: the ``torch.device`` this rank uses (``cuda:r % device_count``
            on GPU ranks, ``cpu`` otherwise).
        backend: the process group backend name ("gloo", "nccl").
        group: the pool's process group (the default group of the process).
        seed: the example's seed, the same on every rank; torch, random and
            numpy were seeded with it just before ``fn`` was called.
        example: a counter of the examples this pool has run; with ``store``
            it gives each example a private key space.
        tmpdir: a directory private to the pool, shared by its ranks.
    """

    __slots__ = (
        "rank",
        "world_size",
        "device",
        "backend",
        "group",
        "seed",
        "example",
        "tmpdir",
        "_base_store",
        "_recycle_reasons",
    )

    def __init__(
        self, rank: int, world_size: int, device: torch.device, backend: str, group: Any, base_store: Any, tmpdir: str
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.backend = backend
        self.group = group
        self.tmpdir = tmpdir
        self.seed = 0
        self.example = 0
        self._base_store = base_store
        self._recycle_reasons: list[str] = []

    @property
    def store(self) -> Any:
        """A c10d Store shared by the ranks, with keys private to this example."""
        import torch.distributed as dist

        return dist.PrefixStore(f"fuzzdist/example/{self.example}/", self._base_store)

    def request_recycle(self, reason: str) -> None:
        """Ask for fresh rank processes after this example.

        For state an example changes that can't be undone in place (a CUDA
        allocator setting read once at start-up, a leaked thread...).
        """
        self._recycle_reasons.append(reason)

    def __repr__(self) -> str:
        return f"RankContext(rank={self.rank}, world_size={self.world_size}, device={self.device})"

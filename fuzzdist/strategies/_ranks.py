"""World sizes, source ranks and rank subsets."""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzdist.errors import InvalidStrategyArgument
from fuzzdist.strategies._arguments import check_int


def world_sizes(max_size: int = 4, min_size: int = 1) -> st.SearchStrategy[int]:
    """World sizes (number of ranks) from ``min_size`` to ``max_size``.

    Shrinks to ``min_size``, which defaults to **1**: a single-rank world is a
    real edge case (collectives take their world_size == 1 shortcuts, DDP
    skips its reductions), and a failure that shrinks to 1 says at once that no
    communication is needed to reproduce it. Pass ``min_size=2`` for tests
    that need a peer.
    """
    check_int("min_size", min_size, 1)
    check_int("max_size", max_size, min_size)
    return st.integers(min_size, max_size)


def source_ranks(world_size: int) -> st.SearchStrategy[int]:
    """A rank in ``range(world_size)``, e.g. the source of a broadcast or the
    destination of a reduce. Shrinks to 0."""
    check_int("world_size", world_size, 1)
    return st.integers(0, world_size - 1)


def rank_subsets(world_size: int, min_size: int = 1, max_size: int | None = None) -> st.SearchStrategy[tuple[int, ...]]:
    """Sorted tuples of distinct ranks from ``range(world_size)``, with
    ``min_size`` to ``max_size`` (default ``world_size``) members: the ranks
    of a subgroup, the senders of a send/recv pattern.

    Shrinks to ``(0,)`` (``tuple(range(min_size))`` in general).
    """
    check_int("world_size", world_size, 1)
    check_int("min_size", min_size, 0)
    if max_size is None:
        max_size = world_size
    check_int("max_size", max_size, min_size)
    if min_size > world_size:
        raise InvalidStrategyArgument(f"min_size={min_size} exceeds world_size={world_size}")
    max_size = min(max_size, world_size)
    return st.lists(st.integers(0, world_size - 1), min_size=min_size, max_size=max_size, unique=True).map(
        lambda ranks: tuple(sorted(ranks))
    )


def mesh_shapes(world_size: int) -> list[tuple[int, ...]]:
    """Every 1-D and 2-D device-mesh shape of ``world_size`` ranks, in shrink order: ``(W,)`` first, then
    every 2-D factorisation, those with a size-1 dim last (FSDP2's meshes: FSDP, then HSDP's
    ``(replicate, shard)``)."""
    two_d = [(a, world_size // a) for a in range(1, world_size + 1) if world_size % a == 0]
    return [(world_size,)] + sorted(two_d, key=lambda s: (min(s) == 1, s))

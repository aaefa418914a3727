"""Every property can fail: with a planted bug, fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import torch
from helpers import planted
from helpers.minimal import minimal_failure

from fuzzdist import strategies as fst
from fuzzdist.properties import broadcast


def _broadcast_failure(pool, planted_broadcast):
    """The broadcast property, with ``planted_broadcast`` in place of dist.broadcast; the minimal failure."""
    return minimal_failure(
        partial(broadcast.check, pool, broadcast=planted_broadcast),
        spec=broadcast.SPECS,
        src=fst.source_ranks(pool.world_size),
        seed=broadcast.SEEDS,
    )


def test_broadcast_property_catches_corruption_and_shrinks(rank_pool):
    f = _broadcast_failure(rank_pool, planted.broadcast_corrupting_large)
    assert f.spec.shape == (3,) and f.spec.dtype == torch.float32  # the smallest corrupted input
    assert f.src == 0 and f.seed == 0
    assert f.results[f.src] is None and "1 of 3 elements differ" in str(f.results[1 - f.src])


def test_broadcast_property_catches_wrong_source(rank_pool):
    f = _broadcast_failure(rank_pool, planted.broadcast_from_rank_0)
    assert f.src == 1  # only a non-zero source shows the bug
    assert f.spec.shape == (1,) and f.spec.dtype == torch.float32
    # rank 0 kept its own zeros; the source's tensor was overwritten with them
    assert f.results[0] is not None and f.results[1] is not None


def test_broadcast_property_catches_a_dropped_dtype(rank_pool):
    f = _broadcast_failure(rank_pool, planted.broadcast_dropping_doubles)
    assert f.spec.dtype == torch.float64 and f.spec.shape == (1,)

"""The DTensor round-trip property can fail: with a planted bug in full_tensor, redistribute or
distribute_tensor, fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_collectives as planted
from helpers.minimal import minimal_failure

from fuzzdist.properties import dtensor

# The shrunk examples asserted below are those of 2 ranks (over 2 ranks, for instance, 3 elements
# is the smallest uneven split whose last shard is not empty).
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk_failure(pool, **impl):
    """The round-trip property with ``impl`` swapped in; the minimal failure as (case, per-rank problems)."""
    f = minimal_failure(partial(dtensor.check, pool, **impl), case=dtensor.roundtrips(pool.world_size))
    return f.case, f.results


def _sharded_dims(case):
    """The tensor dims some stage of ``case`` shards."""
    stages = (case.placements,) + case.redistributions
    return {int(name[1:]) % case.spec.ndim for stage in stages for name in stage if name != "R"}


def test_catches_full_tensor_dropping_an_uneven_shard(rank_pool):
    case, results = _shrunk_failure(rank_pool, full_tensor=planted.full_tensor_dropping_last_uneven_shard)
    # the smallest uneven split whose last shard is not empty: 3 elements over 2 ranks, on the 1-D
    # mesh; the shrinker may leave size-1 dims around it, e.g. (1, 3)
    assert rank_pool.world_size == 2 and case.mesh_shape == (2,)
    assert case.spec.numel == 3 and case.spec.dtype == torch.float32
    (dim,) = _sharded_dims(case)
    assert case.spec.shape[dim] == 3
    dropped = tuple(2 if d == dim else s for d, s in enumerate(case.spec.shape))
    for problems in results:  # every rank: full_tensor() lost the last rank's element
        assert len(problems) == 1
        assert str(problems[0]).endswith(
            f"full_tensor(): got shape {dropped} torch.float32, expected {case.spec.shape} torch.float32"
        )


def test_catches_redistribute_keeping_the_wrong_chunk(rank_pool):
    case, results = _shrunk_failure(rank_pool, redistribute=planted.redistribute_taking_the_next_chunk)
    w = rank_pool.world_size
    # one element per rank, replicated, then redistributed once to Shard of the dim that holds them
    assert case.spec.numel == w and case.spec.dtype == torch.float32 and case.mesh_shape == (w,)
    assert case.placements == ("R",) and len(case.redistributions) == 1
    (dim,) = _sharded_dims(case)
    assert case.spec.shape[dim] == w
    target = case.redistributions[0]
    for rank, problems in enumerate(results):
        stage = f"redistribute #1 to {target}"
        assert str(problems[0]).startswith(f"{stage}: local shard at mesh coordinate ({rank},): 1 of 1 elements differ")
        assert str(problems[1]).startswith(f"{stage}: full_tensor(): {w} of {w} elements differ")


@pytest.mark.skipif(not dtensor.HAS_SRC_DATA_RANK, reason="distribute_tensor has no src_data_rank in this torch")
def test_catches_distribute_tensor_ignoring_src_data_rank(rank_pool):
    case, results = _shrunk_failure(rank_pool, distribute=planted.distribute_ignoring_src_data_rank)
    # only a non-zero source shows it: rank 0's decoy was distributed instead of rank 1's data
    assert case.src_data_rank == 1
    assert case.spec.numel == 1 and case.spec.dtype == torch.float32
    assert case.mesh_shape == (rank_pool.world_size,)
    assert case.placements == ("R",)
    for rank, problems in enumerate(results):
        assert str(problems[0]).startswith(f"distribute_tensor to ('R',): local shard at mesh coordinate ({rank},): ")
        assert any("full_tensor(): 1 of 1 elements differ" in str(p) for p in problems)

"""The ShardedTensor property can fail: with a planted gather that ignores the placement order,
fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_sharded_tensor as planted
from helpers.minimal import minimal_failure

try:
    from fuzzdist.properties import sharded_tensor
except ImportError as exc:  # torch without ShardedTensor
    pytest.skip(str(exc), allow_module_level=True)

from fuzzdist import strategies as fst

# The shrunk example asserted below is that of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def test_catches_a_gather_ignoring_the_placement_order(rank_pool):
    f = minimal_failure(
        partial(sharded_tensor.check, rank_pool, gather=planted.gather_in_rank_order),
        case=sharded_tensor.shard_cases(rank_pool.world_size),
    )
    case = f.case
    # Only placements out of rank order show it, and only when both ranks hold a non-empty piece
    # (with 1 element, torch.chunk gives one piece and the second placement's shard is empty): over
    # 2 ranks, placements (1, 0) and a (2,) float32 tensor, sharded on dim 0.  Its two random values
    # differ, so the gathered tensor comes back swapped.
    assert case.placements == (1, 0), case
    assert case.spec == fst.TensorSpec((2,), torch.float32) and case.seed == 0, case
    assert case.dim == 0 and case.src == 0 and case.dst == 0 and case.load_placements is None, case
    assert f.results[1] is None  # only the destination sees the gathered tensor
    (problem,) = f.results[0]
    assert (problem.what, problem.count, problem.size, problem.index) == ("gather to rank 0", 2, 2, 0), problem
    assert str(problem).startswith("gather to rank 0: 2 of 2 elements differ; first at flat index 0"), problem

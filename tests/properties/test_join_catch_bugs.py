"""The uneven-inputs property can fail: with a planted ``DistributedDataParallel`` subclass passed as
``ddp_class``, fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_join
from helpers.minimal import minimal_failure

from fuzzdist.properties import join

# The shrunk examples below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, ddp_class):
    return minimal_failure(
        partial(join.check, pool, ddp_class=ddp_class),
        case=join.join_cases(pool.world_size),
        seed=join.SEEDS,
        dtype=join.DTYPES,
    )


def test_join_catches_a_divisor_ignoring_divide_by_initial_world_size(rank_pool):
    f = _shrunk(rank_pool, planted_join.IgnoresDivideSetting)
    # Needs divide_by_initial_world_size=False (the setting the planted hook ignores) and a step where
    # a rank has joined, so that the active ranks (1) are fewer than the initial world size (2):
    # uneven counts, the smallest being (0, 1) (lexicographically below (1, 0)).  throw_on_early_termination
    # must stay off (with it every rank raises before such a step), as it is in the minimum anyway.
    # Everything else is the trivial case: one Linear(1, 1), batches of 1, DDP alone, plain SGD.
    assert f.case == join.JoinCase(counts=(0, 1), divide_by_initial_world_size=False), f.case
    assert f.dtype == torch.float32 and f.seed == 0
    # Rank 1 trains alone at step 0: its gradient is its own, not half of it.
    assert f.results is not None and f.results[0] == [], f.results
    assert str(f.results[1][0]).startswith("step 0: grad 0.weight: 1 of 1 elements differ"), f.results


def test_join_catches_a_missing_final_model_broadcast(rank_pool):
    f = _shrunk(rank_pool, planted_join.SkipsFinalSync)
    # Needs a rank that leaves the join context with fewer steps than the last joiner: uneven counts,
    # the smallest being (0, 1), with the defaults otherwise (divide_by_initial_world_size=True).
    # Rank 0 never trains and keeps the initial model, rank 1 takes one step.
    assert f.case == join.JoinCase(counts=(0, 1)), f.case
    assert f.dtype == torch.float32 and f.seed == 0
    assert "the final parameters are not bitwise equal on every rank" in str(f.error), f.error

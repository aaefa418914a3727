"""The ZeRO parity property can fail: with a faulty ``ZeroRedundancyOptimizer`` subclass passed as
``optimizer_class``, fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_zero
from helpers.minimal import minimal_failure

from fuzzdist.properties import zero

# The shrunk examples below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, optimizer_class):
    f = minimal_failure(
        partial(zero.check, pool, optimizer_class=optimizer_class),
        case=zero.zero_cases(pool.world_size),
        seed=zero.SEEDS,
        dtype=zero.DTYPES,
    )
    return f.case, f.seed, f.dtype, f.error


def test_zero_parity_catches_state_lost_on_load(rank_pool):
    case, seed, dtype, error = _shrunk(rank_pool, planted_zero.LosesStateOnLoad)
    # Needs a reload followed by a step (2 steps, reload after step 0, to rank 0: the smallest
    # choices), and an optimizer that keeps state: plain SGD keeps none (no momentum buffer at
    # momentum 0), so the smallest is SGD with the first non-zero momentum drawn, 0.5; sgd comes
    # before adam in the draw, so SGD with momentum is smaller than Adam.  Everything else is the
    # trivial case: one Linear(1, 1) with bias, batch 1, one group, float32, seed 0.
    assert case == zero.ZeroCase(steps=2, optimizer=zero.OptimizerSpec(momentum=0.5), reload=(0, 0)), case
    assert dtype == torch.float32 and seed == 0
    # The step after the reload restarts the momentum from the gradient alone.
    assert "after step 1: param 0." in str(error), error


def test_zero_parity_catches_an_added_group_never_stepped(rank_pool):
    case, seed, dtype, error = _shrunk(rank_pool, planted_zero.NeverStepsAddedGroups)
    # Needs a group added with add_param_group: two groups, hence two parameters (the trivial
    # Linear(1, 1) with bias has them), the weight given to the constructor and the bias added
    # before step 0 (groups numbered by first appearance: (0, 1)).  One plain SGD step shows it.
    assert case == zero.ZeroCase(groups=(0, 1), group_lrs=(None, None)), case
    assert dtype == torch.float32 and seed == 0
    assert "after step 0: param 0.bias" in str(error), error

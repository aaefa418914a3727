"""The functional-collectives property can fail: with a planted all_gather_single (all_gather_tensor on a
torch without it), fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_functional
from helpers.minimal import minimal_failure

from fuzzdist.pool.capabilities.torch_features import missing_functional_collectives

if missing_functional_collectives():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_functional_collectives() or "", allow_module_level=True)

from fuzzdist.properties import functional

pytestmark = pytest.mark.fuzzdist(world_size=2)


def test_catches_all_gather_ignoring_gather_dim(rank_pool):
    op = planted_functional.ALL_GATHER_OP  # all_gather_single, or all_gather_tensor where torch lacks it
    planted = {op: planted_functional.all_gather_single_ignoring_gather_dim}
    f = minimal_failure(
        partial(functional.check, rank_pool, functions=planted), case=functional.functional_cases(rank_pool.world_size)
    )
    case = f.case
    # One call, shrunk to the smallest input the bug shows on: gather dim 1 of a (2, 1) float32
    # tensor (with one row, gathering along dim 0 and reshaping happens to be right).
    (call,) = case.calls
    assert call.op == op and call.dim == 1, case
    assert call.spec.shape == (2, 1) and call.spec.dtype == torch.float32, case
    assert case.completions == ("wait_tensor",), case
    for rank, problems in enumerate(f.results):
        assert (problems[0].call, problems[0].op) == (0, op), (rank, problems)

"""ZeRO parity: ``ZeroRedundancyOptimizer`` under DDP (optimizers, bucket views, parameter groups,
``add_param_group``, consolidate/save/load round trips) trains the model a local optimizer trains on
the ranks' mean gradient, bitwise equal on every rank; on gloo, the DDP-ZeRO overlap hooks refuse
as documented (``fuzzdist.properties.zero``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import zero


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=zero.DTYPES, seed=zero.SEEDS)
def test_zero_matches_local_optimizer(rank_pool, data, dtype, seed):
    """After every step, every rank's parameters equal a local optimizer's stepped with the mean of the
    ranks' gradients; a reloaded optimizer continues the same; all bitwise equal across ranks."""
    case = data.draw(zero.zero_cases(rank_pool.world_size), label="case")
    zero.check(rank_pool, case, seed, dtype)

"""Uneven inputs: DDP alone (``ddp.join()``) and DDP with ``ZeroRedundancyOptimizer`` (``Join([model,
optim])``) over drawn per-rank batch counts, both ``divide_by_initial_world_size`` settings and
``throw_on_early_termination``, train as the documentation implies (``fuzzdist.properties.join``).
Known: ``join-zero-joined-shard-stale``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import join


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=join.DTYPES, seed=join.SEEDS)
def test_join_trains_as_documented(rank_pool, data, dtype, seed):
    """At every step only the ranks with a batch contribute, divided by the initial or the active world
    size; every rank ends with the last joiner's model; with throw_on_early_termination every rank raises
    once one runs out."""
    case = data.draw(join.join_cases(rank_pool.world_size), label="case")
    join.check(rank_pool, case, seed, dtype)

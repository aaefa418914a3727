"""Broadcast: after ``dist.broadcast`` from a drawn source, every rank holds exactly the source's tensor
(``fuzzdist.properties.broadcast``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import broadcast


@pytest.mark.fuzzdist(device=["cpu", "cuda"])
@given(data=st.data(), spec=broadcast.SPECS, seed=broadcast.SEEDS)
def test_broadcast_reaches_every_rank(rank_pool, data, spec, seed):
    """Every rank sees the source rank's values exactly, for any size, dtype and source."""
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    broadcast.check(rank_pool, spec, src, seed)

"""Sharded round trips: a tensor distributed as a DTensor with any Shard/Replicate placements on a
1-D or 2-D device mesh, and redistributed between any placements, keeps its values bitwise: every
rank's local shard is its ``torch.chunk`` piece and ``full_tensor()`` is the original
(``fuzzdist.properties.dtensor``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

try:
    from fuzzdist.properties import dtensor
except ImportError as exc:  # torch without the DTensor API
    pytest.skip(str(exc), allow_module_level=True)


@pytest.mark.fuzzdist(world_size=[2, 4])
@given(data=st.data())
def test_dtensor_round_trip_keeps_values(rank_pool, data):
    """distribute_tensor, then redistribute between drawn placements: at every stage each rank
    holds its torch.chunk shard of the original and full_tensor() is the original, bitwise."""
    case = data.draw(dtensor.roundtrips(rank_pool.world_size), label="case")
    dtensor.check(rank_pool, case)

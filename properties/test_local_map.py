"""``local_map`` and ``register_sharding``: a function run on local shards with drawn input and output
placements equals its global semantics, or is refused as documented (``fuzzdist.properties.local_map``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import local_map


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data())
def test_local_map_matches_global_semantics(rank_pool, data):
    """``local_map`` of a pointwise function or a sum over a DTensor held and wanted with drawn placements,
    and a custom op under ``register_sharding``, give the function of the whole tensor, or ValueError where
    the input needs redistributing and ``redistribute_inputs`` is off."""
    case = data.draw(local_map.local_map_cases(rank_pool.world_size), label="case")
    local_map.check(rank_pool, case)

"""``local_map`` and ``register_sharding``: a function run on local shards with drawn input and output
placements equals its global semantics, or is refused as documented (``fuzzdist.properties.local_map``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import known_bugs
from fuzzdist.properties import local_map


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data())
def test_local_map_matches_global_semantics(rank_pool, data):
    """``local_map`` of a pointwise function or a sum over a DTensor held and wanted with drawn placements,
    and a custom op under ``register_sharding``, give the function of the whole tensor, or ValueError where
    the input needs redistributing and ``redistribute_inputs`` is off."""
    case = data.draw(local_map.local_map_cases(rank_pool.world_size), label="case")
    local_map.check(rank_pool, case)


@pytest.mark.fuzzdist(world_size=2)
def test_uneven_shards_give_the_known_wrong_output_shape(rank_pool):
    """What fuzzdist shrank ``local-map-uneven-shard-output-wrong-shape`` to: ``x * 2`` of a 1-element tensor
    held and wanted as Shard(0) (pieces of 1 and 0 elements).  Reported KNOWN while torch's ``local_map``
    computes a sharded output's shape as if the pieces were even; this fails once torch fixes it."""
    case = local_map.LocalMapCase((1,), "double", "S0", "S0")
    bug = "local-map-uneven-shard-output-wrong-shape"
    if not known_bugs.reproduces(bug, "local_map", {"case": case}, lambda: local_map.check(rank_pool, case)):
        pytest.fail(known_bugs.fixed_message(bug))

"""Checkpoints across world sizes: DCP saved from some ranks of the pool loads into a different number of
ranks, with other placements, every value bitwise; ``dcp_to_torch_save`` and ``torch_save_to_dcp`` keep
every value (``fuzzdist.properties.reshard``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import reshard


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data())
def test_checkpoint_loads_into_another_world_size(rank_pool, data):
    """What the first W ranks save with DCP, the first W' != W ranks load bitwise into their own
    placements (or through a conversion to or from ``torch.save``)."""
    case = data.draw(reshard.reshard_cases(rank_pool.world_size), label="case")
    reshard.check(rank_pool, case)

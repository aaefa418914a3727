"""Subgroups: collectives on new_group and DeviceMesh subgroups over drawn rank subsets, in any order,
match an independent reference and leave the ranks outside untouched (``fuzzdist.properties.subgroups``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import subgroups


@pytest.mark.fuzzdist(world_size=[3, 4])
@given(data=st.data())
def test_subgroup_collectives_match_reference(rank_pool, data):
    """all_reduce, broadcast and all_gather on new_group/DeviceMesh subgroups (singletons, the same ranks
    in another order) give each member the reference's values, in group order; non-members keep theirs."""
    case = data.draw(subgroups.subgroup_cases(rank_pool.world_size), label="case")
    subgroups.check(rank_pool, case)

"""Object collectives: broadcast_object_list, all_gather_object, scatter_object_list and gather_object
hand every rank objects equal to its source's (``fuzzdist.properties.object_collectives``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import object_collectives


@pytest.mark.fuzzdist(world_size=2)
@given(data=st.data())
def test_object_collectives_hand_over_equal_objects(rank_pool, data):
    """Nested objects with big ints, NaNs, large bytes/strings and tensors of every dtype and layout
    arrive equal (tensors bitwise) on every rank that should get them."""
    case = data.draw(object_collectives.object_cases(rank_pool.world_size), label="case")
    object_collectives.check(rank_pool, case)

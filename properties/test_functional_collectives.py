"""Functional collectives (``torch.distributed._functional_collectives``) give the reference's and the
c10d collectives' values, in any order and way of waiting (``fuzzdist.properties.functional``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.pool.capabilities.torch_features import missing_functional_collectives

if missing_functional_collectives():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_functional_collectives() or "", allow_module_level=True)

from fuzzdist.properties import functional


@pytest.mark.fuzzdist(world_size=[2, 3], device=["cpu"])
@given(data=st.data())
def test_functional_collectives_match_c10d(rank_pool, data):
    """all_reduce, all_gather, reduce_scatter, broadcast and all_to_all_single, issued together and
    completed in a drawn order and way, equal the reference and c10d; their inputs stay as they were."""
    case = data.draw(functional.functional_cases(rank_pool.world_size), label="case")
    functional.check(rank_pool, case)

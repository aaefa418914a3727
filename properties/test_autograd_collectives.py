"""Autograd collectives: every ``torch.distributed.nn`` collective's forward values and input
gradients equal a single-process reference computed from all ranks' inputs and upstream gradients
(``fuzzdist.properties.collectives``, whose docstring derives the reference gradients and lists
the known torch bugs it meets: reported KNOWN, see ``properties/test_known_bugs.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip(
    "torch.distributed.nn.functional", reason="torch.distributed.nn is not available in this torch build"
)

from fuzzdist.properties import collectives


@pytest.mark.fuzzdist(world_size=[2, 3])
@pytest.mark.parametrize("name", collectives.COLLECTIVES)
@given(data=st.data())
def test_autograd_collective_matches_reference(rank_pool, name, data):
    """On every rank, the collective's outputs and the gradients of its inputs equal the
    single-process reference built from all ranks' inputs and upstream gradients."""
    allowed = collectives.supported(rank_pool, name)
    case = data.draw(collectives.cases(name, rank_pool.world_size, allowed), label="case")
    collectives.check(rank_pool, name, case)

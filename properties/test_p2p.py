"""Point-to-point: batch_isend_irecv, isend/irecv and send/recv deliver exactly the sender's tensor for
drawn pairs, tags and issue orders; a self-loop delivers or is refused clearly, non-contiguous tensors
are refused clearly (``fuzzdist.properties.p2p``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import p2p


@pytest.mark.fuzzdist(world_size=3)
@given(data=st.data())
def test_p2p_delivers_the_senders_tensor(rank_pool, data):
    """Every receiver gets the sender's values, matched by tag whatever order each rank posts in."""
    case = data.draw(p2p.p2p_cases(rank_pool.world_size), label="case")
    p2p.check(rank_pool, case)

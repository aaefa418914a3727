"""Blocked streams: an event recorded after k ``Work.block_current_stream()`` calls completes only
once every one of those Works has resolved, whatever the order (``fuzzdist.properties.block_stream``)."""

from __future__ import annotations

import pytest
from hypothesis import given

from fuzzdist.properties import block_stream


@pytest.mark.fuzzdist(device="cuda")
@pytest.mark.needs("cuda", "block_current_stream")
@given(order=block_stream.ORDERS)
def test_blocked_stream_waits_for_every_work(rank_pool, order):
    """The stream stays blocked while any Work is unresolved and runs on once all resolve."""
    block_stream.check(rank_pool, order)

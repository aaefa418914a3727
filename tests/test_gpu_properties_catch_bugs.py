"""The GPU properties can fail: planted bugs caught on a real GPU (skipped without one)."""

from __future__ import annotations

import sys
from pathlib import Path

import planted
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzdist import strategies as fst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_block_stream  # noqa: E402


@pytest.mark.fuzzdist(device="cuda", world_size=1)
@pytest.mark.needs("cuda", "block_current_stream")
def test_blocked_stream_property_catches_early_release(rank_pool):
    failing = []

    @settings(max_examples=200, database=None, derandomize=True, deadline=None)
    @given(order=st.integers(1, 6).flatmap(fst.completion_orders))
    def prop(order):
        problems = rank_pool.run(test_block_stream.check_blocked_stream, order,
                                 make_work=planted.early_release_work)
        if problems != [[]]:
            failing.append(order)
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the early-releasing Work was never caught"
    order = failing[-1]
    # smallest exposing schedule: two Works, the early one (0) scheduled after the other
    assert order.n == 2 and order.resolution_order == (1, 0)

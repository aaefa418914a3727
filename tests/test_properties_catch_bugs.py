"""Every property can fail: with a planted bug, fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

import sys
from pathlib import Path

import planted
import pytest
import torch
from hypothesis import Phase, given, settings

from fuzzdist import strategies as fst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_broadcast  # noqa: E402


def _run_broadcast_property(pool, broadcast):
    """The broadcast property, with `broadcast` in place of dist.broadcast; the last failing example."""
    failing: list = []

    @settings(max_examples=300, database=None, derandomize=True, deadline=None,
              phases=[Phase.generate, Phase.shrink],
              report_multiple_bugs=False)  # no explain phase: it re-runs examples
    @given(spec=test_broadcast.SPECS, src=fst.source_ranks(pool.world_size), seed=test_broadcast.SEEDS)
    def prop(spec, src, seed):
        diffs = pool.run(test_broadcast.broadcast_and_check, spec, src, seed, broadcast=broadcast)
        if diffs != [None] * pool.world_size:
            failing.append((spec, src, seed, diffs))
            raise AssertionError(diffs)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the planted bug was never caught"
    return failing[-1]


def test_broadcast_property_catches_corruption_and_shrinks(rank_pool):
    spec, src, seed, diffs = _run_broadcast_property(rank_pool, planted.broadcast_corrupting_large)
    assert spec.shape == (3,) and spec.dtype == torch.float32  # the smallest corrupted input
    assert src == 0 and seed == 0
    assert diffs[src] is None and "1 of 3 elements differ" in diffs[1 - src]


def test_broadcast_property_catches_wrong_source(rank_pool):
    spec, src, seed, diffs = _run_broadcast_property(rank_pool, planted.broadcast_from_rank_0)
    assert src == 1  # only a non-zero source shows the bug
    assert spec.shape == (1,) and spec.dtype == torch.float32
    # rank 0 kept its own zeros; the source's tensor was overwritten with them
    assert diffs[0] is not None and diffs[1] is not None


def test_broadcast_property_catches_a_dropped_dtype(rank_pool):
    spec, src, seed, diffs = _run_broadcast_property(rank_pool, planted.broadcast_dropping_doubles)
    assert spec.dtype == torch.float64 and spec.shape == (1,)

"""The local_map property can fail: with a ``local_map`` that never refuses a mismatched input planted, fuzzdist
catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_local_map
from helpers.minimal import minimal_failure

from fuzzdist.errors import InvalidArgument
from fuzzdist.properties import local_map


@pytest.mark.fuzzdist(world_size=2)
def test_local_map_catches_a_missing_refusal(rank_pool):
    f = minimal_failure(
        partial(local_map.check, rank_pool, local_map_fn=planted_local_map.never_refuses),
        case=local_map.local_map_cases(2),
    )
    # The bug needs an input held otherwise than wanted, without redistribute_inputs; the rest shrinks away:
    # the first function on the smallest even tensor, held replicated and wanted sharded.
    expected = local_map.LocalMapCase((2,), "double", "R", "S0", False, torch.float32, 0)
    assert f.case == expected, f.case
    assert "ran, not refused" in str(f.error), f.error


@pytest.mark.fuzzdist(world_size=2)
def test_local_map_refuses_bad_input_in_one_line(rank_pool):
    with pytest.raises(InvalidArgument, match="multiple of the world size"):
        local_map.check(rank_pool, local_map.LocalMapCase((3,), "double", "S0", "S0"))

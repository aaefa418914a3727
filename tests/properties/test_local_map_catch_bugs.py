"""The local_map property can fail: with a ``local_map`` that never refuses a mismatched input planted, fuzzdist
catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_local_map, planted_register_sharding
from helpers.minimal import minimal_failure

from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind
from fuzzdist.properties import local_map


@pytest.mark.fuzzdist(world_size=2)
def test_local_map_catches_a_missing_refusal(rank_pool):
    f = minimal_failure(
        partial(local_map.check, rank_pool, local_map_fn=planted_local_map.never_refuses),
        case=local_map.local_map_cases(2),
    )
    # The bug needs an input held otherwise than wanted, without redistribute_inputs; the rest shrinks away:
    # the first function on the smallest tensor, held replicated and wanted sharded.
    expected = local_map.LocalMapCase((1,), "double", "R", "S0", False, torch.float32, 0)
    assert f.case == expected, f.case
    assert "ran, not refused" in str(f.error), f.error


def test_local_map_refuses_bad_input_in_one_line():
    with pytest.raises(InvalidArgument, match="'S1': 'R' or 'S<d>' with d < 1"):
        local_map.LocalMapCase((3,), "double", "S1", "S0")


@pytest.mark.fuzzdist(world_size=2)
def test_local_map_catches_a_wrong_sharding_strategy(rank_pool):
    f = minimal_failure(
        partial(local_map.check, rank_pool, sharding=planted_register_sharding.sharded_in_replicated_out),
        case=local_map.local_map_cases(2),
    )
    # The planted strategy is wrong only for a sharded input, which only the custom op (the last function)
    # runs it on; the rest shrinks away, to the smallest tensor DTensor shards: a 1-D tensor of 2 elements held
    # as Shard(0).  One element is not enough: DTensor keeps only the strategies whose input it can shard (a
    # dimension at least the number of shards, `is_tensor_shardable`), so it replicates that input first and
    # the planted strategy's wrong half never runs.  Each rank's output is then its own piece, declared the
    # whole replicated tensor: 1 element where the whole has 2.
    expected = local_map.LocalMapCase((2,), "custom_op", "S0", "R", False, torch.float32, 0)
    assert f.case == expected, f.case
    assert [[p.kind for p in rank] for rank in f.results] == [[Kind.SHAPE], [Kind.SHAPE]], f.results

"""The resharding checkpoint property can fail: with a save that loses the last rank's shards planted, fuzzdist
catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
from helpers import planted_reshard
from helpers.minimal import minimal_failure

from fuzzdist.properties import reshard
from fuzzdist.properties.reshard import model_state


@pytest.mark.fuzzdist(world_size=3)
def test_reshard_catches_a_save_that_drops_the_last_ranks_shards(rank_pool):
    f = minimal_failure(
        partial(reshard.check, rank_pool, save=planted_reshard.drops_the_last_ranks_shards),
        case=reshard.reshard_cases(3),
    )
    case = f.case
    # The bug needs two saving ranks (one alone is right); the load shrinks to one rank, no conversion...
    assert (case.save_ranks, case.load_ranks, case.conversion) == (2, 1, "none"), case
    # ...and one tensor sharded on the save mesh with a non-empty piece on rank 1: two elements on dim 0.
    (entry,) = case.entries
    assert entry.save_placement == "S0" and tuple(entry.spec.shape) == (2,), case
    assert "loaded other values than 2 ranks saved" in str(f.error), f.error


@pytest.mark.fuzzdist(world_size=3)
def test_model_reshard_catches_a_save_that_drops_the_last_ranks_optimizer_shards(rank_pool):
    f = minimal_failure(
        partial(model_state.check_model, rank_pool, save=planted_reshard.drops_the_last_ranks_optimizer_shards),
        case=model_state.model_reshard_cases(3),
    )
    case = f.case
    # The bug needs two ranks saving FSDP2's sharded optimizer state (DDP's is replicated, rank 0's copy is
    # saved); everything else shrinks away: one rank loads, under DDP, SGD, the first learning rate...
    assert (case.save_ranks, case.load_ranks) == (2, 1), case
    assert case.save == model_state.Sharding("fsdp2") and case.load == model_state.Sharding("ddp"), case
    assert (case.optimizer, case.lr, case.seed) == ("sgd", 0.5, 0), case
    # ...to one layer whose output dim gives rank 1 a piece: 1 -> 2 features (1 -> 1 leaves rank 1 empty).
    assert case.widths == (1, 2), case
    assert "loaded another model or optimizer state than 2 ranks saved" in str(f.error), f.error
    assert "momentum_buffer" in str(f.error), f.error

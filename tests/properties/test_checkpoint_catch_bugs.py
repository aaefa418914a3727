"""The checkpoint properties can fail: with a planted bug in the load or in ``set_state_dict``,
fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_checkpoint as planted
from helpers.minimal import minimal_failure

try:
    from fuzzdist.properties import checkpoint
except ImportError as exc:  # torch without torch.distributed.checkpoint
    pytest.skip(str(exc), allow_module_level=True)

from fuzzdist import strategies as fst
from fuzzdist.problems import Kind, Problem

# The shrunk examples asserted below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, **impl):
    f = minimal_failure(partial(checkpoint.check, pool, **impl), case=checkpoint.checkpoint_cases(pool.world_size))
    return f.case, f.results


def test_catches_a_load_reading_only_the_first_chunk(rank_pool):
    case, results = _shrunk(rank_pool, load=planted.load_reading_only_the_first_chunk)
    # Only a tensor saved in two or more chunks shows it, so a DTensor sharded when saved: on the 1-D
    # mesh of 2 ranks, Shard(0) of 2 elements (with 1 element, rank 1's chunk is empty and chunk 0
    # holds everything).  Loaded Replicated, every rank needs element 1, which only chunk 1 holds.
    ((path, leaf),) = case.leaves()
    assert isinstance(leaf, checkpoint.DTensorLeaf), case
    assert leaf.spec == fst.TensorSpec((2,), torch.float32) and leaf.seed == 0
    assert (leaf.save_mesh, leaf.save_placements) == ((2,), ("S0",))
    assert (leaf.load_mesh, leaf.load_placements) == ((2,), ("R",))
    assert not case.asynchronous and not case.single_process
    for problems in results:  # every rank still holds the decoy at flat index 1
        (problem,) = problems
        assert (problem.what, problem.count, problem.size, problem.index) == (
            f"load: {'.'.join(map(str, path))}",
            1,
            2,
            1,
        ), problems


def test_catches_a_load_into_copies(rank_pool):
    case, results = _shrunk(rank_pool, load=planted.load_into_copies)
    # Every tensor shows it: the state dict gets the values, the tensor the caller allocated keeps its
    # decoy.  So the minimal example is the simplest state dict: one plain (1,) float32 tensor.
    ((path, leaf),) = case.leaves()
    assert leaf == checkpoint.TensorLeaf(fst.TensorSpec((1,), torch.float32), 0), case
    assert not case.asynchronous and not case.single_process
    for problems in results:
        assert len(problems) == 1
        assert "the tensor allocated for the values (the state dict holds them): 1 of 1 elements" in str(problems[0])


def test_catches_set_state_dict_ignoring_the_optimizer(rank_pool):
    f = minimal_failure(
        partial(checkpoint.check_model, rank_pool, set_state=planted.set_state_dict_ignoring_the_optimizer),
        case=checkpoint.model_cases(rank_pool.world_size),
    )
    # Every model shows it: its optimizer keeps the fresh optimizer's learning rate (twice the saved
    # one), a non-tensor value only set_state_dict puts in place.  So it shrinks to the simplest case,
    # one 1->1 layer with SGD at lr 0.5, DDP to DDP.  Under DDP the state tensors get_state_dict hands
    # out are the optimizer's own, which dcp.load fills in place: the learning rate is all that differs.
    assert f.case == checkpoint.ModelCase(), f.case
    for problems in f.results:
        assert problems == [Problem(Kind.MISMATCH, "loaded under ddp: optimizer lr", got=1.0, expected=0.5)], problems
        assert str(problems[0]) == "loaded under ddp: optimizer lr: got 1.0, expected 0.5"

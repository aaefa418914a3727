"""dcp-save-double-shard-empty-piece-fails as torch 2.6.0 shows it to the checkpoint property: recognised only
where a saved DTensor is sharded twice on one dim with an empty piece and every rank raised DCP's
CheckpointException from the save's planning, "Failed to validate global plan".  The property runs its
check inside ``known_failures("checkpoint", ...)``: that failure is tallied as a sighting, any other raised."""

from __future__ import annotations

import os

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import RankError
from fuzzdist.strategies import TensorSpec

checkpoint = pytest.importorskip("fuzzdist.properties.checkpoint")

BUG = "dcp-save-double-shard-empty-piece-fails"
CHECKPOINT_EXCEPTION = "torch.distributed.checkpoint.api.CheckpointException"
# rank 0's traceback as the pool carried it on torch 2.6.0 (properties/test_checkpoint.py, seed 13), frames trimmed
SAVE_TRACEBACK = """Traceback (most recent call last):
  File "fuzzdist/pool/rank/worker.py", line 101, in execute
  File "fuzzdist/properties/checkpoint.py", line 370, in save_and_load
    save(state, path, case.asynchronous)
  File "fuzzdist/properties/checkpoint.py", line 203, in dcp_save
    dcp.save(state_dict, checkpoint_id=checkpoint_id)
  File "torch/distributed/checkpoint/state_dict_saver.py", line 152, in save
    return _save_state_dict(
  File "torch/distributed/checkpoint/state_dict_saver.py", line 317, in _save_state_dict
    central_plan: SavePlan = distW.reduce_scatter("plan", local_step, global_step)
  File "torch/distributed/checkpoint/utils.py", line 191, in reduce_scatter
    raise result
torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0])
Traceback (most recent call last): (RANK 0)
  File "torch/distributed/checkpoint/state_dict_saver.py", line 313, in global_step
    all_local_plans, global_metadata = planner.create_global_plan(all_local_plans)
  File "torch/distributed/checkpoint/default_planner.py", line 125, in create_global_plan
    raise ValueError("Failed to validate global plan")
ValueError: Failed to validate global plan
"""
LOAD_TRACEBACK = SAVE_TRACEBACK.replace("_save_state_dict", "_load_state_dict").replace("save(", "load(")


def case(shape=(2,), save_mesh=(2, 2), save=("S0", "S0"), load_mesh=(4,), load=("R",)):
    """What fuzzdist shrank it to on torch 2.6.0 (4 ranks), or a neighbour of it."""
    leaf = checkpoint.DTensorLeaf(TensorSpec(shape, torch.float32), 0, save_mesh, save, load_mesh, load)
    return checkpoint.CheckpointCase(checkpoint.Node((leaf,), ("a",)))


def failure(traceback=SAVE_TRACEBACK, exc_type=CHECKPOINT_EXCEPTION, ranks=(0, 1, 2, 3), stragglers=()):
    return RankError(
        list(ranks),
        {r: traceback for r in ranks},
        {r: exc_type for r in ranks},
        {r: RuntimeError("CheckpointException ranks:dict_keys([0])") for r in ranks},
        stragglers=list(stragglers),
    )


def recognised(example_case, error):
    bug = known_bugs.recognise("checkpoint", {"case": example_case}, error)
    return bug.id if bug else None


def test_the_shrunk_example_is_recognised():
    assert recognised(case(), failure()) == BUG
    assert known_bugs.registry()[BUG].seen_on == ("2.6",)


@pytest.mark.parametrize(
    "shape, mesh, names",
    [
        ((2, 2), (2, 2), ("S1", "S1")),  # the dim sharded twice need not be dim 0 (seed 15's example)
        ((3, 2), (2, 2), ("S-1", "S-1")),  # nor named with a non-negative index
    ],
)
def test_the_same_layout_on_another_dim_is_recognised(shape, mesh, names):
    assert recognised(case(shape, mesh, names), failure()) == BUG


@pytest.mark.parametrize(
    "shape, mesh, names",
    [
        ((4,), (2, 2), ("S0", "S0")),  # every piece holds one element
        ((3,), (2, 2), ("S0", "S0")),  # rank 3's piece is empty, at offset 3 (the end): torch 2.6.0 saves it
        ((1,), (2, 2), ("S0", "S0")),  # ranks 1-3 empty, all at offset 1 (the end): saved
        ((2, 1), (2, 2), ("S1", "S1")),
        ((2,), (1, 4), ("S0", "S0")),  # ranks 2 and 3 empty at offset 2: saved
        ((2,), (4, 1), ("S0", "S0")),
        ((2,), (4,), ("S0",)),  # sharded once, with empty pieces: saved
        ((2, 2), (2, 2), ("S0", "S1")),  # two dims, each sharded once
        ((2,), (2, 2), ("R", "S0")),
    ],
)
def test_the_same_failure_on_another_layout_stays_a_failure(shape, mesh, names):
    assert recognised(case(shape, mesh, names), failure()) is None


def test_another_failure_on_the_same_layout_stays_a_failure():
    assert recognised(case(), failure(LOAD_TRACEBACK)) is None  # in the load, not the save
    assert recognised(case(), failure(SAVE_TRACEBACK.replace("Failed to validate global plan", "disk full"))) is None
    assert recognised(case(), failure(exc_type="builtins.ValueError")) is None
    assert recognised(case(), failure(ranks=(0, 1), stragglers=(2, 3))) is None  # DCP lets no rank wait
    assert recognised(case(), RuntimeError("Failed to validate global plan")) is None  # not the ranks' failure
    assert known_bugs.recognise("checkpoint", {}, failure()) is None  # no case


class RaisingPool:
    """A pool of 4 ranks whose run raises ``error`` (as if the ranks had), after checking the example's folder."""

    world_size = 4

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.paths: list[str] = []

    def run(self, fn, example_case, path, **kwargs):
        self.paths.append(path)
        assert os.path.isdir(path)
        raise self.error


def test_the_property_tallies_the_known_bug():
    pool = RaisingPool(failure())
    with known_bugs.collecting() as tally:
        checkpoint.check(pool, case())
    assert list(tally.sightings) == [BUG] and tally.total == 1
    assert not os.path.exists(pool.paths[0])  # the example's folder is removed all the same


def test_the_property_raises_other_failures():
    with known_bugs.collecting() as tally:
        with pytest.raises(RankError):
            checkpoint.check(RaisingPool(failure()), case((4,)))  # no empty piece: not the bug
        with pytest.raises(RankError):
            checkpoint.check(RaisingPool(failure(LOAD_TRACEBACK)), case())  # in the load
    assert not tally


def test_outside_a_tally_the_property_raises_the_known_bug_with_a_note():
    with known_bugs.not_collecting(), pytest.raises(RankError) as raised:  # the plugin's own tally set aside
        checkpoint.check(RaisingPool(failure()), case())
    assert any(BUG in note for note in getattr(raised.value, "__notes__", []))

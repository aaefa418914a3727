"""Known bugs torch 2.6.0 shows in the sharded-tensor and subgroups properties: a gather skipped on a rank
with an empty shard, and a rank frozen dropping a process group.  Their predicates recognise exactly the
symptom the properties report, and nothing next to it."""

from __future__ import annotations

from dataclasses import replace

import torch

from fuzzdist import known_bugs
from fuzzdist.errors import RankTimeout
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties import PropertyFailure, sharded_tensor, subgroups
from fuzzdist.strategies import TensorSpec

SKIP_ID = "sharded-tensor-gather-empty-shard-skips-collective"
DROP_ID = "gloo-process-group-drop-deadlocks"
CASE = sharded_tensor.ShardCase(TensorSpec((3,), torch.float32), 0, 0, (0, 1, 2, 3))
SKIPPED = Problem(Kind.HANG, "gather to rank 0", rank=3, subject=((0,),), symptom=Symptom.GATHER_SKIPPED)
ROUNDED = Problem(
    Kind.MISMATCH,
    "gather to rank 0",
    index=0,
    got=1.0,
    expected=1.1,
    count=3,
    size=3,
    symptom=Symptom.FLOAT32_ROUND_TRIP,
)


def _sharded(results: list[list[Problem] | None]) -> str | None:
    failure = PropertyFailure(f"ranks saw other values: {results}", results)
    bug = known_bugs.recognise("sharded_tensor", {"case": CASE}, failure)
    return bug.id if bug else None


def test_a_skipped_gather_on_an_empty_shard_is_the_known_bug():
    assert _sharded([None, None, None, [SKIPPED]]) == SKIP_ID
    # with the float32 rounding of the other known bug on the destination, in the same example
    assert _sharded([[ROUNDED], None, None, [SKIPPED]]) == SKIP_ID


def test_a_skipped_gather_without_an_empty_shard_or_next_to_a_wrong_value_stays_a_failure():
    not_empty = replace(SKIPPED, subject=((1,),))
    assert _sharded([None, None, None, [not_empty]]) is None  # a gather skipped for another reason
    assert _sharded([[replace(ROUNDED, symptom=None)], None, None, [SKIPPED]]) is None
    assert _sharded([[ROUNDED], None, None, None]) == "sharded-tensor-gather-default-dtype-float32"


FROZEN = (
    "Thread 0x00007f (most recent call first):\n"
    '  File "/work/main/fuzzdist/properties/subgroups.py", line 190 in _retire\n'
    '  File "/work/main/fuzzdist/properties/subgroups.py", line 222 in subgroups_and_check\n'
)
WAITING = (
    '  File "/work/main/fuzzdist/properties/subgroups.py", line 204, in _make_groups\n'
    "    pg = new_group(list(g.ranks), **kwargs)\n"
)


def _subgroups(stacks: dict[int, str]) -> str | None:
    failure = RankTimeout(sorted(stacks), 30, stacks)
    case = subgroups.SubgroupCase(
        (subgroups.Group("new_group", (0, 1)),), (("all_reduce", "SUM"),), TensorSpec((1,), torch.float32), 0
    )
    bug = known_bugs.recognise("subgroups", {"case": case}, failure)
    return bug.id if bug else None


def test_a_rank_frozen_dropping_the_last_examples_groups_is_the_known_bug():
    assert _subgroups({0: FROZEN, 1: WAITING}) == DROP_ID


def test_a_rank_that_answered_in_retire_or_hangs_elsewhere_stays_a_failure():
    answered = FROZEN.replace(" in _retire", ", in _retire")  # a snapshot's traceback: its Python threads ran
    assert _subgroups({0: answered, 1: WAITING}) is None
    assert _subgroups({0: WAITING, 1: WAITING}) is None


# -- dtensor-empty-shard-full-tensor-pads-negative, on a rank whose local shard is empty in two dims --------

PADDING = (
    "The input size 0, plus negative padding 0 and 0 resulted in a negative output size, which is invalid. "
    "Check dimension 1 of your input."
)
PAD_TRACEBACK = 'File "torch/distributed/tensor/_collective_utils.py", line 177, in pad_tensor'


def _dtensor(
    shape: tuple[int, ...], mesh_shape: tuple[int, ...], redistributions: tuple[tuple[str, ...], ...]
) -> str | None:
    from fuzzdist.errors import RankError
    from fuzzdist.properties import dtensor

    case = dtensor.RoundTrip(TensorSpec(shape, torch.float32), 0, mesh_shape, ("R",) * len(mesh_shape), redistributions)
    failure = RankError([3], {3: PAD_TRACEBACK}, {3: "RuntimeError"}, {3: RuntimeError(PADDING)})
    bug = known_bugs.recognise("dtensor", {"case": case}, failure)
    return bug.id if bug else None


def test_negative_padding_on_a_rank_with_an_empty_shard_is_the_known_bug():
    # (1, 1) as (Shard(1), Shard(0)) on a 2x2 mesh: rank 3's local shard is (0, 0) (torch 2.6.0 raises there)
    assert _dtensor((1, 1), (2, 2), (("S1", "S0"),)) == "dtensor-empty-shard-full-tensor-pads-negative"
    assert _dtensor((1, 1), (2, 2), (("S-1", "S-2"),)) == "dtensor-empty-shard-full-tensor-pads-negative"


def test_negative_padding_where_no_shard_is_empty_stays_a_failure():
    assert _dtensor((2, 2), (2, 2), (("S1", "S0"),)) is None  # every rank holds one element
    assert _dtensor((1, 1), (2, 2), (("R", "R"),)) is None  # nothing sharded

"""Each re-widened property meets a known torch bug on its pinned example: the failure is tallied as
a sighting, not raised; the same inputs with a different symptom (a planted bug) stay a failure."""

from __future__ import annotations

import pytest
import torch
from helpers import planted_collectives, planted_known

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure
from fuzzdist.properties import broadcast, collectives
from fuzzdist.properties.collectives import Case
from fuzzdist.strategies import TensorSpec

pytestmark = pytest.mark.fuzzdist(world_size=2)

TRANSPOSED = TensorSpec((2, 2), torch.float32, "transposed")
MATRIX = TensorSpec((2, 2), torch.float32)

# (bug id, the property's check on the bug's pinned example, the same with a planted bug of another symptom)
CASES = {
    "gloo-broadcast-ignores-strides": (
        lambda pool: broadcast.check(pool, TRANSPOSED, 0, 0),
        lambda pool: broadcast.check(pool, TRANSPOSED, 0, 0, broadcast=planted_known.broadcast_negating_receivers),
    ),
    "nn-all-reduce-backward-non-sum": (
        lambda pool: collectives.check(pool, "all_reduce", Case(TensorSpec((4,), torch.float32), 0, op="PRODUCT")),
        lambda pool: collectives.check(
            pool,
            "all_reduce",
            Case(TensorSpec((4,), torch.float32), 0, op="PRODUCT"),
            all_reduce=planted_collectives.all_reduce_dropping_last_rank,
        ),
    ),
    "nn-all-gather-grad-transposed": (
        lambda pool: collectives.check(pool, "all_gather", Case(MATRIX, 0, grad_layout="transposed")),
        lambda pool: collectives.check(
            pool,
            "all_gather",
            Case(MATRIX, 0, grad_layout="transposed"),
            all_gather=planted_collectives.all_gather_swapping_ranks_0_and_1,
        ),
    ),
    "gloo-scatter-ignores-strides": (
        lambda pool: collectives.check(pool, "all_to_all", Case(MATRIX, 0, out_layout="transposed")),
        lambda pool: collectives.check(
            pool,
            "all_to_all",
            Case(MATRIX, 0, out_layout="transposed"),
            all_to_all=planted_known.all_to_all_reversing_outputs,
        ),
    ),
}


@pytest.mark.parametrize("bug_id", sorted(CASES))
def test_known_bug_is_tallied_not_raised(rank_pool, bug_id):
    real, _ = CASES[bug_id]
    with known_bugs.collecting() as tally:
        real(rank_pool)
    assert list(tally.sightings) == [bug_id]
    assert tally.total == 1


@pytest.mark.parametrize("bug_id", sorted(CASES))
def test_same_inputs_with_another_symptom_stay_a_failure(rank_pool, bug_id):
    _, planted = CASES[bug_id]
    with known_bugs.collecting() as tally, pytest.raises(PropertyFailure):
        planted(rank_pool)
    assert not tally


def test_outside_a_tally_the_known_bug_is_raised_with_its_name(rank_pool):
    real, _ = CASES["gloo-broadcast-ignores-strides"]
    with known_bugs.not_collecting(), pytest.raises(PropertyFailure) as info:
        real(rank_pool)
    assert any("gloo-broadcast-ignores-strides" in note for note in info.value.__notes__)


def test_bool_sum_through_functional_collectives_is_the_gloo_bug_and_only_that():
    """``fuzzdist run`` met gloo-bool-sum-stores-2 through the functional property: recognised there
    when every problem is a bool byte in a SUM reduction of bools; any other problem stays a failure."""
    functional = pytest.importorskip("fuzzdist.properties.functional")
    from fuzzdist import known_bugs
    from fuzzdist.errors import PropertyFailure
    from fuzzdist.strategies import TensorSpec

    def case(dtype, reduce_op="SUM"):
        return functional.FunctionalCase(
            calls=(functional.Call("all_reduce", TensorSpec((1,), dtype), reduce_op=reduce_op),),
            order=(0,),
            completions=("wait_tensor",),
            seed=0,
        )

    from fuzzdist.problems import Kind, Problem, Symptom

    byte_2 = [
        Problem(
            Kind.MISMATCH, call=0, op="all_reduce", got=(2,), count=1, size=1, symptom=Symptom.BOOL_BYTES_NOT_0_OR_1
        )
    ]
    failure = PropertyFailure("functional collectives wrong on ranks [0, 1]", [byte_2, byte_2])

    def example(dtype, reduce_op="SUM", backend="gloo"):
        return {"case": case(dtype, reduce_op), "backend": backend}

    bug = known_bugs.recognise("functional", example(torch.bool), failure)
    assert bug is not None and bug.id == "gloo-bool-sum-stores-2"
    assert known_bugs.recognise("functional", example(torch.bool, "MAX"), failure) is None
    assert known_bugs.recognise("functional", example(torch.float32), failure) is None
    # the same bytes on another backend are that backend's own bug; with no backend named, nothing is known
    assert known_bugs.recognise("functional", example(torch.bool, backend="nccl"), failure) is None
    assert known_bugs.recognise("functional", {"case": case(torch.bool)}, failure) is None
    other = PropertyFailure(
        "wrong", [[Problem(Kind.MISMATCH, call=0, op="all_reduce", index=0, got=True, expected=False)], None]
    )
    assert known_bugs.recognise("functional", example(torch.bool), other) is None
    # the functional result right, c10d's right by truth value but holding the byte 2: the same gloo bug
    c10d = torch.tensor([2], dtype=torch.uint8).view(torch.bool)
    differs = Problem(
        Kind.MISMATCH, "compared with c10d", call=0, op="all_reduce", index=0, got=True, expected=True, count=1, size=1
    )
    assert functional._invalid_bools(differs, c10d, torch.tensor([False])) is differs  # wrong by truth value too
    assert functional._invalid_bools(differs, torch.tensor([True]), torch.tensor([True])) is differs
    vs_c10d = functional._invalid_bools(differs, c10d, torch.tensor([True]))
    assert vs_c10d is not None and vs_c10d.symptom is Symptom.BOOL_BYTES_NOT_0_OR_1
    failure = PropertyFailure("functional collectives wrong on ranks [0]", [[vs_c10d], None])
    assert known_bugs.recognise("functional", example(torch.bool), failure).id == "gloo-bool-sum-stores-2"
    assert known_bugs.recognise("functional", example(torch.bool, "MAX"), failure) is None


def test_reduce_scatter_ignoring_the_op_through_functional_collectives():
    """torch 2.6.0's gloo reduces reduce_scatter_tensor with SUM whatever the op: through the functional
    property, recognised when every problem is a reduce_scatter call, not SUM, whose first wrong element is
    the sum of the ranks' inputs there; any other problem stays a failure."""
    functional = pytest.importorskip("fuzzdist.properties.functional")
    from fuzzdist import known_bugs
    from fuzzdist.errors import PropertyFailure
    from fuzzdist.strategies import TensorSpec

    def example(op="reduce_scatter_tensor", reduce_op="MIN", backend="gloo"):
        call = functional.Call(op, TensorSpec((4,), torch.float32), reduce_op=reduce_op, dim=0)
        case = functional.FunctionalCase(calls=(call,), order=(0,), completions=("wait_tensor",), seed=0)
        return {"case": case, "backend": backend}

    from fuzzdist.problems import Kind, Problem

    def problem(got, rank=0):
        return [
            Problem(
                Kind.MISMATCH,
                call=0,
                op="reduce_scatter_tensor",
                index=1,
                got=got,
                expected=-1.5,
                count=1,
                size=2,
                inputs=(-1.5, 4.0),
                inputs_at=1,
            )
        ]

    summed = PropertyFailure("functional collectives wrong on ranks [0, 1]", [problem(2.5), problem(2.5)])
    bug = known_bugs.recognise("functional", example(), summed)
    assert bug is not None and bug.id == "gloo-reduce-scatter-tensor-ignores-op"
    assert known_bugs.recognise("functional", example(reduce_op="SUM"), summed) is None
    assert known_bugs.recognise("functional", example(op="all_reduce"), summed) is None
    assert known_bugs.recognise("functional", example(backend="nccl"), summed) is None
    other = PropertyFailure("wrong", [problem(2.5), problem(3.0)])  # one rank's value is no sum
    assert known_bugs.recognise("functional", example(), other) is None

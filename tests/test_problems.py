"""A problem as data: the record pickles, compares by value, and reads the same wherever it is shown."""

from __future__ import annotations

import pickle

from fuzzdist.errors import CallRaised, ConformanceFailure, PropertyFailure
from fuzzdist.problems import Kind, Problem, Symptom, by_rank, describe, flatten, listed
from fuzzdist.toolkit.reporting import MAX_REPORTED, capped


def test_a_problem_pickles_and_compares_by_value():
    problem = Problem(
        Kind.MISMATCH, "output", index=3, got=1.0, expected=2.0, count=1, size=4, symptom=Symptom.STRIDES_IGNORED
    )
    assert pickle.loads(pickle.dumps(problem)) == problem
    assert problem != problem.with_symptom(Symptom.MEMORY_ORDER)


def test_describe_words_each_kind():
    assert describe(Problem(Kind.MISMATCH, "output", index=0, got=1, expected=2, count=1, size=1)) == (
        "output: 1 of 1 elements differ; first at flat index 0: got 1, expected 2"
    )
    assert describe(Problem(Kind.SHAPE, "x", got=((2,), "torch.int8"), expected=((3,), "torch.int8"))) == (
        "x: got shape (2,) torch.int8, expected (3,) torch.int8"
    )
    assert describe(Problem.raised(ValueError("bad\nmore"), op="all_gather_object")) == (
        "all_gather_object: raised ValueError: bad"
    )
    assert describe(Problem(Kind.MORE, count=3)) == "... and 3 more"
    assert describe(Problem(Kind.NOTE, rank=1, detail="left early")) == "rank 1: left early"
    assert describe(Problem(Kind.MISMATCH, "grad w", detail="not equal to DDP without a hook")) == (
        "grad w: not equal to DDP without a hook"
    )


def test_describe_names_the_call_and_rank_and_adds_the_symptom_and_inputs():
    problem = Problem(
        Kind.MISMATCH,
        "the reduced tensor",
        rank=0,
        call=2,
        op="allreduce",
        index=1,
        got=2.0,
        expected=1.0,
        count=1,
        size=2,
        inputs=(1.0, 0.0),
        inputs_at=1,
        symptom=Symptom.MEMORY_ORDER,
    )
    assert describe(problem) == (
        "call 2 allreduce, rank 0, the reduced tensor: 1 of 2 elements differ; first at flat index 1: got 2.0, "
        f"expected 1.0 ({Symptom.MEMORY_ORDER.value})\n      inputs at index 1: rank 0: 1.0, rank 1: 0.0"
    )


def test_bools_that_hold_other_bytes_say_which():
    problem = Problem(Kind.MISMATCH, "out", got=(2,), count=1, size=4, symptom=Symptom.BOOL_BYTES_NOT_0_OR_1)
    assert describe(problem) == "out: 1 of 4 bools hold a byte other than 0 and 1 (bytes [2]; True is the byte 1)"


def test_flatten_and_the_message_helpers_take_records_from_rank_results():
    a, b = Problem(Kind.NOTE, detail="a"), Problem(Kind.NOTE, detail="b")
    assert flatten([None, a, [b, "not a record"], []]) == [a, b]
    assert by_rank({1: [a, b], 0: a}) == "\n  rank 0: a\n  rank 1: a\n  rank 1: b"
    assert listed([a, b]) == "\n  a\n  b"


def test_capped_keeps_the_first_and_counts_the_rest_keeping_a_shared_symptom():
    same = [Problem(Kind.MISMATCH, f"p{i}", symptom=Symptom.STALE_SHARD) for i in range(MAX_REPORTED + 2)]
    kept = capped(same)
    assert kept[:-1] == same[:MAX_REPORTED]
    assert kept[-1] == Problem(Kind.MORE, count=2, symptom=Symptom.STALE_SHARD)
    mixed = [*same[:MAX_REPORTED], Problem(Kind.NOTE), Problem(Kind.NOTE)]
    assert capped(mixed)[-1] == Problem(Kind.MORE, count=2)
    assert capped(same[:2]) == same[:2]


def test_failures_carry_their_records():
    a = Problem(Kind.NOTE, detail="a")
    assert PropertyFailure("m", [None, [a]]).problems == [a]
    assert PropertyFailure("m", [{"problems": [a]}], problems=[a]).problems == [a]
    assert ConformanceFailure("m", [a]).problems == [a]
    raised = CallRaised(Problem.raised(RuntimeError("Invalid scalar type"), call=1, op="all_to_all_single"))
    again = pickle.loads(pickle.dumps(raised))
    assert again.problem == raised.problem
    assert str(again) == "call 1 all_to_all_single: raised RuntimeError: Invalid scalar type"
    assert "builtins.RuntimeError" in raised.problem.error_types

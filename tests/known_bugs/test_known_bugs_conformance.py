"""check-pg and known torch bugs: what gloo's known bugs look like to check-pg is tallied per
collective, reported as KNOWN (not failures, not passes); the same operation failing with another
symptom stays a failure."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import settings

from fuzzdist import known_bugs
from fuzzdist.conformance import OpCall, _rank, check_process_group
from fuzzdist.driver.plugin import PoolKey
from fuzzdist.errors import ConformanceFailure, RankCrash, RankError
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.strategies import TensorSpec

BOOL_SUM = OpCall("allreduce", TensorSpec((1,), torch.bool), 3, reduce_op="SUM")
STACK = OpCall("reduce_scatter_tensor", TensorSpec((2,), torch.float32), 0, reduce_op="SUM", form="stack")
SEND = OpCall("send_recv", TensorSpec((1,), torch.float32), root=0, peer=1)
ALLREDUCE = OpCall("allreduce", TensorSpec((1,), torch.float32), reduce_op="SUM")
MAX_SCATTER = OpCall("reduce_scatter_tensor", TensorSpec((3,), torch.float32), 0, reduce_op="MAX")
INT_PRODUCT_SCATTER = OpCall("reduce_scatter_tensor", TensorSpec((2,), torch.int8), 0, reduce_op="PRODUCT")
SUM_SCATTER = OpCall("reduce_scatter_tensor", TensorSpec((3,), torch.float32), 0, reduce_op="SUM")
# torch 2.6.0's gloo reduces reduce_scatter_tensor with SUM whatever the op (gloo-reduce-scatter-tensor-ignores-op)
OLD_GLOO_REDUCE_SCATTER = torch.__version__.startswith("2.6.")

# the records fuzzdist.toolkit.oracle makes for a wrong float reduction (a rank's problem, its inputs there)
WRONG_MAX_IS_SUM = Problem(
    Kind.MISMATCH,
    "the output tensor",
    rank=0,
    index=1,
    got=3.5,
    expected=2.5,
    count=1,
    size=3,
    inputs=(1.0, 2.5),
    inputs_at=1,
)
WRONG_MAX_OTHER = replace(WRONG_MAX_IS_SUM, got=3.25)
INF_MINUS_INF = Problem(
    Kind.MISMATCH,
    "the output tensor",
    rank=1,
    index=0,
    got=math.nan,
    expected=math.inf,
    count=1,
    size=3,
    inputs=(math.inf, -math.inf),
    inputs_at=0,
)
# an int8 PRODUCT that got the wrapped sum: 100 + 100 is -56 in int8
INT8_WRAPPED_SUM = Problem(
    Kind.MISMATCH,
    "the output tensor",
    rank=0,
    index=0,
    got=-56,
    expected=16,
    count=1,
    size=2,
    inputs=(100, 100),
    inputs_at=0,
)
BXOR_SCATTER = OpCall("reduce_scatter_tensor", TensorSpec((1,), torch.bool), 0, reduce_op="BXOR")
MAX_BOOL_SCATTER = OpCall("reduce_scatter_tensor", TensorSpec((1,), torch.bool), 0, reduce_op="MAX")
# bools (torch 2.6.0, check-pg at world size 3): BXOR of True, False, True gave True, the sum's truth
BXOR_IS_SUM = Problem(
    Kind.MISMATCH,
    "the output tensor",
    rank=0,
    index=0,
    got=True,
    expected=False,
    count=1,
    size=1,
    inputs=(True, False, True),
    inputs_at=0,
)
# MAX of True, True right by truth value, but the byte is the sum's, 2
MAX_BYTE_2 = Problem(
    Kind.MISMATCH,
    "the output tensor",
    rank=0,
    got=(2,),
    count=1,
    size=1,
    symptom=Symptom.BOOL_BYTES_NOT_0_OR_1,
    inputs=(True, True),
    inputs_at=0,
)
# torch 2.6.0: the stack form's CHECK aborts the rank (SIGABRT), its message on stderr only
SIGABRT_CHECK = (
    "[rank0]:[F1126 10:16:33.625983287 ProcessGroupGloo.cpp:1979] Check failed: outputShape[0] * "
    "worldSize == inputShape[0] (4 vs. 2) "
)


@pytest.fixture(scope="module")
def pools(request, rank_pools):
    timeout = request.config.getoption("fuzzdist_timeout")
    return lambda world_size: rank_pools.get(PoolKey(world_size, "gloo", "cpu", timeout))


def test_check_pg_reports_gloo_known_bugs_per_collective(pools):
    report = check_process_group(
        "fuzzdist.conformance:gloo",
        world_sizes=(2,),
        ops=("reduce_scatter_tensor",),
        dtypes=(torch.float32,),
        max_examples=3,
        pools=pools,
        settings=settings(derandomize=True, database=None),
    )
    op = report.ops["reduce_scatter_tensor"]
    assert report.conforms and op.status == "known" and op.failure is None, report.summary()
    known = {k["id"]: k for k in op.known}
    stack = known.pop("gloo-reduce-scatter-stack-aborts")
    assert stack["count"] == 1 and "form='stack'" in stack["example"]
    # torch 2.6.0 also reduces with SUM whatever the op (the other examples, PRODUCT/MIN/MAX/AVG)
    assert set(known) <= ({"gloo-reduce-scatter-tensor-ignores-op"} if OLD_GLOO_REDUCE_SCATTER else set())
    ignored = sum(k["count"] for k in known.values())
    assert report.known_sightings == 1 + ignored
    assert report.supported == ["reduce_scatter_tensor"]  # it ran and passed, known bugs aside
    summary = report.summary()
    assert f"{1 + ignored} sighting(s) of known torch bugs" in summary
    assert "KNOWN gloo-reduce-scatter-stack-aborts x1 [crash]" in summary
    data = json.loads(json.dumps(report.to_json(), default=str))
    assert data["known_sightings"] == 1 + ignored
    assert {k["id"]: k["count"] for k in data["ops"]["reduce_scatter_tensor"]["known"]}[stack["id"]] == 1


def _message(*problems: Problem) -> ConformanceFailure:
    return ConformanceFailure("op does not conform: ...", problems)


def _raised(message: str) -> ConformanceFailure:
    """What check-pg's probe raises for a call that raised on the ranks."""
    return ConformanceFailure(
        f"raised: RuntimeError: {message}", [Problem(Kind.RAISED, error="RuntimeError", error_text=message)]
    )


def _rank_error(blocked: Problem) -> RankError:
    """Both ranks' repeated wait() blocked, as ``blocked`` says."""
    excs = {0: _rank._RepeatedWaitBlocked(blocked), 1: _rank._RepeatedWaitBlocked(blocked)}
    return RankError([0, 1], dict.fromkeys(excs, "Traceback ..."), dict.fromkeys(excs, "_RepeatedWaitBlocked"), excs)


def _crash(last_output: str) -> RankCrash:
    return RankCrash([0], {0: -6}, {}, last_output={0: last_output})


BOOL_BYTES = Problem(
    Kind.MISMATCH, "the reduced tensor", rank=0, got=(2,), count=1, size=1, symptom=Symptom.BOOL_BYTES_NOT_0_OR_1
)
BOOL_WRONG = Problem(Kind.MISMATCH, "the reduced tensor", rank=0, index=0, got=False, expected=True, count=1, size=1)
BLOCKED = Problem(
    Kind.HANG, call=0, op="send_recv", symptom=Symptom.REPEAT_WAIT_BLOCKED, detail="within 2 s: RuntimeError: Timed out"
)
GLOO = {"world_size": 2, "backend": "gloo"}
MINE = {"world_size": 2, "backend": "planted:MyGroup"}  # a user's own group with gloo's symptoms
STACK_CHECK = "Check failed: outputShape[0] * worldSize == inputShape[0] (4 vs. 2)"


def _call(index: int, op: str, problem: Problem) -> Problem:
    """``problem`` as the async check reports it: about call ``index`` (an ``op``)."""
    return replace(problem, call=index, op=op)


@pytest.mark.parametrize(
    "where, example, failure, bug",
    [
        ("check-pg:allreduce", {**GLOO, "call": BOOL_SUM}, _message(BOOL_BYTES), "gloo-bool-sum-stores-2"),
        (
            "check-pg:allreduce",
            {**MINE, "call": BOOL_SUM},
            _message(BOOL_BYTES),
            None,
        ),  # not gloo: the user's backend's own bug
        ("check-pg:allreduce", {**GLOO, "call": BOOL_SUM}, _message(BOOL_WRONG), None),  # wrong by truth value
        (
            "check-pg:allreduce",
            {**GLOO, "call": BOOL_SUM},  # one rank's bytes, another's truth
            _message(BOOL_BYTES, replace(BOOL_WRONG, rank=1)),
            None,
        ),
        # async: each problem is tied to the call it names
        (
            "check-pg:async",
            {**GLOO, "calls": (ALLREDUCE, BOOL_SUM), "wait_order": (0, 1)},
            _message(_call(1, "allreduce", BOOL_BYTES)),
            "gloo-bool-sum-stores-2",
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (ALLREDUCE, BOOL_SUM), "wait_order": (0, 1)},  # the float call's
            _message(_call(0, "allreduce", BOOL_BYTES)),
            None,
        ),
        (
            "check-pg:async",
            {**MINE, "calls": (ALLREDUCE, BOOL_SUM), "wait_order": (0, 1)},
            _message(_call(1, "allreduce", BOOL_BYTES)),
            None,
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": STACK},
            _raised(STACK_CHECK),
            "gloo-reduce-scatter-stack-aborts",
        ),
        ("check-pg:reduce_scatter_tensor", {**MINE, "call": STACK}, _raised(STACK_CHECK), None),
        ("check-pg:reduce_scatter_tensor", {**GLOO, "call": STACK}, _raised("some other error"), None),
        # torch 2.6.0: the same CHECK aborts the rank; its message is in the crash's last output
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": STACK},
            _crash(SIGABRT_CHECK),
            "gloo-reduce-scatter-stack-aborts",
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": STACK},
            _crash("terminate called after throwing an instance of 'gloo::EnforceNotMet'"),
            None,
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": ALLREDUCE},
            _crash(SIGABRT_CHECK),
            None,
        ),  # not the stack form
        # torch 2.6.0: a reduce_scatter_tensor whose op is ignored: every rank's first wrong element is the SUM
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_SCATTER},
            _message(WRONG_MAX_IS_SUM),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:_reduce_scatter_base",
            {**GLOO, "call": MAX_SCATTER},
            _message(INF_MINUS_INF),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": INT_PRODUCT_SCATTER},
            _message(INT8_WRAPPED_SUM),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_SCATTER},
            _message(WRONG_MAX_OTHER),
            None,
        ),  # not the sum
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_SCATTER},  # one rank's sum, another's other value
            _message(WRONG_MAX_IS_SUM, replace(WRONG_MAX_OTHER, rank=1)),
            None,
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": SUM_SCATTER},
            _message(WRONG_MAX_IS_SUM),
            None,
        ),  # SUM itself
        ("check-pg:reduce_scatter_tensor", {**MINE, "call": MAX_SCATTER}, _message(WRONG_MAX_IS_SUM), None),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_SCATTER},  # no inputs: can't tell
            _message(replace(WRONG_MAX_IS_SUM, inputs=(), inputs_at=None)),
            None,
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": BXOR_SCATTER},
            _message(BXOR_IS_SUM),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": BXOR_SCATTER},  # False is no sum of a True
            _message(replace(BXOR_IS_SUM, got=False, expected=True)),
            None,
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_BOOL_SCATTER},
            _message(MAX_BYTE_2),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:reduce_scatter_tensor",
            {**GLOO, "call": MAX_BOOL_SCATTER},  # byte 3 from two Trues: no sum
            _message(replace(MAX_BYTE_2, got=(3,))),
            None,
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (ALLREDUCE, MAX_SCATTER), "wait_order": (0, 1)},
            _message(_call(1, "reduce_scatter_tensor", WRONG_MAX_IS_SUM)),
            "gloo-reduce-scatter-tensor-ignores-op",
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (MAX_SCATTER, ALLREDUCE), "wait_order": (0, 1)},  # the allreduce's
            _message(_call(1, "allreduce", WRONG_MAX_IS_SUM)),
            None,
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (SEND, ALLREDUCE), "wait_order": (0, 1, 0)},
            _rank_error(BLOCKED),
            "gloo-p2p-second-wait-blocks",
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (SEND, ALLREDUCE), "wait_order": (0, 1, 1, 0)},  # an allreduce repeated
            _rank_error(BLOCKED),
            "gloo-p2p-second-wait-blocks",
        ),  # too, and it returned: still the send_recv's bug
        ("check-pg:async", {**MINE, "calls": (SEND, ALLREDUCE), "wait_order": (0, 1, 0)}, _rank_error(BLOCKED), None),
        (
            "check-pg:async",
            {**GLOO, "calls": (SEND, ALLREDUCE), "wait_order": (0, 1)},  # call 0 waited once only
            _rank_error(BLOCKED),
            None,
        ),
        (
            "check-pg:async",
            {**GLOO, "calls": (ALLREDUCE, SEND), "wait_order": (0, 1, 0)},  # an allreduce's
            _rank_error(replace(BLOCKED, op="allreduce")),
            None,
        ),
    ],
)
def test_check_pg_predicates_look_at_the_symptom(where, example, failure, bug):
    found = known_bugs.recognise(where, example, failure)
    assert (found.id if found else None) == bug


class _Work:
    """A Work stand-in whose wait() does what it is told."""

    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def wait(self, timeout: object = None) -> object:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(
    "outcome, blocked",
    [
        (RuntimeError("[unbound_buffer.cc:78] Timed out waiting 2000ms for recv operation to complete"), True),
        (TimeoutError("deadline passed"), True),
        (False, True),  # wait(timeout) said it did not finish
        (True, False),
        (None, False),
    ],
)
def test_a_repeated_wait_is_blocked_only_on_a_timeout(outcome, blocked):
    work = _Work(outcome)
    if blocked:
        with pytest.raises(_rank._RepeatedWaitBlocked, match="call 3 send_recv") as raised:
            _rank._wait_again(work, 3, SEND)
        assert (raised.value.problem.call, raised.value.problem.symptom) == (3, Symptom.REPEAT_WAIT_BLOCKED)
        with pytest.raises(_rank._RepeatedWaitBlocked):
            _rank._wait_again(work, 3, SEND)
    else:
        _rank._wait_again(work, 3, SEND)


def test_a_repeated_wait_that_raises_another_error_is_the_ranks_error():
    """A group whose second wait() raises at once (not a timeout) has not blocked: its error propagates
    as it is, and gloo-p2p-second-wait-blocks can't claim it."""
    with pytest.raises(ValueError, match="already consumed"):
        _rank._wait_again(_Work(ValueError("already consumed")), 0, SEND)

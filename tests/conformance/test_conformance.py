"""ProcessGroup conformance (fuzzdist.conformance): gloo conforms, the seed's single-rank Python
group conforms on one rank with its missing operations reported as unsupported, and each
planted faulty group is caught and shrunk to a small example."""

from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from helpers.planted_backends import GlooForwardingGroup, StackFormCrashGroup, completed_work
from hypothesis import settings
from torch._C._distributed_c10d import AllreduceCoalescedOptions

from fuzzdist import known_bugs
from fuzzdist.cli import main
from fuzzdist.conformance import ASYNC, DDP, OPS, OpCall, OpInfo, check_process_group, gloo, unsupported_reason
from fuzzdist.conformance.ops import Prepared, Reduction, input_values, options, real, reduce_op_enum
from fuzzdist.driver.plugin import PoolKey
from fuzzdist.errors import ConformanceFailure, FactoryError
from fuzzdist.problems import Problem, Symptom
from fuzzdist.strategies import TensorSpec
from fuzzdist.toolkit.oracle import reduction_problem

REPEATABLE = settings(derandomize=True, database=None)
FEW_DTYPES = (torch.float32, torch.float64, torch.int32, torch.bool)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pools(request, rank_pools):
    """The session's CPU rank pools, by world size."""
    timeout = request.config.getoption("fuzzdist_timeout")
    return lambda world_size: rank_pools.get(PoolKey(world_size, "gloo", "cpu", timeout))


# -- gloo and the seed's group conform -------------------------------------------------------


def test_gloo_conforms(pools, gloo_refuses):
    report = check_process_group(
        "fuzzdist.conformance:gloo",
        world_sizes=(1, 2, 3),
        ops=(*OPS, ASYNC),
        max_examples=8,
        pools=pools,
        settings=REPEATABLE,
    )
    assert report.conforms, report.summary()
    assert report.backend == "gloo"
    # known torch bugs are sightings, neither failures nor passes: gloo's stack-form CHECK is met by
    # its probe on every run; the bool SUM bytes and the second wait only on the examples that draw them
    statuses = {name: r.status for name, r in report.ops.items()}
    assert statuses["reduce_scatter_tensor"] == "known"
    # an operation the installed gloo lacks (torch 2.6.0's: the list forms of reduce_scatter and alltoall)
    # is unsupported, once, with gloo's own reason; every other one conforms
    lacking = {name for name in ("reduce_scatter", "alltoall") if gloo_refuses[name]}
    for name in lacking:
        assert statuses.pop(name) == "unsupported", report.summary()
        assert [(u.variant, u.reason) for u in report.unsupported if u.op == name] == [
            (None, f"RuntimeError: {gloo_refuses[name]}")
        ], report.summary()
    assert set(statuses.values()) <= {"conforms", "known"}, report.summary()
    assert "gloo-reduce-scatter-stack-aborts" in {k["id"] for k in report.ops["reduce_scatter_tensor"].known}
    assert all(bool(r.known) == (r.status == "known") for r in report.ops.values())
    # every ReduceOp gloo claims was fuzzed, and what it refuses is reported once each
    assert "ReduceOp.BXOR: int64, int32, int8, uint8, bool" in report.ops["allreduce"].supported
    refused = [(u.op, u.variant, u.reason) for u in report.unsupported]
    assert len(refused) == len(set(refused))
    assert any(
        u.op == "broadcast" and "int16" in u.dtypes and "Invalid scalar type" in u.reason for u in report.unsupported
    )
    if "alltoall" not in lacking:  # where gloo has it, its uneven splits are probed (and refused)
        assert any(u.op == "alltoall" and u.variant == "uneven splits" for u in report.unsupported)


def test_a_bare_gloo_backend_is_wrapped_in_a_process_group(pools):
    report = check_process_group(
        "fuzzdist.conformance:gloo_backend",
        world_sizes=(2,),
        ops=("allreduce", "allgather_into_tensor", "barrier"),
        dtypes=(torch.float32,),
        max_examples=5,
        pools=pools,
        settings=REPEATABLE,
    )
    assert report.conforms, report.summary()
    assert [r.status for r in report.ops.values()] == ["conforms"] * 3


@pytest.mark.parametrize("factory", ["lonely_rank", "lonely_rank_wrapper"])
def test_seed_single_rank_group_conforms_on_one_rank(pools, factory):
    report = check_process_group(
        f"helpers.planted_backends:{factory}",
        world_sizes=(1,),
        max_examples=8,
        dtypes=FEW_DTYPES,
        pools=pools,
        settings=REPEATABLE,
    )
    assert report.conforms, report.summary()
    statuses = {name: r.status for name, r in report.ops.items()}
    for name in ("allreduce", "broadcast", "allgather", ASYNC, DDP):
        assert statuses[name] == "conforms", name
    assert statuses["send_recv"] == "not applicable"
    missing = [name for name in OPS if name not in ("allreduce", "broadcast", "allgather", "send_recv")]
    assert all(statuses[name] == "unsupported" for name in missing), statuses
    # reported once each (not per dtype or ReduceOp), with the method the group lacks
    assert sorted(u.op for u in report.unsupported) == sorted(missing)
    barrier = next(u for u in report.unsupported if u.op == "barrier")
    assert "does not implement barrier()" in barrier.reason
    gather = next(u for u in report.unsupported if u.op == "allgather_into_tensor")
    assert OPS["allgather_into_tensor"].method in gather.reason


# -- planted faulty groups are caught and shrunk --------------------------------------------


def _failure(pools, factory, op):
    report = check_process_group(
        f"helpers.planted_backends:{factory}",
        world_sizes=(1, 2, 3),
        ops=(op,),
        dtypes=FEW_DTYPES,
        pools=pools,
        settings=settings(REPEATABLE, max_examples=200),
    )
    assert not report.conforms, f"the planted bug in {factory} was not caught:\n{report.summary()}"
    [failure] = report.failures
    assert failure.op == op
    message = failure.message
    assert f"{op} does not conform: {op}(" in message and "with world_size=" in message
    assert "expected" in message and "actual" in message and "inputs:" in message
    return failure


def test_dropped_contribution_is_caught_and_shrunk(pools):
    failure = _failure(pools, "dropping_contribution", "allreduce")
    call = failure.call
    # the smallest input that shows it: two ranks, SUM, 4 float32 elements
    assert failure.world_size == 2
    assert call.reduce_op == "SUM" and call.spec.dtype == torch.float32 and call.spec.numel == 4
    assert call.spec.layout == "contiguous" and call.out_offset == 0
    assert "op=ReduceOp.SUM" in failure.message and "4 of 4 elements differ" in failure.message


def test_work_resolved_before_its_data_is_caught_and_shrunk(pools):
    failure = _failure(pools, "early_completion", "allreduce")
    call = failure.call
    assert failure.world_size == 2  # with one rank the sum is the input: nothing shows
    assert call.reduce_op == "SUM" and call.spec.shape == (1,) and call.spec.dtype == torch.float32


class MemoryOrderGather(GlooForwardingGroup):
    """gloo, except that gather sends each input's memory as if it were row-major, as torch 2.6.0's gloo
    does for a non-contiguous input (known bug gloo-gather-ignores-input-strides)."""

    def gather(self, output_tensors, input_tensors, opts):
        t = input_tensors[0]
        in_memory_order = t.as_strided((t.numel(),), (1,), t.storage_offset()).reshape(t.shape).contiguous()
        return self.inner.gather(output_tensors, [in_memory_order], opts)


def memory_order_gather(rank: int, world_size: int, store: Any, device: torch.device) -> dist.ProcessGroup:
    return MemoryOrderGather(rank, world_size, store)


def test_a_gather_that_ignores_its_inputs_strides_is_caught_and_named(pools):
    """Caught on every torch (the group is not gloo, so no known bug excuses it); its message says the slot
    holds the input's memory order, which the registry recognises as gloo's bug on gloo, and only that."""
    report = check_process_group(
        memory_order_gather,
        world_sizes=(1, 2),
        ops=("gather",),
        dtypes=(torch.float32,),
        pools=pools,
        settings=settings(REPEATABLE, max_examples=200),
    )
    [failure] = report.failures
    assert not report.ops["gather"].known, report.summary()
    call = failure.call
    assert failure.world_size == 1 and call.spec.layout in ("transposed", "channels_last"), failure.message
    assert "gather_list[0]: " in failure.message and f"({Symptom.MEMORY_ORDER.value})" in failure.message
    found = failure.exception
    assert isinstance(found, ConformanceFailure) and found.problems[0].symptom is Symptom.MEMORY_ORDER
    on_gloo = {**failure.example, "backend": "gloo"}
    bug = known_bugs.recognise("check-pg:gather", on_gloo, found)
    assert bug is not None and bug.id == "gloo-gather-ignores-input-strides"
    # another wrong result on the same call stays a failure, on gloo too
    other = ConformanceFailure(failure.message, [replace(p, symptom=None) for p in found.problems])
    assert known_bugs.recognise("check-pg:gather", on_gloo, other) is None
    assert known_bugs.recognise("check-pg:gather", failure.example, found) is None


def test_gloos_sum_for_any_op_is_recognised_where_the_sum_overflows():
    """torch 2.6.0's gloo-reduce-scatter-tensor-ignores-op, where the finite float64 inputs' sum leaves the
    float64 range: inf, the sum all the same, is that bug; any other wrong value stays a failure."""
    big = torch.finfo(torch.float64).max
    xs = [torch.tensor([v], dtype=torch.float64) for v in (big, -0.0, big)]
    call = OPS["reduce_scatter_tensor"].call(TensorSpec((1,), torch.float64), 0, reduce_op="PRODUCT")
    example = {"world_size": 3, "call": call, "backend": "gloo"}

    def failure(result: float) -> ConformanceFailure:
        got = torch.tensor([result], dtype=torch.float64)
        problem = reduction_problem("the output tensor", "PRODUCT", xs, got)
        assert problem is not None
        return ConformanceFailure("reduce_scatter_tensor does not conform", [replace(problem, rank=0)])

    bug = known_bugs.recognise("check-pg:reduce_scatter_tensor", example, failure(float("inf")))
    assert bug is not None and bug.id == "gloo-reduce-scatter-tensor-ignores-op"
    for other in (big, float("-inf"), 1.0):
        assert known_bugs.recognise("check-pg:reduce_scatter_tensor", example, failure(other)) is None, other


@pytest.mark.parametrize(
    "op, reduce_op", [("allreduce", "SUM"), ("allreduce", "MAX"), ("reduce", "MAX"), ("reduce_scatter_tensor", "SUM")]
)
def test_gloos_float16_reduction_without_a_one_is_recognised_and_nothing_else(op, reduce_op):
    """torch 2.6.0's gloo-float16-reduce-drops-one: inputs with 2**-24 and 1.0 (in either order, with a third
    rank too) reduced as if the 1.0 were not there is that bug on gloo; another value, other inputs, another
    dtype or another backend stays a failure."""
    tiny = 2.0**-24
    root = 0 if op == "reduce" else None

    def recognised(
        inputs: tuple[float, ...], result: float, backend: str = "gloo", dtype: torch.dtype = torch.float16
    ) -> str | None:
        call = OPS[op].call(TensorSpec((1,), dtype), 0, reduce_op=reduce_op, root=root)
        xs = [torch.tensor([x], dtype=dtype) for x in inputs]
        got = torch.tensor([result], dtype=dtype)
        problem = reduction_problem("the tensor", reduce_op, xs, got)
        failure = ConformanceFailure(f"{op} does not conform", [] if problem is None else [replace(problem, rank=0)])
        example = {"world_size": len(inputs), "call": call, "backend": backend}
        bug = known_bugs.recognise(f"check-pg:{op}", example, failure)
        return None if bug is None else bug.id

    for inputs in [(tiny, 1.0), (1.0, tiny), (tiny, -0.0, 1.0)]:
        assert recognised(inputs, tiny) == "gloo-float16-reduce-drops-one", inputs
    # three ranks: a step that brings 2**-24 into a partial result of 1.0 (an input or a partial sum) gives 2**-24;
    # torch 2.6.0 gave -1.0 for the SUM of 1.0, -1.0 and 2**-24, 2**-24 for 2**-24, -6.1e-05 and 1.0, and 1.0
    # (not 2**-24: 1.0 brought into 2**-24 is right) for 1.0, 2**-24 and 1.0
    without_the_one = {"SUM": -1.0, "MAX": tiny}[reduce_op]
    assert recognised((1.0, -1.0, tiny), without_the_one) == "gloo-float16-reduce-drops-one"
    if reduce_op == "SUM":
        assert recognised((tiny, -6.103515625e-05, 1.0), tiny) == "gloo-float16-reduce-drops-one"
        assert recognised((1.0, tiny, 1.0), 1.0) == "gloo-float16-reduce-drops-one"
        assert recognised((1.0, tiny, 1.0), tiny) is None  # no order gives it
    assert recognised((1.0, -1.0, tiny), 0.5) is None
    assert recognised((tiny, 1.0), 0.5) is None
    assert recognised((tiny, 0.5), tiny) is None
    assert recognised((tiny, 1.0), tiny, dtype=torch.float32) is None
    assert recognised((tiny, 1.0), tiny, backend="planted:other") is None


def test_an_async_example_whose_calls_meet_different_known_bugs_is_a_sighting_of_each():
    """torch 2.6.0's gloo in one async example: a reduce_scatter_tensor PRODUCT that gives the sum, and a bool SUM
    allreduce that stores the byte 2. No one bug explains both calls; each call's problems alone are a known bug,
    so each is tallied. A call whose problem no known bug explains keeps the example a failure."""
    from fuzzdist.conformance._composite import _each_call_a_known_bug

    scatter = OPS["reduce_scatter_tensor"].call(TensorSpec((1,), torch.float32), 0, reduce_op="PRODUCT")
    bools = OPS["allreduce"].call(TensorSpec((2,), torch.bool), 1, reduce_op="SUM")
    example = {"world_size": 2, "calls": (scatter, bools), "wait_order": (0, 1), "backend": "gloo"}
    xs = [torch.tensor([2.0]), torch.tensor([3.0])]
    ts = [torch.tensor([False, True]), torch.tensor([False, True])]
    two = torch.tensor([0, 2], dtype=torch.uint8).view(torch.bool)

    def on_call(index: int, op: str, problem: Problem | None) -> Problem:
        assert problem is not None
        return replace(problem, call=index, op=op, rank=0)

    summed = on_call(0, "reduce_scatter_tensor", reduction_problem("the output tensor", "PRODUCT", xs, xs[0] + xs[1]))
    byte_2 = on_call(1, "allreduce", reduction_problem("the reduced tensor", "SUM", ts, two))
    wrong = on_call(1, "allreduce", reduction_problem("the reduced tensor", "SUM", ts, torch.tensor([True, False])))
    head = "async: 2 calls issued with async_op=True before any wait, then waited in the order [0, 1]:"
    with known_bugs.collecting() as tally:
        assert _each_call_a_known_bug(example, head, {0: [summed], 1: [byte_2]})
    assert set(tally.sightings) == {"gloo-reduce-scatter-tensor-ignores-op", "gloo-bool-sum-stores-2"}
    with known_bugs.collecting() as tally:
        assert not _each_call_a_known_bug(example, head, {0: [summed], 1: [wrong]})
        assert not _each_call_a_known_bug({**example, "backend": "planted"}, head, {0: [summed], 1: [byte_2]})
    assert not tally.sightings


def test_broadcast_from_the_wrong_source_is_caught_and_shrunk(pools):
    failure = _failure(pools, "wrong_source_broadcast", "broadcast")
    call = failure.call
    assert failure.world_size == 2 and call.root == 1  # only a non-zero source shows it
    assert call.spec.shape == (1,) and call.spec.dtype == torch.float32
    assert "broadcast(src=1, tensor=TensorSpec((1,), torch.float32)" in failure.message


def test_gathered_tensors_in_the_wrong_order_are_caught_and_shrunk(pools):
    failure = _failure(pools, "rotated_allgather", "allgather")
    call = failure.call
    assert failure.world_size == 2
    assert call.spec.shape == (1,) and call.spec.dtype == torch.float32
    assert "output_tensor_list[0]" in failure.message


# -- adding an op is adding one entry ----------------------------------------------------------


class AllReduceCoalesced(OpInfo):
    """``all_reduce_coalesced`` of two tensors: not one of fuzzdist's ops.  This definition, registered
    by the ``coalesced`` fixture only, is all it takes for the engine to probe, fuzz and check it."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensors = [p.output(f"tensors[{j}]", call.spec.shape, input_values(call, ctx.rank, j)) for j in range(2)]
        p.issue = lambda a: pg.allreduce_coalesced(
            [real(t) for t in tensors], options(AllreduceCoalescedOptions, a, reduceOp=reduce_op_enum(call.reduce_op))
        )
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Any]]]:
        return {
            r: [(f"tensors[{j}]", Reduction([input_values(call, i, j) for i in range(world)])) for j in range(2)]
            for r in range(world)
        }

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        return [f"rank {r} tensors[{j}]: {input_values(call, r, j).tolist()}" for r in range(world) for j in range(2)]


ALLREDUCE_COALESCED = AllReduceCoalesced(
    "allreduce_coalesced", "allreduce_coalesced", "all_reduce_coalesced", reduces=True
)


class LastTensorDroppingGroup(dist.ProcessGroup):
    """gloo, except that allreduce_coalesced reduces only the first tensor: the others keep each rank's own."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        super().__init__(rank, world_size)
        self.inner = gloo(rank, world_size, store, torch.device("cpu"))

    def getBackendName(self) -> str:
        return "planted:LastTensorDroppingGroup"

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self.inner.allreduce_coalesced(tensors[:1], opts)


def last_tensor_dropping(rank: int, world_size: int, store: Any, device: torch.device) -> dist.ProcessGroup:
    return LastTensorDroppingGroup(rank, world_size, store)


@pytest.fixture
def coalesced(monkeypatch):
    """``allreduce_coalesced`` registered for this test only (the ranks get it with each OpCall)."""
    monkeypatch.setitem(OPS, ALLREDUCE_COALESCED.name, ALLREDUCE_COALESCED)
    return ALLREDUCE_COALESCED.name


def test_an_op_added_in_one_entry_is_probed_and_fuzzed(pools, coalesced):
    report = check_process_group(
        "fuzzdist.conformance:gloo",
        world_sizes=(1, 2, 3),
        ops=(coalesced, ASYNC),
        max_examples=8,
        pools=pools,
        settings=REPEATABLE,
    )
    assert report.conforms, report.summary()
    assert [report.ops[name].status for name in (coalesced, ASYNC)] == ["conforms", "conforms"]
    assert report.ops[coalesced].method == "allreduce_coalesced" and report.ops[coalesced].examples > 0
    # probed per ReduceOp and dtype like the built-in ops: what gloo refuses is reported, not fuzzed
    assert any(line.startswith("ReduceOp.SUM: ") and "float32" in line for line in report.ops[coalesced].supported)
    assert any(u.op == coalesced and "int16" in u.dtypes for u in report.unsupported)


def test_a_planted_fault_in_an_op_added_in_one_entry_is_caught_and_shrunk(pools, coalesced):
    report = check_process_group(
        last_tensor_dropping,
        world_sizes=(1, 2, 3),
        ops=(coalesced,),
        dtypes=FEW_DTYPES,
        pools=pools,
        settings=settings(REPEATABLE, max_examples=200),
    )
    [failure] = report.failures
    assert failure.op == coalesced and failure.world_size == 2  # with one rank nothing shows
    assert failure.call.reduce_op == "SUM" and failure.call.spec.dtype == torch.float32
    assert failure.call.spec.numel == 1
    message = failure.message
    assert "allreduce_coalesced does not conform: allreduce_coalesced(op=ReduceOp.SUM" in message
    assert "(ProcessGroup.allreduce_coalesced, called as torch.distributed.all_reduce_coalesced calls it)" in message
    assert "rank 0, tensors[1]:" in message and "rank 0, tensors[0]" not in message  # only the dropped one
    assert "expected" in message and "actual" in message and "rank 1 tensors[1]: [" in message


# -- bad factories -----------------------------------------------------------------------------


class StackFormCrashOverAllreduce(StackFormCrashGroup):
    """``stack_form_crash`` whose plain reduce_scatter_tensor is gloo's allreduce of the whole input, each
    rank keeping its chunk: right for every ReduceOp gloo's allreduce takes, also on a torch whose gloo
    reduce_scatter_tensor sums whatever the op (2.6.0: known bug gloo-reduce-scatter-tensor-ignores-op,
    which the registry can't excuse for a group that isn't gloo), so the crashing stack form stays the
    group's one defect."""

    def _plain_form(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # noqa: A002
        if input.dim() == output.dim() + 1:
            os._exit(7)  # the planted crash, as in StackFormCrashGroup
        reduced = input.contiguous().clone()
        reduce_opts = dist.AllreduceOptions()
        reduce_opts.reduceOp = opts.reduceOp
        self.inner.allreduce([reduced], reduce_opts).wait()
        output.copy_(reduced.reshape(self.world, -1)[self.rank()].reshape(output.shape))
        return completed_work([output])

    reduce_scatter_single = _reduce_scatter_base = _plain_form


def stack_form_crash_over_allreduce(rank: int, world_size: int, store: Any, device: torch.device) -> dist.ProcessGroup:
    return StackFormCrashOverAllreduce(rank, world_size, store)


def test_an_argument_form_that_crashes_the_ranks_fails_that_form_only(pools):
    """The stack form's probe crashing the ranks (no known bug: not gloo) is a failure that names the
    form, and the plain reduce_scatter_tensor is still fuzzed: one defect does not hide the rest."""
    report = check_process_group(
        stack_form_crash_over_allreduce,
        world_sizes=(2,),
        ops=("reduce_scatter_tensor",),
        dtypes=(torch.float32,),
        max_examples=3,
        pools=pools,
        settings=REPEATABLE,
    )
    op = report.ops["reduce_scatter_tensor"]
    assert op.status == "failed" and op.failure is not None and not op.known
    assert "form='stack'" in op.failure.message and "plain form was fuzzed" in op.failure.message
    assert op.examples >= 3  # the plain form ran
    assert report.supported == []


def test_a_factory_that_cannot_be_imported_is_bad_input():
    with pytest.raises(FactoryError, match="can't import module"):
        check_process_group("no_such_module_for_fuzzdist:make")
    with pytest.raises(FactoryError, match="module:callable"):
        check_process_group("no colon")
    with pytest.raises(FactoryError, match="lambda"):
        check_process_group(lambda rank, world_size, store, device: None)


def test_a_factory_that_fails_on_the_ranks_is_a_failure(pools):
    report = check_process_group(
        "helpers.planted_backends:lonely_rank", world_sizes=(2,), ops=("allreduce",), pools=pools, settings=REPEATABLE
    )
    assert not report.conforms
    assert "AssertionError" in report.factory_errors[2]
    report = check_process_group(
        "helpers.planted_backends:not_a_group", world_sizes=(1,), ops=("allreduce",), pools=pools, settings=REPEATABLE
    )
    assert "not a torch.distributed ProcessGroup" in report.factory_errors[1]


def test_a_group_that_forgets_its_rank_is_a_failure_and_its_operations_are_checked_all_the_same(pools):
    # forwards size() but says rank 0 on every rank; and its broadcast ignores the root
    report = check_process_group(
        "helpers.planted_backends:forgets_rank",
        world_sizes=(1, 2, 3),
        ops=("allgather", "broadcast"),
        dtypes=(torch.float32,),
        pools=pools,
        settings=settings(REPEATABLE, max_examples=30),
    )
    assert sorted(report.factory_errors) == [2, 3]  # rank 0 of 1 is right
    assert "rank 1's group says rank 0 of 2" in report.factory_errors[2]
    assert "rank 2's group says rank 0 of 3" in report.factory_errors[3]
    assert "checked all the same" in report.factory_errors[2]
    # the rank defect, then every collective, at every world size, in the same run
    allgather, broadcast = report.ops["allgather"], report.ops["broadcast"]
    assert allgather.status == "conforms" and allgather.world_sizes == [1, 2, 3], report.summary()
    assert broadcast.status == "failed" and broadcast.world_sizes == [1, 2, 3], report.summary()
    assert broadcast.failure is not None and broadcast.failure.world_size == 2 and broadcast.failure.call.root == 1
    assert [f.op for f in report.failures] == ["factory", "factory", "broadcast"]
    summary = report.summary()
    assert "factory failed at world size 2: the group's rank()/size() disagree" in summary
    assert "FAILURE in broadcast" in summary and "3 FAILURE(S)" in summary
    assert report.to_json()["ops"]["allgather"]["world_sizes"] == [1, 2, 3]


# -- the reference and the unsupported classification (no ranks) -------------------------------


def test_unsupported_means_not_implemented_never_a_wrong_result():
    assert unsupported_reason("builtins.NotImplementedError", "no alltoall") == "NotImplementedError: no alltoall"
    assert unsupported_reason("builtins.RuntimeError", "Invalid scalar type") == "RuntimeError: Invalid scalar type"
    reason = unsupported_reason("builtins.RuntimeError", "No backend type associated with device type cpu", "barrier")
    assert reason.startswith("the group does not implement barrier()")
    assert unsupported_reason("builtins.RuntimeError", "allreduce: ranks disagree") is None
    assert unsupported_reason("builtins.AssertionError", "world == 1") is None


def test_reference_accepts_every_summation_order_and_nothing_else():
    xs = [torch.tensor([1e8], dtype=torch.float32), torch.tensor([1.0]), torch.tensor([-1e8])]
    left = (xs[0] + xs[1]) + xs[2]  # 0.0 in float32
    right = xs[0] + (xs[1] + xs[2])  # 0.0 too, but (x0 + x2) + x1 is 1.0
    other = (xs[0] + xs[2]) + xs[1]
    for result in (left, right, other):
        assert reduction_problem("sum", "SUM", xs, result) is None
    assert "expected" in str(reduction_problem("sum", "SUM", xs, torch.tensor([0.5])))


def test_reference_nan_and_overflow_rules():
    nan, inf, big = float("nan"), float("inf"), torch.finfo(torch.float32).max
    xs = [torch.tensor([0.0]), torch.tensor([nan]), torch.tensor([-inf])]
    for result in (0.0, nan, -inf):  # with a NaN input, MIN may give NaN or any input
        assert reduction_problem("min", "MIN", xs, torch.tensor([result])) is None
    assert reduction_problem("min", "MIN", xs, torch.tensor([5.0])) is not None
    ys = [torch.tensor([big]), torch.tensor([-inf]), torch.tensor([big])]
    assert reduction_problem("avg", "AVG", ys, torch.tensor([nan])) is None  # big + big overflowed
    bools = [torch.tensor([True, False]), torch.tensor([True, False])]
    two = torch.tensor([2, 0], dtype=torch.uint8).view(torch.bool)  # a byte-summing backend (gloo's SUM)
    assert "hold a byte other than 0 and 1 (bytes [2]" in str(reduction_problem("sum", "SUM", bools, two))
    assert reduction_problem("sum", "SUM", bools, torch.tensor([True, False])) is None
    assert "expected" in str(reduction_problem("sum", "SUM", bools, torch.tensor([False, False])))  # wrong by truth


# -- the command line ----------------------------------------------------------------------------


def check_pg(*argv: str) -> int:
    return main(["check-pg", *argv])


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["no colon"], ["'module:callable'"]),
        (["no_such_module_for_fuzzdist:make"], ["can't import module 'no_such_module_for_fuzzdist'"]),
        (["fuzzdist.conformance:gloo", "--ops", "allreduce,bogus"], ["argument --ops: unknown ops bogus; choose from"]),
        (["fuzzdist.conformance:gloo", "--world-size", "0"], ["argument --world-size/-w: '0' must be at least 1"]),
        (["fuzzdist.conformance:gloo", "-w", "two"], ["argument --world-size/-w: 'two' is not a whole number"]),
        (["fuzzdist.conformance:gloo", "--max-examples", "0"], ["argument --max-examples: '0' must be at least 1"]),
        (["fuzzdist.conformance:gloo", "--duration", "0"], ["bad --duration '0'", "longer than 0s"]),
        (["fuzzdist.conformance:gloo", "--duration", "5x"], ["bad --duration '5x'", "e.g. 30s, 10m"]),
        (["fuzzdist.conformance:gloo", "--timeout", "-1"], ["argument --timeout: '-1' must be more than 0 seconds"]),
        (["fuzzdist.conformance:gloo", "--max-bytes", "many"], ["argument --max-bytes: 'many' is not a whole number"]),
        ([], ["the following arguments are required: FACTORY"]),
    ],
)
def test_check_pg_bad_input_is_one_line_and_exit_2(argv, expected, capsys):
    """The same convention as fuzzdist run and replay: one line on stderr, exit code 2, nothing on stdout."""
    assert check_pg(*argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("fuzzdist check-pg: error: ") and err.count("\n") == 1, err
    for text in expected:
        assert text in err, err


def test_check_pg_exit_codes(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert (
        check_pg(
            "fuzzdist.conformance:gloo",
            "-w",
            "1",
            "--ops",
            "allreduce,broadcast",
            "--max-examples",
            "3",
            "--no-database",
            "--json",
            str(out),
        )
        == 0
    )
    assert "CONFORMS" in capsys.readouterr().out
    assert json.loads(out.read_text())["conforms"] is True
    assert (
        check_pg(
            "helpers.planted_backends:wrong_source_broadcast",
            "-w",
            "2",
            "--ops",
            "broadcast",
            "--max-examples",
            "50",
            "--no-database",
            "--seed",
            "0",
        )
        == 1
    )
    printed = capsys.readouterr().out
    assert "FAILURE in broadcast" in printed and "broadcast(src=1" in printed


# -- the pytest plugin ----------------------------------------------------------------------------


def test_pytest_option_runs_the_properties_against_the_given_factory(pytester):
    registered = any(
        ep.value == "fuzzdist.conformance.plugin" for ep in importlib.metadata.entry_points(group="pytest11")
    )
    args = [] if registered else ["-p", "fuzzdist.conformance.plugin"]
    result = pytester.runpytest_subprocess(
        *args,
        str(REPO / "properties" / "test_pg_conformance.py"),
        "-k",
        "broadcast or barrier",
        "--fuzzdist-pg",
        "helpers.planted_backends:wrong_source_broadcast",
        "--fuzzdist-pg-world-sizes",
        "2",
        "--hypothesis-profile=ci",
        "-p",
        "no:cacheprovider",
        f"--rootdir={REPO}",
        "-o",
        f"pythonpath={REPO / 'tests'}",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_pg_conforms?broadcast?*", "*broadcast does not conform*src=1*"])

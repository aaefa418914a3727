"""The known torch bugs check-pg runs into on gloo, and the functional-collectives property through the same
gloo kernels (``where`` names both).

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import DENSE_NON_CONTIGUOUS
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Problem, Symptom

_REDUCING = ("allreduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base")
_FUNCTIONAL_REDUCING = ("all_reduce", "reduce_scatter_single", "reduce_scatter_tensor")  # the functional property's


def _on_gloo(example: Mapping[str, Any]) -> bool:
    """Whether check-pg (or the functional property) ran on gloo (or a group that names itself after it):
    the same symptom on another backend is that backend's own bug."""
    return evidence.ran_on_gloo(example)


def _calls_of(example: Mapping[str, Any]) -> list[Any]:
    """The calls a check-pg example (``call``: the op check's one; ``calls``: the async check's) or a functional
    example (its case's ``calls``) ran, by index."""
    if example.get("call") is not None:
        return [example["call"]]
    return list(example.get("calls", ()) or getattr(example.get("case"), "calls", ()))


def _call_of(example: Mapping[str, Any], problem: Problem) -> Any:
    """The call ``problem`` is about (the op check's one call where the problem names none), or None where
    the problem's call index or op doesn't match the example's calls."""
    calls = _calls_of(example)
    index = 0 if problem.call is None and example.get("call") is not None else problem.call
    if index is None or index >= len(calls):
        return None
    call = calls[index]
    return call if problem.op in (None, call.op) else None


def _every_call_problem(
    example: Mapping[str, Any], failure: BaseException, shows_it: Callable[[Any, Problem], bool]
) -> bool:
    """On gloo, every problem a check-pg check or the functional property reported shows the bug:
    ``shows_it(call, problem)`` for the call the problem is about."""
    problems = evidence.reported(failure)
    if not problems or not _on_gloo(example):
        return False
    for problem in problems:
        call = _call_of(example, problem)
        if call is None or not shows_it(call, problem):
            return False
    return True


def _is_bool_sum(call: Any) -> bool:
    import torch

    reducing = call.op in _REDUCING or call.op in _FUNCTIONAL_REDUCING
    return bool(reducing and call.reduce_op == "SUM" and call.spec.dtype == torch.bool)


def _bool_sum_any(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg or the functional property on gloo: every problem is a bool byte other than 0/1, in a bool
    SUM call (the same gloo kernel as c10d's; the functional property met it in ``fuzzdist run``)."""
    return _every_call_problem(
        example, failure, lambda call, problem: problem.symptom is Symptom.BOOL_BYTES_NOT_0_OR_1 and _is_bool_sum(call)
    )


register(
    KnownBug(
        id="gloo-bool-sum-stores-2",
        where=(*(f"check-pg:{op}" for op in (*_REDUCING, "async")), "functional"),
        recognise=_bool_sum_any,
    )
)


def _second_wait_blocks(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's async check on gloo: every rank's error is a repeated wait() that timed out
    (:attr:`Symptom.REPEAT_WAIT_BLOCKED`, only on a timeout) on a send_recv call that the wait order repeats."""
    errors = evidence.raised(failure)
    if not errors or not _on_gloo(example):
        return False
    calls, waits = list(example.get("calls", ())), list(example.get("wait_order", ()))
    for problem in errors:
        i = problem.call
        if problem.symptom is not Symptom.REPEAT_WAIT_BLOCKED or i is None or i >= len(calls):
            return False
        if calls[i].op != "send_recv" or problem.op != "send_recv" or waits.count(i) < 2:
            return False
    return True


register(KnownBug(id="gloo-p2p-second-wait-blocks", where=("check-pg:async",), recognise=_second_wait_blocks))


_STACK_CHECK = "outputShape[0] * worldSize == inputShape[0]"  # gloo's CHECK on reduce_scatter_tensor's stack form


def _reduce_scatter_stack_aborts(example: Mapping[str, Any], failure: BaseException) -> bool:
    # torch 2.13 raises the CHECK's fatal message as a RuntimeError on every rank where the ranks'
    # C++ lets it (check-pg's probe sees that); where it aborts the process instead (torch 2.6.0: SIGABRT),
    # a RankCrash carries the same message in the rank's last output.
    said = (evidence.reported(failure) or []) + evidence.raised(failure) + evidence.died(failure)
    return (
        getattr(example.get("call"), "form", None) == "stack"
        and _on_gloo(example)
        and any(evidence.says(problem, _STACK_CHECK) for problem in said)
    )


register(
    KnownBug(
        id="gloo-reduce-scatter-stack-aborts",
        where=("check-pg:reduce_scatter_tensor",),
        recognise=_reduce_scatter_stack_aborts,
    )
)


# torch 2.6.0: gloo's _reduce_scatter_base (reduce_scatter_tensor, and the functional reduce_scatter_tensor
# over it) reduces with SUM whatever the op.  fuzzdist.toolkit.oracle's record of a wrong reduction holds the
# first wrong element (index, got) and every rank's input there (inputs_at, inputs).
_SCATTERING = ("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single")


def _got_the_sum(problem: Problem, dtype: Any) -> bool:
    """``problem``'s first wrong element is the SUM of the ranks' inputs at its index (within the float
    error of any order of sums; integers wrap as the dtype does; bools by truth value, or by the bytes
    shown, which count the True inputs)."""
    import torch

    values = problem.inputs
    if not values:
        return False
    if dtype == torch.bool:  # the sum's truth is any(); its bytes, where shown, count the True inputs
        trues = sum(v is True for v in values)
        if problem.symptom is Symptom.BOOL_BYTES_NOT_0_OR_1:
            return trues in problem.got
        return problem.index == problem.inputs_at and problem.got == (trues > 0)
    if problem.index is None or problem.index != problem.inputs_at:
        return False
    try:
        if dtype.is_floating_point or dtype.is_complex:
            got, xs = float(problem.got), [float(v) for v in values]
            try:
                total = sum(xs) if any(math.isinf(x) for x in xs) else math.fsum(xs)  # fsum refuses inf - inf
            except OverflowError:  # finite inputs whose sum leaves float64's range: each order's float64 sum
                return len(xs) <= 5 and got in {sum(order) for order in itertools.permutations(xs)}
            if got == total or (math.isnan(got) and math.isnan(total)):  # NaN: an input NaN, or inf - inf
                return True
            real = torch.empty(0, dtype=dtype).real.dtype if dtype.is_complex else dtype  # a real view's
            if got == torch.tensor(total, dtype=torch.float64).to(real).item():  # rounded (float16 overflows)
                return True
            if not math.isfinite(total) or not math.isfinite(got):
                return False
            bound = len(xs) * torch.finfo(real).eps * math.fsum(abs(x) for x in xs)
            return abs(got - total) <= bound
        total_int = torch.tensor([int(v) for v in values], dtype=torch.int64).sum().to(dtype).item()
        return int(problem.got) == total_int
    except (ValueError, OverflowError, RuntimeError, TypeError):
        return False


def _scatter_call_got_the_sum(call: Any, problem: Problem) -> bool:
    return bool(call.op in _SCATTERING and call.reduce_op != "SUM" and _got_the_sum(problem, call.spec.dtype))


def _reduce_scatter_tensor_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    """On gloo, every problem is a reduce_scatter_tensor-like call with an op other than SUM whose first
    wrong element is the SUM of the inputs there: check-pg's op check (the call), its async check (the
    call each problem names), the functional property (the call each rank's problem names)."""
    return _every_call_problem(example, failure, _scatter_call_got_the_sum)


register(
    KnownBug(
        id="gloo-reduce-scatter-tensor-ignores-op",
        where=("check-pg:reduce_scatter_tensor", "check-pg:_reduce_scatter_base", "check-pg:async", "functional"),
        recognise=_reduce_scatter_tensor_ignores_op,
    )
)


def _gather_ignores_input_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's gather (or its async check's gather calls) on gloo, a non-contiguous input: every
    problem is a gathered slot that holds its source's elements in the order of the source's memory
    (:attr:`Symptom.MEMORY_ORDER`, which the op's check sets only on a gathered slot)."""
    return _every_call_problem(
        example,
        failure,
        lambda call, problem: (
            call.op == "gather" and call.spec.layout in DENSE_NON_CONTIGUOUS and problem.symptom is Symptom.MEMORY_ORDER
        ),
    )


register(
    KnownBug(
        id="gloo-gather-ignores-input-strides",
        where=("check-pg:gather", "check-pg:async"),
        recognise=_gather_ignores_input_strides,
    )
)


# torch 2.6.0: a step of gloo's float16 reduction that brings float16's smallest subnormal (2**-24) into a partial
# result of 1.0 (an input, or a partial sum) gives 2**-24, as if the 1.0 were not there (1.0 brought into 2**-24
# is right); which elements it meets depends on where they sit in the tensor, which rank reduces which part
_F16_TINY = 2.0**-24
_F16_REDUCING = ("allreduce", "reduce", "reduce_scatter_tensor", "_reduce_scatter_base")


def _reduced_without_a_one(reduce_op: str, xs: list[float], got: float) -> bool:
    """Whether ``got`` is what the float16 SUM or MAX of the inputs ``xs``, folded in some order, gives
    when each step that brings 2**-24 into a partial result of 1.0 gives 2**-24."""
    import torch

    tiny = _F16_TINY
    if tiny not in xs or len(xs) > 6 or math.isnan(got) or any(math.isnan(x) for x in xs):
        return False

    def step(a: float, b: float) -> float:
        if a == 1.0 and b == tiny:
            return tiny
        if reduce_op == "MAX":
            return max(a, b)
        return float(torch.tensor(a, dtype=torch.float16) + torch.tensor(b, dtype=torch.float16))

    for order in itertools.permutations(xs):
        acc = order[0]
        for x in order[1:]:
            acc = step(acc, x)
        if acc == got:
            return True
    return False


def _float16_drops_one(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's allreduce, reduce or reduce_scatter_tensor (2.6.0's gloo builds it on allreduce), or its
    async check's calls of them, on gloo, float16, SUM or MAX: every problem's first wrong element is what
    the reduction of the ranks' inputs there gives, in some order, when a step that brings 2**-24 into a
    partial result of 1.0 gives 2**-24 (seen at 2 and 3 ranks, either rank holding either value)."""
    import torch

    def shows_it(call: Any, problem: Problem) -> bool:
        if (
            call.op not in _F16_REDUCING
            or call.reduce_op not in ("SUM", "MAX")
            or call.spec.dtype != torch.float16
            or not problem.inputs
            or problem.index is None
            or problem.index != problem.inputs_at
        ):
            return False
        try:
            got, xs = float(problem.got), [float(v) for v in problem.inputs]
        except (TypeError, ValueError):
            return False
        return _reduced_without_a_one(call.reduce_op, xs, got)

    return _every_call_problem(example, failure, shows_it)


register(
    KnownBug(
        id="gloo-float16-reduce-drops-one",
        where=tuple(f"check-pg:{op}" for op in (*_F16_REDUCING, "async")),
        recognise=_float16_drops_one,
    )
)

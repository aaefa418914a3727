"""The torch bugs fuzzdist's properties and ``check-pg`` have run into (see :mod:`fuzzdist.known_bugs`).

One :func:`~fuzzdist.known_bugs.register` call per bug, each with its standalone reproducer in
``docs/findings/`` and its entry in ``docs/findings.md``.  A predicate looks at the symptom, not only
at the inputs: a different failure on the same inputs must stay a failure.  Where a property can
tell that a wrong result is exactly what the bug computes, its rank function says so in the failure
(``STRIDES_IGNORED``, ``FORWARD_OP_ON_GRADS``), and the predicate asks for that on every rank.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from fuzzdist.errors import RankError, RankTimeout
from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.known_bugs.symptoms import SUBGROUP_MAKING, SUBGROUP_OPS
from fuzzdist.problems import Kind, Problem, Symptom

SEEN_ON = ("2.13",)
_DENSE_NON_CONTIGUOUS = ("transposed", "channels_last")  # the layouts whose memory order differs


def _problems(failure: BaseException) -> list[Problem] | None:
    """Every problem a property's ranks reported; None if ``failure`` is not a property's failure."""
    return evidence.reported(failure)


def _every_problem(failure: BaseException, test: Callable[[Problem], bool]) -> bool:
    problems = _problems(failure) or []
    return bool(problems) and all(test(p) for p in problems)


def _shows(symptom: Symptom) -> Callable[[Problem], bool]:
    """A test of a problem: it shows ``symptom``."""
    return lambda problem: problem.symptom is symptom


# -- broadcast ---------------------------------------------------------------------------------


def _broadcast_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (example["spec"].layout in _DENSE_NON_CONTIGUOUS
            and _every_problem(failure, _shows(Symptom.MEMORY_ORDER)))


register(KnownBug(
    id="gloo-broadcast-ignores-strides", kind="wrong result",
    summary="gloo's broadcast sends a non-contiguous source tensor's memory as if it were row-major: "
            "the receivers get its elements in memory order",
    where=("broadcast",), recognise=_broadcast_ignores_strides, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/192920",
    reproducer="docs/findings/gloo-broadcast-ignores-strides.py"))


# -- torch.distributed.nn collectives ----------------------------------------------------------


def _collective(name: str, example: Mapping[str, Any]) -> bool:
    return bool(example.get("name") == name)


def _all_to_all_scatter_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_to_all", example) and example["case"].out_layout in _DENSE_NON_CONTIGUOUS
            and _every_problem(failure, _shows(Symptom.STRIDES_IGNORED)))


register(KnownBug(
    id="gloo-scatter-ignores-strides", kind="wrong result",
    summary="gloo's scatter writes row-major bytes into the memory of a non-contiguous output tensor "
            "(torch.distributed.nn.all_to_all on gloo is built from scatters)",
    where=("collectives",), recognise=_all_to_all_scatter_ignores_strides, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/24836",
    reproducer="docs/findings/gloo-scatter-ignores-strides.py"))


def _all_gather_grad_transposed(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_gather", example) and example["case"].grad_layout in _DENSE_NON_CONTIGUOUS
            and _every_problem(failure, _shows(Symptom.STRIDES_IGNORED)))


register(KnownBug(
    id="nn-all-gather-grad-transposed", kind="wrong result",
    summary="torch.distributed.nn.all_gather on gloo: a transposed (or channels_last) upstream gradient "
            "gives a wrong input gradient (its backward scatters into empty_like(grad), and gloo's "
            "scatter ignores strides)",
    where=("collectives",), recognise=_all_gather_grad_transposed, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-gather-grad-transposed.py"))


def _all_reduce_backward_non_sum(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_reduce", example) and example["case"].op in ("PRODUCT", "MIN", "MAX")
            and _every_problem(failure, _shows(Symptom.FORWARD_OP_ON_GRADS)))


register(KnownBug(
    id="nn-all-reduce-backward-non-sum", kind="wrong result",
    summary="torch.distributed.nn.all_reduce's backward all-reduces the upstream gradients with the "
            "forward's op: wrong input gradients for PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_all_reduce_backward_non_sum, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-reduce-backward-non-sum.py"))


def _reduce_backward_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (example.get("name") in ("reduce", "reduce_scatter")
            and example["case"].op in ("AVG", "PRODUCT", "MIN", "MAX")
            and _every_problem(failure, _shows(Symptom.SUM_GRAD_FOR_ANY_OP)))


register(KnownBug(
    id="nn-reduce-backward-ignores-op", kind="wrong result",
    summary="torch.distributed.nn.reduce's and reduce_scatter's backward ignore the forward's op (a broadcast, "
            "an all_gather of the upstream gradients): every input gradient is SUM's, wrong for AVG, "
            "PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_reduce_backward_ignores_op, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-reduce-backward-ignores-op.py"))


# -- check-pg (fuzzdist.conformance) -----------------------------------------------------------

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


def _every_call_problem(example: Mapping[str, Any], failure: BaseException,
                        shows_it: Callable[[Any, Problem], bool]) -> bool:
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
    return _every_call_problem(example, failure, lambda call, problem: (
        problem.symptom is Symptom.BOOL_BYTES_NOT_0_OR_1 and _is_bool_sum(call)))


register(KnownBug(
    id="gloo-bool-sum-stores-2", kind="wrong result",
    summary="gloo's SUM over bool tensors adds the bytes: the result holds the byte 2 where two ranks "
            "hold True (right by truth value, but not a valid bool)",
    where=(*(f"check-pg:{op}" for op in (*_REDUCING, "async")), "functional"), recognise=_bool_sum_any,
    seen_on=SEEN_ON, reproducer="docs/findings/gloo-bool-sum-stores-2.py"))


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


register(KnownBug(
    id="gloo-p2p-second-wait-blocks", kind="hang",
    summary="gloo: a second wait() on a send/recv Work that already completed blocks until its timeout "
            "(and the timeout then closes the pair)",
    where=("check-pg:async",), recognise=_second_wait_blocks, seen_on=SEEN_ON,
    reproducer="docs/findings/gloo-p2p-second-wait-blocks.py"))


_STACK_CHECK = "outputShape[0] * worldSize == inputShape[0]"  # gloo's CHECK on reduce_scatter_tensor's stack form


def _reduce_scatter_stack_aborts(example: Mapping[str, Any], failure: BaseException) -> bool:
    # torch 2.13 raises the CHECK's fatal message as a RuntimeError on every rank where the ranks'
    # C++ lets it (check-pg's probe sees that); where it aborts the process instead (torch 2.6.0: SIGABRT),
    # a RankCrash carries the same message in the rank's last output.
    said = (evidence.reported(failure) or []) + evidence.raised(failure) + evidence.died(failure)
    return (getattr(example.get("call"), "form", None) == "stack" and _on_gloo(example)
            and any(evidence.says(problem, _STACK_CHECK) for problem in said))


register(KnownBug(
    id="gloo-reduce-scatter-stack-aborts", kind="crash",
    summary="gloo fails a fatal CHECK (outputShape[0] * worldSize == inputShape[0]) on reduce_scatter_tensor's "
            "documented 'stack' input form",
    # 2.6.0 aborts the rank (SIGABRT) on the CHECK; 2.13 and 2.14 raise it (docs/findings.md)
    where=("check-pg:reduce_scatter_tensor",), recognise=_reduce_scatter_stack_aborts, seen_on=("2.6", "2.13", "2.14"),
    reproducer="docs/findings/gloo-reduce-scatter-stack-aborts.py"))


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


register(KnownBug(
    id="gloo-reduce-scatter-tensor-ignores-op", kind="wrong result",
    summary="torch 2.6.0: gloo's reduce_scatter_tensor (_reduce_scatter_base, and the functional "
            "reduce_scatter_tensor over it) reduces with SUM whatever the op: PRODUCT, MIN and MAX give the sum "
            "(AVG, documented for NCCL only there, too)",
    where=("check-pg:reduce_scatter_tensor", "check-pg:_reduce_scatter_base", "check-pg:async", "functional"),
    recognise=_reduce_scatter_tensor_ignores_op, seen_on=("2.6",),
    reproducer="docs/findings/gloo-reduce-scatter-tensor-ignores-op.py"))


def _gather_ignores_input_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's gather (or its async check's gather calls) on gloo, a non-contiguous input: every
    problem is a gathered slot that holds its source's elements in the order of the source's memory
    (:attr:`Symptom.MEMORY_ORDER`, which the op's check sets only on a gathered slot)."""
    return _every_call_problem(example, failure, lambda call, problem: (
        call.op == "gather" and call.spec.layout in _DENSE_NON_CONTIGUOUS and problem.symptom is Symptom.MEMORY_ORDER))


register(KnownBug(
    id="gloo-gather-ignores-input-strides", kind="wrong result",
    summary="torch 2.6.0: gloo's gather sends a non-contiguous input tensor's memory as if it were row-major: "
            "the destination gets its elements in memory order",
    where=("check-pg:gather", "check-pg:async"), recognise=_gather_ignores_input_strides, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/issues/74809",
    reproducer="docs/findings/gloo-gather-ignores-input-strides.py"))


# torch 2.6.0: a step of gloo's float16 reduction that brings float16's smallest subnormal (2**-24) into a partial
# result of 1.0 (an input, or a partial sum) gives 2**-24, as if the 1.0 were not there (1.0 brought into 2**-24
# is right); which elements it meets depends on where they sit in the tensor, which rank reduces which part
_F16_TINY = 2.0 ** -24
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
        if (call.op not in _F16_REDUCING or call.reduce_op not in ("SUM", "MAX") or call.spec.dtype != torch.float16
                or not problem.inputs or problem.index is None or problem.index != problem.inputs_at):
            return False
        try:
            got, xs = float(problem.got), [float(v) for v in problem.inputs]
        except (TypeError, ValueError):
            return False
        return _reduced_without_a_one(call.reduce_op, xs, got)

    return _every_call_problem(example, failure, shows_it)


register(KnownBug(
    id="gloo-float16-reduce-drops-one", kind="wrong result",
    summary="torch 2.6.0: gloo's float16 all_reduce and reduce (SUM, MAX) can combine 2**-24 and 1.0 into 2**-24, "
            "as if the 1.0 were not there (2 ranks holding them: 2**-24 where 1.0 is expected)",
    where=tuple(f"check-pg:{op}" for op in (*_F16_REDUCING, "async")), recognise=_float16_drops_one,
    seen_on=("2.6",), upstream="https://github.com/pytorch/pytorch/issues/152300",
    reproducer="docs/findings/gloo-float16-reduce-drops-one.py"))


# -- DTensor -------------------------------------------------------------------------------------


def _has_empty_local_shard(case: Any) -> bool:
    """Whether some rank's local shard of the DTensor round trip is empty at some stage: the tensor has an
    empty dim, or a stage shards a dim over a mesh dim of more ranks than the dim has elements."""
    spec, mesh_shape = getattr(case, "spec", None), getattr(case, "mesh_shape", None)
    if spec is None:
        return False
    shape = tuple(spec.shape)
    if 0 in shape:
        return True
    if mesh_shape is None:
        return False
    stages = (tuple(getattr(case, "placements", ())),) + tuple(getattr(case, "redistributions", ()))
    return any(name != "R" and shape[int(name[1:]) % len(shape)] < mesh_shape[m]
               for stage in stages for m, name in enumerate(stage) if shape)


def _is_dtensor_empty_dim_negative_padding(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: some rank's local shard is empty at some stage, and every failed rank raised pad_tensor's
    "negative padding" RuntimeError (the DTensor property's round trip); ranks whose shard is not empty
    may go on into the all-gather the failed ones never join, so stragglers are allowed."""
    errors = evidence.raised(failure)
    if not _has_empty_local_shard(example.get("case")) or not errors:
        return False
    return all(evidence.raised_a(p, RuntimeError) and evidence.says(p, "negative padding")
               and evidence.says(p, "pad_tensor") for p in errors)


register(KnownBug(
    id="dtensor-empty-shard-full-tensor-pads-negative", kind="crash",
    summary="torch 2.6.0: full_tensor() of a DTensor with an empty dim sharded over more ranks than it has rows "
            "(a (1, 0) tensor, Shard(0), 4 ranks) raises pad_tensor's 'negative padding' RuntimeError; so does "
            "a rank whose local shard is empty in two dims (a (1, 1) tensor as (Shard(1), Shard(0)) on a 2x2 "
            "mesh: rank 3's (0, 0))",
    where=("dtensor",), recognise=_is_dtensor_empty_dim_negative_padding, seen_on=("2.6",),
    reproducer="docs/findings/dtensor-empty-shard-full-tensor-pads-negative.py"))


# -- distributed checkpoint --------------------------------------------------------------------------


def _piece_2_6(size: int, pieces: int, index: int) -> tuple[int, int]:
    """(length, offset) of piece ``index`` of a dim of ``size`` split in ``pieces``, as torch 2.6.0's
    ``Shard._local_shard_size_on_dim`` gives it (``torch.chunk``'s lengths; an empty piece's offset is the end
    of the dim where its start would lie past the end, else its start)."""
    if size % pieces == 0:
        return size // pieces, size // pieces * index
    step = -(-size // pieces)
    start = step * index
    return (0, size) if size < start else (min(size, start + step) - start, start)


def _empty_piece_on_another(leaf: Any) -> bool:
    """Whether a checkpoint leaf is a DTensor saved with one tensor dim sharded over both dims of a 2-D mesh
    (``("S0", "S0")``) where torch 2.6.0's ``compute_local_shape_and_global_offset`` puts a rank's empty piece
    at the offset of another rank's non-empty piece.  Its arithmetic, read in 2.6.0's source: the inner offset
    replaces the outer one where the outer is not larger, else is added to it (a (2,) tensor on a 2x2 mesh:
    the empty pieces of ranks 1 and 3 at offset 1, rank 2's element's).  Checked on 2.6.0: that layout's save
    fails; (1,), (3,), (5,), (6,), (7,) and a (2, 1) tensor's dim 1 on 2x2, (2,) on 1x4 and 4x1, (3,) on 1x4
    save."""
    spec, mesh = getattr(leaf, "spec", None), getattr(leaf, "save_mesh", None)
    names = getattr(leaf, "save_placements", None)
    if spec is None or mesh is None or names is None or len(mesh) != 2 or len(names) != 2:
        return False
    shape = tuple(spec.shape)
    if not shape or names[0] == "R" or names[0] != names[1]:
        return False
    pieces = []
    outer_size = shape[int(names[0][1:]) % len(shape)]
    for i in range(mesh[0]):
        outer_length, outer_offset = _piece_2_6(outer_size, mesh[0], i)
        for j in range(mesh[1]):
            length, offset = _piece_2_6(outer_length, mesh[1], j)
            pieces.append((length, offset if outer_offset <= offset else outer_offset + offset))
    starts = {offset for length, offset in pieces if length}
    return any(not length and offset in starts for length, offset in pieces)


_PLAN_REFUSED = "Failed to validate global plan"


def _is_double_shard_save_plan_refused(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: the saved state dict holds a DTensor sharded twice on one dim with an empty piece that 2.6.0
    puts where another rank's piece starts, and every rank raised DCP's CheckpointException from the save's
    planning, the coordinator's ValueError "Failed to validate global plan" (DCP sends the coordinator's
    failure to every rank, so none waits)."""
    leaves = getattr(example.get("case"), "leaves", None)
    if leaves is None or not any(_empty_piece_on_another(leaf) for _, leaf in leaves()):
        return False
    errors = evidence.raised(failure)
    if not errors or evidence.waiting(failure):
        return False
    from torch.distributed.checkpoint.api import CheckpointException

    return all(evidence.raised_a(p, CheckpointException) and evidence.says(p, _PLAN_REFUSED)
               and evidence.says(p, "_save_state_dict") for p in errors)


register(KnownBug(
    id="dcp-save-double-shard-empty-piece-fails", kind="crash",
    summary="torch 2.6.0: dcp.save of a DTensor sharded twice on one dim where a rank's piece is empty (a (2,) "
            "tensor as (Shard(0), Shard(0)) on a 2x2 mesh) raises 'Failed to validate global plan' on every rank: "
            "DTensor puts an empty piece at the offset of another rank's piece, and DCP keeps only one of them",
    where=("checkpoint",), recognise=_is_double_shard_save_plan_refused, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/pull/150862",
    reproducer="docs/findings/dcp-save-double-shard-empty-piece-fails.py"))


# -- functional collectives -----------------------------------------------------------------


def _functional_all_to_all_complex(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every rank raised "Invalid scalar type" from a call that is an all_to_all_single of a complex tensor
    (the property's ranks name the call in the error's record), and none was left waiting."""
    calls = getattr(example.get("case"), "calls", ())
    errors = evidence.raised(failure)
    if not errors or evidence.waiting(failure) or not isinstance(failure, RankError):
        return False
    for problem in errors:
        if problem.call is None or problem.call >= len(calls) or not evidence.says(problem, "Invalid scalar type"):
            return False
        call = calls[problem.call]
        if call.op != "all_to_all_single" or problem.op != call.op or not call.spec.dtype.is_complex:
            return False
    return len(errors) == len(failure.ranks)


register(KnownBug(
    id="gloo-functional-all-to-all-complex-raises", kind="missing feature",
    summary="functional all_to_all_single raises 'Invalid scalar type' for complex tensors on gloo "
            "(dist.all_to_all_single works: it views them as real)",
    where=("functional",),
    recognise=_functional_all_to_all_complex,
    seen_on=("2.13",),
    reproducer="docs/findings/gloo-functional-all-to-all-complex-raises.py",
))


# -- the property suite's entries (fuzzdist.properties: subgroups, p2p, object_collectives) ------------
# The predicates read the drawn case through its attributes and the hooks its classes define
# (``Group.unsorted_dims()``, ``ObjectCase.dtypes_received(rank, world)``): this module can't import the
# property modules, which import fuzzdist.known_bugs.

# What a rendezvous that read a destroyed group's stale keys looks like: a rank's error is gloo's, from
# building the new group ("Gloo connectFullMesh failed ...") or from its tcp transport in the first
# collective (the peer reset/closed the connection, a socket or recv timed out); or a rank hangs inside
# ProcessGroupGloo(...) (a RankTimeout's stack).
_STALE_RENDEZVOUS = (r"Gloo connectFullMesh failed|gloo/transport/tcp/\S+\] (Read error \S+ )?"
                      r"(Connection (reset|closed) by peer|Socket Timeout|Timed out waiting \d+ms for recv operation)")
_BUILDING_GLOO_GROUP = "ProcessGroupGloo("
# where a rank left waiting by a peer that failed the rendezvous stands: in the property's group making or
# collectives
_IN_THE_EXAMPLE = (SUBGROUP_MAKING, SUBGROUP_OPS)


def _is_local_sync_recreate(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A locally synchronised group over ranks that an earlier example's (destroyed) locally synchronised
    group had (``local_sync_before``, kept by the subgroups check per pool), and every rank that failed
    failed to connect, lost its peer or timed out in gloo's transport, or hung building the group (its
    rendezvous read the stale keys)."""
    before = example.get("local_sync_before") or ()
    groups = getattr(example.get("case"), "groups", ())
    if not any(getattr(g, "local_sync", False) and tuple(sorted(g.ranks)) in before for g in groups):
        return False
    return _is_stale_rendezvous(failure)


def _is_stale_rendezvous(failure: BaseException) -> bool:
    """Every rank that failed shows a stale rendezvous's symptom; a rank left waiting for it waits in
    this example's groups or collectives."""
    waiting = evidence.waiting(failure)
    if isinstance(failure, RankTimeout):
        return bool(waiting) and all(evidence.says(p, _BUILDING_GLOO_GROUP) for p in waiting)
    errors = evidence.raised(failure)
    return (bool(errors) and all(evidence.says_pattern(p, _STALE_RENDEZVOUS) for p in errors)
            and all(any(evidence.says(p, where) for where in _IN_THE_EXAMPLE) for p in waiting))


register(KnownBug(
    id="new-group-local-sync-recreate-fails", kind="crash",
    summary="new_group(ranks, use_local_synchronization=True) over ranks that had such a group before, "
            "destroyed, reuses its hashed name and store keys: building it fails ('Gloo connectFullMesh "
            "failed'), its first collective fails ('Connection reset by peer', a recv timeout) or a rank hangs",
    where=("subgroups",), recognise=_is_local_sync_recreate, seen_on=SEEN_ON,
    reproducer="docs/findings/new-group-local-sync-recreate-fails.py"))


def _is_mesh_order(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The example has a mesh dimension whose drawn ranks are not ascending, and every problem is exactly what
    the ascending order gives (:attr:`Symptom.MESH_SORTED_ORDER`, which the rank sets only on such a
    dimension): its local rank, or an all_gather's outputs (all_reduce and broadcast don't depend on the
    order, so a wrong one is never this bug)."""
    groups = getattr(example.get("case"), "groups", ())
    unsorted = {(g.ranks, dim) for g in groups if g.kind == "mesh" for dim in g.unsorted_dims()}
    return bool(unsorted) and _every_problem(failure, _shows(Symptom.MESH_SORTED_ORDER))


register(KnownBug(
    id="device-mesh-local-rank-not-coordinate", kind="wrong result",
    summary="on a DeviceMesh whose ranks are not ascending along a dimension, get_local_rank(d) and the "
            "order of get_group(d) are the sorted ranks', not the position get_coordinate() reports; so on "
            "mesh [1, 0], distribute_tensor(arange(4), mesh, [Replicate()]).redistribute(mesh, [Shard(0)])"
            ".full_tensor() returns [2, 3, 0, 1] (distribute_tensor with Shard places chunks by group rank, "
            "redistribute by coordinate)",
    where=("subgroups",), recognise=_is_mesh_order, seen_on=SEEN_ON,
    reproducer="docs/findings/device-mesh-local-rank-not-coordinate.py"))


# gloo's rendezvous failing because a peer closed its side: the peer destroyed the group (dropped it)
# while this rank was still connecting
_PEER_CLOSED_MID_CONNECT = r"Gloo connectFullMesh failed.*Connection (closed|reset) by peer"


def _is_destroyed_early(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every collective of the example moves no data (zero-size tensors: nothing makes a peer wait for
    this rank after its ``new_group`` returned, so it can finish the example and destroy the group), every
    rank that failed raised gloo's "connectFullMesh failed ... Connection closed by peer" while making
    the example's groups, and a rank left waiting waits in a later group's making (for the failed rank)."""
    spec = getattr(example.get("case"), "spec", None)
    if spec is None or math.prod(spec.shape) != 0:
        return False
    errors = evidence.raised(failure)
    return (bool(errors) and all(evidence.says_pattern(p, _PEER_CLOSED_MID_CONNECT)
                                 and evidence.says(p, SUBGROUP_MAKING) for p in errors)
            and all(evidence.says(p, SUBGROUP_MAKING) for p in evidence.waiting(failure)))


register(KnownBug(
    id="gloo-new-group-destroyed-early-breaks-peer", kind="crash",
    summary="gloo: a group that a member destroys (and drops) right after its new_group returned, with no "
            "collective that moves data in between, can fail another member's new_group, still connecting: "
            "'Gloo connectFullMesh failed ... Connection closed by peer' (on a busy machine)",
    where=("subgroups",), recognise=_is_destroyed_early, seen_on=SEEN_ON,
    reproducer="docs/findings/gloo-new-group-destroyed-early-breaks-peer.py"))


# What the p2p property's self-loop tries report for a refusal that doesn't say why: the peer and the tag.
# gloo's words: "Pair is not connected" (torch 2.13, 2.14), "writev [none]: Bad file descriptor" from
# the same tcp pair (torch 2.6.0; the reproducer prints it there).
_UNCLEAR = r"Pair is not connected|tcp/pair\.cc:\d+\] writev \[none\]: Bad file descriptor"


def _is_self_loop_unclear(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a self-loop refused with gloo's "Pair is not connected" enforce, an error that
    doesn't say the peer is the rank itself (a self-loop may deliver, or be refused clearly): the rank
    that reported it, the peer it names and the tag are a drawn message from that rank to itself."""
    messages = getattr(example.get("case"), "messages", None)
    by_rank = evidence.reported_by_rank(failure)
    if messages is None or by_rank is None:
        return False
    loops = {(m.src, m.tag) for m in messages if m.src == m.dst}
    seen = False
    for rank, problems in enumerate(by_rank):
        for problem in problems:
            if (problem.symptom is not Symptom.REFUSED_UNCLEARLY or problem.subject[:1] != (rank,)
                    or (rank, problem.subject[1]) not in loops or not evidence.says_pattern(problem, _UNCLEAR)):
                return False
            seen = True
    return seen


register(KnownBug(
    id="gloo-p2p-self-loop-unclear-error", kind="unclear error",
    summary="isend/irecv/recv/batch_isend_irecv to or from a rank's own rank, documented as allowed for "
            "isend/irecv ('isend allows src == dst rank, i.e. send to self'), neither deliver nor refuse "
            "clearly on gloo: they fail with the internal enforce 'Pair is not connected' (torch 2.6.0: "
            "'writev [none]: Bad file descriptor'), where dist.send refuses clearly with 'Invalid destination rank'",
    where=("p2p",), recognise=_is_self_loop_unclear, seen_on=("2.6", "2.13", "2.14"),
    reproducer="docs/findings/gloo-p2p-self-loop-unclear-error.py"))


# the dtypes torch can't unpickle
_WIDE = ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
         "float8_e8m0fnu")
_UNPICKLE_ERROR = r"UntypedStorage' has no attribute 'dtype'|(float8|uint16|uint32|uint64).*(not supported|unpickl)"


def _is_wide_unsigned_unpickle(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a rank's collective raising the unpickling error, on a rank that receives a
    tensor of a dtype torch 2.13 can't unpickle (uint16/32/64, float8)."""
    case: Any = example.get("case")
    received = getattr(case, "dtypes_received", None)
    by_rank = evidence.reported_by_rank(failure)
    if received is None or not by_rank:
        return False
    world = len(by_rank)
    seen = False
    for rank, problems in enumerate(by_rank):
        for problem in problems:
            if not (problem.kind is Kind.RAISED and problem.op == case.op
                    and evidence.says_pattern(problem, _UNPICKLE_ERROR)):
                return False
            if not any(d in _WIDE for d in received(rank, world)):
                return False
            seen = True
    return seen


# the torch bug of docs/findings/wide-unsigned-unpickle.py, seen through the object collectives
register(KnownBug(
    id="wide-unsigned-unpickle-objects", kind="crash",
    summary="object collectives can't hand over uint16/uint32/uint64/float8 tensors: torch pickles them "
            "but can't unpickle them ('UntypedStorage' has no attribute 'dtype')",
    where=("object_collectives",), recognise=_is_wide_unsigned_unpickle, seen_on=SEEN_ON,
    reproducer="docs/findings/wide-unsigned-unpickle.py"))


# -- tensor parallelism ------------------------------------------------------------------------

_SGD_STEP = "the SGD step on the parallelised parameters"  # tensor_parallel.SGD_STEP
_TP_INPLACE = "in-place operations that require placement changes are not supported"


def _tp_has_empty_shard(config: Any) -> bool:
    """Whether some Colwise/Rowwise Linear of a tensor_parallel config has a sharded parameter dim smaller
    than the world size (some rank's piece empty): Colwise shards out_features, Rowwise in_features."""
    layers = getattr(config, "layers", None)
    world = getattr(config, "world_size", None)
    width = getattr(config, "in_features", None)
    if layers is None or world is None or width is None:
        return False
    for layer in layers:
        if layer.kind == "colwise" and layer.out_features < world:
            return True
        if layer.kind == "rowwise" and width < world:
            return True
        if layer.kind != "sequence":
            width = layer.out_features
    return False


def _is_tp_empty_shard_step(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is the SGD step raising DTensor's in-place placement-change error, with some gradient
    placed Replicate() for a Shard parameter, on a config with an empty parameter shard."""
    if not _tp_has_empty_shard(example.get("config")):
        return False
    from torch.distributed.tensor import Replicate, Shard

    def replicated_grad_of_shard(moved: tuple[Any, ...]) -> bool:
        _, grad_placements, param_placements = moved
        return (len(grad_placements) == len(param_placements) == 1 and isinstance(grad_placements[0], Replicate)
                and isinstance(param_placements[0], Shard))

    return _every_problem(failure, lambda p: (
        p.kind is Kind.RAISED and p.what == _SGD_STEP and evidence.says(p, _TP_INPLACE)
        and any(replicated_grad_of_shard(moved) for moved in p.subject)))


register(KnownBug(
    id="tp-colwise-empty-shard-step-fails", kind="crash",
    summary="a Colwise/Rowwise-parallel nn.Linear whose sharded dim is smaller than the mesh (a rank's piece "
            "empty) gets Replicate() gradients for its Shard parameters, and the optimizer's in-place step "
            "raises 'in-place operations that require placement changes are not supported'",
    where=("tensor_parallel",), recognise=_is_tp_empty_shard_step, seen_on=SEEN_ON,
    reproducer="docs/findings/tp-colwise-empty-shard-step-fails.py"))


def _is_sharded_tensor_gather_float32(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is the gather's result on its destination, which the check found to be exactly
    the original rounded to float32 and back (ShardedTensor.gather's default buffers are float32)."""
    return _every_problem(failure, _shows(Symptom.FLOAT32_ROUND_TRIP))


register(KnownBug(
    id="sharded-tensor-gather-default-dtype-float32", kind="wrong result",
    summary="ShardedTensor.gather(dst, out) without dtype gathers through buffers of torch's default dtype "
            "(float32), so int64/int32/float64 values arrive in out rounded to float32",
    where=("sharded_tensor",), recognise=_is_sharded_tensor_gather_float32, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/110561",
    reproducer="docs/findings/sharded-tensor-gather-default-dtype-float32.py"))


def _is_join_zero_joined_shard_stale(example: Mapping[str, Any], failure: BaseException) -> bool:
    """DDP with ZeRO under Join, and every problem on every rank is a parameter that the check found
    equal to the joined owner's shard stepped with that rank's own (stale or absent) gradients."""
    case = example.get("case")
    return bool(getattr(case, "zero", False)) and _every_problem(failure, _shows(Symptom.STALE_SHARD))


register(KnownBug(
    id="join-zero-joined-shard-stale", kind="wrong result",
    summary="Join([ddp, zero_optim]), the pattern Join's docstring shows: a joined rank's ZeroRedundancyOptimizer "
            "shard is stepped with that rank's own gradients (none after zero_grad()), not the active ranks' "
            "all-reduced ones (DDP's join hook discards them), so those parameters go wrong on every rank",
    where=("join",), recognise=_is_join_zero_joined_shard_stale, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/60757",
    reproducer="docs/findings/join-zero-joined-shard-stale.py"))


def _is_batched_powersgd_orthogonalize_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The ranks raised the bare AssertionError of ``_orthogonalize``'s shape check, called from
    ``batched_powerSGD_hook``."""
    errors = evidence.raised(failure)
    return bool(errors) and any(evidence.raised_a(p, AssertionError) and evidence.says(p, "batched_powerSGD_hook")
                                and evidence.says(p, "_orthogonalize") for p in errors)


# docs/findings/batched-powersgd-orthogonalize-asserts.py, seen by properties/test_comm_hooks.py::test_powersgd
register(KnownBug(
    id="batched-powersgd-orthogonalize-asserts", kind="crash",
    summary="DDP with batched_powerSGD_hook raises a bare AssertionError at the first compressed step: it "
            "passes a 2-D Q to _orthogonalize, which asserts a 3-D batch of matrices",
    where=("comm_hooks",), recognise=_is_batched_powersgd_orthogonalize_assert, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/75157",
    reproducer="docs/findings/batched-powersgd-orthogonalize-asserts.py"))


def _is_chunk_offset_past_end(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The source rank's ``ChunkShardingSpec.shard`` raised narrow's "start out of range" IndexError
    (every other failed rank too), in a case whose chunk offsets run past the end of the sharded dim:
    ceil(size / n) * (n - 1) > size for n placements."""
    case: Any = example.get("case")
    spec, placements = getattr(case, "spec", None), getattr(case, "placements", None)
    errors = evidence.raised(failure)
    if spec is None or not placements or not errors:
        return False
    size, n = spec.shape[case.dim % len(spec.shape)], len(placements)
    if not -(-size // n) * (n - 1) > size:
        return False
    return all(evidence.raised_a(p, IndexError) and evidence.says(p, "start out of range")
               and evidence.says(p, "chunk_sharding_spec") for p in errors)


_EMPTY_SHARD = r"shard_sizes=\[(\d+, )*0(, \d+)*\]"  # torch's repr of a shard's metadata with a size 0
_EMPTY_SHARDS_OVERLAP = rf"Shards .*{_EMPTY_SHARD}.* and .*{_EMPTY_SHARD}.* overlap$"


def _is_empty_shards_overlap(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: every failed rank raised ValueError "Shards ... and ... overlap" about two shards that are
    both empty (a size 0 in each), from the shard-metadata check ChunkShardingSpec.shard runs."""
    errors = evidence.raised(failure)
    if getattr(example.get("case"), "spec", None) is None or not errors:
        return False
    return all(evidence.raised_a(p, ValueError) and evidence.says_pattern(p, _EMPTY_SHARDS_OVERLAP)
               and evidence.says(p, "chunk_sharding_spec") for p in errors)


register(KnownBug(
    id="sharded-tensor-empty-shards-overlap", kind="crash",
    summary="torch 2.6.0: ChunkShardingSpec.shard of a tensor whose shards are empty (a (0,) tensor over 2 ranks) "
            "raises ValueError 'Shards ... overlap' on every rank: the metadata check takes empty shards at one "
            "offset for overlapping ones",
    where=("sharded_tensor",), recognise=_is_empty_shards_overlap, seen_on=("2.6",),
    reproducer="docs/findings/sharded-tensor-empty-shards-overlap.py"))


register(KnownBug(
    id="sharded-tensor-chunk-offsets-past-end", kind="crash",
    summary="ChunkShardingSpec.shard raises 'IndexError: start out of range' on the source rank where torch.chunk "
            "gives fewer pieces than placements (a (1,) tensor over 3 ranks, (5,) over 4): build_metadata puts "
            "the empty shards at offsets past the end of the dim",
    where=("sharded_tensor",), recognise=_is_chunk_offset_past_end, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/121002",
    reproducer="docs/findings/sharded-tensor-chunk-offsets-past-end.py"))


def _is_gather_empty_shard_skip(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A rank whose local shard is empty returned from ``ShardedTensor.gather`` without joining the gather
    collective (the check saw its group's collective count unchanged, joined the gather for the waiting
    ranks and says so); every other problem is that too, or the float32 rounding of
    sharded-tensor-gather-default-dtype-float32 on the destination, which the same example can show."""
    problems = _problems(failure)
    if not problems or not any(p.symptom is Symptom.GATHER_SKIPPED for p in problems):
        return False
    return all((p.symptom is Symptom.GATHER_SKIPPED and any(0 in shape for shape in p.subject))
               or p.symptom is Symptom.FLOAT32_ROUND_TRIP for p in problems)


register(KnownBug(
    id="sharded-tensor-gather-empty-shard-skips-collective", kind="hang",
    summary="torch 2.6.0: ShardedTensor.gather on a rank whose local shard is empty (a (3,) tensor over 4 ranks, "
            "a (1,) tensor over 2) returns without joining the gather collective, so the other ranks wait in "
            "theirs until the timeout",
    where=("sharded_tensor",), recognise=_is_gather_empty_shard_skip, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/issues/150928",
    reproducer="docs/findings/sharded-tensor-gather-empty-shard-skips-collective.py"))


# faulthandler's line (no comma before "in", unlike a traceback's) for a frame of the subgroups property's
# _retire, which drops the groups of an earlier example
_IN_RETIRE = r"subgroups(/__init__)?\.py\", line \d+ in _retire"


def _is_group_drop_deadlock(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The ranks timed out with a rank frozen while dropping process groups: its stack is faulthandler's (it
    answered no snapshot: none of its Python threads ran), in the subgroups property's ``_retire``."""
    return isinstance(failure, RankTimeout) and any(
        evidence.says_pattern(p, _IN_RETIRE) for p in evidence.waiting(failure))


register(KnownBug(
    id="gloo-process-group-drop-deadlocks", kind="hang",
    summary="torch 2.6.0: dropping the last reference to a gloo process group right after a collective on it "
            "can freeze the process: ~ProcessGroupGloo runs with the GIL held and joins a worker thread that "
            "needs the GIL to free the finished Work's tensors",
    where=("subgroups",), recognise=_is_group_drop_deadlock, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/pull/154976",
    reproducer="docs/findings/gloo-process-group-drop-deadlocks.py"))


# -- pipelining ---------------------------------------------------------------------------------

_STAGE_BACKWARD_FAILED = "Failed to run stage backward"


def _is_pipelining_static_args_no_grad(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Static stages built from plain example tensors (``config.plain_examples``), and either every problem
    is a stage gradient the check found equal to backward from that stage's own output with a gradient of
    ones, or every rank that raised raised the stage backward's RuntimeError with no output gradient."""
    config = example.get("config")
    if not (getattr(config, "static", False) and getattr(config, "plain_examples", False)):
        return False
    errors = evidence.raised(failure)
    if errors:
        return all(evidence.raised_a(p, RuntimeError) and evidence.says(p, _STAGE_BACKWARD_FAILED)
                   and evidence.says(p, "Output gradient: ('None',)") for p in errors)
    return _every_problem(failure, _shows(Symptom.IMPLICIT_ONES))


register(KnownBug(
    id="pipelining-static-args-no-grad", kind="wrong result",
    summary="PipelineStage with static input_args/output_args that don't require grad (plain example tensors): "
            "no gradient passes between stages, and every stage but the last runs backward with no output "
            "gradient: a silent gradient of ones where its output has one element, else 'Failed to run stage "
            "backward'",
    where=("pipelining",), recognise=_is_pipelining_static_args_no_grad, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/172422",
    reproducer="docs/findings/pipelining-static-args-no-grad.py"))


# -- DDP: static_graph with no_sync ------------------------------------------------------------------

_EXPECT_AUTOGRAD_HOOKS = "expect_autograd_hooks_ INTERNAL ASSERT FAILED"


def _is_ddp_static_graph_no_sync_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The no_sync check (its example has a ``config``) on a ``static_graph`` DDP config, and every rank
    that raised raised the reducer's ``expect_autograd_hooks_`` internal assertion."""
    config = example.get("config")
    errors = evidence.raised(failure)
    if not getattr(config, "static_graph", False) or not errors:
        return False
    return all(evidence.raised_a(p, RuntimeError) and evidence.says(p, _EXPECT_AUTOGRAD_HOOKS) for p in errors)


register(KnownBug(
    id="ddp-static-graph-no-sync-asserts", kind="crash",
    summary="DistributedDataParallel(static_graph=True) whose training starts with a backward under no_sync() "
            "(gradient accumulation, as no_sync's docstring shows) raises 'expect_autograd_hooks_ INTERNAL "
            "ASSERT FAILED' in the reducer, on every rank",
    where=("comm_hooks",), recognise=_is_ddp_static_graph_no_sync_assert, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/143580",
    reproducer="docs/findings/ddp-static-graph-no-sync-asserts.py"))


# -- tensor parallelism: shards emptier than the mesh, continued -------------------------------------

_TP_RESHAPE_SHARDED = "would remove or reshape sharded dimension"


def _tp_rowwise_narrower_than_mesh(config: Any) -> bool:
    """Whether some RowwiseParallel Linear of a tensor_parallel config has fewer input features than ranks."""
    layers, world, width = getattr(config, "layers", None), getattr(config, "world_size", None), \
        getattr(config, "in_features", None)
    if layers is None or world is None or width is None:
        return False
    for layer in layers:
        if layer.kind == "rowwise" and width < world:
            return True
        if layer.kind != "sequence":
            width = layer.out_features
    return False


def _is_tp_rowwise_empty_shard_forward(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config with a Rowwise Linear narrower than the mesh, and every rank that raised raised DTensor's
    "would remove or reshape sharded dimension" RuntimeError."""
    if not _tp_rowwise_narrower_than_mesh(example.get("config")):
        return False
    errors = evidence.raised(failure)
    return bool(errors) and all(evidence.raised_a(p, RuntimeError) and evidence.says(p, _TP_RESHAPE_SHARDED)
                                for p in errors)


register(KnownBug(
    id="tp-rowwise-empty-shard-forward-fails", kind="crash",
    summary="a RowwiseParallel nn.Linear with fewer input features than the mesh has ranks (a rank's Shard(1) "
            "piece empty) raises in its forward, 'This operation would remove or reshape sharded dimension'",
    where=("tensor_parallel",), recognise=_is_tp_rowwise_empty_shard_forward, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/141335",
    reproducer="docs/findings/tp-rowwise-empty-shard-forward-fails.py"))


_TP_VIEW_INCOMPATIBLE = "view size is not compatible with input tensor's size and stride"
_LINEAR_FORWARD = r'nn[/\\]modules[/\\]linear\.py", line \d+, in forward'
_AUTOGRAD_BACKWARD = r'autograd[/\\]graph\.py", line \d+, in _engine_run_backward'


def _tp_rowwise_uneven_sequence_input(config: Any) -> bool:
    """Whether a tensor_parallel config moves an activation between Shard(seq) and Shard(-1) with DTensor's
    all-to-all over an uneven sequence, which leaves padding in the local tensor's strides: a RowwiseParallel
    Linear taking its input sharded on the sequence dim (``input_layout`` "T": Shard(seq) -> Shard(-1) in
    the forward) or a ColwiseParallel one putting its output there (``output_layout`` "T": Shard(-1) ->
    Shard(seq), whose backward runs the other way); the sequence (dim 1) longer than 1 and not divisible by
    the world size, with a batch of more than 1 outside it.  (Such an activation is a DTensor: the strategy
    hands local sequence shards over only where the sequence divides evenly.)"""
    layers, world = getattr(config, "layers", None), getattr(config, "world_size", None)
    if not layers or world is None or getattr(config, "sequence_dim", None) != 1:
        return False
    batch, seq = config.batch, config.seq
    if not (batch > 1 and seq > 1 and seq % world != 0):
        return False
    return any((layer.kind == "rowwise" and layer.input_layout == "T")
               or (layer.kind == "colwise" and layer.output_layout == "T") for layer in layers)


def _is_tp_rowwise_uneven_sequence_view(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config with a Rowwise Linear fed an uneven sequence shard (above), and the ranks raised view's "size is
    not compatible" RuntimeError inside an nn.Linear's forward, rank 0 among them (its piece of the features is
    never empty); ranks whose piece is empty can go on into the next collective, so stragglers are allowed."""
    if not _tp_rowwise_uneven_sequence_input(example.get("config")):
        return False
    errors = evidence.raised(failure)
    if not errors or errors[0].rank != 0:
        return False
    return all(evidence.raised_a(p, RuntimeError) and evidence.says(p, _TP_VIEW_INCOMPATIBLE)
               and (evidence.says_pattern(p, _LINEAR_FORWARD) or evidence.says_pattern(p, _AUTOGRAD_BACKWARD))
               for p in errors)


register(KnownBug(
    id="tp-rowwise-uneven-sequence-view-fails", kind="crash",
    summary="a RowwiseParallel nn.Linear with input_layouts=Shard(1) on a DTensor whose sequence doesn't divide "
            "over the mesh (batch > 1) raises in its forward, and a ColwiseParallel one with output_layouts="
            "Shard(1) in its backward, 'view size is not compatible with input tensor's size and stride': the "
            "Shard(1) <-> Shard(-1) all-to-all leaves the sequence padding in the local tensor's strides (a rank "
            "whose piece of the features is empty goes on and hangs)",
    where=("tensor_parallel",), recognise=_is_tp_rowwise_uneven_sequence_view, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/143748",
    reproducer="docs/findings/tp-rowwise-uneven-sequence-view-fails.py"))


def _is_tp_sequence_parallel_short_sequence(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config whose last layer is SequenceParallel over a sequence shorter than the mesh, and every problem
    is the output placed Replicate() where Shard(sequence dim) was expected, or, with use_local_output=True,
    a rank's local output the whole output (the local tensor of that Replicate() DTensor) where its
    torch.chunk piece of the sequence dim was expected."""
    config: Any = example.get("config")
    layers, world = getattr(config, "layers", None), getattr(config, "world_size", None)
    if not layers or world is None or layers[-1].kind != "sequence":
        return False
    dim = config.sequence_dim
    size = config.shape[dim]
    if not size < world:
        return False
    whole = tuple(config.output_shape())

    def chunk(rank: int) -> tuple[int, ...]:  # the rank's torch.chunk piece: one position each, the last ones empty
        return whole[:dim] + (1 if rank < size else 0,) + whole[dim + 1:]

    def replicated(problem: Problem) -> bool:  # the output's placements: (shape, placements) pairs
        from torch.distributed.tensor import Replicate, Shard

        if problem.kind is not Kind.SHAPE or problem.what != "output" or not isinstance(problem.got, tuple):
            return False
        got, expected = problem.got[1], problem.expected[1]
        return (len(got) == len(expected) == 1 and isinstance(got[0], Replicate) and isinstance(expected[0], Shard)
                and expected[0].dim == dim)

    def whole_local(problem: Problem) -> bool:  # a rank's local output: (shape, dtype) pairs
        if problem.kind is not Kind.SHAPE or problem.what != "output's local piece" or problem.rank is None:
            return False
        (got, got_dtype), (expected, expected_dtype) = problem.got, problem.expected
        return (got_dtype == expected_dtype and problem.rank < world and got == whole
                and expected == chunk(problem.rank) != whole)

    return _every_problem(failure, lambda problem: replicated(problem) or whole_local(problem))


register(KnownBug(
    id="tp-sequence-parallel-short-sequence-replicated", kind="wrong result",
    summary="a SequenceParallel module whose sequence is shorter than the mesh (a rank's piece empty) returns a "
            "Replicate() output, where its docstring promises one sharded on the sequence dimension (with "
            "use_local_output=True: every rank's local output is the whole sequence, not its piece)",
    where=("tensor_parallel",), recognise=_is_tp_sequence_parallel_short_sequence, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/103306",
    reproducer="docs/findings/tp-sequence-parallel-short-sequence-replicated.py"))


# -- DDP communication hooks: PowerSGD's collectives from future callbacks ----------------------------


_HOOK_FILE = "powerSGD_hook.py"
_GLOO_SIZE_MISMATCH = "Received data size doesn't match expected size"
# the enforce itself, which torch 2.6.0's gloo states without the sentence above ("... 40 vs 8")
_GLOO_SIZE_ENFORCE = "op.preamble.length <= op.nbytes"


def _is_powersgd_callback_collectives_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A PowerSGD case whose model spans more than one bucket (a bucket cap drawn, or an unused layer that
    brings find_unused_parameters), and the symptom of the ranks' collectives out of step: the ranks hung
    with a rank inside one of powerSGD_hook's future callbacks (its all-reduces of P or Q); or a rank died
    on gloo's "Received data size doesn't match expected size" inside such a callback, or raised a gloo
    error through one (a recv timed out: "Got the following error when running the callback"); or the synced
    gradients differ across the ranks bitwise (every rank gets the same all-reduce result unless the
    ranks paired different all-reduces: a deterministic bug in the hook would not make them differ)."""
    case = example.get("case")
    if type(case).__name__ != "PowerSGDCase":  # comm_hooks' PowerSGD check only
        return False
    config = getattr(case, "config", None)
    if config is None or not (getattr(config, "bucket_cap_mb", None) is not None
                              or getattr(config, "find_unused_parameters", False)):
        return False
    if isinstance(failure, RankTimeout):
        return any(evidence.says(p, _HOOK_FILE) for p in evidence.waiting(failure))
    died = evidence.died(failure)
    if died:  # a rank aborted on gloo's size check, inside a callback
        return (any(evidence.says(p, _GLOO_SIZE_MISMATCH) or evidence.says(p, _GLOO_SIZE_ENFORCE) for p in died)
                and any(evidence.says(p, _HOOK_FILE) for p in died))
    errors = evidence.raised(failure)
    if errors:  # a gloo error raised through one of the hook's callbacks
        return all(evidence.says(p, "when running the callback") and evidence.says(p, _HOOK_FILE) for p in errors)
    return any(p.symptom is Symptom.RANKS_DIFFER for p in _problems(failure) or [])


register(KnownBug(
    id="powersgd-multiple-buckets-hangs", kind="hang",
    summary="DDP with powerSGD_hook over more than one gradient bucket, on gloo: the hook issues (and waits on) "
            "its P and Q all-reduces from future callbacks, whose order across the ranks then depends on thread "
            "scheduling, so a compressed step hangs, aborts a rank (gloo's size mismatch) or gives the ranks "
            "different gradients",
    where=("comm_hooks",), recognise=_is_powersgd_callback_collectives_hang, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/49709",
    reproducer="docs/findings/powersgd-multiple-buckets-hangs.py"))

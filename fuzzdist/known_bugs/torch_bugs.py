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
import re
from collections.abc import Callable, Mapping
from typing import Any

from fuzzdist.errors import ConformanceFailure, PropertyFailure, RankError, RankTimeout
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.known_bugs.symptoms import (
    BOOL_BYTES_NOT_0_OR_1,
    BROADCAST_STRIDES_IGNORED,
    FORWARD_OP_ON_GRADS,
    MESH_SORTED_ORDER,
    OBJECT_CALL_RAISED,
    REFUSED_UNCLEARLY,
    REPEAT_WAIT_BLOCKED,
    STACK_CHECK,
    STRIDES_IGNORED,
    SUBGROUP_MAKING,
    SUBGROUP_OPS,
    SUM_GRAD_FOR_ANY_OP,
)

SEEN_ON = ("2.13",)
_DENSE_NON_CONTIGUOUS = ("transposed", "channels_last")  # the layouts whose memory order differs


def _problems(failure: BaseException) -> list[str] | None:
    """Every problem a property's ranks reported (rank results are a string, a list of them, or None);
    None if ``failure`` is not a property's failure."""
    if not isinstance(failure, PropertyFailure):
        return None
    out: list[str] = []
    for result in failure.results:
        if isinstance(result, str):
            out.append(result)
        elif isinstance(result, (list, tuple)):
            out.extend(str(p) for p in result)
    return out


def _every_problem(failure: BaseException, test: Callable[[str], bool]) -> bool:
    problems = _problems(failure) or []
    return bool(problems) and all(test(p) for p in problems)


# -- broadcast ---------------------------------------------------------------------------------


def _broadcast_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (example["spec"].layout in _DENSE_NON_CONTIGUOUS
            and _every_problem(failure, lambda p: BROADCAST_STRIDES_IGNORED in p))


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
            and _every_problem(failure, lambda p: p.startswith("output ") and STRIDES_IGNORED in p))


register(KnownBug(
    id="gloo-scatter-ignores-strides", kind="wrong result",
    summary="gloo's scatter writes row-major bytes into the memory of a non-contiguous output tensor "
            "(torch.distributed.nn.all_to_all on gloo is built from scatters)",
    where=("collectives",), recognise=_all_to_all_scatter_ignores_strides, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/24836",
    reproducer="docs/findings/gloo-scatter-ignores-strides.py"))


def _all_gather_grad_transposed(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_gather", example) and example["case"].grad_layout in _DENSE_NON_CONTIGUOUS
            and _every_problem(failure, lambda p: p.startswith("grad of input") and STRIDES_IGNORED in p))


register(KnownBug(
    id="nn-all-gather-grad-transposed", kind="wrong result",
    summary="torch.distributed.nn.all_gather on gloo: a transposed (or channels_last) upstream gradient "
            "gives a wrong input gradient (its backward scatters into empty_like(grad), and gloo's "
            "scatter ignores strides)",
    where=("collectives",), recognise=_all_gather_grad_transposed, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-gather-grad-transposed.py"))


def _all_reduce_backward_non_sum(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_reduce", example) and example["case"].op in ("PRODUCT", "MIN", "MAX")
            and _every_problem(failure, lambda p: p.startswith("grad of input") and FORWARD_OP_ON_GRADS in p))


register(KnownBug(
    id="nn-all-reduce-backward-non-sum", kind="wrong result",
    summary="torch.distributed.nn.all_reduce's backward all-reduces the upstream gradients with the "
            "forward's op: wrong input gradients for PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_all_reduce_backward_non_sum, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-reduce-backward-non-sum.py"))


def _reduce_backward_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (example.get("name") in ("reduce", "reduce_scatter")
            and example["case"].op in ("AVG", "PRODUCT", "MIN", "MAX")
            and _every_problem(failure, lambda p: p.startswith("grad of input") and SUM_GRAD_FOR_ANY_OP in p))


register(KnownBug(
    id="nn-reduce-backward-ignores-op", kind="wrong result",
    summary="torch.distributed.nn.reduce's and reduce_scatter's backward ignore the forward's op (a broadcast, "
            "an all_gather of the upstream gradients): every input gradient is SUM's, wrong for AVG, "
            "PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_reduce_backward_ignores_op, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-reduce-backward-ignores-op.py"))


# -- check-pg (fuzzdist.conformance) -----------------------------------------------------------

_REDUCING = ("allreduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base")


def _on_gloo(example: Mapping[str, Any]) -> bool:
    """Whether check-pg (or the functional property) ran on gloo (or a group that names itself after it):
    the same symptom on another backend is that backend's own bug."""
    return "gloo" in str(example.get("backend") or "").lower()


_ASYNC_PROBLEM = re.compile(r"  call (\d+) \((\w+)\): ")  # "  call 2 (allreduce): rank 0, ..."


def _problem_lines(failure: BaseException) -> list[str] | None:
    """The problem lines of a check-pg ConformanceFailure ("  rank r, ..." for one op, "  call i (op):
    ..." for the async check; not the async head's "  call i: ..." nor the inputs), None for any other
    failure."""
    if not isinstance(failure, ConformanceFailure):
        return None
    return [line for line in str(failure).splitlines()
            if line.startswith("  rank ") or _ASYNC_PROBLEM.match(line)]


def _is_bool_sum(call: Any) -> bool:
    import torch

    return bool(call.op in _REDUCING and call.reduce_op == "SUM" and call.spec.dtype == torch.bool)


def _bool_sum_stores_2(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg on gloo: every problem is a bool byte other than 0/1, in a bool SUM call (the single
    op's call, or, in the async check, the call each problem line names)."""
    lines = _problem_lines(failure)
    if not lines or not _on_gloo(example) or any(BOOL_BYTES_NOT_0_OR_1 not in line for line in lines):
        return False
    if "call" in example:
        return _is_bool_sum(example["call"]) and all(line.startswith("  rank ") for line in lines)
    calls = list(example.get("calls", ()))
    for line in lines:
        found = _ASYNC_PROBLEM.match(line)
        if found is None or int(found.group(1)) >= len(calls):
            return False
        call = calls[int(found.group(1))]
        if call.op != found.group(2) or not _is_bool_sum(call):
            return False
    return True


_CALL_INDEX = re.compile(r"call (\d+) ")


def _functional_bool_sum_stores_2(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The functional-collectives property on gloo: every problem is a bool byte other than 0/1, in a
    call that reduces bools with SUM (the same gloo kernel as c10d's; met by ``fuzzdist run``)."""
    case = example.get("case")
    calls = getattr(case, "calls", ())
    problems = _problems(failure)
    if not problems or not calls or not _on_gloo(example):
        return False
    import torch

    for problem in problems:
        found = _CALL_INDEX.match(problem)
        if found is None or BOOL_BYTES_NOT_0_OR_1 not in problem or int(found.group(1)) >= len(calls):
            return False
        call = calls[int(found.group(1))]
        if call.reduce_op != "SUM" or call.spec.dtype != torch.bool or not call.op.startswith(("all_reduce", "reduce")):
            return False
    return True


def _bool_sum_any(example: Mapping[str, Any], failure: BaseException) -> bool:
    return _bool_sum_stores_2(example, failure) or _functional_bool_sum_stores_2(example, failure)


register(KnownBug(
    id="gloo-bool-sum-stores-2", kind="wrong result",
    summary="gloo's SUM over bool tensors adds the bytes: the result holds the byte 2 where two ranks "
            "hold True (right by truth value, but not a valid bool)",
    where=(*(f"check-pg:{op}" for op in (*_REDUCING, "async")), "functional"), recognise=_bool_sum_any,
    seen_on=SEEN_ON, reproducer="docs/findings/gloo-bool-sum-stores-2.py"))


_REPEATED_CALL = re.compile(r": call (\d+) \((\w+)\): ")


def _second_wait_blocks(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's async check on gloo: every rank's error is a repeated wait() that timed out
    (REPEAT_WAIT_BLOCKED, only on a timeout) on a send_recv call that the wait order repeats."""
    if not isinstance(failure, RankError) or not failure.exceptions or not _on_gloo(example):
        return False
    calls, waits = list(example.get("calls", ())), list(example.get("wait_order", ()))
    for exc in failure.exceptions.values():
        text = str(exc)
        found = _REPEATED_CALL.search(text)
        if REPEAT_WAIT_BLOCKED not in text or found is None:
            return False
        i = int(found.group(1))
        if i >= len(calls) or calls[i].op != "send_recv" or found.group(2) != "send_recv" or waits.count(i) < 2:
            return False
    return True


register(KnownBug(
    id="gloo-p2p-second-wait-blocks", kind="hang",
    summary="gloo: a second wait() on a send/recv Work that already completed blocks until its timeout "
            "(and the timeout then closes the pair)",
    where=("check-pg:async",), recognise=_second_wait_blocks, seen_on=SEEN_ON,
    reproducer="docs/findings/gloo-p2p-second-wait-blocks.py"))


def _reduce_scatter_stack_aborts(example: Mapping[str, Any], failure: BaseException) -> bool:
    # torch 2.13 raises the CHECK's fatal message as a RuntimeError on every rank where the ranks'
    # C++ lets it (check-pg's probe sees that); where it aborts the process instead (torch 2.6.0: SIGABRT),
    # a RankCrash carries the same message in the rank's last output.
    return (getattr(example.get("call"), "form", None) == "stack" and _on_gloo(example)
            and STACK_CHECK in str(failure))


register(KnownBug(
    id="gloo-reduce-scatter-stack-aborts", kind="crash",
    summary="gloo fails a fatal CHECK (outputShape[0] * worldSize == inputShape[0]) on reduce_scatter_tensor's "
            "documented 'stack' input form",
    # 2.6.0 aborts the rank (SIGABRT) on the CHECK; 2.13 and 2.14 raise it (docs/findings.md)
    where=("check-pg:reduce_scatter_tensor",), recognise=_reduce_scatter_stack_aborts, seen_on=("2.6", "2.13", "2.14"),
    reproducer="docs/findings/gloo-reduce-scatter-stack-aborts.py"))


# torch 2.6.0: gloo's _reduce_scatter_base (reduce_scatter_tensor, and the functional reduce_scatter_tensor
# over it) reduces with SUM whatever the op.  What fuzzdist.toolkit.oracle writes for a wrong reduction:
# the first wrong element ("first at flat index i: got G, expected E") and every rank's input there.
_FIRST_WRONG = re.compile(r"first at flat index (\d+): got (\S+?), expected ")
_INPUTS_AT = re.compile(r"inputs at index (\d+): (rank \d+: .*)")
_RANK_VALUE = re.compile(r"rank \d+: ([^,\s]+)")
_ODD_BYTES = re.compile(BOOL_BYTES_NOT_0_OR_1 + r" \(bytes \[([\d, ]+)\]")
_SCATTERING = ("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single")


def _got_the_sum(problem: str, dtype: Any) -> bool:
    """``problem``'s first wrong element is the SUM of the ranks' inputs at its index (within the float
    error of any order of sums; integers wrap as the dtype does; bools by truth value, or by the bytes
    shown, which count the True inputs)."""
    import torch

    wrong, at = _FIRST_WRONG.search(problem), _INPUTS_AT.search(problem)
    if at is None:
        return False
    values = _RANK_VALUE.findall(at.group(2))
    if dtype == torch.bool:  # the sum's truth is any(); its bytes, where shown, count the True inputs
        trues = sum(v == "True" for v in values)
        odd = _ODD_BYTES.search(problem)
        if odd is not None:
            return trues in [int(b) for b in re.findall(r"\d+", odd.group(1))]
        return wrong is not None and wrong.group(1) == at.group(1) and wrong.group(2) == str(trues > 0)
    if wrong is None or wrong.group(1) != at.group(1):
        return False
    try:
        if dtype.is_floating_point or dtype.is_complex:
            got, xs = float(wrong.group(2)), [float(v) for v in values]
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
        return int(wrong.group(2)) == total_int
    except (ValueError, OverflowError, RuntimeError, TypeError):
        return False


def _problem_blocks(failure: BaseException) -> list[str] | None:
    """check-pg's problems, each with its lines: a "  rank r, ..." (or async "  call i (op): ...") line
    and the more indented lines under it (the inputs at the first wrong index, the values); None for a
    failure that is no ConformanceFailure."""
    if not isinstance(failure, ConformanceFailure):
        return None
    blocks: list[str] = []
    current: list[str] | None = None
    for line in str(failure).splitlines():
        if line.startswith("  rank ") or _ASYNC_PROBLEM.match(line):
            current = [line]
            blocks.append("")
        elif current is not None and line.startswith("    "):
            current.append(line)
        else:
            current = None
            continue
        blocks[-1] = "\n".join(current)
    return blocks


def _scatter_call_got_the_sum(call: Any, problem: str) -> bool:
    return bool(call.op in _SCATTERING and call.reduce_op != "SUM" and _got_the_sum(problem, call.spec.dtype))


def _reduce_scatter_tensor_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    """On gloo, every problem is a reduce_scatter_tensor-like call with an op other than SUM whose first
    wrong element is the SUM of the inputs there: check-pg's op check (the call), its async check (the
    call each problem names), the functional property (the call each rank's problem names)."""
    if not _on_gloo(example):
        return False
    blocks = _problem_blocks(failure)
    if blocks is not None:
        if not blocks:
            return False
        if "call" in example:
            return all(b.startswith("  rank ") and _scatter_call_got_the_sum(example["call"], b) for b in blocks)
        calls = list(example.get("calls", ()))
        for block in blocks:
            found = _ASYNC_PROBLEM.match(block)
            if found is None or int(found.group(1)) >= len(calls):
                return False
            call = calls[int(found.group(1))]
            if call.op != found.group(2) or not _scatter_call_got_the_sum(call, block):
                return False
        return True
    case_calls = getattr(example.get("case"), "calls", ())
    problems = _problems(failure)
    if not problems or not case_calls:
        return False
    for problem in problems:
        found = _CALL_INDEX.match(problem)
        if found is None or int(found.group(1)) >= len(case_calls):
            return False
        if not _scatter_call_got_the_sum(case_calls[int(found.group(1))], problem):
            return False
    return True


register(KnownBug(
    id="gloo-reduce-scatter-tensor-ignores-op", kind="wrong result",
    summary="torch 2.6.0: gloo's reduce_scatter_tensor (_reduce_scatter_base, and the functional "
            "reduce_scatter_tensor over it) reduces with SUM whatever the op: PRODUCT, MIN and MAX give the sum "
            "(AVG, documented for NCCL only there, too)",
    where=("check-pg:reduce_scatter_tensor", "check-pg:_reduce_scatter_base", "check-pg:async", "functional"),
    recognise=_reduce_scatter_tensor_ignores_op, seen_on=("2.6",),
    reproducer="docs/findings/gloo-reduce-scatter-tensor-ignores-op.py"))


def _every_check_pg_problem(example: Mapping[str, Any], failure: BaseException,
                            shows_it: Callable[[Any, str], bool]) -> bool:
    """On gloo, every problem block of a check-pg failure shows the bug: ``shows_it(call, block)`` for the
    op check's call, or, for the async check, for the call each problem names."""
    if not _on_gloo(example):
        return False
    blocks = _problem_blocks(failure)
    if not blocks:
        return False
    if "call" in example:
        return all(b.startswith("  rank ") and shows_it(example["call"], b) for b in blocks)
    calls = list(example.get("calls", ()))
    for block in blocks:
        found = _ASYNC_PROBLEM.match(block)
        if found is None or int(found.group(1)) >= len(calls) or not shows_it(calls[int(found.group(1))], block):
            return False
    return True


def _gather_ignores_input_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    """check-pg's gather (or its async check's gather calls) on gloo, a non-contiguous input: every
    problem is a gathered slot that holds its source's elements in the order of the source's memory
    (the op's check says so with BROADCAST_STRIDES_IGNORED, the same words)."""

    def shows_it(call: Any, block: str) -> bool:
        first = block.splitlines()[0]
        return (call.op == "gather" and call.spec.layout in _DENSE_NON_CONTIGUOUS
                and "gather_list[" in first and BROADCAST_STRIDES_IGNORED in first)

    return _every_check_pg_problem(example, failure, shows_it)


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
_F16_TINY = "5.960464477539063e-08"
_F16_REDUCING = ("allreduce", "reduce", "reduce_scatter_tensor", "_reduce_scatter_base")


def _reduced_without_a_one(reduce_op: str, values: list[str], got: float) -> bool:
    """Whether ``got`` is what the float16 SUM or MAX of the inputs ``values``, folded in some order, gives
    when each step that brings 2**-24 into a partial result of 1.0 gives 2**-24."""
    import torch

    xs = [float(v) for v in values]
    tiny = float(_F16_TINY)
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

    def shows_it(call: Any, block: str) -> bool:
        wrong, at = _FIRST_WRONG.search(block), _INPUTS_AT.search(block)
        if (call.op not in _F16_REDUCING or call.reduce_op not in ("SUM", "MAX") or call.spec.dtype != torch.float16
                or wrong is None or at is None or wrong.group(1) != at.group(1)):
            return False
        try:
            got = float(wrong.group(2))
        except ValueError:
            return False
        return _reduced_without_a_one(call.reduce_op, _RANK_VALUE.findall(at.group(2)), got)

    return _every_check_pg_problem(example, failure, shows_it)


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
    if not _has_empty_local_shard(example.get("case")) or not isinstance(failure, RankError) or not failure.exceptions:
        return False
    return all(isinstance(exc, RuntimeError) and "negative padding" in str(exc)
               and "pad_tensor" in failure.tracebacks.get(rank, "")
               for rank, exc in failure.exceptions.items())


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
    if not isinstance(failure, RankError) or not failure.exceptions or failure.stragglers:
        return False
    return all(failure.exc_types.get(r, "").endswith("CheckpointException")
               and _PLAN_REFUSED in failure.tracebacks.get(r, "")
               and "_save_state_dict" in failure.tracebacks.get(r, "")
               for r in failure.exceptions)


register(KnownBug(
    id="dcp-save-double-shard-empty-piece-fails", kind="crash",
    summary="torch 2.6.0: dcp.save of a DTensor sharded twice on one dim where a rank's piece is empty (a (2,) "
            "tensor as (Shard(0), Shard(0)) on a 2x2 mesh) raises 'Failed to validate global plan' on every rank: "
            "DTensor puts an empty piece at the offset of another rank's piece, and DCP keeps only one of them",
    where=("checkpoint",), recognise=_is_double_shard_save_plan_refused, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/pull/150862",
    reproducer="docs/findings/dcp-save-double-shard-empty-piece-fails.py"))


# -- functional collectives -----------------------------------------------------------------


# fuzzdist.known_bugs.symptoms.CALL_RAISED as the functional property's ranks raise it ("call {index} {op} raised
# {type}: {message}"), for an all_to_all_single that raised "Invalid scalar type"
_CALL_RAISED_INVALID_SCALAR = re.compile(r"call (\d+) all_to_all_single raised \w+: .*Invalid scalar type", re.S)


def _functional_all_to_all_complex(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every rank that failed raised "Invalid scalar type" from a call that is an all_to_all_single of a
    complex tensor (the property's ranks name the call in the error), and none was left waiting."""
    calls = getattr(example.get("case"), "calls", ())
    if not isinstance(failure, RankError) or not failure.exceptions or failure.stragglers:
        return False
    for exc in failure.exceptions.values():
        found = _CALL_RAISED_INVALID_SCALAR.match(str(exc))
        if found is None or int(found.group(1)) >= len(calls):
            return False
        call = calls[int(found.group(1))]
        if call.op != "all_to_all_single" or not call.spec.dtype.is_complex:
            return False
    return set(failure.exceptions) == set(failure.ranks)


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
_STALE_RENDEZVOUS = re.compile(r"Gloo connectFullMesh failed|gloo/transport/tcp/\S+\] (Read error \S+ )?"
                               r"(Connection (reset|closed) by peer|Socket Timeout|"
                               r"Timed out waiting \d+ms for recv operation)", re.S)
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
    if isinstance(failure, RankTimeout):
        return bool(failure.ranks) and all(_BUILDING_GLOO_GROUP in failure.stacks.get(r, "") for r in failure.ranks)
    if not isinstance(failure, RankError) or not failure.exceptions:
        return False
    return (all(_STALE_RENDEZVOUS.search(str(exc)) for exc in failure.exceptions.values())
            and all(any(where in failure.straggler_stacks.get(r, "") for where in _IN_THE_EXAMPLE)
                    for r in failure.stragglers))


register(KnownBug(
    id="new-group-local-sync-recreate-fails", kind="crash",
    summary="new_group(ranks, use_local_synchronization=True) over ranks that had such a group before, "
            "destroyed, reuses its hashed name and store keys: building it fails ('Gloo connectFullMesh "
            "failed'), its first collective fails ('Connection reset by peer', a recv timeout) or a rank hangs",
    where=("subgroups",), recognise=_is_local_sync_recreate, seen_on=SEEN_ON,
    reproducer="docs/findings/new-group-local-sync-recreate-fails.py"))


def _is_mesh_order(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is on a mesh dimension whose drawn ranks are not ascending, and is exactly what the
    ascending order gives (the rank says so, ``MESH_SORTED_ORDER``): its local rank, or an all_gather's
    outputs (all_reduce and broadcast don't depend on the order, so a wrong one is never this bug)."""
    groups = getattr(example.get("case"), "groups", ())
    unsorted = {(g.ranks, dim) for g in groups if g.kind == "mesh" for dim in g.unsorted_dims()}
    problems = _problems(failure)
    return bool(problems) and bool(unsorted) and all(
        MESH_SORTED_ORDER in p
        and any(p.startswith(f"{dim} of {ranks} ") or f"on mesh {list(ranks)} ({dim}," in p for ranks, dim in unsorted)
        for p in problems or ())


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
_PEER_CLOSED_MID_CONNECT = re.compile(r"Gloo connectFullMesh failed.*Connection (closed|reset) by peer", re.S)


def _is_destroyed_early(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every collective of the example moves no data (zero-size tensors: nothing makes a peer wait for
    this rank after its ``new_group`` returned, so it can finish the example and destroy the group), every
    rank that failed raised gloo's "connectFullMesh failed ... Connection closed by peer" while making
    the example's groups, and a rank left waiting waits in a later group's making (for the failed rank)."""
    spec = getattr(example.get("case"), "spec", None)
    if spec is None or math.prod(spec.shape) != 0:
        return False
    if not isinstance(failure, RankError) or not failure.exceptions:
        return False
    return (all(_PEER_CLOSED_MID_CONNECT.search(str(exc)) and SUBGROUP_MAKING in failure.tracebacks.get(r, "")
                for r, exc in failure.exceptions.items())
            and all(SUBGROUP_MAKING in failure.straggler_stacks.get(r, "") for r in failure.stragglers))


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
_UNCLEAR = re.compile(r"(?:send to|receive from|wait for the send to) rank (\d+)(?: and the receive from it)? "
                      rf"\(tag (\d+), .*{REFUSED_UNCLEARLY}: "
                      r".*(?:Pair is not connected|tcp/pair\.cc:\d+\] writev \[none\]: Bad file descriptor)")


def _is_self_loop_unclear(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a self-loop refused with gloo's "Pair is not connected" enforce, an error that
    doesn't say the peer is the rank itself (a self-loop may deliver, or be refused clearly): the rank
    that reported it, the peer it names and the tag are a drawn message from that rank to itself."""
    messages = getattr(example.get("case"), "messages", None)
    if messages is None or not isinstance(failure, PropertyFailure) or failure.results is None:
        return False
    loops = {(m.src, m.tag) for m in messages if m.src == m.dst}
    seen = False
    for rank, result in enumerate(failure.results):
        for problem in result or ():
            found = _UNCLEAR.search(problem)
            if found is None or int(found.group(1)) != rank or (rank, int(found.group(2))) not in loops:
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


_WIDE = ("uint16", "uint32", "uint64")
_UNPICKLE_ERROR = re.compile(r"UntypedStorage' has no attribute 'dtype'|"
                             r"(float8|uint16|uint32|uint64).*(not supported|unpickl)", re.S)


def _is_wide_unsigned_unpickle(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a rank's collective raising the unpickling error, on a rank that receives a
    tensor of a dtype torch 2.13 can't unpickle (uint16/32/64, float8)."""
    case: Any = example.get("case")
    received = getattr(case, "dtypes_received", None)
    if received is None or not isinstance(failure, PropertyFailure) or not failure.results:
        return False
    world = len(failure.results)
    raised = OBJECT_CALL_RAISED.split("{type}")[0].format(op=case.op)  # "<op> raised "
    seen = False
    for rank, result in enumerate(failure.results):
        for problem in result or ():
            if not (isinstance(problem, str) and problem.startswith(raised) and _UNPICKLE_ERROR.search(problem)):
                return False
            if not any(d in _WIDE or d.startswith("float8") for d in received(rank, world)):
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

_TP_STEP_RAISED = "the SGD step on the parallelised parameters raised RuntimeError: "
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
    return _every_problem(failure, lambda p: p.startswith(_TP_STEP_RAISED) and _TP_INPLACE in p
                          and "((Replicate(),), (Shard(dim=" in p)


register(KnownBug(
    id="tp-colwise-empty-shard-step-fails", kind="crash",
    summary="a Colwise/Rowwise-parallel nn.Linear whose sharded dim is smaller than the mesh (a rank's piece "
            "empty) gets Replicate() gradients for its Shard parameters, and the optimizer's in-place step "
            "raises 'in-place operations that require placement changes are not supported'",
    where=("tensor_parallel",), recognise=_is_tp_empty_shard_step, seen_on=SEEN_ON,
    reproducer="docs/findings/tp-colwise-empty-shard-step-fails.py"))


_GATHER_FLOAT32 = "(exactly a float32 round trip of the original)"  # sharded_tensor.GATHER_FLOAT32_MARKER


def _is_sharded_tensor_gather_float32(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is the gather's result on its destination, which the check found to be exactly
    the original rounded to float32 and back (ShardedTensor.gather's default buffers are float32)."""
    problems = _problems(failure)
    if not problems:
        return False
    return all(p.startswith("gather to rank ") and p.endswith(_GATHER_FLOAT32) for p in problems)


register(KnownBug(
    id="sharded-tensor-gather-default-dtype-float32", kind="wrong result",
    summary="ShardedTensor.gather(dst, out) without dtype gathers through buffers of torch's default dtype "
            "(float32), so int64/int32/float64 values arrive in out rounded to float32",
    where=("sharded_tensor",), recognise=_is_sharded_tensor_gather_float32, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/110561",
    reproducer="docs/findings/sharded-tensor-gather-default-dtype-float32.py"))


_STALE_SHARD = "[STALE_SHARD: "  # join.STALE_SHARD's start: the check matched what the bug computes


def _is_join_zero_joined_shard_stale(example: Mapping[str, Any], failure: BaseException) -> bool:
    """DDP with ZeRO under Join, and every problem on every rank is a parameter that the check found
    equal to the joined owner's shard stepped with that rank's own (stale or absent) gradients."""
    case = example.get("case")
    return bool(getattr(case, "zero", False)) and _every_problem(failure, lambda p: _STALE_SHARD in p)


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
    message = str(failure)
    return (isinstance(failure, RankError) and "AssertionError" in message and "batched_powerSGD_hook" in message
            and "_orthogonalize" in message)


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
    if spec is None or not placements or not isinstance(failure, RankError) or not failure.exceptions:
        return False
    size, n = spec.shape[case.dim % len(spec.shape)], len(placements)
    if not -(-size // n) * (n - 1) > size:
        return False
    return all(isinstance(exc, IndexError) and "start out of range" in str(exc)
               and "chunk_sharding_spec" in failure.tracebacks.get(rank, "")
               for rank, exc in failure.exceptions.items())


_SHARD_SIZES = re.compile(r"shard_sizes=\[([^\]]*)\]")


def _is_empty_shards_overlap(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: every failed rank raised ValueError "Shards ... and ... overlap" about two shards that are
    both empty (a size 0 in each), from the shard-metadata check ChunkShardingSpec.shard runs."""
    if getattr(example.get("case"), "spec", None) is None or not isinstance(failure, RankError) \
            or not failure.exceptions:
        return False
    for rank, exc in failure.exceptions.items():
        sizes = _SHARD_SIZES.findall(str(exc))
        if not (isinstance(exc, ValueError) and str(exc).endswith("overlap") and len(sizes) == 2
                and all("0" in [n.strip() for n in s.split(",")] for s in sizes)
                and "chunk_sharding_spec" in failure.tracebacks.get(rank, "")):
            return False
    return True


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


_GATHER_SKIPPED = "[GATHER_SKIPPED]"  # sharded_tensor.GATHER_SKIPPED_MARKER


def _is_gather_empty_shard_skip(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A rank whose local shard is empty returned from ``ShardedTensor.gather`` without joining the gather
    collective (the check saw its group's collective count unchanged, joined the gather for the waiting
    ranks and says so); every other problem is that too, or the float32 rounding of
    sharded-tensor-gather-default-dtype-float32 on the destination, which the same example can show."""
    problems = _problems(failure)
    if not problems or not any(_GATHER_SKIPPED in p for p in problems):
        return False
    return all((_GATHER_SKIPPED in p and "(empty)" in p)
               or (p.startswith("gather to rank ") and p.endswith(_GATHER_FLOAT32)) for p in problems)


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
_IN_RETIRE = re.compile(r"subgroups\.py\", line \d+ in _retire")


def _is_group_drop_deadlock(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The ranks timed out with a rank frozen while dropping process groups: its stack is faulthandler's (it
    answered no snapshot: none of its Python threads ran), in the subgroups property's ``_retire``."""
    if not isinstance(failure, RankTimeout) or not failure.ranks:
        return False
    return any(_IN_RETIRE.search(failure.stacks.get(r, "")) for r in failure.ranks)


register(KnownBug(
    id="gloo-process-group-drop-deadlocks", kind="hang",
    summary="torch 2.6.0: dropping the last reference to a gloo process group right after a collective on it "
            "can freeze the process: ~ProcessGroupGloo runs with the GIL held and joins a worker thread that "
            "needs the GIL to free the finished Work's tensors",
    where=("subgroups",), recognise=_is_group_drop_deadlock, seen_on=("2.6",),
    upstream="https://github.com/pytorch/pytorch/pull/154976",
    reproducer="docs/findings/gloo-process-group-drop-deadlocks.py"))


# -- pipelining ---------------------------------------------------------------------------------

_IMPLICIT_ONES = "[IMPLICIT_ONES: "  # pipelining.IMPLICIT_ONES's start: the check matched what the bug computes
_STAGE_BACKWARD_FAILED = "Failed to run stage backward"


def _is_pipelining_static_args_no_grad(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Static stages built from plain example tensors (``config.plain_examples``), and either every problem
    is a stage gradient the check found equal to backward from that stage's own output with a gradient of
    ones, or every rank that raised raised the stage backward's RuntimeError with no output gradient."""
    config = example.get("config")
    if not (getattr(config, "static", False) and getattr(config, "plain_examples", False)):
        return False
    if isinstance(failure, RankError):
        return bool(failure.exceptions) and all(
            isinstance(exc, RuntimeError) and _STAGE_BACKWARD_FAILED in str(exc)
            and "Output gradient: ('None',)" in str(exc) for exc in failure.exceptions.values())
    return _every_problem(failure, lambda p: _IMPLICIT_ONES in p)


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
    if not getattr(config, "static_graph", False) or not isinstance(failure, RankError) or not failure.exceptions:
        return False
    return all(isinstance(exc, RuntimeError) and _EXPECT_AUTOGRAD_HOOKS in str(exc)
               for exc in failure.exceptions.values())


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
    return isinstance(failure, RankError) and bool(failure.exceptions) and all(
        isinstance(exc, RuntimeError) and _TP_RESHAPE_SHARDED in str(exc) for exc in failure.exceptions.values())


register(KnownBug(
    id="tp-rowwise-empty-shard-forward-fails", kind="crash",
    summary="a RowwiseParallel nn.Linear with fewer input features than the mesh has ranks (a rank's Shard(1) "
            "piece empty) raises in its forward, 'This operation would remove or reshape sharded dimension'",
    where=("tensor_parallel",), recognise=_is_tp_rowwise_empty_shard_forward, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/141335",
    reproducer="docs/findings/tp-rowwise-empty-shard-forward-fails.py"))


_TP_VIEW_INCOMPATIBLE = "view size is not compatible with input tensor's size and stride"
_LINEAR_FORWARD = re.compile(r'nn[/\\]modules[/\\]linear\.py", line \d+, in forward')
_AUTOGRAD_BACKWARD = re.compile(r'autograd[/\\]graph\.py", line \d+, in _engine_run_backward')


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
    if not isinstance(failure, RankError) or 0 not in failure.exceptions:
        return False
    return all(isinstance(exc, RuntimeError) and _TP_VIEW_INCOMPATIBLE in str(exc)
               and (_LINEAR_FORWARD.search(failure.tracebacks.get(rank, "")) is not None
                    or _AUTOGRAD_BACKWARD.search(failure.tracebacks.get(rank, "")) is not None)
               for rank, exc in failure.exceptions.items())


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


_TP_OUTPUT_REPLICATED = re.compile(r"^output: DTensor \([0-9, ]*\) \(Replicate\(\),\), expected \([0-9, ]*\) "
                                   r"\(Shard\(dim=(\d)\),\)$")


_TP_LOCAL_OUTPUT_SHAPE = re.compile(r"^output's local piece on rank (\d+): got \(([0-9, ]*)\) (\S+), "
                                    r"expected \(([0-9, ]*)\) (\S+)$")


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.replace(" ", "").split(",") if n)


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

    def replicated(problem: str) -> bool:
        match = _TP_OUTPUT_REPLICATED.match(problem)
        return match is not None and int(match.group(1)) == dim

    def whole_local(problem: str) -> bool:
        match = _TP_LOCAL_OUTPUT_SHAPE.match(problem)
        if match is None or match.group(3) != match.group(5):
            return False
        rank = int(match.group(1))
        return rank < world and _shape(match.group(2)) == whole and _shape(match.group(4)) == chunk(rank) != whole

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


_GLOO_SIZE_MISMATCH = "Received data size doesn't match expected size"
# the enforce itself, which torch 2.6.0's gloo states without the sentence above ("... 40 vs 8")
_GLOO_SIZE_ENFORCE = "op.preamble.length <= op.nbytes"
_RANKS_DIFFER = "'s gradients differ from rank 0's bitwise"  # comm_hooks' cross-rank check


def _is_powersgd_callback_collectives_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A PowerSGD case whose model spans more than one bucket (a bucket cap drawn, or an unused layer that
    brings find_unused_parameters), and the symptom of the ranks' collectives out of step: the ranks hung
    with a rank inside one of powerSGD_hook's future callbacks (its all-reduces of P or Q); or a rank died
    on gloo's "Received data size doesn't match expected size" inside such a callback, or raised a gloo
    error through one (a recv timed out: "Got the following error when running the callback"); or the synced
    gradients differ across the ranks bitwise (every rank gets the same all-reduce result unless the
    ranks paired different all-reduces: a deterministic bug in the hook would not make them differ)."""
    from fuzzdist.errors import RankCrash

    case = example.get("case")
    if type(case).__name__ != "PowerSGDCase":  # comm_hooks' PowerSGD check only
        return False
    config = getattr(case, "config", None)
    if config is None or not (getattr(config, "bucket_cap_mb", None) is not None
                              or getattr(config, "find_unused_parameters", False)):
        return False
    if isinstance(failure, RankTimeout):
        return "powerSGD_hook.py" in str(failure)
    if isinstance(failure, RankCrash):
        text = str(failure)
        return (_GLOO_SIZE_MISMATCH in text or _GLOO_SIZE_ENFORCE in text) and "powerSGD_hook.py" in text
    if isinstance(failure, RankError):  # a gloo error raised through one of the hook's callbacks
        return bool(failure.exceptions) and all(
            "when running the callback" in str(exc) and "powerSGD_hook.py" in str(exc)
            for exc in failure.exceptions.values())
    return any(_RANKS_DIFFER in p for p in _problems(failure) or [])


register(KnownBug(
    id="powersgd-multiple-buckets-hangs", kind="hang",
    summary="DDP with powerSGD_hook over more than one gradient bucket, on gloo: the hook issues (and waits on) "
            "its P and Q all-reduces from future callbacks, whose order across the ranks then depends on thread "
            "scheduling, so a compressed step hangs, aborts a rank (gloo's size mismatch) or gives the ranks "
            "different gradients",
    where=("comm_hooks",), recognise=_is_powersgd_callback_collectives_hang, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/49709",
    reproducer="docs/findings/powersgd-multiple-buckets-hangs.py"))

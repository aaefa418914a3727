"""The known torch bugs the DTensor-operator property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by name).
A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the case's
operands, never a message's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind
from fuzzdist.properties.dtensor_ops.cases import OpCase
from fuzzdist.properties.dtensor_ops.catalogue import lookup
from fuzzdist.properties.dtensor_ops.operands import PARTIAL_OPS, Operand, shard_dim
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL, OUTPUT


def _operands(case: Any) -> list[Operand]:
    return [o for o in case.operands if isinstance(o, Operand)] if isinstance(case, OpCase) else []


def _is_integer_partial_sum_made_float(example: Mapping[str, Any], failure: BaseException) -> bool:
    """An integer operand is Partial(sum) and another is not, and every problem is an output whose dtype
    is float32 where the local result's is an integer dtype (values aside)."""
    operands = _operands(example.get("case"))
    partial_int = any(
        PARTIAL_OPS.get(name) == "sum" and not o.spec.dtype.is_floating_point for o in operands for name in o.placements
    )
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    if not partial_int or not problems:
        return False
    return all(
        p.kind is Kind.SHAPE
        and p.subject[:1] == (OUTPUT,)
        and isinstance(p.got, tuple)
        and p.got[1] == torch.float32
        and isinstance(p.expected, tuple)
        and not p.expected[1].is_floating_point
        for p in problems
    )


register(
    KnownBug(
        id="dtensor-partial-sum-int-becomes-float", where=("dtensor_ops",), recognise=_is_integer_partial_sum_made_float
    )
)


def _is_partial_type_change_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Operands of one case are Partial with different reduce ops, and every problem is the DTensor
    operator raising AssertionError."""
    operands = _operands(example.get("case"))
    kinds = {PARTIAL_OPS[name] for o in operands for name in o.placements if name in PARTIAL_OPS}
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    if len(kinds) < 2 or not problems:
        return False
    return all(p.kind is Kind.RAISED and p.error == "AssertionError" and p.what == DTENSOR_CALL for p in problems)


register(
    KnownBug(
        id="dtensor-partial-reduce-op-change-asserts", where=("dtensor_ops",), recognise=_is_partial_type_change_assert
    )
)


def _writes_out(case: OpCase) -> bool:
    """The case's operator writes its result into an ``out=`` tensor."""
    op_def = lookup(case.op)
    return op_def is not None and op_def.out


def _is_out_placement_empty_min(example: Mapping[str, Any], failure: BaseException) -> bool:
    """An ``out=`` operator, and every problem is the DTensor operator raising the RuntimeError of ``min()``
    over no strategies."""
    case = example.get("case")
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    if not isinstance(case, OpCase) or not _writes_out(case) or not problems:
        return False
    return all(
        p.kind is Kind.RAISED
        and p.what == DTENSOR_CALL
        and p.error == "RuntimeError"
        and evidence.says(p, "min() arg is an empty sequence")
        for p in problems
    )


register(
    KnownBug(
        id="dtensor-out-placement-mismatch-empty-min", where=("dtensor_ops",), recognise=_is_out_placement_empty_min
    )
)


def _has_empty_shard(case: OpCase) -> bool:
    """Some operand is sharded on a dim with fewer elements than its mesh dim has ranks."""
    return any(
        o.spec.shape[dim] < case.mesh_shape[m]
        for o in _operands(case)
        for m, name in enumerate(o.placements)
        if (dim := shard_dim(name)) is not None
    )


def _is_argminmax_empty_shard_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """argmax/argmin of an operand whose local shard is empty on some rank, and the ranks were left waiting
    in a collective (or the empty rank raised IndexError on its piece)."""
    case = example.get("case")
    if not isinstance(case, OpCase) or case.op not in ("reductions.argmax", "reductions.argmin"):
        return False
    if not _has_empty_shard(case):
        return False
    return bool(evidence.waiting(failure)) or any(
        p.kind is Kind.RAISED and p.error == "IndexError"
        for ranks in (evidence.reported_by_rank(failure) or [])
        for p in ranks
    )


register(
    KnownBug(id="dtensor-argmax-empty-shard-hangs", where=("dtensor_ops",), recognise=_is_argminmax_empty_shard_hang)
)


def _is_split_of_empty_dim_raising(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``views.split`` of an operand with a dim of size 0, and every problem is the DTensor operator raising
    RuntimeError (the sharding propagator's: along a non-empty dim DTensor's split works, so none is
    raised there)."""
    case = example.get("case")
    if not isinstance(case, OpCase) or case.op != "views.split":
        return False
    operands = _operands(case)
    if not operands or 0 not in operands[0].spec.shape:
        return False
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    return bool(problems) and all(
        p.kind is Kind.RAISED and p.what == DTENSOR_CALL and p.error == "RuntimeError" for p in problems
    )


register(
    KnownBug(id="dtensor-split-empty-dim-raises", where=("dtensor_ops",), recognise=_is_split_of_empty_dim_raising)
)


def _partial_sum_ranks(operand: Any, mesh_shape: tuple[int, ...]) -> int:
    """How many ranks ``operand`` is Partial(sum) over (the product of those mesh dims; 1 for none)."""
    if not isinstance(operand, Operand):
        return 1
    ranks = 1
    for name, n in zip(operand.placements, mesh_shape, strict=True):
        if PARTIAL_OPS.get(name) == "sum":
            ranks *= n
    return ranks


def _is_addcdiv_partial_divisor_grad_scaled(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``addcdiv`` whose divisor is Partial(sum) over k > 1 ranks, and every problem is a gradient value k
    times the local one (the fill_ of ``value / tensor2`` on every rank of the Partial)."""
    case = example.get("case")
    if not isinstance(case, OpCase) or case.op != "pointwise.addcdiv" or case.grad_seed is None:
        return False
    k = _partial_sum_ranks(case.operands[2], case.mesh_shape)
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    if k == 1 or not problems:
        return False
    return all(
        p.kind is Kind.MISMATCH
        and isinstance(p.got, float)
        and isinstance(p.expected, float)
        and p.expected != 0
        # k copies summed in the operand's dtype: within bfloat16's rounding of k * expected
        and abs(p.got - k * p.expected) <= 1e-2 * abs(k * p.expected)
        for p in problems
    )


register(
    KnownBug(
        id="dtensor-partial-sum-fill-scales-by-ranks",
        where=("dtensor_ops",),
        recognise=_is_addcdiv_partial_divisor_grad_scaled,
    )
)
_RESHAPES = ("views.view", "views.reshape", "views.flatten")


def _reshaped_to_empty_1d(case: OpCase) -> bool:
    """A view/reshape/flatten case whose operand has a size-0 dim and another dim, and whose result is 1-D
    (a view or reshape to a one-dim shape, or a flatten over every dim)."""
    operands = _operands(case)
    if case.op not in _RESHAPES or not operands:
        return False
    shape = operands[0].spec.shape
    if 0 not in shape or len(shape) < 2:
        return False
    # the case's arguments are its structure (dims, a target shape), not a message: matched by pattern
    match case:
        case OpCase(op="views.flatten", args=(_, int(start), int(end))):
            return sorted((start % len(shape), end % len(shape))) == [0, len(shape) - 1]
        case OpCase(args=(_, tuple(target))):
            return len(target) == 1
    return False


def _is_view_empty_to_1d_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A tensor with a size-0 dim viewed (reshaped, flattened) as 1-D, and the ranks were left waiting: DTensor's
    view sharding rule never returns."""
    case = example.get("case")
    return isinstance(case, OpCase) and _reshaped_to_empty_1d(case) and bool(evidence.waiting(failure))


register(KnownBug(id="dtensor-view-empty-to-1d-hangs", where=("dtensor_ops",), recognise=_is_view_empty_to_1d_hang))


def _is_norm_inf_empty_shard_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The inf-norm of an operand whose local shard is empty on some rank, and the ranks were left waiting in a
    collective (the empty rank raised on its piece and left; the others wait in the result's all-reduce)."""
    case = example.get("case")
    return (
        isinstance(case, OpCase)
        and case.op == "reductions.norm_inf"
        and _has_empty_shard(case)
        and bool(evidence.waiting(failure))
    )


register(
    KnownBug(id="dtensor-norm-inf-empty-shard-hangs", where=("dtensor_ops",), recognise=_is_norm_inf_empty_shard_hang)
)


def _is_linear_1d_input_shape(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``matrix.linear`` of a 1-D input, and every problem is the output's shape: the local operator's
    (*weight rows*,) where the DTensor reports a leading 1 before it."""
    case = example.get("case")
    operands = _operands(case)
    if not isinstance(case, OpCase) or case.op != "matrix.linear" or not operands or len(operands[0].spec.shape) != 1:
        return False
    problems = [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]
    return bool(problems) and all(
        # a shape problem is (shape, dtype): the same dtype, the shape with a leading 1 added
        p.kind is Kind.SHAPE
        and isinstance(p.got, tuple)
        and isinstance(p.expected, tuple)
        and len(p.got) == len(p.expected) == 2
        and p.got[1] == p.expected[1]
        and tuple(p.got[0]) == (1, *p.expected[0])
        for p in problems
    )


register(KnownBug(id="dtensor-linear-1d-input-shape", where=("dtensor_ops",), recognise=_is_linear_1d_input_shape))

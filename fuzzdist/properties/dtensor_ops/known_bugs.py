"""The known torch bugs the DTensor-operator property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by name).
A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the case's
operands, never a message's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import Any

import torch

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.dtensor_ops.cases import OpCase
from fuzzdist.properties.dtensor_ops.catalogue import lookup
from fuzzdist.properties.dtensor_ops.operands import PARTIAL_OPS, Operand, shard_dim
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL, OUTPUT


def _every_rank_problem(failure: BaseException) -> list[Problem]:
    """The problems every rank reported, rank after rank (none where the ranks reported none)."""
    return [p for ranks in (evidence.reported_by_rank(failure) or []) for p in ranks]


def _operands(case: Any) -> list[Operand]:
    return [o for o in case.operands if isinstance(o, Operand)] if isinstance(case, OpCase) else []


def _is_integer_partial_sum_made_float(example: Mapping[str, Any], failure: BaseException) -> bool:
    """An integer operand is Partial(sum) and another is not, and every problem is an output whose dtype
    is float32 where the local result's is an integer dtype (values aside)."""
    operands = _operands(example.get("case"))
    partial_int = any(
        PARTIAL_OPS.get(name) == "sum" and not o.spec.dtype.is_floating_point for o in operands for name in o.placements
    )
    problems = _every_rank_problem(failure)
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
    problems = _every_rank_problem(failure)
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
    problems = _every_rank_problem(failure)
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
    problems = _every_rank_problem(failure)
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
    problems = _every_rank_problem(failure)
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


def _view_groups_outcome(from_size: tuple[int, ...], to_size: tuple[int, ...]) -> str:
    """How DTensor's view_groups (torch/distributed/tensor/_ops/_view_ops.py, torch 2.13) ends grouping
    ``from_size`` into ``to_size``: "loops" (forever), "raises" or "returns".  Its steps are replayed on
    concrete sizes; a pass of its outer loop that ends where it began never ends.  That happens when a size-0
    dim has made both sides' products 0 and one side is left with a dim other than 1 while the other side is
    used up."""
    from_idx = to_idx = 0
    while from_idx < len(from_size) or to_idx < len(to_size):
        began = (from_idx, to_idx)
        f = from_size[from_idx] if from_idx < len(from_size) else 1
        from_idx += from_idx < len(from_size)
        t = to_size[to_idx] if to_idx < len(to_size) else 1
        to_idx += to_idx < len(to_size)
        if f == 1 and t != 1:
            to_idx -= 1  # view_groups backtracks the target dim
        elif f != 1 and t == 1:
            from_idx -= 1  # ... or the input dim
        else:
            while f != t:
                try:  # in view_groups' order: a modulo by 0 raises ZeroDivisionError there
                    if from_idx < len(from_size) and (to_idx >= len(to_size) or t % f == 0 or t > f):
                        f *= from_size[from_idx]
                        from_idx += 1
                    elif to_idx < len(to_size) and (from_idx >= len(from_size) or f % t == 0 or f > t):
                        t *= to_size[to_idx]
                        to_idx += 1
                    else:
                        return "returns"  # view_groups groups the rest
                except ZeroDivisionError:
                    return "raises"
        if (from_idx, to_idx) == began:
            return "loops"
    return "returns"


def _view_groups_never_ends(reshapes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> bool:
    """Whether DTensor's view rule, handed these (input shape, target shape) reshapes in turn, loops forever
    on one of them before any raises."""
    for from_size, to_size in reshapes:
        outcome = _view_groups_outcome(from_size, to_size)
        if outcome != "returns":
            return outcome == "loops"
    return False


def _reshapes_of(case: OpCase) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (input shape, target shape) reshapes a case's operator hands DTensor's view rule, in order: a
    view/reshape's target, a flatten's result; for a matmul whose first operand has 3 or more dims and whose
    second has 1 or 2, aten's fold of the first to (product of the leading dims, last dim) and its unfold
    of the product back to the leading dims."""
    operands = _operands(case)
    if not operands:
        return []
    shape = tuple(operands[0].spec.shape)
    # the case's arguments are its structure (dims, a target shape), not a message: matched by pattern
    match case:
        case OpCase(op="views.flatten", args=(_, int(start), int(end))) if shape:
            first, last = sorted((start % len(shape), end % len(shape)))
            return [(shape, shape[:first] + (prod(shape[first : last + 1]),) + shape[last + 1 :])]
        case OpCase(op="views.view" | "views.reshape", args=(_, tuple(target))) if -1 not in target:
            return [(shape, tuple(target))]
        case OpCase(op="matrix.matmul") if len(operands) == 2 and len(shape) >= 3:
            other = tuple(operands[1].spec.shape)
            folded = prod(shape[:-1])
            if len(other) == 1:
                return [(shape, (folded, shape[-1])), ((folded,), shape[:-1])]
            if len(other) == 2:
                return [(shape, (folded, shape[-1])), ((folded, other[1]), shape[:-1] + other[1:])]
    return []


def _is_view_empty_to_1d_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A tensor with a size-0 dim viewed (reshaped, flattened) as 1-D, and the ranks were left waiting: DTensor's
    view sharding rule never returns."""
    case = example.get("case")
    reshapes = _reshapes_of(case) if isinstance(case, OpCase) else []
    return _view_groups_never_ends(reshapes) and bool(evidence.waiting(failure))


register(KnownBug(id="dtensor-view-empty-to-1d-hangs", where=("dtensor_ops",), recognise=_is_view_empty_to_1d_hang))


def _convolution_placements_unsupported(case: OpCase) -> bool:
    """A convolution whose weight or bias is not Replicate, or whose input is placed other than Replicate,
    Shard(0) (the batch) or, without a bias, Partial(sum) (convolution is linear in its input): placements
    DTensor's convolution rule passes to the output as the input's."""
    if case.op not in ("conv.conv1d", "conv.conv2d"):
        return False
    x, *rest = case.operands
    if not isinstance(x, Operand) or any(isinstance(o, Operand) and set(o.placements) != {"R"} for o in rest):
        return True
    allowed = {"R", "S0"} if len(rest) > 1 else {"R", "S0", "P+"}
    return not set(x.placements) <= allowed


def _is_convolution_keeping_input_placements(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``conv1d``/``conv2d`` with placements DTensor's rule mislabels (:func:`_convolution_placements_unsupported`),
    and the ranks reported problems (a wrong value or shape, or a rank raising on a piece it was wrongly
    given) or were left waiting in a collective."""
    case = example.get("case")
    if not isinstance(case, OpCase) or not _convolution_placements_unsupported(case):
        return False
    problems = _every_rank_problem(failure)
    return bool(problems) or bool(evidence.waiting(failure))


register(
    KnownBug(
        id="dtensor-convolution-keeps-input-placements",
        where=("dtensor_ops",),
        recognise=_is_convolution_keeping_input_placements,
    )
)


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
    problems = _every_rank_problem(failure)
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


def _is_nearest_interpolate_of_empty_raising(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``conv.interpolate`` in nearest mode of an operand with no elements, and every problem is the DTensor
    operator raising RuntimeError over the meta function's ``torch._check`` refusing its int condition (the
    shape propagation's; the local operator returns the empty result)."""
    case = example.get("case")
    if not isinstance(case, OpCase) or case.op != "conv.interpolate" or dict(case.kwargs).get("mode") != "nearest":
        return False
    operands = _operands(case)
    if not operands or 0 not in operands[0].spec.shape:
        return False
    problems = _every_rank_problem(failure)
    return bool(problems) and all(
        p.kind is Kind.RAISED
        and p.what == DTENSOR_CALL
        and p.error == "RuntimeError"
        and evidence.says(p, "cond must be a bool")
        for p in problems
    )


register(
    KnownBug(
        id="dtensor-interpolate-nearest-empty-raises",
        where=("dtensor_ops",),
        recognise=_is_nearest_interpolate_of_empty_raising,
    )
)


def _is_index_put_backward_mixed_tensor(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``index_put`` without accumulation whose ``x`` requires grad and whose values have other than one
    element, and every problem is the backward raising torch's "mixed torch.Tensor and DTensor"
    RuntimeError: autograd builds x's gradient with a plain zeros tensor of the values' shape, which DTensor
    takes as Replicate only when it has one element."""
    case = example.get("case")
    if not isinstance(case, OpCase) or case.op != "indexing.index_put" or case.grad_seed is None:
        return False
    operands = _operands(case)
    if len(operands) != 3 or not operands[0].requires_grad or operands[2].spec.numel == 1:
        return False
    problems = _every_rank_problem(failure)
    return bool(problems) and all(
        p.kind is Kind.RAISED
        and p.what == "backward"
        and p.error == "RuntimeError"
        and evidence.says(p, "got mixed torch.Tensor and DTensor")
        for p in problems
    )


register(
    KnownBug(
        id="dtensor-index-put-backward-mixed-tensor",
        where=("dtensor_ops",),
        recognise=_is_index_put_backward_mixed_tensor,
    )
)

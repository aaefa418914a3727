"""What every rank runs: build the case's DTensors, call the operator on them and on the full tensors, and
return what differs (:func:`compute_and_check`).

Each rank builds every operand's full value from its spec and seed, and its own piece of it
(:func:`~fuzzdist.properties.dtensor_ops.operands.local_piece`), handed to ``DTensor.from_local`` with the
full shape and stride: no communication builds the inputs.  The reference is the operator over the full
tensors, on the rank, with no communication.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.dtensor import API, _quiet_logs, device_mesh, expected_local
from fuzzdist.properties.dtensor_ops.accuracy import bound, compare, finite_or_zero, magnitudes, tensors_of
from fuzzdist.properties.dtensor_ops.cases import OpCase, substitute
from fuzzdist.properties.dtensor_ops.catalogue import OpDef, lookup
from fuzzdist.properties.dtensor_ops.operands import Alias, Operand, is_partial, local_piece, placement
from fuzzdist.strategies import TensorSpec, mix_seed
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool.rank.context import RankContext


@contextlib.contextmanager
def torch_rules() -> Iterator[None]:
    """DTensor's own sharding rules (the default): nothing swapped in."""
    yield


REFUSALS = (
    "in-place operations that require placement changes are not supported",
    "does not have a sharding strategy registered",
    "which requires redistribution. Please redistribute the input first",
)
"""DTensor's explicit refusals: an error saying the input is not supported is not a wrong result.  In place:
DTensor raises "in-place operations that require placement changes are not supported ... Please use the
out-of-place version" (in torch's ``torch.distributed.tensor._sharding_prop``) where no strategy keeps the input's
placement; an operator without a sharding strategy raises NotImplementedError saying so; a view that would
reshape a sharded dim (``flatten`` of a dim sharded over more ranks than its size, say) raises "This operation
would remove or reshape sharded dimension ..., which requires redistribution. Please redistribute the input
first." (``torch.distributed.tensor._ops._view_ops``, strict views)."""


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is one of DTensor's explicit refusals (:data:`REFUSALS`)."""
    text = str(exc)
    return isinstance(exc, (RuntimeError, NotImplementedError)) and any(r in text for r in REFUSALS)


DTENSOR_CALL = "the DTensor operator"
"""The ``what`` of a :attr:`~fuzzdist.problems.Kind.RAISED` problem: the call on DTensors raised."""

OUTPUT = "output"
"""A problem's ``subject`` is ``(OUTPUT, i)`` where it is about the operator's ``i``-th output."""


def collectives_issued(mesh: Any) -> tuple[int, ...] | None:
    """How many collectives this rank has issued on each of ``mesh``'s process groups (their sequence
    numbers), or None where the backend doesn't count them."""
    try:
        return tuple(g._get_sequence_number_for_group() for g in mesh.get_all_groups())
    except (AttributeError, RuntimeError):
        return None


def placement_name(p: Any) -> str:
    """A DTensor placement's name (``"R"``, ``"S<d>"``, ``"P"`` for any Partial)."""
    if p.is_shard():
        return f"S{p.dim}"
    return "R" if p.is_replicate() else "P"


class _Built:
    """The case's inputs on this rank: full values, the reference's copies, the DTensors, the pieces."""

    def __init__(self, case: OpCase, mesh: Any, coord: tuple[int, ...]) -> None:
        self.fulls: list[torch.Tensor] = []
        self.refs: list[torch.Tensor] = []
        self.dts: list[Any] = []
        self.pieces: list[torch.Tensor] = []
        self.operands: list[Operand] = []
        for item in case.operands:
            if isinstance(item, Alias):
                for seq in (self.fulls, self.refs, self.dts, self.pieces, self.operands):
                    seq.append(seq[item.index])  # type: ignore[arg-type]
                continue
            full = item.full()
            piece = local_piece(item, full, case.mesh_shape, coord).clone()
            self.pieces.append(piece.clone())
            ref = full.clone().requires_grad_(item.requires_grad)
            piece.requires_grad_(item.requires_grad)
            dt = API.DTensor.from_local(
                piece,
                mesh,
                [placement(API, n) for n in item.placements],
                run_check=False,
                shape=full.shape,
                stride=full.stride(),
            )
            self.fulls.append(full)
            self.refs.append(ref)
            self.dts.append(dt)
            self.operands.append(item)


def _check_output(
    what: str, out: Any, ref: torch.Tensor, allowed: torch.Tensor | None, case: OpCase, coord: tuple[int, ...]
) -> list[Problem]:
    """``out`` (a DTensor) against the local result ``ref``: type, dtype, shape, requires_grad, each rank's
    piece against its placements, and ``full_tensor()`` against ``ref``."""
    if not isinstance(out, API.DTensor):
        return [Problem(Kind.SHAPE, f"{what}: type", got=type(out).__name__, expected="DTensor")]
    problems = []
    if (tuple(out.shape), out.dtype) != (tuple(ref.shape), ref.dtype):
        problems.append(
            Problem(Kind.SHAPE, what, got=(tuple(out.shape), out.dtype), expected=(tuple(ref.shape), ref.dtype))
        )
    if out.requires_grad != ref.requires_grad:
        problems.append(
            Problem(Kind.SHAPE, f"{what}: requires_grad", got=out.requires_grad, expected=ref.requires_grad)
        )
    full = out.full_tensor()  # a collective: every rank calls it, whatever it found so far
    names = tuple(placement_name(p) for p in out.placements)
    if not any(is_partial(n) or n == "P" for n in names) and tuple(full.shape) == tuple(out.shape):
        # each rank holds exactly the piece its placements say (a Partial piece is any split of the value)
        diff = compare(
            f"{what}: local piece at mesh coordinate {coord} of {names}",
            out.to_local(),
            expected_local(full, case.mesh_shape, coord, names),
            None,
        )
        if diff is not None:
            problems.append(diff)
    if not problems:
        diff = compare(f"{what}: full_tensor()", full, ref, allowed)
        if diff is not None:
            problems.append(diff)
    return problems


def _allowed(
    op_def: OpDef,
    case: OpCase,
    built: _Built,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    outs: list[torch.Tensor | None],
) -> list[torch.Tensor | None]:
    """Per output, the bound within which it may differ (None: bitwise)."""
    partial_in = any(is_partial(n) for o in built.operands for n in o.placements)
    if not (op_def.reordered or partial_in):
        return [None] * len(outs)
    full_args, _ = substitute(args, built.fulls)
    mags = magnitudes(op_def.magnitude or op_def.call, full_args, kwargs)
    terms = (
        op_def.terms(args, kwargs)
        if op_def.terms
        else (max((f.numel() for f in built.fulls), default=1) if op_def.reordered else 1)
    )
    world = 1
    for n in case.mesh_shape:
        world *= n
    allowed: list[torch.Tensor | None] = []
    for i, out in enumerate(outs):
        mag = mags[i] if i < len(mags) else None
        if out is None or mag is None or not out.dtype.is_floating_point or mag.shape != out.shape:
            allowed.append(None)
        else:
            limit = bound(out.dtype, terms, world, finite_or_zero(mag))
            allowed.append(limit.sqrt() if op_def.root else limit)
    return allowed


def _grad_allowed(
    op_def: OpDef,
    built: _Built,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    unique: list[int],
    chosen: list[int],
    outs: list[torch.Tensor],
    grads: list[torch.Tensor],
    world: int,
) -> list[torch.Tensor | None]:
    """Per input in ``unique`` (operand indices), its gradient's bound: local autograd over the float64
    absolute values of the inputs and upstream gradients (outputs ``chosen``) gives ``sum |term|``."""
    leaves: dict[int, torch.Tensor] = {}
    values = []
    for i, full in enumerate(built.fulls):
        key = id(built.refs[i])  # an aliased operand is one leaf in both places
        if key not in leaves:
            wants = built.operands[i].requires_grad and full.dtype.is_floating_point
            leaves[key] = full.detach().double().abs().requires_grad_(wants) if wants else full
        values.append(leaves[key])
    targets = [leaves[id(built.refs[i])] for i in unique]
    try:
        abs_args, _ = substitute(args, values)
        abs_outs = tensors_of((op_def.magnitude or op_def.call)(*abs_args, **kwargs))
        pairs = [(abs_outs[c], g.detach().double().abs()) for c, g in zip(chosen, grads, strict=True)]
        pairs = [(a, g) for a, g in pairs if a is not None and a.requires_grad]
        mags = torch.autograd.grad(
            [a for a, _ in pairs if a is not None], targets, [g for _, g in pairs], allow_unused=True
        )
    except (RuntimeError, TypeError, ValueError, IndexError):
        return [None] * len(unique)
    terms = sum(o.numel() for o in outs) + max((f.numel() for f in built.fulls), default=1)
    return [
        None if m is None else bound(built.fulls[i].dtype, terms, world, finite_or_zero(m.abs()))
        for i, m in zip(unique, mags, strict=True)
    ]


def _check_backward(
    op_def: OpDef,
    case: OpCase,
    built: _Built,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dt_outs: list[Any],
    ref_outs: list[Any],
    chosen: list[int],
    mesh: Any,
    coord: tuple[int, ...],
) -> list[Problem]:
    """For a drawn upstream gradient of each differentiable output, each drawn input's DTensor gradient
    (its ``full_tensor()``) against local autograd's."""
    assert case.grad_seed is not None
    keep = [k for k, r in enumerate(ref_outs) if r is not None and r.requires_grad and r.dtype.is_floating_point]
    seen: set[int] = set()
    unique = []
    for i, o in enumerate(built.operands):
        if o.requires_grad and id(built.refs[i]) not in seen:
            seen.add(id(built.refs[i]))
            unique.append(i)
    if not keep or not unique:
        return []
    grads, dt_grads = [], []
    for k in keep:
        d, r = dt_outs[k], ref_outs[k]
        g = TensorSpec(tuple(r.shape), r.dtype).materialize("cpu", mix_seed(case.grad_seed, k))
        names = tuple("R" if placement_name(p) == "P" else placement_name(p) for p in d.placements)
        grads.append(g)
        dt_grads.append(
            API.DTensor.from_local(
                expected_local(g, case.mesh_shape, coord, names).contiguous(),
                mesh,
                [placement(API, n) for n in names],
                run_check=False,
                shape=g.shape,
                stride=g.stride(),
            )
        )
    expected = torch.autograd.grad(
        [ref_outs[k] for k in keep], [built.refs[i] for i in unique], grads, allow_unused=True
    )
    try:
        got = torch.autograd.grad(
            [dt_outs[k] for k in keep], [built.dts[i] for i in unique], dt_grads, allow_unused=True
        )
    except Exception as exc:  # noqa: BLE001 - any failure of the backward is the finding
        if refused(exc):  # a backward kernel without a sharding strategy: refused, as in the forward
            return []
        return [Problem.raised(exc, "backward")]
    world = 1
    for n in case.mesh_shape:
        world *= n
    allowed = _grad_allowed(
        op_def, built, args, kwargs, unique, [chosen[k] for k in keep], [ref_outs[k] for k in keep], grads, world
    )
    problems = []
    for i, e, g, limit in zip(unique, expected, got, allowed, strict=True):
        e_full = torch.zeros_like(built.refs[i]) if e is None else e.detach()
        g_full = torch.zeros_like(built.refs[i]) if g is None else g.full_tensor()  # type: ignore[attr-defined]
        diff = compare(f"grad of input {i}", g_full, e_full, limit)
        if diff is not None:
            problems.append(diff)
    return problems


def compute_and_check(ctx: RankContext, case: OpCase, rules: Callable[[], Any] = torch_rules) -> list[Problem] | None:
    """On every rank: the case's operator on its DTensors (with ``rules`` entered around the call: DTensor's
    own by default) against the operator on the full tensors; None if all is well, else the problems."""
    op_def = lookup(case.op)
    assert op_def is not None, f"{case.op} is checked against the catalogue on the driver"
    mesh = device_mesh(ctx.device.type, case.mesh_shape)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None, "every rank of the pool is in the mesh"
    coord = tuple(coordinate)
    kwargs = dict(case.kwargs)
    built = _Built(case, mesh, coord)
    ref_args, _ = substitute(case.args, built.refs)
    dt_args, _ = substitute(case.args, built.dts)
    try:
        ref_args_run = ref_args
        if op_def.mutates is not None:  # the reference's leaf stays as drawn; the operator changes a copy
            copies = {id(r): r.detach().clone() for r in built.refs}  # one copy per aliased tensor
            built.refs = [copies[id(r)] for r in built.refs]
            ref_args_run, _ = substitute(case.args, built.refs)
        ref_out = op_def.call(*ref_args_run, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the drawn arguments are invalid: fuzzdist's bug, said so
        if op_def.local_domain:
            return None
        return [
            Problem.raised(
                exc,
                "the local operator",
                hint="the drawn arguments are invalid for this "
                "operator: a bug in fuzzdist's generator, please report it",
            )
        ]
    problems: list[Problem] = []
    issued_before = collectives_issued(mesh)
    try:
        with _quiet_logs(), rules():
            dt_out = op_def.call(*dt_args, **kwargs)
        ref_outs = tensors_of(ref_out)
        dt_outs = tensors_of(dt_out)
        if len(ref_outs) != len(dt_outs):
            return [Problem(Kind.SHAPE, "outputs", got=len(dt_outs), expected=len(ref_outs))]
        chosen = op_def.outputs if op_def.outputs is not None else range(len(ref_outs))
        allowed = _allowed(op_def, case, built, case.args, kwargs, ref_outs)
        for i in chosen:
            ref = ref_outs[i]
            if ref is None:
                continue
            problems += [
                p.about(p.what, subject=(OUTPUT, i))
                for p in _check_output(f"output {i}", dt_outs[i], ref, allowed[i], case, coord)
            ]
        problems += _check_inputs(op_def, built, allowed, coord)
        if case.grad_seed is not None:  # on every rank, whatever it found: the backward runs collectives
            problems += _check_backward(
                op_def,
                case,
                built,
                case.args,
                kwargs,
                [dt_outs[i] for i in chosen],
                [ref_outs[i] for i in chosen],
                list(chosen),
                mesh,
                coord,
            )
    except Exception as exc:  # noqa: BLE001 - DTensor raised where the local operator did not
        if refused(exc):
            return None
        if issued_before is None or collectives_issued(mesh) != issued_before:
            # A rank that raised before issuing any collective leaves its groups in step: a peer that issued
            # one either raised too (and asks for this) or waits in it until the pool's timeout restarts it.
            ctx.request_recycle(
                "a rank raised part-way through a DTensor operator: the mesh's process groups may "
                "have issued different numbers of collectives on different ranks"
            )
        problems.append(Problem.raised(exc, DTENSOR_CALL))
    return capped(problems) or None


def _check_inputs(
    op_def: OpDef, built: _Built, allowed: list[torch.Tensor | None], coord: tuple[int, ...]
) -> list[Problem]:
    """Out-of-place: every rank's input pieces are unchanged.  In place: the changed input's value is the
    local operator's changed full tensor."""
    problems = []
    for i, dt in enumerate(built.dts):
        if built.operands[i] is built.operands[op_def.mutates or 0] and op_def.mutates is not None:
            full = dt.full_tensor()
            diff = compare(f"input {i} changed in place", full, built.refs[i], allowed[0] if allowed else None)
        else:
            diff = compare(f"input {i} at mesh coordinate {coord}", dt.to_local().detach(), built.pieces[i], None)
            if diff is not None:
                diff = diff.about(f"input {i} at mesh coordinate {coord} (changed by an out-of-place operator)")
        if diff is not None:
            problems.append(diff)
    return problems

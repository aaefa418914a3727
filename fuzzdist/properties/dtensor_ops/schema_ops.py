"""The pointwise aten overloads DTensor registers, each called through its schema: one operator per
overload that takes only tensors and scalars (and optional arguments left at their defaults).

Which dtype an overload takes is asked of torch once, on import: a two-element float32, then int64, then
bool call of the overload on plain tensors (an ``out=`` overload with an output of the input's dtype, then
bool, then float32).  All tensor operands of a case have one drawn shape; scalars are drawn from a few
values.  The local operator's domain is not known from its schema (an integer remainder by zero raises),
so an example where the local overload raises is not a test of DTensor: ``local_domain`` marks them.
In place (a mutable ``self``) and ``out=`` overloads are checked like the others.

The driver registers them all (:func:`register_all`, the probe included); a rank builds only the one its
case names (:func:`one`), from the schema alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, OpDef, register
from fuzzdist.properties.dtensor_ops.inputs import operand, shapes

_PROBE_DTYPES = (torch.float32, torch.int64, torch.bool)
_SCALARS = {torch.float32: (0.5, 2.0, -1.5), torch.int64: (1, 2, -1), torch.bool: (True, False)}


@dataclass(frozen=True)
class Plan:
    """How to call an overload: per positional argument ``"T"`` (a tensor) or ``"S"`` (a scalar); ``out``
    whether it takes ``out=``; ``mutates`` the flat operand it changes; ``dtype`` and ``out_dtype``."""

    kinds: tuple[str, ...]
    out: bool
    mutates: int | None
    dtype: torch.dtype
    out_dtype: torch.dtype | None


_BY_NAME: dict[str, torch._ops.OpOverload] = {}


def registered_pointwise() -> list[torch._ops.OpOverload]:
    """The pointwise overloads DTensor registers (its ``pointwise_ops`` list), sorted by name."""
    from torch.distributed.tensor._ops import _pointwise_ops

    ops = sorted(_pointwise_ops.pointwise_ops, key=str)
    _BY_NAME.update((str(op), op) for op in ops)
    return ops


def _kinds(op: torch._ops.OpOverload) -> tuple[tuple[str, ...], bool, int | None] | str:
    """The argument kinds of ``op``'s schema, or why it has no generator here."""
    kinds: list[str] = []
    out = False
    mutates = None
    for arg in op._schema.arguments:
        text = str(arg.type)
        writes = arg.alias_info is not None and arg.alias_info.is_write
        if arg.kwarg_only and arg.name == "out" and text == "Tensor":
            out = True
            continue
        if arg.has_default_value() and (arg.kwarg_only or text not in ("Tensor", "Scalar", "number")):
            continue  # left at its default
        if text == "Tensor":
            if writes:
                mutates = len([k for k in kinds if k == "T"])
            kinds.append("T")
        elif text in ("Scalar", "number"):
            kinds.append("S")
        else:
            return f"an argument of type {text}"
    if not out and any(
        r.alias_info is not None and r.alias_info.is_write for r in op._schema.arguments if r.kwarg_only
    ):
        return "a keyword-only output other than out"
    if len(op._schema.returns) != 1 and not out:
        return "several outputs"
    return tuple(kinds), out, mutates


def _probe(
    op: torch._ops.OpOverload, kinds: tuple[str, ...], out: bool
) -> tuple[torch.dtype, torch.dtype | None] | None:
    for dtype in _PROBE_DTYPES:
        args = [torch.ones(2, dtype=dtype) if k == "T" else _SCALARS[dtype][0] for k in kinds]
        for out_dtype in (dtype, torch.bool, torch.float32) if out else (None,):
            try:
                kwargs = {"out": torch.empty(2, dtype=out_dtype)} if out else {}
                result = op(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
            except Exception:  # noqa: BLE001 - the overload refuses this dtype: try the next
                continue
            if isinstance(result, torch.Tensor):
                return dtype, out_dtype
    return None


@functools.cache
def plans() -> dict[str, Plan | str]:
    """Per registered pointwise overload (by name), how it is called, or why it is not drawn."""
    out: dict[str, Plan | str] = {}
    for op in registered_pointwise():
        found = _kinds(op)
        if isinstance(found, str):
            out[str(op)] = found
            continue
        kinds, has_out, mutates = found
        if "T" not in kinds:
            out[str(op)] = "no tensor argument"
            continue
        probed = _probe(op, kinds, has_out)
        if probed is None:
            out[str(op)] = "refuses float32, int64 and bool tensors locally"
            continue
        dtype, out_dtype = probed
        n_tensors = kinds.count("T")
        out[str(op)] = Plan(kinds, has_out, n_tensors if has_out else mutates, dtype, out_dtype)
    return out


def _plan(name: str) -> Plan:
    plan = plans()[name]
    assert isinstance(plan, Plan), f"{name} is not drawn: {plan}"
    return plan


@st.composite
def _schema_arguments(d: st.DrawFn, plan: Plan) -> Arguments:
    """Arguments for an overload called as ``plan`` says: one drawn shape for every tensor."""
    shape = d(shapes(), label="shape")
    patterns = ("random", "special", "constant") if plan.dtype.is_floating_point else ("random", "constant")
    args = [
        d(operand(shape, (plan.dtype,), patterns))
        if k == "T"
        else d(st.sampled_from(_SCALARS[plan.dtype]), label="scalar")
        for k in plan.kinds
    ]
    if plan.out:
        args.append(d(operand(shape, (plan.out_dtype or plan.dtype,), ("random",))))
    return tuple(args), {}


def _caller(op: torch._ops.OpOverload, out: bool) -> Callable[..., Any]:
    if out:
        return lambda *args: op(*args[:-1], out=args[-1])
    return op


def _op_def(name: str, kinds: tuple[str, ...], out: bool, mutates: int | None, floating: bool) -> OpDef:
    """The operator ``schema.<name>``: ``mutates`` is the output's operand under ``out=``."""
    return OpDef(
        f"schema.{name}",
        "schema_ops",
        _caller(_BY_NAME[name], out),
        lambda: _schema_arguments(_plan(name)),
        mutates=kinds.count("T") if out else mutates,
        out=out,
        local_domain=True,
        partial=floating,
    )


def register_all() -> None:
    """Register every overload :func:`plans` can call (asking torch which dtype each takes: seconds)."""
    for name, plan in plans().items():
        if isinstance(plan, Plan):
            register(_op_def(name, plan.kinds, plan.out, plan.mutates, plan.dtype.is_floating_point))


@functools.cache
def one(name: str) -> OpDef | None:
    """The operator ``name`` (``schema.<overload>``) as a rank calls it, from its schema alone: no dtype
    probe, so a rank looks one up in microseconds (its drawing fields are the driver's business)."""
    overload = name.removeprefix("schema.")
    if not _BY_NAME:
        registered_pointwise()
    if overload not in _BY_NAME:
        return None
    found = _kinds(_BY_NAME[overload])
    if isinstance(found, str):
        return None
    kinds, out, mutates = found
    return _op_def(overload, kinds, out, mutates, floating=True)

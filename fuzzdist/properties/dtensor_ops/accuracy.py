"""How far a DTensor result may be from the local operator's: bitwise, or within a bound derived from the
order of accumulation.

The local operator and DTensor run the same kernels on the same values, except where DTensor splits a sum:
a reduction or a matmul over a sharded dim becomes per-rank partial sums added across the ranks (a
``Partial`` output), and a linear operator applied to a ``Partial`` input runs on each rank's piece.
Where that happens (the operator is ``reordered``, or an input is ``Partial``) each element of the result
is a sum of the same terms in another order, plus at most one rounding per rank's partial result.  For a
sum of ``n`` terms in any order the error is at most ``(n - 1) * eps * sum |term|`` (Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., (4.4)); the local operator's own error is as large, so
two orders differ by at most twice that.  With ``n`` the operator's terms per element plus the world
size (each rank's partial result rounded once more), the bound is

    ``2 * (terms + world_size + 1) * eps(dtype) * magnitude``

where ``magnitude`` is ``sum |term|``: the operator over the float64 absolute values of its arguments
(``OpDef.magnitude`` where that is not the sum of the absolute terms), plus as many smallest subnormals
(a sum of subnormals is exact, but a result that rounds to zero is off by less than one).  Gradients: the
same bound with the upstream gradient's terms added (a gradient sums over every output element an input
element reaches, at most the output's size).  No fixed tolerance anywhere: a bound is zero where every
term is zero.  Integers and bools are compared bitwise (wrapping sums don't depend on the order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fuzzdist.problems import Problem
from fuzzdist.toolkit.checks import mismatch
from fuzzdist.toolkit.oracle import exact_problem


def bound(dtype: torch.dtype, terms: int, world_size: int, magnitude: torch.Tensor) -> torch.Tensor:
    """The largest difference two orders of accumulation can make, per element (see the module's doc)."""
    info = torch.finfo(dtype)
    n = terms + world_size + 1
    tiny = info.smallest_normal * info.eps  # the smallest subnormal
    return 2 * n * info.eps * magnitude.double() + n * tiny


def compare(what: str, actual: torch.Tensor, expected: torch.Tensor, allowed: torch.Tensor | None) -> Problem | None:
    """None if ``actual`` is ``expected`` bitwise, or (``allowed`` given, floats) within ``allowed`` of it
    element by element, NaN where it is NaN and the same infinity where it is infinite; else the record."""
    if allowed is None or not (expected.dtype.is_floating_point or expected.dtype.is_complex):
        return exact_problem(what, actual, expected)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return exact_problem(what, actual, expected)
    a, e = actual.detach().double(), expected.detach().double()
    same = (a == e) | (a.isnan() & e.isnan())
    error = (a - e).abs()
    bad = ~same & ~(error <= allowed.expand(e.shape))
    return mismatch(what, actual.detach(), expected.detach(), bad, allowed.expand(e.shape), error)


def absolute(value: Any) -> Any:
    """``value`` with every float tensor made float64 and non-negative, every Python float non-negative
    (what a magnitude is computed from); anything else as it is."""
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point:
            return value.detach().double().abs()
        return value.detach()
    if isinstance(value, float):
        return abs(value)
    if isinstance(value, (list, tuple)):
        return type(value)(absolute(v) for v in value)
    return value


def tensors_of(value: Any) -> list[torch.Tensor | None]:
    """The tensors an operator returned, flattened in order (a tensor, tuple or list of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return [None]


def magnitudes(call: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor | None]:
    """Per output, ``sum |term|``: ``call`` over the float64 absolute values of ``args`` (None where the
    operator does not take them)."""
    try:
        with torch.no_grad():
            out = call(*absolute(list(args)), **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return []
    return [None if t is None else t.detach().double().abs() for t in tensors_of(out)]


def finite_or_zero(t: torch.Tensor) -> torch.Tensor:
    """``t`` with NaN magnitudes (inf - inf in a magnitude) made infinite: nothing is bounded there."""
    return torch.where(t.isnan(), torch.full_like(t, math.inf), t)

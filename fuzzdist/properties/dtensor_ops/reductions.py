"""Reductions over dim lists, with ``keepdim`` and ``dtype``: sum, mean, amax/amin, prod, norms, var/std,
argmax/argmin, all/any, logsumexp, cumsum.

Sums, means, products, norms and variances are ``reordered``: DTensor reduces each rank's piece and adds
the partial results.  Their ``terms`` are the reduced elements per output element; ``magnitude`` is the
sum of the absolute terms (for a product, the absolute product: each of its roundings is relative; for a
variance, the sum of squares it subtracts from, and a standard deviation within the square root of
its variance's bound, since ``|sqrt(a) - sqrt(b)| <= sqrt(|a - b|)``;
for logsumexp the log of the sum of exponentials plus
the largest absolute value it shifts by).  Extrema, arg-extrema and all/any are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, OpDef, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, INTS, POSITIVE_SIZES, SIZES, operand, shapes


def _reduced(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many elements each output element reduces (all of them where no dim is given)."""
    shape = args[0].spec.shape
    dims = kwargs.get("dim")
    if dims is None:
        return max(math.prod(shape), 1)
    dims = [dims] if isinstance(dims, int) else dims
    return max(math.prod(shape[d] for d in dims) if shape else 1, 1)


def over_dims(
    dtypes: tuple[torch.dtype, ...] = FLOATS,
    single: bool = False,
    keepdim: bool = True,
    dim_required: bool = False,
    dtype_kw: bool = False,
    nonempty: bool = False,
    extremum: bool = False,
) -> Callable[[], st.SearchStrategy[Arguments]]:
    """An operand and the dims to reduce: a list of distinct dims (``single``: one dim), or None; with
    ``keepdim`` and, where the operator takes one, a ``dtype``.

    ``extremum``: an empty operand is reduced only over dims of non-zero size, given explicitly.  torch's
    ``amax``/``amin`` refuse the rest with an explicit error ("Expected reduction dim to be specified for
    input.numel() == 0", "Expected reduction dim ... to have non-zero size"): an extremum of nothing has no
    value; ``vector_norm(x, inf)`` refuses it too ("cannot compute the inf norm on an empty tensor because the
    operation does not have an identity").  An empty operand with no such dim (``(0,)``) is rejected."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(
            shapes(min_dims=1 if single or dim_required else 0, sizes=POSITIVE_SIZES if nonempty else SIZES),
            label="shape",
        )
        x = d(operand(shape, dtypes))
        kwargs: dict[str, Any] = {}
        n = max(len(shape), 1)
        if extremum and math.prod(shape) == 0:
            sized = [i for i, size in enumerate(shape) if size > 0]
            assume(bool(sized))
            kwargs["dim"] = d(
                st.lists(st.sampled_from(sized), min_size=1, max_size=len(sized), unique=True), label="dims"
            )
        elif single:
            kwargs["dim"] = d(st.integers(-n, n - 1), label="dim")
        elif dim_required or d(st.booleans(), label="dims given"):
            kwargs["dim"] = d(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True), label="dims")
        if keepdim and "dim" in kwargs:
            kwargs["keepdim"] = d(st.booleans(), label="keepdim")
        if dtype_kw and d(st.booleans(), label="dtype given"):
            kwargs["dtype"] = d(st.sampled_from((torch.float64, torch.float32)), label="dtype")
        return (x,), kwargs

    return lambda: draw()


_op = op_maker("reductions")


def _var_magnitude(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    kw = {k: v for k, v in kw.items() if k != "correction"}
    return (x * x).sum(**kw) + x.sum(**kw) ** 2


def _logsumexp_magnitude(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    return torch.logsumexp(x, **kw).abs() + x.amax(**kw) + 1


def _spread(name: str, call: Callable[..., Any], **more: Any) -> OpDef:
    """A variance or standard deviation over drawn dims of a non-empty operand, bounded by the sum of
    squares it subtracts from."""
    return _op(
        name, call, over_dims(FLOATS, nonempty=True), reordered=True, terms=_reduced, magnitude=_var_magnitude, **more
    )


def _amax(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    return torch.amax(x, **{"dim": [], **kw})


def _amin(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    return torch.amin(x, **{"dim": [], **kw})


register(
    _op("sum", torch.sum, over_dims(FLOATS + INTS, dtype_kw=True), reordered=True, terms=_reduced, grad=True),
    _op("sum_method", lambda x, **k: x.sum(**k), over_dims(FLOATS), reordered=True, terms=_reduced, grad=True),
    _op("mean", torch.mean, over_dims(FLOATS, dtype_kw=True), reordered=True, terms=_reduced, grad=True),
    _op("amax", _amax, over_dims(FLOATS + INTS, extremum=True), grad=True),
    _op("amin", _amin, over_dims(FLOATS + INTS, extremum=True), grad=True),
    _op("prod", torch.prod, over_dims(FLOATS, single=True), reordered=True, terms=_reduced),
    _op(
        "vector_norm",
        lambda x, **k: torch.linalg.vector_norm(x, 2, **k),
        over_dims(FLOATS),
        reordered=True,
        terms=_reduced,
        grad=True,
    ),
    _op(
        "norm_1", lambda x, **k: torch.linalg.vector_norm(x, 1, **k), over_dims(FLOATS), reordered=True, terms=_reduced
    ),
    # The inf-norm is an extremum (max |x|): torch refuses it over an empty dim, as it does amax.
    _op("norm_inf", lambda x, **k: torch.linalg.vector_norm(x, math.inf, **k), over_dims(FLOATS, extremum=True)),
    _spread("var", lambda x, **k: torch.var(x, correction=0, **k), grad=True),
    _spread("std", lambda x, **k: torch.std(x, correction=1, **k), root=True),
    _op("argmax", torch.argmax, over_dims(FLOATS + INTS, single=True, nonempty=True)),
    _op("argmin", torch.argmin, over_dims(FLOATS + INTS, single=True, nonempty=True)),
    _op("all", torch.all, over_dims(FLOATS + INTS + (torch.bool,), single=True)),
    _op("any", torch.any, over_dims(FLOATS + INTS + (torch.bool,), single=True)),
    _op(
        "logsumexp",
        torch.logsumexp,
        over_dims(FLOATS, dim_required=True),
        reordered=True,
        terms=_reduced,
        magnitude=_logsumexp_magnitude,
        grad=True,
    ),
    _op(
        "cumsum",
        torch.cumsum,
        over_dims(FLOATS + INTS, single=True, keepdim=False, dtype_kw=True),
        reordered=True,
        terms=_reduced,
        grad=True,
    ),
)

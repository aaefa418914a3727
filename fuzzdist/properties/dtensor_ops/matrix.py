"""Matrix operators: mm, bmm, matmul (1-D to 4-D operands), addmm, baddbmm, linear (with and without bias),
einsum, dot.  All ``reordered``: a sharded contraction dim becomes per-rank partial products added across
the ranks, so each output element is its ``k`` products summed in another order (``terms``: ``k`` plus the
bias); ``magnitude`` is the operator over the absolute values (alpha and beta too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, OpDef, register
from fuzzdist.properties.dtensor_ops.inputs import SIZES, operand

_FLOATS = (torch.float32, torch.float64, torch.bfloat16)  # CPU matmuls of float16 are slow and coarse


def _op(
    name: str,
    call: Callable[..., Any],
    arguments: Callable[[], st.SearchStrategy[Arguments]],
    contraction: Callable[[tuple[Any, ...]], int],
    **more: Any,
) -> OpDef:
    return OpDef(
        f"matrix.{name}",
        "matrix",
        call,
        arguments,
        reordered=True,
        grad=True,
        terms=lambda args, kwargs: contraction(args) + 2,
        **more,
    )


def _operands(*shapes: tuple[int, ...]) -> st.SearchStrategy[tuple[Any, ...]]:
    """Operands of ``shapes``, all of one drawn dtype."""

    @st.composite
    def draw(d: st.DrawFn) -> tuple[Any, ...]:
        dtype = d(st.sampled_from(_FLOATS), label="dtype")
        return tuple(d(operand(s, (dtype,))) for s in shapes)

    return draw()


@st.composite
def _mm(d: st.DrawFn) -> Arguments:
    n, k, m = (d(SIZES, label=x) for x in "nkm")
    return d(_operands((n, k), (k, m))), {}


@st.composite
def _bmm(d: st.DrawFn) -> Arguments:
    b, n, k, m = (d(SIZES, label=x) for x in "bnkm")
    return d(_operands((b, n, k), (b, k, m))), {}


@st.composite
def _matmul(d: st.DrawFn) -> Arguments:
    k = d(SIZES, label="k")
    batch = tuple(d(st.lists(SIZES, max_size=2), label="batch"))
    left = d(st.sampled_from([(k,), (*batch, d(SIZES), k)]), label="left")
    right = d(st.sampled_from([(k,), (k, d(SIZES)), (*batch[1:], k, d(SIZES))]), label="right")
    return d(_operands(left, right)), {}


@st.composite
def _addmm(d: st.DrawFn) -> Arguments:
    n, k, m = (d(SIZES, label=x) for x in "nkm")
    bias = d(st.sampled_from([(n, m), (m,), (1, m)]), label="bias shape")
    alpha, beta = (d(st.sampled_from([1, 0.5, -2]), label=x) for x in ("alpha", "beta"))
    return d(_operands(bias, (n, k), (k, m))), {"alpha": alpha, "beta": beta}


@st.composite
def _baddbmm(d: st.DrawFn) -> Arguments:
    b, n, k, m = (d(SIZES, label=x) for x in "bnkm")
    alpha, beta = (d(st.sampled_from([1, 0.5, -2]), label=x) for x in ("alpha", "beta"))
    return d(_operands((b, n, m), (b, n, k), (b, k, m))), {"alpha": alpha, "beta": beta}


@st.composite
def _linear(d: st.DrawFn) -> Arguments:
    batch = tuple(d(st.lists(SIZES, max_size=2), label="batch"))
    i, o = d(SIZES, label="in"), d(SIZES, label="out")
    if d(st.booleans(), label="bias"):
        return d(_operands((*batch, i), (o, i), (o,))), {}
    return d(_operands((*batch, i), (o, i))), {}


_EINSUMS = {
    "ij,jk->ik": ((0, 1), (1, 2)),
    "bij,bjk->bik": ((3, 0, 1), (3, 1, 2)),
    "i,i->": ((0,), (0,)),
    "ij,ij->i": ((0, 1), (0, 1)),
    "ij,kj->ik": ((0, 1), (2, 1)),
    "bi,bj->ij": ((3, 0), (3, 1)),
}


@st.composite
def _einsum(d: st.DrawFn) -> Arguments:
    equation = d(st.sampled_from(sorted(_EINSUMS)), label="equation")
    sizes = [d(SIZES, label="size") for _ in range(4)]
    left, right = _EINSUMS[equation]
    a, b = d(_operands(tuple(sizes[i] for i in left), tuple(sizes[i] for i in right)))
    return (equation, a, b), {}


@st.composite
def _dot(d: st.DrawFn) -> Arguments:
    k = d(SIZES, label="k")
    return d(_operands((k,), (k,))), {}


def _k(i: int, axis: int) -> Callable[[tuple[Any, ...]], int]:
    """The contraction size: dim ``axis`` of operand ``i``."""
    return lambda args: args[i].spec.shape[axis] if args[i].spec.shape else 1


def _einsum_k(args: tuple[Any, ...]) -> int:
    return max(max(a.spec.shape, default=1) for a in args[1:]) ** 2


def _addmm_magnitude(bias: Any, a: Any, b: Any, alpha: float, beta: float) -> Any:
    return torch.addmm(bias, a, b, alpha=abs(alpha), beta=abs(beta))


def _baddbmm_magnitude(bias: Any, a: Any, b: Any, alpha: float, beta: float) -> Any:
    return torch.baddbmm(bias, a, b, alpha=abs(alpha), beta=abs(beta))


register(
    _op("mm", torch.mm, lambda: _mm(), _k(0, 1)),
    _op("mm_method", lambda a, b: a @ b, lambda: _mm(), _k(0, 1)),
    _op("bmm", torch.bmm, lambda: _bmm(), _k(0, 2)),
    _op("matmul", torch.matmul, lambda: _matmul(), _k(0, -1)),
    _op("addmm", torch.addmm, lambda: _addmm(), _k(1, 1), magnitude=_addmm_magnitude),
    _op("baddbmm", torch.baddbmm, lambda: _baddbmm(), _k(1, 2), magnitude=_baddbmm_magnitude),
    _op("linear", torch.nn.functional.linear, lambda: _linear(), _k(0, -1)),
    _op("einsum", torch.einsum, lambda: _einsum(), _einsum_k),
    _op("dot", torch.dot, lambda: _dot(), _k(0, 0)),
)

"""Pointwise operators: unary; binary with broadcasting, Python scalars and type promotion; ternary
(``where``, ``addcmul``, ``addcdiv``, ``lerp``, ``clamp``); in-place and ``out=`` variants; as users call
them (``torch.*`` functions and ``Tensor`` methods).

Exact: DTensor runs the local kernel on each rank's piece, bitwise the local operator's, except that a
linear operator may run on each piece of a Partial input (then the sum of the per-piece results is
compared within ``accuracy``'s bound; ``magnitude`` says ``sum |term|`` where the operator over the
absolute values does not, as for ``sub``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, INTS, broadcast_partner, operand, shapes

_ALL = FLOATS + INTS + (torch.bool,)


_op = op_maker("pointwise")


def unary(dtypes: tuple[torch.dtype, ...] = FLOATS) -> Callable[[], st.SearchStrategy[Arguments]]:
    """One operand of any shape."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(), label="shape")
        return (d(operand(shape, dtypes)),), {}

    return lambda: draw()


def binary(
    first: tuple[torch.dtype, ...] = FLOATS, second: tuple[torch.dtype, ...] = FLOATS, out: bool = False
) -> Callable[[], st.SearchStrategy[Arguments]]:
    """Two operands whose shapes broadcast (either may be the smaller), dtypes drawn apart (type
    promotion); ``out``: an ``out=`` operand of the result's shape and promoted dtype too."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(), label="shape")
        other = d(broadcast_partner(shape), label="other shape")
        a, b = d(operand(shape, first)), d(operand(other, second))
        if d(st.booleans(), label="smaller first"):
            a, b = d(operand(other, first)), d(operand(shape, second))
        if not out:
            return (a, b), {}
        result = torch.result_type(torch.empty((), dtype=a.spec.dtype), torch.empty((), dtype=b.spec.dtype))
        return (a, b, d(operand(shape, (result,)))), {}

    return lambda: draw()


def with_scalar(dtypes: tuple[torch.dtype, ...] = FLOATS) -> Callable[[], st.SearchStrategy[Arguments]]:
    """An operand and a Python scalar (float or int: type promotion with a scalar)."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(), label="shape")
        scalar = d(st.one_of(st.floats(-4, 4, width=16), st.integers(-3, 3)), label="scalar")
        return (d(operand(shape, dtypes)), scalar), {}

    return lambda: draw()


def inplace_binary() -> st.SearchStrategy[Arguments]:
    """``self`` and an operand broadcasting to it, of a dtype that promotes to ``self``'s."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(), label="shape")
        a = d(operand(shape, FLOATS))
        b = d(operand(d(broadcast_partner(shape), label="other shape"), (a.spec.dtype, torch.int64)))
        return (a, b), {}

    return draw()


def ternary(first: tuple[torch.dtype, ...] = FLOATS) -> Callable[[], st.SearchStrategy[Arguments]]:
    """Three operands of one dtype whose shapes broadcast to the first's."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(), label="shape")
        a = d(operand(shape, first))
        rest = [d(operand(d(broadcast_partner(shape), label="shape"), (a.spec.dtype,))) for _ in range(2)]
        return (a, *rest), {}

    return lambda: draw()


@st.composite
def _where(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    cond = d(operand(d(broadcast_partner(shape), label="condition shape"), (torch.bool,)))
    return (cond, d(operand(shape)), d(operand(d(broadcast_partner(shape), label="other shape")))), {}


@st.composite
def _clamp(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    low = d(st.one_of(st.none(), st.floats(-4, 4, width=16)), label="min")
    high = d(
        st.floats(-4, 4, width=16) if low is None else st.one_of(st.none(), st.floats(-4, 4, width=16)), label="max"
    )
    return (d(operand(shape)),), {"min": low, "max": high}


@st.composite
def _lerp(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    a = d(operand(shape))
    b = d(operand(d(broadcast_partner(shape), label="end shape"), (a.spec.dtype,)))
    weight: Any = d(st.floats(-2, 2, width=16), label="weight")
    if d(st.booleans(), label="tensor weight"):
        weight = d(operand(d(broadcast_partner(shape), label="weight shape"), (a.spec.dtype,)))
    return (a, b, weight), {}


def _add(a: Any, b: Any) -> Any:
    return torch.add(a, b)


_UNARY = {
    "neg": (torch.neg, True),
    "abs": (torch.abs, True),
    "exp": (torch.exp, True),
    "sin": (torch.sin, True),
    "tanh": (torch.tanh, True),
    "sqrt": (torch.sqrt, True),
    "reciprocal": (torch.reciprocal, True),
    "sigmoid": (torch.sigmoid, True),
    "floor": (torch.floor, False),
    "sign": (torch.sign, False),
    "relu": (torch.relu, True),
    "expm1": (torch.expm1, True),
    "erf": (torch.erf, True),
    "isnan": (torch.isnan, False),
    "nan_to_num": (torch.nan_to_num, False),
}
for _name, (_fn, _grad) in _UNARY.items():
    register(_op(_name, _fn, unary(), grad=_grad))
register(
    _op("neg_method", lambda x: x.neg(), unary(FLOATS + INTS[:2]), grad=True),
    _op("square_method", lambda x: x.square(), unary(), grad=True),
    _op("bitwise_not", torch.bitwise_not, unary(INTS + (torch.bool,))),
    _op("logical_not", torch.logical_not, unary(_ALL)),
    _op("to_float64", lambda x: x.to(torch.float64), unary(_ALL)),
    _op("add", torch.add, binary(FLOATS, _ALL), grad=True),
    _op("add_ints", torch.add, binary(INTS, INTS)),
    _op("sub", torch.sub, binary(FLOATS, FLOATS + INTS), grad=True, magnitude=_add),
    _op("mul", torch.mul, binary(FLOATS, _ALL), grad=True),
    _op("mul_method", lambda a, b: a * b, binary(FLOATS + INTS, FLOATS + INTS), grad=True),
    _op("div", torch.div, binary(FLOATS + INTS, FLOATS + INTS), grad=True),
    _op("maximum", torch.maximum, binary(), grad=True),
    _op("minimum", torch.minimum, binary(), grad=True),
    _op("pow", torch.pow, binary(), grad=True),
    _op("atan2", torch.atan2, binary(), grad=True),
    _op("remainder", torch.remainder, binary()),
    _op("eq", torch.eq, binary(_ALL, _ALL)),
    _op("lt", torch.lt, binary(FLOATS + INTS, FLOATS + INTS)),
    _op("bitwise_and", torch.bitwise_and, binary(INTS + (torch.bool,), INTS + (torch.bool,))),
    _op("logical_and", torch.logical_and, binary(_ALL, _ALL)),
    _op("add_scalar", torch.add, with_scalar(FLOATS + INTS), grad=True),
    _op("sub_scalar", torch.sub, with_scalar(FLOATS + INTS), grad=True, magnitude=_add),
    _op("mul_scalar", torch.mul, with_scalar(FLOATS + INTS), grad=True),
    _op("div_scalar", torch.div, with_scalar(), grad=True),
    _op("pow_scalar", lambda x, s: x**s, with_scalar(), grad=True),
    _op("rsub_scalar", lambda x, s: s - x, with_scalar(), grad=True, magnitude=lambda x, s: x + s),
    _op("where", torch.where, lambda: _where(), grad=True),
    _op("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), ternary(), grad=True),
    _op(
        "addcdiv",
        lambda a, b, c: torch.addcdiv(a, b, c, value=-2),
        ternary(),
        grad=True,
        magnitude=lambda a, b, c: torch.addcdiv(a, b, c, value=2),
    ),
    _op("lerp", torch.lerp, lambda: _lerp(), grad=True, magnitude=lambda a, b, w: a + w * (a + b)),
    _op("clamp", torch.clamp, lambda: _clamp(), grad=True),
    _op("clamp_tensors", lambda a, lo, hi: torch.clamp(a, lo, hi), ternary(), grad=True),
    # in place: the first operand changes
    _op("add_", lambda a, b: a.add_(b), inplace_binary, mutates=0),
    _op("mul_", lambda a, b: a.mul_(b), inplace_binary, mutates=0),
    _op("neg_", lambda a: a.neg_(), unary(), mutates=0),
    _op("clamp_", lambda a, **k: a.clamp_(**k), lambda: _clamp(), mutates=0),
    _op("exp_", lambda a: a.exp_(), unary(), mutates=0),
    # out=: the last operand is written
    _op("add_out", lambda a, b, o: torch.add(a, b, out=o), binary(FLOATS, FLOATS, out=True), mutates=2, out=True),
    _op("mul_out", lambda a, b, o: torch.mul(a, b, out=o), binary(FLOATS, FLOATS, out=True), mutates=2, out=True),
)

"""Joining and ordering: cat and stack (of 1 to 3 tensors, the same DTensor twice included), sort (stable,
so ties keep their order and the indices are defined), topk (its values: which of tied elements' indices
it returns is not documented).  Data movement: bitwise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, INTS, POSITIVE_SIZES, SIZES, operand, shapes

_DTYPES = FLOATS + INTS[:1]


_op = op_maker("joins")


def _joined(stack: bool) -> Callable[[], st.SearchStrategy[Arguments]]:
    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(min_dims=0 if stack else 1), label="shape")
        dim = d(st.integers(0, len(shape)) if stack else st.integers(0, len(shape) - 1), label="dim")
        dtype = d(st.sampled_from(_DTYPES), label="dtype")
        parts = []
        for _ in range(d(st.integers(1, 3), label="tensors")):
            part = shape if stack else tuple(d(SIZES, label="size") if i == dim else s for i, s in enumerate(shape))
            parts.append(d(operand(part, (dtype,))))
        return (parts, dim), {}

    return lambda: draw()


@st.composite
def _sorted(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    return (d(operand(shape, _DTYPES)),), {
        "dim": d(st.integers(-len(shape), len(shape) - 1), label="dim"),
        "descending": d(st.booleans(), label="descending"),
        "stable": True,
    }


@st.composite
def _topk(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    return (d(operand(shape, _DTYPES, ("random", "constant"))), d(st.integers(0, shape[dim]), label="k")), {
        "dim": dim,
        "largest": d(st.booleans(), label="largest"),
    }


register(
    _op("cat", torch.cat, _joined(stack=False), grad=True),
    _op("stack", torch.stack, _joined(stack=True), grad=True),
    _op("sort", torch.sort, lambda: _sorted(), grad=True),
    _op("topk", torch.topk, lambda: _topk(), outputs=(0,)),
)

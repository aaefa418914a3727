"""Tensor operators that make, fill and rearrange tensors: ``*_like`` and ``new_*`` constructors, ``fill_``
and ``zero_``, clone, flip, roll, tril/triu, diagonal and diag, ``index_fill``, ``index_reduce`` (amax and
amin), advanced indexing (``x[index]``), ``split`` with a list of sizes, and the scatters into a
slice: ``select_scatter``, ``slice_scatter``, ``diagonal_scatter``.  Data movement: bitwise.

``empty_like`` and ``new_empty`` hold no defined values (torch's docs: "uninitialized data"), so they are
called followed by ``zero_``: their shape, dtype and placements are what is compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import (
    FLOATS,
    INTS,
    POSITIVE_SIZES,
    SIZES,
    index_operand,
    operand,
    shapes,
)

_DTYPES = FLOATS + INTS[:1]


_op = op_maker("tensors")


def _any(dtypes: tuple[torch.dtype, ...] = _DTYPES, min_dims: int = 0) -> Callable[[], st.SearchStrategy[Arguments]]:
    """One operand of any shape (at least ``min_dims`` dims)."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        return (d(operand(d(shapes(min_dims=min_dims), label="shape"), dtypes)),), {}

    return lambda: draw()


@st.composite
def _new_shape(d: st.DrawFn) -> Arguments:
    x = d(operand(d(shapes(), label="shape"), _DTYPES))
    return (x, d(shapes(), label="new shape")), {}


@st.composite
def _flipped(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dims = d(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True), label="dims")
    return (d(operand(shape, _DTYPES)), dims), {}


@st.composite
def _rolled(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dims = d(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True), label="dims")
    shifts = [d(st.integers(-8, 8), label="shift") for _ in dims]
    return (d(operand(shape, _DTYPES)), shifts, dims), {}


def _with_diagonal(min_dims: int, max_dims: int) -> Callable[[], st.SearchStrategy[Arguments]]:
    """An operand of ``min_dims`` to ``max_dims`` dims and a diagonal (0 the main one)."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        x = d(operand(d(shapes(min_dims=min_dims, max_dims=max_dims), label="shape"), _DTYPES))
        return (x, d(st.integers(-3, 3), label="diagonal")), {}

    return lambda: draw()


@st.composite
def _diagonal(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=2, max_dims=3), label="shape")
    dim1, dim2 = d(st.permutations(range(len(shape))), label="dims")[:2]
    return (d(operand(shape, _DTYPES)), d(st.integers(-3, 3), label="offset"), dim1, dim2), {}


@st.composite
def _index_fill(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    index = d(index_operand((d(SIZES, label="indices"),), shape[dim]))
    return (d(operand(shape, FLOATS)), dim, index, d(st.sampled_from([0.0, -1.5, 3.0]), label="value")), {}


@st.composite
def _index_reduce(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    n = d(SIZES, label="indices")
    x = d(operand(shape, FLOATS))
    source = d(operand(tuple(n if i == dim else s for i, s in enumerate(shape)), (x.spec.dtype,)))
    index = d(index_operand((n,), shape[dim]))
    reduce = d(st.sampled_from(["amax", "amin"]), label="reduce")
    return (x, dim, index, source, reduce), {"include_self": d(st.booleans(), label="include_self")}


@st.composite
def _indexed(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    index = d(index_operand(d(shapes(max_dims=2), label="index shape"), shape[dim]))
    return (d(operand(shape, _DTYPES)), dim, index), {}


@st.composite
def _split_sizes(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    sizes: list[int] = []
    left = shape[dim]
    while left > 0:
        sizes.append(d(st.integers(1, left), label="piece"))
        left -= sizes[-1]
    return (d(operand(shape, _DTYPES)), sizes or [0], dim), {}


@st.composite
def _select_scatter(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    x = d(operand(shape, FLOATS))
    src = d(operand(shape[:dim] + shape[dim + 1 :], (x.spec.dtype,)))
    return (x, src, dim, d(st.integers(-shape[dim], shape[dim] - 1), label="index")), {}


@st.composite
def _slice_scatter(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    start = d(st.integers(0, shape[dim]), label="start")
    end = d(st.integers(start, shape[dim]), label="end")
    step = d(st.integers(1, 3), label="step")
    x = d(operand(shape, FLOATS))
    length = len(range(start, end, step))
    src = d(operand(tuple(length if i == dim else s for i, s in enumerate(shape)), (x.spec.dtype,)))
    return (x, src), {"dim": dim, "start": start, "end": end, "step": step}


@st.composite
def _diagonal_scatter(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=2, max_dims=3), label="shape")
    dim1, dim2 = d(st.permutations(range(len(shape))), label="dims")[:2]
    offset = d(st.integers(-3, 3), label="offset")
    x = d(operand(shape, FLOATS))
    src_shape = tuple(torch.empty(shape, device="meta").diagonal(offset, dim1, dim2).shape)
    return (x, d(operand(src_shape, (x.spec.dtype,))), offset, dim1, dim2), {}


def _fill(x: Any, value: float) -> Any:
    return x.fill_(value)


register(
    _op("zeros_like", torch.zeros_like, _any()),
    _op("ones_like", torch.ones_like, _any()),
    _op("full_like", lambda x: torch.full_like(x, 2.5), _any(FLOATS)),
    _op("empty_like", lambda x: torch.empty_like(x).zero_(), _any()),
    _op("new_zeros", lambda x, s: x.new_zeros(s), lambda: _new_shape()),
    _op("new_ones", lambda x, s: x.new_ones(s), lambda: _new_shape()),
    _op("new_full", lambda x, s: x.new_full(s, 7), lambda: _new_shape()),
    _op("new_empty", lambda x, s: x.new_empty(s).zero_(), lambda: _new_shape()),
    _op("fill_", lambda x: _fill(x, -1.5), _any(FLOATS), mutates=0),
    _op("zero_", lambda x: x.zero_(), _any(), mutates=0),
    _op("clone", torch.clone, _any(), grad=True),
    _op("flip", torch.flip, lambda: _flipped(), grad=True),
    _op("roll", torch.roll, lambda: _rolled(), grad=True),
    _op("tril", torch.tril, _with_diagonal(2, 3), grad=True),
    _op("triu", torch.triu, _with_diagonal(2, 3), grad=True),
    _op("diagonal", torch.diagonal, lambda: _diagonal(), grad=True),
    _op("diag", torch.diag, _with_diagonal(1, 2), grad=True),
    _op("index_fill", torch.index_fill, lambda: _index_fill(), grad=True),
    _op("index_fill_", lambda x, *a: x.index_fill_(*a), lambda: _index_fill(), mutates=0),
    _op("index_reduce", torch.index_reduce, lambda: _index_reduce()),
    _op("index_tensor", lambda x, dim, i: x[(slice(None),) * dim + (i,)], lambda: _indexed(), grad=True),
    _op("split_with_sizes", torch.split, lambda: _split_sizes(), grad=True),
    _op("select_scatter", torch.select_scatter, lambda: _select_scatter(), grad=True),
    _op("slice_scatter", torch.slice_scatter, lambda: _slice_scatter(), grad=True),
    _op("diagonal_scatter", torch.diagonal_scatter, lambda: _diagonal_scatter(), grad=True),
)

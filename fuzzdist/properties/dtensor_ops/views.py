"""Views and reshapes: view, reshape, flatten, unflatten, permute, transpose, t, squeeze, unsqueeze, expand,
narrow, slice, select, split, chunk, unbind, movedim, repeat, contiguous.  Data movement: bitwise.

A reshape that splits or merges a sharded dim is where DTensor must redistribute (or refuse): the drawn
shapes group and regroup the input's dims at random, size-1 and empty dims included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, INTS, SIZES, dims_of, operand, shapes

_DTYPES = FLOATS + INTS[:1] + (torch.bool,)


_op = op_maker("views", grad=True)


@st.composite
def _reshaped(d: st.DrawFn) -> Arguments:
    """A tensor and a new shape of its size: its dims merged in runs, some runs split again."""
    shape = d(shapes(min_dims=1, max_dims=4), label="shape")
    x = d(operand(shape, _DTYPES))
    new: list[int] = []
    i = 0
    while i < len(shape):
        run = d(st.integers(1, len(shape) - i), label="merged dims")
        size = math.prod(shape[i : i + run])
        factors = [f for f in range(2, size) if size % f == 0]
        if d(st.booleans(), label="split") and factors:
            f = d(st.sampled_from(factors), label="factor")
            new += [f, size // f]
        else:
            new.append(size)
        i += run
    if d(st.booleans(), label="infer one dim") and 0 not in new:
        new[d(st.integers(0, len(new) - 1), label="inferred")] = -1
    return (x, tuple(new)), {}


def _with_dim(
    dtypes: tuple[torch.dtype, ...] = _DTYPES, min_dims: int = 1
) -> Callable[[], st.SearchStrategy[Arguments]]:
    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(min_dims=min_dims), label="shape")
        return (d(operand(shape, dtypes)), d(dims_of(len(shape)), label="dim")), {}

    return lambda: draw()


@st.composite
def _permuted(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    return (d(operand(shape, _DTYPES)), tuple(d(st.permutations(range(len(shape))), label="dims"))), {}


@st.composite
def _two_dims(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    return (d(operand(shape, _DTYPES)), d(dims_of(len(shape))), d(dims_of(len(shape)))), {}


@st.composite
def _unflattened(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    size = shape[dim]
    factors = [f for f in range(1, size + 1) if size % f == 0] or [1]
    f = d(st.sampled_from(factors), label="factor")
    return (d(operand(shape, _DTYPES)), dim, (f, size // f if size else 0)), {}


@st.composite
def _unsqueezed(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    return (d(operand(shape, _DTYPES)), d(st.integers(-len(shape) - 1, len(shape)), label="dim")), {}


@st.composite
def _expanded(d: st.DrawFn) -> Arguments:
    shape = d(shapes(sizes=st.just(1) | SIZES), label="shape")
    lead = tuple(d(st.lists(SIZES, max_size=2), label="new leading dims"))
    new = tuple(d(st.sampled_from([-1, 1, 3])) if s == 1 else -1 for s in shape)
    return (d(operand(shape, _DTYPES)), lead + new), {}


@st.composite
def _narrowed(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    start = d(st.integers(0, shape[dim]), label="start")
    length = d(st.integers(0, shape[dim] - start), label="length")
    return (d(operand(shape, _DTYPES)), dim, start, length), {}


@st.composite
def _sliced(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    start = d(st.integers(-shape[dim] - 1, shape[dim] + 1), label="start")
    stop = d(st.integers(-shape[dim] - 1, shape[dim] + 1), label="stop")
    step = d(st.integers(1, 3), label="step")
    return (d(operand(shape, _DTYPES)), dim, start, stop, step), {}


@st.composite
def _selected(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=st.integers(1, 7)), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    return (d(operand(shape, _DTYPES)), dim, d(st.integers(-shape[dim], shape[dim] - 1), label="index")), {}


@st.composite
def _split(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    return (d(operand(shape, _DTYPES)), d(st.integers(1, 4), label="size"), dim), {}


@st.composite
def _repeated(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    reps = tuple(d(st.lists(st.integers(1, 3), min_size=len(shape), max_size=len(shape) + 1), label="repeats"))
    return (d(operand(shape, _DTYPES)), reps), {}


@st.composite
def _any_tensor(d: st.DrawFn) -> Arguments:
    """A tensor of any number of dims, 0 included, and nothing else (``squeeze()`` takes no dim)."""
    shape = d(shapes(sizes=st.just(1) | SIZES), label="shape")  # size-1 dims: what squeeze removes
    return (d(operand(shape, _DTYPES)),), {}


@st.composite
def _matrix(d: st.DrawFn) -> Arguments:
    return (d(operand(d(shapes(min_dims=2, max_dims=2), label="shape"), _DTYPES)),), {}


def _slice(x: Any, dim: int, start: int, stop: int, step: int) -> Any:
    return x[(slice(None),) * dim + (slice(start, stop, step),)]


register(
    _op("view", lambda x, s: x.view(s), lambda: _reshaped()),
    _op("reshape", torch.reshape, lambda: _reshaped()),
    _op(
        "flatten",
        lambda x, a, b: (
            torch.flatten(x, a, b) if (a % max(x.dim(), 1)) <= (b % max(x.dim(), 1)) else torch.flatten(x, b, a)
        ),
        _two_dims,
    ),
    _op("unflatten", torch.unflatten, lambda: _unflattened()),
    _op("permute", torch.permute, lambda: _permuted()),
    _op("transpose", torch.transpose, _two_dims),
    _op("t", torch.t, lambda: _matrix()),
    _op("squeeze", torch.squeeze, _with_dim()),
    _op("squeeze_all", lambda x: x.squeeze(), lambda: _any_tensor()),
    _op("unsqueeze", torch.unsqueeze, lambda: _unsqueezed()),
    _op("expand", lambda x, s: x.expand(s), lambda: _expanded()),
    _op("narrow", torch.narrow, lambda: _narrowed()),
    _op("slice", _slice, lambda: _sliced()),
    _op("select", torch.select, lambda: _selected()),
    _op("split", lambda x, n, dim: torch.split(x, n, dim), lambda: _split()),
    _op("chunk", lambda x, n, dim: torch.chunk(x, n, dim), lambda: _split()),
    _op("unbind", torch.unbind, _with_dim()),
    _op("movedim", torch.movedim, _two_dims),
    _op("repeat", lambda x, r: x.repeat(r), lambda: _repeated()),
    _op("contiguous_t", lambda x: x.t().contiguous(), lambda: _matrix()),
)

"""Indexing: index_select, gather, scatter, scatter_add, index_put (with and without accumulation),
masked_fill, embedding.

Index tensors are operands too (sharded, replicated or Partial like any other).  Where the operator is
only defined for distinct indices (``scatter`` and ``index_put`` without accumulation: "the order is
undefined" otherwise), they are distinct along the scattered dim; ``scatter_add`` and accumulating
``index_put`` add colliding values in an order of their choosing, so they are ``reordered``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, INTS, POSITIVE_SIZES, SIZES, index_operand, operand, shapes

_DTYPES = FLOATS + INTS[:1]


_op = op_maker("indexing")


@st.composite
def _index_select(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    index = d(index_operand((d(SIZES, label="indices"),), shape[dim]))
    return (d(operand(shape, _DTYPES)), dim, index), {}


@st.composite
def _gather(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    dim = d(st.integers(0, len(shape) - 1), label="dim")
    index_shape = tuple(
        d(st.integers(0, s), label="index size") if i != dim else d(SIZES, label="index size")
        for i, s in enumerate(shape)
    )
    return (d(operand(shape, _DTYPES)), dim, d(index_operand(index_shape, shape[dim]))), {}


def _scatter(unique: bool) -> Callable[[], st.SearchStrategy[Arguments]]:
    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
        dim = d(st.integers(0, len(shape) - 1), label="dim")
        index_shape = tuple(d(st.integers(0, s), label="index size") for s in shape)
        x = d(operand(shape, FLOATS))
        index = d(index_operand(index_shape, shape[dim], dim if unique else None))
        return (x, dim, index, d(operand(index_shape, (x.spec.dtype,)))), {}

    return lambda: draw()


def _index_put(accumulate: bool) -> Callable[[], st.SearchStrategy[Arguments]]:
    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
        n = d(st.integers(0, shape[0]), label="indices")
        x = d(operand(shape, FLOATS))
        index = d(index_operand((n,), shape[0], None if accumulate else 0))
        return (x, index, d(operand((n, *shape[1:]), (x.spec.dtype,)))), {"accumulate": accumulate}

    return lambda: draw()


@st.composite
def _masked_fill(d: st.DrawFn) -> Arguments:
    shape = d(shapes(), label="shape")
    mask = d(operand(shape, (torch.bool,)))
    return (d(operand(shape, _DTYPES)), mask, d(st.sampled_from([0, -1.5, float("-inf")]), label="value")), {}


@st.composite
def _embedding(d: st.DrawFn) -> Arguments:
    rows, width = d(POSITIVE_SIZES, label="rows"), d(SIZES, label="width")
    ids = d(index_operand(d(shapes(max_dims=2), label="ids shape"), rows))
    return (ids, d(operand((rows, width), FLOATS))), {}


def _index_put_call(x: Any, index: Any, values: Any, accumulate: bool) -> Any:
    return torch.index_put(x, (index,), values, accumulate=accumulate)


def _index_put_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return args[1].spec.shape[0] + 1


register(
    _op("index_select", torch.index_select, lambda: _index_select(), grad=True),
    _op("gather", torch.gather, lambda: _gather(), grad=True),
    _op("scatter", torch.scatter, _scatter(unique=True), grad=True),
    _op(
        "scatter_add",
        torch.scatter_add,
        _scatter(unique=False),
        grad=True,
        reordered=True,
        terms=lambda args, kwargs: max(args[2].spec.numel, 1) + 1,
    ),
    _op("index_put", _index_put_call, _index_put(accumulate=False), grad=True),
    _op(
        "index_put_accumulate",
        _index_put_call,
        _index_put(accumulate=True),
        grad=True,
        reordered=True,
        terms=_index_put_terms,
    ),
    _op("masked_fill", torch.masked_fill, lambda: _masked_fill(), grad=True),
    _op(
        "embedding",
        torch.nn.functional.embedding,
        lambda: _embedding(),
        grad=True,
        reordered=True,
        terms=lambda args, kwargs: max(args[0].spec.numel, 1),
    ),
)

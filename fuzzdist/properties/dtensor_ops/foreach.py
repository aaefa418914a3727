"""Multi-tensor (list) kernels, as optimizers call them: ``_foreach_add``/``_foreach_mul`` of two lists, of
a list and a scalar, in place; ``_foreach_addcmul``, ``_foreach_lerp``, ``_foreach_sqrt``, ``_foreach_neg``,
``_foreach_norm`` and ``_foreach_max``.  Each tensor of a list has its own shape and placements.

Elementwise kernels are exact; ``_foreach_norm`` sums each tensor's squares (``reordered``, its terms the
largest tensor's elements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import FLOATS, POSITIVE_SIZES, operand, shapes

_FLOATS = FLOATS[:2]  # float32 and float64: the fused kernels' other dtypes take the same path


_op = op_maker("foreach")


def _lists(count: int, nonempty: bool = False, length: int = 3) -> Callable[[], st.SearchStrategy[Arguments]]:
    """``count`` lists of one drawn length (up to ``length``), their ``i``-th tensors of one drawn shape
    and one dtype."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        dtype = d(st.sampled_from(_FLOATS), label="dtype")
        sized = shapes(sizes=POSITIVE_SIZES) if nonempty else shapes()
        shape_list = d(st.lists(sized, min_size=1, max_size=length), label="shapes")
        lists = [[d(operand(s, (dtype,))) for s in shape_list] for _ in range(count)]
        return tuple(lists), {}

    return lambda: draw()


def _with_scalar(length: int = 3) -> Callable[[], st.SearchStrategy[Arguments]]:
    """A list and a Python scalar."""

    @st.composite
    def draw(d: st.DrawFn) -> Arguments:
        (tensors,), _ = d(_lists(1, length=length)())
        return (tensors, d(st.sampled_from([0.5, -2.0, 3]), label="scalar")), {}

    return lambda: draw()


def _norm_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return max((o.spec.numel for o in args[0]), default=1)


def _in_place(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` (an in-place list kernel), returning its first list, which it changed."""

    def run(tensors: list[Any], *rest: Any) -> Any:
        call(tensors, *rest)
        return tensors

    return run


register(
    _op("add_list", torch._foreach_add, _lists(2)),
    _op("mul_list", torch._foreach_mul, _lists(2)),
    _op("add_scalar", torch._foreach_add, _with_scalar()),
    _op("mul_scalar", torch._foreach_mul, _with_scalar()),
    _op("addcmul", lambda a, b, c: torch._foreach_addcmul(a, b, c, value=0.5), _lists(3)),
    _op("lerp", lambda a, b: torch._foreach_lerp(a, b, 0.25), _lists(2)),
    _op("sqrt", torch._foreach_sqrt, _lists(1)),
    _op("neg", torch._foreach_neg, _lists(1)),
    # in place: a list of one tensor, the one operand the check follows as changed (``mutates``)
    _op("add_", _in_place(torch._foreach_add_), _lists(2, length=1), mutates=0),
    _op("mul_scalar_", _in_place(torch._foreach_mul_), _with_scalar(length=1), mutates=0),
    _op("norm", torch._foreach_norm, _lists(1), reordered=True, terms=_norm_terms),
    _op("max", torch._foreach_max, _lists(1, nonempty=True)),
)

"""The ``tensor_specs()`` strategy: shape, dtype, layout and value pattern of a ``TensorSpec``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from hypothesis import assume
from hypothesis import strategies as st

from fuzzdist.errors import InvalidStrategyArgument
from fuzzdist.strategies._dtypes import dtypes as _dtypes_strategy
from fuzzdist.strategies._shapes import DEFAULT_MAX_BYTES, DEFAULT_MAX_DIMS
from fuzzdist.strategies._shapes import shapes as _shapes_strategy
from fuzzdist.strategies._tensors import (
    _LARGEST_ITEMSIZE,
    _MAX_STORAGE_OFFSET,
    LAYOUTS,
    PATTERNS,
    TensorSpec,
    _layout_fits,
)


def _names(arg: None | str | Iterable[str], allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    if arg is None:
        return allowed
    names = (arg,) if isinstance(arg, str) else tuple(arg)
    if not names:
        raise InvalidStrategyArgument(f"{what} must not be empty")
    for name in names:
        if name not in allowed:
            raise InvalidStrategyArgument(f"unknown {what[:-1]} {name!r}; choose from {allowed}")
    # keep the canonical order, so shrinking goes towards the simplest one
    return tuple(a for a in allowed if a in names)


def tensor_specs(
    *,
    shapes: st.SearchStrategy[tuple[int, ...]] | None = None,
    dtypes: st.SearchStrategy[torch.dtype] | None = None,
    layouts: None | str | Iterable[str] = None,
    patterns: None | str | Iterable[str] = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_dims: int = DEFAULT_MAX_DIMS,
) -> st.SearchStrategy[TensorSpec]:
    """``TensorSpec`` values: a shape, a dtype, a memory layout and a value
    pattern. The tensor itself is never drawn; each rank builds it with
    ``spec.materialize(device, seed)``.

    ``dtypes`` defaults to ``dtypes()`` (every dtype usable on CPU; pass
    ``dtypes(device="cuda")`` for GPU tests). ``shapes`` defaults to
    ``shapes(max_bytes=max_bytes, itemsize=dtype.itemsize, max_dims=max_dims)``
    for the drawn dtype, so ``nbytes <= max_bytes``; a custom ``shapes``
    strategy is used as given. ``layouts`` and ``patterns`` restrict the
    choice (names from ``LAYOUTS`` and ``PATTERNS``). A layout is only drawn
    where it can really hold: ``"transposed"`` needs two dims of size >= 2,
    ``"channels_last"`` needs 4 dims; if no allowed layout fits a drawn shape
    the example is rejected (so restricting to those layouts filters).

    Shrinks towards ``TensorSpec((1,), torch.float32)``: a one-element 1-D
    contiguous float32 tensor of random values; a sliced spec's offset
    shrinks to 1.
    """
    layout_names = _names(layouts, LAYOUTS, "layouts")
    pattern_names = _names(patterns, PATTERNS, "patterns")
    if shapes is None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < _LARGEST_ITEMSIZE:
            raise InvalidStrategyArgument(f"max_bytes must be an int >= {_LARGEST_ITEMSIZE}, got {max_bytes!r}")
    dtype_strategy = _dtypes_strategy() if dtypes is None else dtypes

    @st.composite
    def draw_spec(draw: st.DrawFn) -> TensorSpec:
        dtype = draw(dtype_strategy)
        if shapes is None:
            shape = draw(_shapes_strategy(max_bytes=max_bytes, itemsize=dtype.itemsize, max_dims=max_dims))
        else:
            shape = tuple(draw(shapes))
        fitting = [name for name in layout_names if _layout_fits(name, shape)]
        assume(fitting)
        layout = draw(st.sampled_from(fitting))
        offset = draw(st.integers(1, _MAX_STORAGE_OFFSET)) if layout == "sliced" else 0
        pattern = draw(st.sampled_from(pattern_names))
        return TensorSpec(shape, dtype, layout, pattern, offset)

    return draw_spec()

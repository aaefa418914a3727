"""Strategies the group modules draw their operators' arguments with: sizes, shapes, dtypes and operands.

Every size shrinks to 1 (then the rest of the range: 0, the empty tensor, and sizes that no mesh dim
divides), every dtype to float32, every value pattern to random values: a failure shrinks to a small
float32 example with random values wherever the rest allows.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.strategies import TensorSpec, seeds

SEEDS = seeds()

SIZES = st.one_of(st.integers(1, 3), st.just(0), st.integers(4, 7))
"""A dim's size: 1 first, then 0 (empty shards) and sizes 2, 3 mesh dims don't always divide."""
POSITIVE_SIZES = st.integers(1, 7)
"""A dim's size where the operator refuses an empty dim."""
FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
"""The floating dtypes drawn (float32 first)."""
INTS = (torch.int64, torch.int32, torch.int8, torch.uint8)
"""The integer dtypes drawn."""
PATTERNS = ("random", "special", "constant")
"""Value patterns (:class:`~fuzzdist.strategies.TensorSpec`): random first; special holds NaN, infinities,
-0.0, subnormals and extremes."""


def shapes(
    min_dims: int = 0,
    max_dims: int = 3,
    sizes: st.SearchStrategy[int] = SIZES,
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of ``min_dims`` to ``max_dims`` dims (shrinking to ``min_dims`` dims, or 1 where that is 0).

    From at least one dim, a list of sizes, so that the shrinker deletes a dim as it deletes a list's
    element (a count of dims drawn first would have to shrink together with the sizes after it).  Where
    0-d is allowed, the count comes first, 1 before the rest: a 0-d list, the shortest draw, would
    otherwise be what every failure shrinks to."""
    if min_dims == 0 and max_dims >= 1:
        return st.one_of(st.just(1), st.integers(0, max_dims)).flatmap(lambda n: st.tuples(*[sizes] * n))
    return st.lists(sizes, min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def operand(
    draw: st.DrawFn,
    shape: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...] = FLOATS,
    patterns: tuple[str, ...] = PATTERNS,
) -> Operand:
    """An operand of ``shape``, one of ``dtypes``, with a drawn value pattern and seed."""
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    pattern = draw(st.sampled_from(patterns), label="pattern")
    seed = draw(SEEDS, label="seed")
    return Operand(TensorSpec(tuple(shape), dtype, "contiguous", pattern), seed)


@st.composite
def index_operand(draw: st.DrawFn, shape: tuple[int, ...], high: int, unique_dim: int | None = None) -> Operand:
    """An int64 index tensor of ``shape`` with values in ``[0, high)`` (distinct along ``unique_dim``)."""
    seed = draw(SEEDS, label="seed")
    return Operand(TensorSpec(tuple(shape), torch.int64), seed, index_high=high, unique_dim=unique_dim)


def dims_of(ndim: int) -> st.SearchStrategy[int]:
    """A dim of an ``ndim``-dim tensor, non-negative first (0-d tensors take dim 0 and -1)."""
    n = max(ndim, 1)
    return st.one_of(st.integers(0, n - 1), st.integers(-n, -1))


def broadcast_partner(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """A shape that broadcasts with ``shape`` to ``shape``: leading dims dropped, some dims made 1."""

    @st.composite
    def draw_shape(draw: st.DrawFn) -> tuple[int, ...]:
        drop = draw(st.integers(0, len(shape)), label="leading dims dropped")
        kept = shape[drop:]
        ones = draw(st.lists(st.booleans(), min_size=len(kept), max_size=len(kept)), label="dims made 1")
        return tuple(1 if one else s for s, one in zip(kept, ones, strict=True))

    return st.one_of(st.just(tuple(shape)), draw_shape())

"""The ``shapes()`` strategy: tensor shapes bounded by a byte budget."""

from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from fuzzdist.strategies._arguments import check_int

DEFAULT_MAX_BYTES = 1 << 20
DEFAULT_MAX_DIMS = 4

# Sizes that break size arithmetic: empty, one element, tiny, primes and odd
# sizes that never divide evenly between ranks or buckets (2333), and powers of
# two with their neighbours (alignment and chunking boundaries).
_EDGE_SIZES = (0, 1, 2, 3, 5, 7, 15, 16, 17, 31, 33, 127, 128, 129, 255, 257, 1023, 1025, 2333, 4095, 4097, 65537)


@lru_cache(maxsize=4096)  # strategies are immutable; building them on every draw was ~1/3 of a draw
def _dim_sizes(cap: int) -> st.SearchStrategy[int]:
    # one_of shrinks towards its first branch, and integers(1, ...) towards 1,
    # so every dimension shrinks to 1.
    return st.one_of(
        st.integers(1, min(cap, 8)),
        st.sampled_from([s for s in _EDGE_SIZES if s <= cap]),
        st.integers(1, cap),
    )


def shapes(
    max_bytes: int = DEFAULT_MAX_BYTES,
    itemsize: int = 1,
    max_dims: int = DEFAULT_MAX_DIMS,
    min_dims: int = 0,
) -> st.SearchStrategy[tuple[int, ...]]:
    """Tensor shapes (tuples of ints) whose element count times ``itemsize``
    is at most ``max_bytes``.

    Covers 0-d shapes ``()``, zero-size shapes (a 0 anywhere), one-element
    shapes, odd and prime sizes such as 2333 and powers of two with their
    neighbours, and up to ``max_dims`` dimensions. Zero-size shapes may have
    other dimensions that would not fit the budget on their own; they hold no
    bytes, so the bound still holds.

    Shrinks towards the small 1-D shape ``(1,)`` (``(1,) * min_dims`` if
    ``min_dims > 1``): the number of dimensions shrinks to 1, then 0, then
    upwards, and every dimension shrinks to 1.
    """
    check_int("itemsize", itemsize, 1)
    check_int("max_bytes", max_bytes, itemsize)
    check_int("min_dims", min_dims, 0)
    check_int("max_dims", max_dims, min_dims)
    return _cached_shapes(max_bytes // itemsize, max_dims, min_dims)


@lru_cache(maxsize=256)
def _cached_shapes(max_numel: int, max_dims: int, min_dims: int) -> st.SearchStrategy[tuple[int, ...]]:
    ndims = [1, 0, *range(2, max_dims + 1)]
    ndims = [d for d in ndims if min_dims <= d <= max_dims]

    @st.composite
    def draw_shape(draw: st.DrawFn) -> tuple[int, ...]:
        ndim = draw(st.sampled_from(ndims))
        budget = max_numel
        shape = []
        if ndim == 0:
            # Draw (and discard) one dimension anyway: Hypothesis shrinks
            # towards shorter choice sequences, and without this () would
            # "shrink" below (1,).
            draw(_dim_sizes(budget))
        for _ in range(ndim):
            size = draw(_dim_sizes(budget))
            shape.append(size)
            if size:
                budget //= size
        return tuple(shape)

    return draw_shape()

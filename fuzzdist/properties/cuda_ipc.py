"""CUDA IPC sees writes: a tensor a drawn source rank shares with ``reduce_tensor`` is the same memory on
every rank, so after a drawn writer writes and synchronizes, every rank sees exactly those values.

Generalises torch's ``test_p2p_ipc.py`` (seed 000: one tensor from rank 0, rebuilt on rank 1 with
``args[6]`` set to its device) to allocations exactly on, one rounded block below and one above the
caching allocator's block and segment boundaries, offsets into that allocation, several views of it,
any source and writer, and the allocator modes (expandable segments included, checked on the segment
that holds the tensor).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.cuda_ipc import (
    check_expandable_segment,
    ipc_allocator_modes,
    open_cuda_handle,
    reduce_cuda_handles,
)
from fuzzdist.toolkit.sharing import share_tensor

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

MiB = 2**20
# The caching allocator's boundaries (c10/cuda/CUDACachingAllocator.cpp): every request is rounded up to a
# multiple of 512 bytes (kMinBlockSize); blocks up to 1 MiB (kSmallSize) are small and come from 2 MiB
# segments (kSmallBuffer); larger ones come from 20 MiB segments (kLargeBuffer) below 10 MiB (kMinLargeAlloc),
# and from their own segments, rounded up to 2 MiB (kRoundLarge), from 10 MiB on.
BOUNDARIES = (512, MiB, 2 * MiB, 10 * MiB, 20 * MiB)
ROUNDING = 512  # the allocator's granularity: one rounded block below or above a boundary
SMALLEST = 8  # the smallest allocation every drawn dtype divides (8-byte elements at most)


def boundary_sizes(boundaries: tuple[int, ...] = BOUNDARIES) -> tuple[int, ...]:
    """The allocation sizes, in bytes, the property draws: for each boundary, exactly one rounded block
    below it, on it and above it, plus the smallest allocation, ascending (so shrinking goes to the smallest)."""
    sizes = {SMALLEST}
    for b in boundaries:
        sizes.update({max(SMALLEST, b - ROUNDING), b, b + ROUNDING})
    return tuple(sorted(sizes))


NBYTES = st.sampled_from(boundary_sizes())  # the whole allocation's size: it sits on, below or above a boundary
DTYPES = st.sampled_from([torch.float32, torch.uint8, torch.float16, torch.int64, torch.bfloat16])
OFFSETS = st.integers(0, 4096)  # elements before the first shared view in its allocation
COUNTS = st.integers(1, 3)  # views of one allocation shared
SEEDS = fst.seeds()
MODES = st.deferred(ipc_allocator_modes)  # deferred: the modes depend on the GPU, probed when drawn


class Layout(NamedTuple):
    """Where the shared views lie in one allocation of ``numel_total`` elements: ``views`` views of
    ``numel`` elements each, back to back from element ``offset``."""

    numel_total: int
    offset: int
    views: int
    numel: int


def layout(nbytes: int, itemsize: int, offset: int, count: int) -> Layout:
    """The allocation is exactly ``nbytes`` (the drawn size on its boundary); ``count`` views of equal
    size are carved from it after ``offset`` elements, each at least one element.  ``offset`` and
    ``count`` are clamped to what fits, so every drawn size keeps its exact allocation."""
    if nbytes % itemsize or nbytes < itemsize:
        raise InvalidArgument(f"{nbytes} bytes is not a whole number of {itemsize}-byte elements")
    total = nbytes // itemsize
    count = max(1, min(count, total))
    offset = max(0, min(offset, total - count))
    return Layout(total, offset, count, (total - offset) // count)


def _values(numel: int, dtype: torch.dtype, seed: int, device: str | torch.device) -> torch.Tensor:
    return fst.TensorSpec((numel,), dtype).materialize(device, seed)


def ipc_write_and_see(
    ctx: RankContext,
    nbytes: int,
    dtype: torch.dtype,
    offset: int,
    count: int,
    src: int,
    writer: int,
    seed: int,
    mode: fst.CudaAllocatorMode,
    share: Callable[..., Any] = reduce_cuda_handles,
    receive: Callable[..., Any] = open_cuda_handle,
) -> list[Problem]:
    """On every rank: share views of one allocation of exactly ``nbytes`` from ``src`` (see
    :func:`layout`); ``writer`` writes; report what each rank sees against independently built values."""
    problems: list[Problem] = []
    itemsize = torch.empty(0, dtype=dtype).element_size()
    where = layout(nbytes, itemsize, offset, count)
    with mode.applied():
        pieces: list[torch.Tensor | None] = [None] * where.views
        if ctx.rank == src:
            parent = torch.zeros(where.numel_total, dtype=dtype, device=ctx.device)
            pieces = [
                parent[where.offset + i * where.numel : where.offset + (i + 1) * where.numel]
                for i in range(where.views)
            ]
            # the segment that holds this tensor must be what the mode asked for, not merely some segment
            mismatch = check_expandable_segment(parent, mode.effective_expandable_segments())
            if mismatch:
                problems.append(Problem(Kind.NOTE, f"allocator mode {mode}", detail=mismatch))
            del parent  # the views keep the allocation; it goes with them, inside the mode
        receive_here = functools.partial(receive, device_index=ctx.device.index)
        shared = [share_tensor(piece, src, ctx.group, share=share, receive=receive_here) for piece in pieces]
        dist.barrier(group=ctx.group)
        if ctx.rank == writer:
            for i, tensor in enumerate(shared):
                tensor.copy_(_values(where.numel, dtype, seed + i, ctx.device))
            torch.cuda.synchronize(ctx.device)
        dist.barrier(group=ctx.group)
        for i, tensor in enumerate(shared):
            diff = first_difference(tensor, _values(where.numel, dtype, seed + i, "cpu"), f"piece {i}")
            if diff:
                problems.append(diff)
        torch.cuda.synchronize(ctx.device)
        del shared, pieces  # every rank lets go of the memory inside the mode...
        dist.barrier(group=ctx.group)  # ...before the source frees it (its hold queue, see applied())
        torch.cuda.synchronize(ctx.device)
    return problems


def check(
    pool: Pool,
    nbytes: int,
    dtype: torch.dtype,
    offset: int,
    count: int,
    src: int,
    writer: int,
    seed: int,
    mode: fst.CudaAllocatorMode,
    *,
    share: Callable[..., Any] = reduce_cuda_handles,
    receive: Callable[..., Any] = open_cuda_handle,
) -> None:
    """Share ``count`` views carved after ``offset`` elements from one allocation of exactly ``nbytes``
    on rank ``src`` (under allocator ``mode``, checked on the tensor's own segment), let ``writer``
    write them; raise :class:`PropertyFailure` with every rank's problems unless every rank sees
    exactly the written values."""
    problems = pool.run(
        ipc_write_and_see, nbytes, dtype, offset, count, src, writer, seed, mode, share=share, receive=receive
    )
    if problems != [[]] * pool.world_size:
        raise PropertyFailure(
            f"ranks saw other values than rank {writer} wrote:{by_rank(dict(enumerate(problems)))}", problems
        )

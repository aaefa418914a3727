"""CUDA IPC sees writes: a tensor a drawn source rank shares with ``reduce_tensor`` is the same memory on
every rank, so after a drawn writer writes and synchronizes, every rank sees exactly those values.

Generalises torch's ``test_p2p_ipc.py`` (seed 000: one tensor from rank 0, rebuilt on rank 1 with
``args[6]`` set to its device) to sizes around the caching allocator's block and segment
boundaries, offsets into a larger allocation, several views of one allocation, any source and
writer, and the allocator modes (expandable segments included).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.checks import first_difference
from fuzzdist.cuda_ipc import expandable_segments_active, ipc_allocator_modes, open_cuda_handle, reduce_cuda_handles
from fuzzdist.properties import PropertyFailure
from fuzzdist.sharing import share_tensor

if TYPE_CHECKING:
    from fuzzdist.context import RankContext
    from fuzzdist.pool import Pool

MiB = 2**20
# The caching allocator's boundaries: small blocks up to 1 MiB come from 2 MiB segments,
# larger ones from 20 MiB segments below 10 MiB and are rounded to 2 MiB above it.
BOUNDARIES = (1, 512, MiB, 2 * MiB, 10 * MiB, 20 * MiB)
NBYTES = st.sampled_from(BOUNDARIES).flatmap(
    lambda b: st.sampled_from([max(8, b - 512), b, b + 512])).map(lambda n: n - n % 8)
DTYPES = st.sampled_from([torch.float32, torch.uint8, torch.float16, torch.int64, torch.bfloat16])
OFFSETS = st.integers(0, 4096)  # elements before the first shared view in its allocation
COUNTS = st.integers(1, 3)  # views of one allocation shared
SEEDS = st.integers(0, 2**31)
MODES = st.deferred(ipc_allocator_modes)  # deferred: the modes depend on the GPU, probed when drawn


def _values(numel: int, dtype: torch.dtype, seed: int, device: str | torch.device) -> torch.Tensor:
    return fst.TensorSpec((numel,), dtype).materialize(device, seed)


def ipc_write_and_see(ctx: RankContext, nbytes: int, dtype: torch.dtype, offset: int, count: int, src: int,
                      writer: int, seed: int, mode: fst.CudaAllocatorMode,
                      share: Callable[..., Any] = reduce_cuda_handles,
                      receive: Callable[..., Any] = open_cuda_handle) -> list[str]:
    """On every rank: share ``count`` views of one larger allocation from ``src``; ``writer``
    writes; report what each rank sees against independently built values."""
    problems: list[str] = []
    itemsize = torch.empty(0, dtype=dtype).element_size()
    numel = nbytes // itemsize
    with mode.applied():
        pieces: list[torch.Tensor | None] = [None] * count
        if ctx.rank == src:
            parent = torch.zeros(offset + count * numel + 1, dtype=dtype, device=ctx.device)
            pieces = [parent[offset + i * numel: offset + (i + 1) * numel] for i in range(count)]
            if mode.expandable_segments and not expandable_segments_active(ctx.device):
                problems.append("expandable segments were requested but the allocator made none")
        receive_here = functools.partial(receive, device_index=ctx.device.index)
        shared = [share_tensor(piece, src, ctx.group, share=share, receive=receive_here) for piece in pieces]
        dist.barrier(group=ctx.group)
        if ctx.rank == writer:
            for i, tensor in enumerate(shared):
                tensor.copy_(_values(numel, dtype, seed + i, ctx.device))
            torch.cuda.synchronize(ctx.device)
        dist.barrier(group=ctx.group)
        for i, tensor in enumerate(shared):
            diff = first_difference(tensor, _values(numel, dtype, seed + i, "cpu"))
            if diff:
                problems.append(f"piece {i}: {diff}")
        torch.cuda.synchronize(ctx.device)
        dist.barrier(group=ctx.group)  # the source frees its memory only after every rank looked
        del shared, pieces
    return problems


def check(pool: Pool, nbytes: int, dtype: torch.dtype, offset: int, count: int, src: int, writer: int, seed: int,
          mode: fst.CudaAllocatorMode, *, share: Callable[..., Any] = reduce_cuda_handles,
          receive: Callable[..., Any] = open_cuda_handle) -> None:
    """Share ``count`` views of ``nbytes`` each, ``offset`` elements into one allocation on rank
    ``src`` (under allocator ``mode``), let ``writer`` write them; raise :class:`PropertyFailure`
    with every rank's problems unless every rank sees exactly the written values."""
    problems = pool.run(ipc_write_and_see, nbytes, dtype, offset, count, src, writer, seed, mode,
                        share=share, receive=receive)
    if problems != [[]] * pool.world_size:
        raise PropertyFailure(str(problems), problems)

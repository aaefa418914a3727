"""Shared tensors see writes: a CPU tensor one rank shares the way torch does across processes (one
ForkingPickler handle per receiver, under either sharing strategy) is one piece of memory: every rank
sees it with the source's layout and values, sees every write any rank makes to it, and holds none
of it after the example.

Generalises torch's ``test_p2p_ipc.py`` (seed 000: one CUDA tensor shared with ``reduce_tensor``,
rebuilt on another rank, written, seen) to CPU memory: every dtype and layout (storage offsets,
transposed and channels-last views), any source, any sequence of writers, both sharing strategies,
and a check that no rank keeps the memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.sharing import (
    leftover_shared_memory,
    open_tensor_handle,
    reduce_tensor_handles,
    share_tensor,
    shared_memory_in_use,
)

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

MAX_BYTES = 64 * 1024

# Every dtype fuzzdist builds on CPU and every layout: sharing moves the whole storage and sends
# (storage offset, size, stride) with the handle, so no dtype or strided layout is out of reach.
# "sliced" puts the view storage_offset elements into a storage that holds more values before it,
# and "transposed"/"channels_last" are views whose storage order differs from their logical order,
# which is how the property checks that offsets and views survive sharing.
SPECS = fst.tensor_specs(max_bytes=MAX_BYTES)
SEEDS = fst.seeds()
MODES = fst.allocator_modes("cpu")
WRITE_PATTERNS = st.sampled_from(fst.PATTERNS)


def write_seed_for(write_seed: int, round_: int) -> int:
    """The seed the round's written values are built from.

    Drawn seeds lie in [0, 2**32) and these in [2**40, 2**41): the written
    values never come from the stream the shared tensor was built from, even
    when both drawn seeds shrink to 0. Otherwise a write could leave the
    memory unchanged and prove nothing.
    """
    return (1 << 40) + (write_seed << 4) + round_


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """Every byte of ``t``'s storage as a flat uint8 tensor over the same memory, including any
    bytes before the view (its storage offset) or between its elements."""
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, tuple(t.stride()), t.storage_offset(), t.untyped_storage().nbytes())


def _difference(what: str, tensor: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    """What differs between the shared tensor and the private expected one: the view's values, then
    the storage bytes around the view, which no write may touch."""
    diff = first_difference(tensor, expected, what)
    if diff is None and not torch.equal(storage_bytes(tensor), storage_bytes(expected)):
        diff = Problem(
            Kind.MISMATCH, what, detail="the view's values are right, but storage bytes outside the view differ"
        )
    return diff


def share_write_and_check(
    ctx: RankContext,
    spec: fst.TensorSpec,
    seed: int,
    src: int,
    writers: tuple[int, ...],
    write_pattern: str,
    write_seed: int,
    mode: fst.SharingStrategyMode,
    *,
    share: Callable[..., Any] = reduce_tensor_handles,
    receive: Callable[..., Any] = open_tensor_handle,
) -> list[Problem] | None:
    """Runs on every rank. Rank ``src`` shares ``spec``'s tensor. Then each rank in ``writers``
    writes new values into it in turn, and every rank checks what it sees after each write.

    Returns None, or a list of what this rank saw wrong: the layout, the values before and after
    each write, and shared memory still held after every rank has dropped the tensor. ``share``
    and ``receive`` are ``fuzzdist.toolkit.sharing``'s two halves of sharing, swappable so that tests can
    plant bugs.
    """
    return run_and_check_no_memory_left(
        ctx,
        mode,
        lambda: _share_write_and_check(ctx, spec, seed, src, writers, write_pattern, write_seed, share, receive),
    )


def run_and_check_no_memory_left(
    ctx: RankContext, mode: fst.SharingStrategyMode, run: Callable[[], list[Problem]]
) -> list[Problem] | None:
    """Runs on every rank: ``run()`` (which shares memory across the ranks and returns what it found
    wrong) under sharing strategy ``mode``; then, once every rank has returned from it, a problem if this
    rank still holds shared memory it did not hold before.  None where nothing is wrong."""
    baseline = shared_memory_in_use()
    with mode.applied():
        problems = run()
    # Each rank has dropped its tensors (run's frame is gone). Once all have, no rank may still
    # map, hold or own the memory.
    dist.barrier(group=ctx.group)
    leaked = leftover_shared_memory(baseline)
    if leaked:
        problems.append(
            Problem(
                Kind.NOTE, detail=f"still holds shared memory after every rank dropped the tensor: {sorted(leaked)}"
            )
        )
    return problems or None


def _share_write_and_check(
    ctx: RankContext,
    spec: fst.TensorSpec,
    seed: int,
    src: int,
    writers: tuple[int, ...],
    write_pattern: str,
    write_seed: int,
    share: Callable[..., Any],
    receive: Callable[..., Any],
) -> list[Problem]:
    problems: list[Problem] = []
    # Built from (spec, seed) alone, in this rank's private memory, never read from the shared tensor.
    expected = spec.materialize(ctx.device, seed)
    mine = spec.materialize(ctx.device, seed) if ctx.rank == src else None
    tensor: torch.Tensor | None  # None once its layout is found wrong
    tensor = share_tensor(mine, src, ctx.group, share=share, receive=receive)
    del mine
    if _layout(tensor) != _layout(expected):
        problems.append(
            Problem(
                Kind.SHAPE,
                "received (shape, dtype, stride, storage offset, storage bytes)",
                got=_layout(tensor),
                expected=_layout(expected),
            )
        )
        tensor = None  # keep entering the barriers, but don't write into memory of the wrong shape
    elif (diff := _difference("as shared", tensor, expected)) is not None:
        problems.append(diff)
    write_spec = fst.TensorSpec(spec.shape, spec.dtype, pattern=write_pattern)
    for round_, writer in enumerate(writers):
        values = write_spec.materialize(ctx.device, write_seed_for(write_seed, round_))
        expected.copy_(values)  # the storage bytes outside the view stay as they were
        dist.barrier(group=ctx.group)  # every rank has looked at the memory before it changes
        if ctx.rank == writer and tensor is not None:
            tensor.copy_(values)
        dist.barrier(group=ctx.group)  # the write is done before anyone looks
        if (
            tensor is not None
            and (diff := _difference(f"after rank {writer}'s write (round {round_})", tensor, expected)) is not None
        ):
            problems.append(diff)
    return problems


def check(
    pool: Pool,
    spec: fst.TensorSpec,
    seed: int,
    src: int,
    writers: tuple[int, ...],
    write_pattern: str,
    write_seed: int,
    mode: fst.SharingStrategyMode,
    *,
    share: Callable[..., Any] = reduce_tensor_handles,
    receive: Callable[..., Any] = open_tensor_handle,
) -> None:
    """Share ``spec``'s tensor from rank ``src`` under ``mode`` with ``share``/``receive``
    (``fuzzdist.toolkit.sharing``'s two halves by default), let each rank in ``writers`` write in turn,
    and raise :class:`PropertyFailure` with what each rank saw wrong."""
    problems = pool.run(
        share_write_and_check, spec, seed, src, writers, write_pattern, write_seed, mode, share=share, receive=receive
    )
    wrong = {rank: p for rank, p in enumerate(problems) if p is not None}
    if wrong:
        raise PropertyFailure(f"shared from rank {src} under {mode}, written by {writers}:{by_rank(wrong)}", problems)

"""Broadcast: after ``dist.broadcast`` from a drawn source, every rank holds exactly the source's tensor.

Generalises the broadcast of torch's ``test_c10d_spawn_gloo.py`` (seed 003:
``TestDistributedNNFunctionsGloo.test_broadcast``, fixed inputs over gloo) to every dtype gloo
moves, any shape up to 64 KiB, every memory layout of the source's tensor, every value pattern and
any source rank.  The receivers' tensors are contiguous.  gloo broadcasts a non-contiguous source's
memory as if it were row-major (known torch bug ``gloo-broadcast-ignores-strides``): a receiver
that holds the source's values in memory order says so, and the check tallies it as a sighting of
the known bug (:mod:`fuzzdist.known_bugs`) instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.capabilities.gloo import gloo_dtypes
from fuzzdist.problems import Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.toolkit.checks import bitwise_equal, first_difference, storage_order

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

MAX_BYTES = 64 * 1024

# Every dtype the installed torch's gloo broadcasts (complex not before torch's broadcast views it as real:
# asked of torch on the first draw, not at import, which ranks do too), any shape up to 64 KiB, every
# layout, every value pattern.
SPECS = fst.tensor_specs(
    shapes=fst.shapes(max_bytes=MAX_BYTES), dtypes=st.deferred(lambda: st.sampled_from(gloo_dtypes("broadcast")))
)
SEEDS = fst.seeds()


def broadcast_and_check(
    ctx: RankContext, spec: fst.TensorSpec, src: int, seed: int, broadcast: Callable[..., Any] = dist.broadcast
) -> Problem | None:
    """On every rank: broadcast ``spec``'s tensor from ``src``; None if this rank holds exactly
    the source's values, else what differs.  ``broadcast`` is swappable so tests can plant bugs."""
    if ctx.rank == src:
        tensor = spec.materialize(ctx.device, seed)
        expected = tensor.clone()  # the source must keep its own values too
    else:
        # Rebuilt from the drawn (spec, seed), never taken from the broadcast; built before
        # it, while the source builds its tensor.
        expected = spec.materialize(ctx.device, seed)
        tensor = torch.zeros(spec.shape, dtype=spec.dtype, device=ctx.device)
    broadcast(tensor, src, group=ctx.group)
    diff = first_difference(tensor, expected)
    if diff is not None and ctx.rank != src:
        in_memory_order = storage_order(spec.materialize(ctx.device, seed))
        if in_memory_order is not None and bitwise_equal(tensor, in_memory_order):
            diff = diff.with_symptom(Symptom.MEMORY_ORDER)
    return diff


def check(
    pool: Pool, spec: fst.TensorSpec, src: int, seed: int, *, broadcast: Callable[..., Any] = dist.broadcast
) -> None:
    """Broadcast ``spec``'s tensor (values from ``seed``) from rank ``src`` over ``pool`` with
    ``broadcast`` (any function with ``dist.broadcast``'s signature); raise
    :class:`PropertyFailure` naming the ranks whose tensor differs from the source's.  Run inside
    ``known_failures("broadcast", ...)``: a known torch bug's failure is tallied, not raised."""
    with known_failures("broadcast", spec=spec, src=src, seed=seed, world_size=pool.world_size):
        differences = pool.run(broadcast_and_check, spec, src, seed, broadcast=broadcast)
        wrong = {rank: diff for rank, diff in enumerate(differences) if diff is not None}
        if wrong:
            raise PropertyFailure(f"ranks {sorted(wrong)} differ from source rank {src}:{by_rank(wrong)}", differences)

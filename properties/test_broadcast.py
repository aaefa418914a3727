"""Broadcast: after ``dist.broadcast`` from a drawn source, every rank holds exactly the source's tensor."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.capabilities import GLOO_DTYPES
from fuzzdist.checks import first_difference, fingerprint

MAX_BYTES = 64 * 1024


def broadcast_and_observe(ctx, spec, src, seed):
    """On every rank: broadcast ``spec``'s tensor from ``src``; report what this rank ended with."""
    if ctx.rank == src:
        tensor = spec.materialize(ctx.device, seed)
    else:
        tensor = torch.zeros(spec.shape, dtype=spec.dtype, device=ctx.device)
    dist.broadcast(tensor, src, group=ctx.group)
    # The expected values are rebuilt from (spec, seed), never taken from the broadcast.
    return fingerprint(tensor), first_difference(tensor, spec.materialize("cpu", seed))


@pytest.mark.fuzzdist(device=["cpu", "cuda"])
@given(
    data=st.data(),
    spec=fst.tensor_specs(
        shapes=fst.shapes(max_bytes=MAX_BYTES),
        dtypes=st.sampled_from(GLOO_DTYPES),
        layouts=st.just("contiguous"),
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_broadcast_reaches_every_rank(rank_pool, data, spec, seed):
    """Every rank sees the source rank's values exactly, for any size, dtype and source."""
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    expected = fingerprint(spec.materialize("cpu", seed))
    observed = rank_pool.run(broadcast_and_observe, spec, src, seed)
    wrong = {rank: diff for rank, (fp, diff) in enumerate(observed) if fp != expected}
    assert not wrong, f"ranks {sorted(wrong)} differ from source rank {src}: {wrong}"

"""A property for `torchrun -m fuzzdist run` (tests/pool/test_torchrun.py); PLANT_BUG=1 breaks rank 1 for n >= 7."""

import os

import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st


def allreduce_check(ctx, n, bug):
    t = torch.full((n,), 1.0)
    dist.all_reduce(t, group=ctx.group)
    if bug and ctx.rank == 1 and n >= 7:
        t[0] = 0
    return (t == ctx.world_size).all().item(), os.getpid()


@given(n=st.integers(1, 50))
def test_allreduce(rank_pool, n):  # collected only when fuzzdist run is pointed at this file
    out = rank_pool.run(allreduce_check, n, os.environ.get("PLANT_BUG") == "1")
    assert len({pid for _, pid in out}) == rank_pool.world_size
    assert all(ok for ok, _ in out), out

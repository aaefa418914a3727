"""Planted hangs: rank functions that hang for some inputs, one per kind fuzzdist tells apart."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def different_collectives(ctx, n):
    """Above n = 5, rank 1 calls broadcast where rank 0 calls all_reduce (step 2)."""
    t = torch.ones(n)
    dist.all_reduce(t)
    if ctx.rank == 1 and n > 5:
        dist.broadcast(torch.zeros(2, dtype=torch.int64), src=0)
    else:
        dist.all_reduce(t)
    return n


def skipped_collective(ctx, n):
    """Above n = 3, rank 0 calls a second all_reduce that rank 1 skips (a rank-dependent branch)."""
    t = torch.ones(n)
    dist.all_reduce(t)
    if ctx.rank == 0 and n > 3:
        dist.all_reduce(t)
    return n


def mismatched_shape(ctx, n):
    """Above n = 2, rank 0 all-reduces one element where rank 1 all-reduces n.

    gloo 2.13 completes rank 0's all_reduce and leaves rank 1 waiting (other size
    pairs abort the rank: that is a RankCrash, not a hang).
    """
    dist.all_reduce(torch.ones(1 if ctx.rank == 0 and n > 2 else n))
    return n


def mismatched_root(ctx, n):
    """Above n = 4, each rank broadcasts from itself: both wait in broadcast #1 with different roots."""
    dist.broadcast(torch.ones(3), src=ctx.rank if n > 4 else 0)
    return n


def never_completed_work(ctx, n):
    """A Work whose completion never comes: the drawn order releases a work that is never issued first."""
    from fuzzdist.toolkit.reorder import ReorderingProcessGroup

    pg = ReorderingProcessGroup(ctx.group, [1, 0], work_form="future", stall_timeout=None)
    work = pg.allreduce([torch.ones(n)], dist.AllreduceOptions())
    work.get_future().wait()
    return n


def slow(ctx, seconds):
    """Not a hang at all: every rank sleeps past the timeout."""
    time.sleep(seconds)


def raise_then_wait(ctx, n):
    """Rank 1 raises; rank 0 goes on into an all_reduce rank 1 will never join."""
    if ctx.rank == 1:
        raise ValueError("planted")
    dist.all_reduce(torch.ones(n))


def two_hangs(ctx, a, b):
    """Two different hangs at two different lines: a mismatch for a >= 6, a skipped collective for b >= 4."""
    t = torch.ones(2)
    dist.all_reduce(t)
    if a >= 6:
        if ctx.rank == 1:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
    elif b >= 4 and ctx.rank == 0:
        dist.all_reduce(t)
    return a, b

"""Rank functions the benchmarks send to their pools (a module of their own, so the ranks can import them)."""

from __future__ import annotations


def noop(ctx):
    """Nothing: the example a restart is timed to."""
    return ctx.rank


def different_roots(ctx, n):
    """A deadlock for n > 4: each rank broadcasts from itself, so every rank waits in broadcast #1."""
    import torch
    import torch.distributed as dist

    dist.broadcast(torch.ones(3), src=ctx.rank if n > 4 else 0)
    return n


def two_hangs(ctx, a, b):
    """Two different hangs at two different lines: a mismatch for a >= 6, a skipped collective for b >= 4."""
    import torch
    import torch.distributed as dist

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


def sleep_then_all_reduce(ctx, seconds):
    """A slow example that passes: every rank sleeps, then they all-reduce."""
    import time

    import torch
    import torch.distributed as dist

    time.sleep(seconds)
    t = torch.ones(2)
    dist.all_reduce(t)
    return float(t[0])


def raise_on(ctx, rank):
    """Rank ``rank`` raises, the others return (rank >= world size: none raises)."""
    if ctx.rank == rank:
        raise ValueError(f"planted failure on rank {ctx.rank}")
    return ctx.rank


def raise_on_all(ctx):
    """Every rank raises."""
    raise ValueError(f"planted failure on every rank (this is rank {ctx.rank})")

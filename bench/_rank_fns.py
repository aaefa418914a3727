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

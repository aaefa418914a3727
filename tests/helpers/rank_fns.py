"""Rank functions for fuzzdist's own tests: importable, so the rank processes can load them."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import torch
import torch.distributed as dist


def whoami(ctx):
    return (ctx.rank, ctx.world_size, str(ctx.device), ctx.backend)


def broadcast_sum(ctx, n, src):
    t = torch.arange(n, dtype=torch.float64) if ctx.rank == src else torch.zeros(n, dtype=torch.float64)
    dist.broadcast(t, src, group=ctx.group)
    return t.sum().item()


def raise_on(ctx, rank, exc_type=ValueError):
    if ctx.rank == rank:
        raise exc_type(f"planted failure on rank {ctx.rank}")
    return ctx.rank


def hang_on(ctx, rank):
    if ctx.rank == rank:
        time.sleep(3600)
    return ctx.rank


def die_on(ctx, rank, how):
    if ctx.rank == rank:
        if how == "exit":
            os._exit(3)
        if how == "segv":
            import ctypes

            ctypes.string_at(0)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    return ctx.rank


def raise_before_barrier(ctx, rank):
    if ctx.rank == rank:
        raise KeyError("left before the barrier")
    dist.barrier(group=ctx.group)


def fails_above(ctx, n, threshold, failing_rank):
    """A planted bug: rank ``failing_rank`` is wrong for every n >= threshold."""
    t = torch.full((4,), float(n))
    dist.all_reduce(t, group=ctx.group)
    if ctx.rank == failing_rank and n >= threshold:
        raise AssertionError(f"n={n} is too large")
    return t[0].item()


def two_bugs(ctx, n):
    """Two different bugs at two different sites, on two different ranks."""
    if n % 2 == 0 and n >= 10 and ctx.rank == 0:
        raise ValueError("bug A: even n on rank 0")
    if n % 2 == 1 and n >= 10 and ctx.rank == 1:
        raise ValueError("bug B: odd n on rank 1")
    return n


def random_draws(ctx):
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist(), ctx.seed)


def pollute_state(ctx):
    os.environ["FUZZDIST_TEST_POLLUTION"] = "1"
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.multiprocessing.set_sharing_strategy("file_system")
    torch.use_deterministic_algorithms(True)
    import warnings

    warnings.simplefilter("error")
    return True


def observe_state(ctx):
    return {
        "env": os.environ.get("FUZZDIST_TEST_POLLUTION"),
        "dtype": str(torch.get_default_dtype()),
        "grad": torch.is_grad_enabled(),
        "sharing": torch.multiprocessing.get_sharing_strategy(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "warnings_are_errors": __import__("warnings").filters[:1] == [("error", None, Warning, None, 0)],
        "pid": os.getpid(),
    }


def set_alloc_conf(ctx):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    return os.getpid()


def resources(ctx):
    """This rank's resident memory (bytes) and open file descriptors."""
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return rss_pages * os.sysconf("SC_PAGE_SIZE"), len(os.listdir("/proc/self/fd"))


def small_collective(ctx, n):
    t = torch.full((n,), float(ctx.rank))
    dist.all_reduce(t, group=ctx.group)
    return None


def return_unpicklable(ctx):
    import threading

    return threading.Lock()


def raise_on_all(ctx):
    raise RuntimeError(f"planted failure on every rank (this is rank {ctx.rank})")


def whoami_seed(ctx, n):
    return ctx.seed


def read_alloc_conf(ctx):
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF")


def gloo_accepts(ctx, dtype_names):
    """For each dtype name: does gloo broadcast a tensor of it? (same answer on every rank)"""
    out = {}
    for name in dtype_names:
        try:
            dist.broadcast(torch.zeros(4, dtype=getattr(torch, name)), 0, group=ctx.group)
            out[name] = True
        except (RuntimeError, ValueError):
            out[name] = False
    return out


def return_uint16(ctx):
    return torch.zeros(2, dtype=torch.uint16)  # torch 2.13 pickles it but can't unpickle it


def warn_then_raise_on(ctx, rank):
    import warnings

    warnings.warn(f"planted warning on rank {ctx.rank}", stacklevel=1)
    print(f"printed by rank {ctx.rank}")
    if ctx.rank == rank:
        raise ValueError("planted")


def all_reduce_sizes_differ(ctx):
    dist.all_reduce(torch.ones(4 + ctx.rank))


def start_facts(ctx):
    """What a rank knows of how it was started: its pid, its parent, whether CUDA is initialised."""
    return {"pid": os.getpid(), "ppid": os.getppid(), "cuda_initialized": torch.cuda.is_initialized(), "rank": ctx.rank}


def read_env(ctx, name):
    """The rank's value of environment variable ``name`` (None if unset)."""
    return os.environ.get(name)


def say(ctx, text):
    """Print ``text`` on the rank's stdout."""
    print(text, flush=True)

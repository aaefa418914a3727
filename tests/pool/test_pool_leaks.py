"""A thousand examples in a row leak no processes, file descriptors or memory."""

from __future__ import annotations

import os

import pytest
from helpers import rank_fns

from fuzzdist import RankCrash, RankError, RankPool

# Allocator noise: RSS moves by a few MB as glibc's arenas settle.
RSS_SLACK = 16 * 1024 * 1024


def _driver_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children() -> set[int]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        return {int(pid) for pid in f.read().split()}


def test_thousand_examples_leak_nothing():
    with RankPool(2, timeout=10) as pool:
        for n in range(50):  # warm up: lazy imports, first-use buffers
            pool.run(rank_fns.small_collective, n % 7 + 1)
        start = pool.run(rank_fns.resources)
        driver_fds, children = _driver_fds(), _children()
        for n in range(1000):
            if n % 100 == 99:  # failures too: their reports must not pile up
                try:
                    pool.run(rank_fns.raise_on, n % 2)
                except RankError:
                    pass
            else:
                pool.run(rank_fns.small_collective, n % 7 + 1)
        end = pool.run(rank_fns.resources)
        assert pool.generation == 1, "the ranks were restarted: the leak check saw fresh processes"
        for rank, ((rss0, fds0), (rss1, fds1)) in enumerate(zip(start, end, strict=False)):
            assert fds1 == fds0, f"rank {rank} leaked {fds1 - fds0} file descriptors"
            assert rss1 - rss0 < RSS_SLACK, f"rank {rank} grew by {(rss1 - rss0) / 2**20:.1f} MiB"
        assert _driver_fds() == driver_fds, "the driver leaked file descriptors"
        assert _children() == children, "the driver's child processes changed"
        assert set(pool.pids) <= children
    assert not (set(pool.pids) & _children()), "rank processes outlived close()"


def test_recovery_does_not_leak_processes_or_fds():
    with RankPool(2, timeout=2) as pool:
        pool.run(rank_fns.whoami)
        driver_fds = _driver_fds()
        others = _children() - set(pool.pids)  # other pools of the session, the resource tracker
        for round_ in range(3):
            generation = pool.generation
            with pytest.raises(RankCrash) as crashed:  # the planted crash must happen, or nothing is recovered
                pool.run(rank_fns.die_on, 1, "exit")
            assert crashed.value.ranks == [1], crashed.value
            pool.run(rank_fns.whoami)
            assert pool.generation == generation + 1, f"round {round_}: the pool was not restarted"
        assert _driver_fds() == driver_fds
        assert _children() == others | set(pool.pids), "killed rank processes were not reaped"


def test_close_is_quick():
    import time

    pool = RankPool(2, timeout=10).start()
    pool.run(rank_fns.whoami)
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 1.5

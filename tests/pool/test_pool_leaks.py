"""A thousand examples in a row leak no processes, file descriptors or memory."""

from __future__ import annotations

import os

import pytest
from helpers import descendants, rank_fns

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
            if n % 100 == 99:  # failures too (on every rank: one rank's alone would replace the ranks),
                try:  # their reports must not pile up
                    pool.run(rank_fns.raise_on_all)
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
        pids = pool.pids
        assert all(descendants.alive(pid) for pid in pids)
    assert descendants.wait_all_dead(pids) == [], "rank processes outlived close()"


@pytest.mark.parametrize("start_method, spares", [("spawn", "never"), ("forkserver", "never"), ("forkserver", "auto")])
def test_recovery_does_not_leak_processes_or_fds(start_method, spares, forkable):
    with RankPool(2, timeout=2, start_method=start_method, spares=spares) as pool:
        pool.run(rank_fns.whoami)
        driver_fds, children = None, None
        gone: list[int] = []
        for round_ in range(4):
            if round_ == 1:  # counted once the pool is in its steady state (a spare set kept, where asked)
                driver_fds, children = _driver_fds(), _children() - set(pool.pids) - set(pool.spare_pids)
            generation = pool.generation
            gone += pool.pids
            with pytest.raises(RankCrash) as crashed:  # the planted crash must happen, or nothing is recovered
                pool.run(rank_fns.die_on, 1, "exit")
            assert crashed.value.ranks == [1], crashed.value
            pool.run(rank_fns.whoami)
            assert pool.generation == generation + 1, f"round {round_}: the pool was not restarted"
            assert len(pool.spare_pids) == (2 if spares == "auto" else 0)
        assert _driver_fds() == driver_fds
        assert descendants.wait_all_dead(gone) == [], "killed rank processes live on"
        assert (
            _children() == children | set(pool.pids) | set(pool.spare_pids)
            if start_method == "spawn"
            else _children() == children
        ), "the driver's child processes changed"


def test_close_is_quick():
    import time

    pool = RankPool(2, timeout=10).start()
    pool.run(rank_fns.whoami)
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 1.5

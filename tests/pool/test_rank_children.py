"""Ranks may start processes (a ProcessGroup that runs its real group in a child process can be
checked), and nothing a rank starts outlives it: not after a restart, a hang, close(), or the
driver being SIGKILLed."""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import descendants, rank_fns
from hypothesis import settings

from fuzzdist import RankPool, RankTimeout
from fuzzdist.conformance import check_process_group
from fuzzdist.pool.rank import process_tree, spawned

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _tree(found: list[dict[str, int]]) -> list[int]:
    return [pid for ranks in found for pid in ranks.values()]


def test_a_group_that_runs_its_collectives_in_a_child_process_can_be_checked():
    report = check_process_group(
        "helpers.subprocess_pg:child_process_gloo",
        world_sizes=(2,),
        ops=("allreduce", "broadcast"),
        dtypes=(torch.float32, torch.int64),
        max_examples=5,
        settings=settings(derandomize=True, database=None),
    )
    assert report.conforms, report.summary()
    assert not report.factory_errors
    assert report.backend == "child-process-gloo"
    assert {name: r.status for name, r in report.ops.items()} == {"allreduce": "conforms", "broadcast": "conforms"}
    assert all(r.examples > 0 for r in report.ops.values())


def test_what_a_rank_started_dies_with_it_on_a_hang_a_crash_and_close():
    with RankPool(2, timeout=3, straggler_grace=1) as pool:
        first = pool.run(descendants.start_descendants)
        assert all(descendants.alive(p) for p in _tree(first))
        try:
            pool.run(rank_fns.hang_on, 1)  # rank 1 hangs: the pool kills both ranks' trees
        except RankTimeout:
            pass
        else:
            raise AssertionError("a rank that sleeps past the timeout was not a RankTimeout")
        assert descendants.wait_all_dead(_tree(first)) == [], "a hung rank's descendants outlived its restart"
        second = pool.run(descendants.start_descendants)
        try:
            pool.run(rank_fns.die_on, 0, "kill")  # rank 0 dies by itself
        except Exception:  # noqa: BLE001 - a RankCrash, or the survivor's error
            pass
        assert descendants.wait_all_dead([second[0]["child"], second[0]["grandchild"]]) == [], (
            "a crashed rank's descendants outlived it"
        )
        third = pool.run(descendants.start_descendants)
    assert descendants.wait_all_dead(_tree(second) + _tree(third)) == [], "descendants outlived close()"


def _driver(*flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "process_tree_driver.py"), *flags], stdout=subprocess.PIPE, text=True
    )


def _pids_from(driver: subprocess.Popen, timeout: float = 120.0) -> list[int]:
    assert driver.stdout is not None
    ready, _, _ = select.select([driver.stdout], [], [], timeout)
    assert ready, f"the driver printed no pids within {timeout:g}s"
    line = driver.stdout.readline()
    assert line, f"the driver exited ({driver.poll()}) before printing its ranks' pids"
    return _tree(json.loads(line))


def test_nothing_a_rank_started_outlives_a_sigkilled_driver():
    # Both drivers at once (each takes seconds to start its ranks).  The second builds its pool in a
    # thread that has ended and stops its ranks: only the rank's watchdog process can clean up there.
    # A third spawns its ranks; the first keeps a spare set: spares and the fork server die too.
    drivers = [_driver("--spares"), _driver("--from-thread", "--stop-ranks"), _driver("--start-method", "spawn")]
    try:
        trees = [_pids_from(d) for d in drivers]
        assert [len(tree) for tree in trees] == [5, 4, 3], trees  # rank, child, grandchild (+ spare, server)
        for tree in trees:
            assert all(descendants.alive(p) for p in tree)
        for d in drivers:
            d.send_signal(signal.SIGKILL)
            d.wait(10)
        started = time.monotonic()
        for tree in trees:
            left = descendants.wait_all_dead(tree, timeout=max(1.0, 15.0 - (time.monotonic() - started)))
            assert left == [], f"processes {left} outlived their SIGKILLed driver"
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait(10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tells a reaped pid by /proc/<pid>")
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_the_driver_kills_a_ranks_tree_before_it_reaps_the_rank(monkeypatch, start_method, forkable):
    """kill_tree's rule: once a rank is reaped its pid (the id of its group) may be reused by another process.

    A spawned rank is the driver's child: the driver kills its tree before it reaps it.  A forked rank is
    the fork server's child, reaped by the server the moment it ends: every kill of a rank that is gone
    must then carry the rank's start time, so that a process that took over the pid is told apart.
    """
    calls: list[tuple[int, bool, int | None]] = []
    kill_tree = process_tree.kill_tree

    def recording(pid, started=None):
        calls.append((pid, os.path.exists(f"/proc/{pid}"), started))  # a zombie still has its entry
        kill_tree(pid, started)

    monkeypatch.setattr(process_tree, "kill_tree", recording)
    with RankPool(2, timeout=10, start_method=start_method, spares="never") as pool:
        pool.run(descendants.start_descendants)
        with pytest.raises(Exception):  # noqa: B017 - a RankCrash, or the survivor's error
            pool.run(rank_fns.die_on, 0, "kill")  # a crash: the pool reaps rank 0 and restarts
        pool.run(descendants.start_descendants)
    assert len(calls) >= 4, calls  # the crash's restart (2 ranks), close() (2 ranks)
    if start_method == "spawn":
        reaped = [pid for pid, present, _ in calls if not present]
        assert reaped == [], f"kill_tree was called on ranks {reaped} already reaped; calls: {calls}"
    else:
        unguarded = [pid for pid, present, started in calls if not present and started is None]
        assert unguarded == [], f"kill_tree was called on reaped ranks {unguarded} without a start time: {calls}"
        assert all(started is not None for _, _, started in calls), calls


def test_kill_tree_leaves_alone_a_process_that_took_over_a_ranks_pid():
    """The process with that pid started at another time: the rank's group is gone, the pid is a stranger's."""
    stranger = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
    try:
        time.sleep(0.2)  # it leads a group of its own, as a rank would
        started = process_tree.start_time(stranger.pid)
        assert started is not None
        process_tree.kill_tree(stranger.pid, started + 1)  # as if the rank had started a tick later
        time.sleep(0.2)
        assert stranger.poll() is None, "kill_tree killed a process whose start time differs from the rank's"
        process_tree.kill_tree(stranger.pid, started)
        assert stranger.wait(10) == -signal.SIGKILL
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait(10)


def test_an_error_escaping_a_ranks_serve_loop_ends_the_rank_at_once():
    """Not through multiprocessing's exit handler, which would wait for the rank's non-daemon child (300 s)."""
    spawn = mp.get_context("spawn")
    here, there = spawn.Pipe()
    rank = spawn.Process(
        target=spawned._serve_then_exit,
        args=(functools.partial(descendants.start_child_and_raise, there),),
        daemon=True,
    )
    rank.start()
    child = None
    try:
        assert here.poll(60), "the stand-in rank reported no child within 60s"
        child = here.recv()
        rank.join(30)
        assert rank.exitcode == 1, f"the rank did not end within 30s of the error (exit code {rank.exitcode})"
        assert descendants.alive(child)  # the rank did not wait for it (a real rank's watchdog kills it)
    finally:
        if rank.exitcode is None:
            rank.kill()
            rank.join(10)
        if child is not None:
            os.kill(child, signal.SIGKILL)

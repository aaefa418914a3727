"""Ranks may start processes (a ProcessGroup that runs its real group in a child process can be
checked), and nothing a rank starts outlives it: not after a restart, a hang, close(), or the
driver being SIGKILLed."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import descendants
import rank_fns
import torch
from hypothesis import settings

from fuzzdist import RankPool, RankTimeout
from fuzzdist.conformance import check_process_group

TESTS = Path(__file__).resolve().parent


def _tree(found: list[dict[str, int]]) -> list[int]:
    return [pid for ranks in found for pid in ranks.values()]


def test_a_group_that_runs_its_collectives_in_a_child_process_can_be_checked():
    report = check_process_group("subprocess_pg:child_process_gloo", world_sizes=(2,),
                                 ops=("allreduce", "broadcast"), dtypes=(torch.float32, torch.int64),
                                 max_examples=5, settings=settings(derandomize=True, database=None))
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
            "a crashed rank's descendants outlived it")
        third = pool.run(descendants.start_descendants)
    assert descendants.wait_all_dead(_tree(second) + _tree(third)) == [], "descendants outlived close()"


def _driver(*flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TESTS / "process_tree_driver.py"), *flags],
                            stdout=subprocess.PIPE, text=True)


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
    drivers = [_driver(), _driver("--from-thread", "--stop-ranks")]
    try:
        trees = [_pids_from(d) for d in drivers]
        for tree in trees:
            assert len(tree) == 3 and all(descendants.alive(p) for p in tree)
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

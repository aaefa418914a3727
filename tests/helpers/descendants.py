"""Processes a rank starts, for the process-tree tests: torch-free, so that they start in milliseconds.

``start_descendants`` (a rank function) spawns a child that ignores SIGTERM and
forks a grandchild of its own; it returns every pid involved.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any

_LIFETIME_S = 300.0  # a leaked descendant still goes away on its own, eventually


def _sleep() -> None:
    deadline = time.monotonic() + _LIFETIME_S
    while time.monotonic() < deadline:
        time.sleep(0.2)


def _stubborn_child(conn: Any) -> None:
    """Ignores SIGTERM, forks a grandchild that ignores it too, reports both pids, sleeps."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = os.fork()
    if grandchild == 0:
        try:
            _sleep()
        finally:
            os._exit(0)
    conn.send((os.getpid(), grandchild))
    conn.close()
    _sleep()


def start_descendants(ctx: Any) -> dict[str, int]:
    """Rank function: start a stubborn child (and its grandchild); the pids of the rank and both."""
    parent, child_end = mp.get_context("spawn").Pipe()
    process = mp.get_context("spawn").Process(target=_stubborn_child, args=(child_end,), daemon=False)
    process.start()
    child_end.close()
    if not parent.poll(30):
        raise TimeoutError("the child did not report its pids within 30s")
    child, grandchild = parent.recv()
    return {"rank": os.getpid(), "child": child, "grandchild": grandchild}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not reaped, counts as dead). Linux."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_all_dead(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Wait (bounded) until none of ``pids`` is alive; those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        living = [p for p in pids if alive(p)]
        if not living or time.monotonic() > deadline:
            return living
        time.sleep(0.05)


def start_child_and_raise(conn: Any) -> None:
    """A rank's serve loop that starts a non-daemon child (as a rank may), reports its pid, then raises."""
    mp.current_process().daemon = False  # as rank_main: a rank may start processes
    child = mp.get_context("spawn").Process(target=_sleep, name="fuzzdist-test-child")
    child.start()
    conn.send(child.pid)
    raise RuntimeError("planted: an error escaping the serve loop")

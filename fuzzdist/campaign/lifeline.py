"""A ``--jobs`` worker lives no longer than its parent.

The parent of ``fuzzdist run --jobs N`` may die without stopping its workers (SIGKILL, an OOM kill).
Each worker then stops as if the parent had sent it SIGTERM: its campaign ends cleanly, it writes its
report (its failures are already in the database), and its pools' ranks, which die with their driver
(:mod:`fuzzdist.pool.rank.process_tree`), go with it.

* On Linux the kernel sends the SIGTERM when the parent dies (``PR_SET_PDEATHSIG``, through
  :func:`~fuzzdist.pool.rank.process_tree.die_with_driver`).
* A thread watches the parent's pid everywhere: where prctl is missing it sends that SIGTERM itself,
  and, since a worker stuck past :data:`EXIT_GRACE_S` must not linger either, it then SIGKILLs it.

One SIGTERM only: a second could cut the worker's last report short.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from fuzzdist.pool.rank import process_tree

PARENT_ENV = "FUZZDIST_JOBS_PARENT"  # the parent's pid, set by the --jobs parent for each worker
WATCH_S = 0.5  # how often the thread looks whether the parent is still there
EXIT_GRACE_S = 30.0  # after the parent's death, how long the worker gets to write its report


def hold_to_parent(parent_pid: int) -> threading.Thread:
    """Make this worker stop (SIGTERM, then SIGKILL after EXIT_GRACE_S) when ``parent_pid`` dies.

    Call from the main thread, before the campaign starts. Returns the watching thread.
    """
    by_kernel = process_tree.die_with_driver(parent_pid, signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_S)
        if not by_kernel:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(EXIT_GRACE_S)
        process_tree.kill_own_tree(70)

    thread = threading.Thread(target=watch, name="fuzzdist-jobs-parent-watch", daemon=True)
    thread.start()
    return thread


def parent_from_env() -> int | None:
    """The --jobs parent's pid this worker was started with (None: not started by one)."""
    text = os.environ.get(PARENT_ENV, "")
    return int(text) if text.isdigit() else None

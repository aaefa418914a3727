"""A driver that a test SIGKILLs: starts a RankPool whose ranks start descendants, prints their pids, waits.

    python tests/helpers/process_tree_driver.py [--from-thread] [--stop-ranks] [--start-method M] [--spares]

``--from-thread`` builds the pool in a thread that has ended by the time the
example runs (so no parent-death signal is asked for: the rank's watchdog
must do the work); ``--stop-ranks`` SIGSTOPs the ranks after the example, so
that nothing inside them can run either; ``--start-method`` picks spawn or
forkserver (default: the pool's auto); ``--spares`` keeps a spare set, whose
pids are printed too, and the fork server's pid where there is one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for helpers.*

from fuzzdist import RankPool
from helpers import descendants

if __name__ == "__main__":
    made: list[RankPool] = []
    method = sys.argv[sys.argv.index("--start-method") + 1] if "--start-method" in sys.argv else "auto"
    spares = "always" if "--spares" in sys.argv else "never"
    if "--from-thread" in sys.argv:
        thread = threading.Thread(
            target=lambda: made.append(RankPool(1, timeout=30, start_method=method, spares=spares))
        )
        thread.start()
        thread.join()
        pool = made[0]
    else:
        pool = RankPool(1, timeout=30, start_method=method, spares=spares)
    found = pool.run(descendants.start_descendants)
    found += [{"spare": pid} for pid in pool.spare_pids]
    if pool.start_method == "forkserver":
        from multiprocessing import forkserver

        found.append({"forkserver": forkserver._forkserver._forkserver_pid})
    if "--stop-ranks" in sys.argv:
        for pid in pool.pids:
            os.kill(pid, signal.SIGSTOP)
    print(json.dumps(found), flush=True)
    time.sleep(120)  # the test SIGKILLs this process long before

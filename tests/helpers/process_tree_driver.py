"""A driver that a test SIGKILLs: starts a RankPool whose ranks start descendants, prints their pids, waits.

    python tests/helpers/process_tree_driver.py [--from-thread] [--stop-ranks]

``--from-thread`` builds the pool in a thread that has ended by the time the
example runs (so no parent-death signal is asked for: the rank's watchdog
must do the work); ``--stop-ranks`` SIGSTOPs the ranks after the example, so
that nothing inside them can run either.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for helpers.*

from fuzzdist import RankPool  # noqa: E402
from helpers import descendants  # noqa: E402

if __name__ == "__main__":
    made: list[RankPool] = []
    if "--from-thread" in sys.argv:
        thread = threading.Thread(target=lambda: made.append(RankPool(1, timeout=30)))
        thread.start()
        thread.join()
        pool = made[0]
    else:
        pool = RankPool(1, timeout=30)
    found = pool.run(descendants.start_descendants)
    if "--stop-ranks" in sys.argv:
        for pid in pool.pids:
            os.kill(pid, signal.SIGSTOP)
    print(json.dumps(found), flush=True)
    time.sleep(120)  # the test SIGKILLs this process long before
